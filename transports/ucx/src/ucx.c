/*
 * ucx.c - the UCX transport: UCP tag messages between the processes of a
 * job, on one host (shared memory, cross-memory attach) or many (TCP).
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
 * Peer failure. UCX reports failed TCP connections through the endpoint
 * error handler (even in UCP_ERR_HANDLING_MODE_NONE in 1.13); shared
 * memory reports nothing. So progress also runs a liveness sweep every
 * SWEEP_NS: a peer on this host whose process is gone (checked through
 * /proc against the pid and start time it announced) is dead at once, a
 * peer that sent nothing, not even a heartbeat, for the liveness timeout
 * is dead, and a peer that said goodbye (fini) is dead. A dead peer's
 * pending requests complete with DPL_EPEER and new posts to it fail.
 *
 * Closing. Over shared memory a receive of a rendezvous message fetches
 * the data with cross-memory-attach copies queued on the endpoint; they
 * run on after a cancel, write into the receive buffer, and UCX 1.13
 * aborts when a worker is destroyed while they are queued. So fini, a
 * failing peer and a receive from a peer that left cancel, then progress
 * until UCX completed the request (settle) before the buffer goes back
 * or the worker is destroyed. A receive whose fetch fails because its
 * sender left or died is a peer failure (peer_gone).
 *
 * Waiting. wait sleeps in ppoll on the workers' event descriptors, no
 * longer than until the next liveness sweep.
 *
 * Error mode. The default keeps UCP_ERR_HANDLING_MODE_NONE, because the
 * PEER mode drops UCX's shared-memory lanes (posix and sysv have no peer
 * failure handler unless UCX_{POSIX,SYSV}_ERROR_HANDLING=y, and cma never
 * has one) and slows TCP rendezvous; detection above does not need it.
 * "err_mode=peer" asks for it, and then the shared-memory error handling
 * (MM_ERROR_HANDLING, which posix and sysv inherit) and a short keepalive
 * are switched on unless the user set them.
 *
 * Loopback. Unless the user set UCX_NET_DEVICES (or the net_devices
 * option), the context's configuration gets NET_DEVICES=lo through
 * ucp_config_modify, which leaves the process environment alone.
 */
#define _GNU_SOURCE /* CLOCK_MONOTONIC_COARSE */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ucp/api/ucp.h>

#include <dpl/bootstrap.h>
#include <dpl/transport.h>

#include "ucx_internal.h"

#define KIND_SHIFT 60
#define KIND_CTRL UINT64_C(1)
#define CTRL_TAG (KIND_CTRL << KIND_SHIFT)

/* Control messages: one 64-bit word, magic | type | sender rank. */
#define CTRL_MAGIC UINT64_C(0x44504c)
enum ctrl_type { CTRL_HELLO = 1, CTRL_BEAT = 2, CTRL_BYE = 3 };

#define MS ((uint64_t)1000000)
#define DEFAULT_TIMEOUT_MS 60000u
#define SWEEP_NS (100 * MS)   /* liveness sweep period */
#define BEAT_MIN_NS (10 * MS)
#define BEAT_MAX_NS (1000 * MS)
#define FINI_DRAIN_NS (100 * MS) /* fini's bound for goodbyes */
#define DRAIN_NS (20 * MS)       /* a dead peer's last messages */
#define DRAIN_IDLE_PASSES 8
#define CTRL_BURST 64          /* control messages handled per progress */
#define HOUSE_EVERY 8          /* progress calls per clock read (2^k) */

/* Address exchange: one identity record, then one address per round. */
#define XCHG_MAGIC 0x44504c55u /* "DPLU" */
#define XCHG_VERSION 1u
#define XCHG_HDR (4 * 5)
#define XCHG_ID_LEN (XCHG_HDR + DPL__UCX_IDENT_WIRE)

struct ctx;

/* One request, in the caller's req_size storage. */
struct ureq {
	struct ureq *prev, *next; /* in the peer's pending list */
	void *ucp;                /* UCX's request while pending */
	size_t len;
	uint32_t peer;
	int status; /* DPL_EAGAIN while pending */
	bool recv;
	bool linked;
	bool failing; /* peer_fail's mark */
};

struct peer {
	struct ctx *c;
	uint32_t rank;
	ucp_worker_h w; /* this rank's worker for the peer */
	int efd;        /* w's wake-up descriptor */
	ucp_ep_h ep;
	struct ureq *head, *tail; /* pending requests */
	/* control messages */
	void *crreq;              /* posted control receive */
	void *beat_req;           /* hello or heartbeat in flight */
	void *bye_req;
	void *flush_req;          /* fini's flush of the worker */
	bool ctrl_ready;          /* crreq has completed */
	uint64_t crbuf;
	uint64_t beat_buf;
	uint64_t bye_buf;
	/* liveness */
	uint64_t heard_ns;  /* last message from it, coarse clock */
	uint64_t beat_ns;   /* last heartbeat sent */
	ucs_status_t failed; /* set by UCX's endpoint error handler */
	bool hello;         /* its hello arrived */
	bool dead;
	bool pid_check;
	struct dpl__ucx_ident id;
	char why[96];
};

