/*
 * ofi_offer.c - offers: a large receive posted ahead is offered to its
 * sender (riding on a request to send, or alone), the sender's table of
 * the offers it holds, retracting an offer whose receive was cancelled,
 * and the USED answer for a message already sent on one.
 */
#include <string.h>

#include <rdma/fi_tagged.h>

#include "ofi_internal.h"

/* Forget op's offer if it has not left yet (then the peer never sees
 * it). Returns whether it had not. */
bool dpl__ofi_offer_unsend(struct ofi_ctx *c, struct ofi_op *op)
{
	struct ofi_peer *q = &c->peer[op->peer];

	if (!q->pend_set || q->pend.cookie != (op->btag & TAG_LOW))
		return false;
	q->pend_set = false;
	c->npend--;
	return true;
}

struct ofi_offer *dpl__ofi_offer_find(struct ofi_ctx *c, uint32_t p,
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

void dpl__ofi_offer_drop(struct ofi_ctx *c, uint32_t p, struct ofi_offer *o)
{
	o->valid = false;
	c->peer[p].offers_in--;
}

/* An OFFER from m->src: kept when we sent it nothing it had not taken
 * yet (so our next message with that tag is the one it matches). */
void dpl__ofi_offer_keep(struct ofi_ctx *c, uint32_t src,
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
void dpl__ofi_offer_retract(struct ofi_ctx *c, const struct ofi_ctrl *m)
{
	struct ofi_peer *q = &c->peer[m->src];
	uint64_t held = 0;
	uint32_t k;

	for (k = 0; k < OFI_OFFERS; k++) {
		struct ofi_offer *o = &q->offer[k];

		if (o->cookie != m->cookie)
			continue;
		if (o->valid) {
			dpl__ofi_offer_drop(c, m->src, o);
			held = 1;
			break;
		}
		if (o->used) {
			/* Its message is in the fabric, on OBULK|cookie,
			 * that receive gone: the receiver takes it as
			 * arriving now (sequence number, tag, length). */
			o->used = false;
			dpl__ofi_ctrl_send_full(c, m->src, OFI_CTRL_USED,
						o->cookie, o->len, o->tag,
						o->seq);
			return;
		}
	}
	dpl__ofi_ctrl_send(c, m->src, OFI_CTRL_RETRACTED, m->cookie, held);
}

/* A USED answer: the message the peer sent on an offer of ours whose
 * receive was cancelled first waits in the fabric on OBULK|cookie. It
 * arrives in sequence as a marked request to send (in a bounce buffer of
 * its own), which the next receive of its tag matches and fetches; the
 * answer waits when no bounce buffer is free. */
void dpl__ofi_used_arrive(struct ofi_ctx *c, const struct ofi_ctrl *m)
{
	struct ofi_peer *q = &c->peer[m->src];
	struct ofi_bounce *b;
	struct ofi_rts *w;

	if (q->dead || m->len > OFI_OFFER_MAX || m->tag > DPL_TAG_MAX)
		return;
	if ((b = dpl__ofi_bounce_alloc(c)) == NULL) {
		if (q->nused < OFI_OFFERS) {
			q->used[q->nused++] = *m;
			c->nused++;
		} else {
			dpl__ofi_notice_peer(c, m->src, dpl_clock_ns());
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
	if (!dpl__ofi_in_seq(c, m->src, &w->h, (uint32_t)(b - c->bounce) + 1)) {
		dpl__ofi_bounce_free(c, b);
		dpl__ofi_notice_peer(c, m->src, dpl_clock_ns());
		return;
	}
	if (q->grant >= (c->credit_max + 3) / 4)
		dpl__ofi_credit_flush(c, m->src);
}

/* USED answers that waited for a bounce buffer. */
void dpl__ofi_used_retry(struct ofi_ctx *c)
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
			dpl__ofi_used_arrive(c, &m);
		}
	}
}

/* The waiting offer to p goes alone, as an OFFER control message. */
static void offer_flush(struct ofi_ctx *c, uint32_t p)
{
	struct ofi_peer *q = &c->peer[p];

	if (!q->pend_set)
		return;
	q->pend_set = false;
	c->npend--;
	dpl__ofi_ctrl_send_full(c, p, OFI_CTRL_OFFER, q->pend.cookie,
				q->pend.len, q->pend.tag, q->pend.seq);
}

void dpl__ofi_offer_flush_all(struct ofi_ctx *c)
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
void dpl__ofi_offer_post(struct ofi_ctx *c, struct ofi_op *op)
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
	dpl__ofi_op_iov(c, op, &op->rh, sizeof op->rh, iov, desc);
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

void dpl__ofi_data_retract(struct ofi_ctx *c)
{
	uint32_t i;

	for (i = 0; i < c->nop; i++) {
		struct ofi_op *op = &c->op[i];

		if (op->state != OP_R_HDR || op->req == NULL || !op->offered)
			continue;
		op->offered = 0;
		if (!dpl__ofi_offer_unsend(c, op))
			dpl__ofi_ctrl_send(c, op->peer, OFI_CTRL_RETRACT,
					   op->btag & TAG_LOW, 0);
	}
	if (c->out_len != 0)
		dpl__ofi_ctrl_flush(c);
}
