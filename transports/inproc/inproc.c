/*
 * inproc.c - the in-process transport: the ranks of a world are threads
 * of one process.
 *
 * Every ordered pair of ranks (sender, receiver) has a channel:
 *  - a ring of slots, written only by the sender and read only by the
 *    receiver, for messages of up to `eager` bytes (option, default
 *    INLINE_MAX): the sender copies the message into the next slot and
 *    its send is complete at once; the receiver copies it out when it
 *    matches a receive. A slot is published by its sequence number, so
 *    a message costs the sender no lock and no atomic read-modify-write,
 *    and the two threads share only the slot's cache lines;
 *  - a list, under a mutex, of sends that wait for their receive: larger
 *    messages (rendezvous: the receiver copies straight from the
 *    sender's buffer, then completes the send), and small ones posted
 *    while the ring was full or the list not empty. A send goes to the
 *    ring only while the list is empty, so every message in the ring was
 *    posted before every one in the list, and the receiver, which looks
 *    at the ring first, keeps each (sender, tag) in order. (It looks at
 *    the ring again once it sees the list non-empty: the sender may have
 *    filled the ring between its first look and the list's first entry.)
 * Only the receiver matches: its posted receives are its own (one FIFO
 * per sender, no lock), and it matches them in irecv (against ring
 * messages it already looked at), in test (of a pending receive) and in
 * progress (every sender it has receives from). Ring messages nothing
 * asked for yet stay in their slots until a receive claims them.
 *
 * Each rank has a doorbell (a counter and a condition variable), rung
 * when a rendezvous send of its completes, when a peer leaves, and when
 * it sleeps in wait and a message arrives for it (the sender sees it
 * asleep by its `waiters` count, with a full fence on both sides).
 *
 * Worlds are found by name (the bootstrap string) in a process-wide
 * registry, created by the first rank that joins and freed when the last
 * one leaves. A rank that leaves (fini) is dead for the others: their
 * rendezvous sends to it and their receives from it that nothing it sent
 * can match complete with DPL_EPEER, and later posts to it fail.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dpl/transport.h>

#define WORLD_NAME_MAX 128
#define LINE 64
/* One ring slot: its header and up to INLINE_MAX bytes of message. */
#define SLOT_BYTES 128
#define INLINE_MAX (SLOT_BYTES - 24)
/* Slots per ring: RING_MAX, halved while the rings of a world would
 * take more than RING_BUDGET bytes, but at least RING_MIN. */
#define RING_MAX 32u
#define RING_MIN 4u
#define RING_BUDGET ((size_t)16 << 20)
#define NONE UINT32_MAX

struct ireq {
	struct ireq *prev, *next;
	atomic_int status;  /* DPL_EAGAIN while pending */
	uint32_t peer;      /* the other side */
	bool send;
	bool queued;        /* in a channel's list or a posted FIFO */
	uint64_t tag;
	void *buf;
	size_t len;
};

struct queue {
	struct ireq *head, *tail;
};

struct slot {
	atomic_uint_fast64_t seq; /* n + 1 once message n is in it */
	uint64_t tag;
	uint32_t len;
	uint32_t reserved;
	unsigned char data[INLINE_MAX];
};

_Static_assert(sizeof(struct slot) == SLOT_BYTES, "slot size");

/* What one thread writes and others read sits on cache lines of its
 * own. */
struct chan {
	/* messages of the ring the receiver is done with (it writes) */
	_Alignas(LINE) atomic_uint_fast64_t head;
	_Alignas(LINE) pthread_mutex_t lock;
	struct queue list;       /* sends waiting for their receive */
	atomic_uint nlist;       /* entries in list */
};

struct bell {
	_Alignas(LINE) atomic_uint_fast64_t n;
	atomic_int waiters;
	_Alignas(LINE) pthread_mutex_t m;
	pthread_cond_t c;
};

struct rank {
	_Alignas(LINE) atomic_bool dead;
	bool joined;             /* guarded by the registry lock */
	/* Set by a sender after it put something in a ring or list to this
	 * rank; cleared by the rank before it looks at them all. */
	_Alignas(LINE) atomic_uint news;
	struct bell bell;
};

