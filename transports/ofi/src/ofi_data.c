/*
 * ofi_data.c - the data path of the libfabric transport: posting sends
 * and receives, reading the completion queue, the request-to-send
 * exchange for large messages, and failing the requests of dead peers.
 *
 * Everything here runs on the thread that owns the context and allocates
 * nothing: operation slots, control buffers and the sink are set up by
 * dpl__ofi_data_init. See ofi_internal.h for the wire protocol.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "ofi_internal.h"

/* Remote CQ data of a message: its length, and whether it is a request
 * to send (then its 8 bytes are the sender's cookie). */
#define DATA_RTS UINT64_C(1)
#define DATA(len, rts) (((uint64_t)(len) << 1) | (rts))
#define RTS_LEN sizeof(uint64_t)
#define SLOT_MASK ((UINT64_C(1) << OFI_SLOT_BITS) - 1)
#define TAG_LOW ((UINT64_C(1) << 60) - 1)
/* After a peer is noticed dead, its messages already delivered to this
 * host get this long to be matched before its requests fail. */
#define PEER_GRACE_NS (100u * 1000000u)
/* A cancelled receive of a dead peer whose cancellation the provider
 * never reports is completed anyway after this long. */
#define DOOM_WAIT_NS (500u * 1000000u)
/* A peer that closed with messages still to match: its receives fail
 * once none of them matched for this long. */
#define CLOSE_IDLE_NS (1000u * 1000000u)

static void complete(struct ofi_ctx *c, struct ofi_op *op, int status);

static uint32_t idx_of(const struct ofi_ctx *c, const struct ofi_op *op)
{
	return (uint32_t)(op - c->op);
}

static uint64_t cookie_of(const struct ofi_ctx *c, const struct ofi_op *op)
{
	return ((uint64_t)op->gen << OFI_SLOT_BITS) | idx_of(c, op);
}

static void *desc_of(struct ofi_ctx *c, const struct ofi_mrref *ref)
{
	if (ref->idx >= 0 && c->mrc.e[ref->idx].mr != NULL)
		return fi_mr_desc(c->mrc.e[ref->idx].mr);
	if (ref->mr != NULL)
		return fi_mr_desc(ref->mr);
	return NULL;
}

static void *static_desc(struct fid_mr *mr)
{
	return mr != NULL ? fi_mr_desc(mr) : NULL;
}

/* ---- slots ---------------------------------------------------------- */

static struct ofi_op *slot_alloc(struct ofi_ctx *c)
{
	struct ofi_op *op;

	if (c->free_head == 0)
		return NULL;
	op = &c->op[c->free_head - 1];
	c->free_head = op->next;
	op->next = 0;
	op->gen = op->gen + 1 == 0 ? 1 : op->gen + 1;
	op->req = NULL;
	op->busy = 0;
	op->cancelling = 0;
	op->waiting = 0;
	op->doom = 0;
	op->mr.mr = NULL;
	op->mr.idx = -1;
	return op;
}

static void slot_free(struct ofi_ctx *c, struct ofi_op *op)
{
	dpl__ofi_mr_put(c, &op->mr);
	op->state = OP_FREE;
	op->req = NULL;
	op->next = c->free_head;
	c->free_head = idx_of(c, op) + 1;
}

static void release_if_idle(struct ofi_ctx *c, struct ofi_op *op)
{
	if (op->state != OP_FREE && op->req == NULL && op->busy == 0 &&
	    !op->waiting)
		slot_free(c, op);
}

static void complete(struct ofi_ctx *c, struct ofi_op *op, int status)
{
	if (op->req != NULL) {
		if (op->send && (status == 0 || status == DPL_ETRUNC))
			c->peer[op->peer].sent++;
		if (c->peer[op->peer].closing)
			c->peer[op->peer].since = dpl__ofi_now();
		op->req->status = status;
		op->req->slot = 0;
		op->req = NULL;
		c->reported++;
	}
	if (op->doom != 0) {
		op->doom = 0;
		c->ndoomed--;
	}
	release_if_idle(c, op);
}

static void wait_push(struct ofi_ctx *c, struct ofi_op *op)
{
	uint32_t i = idx_of(c, op) + 1;

	op->waiting = 1;
	op->next = 0;
	if (c->wait_tail != 0)
		c->op[c->wait_tail - 1].next = i;
	else
		c->wait_head = i;
	c->wait_tail = i;
}

/* ---- peers ---------------------------------------------------------- */

/* A crash (or a fabric error): the peer fails after a short grace. */
static void notice_peer(struct ofi_ctx *c, uint32_t p, uint64_t now)
{
	struct ofi_peer *q = &c->peer[p];

	if (q->dead || q->dying || q->closing)
		return;
	q->dying = true;
	q->since = now;
	c->ndying++;
}

