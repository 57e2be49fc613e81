/*
 * ofi_data.c - the data path of the libfabric transport: posting sends
 * and receives, reading the completion queue, the request-to-send
 * exchange for large messages, offers (large receives posted ahead), and
 * failing the requests of dead peers.
 *
 * Everything here runs on the thread that owns the context and allocates
 * nothing: operation slots, control buffers and bounce buffers are set up
 * by dpl__ofi_data_init. See ofi_internal.h for the wire protocol.
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

#define MHDR sizeof(struct ofi_mhdr)
/* Largest message copied into a stack buffer to be injected. */
#define STAGE_MAX 4096
#define SLOT_MASK ((UINT64_C(1) << OFI_SLOT_BITS) - 1)
#define TAG_LOW ((UINT64_C(1) << 60) - 1)
/* After a peer is noticed dead, its messages already delivered to this
 * host get this long to be matched before its requests fail. */
#define PEER_GRACE_NS (100u * 1000000u)
/* A cancelled bulk receive of a dead peer whose cancellation the
 * provider never reports is completed anyway after this long. */
#define DOOM_WAIT_NS (500u * 1000000u)
/* A peer that closed with messages still to match: its receives fail
 * once none of them matched for this long. */
#define CLOSE_IDLE_NS (1000u * 1000000u)
/* Bounce buffers posted per peer at most. Providers match every arrival
 * against their posted receives in order (shm 1.17: a list), and a
 * payload's receive is posted after the bounce buffers: every one more
 * is a step more for each payload (64 instead of 8 cost about 0.5 us
 * per 16 KiB to 64 KiB message on shm). Bursts beyond them wait in the
 * provider, bounded by the credits. */
#define OFI_BPP_MAX 8
/* Rounds of progress a cancel of an offered receive spends waiting for
 * the fabric to confirm that its payload receive is gone. */
#define CANCEL_ROUNDS 64
/* A send being withdrawn (op->wd): WITHDRAW asked and not answered yet;
 * answered "not found" (the message was matched, or is not at the
 * receiver yet: asked again after WITHDRAW_RETRY_NS); taken back. */
enum { WD_NONE, WD_ASKED, WD_RETRY, WD_GONE };
#define WITHDRAW_RETRY_NS (1000u * 1000u)

static void complete(struct ofi_ctx *c, struct ofi_op *op, int status);
static void top_up(struct ofi_ctx *c, uint32_t p);
static int progress_once(struct ofi_ctx *c);
static void offer_flush_all(struct ofi_ctx *c);
static void offer_keep(struct ofi_ctx *c, uint32_t src,
		       const struct ofi_offer_wire *m);

/* A posted fabric operation that may succeed later: shm 1.17 says
 * -FI_ENOMEM when its receive entries are in use, which is transient. */
static bool fabric_busy(int rc)
{
	return rc == -FI_EAGAIN || rc == -FI_ENOMEM;
}

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
	op->qnext = 0;
	op->gen = op->gen + 1 == 0 ? 1 : op->gen + 1;
	op->req = NULL;
	op->busy = 0;
	op->cancelling = 0;
	op->waiting = 0;
	op->bulk_rx = 0;
	op->offered = 0;
	op->offer_rx = 0;
	op->offer_done = 0;
	op->cts = 0;
	op->drain = 0;
	op->wd = WD_NONE;
	op->offer_st = 0;
	op->btag = 0;
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

/* Forget op's offer if it has not left yet (then the peer never sees
 * it). Returns whether it had not. */
static bool offer_unsend(struct ofi_ctx *c, struct ofi_op *op)
{
	struct ofi_peer *q = &c->peer[op->peer];

	if (!q->pend_set || q->pend.cookie != (op->btag & TAG_LOW))
		return false;
	q->pend_set = false;
	c->npend--;
	return true;
}

/* Move op to withdrawal state v, keeping c->nwd (asking or about to). */
static void wd_set(struct ofi_ctx *c, struct ofi_op *op, uint8_t v)
{
	bool was = op->wd == WD_ASKED || op->wd == WD_RETRY;
	bool is = v == WD_ASKED || v == WD_RETRY;

	c->nwd += (uint32_t)is - (uint32_t)was;
	op->wd = v;
}

