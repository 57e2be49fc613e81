/*
 * shm.c - the shared-memory transport: the ranks of a job are processes
 * of one host and meet in POSIX shared memory.
 *
 * This file holds the table, the one symbol the module exports, and the
 * members that look at a whole context: test, progress, cancel, wait.
 * The rest: shm_init.c (init, fini), shm_segment.c (segments),
 * shm_ring.c (the ring's control), shm_data.c (isend, irecv, matching),
 * shm_peers.c (liveness); the state: shm_internal.h.
 *
 * Segments. Every rank creates one segment (shm_segment.c) holding its
 * header and one inbound ring per other rank, maps every other rank's
 * segment, and unlinks its own as soon as all ranks have mapped all
 * segments (the last step of init), so no file outlives init, even when
 * a rank is killed later. Ranks meet through the host's out-of-band
 * exchange (params.oob): an allgather of pids, options and a job id
 * picked by rank 0, then one agreement (an allgather of each rank's
 * result) per step.
 *
 * Frames. A ring is a byte ring of 64-byte aligned frames; each opens
 * with a 64-byte header (struct frame) carrying its kind, a per-ring
 * sequence number, the tag and the length, and a `state` word the two
 * sides hand over with atomics:
 *
 *   POSTED   --receiver matches-->  CLAIMED --copied--> DONE (+ status)
 *   POSTED   --sender cancels-->    CANCELLED --receiver sees--> RELEASED
 *   CLAIMED  --no cross-memory attach--> PULL (sender streams DATA)
 *
 * The sender writes frames at its private tail and publishes them with a
 * release store of the ring's `tail`; it reuses space only once the
 * receiver marked the frames DONE or RELEASED (its private `reclaim`
 * position follows them). So a frame the receiver has not matched yet
 * stays in the ring: unexpected messages are kept in place, chained
 * through a receiver-owned field, and a full ring is back-pressure
 * (isend returns DPL_EAGAIN); nothing is dropped and nothing is
 * allocated on the data path.
 *
 *  - EAGER (length <= the eager limit): the payload follows the header;
 *    the receiver copies it out when it matches.
 *  - RTS (longer): the header carries the sender's buffer address; the
 *    receiver copies straight from the sender's memory with one
 *    process_vm_readv (cross-memory attach, a single copy). Where that
 *    is not permitted, the receiver sets PULL and the sender streams the
 *    message through the ring as DATA frames (two copies).
 *  - PAD fills the end of the ring when a frame does not fit there.
 *  - DRTS is an RTS of device memory, for a context with a device hook
 *    (ctx.dev; cudaipc's, NULL here): its payload is the hook's export
 *    of the buffer; the receiver's hook copies from it and the frame
 *    stays CLAIMED until that copy is done. Plain shm never sends one
 *    (its table does not take DPL_MEM_CUDA) and ends one it is sent
 *    with DPL_EIO on both sides.
 *
 * A send completes when its frame turns DONE, with the receiver's
 * status: a length mismatch is DPL_ETRUNC on both sides and nothing is
 * copied; later messages are unaffected. Matching is exact on (sender,
 * tag), in ring order, against receives kept in posting order, so
 * messages of one sender with one tag match in order.
 *
 * Liveness. Each header has a `closed` flag (set by fini), a heartbeat
 * (refreshed by progress and wait) and the owner's pid, watched through
 * a pidfd where the kernel has them (kill(pid, 0) otherwise). Progress
 * and wait look at them every LIVENESS_PERIOD_NS, so a rank that exits,
 * crashes or finalises is DPL_EPEER for the others within that period of
 * their next progress; a rank whose heartbeat stops for the liveness
 * timeout (timeout_ms) counts as failed too.
 *
 * Waiting. wait spins for spin_us, then sleeps on the doorbell futex in
 * its own header; writers ring it after publishing a frame or finishing
 * one when the owner says it sleeps (a seq_cst fence on both sides).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <dpl/backend.h>
#include <dpl/transport_shm.h>

#include "shm_internal.h"

/* ---- test, progress, cancel, wait ------------------------------------ */

int dpl__shm_test(void *vctx, void *vreq)
{
	struct req *r = vreq;

	return r->status;
}

int dpl__shm_progress(void *vctx)
{
	struct ctx *c = vctx;
	uint64_t n;
	uint32_t q;

	for (q = 0; q < c->world; q++) {
		struct peer *p = &c->peer[q];

		if (q == c->rank || p->dead)
			continue;
		dpl__shm_progress_in(c, q);
		if (!p->dead)
			dpl__shm_complete_sends(c, p);
	}
	tick_liveness(c);
	n = c->completions;
	c->completions = 0;
	return n > INT_MAX ? INT_MAX : (int)n;
}

