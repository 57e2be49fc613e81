/*
 * ofi_slots.c - the storage of the libfabric transport's data path: the
 * operation slots requests live in, the bounce buffers of the message
 * channel, and the index FIFOs that queue them (receives per peer,
 * unexpected arrivals per peer, operations waiting for the fabric).
 * dpl__ofi_data_init sizes and allocates all of it once, so the data path
 * allocates nothing.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ofi_internal.h"

/* Bounce buffers posted per peer at most. Providers match every arrival
 * against their posted receives in order (shm 1.17: a list), and a
 * payload's receive is posted after the bounce buffers: every one more
 * is a step more for each payload (64 instead of 8 cost about 0.5 us
 * per 16 KiB to 64 KiB message on shm). Bursts beyond them wait in the
 * provider, bounded by the credits. */
#define OFI_BPP_MAX 8

struct ofi_op *dpl__ofi_slot_alloc(struct ofi_ctx *c)
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

void dpl__ofi_slot_free(struct ofi_ctx *c, struct ofi_op *op)
{
	dpl__ofi_mr_put(c, &op->mr);
	op->state = OP_FREE;
	op->req = NULL;
	op->next = c->free_head;
	c->free_head = idx_of(c, op) + 1;
}

void dpl__ofi_release_if_idle(struct ofi_ctx *c, struct ofi_op *op)
{
	if (op->state != OP_FREE && op->req == NULL && op->busy == 0 &&
	    !op->waiting)
		dpl__ofi_slot_free(c, op);
}

/* Move op to withdrawal state v, keeping c->nwd (asking or about to). */
void dpl__ofi_wd_set(struct ofi_ctx *c, struct ofi_op *op, uint8_t v)
{
	bool was = op->wd == WD_ASKED || op->wd == WD_RETRY;
	bool is = v == WD_ASKED || v == WD_RETRY;

	c->nwd += (uint32_t)is - (uint32_t)was;
	op->wd = v;
}

void dpl__ofi_complete(struct ofi_ctx *c, struct ofi_op *op, int status)
{
	dpl__ofi_wd_set(c, op, WD_NONE);
	if (op->req != NULL) {
		/* An offer ending with its request: its payload receive
		 * leaves the fabric (the completion of that is ignored). */
		if (op->offer_rx)
			(void)fi_cancel(&c->ep->fid, &op->fc[2]);
		if (op->offered) {
			(void)dpl__ofi_offer_unsend(c, op);
			op->offered = 0;
			if (c->peer[op->peer].offers_out > 0)
				c->peer[op->peer].offers_out--;
		}
		if (op->send && (status == 0 || status == DPL_ETRUNC))
			c->peer[op->peer].sent++;
		if (c->peer[op->peer].closing)
			c->peer[op->peer].since = dpl_clock_ns();
		op->req->status = status;
		op->req->slot = 0;
		op->req = NULL;
		c->reported++;
	}
	if (op->doom != 0) {
		op->doom = 0;
		c->ndoomed--;
	}
	dpl__ofi_release_if_idle(c, op);
}

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

void dpl__ofi_wait_push(struct ofi_ctx *c, struct ofi_op *op)
{
	op->waiting = 1;
	fifo_push(c, &c->wait, op_next, idx_of(c, op) + 1);
}

void dpl__ofi_rq_push(struct ofi_ctx *c, struct ofi_op *op)
{
	fifo_push(c, &c->peer[op->peer].rq, op_qnext, idx_of(c, op) + 1);
}

/* Take the oldest receive of peer p for `tag` (with tag_any: the oldest
 * receive, or `only` when given) off p's queue. */
struct ofi_op *dpl__ofi_rq_take(struct ofi_ctx *c, uint32_t p, uint64_t tag,
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

void dpl__ofi_bounce_free(struct ofi_ctx *c, struct ofi_bounce *b)
{
	b->next = c->bfree;
	c->bfree = (uint32_t)(b - c->bounce) + 1;
	c->nbfree++;
}

struct ofi_bounce *dpl__ofi_bounce_alloc(struct ofi_ctx *c)
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

void dpl__ofi_ux_push(struct ofi_ctx *c, struct ofi_bounce *b)
{
	fifo_push(c, &c->peer[b->peer].ux, bounce_next,
		  (uint32_t)(b - c->bounce) + 1);
}

struct ofi_bounce *dpl__ofi_ux_take(struct ofi_ctx *c, uint32_t p, uint64_t tag)
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

/* Take bounce i, which follows prev (0: i is the head), out of p's
 * unexpected arrivals. */
void dpl__ofi_ux_unlink(struct ofi_ctx *c, uint32_t p, uint32_t prev,
			uint32_t i)
{
	fifo_unlink(c, &c->peer[p].ux, bounce_next, prev, i);
}

void dpl__ofi_fail_all(struct ofi_ctx *c, int status)
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
		dpl__ofi_bounce_free(c, &c->bounce[i - 1]);
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
		if ((rc = dpl__ofi_ctrl_post(c, &c->ctrl[i])) != 0)
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
			b = dpl__ofi_bounce_alloc(c);
			if (b == NULL)
				return dpl_set_error(DPL_ENOMEM,
						     "ofi: %u bounce buffers "
						     "for %u peers", c->nbounce,
						     c->n - 1);
			if ((rc = dpl__ofi_bounce_post(c, b, p)) != 0) {
				dpl__ofi_bounce_free(c, b);
				return dpl_set_error(DPL_EIO,
						     "ofi: posting receives "
						     "for rank %u: %s", p,
						     fi_strerror(-rc));
			}
		}
	}
	return 0;
}

void dpl__ofi_data_fini(struct ofi_ctx *c)
{
	/* The endpoint is closed: whatever was pending is cancelled. */
	if (c->op != NULL)
		dpl__ofi_fail_all(c, DPL_ECANCELED);
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
