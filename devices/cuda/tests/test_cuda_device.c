/*
 * test_cuda_device.c - the CUDA device's own rules, each checked on a
 * host with a GPU and on one without: options refused before CUDA is
 * touched, an absent device named as DPL_ENOENT with the CUDA error, an
 * index past the devices seen, LOCAL_RANK, and the accessors on a device
 * of another table (suite cuda_device), and the accessors on a GPU
 * (suite cuda_gpu, CTest test_cuda_device_gpu). The contract (memory, copies, sums, events) is the
 * device battery's: conformance_device_cuda.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/device_cuda.h>

/* Devices the runtime reports, or -1 when it reports none at all (no
 * GPU, no driver): the two hosts these tests tell apart. */
static int devices_seen(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return -1;
	}
	return n > 0 ? n : -1;
}

static int open_with(uint32_t index, const char *options, dpl_device **d)
{
	struct dpl_device_params p = {index, options};

	*d = NULL;
	return dpl_device_open(&dpl_device_cuda, &p, d);
}

Test(cuda_device, a_bad_option_is_named_before_cuda_is_asked)
{
	static const char *const bad[] = {"events=sometimes", "stream=mine",
					  "colour=blue", "events"};
	dpl_device *d;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_eq(open_with(0, bad[i], &d), DPL_EINVAL, "%s",
			     bad[i]);
		cr_assert_null(d);
		cr_assert(strstr(dpl_last_error(), "device cuda") != NULL,
			  "%s: %s", bad[i], dpl_last_error());
	}
	cr_assert(strstr(dpl_last_error(), "events") != NULL, "%s",
		  dpl_last_error());
	cr_assert_eq(open_with(0, "events=sometimes", &d), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "sometimes") != NULL &&
			  strstr(dpl_last_error(), "interprocess") != NULL,
		  "the value and the choices: %s", dpl_last_error());
}

Test(cuda_device, an_absent_device_is_enoent_naming_the_cuda_error)
{
	int n = devices_seen(), rc;
	dpl_device *d;

	rc = open_with(0, "events=interprocess,stream=own", &d);
	if (n > 0) {
		cr_assert_eq(rc, 0, "%d devices seen, init: %s", n,
			     dpl_last_error());
		dpl_device_close(d);
		return;
	}
	cr_assert_eq(rc, DPL_ENOENT, "no device seen, init gave %s: %s",
		     dpl_err_name(rc), dpl_last_error());
	cr_assert_null(d);
	cr_assert(strstr(dpl_last_error(), "no CUDA device") != NULL &&
			  strstr(dpl_last_error(), "cudaError") != NULL,
		  "%s", dpl_last_error());
}

Test(cuda_device, an_index_past_the_devices_is_refused_naming_it)
{
	int n = devices_seen(), rc;
	dpl_device *d;

	rc = open_with(n > 0 ? (uint32_t)n : 7u, NULL, &d);
	cr_assert_null(d);
	if (n < 0) {
		cr_assert_eq(rc, DPL_ENOENT, "%s", dpl_last_error());
		return;
	}
	cr_assert_eq(rc, DPL_EINVAL, "%s", dpl_last_error());
	cr_assert(strstr(dpl_last_error(), "index ") != NULL, "%s",
		  dpl_last_error());
}

Test(cuda_device, local_rank_picks_the_index)
{
	int n = devices_seen(), rc;
	uint32_t idx = 99;

	cr_assert_eq(setenv("LOCAL_RANK", "two", 1), 0);
	cr_assert_eq(dpl_device_cuda_local_index(&idx), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "LOCAL_RANK='two'") != NULL, "%s",
		  dpl_last_error());
	cr_assert_eq(setenv("LOCAL_RANK", "-1", 1), 0);
	cr_assert_eq(dpl_device_cuda_local_index(&idx), DPL_EINVAL);
	cr_assert_eq(idx, 99u, "*out written on failure");
	cr_assert_eq(setenv("LOCAL_RANK", "5", 1), 0);
	rc = dpl_device_cuda_local_index(&idx);
	if (n < 0) {
		cr_assert_eq(rc, DPL_ENOENT, "%s", dpl_last_error());
		cr_assert_eq(idx, 99u);
	} else {
		cr_assert_eq(rc, 0, "%s", dpl_last_error());
		cr_assert_eq(idx, 5u % (uint32_t)n);
	}
	cr_assert_eq(unsetenv("LOCAL_RANK"), 0);
	rc = dpl_device_cuda_local_index(&idx);
	cr_assert_eq(rc, n < 0 ? DPL_ENOENT : 0, "%s", dpl_last_error());
	if (n > 0)
		cr_assert_eq(idx, 0u);
}

Test(cuda_device, the_accessors_refuse_another_table)
{
	cudaStream_t s = (cudaStream_t)&s, keep = s;
	dpl_device *host = NULL;
	int ord = -7;

	cr_assert_eq(dpl_device_open(&dpl_device_host, NULL, &host), 0);
	cr_assert_eq(dpl_device_cuda_stream(host, &s), DPL_EINVAL);
	cr_assert_eq(s, keep, "*out written on failure");
	cr_assert(strstr(dpl_last_error(), "not a CUDA device") != NULL, "%s",
		  dpl_last_error());
	cr_assert_eq(dpl_device_cuda_ordinal(host, &ord), DPL_EINVAL);
	cr_assert_eq(ord, -7);
	cr_assert_eq(dpl_device_cuda_stream(NULL, &s), DPL_EINVAL);
	cr_assert_null(dpl_device_context(NULL));
	dpl_device_close(host);
}

/* Suite cuda_gpu: needs a GPU; its own CTest entry, reported skipped
 * without one. */
Test(cuda_gpu, the_accessors_give_the_context_stream)
{
	cudaStream_t s = NULL, legacy = NULL;
	dpl_device *d, *l;
	int ord = -1;

	if (devices_seen() < 0)
		cr_skip_test("no CUDA device: the accessors on a CUDA device "
			     "are checked where there is one");
	cr_assert_eq(open_with(0, NULL, &d), 0, "%s", dpl_last_error());
	cr_assert_eq(open_with(0, "stream=legacy", &l), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(dpl_device_cuda_stream(d, &s), 0);
	cr_assert_eq(dpl_device_cuda_stream(l, &legacy), 0);
	cr_assert_not_null(s);
	cr_assert_eq(legacy, cudaStreamLegacy);
	cr_assert_neq(s, legacy);
	cr_assert_eq(dpl_device_cuda_ordinal(d, &ord), 0);
	cr_assert_eq(ord, 0);
	dpl_device_close(l);
	dpl_device_close(d);
}
