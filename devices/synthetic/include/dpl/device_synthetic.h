/*
 * dpl/device_synthetic.h - the synthetic device: host memory that counts
 * what it allocates, process-wide. It is the device of the synthetic
 * model (dpl/model_synthetic.h: stage callbacks that emulate time and
 * activation memory), which lives in its own library.
 *
 * Parameters (struct dpl_device_params): index must be 0; options are
 * ignored. Memory: DPL_MEM_HOST only, 64-byte aligned; copy moves host to
 * host; sum is the core's dpl_host_sum: F32, F64, BF16 and F16 in a plain
 * loop (DPL_ENOTSUP for other dtypes). The table keeps no per-handle state, so any number
 * of handles may be open, each used by one thread at a time; the counter
 * is atomic.
 *
 * Library: dpl_device_synthetic (dpl::device_synthetic, pkg-config
 * dpl-device-synthetic). Needs libc only.
 */
#ifndef DPL_DEVICE_SYNTHETIC_H
#define DPL_DEVICE_SYNTHETIC_H

#include <stdint.h>

#include <dpl/device.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Host memory (name "synthetic"); dpl_device_synthetic_allocated() counts
 * it. */
DPL_EXTERN extern const struct dpl_device_ops dpl_device_synthetic;

/*
 * dpl_device_synthetic_allocated - the bytes currently allocated through
 * dpl_device_synthetic and not yet freed, over every handle of the
 * process (headers excluded). Thread-safe; does not block.
 */
DPL_EXTERN uint64_t dpl_device_synthetic_allocated(void);

#ifdef __cplusplus
}
#endif
#endif /* DPL_DEVICE_SYNTHETIC_H */
