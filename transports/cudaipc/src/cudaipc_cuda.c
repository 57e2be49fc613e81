/*
 * cudaipc_cuda.c - the CUDA IPC transport's calls into the CUDA runtime
 * (the seam of cudaipc_internal.h). Two driver calls the runtime has no
 * form of (an allocation's range and its buffer id) are reached through
 * cudaGetDriverEntryPointByVersion, so the library does not link
 * libcuda. None of this has run on a GPU yet.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <dpl/common.h>

#include "cudaipc_internal.h"

static int cuda_err(const char *call, cudaError_t e)
{
	(void)cudaGetLastError();
	return dpl_set_error(DPL_EIO, "transport cudaipc: %s: %s (%s)", call,
			     cudaGetErrorName(e), cudaGetErrorString(e));
}

static int cuda_probe(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
		(void)cudaGetLastError();
		return dpl_set_error(DPL_ENOENT, "transport cudaipc: no CUDA "
				     "device in this process "
				     "(cudaGetDeviceCount): %s (%s)",
				     cudaGetErrorName(e), cudaGetErrorString(e));
	}
	if (e != cudaSuccess)
		return cuda_err("cudaGetDeviceCount", e);
	if (n <= 0)
		return dpl_set_error(DPL_ENOENT, "transport cudaipc: no CUDA "
				     "device in this process (0 seen)");
	return 0;
}

static int cuda_setup(void **s, void **ev, unsigned n)
{
	cudaStream_t st;
	cudaError_t e;
	unsigned i;

	e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
	if (e != cudaSuccess)
		return cuda_err("cudaStreamCreateWithFlags", e);
	for (i = 0; i < n; i++) {
		cudaEvent_t x;

		e = cudaEventCreateWithFlags(&x, cudaEventDisableTiming);
		if (e != cudaSuccess) {
			while (i-- > 0)
				cudaEventDestroy((cudaEvent_t)ev[i]);
			cudaStreamDestroy(st);
			return cuda_err("cudaEventCreateWithFlags", e);
		}
		ev[i] = x;
	}
	*s = st;
	return 0;
}

static void cuda_teardown(void *s, void **ev, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		cudaEventDestroy((cudaEvent_t)ev[i]);
	cudaStreamDestroy((cudaStream_t)s);
}

typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef CUresult (*attr_fn)(void *, CUpointer_attribute, CUdeviceptr);

static int driver_fn(const char *name, void **fn)
{
	enum cudaDriverEntryPointQueryResult q;
	cudaError_t e = cudaGetDriverEntryPointByVersion(
		name, fn, 12000, cudaEnableDefault, &q);

	if (e != cudaSuccess)
		return cuda_err("cudaGetDriverEntryPointByVersion", e);
	if (q != cudaDriverEntryPointSuccess || *fn == NULL)
		return dpl_set_error(DPL_EIO, "transport cudaipc: the driver "
				     "has no %s", name);
	return 0;
}

/* The two driver calls, looked up once per process (pthread_once): the
 * lookup is not a cost every send should pay. */
static range_fn the_range;
static attr_fn the_attr;
static int the_rc;
static char the_why[256];
static pthread_once_t the_once = PTHREAD_ONCE_INIT;

static void find_driver_fns(void)
{
	void *range = NULL, *attr = NULL;

	if ((the_rc = driver_fn("cuMemGetAddressRange", &range)) == 0)
		the_rc = driver_fn("cuPointerGetAttribute", &attr);
	if (the_rc != 0) {
		snprintf(the_why, sizeof the_why, "%s", dpl_last_error());
		return;
	}
	/* (ISO C has no cast from void * to a function pointer.) */
	memcpy(&the_range, &range, sizeof the_range);
	memcpy(&the_attr, &attr, sizeof the_attr);
}

