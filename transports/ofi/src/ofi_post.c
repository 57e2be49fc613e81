/*
 * ofi_post.c - posting to the fabric: bounce buffers kept posted per
 * peer, message headers with their sequence numbers and credits, eager
 * messages, requests to send, messages on an offer, and bulk sends and
 * receives, with a wait list for those the fabric was too busy to take.
 */
#include <string.h>

#include <rdma/fi_tagged.h>

#include "ofi_internal.h"

/* Peers whose bounce buffers could not all be posted get another try
 * when buffers come back or in progress. */
static void starve(struct ofi_ctx *c, uint32_t p)
{
	if (!c->peer[p].starved) {
		c->peer[p].starved = true;
		c->nstarved++;
	}
}

void dpl__ofi_feed_starved(struct ofi_ctx *c)
{
	uint32_t p;

	for (p = 0; p < c->n && c->nstarved != 0 && c->nbfree != 0; p++)
		if (c->peer[p].starved)
			dpl__ofi_top_up(c, p);
}

int dpl__ofi_bounce_post(struct ofi_ctx *c, struct ofi_bounce *b, uint32_t p)
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
void dpl__ofi_top_up(struct ofi_ctx *c, uint32_t p)
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
		if ((b = dpl__ofi_bounce_alloc(c)) == NULL) {
			starve(c, p);
			break;
		}
		rc = dpl__ofi_bounce_post(c, b, p);
		if (rc != 0) {
			dpl__ofi_bounce_free(c, b);
			if (fabric_busy(rc))
				starve(c, p);
			else if (dpl__ofi_err_is_peer(-rc))
				dpl__ofi_notice_peer(c, p, dpl_clock_ns());
			break;
		}
	}
}

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
void dpl__ofi_op_iov(struct ofi_ctx *c, struct ofi_op *op, void *hdr,
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
int dpl__ofi_post_send_msg(struct ofi_ctx *c, struct ofi_op *op)
{
	struct iovec iov[2];
	void *desc[2];
	int rc;

	mhdr_fill(c, &op->w.h, op->peer, op->tag);
	dpl__ofi_op_iov(c, op, &op->w.h, MHDR, iov, desc);
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
int dpl__ofi_post_rts(struct ofi_ctx *c, struct ofi_op *op)
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
int dpl__ofi_post_offered(struct ofi_ctx *c, struct ofi_op *op)
{
	struct ofi_peer *q = &c->peer[op->peer];
	struct iovec iov[2];
	void *desc[2];
	int rc;

	mhdr_fill(c, &op->w.h, op->peer, op->tag | OFI_MH_RTS);
	op->w.len = op->len;
	op->w.offer = q->pend;
	op->w.offer.valid = q->pend_set;
	dpl__ofi_op_iov(c, op, &op->w, sizeof op->w, iov, desc);
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

/* The bulk receive of a matched request to send, on op->btag: into the
 * caller's buffer, or (op->drain) into the scratch area. */
void dpl__ofi_post_bulk_recv(struct ofi_ctx *c, struct ofi_op *op)
{
	struct iovec iov[2];
	void *desc[2];
	int rc = -FI_EAGAIN;

	/* A message sent on an offer has the request to send in front. */
	dpl__ofi_op_iov(c, op, &op->rh, sizeof op->rh, iov, desc);
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
		dpl__ofi_wait_push(c, op);
		return;
	}
	if (rc != 0) {
		dpl__ofi_complete(c, op, dpl__ofi_op_error(c, op, -rc));
		return;
	}
	op->busy++;
	op->bulk_rx = 1;
	c->nbulk++;
	op->state = OP_R_BULK;
	if (op->cts)
		dpl__ofi_ctrl_send(c, op->peer, OFI_CTRL_CTS, op->w.cookie,
				   op->len);
}

void dpl__ofi_post_bulk_send(struct ofi_ctx *c, struct ofi_op *op)
{
	int rc;

	rc = (int)fi_tsend(c->ep, op->buf, op->len, desc_of(c, &op->mr),
			   c->peer[op->peer].addr, op->btag, &op->fc[1]);
	if (fabric_busy(rc)) {
		op->state = OP_S_BULK_WAIT;
		dpl__ofi_wait_push(c, op);
		return;
	}
	if (rc != 0) {
		dpl__ofi_complete(c, op, dpl__ofi_op_error(c, op, -rc));
		return;
	}
	op->busy++;
	op->state = OP_S_BULK;
}

void dpl__ofi_retry_waits(struct ofi_ctx *c)
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
			dpl__ofi_post_bulk_recv(c, op);
			break;
		case OP_S_BULK_WAIT:
			dpl__ofi_post_bulk_send(c, op);
			break;
		default:
			dpl__ofi_release_if_idle(c, op);
			break;
		}
	}
}

/* A small message copied with its header into one inject. */
int dpl__ofi_inject_msg(struct ofi_ctx *c, uint32_t peer, uint64_t tag,
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