struct ctx {
	ucp_context_h uc;
	struct peer *peers; /* [world]; the own entry has no worker */
	struct pollfd *pfd; /* [world], for wait */
	dpl_bootstrap *bs;
	uint32_t rank;
	uint32_t world;
	uint32_t timeout_ms;
	uint64_t liveness_ns;
	uint64_t beat_every_ns;
	uint64_t next_sweep_ns;
	uint64_t last_progress_ns;
	uint64_t ncomp; /* completions since the last progress */
	uint64_t passes;
	struct dpl__ucx_options opt;
	struct dpl__ucx_ident self;
	bool self_ok;
};

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t coarse_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC_COARSE);
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* ---- pending lists ---------------------------------------------------- */

static void link_req(struct peer *p, struct ureq *r)
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

static void unlink_req(struct peer *p, struct ureq *r)
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

/* ---- UCX callbacks: they only count ----------------------------------- */

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
	struct ctx *c = user_data;

	c->ncomp++;
}

/* What a receive callback leaves in UCX's request for test to read
 * (UCP's request_size space, where `request` points). */
struct recv_note {
	size_t length;
};

static void recv_cb(void *request, ucs_status_t status,
		    const ucp_tag_recv_info_t *info, void *user_data)
{
	struct ctx *c = user_data;
	struct recv_note *note = request;

	note->length = status == UCS_OK ? info->length : 0;
	c->ncomp++;
}

static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct peer *p = arg;

	if (p->failed == UCS_OK)
		p->failed = status;
}

/* ---- peer failure ----------------------------------------------------- */

/* Let go of a UCX request that may still be running: a pending receive
 * is cancelled; UCX frees the request once it has completed. */
static void release_ucp(struct peer *p, void *ucp, bool recv)
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
static bool settle(struct peer *p, void *ucp, uint64_t end)
{
	while (ucp_request_check_status(ucp) == UCS_INPROGRESS) {
		if (clock_ns(CLOCK_MONOTONIC) > end)
			return false;
		ucp_worker_progress(p->w);
	}
	return true;
}

/* Settle every pending receive of p that is still running. */
static void settle_recvs(struct peer *p, uint64_t end)
{
	struct ureq *r;

	for (r = p->head; r != NULL; r = r->next)
		if (r->recv && r->ucp != NULL && !settle(p, r->ucp, end))
			return;
}

/*
 * What a peer sent before it died may still sit in our socket or shared
 * memory queue: take it in before failing anything, so that messages a
 * rank sent just before it left still arrive.
 */
static void drain_worker(struct peer *p)
{
	uint64_t end = clock_ns(CLOCK_MONOTONIC) + DRAIN_NS;
	int idle = 0;

	while (idle < DRAIN_IDLE_PASSES && clock_ns(CLOCK_MONOTONIC) < end)
		idle = ucp_worker_progress(p->w) ? 0 : idle + 1;
}

/*
 * Mark peer p dead: its pending requests complete with DPL_EPEER (those
 * UCX already finished keep their result for test) and later posts fail.
 * Never called from inside a UCX callback.
 */
