/*
 * copy.c - the limit a GPU transport is held to: device-to-device
 * cudaMemcpyAsync inside one process on GPU 0, 1 MiB to 256 MiB, and the
 * latency of an 8-byte copy. Prints a table and writes JSON.
 *
 *   bench_gpu_copy [--reps N] [--json FILE]
 *
 * Bandwidth: bytes moved (one way) per second of the median of N timed
 * rounds, each 8 copies between two buffers timed with CUDA events after
 * a warm-up. Latency: median over 1000 synchronous 8-byte copies
 * (cudaMemcpyAsync + cudaStreamSynchronize, CPU clock), the cost a
 * transport's small message pays at least.
 * Exit status: 0, 1 when a CUDA call fails (named), 2 bad flags.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define NS 5
#define MAXREPS 51
static const size_t sizes[NS] = {1u << 20, 4u << 20, 16u << 20, 64u << 20,
				 256u << 20};

#define CK(call)                                                          \
	do {                                                              \
		cudaError_t e_ = (call);                                  \
		if (e_ != cudaSuccess) {                                  \
			fprintf(stderr, "bench_gpu_copy: %s: %s\n", #call, \
				cudaGetErrorString(e_));                  \
			return 1;                                         \
		}                                                         \
	} while (0)

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

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	double gbs[NS], t[1000], v[MAXREPS], lat;
	const char *json = NULL;
	cudaEvent_t e0, e1;
	cudaStream_t s;
	void *a, *b;
	int reps = 9, i, r, k;
	size_t z;
	FILE *f;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
			reps = atoi(argv[++i]);
			if (reps < 1 || reps > MAXREPS) {
				fprintf(stderr, "--reps: '%s' is not in "
					"[1, %d]\n", argv[i], MAXREPS);
				return 2;
			}
		} else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
			json = argv[++i];
		} else {
			fprintf(stderr, "usage: bench_gpu_copy [--reps N] "
				"[--json FILE]\n");
			return 2;
		}
	}
	CK(cudaSetDevice(0));
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaMalloc(&a, sizes[NS - 1]));
	CK(cudaMalloc(&b, sizes[NS - 1]));
	CK(cudaMemset(a, 1, sizes[NS - 1]));
	CK(cudaDeviceSynchronize());
	for (z = 0; z < NS; z++) {
		for (r = -1; r < reps; r++) {
			float ms;

			CK(cudaEventRecord(e0, s));
			for (k = 0; k < 8; k++)
				CK(cudaMemcpyAsync(k % 2 ? a : b, k % 2 ? b : a,
						   sizes[z],
						   cudaMemcpyDeviceToDevice, s));
			CK(cudaEventRecord(e1, s));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			if (r >= 0)
				v[r] = 8.0 * (double)sizes[z] / (ms * 1e-3);
		}
		gbs[z] = median(v, reps) / 1e9;
	}
	for (k = -100; k < 1000; k++) {
		double t0 = now_s();

		CK(cudaMemcpyAsync(b, a, 8, cudaMemcpyDeviceToDevice, s));
		CK(cudaStreamSynchronize(s));
		if (k >= 0)
			t[k] = (now_s() - t0) * 1e6;
	}
	lat = median(t, 1000);
	printf("cudaMemcpyAsync device to device, one process, GPU 0: median "
	       "of %d\n%12s %10s\n", reps, "bytes", "GB/s");
	for (z = 0; z < NS; z++)
		printf("%12zu %10.1f\n", sizes[z], gbs[z]);
	printf("8-byte copy, synchronous: %.2f us (median of 1000)\n", lat);
	if (json != NULL) {
		if ((f = fopen(json, "w")) == NULL) {
			perror(json);
			return 1;
		}
		fprintf(f, "{\"bench\": \"gpu_copy\", \"reps\": %d, "
			"\"latency_8B_us\": %.3f, \"bandwidth\": [", reps, lat);
		for (z = 0; z < NS; z++)
			fprintf(f, "%s{\"bytes\": %zu, \"GBps\": %.3f}",
				z ? ", " : "", sizes[z], gbs[z]);
		fprintf(f, "]}\n");
		if (fclose(f) != 0) {
			perror(json);
			return 1;
		}
	}
	cudaFree(a);
	cudaFree(b);
	return 0;
}
