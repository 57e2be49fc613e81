/*
 * mutant.c - dpl_transport_mutant (mutant.h): a small in-process
 * transport, correct with mutant=0, and the deliberate breakages the
 * conformance battery must catch, each marked where it departs from the
 * correct code (`if (c->mutant == MUT_...)`).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dpl/common.h>

#include "mutant.h"

#define NAME_MAX_LEN 128
#define AGAIN_MAX 16 /* completions MUT_TWICE writes again */

/* A request: the storage the caller hands to isend and irecv. */
struct mreq {
	struct mreq *prev, *next;
	atomic_int status; /* DPL_EAGAIN while pending */
	uint32_t src, dst; /* sender and receiver */
	uint64_t tag;
	void *buf;
	size_t len;
	bool send;
	bool linked; /* in a posted list or an inbox (world lock) */
	bool early;  /* MUT_SEND_EARLY: reported done at post */
};

struct mqueue {
	struct mreq *head, *tail;
};

/* What the world keeps of one rank. */
struct mslot {
	bool joined; /* init got this rank */
	bool dead;   /* it left (fini) */
	struct mqueue posted; /* its receives, in post order */
	struct mqueue inbox;  /* sends to it nothing matched yet */
};

struct mworld {
	struct mworld *next;
	char name[NAME_MAX_LEN];
	uint32_t size;
	uint32_t refs;    /* registry lock */
	uint32_t arrived; /* ranks that joined (lock) */
	pthread_mutex_t lock;
	struct mslot *slot;
};

/* The context of one rank (ctx_size bytes, allocated by the core). */
struct mctx {
	struct mworld *w;
	uint32_t rank;
	int mutant;
	/* MUT_TWICE: completions handed back, written again by progress */
	struct mreq *again[AGAIN_MAX];
	int again_rc[AGAIN_MAX];
	unsigned nagain;
};

static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;
static struct mworld *worlds;

static void q_push(struct mqueue *q, struct mreq *r)
{
	r->next = NULL;
	r->prev = q->tail;
	if (q->tail != NULL)
		q->tail->next = r;
	else
		q->head = r;
	q->tail = r;
	r->linked = true;
}

static void q_unlink(struct mqueue *q, struct mreq *r)
{
	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		q->head = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
	else
		q->tail = r->prev;
	r->prev = r->next = NULL;
	r->linked = false;
}

static bool tag_eq(const struct mctx *c, uint64_t a, uint64_t b)
{
	if (c->mutant == MUT_TAG_LOW32)
		return (uint32_t)a == (uint32_t)b;
	return a == b;
}

/* The first entry of `q` from `src` to `dst` with `tag`: oldest first,
 * or newest first where the mutant says so. */
static struct mreq *q_find(const struct mctx *c, struct mqueue *q,
			   uint32_t src, uint32_t dst, uint64_t tag,
			   bool newest_first)
{
	struct mreq *r = newest_first ? q->tail : q->head;

	while (r != NULL) {
		if (r->src == src && r->dst == dst && tag_eq(c, r->tag, tag))
			return r;
		r = newest_first ? r->prev : r->next;
	}
	return NULL;
}

/* Complete an unlinked receive `r` with the unlinked send `s` (world
 * lock held): copy, then set both codes, the send's last (its storage
 * may be reused by its thread from then on). */
static void deliver(const struct mctx *c, struct mreq *r, struct mreq *s)
{
	size_t sent = s->len, n = s->len < r->len ? s->len : r->len;
	bool early = s->early;
	int rc;

	if (c->mutant == MUT_BAD_LENGTH)
		sent = (s->len + 7u) & ~(size_t)7u;
	rc = sent == r->len ? 0 : DPL_ETRUNC;
	if (c->mutant == MUT_TRUNC_SILENT && s->len > r->len)
		rc = 0;
	if (c->mutant == MUT_SHORT_OK && s->len < r->len)
		rc = 0;
	if (rc == 0 && n > 0)
		memcpy(r->buf, s->buf, n);
	atomic_store_explicit(&r->status, rc, memory_order_release);
	if (!early)
		atomic_store_explicit(&s->status, rc, memory_order_release);
}

