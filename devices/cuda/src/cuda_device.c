/*
 * cuda_device.c - the CUDA device table (dpl/device_cuda.h): memory,
 * copies and events through the CUDA runtime, the sum kernels in
 * cuda_sum.cu. Every call makes the context's device current first.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/backend.h>
#include <dpl/device_cuda.h>

#include "cuda_internal.h"

_Static_assert(DPL__CUDA_F32 == DPL_DTYPE_F32 &&
		       DPL__CUDA_F64 == DPL_DTYPE_F64 &&
		       DPL__CUDA_BF16 == DPL_DTYPE_BF16 &&
		       DPL__CUDA_F16 == DPL_DTYPE_F16,
	       "the kernels' dtype numbers are enum dpl_dtype's");

/* The context the core allocates (ctx_size bytes, zeroed). */
struct cuda_ctx {
	int ordinal;
	bool own_stream;
	unsigned event_flags;
	cudaStream_t stream;
};

enum { EV_LOCAL, EV_INTERPROCESS };
enum { STREAM_OWN, STREAM_LEGACY };

static int cuda_error(int code, const char *what, cudaError_t e)
{
	return dpl_set_error(code, "device cuda: %s: %s (%s)", what,
			     cudaGetErrorName(e), cudaGetErrorString(e));
}

/* The runtime's answer to "is there a CUDA device at all": no GPU and no
 * driver are the absence DPL_ENOENT stands for. */
static int count_devices(int *n)
{
	cudaError_t e = cudaGetDeviceCount(n);

	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
		(void)cudaGetLastError();
		return cuda_error(DPL_ENOENT, "no CUDA device in this process "
					      "(cudaGetDeviceCount)", e);
	}
	if (e != cudaSuccess)
		return cuda_error(DPL_EIO, "cudaGetDeviceCount", e);
	if (*n <= 0)
		return dpl_set_error(DPL_ENOENT, "device cuda: no CUDA device "
						 "in this process (0 seen)");
	return 0;
}

static int use(const struct cuda_ctx *c)
{
	cudaError_t e = cudaSetDevice(c->ordinal);

	return e == cudaSuccess ? 0 : cuda_error(DPL_EIO, "cudaSetDevice", e);
}

/* Wait for the stream; `what` names the work waited for. */
static int drain(const struct cuda_ctx *c, const char *what)
{
	cudaError_t e = cudaStreamSynchronize(c->stream);

	return e == cudaSuccess ? 0 : cuda_error(DPL_EIO, what, e);
}

static int cuda_init(void *ctx, const struct dpl_device_params *p)
{
	static const char *const events[] = {"local", "interprocess", NULL};
	static const char *const streams[] = {"own", "legacy", NULL};
	struct cuda_ctx *c = ctx;
	uint32_t ev = EV_LOCAL, st = STREAM_OWN;
	const struct dpl_option opts[] = {
		{"events", DPL_OPT_ENUM, &ev, 0, 0, 0, events, NULL},
		{"stream", DPL_OPT_ENUM, &st, 0, 0, 0, streams, NULL},
	};
	cudaError_t e;
	int n = 0, rc;

	rc = dpl_options_parse("device cuda", p->options, opts,
			       sizeof opts / sizeof opts[0]);
	if (rc != 0)
		return rc;
	if ((rc = count_devices(&n)) != 0)
		return rc;
	if (p->index >= (uint32_t)n)
		return dpl_set_error(DPL_EINVAL, "device cuda: index %u, and "
				     "this process sees %d device%s (0 to %d)",
				     p->index, n, n == 1 ? "" : "s", n - 1);
	c->ordinal = (int)p->index;
	c->event_flags = cudaEventDisableTiming |
			 (ev == EV_INTERPROCESS ? cudaEventInterprocess : 0u);
	if ((rc = use(c)) != 0)
		return rc;
	if (st == STREAM_LEGACY) {
		c->stream = cudaStreamLegacy;
		return 0;
	}
	e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
	if (e != cudaSuccess)
		return cuda_error(e == cudaErrorMemoryAllocation ? DPL_ENOMEM
								 : DPL_EIO,
				  "cudaStreamCreateWithFlags", e);
	c->own_stream = true;
	return 0;
}

