/*
 * dpl/device_cuda.h - the CUDA device: memory from cudaMalloc, one stream
 * per context for a stage's work, and events on that stream, so that the
 * runner hands a buffer to the transport only once the work queued for
 * it is done, without blocking the CPU (DPL_DEVICE_CAP_ASYNC).
 *
 * The table dpl_device_cuda (dpl/device.h's contract):
 *   - mem DPL_MEM_CUDA: alloc of that kind is cudaMalloc (256-byte
 *     aligned); alloc of DPL_MEM_HOST is cudaMallocHost, page-locked
 *     memory the GPU copies from at full speed. 0 bytes is DPL_EINVAL,
 *     cudaErrorMemoryAllocation DPL_ENOMEM.
 *   - copy between every pair of host and device memory (host memory may
 *     be pageable), queued on the context's stream after the work already
 *     there, and waited for: synchronous, as the contract asks.
 *   - sum of F32, F64, BF16 and F16 by a kernel on the stream, element
 *     by element: the bits of dpl_host_sum (a 16-bit sum is float
 *     addition rounded back to nearest even, as the core rounds).
 *   - events: cudaEvent_t created with cudaEventDisableTiming (and
 *     cudaEventInterprocess with the option events=interprocess, for a
 *     transport that hands them to another process), recorded on the
 *     stream; query maps cudaErrorNotReady to DPL_EAGAIN.
 *
 * Device index: struct dpl_device_params.index is the CUDA ordinal among
 * the devices this process sees (CUDA_VISIBLE_DEVICES applies, as it does
 * for every CUDA program); dpl_device_cuda_local_index() picks one from
 * LOCAL_RANK for a launcher that starts one process per rank.
 *
 * Options (struct dpl_device_params.options, "key=value,..."):
 *   events=local|interprocess  (default local)
 *   stream=own|legacy          own: a non-blocking stream of the
 *                              context's own (default); legacy: the
 *                              legacy default stream, for a trainer whose
 *                              kernels go there
 *
 * Errors of init: DPL_ENOENT when the process sees no CUDA device (no
 * GPU: cudaErrorNoDevice; no driver: cudaErrorInsufficientDriver), the
 * CUDA error named; DPL_EINVAL for an index past the devices seen or a
 * bad option; DPL_EIO for another CUDA error. Later calls give DPL_EIO
 * with the CUDA call and error named; a CUDA error that poisons the
 * context (a kernel fault) stays DPL_EIO on every later call.
 *
 * Threads: as every device, a context is used by one thread at a time;
 * every call makes the context's device current on the calling thread
 * first (cudaSetDevice), so contexts of different GPUs may be used from
 * one thread in turn, and different contexts from different threads.
 *
 * Library: dpl_device_cuda (dpl::device_cuda, pkg-config
 * dpl-device-cuda). Links the CUDA runtime (libcudart); built when CMake
 * finds nvcc (DPL_WITH_CUDA).
 */
#ifndef DPL_DEVICE_CUDA_H
#define DPL_DEVICE_CUDA_H

#include <cuda_runtime_api.h>

#include <dpl/device.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA device table. */
DPL_EXTERN extern const struct dpl_device_ops dpl_device_cuda;

/*
 * dpl_device_cuda_stream - the stream of a device opened on
 * dpl_device_cuda: stage callbacks queue their kernels and copies on it,
 * and the runner's events mark it. Owned by the device (destroyed by
 * dpl_device_close). Returns 0 (*out set), or DPL_EINVAL when `d` is NULL
 * or was opened on another table (*out untouched). Thread-safe.
 */
DPL_EXTERN int dpl_device_cuda_stream(const dpl_device *d,
				      cudaStream_t *out);

/*
 * dpl_device_cuda_ordinal - the CUDA ordinal a device opened on
 * dpl_device_cuda runs on. Returns 0 (*out set) or DPL_EINVAL as
 * dpl_device_cuda_stream. Thread-safe.
 */
DPL_EXTERN int dpl_device_cuda_ordinal(const dpl_device *d, int *out);

/*
 * dpl_device_cuda_local_index - the device index for a process that is
 * rank LOCAL_RANK on its host: LOCAL_RANK modulo the number of devices
 * this process sees (several ranks share a GPU when there are more ranks
 * than GPUs); without LOCAL_RANK, 0. Returns 0 (*out set), DPL_ENOENT when no device is seen,
 * DPL_EINVAL for a LOCAL_RANK that is not a number (named), DPL_EIO.
 * Initialises the CUDA runtime in the calling process. Thread-safe.
 */
DPL_EXTERN int dpl_device_cuda_local_index(uint32_t *out);

#ifdef __cplusplus
}
#endif
#endif /* DPL_DEVICE_CUDA_H */