struct world {
	struct world *next;
	char name[WORLD_NAME_MAX];
	uint32_t size;
	uint32_t cap;  /* slots per ring, a power of two */
	uint32_t refs; /* guarded by the registry lock */
	struct rank *rank;
	struct chan *chan;  /* [sender * size + receiver] */
	struct slot *slots; /* [(sender * size + receiver) * cap + i] */
};

/* What a rank keeps about one peer; only the rank's thread uses it. */
struct peer {
	struct queue posted; /* receives from the peer, in post order */
	uint64_t rhead;      /* its ring messages before this are done */
	uint64_t rscan;      /* and before this were looked at */
	uint64_t stail;      /* messages this rank put in its ring to it */
	uint64_t shead;      /* the peer's head, as last read */
	uint32_t act;        /* index in ctx.active, or NONE */
	unsigned char *used; /* cap flags: message matched, in
				[rhead, rscan) */
};

struct ctx {
	struct world *w;
	uint32_t rank;
	uint32_t nactive;   /* peers this rank has receives from */
	uint32_t eager;     /* largest message sent through the ring */
	bool rescan;        /* a peer became active: progress looks at all
			       of them even without news */
	uint64_t seen;      /* doorbell count at the last progress */
	int extra;          /* completions to report at the next progress */
	struct peer *peer;  /* [world size] */
	uint32_t *active;   /* [nactive] */
	unsigned char *used;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct world *registry;

static void q_push(struct queue *q, struct ireq *r)
{
	r->next = NULL;
	r->prev = q->tail;
	if (q->tail)
		q->tail->next = r;
	else
		q->head = r;
	q->tail = r;
	r->queued = true;
}

static void q_remove(struct queue *q, struct ireq *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		q->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		q->tail = r->prev;
	r->prev = r->next = NULL;
	r->queued = false;
}

static struct ireq *q_find(const struct queue *q, uint64_t tag)
{
	struct ireq *r;

	for (r = q->head; r != NULL; r = r->next)
		if (r->tag == tag)
			return r;
	return NULL;
}

static void ring(struct bell *b)
{
	atomic_fetch_add(&b->n, 1);
	if (atomic_load(&b->waiters) > 0) {
		pthread_mutex_lock(&b->m);
		pthread_cond_broadcast(&b->c);
		pthread_mutex_unlock(&b->m);
	}
}

/* After publishing something for `b`'s owner: wake it if it sleeps. The
 * fence pairs with the one in wait (the waiters increment): either this
 * thread sees the sleeper, or the sleeper sees what was published. */
static void notify(struct bell *b)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&b->waiters, memory_order_relaxed) > 0)
		ring(b);
}

static void complete(struct ireq *r, int status)
{
	atomic_store_explicit(&r->status, status, memory_order_release);
}

static struct chan *chan_of(const struct world *w, uint32_t from,
			    uint32_t to)
{
	return &w->chan[(size_t)from * w->size + to];
}

static struct slot *slot_of(const struct world *w, uint32_t from,
			    uint32_t to, uint64_t i)
{
	return &w->slots[((size_t)from * w->size + to) * w->cap +
			 (size_t)(i & (w->cap - 1))];
}

