/*
 * nccl_cuda.c - the shim's seam over the real NCCL and CUDA runtime.
 * The only file of the module that includes nccl.h or the CUDA headers.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <string.h>

#include <dpl/backend.h>
#include <dpl/device.h>

#include "nccl_seam.h"

_Static_assert(sizeof(ncclUniqueId) == NCCL_SEAM_ID_BYTES,
	       "ncclUniqueId size");

static int cuda_fail(const char *call, cudaError_t e)
{
	/* No driver or no device: the resource is absent. */
	int rc = (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
			 ? DPL_ENOENT : DPL_EIO;

	return dpl_set_error(rc, "nccl: %s: %s (%s)", call,
			     cudaGetErrorString(e), cudaGetErrorName(e));
}

static int nccl_fail(const char *call, ncclResult_t r)
{
	int rc = r == ncclSystemError || r == ncclRemoteError ? DPL_EPEER
		 : r == ncclInvalidArgument || r == ncclInvalidUsage
			 ? DPL_EINVAL : DPL_EIO;

	return dpl_set_error(rc, "nccl: %s: %s", call, ncclGetErrorString(r));
}

static int stream_create(void **s)
{
	cudaError_t e = cudaStreamCreateWithFlags((cudaStream_t *)s,
						  cudaStreamNonBlocking);

	return e == cudaSuccess ? 0 : cuda_fail("cudaStreamCreateWithFlags", e);
}

static void stream_destroy(void *s)
{
	cudaStreamDestroy(s);
}

static int event_create(void **ev)
{
	cudaError_t e = cudaEventCreateWithFlags((cudaEvent_t *)ev,
						 cudaEventDisableTiming);

	return e == cudaSuccess ? 0 : cuda_fail("cudaEventCreateWithFlags", e);
}

static void event_destroy(void *ev)
{
	cudaEventDestroy(ev);
}

static int event_record(void *ev, void *s)
{
	cudaError_t e = cudaEventRecord(ev, s);

	return e == cudaSuccess ? 0 : cuda_fail("cudaEventRecord", e);
}

static int event_query(void *ev)
{
	cudaError_t e = cudaEventQuery(ev);

	if (e == cudaSuccess)
		return 0;
	if (e == cudaErrorNotReady)
		return DPL_EAGAIN;
	return cuda_fail("cudaEventQuery", e);
}

static int get_unique_id(unsigned char id[NCCL_SEAM_ID_BYTES])
{
	ncclUniqueId u;
	ncclResult_t r = ncclGetUniqueId(&u);

	if (r != ncclSuccess)
		return nccl_fail("ncclGetUniqueId", r);
	memcpy(id, &u, sizeof u);
	return 0;
}

static int comm_init_rank(void **comm, int n,
			  const unsigned char id[NCCL_SEAM_ID_BYTES], int rank)
{
	ncclUniqueId u;
	ncclResult_t r;
	int dev;
	cudaError_t e = cudaGetDevice(&dev);

	if (e != cudaSuccess)
		return cuda_fail("cudaGetDevice", e);
	memcpy(&u, id, sizeof u);
	r = ncclCommInitRank((ncclComm_t *)comm, n, u, rank);
	return r == ncclSuccess ? 0 : nccl_fail("ncclCommInitRank", r);
}

static int allreduce_sum(void *buf, size_t count, uint32_t dtype, void *comm,
			 void *s)
{
	static const ncclDataType_t map[DPL_DTYPE__COUNT] = {
		[DPL_DTYPE_F32] = ncclFloat32, [DPL_DTYPE_F64] = ncclFloat64,
		[DPL_DTYPE_BF16] = ncclBfloat16, [DPL_DTYPE_F16] = ncclFloat16,
	};
	ncclResult_t r;

	if (dtype >= DPL_DTYPE__COUNT)
		return dpl_set_error(DPL_EINVAL, "nccl: dtype %u", dtype);
	r = ncclAllReduce(buf, buf, count, map[dtype], ncclSum, comm, s);
	return r == ncclSuccess ? 0 : nccl_fail("ncclAllReduce", r);
}

static int async_error(void *comm)
{
	ncclResult_t a = ncclSuccess, r = ncclCommGetAsyncError(comm, &a);

	if (r != ncclSuccess)
		return nccl_fail("ncclCommGetAsyncError", r);
	if (a == ncclSuccess || a == ncclInProgress)
		return 0;
	return dpl_set_error(DPL_EPEER, "nccl: communicator failed: %s",
			     ncclGetErrorString(a));
}

static void comm_abort(void *comm)
{
	ncclCommAbort(comm);
}

static void comm_destroy(void *comm)
{
	ncclCommDestroy(comm);
}

const struct nccl_seam dpl__nccl_cuda_seam = {
	.stream_create = stream_create, .stream_destroy = stream_destroy,
	.event_create = event_create, .event_destroy = event_destroy,
	.event_record = event_record, .event_query = event_query,
	.get_unique_id = get_unique_id, .comm_init_rank = comm_init_rank,
	.allreduce_sum = allreduce_sum, .async_error = async_error,
	.comm_abort = comm_abort, .comm_destroy = comm_destroy,
};
