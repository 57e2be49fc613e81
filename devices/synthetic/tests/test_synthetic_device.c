/*
 * test_synthetic_device.c - the synthetic device: aligned host memory
 * whose bytes are counted while allocated and uncounted when freed, and
 * its sum of every dtype.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include <dpl/device_synthetic.h>
#include <dpl/dpl.h>

Test(synthetic_device, memory_is_counted)
{
	dpl_device *d = NULL;
	uint64_t before = dpl_device_synthetic_allocated();
	void *p = NULL;

	cr_assert_eq(dpl_device_open(&dpl_device_synthetic, NULL, &d), 0);
	cr_assert_eq(dpl_device_alloc(d, 1000, &p), 0);
	cr_assert_eq((uintptr_t)p % 64, 0);
	cr_assert_eq(dpl_device_synthetic_allocated(), before + 1000);
	memset(p, 1, 1000);
	dpl_device_free(d, p);
	cr_assert_eq(dpl_device_synthetic_allocated(), before);
	dpl_device_close(d);
}

/* The sum is the core's: all four dtypes, 16-bit ones rounded to even. */
Test(synthetic_device, sums_every_dtype)
{
	const struct dpl_device_ops *o = &dpl_device_synthetic;
	double d[2] = {1, 2}, ds[2] = {0.5, -4};
	float f[2] = {1, 2}, fs[2] = {3, 4};
	uint16_t b[2] = {0x3f80, 0x3f80}, bs[2] = {0x3b80, 0x3c40};
	uint16_t h[2] = {0x3c00, 0x7bff}, hs[2] = {0x3c00, 0x4c00};

	cr_assert_eq(o->sum(NULL, d, ds, 2, DPL_DTYPE_F64), 0);
	cr_assert_eq(d[1], -2.0);
	cr_assert_eq(o->sum(NULL, f, fs, 2, DPL_DTYPE_F32), 0);
	cr_assert_eq(f[1], 6.0f);
	/* 1 + 2^-8 is a tie that stays 1; 1 + 3 * 2^-8 goes up to even */
	cr_assert_eq(o->sum(NULL, b, bs, 2, DPL_DTYPE_BF16), 0);
	cr_assert_eq(b[0], 0x3f80, "%#x", b[0]);
	cr_assert_eq(b[1], 0x3f82, "%#x", b[1]);
	/* 1 + 1; 65504 + 16 is a tie that goes up to infinity */
	cr_assert_eq(o->sum(NULL, h, hs, 2, DPL_DTYPE_F16), 0);
	cr_assert_eq(h[0], 0x4000, "%#x", h[0]);
	cr_assert_eq(h[1], 0x7c00, "%#x", h[1]);
	cr_assert_eq(o->sum(NULL, d, ds, 0, DPL_DTYPE__COUNT), DPL_ENOTSUP);
}
