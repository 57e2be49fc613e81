/*
 * test_train_cuda.c - `dpl train --device cuda`.
 *
 * Suite train_cuda runs anywhere: the option is parsed, a layout of more
 * than one rank over a transport that cannot carry CUDA memory (inproc,
 * shm, ucx) is refused up front with exit 2 naming the transport and
 * --transport cudaipc, one rank is not refused for its transport, and
 * without a GPU the command fails at once (exit 1) naming the CUDA error
 * (cudaErrorInsufficientDriver or cudaErrorNoDevice), never hanging.
 *
 * Suite train_cuda_gpu needs a GPU (its own CTest entry, reported
 * skipped without one): --check on one GPU in f64 and f32 against the
 * one-GPU model, for 1f1b, zb-h1 and a replicated layout; the layouts of
 * more than one rank need the cudaipc transport in the command and skip
 * when it is not there.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include <criterion/criterion.h>

#include "cli_run.h"
#include "scratch.h"

static char dir[] = "/tmp/dpl-train-cuda-XXXXXX";

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

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

TestSuite(train_cuda, .init = setup, .fini = teardown, .timeout = 120);

Test(train_cuda, an_unknown_device_names_cuda)
{
	struct cli_res r;

	RUN(&r, "train", "--device", "gpu");
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, "'gpu' is not cpu, synthetic or cuda"), "%s",
		  r.err);
}

/* Four stages over the threads' inproc transport: refused before any
 * CUDA call, whether or not a GPU is there. */
Test(train_cuda, inproc_with_several_ranks_is_refused_up_front)
{
	struct cli_res r;

	RUN(&r, "train", "--device", "cuda", "--stages", "4");
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, "--transport inproc does not take CUDA "
				"device memory"), "%s", r.err);
	cr_assert(strstr(r.err, "use --transport cudaipc"), "%s", r.err);
	cr_assert_eq(r.out[0], '\0', "%s", r.out);
}

/* Processes over shm or ucx: refused before any rank is started (the
 * command prints no launcher line and starts no process). */
Test(train_cuda, shm_and_ucx_are_refused_up_front)
{
	static const char *const ts[] = {"shm", "ucx", "ofi"};
	struct cli_res r;
	char want[128];
	size_t i;

	for (i = 0; i < sizeof ts / sizeof ts[0]; i++) {
		RUN(&r, "train", "--device", "cuda", "--stages", "2",
		    "--nprocs", "2", "--transport", ts[i]);
		cr_assert_eq(r.code, 2, "%s: %s", ts[i], r.err);
		snprintf(want, sizeof want, "--transport %s does not take "
			 "CUDA device memory", ts[i]);
		cr_assert(strstr(r.err, want), "%s", r.err);
		cr_assert(strstr(r.err, "cudaipc"), "%s", r.err);
	}
	/* Replicas are ranks too. */
	RUN(&r, "train", "--device", "cuda", "--stages", "1", "--replicas",
	    "2");
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, "the 2 ranks"), "%s", r.err);
}

/* One rank moves nothing through its transport: not refused for it. */
Test(train_cuda, one_rank_is_not_refused_for_its_transport)
{
	struct cli_res r;

	if (have_gpu())
		cr_skip_test("a GPU is here: the run is train_cuda_gpu's");
	RUN(&r, "train", "--device", "cuda", "--stages", "1");
	cr_assert_null(strstr(r.err, "does not take"), "%s", r.err);
	cr_assert_eq(r.code, 1, "%s", r.err);
}

/* Without a GPU: exit 1 at once, naming the CUDA error, for both dtypes
 * and with --check. */
Test(train_cuda, without_a_gpu_fails_at_once_naming_the_cuda_error)
{
	static const char *const dt[] = {"f64", "f32"};
	struct cli_res r;
	double t0;
	size_t i;

	if (have_gpu())
		cr_skip_test("a GPU is here");
	for (i = 0; i < 2; i++) {
		t0 = now_s();
		RUN(&r, "train", "--device", "cuda", "--stages", "1",
		    "--dtype", dt[i], "--check", "--iterations", "1000");
		cr_assert_lt(now_s() - t0, 20.0, "took %.1f s",
			     now_s() - t0);
		cr_assert_eq(r.code, 1, "%s: %s", dt[i], r.err);
		cr_assert(strstr(r.err, "dpl train: --device cuda: "), "%s",
			  r.err);
		cr_assert(strstr(r.err, "cudaErrorInsufficientDriver") ||
				  strstr(r.err, "cudaErrorNoDevice"),
			  "%s", r.err);
		cr_assert_null(strstr(r.out, "iteration"), "%s", r.out);
	}
}

/* ---- needs a GPU ---- */

TestSuite(train_cuda_gpu, .init = setup, .fini = teardown, .timeout = 300);

static void need_gpu(void)
{
	if (!have_gpu())
		cr_skip_test("no CUDA device here");
}

/* The largest relative difference --check printed, or -1. */
static double check_of(const char *out)
{
	const char *p = strstr(out, "against one device ");
	double v = -1;

	if (p)
		sscanf(p + strlen("against one device "), "%lf", &v);
	return v;
}

Test(train_cuda_gpu, one_gpu_checks_in_f64_and_f32)
{
	static const char *const dt[] = {"f64", "f32"};
	struct cli_res r;
	size_t i;

	need_gpu();
	for (i = 0; i < 2; i++) {
		RUN(&r, "train", "--device", "cuda", "--stages", "1",
		    "--dtype", dt[i], "--check", "--iterations", "5");
		cr_assert_eq(r.code, 0, "%s: %s", dt[i], r.err);
		cr_assert(strstr(r.out, "cuda, "), "%s", r.out);
		cr_assert(strstr(r.out, dt[i]), "%s", r.out);
		cr_assert(check_of(r.out) >= 0, "%s", r.out);
		if (i == 0)
			cr_assert_leq(check_of(r.out), 1e-9, "%s", r.out);
	}
}

/* 1f1b, zb-h1 and a replicated layout over cudaipc, one process per
 * rank (LOCAL_RANK picks the GPU, modulo the GPUs seen). */
Test(train_cuda_gpu, pipelines_check_against_one_gpu)
{
	static const char *const lay[][6] = {
		{"--stages", "4", "--policy", "1f1b", "--nprocs", "4"},
		{"--stages", "4", "--policy", "zb-h1", "--nprocs", "4"},
		{"--stages", "2", "--replicas", "2", "--nprocs", "4"},
	};
	struct cli_res r;
	size_t i;

	need_gpu();
	for (i = 0; i < 3; i++) {
		RUN(&r, "train", "--device", "cuda", lay[i][0], lay[i][1],
		    lay[i][2], lay[i][3], lay[i][4], lay[i][5],
		    "--transport", "cudaipc", "--microbatches", "4", "--batch",
		    "10", "--iterations", "3", "--check");
		if (r.code == 2 && strstr(r.err, "--transport cudaipc"))
			cr_skip_test("the command has no cudaipc transport: "
				     "%s", r.err);
		cr_assert_eq(r.code, 0, "%s: %s", lay[i][3], r.err);
		cr_assert(check_of(r.out) >= 0 && check_of(r.out) <= 1e-9,
			  "%s", r.out);
	}
}
