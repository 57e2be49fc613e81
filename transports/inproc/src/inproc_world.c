/*
 * inproc_world.c - the worlds of the in-process transport: a registry of
 * worlds by name, each created by the first rank that joins (init) and
 * freed when the last one leaves (fini). See inproc_internal.h.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dpl/backend.h>

#include "inproc_internal.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct world *registry;

static uint32_t ring_cap(uint32_t size)
{
	uint32_t cap = RING_MAX;

	while (cap > RING_MIN &&
	       (size_t)size * size * cap * SLOT_BYTES > RING_BUDGET)
		cap /= 2;
	return cap;
}

static void world_free(struct world *w)
{
	size_t i, nch = (size_t)w->size * w->size;

	for (i = 0; i < w->size; i++) {
		pthread_mutex_destroy(&w->rank[i].bell.m);
		pthread_cond_destroy(&w->rank[i].bell.c);
	}
	for (i = 0; i < nch; i++)
		pthread_mutex_destroy(&w->chan[i].lock);
	free(w->rank);
	free(w->chan);
	free(w->slots);
	free(w);
}

static void *zalloc_lines(size_t n)
{
	void *p;

	n = (n + LINE - 1) / LINE * LINE;
	p = aligned_alloc(LINE, n);
	if (p != NULL)
		memset(p, 0, n);
	return p;
}

static int world_new(const char *name, uint32_t size, struct world **out)
{
	pthread_condattr_t attr;
	struct world *w;
	size_t i, nch = (size_t)size * size;

	w = calloc(1, sizeof *w);
	if (w == NULL)
		return DPL_ENOMEM;
	w->size = size;
	w->cap = ring_cap(size);
	w->rank = zalloc_lines(size * sizeof *w->rank);
	w->chan = zalloc_lines(nch * sizeof *w->chan);
	w->slots = zalloc_lines(nch * w->cap * sizeof *w->slots);
	if (w->rank == NULL || w->chan == NULL || w->slots == NULL) {
		free(w->rank);
		free(w->chan);
		free(w->slots);
		free(w);
		return DPL_ENOMEM;
	}
	snprintf(w->name, sizeof w->name, "%s", name);
	/* The doorbells' clock is dpl_clock_ns()'s (CLOCK_MONOTONIC). */
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	for (i = 0; i < size; i++) {
		struct rank *k = &w->rank[i];

		pthread_mutex_init(&k->bell.m, NULL);
		pthread_cond_init(&k->bell.c, &attr);
		atomic_init(&k->bell.n, 0);
		atomic_init(&k->bell.waiters, 0);
		atomic_init(&k->dead, false);
	}
	pthread_condattr_destroy(&attr);
	for (i = 0; i < nch; i++) {
		pthread_mutex_init(&w->chan[i].lock, NULL);
		atomic_init(&w->chan[i].head, 0);
		atomic_init(&w->chan[i].nlist, 0);
	}
	for (i = 0; i < nch * w->cap; i++)
		atomic_init(&w->slots[i].seq, 0);
	*out = w;
	return 0;
}

/* "eager=N": the largest message sent through the ring, 0..INLINE_MAX;
 * 0 makes every send rendezvous. */
static int parse_options(struct ctx *c, const char *opt)
{
	const struct dpl_option table[] = {
		{.key = "eager", .kind = DPL_OPT_U32, .dst = &c->eager,
		 .lo = 0, .hi = INLINE_MAX},
	};

	c->eager = INLINE_MAX;
	return dpl_options_parse("inproc", opt, table,
				 sizeof table / sizeof table[0]);
}

static int local_new(struct ctx *c, uint32_t size, uint32_t cap)
{
	uint32_t i;

	c->peer = calloc(size, sizeof *c->peer);
	c->active = calloc(size, sizeof *c->active);
	c->used = calloc((size_t)size * cap, 1);
	if (c->peer == NULL || c->active == NULL || c->used == NULL) {
		free(c->peer);
		free(c->active);
		free(c->used);
		return DPL_ENOMEM;
	}
	for (i = 0; i < size; i++) {
		c->peer[i].act = NONE;
		c->peer[i].used = c->used + (size_t)i * cap;
	}
	return 0;
}

