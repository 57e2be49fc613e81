/*
 * test_dtype.c - the element types: sizes, the 16-bit float conversions
 * against a reference written here from the formats' definitions (values
 * built with ldexp, rounding done in double with nearbyint), every 16-bit
 * pattern through float and back, known values, ties to even, and the
 * host sum of all four dtypes.
 */
#include <criterion/criterion.h>
#include <fenv.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <dpl/dpl.h>

/* The 16-bit formats: fraction bits, exponent bias, largest exponent. */
struct fmt {
	const char *name;
	int frac, bias, emax;
	float (*to32)(uint16_t);
	uint16_t (*from32)(float);
};

static const struct fmt bf16 = {"bf16", 7, 127, 127, dpl_bf16_to_f32,
				dpl_f32_to_bf16};
static const struct fmt f16 = {"f16", 10, 15, 15, dpl_f16_to_f32,
			       dpl_f32_to_f16};

static bool is_nan16(const struct fmt *f, uint16_t h)
{
	uint16_t emask = (uint16_t)(((1u << (15 - f->frac)) - 1) << f->frac);

	return (h & emask) == emask && (h & ((1u << f->frac) - 1)) != 0;
}

/* The value of a non-NaN pattern, from the definition of the format. */
static double ref_value(const struct fmt *f, uint16_t h)
{
	int e = (h & 0x7fff) >> f->frac;
	double m = h & ((1u << f->frac) - 1), v;

	if (e == (1 << (15 - f->frac)) - 1)
		v = INFINITY;
	else if (e == 0)
		v = ldexp(m, 1 - f->bias - f->frac);
	else
		v = ldexp(m + ldexp(1, f->frac), e - f->bias - f->frac);
	return (h & 0x8000) ? -v : v;
}

/* A finite double rounded to the format, nearest and ties to even; the
 * result's value (infinity past the largest finite value). */
static double ref_round(const struct fmt *f, double v)
{
	double a = fabs(v), q, r, maxf;
	int e;

	if (a == 0 || isinf(a))
		return v;
	frexp(a, &e); /* a in [2^(e-1), 2^e) */
	if (e - 1 < 1 - f->bias)
		e = 2 - f->bias; /* subnormal: the spacing of the least binade */
	q = ldexp(1, e - 1 - f->frac);
	r = nearbyint(a / q) * q; /* exact scaling; rounds ties to even */
	maxf = ldexp(2 - ldexp(1, -f->frac), f->emax);
	if (r > maxf)
		r = INFINITY;
	return v < 0 ? -r : r;
}

static void every_pattern_round_trips(const struct fmt *f)
{
	uint32_t i;

	cr_assert_eq(fegetround(), FE_TONEAREST);
	for (i = 0; i <= 0xffff; i++) {
		uint16_t h = (uint16_t)i, back;
		float v = f->to32(h);

		back = f->from32(v);
		if (is_nan16(f, h)) {
			cr_assert(isnan(v), "%s %#06x: %g, not NaN", f->name,
				  h, (double)v);
			cr_assert(is_nan16(f, back), "%s %#06x: NaN came back "
				  "as %#06x", f->name, h, back);
			cr_assert_eq(back & 0x8000, h & 0x8000,
				     "%s %#06x: sign lost", f->name, h);
			continue;
		}
		cr_assert((double)v == ref_value(f, h) &&
			  !signbit(v) == !signbit(ref_value(f, h)),
			  "%s %#06x: %.9g, expected %.9g", f->name, h,
			  (double)v, ref_value(f, h));
		cr_assert_eq(back, h, "%s %#06x came back as %#06x", f->name,
			     h, back);
	}
}

Test(dtype, every_bf16_pattern_round_trips)
{
	every_pattern_round_trips(&bf16);
}

Test(dtype, every_f16_pattern_round_trips)
{
	every_pattern_round_trips(&f16);
}

static float float_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

/* Floats spread over every binade, and the ones on and next to the
 * half-way points of both formats: each rounds as the reference does. */
static void floats_round_to_nearest_even(const struct fmt *f)
{
	uint64_t u;
	uint32_t k, cut = 23 - (uint32_t)f->frac;

	for (u = 0; u <= 0xffffffffu; u += 65521) {
		for (k = 0; k < 4; k++) {
			/* k > 0: the tie below u's kept bits, and either side */
			uint32_t x = (uint32_t)u;
			float v;
			double want;
			uint16_t got;

			if (k > 0)
				x = (x & ~((1u << cut) - 1)) |
				    ((1u << (cut - 1)) + (k - 2));
			v = float_of(x);
			if (isnan(v))
				continue;
			got = f->from32(v);
			want = ref_round(f, v);
			cr_assert(!is_nan16(f, got) &&
				  ref_value(f, got) == want &&
				  !signbit(ref_value(f, got)) == !signbit(want),
				  "%s of %a (%#010x): %#06x = %a, expected %a",
				  f->name, (double)v, x, got,
				  ref_value(f, got), want);
		}
	}
}

