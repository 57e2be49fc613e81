/*
 * runner_cuda.c - what the runner costs per action on the CUDA device
 * beyond the host: one rank, one stage, 1f1b over M micro-batches, stage
 * callbacks that queue a no-op kernel on the context's stream (cuda) or
 * do nothing (host), so the difference is the device's share: the event
 * the runner records after each callback and polls (DPL_DEVICE_CAP_ASYNC)
 * and the kernel launch. Rounds alternate host and cuda; medians.
 *
 *   bench_gpu_runner [--microbatches M] [--reps N] [--json FILE]
 *
 * Per action: wall time of dpl_runner_step() / actions of the step.
 * Three cases: host (no-op callbacks, dpl_device_host), cuda-empty
 * (callbacks that queue nothing: the events alone), cuda-kernel (one
 * no-op kernel per callback). Target: cuda-kernel <= host + 2 us.
 * Exit status: 0, 1 a call failed (named), 2 bad flags.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dpl/device_cuda.h>
#include <dpl/dpl.h>
#include <dpl/transport_inproc.h>

#define MAXREPS 51
enum { HOST, CUDA_EMPTY, CUDA_KERNEL, NCASE };
static const char *const names[NCASE] = {"host", "cuda-empty",
					 "cuda-kernel"};

int dpl_bench_noop(cudaStream_t s);

struct user {
	dpl_device *dev;
	int kernel;
};

static int call(void *u, const struct dpl_stage_args *a)
{
	struct user *x = u;
	cudaStream_t s;
	int rc;

	(void)a;
	if (!x->kernel)
		return 0;
	if ((rc = dpl_device_cuda_stream(x->dev, &s)) != 0)
		return rc;
	return dpl_bench_noop(s) == 0 ? 0 : DPL_EIO;
}

static int grads(void *u, uint32_t s, const struct dpl_buffer **b, size_t *n)
{
	(void)u, (void)s;
	*b = NULL;
	*n = 0;
	return 0;
}

static int step(void *u, uint32_t s, uint64_t it)
{
	(void)u, (void)s, (void)it;
	return 0;
}

static const struct dpl_stage_ops ops = {
	.abi_version = DPL_STAGE_ABI_VERSION,
	.size = sizeof(struct dpl_stage_ops),
	.name = "noop",
	.forward = call,
	.backward = call,
	.grads = grads,
	.step = step,
};

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int fail(const char *what)
{
	fprintf(stderr, "bench_gpu_runner: %s: %s\n", what, dpl_last_error());
	return 1;
}

int main(int argc, char **argv)
{
	struct dpl_schedule_params sp = {0};
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params rp[NCASE];
	struct user u[NCASE];
	dpl_runner *r[NCASE] = {0};
	double v[NCASE][MAXREPS], med[NCASE];
	uint64_t act = 64;
	dpl_schedule *s = NULL;
	dpl_transport *t = NULL;
	dpl_device *dev = NULL;
	const char *json = NULL;
	int reps = 15, M = 256, i, c, rc = 1;
	size_t nact;
	FILE *f;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--microbatches") == 0 && i + 1 < argc)
			M = atoi(argv[++i]);
		else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
			json = argv[++i];
		else {
			fprintf(stderr, "usage: bench_gpu_runner [--microbatches "
				"M] [--reps N] [--json FILE]\n");
			return 2;
		}
	}
	if (reps < 1 || reps > MAXREPS || M < 1 || M > 65536) {
		fprintf(stderr, "bench_gpu_runner: --reps %d or --microbatches "
			"%d out of range ([1, %d], [1, 65536])\n", reps, M,
			MAXREPS);
		return 2;
	}
	sp.policy = DPL_POLICY_1F1B;
	sp.stages = 1;
	sp.microbatches = (uint32_t)M;
	if (dpl_schedule_build(&sp, &s) != 0 || dpl_schedule_lower(s) != 0)
		return fail("dpl_schedule_build");
	if (dpl_device_open(&dpl_device_cuda, NULL, &dev) != 0) {
		fail("dpl_device_open(cuda)");
		goto out;
	}
	tp.world_size = 1;
	tp.world = "bench-gpu-runner";
	if (dpl_transport_open(&dpl_transport_inproc, &tp, &t) != 0) {
		fail("dpl_transport_open(inproc)");
		goto out;
	}
	dpl_schedule_actions(s, 0, &nact);
	for (c = 0; c < NCASE; c++) {
		memset(&rp[c], 0, sizeof rp[c]);
		u[c].dev = dev;
		u[c].kernel = c == CUDA_KERNEL;
		rp[c].schedule = s;
		rp[c].batch = (uint64_t)M;
		rp[c].activation_bytes = &act;
		rp[c].stage_ops = &ops;
		rp[c].stage_user = &u[c];
		rp[c].transport = t;
		rp[c].device = c == HOST ? NULL : dev;
		if (dpl_runner_create(&rp[c], &r[c]) != 0) {
			fail("dpl_runner_create");
			goto out;
		}
	}
	for (i = -1; i < reps; i++) {
		for (c = 0; c < NCASE; c++) {
			double t0 = now_ns();

			if (dpl_runner_step(r[c]) != 0) {
				fail("dpl_runner_step");
				goto out;
			}
			if (i >= 0)
				v[c][i] = (now_ns() - t0) / (double)nact;
		}
	}
	printf("runner per action, one rank, 1f1b, M = %d (%zu actions a "
	       "step), median of %d\n%14s %12s\n", M, nact, reps, "case",
	       "ns/action");
	for (c = 0; c < NCASE; c++) {
		med[c] = median(v[c], reps);
		printf("%14s %12.0f\n", names[c], med[c]);
	}
	printf("cuda-kernel over host: %.2f us per action (target <= 2)\n",
	       (med[CUDA_KERNEL] - med[HOST]) / 1e3);
	if (json != NULL) {
		if ((f = fopen(json, "w")) == NULL) {
			perror(json);
			goto out;
		}
		fprintf(f, "{\"bench\": \"gpu_runner\", \"microbatches\": %d, "
			"\"actions\": %zu, \"reps\": %d", M, nact, reps);
		for (c = 0; c < NCASE; c++)
			fprintf(f, ", \"%s_ns\": %.1f", names[c], med[c]);
		fprintf(f, ", \"over_host_us\": %.3f}\n",
			(med[CUDA_KERNEL] - med[HOST]) / 1e3);
		if (fclose(f) != 0) {
			perror(json);
			goto out;
		}
	}
	rc = 0;
out:
	for (c = 0; c < NCASE; c++)
		dpl_runner_destroy(r[c]);
	dpl_transport_close(t);
	dpl_device_close(dev);
	dpl_schedule_destroy(s);
	return rc;
}
