/*
 * shm.c - the shared-memory transport: the ranks of a job are processes
 * of one host and meet in POSIX shared memory.
 *
 * Segments. Every rank creates one segment (shm_segment.c) holding its
 * header and one inbound ring per other rank, maps every other rank's
 * segment, and unlinks its own as soon as all ranks have mapped all
 * segments (a bootstrap barrier), so no file outlives init, even when a
 * rank is killed later. Ranks meet through dpl/bootstrap.h: an allgather
 * of pids, options and a job id picked by rank 0, then two barriers.
 *
 * Frames. A ring is a byte ring of 64-byte aligned frames; each opens
 * with a 64-byte header (struct frame) carrying its kind, a per-ring
 * sequence number, the tag and the length, and a `state` word the two
 * sides hand over with atomics:
 *
 *   POSTED   --receiver matches-->  CLAIMED --copied--> DONE (+ status)
 *   POSTED   --sender cancels-->    CANCELLED --receiver sees--> RELEASED
 *   CLAIMED  --no cross-memory attach--> PULL (sender streams DATA)
 *
 * The sender writes frames at its private tail and publishes them with a
 * release store of the ring's `tail`; it reuses space only once the
 * receiver marked the frames DONE or RELEASED (its private `reclaim`
 * position follows them). So a frame the receiver has not matched yet
 * stays in the ring: unexpected messages are kept in place, chained
 * through a receiver-owned field, and a full ring is back-pressure
 * (isend returns DPL_EAGAIN); nothing is dropped and nothing is
 * allocated on the data path.
 *
 *  - EAGER (length <= the eager limit): the payload follows the header;
 *    the receiver copies it out when it matches.
 *  - RTS (longer): the header carries the sender's buffer address; the
 *    receiver copies straight from the sender's memory with one
 *    process_vm_readv (cross-memory attach, a single copy). Where that
 *    is not permitted, the receiver sets PULL and the sender streams the
 *    message through the ring as DATA frames (two copies).
 *  - PAD fills the end of the ring when a frame does not fit there.
 *
 * A send completes when its frame turns DONE, with the receiver's
 * status: a length mismatch is DPL_ETRUNC on both sides and nothing is
 * copied; later messages are unaffected. Matching is exact on (sender,
 * tag), in ring order, against receives kept in posting order, so
 * messages of one sender with one tag match in order.
 *
 * Liveness. Each header has a `closed` flag (set by fini), a heartbeat
 * (refreshed by progress and wait) and the owner's pid, watched through
 * a pidfd where the kernel has them (kill(pid, 0) otherwise). Progress
 * and wait look at them every LIVENESS_PERIOD_NS, so a rank that exits,
 * crashes or finalises is DPL_EPEER for the others within that period of
 * their next progress; a rank whose heartbeat stops for the liveness
 * timeout (timeout_ms) counts as failed too.
 *
 * Waiting. wait spins for spin_us, then sleeps on the doorbell futex in
 * its own header; writers ring it after publishing a frame or finishing
 * one when the owner says it sleeps (a seq_cst fence on both sides).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <dpl/bootstrap.h>
#include <dpl/transport.h>
#include <dpl/transport_shm.h>

#include "shm_internal.h"

#define FRAME 64u
#define REQ_LIVE 0x73686d52u /* "shmR" */
#define POS_NONE UINT64_MAX
#define LIVENESS_PERIOD_NS UINT64_C(50000000) /* 50 ms */
#define LIVENESS_TICKS 64u /* progress calls per look at the clock */
#define DEFAULT_TIMEOUT_MS 60000u
#define FINI_CLAIM_WAIT_NS UINT64_C(200000000) /* 200 ms */

enum kind { K_EAGER = 1, K_RTS = 2, K_DATA = 3, K_PAD = 4 };

enum fstate {
	S_POSTED = 1,
	S_CLAIMED = 2,
	S_DONE = 3,
	S_CANCELLED = 4,
	S_RELEASED = 5,
	S_PULL = 6
};

struct frame {
	_Atomic uint32_t state;
	int32_t status;  /* receiver's verdict, valid with DONE */
	uint32_t size;   /* bytes of the frame, header included */
	uint32_t kind;
	uint64_t seq;    /* per ring, from 0 */
	uint64_t tag;    /* DATA: position of its RTS */
	uint64_t len;    /* message bytes (DATA: bytes of this chunk) */
	uint64_t addr;   /* RTS: sender's buffer; DATA: offset */
	uint64_t spare;
	uint64_t next;   /* receiver's unexpected chain: position + 1 */
};

_Static_assert(sizeof(struct frame) == FRAME, "frame header is 64 bytes");

enum where { L_NONE, L_POSTED, L_PULLS, L_INFLIGHT, L_STREAMS };

struct req {
	uint32_t magic;   /* REQ_LIVE while pending */
	bool send;
	uint8_t where;    /* the peer list holding it (enum where) */
	int32_t status;   /* DPL_EAGAIN while pending */
	uint32_t peer;
	uint64_t tag;
	unsigned char *buf;
	size_t len;
	uint64_t pos;     /* frame carrying its completion, or POS_NONE */
	uint64_t rts;     /* pulls: position of the RTS frame */
	size_t off;       /* pulls: bytes streamed / received */
	struct req *prev, *next;
};

struct rlist {
	struct req *head, *tail;
};

struct peer {
	/* The peer's segment, mapped here. */
	struct dpl__shm_hdr *hdr;
	void *seg;
	/* Outbound: my ring in the peer's segment. */
	struct dpl__shm_ctl *octl;
	unsigned char *oring;
	struct req **shadow;   /* per 64-byte slot: the send it completes */
	uint64_t otail, oreclaim, oseq, odone;
	struct rlist inflight; /* sends whose frame is in the ring */
	struct rlist streams;  /* sends the peer pulls (DATA to push) */
	/* Inbound: the peer's ring in my segment. */
	struct dpl__shm_ctl *ictl;
	unsigned char *iring;
	uint64_t iscan, iseq, icancels;
	uint64_t idone;        /* frames finished (the ring's `done`) */
	uint64_t uhead, utail; /* unexpected chain, positions + 1 */
	struct rlist posted;   /* receives not matched yet */
	struct rlist pulls;    /* receives filled by DATA frames */
	/* Liveness. */
	int pid;
	int pidfd;
	bool cma;
	int dead;              /* 0, or what requests with it end with */
	char why[160];
};

