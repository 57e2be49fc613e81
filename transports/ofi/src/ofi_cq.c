/*
 * ofi_cq.c - the completion queue: reading it, handing each completion to
 * what it belongs to (a bounce buffer, an operation slot, a control
 * receive, a warm-up receive), and one round of progress.
 */
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_eq.h>

#include "ofi_internal.h"

/* A cancel of an offered receive won: the payload receive left the
 * fabric before anything landed. The peer may still hold the offer;
 * RETRACT removes it (RETRACTED gives its table entry back). */
static void cancel_done(struct ofi_ctx *c, struct ofi_op *op)
{
	if (dpl__ofi_rq_take(c, op->peer, 0, op) == NULL)
		return;
	if (op->offered) {
		op->offered = 0;
		if (dpl__ofi_offer_unsend(c, op))
			c->peer[op->peer].offers_out--;
		else
			dpl__ofi_ctrl_send(c, op->peer, OFI_CTRL_RETRACT,
					   op->btag & TAG_LOW, 0);
	}
	dpl__ofi_complete(c, op, DPL_ECANCELED);
}

/* The payload receive of an offer (fc[2]) completed. */
static void on_offer_rx(struct ofi_ctx *c, struct ofi_op *op, int err,
			size_t len)
{
	op->offer_rx = 0;
	c->nbulk--;
	if (op->req == NULL) {
		dpl__ofi_release_if_idle(c, op);
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
			(void)dpl__ofi_rq_take(c, op->peer, 0, op);
		dpl__ofi_complete(c, op, dpl__ofi_link_error(c, op, err));
		return;
	}
	/* Header and payload in one message: it takes its turn in the
	 * peer's sequence like any arrival; the slot stays until then. */
	if (len < sizeof op->rh || !(op->rh.h.tag & OFI_MH_RTS) ||
	    (op->rh.h.tag & ~OFI_MH_RTS) != op->tag ||
	    (op->rh.cookie & TAG_LOW) != (op->btag & TAG_LOW)) {
		(void)dpl__ofi_rq_take(c, op->peer, 0, op);
		dpl__ofi_complete(c, op, DPL_EIO);
		dpl__ofi_notice_peer(c, op->peer, dpl_clock_ns());
		return;
	}
	op->offer_st = len - sizeof op->rh == op->len ? 0 : DPL_ETRUNC;
	op->offer_done = 1;
	op->busy++;
	if (!dpl__ofi_in_seq(c, op->peer, &op->rh.h,
			     OOO_OP | (idx_of(c, op) + 1))) {
		op->offer_done = 0;
		op->busy--;
		(void)dpl__ofi_rq_take(c, op->peer, 0, op);
		dpl__ofi_complete(c, op, DPL_EIO);
		dpl__ofi_notice_peer(c, op->peer, dpl_clock_ns());
		return;
	}
	dpl__ofi_top_up(c, op->peer);
	if (c->peer[op->peer].grant >= (c->credit_max + 3) / 4)
		dpl__ofi_credit_flush(c, op->peer);
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
			dpl__ofi_complete(c, op, DPL_EIO);
			return;
		}
		c->peer[op->peer].credits += op->rh.h.credit;
		if (op->rh.offer.valid)
			dpl__ofi_offer_keep(c, op->peer, &op->rh.offer);
		len -= sizeof op->rh;
	}
	if (op->req == NULL) {
		dpl__ofi_release_if_idle(c, op);
		return;
	}
	if (which == 0) {
		switch (op->state) {
		case OP_S_MSG:
			dpl__ofi_complete(c, op,
					  err != 0 ? dpl__ofi_link_error(c, op,
									 err)
						   : 0);
			break;
		default:
			/* The header of a request to send went out. */
			if (err != 0)
				dpl__ofi_complete(c, op,
						  dpl__ofi_link_error(c, op,
								      err));
			break;
		}
		return;
	}
	if (err == 0 && op->send && obulk(op) && op->wd != WD_NONE) {
		/* A message on an offer that its sender asked back: taken
		 * back (the receiver drained it), or the answer decides. */
		if (op->wd == WD_GONE)
			dpl__ofi_complete(c, op, DPL_ECANCELED);
		else if (op->wd == WD_RETRY)
			dpl__ofi_complete(c, op, 0);
		return;
	}
	if (err != 0)
		dpl__ofi_complete(c, op, dpl__ofi_link_error(c, op, err));
	else if (op->state == OP_R_BULK && (op->drain || len != op->len))
		dpl__ofi_complete(c, op, DPL_ETRUNC);
	else
		dpl__ofi_complete(c, op, 0);
}

static void dispatch(struct ofi_ctx *c, void *ctxp, int err, size_t len)
{
	char *p = ctxp;

	if (p == NULL)
		return;
	if (p >= (char *)c->bounce && p < (char *)(c->bounce + c->nbounce)) {
		size_t i = (size_t)(p - (char *)c->bounce) /
			   sizeof(struct ofi_bounce);

		dpl__ofi_on_bounce(c, &c->bounce[i], err, len);
	} else if (p >= (char *)c->op && p < (char *)(c->op + c->nop)) {
		size_t i = (size_t)(p - (char *)c->op) / sizeof(struct ofi_op);
		struct ofi_op *op = &c->op[i];

		on_op(c, op,
		      (int)((size_t)(p - (char *)op->fc) / sizeof op->fc[0]),
		      err, len);
	} else if (p >= (char *)c->ctrl && p < (char *)(c->ctrl + OFI_NCTRL)) {
		size_t i = (size_t)(p - (char *)c->ctrl) /
			   sizeof(struct ofi_ctrl_slot);

		dpl__ofi_on_ctrl(c, &c->ctrl[i], err);
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

/* Read the completion queue until it is empty (bounded per call). */
int dpl__ofi_cq_drain(struct ofi_ctx *c)
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
		dpl__ofi_fail_all(c, DPL_EIO);
		return dpl_set_error(DPL_EIO, "ofi: fi_cq_read: %s",
				     fi_strerror((int)-n));
	}
	return 0;
}

/* One round of progress; completions accumulate in c->reported. */
int dpl__ofi_progress_once(struct ofi_ctx *c)
{
	int rc;

	if (c->broken)
		return dpl_set_error(DPL_EIO, "ofi: the completion queue "
				     "failed earlier");
	if (c->live != NULL)
		dpl__ofi_check_live(c);
	if ((rc = dpl__ofi_cq_drain(c)) != 0)
		return rc;
	if (c->npend != 0)
		dpl__ofi_offer_flush_all(c);
	if (c->nused != 0)
		dpl__ofi_used_retry(c);
	if (c->nwd != 0)
		dpl__ofi_withdraw_retry(c);
	if (c->out_len != 0)
		dpl__ofi_ctrl_flush(c);
	if (c->wait.head != 0)
		dpl__ofi_retry_waits(c);
	if (c->ctrl_unposted != 0)
		dpl__ofi_ctrl_repost_all(c);
	if (c->nstarved != 0)
		dpl__ofi_feed_starved(c);
	if (c->ndying != 0 || c->nclosing != 0 || c->ndoomed != 0)
		dpl__ofi_deadlines(c);
	return 0;
}

int dpl__ofi_progress(struct ofi_ctx *c)
{
	int n, rc;

	if ((rc = dpl__ofi_progress_once(c)) != 0)
		return rc;
	n = c->reported;
	c->reported = 0;
	return n;
}
