/*
 * dpl/dtype_bits.h - the 16-bit float conversions of dpl/device.h
 * (dpl_bf16_to_f32 and the others) as inline functions on bit patterns,
 * for device backends whose kernels must round exactly as the core does:
 * the same source compiles as C11 and, under nvcc, as __host__ __device__
 * code, so a GPU sum gives dpl_host_sum's bits. Semantics are those of
 * dpl/device.h's functions (round to nearest, ties to even; NaNs kept
 * quiet with their sign; gradual underflow; F16 overflow from 65520).
 * Pure functions: thread-safe, no errors. Header only.
 */
#ifndef DPL_DTYPE_BITS_H
#define DPL_DTYPE_BITS_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define DPL_BITS_FN static inline __host__ __device__
#else
#define DPL_BITS_FN static inline
#endif

DPL_BITS_FN uint32_t dpl__bits_of_f32(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
}

DPL_BITS_FN float dpl__f32_of_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

DPL_BITS_FN float dpl_bits_bf16_to_f32(uint16_t h)
{
	return dpl__f32_of_bits((uint32_t)h << 16);
}

DPL_BITS_FN uint16_t dpl_bits_f32_to_bf16(float f)
{
	uint32_t u = dpl__bits_of_f32(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	/* Add just under half a unit of the kept bits, plus one when the kept
	 * part is odd: ties go to even; a carry into the exponent is the
	 * correct next binade, up to infinity. */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

DPL_BITS_FN float dpl_bits_f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;

	if (e == 0x1f) /* infinity or NaN (payload kept) */
		return dpl__f32_of_bits(s | 0x7f800000u | m << 13);
	if (e != 0)
		return dpl__f32_of_bits(s | (e + 112u) << 23 | m << 13);
	if (m == 0)
		return dpl__f32_of_bits(s);
	/* Subnormal m * 2^-24: normalise, it is a normal float. */
	e = 113;
	while ((m & 0x400u) == 0) {
		m <<= 1;
		e--;
	}
	return dpl__f32_of_bits(s | e << 23 | (m & 0x3ffu) << 13);
}

DPL_BITS_FN uint16_t dpl_bits_f32_to_f16(float f)
{
	uint32_t u = dpl__bits_of_f32(f), a = u & 0x7fffffffu;
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

#endif /* DPL_DTYPE_BITS_H */
