/*
 * inproc.c - the table of the in-process transport, the one symbol the
 * module exports (dpl/transport_inproc.h). Worlds: inproc_world.c; the
 * per-pair rings: inproc_ring.c; matching: inproc_match.c; the data
 * path: inproc_post.c; the design: inproc_internal.h.
 */
#include <dpl/backend.h>

#include "inproc_internal.h"

DPL_EXTERN const struct dpl_transport_ops dpl_transport_inproc = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "inproc",
	.caps = DPL_TRANSPORT_CAP_PEER_FAILURE | DPL_TRANSPORT_CAP_IN_PROCESS,
	.ctx_size = sizeof(struct ctx),
	.req_size = sizeof(struct ireq),
	.init = dpl__inproc_init,
	.fini = dpl__inproc_fini,
	.isend = dpl__inproc_isend,
	.irecv = dpl__inproc_irecv,
	.test = dpl__inproc_test,
	.progress = dpl__inproc_progress,
	.cancel = dpl__inproc_cancel,
	.wait = dpl__inproc_wait,
};

DPL_TRANSPORT_PLUGIN(dpl_transport_inproc);