struct ctx {
	uint32_t rank, world;
	struct dpl__shm_hdr *hdr;
	void *seg;
	size_t seg_bytes;
	char name[DPL__SHM_NAME_MAX];
	bool linked;           /* own segment name still exists */
	struct peer *peer;     /* [world]; own entry unused */
	struct pollfd *pfd;    /* pidfds of the peers */
	uint32_t *pfd_rank;
	nfds_t npfd;
	uint64_t ring, mask;
	uint64_t eager, chunk;
	uint64_t spin_ns, liveness_ns, next_check;
	uint64_t probe;        /* peers read it to test cross-memory attach */
	uint64_t completions;  /* since the last progress */
	uint32_t ticks;        /* progress calls, for tick_liveness */
	bool want_cma;
};

/* ---- small helpers ----------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static uint32_t frame_size(uint64_t payload)
{
	return (uint32_t)((FRAME + payload + FRAME - 1) / FRAME * FRAME);
}

static struct frame *frame_at(unsigned char *ring, uint64_t mask,
			      uint64_t pos)
{
	return (struct frame *)(ring + (pos & mask));
}

static void l_push(struct rlist *l, struct req *r, uint8_t where)
{
	r->next = NULL;
	r->prev = l->tail;
	if (l->tail)
		l->tail->next = r;
	else
		l->head = r;
	l->tail = r;
	r->where = where;
}

static void l_del(struct rlist *l, struct req *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		l->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		l->tail = r->prev;
	r->prev = r->next = NULL;
	r->where = L_NONE;
}

static void finish(struct ctx *c, struct req *r, int status)
{
	r->status = status;
	r->magic = 0;
	c->completions++;
}

static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/*
 * Wake the owner of `h` if it sleeps in wait. Callers have just made a
 * seq_cst store (or read-modify-write) of what the sleeper looks at; with
 * this seq_cst load of `sleeping` and the sleeper's store of it followed
 * by a seq_cst fence (shm_wait), one of the two sees the other.
 */
static void ring_if_asleep(struct dpl__shm_hdr *h)
{
	if (atomic_load_explicit(&h->sleeping, memory_order_seq_cst)) {
		atomic_fetch_add(&h->doorbell, 1);
		futex_wake(&h->doorbell);
	}
}

/* Wake the owner of `h` after plain stores (a full fence first). */
static void bell(struct dpl__shm_hdr *h)
{
	atomic_thread_fence(memory_order_seq_cst);
	ring_if_asleep(h);
}

/* Count a finished frame of peer p's ring and wake its sender. */
static void count_done(struct peer *p)
{
	atomic_store_explicit(&p->ictl->done, ++p->idone,
			      memory_order_seq_cst);
	ring_if_asleep(p->hdr);
}

/* The receiver is done with frame f of peer p's ring (DONE or RELEASED). */
static void frame_finish(struct peer *p, struct frame *f, uint32_t state,
			 int status)
{
	f->status = status;
	atomic_store_explicit(&f->state, state, memory_order_release);
	count_done(p);
}

/* ---- peer failure ----------------------------------------------------- */

static void fail_list(struct ctx *c, struct rlist *l, int code)
{
	while (l->head != NULL) {
		struct req *r = l->head;

		l_del(l, r);
		finish(c, r, code);
	}
}

/* Mark peer q failed: every request with it ends with `code`. */
static void fail_peer(struct ctx *c, uint32_t q, int code, const char *why)
{
	struct peer *p = &c->peer[q];
	uint64_t slots = c->ring / FRAME, i;

	if (p->dead)
		return;
	p->dead = code;
	snprintf(p->why, sizeof p->why, "%s", why);
	fail_list(c, &p->posted, code);
	fail_list(c, &p->pulls, code);
	fail_list(c, &p->inflight, code);
	fail_list(c, &p->streams, code);
	for (i = 0; i < slots; i++)
		p->shadow[i] = NULL;
	p->uhead = p->utail = 0;
}

/* Look at every peer's flags, heartbeat and process. */
static void check_liveness(struct ctx *c, uint64_t now)
{
	char why[160];
	uint32_t q;
	nfds_t i;

	atomic_store_explicit(&c->hdr->heartbeat_ns, now,
			      memory_order_relaxed);
	c->next_check = now + LIVENESS_PERIOD_NS;
	/* A rank that left says so first; then processes that are gone. */
	for (q = 0; q < c->world; q++)
		if (q != c->rank && !c->peer[q].dead &&
		    atomic_load_explicit(&c->peer[q].hdr->closed,
					 memory_order_acquire)) {
			snprintf(why, sizeof why, "rank %u left the job "
				 "(fini)", q);
			fail_peer(c, q, DPL_EPEER, why);
		}
	if (c->npfd > 0 && poll(c->pfd, c->npfd, 0) > 0)
		for (i = 0; i < c->npfd; i++)
			if (c->pfd[i].revents != 0) {
				q = c->pfd_rank[i];
				snprintf(why, sizeof why, "rank %u (pid %d) "
					 "died", q, c->peer[q].pid);
				fail_peer(c, q, DPL_EPEER, why);
				c->pfd[i].fd = -c->pfd[i].fd - 1; /* ignore */
			}
	for (q = 0; q < c->world; q++) {
		struct peer *p = &c->peer[q];
		uint64_t hb;

		if (q == c->rank || p->dead)
			continue;
		if (p->pidfd < 0 && !dpl__shm_pid_alive(p->pid)) {
			snprintf(why, sizeof why, "rank %u (pid %d) died", q,
				 p->pid);
			fail_peer(c, q, DPL_EPEER, why);
			continue;
		}
		hb = atomic_load_explicit(&p->hdr->heartbeat_ns,
					  memory_order_relaxed);
		if (now > hb && now - hb > c->liveness_ns) {
			snprintf(why, sizeof why, "rank %u silent for %" PRIu64
				 " ms", q, (now - hb) / 1000000u);
			fail_peer(c, q, DPL_EPEER, why);
		}
	}
}

static void maybe_check_liveness(struct ctx *c)
{
	uint64_t now = now_ns();

	if (now >= c->next_check)
		check_liveness(c, now);
}

/* From progress: read the clock only every LIVENESS_TICKS calls, since a
 * busy caller progresses millions of times per second. */
