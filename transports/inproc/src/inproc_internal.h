/*
 * inproc_internal.h - the state of the in-process transport, shared by
 * its sources (not installed).
 *
 * Every ordered pair of ranks (sender, receiver) has a channel:
 *  - a ring of slots, written only by the sender and read only by the
 *    receiver, for messages of up to `eager` bytes (option, default
 *    DPL_INPROC_EAGER_MAX): the sender copies the message into the next
 *    slot and its send is complete at once; the receiver copies it out
 *    when it matches a receive. A slot is published by its sequence
 *    number, so a message costs the sender no lock and no atomic
 *    read-modify-write, and the two threads share only the slot's cache
 *    lines (inproc_ring.c);
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
 * asked for yet stay in their slots until a receive claims them
 * (inproc_match.c).
 *
 * Each rank has a doorbell (a counter and a condition variable), rung
 * when a rendezvous send of its completes, when a peer leaves, and when
 * it sleeps in wait and a message arrives for it (the sender sees it
 * asleep by its `waiters` count, with a full fence on both sides).
 *
 * Worlds are found by name (params.world) in a process-wide registry,
 * created by the first rank that joins and freed when the last one
 * leaves (inproc_world.c). A rank that leaves (fini) is dead for the
 * others: their rendezvous sends to it and their receives from it that
 * nothing it sent can match complete with DPL_EPEER, and later posts to
 * it fail.
 */
#ifndef DPL_INPROC_INTERNAL_H
#define DPL_INPROC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <dpl/transport_inproc.h>

#define WORLD_NAME_MAX 128
#define LINE 64
/* One ring slot: its header and up to DPL_INPROC_EAGER_MAX bytes of
 * message. */
#define SLOT_BYTES 128
#define INLINE_MAX (SLOT_BYTES - 24)
/* Slots per ring: RING_MAX, halved while the rings of a world would
 * take more than RING_BUDGET bytes, but at least RING_MIN. */
#define RING_MAX 32u
#define RING_MIN 4u
#define RING_BUDGET ((size_t)16 << 20)
#define NONE UINT32_MAX

_Static_assert(INLINE_MAX == DPL_INPROC_EAGER_MAX, "eager limit");

/* A request: the storage the caller gives isend and irecv. */
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

/* The context of one rank (ctx_size bytes, allocated by the core). */
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

static inline void q_push(struct queue *q, struct ireq *r)
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

static inline void q_remove(struct queue *q, struct ireq *r)
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

static inline struct ireq *q_find(const struct queue *q, uint64_t tag)
{
	struct ireq *r;

	for (r = q->head; r != NULL; r = r->next)
		if (r->tag == tag)
			return r;
	return NULL;
}

/* Ring the doorbell: count it, and wake its owner if it sleeps. */
static inline void bell_ring(struct bell *b)
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
static inline void bell_notify(struct bell *b)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&b->waiters, memory_order_relaxed) > 0)
		bell_ring(b);
}

static inline void complete(struct ireq *r, int status)
{
	atomic_store_explicit(&r->status, status, memory_order_release);
}

/* Complete receive r with the len bytes at src: copied when the
 * lengths agree, else DPL_ETRUNC. Returns the status. */
static inline int take(struct ireq *r, const void *src, size_t len)
{
	int st = 0;

	if (len != r->len)
		st = DPL_ETRUNC;
	else if (len > 0)
		memcpy(r->buf, src, len);
	complete(r, st);
	return st;
}

static inline struct chan *chan_of(const struct world *w, uint32_t from,
				   uint32_t to)
{
	return &w->chan[(size_t)from * w->size + to];
}

/* ---- worlds (inproc_world.c) ------------------------------------------ */

/* init and fini of the table: join a world by name, leave it. */
int dpl__inproc_init(void *vctx, const struct dpl_transport_params *p);
void dpl__inproc_fini(void *vctx);

/* ---- the per-pair ring (inproc_ring.c) -------------------------------- */

/* Put a message in the ring to `peer` when it is at most `eager` bytes,
 * the ring has room and no earlier send waits in the list; false when
 * it must go to the list instead. */
bool dpl__inproc_ring_send(struct ctx *c, uint32_t peer, uint64_t tag,
			   const void *buf, size_t len);

/* Match the ring messages from p not looked at yet against the
 * receives posted from p; returns the number of receives completed. */
int dpl__inproc_ring_scan(struct ctx *c, uint32_t p);

/* Complete receive r (not queued yet) with the oldest ring message from
 * its peer with its tag among those looked at before; false when there
 * is none. */
bool dpl__inproc_ring_claim(struct ctx *c, struct ireq *r);

/* ---- matching, posting, progress (inproc_match.c, inproc_post.c) ------ */

/* p has receives posted now: progress looks at it. */
void dpl__inproc_activate(struct ctx *c, uint32_t p);
/* p has no receives posted any more: progress stops looking at it. */
void dpl__inproc_deactivate(struct ctx *c, uint32_t p);
/* Match what p sent this rank (ring first, then list) against the
 * receives posted from p; returns the number of receives completed. */
int dpl__inproc_drain(struct ctx *c, uint32_t p);
/* p left: match what it sent, fail the rest of its receives; returns
 * the number of receives completed. */
int dpl__inproc_fail_from(struct ctx *c, uint32_t p);

/* The data path of the table (inproc_post.c). */
int dpl__inproc_isend(void *vctx, void *req, uint32_t peer, uint64_t tag,
		      const void *buf, size_t len, uint32_t mem);
int dpl__inproc_irecv(void *vctx, void *req, uint32_t peer, uint64_t tag,
		      void *buf, size_t len, uint32_t mem);
int dpl__inproc_test(void *vctx, void *req);
int dpl__inproc_progress(void *vctx);
int dpl__inproc_cancel(void *vctx, void *req);
int dpl__inproc_wait(void *vctx, uint64_t timeout_ns);

#endif /* DPL_INPROC_INTERNAL_H */