/* Map a completion error; a peer-level error also marks the peer. */
static int op_error(struct ofi_ctx *c, struct ofi_op *op, int err)
{
	int st;

	if (op->doom != 0)
		return op->doom;
	st = dpl__ofi_err(err);
	if (st == DPL_EPEER)
		notice_peer(c, op->peer, dpl__ofi_now());
	return st;
}

static void doom(struct ofi_ctx *c, struct ofi_op *op, int which,
		 uint64_t now)
{
	if (op->doom != 0)
		return;
	(void)fi_cancel(&c->ep->fid, &op->fc[which]);
	op->doom = DPL_EPEER;
	op->doom_at = now;
	c->ndoomed++;
}

/* Which requests of a peer to fail. */
enum fail_what {
	FAIL_ALL,     /* the peer is dead */
	FAIL_STALLED, /* it closed: what waits for its answer or a retry */
	FAIL_RECV     /* it closed and everything it sent has matched */
};

static void fail_ops(struct ofi_ctx *c, uint32_t p, uint64_t now,
		     enum fail_what what)
{
	uint32_t i, k, j;

	for (i = 0; i < c->nop; i++) {
		struct ofi_op *op = &c->op[i];

		if (op->state == OP_FREE || op->req == NULL || op->peer != p)
			continue;
		switch (op->state) {
		case OP_R_HDR:
			if (what != FAIL_STALLED)
				doom(c, op, 0, now);
			break;
		case OP_R_BULK:
			if (what == FAIL_ALL)
				doom(c, op, 1, now);
			break;
		case OP_R_BULK_WAIT:
		case OP_S_BULK_WAIT:
			if (what == FAIL_RECV)
				break;
			op->state = OP_DEAD_WAIT;
			complete(c, op, DPL_EPEER);
			break;
		case OP_S_RTS:
			if (what == FAIL_RECV || (what == FAIL_STALLED &&
						  op->busy != 0))
				break;
			complete(c, op, DPL_EPEER);
			break;
		default:
			/* A send the fabric still holds: after a close it
			 * completes on its own. On death the slot stays
			 * until the fabric lets go; the request ends now. */
			if (what == FAIL_ALL)
				complete(c, op, DPL_EPEER);
			break;
		}
	}
	if (what == FAIL_RECV)
		return;
	/* Drop control messages queued for p. */
	for (k = 0, j = 0; k < c->out_len; k++) {
		struct ofi_ctrl_out *m = &c->out[(c->out_head + k) % c->out_cap];

		if (m->peer != p)
			c->out[(c->out_head + j++) % c->out_cap] = *m;
	}
	c->out_len = j;
}

/* Fail everything of peer p: posts fail from now on. */
static void peer_fail(struct ofi_ctx *c, uint32_t p, uint64_t now)
{
	struct ofi_peer *q = &c->peer[p];

	if (q->dying)
		c->ndying--;
	if (q->closing)
		c->nclosing--;
	q->dying = q->closing = false;
	q->dead = true;
	fail_ops(c, p, now, FAIL_ALL);
}

/*
 * A BYE: p completed bye_n messages to us before it closed. Sends to it
 * that wait for its answer fail now; sends the fabric holds complete on
 * their own (p may have received them before it left); receives go on
 * until bye_n messages matched. Whatever is left when nothing happened
 * with p for CLOSE_IDLE_NS fails.
 */
static void peer_closing(struct ofi_ctx *c, uint32_t p, uint64_t bye_n,
			 uint64_t now)
{
	struct ofi_peer *q = &c->peer[p];

	if (q->dead || q->closing)
		return;
	if (q->dying) {
		q->dying = false;
		c->ndying--;
	}
	q->closing = true;
	q->bye_n = bye_n;
	q->since = now;
	c->nclosing++;
	fail_ops(c, p, now, FAIL_STALLED);
	if (q->recvd >= bye_n)
		fail_ops(c, p, now, FAIL_RECV);
}

/* A message of p matched one of our receives. */
static void peer_matched(struct ofi_ctx *c, uint32_t p)
{
	struct ofi_peer *q = &c->peer[p];

	q->recvd++;
	if (q->closing) {
		q->since = dpl__ofi_now();
		if (q->recvd == q->bye_n)
			fail_ops(c, p, q->since, FAIL_RECV);
	}
}

