/*
 * dpl/device.h - the device contract: where the runner's buffers live and
 * how it copies, sums and waits for them.
 *
 * A device backend is one const struct dpl_device_ops. The core allocates
 * the backend's private state (ctx_size bytes) and hands it to every call;
 * the backend fills it in. Host memory is built into the core as the table
 * dpl_device_host, so an embedder without accelerators needs no module.
 *
 * The runner uses a device for three things: allocating, once at setup,
 * the buffers that carry activations and gradients between stages;
 * packing and summing gradients for the reduction; and, when the device
 * queues work asynchronously (a GPU stream), waiting without blocking
 * until the work a stage callback queued has finished, before it hands
 * the result to the transport.
 *
 * Threads: a device context is used by one thread at a time. Different
 * contexts, including contexts of the same table, may be used from
 * different threads at once.
 *
 * Backend authors: fill every mandatory member, leave optional ones NULL,
 * and set `size` to sizeof(struct dpl_device_ops) as you compiled it. The
 * core reaches optional members only through DPL_HAS_OP().
 */
#ifndef DPL_DEVICE_H
#define DPL_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <dpl/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * DPL_HAS_OP - nonzero when the table `ops` was compiled with `member`
 * (its `size` covers it) and the member is set. Use it for every optional
 * member of an ops table; mandatory members are checked once when the
 * table is opened.
 */
#ifndef DPL_HAS_OP
#define DPL_HAS_OP(ops, member)                                              \
	((size_t)(ops)->size >=                                              \
		 (size_t)((const char *)&(ops)->member -                     \
			  (const char *)(ops)) + sizeof((ops)->member) &&    \
	 (ops)->member != NULL)
#endif

/* Memory kinds. Values are stable: they travel in ops calls. */
enum dpl_mem_kind {
	DPL_MEM_HOST = 0, /* ordinary host memory */
	DPL_MEM_CUDA = 1, /* CUDA device memory */
	DPL_MEM__COUNT = 2
};

/*
 * Element types of buffers that the core reduces. Values are stable: they
 * travel in ops calls. The 16-bit types are stored as their bit patterns
 * in uint16_t, in the host's byte order.
 */
enum dpl_dtype {
	DPL_DTYPE_F32 = 0,  /* IEEE 754 binary32 */
	DPL_DTYPE_F64 = 1,  /* IEEE 754 binary64 */
	DPL_DTYPE_BF16 = 2, /* bfloat16: the top half of a binary32 (1 sign,
			       8 exponent, 7 fraction bits) */
	DPL_DTYPE_F16 = 3,  /* IEEE 754 binary16 (1 sign, 5 exponent, 10
			       fraction bits) */
	DPL_DTYPE__COUNT = 4
};

/* dpl_dtype_size - bytes per element (4, 8, 2, 2), or 0 for an unknown
 * type. */
DPL_EXTERN size_t dpl_dtype_size(enum dpl_dtype t);

/*
 * 16-bit floats, for backends and trainers that sum or fill BF16 and F16
 * buffers without a compiler type for them. Pure functions of the bits:
 * the same results with every compiler and floating-point environment;
 * thread-safe; no errors.
 *  dpl_bf16_to_f32 / dpl_f16_to_f32 - the exact value of a pattern (every
 *    BF16 and F16 value is a float), subnormals, zeros and infinities
 *    included; a NaN gives a NaN of the same sign.
 *  dpl_f32_to_bf16 / dpl_f32_to_f16 - `f` rounded to nearest, ties to
 *    even, with gradual underflow to subnormals and zero, and overflow to
 *    infinity (F16: from 65520 up); a NaN gives a quiet NaN of the same
 *    sign. A pattern converted to float and back is itself, NaNs aside.
 */
DPL_EXTERN float dpl_bf16_to_f32(uint16_t h);
DPL_EXTERN uint16_t dpl_f32_to_bf16(float f);
DPL_EXTERN float dpl_f16_to_f32(uint16_t h);
DPL_EXTERN uint16_t dpl_f32_to_f16(float f);

