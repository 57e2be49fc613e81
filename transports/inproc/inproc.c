/*
 * inproc.c - the in-process transport: the ranks of a world are threads
 * of one process, and a message is one memcpy.
 *
 * Each rank has a mailbox holding the receives it posted and the sends
 * addressed to it that found no receive yet; one mutex guards both. A
 * post matches against the other list under that mutex and, on a match,
 * copies the data and completes both requests at once, so a send always
 * completes only once its receive is posted (rendezvous), which is the
 * strictest behaviour the contract allows. Completion is an atomic store
 * that the owner's test reads; each rank has a doorbell (a counter and a
 * condition variable) rung on completions of its requests, which progress
 * counts and wait sleeps on.
 *
 * Worlds are found by name (the bootstrap string) in a process-wide
 * registry, created by the first rank that joins and freed when the last
 * one leaves. A rank that leaves (fini) is dead for the others: their
 * requests with it complete with DPL_EPEER and later posts to it fail.
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

struct ireq {
	struct ireq *prev, *next;
	atomic_int status;  /* DPL_EAGAIN while pending */
	uint32_t owner;     /* rank that posted it */
	uint32_t peer;      /* the other side */
	uint32_t box;       /* mailbox whose lists hold it */
	bool send;
	bool queued;
	uint64_t tag;
	void *buf;
	size_t len;
};

struct queue {
	struct ireq *head, *tail;
};

/* What one thread writes and others read sits on cache lines of its
 * own: a rank's mailbox does not share a line with its neighbour's, and
 * the doorbell count (rung by senders, read by the owner's progress)
 * not with the lock. */
#define LINE 64

struct bell {
	_Alignas(LINE) atomic_uint_fast64_t n;
	atomic_int waiters;
	_Alignas(LINE) pthread_mutex_t m;
	pthread_cond_t c;
};

struct mbox {
	_Alignas(LINE) pthread_mutex_t lock;
	struct queue posted;     /* receives posted by this rank */
	struct queue unexpected; /* sends to this rank, unmatched */
	atomic_bool dead;
	bool joined;             /* guarded by the registry lock */
	struct bell bell;
};

struct world {
	struct world *next;
	char name[WORLD_NAME_MAX];
	uint32_t size;
	uint32_t refs; /* guarded by the registry lock */
	struct mbox *box;
};

struct ctx {
	struct world *w;
	uint32_t rank;
	uint64_t seen; /* doorbell count at the last progress */
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

static void ring(struct bell *b)
{
	atomic_fetch_add(&b->n, 1);
	if (atomic_load(&b->waiters) > 0) {
		pthread_mutex_lock(&b->m);
		pthread_cond_broadcast(&b->c);
		pthread_mutex_unlock(&b->m);
	}
}

static void complete(struct ireq *r, int status)
{
	atomic_store_explicit(&r->status, status, memory_order_release);
}

/* Match a send and a receive: copy when the lengths agree. */
static void match(struct ireq *send, struct ireq *recv)
{
	int st = 0;

	if (send->len != recv->len)
		st = DPL_ETRUNC;
	else if (send->len > 0)
		memcpy(recv->buf, send->buf, send->len);
	complete(recv, st);
	complete(send, st);
}

static struct ireq *find(struct queue *q, uint32_t owner, uint64_t tag)
{
	struct ireq *r;

	for (r = q->head; r != NULL; r = r->next)
		if (r->owner == owner && r->tag == tag)
			return r;
	return NULL;
}

/* Receives are matched by their peer (the sender). */
static struct ireq *find_recv(struct queue *q, uint32_t sender, uint64_t tag)
{
	struct ireq *r;