static void peer_fail(struct ctx *c, struct peer *p, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void peer_fail(struct ctx *c, struct peer *p, const char *fmt, ...)
{
	struct ureq *r, *next;
	va_list ap;

	if (p->dead)
		return;
	p->dead = true;
	va_start(ap, fmt);
	vsnprintf(p->why, sizeof p->why, fmt, ap);
	va_end(ap);
	drain_worker(p);
	/* What is still pending now fails. A receive that is already
	 * fetching a rendezvous message cannot be cancelled; the worker is
	 * settled before its buffer is handed back, so that UCX writes
	 * nothing into it afterwards. */
	for (r = p->head; r != NULL; r = r->next) {
		r->failing = ucp_request_check_status(r->ucp) == UCS_INPROGRESS;
		if (r->failing && r->recv)
			ucp_request_cancel(p->w, r->ucp);
	}
	settle_recvs(p, clock_ns(CLOCK_MONOTONIC) + DRAIN_NS);
	for (r = p->head; r != NULL; r = next) {
		next = r->next;
		if (!r->failing)
			continue; /* finished first: test reports it */
		release_ucp(p, r->ucp, r->recv);
		r->ucp = NULL;
		r->status = DPL_EPEER;
		unlink_req(p, r);
		c->ncomp++;
	}
	release_ucp(p, p->crreq, true);
	p->crreq = NULL;
}

static int peer_error(const struct peer *p)
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
static void ctrl_send(struct ctx *c, struct peer *p, enum ctrl_type t,
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
static void ctrl_reap(void **req)
{
	if (*req != NULL && ucp_request_check_status(*req) != UCS_INPROGRESS) {
		ucp_request_free(*req);
		*req = NULL;
	}
}

/* A control message arrived (or its receive ended): note it for
 * ctrl_poll, so that progress need not ask UCX about it every time. */
static void ctrl_cb(void *request, ucs_status_t status,
		    const ucp_tag_recv_info_t *info, void *user_data)
{
	struct peer *p = user_data;
	struct recv_note *note = request;

	note->length = status == UCS_OK ? info->length : 0;
	p->ctrl_ready = true;
}

static void ctrl_post_recv(struct ctx *c, struct peer *p)
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
static void ctrl_poll(struct ctx *c, struct peer *p, uint64_t now)
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
			peer_fail(c, p, "malformed control message (%s)",
				  ucs_status_string(st));
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
			peer_fail(c, p, "it left the job (fini)");
			return;
		default:
			peer_fail(c, p, "unknown control message %#llx",
				  (unsigned long long)w);
			return;
		}
		ctrl_post_recv(c, p);
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
			peer_fail(c, p, "its process (pid %u) is gone",
				  p->id.pid);
			continue;
		}
		if (now - p->heard_ns > c->liveness_ns) {
			peer_fail(c, p, "silent for %llu ms (liveness "
				  "timeout %u ms)",
				  (unsigned long long)((now - p->heard_ns) /
						       MS),
				  c->timeout_ms);
			continue;
		}
		ctrl_reap(&p->beat_req);
		if (p->beat_req == NULL &&
		    now - p->beat_ns >= c->beat_every_ns) {
			ctrl_send(c, p, CTRL_BEAT, &p->beat_buf, &p->beat_req);
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
			ctrl_poll(c, p, now);
		if (p->failed != UCS_OK)
			peer_fail(c, p, "UCX reported %s",
				  ucs_status_string(p->failed));
	}
}

/*
 * The clock is read on every HOUSE_EVERY-th call only: a waiting caller
 * spins on progress, and the read would be a good part of each turn.
 * That call also runs the liveness sweep when it is due.
 */