/*
 * dpl_host_sum - dst[i] += src[i] for i < count, element type `dtype`,
 * both in memory the CPU can access; the ranges do not overlap unless
 * they are equal. This is the sum of dpl_device_host, for other devices
 * with DPL_DEVICE_CAP_HOST_ACCESS to share. F32 and F64 add in their own
 * type; BF16 and F16 convert both elements to float, add, and round back
 * as dpl_f32_to_bf16 / dpl_f32_to_f16 do, which is the correctly rounded
 * sum. Element by element in index order: the same inputs give the same
 * bits. Does not block; thread-safe on disjoint buffers. Returns 0, or
 * DPL_ENOTSUP for an unknown dtype (nothing written).
 */
DPL_EXTERN int dpl_host_sum(void *dst, const void *src, size_t count,
			    uint32_t dtype);

/*
 * A typed buffer: `count` elements of `dtype` at `ptr`, in memory of kind
 * `mem`. Used for the gradients a stage hands to the reduction.
 */
struct dpl_buffer {
	void *ptr;
	size_t count;
	uint32_t dtype; /* enum dpl_dtype */
	uint32_t mem;   /* enum dpl_mem_kind */
};

/* Version of struct dpl_device_ops this header describes. */
#define DPL_DEVICE_ABI_VERSION 1

/* Capability bits of dpl_device_ops.caps. */
#define DPL_DEVICE_CAP_HOST_ACCESS (1u << 0) /* the CPU may read and write
						its memory directly */
#define DPL_DEVICE_CAP_ASYNC (1u << 1)       /* stage callbacks queue work;
						completion is seen through
						events */

/* Parameters of a device context, passed to init. */
struct dpl_device_params {
	uint32_t index;      /* device ordinal on this host (0 for host) */
	const char *options; /* backend-specific "key=value,..." or NULL */
};

/*
 * The device table. Members after `event_query` may be appended by later
 * ABI versions; existing ones never move.
 */
struct dpl_device_ops {
	uint32_t abi_version; /* DPL_DEVICE_ABI_VERSION it was written for */
	uint32_t size;        /* sizeof(struct dpl_device_ops) it was built
				 with */
	const char *name;     /* short lower-case name: "host", "cpu" */
	uint64_t caps;        /* DPL_DEVICE_CAP_* */
	uint32_t mem;         /* enum dpl_mem_kind of the memory alloc returns
				 and the callbacks work on */
	uint32_t reserved0;   /* zero */
	size_t ctx_size;      /* bytes of private state per context; the core
				 allocates them zeroed and aligned for any
				 type */
	size_t event_size;    /* bytes of one event (0 without events) */

	/*
	 * init - set up the context `ctx` (ctx_size zeroed bytes) for device
	 * `p->index`. Blocks while the device starts. Returns 0, DPL_EINVAL
	 * for a bad index or option, DPL_ENOMEM, DPL_ENOENT when this host
	 * has no such device at all (no GPU, no driver: tests skip on it),
	 * DPL_EIO when the device is there but unusable. On failure the core frees ctx without calling fini.
	 * Mandatory.
	 */
	int (*init)(void *ctx, const struct dpl_device_params *p);

	/*
	 * fini - release everything init and later calls acquired. Buffers
	 * still allocated are the caller's bug; the backend may leak them.
	 * Mandatory.
	 */
	void (*fini)(void *ctx);

	/*
	 * alloc - `bytes` (> 0) bytes of memory of kind `mem`, aligned to
	 * at least 64 bytes, in *out. The memory belongs to the caller until
	 * free. May block. Returns 0, DPL_ENOMEM, DPL_EINVAL for 0 bytes,
	 * or DPL_ENOTSUP for a kind the device does not have (*out untouched
	 * on failure, the reason in dpl_last_error()). Mandatory. The
	 * device battery (conformance/device) checks this table's rules.
	 */
	int (*alloc)(void *ctx, uint32_t mem, size_t bytes, void **out);

	/* free - release memory from alloc of the same kind; NULL is a
	 * no-op. Mandatory. */
	void (*free)(void *ctx, uint32_t mem, void *ptr);

	/*
	 * copy - copy `bytes` from src (kind smem) to dst (kind dmem); the
	 * ranges do not overlap. Synchronous: the copy is done on return,
	 * and it is ordered after work already queued on the device.
	 * Returns 0, DPL_ENOTSUP for a pair of kinds it cannot copy, DPL_EIO.
	 * Mandatory.
	 */
	int (*copy)(void *ctx, void *dst, uint32_t dmem, const void *src,
		    uint32_t smem, size_t bytes);

