/*
 * gemm.c - the reference model's GEMM throughput as a fraction of
 * cuBLAS's own for the same shapes, on GPU 0.
 *
 *   bench_gpu_gemm [--widths LIST] [--batch B] [--microbatches M]
 *                  [--dtype f32|f64] [--reps N] [--rounds R] [--json FILE]
 *
 * Defaults: widths 16,1024x7,4 (8 layers), batch 256, 8 micro-batches of
 * 32 samples, f32, 50 timed iterations after 5 warm-up ones, 5 rounds.
 * (a) the model: one stage holding every layer (dpl/model_mlp_cuda.h),
 * each iteration forward then backward of every micro-batch, as a runner
 * calls them for one stage, then the optimizer step, all on the device's
 * stream; (b) cuBLAS alone: per micro-batch the GEMMs the model issues
 * (devices/models/mlp/cuda/mlp_cuda_stage.c, the same transposes,
 * leading dimensions and pedantic math): for each layer the forward
 * Z = W X, the weight gradient G += dZ Xᵀ, and, but for the first layer
 * (stage 0 has no input gradient), the input gradient dX = Wᵀ dZ. Both
 * are timed with CUDA events over `reps` iterations; the rounds
 * alternate (a) and (b) and the medians are reported. fraction = cuBLAS
 * time / model time: the share of the model's time its GEMMs would take
 * alone, the rest being its own kernels and the gaps between launches.
 * Exit status: 0, 1 when a CUDA, cuBLAS or dpl call fails (named, before
 * any output file is written), 2 bad flags.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <dpl/device_cuda.h>
#include <dpl/model_mlp_cuda.h>

#include "../bench.h"

#define MAXL 64
#define MAXROUNDS 21

struct opts {
	uint32_t widths[MAXL + 1], layers;
	uint32_t batch, micro, reps, rounds;
	int f32;
	const char *json;
};

/* The GPU side of (b): cuBLAS on its own stream and buffers. */
struct blas {
	cublasHandle_t h;
	cudaStream_t s;
	void *w[MAXL], *g[MAXL], *act[MAXL + 1], *dz[MAXL + 1];
};

static int usage(const char *flag, const char *val)
{
	if (flag != NULL) {
		fprintf(stderr, "bench_gpu_gemm: %s: '%s' is not valid\n",
			flag, val);
		return 2;
	}
	fprintf(stderr, "usage: bench_gpu_gemm [--widths LIST] [--batch B] "
		"[--microbatches M] [--dtype f32|f64] [--reps N] "
		"[--rounds R] [--json FILE]\n");
	return 2;
}

/* A whole number in [lo, hi], or 0 with *ok false. */
static uint32_t number(const char *s, uint32_t lo, uint32_t hi, int *ok)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	*ok = *s >= '0' && *s <= '9' && *end == '\0' && v >= lo && v <= hi;
	return *ok ? (uint32_t)v : 0;
}

static int parse_widths(struct opts *o, const char *s)
{
	char buf[1024], *tok, *save = NULL;
	int ok;

	if (strlen(s) >= sizeof buf)
		return 0;
	strcpy(buf, s);
	o->layers = 0;
	for (tok = strtok_r(buf, ",", &save); tok != NULL;
	     tok = strtok_r(NULL, ",", &save)) {
		if (o->layers > MAXL)
			return 0;
		o->widths[o->layers++] = number(tok, 1, 1u << 16, &ok);
		if (!ok)
			return 0;
	}
	if (o->layers < 2)
		return 0;
	o->layers--;
	return 1;
}