Test(dtype, floats_round_to_nearest_even_in_bf16)
{
	floats_round_to_nearest_even(&bf16);
}

Test(dtype, floats_round_to_nearest_even_in_f16)
{
	floats_round_to_nearest_even(&f16);
}

Test(dtype, known_values)
{
	/* f16 */
	cr_assert_eq(dpl_f32_to_f16(1.0f), 0x3c00);
	cr_assert_eq(dpl_f32_to_f16(-2.5f), 0xc100);
	cr_assert_eq(dpl_f32_to_f16(65504.0f), 0x7bff);
	cr_assert_eq(dpl_f16_to_f32(0x7bff), 65504.0f);
	cr_assert_eq(dpl_f16_to_f32(0x0001), 0x1p-24f); /* least subnormal */
	cr_assert_eq(dpl_f16_to_f32(0x03ff), 0x3ffp-24f); /* largest one */
	cr_assert_eq(dpl_f16_to_f32(0x0400), 0x1p-14f); /* least normal */
	cr_assert_eq(dpl_f32_to_f16(0x1p-24f), 0x0001);
	cr_assert_eq(dpl_f32_to_f16(-0.0f), 0x8000);
	cr_assert_eq(dpl_f32_to_f16(INFINITY), 0x7c00);
	cr_assert_eq(dpl_f32_to_f16(-INFINITY), 0xfc00);
	cr_assert(isinf(dpl_f16_to_f32(0xfc00)) &&
		  dpl_f16_to_f32(0xfc00) < 0);
	cr_assert_eq(dpl_f32_to_f16(1e10f), 0x7c00); /* overflow */
	cr_assert_eq(dpl_f32_to_f16(0x1p-30f), 0x0000); /* underflow */
	cr_assert_eq(dpl_f32_to_f16(-0x1p-30f), 0x8000);
	/* bf16 */
	cr_assert_eq(dpl_f32_to_bf16(1.0f), 0x3f80);
	cr_assert_eq(dpl_f32_to_bf16(-2.5f), 0xc020);
	cr_assert_eq(dpl_bf16_to_f32(0x7f7f), 0x1.fep127f); /* largest */
	cr_assert_eq(dpl_f32_to_bf16(0x1.fep127f), 0x7f7f);
	cr_assert_eq(dpl_bf16_to_f32(0x0001), 0x1p-133f); /* least subnormal */
	cr_assert_eq(dpl_bf16_to_f32(0x0080), 0x1p-126f); /* least normal */
	cr_assert_eq(dpl_f32_to_bf16(0x1p-133f), 0x0001);
	cr_assert_eq(dpl_f32_to_bf16(FLT_MAX), 0x7f80); /* rounds up to inf */
	cr_assert_eq(dpl_f32_to_bf16(-INFINITY), 0xff80);
	cr_assert_eq(dpl_f32_to_bf16(0x1p-149f), 0x0000); /* rounds to 0 */
	cr_assert_eq(dpl_f32_to_bf16(-0x1p-134f), 0x8000); /* tie: -0 */
}

Test(dtype, ties_go_to_even)
{
	/* f16: spacing 2^-10 at 1 */
	cr_assert_eq(dpl_f32_to_f16(0x1.002p0f), 0x3c00);    /* 1 + 2^-11: down */
	cr_assert_eq(dpl_f32_to_f16(0x1.006p0f), 0x3c02);    /* 1 + 3 * 2^-11: up */
	cr_assert_eq(dpl_f32_to_f16(0x1.002002p0f), 0x3c01); /* past the tie */
	cr_assert_eq(dpl_f32_to_f16(0x1.001ffep0f), 0x3c00); /* short of it */
	cr_assert_eq(dpl_f32_to_f16(65519.0f), 0x7bff);
	cr_assert_eq(dpl_f32_to_f16(65520.0f), 0x7c00); /* to even: inf */
	cr_assert_eq(dpl_f32_to_f16(0x1p-25f), 0x0000);  /* 0.5 unit: 0 */
	cr_assert_eq(dpl_f32_to_f16(0x3p-25f), 0x0002);  /* 1.5: 2 */
	cr_assert_eq(dpl_f32_to_f16(0x5p-25f), 0x0002);  /* 2.5: 2 */
	cr_assert_eq(dpl_f32_to_f16(0x1.000002p-25f), 0x0001);
	cr_assert_eq(dpl_f32_to_f16(0x7ffp-25f), 0x0400); /* to least normal */
	/* bf16: spacing 2^-7 at 1 */
	cr_assert_eq(dpl_f32_to_bf16(0x1.01p0f), 0x3f80);     /* 1 + 2^-8 */
	cr_assert_eq(dpl_f32_to_bf16(0x1.03p0f), 0x3f82);     /* 1 + 3 * 2^-8 */
	cr_assert_eq(dpl_f32_to_bf16(0x1.010002p0f), 0x3f81); /* past the tie */
	cr_assert_eq(dpl_f32_to_bf16(0x1.00fffep0f), 0x3f80); /* short of it */
	cr_assert_eq(dpl_f32_to_bf16(0x3p-134f), 0x0002); /* subnormal tie */
	cr_assert_eq(dpl_f32_to_bf16(0x1.ffp127f), 0x7f80); /* tie: inf */
}

