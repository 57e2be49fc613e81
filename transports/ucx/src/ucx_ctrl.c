/*
 * ucx_ctrl.c - the UCX transport's bookkeeping beside the data path:
 * pending lists, peer failure, the control messages (hello, heartbeat,
 * goodbye) and progress with its liveness sweep.
 *
 * Peer failure. UCX reports failed TCP connections through the endpoint
 * error handler (even in UCP_ERR_HANDLING_MODE_NONE in 1.13); shared
 * memory reports nothing. So progress also runs a liveness sweep every
 * SWEEP_NS: a peer on this host whose process is gone (checked through
 * /proc against the pid and start time it announced) is dead at once, a
 * peer that sent nothing, not even a heartbeat, for the liveness timeout
 * is dead, and a peer that said goodbye (fini) is dead. A dead peer's
 * pending requests complete with DPL_EPEER and new posts to it fail.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ucx_internal.h"

/* ---- pending lists ---------------------------------------------------- */

void dpl__ucx_link_req(struct peer *p, struct ureq *r)
{
	r->next = NULL;
	r->prev = p->tail;
	if (p->tail)
		p->tail->next = r;
	else
		p->head = r;
	p->tail = r;
	r->linked = true;
}

void dpl__ucx_unlink_req(struct peer *p, struct ureq *r)
{
	if (!r->linked)
		return;
	if (r->prev)
		r->prev->next = r->next;
	else
		p->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		p->tail = r->prev;
	r->prev = r->next = NULL;
	r->linked = false;
}

void dpl__ucx_ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct peer *p = arg;

	if (p->failed == UCS_OK)
		p->failed = status;
}

/* ---- peer failure ----------------------------------------------------- */

/* Let go of a UCX request that may still be running: a pending receive
 * is cancelled; UCX frees the request once it has completed. */
void dpl__ucx_release_ucp(struct peer *p, void *ucp, bool recv)
{
	if (ucp == NULL)
		return;
	if (recv && ucp_request_check_status(ucp) == UCS_INPROGRESS)
		ucp_request_cancel(p->w, ucp);
	ucp_request_free(ucp);
}

/*
 * Progress p's worker until UCX request `ucp` has completed or the
 * monotonic clock passed `end`. A receive matched to a rendezvous
 * message keeps UCX busy after it was cancelled: with cross-memory attach
 * its data is fetched by local copies queued on the endpoint, which write
 * into the receive buffer, and UCX 1.13 aborts when a worker is destroyed
 * with such copies still queued (ucs_arbiter_group_is_empty). The copies
 * end, with the data or an error, whatever the peer does, and the request
 * completes after the last one. Returns whether it completed.
 */
bool dpl__ucx_settle(struct peer *p, void *ucp, uint64_t end)
{
	while (ucp_request_check_status(ucp) == UCS_INPROGRESS) {
		if (dpl_clock_ns() > end)
			return false;
		ucp_worker_progress(p->w);
	}
	return true;
}

/* Settle every pending receive of p that is still running. */
void dpl__ucx_settle_recvs(struct peer *p, uint64_t end)
{
	struct ureq *r;

	for (r = p->head; r != NULL; r = r->next)
		if (r->recv && r->ucp != NULL &&
		    !dpl__ucx_settle(p, r->ucp, end))
			return;
}

/*
 * What a peer sent before it died may still sit in our socket or shared
 * memory queue: take it in before failing anything, so that messages a
 * rank sent just before it left still arrive.
 */
void dpl__ucx_drain_worker(struct peer *p)
{
	uint64_t end = dpl_clock_ns() + DRAIN_NS;
	int idle = 0;

	while (idle < DRAIN_IDLE_PASSES && dpl_clock_ns() < end)
		idle = ucp_worker_progress(p->w) ? 0 : idle + 1;
}

/*
 * Mark peer p dead: its pending requests complete with DPL_EPEER (those
 * UCX already finished keep their result for test) and later posts fail.
 * Never called from inside a UCX callback.
 */