static void deadlines(struct ofi_ctx *c)
{
	uint64_t now = dpl__ofi_now();
	uint32_t p, i;

	if (c->ndying != 0 || c->nclosing != 0)
		for (p = 0; p < c->n; p++) {
			struct ofi_peer *q = &c->peer[p];

			if ((q->dying && now - q->since >= PEER_GRACE_NS) ||
			    (q->closing && now - q->since >= CLOSE_IDLE_NS))
				peer_fail(c, p, now);
		}
	if (c->ndoomed != 0)
		for (i = 0; i < c->nop; i++) {
			struct ofi_op *op = &c->op[i];

			if (op->doom != 0 && op->req != NULL &&
			    now - op->doom_at >= DOOM_WAIT_NS)
				complete(c, op, op->doom);
		}
}

static void check_live(struct ofi_ctx *c)
{
	unsigned g = dpl__ofi_live_gen(c->live);
	uint64_t now, bye;
	uint32_t p;

	if (g == c->live_seen)
		return;
	c->live_seen = g;
	now = dpl__ofi_now();
	for (p = 0; p < c->n; p++) {
		if (p == c->rank || !dpl__ofi_live_dead(c->live, p, &bye))
			continue;
		if (bye != UINT64_MAX)
			peer_closing(c, p, bye, now);
		else
			notice_peer(c, p, now);
	}
}

/* ---- control messages ----------------------------------------------- */

static int ctrl_post(struct ofi_ctx *c, struct ofi_ctrl_slot *s)
{
	int rc = (int)fi_trecv(c->ep, &s->m, sizeof s->m,
			       static_desc(c->ctrl_mr), FI_ADDR_UNSPEC,
			       OFI_TAG_CTRL, 0, &s->fc);

	if (rc == 0)
		s->posted = true;
	return rc;
}

static void ctrl_repost_all(struct ofi_ctx *c)
{
	uint32_t i;

	c->ctrl_unposted = 0;
	for (i = 0; i < OFI_NCTRL; i++)
		if (!c->ctrl[i].posted && ctrl_post(c, &c->ctrl[i]) != 0)
			c->ctrl_unposted++;
}

static int ctrl_inject(struct ofi_ctx *c, const struct ofi_ctrl_out *m)
{
	return (int)fi_tinject(c->ep, &m->m, sizeof m->m,
			       c->peer[m->peer].addr, OFI_TAG_CTRL);
}

static void ctrl_flush(struct ofi_ctx *c)
{
	int rc;

	while (c->out_len != 0) {
		rc = ctrl_inject(c, &c->out[c->out_head]);
		if (rc == -FI_EAGAIN)
			return;
		if (rc != 0 && dpl__ofi_err_is_peer(-rc))
			notice_peer(c, c->out[c->out_head].peer,
				    dpl__ofi_now());
		c->out_head = (c->out_head + 1) % c->out_cap;
		c->out_len--;
	}
}

static void ctrl_send(struct ofi_ctx *c, uint32_t peer, uint32_t type,
		      uint64_t cookie, uint64_t len)
{
	struct ofi_ctrl_out m;
	int rc = -FI_EAGAIN;

	if (c->peer[peer].dead)
		return;
	memset(&m, 0, sizeof m);
	m.peer = peer;
	m.m.magic = OFI_CTRL_MAGIC;
	m.m.type = type;
	m.m.src = c->rank;
	m.m.cookie = cookie;
	m.m.len = len;
	if (c->out_len == 0)
		rc = ctrl_inject(c, &m);
	if (rc == 0)
		return;
	if (rc != -FI_EAGAIN) {
		if (dpl__ofi_err_is_peer(-rc))
			notice_peer(c, peer, dpl__ofi_now());
		return;
	}
	/* Each slot has at most one control message queued: never full. */
	if (c->out_len < c->out_cap) {
		c->out[(c->out_head + c->out_len) % c->out_cap] = m;
		c->out_len++;
	}
}

/* ---- posting -------------------------------------------------------- */

/*
 * A receive: the caller's buffer, then (only when the buffer is shorter
 * than a cookie) the slot's spill area, then the sink. No message sent in
 * one piece is longer than the sink, so the fabric never truncates.
 */
static int post_recv_hdr(struct ofi_ctx *c, struct ofi_op *op)
{
	struct iovec iov[3];
	void *desc[3];
	size_t k = 0;

	if (op->len != 0) {
		iov[k].iov_base = op->buf;
		iov[k].iov_len = op->len;
		desc[k++] = desc_of(c, &op->mr);
	}
	if (op->len < RTS_LEN) {
		iov[k].iov_base = &op->hdr;
		iov[k].iov_len = sizeof op->hdr;
		desc[k++] = static_desc(c->op_mr);
	}
	iov[k].iov_base = c->sink;
	iov[k].iov_len = c->sink_len;
	desc[k++] = static_desc(c->sink_mr);
	return (int)fi_trecvv(c->ep, iov, c->mr_local ? desc : NULL, k,
			      c->peer[op->peer].addr, OFI_TAG_MSG | op->tag, 0,
			      &op->fc[0]);
}