	for (r = q->head; r != NULL; r = r->next)
		if (r->peer == sender && r->tag == tag)
			return r;
	return NULL;
}

static int world_new(const char *name, uint32_t size, struct world **out)
{
	pthread_condattr_t attr;
	struct world *w;
	uint32_t i;

	w = calloc(1, sizeof *w);
	if (w == NULL)
		return DPL_ENOMEM;
	/* sizeof *w->box is a multiple of LINE (its _Alignas members) */
	w->box = aligned_alloc(LINE, size * sizeof *w->box);
	if (w->box == NULL) {
		free(w);
		return DPL_ENOMEM;
	}
	memset(w->box, 0, size * sizeof *w->box);
	snprintf(w->name, sizeof w->name, "%s", name);
	w->size = size;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	for (i = 0; i < size; i++) {
		struct mbox *b = &w->box[i];

		pthread_mutex_init(&b->lock, NULL);
		pthread_mutex_init(&b->bell.m, NULL);
		pthread_cond_init(&b->bell.c, &attr);
		atomic_init(&b->bell.n, 0);
		atomic_init(&b->bell.waiters, 0);
		atomic_init(&b->dead, false);
	}
	pthread_condattr_destroy(&attr);
	*out = w;
	return 0;
}

static void world_free(struct world *w)
{
	uint32_t i;

	for (i = 0; i < w->size; i++) {
		pthread_mutex_destroy(&w->box[i].lock);
		pthread_mutex_destroy(&w->box[i].bell.m);
		pthread_cond_destroy(&w->box[i].bell.c);
	}
	free(w->box);
	free(w);
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
	if (p->options != NULL && p->options[0] != '\0')
		return dpl_set_error(DPL_EINVAL,
					 "inproc: unknown options '%s' (it "
					 "takes none)", p->options);
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
	if (w->box[p->rank].joined) {
		pthread_mutex_unlock(&registry_lock);
		return dpl_set_error(DPL_EBUSY,
					 "inproc: rank %u of world '%s' is "
					 "taken", p->rank, name);
	}
	w->box[p->rank].joined = true;
	w->refs++;
	pthread_mutex_unlock(&registry_lock);
	c->w = w;
	c->rank = p->rank;
	c->seen = 0;
	return 0;
}

/* Complete with DPL_EPEER what others have pending with `dead` in box q,
 * and drop what `dead` itself left there. Returns true when a request of
 * q's owner completed. */
static bool fail_box(struct world *w, uint32_t q, uint32_t dead)
{
	struct mbox *b = &w->box[q];
	struct ireq *r, *next;
	bool hit = false;

	pthread_mutex_lock(&b->lock);
	for (r = b->posted.head; r != NULL; r = next) {
		next = r->next;
		if (q == dead || r->peer == dead) {
			q_remove(&b->posted, r);
			complete(r, q == dead ? DPL_ECANCELED : DPL_EPEER);
			hit |= q != dead;
		}
	}
	for (r = b->unexpected.head; r != NULL; r = next) {
		next = r->next;
		if (q == dead || r->owner == dead) {
			q_remove(&b->unexpected, r);
			complete(r, r->owner == dead ? DPL_ECANCELED
						     : DPL_EPEER);
		}
	}
	pthread_mutex_unlock(&b->lock);
	return hit;
}

static void inproc_fini(void *vctx)
{
	struct ctx *c = vctx;
	struct world *w = c->w, **pp;
	uint32_t q;

	if (w == NULL)
		return;
	pthread_mutex_lock(&w->box[c->rank].lock);
	atomic_store(&w->box[c->rank].dead, true);
	pthread_mutex_unlock(&w->box[c->rank].lock);
	for (q = 0; q < w->size; q++)
		fail_box(w, q, c->rank);
	/* Sends of others to this rank failed too: wake everyone. */
	for (q = 0; q < w->size; q++)
		if (q != c->rank)
			ring(&w->box[q].bell);
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
	c->w = NULL;
}

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
					 (unsigned long long)tag,
					 DPL_TAG_BITS);
	if (mem != DPL_MEM_HOST)
		return dpl_set_error(DPL_ENOTSUP,
					 "inproc: memory kind %u (host only)",
					 mem);
	return 0;
}

