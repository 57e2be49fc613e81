/*
 * ofi_ops.c - the table of the libfabric transport and its data-path
 * members: isend (in one piece, on an offer, or as a request to send),
 * irecv (matched at once against what already arrived, else queued and
 * maybe offered), test, progress and cancel. Arguments arrive checked
 * by dpl_transport_isend() and its siblings (dpl/transport.h); what is
 * checked here is this context's own state (a broken completion queue,
 * a dead peer).
 */
#include <rdma/fi_endpoint.h>

#include "ofi_internal.h"

/* Rounds of progress a cancel of an offered receive spends waiting for
 * the fabric to confirm that its payload receive is gone. */
#define CANCEL_ROUNDS 64

static int broken(const struct ofi_ctx *c)
{
	return dpl_set_error(DPL_EIO,
			     "ofi: the completion queue failed earlier");
}

static int ofi_isend(void *ctx, void *req, uint32_t peer, uint64_t tag,
		     const void *buf, size_t len, uint32_t mem)
{
	struct ofi_ctx *c = ctx;
	struct ofi_req *r = req;
	struct ofi_offer *offer;
	struct ofi_op *op;
	void *desc;
	int rc;

	if (c->broken)
		return broken(c);
	if (c->peer[peer].dead || c->peer[peer].closing)
		return dpl__ofi_dead_peer(c, peer);
	if (c->peer[peer].credits == 0) {
		/* The receiver has no buffer for it yet. */
		(void)dpl__ofi_progress_once(c);
		if (c->peer[peer].dead || c->peer[peer].closing)
			return dpl__ofi_dead_peer(c, peer);
		if (c->peer[peer].credits == 0)
			return DPL_EAGAIN;
	}
	/* An offer for this tag is consumed by this message, whatever it
	 * is: the receiver matches it against the offered receive. A
	 * message that would have to ask first looks for one that may have
	 * just arrived. */
	offer = dpl__ofi_offer_find(c, peer, tag);
	if (offer == NULL && len > c->o.inline_max && c->o.offer) {
		(void)dpl__ofi_progress_once(c);
		if (c->peer[peer].dead || c->peer[peer].closing)
			return dpl__ofi_dead_peer(c, peer);
		offer = dpl__ofi_offer_find(c, peer, tag);
	} else if (offer != NULL && c->live != NULL) {
		/* A payload must not go to a peer that has just left. */
		dpl__ofi_check_live(c);
		if (c->peer[peer].dead || c->peer[peer].closing)
			return dpl__ofi_dead_peer(c, peer);
	}
	if (len <= c->o.inline_max && MHDR + len <= c->inject &&
	    len <= STAGE_MAX) {
		rc = dpl__ofi_inject_msg(c, peer, tag, buf, len);
		if (fabric_busy(rc)) {
			(void)dpl__ofi_progress_once(c);
			if (c->peer[peer].dead || c->peer[peer].closing)
				return dpl__ofi_dead_peer(c, peer);
			offer = dpl__ofi_offer_find(c, peer, tag);
			rc = dpl__ofi_inject_msg(c, peer, tag, buf, len);
		}
		if (fabric_busy(rc))
			return DPL_EAGAIN;
		if (rc != 0)
			return dpl__ofi_post_error(c, peer, "send", rc);
		if (offer != NULL)
			dpl__ofi_offer_drop(c, peer, offer);
		r->status = 0;
		r->slot = 0;
		c->reported++;
		c->peer[peer].sent++;
		return 0;
	}
	if ((op = dpl__ofi_slot_alloc(c)) == NULL)
		return DPL_EAGAIN;
	op->send = 1;
	op->peer = peer;
	op->tag = tag;
	op->buf = (void *)buf;
	op->len = len;
	if ((rc = dpl__ofi_mr_get(c, buf, len, &op->mr, &desc)) != 0) {
		dpl__ofi_slot_free(c, op);
		return rc;
	}
	if (len <= c->o.inline_max) {
		op->state = OP_S_MSG;
		rc = dpl__ofi_post_send_msg(c, op);
		if (fabric_busy(rc)) {
			(void)dpl__ofi_progress_once(c);
			offer = dpl__ofi_offer_find(c, peer, tag);
			rc = dpl__ofi_post_send_msg(c, op);
		}
	} else if (offer != NULL && offer->len == len) {
		op->state = OP_S_BULK;
		op->btag = OFI_TAG_OBULK | offer->cookie;
		op->w.cookie = offer->cookie | OFI_RTS_OFFER;
		rc = dpl__ofi_post_offered(c, op);
		if (fabric_busy(rc)) {
			(void)dpl__ofi_progress_once(c);
			offer = dpl__ofi_offer_find(c, peer, tag);
			if (offer != NULL && offer->len == len) {
				op->btag = OFI_TAG_OBULK | offer->cookie;
				op->w.cookie = offer->cookie | OFI_RTS_OFFER;
				rc = dpl__ofi_post_offered(c, op);
			}
		}
		if (rc == 0)
			c->offers_used++;
	} else {
		/* No offer of this length: ask first. An offer of another
		 * length is dropped below (the receiver withdraws it). */
		op->state = OP_S_RTS;
		op->w.cookie = cookie_of(c, op);
		rc = dpl__ofi_post_rts(c, op);
		if (fabric_busy(rc)) {
			(void)dpl__ofi_progress_once(c);
			offer = dpl__ofi_offer_find(c, peer, tag);
			rc = dpl__ofi_post_rts(c, op);
		}
		op->btag = OFI_TAG_BULK | cookie_of(c, op);
	}
	if (rc >= 0 && (c->peer[peer].dead || c->peer[peer].closing))
		offer = NULL; /* progress above voided the table */
	if (rc < 0) {
		dpl__ofi_slot_free(c, op);
		if (fabric_busy(rc))
			return DPL_EAGAIN;
		return dpl__ofi_post_error(c, peer, "send", rc);
	}
	if (rc == 0)
		op->busy = 1;
	op->req = r;
	r->status = DPL_EAGAIN;
	r->slot = idx_of(c, op) + 1;
	if (offer != NULL) {
		dpl__ofi_offer_drop(c, peer, offer);
		if (op->state == OP_S_BULK) {
			/* Kept as used: a RETRACT of it (the receive was
			 * cancelled before the message landed) learns where
			 * it is in the sequence. */
			offer->used = true;
			offer->seq = op->w.h.seq;
		}
	}
	if (c->npend != 0)
		dpl__ofi_offer_flush_all(c);
	return 0;
}