static int post_send_msg(struct ofi_ctx *c, struct ofi_op *op)
{
	return (int)fi_tsenddata(c->ep, op->buf, op->len, desc_of(c, &op->mr),
				 DATA(op->len, 0), c->peer[op->peer].addr,
				 OFI_TAG_MSG | op->tag, &op->fc[0]);
}

/* The request to send: the cookie, with the length in the CQ data.
 * Returns 1 when it went out as an inject (no completion will come), 0
 * when posted, or an fi error. */
static int post_rts(struct ofi_ctx *c, struct ofi_op *op)
{
	int rc;

	if (RTS_LEN <= c->inject) {
		rc = (int)fi_tinjectdata(c->ep, &op->hdr.cookie, RTS_LEN,
					 DATA(op->len, DATA_RTS),
					 c->peer[op->peer].addr,
					 OFI_TAG_MSG | op->tag);
		return rc == 0 ? 1 : rc;
	}
	return (int)fi_tsenddata(c->ep, &op->hdr.cookie, RTS_LEN,
				 static_desc(c->op_mr), DATA(op->len, DATA_RTS),
				 c->peer[op->peer].addr, OFI_TAG_MSG | op->tag,
				 &op->fc[0]);
}

static void post_bulk_recv(struct ofi_ctx *c, struct ofi_op *op)
{
	uint64_t cookie = op->hdr.cookie;
	int rc;

	rc = (int)fi_trecv(c->ep, op->buf, op->len, desc_of(c, &op->mr),
			   c->peer[op->peer].addr, OFI_TAG_BULK | cookie, 0,
			   &op->fc[1]);
	if (rc == -FI_EAGAIN) {
		op->state = OP_R_BULK_WAIT;
		wait_push(c, op);
		return;
	}
	if (rc != 0) {
		complete(c, op, op_error(c, op, -rc));
		return;
	}
	op->busy++;
	op->state = OP_R_BULK;
	ctrl_send(c, op->peer, OFI_CTRL_CTS, cookie, op->len);
}

static void post_bulk_send(struct ofi_ctx *c, struct ofi_op *op)
{
	int rc;

	rc = (int)fi_tsend(c->ep, op->buf, op->len, desc_of(c, &op->mr),
			   c->peer[op->peer].addr,
			   OFI_TAG_BULK | cookie_of(c, op), &op->fc[1]);
	if (rc == -FI_EAGAIN) {
		op->state = OP_S_BULK_WAIT;
		wait_push(c, op);
		return;
	}
	if (rc != 0) {
		complete(c, op, op_error(c, op, -rc));
		return;
	}
	op->busy++;
	op->state = OP_S_BULK;
}

static void retry_waits(struct ofi_ctx *c)
{
	uint32_t i = c->wait_head;

	c->wait_head = c->wait_tail = 0;
	while (i != 0) {
		struct ofi_op *op = &c->op[i - 1];

		i = op->next;
		op->next = 0;
		op->waiting = 0;
		switch (op->state) {
		case OP_R_BULK_WAIT:
			post_bulk_recv(c, op);
			break;
		case OP_S_BULK_WAIT:
			post_bulk_send(c, op);
			break;
		default:
			release_if_idle(c, op);
			break;
		}
	}
}

/* ---- completions ---------------------------------------------------- */

/* A longer message than its receive spilled `over` bytes into the sink:
 * give those pages back (only ever on this error path). */
static void sink_release(struct ofi_ctx *c, uint64_t over)
{
	size_t n = over < c->sink_len ? (size_t)over : c->sink_len;

	n = (n + 4095) & ~(size_t)4095;
	if (n > c->sink_len)
		n = c->sink_len;
	(void)madvise(c->sink, n, MADV_DONTNEED);
}