static int parse(struct opts *o, int argc, char **argv)
{
	static const uint32_t def[] = {16, 1024, 1024, 1024, 1024,
				       1024, 1024, 1024, 4};
	int i, ok = 1;

	memset(o, 0, sizeof *o);
	memcpy(o->widths, def, sizeof def);
	o->layers = 8;
	o->batch = 256;
	o->micro = 8;
	o->reps = 50;
	o->rounds = 5;
	o->f32 = 1;
	for (i = 1; i < argc; i++) {
		const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (v == NULL)
			return usage(NULL, NULL);
		i++;
		if (strcmp(f, "--widths") == 0)
			ok = parse_widths(o, v);
		else if (strcmp(f, "--batch") == 0)
			o->batch = number(v, 1, 1u << 20, &ok);
		else if (strcmp(f, "--microbatches") == 0)
			o->micro = number(v, 1, 4096, &ok);
		else if (strcmp(f, "--reps") == 0)
			o->reps = number(v, 1, 100000, &ok);
		else if (strcmp(f, "--rounds") == 0)
			o->rounds = number(v, 1, MAXROUNDS, &ok);
		else if (strcmp(f, "--dtype") == 0)
			ok = (o->f32 = strcmp(v, "f32") == 0) ||
			     strcmp(v, "f64") == 0;
		else if (strcmp(f, "--json") == 0)
			o->json = v;
		else
			return usage(NULL, NULL);
		if (!ok)
			return usage(f, v);
	}
	if (o->batch % o->micro != 0) {
		fprintf(stderr, "bench_gpu_gemm: --batch %u is not a multiple "
			"of --microbatches %u\n", o->batch, o->micro);
		return 2;
	}
	return 0;
}

static int cuda_fail(const char *call, cudaError_t e)
{
	fprintf(stderr, "bench_gpu_gemm: %s: %s (%s)\n", call,
		cudaGetErrorName(e), cudaGetErrorString(e));
	return 1;
}

static int blas_fail(const char *call, cublasStatus_t st)
{
	fprintf(stderr, "bench_gpu_gemm: %s: %s\n", call,
		cublasGetStatusName(st));
	return 1;
}

#define CK(call)                                                          \
	do {                                                              \
		cudaError_t e_ = (call);                                  \
		if (e_ != cudaSuccess)                                    \
			return cuda_fail(#call, e_);                      \
	} while (0)

/* One GEMM as the model's gemm() issues it (column-major view). */
static cublasStatus_t gemm(const struct opts *o, cublasHandle_t h,
			   cublasOperation_t ta, cublasOperation_t tb, int M,
			   int N, int K, const void *A, int lda, const void *B,
			   int ldb, int beta, void *C, int ldc)
{
	if (o->f32) {
		float one = 1.0f, b = (float)beta;

		return cublasSgemm(h, ta, tb, M, N, K, &one, A, lda, B, ldb,
				   &b, C, ldc);
	} else {
		double one = 1.0, b = (double)beta;

		return cublasDgemm(h, ta, tb, M, N, K, &one, A, lda, B, ldb,
				   &b, C, ldc);
	}
}

/* (b): one iteration's GEMMs, queued on b->s. */
static cublasStatus_t blas_iteration(const struct opts *o, struct blas *b)
{
	int n = (int)(o->batch / o->micro);
	cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
	uint32_t j, l;

	for (j = 0; j < o->micro && st == CUBLAS_STATUS_SUCCESS; j++) {
		for (l = 0; l < o->layers && st == CUBLAS_STATUS_SUCCESS; l++) {
			int in = (int)o->widths[l], out = (int)o->widths[l + 1];

			st = gemm(o, b->h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in,
				  b->w[l], in, b->act[l], in, 0, b->act[l + 1],
				  out);
		}
		for (l = o->layers; l-- > 0 && st == CUBLAS_STATUS_SUCCESS;) {
			int in = (int)o->widths[l], out = (int)o->widths[l + 1];

			if (l > 0)
				st = gemm(o, b->h, CUBLAS_OP_N, CUBLAS_OP_N, in,
					  n, out, b->w[l], in, b->dz[l + 1], out,
					  0, b->dz[l], in);
			if (st == CUBLAS_STATUS_SUCCESS)
				st = gemm(o, b->h, CUBLAS_OP_N, CUBLAS_OP_T, in,
					  out, n, b->act[l], in, b->dz[l + 1],
					  out, 1, b->g[l], in);
		}
	}
	return st;
}

static int blas_setup(const struct opts *o, struct blas *b)
{
	size_t e = o->f32 ? 4 : 8, n = o->batch / o->micro;
	cublasStatus_t st;
	uint32_t l;

	memset(b, 0, sizeof *b);
	CK(cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking));
	if ((st = cublasCreate(&b->h)) != CUBLAS_STATUS_SUCCESS)
		return blas_fail("cublasCreate", st);
	if ((st = cublasSetMathMode(b->h, CUBLAS_PEDANTIC_MATH)) !=
	    CUBLAS_STATUS_SUCCESS)
		return blas_fail("cublasSetMathMode", st);
	if ((st = cublasSetStream(b->h, b->s)) != CUBLAS_STATUS_SUCCESS)
		return blas_fail("cublasSetStream", st);
	for (l = 0; l <= o->layers; l++) {
		size_t act = n * o->widths[l] * e;

		CK(cudaMalloc(&b->act[l], act));
		CK(cudaMalloc(&b->dz[l], act));
		CK(cudaMemset(b->act[l], 0, act));
		CK(cudaMemset(b->dz[l], 0, act));
		if (l == o->layers)
			break;
		act = (size_t)o->widths[l] * o->widths[l + 1] * e;
		CK(cudaMalloc(&b->w[l], act));
		CK(cudaMalloc(&b->g[l], act));
		CK(cudaMemset(b->w[l], 0, act));
		CK(cudaMemset(b->g[l], 0, act));
	}
	return 0;
}