static int ucx_progress(void *vctx)
{
	struct ctx *c = vctx;
	bool house = (++c->passes & (HOUSE_EVERY - 1)) == 0;
	uint64_t now = c->last_progress_ns, n, gap;
	uint32_t j;

	if (house) {
		now = coarse_ns();
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

/* ---- data path -------------------------------------------------------- */

static int check_post(struct ctx *c, void *req, uint32_t peer, uint64_t tag,
		      const void *buf, size_t len, uint32_t mem)
{
	if (req == NULL)
		return dpl_set_error(DPL_EINVAL, "ucx: request storage is "
				     "NULL");
	if (peer >= c->world || peer == c->rank)
		return dpl_set_error(DPL_EINVAL, "ucx: peer %u of rank %u "
				     "in a world of %u", peer, c->rank,
				     c->world);
	if (tag > DPL_TAG_MAX)
		return dpl_set_error(DPL_EINVAL, "ucx: tag %#llx beyond %d "
				     "bits", (unsigned long long)tag,
				     DPL_TAG_BITS);
	if (mem != DPL_MEM_HOST)
		return dpl_set_error(DPL_ENOTSUP, "ucx: memory kind %u (this "
				     "UCX moves host memory only)", mem);
	if (buf == NULL && len > 0)
		return dpl_set_error(DPL_EINVAL, "ucx: NULL buffer of %zu "
				     "bytes", len);
	return 0;
}

static int post_error(struct ctx *c, struct peer *p, ucs_status_t st,
		      const char *what)
{
	int rc = dpl__ucx_status(st);

	if (rc == DPL_EPEER) {
		peer_fail(c, p, "UCX refused a %s: %s", what,
			  ucs_status_string(st));
		return peer_error(p);
	}
	if (rc == DPL_EAGAIN)
		return rc;
	return dpl_set_error(rc, "ucx: %s to rank %u: %s", what, p->rank,
			     ucs_status_string(st));
}

static int ucx_isend(void *vctx, void *req, uint32_t peer, uint64_t tag,
		     const void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct ureq *r = req;
	ucp_request_param_t prm;
	struct peer *p;
	void *sp;
	int rc;

	if ((rc = check_post(c, req, peer, tag, buf, len, mem)) != 0)
		return rc;
	p = &c->peers[peer];
	if (p->dead)
		return peer_error(p);
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
		link_req(p, r);
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
		return peer_error(p);
	rp = ucp_tag_recv_nbx(p->w, buf, len, tag, UINT64_MAX, prm);
	if (UCS_PTR_IS_ERR(rp))
		return peer_error(p);
	if (ucp_request_check_status(rp) == UCS_INPROGRESS) {
		/* a rendezvous message: its sender may have let go of the
		 * data, so it is not taken, but the fetch it started must end
		 * before the caller has the buffer back */
		ucp_request_cancel(p->w, rp);
		settle(p, rp, clock_ns(CLOCK_MONOTONIC) + DRAIN_NS);
		release_ucp(p, rp, true);
		return peer_error(p);
	}
	r->ucp = rp;
	r->status = DPL_EAGAIN;
	link_req(p, r);
	return 0;
}

static int ucx_irecv(void *vctx, void *req, uint32_t peer, uint64_t tag,
		     void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct ureq *r = req;
	ucp_request_param_t prm;
	struct peer *p;
	void *rp;
	int rc;

	if ((rc = check_post(c, req, peer, tag, buf, len, mem)) != 0)
		return rc;
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
	link_req(p, r);
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
		drain_worker(p);
		if (p->ctrl_ready)
			ctrl_poll(c, p, coarse_ns());
	}
	if (!p->dead && p->pid_check && dpl__ucx_proc_state(&p->id) == 0)
		peer_fail(c, p, "its process (pid %u) is gone", p->id.pid);
	return p->dead;
}

static int ucx_test(void *vctx, void *req)
{
	struct ctx *c = vctx;
	struct ureq *r = req;
	struct peer *p;
	ucs_status_t st;
	int rc;

	if (r->ucp == NULL) {
		if (r->status == DPL_EPEER)
			return peer_error(&c->peers[r->peer]);
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
	unlink_req(p, r);
	if (rc != 0 && rc != DPL_EPEER && rc != DPL_ETRUNC &&
	    rc != DPL_ECANCELED && r->recv && peer_gone(c, p))
		rc = DPL_EPEER;
	if (rc == DPL_EPEER) {
		peer_fail(c, p, "UCX reported %s", ucs_status_string(st));
		rc = peer_error(p);
	} else if (rc != 0 && rc != DPL_ETRUNC && rc != DPL_ECANCELED) {
		rc = dpl_set_error(rc, "ucx: %s with rank %u: %s",
				   r->recv ? "receive" : "send", r->peer,
				   ucs_status_string(st));
	}
	r->status = rc;
	return rc;
}

static int ucx_cancel(void *vctx, void *req)
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
static int ucx_wait(void *vctx, uint64_t timeout_ns)
{
	struct ctx *c = vctx;
	uint64_t now, limit = timeout_ns;
	struct timespec ts;
	nfds_t n = 0;
	uint32_t j;

	if (c->ncomp != 0 || c->world == 1)
		return 0;
	now = coarse_ns();
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

/* ---- setup and teardown ----------------------------------------------- */

/* Progress every worker until done() holds or `ns` passed. */
static bool drain(struct ctx *c, bool (*done)(struct ctx *), uint64_t ns)
{
	uint64_t end = clock_ns(CLOCK_MONOTONIC) + ns;

	for (;;) {
		uint32_t j;

		if (done(c))
			return true;
		if (clock_ns(CLOCK_MONOTONIC) > end)
			return false;
		for (j = 0; j < c->world; j++)
			if (c->peers[j].w != NULL)
				ucp_worker_progress(c->peers[j].w);
	}
}

static bool flushed(struct ctx *c)
{
	uint32_t j;

	for (j = 0; j < c->world; j++) {
		ctrl_reap(&c->peers[j].bye_req);
		ctrl_reap(&c->peers[j].flush_req);
		if (c->peers[j].bye_req != NULL ||
		    c->peers[j].flush_req != NULL)
			return false;
	}
	return true;
}

/*
 * Tell live peers goodbye and push out what was sent to them: a goodbye
 * follows this rank's messages on the same path, and the flush makes
 * sure they have all left before the worker closes, so a peer receives
 * everything this rank sent before it declares it gone. Bounded: a peer
 * that does not progress does not hold fini up for long.
 */
static void say_goodbye(struct ctx *c)
{
	ucp_request_param_t prm;
	uint32_t j;

	memset(&prm, 0, sizeof prm);
	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];
		void *fp;

		if (p->ep == NULL || p->dead || p->failed != UCS_OK)
			continue;
		ctrl_send(c, p, CTRL_BYE, &p->bye_buf, &p->bye_req);
		fp = ucp_worker_flush_nbx(p->w, &prm);
		p->flush_req = UCS_PTR_IS_PTR(fp) ? fp : NULL;
	}
	drain(c, flushed, FINI_DRAIN_NS);
}

/*
 * Everything init built, in reverse; `bye` tells live peers first.
 * Pending receives are cancelled and their requests kept until UCX has
 * finished with them (settle), within FINI_DRAIN_NS for all peers
 * together, so that nothing writes into a caller's buffer after fini and
 * no worker is destroyed with copies still queued.
 */
static void teardown(struct ctx *c, bool bye)
{
	uint64_t end;
	uint32_t j;

	for (j = 0; c->peers != NULL && j < c->world; j++) {
		struct peer *p = &c->peers[j];
		struct ureq *r;

		for (r = p->head; r != NULL; r = r->next)
			if (r->recv &&
			    ucp_request_check_status(r->ucp) == UCS_INPROGRESS)
				ucp_request_cancel(p->w, r->ucp);
		if (p->crreq != NULL)
			ucp_request_cancel(p->w, p->crreq);
	}
	if (c->peers != NULL && bye)
		say_goodbye(c);
	end = clock_ns(CLOCK_MONOTONIC) + FINI_DRAIN_NS;
	for (j = 0; c->peers != NULL && j < c->world; j++) {
		struct peer *p = &c->peers[j];
		struct ureq *r, *next;

		if (p->w != NULL)
			settle_recvs(p, end);
		for (r = p->head; r != NULL; r = next) {
			next = r->next;
			release_ucp(p, r->ucp, r->recv);
			r->ucp = NULL;
			r->status = DPL_ECANCELED;
			unlink_req(p, r);
		}
		release_ucp(p, p->crreq, true);
		release_ucp(p, p->beat_req, false);
		release_ucp(p, p->bye_req, false);
		release_ucp(p, p->flush_req, false);
		p->crreq = p->beat_req = p->bye_req = p->flush_req = NULL;
		if (p->w != NULL)
			ucp_worker_destroy(p->w); /* closes p->ep */
		p->w = NULL;
		p->ep = NULL;
	}
	if (c->uc != NULL)
		ucp_cleanup(c->uc);
	c->uc = NULL;
	free(c->peers);
	c->peers = NULL;
	free(c->pfd);
	c->pfd = NULL;
	dpl_bootstrap_close(c->bs);
	c->bs = NULL;
}

static void ucx_fini(void *vctx)
{
	teardown(vctx, true);
}

static int config_set(ucp_config_t *cfg, const char *name, const char *value)
{
	ucs_status_t st = ucp_config_modify(cfg, name, value);

	if (st != UCS_OK)
		return dpl_set_error(DPL_EINVAL, "ucx: UCX_%s=%s: %s", name,
				     value, ucs_status_string(st));
	return 0;
}

/* Whether a UCX_TLS list ("a,b", "^a,b", items maybe with ":aux") may
 * select the posix or sysv transports. */
static bool tls_has_shm(const char *tls)
{
	bool negate, posix = false, sysv = false;
	const char *s;

	if (tls == NULL || *tls == '\0')
		return true; /* UCX's default is all */
	negate = *tls == '^';
	for (s = tls + negate; *s != '\0';) {
		size_t item = strcspn(s, ","), n = strcspn(s, ",:");

		if (n > item)
			n = item;
		if ((n == 3 && strncmp(s, "all", 3) == 0) ||
		    (n == 2 && strncmp(s, "sm", 2) == 0) ||
		    (n == 3 && strncmp(s, "shm", 3) == 0) ||
		    (n == 2 && strncmp(s, "mm", 2) == 0))
			posix = sysv = true;
		else if (n == 5 && strncmp(s, "posix", 5) == 0)
			posix = true;
		else if (n == 4 && strncmp(s, "sysv", 4) == 0)
			sysv = true;
		s += item;
		if (*s == ',')
			s++;
	}
	return negate ? !(posix && sysv) : (posix || sysv);
}

/* The UCP context: the user's UCX_* environment, pinned to loopback
 * unless the user chose devices, plus our options. */
static int open_context(struct ctx *c)
{
	ucp_params_t prm;
	ucp_config_t *cfg;
	ucs_status_t st;
	char ka[32];
	int rc = 0;

	st = ucp_config_read(NULL, NULL, &cfg);
	if (st != UCS_OK)
		return dpl_set_error(DPL_EINVAL, "ucx: reading the UCX_* "
				     "environment: %s",
				     ucs_status_string(st));
	if (c->opt.tls[0] != '\0')
		rc = config_set(cfg, "TLS", c->opt.tls);
	if (rc == 0 && c->opt.net_devices[0] != '\0')
		rc = config_set(cfg, "NET_DEVICES", c->opt.net_devices);
	else if (rc == 0 && getenv("UCX_NET_DEVICES") == NULL)
		rc = config_set(cfg, "NET_DEVICES", "lo");
	if (rc == 0 && c->opt.err_mode == DPL__UCX_ERR_PEER) {
		/* posix and sysv inherit MM_ERROR_HANDLING; naming it only
		 * when they may be selected keeps UCX from warning about an
		 * unused setting. */
		if (tls_has_shm(c->opt.tls[0] ? c->opt.tls
					      : getenv("UCX_TLS")) &&
		    getenv("UCX_MM_ERROR_HANDLING") == NULL &&
		    getenv("UCX_POSIX_ERROR_HANDLING") == NULL &&
		    getenv("UCX_SYSV_ERROR_HANDLING") == NULL)
			rc = config_set(cfg, "MM_ERROR_HANDLING", "y");
		snprintf(ka, sizeof ka, "%llums",
			 (unsigned long long)(c->beat_every_ns / MS));
		if (rc == 0 && getenv("UCX_KEEPALIVE_INTERVAL") == NULL)
			rc = config_set(cfg, "KEEPALIVE_INTERVAL", ka);
	}
	if (rc != 0) {
		ucp_config_release(cfg);
		return rc;
	}
	memset(&prm, 0, sizeof prm);
	prm.field_mask = UCP_PARAM_FIELD_FEATURES |
			 UCP_PARAM_FIELD_REQUEST_SIZE |
			 UCP_PARAM_FIELD_MT_WORKERS_SHARED |
			 UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
	prm.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
	prm.request_size = sizeof(struct recv_note);
	prm.mt_workers_shared = 0;
	prm.estimated_num_eps = 1;
	st = ucp_init(&prm, cfg, &c->uc);
	ucp_config_release(cfg);
	if (st != UCS_OK) {
		c->uc = NULL;
		rc = dpl__ucx_status(st) == DPL_ENOMEM ? DPL_ENOMEM : DPL_EIO;
		return dpl_set_error(rc, "ucx: ucp_init: %s",
				     ucs_status_string(st));
	}
	return 0;
}

static int open_bootstrap(struct ctx *c, const struct dpl_transport_params *p)
{
	struct dpl_bootstrap_params bp;
	int rc;

	if (p->bootstrap != NULL) {
		memset(&bp, 0, sizeof bp);
		bp.rank = p->rank;
		bp.world_size = p->world_size;
		bp.root = p->bootstrap;
		bp.timeout_ms = c->timeout_ms;
		return dpl_bootstrap_open(&bp, &c->bs);
	}
	rc = dpl_bootstrap_open_env(c->timeout_ms, &c->bs);
	if (rc != 0)
		return rc;
	if (dpl_bootstrap_rank(c->bs) != p->rank ||
	    dpl_bootstrap_world_size(c->bs) != p->world_size)
		return dpl_set_error(DPL_EINVAL, "ucx: the environment "
				     "names rank %u of %u, the transport "
				     "was opened as rank %u of %u",
				     dpl_bootstrap_rank(c->bs),
				     dpl_bootstrap_world_size(c->bs),
				     p->rank, p->world_size);
	return 0;
}

/* The UCX_TLS this context runs with, for messages. */
static const char *tls_in_use(const struct ctx *c)
{
	const char *env = getenv("UCX_TLS");

	if (c->opt.tls[0] != '\0')
		return c->opt.tls;
	return env != NULL ? env : "(UCX default)";
}

/*
 * Exchange identities and worker addresses through the bootstrap, then
 * connect. Round 0 carries each rank's identity and its longest address;
 * round k carries rank r's address for rank (r + k) mod world.
 */
static int exchange(struct ctx *c)
{
	ucp_address_t **addr = NULL;
	size_t *alen = NULL, amax = 0, slot;
	unsigned char *mine = NULL, *all = NULL;
	uint32_t j, k, n = c->world;
	ucs_status_t st;
	int rc = 0;

	addr = calloc(n, sizeof *addr);
	alen = calloc(n, sizeof *alen);
	all = malloc((size_t)n * DPL_BOOTSTRAP_BLOB_MAX);
	mine = malloc(DPL_BOOTSTRAP_BLOB_MAX);
	if (addr == NULL || alen == NULL || all == NULL || mine == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "ucx: out of memory");
		goto out;
	}
	for (j = 0; j < n; j++) {
		if (j == c->rank)
			continue;
		st = ucp_worker_get_address(c->peers[j].w, &addr[j], &alen[j]);
		if (st != UCS_OK) {
			addr[j] = NULL;
			rc = dpl_set_error(DPL_EIO, "ucx: worker address: "
					   "%s", ucs_status_string(st));
			goto out;
		}
		if (alen[j] > amax)
			amax = alen[j];
	}
	put32(mine, XCHG_MAGIC);
	put32(mine + 4, XCHG_VERSION);
	put32(mine + 8, c->rank);
	put32(mine + 12, n);
	put32(mine + 16, (uint32_t)amax);
	dpl__ucx_ident_pack(&c->self, mine + XCHG_HDR);
	if ((rc = dpl_bootstrap_allgather(c->bs, mine, XCHG_ID_LEN, all)) != 0)
		goto out;
	slot = 0;
	for (j = 0; j < n; j++) {
		const unsigned char *b = all + (size_t)j * XCHG_ID_LEN;

		if (get32(b) != XCHG_MAGIC || get32(b + 4) != XCHG_VERSION ||
		    get32(b + 8) != j || get32(b + 12) != n) {
			rc = dpl_set_error(DPL_EIO, "ucx: rank %u sent a "
					   "foreign or mismatched address "
					   "record (another transport or "
					   "version at that rank?)", j);
			goto out;
		}
		if (get32(b + 16) > slot)
			slot = get32(b + 16);
		if (j != c->rank)
			dpl__ucx_ident_unpack(b + XCHG_HDR, &c->peers[j].id);
	}
	slot += 4;
	if (slot > DPL_BOOTSTRAP_BLOB_MAX) {
		rc = dpl_set_error(DPL_EIO, "ucx: worker addresses of %zu "
				   "bytes exceed the bootstrap's %d",
				   slot - 4, DPL_BOOTSTRAP_BLOB_MAX);
		goto out;
	}
	for (k = 1; k < n; k++) {
		uint32_t to = (c->rank + k) % n, from = (c->rank + n - k) % n;
		const unsigned char *b = all + (size_t)from * slot;
		ucp_ep_params_t ep;
		struct peer *p = &c->peers[from];
		uint32_t len;

		memset(mine, 0, slot);
		put32(mine, (uint32_t)alen[to]);
		memcpy(mine + 4, addr[to], alen[to]);
		rc = dpl_bootstrap_allgather(c->bs, mine, slot, all);
		if (rc != 0)
			goto out;
		len = get32(b);
		if (len == 0 || len > slot - 4) {
			rc = dpl_set_error(DPL_EIO, "ucx: rank %u sent a "
					   "%u-byte worker address", from,
					   len);
			goto out;
		}
		memset(&ep, 0, sizeof ep);
		ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
				UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
				UCP_EP_PARAM_FIELD_ERR_HANDLER;
		ep.address = (const ucp_address_t *)(b + 4);
		ep.err_mode = c->opt.err_mode == DPL__UCX_ERR_PEER
				      ? UCP_ERR_HANDLING_MODE_PEER
				      : UCP_ERR_HANDLING_MODE_NONE;
		ep.err_handler.cb = ep_error_cb;
		ep.err_handler.arg = p;
		st = ucp_ep_create(p->w, &ep, &p->ep);
		if (st != UCS_OK) {
			p->ep = NULL;
			rc = dpl_set_error(DPL_EIO, "ucx: cannot reach rank "
					   "%u with UCX_TLS=%s: %s", from,
					   tls_in_use(c),
					   ucs_status_string(st));
			goto out;
		}
	}
out:
	for (j = 0; addr != NULL && j < n; j++)
		if (addr[j] != NULL)
			ucp_worker_release_address(c->peers[j].w, addr[j]);
	free(addr);
	free(alen);
	free(all);
	free(mine);
	return rc;
}

