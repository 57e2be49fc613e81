/*
 * test_cpu_device.c - the CPU device: F64 and F32 sums on CBLAS, unknown
 * dtypes and memory kinds refused, aligned allocations and host copies
 * through the device handle.
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
	cr_assert_eq(dpl_device_alloc(dev, 24, &p), 0);
	cr_assert_eq((uintptr_t)p % 64, 0);
	cr_assert_eq(dpl_device_copy(dev, p, b, 24), 0);
	cr_assert_eq(memcmp(p, b, 24), 0);
	dpl_device_free(dev, p);
	cr_assert_eq(d->alloc(NULL, DPL_MEM_CUDA, 8, &p), DPL_ENOTSUP);
	dpl_device_close(dev);
}
