/*
 * mlp_cuda_kernels.cu - the GPU model's element-wise work and reductions,
 * in double and float, with the CPU model's expressions (mlp_kernels.h)
 * operation for operation: constants rounded to the element type, the
 * same evaluation order, and no contraction into fused multiply-adds
 * (the file is built with --fmad=false, so a*b+c rounds twice as in C).
 * Sums are sequential per output (one thread per bias, one thread for the
 * loss), so every run gives the same bits; no atomics. The transcendental
 * functions (tanh, exp, log, sqrt) are CUDA's, which may differ from
 * libm's in the last place.
 */
#include <stdint.h>

#include <cuda_runtime.h>

#include <dpl/common.h>

#include "mlp_cuda_internal.h"

#define BLOCK 256

/* DPL_EIO naming the kernel when its launch failed. */
static int launched(const char *what)
{
	cudaError_t e = cudaGetLastError();

	if (e == cudaSuccess)
		return 0;
	return dpl_set_error(DPL_EIO, "mlp cuda: kernel %s: %s (%s)", what,
			     cudaGetErrorName(e), cudaGetErrorString(e));
}

static unsigned int blocks(uint64_t n)
{
	uint64_t b = (n + BLOCK - 1) / BLOCK;

	if (b == 0)
		b = 1;
	return b > 65535u ? 65535u : (unsigned int)b;
}

__device__ static inline float fn_tanh(float x) { return tanhf(x); }
__device__ static inline double fn_tanh(double x) { return tanh(x); }
__device__ static inline float fn_exp(float x) { return expf(x); }
__device__ static inline double fn_exp(double x) { return exp(x); }
__device__ static inline float fn_log(float x) { return logf(x); }
__device__ static inline double fn_log(double x) { return log(x); }
__device__ static inline float fn_sqrt(float x) { return sqrtf(x); }
__device__ static inline double fn_sqrt(double x) { return sqrt(x); }

/* enum dpl_mlp_activation: 0 ReLU, 1 GELU (tanh). */
template <typename T> __device__ static T act(uint32_t kind, T z)
{
	if (kind == 0)
		return z > 0 ? z : T(0);
	return T(0.5) * z *
	       (T(1.0) + fn_tanh(T(0.7978845608028654) *
				 (z + T(0.044715) * z * z * z)));
}

template <typename T> __device__ static T act_grad(uint32_t kind, T z)
{
	T u, th;

	if (kind == 0)
		return z > 0 ? T(1) : T(0);
	u = T(0.7978845608028654) * (z + T(0.044715) * z * z * z);
	th = fn_tanh(u);
	return T(0.5) * (T(1.0) + th) +
	       T(0.5) * z * (T(1.0) - th * th) * T(0.7978845608028654) *
		       (T(1.0) + T(3.0) * T(0.044715) * z * z);
}

template <typename T>
__global__ static void k_gather(T *x, const T *data, uint64_t base,
				uint64_t dataset, uint64_t n, uint32_t w)
{
	uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	uint64_t step = (uint64_t)gridDim.x * blockDim.x;

	for (; i < n * w; i += step) {
		uint64_t j = i / w, c = i % w;

		x[i] = data[((base + j) % dataset) * w + c];
	}
}

template <typename T>
__global__ static void k_bias_act(T *z, const T *b, T *y, uint32_t kind,
				  uint64_t n, uint32_t out)
{
	uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	uint64_t step = (uint64_t)gridDim.x * blockDim.x;

	for (; i < n * out; i += step) {
		z[i] += b[i % out];
		if (y != NULL)
			y[i] = act<T>(kind, z[i]);
	}
}

template <typename T>
__global__ static void k_act_grad(T *dz, const T *up, const T *z,
				  uint32_t kind, uint64_t n)
{
	uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	uint64_t step = (uint64_t)gridDim.x * blockDim.x;

	for (; i < n; i += step)
		dz[i] = up[i] * act_grad<T>(kind, z[i]);
}