int dpl__inproc_init(void *vctx, const struct dpl_transport_params *p)
{
	struct ctx *c = vctx;
	const char *name = p->world ? p->world : "default";
	struct world *w;
	int rc;

	if (strlen(name) >= WORLD_NAME_MAX)
		return dpl_set_error(DPL_EINVAL,
				     "inproc: world name longer than %d "
				     "bytes", WORLD_NAME_MAX - 1);
	if ((rc = parse_options(c, p->options)) != 0)
		return rc;
	pthread_mutex_lock(&registry_lock);
	for (w = registry; w != NULL; w = w->next)
		if (strcmp(w->name, name) == 0)
			break;
	if (w == NULL) {
		rc = world_new(name, p->world_size, &w);
		if (rc != 0) {
			pthread_mutex_unlock(&registry_lock);
			return dpl_set_error(rc, "inproc: out of memory");
		}
		w->next = registry;
		registry = w;
	} else if (w->size != p->world_size) {
		pthread_mutex_unlock(&registry_lock);
		return dpl_set_error(DPL_EINVAL,
				     "inproc: world '%s' has %u ranks, "
				     "rank %u asked for %u", name, w->size,
				     p->rank, p->world_size);
	}
	if (w->rank[p->rank].joined) {
		pthread_mutex_unlock(&registry_lock);
		return dpl_set_error(DPL_EBUSY,
				     "inproc: rank %u of world '%s' is "
				     "taken", p->rank, name);
	}
	if ((rc = local_new(c, w->size, w->cap)) != 0) {
		if (w->refs == 0) {
			registry = w->next;
			world_free(w);
		}
		pthread_mutex_unlock(&registry_lock);
		return dpl_set_error(rc, "inproc: out of memory");
	}
	w->rank[p->rank].joined = true;
	w->refs++;
	pthread_mutex_unlock(&registry_lock);
	c->w = w;
	c->rank = p->rank;
	return 0;
}

/* Complete every send waiting in ch's list with `status`. */
static void end_list(struct chan *ch, int status)
{
	struct ireq *r;

	pthread_mutex_lock(&ch->lock);
	while ((r = ch->list.head) != NULL) {
		q_remove(&ch->list, r);
		complete(r, status);
	}
	atomic_store(&ch->nlist, 0);
	pthread_mutex_unlock(&ch->lock);
}

void dpl__inproc_fini(void *vctx)
{
	struct ctx *c = vctx;
	struct world *w = c->w, **pp;
	struct ireq *r;
	uint32_t q, me = c->rank;

	if (w == NULL)
		return;
	atomic_store(&w->rank[me].dead, true);
	for (q = 0; q < w->size; q++) {
		struct chan *out = chan_of(w, me, q), *in = chan_of(w, q, me);

		if (q == me)
			continue;
		/* Own sends waiting for their receive: cancelled. Once the
		 * lock was taken after `dead` was set, no peer adds to the
		 * incoming lists. */
		end_list(out, DPL_ECANCELED);
		end_list(in, DPL_EPEER);
		while ((r = c->peer[q].posted.head) != NULL) {
			q_remove(&c->peer[q].posted, r);
			complete(r, DPL_ECANCELED);
		}
	}
	for (q = 0; q < w->size; q++)
		if (q != me)
			bell_ring(&w->rank[q].bell);
	pthread_mutex_lock(&registry_lock);
	if (--w->refs == 0) {
		for (pp = &registry; *pp != NULL; pp = &(*pp)->next)
			if (*pp == w) {
				*pp = w->next;
				break;
			}
		world_free(w);
	}
	pthread_mutex_unlock(&registry_lock);
	free(c->peer);
	free(c->active);
	free(c->used);
	c->w = NULL;
}