static void blas_free(const struct opts *o, struct blas *b)
{
	uint32_t l;

	for (l = 0; l <= o->layers; l++) {
		cudaFree(b->act[l]);
		cudaFree(b->dz[l]);
		if (l < o->layers) {
			cudaFree(b->w[l]);
			cudaFree(b->g[l]);
		}
	}
	if (b->h != NULL)
		cublasDestroy(b->h);
	if (b->s != NULL)
		cudaStreamDestroy(b->s);
}

/* (a): one iteration of the model, queued on its stream. */
static int model_iteration(const struct opts *o, dpl_mlp_cuda *m,
			   uint64_t it)
{
	const struct dpl_stage_ops *O = &dpl_mlp_cuda_stage_ops;
	uint64_t n = o->batch / o->micro;
	struct dpl_stage_args a;
	uint32_t j;
	int rc = 0;

	for (j = 0; j < o->micro && rc == 0; j++) {
		memset(&a, 0, sizeof a);
		a.microbatch = j;
		a.iteration = it;
		a.begin = j * n;
		a.end = (j + 1) * n;
		a.batch = o->batch;
		rc = O->forward(m, &a);
		if (rc == 0)
			rc = O->backward(m, &a);
	}
	return rc ? rc : O->step(m, 0, it);
}

/* Seconds per iteration of (a) or (b), timed over o->reps on stream s. */
static int timed(const struct opts *o, dpl_mlp_cuda *m, struct blas *b,
		 cudaStream_t s, uint64_t *it, double *out)
{
	cudaEvent_t e0, e1;
	cublasStatus_t st;
	float ms = 0;
	uint32_t r;
	int rc;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaEventRecord(e0, s));
	for (r = 0; r < o->reps; r++) {
		if (m != NULL && (rc = model_iteration(o, m, (*it)++)) != 0) {
			fprintf(stderr, "bench_gpu_gemm: the model: %s\n",
				dpl_last_error());
			return 1;
		}
		if (m == NULL &&
		    (st = blas_iteration(o, b)) != CUBLAS_STATUS_SUCCESS)
			return blas_fail("cublas gemm", st);
	}
	CK(cudaEventRecord(e1, s));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	*out = (double)ms * 1e-3 / o->reps;
	return 0;
}

static double gemm_flops(const struct opts *o)
{
	double n = (double)(o->batch / o->micro), f = 0;
	uint32_t l;

	for (l = 0; l < o->layers; l++)
		f += (l > 0 ? 3.0 : 2.0) * 2.0 * n * o->widths[l] *
		     o->widths[l + 1];
	return f * o->micro;
}