static bool hellos_in(struct ctx *c)
{
	uint64_t now = coarse_ns();
	uint32_t j;
	bool all = true;

	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];

		if (j == c->rank)
			continue;
		ctrl_poll(c, p, now);
		ctrl_reap(&p->beat_req);
		if (p->dead || p->failed != UCS_OK)
			return true; /* reported by the caller */
		all &= p->hello && p->beat_req == NULL;
	}
	return all;
}

/* Say hello to every peer and wait for all of theirs: connects every
 * lane now, so the first message is fast and a dead end shows here. */
static int greet(struct ctx *c)
{
	uint64_t now = coarse_ns();
	uint32_t j;

	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];

		if (j == c->rank)
			continue;
		p->heard_ns = p->beat_ns = now;
		ctrl_post_recv(c, p);
		ctrl_send(c, p, CTRL_HELLO, &p->beat_buf, &p->beat_req);
	}
	drain(c, hellos_in, (uint64_t)c->timeout_ms * MS);
	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];

		if (j == c->rank)
			continue;
		if (p->dead)
			return dpl_set_error(DPL_EIO, "ucx: rank %u failed "
					     "while connecting: %s", j, p->why);
		if (p->failed != UCS_OK)
			return dpl_set_error(DPL_EIO, "ucx: rank %u failed "
					     "while connecting: %s", j,
					     ucs_status_string(p->failed));
		if (!p->hello)
			return dpl_set_error(DPL_ETIMEDOUT, "ucx: no hello "
					     "from rank %u within %u ms",
					     j, c->timeout_ms);
	}
	return 0;
}

