/*
 * inproc_match.c - the receiver's matching: which peers it has receives
 * from, and matching what a peer sent (ring first, then the list of
 * sends waiting for their receive) against those receives. Only the
 * receiving rank's thread runs this. See inproc_internal.h.
 */
#include "inproc_internal.h"

/* p has receives posted now. Its ring may hold messages that came while
 * it had none, whose news an earlier progress took: look again. */
void dpl__inproc_activate(struct ctx *c, uint32_t p)
{
	if (c->peer[p].act == NONE) {
		c->peer[p].act = c->nactive;
		c->active[c->nactive++] = p;
		c->rescan = true;
	}
}

void dpl__inproc_deactivate(struct ctx *c, uint32_t p)
{
	uint32_t i = c->peer[p].act, last;

	if (i == NONE || c->peer[p].posted.head != NULL)
		return;
	last = c->active[--c->nactive];
	c->active[i] = last;
	c->peer[last].act = i;
	c->peer[p].act = NONE;
}

/* Match the list of p's sends to this rank against the receives posted
 * from p; returns the number of receives completed. */
static int drain_list(struct ctx *c, uint32_t p)
{
	struct chan *ch = chan_of(c->w, p, c->rank);
	struct peer *pp = &c->peer[p];
	struct ireq *s, *next, *r;
	int n = 0;

	pthread_mutex_lock(&ch->lock);
	for (s = ch->list.head; s != NULL && pp->posted.head != NULL;
	     s = next) {
		next = s->next;
		r = q_find(&pp->posted, s->tag);
		if (r == NULL)
			continue;
		q_remove(&ch->list, s);
		atomic_fetch_sub_explicit(&ch->nlist, 1, memory_order_release);
		q_remove(&pp->posted, r);
		complete(s, take(r, s->buf, s->len));
		n++;
	}
	pthread_mutex_unlock(&ch->lock);
	if (n > 0)
		bell_ring(&c->w->rank[p].bell);
	return n;
}

int dpl__inproc_drain(struct ctx *c, uint32_t p)
{
	struct peer *pp = &c->peer[p];
	int n = dpl__inproc_ring_scan(c, p);

	/* The sender fills the ring while its list is empty and then adds
	 * to the list, which keeps it off the ring until this rank empties
	 * the list again. So once the list is seen non-empty, the ring is
	 * looked at once more: a message that went in after the first look
	 * but before the list's first entry is older than that entry. */
	if (pp->posted.head != NULL &&
	    atomic_load_explicit(&chan_of(c->w, p, c->rank)->nlist,
				 memory_order_acquire) > 0) {
		n += dpl__inproc_ring_scan(c, p);
		if (pp->posted.head != NULL)
			n += drain_list(c, p);
	}
	if (pp->posted.head == NULL)
		dpl__inproc_deactivate(c, p);
	return n;
}

int dpl__inproc_fail_from(struct ctx *c, uint32_t p)
{
	struct peer *pp = &c->peer[p];
	struct ireq *r;
	int n = dpl__inproc_drain(c, p);

	while ((r = pp->posted.head) != NULL) {
		q_remove(&pp->posted, r);
		complete(r, DPL_EPEER);
		n++;
	}
	dpl__inproc_deactivate(c, p);
	return n;
}