static void on_recv_hdr(struct ofi_ctx *c, struct ofi_op *op, int err,
			size_t len, uint64_t flags, uint64_t data)
{
	uint32_t p = op->peer;
	uint64_t mlen = data >> 1, cookie;
	size_t k;

	if (err != 0) {
		complete(c, op, err == FI_ECANCELED && op->doom == 0
					? DPL_ECANCELED
					: op_error(c, op, err));
		return;
	}
	if (!(flags & FI_REMOTE_CQ_DATA)) {
		complete(c, op, DPL_ETRUNC);
		return;
	}
	if (!(data & DATA_RTS)) {
		/* Sent in one piece: compare the lengths. */
		complete(c, op, mlen == op->len && len == op->len ? 0
								 : DPL_ETRUNC);
		if (mlen > op->len)
			sink_release(c, mlen - op->len);
		peer_matched(c, p);
		return;
	}
	if (op->doom != 0 || c->peer[p].closing || c->peer[p].dead ||
	    len != RTS_LEN) {
		/* The payload needs the peer, which is going. */
		complete(c, op, len != RTS_LEN ? DPL_ETRUNC : DPL_EPEER);
		peer_matched(c, p);
		return;
	}
	/* The cookie landed at the start of the buffer, then the spill. */
	k = op->len < RTS_LEN ? op->len : RTS_LEN;
	memcpy(&cookie, op->buf, k);
	memcpy((char *)&cookie + k, &op->hdr, RTS_LEN - k);
	op->hdr.cookie = cookie & TAG_LOW;
	if (mlen != op->len) {
		ctrl_send(c, p, OFI_CTRL_NACK, op->hdr.cookie, op->len);
		complete(c, op, DPL_ETRUNC);
		peer_matched(c, p);
		return;
	}
	post_bulk_recv(c, op);
	peer_matched(c, p);
}

static void on_op(struct ofi_ctx *c, struct ofi_op *op, int which, int err,
		  size_t len, uint64_t flags, uint64_t data)
{
	if (op->busy > 0)
		op->busy--;
	if (op->req == NULL) {
		release_if_idle(c, op);
		return;
	}
	if (which == 0) {
		switch (op->state) {
		case OP_R_HDR:
			on_recv_hdr(c, op, err, len, flags, data);
			break;
		case OP_S_MSG:
			complete(c, op, err != 0 ? op_error(c, op, err) : 0);
			break;
		default:
			/* The header of a request to send went out. */
			if (err != 0)
				complete(c, op, op_error(c, op, err));
			break;
		}
		return;
	}
	if (err != 0)
		complete(c, op, op_error(c, op, err));
	else if (op->state == OP_R_BULK && len != op->len)
		complete(c, op, DPL_ETRUNC);
	else
		complete(c, op, 0);
}

static void on_ctrl(struct ofi_ctx *c, struct ofi_ctrl_slot *s, int err)
{
	struct ofi_ctrl m = s->m;
	struct ofi_op *op;
	uint64_t idx;

	s->posted = false;
	if (ctrl_post(c, s) != 0)
		c->ctrl_unposted++;
	if (err != 0 || m.magic != OFI_CTRL_MAGIC || m.src >= c->n)
		return;
	idx = m.cookie & SLOT_MASK;
	if (idx >= c->nop)
		return;
	op = &c->op[idx];
	if (op->gen != (uint32_t)(m.cookie >> OFI_SLOT_BITS) ||
	    op->req == NULL || op->peer != m.src || op->state != OP_S_RTS)
		return;
	if (m.type == OFI_CTRL_CTS)
		post_bulk_send(c, op);
	else if (m.type == OFI_CTRL_NACK)
		complete(c, op, DPL_ETRUNC);
}

static void dispatch(struct ofi_ctx *c, void *ctxp, int err, size_t len,
		     uint64_t flags, uint64_t data)
{
	char *p = ctxp;

	if (p == NULL)
		return;
	if (p >= (char *)c->op && p < (char *)(c->op + c->nop)) {
		size_t i = (size_t)(p - (char *)c->op) / sizeof(struct ofi_op);
		struct ofi_op *op = &c->op[i];

		on_op(c, op, p == (char *)&op->fc[1], err, len, flags, data);
	} else if (p >= (char *)c->ctrl && p < (char *)(c->ctrl + OFI_NCTRL)) {
		size_t i = (size_t)(p - (char *)c->ctrl) /
			   sizeof(struct ofi_ctrl_slot);

		on_ctrl(c, &c->ctrl[i], err);
	} else if (c->warm_fc != NULL && p >= (char *)c->warm_fc &&
		   p < (char *)(c->warm_fc + c->n)) {
		size_t i = (size_t)(p - (char *)c->warm_fc) /
			   sizeof(struct fi_context2);

		if (c->warm_left > 0)
			c->warm_left--;
		if (err != 0)
			c->warm[i] = UINT64_MAX;
	}
}

static void fail_all(struct ofi_ctx *c, int status)
{
	uint32_t i;

	for (i = 0; i < c->nop; i++)
		if (c->op[i].state != OP_FREE && c->op[i].req != NULL) {
			c->op[i].req->status = status;
			c->op[i].req->slot = 0;
			c->op[i].req = NULL;
			c->reported++;
		}
}