/* ------------------------------------------------------------------ */
/* init and fini                                                       */

static int parse_options(struct mctx *c, const char *opt)
{
	const char *p = opt;
	char key[32], *end;
	size_t k;
	long v;

	while (p != NULL && *p != '\0') {
		k = strcspn(p, "=,");
		if (k >= sizeof key || p[k] != '=')
			return dpl_set_error(DPL_EINVAL,
					     "mutant: bad option in '%s' "
					     "(expected mutant=N)",
					     opt);
		memcpy(key, p, k);
		key[k] = '\0';
		if (strcmp(key, "mutant") != 0)
			return dpl_set_error(DPL_EINVAL,
					     "mutant: unknown option '%s'",
					     key);
		v = strtol(p + k + 1, &end, 10);
		if (end == p + k + 1 || (*end != '\0' && *end != ',') ||
		    v < 0 || v >= MUT_COUNT)
			return dpl_set_error(DPL_EINVAL,
					     "mutant: mutant=%.*s: expected "
					     "0..%d",
					     (int)strcspn(p + k + 1, ","),
					     p + k + 1, MUT_COUNT - 1);
		c->mutant = (int)v;
		p = *end == ',' ? end + 1 : end;
	}
	return 0;
}

/* Find or make the world `name` of `size` ranks and take a reference
 * (registry lock held). */
static int world_get(const char *name, uint32_t size, struct mworld **out)
{
	struct mworld *w;

	for (w = worlds; w != NULL; w = w->next)
		if (strcmp(w->name, name) == 0)
			break;
	if (w != NULL && w->size != size)
		return dpl_set_error(DPL_EINVAL,
				     "mutant: world '%s' has %u ranks, not %u",
				     name, w->size, size);
	if (w == NULL) {
		w = calloc(1, sizeof *w);
		if (w != NULL)
			w->slot = calloc(size, sizeof *w->slot);
		if (w == NULL || w->slot == NULL) {
			free(w);
			return dpl_set_error(DPL_ENOMEM,
					     "mutant: world of %u ranks", size);
		}
		snprintf(w->name, sizeof w->name, "%s", name);
		w->size = size;
		pthread_mutex_init(&w->lock, NULL);
		w->next = worlds;
		worlds = w;
	}
	w->refs++;
	*out = w;
	return 0;
}

static void world_put(struct mworld *w)
{
	struct mworld **pp;

	pthread_mutex_lock(&registry);
	if (--w->refs == 0) {
		for (pp = &worlds; *pp != w; pp = &(*pp)->next)
			;
		*pp = w->next;
		pthread_mutex_destroy(&w->lock);
		free(w->slot);
		free(w);
	}
	pthread_mutex_unlock(&registry);
}

