/*
 * ofi_peers.c - the liveness of peers as the data path sees it: a peer
 * noticed dying (liveness thread, fabric error) gets a short grace, one
 * that said goodbye keeps matching what it sent, and then its requests
 * fail with DPL_EPEER; also the errors a post to a peer returns.
 */
#include <rdma/fi_endpoint.h>

#include "ofi_internal.h"

/* After a peer is noticed dead, its messages already delivered to this
 * host get this long to be matched before its requests fail. */
#define PEER_GRACE_NS (100u * 1000000u)
/* A cancelled bulk receive of a dead peer whose cancellation the
 * provider never reports is completed anyway after this long. */
#define DOOM_WAIT_NS (500u * 1000000u)
/* A peer that closed with messages still to match: its receives fail
 * once none of them matched for this long. */
#define CLOSE_IDLE_NS (1000u * 1000000u)

/* A crash (or a fabric error): the peer fails after a short grace. */
void dpl__ofi_notice_peer(struct ofi_ctx *c, uint32_t p, uint64_t now)
{
	struct ofi_peer *q = &c->peer[p];

	if (q->dead || q->dying || q->closing)
		return;
	q->dying = true;
	q->since = now;
	c->ndying++;
}

/* Map a completion error; a peer-level error also marks the peer. */
int dpl__ofi_op_error(struct ofi_ctx *c, struct ofi_op *op, int err)
{
	int st;

	if (op->doom != 0)
		return op->doom;
	st = dpl__ofi_err(err);
	if (st == DPL_EPEER)
		dpl__ofi_notice_peer(c, op->peer, dpl_clock_ns());
	return st;
}

/* A fabric operation with one peer completed in error. A generic I/O
 * error there means the link to that peer broke (tcp;ofi_rxm reports a
 * receive whose sender died mid-message as FI_EIO), and a message of the
 * pair is lost either way: the peer counts as failed, and the caller
 * hears DPL_EPEER naming it. */
int dpl__ofi_link_error(struct ofi_ctx *c, struct ofi_op *op, int err)
{
	if (dpl__ofi_err(err) == DPL_EIO)
		err = FI_ECONNRESET;
	return dpl__ofi_op_error(c, op, err);
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
			dpl__ofi_complete(c, op, 0);
			continue;
		}
		switch (op->state) {
		case OP_R_HDR:
			if (what != FAIL_STALLED &&
			    dpl__ofi_rq_take(c, p, 0, op) != NULL)
				dpl__ofi_complete(c, op, DPL_EPEER);
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
			dpl__ofi_complete(c, op, DPL_EPEER);
			break;
		case OP_S_RTS:
			if (what == FAIL_RECV || (what == FAIL_STALLED &&
						  op->busy != 0))
				break;
			dpl__ofi_complete(c, op, DPL_EPEER);
			break;
		default:
			/* A send the fabric still holds: after a close it
			 * completes on its own. On death the slot stays
			 * until the fabric lets go; the request ends now. */
			if (what == FAIL_ALL)
				dpl__ofi_complete(c, op, DPL_EPEER);
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
		struct ofi_ctrl_out *m =
			&c->out[(c->out_head + k) % c->out_cap];

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
		dpl__ofi_bounce_free(c, b);
	}
	q->ux.tail = 0;
	dpl__ofi_feed_starved(c);
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
void dpl__ofi_peer_matched(struct ofi_ctx *c, uint32_t p)
{
	struct ofi_peer *q = &c->peer[p];

	q->recvd++;
	if (q->closing) {
		q->since = dpl_clock_ns();
		if (q->recvd == q->bye_n)
			fail_ops(c, p, q->since, FAIL_RECV);
	}
}

void dpl__ofi_deadlines(struct ofi_ctx *c)
{
	uint64_t now = dpl_clock_ns();
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
				dpl__ofi_complete(c, op, op->doom);
		}
}

void dpl__ofi_check_live(struct ofi_ctx *c)
{
	unsigned g = dpl__ofi_live_gen(c->live);
	uint64_t now, bye;
	uint32_t p;

	if (g == c->live_seen)
		return;
	c->live_seen = g;
	now = dpl_clock_ns();
	for (p = 0; p < c->n; p++) {
		if (p == c->rank || !dpl__ofi_live_dead(c->live, p, &bye))
			continue;
		if (bye != UINT64_MAX)
			peer_closing(c, p, bye, now);
		else
			dpl__ofi_notice_peer(c, p, now);
	}
}

int dpl__ofi_post_error(struct ofi_ctx *c, uint32_t peer, const char *what,
			int rc)
{
	int st = dpl__ofi_err(-rc);

	if (st == DPL_EPEER)
		dpl__ofi_notice_peer(c, peer, dpl_clock_ns());
	return dpl_set_error(st == DPL_EAGAIN ? DPL_EIO : st,
			     "ofi: %s to rank %u: %s", what, peer,
			     fi_strerror(-rc));
}

int dpl__ofi_dead_peer(struct ofi_ctx *c, uint32_t peer)
{
	return dpl_set_error(DPL_EPEER, "ofi: rank %u failed", peer);
}