static void tick_liveness(struct ctx *c)
{
	if ((++c->ticks & (LIVENESS_TICKS - 1)) == 0)
		maybe_check_liveness(c);
}

/* ---- sending ------------------------------------------------------------ */

/* Reuse the space of frames the receiver finished with. */
static void reclaim(struct ctx *c, struct peer *p)
{
	while (p->oreclaim < p->otail) {
		struct frame *f = frame_at(p->oring, c->mask, p->oreclaim);
		uint32_t st = atomic_load_explicit(&f->state,
						   memory_order_acquire);
		uint64_t slot = (p->oreclaim & c->mask) / FRAME;
		struct req *r = p->shadow[slot];

		if (st != S_DONE && st != S_RELEASED)
			break;
		if (f->size < FRAME || f->size % FRAME != 0 ||
		    f->size > p->otail - p->oreclaim) {
			char why[96];
			uint32_t q = (uint32_t)(p - c->peer);

			snprintf(why, sizeof why, "ring to rank %u was "
				 "overwritten", q);
			fail_peer(c, q, DPL_EIO, why);
			return;
		}
		if (r != NULL) { /* a send that completes with this frame */
			p->shadow[slot] = NULL;
			l_del(&p->inflight, r);
			r->pos = POS_NONE;
			finish(c, r, f->status);
		}
		p->oreclaim += f->size;
	}
}

/*
 * Room for a frame of `size` bytes at the tail (after a PAD when it
 * would cross the ring's end). Writes the PAD; returns the frame's
 * position in *pos, or DPL_EAGAIN.
 */
static int reserve(struct ctx *c, struct peer *p, uint32_t size,
		   uint64_t *pos)
{
	uint64_t off = p->otail & c->mask;
	uint64_t pad = off + size > c->ring ? c->ring - off : 0;

	if (c->ring - (p->otail - p->oreclaim) < pad + size) {
		reclaim(c, p);
		if (c->ring - (p->otail - p->oreclaim) < pad + size)
			return DPL_EAGAIN;
	}
	if (pad > 0) {
		struct frame *f = frame_at(p->oring, c->mask, p->otail);

		f->status = 0;
		f->size = (uint32_t)pad;
		f->kind = K_PAD;
		f->seq = p->oseq++;
		f->tag = f->len = f->addr = f->spare = f->next = 0;
		atomic_store_explicit(&f->state, S_POSTED,
				      memory_order_relaxed);
		p->otail += pad;
	}
	*pos = p->otail;
	return 0;
}

static struct frame *write_frame(struct ctx *c, struct peer *p, uint64_t pos,
				 uint32_t kind, uint32_t size, uint64_t tag,
				 uint64_t len, uint64_t addr)
{
	struct frame *f = frame_at(p->oring, c->mask, pos);

	f->status = 0;
	f->size = size;
	f->kind = kind;
	f->seq = p->oseq++;
	f->tag = tag;
	f->len = len;
	f->addr = addr;
	f->spare = 0;
	f->next = 0;
	atomic_store_explicit(&f->state, S_POSTED, memory_order_relaxed);
	p->otail = pos + size;
	return f;
}

static void publish(struct peer *p)
{
	atomic_store_explicit(&p->octl->tail, p->otail, memory_order_seq_cst);
	ring_if_asleep(p->hdr);
}

/* Push DATA frames of the sends the peer pulls, as far as room allows. */
static void push_streams(struct ctx *c, struct peer *p)
{
	bool pushed = false;

	while (p->streams.head != NULL) {
		struct req *r = p->streams.head;
		size_t n = r->len - r->off;
		uint64_t pos;
		uint32_t size;

		if (n > c->chunk)
			n = c->chunk;
		size = frame_size(n);
		if (reserve(c, p, size, &pos) != 0)
			break;
		write_frame(c, p, pos, K_DATA, size, r->rts, n, r->off);
		memcpy(p->oring + (pos & c->mask) + FRAME, r->buf + r->off, n);
		r->off += n;
		pushed = true;
		if (r->off == r->len) { /* the last chunk completes it */
			l_del(&p->streams, r);
			r->pos = pos;
			p->shadow[(pos & c->mask) / FRAME] = r;
			l_push(&p->inflight, r, L_INFLIGHT);
		}
	}
	if (pushed)
		publish(p);
}

/* Complete the sends whose frames the receiver finished. */
static void complete_sends(struct ctx *c, struct peer *p)
{
	uint64_t d = atomic_load_explicit(&p->octl->done,
					  memory_order_acquire);
	struct req *r, *next;

	if (d != p->odone) {
		p->odone = d;
		for (r = p->inflight.head; r != NULL; r = next) {
			struct frame *f;
			uint32_t st;

			next = r->next;
			f = frame_at(p->oring, c->mask, r->pos);
			st = atomic_load_explicit(&f->state,
						  memory_order_acquire);
			if (st == S_DONE) {
				p->shadow[(r->pos & c->mask) / FRAME] = NULL;
				l_del(&p->inflight, r);
				r->pos = POS_NONE;
				finish(c, r, f->status);
			} else if (st == S_PULL) {
				/* The receiver cannot read our memory: it
				 * is done with the RTS, we stream. */
				p->shadow[(r->pos & c->mask) / FRAME] = NULL;
				l_del(&p->inflight, r);
				r->rts = r->pos;
				r->pos = POS_NONE;
				r->off = 0;
				l_push(&p->streams, r, L_STREAMS);
				atomic_store_explicit(&f->state, S_RELEASED,
						      memory_order_release);
			}
		}
		reclaim(c, p);
	}
	if (p->streams.head != NULL)
		push_streams(c, p);
}

static int check_post(struct ctx *c, uint32_t peer, uint64_t tag,
		      uint32_t mem, const void *buf, size_t len,
		      const char *op)
{
	const char *dir = op[0] == 's' ? "to" : "from";

	if (peer >= c->world || peer == c->rank)
		return dpl_set_error(DPL_EINVAL, "shm: %s %s peer %u on rank "
				     "%u in a world of %u", op, dir, peer,
				     c->rank, c->world);
	if (tag > DPL_TAG_MAX)
		return dpl_set_error(DPL_EINVAL, "shm: %s tag %#" PRIx64
				     " beyond %d bits", op, tag, DPL_TAG_BITS);
	if (mem != DPL_MEM_HOST)
		return dpl_set_error(DPL_ENOTSUP, "shm: %s of memory kind %u "
				     "(host memory only)", op, mem);
	if (buf == NULL && len > 0)
		return dpl_set_error(DPL_EINVAL, "shm: %s of %zu bytes from a "
				     "NULL buffer", op, len);
	if (c->peer[peer].dead)
		return dpl_set_error(c->peer[peer].dead, "shm: %s %s rank %u: "
				     "%s", op, dir, peer, c->peer[peer].why);
	return 0;
}