static void complete(struct ofi_ctx *c, struct ofi_op *op, int status)
{
	wd_set(c, op, WD_NONE);
	if (op->req != NULL) {
		/* An offer ending with its request: its payload receive
		 * leaves the fabric (the completion of that is ignored). */
		if (op->offer_rx)
			(void)fi_cancel(&c->ep->fid, &op->fc[2]);
		if (op->offered) {
			(void)offer_unsend(c, op);
			op->offered = 0;
			if (c->peer[op->peer].offers_out > 0)
				c->peer[op->peer].offers_out--;
		}
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

/* ---- index FIFOs (struct ofi_fifo) --------------------------------- */

/* The link field of element i (index + 1) of a FIFO's array. */
typedef uint32_t *(*fifo_link)(struct ofi_ctx *c, uint32_t i);

static uint32_t *op_next(struct ofi_ctx *c, uint32_t i)
{
	return &c->op[i - 1].next;
}

static uint32_t *op_qnext(struct ofi_ctx *c, uint32_t i)
{
	return &c->op[i - 1].qnext;
}

static uint32_t *bounce_next(struct ofi_ctx *c, uint32_t i)
{
	return &c->bounce[i - 1].next;
}

static void fifo_push(struct ofi_ctx *c, struct ofi_fifo *f, fifo_link link,
		      uint32_t i)
{
	*link(c, i) = 0;
	if (f->tail != 0)
		*link(c, f->tail) = i;
	else
		f->head = i;
	f->tail = i;
}

/* Take element i, which follows prev (0: i is the head), out of f. */
static void fifo_unlink(struct ofi_ctx *c, struct ofi_fifo *f,
			fifo_link link, uint32_t prev, uint32_t i)
{
	if (prev != 0)
		*link(c, prev) = *link(c, i);
	else
		f->head = *link(c, i);
	if (f->tail == i)
		f->tail = prev;
	*link(c, i) = 0;
}

static void wait_push(struct ofi_ctx *c, struct ofi_op *op)
{
	op->waiting = 1;
	fifo_push(c, &c->wait, op_next, idx_of(c, op) + 1);
}

/* ---- receive queues and bounce buffers ------------------------------ */

static void rq_push(struct ofi_ctx *c, struct ofi_op *op)
{
	fifo_push(c, &c->peer[op->peer].rq, op_qnext, idx_of(c, op) + 1);
}

/* Take the oldest receive of peer p for `tag` (with tag_any: the oldest
 * receive, or `only` when given) off p's queue. */
static struct ofi_op *rq_take(struct ofi_ctx *c, uint32_t p, uint64_t tag,
			      const struct ofi_op *only)
{
	struct ofi_fifo *f = &c->peer[p].rq;
	uint32_t i = f->head, prev = 0;

	while (i != 0) {
		struct ofi_op *op = &c->op[i - 1];

		if (only != NULL ? op == only : op->tag == tag) {
			fifo_unlink(c, f, op_qnext, prev, i);
			return op;
		}
		prev = i;
		i = op->qnext;
	}
	return NULL;
}

static struct ofi_mhdr *bhdr(struct ofi_ctx *c, const struct ofi_bounce *b)
{
	return (struct ofi_mhdr *)(c->bdata + (size_t)(b - c->bounce) * c->bsz);
}

static char *bpayload(struct ofi_ctx *c, const struct ofi_bounce *b)
{
	return (char *)bhdr(c, b) + MHDR;
}

static void bounce_free(struct ofi_ctx *c, struct ofi_bounce *b)
{
	b->next = c->bfree;
	c->bfree = (uint32_t)(b - c->bounce) + 1;
	c->nbfree++;
}

static struct ofi_bounce *bounce_alloc(struct ofi_ctx *c)
{
	struct ofi_bounce *b;

	if (c->bfree == 0)
		return NULL;
	b = &c->bounce[c->bfree - 1];
	c->bfree = b->next;
	c->nbfree--;
	b->next = 0;
	return b;
}

/* Peers whose bounce buffers could not all be posted get another try
 * when buffers come back or in progress. */
static void starve(struct ofi_ctx *c, uint32_t p)
{
	if (!c->peer[p].starved) {
		c->peer[p].starved = true;
		c->nstarved++;
	}
}

static void feed_starved(struct ofi_ctx *c)
{
	uint32_t p;

	for (p = 0; p < c->n && c->nstarved != 0 && c->nbfree != 0; p++)
		if (c->peer[p].starved)
			top_up(c, p);
}

static void ux_push(struct ofi_ctx *c, struct ofi_bounce *b)
{
	fifo_push(c, &c->peer[b->peer].ux, bounce_next,
		  (uint32_t)(b - c->bounce) + 1);
}

static struct ofi_bounce *ux_take(struct ofi_ctx *c, uint32_t p, uint64_t tag)
{
	struct ofi_fifo *f = &c->peer[p].ux;
	uint32_t i = f->head, prev = 0;

	while (i != 0) {
		struct ofi_bounce *b = &c->bounce[i - 1];

		if ((bhdr(c, b)->tag & ~OFI_MH_RTS) == tag) {
			fifo_unlink(c, f, bounce_next, prev, i);
			return b;
		}
		prev = i;
		i = b->next;
	}
	return NULL;
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

/* A fabric operation with one peer completed in error. A generic I/O
 * error there means the link to that peer broke (tcp;ofi_rxm reports a
 * receive whose sender died mid-message as FI_EIO), and a message of the
 * pair is lost either way: the peer counts as failed, and the caller
 * hears DPL_EPEER naming it. */
static int link_error(struct ofi_ctx *c, struct ofi_op *op, int err)
{
	if (dpl__ofi_err(err) == DPL_EIO)
		err = FI_ECONNRESET;
	return op_error(c, op, err);
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
		if (what != FAIL_RECV && op->send && op->state == OP_S_BULK &&
		    op->busy == 0) {
			/* A message on an offer, asked back; the fabric let
			 * go of it and the answer will not come: it went. */
			complete(c, op, 0);
			continue;
		}
		switch (op->state) {
		case OP_R_HDR:
			if (what != FAIL_STALLED &&
			    rq_take(c, p, 0, op) != NULL)
				complete(c, op, DPL_EPEER);
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
	/* Its offers are void: sends to it fail from now on; ours to it
	 * need not leave. */
	for (k = 0; k < OFI_OFFERS; k++) {
		c->peer[p].offer[k].valid = false;
		c->peer[p].offer[k].used = false;
	}
	c->peer[p].offers_in = 0;
	c->nused -= c->peer[p].nused;
	c->peer[p].nused = 0;
	if (c->peer[p].pend_set) {
		c->peer[p].pend_set = false;
		c->npend--;
	}
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
	struct ofi_bounce *b;

	if (q->dying)
		c->ndying--;
	if (q->closing)
		c->nclosing--;
	q->dying = q->closing = false;
	q->dead = true;
	fail_ops(c, p, now, FAIL_ALL);
	/* Nothing can match its messages any more. */
	while (q->ux.head != 0) {
		b = &c->bounce[q->ux.head - 1];
		q->ux.head = b->next;
		bounce_free(c, b);
	}
	q->ux.tail = 0;
	feed_starved(c);
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
		if (fabric_busy(rc))
			return;
		if (rc != 0 && dpl__ofi_err_is_peer(-rc))
			notice_peer(c, c->out[c->out_head].peer,
				    dpl__ofi_now());
		c->out_head = (c->out_head + 1) % c->out_cap;
		c->out_len--;
	}
}

/* Send a control message now, or queue it when the fabric is busy. */
static void ctrl_send_full(struct ofi_ctx *c, uint32_t peer, uint32_t type,
			   uint64_t cookie, uint64_t len, uint64_t tag,
			   uint32_t seq)
{
	struct ofi_ctrl_out m;
	uint32_t k;
	int rc = -FI_EAGAIN;

	if (c->peer[peer].dead)
		return;
	memset(&m, 0, sizeof m);
	m.peer = peer;
	m.m.magic = OFI_CTRL_MAGIC;
	m.m.type = type;
	m.m.src = c->rank;
	m.m.seq = seq;
	m.m.cookie = cookie;
	m.m.len = len;
	m.m.tag = tag;
	if (c->out_len == 0)
		rc = ctrl_inject(c, &m);
	if (rc == 0)
		return;
	if (!fabric_busy(rc)) {
		if (dpl__ofi_err_is_peer(-rc))
			notice_peer(c, peer, dpl__ofi_now());
		return;
	}
	/* Credits to one peer fold into one queued message. */
	if (type == OFI_CTRL_CREDIT)
		for (k = 0; k < c->out_len; k++) {
			struct ofi_ctrl_out *o =
				&c->out[(c->out_head + k) % c->out_cap];

			if (o->peer == peer && o->m.type == OFI_CTRL_CREDIT) {
				o->m.len += len;
				return;
			}
		}
	/* At most one CTS or NACK and one OFFER or RETRACT per slot, one
	 * CREDIT per peer and one RETRACTED per offer a peer may have out
	 * are queued: never full. */
	if (c->out_len < c->out_cap) {
		c->out[(c->out_head + c->out_len) % c->out_cap] = m;
		c->out_len++;
	}
}

static void ctrl_send(struct ofi_ctx *c, uint32_t peer, uint32_t type,
		      uint64_t cookie, uint64_t len)
{
	ctrl_send_full(c, peer, type, cookie, len, 0, 0);
}

/* Tell p about the bounce buffers posted again for it. */
static void credit_flush(struct ofi_ctx *c, uint32_t p)
{
	struct ofi_peer *q = &c->peer[p];

	if (q->grant == 0)
		return;
	ctrl_send(c, p, OFI_CTRL_CREDIT, 0, q->grant);
	q->grant = 0;
}

/* ---- bounce buffers: posting ---------------------------------------- */

static int bounce_post(struct ofi_ctx *c, struct ofi_bounce *b, uint32_t p)
{
	int rc;

	b->peer = p;
	rc = (int)fi_trecv(c->ep, bhdr(c, b), c->bsz,
			   static_desc(c->bdata_mr), c->peer[p].addr,
			   OFI_TAG_MSG, 0, &b->fc);
	if (rc == 0) {
		b->posted = 1;
		c->peer[p].posted++;
	}
	return rc;
}

/* Keep c->bpp bounce buffers posted for p while the pool has them. */
static void top_up(struct ofi_ctx *c, uint32_t p)
{
	struct ofi_peer *q = &c->peer[p];
	struct ofi_bounce *b;
	int rc;

	if (q->starved) {
		q->starved = false;
		c->nstarved--;
	}
	if (q->dead || p == c->rank)
		return;
	while (q->posted < c->bpp) {
		if ((b = bounce_alloc(c)) == NULL) {
			starve(c, p);
			break;
		}
		rc = bounce_post(c, b, p);
		if (rc != 0) {
			bounce_free(c, b);
			if (fabric_busy(rc))
				starve(c, p);
			else if (dpl__ofi_err_is_peer(-rc))
				notice_peer(c, p, dpl__ofi_now());
			break;
		}
	}
}

/* ---- posting -------------------------------------------------------- */

/* Fill the header of a message to op->peer; credits ride along. */
static void mhdr_fill(struct ofi_ctx *c, struct ofi_mhdr *h, uint32_t peer,
		      uint64_t tag)
{
	h->tag = tag;
	h->seq = c->peer[peer].seq_out;
	h->credit = c->peer[peer].grant;
}

/* A message went out: it used a credit and its sequence number. */
static void mhdr_sent(struct ofi_ctx *c, const struct ofi_mhdr *h,
		      uint32_t peer)
{
	struct ofi_peer *q = &c->peer[peer];

	q->seq_out++;
	q->credits--;
	q->grant -= h->credit;
}

/* op's message in two pieces: hlen bytes of header at hdr (in the op
 * table), then the payload: the caller's buffer, or the scratch area
 * when op drains. */
static void op_iov(struct ofi_ctx *c, struct ofi_op *op, void *hdr,
		   size_t hlen, struct iovec iov[2], void *desc[2])
{
	iov[0].iov_base = hdr;
	iov[0].iov_len = hlen;
	desc[0] = static_desc(c->op_mr);
	iov[1].iov_base = op->drain ? c->scratch : op->buf;
	iov[1].iov_len = op->drain ? op->w.len : op->len;
	desc[1] = op->drain ? static_desc(c->scratch_mr)
			    : desc_of(c, &op->mr);
}

/* The eager message of a slot: header and payload from two places. */
static int post_send_msg(struct ofi_ctx *c, struct ofi_op *op)
{
	struct iovec iov[2];
	void *desc[2];
	int rc;

	mhdr_fill(c, &op->w.h, op->peer, op->tag);
	op_iov(c, op, &op->w.h, MHDR, iov, desc);
	rc = (int)fi_tsendv(c->ep, iov, c->mr_local ? desc : NULL,
			    op->len != 0 ? 2 : 1, c->peer[op->peer].addr,
			    OFI_TAG_MSG, &op->fc[0]);
	if (rc == 0)
		mhdr_sent(c, &op->w.h, op->peer);
	return rc;
}

/* The request to send: header, cookie (op->w.cookie: ours, or the
 * receiver's marked OFI_RTS_OFFER) and length. Returns 1 when it went
 * out as an inject (no completion will come), 0 when posted, or an fi
 * error. */
static int post_rts(struct ofi_ctx *c, struct ofi_op *op)
{
	int rc;

	struct ofi_peer *q = &c->peer[op->peer];

	mhdr_fill(c, &op->w.h, op->peer, op->tag | OFI_MH_RTS);
	op->w.len = op->len;
	op->w.offer = q->pend;
	op->w.offer.valid = q->pend_set;
	if (sizeof op->w <= c->inject) {
		rc = (int)fi_tinject(c->ep, &op->w, sizeof op->w,
				     c->peer[op->peer].addr, OFI_TAG_MSG);
		if (rc == 0)
			rc = 1;
	} else {
		rc = (int)fi_tsend(c->ep, &op->w, sizeof op->w,
				   static_desc(c->op_mr),
				   c->peer[op->peer].addr, OFI_TAG_MSG,
				   &op->fc[0]);
	}
	if (rc >= 0) {
		mhdr_sent(c, &op->w.h, op->peer);
		if (q->pend_set) {
			q->pend_set = false;
			c->npend--;
		}
	}
	return rc;
}

/* The message of a send on the receiver's offer (op->btag, op->w.cookie
 * set): the request-to-send header and the payload in one message. */
static int post_offered(struct ofi_ctx *c, struct ofi_op *op)
{
	struct ofi_peer *q = &c->peer[op->peer];
	struct iovec iov[2];
	void *desc[2];
	int rc;

	mhdr_fill(c, &op->w.h, op->peer, op->tag | OFI_MH_RTS);
	op->w.len = op->len;
	op->w.offer = q->pend;
	op->w.offer.valid = q->pend_set;
	op_iov(c, op, &op->w, sizeof op->w, iov, desc);
	rc = (int)fi_tsendv(c->ep, iov, c->mr_local ? desc : NULL, 2, q->addr,
			    op->btag, &op->fc[1]);
	if (rc == 0) {
		mhdr_sent(c, &op->w.h, op->peer);
		if (q->pend_set) {
			q->pend_set = false;
			c->npend--;
		}
	}
	return rc;
}

static bool obulk(const struct ofi_op *op)
{
	return (op->btag & ~TAG_LOW) == OFI_TAG_OBULK;
}

/* The bulk receive of a matched request to send, on op->btag: into the
 * caller's buffer, or (op->drain) into the scratch area. */
static void post_bulk_recv(struct ofi_ctx *c, struct ofi_op *op)
{
	struct iovec iov[2];
	void *desc[2];
	int rc = -FI_EAGAIN;

	/* A message sent on an offer has the request to send in front. */
	op_iov(c, op, &op->rh, sizeof op->rh, iov, desc);
	if (c->nbulk < c->bulk_max && obulk(op))
		rc = (int)fi_trecvv(c->ep, iov, c->mr_local ? desc : NULL,
				    2, c->peer[op->peer].addr, op->btag, 0,
				    &op->fc[1]);
	else if (c->nbulk < c->bulk_max)
		rc = (int)fi_trecv(c->ep, iov[1].iov_base, iov[1].iov_len,
				   desc[1], c->peer[op->peer].addr, op->btag,
				   0, &op->fc[1]);
	if (fabric_busy(rc)) {
		op->state = OP_R_BULK_WAIT;
		wait_push(c, op);
		return;
	}
	if (rc != 0) {
		complete(c, op, op_error(c, op, -rc));
		return;
	}
	op->busy++;
	op->bulk_rx = 1;
	c->nbulk++;
	op->state = OP_R_BULK;
	if (op->cts)
		ctrl_send(c, op->peer, OFI_CTRL_CTS, op->w.cookie, op->len);
}

static void post_bulk_send(struct ofi_ctx *c, struct ofi_op *op)
{
	int rc;

	rc = (int)fi_tsend(c->ep, op->buf, op->len, desc_of(c, &op->mr),
			   c->peer[op->peer].addr, op->btag, &op->fc[1]);
	if (fabric_busy(rc)) {
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
	uint32_t i = c->wait.head;

	c->wait.head = c->wait.tail = 0;
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

/* ---- matching ------------------------------------------------------- */

/* Bounce b (a message of its peer, in sequence) meets receive op. Frees
 * the bounce buffer. */
static void deliver(struct ofi_ctx *c, struct ofi_op *op,
		    struct ofi_bounce *b)
{
	struct ofi_mhdr *h = bhdr(c, b);
	uint32_t p = b->peer;
	size_t mlen = b->len - MHDR;
	struct ofi_rts w;
	bool marked = false;

	memset(&w, 0, sizeof w);
	if (h->tag & OFI_MH_RTS) {
		memcpy(&w, h, sizeof w);
		marked = (w.cookie & OFI_RTS_OFFER) != 0;
	}
	if (op->offer_rx || op->offer_done) {
		/* A message through the message channel means the peer did
		 * not keep this receive's offer (it had sent something
		 * since; a message on the offer lands in fc[2] whole):
		 * withdraw it. */
		if (op->offer_rx)
			(void)fi_cancel(&c->ep->fid, &op->fc[2]);
		if (op->offered) {
			(void)offer_unsend(c, op);
			op->offered = 0;
			c->peer[p].offers_out--;
		}
		op->offer_done = 0;
	}
	if (!(h->tag & OFI_MH_RTS)) {
		if (mlen == op->len && mlen != 0)
			memcpy(op->buf, bpayload(c, b), mlen);
		bounce_free(c, b);
		complete(c, op, mlen == op->len ? 0 : DPL_ETRUNC);
	} else {
		bounce_free(c, b);
		op->w.cookie = w.cookie & TAG_LOW;
		op->w.len = w.len;
		if (marked) {
			/* An offer withdrawn by a cancel, used by the peer
			 * before it heard so: the payload is already sent to
			 * OBULK|cookie and goes to this receive (or, when the
			 * lengths differ, to the scratch area). */
			op->btag = OFI_TAG_OBULK | op->w.cookie;
			op->cts = 0;
			op->drain = w.len != op->len;
			if (op->drain && w.len > OFI_OFFER_MAX)
				complete(c, op, DPL_EIO);
			else
				post_bulk_recv(c, op);
		} else if (op->doom != 0 || c->peer[p].closing ||
			   c->peer[p].dead) {
			/* The payload needs the peer, which is going. */
			complete(c, op, DPL_EPEER);
		} else if (w.len != op->len) {
			ctrl_send(c, p, OFI_CTRL_NACK, op->w.cookie, op->len);
			complete(c, op, DPL_ETRUNC);
		} else {
			op->btag = OFI_TAG_BULK | op->w.cookie;
			op->cts = 1;
			op->drain = 0;
			post_bulk_recv(c, op);
		}
	}
	/* Counted once the receive is no longer waiting for a match. */
	peer_matched(c, p);
}

/* An arrival in sequence: to the oldest receive of its tag, or kept. */
static void arrive(struct ofi_ctx *c, struct ofi_bounce *b)
{
	struct ofi_op *op;

	struct ofi_rts *w = (struct ofi_rts *)bhdr(c, b);

	/* Its credit goes back: it is out of the provider's hands. */
	c->peer[b->peer].grant++;
	if ((w->h.tag & OFI_MH_RTS) && b->len >= sizeof *w && w->offer.valid)
		offer_keep(c, b->peer, &w->offer);
	op = rq_take(c, b->peer, bhdr(c, b)->tag & ~OFI_MH_RTS, NULL);
	if (op != NULL)
		deliver(c, op, b);
	else
		ux_push(c, b);
}

/* An offered receive whose message (header and payload) landed, in
 * sequence: it is the first receive of its tag from its peer. */
static void arrive_offered(struct ofi_ctx *c, struct ofi_op *op)
{
	uint32_t p = op->peer;

	c->peer[p].grant++;
	if (op->rh.offer.valid)
		offer_keep(c, p, &op->rh.offer);
	op->offer_done = 0;
	if (op->busy > 0)
		op->busy--;
	if (op->req == NULL || rq_take(c, p, 0, op) == NULL) {
		release_if_idle(c, op);
		return;
	}
	if (op->offered) {
		(void)offer_unsend(c, op);
		op->offered = 0;
		c->peer[p].offers_out--;
	}
	c->offers_single++;
	complete(c, op, op->offer_st);
	peer_matched(c, p);
}

/* Ring entries: a bounce buffer (index + 1), or an offered receive whose
 * message landed (OOO_OP | slot index + 1). */
#define OOO_OP (UINT32_C(1) << 31)

static void arrive_entry(struct ofi_ctx *c, uint32_t k)
{
	if (k & OOO_OP)
		arrive_offered(c, &c->op[(k & ~OOO_OP) - 1]);
	else
		arrive(c, &c->bounce[k - 1]);
}

/* A message of p with header h (ring entry k) is here: it arrives now
 * when it is next in p's sequence, with every held one behind it, or is
 * held. False when p cannot have used its sequence number. */
static bool in_seq(struct ofi_ctx *c, uint32_t p, const struct ofi_mhdr *h,
		   uint32_t k)
{
	struct ofi_peer *q = &c->peer[p];
	uint32_t *ring = c->ooo + (size_t)p * c->credit_max;
	uint32_t d = h->seq - q->seq_in;

	if (d >= c->credit_max || ring[h->seq % c->credit_max] != 0)
		return false;
	q->credits += h->credit;
	if (d != 0) {
		ring[h->seq % c->credit_max] = k;
		q->held++;
		if (k & OOO_OP)
			c->offers_held++;
		return true;
	}
	arrive_entry(c, k);
	q->seq_in++;
	while ((k = ring[q->seq_in % c->credit_max]) != 0) {
		ring[q->seq_in % c->credit_max] = 0;
		q->held--;
		arrive_entry(c, k);
		q->seq_in++;
	}
	return true;
}

static void on_bounce(struct ofi_ctx *c, struct ofi_bounce *b, int err,
		      size_t len)
{
	uint32_t p = b->peer;
	struct ofi_peer *q = &c->peer[p];
	struct ofi_mhdr *h = bhdr(c, b);

	b->posted = 0;
	q->posted--;
	if (err != 0 || len < MHDR || len > c->bsz || q->dead) {
		if (err != 0 && err != FI_ECANCELED && dpl__ofi_err_is_peer(err))
			notice_peer(c, p, dpl__ofi_now());
		bounce_free(c, b);
		if (err == 0 && !q->dead)
			top_up(c, p);
		return;
	}
	b->len = len;
	if (!in_seq(c, p, h, (uint32_t)(b - c->bounce) + 1)) {
		/* Not a sequence number p can have used: drop it. */
		bounce_free(c, b);
		notice_peer(c, p, dpl__ofi_now());
		return;
	}
	top_up(c, p);
	/* Credits go back piggy-backed on our next message to p, or in a
	 * CREDIT message once a quarter of them is due. */
	if (q->grant >= (c->credit_max + 3) / 4)
		credit_flush(c, p);
}

/* ---- completions ---------------------------------------------------- */

/* A cancel of an offered receive won: the payload receive left the
 * fabric before anything landed. The peer may still hold the offer;
 * RETRACT removes it (RETRACTED gives its table entry back). */
static void cancel_done(struct ofi_ctx *c, struct ofi_op *op)
{
	if (rq_take(c, op->peer, 0, op) == NULL)
		return;
	if (op->offered) {
		op->offered = 0;
		if (offer_unsend(c, op))
			c->peer[op->peer].offers_out--;
		else
			ctrl_send(c, op->peer, OFI_CTRL_RETRACT,
				  op->btag & TAG_LOW, 0);
	}
	complete(c, op, DPL_ECANCELED);
}

/* The payload receive of an offer (fc[2]) completed. */
static void on_offer_rx(struct ofi_ctx *c, struct ofi_op *op, int err,
			size_t len)
{
	op->offer_rx = 0;
	c->nbulk--;
	if (op->req == NULL) {
		release_if_idle(c, op);
		return;
	}
	if (err == FI_ECANCELED && op->doom == 0) {
		/* Withdrawn here: a cancelled receive ends; one that went
		 * on without the offer does not care. */
		if (op->state == OP_R_HDR && op->cancelling)
			cancel_done(c, op);
		return;
	}
	if (op->state != OP_R_HDR)
		return;
	if (err != 0) {
		if (op->state == OP_R_HDR)
			(void)rq_take(c, op->peer, 0, op);
		complete(c, op, link_error(c, op, err));
		return;
	}
	/* Header and payload in one message: it takes its turn in the
	 * peer's sequence like any arrival; the slot stays until then. */
	if (len < sizeof op->rh || !(op->rh.h.tag & OFI_MH_RTS) ||
	    (op->rh.h.tag & ~OFI_MH_RTS) != op->tag ||
	    (op->rh.cookie & TAG_LOW) != (op->btag & TAG_LOW)) {
		(void)rq_take(c, op->peer, 0, op);
		complete(c, op, DPL_EIO);
		notice_peer(c, op->peer, dpl__ofi_now());
		return;
	}
	op->offer_st = len - sizeof op->rh == op->len ? 0 : DPL_ETRUNC;
	op->offer_done = 1;
	op->busy++;
	if (!in_seq(c, op->peer, &op->rh.h, OOO_OP | (idx_of(c, op) + 1))) {
		op->offer_done = 0;
		op->busy--;
		(void)rq_take(c, op->peer, 0, op);
		complete(c, op, DPL_EIO);
		notice_peer(c, op->peer, dpl__ofi_now());
		return;
	}
	top_up(c, op->peer);
	if (c->peer[op->peer].grant >= (c->credit_max + 3) / 4)
		credit_flush(c, op->peer);
}

static void on_op(struct ofi_ctx *c, struct ofi_op *op, int which, int err,
		  size_t len)
{
	if (op->busy > 0)
		op->busy--;
	if (which == 1 && op->bulk_rx) {
		op->bulk_rx = 0;
		c->nbulk--;
	}
	if (which == 2) {
		on_offer_rx(c, op, err, len);
		return;
	}
	if (which == 1 && err == 0 && op->state == OP_R_BULK && obulk(op)) {
		/* The header in front: its credits count now (its sequence
		 * number did when the USED answer came). */
		if (len < sizeof op->rh) {
			complete(c, op, DPL_EIO);
			return;
		}
		c->peer[op->peer].credits += op->rh.h.credit;
		if (op->rh.offer.valid)
			offer_keep(c, op->peer, &op->rh.offer);
		len -= sizeof op->rh;
	}
	if (op->req == NULL) {
		release_if_idle(c, op);
		return;
	}
	if (which == 0) {
		switch (op->state) {
		case OP_S_MSG:
			complete(c, op, err != 0 ? link_error(c, op, err) : 0);
			break;
		default:
			/* The header of a request to send went out. */
			if (err != 0)
				complete(c, op, link_error(c, op, err));
			break;
		}
		return;
	}
	if (err == 0 && op->send && obulk(op) && op->wd != WD_NONE) {
		/* A message on an offer that its sender asked back: taken
		 * back (the receiver drained it), or the answer decides. */
		if (op->wd == WD_GONE)
			complete(c, op, DPL_ECANCELED);
		else if (op->wd == WD_RETRY)
			complete(c, op, 0);
		return;
	}
	if (err != 0)
		complete(c, op, link_error(c, op, err));
	else if (op->state == OP_R_BULK && (op->drain || len != op->len))
		complete(c, op, DPL_ETRUNC);
	else
		complete(c, op, 0);
}

/* ---- offers: the sender's table -------------------------------------- */

static struct ofi_offer *offer_find(struct ofi_ctx *c, uint32_t p,
				    uint64_t tag)
{
	struct ofi_peer *q = &c->peer[p];
	uint32_t k;

	if (q->offers_in == 0)
		return NULL;
	for (k = 0; k < OFI_OFFERS; k++)
		if (q->offer[k].valid && q->offer[k].tag == tag)
			return &q->offer[k];
	return NULL;
}

static void offer_drop(struct ofi_ctx *c, uint32_t p, struct ofi_offer *o)
{
	o->valid = false;
	c->peer[p].offers_in--;
}

/* An OFFER from m->src: kept when we sent it nothing it had not taken
 * yet (so our next message with that tag is the one it matches). */
static void offer_keep(struct ofi_ctx *c, uint32_t src,
		       const struct ofi_offer_wire *m)
{
	struct ofi_peer *q = &c->peer[src];
	uint32_t k, free_k = OFI_OFFERS;

	if (q->dead || q->dying || q->closing || q->seq_out != m->seq ||
	    m->len > OFI_OFFER_MAX || m->tag > DPL_TAG_MAX)
		return;
	for (k = 0; k < OFI_OFFERS; k++) {
		if (q->offer[k].valid && q->offer[k].tag == m->tag)
			return;
		if (!q->offer[k].valid &&
		    (free_k == OFI_OFFERS ||
		     (q->offer[free_k].used && !q->offer[k].used)))
			free_k = k;
	}
	/* A used entry may go: an offer kept now (seq_out == m->seq) was
	 * made after the receiver took every message sent so far, those
	 * sent on used offers included, so none of them is retracted. */
	if (free_k == OFI_OFFERS)
		return;
	q->offer[free_k].used = false;
	q->offer[free_k].tag = m->tag;
	q->offer[free_k].cookie = m->cookie & TAG_LOW;
	q->offer[free_k].len = m->len;
	q->offer[free_k].valid = true;
	q->offers_in++;
}

/* A RETRACT: the receive behind the offer was cancelled. */
static void offer_retract(struct ofi_ctx *c, const struct ofi_ctrl *m)
{
	struct ofi_peer *q = &c->peer[m->src];
	uint64_t held = 0;
	uint32_t k;

	for (k = 0; k < OFI_OFFERS; k++) {
		struct ofi_offer *o = &q->offer[k];

		if (o->cookie != m->cookie)
			continue;
		if (o->valid) {
			offer_drop(c, m->src, o);
			held = 1;
			break;
		}
		if (o->used) {
			/* Its message is in the fabric, on OBULK|cookie,
			 * that receive gone: the receiver takes it as
			 * arriving now (sequence number, tag, length). */
			o->used = false;
			ctrl_send_full(c, m->src, OFI_CTRL_USED, o->cookie,
				       o->len, o->tag, o->seq);
			return;
		}
	}
	ctrl_send(c, m->src, OFI_CTRL_RETRACTED, m->cookie, held);
}

/* A USED answer: the message the peer sent on an offer of ours whose
 * receive was cancelled first waits in the fabric on OBULK|cookie. It
 * arrives in sequence as a marked request to send (in a bounce buffer of
 * its own), which the next receive of its tag matches and fetches; the
 * answer waits when no bounce buffer is free. */
static void used_arrive(struct ofi_ctx *c, const struct ofi_ctrl *m)
{
	struct ofi_peer *q = &c->peer[m->src];
	struct ofi_bounce *b;
	struct ofi_rts *w;

	if (q->dead || m->len > OFI_OFFER_MAX || m->tag > DPL_TAG_MAX)
		return;
	if ((b = bounce_alloc(c)) == NULL) {
		if (q->nused < OFI_OFFERS) {
			q->used[q->nused++] = *m;
			c->nused++;
		} else {
			notice_peer(c, m->src, dpl__ofi_now());
		}
		return;
	}
	w = (struct ofi_rts *)bhdr(c, b);
	memset(w, 0, sizeof *w);
	w->h.tag = m->tag | OFI_MH_RTS;
	w->h.seq = m->seq;
	w->cookie = (m->cookie & TAG_LOW) | OFI_RTS_OFFER;
	w->len = m->len;
	b->peer = m->src;
	b->len = sizeof *w;
	b->posted = 0;
	if (!in_seq(c, m->src, &w->h, (uint32_t)(b - c->bounce) + 1)) {
		bounce_free(c, b);
		notice_peer(c, m->src, dpl__ofi_now());
		return;
	}
	if (q->grant >= (c->credit_max + 3) / 4)
		credit_flush(c, m->src);
}

/* USED answers that waited for a bounce buffer. */
static void used_retry(struct ofi_ctx *c)
{
	uint32_t p, k;

	for (p = 0; p < c->n && c->nused != 0 && c->nbfree != 0; p++) {
		struct ofi_peer *q = &c->peer[p];

		while (q->nused != 0 && c->nbfree != 0) {
			struct ofi_ctrl m = q->used[0];

			for (k = 1; k < q->nused; k++)
				q->used[k - 1] = q->used[k];
			q->nused--;
			c->nused--;
			used_arrive(c, &m);
		}
	}
}

/* ---- withdrawing a send --------------------------------------------- */

/* Ask the receiver to take op's message back (see dpl__ofi_cancel). */
static void withdraw_ask(struct ofi_ctx *c, struct ofi_op *op)
{
	wd_set(c, op, WD_ASKED);
	ctrl_send_full(c, op->peer, OFI_CTRL_WITHDRAW, op->w.cookie, 0,
		       cookie_of(c, op), 0);
}

/* Take the message of peer p on a withdrawn offer (request to send w)
 * out of the fabric into the scratch area, with no request. Returns
 * false when no slot is free now. */
static bool drain_offered(struct ofi_ctx *c, uint32_t p,
			  const struct ofi_rts *w)
{
	struct ofi_op *op = slot_alloc(c);

	if (op == NULL)
		return false;
	op->send = 0;
	op->peer = p;
	op->tag = w->h.tag & ~OFI_MH_RTS;
	op->buf = NULL;
	op->len = 0;
	op->w = *w;
	op->btag = OFI_TAG_OBULK | (w->cookie & TAG_LOW);
	op->drain = 1;
	op->state = OP_R_BULK_WAIT;
	post_bulk_recv(c, op);
	return true;
}

/* A WITHDRAW of peer m->src: its request to send (or its message on an
 * offer whose receive was cancelled) is dropped when it still waits here
 * unmatched; the answer says whether it was. The sequence number it took
 * stays taken, and neither side counts it as a message for the BYE. */
static void withdraw_arrive(struct ofi_ctx *c, const struct ofi_ctrl *m)
{
	struct ofi_fifo *f = &c->peer[m->src].ux;
	uint32_t i = f->head, prev = 0;
	uint64_t found = 0;

	while (i != 0) {
		struct ofi_bounce *b = &c->bounce[i - 1];
		const struct ofi_rts *w = (const struct ofi_rts *)bhdr(c, b);

		if ((w->h.tag & OFI_MH_RTS) && b->len >= sizeof *w &&
		    w->cookie == m->cookie) {
			if (!(w->cookie & OFI_RTS_OFFER) ||
			    drain_offered(c, m->src, w)) {
				fifo_unlink(c, f, bounce_next, prev, i);
				bounce_free(c, b);
				feed_starved(c);
				found = 1;
			}
			break;
		}
		prev = i;
		i = b->next;
	}
	ctrl_send_full(c, m->src, OFI_CTRL_WITHDRAWN, m->cookie, found,
		       m->tag, 0);
}

/* The answer to a WITHDRAW of ours (m->tag is the send's cookie). */
static void withdrawn_arrive(struct ofi_ctx *c, const struct ofi_ctrl *m)
{
	uint64_t idx = m->tag & SLOT_MASK;
	struct ofi_op *op;
	bool offered;

	if (idx >= c->nop)
		return;
	op = &c->op[idx];
	if (op->gen != (uint32_t)(m->tag >> OFI_SLOT_BITS) ||
	    op->req == NULL || !op->send || op->peer != m->src ||
	    op->wd != WD_ASKED)
		return;
	offered = op->state == OP_S_BULK && obulk(op);
	if (m->len != 0) {
		/* Taken back. A message on an offer ends once the fabric
		 * let go of the caller's buffer (the receiver drains it). */
		wd_set(c, op, WD_GONE);
		if (op->state == OP_S_RTS || op->busy == 0)
			complete(c, op, DPL_ECANCELED);
		return;
	}
	if (offered && op->busy == 0) {
		/* The fabric is done and nothing took it back: delivered. */
		complete(c, op, 0);
		return;
	}
	if (op->state == OP_S_RTS || offered) {
		wd_set(c, op, WD_RETRY);
		op->wd_at = dpl__ofi_now();
	} else {
		wd_set(c, op, WD_NONE); /* matched: it completes normally */
	}
}

/* Ask again for sends whose message was not at the receiver yet. */
static void withdraw_retry(struct ofi_ctx *c)
{
	uint64_t now = dpl__ofi_now();
	uint32_t i;

	for (i = 0; i < c->nop && c->nwd != 0; i++) {
		struct ofi_op *op = &c->op[i];

		if (op->wd == WD_RETRY && op->req != NULL &&
		    now - op->wd_at >= WITHDRAW_RETRY_NS)
			withdraw_ask(c, op);
	}
}

static void on_ctrl(struct ofi_ctx *c, struct ofi_ctrl_slot *s, int err)
{
	struct ofi_ctrl m = s->m;
	struct ofi_op *op;
	uint64_t idx;

	s->posted = false;
	if (ctrl_post(c, s) != 0)
		c->ctrl_unposted++;
	if (err != 0 || m.magic != OFI_CTRL_MAGIC || m.src >= c->n ||
	    m.src == c->rank)
		return;
	if (m.type == OFI_CTRL_CREDIT) {
		if (m.len <= c->credit_max)
			c->peer[m.src].credits += (uint32_t)m.len;
		return;
	}
	if (m.type == OFI_CTRL_OFFER) {
		struct ofi_offer_wire w = {.cookie = m.cookie, .len = m.len,
					   .tag = m.tag, .seq = m.seq,
					   .valid = 1};

		offer_keep(c, m.src, &w);
		return;
	}
	if (m.type == OFI_CTRL_RETRACT) {
		offer_retract(c, &m);
		return;
	}
	if (m.type == OFI_CTRL_WITHDRAW) {
		withdraw_arrive(c, &m);
		return;
	}
	if (m.type == OFI_CTRL_WITHDRAWN) {
		withdrawn_arrive(c, &m);
		return;
	}
	if (m.type == OFI_CTRL_RETRACTED || m.type == OFI_CTRL_USED) {
		if (c->peer[m.src].offers_out > 0)
			c->peer[m.src].offers_out--;
		if (m.type == OFI_CTRL_USED)
			used_arrive(c, &m);
		return;
	}
	idx = m.cookie & SLOT_MASK;
	if (idx >= c->nop)
		return;
	op = &c->op[idx];
	if (op->gen != (uint32_t)(m.cookie >> OFI_SLOT_BITS) ||
	    op->req == NULL || op->peer != m.src || op->state != OP_S_RTS)
		return;
	if (m.type == OFI_CTRL_CTS) {
		if (op->wd == WD_RETRY)
			wd_set(c, op, WD_NONE); /* matched after all */
		post_bulk_send(c, op);
	}
	else if (m.type == OFI_CTRL_NACK)
		complete(c, op, DPL_ETRUNC);
}

static void dispatch(struct ofi_ctx *c, void *ctxp, int err, size_t len)
{
	char *p = ctxp;

	if (p == NULL)
		return;
	if (p >= (char *)c->bounce && p < (char *)(c->bounce + c->nbounce)) {
		size_t i = (size_t)(p - (char *)c->bounce) /
			   sizeof(struct ofi_bounce);

		on_bounce(c, &c->bounce[i], err, len);
	} else if (p >= (char *)c->op && p < (char *)(c->op + c->nop)) {
		size_t i = (size_t)(p - (char *)c->op) / sizeof(struct ofi_op);
		struct ofi_op *op = &c->op[i];

		on_op(c, op,
		      (int)((size_t)(p - (char *)op->fc) / sizeof op->fc[0]),
		      err, len);
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
				dispatch(c, e[i].op_context, 0, e[i].len);
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
					 ee.len);
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
	if (c->npend != 0)
		offer_flush_all(c);
	if (c->nused != 0)
		used_retry(c);
	if (c->nwd != 0)
		withdraw_retry(c);
	if (c->out_len != 0)
		ctrl_flush(c);
	if (c->wait.head != 0)
		retry_waits(c);
	if (c->ctrl_unposted != 0)
		ctrl_repost_all(c);
	if (c->nstarved != 0)
		feed_starved(c);
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

/* A small message copied with its header into one inject. */
static int inject_msg(struct ofi_ctx *c, uint32_t peer, uint64_t tag,
		      const void *buf, size_t len)
{
	union {
		struct ofi_mhdr h;
		char b[MHDR + STAGE_MAX];
	} st;
	int rc;

	mhdr_fill(c, &st.h, peer, tag);
	if (len != 0)
		memcpy(st.b + MHDR, buf, len);
	rc = (int)fi_tinject(c->ep, st.b, MHDR + len, c->peer[peer].addr,
			     OFI_TAG_MSG);
	if (rc == 0)
		mhdr_sent(c, &st.h, peer);
	return rc;
}

int dpl__ofi_isend(struct ofi_ctx *c, struct ofi_req *r, uint32_t peer,
		   uint64_t tag, const void *buf, size_t len)
{
	struct ofi_offer *offer;
	struct ofi_op *op;
	void *desc;
	int rc;

	if (c->peer[peer].dead || c->peer[peer].closing)
		return dead_peer(c, peer);
	if (c->peer[peer].credits == 0) {
		/* The receiver has no buffer for it yet. */
		(void)progress_once(c);
		if (c->peer[peer].dead || c->peer[peer].closing)
			return dead_peer(c, peer);
		if (c->peer[peer].credits == 0)
			return DPL_EAGAIN;
	}
	/* An offer for this tag is consumed by this message, whatever it
	 * is: the receiver matches it against the offered receive. A
	 * message that would have to ask first looks for one that may have
	 * just arrived. */
	offer = offer_find(c, peer, tag);
	if (offer == NULL && len > c->o.inline_max && c->o.offer) {
		(void)progress_once(c);
		if (c->peer[peer].dead || c->peer[peer].closing)
			return dead_peer(c, peer);
		offer = offer_find(c, peer, tag);
	} else if (offer != NULL && c->live != NULL) {
		/* A payload must not go to a peer that has just left. */
		check_live(c);
		if (c->peer[peer].dead || c->peer[peer].closing)
			return dead_peer(c, peer);
	}
	if (len <= c->o.inline_max && MHDR + len <= c->inject &&
	    len <= STAGE_MAX) {
		rc = inject_msg(c, peer, tag, buf, len);
		if (fabric_busy(rc)) {
			(void)progress_once(c);
			if (c->peer[peer].dead || c->peer[peer].closing)
				return dead_peer(c, peer);
			offer = offer_find(c, peer, tag);
			rc = inject_msg(c, peer, tag, buf, len);
		}
		if (fabric_busy(rc))
			return DPL_EAGAIN;
		if (rc != 0)
			return post_error(c, peer, "send", rc);
		if (offer != NULL)
			offer_drop(c, peer, offer);
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
		if (fabric_busy(rc)) {
			(void)progress_once(c);
			offer = offer_find(c, peer, tag);
			rc = post_send_msg(c, op);
		}
	} else if (offer != NULL && offer->len == len) {
		op->state = OP_S_BULK;
		op->btag = OFI_TAG_OBULK | offer->cookie;
		op->w.cookie = offer->cookie | OFI_RTS_OFFER;
		rc = post_offered(c, op);
		if (fabric_busy(rc)) {
			(void)progress_once(c);
			offer = offer_find(c, peer, tag);
			if (offer != NULL && offer->len == len) {
				op->btag = OFI_TAG_OBULK | offer->cookie;
				op->w.cookie = offer->cookie | OFI_RTS_OFFER;
				rc = post_offered(c, op);
			}
		}
		if (rc == 0)
			c->offers_used++;
	} else {
		/* No offer of this length: ask first. An offer of another
		 * length is dropped below (the receiver withdraws it). */
		op->state = OP_S_RTS;
		op->w.cookie = cookie_of(c, op);
		rc = post_rts(c, op);
		if (fabric_busy(rc)) {
			(void)progress_once(c);
			offer = offer_find(c, peer, tag);
			rc = post_rts(c, op);
		}
		op->btag = OFI_TAG_BULK | cookie_of(c, op);
	}
	if (rc >= 0 && (c->peer[peer].dead || c->peer[peer].closing))
		offer = NULL; /* progress above voided the table */
	if (rc < 0) {
		slot_free(c, op);
		if (fabric_busy(rc))
			return DPL_EAGAIN;
		return post_error(c, peer, "send", rc);
	}
	if (rc == 0)
		op->busy = 1;
	op->req = r;
	r->status = DPL_EAGAIN;
	r->slot = idx_of(c, op) + 1;
	if (offer != NULL) {
		offer_drop(c, peer, offer);
		if (op->state == OP_S_BULK) {
			/* Kept as used: a RETRACT of it (the receive was
			 * cancelled before the message landed) learns where
			 * it is in the sequence. */
			offer->used = true;
			offer->seq = op->w.h.seq;
		}
	}
	if (c->npend != 0)
		offer_flush_all(c);
	return 0;
}

/* The waiting offer to p goes alone, as an OFFER control message. */
static void offer_flush(struct ofi_ctx *c, uint32_t p)
{
	struct ofi_peer *q = &c->peer[p];

	if (!q->pend_set)
		return;
	q->pend_set = false;
	c->npend--;
	ctrl_send_full(c, p, OFI_CTRL_OFFER, q->pend.cookie, q->pend.len,
		       q->pend.tag, q->pend.seq);
}

static void offer_flush_all(struct ofi_ctx *c)
{
	uint32_t p;

	for (p = 0; p < c->n && c->npend != 0; p++)
		offer_flush(c, p);
}

/*
 * Offer a receive just queued, when it is large enough to be asked for,
 * small enough for the scratch area, the only one waiting for its tag
 * from that peer, and the peer has room for the offer: post it on
 * OBULK|cookie now and tell the peer.
 */
static void offer_post(struct ofi_ctx *c, struct ofi_op *op)
{
	struct ofi_peer *q = &c->peer[op->peer];
	struct iovec iov[2];
	void *desc[2];
	uint32_t i;
	int rc;

	if (!c->o.offer || op->len <= c->o.inline_max ||
	    op->len > OFI_OFFER_MAX || q->offers_out >= OFI_OFFERS ||
	    c->nbulk >= c->bulk_max || q->dying || q->closing)
		return;
	for (i = q->rq.head; i != 0; i = c->op[i - 1].qnext)
		if (&c->op[i - 1] != op && c->op[i - 1].tag == op->tag)
			return;
	op->btag = OFI_TAG_OBULK | cookie_of(c, op);
	op_iov(c, op, &op->rh, sizeof op->rh, iov, desc);
	rc = (int)fi_trecvv(c->ep, iov, c->mr_local ? desc : NULL, 2,
			    q->addr, op->btag, 0, &op->fc[2]);
	if (rc != 0)
		return; /* no offer: the request to send asks as before */
	op->busy++;
	op->offer_rx = 1;
	op->offered = 1;
	c->nbulk++;
	q->offers_out++;
	c->offers_posted++;
	/* It waits for a ride on the next request to send to that peer
	 * (see ofi_internal.h); an older one still waiting goes alone. */
	if (q->pend_set)
		offer_flush(c, op->peer);
	q->pend.cookie = cookie_of(c, op);
	q->pend.len = op->len;
	q->pend.tag = op->tag;
	q->pend.seq = q->seq_in;
	q->pend.valid = 1;
	q->pend_set = true;
	c->npend++;
}

int dpl__ofi_irecv(struct ofi_ctx *c, struct ofi_req *r, uint32_t peer,
		   uint64_t tag, void *buf, size_t len)
{
	struct ofi_op *op;
	struct ofi_bounce *b;
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
	op->req = r;
	r->status = DPL_EAGAIN;
	r->slot = idx_of(c, op) + 1;
	b = ux_take(c, peer, tag);
	if (b == NULL) {
		rq_push(c, op);
		offer_post(c, op);
		return 0;
	}
	/* Already here: it completes now, or asks for the payload. */
	deliver(c, op, b);
	feed_starved(c);
	return 0;
}

int dpl__ofi_cancel(struct ofi_ctx *c, struct ofi_req *r)
{
	struct ofi_op *op;
	unsigned k;

	if (r->status != DPL_EAGAIN || r->slot == 0 || r->slot > c->nop)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: cancel of a request that is "
				     "not pending");
	op = &c->op[r->slot - 1];
	if (op->req != r)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: cancel of a request that is "
				     "not pending");
	/* A send whose message waits for the receiver (a request to send,
	 * or a message on an offer whose receive was cancelled) is asked
	 * back: it ends DPL_ECANCELED when the receiver had not matched it
	 * yet, else normally. Other sends complete on their own. */
	if (op->send) {
		if (op->wd == WD_NONE && !c->peer[op->peer].dead &&
		    !c->peer[op->peer].closing &&
		    (op->state == OP_S_RTS ||
		     (op->state == OP_S_BULK && obulk(op))))
			withdraw_ask(c, op);
		return 0;
	}
	/* Only a receive not matched yet can end early; anything further
	 * along completes normally. */
	if (op->state != OP_R_HDR || op->cancelling)
		return 0;
	if (!op->offer_rx && !op->offer_done) {
		if (rq_take(c, op->peer, 0, op) != NULL)
			complete(c, op, DPL_ECANCELED);
		return 0;
	}
	if (op->offer_done)
		return 0; /* its payload is here; the header follows */
	/* Offered: withdraw the payload receive from the fabric first
	 * (on_offer_rx ends the request once that is confirmed; when the
	 * payload landed first, the receive completes normally). The
	 * providers confirm at once; a few rounds of progress see it. */
	op->cancelling = 1;
	(void)fi_cancel(&c->ep->fid, &op->fc[2]);
	for (k = 0; k < CANCEL_ROUNDS && op->req == r && op->offer_rx; k++)
		if (progress_once(c) != 0)
			break;
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

static uint32_t clamp_u32(size_t v, uint32_t lo, uint32_t hi)
{
	return v < lo ? lo : v > hi ? hi : (uint32_t)v;
}

int dpl__ofi_data_init(struct ofi_ctx *c)
{
	uint32_t i, others = c->n > 1 ? c->n - 1 : 1;
	size_t rx = c->rx_size != 0 ? c->rx_size : 1024;
	int rc;

	/*
	 * Receive entries of the provider: a quarter for the bounce buffers
	 * posted (per peer at most OFI_BPP_MAX, at least 2), a quarter for
	 * messages in flight beyond those (the credits, per peer at most
	 * 256), a quarter for bulk receives; the rest holds control
	 * messages.
	 */
	c->bpp = clamp_u32(rx / 4 / others, 2, OFI_BPP_MAX);
	c->credit_max = clamp_u32(rx / 4 / others, 2, 256);
	if (c->credit_max < c->bpp)
		c->credit_max = c->bpp;
	c->bulk_max = clamp_u32(rx / 4, 4, 256);
	c->nbounce = others * (c->bpp + c->credit_max) * 2;
	if (c->nbounce < c->nop)
		c->nbounce = c->nop;
	c->op = calloc(c->nop, sizeof *c->op);
	c->ctrl = calloc(OFI_NCTRL, sizeof *c->ctrl);
	c->out_cap = 2 * c->nop + OFI_NCTRL + c->n * (1 + OFI_OFFERS);
	c->out = calloc(c->out_cap, sizeof *c->out);
	c->warm = calloc(c->n, sizeof *c->warm);
	c->warm_fc = calloc(c->n, sizeof *c->warm_fc);
	c->bounce = calloc(c->nbounce, sizeof *c->bounce);
	c->ooo = calloc((size_t)c->n * c->credit_max, sizeof *c->ooo);
	c->offers = calloc((size_t)c->n * OFI_OFFERS, sizeof *c->offers);
	if (!c->op || !c->ctrl || !c->out || !c->warm || !c->warm_fc ||
	    !c->bounce || !c->ooo || !c->offers)
		return dpl_set_error(DPL_ENOMEM, "ofi: out of memory");
	/* Scratch for payloads of withdrawn offers: address space only. */
	c->scratch = mmap(NULL, OFI_OFFER_MAX, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (c->scratch == MAP_FAILED) {
		c->scratch = NULL;
		c->o.offer = false;
	}
	/* An offered receive takes its message as a header slot and the
	 * caller's buffer: without 2-entry receives, no offers. */
	if (c->info->rx_attr->iov_limit < 2)
		c->o.offer = false;
	for (i = 0; i < c->nop; i++) {
		c->op[i].next = i + 2 <= c->nop ? i + 2 : 0;
		c->op[i].mr.idx = -1;
	}
	c->free_head = 1;
	/* Bounce buffers: address space reserved once; only the pages
	 * messages land in are ever touched. */
	for (;;) {
		c->bsz = ((size_t)c->o.inline_max + MHDR + 63) & ~(size_t)63;
		c->bdata_len = c->bsz * c->nbounce;
		c->bdata = mmap(NULL, c->bdata_len, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				-1, 0);
		if (c->bdata != MAP_FAILED)
			break;
		/* Strict overcommit: settle for less, send more in two
		 * steps. */
		c->bdata = NULL;
		if (c->o.inline_max <= 4096)
			return dpl_set_error(DPL_ENOMEM,
					     "ofi: cannot reserve %zu bytes of "
					     "address space", c->bdata_len);
		c->o.inline_max /= 2;
	}
	for (i = c->nbounce; i > 0; i--)
		bounce_free(c, &c->bounce[i - 1]);
	if (c->mr_local) {
		if ((rc = dpl__ofi_mr_reg(c, c->op, c->nop * sizeof *c->op,
					  &c->op_mr)) != 0 ||
		    (rc = dpl__ofi_mr_reg(c, c->ctrl,
					  OFI_NCTRL * sizeof *c->ctrl,
					  &c->ctrl_mr)) != 0 ||
		    (rc = dpl__ofi_mr_reg(c, c->bdata, c->bdata_len,
					  &c->bdata_mr)) != 0 ||
		    (rc = dpl__ofi_mr_reg(c, c->warm, c->n * sizeof *c->warm,
					  &c->warm_mr)) != 0)
			return rc;
		if (c->scratch != NULL &&
		    (rc = dpl__ofi_mr_reg(c, c->scratch, OFI_OFFER_MAX,
					  &c->scratch_mr)) != 0)
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

int dpl__ofi_data_start(struct ofi_ctx *c)
{
	struct ofi_bounce *b;
	uint32_t p;
	int rc;

	/* Each peer starts with credits for the buffers posted here. */
	for (p = 0; p < c->n; p++) {
		if (p == c->rank)
			continue;
		c->peer[p].credits = c->credit_max;
		c->peer[p].offer = c->offers + (size_t)p * OFI_OFFERS;
		while (c->peer[p].posted < c->bpp) {
			b = bounce_alloc(c);
			if (b == NULL)
				return dpl_set_error(DPL_ENOMEM,
						     "ofi: %u bounce buffers "
						     "for %u peers", c->nbounce,
						     c->n - 1);
			if ((rc = bounce_post(c, b, p)) != 0) {
				bounce_free(c, b);
				return dpl_set_error(DPL_EIO,
						     "ofi: posting receives "
						     "for rank %u: %s", p,
						     fi_strerror(-rc));
			}
		}
	}
	return 0;
}

void dpl__ofi_data_retract(struct ofi_ctx *c)
{
	uint32_t i;

	for (i = 0; i < c->nop; i++) {
		struct ofi_op *op = &c->op[i];

		if (op->state != OP_R_HDR || op->req == NULL || !op->offered)
			continue;
		op->offered = 0;
		if (!offer_unsend(c, op))
			ctrl_send(c, op->peer, OFI_CTRL_RETRACT,
				  op->btag & TAG_LOW, 0);
	}
	if (c->out_len != 0)
		ctrl_flush(c);
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
	free(c->bounce);
	free(c->ooo);
	free(c->offers);
	if (c->bdata != NULL)
		munmap(c->bdata, c->bdata_len);
	if (c->scratch != NULL)
		munmap(c->scratch, OFI_OFFER_MAX);
	c->offers = NULL;
	c->scratch = NULL;
	c->op = NULL;
	c->ctrl = NULL;
	c->out = NULL;
	c->warm = NULL;
	c->warm_fc = NULL;
	c->bounce = NULL;
	c->ooo = NULL;
	c->bdata = NULL;
}
