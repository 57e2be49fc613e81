/*
 * test_train_gpu_transports.c - `dpl train --transport cudaipc|nccl` as
 * far as a host without a GPU takes them.
 *
 *  - nccl over shm: with host memory the shim refuses iallreduce and the
 *    runner reduces with its own ring, so the weights are those of shm
 *    alone, bit for bit, with and without replicas, and --check holds;
 *  - cudaipc without a GPU: every rank fails at setup naming the CUDA
 *    error, and the command exits 1 (with a GPU: the GPU suites' case);
 *  - an unknown transport's message lists cudaipc and nccl.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <criterion/criterion.h>

#include "cli_run.h"
#include "scratch.h"

static char dir[] = "/tmp/dpl-train-gpu-tr-XXXXXX";

static void setup(void)
{
	scratch_make(dir);
}

static void teardown(void)
{
	scratch_remove(dir);
}

static bool have_gpu(void)
{
	int n = 0;

	return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/* The 16 hex digits after "weights digest: " in out, into d[17]. */
static void digest(const char *out, char d[17])
{
	const char *p = strstr(out, "weights digest: ");

	cr_assert_not_null(p, "no weights digest in: %s", out);
	cr_assert_eq(sscanf(p, "weights digest: %16s", d), 1, "%s", p);
}

TestSuite(train_gpu_transports, .init = setup, .fini = teardown,
	  .timeout = 300);

Test(train_gpu_transports, nccl_over_shm_trains_as_shm_does)
{
	struct cli_res r;
	char a[17], b[17];

	RUN(&r, "train", "--nprocs", "4", "--transport", "shm",
	    "--iterations", "5");
	cr_assert_eq(r.code, 0, "%s", r.err);
	digest(r.out, a);
	RUN(&r, "train", "--nprocs", "4", "--transport", "nccl",
	    "--transport-options", "nccl.inner=shm", "--iterations", "5");
	cr_assert_eq(r.code, 0, "%s", r.err);
	digest(r.out, b);
	cr_assert_str_eq(a, b, "nccl over shm %s, shm %s", b, a);
}

Test(train_gpu_transports, nccl_over_shm_reduces_replicas_as_shm_does)
{
	struct cli_res r;
	char a[17], b[17];

	RUN(&r, "train", "--stages", "2", "--replicas", "2", "--nprocs", "4",
	    "--transport", "shm", "--iterations", "5");
	cr_assert_eq(r.code, 0, "%s", r.err);
	digest(r.out, a);
	RUN(&r, "train", "--stages", "2", "--replicas", "2", "--nprocs", "4",
	    "--transport", "nccl", "--transport-options", "nccl.inner=shm",
	    "--iterations", "5", "--check");
	cr_assert_eq(r.code, 0, "%s", r.err);
	digest(r.out, b);
	cr_assert_str_eq(a, b, "nccl over shm %s, shm %s", b, a);
	cr_assert(strstr(r.out, "(within 1e-05)"), "%s", r.out);
}

Test(train_gpu_transports, cudaipc_without_a_gpu_names_the_cuda_error)
{
	struct cli_res r;
	const char *p;
	int n = 0;

	if (have_gpu())
		cr_skip_test("a GPU is here: the GPU suites run cudaipc");
	RUN(&r, "train", "--nprocs", "2", "--stages", "2", "--transport",
	    "cudaipc");
	cr_assert_eq(r.code, 1, "%s", r.err);
	for (p = r.err; (p = strstr(p, "setup: transport cudaipc: ")) != NULL;
	     p++) {
		cr_assert(strstr(p, "cudaErrorInsufficientDriver") ||
				  strstr(p, "cudaErrorNoDevice"),
			  "%s", r.err);
		n++;
	}
	cr_assert_eq(n, 2, "both ranks name the failure: %s", r.err);
}

Test(train_gpu_transports, an_unknown_transport_lists_the_gpu_ones)
{
	struct cli_res r;

	RUN(&r, "train", "--transport", "nvlink");
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, "'nvlink' is not inproc, shm, ucx, ofi, "
				"cudaipc, hook or nccl"), "%s", r.err);
}