static int cuda_locate(const void *ptr, struct dpl__cudaipc_export *out)
{
	struct cudaPointerAttributes a;
	CUdeviceptr base = 0;
	size_t size = 0;
	unsigned long long id = 0;
	cudaError_t e;

	e = cudaPointerGetAttributes(&a, ptr);
	if (e != cudaSuccess)
		return cuda_err("cudaPointerGetAttributes", e);
	if (a.type != cudaMemoryTypeDevice)
		return dpl_set_error(DPL_EINVAL, "transport cudaipc: a "
				     "DPL_MEM_CUDA send of memory that is "
				     "not device memory");
	pthread_once(&the_once, find_driver_fns);
	if (the_rc != 0)
		return dpl_set_error(the_rc, "%s", the_why);
	if (the_range(&base, &size, (CUdeviceptr)ptr) != CUDA_SUCCESS ||
	    the_attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)ptr) !=
		    CUDA_SUCCESS)
		return dpl_set_error(DPL_EIO, "transport cudaipc: the "
				     "allocation of a device buffer is not "
				     "known to the driver");
	out->offset = (uint64_t)((CUdeviceptr)ptr - base);
	out->size = size;
	out->id = id;
	return 0;
}

static int cuda_handle(const void *base, struct dpl__cudaipc_export *out)
{
	cudaIpcMemHandle_t h;
	cudaError_t e = cudaIpcGetMemHandle(&h, (void *)base);

	if (e != cudaSuccess)
		return cuda_err("cudaIpcGetMemHandle", e);
	_Static_assert(sizeof h == DPL__CUDAIPC_HANDLE, "IPC handle size");
	memcpy(out->handle, &h, sizeof h);
	return 0;
}

static int cuda_open(const struct dpl__cudaipc_export *x, void **base)
{
	cudaIpcMemHandle_t h;
	cudaError_t e;

	memcpy(&h, x->handle, sizeof h);
	e = cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess);
	return e == cudaSuccess ? 0 : cuda_err("cudaIpcOpenMemHandle", e);
}

static void cuda_close(void *base, uint64_t size)
{
	(void)size;
	cudaIpcCloseMemHandle(base);
}

static int cuda_copy_async(void *s, void *dst, const void *src, size_t len,
			   enum dpl__cudaipc_copy kind)
{
	static const enum cudaMemcpyKind k[] = {
		[DPL__CUDAIPC_D2D] = cudaMemcpyDeviceToDevice,
		[DPL__CUDAIPC_D2H] = cudaMemcpyDeviceToHost,
		[DPL__CUDAIPC_H2D] = cudaMemcpyHostToDevice,
	};
	cudaError_t e = cudaMemcpyAsync(dst, src, len, k[kind],
					(cudaStream_t)s);

	return e == cudaSuccess ? 0 : cuda_err("cudaMemcpyAsync", e);
}

static int cuda_event_record(void *s, void *ev)
{
	cudaError_t e = cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)s);

	return e == cudaSuccess ? 0 : cuda_err("cudaEventRecord", e);
}

static int cuda_event_query(void *ev)
{
	cudaError_t e = cudaEventQuery((cudaEvent_t)ev);

	if (e == cudaErrorNotReady)
		return 0;
	return e == cudaSuccess ? 1 : cuda_err("cudaEventQuery", e);
}

static int cuda_stream_sync(void *s)
{
	cudaError_t e = cudaStreamSynchronize((cudaStream_t)s);

	return e == cudaSuccess ? 0 : cuda_err("cudaStreamSynchronize", e);
}

static int cuda_probe_alloc(size_t bytes, void **buf)
{
	cudaError_t e = cudaMalloc(buf, bytes);

	return e == cudaSuccess ? 0 : cuda_err("cudaMalloc", e);
}

static void cuda_probe_free(void *buf)
{
	cudaFree(buf);
}

const struct dpl__cudaipc_seam dpl__cudaipc_cuda = {
	.probe = cuda_probe,
	.setup = cuda_setup,
	.teardown = cuda_teardown,
	.locate = cuda_locate,
	.handle = cuda_handle,
	.open = cuda_open,
	.close = cuda_close,
	.copy_async = cuda_copy_async,
	.event_record = cuda_event_record,
	.event_query = cuda_event_query,
	.stream_sync = cuda_stream_sync,
	.probe_alloc = cuda_probe_alloc,
	.probe_free = cuda_probe_free,
};
