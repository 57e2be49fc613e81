/*
 * dtype.c - element types: sizes, the 16-bit float conversions and the
 * host sum that every host-memory device shares.
 *
 * The conversions work on bit patterns (float is IEEE 754 binary32, which
 * the static assertion below checks), so they need neither a compiler's
 * half-precision type nor the floating-point environment: every result is
 * the same on every C11 compiler. A 16-bit sum is float addition rounded
 * back once; float has more than twice the precision of either 16-bit
 * type plus two bits, so that result is also the correctly rounded sum.
 */
#include <float.h>
#include <string.h>

#include "runner_internal.h"

_Static_assert(FLT_RADIX == 2 && FLT_MANT_DIG == 24 && FLT_MAX_EXP == 128 &&
		       sizeof(float) == 4 && sizeof(uint32_t) == 4,
	       "float must be IEEE 754 binary32");

size_t dpl_dtype_size(enum dpl_dtype t)
{
	switch (t) {
	case DPL_DTYPE_F32:
		return 4;
	case DPL_DTYPE_F64:
		return 8;
	case DPL_DTYPE_BF16:
	case DPL_DTYPE_F16:
		return 2;
	default:
		return 0;
	}
}

static inline uint32_t bits_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float float_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

static inline float bf16_to_f32(uint16_t h)
{
	return float_of((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
	uint32_t u = bits_of(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	/* Add just under half a unit of the kept bits, plus one when the kept
	 * part is odd: ties go to even; a carry into the exponent is the
	 * correct next binade, up to infinity. */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;

	if (e == 0x1f) /* infinity or NaN (payload kept) */
		return float_of(s | 0x7f800000u | m << 13);
	if (e != 0)
		return float_of(s | (e + 112u) << 23 | m << 13);
	if (m == 0)
		return float_of(s);
	/* Subnormal m * 2^-24: normalise, it is a normal float. */
	e = 113;
	while ((m & 0x400u) == 0) {
		m <<= 1;
		e--;
	}
	return float_of(s | e << 23 | (m & 0x3ffu) << 13);
}

static inline uint16_t f32_to_f16(float f)
{
	uint32_t u = bits_of(f), a = u & 0x7fffffffu;
	uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t e, m, shift, q, rem, half;

	if (a > 0x7f800000u) /* NaN: quiet, sign and top payload kept */
		return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* >= 65520, half way past 65504: infinity */
		return (uint16_t)(s | 0x7c00u);
	if (a >= 0x38800000u) { /* >= 2^-14: normal */
		a -= 112u << 23;  /* rebias the exponent (127 - 15) */
		a += 0xfffu + ((a >> 13) & 1u);
		return (uint16_t)(s | (a >> 13));
	}
	if (a <= 0x33000000u) /* <= 2^-25, at most half the least subnormal */
		return s;
	/* Subnormal: the significand times 2^(e - 126) in units of 2^-24,
	 * rounded to nearest even (e is 102 .. 112, so shift is 14 .. 24). */
	e = a >> 23;
	m = (a & 0x7fffffu) | 0x800000u;
	shift = 126u - e;
	q = m >> shift;
	rem = m & ((1u << shift) - 1u);
	half = 1u << (shift - 1u);
	if (rem > half || (rem == half && (q & 1u)))
		q++;
	return (uint16_t)(s | q);
}

float dpl_bf16_to_f32(uint16_t h)
{
	return bf16_to_f32(h);
}

uint16_t dpl_f32_to_bf16(float f)
{
	return f32_to_bf16(f);
}

float dpl_f16_to_f32(uint16_t h)
{
	return f16_to_f32(h);
}

uint16_t dpl_f32_to_f16(float f)
{
	return f32_to_f16(f);
}

int dpl_host_sum(void *dst, const void *src, size_t count, uint32_t dtype)
{
	size_t i;

	switch (dtype) {
	case DPL_DTYPE_F32: {
		float *d = dst;
		const float *s = src;

		for (i = 0; i < count; i++)
			d[i] += s[i];
		return 0;
	}
	case DPL_DTYPE_F64: {
		double *d = dst;
		const double *s = src;

		for (i = 0; i < count; i++)
			d[i] += s[i];
		return 0;
	}
	case DPL_DTYPE_BF16: {
		uint16_t *d = dst;
		const uint16_t *s = src;

		for (i = 0; i < count; i++)
			d[i] = f32_to_bf16(bf16_to_f32(d[i]) +
					   bf16_to_f32(s[i]));
		return 0;
	}
	case DPL_DTYPE_F16: {
		uint16_t *d = dst;
		const uint16_t *s = src;

		for (i = 0; i < count; i++)
			d[i] = f32_to_f16(f16_to_f32(d[i]) + f16_to_f32(s[i]));
		return 0;
	}
	default:
		return dpl__error(DPL_ENOTSUP, "sum of dtype %u", dtype);
	}
}
