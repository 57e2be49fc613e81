/*
 * cuda_internal.h - what the CUDA device's C side (cuda_device.c) and its
 * kernels (cuda_sum.cu) share. Plain C: nvcc and the C compiler both read
 * it.
 */
#ifndef DPL_CUDA_INTERNAL_H
#define DPL_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* enum dpl_dtype's values, restated for the .cu side: dpl/device.h does
 * not compile as C++ with -Wshadow (dpl_device_ops is both a struct and a
 * function). cuda_device.c checks they agree. */
#define DPL__CUDA_F32 0u
#define DPL__CUDA_F64 1u
#define DPL__CUDA_BF16 2u
#define DPL__CUDA_F16 3u

/*
 * dpl__cuda_sum_launch - queue dst[i] += src[i], i < count, of dtype on
 * stream s (the current device's memory). Returns a cudaError_t as int:
 * cudaSuccess when queued (count 0 queues nothing), cudaErrorInvalidValue
 * for an unknown dtype, or the launch's error. Does not wait.
 */
int dpl__cuda_sum_launch(cudaStream_t s, void *dst, const void *src,
			 size_t count, uint32_t dtype);

#ifdef __cplusplus
}
#endif
#endif /* DPL_CUDA_INTERNAL_H */
