/*
 * ofi_match.c - matching: the messages of each peer are put back in
 * sequence order, then each meets the oldest receive of its tag from that
 * peer (exact source and tag, FIFO) or waits in its bounce buffer; an
 * arrival that is a request to send asks for its payload (CTS) or is
 * refused (NACK, DPL_ETRUNC).
 */
#include <string.h>

#include <rdma/fi_endpoint.h>

#include "ofi_internal.h"

/* Bounce b (a message of its peer, in sequence) meets receive op. Frees
 * the bounce buffer. */
void dpl__ofi_deliver(struct ofi_ctx *c, struct ofi_op *op,
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
			(void)dpl__ofi_offer_unsend(c, op);
			op->offered = 0;
			c->peer[p].offers_out--;
		}
		op->offer_done = 0;
	}
	if (!(h->tag & OFI_MH_RTS)) {
		if (mlen == op->len && mlen != 0)
			memcpy(op->buf, bpayload(c, b), mlen);
		dpl__ofi_bounce_free(c, b);
		dpl__ofi_complete(c, op, mlen == op->len ? 0 : DPL_ETRUNC);
	} else {
		dpl__ofi_bounce_free(c, b);
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
				dpl__ofi_complete(c, op, DPL_EIO);
			else
				dpl__ofi_post_bulk_recv(c, op);
		} else if (op->doom != 0 || c->peer[p].closing ||
			   c->peer[p].dead) {
			/* The payload needs the peer, which is going. */
			dpl__ofi_complete(c, op, DPL_EPEER);
		} else if (w.len != op->len) {
			dpl__ofi_ctrl_send(c, p, OFI_CTRL_NACK, op->w.cookie,
					   op->len);
			dpl__ofi_complete(c, op, DPL_ETRUNC);
		} else {
			op->btag = OFI_TAG_BULK | op->w.cookie;
			op->cts = 1;
			op->drain = 0;
			dpl__ofi_post_bulk_recv(c, op);
		}
	}
	/* Counted once the receive is no longer waiting for a match. */
	dpl__ofi_peer_matched(c, p);
}

/* An arrival in sequence: to the oldest receive of its tag, or kept. */
static void arrive(struct ofi_ctx *c, struct ofi_bounce *b)
{
	struct ofi_op *op;

	struct ofi_rts *w = (struct ofi_rts *)bhdr(c, b);

	/* Its credit goes back: it is out of the provider's hands. */
	c->peer[b->peer].grant++;
	if ((w->h.tag & OFI_MH_RTS) && b->len >= sizeof *w && w->offer.valid)
		dpl__ofi_offer_keep(c, b->peer, &w->offer);
	op = dpl__ofi_rq_take(c, b->peer, bhdr(c, b)->tag & ~OFI_MH_RTS, NULL);
	if (op != NULL)
		dpl__ofi_deliver(c, op, b);
	else
		dpl__ofi_ux_push(c, b);
}

/* An offered receive whose message (header and payload) landed, in
 * sequence: it is the first receive of its tag from its peer. */
static void arrive_offered(struct ofi_ctx *c, struct ofi_op *op)
{
	uint32_t p = op->peer;

	c->peer[p].grant++;
	if (op->rh.offer.valid)
		dpl__ofi_offer_keep(c, p, &op->rh.offer);
	op->offer_done = 0;
	if (op->busy > 0)
		op->busy--;
	if (op->req == NULL || dpl__ofi_rq_take(c, p, 0, op) == NULL) {
		dpl__ofi_release_if_idle(c, op);
		return;
	}
	if (op->offered) {
		(void)dpl__ofi_offer_unsend(c, op);
		op->offered = 0;
		c->peer[p].offers_out--;
	}
	c->offers_single++;
	dpl__ofi_complete(c, op, op->offer_st);
	dpl__ofi_peer_matched(c, p);
}

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
bool dpl__ofi_in_seq(struct ofi_ctx *c, uint32_t p, const struct ofi_mhdr *h,
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

void dpl__ofi_on_bounce(struct ofi_ctx *c, struct ofi_bounce *b, int err,
			size_t len)
{
	uint32_t p = b->peer;
	struct ofi_peer *q = &c->peer[p];
	struct ofi_mhdr *h = bhdr(c, b);

	b->posted = 0;
	q->posted--;
	if (err != 0 || len < MHDR || len > c->bsz || q->dead) {
		if (err != 0 && err != FI_ECANCELED &&
		    dpl__ofi_err_is_peer(err))
			dpl__ofi_notice_peer(c, p, dpl_clock_ns());
		dpl__ofi_bounce_free(c, b);
		if (err == 0 && !q->dead)
			dpl__ofi_top_up(c, p);
		return;
	}
	b->len = len;
	if (!dpl__ofi_in_seq(c, p, h, (uint32_t)(b - c->bounce) + 1)) {
		/* Not a sequence number p can have used: drop it. */
		dpl__ofi_bounce_free(c, b);
		dpl__ofi_notice_peer(c, p, dpl_clock_ns());
		return;
	}
	dpl__ofi_top_up(c, p);
	/* Credits go back piggy-backed on our next message to p, or in a
	 * CREDIT message once a quarter of them is due. */
	if (q->grant >= (c->credit_max + 3) / 4)
		dpl__ofi_credit_flush(c, p);
}