static int mut_init(void *ctx, const struct dpl_transport_params *p)
{
	struct mctx *c = ctx;
	const char *name = p->world != NULL ? p->world : "default";
	uint64_t deadline;
	struct mworld *w = NULL;
	struct mslot *s;
	struct timespec nap = {0, 1000000};
	uint32_t arrived = 0;
	bool all, joined = true;
	int rc;

	rc = parse_options(c, p->options);
	if (rc != 0)
		return rc;
	if (strlen(name) >= NAME_MAX_LEN)
		return dpl_set_error(DPL_EINVAL,
				     "mutant: world name of %zu bytes (at "
				     "most %d)",
				     strlen(name), NAME_MAX_LEN - 1);
	pthread_mutex_lock(&registry);
	rc = world_get(name, p->world_size, &w);
	pthread_mutex_unlock(&registry);
	if (rc != 0)
		return rc;
	pthread_mutex_lock(&w->lock);
	s = &w->slot[p->rank];
	if (s->joined) {
		pthread_mutex_unlock(&w->lock);
		world_put(w);
		return dpl_set_error(DPL_EBUSY,
				     "mutant: rank %u of world '%s' is taken",
				     p->rank, name);
	}
	s->joined = true;
	w->arrived++;
	pthread_mutex_unlock(&w->lock);
	c->w = w;
	c->rank = p->rank;
	deadline = dpl_clock_ns() +
		   (uint64_t)(p->timeout_ms ? p->timeout_ms : 60000) * 1000000u;
	for (;;) {
		pthread_mutex_lock(&w->lock);
		all = w->arrived == w->size;
		if (!all && dpl_clock_ns() >= deadline) {
			s->joined = joined = false;
			arrived = --w->arrived;
		}
		pthread_mutex_unlock(&w->lock);
		if (all)
			return 0;
		if (!joined) {
			world_put(w);
			return dpl_set_error(DPL_ETIMEDOUT,
					     "mutant: world '%s': %u of %u "
					     "ranks joined within %u ms",
					     name, arrived, p->world_size,
					     p->timeout_ms);
		}
		nanosleep(&nap, NULL);
	}
}

/* Complete with `rc` and unlink every entry of `q` from `src` to `dst`
 * (UINT32_MAX: any). */
static void q_fail(struct mqueue *q, uint32_t src, uint32_t dst, int rc)
{
	struct mreq *r = q->head, *next;

	while (r != NULL) {
		next = r->next;
		if ((src == UINT32_MAX || r->src == src) &&
		    (dst == UINT32_MAX || r->dst == dst)) {
			q_unlink(q, r);
			atomic_store_explicit(&r->status, rc,
					      memory_order_release);
		}
		r = next;
	}
}

static void mut_fini(void *ctx)
{
	struct mctx *c = ctx;
	struct mworld *w = c->w;
	uint32_t me = c->rank, q;

	pthread_mutex_lock(&w->lock);
	/* the rank's own requests are the caller's again */
	q_fail(&w->slot[me].posted, UINT32_MAX, UINT32_MAX, DPL_ECANCELED);
	for (q = 0; q < w->size && c->mutant != MUT_FINI_LEAK; q++)
		if (q != me)
			q_fail(&w->slot[q].inbox, me, q, DPL_ECANCELED);
	if (c->mutant != MUT_FINI_SILENT) {
		/* and the peers see it gone */
		w->slot[me].dead = true;
		q_fail(&w->slot[me].inbox, UINT32_MAX, me, DPL_EPEER);
		for (q = 0; q < w->size; q++)
			if (q != me)
				q_fail(&w->slot[q].posted, me, q, DPL_EPEER);
	}
	pthread_mutex_unlock(&w->lock);
	world_put(w);
	c->w = NULL;
}

/* ------------------------------------------------------------------ */
/* The data path                                                       */

static void req_set(struct mreq *r, bool send, uint32_t src, uint32_t dst,
		    uint64_t tag, void *buf, size_t len)
{
	memset(r, 0, sizeof *r);
	atomic_init(&r->status, DPL_EAGAIN);
	r->send = send;
	r->src = src;
	r->dst = dst;
	r->tag = tag;
	r->buf = buf;
	r->len = len;
}

