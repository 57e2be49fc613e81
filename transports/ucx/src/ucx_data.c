/*
 * ucx_data.c - the UCX transport's data path: posting, completion,
 * cancel and wait.
 *
 * Matching. The contract matches on (sender, 60-bit tag), but a UCP tag
 * is 64 bits with no room for a sender rank beside a 60-bit tag. So each
 * rank runs one UCP worker per peer, and a receive from j is posted on
 * worker j with the caller's tag and a full mask: UCX matches exactly,
 * in posting order, with its own eager and rendezvous protocols.
 *
 * Requests. Sends may complete at once; receives are posted with
 * UCP_OP_ATTR_FLAG_NO_IMM_CMPL and a completion callback, so that UCX
 * always hands back a request and always reports the arrived length
 * (UCX < 1.16 does not fill recv_info on immediate completion). The
 * callback notes that length in UCX's own request (request_size space)
 * and counts the completion for progress; nothing in UCX points back to
 * the caller's request storage, whose state test reads from UCX. So a
 * request UCX still holds after it was handed back (a send to a dead
 * peer) touches no caller memory. A receive completes successfully only
 * when the length equals the posted one; a longer message is UCX's
 * MESSAGE_TRUNCATED, a shorter one our own check, both DPL_ETRUNC, and
 * the endpoint stays usable.
 *
 * Arguments (peer range, tag width, buffer, memory kind) were checked by
 * dpl_transport_isend() and its siblings; this file checks only the
 * transport's own state (a dead peer).
 */
#define _GNU_SOURCE /* ppoll */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#include "ucx_internal.h"

/* ---- UCX callbacks: they only count ----------------------------------- */

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
	struct ctx *c = user_data;

	c->ncomp++;
}

static void recv_cb(void *request, ucs_status_t status,
		    const ucp_tag_recv_info_t *info, void *user_data)
{
	struct ctx *c = user_data;
	struct recv_note *note = request;

	note->length = status == UCS_OK ? info->length : 0;
	c->ncomp++;
}

/* ---- data path -------------------------------------------------------- */

static int post_error(struct ctx *c, struct peer *p, ucs_status_t st,
		      const char *what)
{
	int rc = dpl__ucx_status(st);

	if (rc == DPL_EPEER) {
		dpl__ucx_peer_fail(c, p, "UCX refused a %s: %s", what,
				   ucs_status_string(st));
		return dpl__ucx_peer_error(p);
	}
	if (rc == DPL_EAGAIN)
		return rc;
	return dpl_set_error(rc, "ucx: %s to rank %u: %s", what, p->rank,
			     ucs_status_string(st));
}

int dpl__ucx_isend(void *vctx, void *req, uint32_t peer, uint64_t tag,
		   const void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct ureq *r = req;
	ucp_request_param_t prm;
	struct peer *p;
	void *sp;

	p = &c->peers[peer];
	if (p->dead)
		return dpl__ucx_peer_error(p);
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
			   UCP_OP_ATTR_FIELD_USER_DATA |
			   UCP_OP_ATTR_FIELD_MEMORY_TYPE;
	prm.cb.send = send_cb;
	prm.user_data = c;
	prm.memory_type = UCS_MEMORY_TYPE_HOST;
	sp = ucp_tag_send_nbx(p->ep, buf, len, tag, &prm);
	if (UCS_PTR_IS_ERR(sp))
		return post_error(c, p, UCS_PTR_STATUS(sp), "send");
	r->ucp = sp;
	r->len = len;
	r->peer = peer;
	r->recv = false;
	r->linked = false;
	if (sp == NULL) {
		r->status = 0; /* done at once; no callback comes */
		c->ncomp++;
	} else {
		r->status = DPL_EAGAIN;
		dpl__ucx_link_req(p, r);
	}
	return 0;
}

/*
 * A receive from a dead peer may still take a message that arrived
 * before it died (its last sends before fini). Only whole messages are
 * taken: one that is still arriving is let go and the post fails.
 */
