/*
 * cudaipc_cuda.c - the CUDA IPC transport's calls into the CUDA runtime
 * (the seam of cudaipc_internal.h).
 */
#include <cuda_runtime_api.h>

#include <dpl/common.h>

#include "cudaipc_internal.h"

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
		return dpl_set_error(DPL_EIO, "transport cudaipc: "
				     "cudaGetDeviceCount: %s (%s)",
				     cudaGetErrorName(e), cudaGetErrorString(e));
	if (n <= 0)
		return dpl_set_error(DPL_ENOENT, "transport cudaipc: no CUDA "
				     "device in this process (0 seen)");
	return 0;
}

const struct dpl__cudaipc_seam dpl__cudaipc_cuda = {
	.probe = cuda_probe,
};