static int ucx_init(void *vctx, const struct dpl_transport_params *p)
{
	struct ctx *c = vctx;
	ucp_worker_params_t wp;
	uint64_t now;
	uint32_t j;
	int rc;

	memset(c, 0, sizeof *c);
	if (p->reserved0 != 0)
		return dpl_set_error(DPL_EINVAL, "ucx: reserved0 is %u "
				     "(must be 0)", p->reserved0);
	if ((rc = dpl__ucx_options_parse(p->options, &c->opt)) != 0)
		return rc;
	c->rank = p->rank;
	c->world = p->world_size;
	c->timeout_ms = p->timeout_ms ? p->timeout_ms : DEFAULT_TIMEOUT_MS;
	c->liveness_ns = (uint64_t)c->timeout_ms * MS;
	c->beat_every_ns = c->liveness_ns / 8;
	if (c->beat_every_ns < BEAT_MIN_NS)
		c->beat_every_ns = BEAT_MIN_NS;
	if (c->beat_every_ns > BEAT_MAX_NS)
		c->beat_every_ns = BEAT_MAX_NS;
	c->peers = calloc(c->world, sizeof *c->peers);
	c->pfd = calloc(c->world, sizeof *c->pfd);
	if (c->peers == NULL || c->pfd == NULL)
		return dpl_set_error(DPL_ENOMEM, "ucx: out of memory for "
				     "%u peers", c->world);
	for (j = 0; j < c->world; j++) {
		c->peers[j].c = c;
		c->peers[j].rank = j;
	}
	if (c->world == 1)
		return 0; /* nobody to talk to */
	c->self_ok = dpl__ucx_ident_self(&c->self) == 0;
	if ((rc = open_bootstrap(c, p)) != 0)
		goto fail;
	if ((rc = open_context(c)) != 0)
		goto fail;
	memset(&wp, 0, sizeof wp);
	/* One thread at a time, not always the same one (the contract). */
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
	for (j = 0; j < c->world; j++) {
		ucs_status_t st;

		if (j == c->rank)
			continue;
		st = ucp_worker_create(c->uc, &wp, &c->peers[j].w);
		if (st != UCS_OK) {
			c->peers[j].w = NULL;
			rc = dpl_set_error(DPL_EIO, "ucx: worker for rank "
					   "%u: %s", j,
					   ucs_status_string(st));
			goto fail;
		}
		st = ucp_worker_get_efd(c->peers[j].w, &c->peers[j].efd);
		if (st != UCS_OK) {
			rc = dpl_set_error(DPL_EIO, "ucx: wake-up descriptor "
					   "of the worker for rank %u: %s", j,
					   ucs_status_string(st));
			goto fail;
		}
	}
	if ((rc = exchange(c)) != 0)
		goto fail;
	for (j = 0; j < c->world; j++)
		c->peers[j].pid_check =
			j != c->rank && c->self_ok &&
			dpl__ucx_same_pids(&c->self, &c->peers[j].id) &&
			dpl__ucx_proc_state(&c->peers[j].id) == 1;
	if ((rc = greet(c)) != 0)
		goto fail;
	if ((rc = dpl_bootstrap_barrier(c->bs)) != 0)
		goto fail;
	dpl_bootstrap_close(c->bs);
	c->bs = NULL;
	now = coarse_ns();
	c->last_progress_ns = now;
	c->next_sweep_ns = now;
	c->ncomp = 0;
	return 0;
fail:
	teardown(c, false);
	return rc;
}

DPL_EXTERN const struct dpl_transport_ops dpl_transport_ucx = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "ucx",
	.caps = DPL_TRANSPORT_CAP_PEER_FAILURE | DPL_TRANSPORT_CAP_WAIT,
	.ctx_size = sizeof(struct ctx),
	.req_size = sizeof(struct ureq),
	.init = ucx_init,
	.fini = ucx_fini,
	.isend = ucx_isend,
	.irecv = ucx_irecv,
	.test = ucx_test,
	.progress = ucx_progress,
	.cancel = ucx_cancel,
	.wait = ucx_wait,
};