void dpl__ucx_peer_fail(struct ctx *c, struct peer *p, const char *fmt, ...)
{
	struct ureq *r, *next;
	va_list ap;

	if (p->dead)
		return;
	p->dead = true;
	va_start(ap, fmt);
	vsnprintf(p->why, sizeof p->why, fmt, ap);
	va_end(ap);
	dpl__ucx_drain_worker(p);
	/* What is still pending now fails. A receive that is already
	 * fetching a rendezvous message cannot be cancelled; the worker is
	 * settled before its buffer is handed back, so that UCX writes
	 * nothing into it afterwards. */
	for (r = p->head; r != NULL; r = r->next) {
		r->failing = ucp_request_check_status(r->ucp) == UCS_INPROGRESS;
		if (r->failing && r->recv)
			ucp_request_cancel(p->w, r->ucp);
	}
	dpl__ucx_settle_recvs(p, dpl_clock_ns() + DRAIN_NS);
	for (r = p->head; r != NULL; r = next) {
		next = r->next;
		if (!r->failing)
			continue; /* finished first: test reports it */
		dpl__ucx_release_ucp(p, r->ucp, r->recv);
		r->ucp = NULL;
		r->status = DPL_EPEER;
		dpl__ucx_unlink_req(p, r);
		c->ncomp++;
	}
	dpl__ucx_release_ucp(p, p->crreq, true);
	p->crreq = NULL;
}

int dpl__ucx_peer_error(const struct peer *p)
{
	return dpl_set_error(DPL_EPEER, "ucx: rank %u failed: %s",
			     p->rank, p->why);
}

/* ---- control messages ------------------------------------------------- */

static uint64_t ctrl_word(enum ctrl_type t, uint32_t rank)
{
	return CTRL_MAGIC << 40 | (uint64_t)t << 32 | rank;
}

/* Post a control send from *buf; *req holds UCX's request, if any. */
void dpl__ucx_ctrl_send(struct ctx *c, struct peer *p, enum ctrl_type t,
			uint64_t *buf, void **req)
{
	ucp_request_param_t prm;
	void *sp;

	memset(&prm, 0, sizeof prm);
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
	prm.memory_type = UCS_MEMORY_TYPE_HOST;
	*buf = ctrl_word(t, c->rank);
	sp = ucp_tag_send_nbx(p->ep, buf, sizeof *buf, CTRL_TAG, &prm);
	if (UCS_PTR_IS_ERR(sp)) {
		if (p->failed == UCS_OK)
			p->failed = UCS_PTR_STATUS(sp);
		*req = NULL;
	} else {
		*req = sp; /* NULL when done at once */
	}
}

/* Reap a finished control send. */
void dpl__ucx_ctrl_reap(void **req)
{
	if (*req != NULL && ucp_request_check_status(*req) != UCS_INPROGRESS) {
		ucp_request_free(*req);
		*req = NULL;
	}
}

/* A control message arrived (or its receive ended): note it for
 * dpl__ucx_ctrl_poll, so that progress need not ask UCX about it every
 * time. */
static void ctrl_cb(void *request, ucs_status_t status,
		    const ucp_tag_recv_info_t *info, void *user_data)
{
	struct peer *p = user_data;
	struct recv_note *note = request;

	note->length = status == UCS_OK ? info->length : 0;
	p->ctrl_ready = true;
}

void dpl__ucx_ctrl_post_recv(struct ctx *c, struct peer *p)
{
	ucp_request_param_t prm;
	void *rp;

	memset(&prm, 0, sizeof prm);
	prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL |
			   UCP_OP_ATTR_FIELD_CALLBACK |
			   UCP_OP_ATTR_FIELD_USER_DATA |
			   UCP_OP_ATTR_FIELD_MEMORY_TYPE;
	prm.cb.recv = ctrl_cb;
	prm.user_data = p;
	prm.memory_type = UCS_MEMORY_TYPE_HOST;
	p->ctrl_ready = false;
	rp = ucp_tag_recv_nbx(p->w, &p->crbuf, sizeof p->crbuf, CTRL_TAG,
			      UINT64_MAX, &prm);
	if (UCS_PTR_IS_ERR(rp)) {
		if (p->failed == UCS_OK)
			p->failed = UCS_PTR_STATUS(rp);
		p->crreq = NULL;
	} else {
		p->crreq = rp;
	}
}

