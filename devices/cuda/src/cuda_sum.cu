/*
 * cuda_sum.cu - the CUDA device's sum: dst[i] += src[i] on the context's
 * stream, one thread per element (grid-stride), for every dtype the core
 * reduces. The bits are dpl_host_sum's: F32 and F64 add in their own type
 * (one IEEE addition, no contraction to pass through), BF16 and F16
 * convert both to float, add, and round back to nearest, ties to even,
 * through the core's own conversions on the bits (dpl/dtype_bits.h), so
 * that the result does not depend on the toolkit's half types.
 */
#include <stdint.h>

#include <cuda_runtime.h>

#include <dpl/dtype_bits.h>

#include "cuda_internal.h"

/* One element of each dtype: __fadd_rn / __dadd_rn are one rounded
 * addition, never fused with a neighbouring multiply whatever the
 * compiler's contraction setting. */
struct add_f32 {
	__device__ float operator()(float a, float b) const
	{
		return __fadd_rn(a, b);
	}
};

struct add_f64 {
	__device__ double operator()(double a, double b) const
	{
		return __dadd_rn(a, b);
	}
};

struct add_bf16 {
	__device__ uint16_t operator()(uint16_t a, uint16_t b) const
	{
		return dpl_bits_f32_to_bf16(__fadd_rn(dpl_bits_bf16_to_f32(a),
						      dpl_bits_bf16_to_f32(b)));
	}
};

struct add_f16 {
	__device__ uint16_t operator()(uint16_t a, uint16_t b) const
	{
		return dpl_bits_f32_to_f16(__fadd_rn(dpl_bits_f16_to_f32(a),
						     dpl_bits_f16_to_f32(b)));
	}
};

template <typename T, typename Add>
__global__ static void sum_kernel(T *dst, const T *src, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t step = (size_t)gridDim.x * blockDim.x;
	Add add;

	for (; i < n; i += step)
		dst[i] = add(dst[i], src[i]);
}

template <typename T, typename Add>
static void launch(cudaStream_t s, unsigned blocks, unsigned threads,
		   void *dst, const void *src, size_t count)
{
	sum_kernel<T, Add><<<blocks, threads, 0, s>>>((T *)dst, (const T *)src,
						      count);
}

/* 256 threads a block; at most 4096 blocks, the grid-stride loop does
 * the rest. */
extern "C" int dpl__cuda_sum_launch(cudaStream_t s, void *dst,
				    const void *src, size_t count,
				    uint32_t dtype)
{
	const unsigned threads = 256;
	size_t want = (count + threads - 1) / threads;
	unsigned blocks = want > 4096 ? 4096u : (unsigned)want;

	if (count == 0)
		return (int)cudaSuccess;
	switch (dtype) {
	case DPL__CUDA_F32:
		launch<float, add_f32>(s, blocks, threads, dst, src, count);
		break;
	case DPL__CUDA_F64:
		launch<double, add_f64>(s, blocks, threads, dst, src, count);
		break;
	case DPL__CUDA_BF16:
		launch<uint16_t, add_bf16>(s, blocks, threads, dst, src, count);
		break;
	case DPL__CUDA_F16:
		launch<uint16_t, add_f16>(s, blocks, threads, dst, src, count);
		break;
	default:
		return (int)cudaErrorInvalidValue;
	}
	return (int)cudaGetLastError();
}