static void init_req(struct req *r, bool send, uint32_t peer, uint64_t tag,
		     const void *buf, size_t len)
{
	memset(r, 0, sizeof *r);
	r->magic = REQ_LIVE;
	r->send = send;
	r->status = DPL_EAGAIN;
	r->peer = peer;
	r->tag = tag;
	r->buf = (unsigned char *)buf;
	r->len = len;
	r->pos = POS_NONE;
}

static int shm_isend(void *vctx, void *vreq, uint32_t peer, uint64_t tag,
		     const void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct req *r = vreq;
	struct peer *p;
	bool eager = len <= c->eager;
	uint32_t size = frame_size(eager ? len : 0);
	uint64_t pos;
	int rc;

	if ((rc = check_post(c, peer, tag, mem, buf, len, "send")) != 0)
		return rc;
	p = &c->peer[peer];
	if (reserve(c, p, size, &pos) != 0) {
		complete_sends(c, p);
		if (p->dead)
			return dpl_set_error(p->dead, "shm: send to rank %u: "
					     "%s", peer, p->why);
		if (reserve(c, p, size, &pos) != 0)
			return DPL_EAGAIN;
	}
	init_req(r, true, peer, tag, buf, len);
	write_frame(c, p, pos, eager ? K_EAGER : K_RTS, size, tag, len,
		    (uint64_t)(uintptr_t)buf);
	if (eager && len > 0)
		memcpy(p->oring + (pos & c->mask) + FRAME, buf, len);
	r->pos = pos;
	p->shadow[(pos & c->mask) / FRAME] = r;
	l_push(&p->inflight, r, L_INFLIGHT);
	publish(p);
	return 0;
}

/* ---- receiving ------------------------------------------------------- */

/* Copy len bytes at `addr` in peer p's process into buf (one copy). */
static int cma_read(const struct peer *p, void *buf, uint64_t addr,
		    size_t len)
{
	unsigned char *dst = buf;
	size_t done = 0;

	while (done < len) {
		struct iovec l = {dst + done, len - done};
		struct iovec rm = {(void *)(uintptr_t)(addr + done),
				   len - done};
		ssize_t k = process_vm_readv(p->pid, &l, 1, &rm, 1, 0);

		if (k > 0) {
			done += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == ESRCH)
			return DPL_EPEER;
		return DPL_EIO;
	}
	return 0;
}

/*
 * Deliver the frame at `pos` of peer q's ring to receive r (matched on
 * tag). Returns false when the sender cancelled it first (the frame is
 * released and r stays unmatched).
 */
static bool deliver(struct ctx *c, uint32_t q, uint64_t pos, struct req *r)
{
	struct peer *p = &c->peer[q];
	struct frame *f = frame_at(p->iring, c->mask, pos);
	uint32_t want = S_POSTED;
	int st = 0;

	if (!atomic_compare_exchange_strong_explicit(
		    &f->state, &want, S_CLAIMED, memory_order_acq_rel,
		    memory_order_acquire)) {
		frame_finish(p, f, S_RELEASED, 0);
		return false;
	}
	if (r->where == L_POSTED)
		l_del(&p->posted, r);
	if (f->len != r->len) {
		st = DPL_ETRUNC;
	} else if (f->kind == K_EAGER) {
		if (r->len > 0)
			memcpy(r->buf, (unsigned char *)f + FRAME, r->len);
	} else if (p->cma) {
		st = cma_read(p, r->buf, f->addr, r->len);
	} else {
		/* The sender streams it; DATA frames fill r. */
		r->rts = pos;
		r->off = 0;
		l_push(&p->pulls, r, L_PULLS);
		atomic_store_explicit(&f->state, S_PULL, memory_order_release);
		count_done(p);
		return true;
	}
	frame_finish(p, f, S_DONE, st);
	finish(c, r, st);
	if (st == DPL_EPEER) {
		char why[160];

		snprintf(why, sizeof why, "rank %u (pid %d) died", q, p->pid);
		fail_peer(c, q, DPL_EPEER, why);
	}
	return true;
}

static struct req *find_posted(struct peer *p, uint64_t tag)
{
	struct req *r;

	for (r = p->posted.head; r != NULL; r = r->next)
		if (r->tag == tag)
			return r;
	return NULL;
}

static void unexp_push(struct ctx *c, struct peer *p, uint64_t pos)
{
	frame_at(p->iring, c->mask, pos)->next = 0;
	if (p->utail)
		frame_at(p->iring, c->mask, p->utail - 1)->next = pos + 1;
	else
		p->uhead = pos + 1;
	p->utail = pos + 1;
}

/* Unlink the unexpected frame at `pos`, whose predecessor is `prev`. */
static void unexp_del(struct ctx *c, struct peer *p, uint64_t prev,
		      uint64_t pos)
{
	uint64_t next = frame_at(p->iring, c->mask, pos)->next;

	if (prev)
		frame_at(p->iring, c->mask, prev - 1)->next = next;
	else
		p->uhead = next;
	if (p->utail == pos + 1)
		p->utail = prev;
}

/* Release unexpected frames whose sends were cancelled. */
static void sweep_cancelled(struct ctx *c, struct peer *p)
{
	uint64_t cur = p->uhead, prev = 0, n = c->ring / FRAME;

	while (cur && n-- > 0) {
		struct frame *f = frame_at(p->iring, c->mask, cur - 1);
		uint64_t next = f->next;

		if (atomic_load_explicit(&f->state, memory_order_acquire) ==
		    S_CANCELLED) {
			unexp_del(c, p, prev, cur - 1);
			frame_finish(p, f, S_RELEASED, 0);
		} else {
			prev = cur;
		}
		cur = next;
	}
}