int dpl__shm_cancel(void *vctx, void *vreq)
{
	struct ctx *c = vctx;
	struct req *r = vreq;
	struct peer *p;

	if (r == NULL || r->magic != REQ_LIVE || r->status != DPL_EAGAIN)
		return dpl_set_error(DPL_EINVAL, "shm: cancel of a request "
				     "that is not pending");
	p = &c->peer[r->peer];
	if (r->where == L_POSTED) {
		/* Matched receives (pulls, and device copies in flight,
		 * whose frame is claimed) finish on their own. */
		l_del(&p->posted, r);
		finish(c, r, DPL_ECANCELED);
		return 0;
	}
	if (r->where == L_INFLIGHT) {
		struct frame *f = frame_at(p->oring, c->mask, r->pos);
		uint32_t want = S_POSTED;

		if (atomic_compare_exchange_strong_explicit(
			    &f->state, &want, S_CANCELLED,
			    memory_order_acq_rel, memory_order_acquire)) {
			p->shadow[(r->pos & c->mask) / FRAME] = NULL;
			l_del(&p->inflight, r);
			r->pos = POS_NONE;
			finish(c, r, DPL_ECANCELED);
			atomic_fetch_add_explicit(&p->octl->cancels, 1,
						  memory_order_seq_cst);
			dpl__shm_ring_if_asleep(p->hdr);
		}
	}
	return 0;
}

/* Whether anything arrived or finished since the last progress. */
static bool anything_new(struct ctx *c)
{
	uint32_t q;

	if (c->completions > 0)
		return true;
	for (q = 0; q < c->world; q++) {
		struct peer *p = &c->peer[q];

		if (q == c->rank || p->dead)
			continue;
		if (p->copies.head != NULL) /* a device copy to look at */
			return true;
		if (atomic_load_explicit(&p->ictl->tail,
					 memory_order_relaxed) != p->iscan ||
		    atomic_load_explicit(&p->octl->done,
					 memory_order_relaxed) != p->odone ||
		    atomic_load_explicit(&p->ictl->cancels,
					 memory_order_relaxed) != p->icancels ||
		    atomic_load_explicit(&p->hdr->closed,
					 memory_order_relaxed))
			return true;
	}
	return false;
}

int dpl__shm_wait(void *vctx, uint64_t timeout_ns)
{
	struct ctx *c = vctx;
	uint64_t start = dpl_clock_ns(), now = start, end, nap;
	struct timespec ts;
	uint32_t seen;
	int i;

	if (timeout_ns > UINT64_C(3600000000000))
		timeout_ns = UINT64_C(3600000000000);
	end = start + timeout_ns;
	/* Spin a little: a reply is often a microsecond away. */
	while (now - start < c->spin_ns && now < end) {
		for (i = 0; i < 64; i++) {
			if (anything_new(c))
				return 0;
			cpu_relax();
		}
		now = dpl_clock_ns();
	}
	if (now >= end)
		return 0;
	dpl__shm_maybe_check_liveness(c);
	atomic_store_explicit(&c->hdr->sleeping, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	seen = atomic_load_explicit(&c->hdr->doorbell, memory_order_relaxed);
	if (!anything_new(c)) {
		/* Wake up at least every liveness period to look at peers. */
		nap = end - now;
		if (nap > LIVENESS_PERIOD_NS)
			nap = LIVENESS_PERIOD_NS;
		ts.tv_sec = (time_t)(nap / 1000000000u);
		ts.tv_nsec = (long)(nap % 1000000000u);
		syscall(SYS_futex, (uint32_t *)&c->hdr->doorbell, FUTEX_WAIT,
			seen, &ts, NULL, 0);
	}
	atomic_store_explicit(&c->hdr->sleeping, 0, memory_order_relaxed);
	dpl__shm_maybe_check_liveness(c);
	return 0;
}

/* Built into dpl_transport_cudaipc too, which has its own table. */
#ifndef DPL__SHM_NO_TABLE
DPL_EXTERN const struct dpl_transport_ops dpl_transport_shm = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "shm",
	.caps = DPL_TRANSPORT_CAP_PEER_FAILURE,
	.ctx_size = sizeof(struct ctx),
	.req_size = sizeof(struct req),
	.init = dpl__shm_init,
	.fini = dpl__shm_fini,
	.isend = dpl__shm_isend,
	.irecv = dpl__shm_irecv,
	.test = dpl__shm_test,
	.progress = dpl__shm_progress,
	.cancel = dpl__shm_cancel,
	.wait = dpl__shm_wait,
};

DPL_TRANSPORT_PLUGIN(dpl_transport_shm);
#endif
