/*
 * inproc_post.c - the data path of the in-process transport: posting
 * sends and receives, test, progress, cancel and wait. Arguments come
 * checked by the dpl_transport_* layer (peer in range and not this
 * rank, tag, buffer, host memory); what is checked here is the state of
 * the world (a peer that left). See inproc_internal.h.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <time.h>

#include <dpl/backend.h>

#include "inproc_internal.h"

static void init_req(struct ireq *r, uint32_t peer, uint64_t tag, void *buf,
		     size_t len, bool send)
{
	r->prev = r->next = NULL;
	atomic_init(&r->status, DPL_EAGAIN);
	r->peer = peer;
	r->send = send;
	r->queued = false;
	r->tag = tag;
	r->buf = buf;
	r->len = len;
}

int dpl__inproc_isend(void *vctx, void *req, uint32_t peer, uint64_t tag,
		      const void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct ireq *s = req;
	struct rank *k = &c->w->rank[peer];
	struct chan *ch;

	(void)mem; /* host memory: the checked layer saw to it */
	if (atomic_load_explicit(&k->dead, memory_order_acquire))
		return DPL_EPEER;
	init_req(s, peer, tag, (void *)buf, len, true);
	if (dpl__inproc_ring_send(c, peer, tag, buf, len)) {
		atomic_store_explicit(&s->status, 0, memory_order_relaxed);
		atomic_store_explicit(&k->news, 1, memory_order_release);
		bell_notify(&k->bell);
		return 0;
	}
	ch = chan_of(c->w, c->rank, peer);
	pthread_mutex_lock(&ch->lock);
	if (atomic_load(&k->dead)) {
		pthread_mutex_unlock(&ch->lock);
		return DPL_EPEER;
	}
	q_push(&ch->list, s);
	atomic_fetch_add_explicit(&ch->nlist, 1, memory_order_release);
	pthread_mutex_unlock(&ch->lock);
	atomic_store_explicit(&k->news, 1, memory_order_release);
	bell_notify(&k->bell);
	return 0;
}

int dpl__inproc_irecv(void *vctx, void *req, uint32_t peer, uint64_t tag,
		      void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct ireq *r = req;
	struct peer *pp = &c->peer[peer];

	(void)mem;
	init_req(r, peer, tag, buf, len, false);
	if (dpl__inproc_ring_claim(c, r)) {
		c->extra++;
		return 0;
	}
	q_push(&pp->posted, r);
	dpl__inproc_activate(c, peer);
	if (atomic_load_explicit(&c->w->rank[peer].dead,
				 memory_order_acquire)) {
		c->extra += dpl__inproc_drain(c, peer);
		if (r->queued) {
			q_remove(&pp->posted, r);
			dpl__inproc_deactivate(c, peer);
			return DPL_EPEER;
		}
	} else if (atomic_load_explicit(&chan_of(c->w, peer, c->rank)->nlist,
					memory_order_relaxed) > 0) {
		/* Keep the list's order behind the ring's. */
		c->extra += dpl__inproc_drain(c, peer);
	}
	return 0;
}

int dpl__inproc_test(void *vctx, void *req)
{
	struct ctx *c = vctx;
	struct ireq *r = req;
	int st = atomic_load_explicit(&r->status, memory_order_acquire);

	if (st != DPL_EAGAIN || r->send || !r->queued)
		return st;
	c->extra += dpl__inproc_drain(c, r->peer);
	return atomic_load_explicit(&r->status, memory_order_acquire);
}

int dpl__inproc_progress(void *vctx)
{
	struct ctx *c = vctx;
	struct world *w = c->w;
	struct rank *k = &w->rank[c->rank];
	uint64_t n = atomic_load(&k->bell.n);
	uint64_t d = n - c->seen + (uint64_t)c->extra;
	bool rung = n != c->seen;
	uint32_t i;

	c->seen = n;
	c->extra = 0;
	if (!rung && !c->rescan &&
	    atomic_load_explicit(&k->news, memory_order_relaxed) == 0)
		return d > INT32_MAX ? INT32_MAX : (int)d;
	c->rescan = false;
	/* Cleared before looking (the exchange is a full fence): what a
	 * sender publishes after the look sets it again. */
	atomic_exchange(&k->news, 0);
	/* Downwards: drain may drop the peer it works on from the list,
	 * which moves the last one, already seen, into its place. */
	for (i = c->nactive; i-- > 0;) {
		uint32_t p = c->active[i];

		/* A doorbell may mean that a peer left. */
		if (rung && atomic_load_explicit(&w->rank[p].dead,
						 memory_order_acquire))
			d += (uint64_t)dpl__inproc_fail_from(c, p);
		else
			d += (uint64_t)dpl__inproc_drain(c, p);
	}
	return d > INT32_MAX ? INT32_MAX : (int)d;
}

int dpl__inproc_cancel(void *vctx, void *req)
{
	struct ctx *c = vctx;
	struct ireq *r = req;

	if (r->send) {
		struct chan *ch = chan_of(c->w, c->rank, r->peer);

		if (atomic_load_explicit(&r->status, memory_order_acquire) !=
		    DPL_EAGAIN)
			return 0;
		pthread_mutex_lock(&ch->lock);
		if (r->queued) {
			q_remove(&ch->list, r);
			atomic_fetch_sub(&ch->nlist, 1);
			complete(r, DPL_ECANCELED);
			c->extra++;
		}
		pthread_mutex_unlock(&ch->lock);
	} else if (r->queued) {
		q_remove(&c->peer[r->peer].posted, r);
		dpl__inproc_deactivate(c, r->peer);
		complete(r, DPL_ECANCELED);
		c->extra++;
	}
	return 0;
}

/* Something for this rank may wait to be matched. */
static bool pending(struct ctx *c)
{
	return atomic_load(&c->w->rank[c->rank].news) != 0;
}

int dpl__inproc_wait(void *vctx, uint64_t timeout_ns)
{
	struct ctx *c = vctx;
	struct bell *b = &c->w->rank[c->rank].bell;
	struct timespec ts;
	uint64_t until;

	if (c->extra > 0 || c->rescan || atomic_load(&b->n) != c->seen ||
	    pending(c))
		return 0;
	if (timeout_ns > 3600u * UINT64_C(1000000000))
		timeout_ns = 3600u * UINT64_C(1000000000);
	/* The doorbells' condition variables run on CLOCK_MONOTONIC, the
	 * clock of dpl_clock_ns(). */
	until = dpl_clock_ns() + timeout_ns;
	ts.tv_sec = (time_t)(until / 1000000000u);
	ts.tv_nsec = (long)(until % 1000000000u);
	pthread_mutex_lock(&b->m);
	atomic_fetch_add(&b->waiters, 1); /* a full fence: see bell_notify */
	while (atomic_load(&b->n) == c->seen && !pending(c))
		if (pthread_cond_timedwait(&b->c, &b->m, &ts) == ETIMEDOUT)
			break;
	atomic_fetch_sub(&b->waiters, 1);
	pthread_mutex_unlock(&b->m);
	return 0;
}