static int ofi_irecv(void *ctx, void *req, uint32_t peer, uint64_t tag,
		     void *buf, size_t len, uint32_t mem)
{
	struct ofi_ctx *c = ctx;
	struct ofi_req *r = req;
	struct ofi_op *op;
	struct ofi_bounce *b;
	void *desc;
	int rc;

	if (c->broken)
		return broken(c);
	if (c->peer[peer].dead || (c->peer[peer].closing &&
				   c->peer[peer].recvd >= c->peer[peer].bye_n))
		return dpl__ofi_dead_peer(c, peer);
	if ((op = dpl__ofi_slot_alloc(c)) == NULL)
		return DPL_EAGAIN;
	op->send = 0;
	op->peer = peer;
	op->tag = tag;
	op->buf = buf;
	op->len = len;
	op->state = OP_R_HDR;
	if ((rc = dpl__ofi_mr_get(c, buf, len, &op->mr, &desc)) != 0) {
		dpl__ofi_slot_free(c, op);
		return rc;
	}
	op->req = r;
	r->status = DPL_EAGAIN;
	r->slot = idx_of(c, op) + 1;
	b = dpl__ofi_ux_take(c, peer, tag);
	if (b == NULL) {
		dpl__ofi_rq_push(c, op);
		dpl__ofi_offer_post(c, op);
		return 0;
	}
	/* Already here: it completes now, or asks for the payload. */
	dpl__ofi_deliver(c, op, b);
	dpl__ofi_feed_starved(c);
	return 0;
}

static int ofi_cancel(void *ctx, void *req)
{
	struct ofi_ctx *c = ctx;
	struct ofi_req *r = req;
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
			dpl__ofi_withdraw_ask(c, op);
		return 0;
	}
	/* Only a receive not matched yet can end early; anything further
	 * along completes normally. */
	if (op->state != OP_R_HDR || op->cancelling)
		return 0;
	if (!op->offer_rx && !op->offer_done) {
		if (dpl__ofi_rq_take(c, op->peer, 0, op) != NULL)
			dpl__ofi_complete(c, op, DPL_ECANCELED);
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
		if (dpl__ofi_progress_once(c) != 0)
			break;
	return 0;
}

static int ofi_test(void *ctx, void *req)
{
	return ((const struct ofi_req *)req)->status;
}

static int ofi_progress(void *ctx)
{
	return dpl__ofi_progress(ctx);
}

const char *dpl__ofi_local_address(void *ctx)
{
	return ((struct ofi_ctx *)ctx)->local;
}

const char *dpl__ofi_provider(void *ctx)
{
	return ((struct ofi_ctx *)ctx)->prov;
}

void dpl__ofi_offer_counts(void *ctx, uint64_t *posted, uint64_t *used,
			   uint64_t *single, uint64_t *held)
{
	*posted = ((struct ofi_ctx *)ctx)->offers_posted;
	*used = ((struct ofi_ctx *)ctx)->offers_used;
	*single = ((struct ofi_ctx *)ctx)->offers_single;
	*held = ((struct ofi_ctx *)ctx)->offers_held;
}

/* No wait (callers spin on progress) and no iallreduce (the core runs
 * its ring). */
const struct dpl_transport_ops dpl_transport_ofi = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "ofi",
	.caps = DPL_TRANSPORT_CAP_PEER_FAILURE,
	.ctx_size = sizeof(struct ofi_ctx),
	.req_size = sizeof(struct ofi_req),
	.init = dpl__ofi_init,
	.fini = dpl__ofi_fini,
	.isend = ofi_isend,
	.irecv = ofi_irecv,
	.test = ofi_test,
	.progress = ofi_progress,
	.cancel = ofi_cancel,
};

DPL_TRANSPORT_PLUGIN(dpl_transport_ofi);
