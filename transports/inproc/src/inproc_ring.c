/*
 * inproc_ring.c - the ring of one ordered pair of ranks: slots written
 * only by the sender, read only by the receiver, each published by its
 * sequence number (no lock, no atomic read-modify-write). The sender
 * side puts small messages in (its send is then complete); the receiver
 * side matches them against its posted receives and gives the slots
 * back in order. See inproc_internal.h.
 */
#include "inproc_internal.h"

static struct slot *slot_of(const struct world *w, uint32_t from,
			    uint32_t to, uint64_t i)
{
	return &w->slots[((size_t)from * w->size + to) * w->cap +
			 (size_t)(i & (w->cap - 1))];
}

bool dpl__inproc_ring_send(struct ctx *c, uint32_t peer, uint64_t tag,
			   const void *buf, size_t len)
{
	struct world *w = c->w;
	struct peer *pp = &c->peer[peer];
	struct chan *ch = chan_of(w, c->rank, peer);
	struct slot *s;

	if (c->eager == 0 || len > c->eager ||
	    atomic_load_explicit(&ch->nlist, memory_order_acquire) != 0)
		return false;
	if (pp->stail - pp->shead >= w->cap) {
		pp->shead = atomic_load_explicit(&ch->head,
						 memory_order_acquire);
		if (pp->stail - pp->shead >= w->cap)
			return false;
	}
	s = slot_of(w, c->rank, peer, pp->stail);
	s->tag = tag;
	s->len = (uint32_t)len;
	if (len > 0)
		memcpy(s->data, buf, len);
	pp->stail++;
	atomic_store_explicit(&s->seq, pp->stail, memory_order_release);
	return true;
}

/* Give the sender back the slots before the first unmatched message. */
static void advance_head(struct ctx *c, uint32_t p)
{
	struct peer *pp = &c->peer[p];
	uint32_t mask = c->w->cap - 1;
	uint64_t h = pp->rhead;

	while (h < pp->rscan && pp->used[h & mask]) {
		pp->used[h & mask] = 0;
		h++;
	}
	if (h != pp->rhead) {
		pp->rhead = h;
		atomic_store_explicit(&chan_of(c->w, p, c->rank)->head, h,
				      memory_order_release);
	}
}

int dpl__inproc_ring_scan(struct ctx *c, uint32_t p)
{
	struct world *w = c->w;
	struct peer *pp = &c->peer[p];
	uint32_t mask = w->cap - 1;
	struct ireq *r;
	int took = 0;

	for (;;) {
		const struct slot *s = slot_of(w, p, c->rank, pp->rscan);

		if (atomic_load_explicit(&s->seq, memory_order_acquire) !=
		    pp->rscan + 1)
			break;
		r = q_find(&pp->posted, s->tag);
		if (r != NULL) {
			q_remove(&pp->posted, r);
			take(r, s->data, s->len);
			pp->used[pp->rscan & mask] = 1;
			took++;
		}
		pp->rscan++;
	}
	if (took > 0)
		advance_head(c, p);
	return took;
}

bool dpl__inproc_ring_claim(struct ctx *c, struct ireq *r)
{
	struct peer *pp = &c->peer[r->peer];
	uint32_t mask = c->w->cap - 1;
	uint64_t i;

	/* Ring messages looked at before match no earlier receive: the
	 * oldest one with this tag is this receive's. */
	for (i = pp->rhead; i < pp->rscan; i++) {
		const struct slot *s = slot_of(c->w, r->peer, c->rank, i);

		if (!pp->used[i & mask] && s->tag == r->tag) {
			take(r, s->data, s->len);
			pp->used[i & mask] = 1;
			advance_head(c, r->peer);
			return true;
		}
	}
	return false;
}