static void corrupt(struct ctx *c, uint32_t q, uint64_t pos, const char *what)
{
	char why[160];

	snprintf(why, sizeof why, "ring from rank %u is corrupt at position "
		 "%" PRIu64 " (%s)", q, pos, what);
	fail_peer(c, q, DPL_EIO, why);
}

/* A DATA frame: the next chunk of a pulled message. */
static void take_data(struct ctx *c, uint32_t q, uint64_t pos,
		      struct frame *f)
{
	struct peer *p = &c->peer[q];
	struct req *r;

	for (r = p->pulls.head; r != NULL; r = r->next)
		if (r->rts == f->tag)
			break;
	if (r == NULL || f->addr != r->off || f->len > r->len - r->off) {
		corrupt(c, q, pos, "DATA for no pending pull");
		return;
	}
	memcpy(r->buf + r->off, (unsigned char *)f + FRAME, f->len);
	r->off += f->len;
	if (r->off < r->len) {
		frame_finish(p, f, S_RELEASED, 0);
		return;
	}
	l_del(&p->pulls, r);
	frame_finish(p, f, S_DONE, 0);
	finish(c, r, 0);
}

/* Match the frames that arrived from peer q. */
static void progress_in(struct ctx *c, uint32_t q)
{
	struct peer *p = &c->peer[q];
	uint64_t tail = atomic_load_explicit(&p->ictl->tail,
					     memory_order_acquire);
	uint64_t cancels;

	if (tail - p->iscan > c->ring) {
		corrupt(c, q, p->iscan, "tail beyond the ring");
		return;
	}
	while (p->iscan < tail && !p->dead) {
		uint64_t pos = p->iscan;
		struct frame *f = frame_at(p->iring, c->mask, pos);
		uint64_t off = pos & c->mask;
		struct req *r;

		if (f->size < FRAME || f->size % FRAME != 0 ||
		    off + f->size > c->ring || f->size > tail - pos) {
			corrupt(c, q, pos, "bad frame size");
			return;
		}
		if (f->seq != p->iseq) {
			corrupt(c, q, pos, "sequence gap");
			return;
		}
		if (((f->kind == K_EAGER || f->kind == K_DATA) &&
		     f->len > f->size - FRAME) ||
		    (f->kind == K_RTS && f->size != FRAME) ||
		    f->kind < K_EAGER || f->kind > K_PAD) {
			corrupt(c, q, pos, "bad frame kind or length");
			return;
		}
		p->iseq++;
		p->iscan = pos + f->size;
		if (f->kind == K_PAD) {
			frame_finish(p, f, S_RELEASED, 0);
			continue;
		}
		if (f->kind == K_DATA) {
			take_data(c, q, pos, f);
			continue;
		}
		if (atomic_load_explicit(&f->state, memory_order_acquire) ==
		    S_CANCELLED) {
			frame_finish(p, f, S_RELEASED, 0);
			continue;
		}
		/* A receive stays posted when the sender cancelled first. */
		r = find_posted(p, f->tag);
		if (r == NULL)
			unexp_push(c, p, pos);
		else
			deliver(c, q, pos, r);
	}
	cancels = atomic_load_explicit(&p->ictl->cancels,
				       memory_order_acquire);
	if (cancels != p->icancels && !p->dead) {
		p->icancels = cancels;
		sweep_cancelled(c, p);
	}
}

static int shm_irecv(void *vctx, void *vreq, uint32_t peer, uint64_t tag,
		     void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct req *r = vreq;
	struct peer *p;
	uint64_t cur, prev = 0, n = c->ring / FRAME;
	int rc;

	if ((rc = check_post(c, peer, tag, mem, buf, len, "receive")) != 0)
		return rc;
	p = &c->peer[peer];
	init_req(r, false, peer, tag, buf, len);
	/* The oldest unexpected message with this tag, if any (at most a
	 * ring's worth of frames: the chain lives in shared memory). */
	for (cur = p->uhead; cur && n-- > 0;) {
		struct frame *f = frame_at(p->iring, c->mask, cur - 1);
		uint64_t next = f->next;

		if (f->tag == tag) {
			unexp_del(c, p, prev, cur - 1);
			if (deliver(c, peer, cur - 1, r))
				return 0;
			/* cancelled by its sender: look further */
		} else {
			prev = cur;
		}
		cur = next;
	}
	l_push(&p->posted, r, L_POSTED);
	return 0;
}

/* ---- test, progress, cancel, wait ------------------------------------ */

static int shm_test(void *vctx, void *vreq)
{
	struct req *r = vreq;

	return r->status;
}

static int shm_progress(void *vctx)
{
	struct ctx *c = vctx;
	uint64_t n;
	uint32_t q;

	for (q = 0; q < c->world; q++) {
		struct peer *p = &c->peer[q];

		if (q == c->rank || p->dead)
			continue;
		progress_in(c, q);
		if (!p->dead)
			complete_sends(c, p);
	}
	tick_liveness(c);
	n = c->completions;
	c->completions = 0;
	return n > INT_MAX ? INT_MAX : (int)n;
}

static int shm_cancel(void *vctx, void *vreq)
{
	struct ctx *c = vctx;
	struct req *r = vreq;
	struct peer *p;

	if (r == NULL || r->magic != REQ_LIVE || r->status != DPL_EAGAIN)
		return dpl_set_error(DPL_EINVAL, "shm: cancel of a request "
				     "that is not pending");
	p = &c->peer[r->peer];
	if (r->where == L_POSTED) {
		/* Matched receives (pulls) finish on their own. */
		l_del(&p->posted, r);
		finish(c, r, DPL_ECANCELED);
		return 0;
	}
	if (r->where == L_INFLIGHT) {
		struct frame *f = frame_at(p->oring, c->mask, r->pos);
		uint32_t want = S_POSTED;

		if (atomic_compare_exchange_strong_explicit(
			    &f->state, &want, S_CANCELLED,
			    memory_order_acq_rel, memory_order_acquire)) {
			p->shadow[(r->pos & c->mask) / FRAME] = NULL;
			l_del(&p->inflight, r);
			r->pos = POS_NONE;
			finish(c, r, DPL_ECANCELED);
			atomic_fetch_add_explicit(&p->octl->cancels, 1,
						  memory_order_seq_cst);
			ring_if_asleep(p->hdr);
		}
	}
	return 0;
}

