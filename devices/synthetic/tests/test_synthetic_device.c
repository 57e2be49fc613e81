/*
 * test_synthetic_device.c - the synthetic device: aligned host memory
 * whose bytes are counted while allocated and uncounted when freed.
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