/* Read the completion queue until it is empty (bounded per call). */
static int cq_drain(struct ofi_ctx *c)
{
	struct fi_cq_tagged_entry e[16];
	struct fi_cq_err_entry ee;
	ssize_t n, i;
	int round;

	for (round = 0; round < 16; round++) {
		n = fi_cq_read(c->cq, e, 16);
		if (n > 0) {
			for (i = 0; i < n; i++)
				dispatch(c, e[i].op_context, 0, e[i].len,
					 e[i].flags, e[i].data);
			if (n < 16)
				return 0;
			continue;
		}
		if (n == -FI_EAGAIN)
			return 0;
		if (n == -FI_EAVAIL) {
			memset(&ee, 0, sizeof ee);
			if (fi_cq_readerr(c->cq, &ee, 0) == 1)
				dispatch(c, ee.op_context,
					 ee.err != 0 ? abs(ee.err) : FI_EIO,
					 ee.len, ee.flags, ee.data);
			continue;
		}
		c->broken = true;
		fail_all(c, DPL_EIO);
		return dpl_set_error(DPL_EIO, "ofi: fi_cq_read: %s",
				     fi_strerror((int)-n));
	}
	return 0;
}

/* One round of progress; completions accumulate in c->reported. */
static int progress_once(struct ofi_ctx *c)
{
	int rc;

	if (c->broken)
		return dpl_set_error(DPL_EIO, "ofi: the completion queue "
				     "failed earlier");
	if (c->live != NULL)
		check_live(c);
	if ((rc = cq_drain(c)) != 0)
		return rc;
	if (c->out_len != 0)
		ctrl_flush(c);
	if (c->wait_head != 0)
		retry_waits(c);
	if (c->ctrl_unposted != 0)
		ctrl_repost_all(c);
	if (c->ndying != 0 || c->nclosing != 0 || c->ndoomed != 0)
		deadlines(c);
	return 0;
}

int dpl__ofi_progress(struct ofi_ctx *c)
{
	int n, rc;

	if ((rc = progress_once(c)) != 0)
		return rc;
	n = c->reported;
	c->reported = 0;
	return n;
}

/* ---- the ops -------------------------------------------------------- */

static int post_error(struct ofi_ctx *c, uint32_t peer, const char *what,
		      int rc)
{
	int st = dpl__ofi_err(-rc);

	if (st == DPL_EPEER)
		notice_peer(c, peer, dpl__ofi_now());
	return dpl_set_error(st == DPL_EAGAIN ? DPL_EIO : st,
			     "ofi: %s to rank %u: %s", what, peer,
			     fi_strerror(-rc));
}

static int dead_peer(struct ofi_ctx *c, uint32_t peer)
{
	return dpl_set_error(DPL_EPEER, "ofi: rank %u failed", peer);
}

int dpl__ofi_isend(struct ofi_ctx *c, struct ofi_req *r, uint32_t peer,
		   uint64_t tag, const void *buf, size_t len)
{
	struct ofi_op *op;
	void *desc;
	int rc;

	if (c->peer[peer].dead || c->peer[peer].closing)
		return dead_peer(c, peer);
	if (len <= c->o.inline_max && len <= c->inject) {
		rc = (int)fi_tinjectdata(c->ep, buf, len, DATA(len, 0),
					 c->peer[peer].addr, OFI_TAG_MSG | tag);
		if (rc == -FI_EAGAIN) {
			(void)progress_once(c);
			rc = (int)fi_tinjectdata(c->ep, buf, len, DATA(len, 0),
						 c->peer[peer].addr,
						 OFI_TAG_MSG | tag);
		}
		if (rc == -FI_EAGAIN)
			return DPL_EAGAIN;
		if (rc != 0)
			return post_error(c, peer, "send", rc);
		r->status = 0;
		r->slot = 0;
		c->reported++;
		c->peer[peer].sent++;
		return 0;
	}
	if ((op = slot_alloc(c)) == NULL)
		return DPL_EAGAIN;
	op->send = 1;
	op->peer = peer;
	op->tag = tag;
	op->buf = (void *)buf;
	op->len = len;
	if ((rc = dpl__ofi_mr_get(c, buf, len, &op->mr, &desc)) != 0) {
		slot_free(c, op);
		return rc;
	}
	if (len <= c->o.inline_max) {
		op->state = OP_S_MSG;
		rc = post_send_msg(c, op);
		if (rc == -FI_EAGAIN) {
			(void)progress_once(c);
			rc = post_send_msg(c, op);
		}
	} else {
		op->hdr.len = len;
		op->hdr.cookie = cookie_of(c, op);
		op->state = OP_S_RTS;
		rc = post_rts(c, op);
		if (rc == -FI_EAGAIN) {
			(void)progress_once(c);
			rc = post_rts(c, op);
		}
	}
	if (rc < 0) {
		slot_free(c, op);
		if (rc == -FI_EAGAIN)
			return DPL_EAGAIN;
		return post_error(c, peer, "send", rc);
	}
	if (rc == 0)
		op->busy = 1;
	op->req = r;
	r->status = DPL_EAGAIN;
	r->slot = idx_of(c, op) + 1;
	return 0;
}

