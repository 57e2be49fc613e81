/*
 * ofi_ctrl.c - control messages of the libfabric transport: the preposted
 * control receives, sending (or queueing) CTS, NACK, CREDIT, OFFER,
 * RETRACT, RETRACTED, USED, WITHDRAW and WITHDRAWN, the withdrawal of a
 * cancelled send, and what each arriving control message does.
 */
#include <string.h>

#include <rdma/fi_tagged.h>

#include "ofi_internal.h"

#define SLOT_MASK ((UINT64_C(1) << OFI_SLOT_BITS) - 1)
/* A WITHDRAW answered "not found" is asked again after this long. */
#define WITHDRAW_RETRY_NS (1000u * 1000u)

int dpl__ofi_ctrl_post(struct ofi_ctx *c, struct ofi_ctrl_slot *s)
{
	int rc = (int)fi_trecv(c->ep, &s->m, sizeof s->m,
			       static_desc(c->ctrl_mr), FI_ADDR_UNSPEC,
			       OFI_TAG_CTRL, 0, &s->fc);

	if (rc == 0)
		s->posted = true;
	return rc;
}

void dpl__ofi_ctrl_repost_all(struct ofi_ctx *c)
{
	uint32_t i;

	c->ctrl_unposted = 0;
	for (i = 0; i < OFI_NCTRL; i++)
		if (!c->ctrl[i].posted &&
		    dpl__ofi_ctrl_post(c, &c->ctrl[i]) != 0)
			c->ctrl_unposted++;
}

static int ctrl_inject(struct ofi_ctx *c, const struct ofi_ctrl_out *m)
{
	return (int)fi_tinject(c->ep, &m->m, sizeof m->m,
			       c->peer[m->peer].addr, OFI_TAG_CTRL);
}

void dpl__ofi_ctrl_flush(struct ofi_ctx *c)
{
	int rc;

	while (c->out_len != 0) {
		rc = ctrl_inject(c, &c->out[c->out_head]);
		if (fabric_busy(rc))
			return;
		if (rc != 0 && dpl__ofi_err_is_peer(-rc))
			dpl__ofi_notice_peer(c, c->out[c->out_head].peer,
					     dpl_clock_ns());
		c->out_head = (c->out_head + 1) % c->out_cap;
		c->out_len--;
	}
}

/* Send a control message now, or queue it when the fabric is busy. */
void dpl__ofi_ctrl_send_full(struct ofi_ctx *c, uint32_t peer, uint32_t type,
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
			dpl__ofi_notice_peer(c, peer, dpl_clock_ns());
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

void dpl__ofi_ctrl_send(struct ofi_ctx *c, uint32_t peer, uint32_t type,
			uint64_t cookie, uint64_t len)
{
	dpl__ofi_ctrl_send_full(c, peer, type, cookie, len, 0, 0);
}

/* Tell p about the bounce buffers posted again for it. */
void dpl__ofi_credit_flush(struct ofi_ctx *c, uint32_t p)
{
	struct ofi_peer *q = &c->peer[p];

	if (q->grant == 0)
		return;
	dpl__ofi_ctrl_send(c, p, OFI_CTRL_CREDIT, 0, q->grant);
	q->grant = 0;
}

/* Ask the receiver to take op's message back (see dpl__ofi_cancel). */
void dpl__ofi_withdraw_ask(struct ofi_ctx *c, struct ofi_op *op)
{
	dpl__ofi_wd_set(c, op, WD_ASKED);
	dpl__ofi_ctrl_send_full(c, op->peer, OFI_CTRL_WITHDRAW, op->w.cookie, 0,
				cookie_of(c, op), 0);
}

/* Take the message of peer p on a withdrawn offer (request to send w)
 * out of the fabric into the scratch area, with no request. Returns
 * false when no slot is free now. */
static bool drain_offered(struct ofi_ctx *c, uint32_t p,
			  const struct ofi_rts *w)
{
	struct ofi_op *op = dpl__ofi_slot_alloc(c);

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
	dpl__ofi_post_bulk_recv(c, op);
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
				dpl__ofi_ux_unlink(c, m->src, prev, i);
				dpl__ofi_bounce_free(c, b);
				dpl__ofi_feed_starved(c);
				found = 1;
			}
			break;
		}
		prev = i;
		i = b->next;
	}
	dpl__ofi_ctrl_send_full(c, m->src, OFI_CTRL_WITHDRAWN, m->cookie, found,
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
		dpl__ofi_wd_set(c, op, WD_GONE);
		if (op->state == OP_S_RTS || op->busy == 0)
			dpl__ofi_complete(c, op, DPL_ECANCELED);
		return;
	}
	if (offered && op->busy == 0) {
		/* The fabric is done and nothing took it back: delivered. */
		dpl__ofi_complete(c, op, 0);
		return;
	}
	if (op->state == OP_S_RTS || offered) {
		dpl__ofi_wd_set(c, op, WD_RETRY);
		op->wd_at = dpl_clock_ns();
	} else {
		/* Matched: it completes normally. */
		dpl__ofi_wd_set(c, op, WD_NONE);
	}
}

/* Ask again for sends whose message was not at the receiver yet. */
void dpl__ofi_withdraw_retry(struct ofi_ctx *c)
{
	uint64_t now = dpl_clock_ns();
	uint32_t i;

	for (i = 0; i < c->nop && c->nwd != 0; i++) {
		struct ofi_op *op = &c->op[i];

		if (op->wd == WD_RETRY && op->req != NULL &&
		    now - op->wd_at >= WITHDRAW_RETRY_NS)
			dpl__ofi_withdraw_ask(c, op);
	}
}

void dpl__ofi_on_ctrl(struct ofi_ctx *c, struct ofi_ctrl_slot *s, int err)
{
	struct ofi_ctrl m = s->m;
	struct ofi_op *op;
	uint64_t idx;

	s->posted = false;
	if (dpl__ofi_ctrl_post(c, s) != 0)
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

		dpl__ofi_offer_keep(c, m.src, &w);
		return;
	}
	if (m.type == OFI_CTRL_RETRACT) {
		dpl__ofi_offer_retract(c, &m);
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
			dpl__ofi_used_arrive(c, &m);
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
			dpl__ofi_wd_set(c, op, WD_NONE); /* matched after all */
		dpl__ofi_post_bulk_send(c, op);
	}
	else if (m.type == OFI_CTRL_NACK)
		dpl__ofi_complete(c, op, DPL_ETRUNC);
}