/* Whether anything arrived or finished since the last progress. */
static bool anything_new(struct ctx *c)
{
	uint32_t q;

	if (c->completions > 0)
		return true;
	for (q = 0; q < c->world; q++) {
		struct peer *p = &c->peer[q];

		if (q == c->rank || p->dead)
			continue;
		if (atomic_load_explicit(&p->ictl->tail,
					 memory_order_relaxed) != p->iscan ||
		    atomic_load_explicit(&p->octl->done,
					 memory_order_relaxed) != p->odone ||
		    atomic_load_explicit(&p->ictl->cancels,
					 memory_order_relaxed) != p->icancels ||
		    atomic_load_explicit(&p->hdr->closed,
					 memory_order_relaxed))
			return true;
	}
	return false;
}

static int shm_wait(void *vctx, uint64_t timeout_ns)
{
	struct ctx *c = vctx;
	uint64_t start = now_ns(), now = start, end, nap;
	struct timespec ts;
	uint32_t seen;
	int i;

	if (timeout_ns > UINT64_C(3600000000000))
		timeout_ns = UINT64_C(3600000000000);
	end = start + timeout_ns;
	/* Spin a little: a reply is often a microsecond away. */
	while (now - start < c->spin_ns && now < end) {
		for (i = 0; i < 64; i++) {
			if (anything_new(c))
				return 0;
			cpu_relax();
		}
		now = now_ns();
	}
	if (now >= end)
		return 0;
	maybe_check_liveness(c);
	atomic_store_explicit(&c->hdr->sleeping, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	seen = atomic_load_explicit(&c->hdr->doorbell, memory_order_relaxed);
	if (!anything_new(c)) {
		/* Wake up at least every liveness period to look at peers. */
		nap = end - now;
		if (nap > LIVENESS_PERIOD_NS)
			nap = LIVENESS_PERIOD_NS;
		ts.tv_sec = (time_t)(nap / 1000000000u);
		ts.tv_nsec = (long)(nap % 1000000000u);
		syscall(SYS_futex, (uint32_t *)&c->hdr->doorbell, FUTEX_WAIT,
			seen, &ts, NULL, 0);
	}
	atomic_store_explicit(&c->hdr->sleeping, 0, memory_order_relaxed);
	maybe_check_liveness(c);
	return 0;
}

/* ---- init and fini --------------------------------------------------- */

struct hello {
	uint64_t magic;
	uint64_t jobid;      /* rank 0's names the job */
	uint64_t boot;       /* hash of the kernel's boot id */
	uint64_t probe_addr; /* where peers read probe_val */
	uint64_t probe_val;
	uint64_t ring, eager;
	int32_t pid;
	uint32_t version;
	uint32_t uid;
	uint32_t pad;
};

static uint64_t fnv1a(const char *s, size_t n)
{
	uint64_t h = UINT64_C(14695981039346656037);
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * UINT64_C(1099511628211);
	return h;
}

static uint64_t boot_hash(void)
{
	char id[64];
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	size_t n = 0;

	if (f != NULL) {
		n = fread(id, 1, sizeof id, f);
		fclose(f);
	}
	return n ? fnv1a(id, n) : 0;
}

static uint64_t random64(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
		v = now_ns() ^ ((uint64_t)getpid() << 32);
	return v;
}

/* "123", "64k", "1m" (powers of 1024). */
static int parse_size(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0, mul = 1;
	size_t i;

	if (n == 0)
		return -1;
	if (s[n - 1] == 'k' || s[n - 1] == 'K')
		mul = 1024;
	else if (s[n - 1] == 'm' || s[n - 1] == 'M')
		mul = 1024 * 1024;
	if (mul > 1)
		n--;
	if (n == 0 || n > 12)
		return -1;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v * mul;
	return 0;
}

static int parse_options(struct ctx *c, const char *opts)
{
	const char *s = opts;
	uint64_t spin_us = DPL_SHM_DEFAULT_SPIN_US, cma = 1;

	c->ring = DPL_SHM_DEFAULT_RING;
	c->eager = DPL_SHM_DEFAULT_EAGER;
	while (s != NULL && *s != '\0') {
		const char *end = strchr(s, ','), *eq;
		size_t n = end ? (size_t)(end - s) : strlen(s);
		uint64_t *dst = NULL, v;

		eq = memchr(s, '=', n);
		if (eq == NULL)
			goto bad;
		if ((size_t)(eq - s) == 4 && strncmp(s, "ring", 4) == 0)
			dst = &c->ring;
		else if ((size_t)(eq - s) == 5 && strncmp(s, "eager", 5) == 0)
			dst = &c->eager;
		else if ((size_t)(eq - s) == 7 &&
			 strncmp(s, "spin_us", 7) == 0)
			dst = &spin_us;
		else if ((size_t)(eq - s) == 3 && strncmp(s, "cma", 3) == 0)
			dst = &cma;
		else
			goto bad;
		if (parse_size(eq + 1, n - (size_t)(eq - s) - 1, &v) != 0)
			goto bad;
		*dst = v;
		s = end ? end + 1 : NULL;
		continue;
bad:
		return dpl_set_error(DPL_EINVAL, "shm: option '%.*s' in '%s' "
				     "is not one of ring=BYTES, eager=BYTES, "
				     "spin_us=N, cma=0|1", (int)n, s, opts);
	}
	if (c->ring < 65536 || c->ring > (UINT64_C(1) << 30) ||
	    (c->ring & (c->ring - 1)) != 0)
		return dpl_set_error(DPL_EINVAL, "shm: ring=%" PRIu64 " must "
				     "be a power of two in 64k..1024m",
				     c->ring);
	if (c->eager > c->ring / 4)
		return dpl_set_error(DPL_EINVAL, "shm: eager=%" PRIu64 " is "
				     "more than a quarter of ring=%" PRIu64,
				     c->eager, c->ring);
	if (spin_us > 1000000)
		return dpl_set_error(DPL_EINVAL, "shm: spin_us=%" PRIu64 " is "
				     "more than 1000000", spin_us);
	if (cma > 1)
		return dpl_set_error(DPL_EINVAL, "shm: cma=%" PRIu64 " is not "
				     "0 or 1", cma);
	c->mask = c->ring - 1;
	c->chunk = c->ring / 4;
	c->spin_ns = spin_us * 1000u;
	c->want_cma = cma == 1;
	return 0;
}

/* Undo init: unmap, close, unlink what exists. */
static void teardown(struct ctx *c)
{
	uint32_t q;

	if (c->peer != NULL) {
		for (q = 0; q < c->world; q++) {
			struct peer *p = &c->peer[q];

			if (p->seg != NULL)
				munmap(p->seg, c->seg_bytes);
			if (p->pidfd >= 0)
				close(p->pidfd);
			free(p->shadow);
		}
		free(c->peer);
	}
	free(c->pfd);
	free(c->pfd_rank);
	if (c->linked)
		shm_unlink(c->name);
	if (c->seg != NULL && c->world == 1)
		free(c->seg);
	else if (c->seg != NULL)
		munmap(c->seg, c->seg_bytes);
	c->peer = NULL;
	c->pfd = NULL;
	c->pfd_rank = NULL;
	c->seg = NULL;
	c->hdr = NULL;
	c->linked = false;
}

/*
 * One init step for everyone: each rank contributes its step's result,
 * and a failure anywhere fails every rank, naming the one that failed.
 */
static int agree(struct ctx *c, dpl_bootstrap *b, int rc, const char *step)
{
	int32_t mine = rc, *all;
	char msg[256];
	uint32_t q;
	int brc;

	all = calloc(c->world, sizeof *all);
	if (all == NULL)
		return dpl_set_error(DPL_ENOMEM, "shm: out of memory");
	snprintf(msg, sizeof msg, "%s", dpl_last_error());
	brc = dpl_bootstrap_allgather(b, &mine, sizeof mine, all);
	if (brc != 0) {
		free(all);
		return rc != 0 ? dpl_set_error(rc, "%s", msg) : brc;
	}
	if (rc != 0) {
		free(all);
		return dpl_set_error(rc, "%s", msg);
	}
	for (q = 0; q < c->world; q++)
		if (all[q] != 0) {
			rc = all[q];
			free(all);
			return dpl_set_error(rc, "shm: rank %u failed to %s: "
					     "%s", q, step, dpl_strerror(rc));
		}
	free(all);
	return 0;
}

static int check_hellos(struct ctx *c, const struct hello *h)
{
	uint32_t q;

	for (q = 0; q < c->world; q++) {
		if (h[q].magic != DPL__SHM_MAGIC ||
		    h[q].version != DPL__SHM_VERSION)
			return dpl_set_error(DPL_EINVAL, "shm: rank %u speaks "
					     "another shm protocol", q);
		if (h[q].ring != c->ring || h[q].eager != c->eager)
			return dpl_set_error(DPL_EINVAL, "shm: rank %u has "
					     "ring=%" PRIu64 ",eager=%" PRIu64
					     ", rank %u has ring=%" PRIu64
					     ",eager=%" PRIu64, q, h[q].ring,
					     h[q].eager, c->rank, c->ring,
					     c->eager);
		if (h[q].boot != h[c->rank].boot)
			return dpl_set_error(DPL_EINVAL, "shm: rank %u runs on "
					     "another host (or boot) than rank "
					     "%u; the shm transport needs one "
					     "host", q, c->rank);
		if (h[q].uid != h[c->rank].uid)
			return dpl_set_error(DPL_EINVAL, "shm: rank %u runs as "
					     "uid %u, rank %u as uid %u; "
					     "segments are private to one "
					     "user", q, h[q].uid, c->rank,
					     h[c->rank].uid);
	}
	return 0;
}

/* Create this rank's segment and fill its header. */
static int create_own(struct ctx *c, uint64_t jobid)
{
	int rc;

	dpl__shm_name(c->name, jobid, c->rank, (int)getpid());
	rc = dpl__shm_create(c->name, c->seg_bytes, &c->seg);
	if (rc != 0)
		return rc;
	c->linked = true;
	c->hdr = c->seg;
	c->hdr->magic = DPL__SHM_MAGIC;
	c->hdr->version = DPL__SHM_VERSION;
	c->hdr->rank = c->rank;
	c->hdr->world = c->world;
	c->hdr->pid = (int32_t)getpid();
	c->hdr->jobid = jobid;
	c->hdr->ring_bytes = c->ring;
	c->hdr->seg_bytes = c->seg_bytes;
	atomic_store(&c->hdr->heartbeat_ns, now_ns());
	return 0;
}

static int pidfd_of(int pid)
{
#ifdef SYS_pidfd_open
	long fd = syscall(SYS_pidfd_open, pid, 0);

	return fd < 0 ? -1 : (int)fd;
#else
	(void)pid;
	return -1;
#endif
}

/* Map every peer's segment, check it, and test cross-memory attach. */
static int map_peers(struct ctx *c, uint64_t jobid, const struct hello *h)
{
	char name[DPL__SHM_NAME_MAX];
	uint32_t q;
	int rc;

	c->pfd = calloc(c->world, sizeof *c->pfd);
	c->pfd_rank = calloc(c->world, sizeof *c->pfd_rank);
	if (c->pfd == NULL || c->pfd_rank == NULL)
		return dpl_set_error(DPL_ENOMEM, "shm: out of memory");
	for (q = 0; q < c->world; q++) {
		struct peer *p = &c->peer[q];
		struct dpl__shm_hdr *ph;
		uint64_t v = 0;

		if (q == c->rank)
			continue;
		dpl__shm_name(name, jobid, q, h[q].pid);
		rc = dpl__shm_map(name, c->seg_bytes, &p->seg);
		if (rc != 0)
			return rc;
		ph = p->seg;
		if (ph->magic != DPL__SHM_MAGIC || ph->rank != q ||
		    ph->world != c->world || ph->pid != h[q].pid ||
		    ph->jobid != jobid)
			return dpl_set_error(DPL_EIO, "shm: segment %s does "
					     "not belong to rank %u of this "
					     "job", name, q);
		p->hdr = ph;
		p->pid = h[q].pid;
		p->octl = dpl__shm_ctl(p->seg, dpl__shm_slot(q, c->rank));
		p->oring = dpl__shm_ring(p->seg, c->world, c->ring,
					 dpl__shm_slot(q, c->rank));
		p->ictl = dpl__shm_ctl(c->seg, dpl__shm_slot(c->rank, q));
		p->iring = dpl__shm_ring(c->seg, c->world, c->ring,
					 dpl__shm_slot(c->rank, q));
		p->shadow = calloc(c->ring / FRAME, sizeof *p->shadow);
		if (p->shadow == NULL)
			return dpl_set_error(DPL_ENOMEM, "shm: out of memory");
		p->pidfd = pidfd_of(p->pid);
		if (p->pidfd >= 0) {
			c->pfd[c->npfd] = (struct pollfd){p->pidfd, POLLIN, 0};
			c->pfd_rank[c->npfd++] = q;
		}
		if (c->want_cma &&
		    cma_read(p, &v, h[q].probe_addr, sizeof v) == 0 &&
		    v == h[q].probe_val)
			p->cma = true;
	}
	return 0;
}

/* Let peers read our buffers where Yama restricts ptrace to ancestors. */
static void allow_cma(void)
{
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
	int scope = 0;

	if (f == NULL)
		return;
	if (fscanf(f, "%d", &scope) != 1)
		scope = 0;
	fclose(f);
	if (scope == 1)
		prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

static int shm_init(void *vctx, const struct dpl_transport_params *p)
{
	struct ctx *c = vctx;
	struct dpl_bootstrap_params bp;
	struct hello mine, *all = NULL;
	dpl_bootstrap *b = NULL;
	uint64_t jobid;
	uint32_t q;
	int rc;

	memset(c, 0, sizeof *c);
	c->rank = p->rank;
	c->world = p->world_size;
	if (c->rank >= c->world)
		return dpl_set_error(DPL_EINVAL, "shm: rank %u out of range "
				     "for world size %u", c->rank, c->world);
	if ((rc = parse_options(c, p->options)) != 0)
		return rc;
	c->liveness_ns = (uint64_t)(p->timeout_ms ? p->timeout_ms
				    : DEFAULT_TIMEOUT_MS) * 1000000u;
	c->probe = random64() | 1u;
	c->seg_bytes = dpl__shm_seg_bytes(c->world, c->ring);
	c->peer = calloc(c->world, sizeof *c->peer);
	if (c->peer == NULL)
		return dpl_set_error(DPL_ENOMEM, "shm: out of memory");
	for (q = 0; q < c->world; q++)
		c->peer[q].pidfd = -1;
	dpl__shm_sweep();
	if (c->world == 1) {
		/* No peers: a private header only, for wait's doorbell. */
		c->seg_bytes = DPL__SHM_HDR_BYTES;
		c->seg = calloc(1, DPL__SHM_HDR_BYTES);
		if (c->seg == NULL) {
			teardown(c);
			return dpl_set_error(DPL_ENOMEM, "shm: out of memory");
		}
		c->hdr = c->seg;
		return 0;
	}
	if (c->want_cma)
		allow_cma();
	memset(&bp, 0, sizeof bp);
	bp.rank = c->rank;
	bp.world_size = c->world;
	bp.root = p->bootstrap;
	bp.timeout_ms = p->timeout_ms;
	rc = dpl_bootstrap_open(&bp, &b);
	if (rc != 0) {
		teardown(c);
		return rc;
	}
	memset(&mine, 0, sizeof mine);
	mine.magic = DPL__SHM_MAGIC;
	mine.jobid = random64();
	mine.boot = boot_hash();
	mine.probe_addr = (uint64_t)(uintptr_t)&c->probe;
	mine.probe_val = c->probe;
	mine.ring = c->ring;
	mine.eager = c->eager;
	mine.pid = (int32_t)getpid();
	mine.version = DPL__SHM_VERSION;
	mine.uid = (uint32_t)getuid();
	all = calloc(c->world, sizeof *all);
	if (all == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "shm: out of memory");
		goto fail;
	}
	rc = dpl_bootstrap_allgather(b, &mine, sizeof mine, all);
	if (rc != 0)
		goto fail;
	rc = check_hellos(c, all);
	if (rc != 0)
		goto fail;
	jobid = all[0].jobid;
	rc = agree(c, b, create_own(c, jobid), "create its segment");
	if (rc != 0)
		goto fail;
	rc = agree(c, b, map_peers(c, jobid, all), "map the segments");
	if (rc != 0)
		goto fail;
	/* Everyone mapped everything: the names can go. */
	shm_unlink(c->name);
	c->linked = false;
	free(all);
	dpl_bootstrap_close(b);
	check_liveness(c, now_ns());
	c->completions = 0;
	return 0;
fail:
	free(all);
	dpl_bootstrap_close(b);
	teardown(c);
	return rc;
}

static void shm_fini(void *vctx)
{
	struct ctx *c = vctx;
	uint32_t q;

	if (c->hdr == NULL)
		return;
	atomic_store_explicit(&c->hdr->closed, 1, memory_order_release);
	for (q = 0; q < c->world; q++) {
		struct peer *p = &c->peer[q];
		struct req *r;
		uint64_t until = now_ns() + FINI_CLAIM_WAIT_NS;

		if (q == c->rank)
			continue;
		bell(p->hdr);
		/* A receiver copying from one of our buffers right now
		 * finishes first (bounded): the buffer is the caller's
		 * again when fini returns. */
		for (r = p->inflight.head; r != NULL; r = r->next) {
			struct frame *f = frame_at(p->oring, c->mask, r->pos);
			uint32_t want = S_POSTED;

			if (p->dead || atomic_compare_exchange_strong(
					       &f->state, &want, S_CANCELLED))
				continue;
			while (atomic_load(&f->state) == S_CLAIMED &&
			       now_ns() < until && dpl__shm_pid_alive(p->pid))
				cpu_relax();
		}
		fail_list(c, &p->posted, DPL_ECANCELED);
		fail_list(c, &p->pulls, DPL_ECANCELED);
		fail_list(c, &p->inflight, DPL_ECANCELED);
		fail_list(c, &p->streams, DPL_ECANCELED);
	}
	teardown(c);
}

DPL_EXTERN const struct dpl_transport_ops dpl_transport_shm = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "shm",
	.caps = DPL_TRANSPORT_CAP_PEER_FAILURE | DPL_TRANSPORT_CAP_WAIT,
	.ctx_size = sizeof(struct ctx),
	.req_size = sizeof(struct req),
	.init = shm_init,
	.fini = shm_fini,
	.isend = shm_isend,
	.irecv = shm_irecv,
	.test = shm_test,
	.progress = shm_progress,
	.cancel = shm_cancel,
	.wait = shm_wait,
};