static int recv_from_dead(struct ctx *c, struct peer *p, struct ureq *r,
			  uint64_t tag, void *buf, size_t len,
			  const ucp_request_param_t *prm)
{
	ucp_tag_recv_info_t info;
	void *rp;

	if (ucp_tag_probe_nb(p->w, tag, UINT64_MAX, 0, &info) == NULL)
		return dpl__ucx_peer_error(p);
	rp = ucp_tag_recv_nbx(p->w, buf, len, tag, UINT64_MAX, prm);
	if (UCS_PTR_IS_ERR(rp))
		return dpl__ucx_peer_error(p);
	if (ucp_request_check_status(rp) == UCS_INPROGRESS) {
		/* a rendezvous message: its sender may have let go of the
		 * data, so it is not taken, but the fetch it started must end
		 * before the caller has the buffer back */
		ucp_request_cancel(p->w, rp);
		dpl__ucx_settle(p, rp, dpl_clock_ns() + DRAIN_NS);
		dpl__ucx_release_ucp(p, rp, true);
		return dpl__ucx_peer_error(p);
	}
	r->ucp = rp;
	r->status = DPL_EAGAIN;
	dpl__ucx_link_req(p, r);
	return 0;
}

int dpl__ucx_irecv(void *vctx, void *req, uint32_t peer, uint64_t tag,
		   void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct ureq *r = req;
	ucp_request_param_t prm;
	struct peer *p;
	void *rp;

	p = &c->peers[peer];
	prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL |
			   UCP_OP_ATTR_FIELD_CALLBACK |
			   UCP_OP_ATTR_FIELD_USER_DATA |
			   UCP_OP_ATTR_FIELD_MEMORY_TYPE;
	prm.cb.recv = recv_cb;
	prm.user_data = c;
	prm.memory_type = UCS_MEMORY_TYPE_HOST;
	r->len = len;
	r->peer = peer;
	r->recv = true;
	r->linked = false;
	if (p->dead)
		return recv_from_dead(c, p, r, tag, buf, len, &prm);
	rp = ucp_tag_recv_nbx(p->w, buf, len, tag, UINT64_MAX, &prm);
	if (UCS_PTR_IS_ERR(rp))
		return post_error(c, p, UCS_PTR_STATUS(rp), "receive");
	r->ucp = rp;
	r->status = DPL_EAGAIN;
	dpl__ucx_link_req(p, r);
	return 0;
}

/*
 * Whether peer p has left or died, looked at closely: a receive failed,
 * and the usual cause is a rendezvous message whose data the sender let
 * go of when it left (fini), or whose sender died, before this rank
 * fetched it. The goodbye then follows in p's queue and is taken in
 * here, and a vanished process shows through /proc. Bounded by drain.
 */
static bool peer_gone(struct ctx *c, struct peer *p)
{
	if (!p->dead) {
		dpl__ucx_drain_worker(p);
		if (p->ctrl_ready)
			dpl__ucx_ctrl_poll(c, p, dpl_clock_ns());
	}
	if (!p->dead && p->pid_check && dpl__ucx_proc_state(&p->id) == 0)
		dpl__ucx_peer_fail(c, p, "its process (pid %u) is gone",
				   p->id.pid);
	return p->dead;
}