int dpl__ofi_irecv(struct ofi_ctx *c, struct ofi_req *r, uint32_t peer,
		   uint64_t tag, void *buf, size_t len)
{
	struct ofi_op *op;
	void *desc;
	int rc;

	if (c->peer[peer].dead ||
	    (c->peer[peer].closing && c->peer[peer].recvd >= c->peer[peer].bye_n))
		return dead_peer(c, peer);
	if ((op = slot_alloc(c)) == NULL)
		return DPL_EAGAIN;
	op->send = 0;
	op->peer = peer;
	op->tag = tag;
	op->buf = buf;
	op->len = len;
	op->state = OP_R_HDR;
	if ((rc = dpl__ofi_mr_get(c, buf, len, &op->mr, &desc)) != 0) {
		slot_free(c, op);
		return rc;
	}
	rc = post_recv_hdr(c, op);
	if (rc == -FI_EAGAIN) {
		(void)progress_once(c);
		rc = post_recv_hdr(c, op);
	}
	if (rc != 0) {
		slot_free(c, op);
		if (rc == -FI_EAGAIN)
			return DPL_EAGAIN;
		return post_error(c, peer, "receive", rc);
	}
	op->busy = 1;
	op->req = r;
	r->status = DPL_EAGAIN;
	r->slot = idx_of(c, op) + 1;
	return 0;
}

int dpl__ofi_cancel(struct ofi_ctx *c, struct ofi_req *r)
{
	struct ofi_op *op;

	if (r->status != DPL_EAGAIN || r->slot == 0 || r->slot > c->nop)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: cancel of a request that is "
				     "not pending");
	op = &c->op[r->slot - 1];
	if (op->req != r)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: cancel of a request that is "
				     "not pending");
	/* Only a receive not matched yet can end early; anything further
	 * along completes normally. */
	if (op->state == OP_R_HDR && !op->cancelling) {
		op->cancelling = 1;
		(void)fi_cancel(&c->ep->fid, &op->fc[0]);
	}
	return 0;
}

/* ---- warm-up -------------------------------------------------------- */

static void nap(void)
{
	struct timespec ts = {0, 50000};

	nanosleep(&ts, NULL);
}

int dpl__ofi_warmup(struct ofi_ctx *c, uint64_t deadline)
{
	uint64_t me = c->rank;
	uint8_t *sent;
	uint32_t p, left;
	char miss[160];
	size_t k;
	int rc;

	sent = calloc(c->n, 1);
	if (sent == NULL)
		return dpl_set_error(DPL_ENOMEM, "ofi: out of memory");
	c->warm_left = 0;
	for (p = 0; p < c->n; p++) {
		if (p == c->rank)
			continue;
		c->warm[p] = UINT64_MAX - 1;
		for (;;) {
			rc = (int)fi_trecv(c->ep, &c->warm[p], sizeof c->warm[p],
					   static_desc(c->warm_mr),
					   c->peer[p].addr, OFI_TAG_WARM, 0,
					   &c->warm_fc[p]);
			if (rc != -FI_EAGAIN || dpl__ofi_now() > deadline)
				break;
			(void)cq_drain(c);
		}
		if (rc != 0) {
			free(sent);
			return post_error(c, p, "warm-up receive", rc);
		}
		c->warm_left++;
	}
	for (;;) {
		left = 0;
		for (p = 0; p < c->n; p++) {
			if (p == c->rank || sent[p])
				continue;
			rc = (int)fi_tinject(c->ep, &me, sizeof me,
					     c->peer[p].addr, OFI_TAG_WARM);
			if (rc == 0)
				sent[p] = 1;
			else if (rc != -FI_EAGAIN) {
				free(sent);
				return post_error(c, p, "warm-up send", rc);
			}
			else
				left++;
		}
		if ((rc = cq_drain(c)) != 0) {
			free(sent);
			return rc;
		}
		check_live(c);
		if (c->ndying != 0 || c->nclosing != 0)
			deadlines(c);
		/* A peer may finish and leave as soon as its own warm-up is
		 * done: only one that never got its message through failed. */
		for (p = 0; p < c->n; p++) {
			if (p == c->rank)
				continue;
			if (c->warm[p] == UINT64_MAX ||
			    (c->peer[p].dead && c->warm[p] == UINT64_MAX - 1)) {
				free(sent);
				return dpl_set_error(DPL_EPEER,
						     "ofi: rank %u failed "
						     "during warm-up", p);
			}
			if ((c->peer[p].dead || c->peer[p].closing) &&
			    !sent[p]) {
				sent[p] = 1;
				left--;
			}
		}
		if (left == 0 && c->warm_left == 0)
			break;
		if (dpl__ofi_now() > deadline) {
			k = 0;
			miss[0] = '\0';
			for (p = 0; p < c->n && k + 12 < sizeof miss; p++)
				if (p != c->rank &&
				    (!sent[p] || c->warm[p] == UINT64_MAX - 1))
					k += (size_t)snprintf(miss + k,
							      sizeof miss - k,
							      "%s%u", k ? ", "
									: "",
							      p);
			free(sent);
			return dpl_set_error(DPL_ETIMEDOUT,
					     "ofi: warm-up with ranks %s "
					     "did not finish in time", miss);
		}
		if (left != 0 || c->warm_left != 0)
			nap();
	}
	free(sent);
	for (p = 0; p < c->n; p++)
		if (p != c->rank && c->warm[p] != p)
			return dpl_set_error(DPL_EIO,
					     "ofi: warm-up message from rank "
					     "%u carried %llu", p,
					     (unsigned long long)c->warm[p]);
	return 0;
}