/* Handle arrived control messages of p and keep one receive posted. */
void dpl__ucx_ctrl_poll(struct ctx *c, struct peer *p, uint64_t now)
{
	int n;

	for (n = 0; n < CTRL_BURST && p->crreq != NULL && p->ctrl_ready;
	     n++) {
		size_t got = ((const struct recv_note *)p->crreq)->length;
		ucs_status_t st = ucp_request_check_status(p->crreq);
		uint64_t w;

		ucp_request_free(p->crreq);
		p->crreq = NULL;
		w = p->crbuf;
		if (st != UCS_OK || got != sizeof w ||
		    w >> 40 != CTRL_MAGIC || (uint32_t)w != p->rank) {
			dpl__ucx_peer_fail(c, p, "malformed control message "
					   "(%s)", ucs_status_string(st));
			return;
		}
		p->heard_ns = now;
		switch ((enum ctrl_type)((w >> 32) & 0xff)) {
		case CTRL_HELLO:
			p->hello = true;
			break;
		case CTRL_BEAT:
			break;
		case CTRL_BYE:
			dpl__ucx_peer_fail(c, p, "it left the job (fini)");
			return;
		default:
			dpl__ucx_peer_fail(c, p, "unknown control message "
					   "%#llx", (unsigned long long)w);
			return;
		}
		dpl__ucx_ctrl_post_recv(c, p);
	}
}

/* ---- progress and liveness -------------------------------------------- */

/* The liveness sweep: pid checks, heartbeats, silence deadlines. */
static void sweep(struct ctx *c, uint64_t now)
{
	uint32_t j;

	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];

		if (j == c->rank || p->dead || p->w == NULL)
			continue;
		if (p->pid_check && dpl__ucx_proc_state(&p->id) == 0) {
			dpl__ucx_peer_fail(c, p, "its process (pid %u) is "
					   "gone", p->id.pid);
			continue;
		}
		if (now - p->heard_ns > c->liveness_ns) {
			unsigned long long ms = (now - p->heard_ns) / MS;

			dpl__ucx_peer_fail(c, p, "silent for %llu ms "
					   "(liveness timeout %u ms)", ms,
					   c->timeout_ms);
			continue;
		}
		dpl__ucx_ctrl_reap(&p->beat_req);
		if (p->beat_req == NULL &&
		    now - p->beat_ns >= c->beat_every_ns) {
			dpl__ucx_ctrl_send(c, p, CTRL_BEAT, &p->beat_buf,
					   &p->beat_req);
			p->beat_ns = now;
		}
	}
}

/* One pass over every worker; handles what the pass brought. */
static void pass(struct ctx *c, uint64_t now)
{
	uint32_t j;

	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];

		if (p->w == NULL)
			continue;
		ucp_worker_progress(p->w);
		if (p->dead)
			continue;
		if (p->ctrl_ready)
			dpl__ucx_ctrl_poll(c, p, now);
		if (p->failed != UCS_OK)
			dpl__ucx_peer_fail(c, p, "UCX reported %s",
					   ucs_status_string(p->failed));
	}
}

/*
 * The clock is read on every HOUSE_EVERY-th call only: a waiting caller
 * spins on progress, and the read would be a good part of each turn.
 * That call also runs the liveness sweep when it is due.
 */
int dpl__ucx_progress(void *vctx)
{
	struct ctx *c = vctx;
	bool house = (++c->passes & (HOUSE_EVERY - 1)) == 0;
	uint64_t now = c->last_progress_ns, n, gap;
	uint32_t j;

	if (house) {
		now = dpl_clock_ns();
		/* Time this rank itself spent away from progress does not
		 * count against its peers: their messages could not be
		 * read. */
		gap = now - c->last_progress_ns;
		if (gap > c->beat_every_ns)
			for (j = 0; j < c->world; j++)
				if (c->peers[j].heard_ns + gap <= now)
					c->peers[j].heard_ns += gap;
		c->last_progress_ns = now;
	}
	pass(c, now);
	if (house && now >= c->next_sweep_ns) {
		c->next_sweep_ns = now + (c->beat_every_ns < SWEEP_NS
						  ? c->beat_every_ns
						  : SWEEP_NS);
		sweep(c, now);
	}
	n = c->ncomp;
	c->ncomp = 0;
	return n > INT_MAX ? INT_MAX : (int)n;
}