int dpl__ucx_test(void *vctx, void *req)
{
	struct ctx *c = vctx;
	struct ureq *r = req;
	struct peer *p;
	ucs_status_t st;
	int rc;

	if (r->ucp == NULL) {
		if (r->status == DPL_EPEER)
			return dpl__ucx_peer_error(&c->peers[r->peer]);
		return r->status;
	}
	p = &c->peers[r->peer];
	st = ucp_request_check_status(r->ucp); /* the cheapest look */
	if (st == UCS_INPROGRESS)
		return DPL_EAGAIN;
	if (r->recv) {
		size_t got = ((const struct recv_note *)r->ucp)->length;

		rc = dpl__ucx_status(st);
		/* A message from the peer shows it alive as well as a
		 * heartbeat does; it arrived by the last progress. */
		if (rc == 0 || rc == DPL_ETRUNC)
			p->heard_ns = c->last_progress_ns;
		if (rc == 0 && got != r->len)
			rc = dpl_set_error(DPL_ETRUNC, "ucx: %zu-byte "
					   "message from rank %u into a "
					   "%zu-byte receive",
					   got, r->peer, r->len);
		else if (rc == DPL_ETRUNC)
			rc = dpl_set_error(DPL_ETRUNC, "ucx: a message "
					   "longer than %zu bytes from "
					   "rank %u", r->len, r->peer);
	} else {
		rc = dpl__ucx_status(st);
	}
	ucp_request_free(r->ucp);
	r->ucp = NULL;
	dpl__ucx_unlink_req(p, r);
	if (rc != 0 && rc != DPL_EPEER && rc != DPL_ETRUNC &&
	    rc != DPL_ECANCELED && r->recv && peer_gone(c, p))
		rc = DPL_EPEER;
	if (rc == DPL_EPEER) {
		dpl__ucx_peer_fail(c, p, "UCX reported %s",
				   ucs_status_string(st));
		rc = dpl__ucx_peer_error(p);
	} else if (rc != 0 && rc != DPL_ETRUNC && rc != DPL_ECANCELED) {
		rc = dpl_set_error(rc, "ucx: %s with rank %u: %s",
				   r->recv ? "receive" : "send", r->peer,
				   ucs_status_string(st));
	}
	r->status = rc;
	return rc;
}

int dpl__ucx_cancel(void *vctx, void *req)
{
	struct ctx *c = vctx;
	struct ureq *r = req;

	/* UCX cancels receives still waiting for a match; a send, or a
	 * receive whose message is arriving, completes normally, and a
	 * request that already completed reports its result through test. */
	if (r->ucp != NULL)
		ucp_request_cancel(c->peers[r->peer].w, r->ucp);
	return 0;
}

/*
 * Sleep until a worker has an event or the liveness sweep is due (its
 * heartbeats and checks must not wait for the caller's timeout), at most
 * timeout_ns. Arming a worker fails with UCS_ERR_BUSY while it has work
 * that needs no event (arrived messages, queued local copies): then
 * there is no sleep, and the caller's next progress takes it.
 */
int dpl__ucx_wait(void *vctx, uint64_t timeout_ns)
{
	struct ctx *c = vctx;
	uint64_t now, limit = timeout_ns;
	struct timespec ts;
	nfds_t n = 0;
	uint32_t j;

	if (c->ncomp != 0 || c->world == 1)
		return 0;
	now = dpl_clock_ns();
	if (now >= c->next_sweep_ns)
		return 0;
	if (c->next_sweep_ns - now < limit)
		limit = c->next_sweep_ns - now;
	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];
		ucs_status_t st;

		if (p->w == NULL)
			continue;
		if (p->ctrl_ready || p->failed != UCS_OK)
			return 0;
		st = ucp_worker_arm(p->w);
		if (st == UCS_ERR_BUSY)
			return 0;
		if (st != UCS_OK)
			return dpl_set_error(DPL_EIO, "ucx: arming the worker "
					     "for rank %u: %s", j,
					     ucs_status_string(st));
		c->pfd[n].fd = p->efd;
		c->pfd[n].events = POLLIN;
		c->pfd[n].revents = 0;
		n++;
	}
	ts.tv_sec = (time_t)(limit / 1000000000u);
	ts.tv_nsec = (long)(limit % 1000000000u);
	if (ppoll(c->pfd, n, &ts, NULL) < 0 && errno != EINTR)
		return dpl_set_error(DPL_EIO, "ucx: waiting for UCX "
				     "events: %s", strerror(errno));
	return 0;
}