/* One thread per sample: its dz row and its loss term. */
template <typename T>
__global__ static void k_loss(bool mse, const T *z, T *dz, T *terms,
			      const T *tg, const uint32_t *cls, uint64_t base,
			      uint64_t dataset, uint64_t n, uint32_t C,
			      T scale)
{
	uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	uint64_t step = (uint64_t)gridDim.x * blockDim.x;

	for (; j < n; j += step) {
		uint64_t k = (base + j) % dataset;
		const T *zj = z + j * C;
		T *dj = dz + j * C, mx, e, lse;
		uint32_t c, cl;

		if (mse) {
			const T *t = tg + k * C;
			T l = 0;

			for (c = 0; c < C; c++) {
				T d = zj[c] - t[c];

				l += d * d;
				dj[c] = T(2.0) * d / (T)C * scale;
			}
			terms[j] = l / (T)C;
			continue;
		}
		cl = cls[k];
		mx = zj[0];
		for (c = 1; c < C; c++)
			if (zj[c] > mx)
				mx = zj[c];
		e = 0;
		for (c = 0; c < C; c++)
			e += fn_exp(zj[c] - mx);
		lse = mx + fn_log(e);
		for (c = 0; c < C; c++)
			dj[c] = (fn_exp(zj[c] - lse) -
				 (c == cl ? T(1.0) : T(0.0))) *
				scale;
		terms[j] = lse - zj[cl];
	}
}

/* The terms summed in sample order, as the CPU model's loop does. */
template <typename T>
__global__ static void k_loss_sum(const T *terms, uint64_t n, T scale,
				  double *acc)
{
	T sum = 0;
	uint64_t j;

	if (blockIdx.x != 0 || threadIdx.x != 0)
		return;
	for (j = 0; j < n; j++)
		sum += terms[j];
	*acc += (double)(sum * scale);
}

template <typename T>
__global__ static void k_bias_grad(T *gb, const T *dz, uint64_t n,
				   uint32_t out)
{
	uint64_t k = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	uint64_t step = (uint64_t)gridDim.x * blockDim.x, j;

	for (; k < out; k += step) {
		T g = gb[k];

		for (j = 0; j < n; j++)
			g += dz[j * out + k];
		gb[k] = g;
	}
}

template <typename T>
__global__ static void k_sgd(T *w, T *s1, const T *g, size_t n, T lr, T mom)
{
	size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	size_t step = (size_t)gridDim.x * blockDim.x;

	for (; i < n; i += step) {
		s1[i] = mom * s1[i] + g[i];
		w[i] -= lr * s1[i];
	}
}

template <typename T>
__global__ static void k_adam(T *w, T *s1, T *s2, const T *g, size_t n,
			      T lr, T b1, T b2, T eps, T c1, T c2)
{
	size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	size_t step = (size_t)gridDim.x * blockDim.x;

	for (; i < n; i += step) {
		T gi = g[i];

		s1[i] = b1 * s1[i] + (1 - b1) * gi;
		s2[i] = b2 * s2[i] + (1 - b2) * gi * gi;
		w[i] -= lr * (s1[i] / c1) / (fn_sqrt(s2[i] / c2) + eps);
	}
}