	/*
	 * sum - dst[i] += src[i] for i < count, element type `dtype`, both
	 * in the device's memory (`mem`). Synchronous like copy, and
	 * deterministic: the same inputs give the same bits. Used by the
	 * core's ring allreduce. dpl_runner_create() calls it once with
	 * count 0 to learn whether the device sums the gradients' dtype
	 * when the ring is sure to run (a transport without iallreduce).
	 * Each BF16 or F16 element gets the exact sum rounded to nearest,
	 * ties to even, as dpl_host_sum gives. Returns 0, DPL_ENOTSUP for a
	 * dtype it cannot sum (whatever the count), DPL_EIO. Mandatory.
	 */
	int (*sum)(void *ctx, void *dst, const void *src, size_t count,
		   uint32_t dtype);

	/*
	 * Events (optional; all four or none, with event_size > 0 and
	 * DPL_DEVICE_CAP_ASYNC): a marker in the device's work queue. The
	 * runner records one after a stage callback returns and polls it,
	 * progressing the transport meanwhile, before it posts a send of
	 * that callback's output. `ev` points to event_size bytes the core
	 * allocated.
	 *  event_create  - initialise ev. Returns 0, DPL_ENOMEM, DPL_EIO.
	 *  event_destroy - release ev.
	 *  event_record  - mark the point after all work queued so far.
	 *                  Non-blocking. Returns 0 or DPL_EIO.
	 *  event_query   - 0 when the work before the mark is done,
	 *                  DPL_EAGAIN while it runs, DPL_EIO when it failed.
	 *                  Non-blocking.
	 */
	int (*event_create)(void *ctx, void *ev);
	void (*event_destroy)(void *ctx, void *ev);
	int (*event_record)(void *ctx, void *ev);
	int (*event_query)(void *ctx, void *ev);
};

/* Host memory (malloc-backed, 64-byte aligned), built into the core. */
DPL_EXTERN extern const struct dpl_device_ops dpl_device_host;

/* An open device: the table and its context. */
typedef struct dpl_device dpl_device;

/*
 * dpl_device_open - check `ops` (abi_version, size, mandatory members),
 * allocate its context and call init. `p` may be NULL (index 0, no
 * options). On success *out owns the device (dpl_device_close).
 * Errors: DPL_EABI for a table of another ABI version or one too short
 * for its mandatory members, DPL_EINVAL for a table missing a mandatory
 * member (named in dpl_last_error()), DPL_ENOMEM, or init's error.
 * Blocks as init does. Thread-safe.
 */
DPL_EXTERN int dpl_device_open(const struct dpl_device_ops *ops,
			       const struct dpl_device_params *p,
			       dpl_device **out);

/* dpl_device_close - fini and free; NULL is a no-op. */
DPL_EXTERN void dpl_device_close(dpl_device *d);

/* The table a device was opened with. */
DPL_EXTERN const struct dpl_device_ops *dpl_device_ops(const dpl_device *d);

/*
 * dpl_device_context - the backend's private context of an open device
 * (the ctx_size bytes every ops call gets), for the accessors a backend's
 * own header offers on it (dpl/device_cuda.h: the stream a stage queues
 * its work on). Its layout is the backend's alone; check dpl_device_ops()
 * first. Owned by the device until dpl_device_close. Thread-safe; NULL
 * for NULL.
 */
DPL_EXTERN void *dpl_device_context(const dpl_device *d);

/*
 * dpl_device_alloc / dpl_device_free / dpl_device_copy - the table's
 * alloc, free and copy on the device's context, with the same contracts
 * (alloc uses the device's own memory kind). For trainers that want their
 * state in the runner's memory.
 */
DPL_EXTERN int dpl_device_alloc(dpl_device *d, size_t bytes, void **out);
DPL_EXTERN void dpl_device_free(dpl_device *d, void *ptr);
DPL_EXTERN int dpl_device_copy(dpl_device *d, void *dst, const void *src,
			       size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* DPL_DEVICE_H */