static void init_req(struct ireq *r, struct ctx *c, uint32_t peer,
		     uint64_t tag, void *buf, size_t len, bool send)
{
	memset(r, 0, sizeof *r);
	atomic_init(&r->status, DPL_EAGAIN);
	r->owner = c->rank;
	r->peer = peer;
	r->tag = tag;
	r->buf = buf;
	r->len = len;
	r->send = send;
}

static int inproc_isend(void *vctx, void *req, uint32_t peer, uint64_t tag,
			const void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct ireq *s = req, *r;
	struct mbox *b;
	int rc;

	if ((rc = check_post(c, peer, tag, mem)) != 0)
		return rc;
	b = &c->w->box[peer];
	pthread_mutex_lock(&b->lock);
	if (atomic_load(&b->dead)) {
		pthread_mutex_unlock(&b->lock);
		return DPL_EPEER;
	}
	init_req(s, c, peer, tag, (void *)buf, len, true);
	s->box = peer;
	r = find_recv(&b->posted, c->rank, tag);
	if (r != NULL) {
		q_remove(&b->posted, r);
		match(s, r);
	} else {
		q_push(&b->unexpected, s);
	}
	pthread_mutex_unlock(&b->lock);
	if (r != NULL)
		ring(&b->bell);
	return 0;
}

static int inproc_irecv(void *vctx, void *req, uint32_t peer, uint64_t tag,
			void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct ireq *r = req, *s;
	struct mbox *b;
	int rc;

	if ((rc = check_post(c, peer, tag, mem)) != 0)
		return rc;
	b = &c->w->box[c->rank];
	pthread_mutex_lock(&b->lock);
	init_req(r, c, peer, tag, buf, len, false);
	r->box = c->rank;
	s = find(&b->unexpected, peer, tag);
	if (s != NULL) {
		q_remove(&b->unexpected, s);
		match(s, r);
	} else if (atomic_load(&c->w->box[peer].dead)) {
		pthread_mutex_unlock(&b->lock);
		return DPL_EPEER;
	} else {
		q_push(&b->posted, r);
	}
	pthread_mutex_unlock(&b->lock);
	if (s != NULL)
		ring(&c->w->box[peer].bell);
	return 0;
}

static int inproc_test(void *vctx, void *req)
{
	struct ireq *r = req;

	return atomic_load_explicit(&r->status, memory_order_acquire);
}

static int inproc_progress(void *vctx)
{
	struct ctx *c = vctx;
	uint64_t n = atomic_load(&c->w->box[c->rank].bell.n);
	uint64_t d = n - c->seen;

	c->seen = n;
	return d > INT32_MAX ? INT32_MAX : (int)d;
}

static int inproc_cancel(void *vctx, void *req)
{
	struct ctx *c = vctx;
	struct ireq *r = req;
	struct mbox *b = &c->w->box[r->box];

	pthread_mutex_lock(&b->lock);
	if (r->queued) {
		q_remove(r->send ? &b->unexpected : &b->posted, r);
		complete(r, DPL_ECANCELED);
	}
	pthread_mutex_unlock(&b->lock);
	ring(&c->w->box[c->rank].bell);
	return 0;
}

static int inproc_wait(void *vctx, uint64_t timeout_ns)
{
	struct ctx *c = vctx;
	struct bell *b = &c->w->box[c->rank].bell;
	struct timespec ts;
	uint64_t ns;

	if (atomic_load(&b->n) != c->seen)
		return 0;
	if (timeout_ns > 3600u * UINT64_C(1000000000))
		timeout_ns = 3600u * UINT64_C(1000000000);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ns = (uint64_t)ts.tv_nsec + timeout_ns;
	ts.tv_sec += (time_t)(ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	pthread_mutex_lock(&b->m);
	atomic_fetch_add(&b->waiters, 1);
	while (atomic_load(&b->n) == c->seen)
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
