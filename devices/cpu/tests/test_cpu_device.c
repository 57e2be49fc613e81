/*
 * test_cpu_device.c - the CPU device: F64 and F32 sums on CBLAS, BF16
 * and F16 sums rounded to nearest even, unknown dtypes and memory kinds
 * refused, aligned allocations and host copies through the device handle.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include <dpl/device_cpu.h>
#include <dpl/dpl.h>

Test(cpu_device, sums_and_copies)
{
	const struct dpl_device_ops *d = &dpl_device_cpu;
	dpl_device *dev = NULL;
	double a[3] = {1, 2, 3}, b[3] = {0.5, 0.25, 4};
	float fa[2] = {1, 2}, fb[2] = {3, 4};
	void *p = NULL;

	cr_assert_eq(dpl_device_open(d, NULL, &dev), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(d->sum(NULL, a, b, 3, DPL_DTYPE_F64), 0);
	cr_assert_eq(a[0], 1.5);
	cr_assert_eq(a[2], 7.0);
	cr_assert_eq(d->sum(NULL, fa, fb, 2, DPL_DTYPE_F32), 0);
	cr_assert_eq(fa[1], 6.0f);
	cr_assert_eq(d->sum(NULL, a, b, 3, 9), DPL_ENOTSUP);
	cr_assert_eq(d->sum(NULL, a, b, 0, 9), DPL_ENOTSUP,
		     "a dtype is refused whatever the count");
	cr_assert_eq(d->sum(NULL, a, b, 0, DPL_DTYPE_F64), 0);
	cr_assert_eq(a[0], 1.5);
	cr_assert_eq(a[2], 7.0);
	cr_assert_eq(dpl_device_alloc(dev, 24, &p), 0);
	cr_assert_eq((uintptr_t)p % 64, 0);
	cr_assert_eq(dpl_device_copy(dev, p, b, 24), 0);
	cr_assert_eq(memcmp(p, b, 24), 0);
	dpl_device_free(dev, p);
	cr_assert_eq(d->alloc(NULL, DPL_MEM_CUDA, 8, &p), DPL_ENOTSUP);
	dpl_device_close(dev);
}

/* BF16 and F16 are summed as float and rounded to nearest even. */
Test(cpu_device, sums_16_bit_floats)
{
	const struct dpl_device_ops *d = &dpl_device_cpu;
	/* 1 + 1, -2.5 + 1, 1 + 2^-8 (a tie: stays 1), 1 + 3 * 2^-8 */
	uint16_t ba[4] = {0x3f80, 0xc020, 0x3f80, 0x3f80};
	uint16_t bb[4] = {0x3f80, 0x3f80, 0x3b80, 0x3c40};
	/* 1 + 1, 65504 + 16 (a tie: up to infinity), 65504 + 8, and the
	 * least subnormal twice */
	uint16_t ha[4] = {0x3c00, 0x7bff, 0x7bff, 0x0001};
	uint16_t hb[4] = {0x3c00, 0x4c00, 0x4800, 0x0001};

	cr_assert_eq(d->sum(NULL, ba, bb, 4, DPL_DTYPE_BF16), 0);
	cr_assert_eq(ba[0], 0x4000);
	cr_assert_eq(ba[1], 0xbfc0);
	cr_assert_eq(ba[2], 0x3f80, "%#x", ba[2]);
	cr_assert_eq(ba[3], 0x3f82, "%#x", ba[3]);
	cr_assert_eq(d->sum(NULL, ha, hb, 4, DPL_DTYPE_F16), 0);
	cr_assert_eq(ha[0], 0x4000);
	cr_assert_eq(ha[1], 0x7c00, "%#x", ha[1]);
	cr_assert_eq(ha[2], 0x7bff, "%#x", ha[2]);
	cr_assert_eq(ha[3], 0x0002, "%#x", ha[3]);
}