/* ---- setup ---------------------------------------------------------- */

int dpl__ofi_data_init(struct ofi_ctx *c)
{
	uint32_t i;
	int rc;

	c->op = calloc(c->nop, sizeof *c->op);
	c->ctrl = calloc(OFI_NCTRL, sizeof *c->ctrl);
	c->out_cap = c->nop + OFI_NCTRL;
	c->out = calloc(c->out_cap, sizeof *c->out);
	c->warm = calloc(c->n, sizeof *c->warm);
	c->warm_fc = calloc(c->n, sizeof *c->warm_fc);
	if (!c->op || !c->ctrl || !c->out || !c->warm ||
	    !c->warm_fc)
		return dpl_set_error(DPL_ENOMEM, "ofi: out of memory");
	for (i = 0; i < c->nop; i++) {
		c->op[i].next = i + 2 <= c->nop ? i + 2 : 0;
		c->op[i].mr.idx = -1;
	}
	c->free_head = 1;
	/* The sink only ever receives the overflow of a mismatched inline
	 * message: reserve address space, touch no memory. */
	c->sink_len = c->o.inline_max > 4096 ? c->o.inline_max : 4096;
	for (;;) {
		c->sink = mmap(NULL, c->sink_len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
			       0);
		if (c->sink != MAP_FAILED)
			break;
		/* Strict overcommit: settle for less, send more in two
		 * steps. */
		c->sink = NULL;
		if (c->sink_len <= ((size_t)1 << 20))
			return dpl_set_error(DPL_ENOMEM,
					     "ofi: cannot reserve %zu bytes of "
					     "address space", c->sink_len);
		c->sink_len /= 2;
		c->o.inline_max = c->sink_len;
	}
	if (c->mr_local) {
		if ((rc = dpl__ofi_mr_reg(c, c->op, c->nop * sizeof *c->op,
					  &c->op_mr)) != 0 ||
		    (rc = dpl__ofi_mr_reg(c, c->ctrl,
					  OFI_NCTRL * sizeof *c->ctrl,
					  &c->ctrl_mr)) != 0 ||
		    (rc = dpl__ofi_mr_reg(c, c->sink, c->sink_len,
					  &c->sink_mr)) != 0 ||
		    (rc = dpl__ofi_mr_reg(c, c->warm, c->n * sizeof *c->warm,
					  &c->warm_mr)) != 0)
			return rc;
	}
	for (i = 0; i < OFI_NCTRL; i++)
		if ((rc = ctrl_post(c, &c->ctrl[i])) != 0)
			return dpl_set_error(DPL_EIO,
					     "ofi: posting control "
					     "receives: %s",
					     fi_strerror(-rc));
	return 0;
}

void dpl__ofi_data_fini(struct ofi_ctx *c)
{
	/* The endpoint is closed: whatever was pending is cancelled. */
	if (c->op != NULL)
		fail_all(c, DPL_ECANCELED);
	free(c->op);
	free(c->ctrl);
	free(c->out);
	free(c->warm);
	free(c->warm_fc);
	if (c->sink != NULL)
		munmap(c->sink, c->sink_len);
	c->op = NULL;
	c->ctrl = NULL;
	c->out = NULL;
	c->warm = NULL;
	c->warm_fc = NULL;
	c->sink = NULL;
}
