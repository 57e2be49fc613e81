/*
 * dpl/device_cpu.h - the CPU device: host memory whose sum runs on CBLAS
 * (OpenBLAS daxpy/saxpy) for F64 and F32. It is the device of the reference model
 * (dpl/model_mlp.h), which lives in its own library.
 *
 * Parameters (struct dpl_device_params): index must be 0 (the host is one
 * device); options must be NULL or empty (the device has none). Opening
 * it sets OpenBLAS to one thread per call, so that ranks running as
 * threads do not share BLAS worker threads.
 *
 * Memory: DPL_MEM_HOST only, 64-byte aligned; copy moves host to host;
 * sum adds F64 or F32 on CBLAS and BF16 or F16 through dpl_host_sum
 * (rounded to nearest even; DPL_ENOTSUP for other dtypes and memory
 * kinds).
 * The table keeps no state of its own (ctx_size 0), so any number of
 * handles may be open, each used by one thread at a time.
 *
 * Library: dpl_device_cpu (dpl::device_cpu, pkg-config dpl-device-cpu).
 */
#ifndef DPL_DEVICE_CPU_H
#define DPL_DEVICE_CPU_H

#include <dpl/device.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Host memory, summed with CBLAS daxpy/saxpy (name "cpu"). */
DPL_EXTERN extern const struct dpl_device_ops dpl_device_cpu;

#ifdef __cplusplus
}
#endif
#endif /* DPL_DEVICE_CPU_H */