static void cuda_fini(void *ctx)
{
	struct cuda_ctx *c = ctx;

	if (use(c) != 0)
		return;
	/* Work still queued finishes before the stream goes. */
	(void)cudaStreamSynchronize(c->stream);
	if (c->own_stream)
		(void)cudaStreamDestroy(c->stream);
	c->own_stream = false;
}

static int cuda_alloc(void *ctx, uint32_t mem, size_t bytes, void **out)
{
	struct cuda_ctx *c = ctx;
	const char *fn = mem == DPL_MEM_CUDA ? "cudaMalloc" : "cudaMallocHost";
	void *ptr = NULL;
	cudaError_t e;
	int rc;

	if (mem != DPL_MEM_CUDA && mem != DPL_MEM_HOST)
		return dpl_set_error(DPL_ENOTSUP, "device cuda: memory kind "
				     "%u", mem);
	if (bytes == 0)
		return dpl_set_error(DPL_EINVAL, "device cuda: alloc of 0 "
						 "bytes");
	if ((rc = use(c)) != 0)
		return rc;
	e = mem == DPL_MEM_CUDA ? cudaMalloc(&ptr, bytes)
				: cudaMallocHost(&ptr, bytes);
	if (e == cudaErrorMemoryAllocation) {
		(void)cudaGetLastError(); /* not sticky: clear it */
		return dpl_set_error(DPL_ENOMEM, "device cuda: %s of %zu "
				     "bytes: out of memory", fn, bytes);
	}
	if (e != cudaSuccess)
		return cuda_error(DPL_EIO, fn, e);
	*out = ptr;
	return 0;
}

static void cuda_free(void *ctx, uint32_t mem, void *ptr)
{
	if (ptr == NULL || use(ctx) != 0)
		return;
	if (mem == DPL_MEM_CUDA)
		(void)cudaFree(ptr);
	else if (mem == DPL_MEM_HOST)
		(void)cudaFreeHost(ptr);
}

static int cuda_copy(void *ctx, void *dst, uint32_t dmem, const void *src,
		     uint32_t smem, size_t bytes)
{
	struct cuda_ctx *c = ctx;
	cudaError_t e;
	int rc;

	if ((dmem != DPL_MEM_CUDA && dmem != DPL_MEM_HOST) ||
	    (smem != DPL_MEM_CUDA && smem != DPL_MEM_HOST))
		return dpl_set_error(DPL_ENOTSUP, "device cuda: copy from "
				     "kind %u to kind %u", smem, dmem);
	if (bytes == 0)
		return 0;
	if ((rc = use(c)) != 0)
		return rc;
	if (dmem == DPL_MEM_HOST && smem == DPL_MEM_HOST) {
		/* Ordered after the queued work, which may write either. */
		if ((rc = drain(c, "cudaStreamSynchronize before a host "
				   "copy")) != 0)
			return rc;
		memcpy(dst, src, bytes);
		return 0;
	}
	e = cudaMemcpyAsync(dst, src, bytes,
			    dmem == DPL_MEM_CUDA
				    ? (smem == DPL_MEM_CUDA
					       ? cudaMemcpyDeviceToDevice
					       : cudaMemcpyHostToDevice)
				    : cudaMemcpyDeviceToHost,
			    c->stream);
	if (e != cudaSuccess)
		return cuda_error(DPL_EIO, "cudaMemcpyAsync", e);
	return drain(c, "cudaStreamSynchronize after a copy");
}

static int cuda_sum(void *ctx, void *dst, const void *src, size_t count,
		    uint32_t dtype)
{
	struct cuda_ctx *c = ctx;
	cudaError_t e;
	int rc;

	if (dtype >= DPL_DTYPE__COUNT)
		return dpl_set_error(DPL_ENOTSUP, "device cuda: dtype %u",
				     dtype);
	if (count == 0)
		return 0;
	if ((rc = use(c)) != 0)
		return rc;
	e = (cudaError_t)dpl__cuda_sum_launch(c->stream, dst, src, count,
					      dtype);
	if (e != cudaSuccess)
		return cuda_error(DPL_EIO, "the sum kernel's launch", e);
	return drain(c, "cudaStreamSynchronize after the sum kernel");
}