/* ---- worlds --------------------------------------------------------- */

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
	const char *p = opt;
	char *end;
	unsigned long v;

	c->eager = INLINE_MAX;
	if (p == NULL || *p == '\0')
		return 0;
	while (*p != '\0') {
		size_t n = strcspn(p, ",");

		if (n > 6 && strncmp(p, "eager=", 6) == 0) {
			v = strtoul(p + 6, &end, 10);
			if (end != p + n || p[6] < '0' || p[6] > '9' ||
			    v > INLINE_MAX)
				return dpl_set_error(DPL_EINVAL,
						     "inproc: option '%.*s': "
						     "eager takes 0..%d bytes",
						     (int)n, p, INLINE_MAX);
			c->eager = (uint32_t)v;
		} else {
			return dpl_set_error(DPL_EINVAL,
					     "inproc: unknown option '%.*s' "
					     "(it takes eager=BYTES)",
					     (int)n, p);
		}
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
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

static int inproc_init(void *vctx, const struct dpl_transport_params *p)
{
	struct ctx *c = vctx;
	const char *name = p->bootstrap ? p->bootstrap : "default";
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

/* ---- receiving ------------------------------------------------------ */

/* p has receives posted now. Its ring may hold messages that came while
 * it had none, whose news an earlier progress took: look again. */
static void activate(struct ctx *c, uint32_t p)
{
	if (c->peer[p].act == NONE) {
		c->peer[p].act = c->nactive;
		c->active[c->nactive++] = p;
		c->rescan = true;
	}
}

static void deactivate(struct ctx *c, uint32_t p)
{
	uint32_t i = c->peer[p].act, last;

	if (i == NONE || c->peer[p].posted.head != NULL)
		return;
	last = c->active[--c->nactive];
	c->active[i] = last;
	c->peer[last].act = i;
	c->peer[p].act = NONE;
}

/* Complete receive r with the len bytes at src: copied when the
 * lengths agree, else DPL_ETRUNC. Returns the status. */
static int take(struct ireq *r, const void *src, size_t len)
{
	int st = 0;

	if (len != r->len)
		st = DPL_ETRUNC;
	else if (len > 0)
		memcpy(r->buf, src, len);
	complete(r, st);
	return st;
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
		ring(&c->w->rank[p].bell);
	return n;
}

/* Match the ring messages from p not looked at yet against the
 * receives posted from p; returns the number of receives completed. */
static int scan_ring(struct ctx *c, uint32_t p)
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

/* Match what p sent this rank (ring first, then list) against the
 * receives posted from p; returns the number of receives completed. */
static int drain(struct ctx *c, uint32_t p)
{
	struct peer *pp = &c->peer[p];
	int n = scan_ring(c, p);

	/* The sender fills the ring while its list is empty and then adds
	 * to the list, which keeps it off the ring until this rank empties
	 * the list again. So once the list is seen non-empty, the ring is
	 * looked at once more: a message that went in after the first look
	 * but before the list's first entry is older than that entry. */
	if (pp->posted.head != NULL &&
	    atomic_load_explicit(&chan_of(c->w, p, c->rank)->nlist,
				 memory_order_acquire) > 0) {
		n += scan_ring(c, p);
		if (pp->posted.head != NULL)
			n += drain_list(c, p);
	}
	if (pp->posted.head == NULL)
		deactivate(c, p);
	return n;
}

/* p left: match what it sent, fail the rest of its receives. */
static int fail_from(struct ctx *c, uint32_t p)
{
	struct peer *pp = &c->peer[p];
	struct ireq *r;
	int n = drain(c, p);

	while ((r = pp->posted.head) != NULL) {
		q_remove(&pp->posted, r);
		complete(r, DPL_EPEER);
		n++;
	}
	deactivate(c, p);
	return n;
}

/* ---- leaving -------------------------------------------------------- */

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

static void inproc_fini(void *vctx)
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
			ring(&w->rank[q].bell);
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

/* ---- posting -------------------------------------------------------- */

static int check_post(struct ctx *c, uint32_t peer, uint64_t tag,
		      uint32_t mem)
{
	if (peer >= c->w->size || peer == c->rank)
		return dpl_set_error(DPL_EINVAL,
				     "inproc: peer %u of rank %u in a "
				     "world of %u", peer, c->rank,
				     c->w->size);
	if (tag > DPL_TAG_MAX)
		return dpl_set_error(DPL_EINVAL,
				     "inproc: tag %#llx beyond %d bits",
				     (unsigned long long)tag, DPL_TAG_BITS);
	if (mem != DPL_MEM_HOST)
		return dpl_set_error(DPL_ENOTSUP,
				     "inproc: memory kind %u (host only)",
				     mem);
	return 0;
}

static void init_req(struct ireq *r, struct ctx *c, uint32_t peer,
		     uint64_t tag, void *buf, size_t len, bool send)
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

/* Put a message in the ring to `peer` when it is small, the ring has
 * room and no earlier send waits in the list. */
static bool ring_send(struct ctx *c, uint32_t peer, uint64_t tag,
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

static int inproc_isend(void *vctx, void *req, uint32_t peer, uint64_t tag,
			const void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct ireq *s = req;
	struct rank *k;
	struct chan *ch;
	int rc;

	if ((rc = check_post(c, peer, tag, mem)) != 0)
		return rc;
	k = &c->w->rank[peer];
	if (atomic_load_explicit(&k->dead, memory_order_acquire))
		return DPL_EPEER;
	init_req(s, c, peer, tag, (void *)buf, len, true);
	if (ring_send(c, peer, tag, buf, len)) {
		atomic_store_explicit(&s->status, 0, memory_order_relaxed);
		atomic_store_explicit(&k->news, 1, memory_order_release);
		notify(&k->bell);
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
	notify(&k->bell);
	return 0;
}

static int inproc_irecv(void *vctx, void *req, uint32_t peer, uint64_t tag,
			void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct ireq *r = req;
	struct peer *pp;
	uint32_t mask;
	uint64_t i;
	int rc;

	if ((rc = check_post(c, peer, tag, mem)) != 0)
		return rc;
	init_req(r, c, peer, tag, buf, len, false);
	pp = &c->peer[peer];
	mask = c->w->cap - 1;
	/* Ring messages looked at before match no earlier receive: the
	 * oldest one with this tag is this receive's. */
	for (i = pp->rhead; i < pp->rscan; i++) {
		const struct slot *s = slot_of(c->w, peer, c->rank, i);

		if (!pp->used[i & mask] && s->tag == tag) {
			take(r, s->data, s->len);
			pp->used[i & mask] = 1;
			advance_head(c, peer);
			c->extra++;
			return 0;
		}
	}
	q_push(&pp->posted, r);
	activate(c, peer);
	if (atomic_load_explicit(&c->w->rank[peer].dead,
				 memory_order_acquire)) {
		c->extra += drain(c, peer);
		if (r->queued) {
			q_remove(&pp->posted, r);
			deactivate(c, peer);
			return DPL_EPEER;
		}
	} else if (atomic_load_explicit(&chan_of(c->w, peer, c->rank)->nlist,
					memory_order_relaxed) > 0) {
		/* Keep the list's order behind the ring's. */
		c->extra += drain(c, peer);
	}
	return 0;
}

static int inproc_test(void *vctx, void *req)
{
	struct ctx *c = vctx;
	struct ireq *r = req;
	int st = atomic_load_explicit(&r->status, memory_order_acquire);

	if (st != DPL_EAGAIN || r->send || !r->queued)
		return st;
	c->extra += drain(c, r->peer);
	return atomic_load_explicit(&r->status, memory_order_acquire);
}

static int inproc_progress(void *vctx)
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
			d += (uint64_t)fail_from(c, p);
		else
			d += (uint64_t)drain(c, p);
	}
	return d > INT32_MAX ? INT32_MAX : (int)d;
}

static int inproc_cancel(void *vctx, void *req)
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
		deactivate(c, r->peer);
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

static int inproc_wait(void *vctx, uint64_t timeout_ns)
{
	struct ctx *c = vctx;
	struct bell *b = &c->w->rank[c->rank].bell;
	struct timespec ts;
	uint64_t ns;

	if (c->extra > 0 || c->rescan || atomic_load(&b->n) != c->seen ||
	    pending(c))
		return 0;
	if (timeout_ns > 3600u * UINT64_C(1000000000))
		timeout_ns = 3600u * UINT64_C(1000000000);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ns = (uint64_t)ts.tv_nsec + timeout_ns;
	ts.tv_sec += (time_t)(ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	pthread_mutex_lock(&b->m);
	atomic_fetch_add(&b->waiters, 1); /* a full fence: see notify */
	while (atomic_load(&b->n) == c->seen && !pending(c))
		if (pthread_cond_timedwait(&b->c, &b->m, &ts) == ETIMEDOUT)
			break;
	atomic_fetch_sub(&b->waiters, 1);
	pthread_mutex_unlock(&b->m);
	return 0;
}

DPL_EXTERN const struct dpl_transport_ops dpl_transport_inproc = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "inproc",
	.caps = DPL_TRANSPORT_CAP_PEER_FAILURE | DPL_TRANSPORT_CAP_WAIT,
	.ctx_size = sizeof(struct ctx),
	.req_size = sizeof(struct ireq),
	.init = inproc_init,
	.fini = inproc_fini,
	.isend = inproc_isend,
	.irecv = inproc_irecv,
	.test = inproc_test,
	.progress = inproc_progress,
	.cancel = inproc_cancel,
	.wait = inproc_wait,
};
