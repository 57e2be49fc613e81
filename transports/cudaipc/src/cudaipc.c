/*
 * cudaipc.c - the CUDA IPC transport's table: shm's members (its
 * sources are built into this library too, without shm's table), an init
 * that first asks the seam for a CUDA device, then is shm's, then checks
 * that the platform allows CUDA IPC (cudaipc_probe.c) and sets up the
 * device hook (cudaipc_dev.c), and a fini that closes it.
 */
#include <dpl/backend.h>
#include <dpl/transport_cudaipc.h>

#include "cudaipc_internal.h"

int dpl__cudaipc_init_with(const struct dpl__cudaipc_seam *seam, void *vctx,
			   const struct dpl_transport_params *p)
{
	struct dpl__cudaipc_ctx *cc = vctx;
	int rc = seam->probe();

	if (rc)
		return rc;
	rc = dpl__cudaipc_dev_init(&cc->dev, seam);
	if (rc)
		return rc;
	rc = dpl__shm_init(&cc->shm, p);
	if (rc) {
		dpl__cudaipc_dev_fini(&cc->dev);
		return rc;
	}
	/* Collective like shm's init: every rank gets here or failed in
	 * one of shm's agreements, which fail everyone. */
	rc = dpl__cudaipc_probe_ipc(seam, p);
	if (rc) {
		dpl__shm_fini(&cc->shm);
		dpl__cudaipc_dev_fini(&cc->dev);
		return rc;
	}
	cc->shm.dev = &cc->dev.hook;
	return 0;
}

void dpl__cudaipc_fini(void *vctx)
{
	struct dpl__cudaipc_ctx *cc = vctx;

	dpl__shm_fini(&cc->shm);
	dpl__cudaipc_dev_fini(&cc->dev);
}

static int cudaipc_init(void *vctx, const struct dpl_transport_params *p)
{
	return dpl__cudaipc_init_with(&dpl__cudaipc_cuda, vctx, p);
}

DPL_EXTERN const struct dpl_transport_ops dpl_transport_cudaipc = {
	DPL__CUDAIPC_TABLE("cudaipc", cudaipc_init),
};

DPL_TRANSPORT_PLUGIN(dpl_transport_cudaipc);