static int mut_isend(void *ctx, void *req, uint32_t peer, uint64_t tag,
		     const void *buf, size_t len, uint32_t mem)
{
	struct mctx *c = ctx;
	struct mworld *w = c->w;
	struct mreq *s = req, *r;

	(void)mem;
	if (c->mutant == MUT_MALLOC) {
		/* a bounce buffer it does not even need */
		void *volatile bounce = malloc(len > 0 ? len : 1);

		if (bounce == NULL)
			return dpl_set_error(DPL_EAGAIN, "mutant: no memory");
		free(bounce);
	}
	req_set(s, true, c->rank, peer, tag, (void *)buf, len);
	pthread_mutex_lock(&w->lock);
	if (w->slot[peer].dead && c->mutant != MUT_DEAD_HANG) {
		pthread_mutex_unlock(&w->lock);
		return dpl_set_error(DPL_EPEER, "mutant: rank %u left", peer);
	}
	r = q_find(c, &w->slot[peer].posted, c->rank, peer, tag,
		   c->mutant == MUT_POSTED_LIFO);
	if (r != NULL) {
		q_unlink(&w->slot[peer].posted, r);
		deliver(c, r, s);
	} else {
		q_push(&w->slot[peer].inbox, s);
		if (c->mutant == MUT_SEND_EARLY) {
			s->early = true;
			atomic_store_explicit(&s->status, 0,
					      memory_order_release);
		}
	}
	pthread_mutex_unlock(&w->lock);
	return 0;
}

static int mut_irecv(void *ctx, void *req, uint32_t peer, uint64_t tag,
		     void *buf, size_t len, uint32_t mem)
{
	struct mctx *c = ctx;
	struct mworld *w = c->w;
	struct mreq *r = req, *s;

	(void)mem;
	req_set(r, false, peer, c->rank, tag, buf, len);
	pthread_mutex_lock(&w->lock);
	s = q_find(c, &w->slot[c->rank].inbox, peer, c->rank, tag,
		   c->mutant == MUT_UNEXP_LIFO);
	if (s != NULL) {
		q_unlink(&w->slot[c->rank].inbox, s);
		deliver(c, r, s);
	} else if (w->slot[peer].dead && c->mutant != MUT_DEAD_HANG) {
		pthread_mutex_unlock(&w->lock);
		return dpl_set_error(DPL_EPEER, "mutant: rank %u left", peer);
	} else {
		q_push(&w->slot[c->rank].posted, r);
	}
	pthread_mutex_unlock(&w->lock);
	return 0;
}

static int mut_test(void *ctx, void *req)
{
	struct mctx *c = ctx;
	struct mreq *r = req;
	int rc = atomic_load_explicit(&r->status, memory_order_acquire);

	if (rc != DPL_EAGAIN && c->mutant == MUT_TWICE &&
	    c->nagain < AGAIN_MAX) {
		c->again[c->nagain] = r;
		c->again_rc[c->nagain++] = rc;
	}
	return rc;
}

static int mut_progress(void *ctx)
{
	struct mctx *c = ctx;
	unsigned i, n = c->nagain;

	/* MUT_TWICE: the completions come back once more */
	for (i = 0; i < n; i++)
		atomic_store_explicit(&c->again[i]->status, c->again_rc[i],
				      memory_order_release);
	c->nagain = 0;
	return (int)n;
}

static int mut_cancel(void *ctx, void *req)
{
	struct mctx *c = ctx;
	struct mworld *w = c->w;
	struct mreq *r = req;

	pthread_mutex_lock(&w->lock);
	if (r->linked) {
		q_unlink(r->send ? &w->slot[r->dst].inbox
				 : &w->slot[c->rank].posted,
			 r);
		atomic_store_explicit(&r->status, DPL_ECANCELED,
				      memory_order_release);
	} else if (c->mutant == MUT_CANCEL_LIES) {
		/* completed already, and reported cancelled all the same */
		atomic_store_explicit(&r->status, DPL_ECANCELED,
				      memory_order_release);
	}
	pthread_mutex_unlock(&w->lock);
	return 0;
}

const struct dpl_transport_ops dpl_transport_mutant = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "mutant",
	.caps = DPL_TRANSPORT_CAP_PEER_FAILURE | DPL_TRANSPORT_CAP_IN_PROCESS,
	.ctx_size = sizeof(struct mctx),
	.req_size = sizeof(struct mreq),
	.init = mut_init,
	.fini = mut_fini,
	.isend = mut_isend,
	.irecv = mut_irecv,
	.test = mut_test,
	.progress = mut_progress,
	.cancel = mut_cancel,
};