extern "C" {

int dpl__mlpc_gather(cudaStream_t st, bool f32, void *x, const void *data,
		     uint64_t base, uint64_t dataset, uint64_t n, uint32_t w)
{
	if (f32)
		k_gather<float><<<blocks(n * w), BLOCK, 0, st>>>(
			(float *)x, (const float *)data, base, dataset, n, w);
	else
		k_gather<double><<<blocks(n * w), BLOCK, 0, st>>>(
			(double *)x, (const double *)data, base, dataset, n, w);
	return launched("gather");
}

int dpl__mlpc_bias_act(cudaStream_t st, bool f32, void *z, const void *b,
		       void *y, uint32_t act, uint64_t n, uint32_t out)
{
	if (f32)
		k_bias_act<float><<<blocks(n * out), BLOCK, 0, st>>>(
			(float *)z, (const float *)b, (float *)y, act, n, out);
	else
		k_bias_act<double><<<blocks(n * out), BLOCK, 0, st>>>(
			(double *)z, (const double *)b, (double *)y, act, n,
			out);
	return launched("bias_act");
}

int dpl__mlpc_act_grad(cudaStream_t st, bool f32, void *dz, const void *up,
		       const void *z, uint32_t act, uint64_t n)
{
	if (f32)
		k_act_grad<float><<<blocks(n), BLOCK, 0, st>>>(
			(float *)dz, (const float *)up, (const float *)z, act,
			n);
	else
		k_act_grad<double><<<blocks(n), BLOCK, 0, st>>>(
			(double *)dz, (const double *)up, (const double *)z,
			act, n);
	return launched("act_grad");
}

int dpl__mlpc_loss(cudaStream_t st, bool f32, bool mse, const void *z,
		   void *dz, void *terms, const void *targets,
		   const uint32_t *cls, uint64_t base, uint64_t dataset,
		   uint64_t n, uint32_t C, double batch, double *acc)
{
	int rc;

	if (f32) {
		float scale = 1.0f / (float)batch;

		k_loss<float><<<blocks(n), BLOCK, 0, st>>>(
			mse, (const float *)z, (float *)dz, (float *)terms,
			(const float *)targets, cls, base, dataset, n, C,
			scale);
		if ((rc = launched("loss")) != 0)
			return rc;
		k_loss_sum<float><<<1, 1, 0, st>>>((const float *)terms, n,
						   scale, acc);
	} else {
		double scale = 1.0 / batch;

		k_loss<double><<<blocks(n), BLOCK, 0, st>>>(
			mse, (const double *)z, (double *)dz, (double *)terms,
			(const double *)targets, cls, base, dataset, n, C,
			scale);
		if ((rc = launched("loss")) != 0)
			return rc;
		k_loss_sum<double><<<1, 1, 0, st>>>((const double *)terms, n,
						    scale, acc);
	}
	return launched("loss_sum");
}

int dpl__mlpc_bias_grad(cudaStream_t st, bool f32, void *gb, const void *dz,
			uint64_t n, uint32_t out)
{
	if (f32)
		k_bias_grad<float><<<blocks(out), BLOCK, 0, st>>>(
			(float *)gb, (const float *)dz, n, out);
	else
		k_bias_grad<double><<<blocks(out), BLOCK, 0, st>>>(
			(double *)gb, (const double *)dz, n, out);
	return launched("bias_grad");
}

int dpl__mlpc_update(cudaStream_t st, bool f32, bool adam, void *w,
		     void *s1, void *s2, const void *g, size_t n, double lr,
		     double mom, double b1, double b2, double eps, double c1,
		     double c2)
{
	if (f32 && adam)
		k_adam<float><<<blocks(n), BLOCK, 0, st>>>(
			(float *)w, (float *)s1, (float *)s2, (const float *)g,
			n, (float)lr, (float)b1, (float)b2, (float)eps,
			(float)c1, (float)c2);
	else if (f32)
		k_sgd<float><<<blocks(n), BLOCK, 0, st>>>(
			(float *)w, (float *)s1, (const float *)g, n,
			(float)lr, (float)mom);
	else if (adam)
		k_adam<double><<<blocks(n), BLOCK, 0, st>>>(
			(double *)w, (double *)s1, (double *)s2,
			(const double *)g, n, lr, b1, b2, eps, c1, c2);
	else
		k_sgd<double><<<blocks(n), BLOCK, 0, st>>>(
			(double *)w, (double *)s1, (const double *)g, n, lr,
			mom);
	return launched("update");
}

} /* extern "C" */
