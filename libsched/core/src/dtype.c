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

#include <dpl/dtype_bits.h>

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

float dpl_bf16_to_f32(uint16_t h)
{
	return dpl_bits_bf16_to_f32(h);
}

uint16_t dpl_f32_to_bf16(float f)
{
	return dpl_bits_f32_to_bf16(f);
}

float dpl_f16_to_f32(uint16_t h)
{
	return dpl_bits_f16_to_f32(h);
}

uint16_t dpl_f32_to_f16(float f)
{
	return dpl_bits_f32_to_f16(f);
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
			d[i] = dpl_bits_f32_to_bf16(dpl_bits_bf16_to_f32(d[i]) +
						    dpl_bits_bf16_to_f32(s[i]));
		return 0;
	}
	case DPL_DTYPE_F16: {
		uint16_t *d = dst;
		const uint16_t *s = src;

		for (i = 0; i < count; i++)
			d[i] = dpl_bits_f32_to_f16(dpl_bits_f16_to_f32(d[i]) +
						   dpl_bits_f16_to_f32(s[i]));
		return 0;
	}
	default:
		return dpl__error(DPL_ENOTSUP, "sum of dtype %u", dtype);
	}
}
