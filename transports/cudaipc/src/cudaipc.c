/*
 * cudaipc.c - the CUDA IPC transport's table: shm's members (its
 * sources are built into this library too, without shm's table) and an
 * init that first asks the seam for a CUDA device.
 */
#include <dpl/backend.h>
#include <dpl/transport_cudaipc.h>

#include "../../shm/src/shm_internal.h"
#include "cudaipc_internal.h"

int dpl__cudaipc_init_with(const struct dpl__cudaipc_seam *seam, void *vctx,
			   const struct dpl_transport_params *p)
{
	int rc = seam->probe();

	if (rc)
		return rc;
	return dpl__shm_init(vctx, p);
}

static int cudaipc_init(void *vctx, const struct dpl_transport_params *p)
{
	return dpl__cudaipc_init_with(&dpl__cudaipc_cuda, vctx, p);
}

DPL_EXTERN const struct dpl_transport_ops dpl_transport_cudaipc = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "cudaipc",
	.caps = DPL_TRANSPORT_CAP_PEER_FAILURE,
	.ctx_size = sizeof(struct ctx),
	.req_size = sizeof(struct req),
	.init = cudaipc_init,
	.fini = dpl__shm_fini,
	.isend = dpl__shm_isend,
	.irecv = dpl__shm_irecv,
	.test = dpl__shm_test,
	.progress = dpl__shm_progress,
	.cancel = dpl__shm_cancel,
	.wait = dpl__shm_wait,
};

DPL_TRANSPORT_PLUGIN(dpl_transport_cudaipc);