Test(dtype, nan_stays_nan_with_its_sign)
{
	/* Payloads only in the bits that bf16 drops, and in those f16 keeps */
	static const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7fc00000u,
					0x7fa00000u, 0xffffffffu};
	size_t i;

	for (i = 0; i < sizeof nans / sizeof nans[0]; i++) {
		float v = float_of(nans[i]);
		uint16_t b = dpl_f32_to_bf16(v), h = dpl_f32_to_f16(v);

		cr_assert(is_nan16(&bf16, b), "%#010x -> bf16 %#06x", nans[i],
			  b);
		cr_assert(is_nan16(&f16, h), "%#010x -> f16 %#06x", nans[i], h);
		cr_assert_eq(b >> 15, nans[i] >> 31);
		cr_assert_eq(h >> 15, nans[i] >> 31);
		cr_assert(isnan(dpl_bf16_to_f32(b)) && isnan(dpl_f16_to_f32(h)));
	}
}

Test(dtype, sizes_and_the_host_sum)
{
	double d[2] = {1, 2}, ds[2] = {0.5, -4};
	float f[2] = {1, 2}, fs[2] = {3, 4};
	/* 1 + 1; max + max overflows; NaN + 1; inf + -inf is NaN */
	uint16_t b[4] = {0x3f80, 0x7f7f, 0x7fc0, 0x7f80};
	uint16_t bs[4] = {0x3f80, 0x7f7f, 0x3f80, 0xff80};
	/* 2^-24 + 2^-24; 2^-14 - 2^-24 (to the largest subnormal); 1 + 2^-11
	 * (a tie: stays 1); -65504 + -16 (a tie: -inf) */
	uint16_t h[4] = {0x0001, 0x0400, 0x3c00, 0xfbff};
	uint16_t hs[4] = {0x0001, 0x8001, 0x1000, 0xcc00};

	cr_assert_eq(dpl_dtype_size(DPL_DTYPE_F32), 4);
	cr_assert_eq(dpl_dtype_size(DPL_DTYPE_F64), 8);
	cr_assert_eq(dpl_dtype_size(DPL_DTYPE_BF16), 2);
	cr_assert_eq(dpl_dtype_size(DPL_DTYPE_F16), 2);
	cr_assert_eq(dpl_dtype_size(DPL_DTYPE__COUNT), 0);
	cr_assert_eq(dpl_host_sum(d, ds, 2, DPL_DTYPE_F64), 0);
	cr_assert(d[0] == 1.5 && d[1] == -2);
	cr_assert_eq(dpl_host_sum(f, fs, 2, DPL_DTYPE_F32), 0);
	cr_assert(f[0] == 4 && f[1] == 6);
	cr_assert_eq(dpl_host_sum(b, bs, 4, DPL_DTYPE_BF16), 0);
	cr_assert_eq(b[0], 0x4000);
	cr_assert_eq(b[1], 0x7f80);
	cr_assert(is_nan16(&bf16, b[2]) && is_nan16(&bf16, b[3]));
	cr_assert_eq(dpl_host_sum(h, hs, 4, DPL_DTYPE_F16), 0);
	cr_assert_eq(h[0], 0x0002);
	cr_assert_eq(h[1], 0x03ff);
	cr_assert_eq(h[2], 0x3c00);
	cr_assert_eq(h[3], 0xfc00);
	cr_assert_eq(dpl_host_sum(d, ds, 0, DPL_DTYPE__COUNT), DPL_ENOTSUP);
	cr_assert(d[0] == 1.5, "nothing written on a refusal");
	cr_assert_eq(dpl_device_host.sum(NULL, h, hs, 1, DPL_DTYPE_F16), 0);
	cr_assert_eq(h[0], 0x0003);
}