static int cuda_event_create(void *ctx, void *ev)
{
	struct cuda_ctx *c = ctx;
	cudaError_t e;
	int rc;

	if ((rc = use(c)) != 0)
		return rc;
	e = cudaEventCreateWithFlags((cudaEvent_t *)ev, c->event_flags);
	if (e == cudaErrorMemoryAllocation)
		return cuda_error(DPL_ENOMEM, "cudaEventCreateWithFlags", e);
	return e == cudaSuccess
		       ? 0
		       : cuda_error(DPL_EIO, "cudaEventCreateWithFlags", e);
}

static void cuda_event_destroy(void *ctx, void *ev)
{
	if (use(ctx) == 0)
		(void)cudaEventDestroy(*(cudaEvent_t *)ev);
}

static int cuda_event_record(void *ctx, void *ev)
{
	struct cuda_ctx *c = ctx;
	cudaError_t e;
	int rc;

	if ((rc = use(c)) != 0)
		return rc;
	e = cudaEventRecord(*(cudaEvent_t *)ev, c->stream);
	return e == cudaSuccess ? 0
				: cuda_error(DPL_EIO, "cudaEventRecord", e);
}

static int cuda_event_query(void *ctx, void *ev)
{
	cudaError_t e;
	int rc;

	if ((rc = use(ctx)) != 0)
		return rc;
	e = cudaEventQuery(*(cudaEvent_t *)ev);
	if (e == cudaSuccess)
		return 0;
	if (e == cudaErrorNotReady) {
		(void)cudaGetLastError(); /* not an error: clear it */
		return DPL_EAGAIN;
	}
	return cuda_error(DPL_EIO, "cudaEventQuery", e);
}

DPL_EXTERN const struct dpl_device_ops dpl_device_cuda = {
	.abi_version = DPL_DEVICE_ABI_VERSION,
	.size = sizeof(struct dpl_device_ops),
	.name = "cuda",
	.caps = DPL_DEVICE_CAP_ASYNC,
	.mem = DPL_MEM_CUDA,
	.ctx_size = sizeof(struct cuda_ctx),
	.event_size = sizeof(cudaEvent_t),
	.init = cuda_init,
	.fini = cuda_fini,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.copy = cuda_copy,
	.sum = cuda_sum,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_query = cuda_event_query,
};

static const struct cuda_ctx *ctx_of(const dpl_device *d)
{
	if (d == NULL || dpl_device_ops(d) != &dpl_device_cuda) {
		dpl_set_error(DPL_EINVAL, "device cuda: %s",
			      d == NULL ? "no device" : "not a CUDA device");
		return NULL;
	}
	return dpl_device_context(d);
}

int dpl_device_cuda_stream(const dpl_device *d, cudaStream_t *out)
{
	const struct cuda_ctx *c = ctx_of(d);

	if (c == NULL)
		return DPL_EINVAL;
	*out = c->stream;
	return 0;
}

int dpl_device_cuda_ordinal(const dpl_device *d, int *out)
{
	const struct cuda_ctx *c = ctx_of(d);

	if (c == NULL)
		return DPL_EINVAL;
	*out = c->ordinal;
	return 0;
}

int dpl_device_cuda_local_index(uint32_t *out)
{
	const char *v = getenv("LOCAL_RANK");
	unsigned long r = 0;
	char *end = NULL;
	int n = 0, rc;

	if (v != NULL) {
		errno = 0;
		r = strtoul(v, &end, 10);
		if (v[0] < '0' || v[0] > '9' || *end != '\0' ||
		    errno == ERANGE || r > UINT32_MAX)
			return dpl_set_error(DPL_EINVAL, "device cuda: "
					     "LOCAL_RANK='%s' is not a rank "
					     "number", v);
	}
	if ((rc = count_devices(&n)) != 0)
		return rc;
	*out = (uint32_t)(r % (unsigned long)n);
	return 0;
}
