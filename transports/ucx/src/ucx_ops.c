/*
 * ucx_ops.c - the UCX transport's table: UCP tag messages between the
 * processes of a job, on one host (shared memory, cross-memory attach) or
 * many (TCP).
 *
 * Matching. The contract matches on (sender, 60-bit tag), but a UCP tag
 * is 64 bits with no room for a sender rank beside a 60-bit tag. So each
 * rank runs one UCP worker per peer: worker j of rank i talks only to
 * worker i of rank j, and a receive from j is posted on worker j with the
 * caller's tag and a full mask. UCX then matches exactly, in posting
 * order, with its own eager and rendezvous protocols. The top four tag
 * bits carry the message kind: 0 for the caller's messages, 1 for the
 * transport's own control messages (hello, heartbeat, goodbye).
 *
 * Joining. init exchanges the workers' addresses through the host's
 * out-of-band exchange (params.oob) and opens no rendezvous of its own
 * (ucx_xchg.c), then says hello on every pair and meets the others at
 * the oob's barrier (ucx_setup.c).
 *
 * The data path (ucx_data.c) and the liveness sweep that finds dead
 * peers (ucx_ctrl.c) say how requests and peer failure work.
 *
 * Waiting. wait sleeps in ppoll on the workers' event descriptors, no
 * longer than until the next liveness sweep.
 */
#include "ucx_internal.h"

DPL_EXTERN const struct dpl_transport_ops dpl_transport_ucx = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "ucx",
	.caps = DPL_TRANSPORT_CAP_PEER_FAILURE,
	.ctx_size = sizeof(struct ctx),
	.req_size = sizeof(struct ureq),
	.init = dpl__ucx_init,
	.fini = dpl__ucx_fini,
	.isend = dpl__ucx_isend,
	.irecv = dpl__ucx_irecv,
	.test = dpl__ucx_test,
	.progress = dpl__ucx_progress,
	.cancel = dpl__ucx_cancel,
	.wait = dpl__ucx_wait,
};

DPL_TRANSPORT_PLUGIN(dpl_transport_ucx);