static int report(const struct opts *o, const char *gpu, double tm,
		  double tb)
{
	double fl = gemm_flops(o);
	char tmp[4096];
	uint32_t l;
	FILE *f;

	printf("GEMMs of the reference model on %s, %s, batch %u in %u "
	       "micro-batches, median of %u rounds of %u iterations\n",
	       gpu, o->f32 ? "f32" : "f64", o->batch, o->micro, o->rounds,
	       o->reps);
	printf("%-14s %14s %12s\n", "", "ms/iteration", "GEMM GFLOP/s");
	printf("%-14s %14.3f %12.1f\n", "model", tm * 1e3, fl / tm / 1e9);
	printf("%-14s %14.3f %12.1f\n", "cuBLAS alone", tb * 1e3,
	       fl / tb / 1e9);
	printf("fraction (cuBLAS / model): %.3f\n", tb / tm);
	if (o->json == NULL)
		return 0;
	snprintf(tmp, sizeof tmp, "%s.tmp", o->json);
	if ((f = fopen(tmp, "w")) == NULL) {
		perror(tmp);
		return 1;
	}
	fprintf(f, "{\"bench\": \"gpu_gemm\", \"device\": \"%s\", "
		"\"dtype\": \"%s\", \"widths\": [", gpu,
		o->f32 ? "f32" : "f64");
	for (l = 0; l <= o->layers; l++)
		fprintf(f, "%s%u", l ? ", " : "", o->widths[l]);
	fprintf(f, "], \"batch\": %u, \"microbatches\": %u, \"reps\": %u, "
		"\"rounds\": %u, \"model_s_per_iter\": %.9g, "
		"\"cublas_s_per_iter\": %.9g, \"model_gflops\": %.6g, "
		"\"cublas_gflops\": %.6g, \"fraction\": %.6g}\n", o->batch,
		o->micro, o->reps, o->rounds, tm, tb, fl / tm / 1e9,
		fl / tb / 1e9, tb / tm);
	if (fclose(f) != 0 || rename(tmp, o->json) != 0) {
		perror(o->json);
		remove(tmp);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct dpl_device_params dp = {0};
	struct dpl_mlp_params p = {0};
	struct dpl_mlp_layout l = {0};
	double tm[MAXROUNDS], tb[MAXROUNDS];
	uint32_t bounds[2], slots[1] = {1}, r;
	struct cudaDeviceProp prop;
	struct opts o;
	struct blas b;
	cudaStream_t s;
	dpl_device *dev = NULL;
	dpl_mlp_cuda *m = NULL;
	uint64_t it = 0;
	int rc, n = 0;

	if ((rc = parse(&o, argc, argv)) != 0)
		return rc;
	CK(cudaGetDeviceCount(&n));
	CK(cudaGetDeviceProperties(&prop, 0));
	p.layers = o.layers;
	p.widths = o.widths;
	p.precision = o.f32 ? DPL_MLP_F32 : DPL_MLP_F64;
	p.optimizer = DPL_MLP_SGD;
	p.seed = 1;
	bounds[0] = 0;
	bounds[1] = o.layers;
	l.stages = 1;
	l.bounds = bounds;
	l.slots = slots;
	l.max_samples = o.batch / o.micro;
	l.batch = o.batch;
	if (dpl_device_open(&dpl_device_cuda, &dp, &dev) != 0 ||
	    dpl_device_cuda_stream(dev, &s) != 0 ||
	    dpl_mlp_cuda_create(&p, &l, dev, &m) != 0) {
		fprintf(stderr, "bench_gpu_gemm: %s\n", dpl_last_error());
		return 1;
	}
	if ((rc = blas_setup(&o, &b)) != 0)
		return rc;
	/* Warm-up of both, then the rounds, alternating which goes first. */
	{
		struct opts w = o;

		w.reps = 5;
		if ((rc = timed(&w, m, &b, s, &it, &tm[0])) != 0 ||
		    (rc = timed(&w, NULL, &b, b.s, &it, &tb[0])) != 0)
			return rc;
	}
	for (r = 0; r < o.rounds; r++) {
		if (r % 2 == 0)
			rc = timed(&o, m, &b, s, &it, &tm[r]);
		if (rc == 0)
			rc = timed(&o, NULL, &b, b.s, &it, &tb[r]);
		if (rc == 0 && r % 2 == 1)
			rc = timed(&o, m, &b, s, &it, &tm[r]);
		if (rc != 0)
			return rc;
	}
	rc = report(&o, prop.name, bench_median(tm, o.rounds),
		    bench_median(tb, o.rounds));
	blas_free(&o, &b);
	dpl_mlp_cuda_destroy(m);
	dpl_device_close(dev);
	return rc;
}
