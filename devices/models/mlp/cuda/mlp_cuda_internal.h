/*
 * mlp_cuda_internal.h - the GPU model's state and its kernels' launchers
 * (mlp_cuda_kernels.cu), shared by its C sources. Plain C: nvcc and the C
 * compiler both read it. Not installed.
 *
 * Every launcher queues its kernel on `st` and returns 0, or DPL_EIO
 * naming the kernel and the launch error (cudaGetLastError); none
 * synchronises. `f32` picks float, else double. Sums run in a fixed
 * order (one thread per output, samples in order), without atomics.
 */
#ifndef DPL_MLP_CUDA_INTERNAL_H
#define DPL_MLP_CUDA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[j][i] = data[(base + j) % dataset][i], j < n, i < w. */
int dpl__mlpc_gather(cudaStream_t st, bool f32, void *x, const void *data,
		     uint64_t base, uint64_t dataset, uint64_t n, uint32_t w);

/* z[j][k] += b[k]; then y = act(z) when y is not NULL. */
int dpl__mlpc_bias_act(cudaStream_t st, bool f32, void *z, const void *b,
		       void *y, uint32_t act, uint64_t n, uint32_t out);

/* dz = up * act'(z), n values. */
int dpl__mlpc_act_grad(cudaStream_t st, bool f32, void *dz, const void *up,
		       const void *z, uint32_t act, uint64_t n);

/* The loss of z[n][C] against the samples (base + j) % dataset: writes dz
 * and, per sample, its term in terms[j]; then one thread sums the terms
 * in order and adds (double)(sum * scale) to *acc. `targets` [dataset][C]
 * (MSE) or `cls` [dataset] (softmax-CE). */
int dpl__mlpc_loss(cudaStream_t st, bool f32, bool mse, const void *z,
		   void *dz, void *terms, const void *targets,
		   const uint32_t *cls, uint64_t base, uint64_t dataset,
		   uint64_t n, uint32_t C, double batch, double *acc);

/* gb[k] += sum over j (in order) of dz[j][k]. */
int dpl__mlpc_bias_grad(cudaStream_t st, bool f32, void *gb, const void *dz,
			uint64_t n, uint32_t out);

/* The optimizer over n parameters: SGD with momentum (adam false) or
 * Adam with the bias corrections c1, c2 (computed in double by the
 * caller, as the CPU model does). */
int dpl__mlpc_update(cudaStream_t st, bool f32, bool adam, void *w,
		     void *s1, void *s2, const void *g, size_t n, double lr,
		     double mom, double b1, double b2, double eps, double c1,
		     double c2);

#ifdef __cplusplus
}
#endif
#endif /* DPL_MLP_CUDA_INTERNAL_H */
