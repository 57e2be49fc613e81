/*
 * shm_internal.h - the shared-memory transport's segment layout, the
 * state of a context, and the functions its sources share. Not installed.
 *
 * Each rank owns one POSIX shared-memory segment holding a header (its
 * pid, liveness flags, heartbeat and doorbell) and one inbound ring per
 * other rank. A ring is single-producer (the sending rank) and
 * single-consumer (the owner); its control block sits in the owner's
 * segment next to the others:
 *
 *   [ header, 4 KiB ][ ring controls, 256 B each, padded to 4 KiB ]
 *   [ ring from the 1st other rank ][ ring from the 2nd ] ...
 *
 * Rings are byte rings of 64-byte aligned frames, each opening with the
 * 64-byte struct frame (see shm.c for the protocol).
 *
 * The module's sources, each with one job:
 *   shm.c          the table: test, progress, cancel, wait
 *   shm_init.c     init and fini: options, the out-of-band agreement,
 *                  creating and mapping the segments
 *   shm_segment.c  segment names, layout, creation, the sweep of leftovers
 *   shm_ring.c     the ring's control: reserving and publishing frames,
 *                  reclaiming them, the doorbell
 *   shm_data.c     the data path: isend, irecv, matching, streaming
 *   shm_peers.c    peers: failure, liveness, cross-memory attach
 */
#ifndef DPL_SHM_INTERNAL_H
#define DPL_SHM_INTERNAL_H

#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dpl/transport.h>

#define DPL__SHM_MAGIC UINT64_C(0x31306d68736c7064) /* "dplshm01" */
#define DPL__SHM_VERSION 1u
#define DPL__SHM_HDR_BYTES 4096u
#define DPL__SHM_CTL_BYTES 256u
#define DPL__SHM_PAGE 4096u
#define DPL__SHM_NAME_MAX 64
/* Every segment's name starts with this (after the leading '/'). */
#define DPL__SHM_PREFIX "dpl-shm-"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
	       "shared-memory atomics must be lock-free");

struct dpl__shm_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t rank;
	uint32_t world;
	int32_t pid;
	uint64_t jobid;
	uint64_t ring_bytes;
	uint64_t seg_bytes;
	/* Set by fini: the owner left the job. */
	_Alignas(64) _Atomic uint32_t closed;
	/* CLOCK_MONOTONIC ns of the owner's last progress or wait. */
	_Alignas(64) _Atomic uint64_t heartbeat_ns;
	/* Futex word the owner sleeps on in wait; `sleeping` tells
	 * writers to ring it. */
	_Alignas(64) _Atomic uint32_t doorbell;
	_Atomic uint32_t sleeping;
};

struct dpl__shm_ctl {
	/* Written by the sender: bytes published, sends cancelled. */
	_Alignas(64) _Atomic uint64_t tail;
	_Atomic uint64_t cancels;
	/* Written by the receiver: frames it finished with. */
	_Alignas(64) _Atomic uint64_t done;
};

_Static_assert(sizeof(struct dpl__shm_hdr) <= DPL__SHM_HDR_BYTES,
	       "header fits its page");
_Static_assert(sizeof(struct dpl__shm_ctl) <= DPL__SHM_CTL_BYTES,
	       "ring control fits its slot");

/* Bytes of a segment with `world` ranks and rings of `ring` bytes. */
size_t dpl__shm_seg_bytes(uint32_t world, uint64_t ring);

/* Slot of sender `from` among the inbound rings of rank `to`. */
static inline uint32_t dpl__shm_slot(uint32_t to, uint32_t from)
{
	return from < to ? from : from - 1;
}

/* Control block and ring of slot k in a segment. */
struct dpl__shm_ctl *dpl__shm_ctl(void *seg, uint32_t k);
unsigned char *dpl__shm_ring(void *seg, uint32_t world, uint64_t ring,
			     uint32_t k);

/* "/dpl-shm-<jobid>-r<rank>-p<pid>" into buf (DPL__SHM_NAME_MAX). */
void dpl__shm_name(char *buf, uint64_t jobid, uint32_t rank, int pid);

/*
 * Create the segment `name` of `bytes` (exclusive, mode 0600, pages
 * reserved so that a full /dev/shm is an error here and not a SIGBUS
 * later) and map it. Returns 0 or DPL_EBUSY, DPL_ENOMEM, DPL_EIO with a
 * message.
 */
int dpl__shm_create(const char *name, size_t bytes, void **base);

/* Map an existing segment; DPL_ENOENT when it is not there. */
int dpl__shm_map(const char *name, size_t bytes, void **base);

/*
 * Remove the segments of processes that no longer exist (a job that
 * crashed before its ranks unlinked them). Returns how many it removed.
 */
int dpl__shm_sweep(void);

/* Whether process `pid` exists (kill(pid, 0) is not ESRCH). */
int dpl__shm_pid_alive(int pid);

/* ---- the state of a context ------------------------------------------- */

#define FRAME 64u
#define REQ_LIVE 0x73686d52u /* "shmR" */
#define POS_NONE UINT64_MAX
#define LIVENESS_PERIOD_NS UINT64_C(50000000) /* 50 ms */
#define LIVENESS_TICKS 64u /* progress calls per look at the clock */
#define DEFAULT_TIMEOUT_MS 60000u
#define FINI_CLAIM_WAIT_NS UINT64_C(200000000) /* 200 ms */

/* K_DRTS: an RTS of device memory, its export in the payload
 * (DPL__SHM_DEV_BLOCK bytes); only a context with a device hook sends
 * or takes one. */
enum kind { K_EAGER = 1, K_RTS = 2, K_DATA = 3, K_PAD = 4, K_DRTS = 5 };

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

enum where { L_NONE, L_POSTED, L_PULLS, L_INFLIGHT, L_STREAMS, L_COPIES };

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
	bool dmem;        /* receive: buf is device memory (hook only) */
	int32_t ev;       /* copies: the hook's event of its copy */
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
	struct rlist copies;   /* receives whose device copy is queued */
	/* Liveness. */
	int pid;
	int pidfd;
	bool cma;
	int dead;              /* 0, or what requests with it end with */
	char why[160];
};

/* Bytes of a K_DRTS payload: the device hook's export of a buffer. */
#define DPL__SHM_DEV_BLOCK 128u

struct dpl__shm_dev;

/*
 * The device hook: what a context that takes DPL_MEM_CUDA (cudaipc) adds
 * to shm's data path. Plain shm has none (ctx.dev is NULL) and never
 * reaches it. Every member runs on the context's thread and returns 0 or
 * a negative code with a message set, unless it says otherwise.
 */
struct dpl__shm_dev_ops {
	/* Sender: describe device buffer [buf, buf + len) to a peer in
	 * `blk` (DPL__SHM_DEV_BLOCK bytes). Blocks only on the runtime. */
	int (*export)(struct dpl__shm_dev *d, const void *buf, size_t len,
		      void *blk);
	/* Receiver: queue the copy of the peer's buffer that `blk`
	 * describes into dst (device memory when dst_dev, else host), len
	 * bytes. *ev is the event to watch with copy_done, or -1 when the
	 * copy already finished. */
	int (*pull)(struct dpl__shm_dev *d, uint32_t peer, const void *blk,
		    void *dst, bool dst_dev, size_t len, int32_t *ev);
	/* Receiver: copy len host bytes into device memory dst; returns
	 * once the copy finished (src may be reused at once). */
	int (*h2d)(struct dpl__shm_dev *d, void *dst, const void *src,
		   size_t len);
	/* Whether the copy of event ev finished: 1 (ev is returned to the
	 * pool), 0 not yet, or a negative code (ev returned too). */
	int (*copy_done)(struct dpl__shm_dev *d, int32_t ev);
	/* Peer `peer` failed or this context leaves: wait for the copy
	 * stream, then close every handle opened from that peer. After it
	 * copy_done of any event returns 1 or an error. Cannot fail. */
	void (*peer_gone)(struct dpl__shm_dev *d, uint32_t peer);
};

/* A device hook: its table; the hook's own state follows it. */
struct dpl__shm_dev {
	const struct dpl__shm_dev_ops *ops;
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
	struct dpl__shm_dev *dev; /* device hook, NULL for plain shm */
};

/* ---- small helpers ----------------------------------------------------- */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static inline uint32_t frame_size(uint64_t payload)
{
	return (uint32_t)((FRAME + payload + FRAME - 1) / FRAME * FRAME);
}

static inline struct frame *frame_at(unsigned char *ring, uint64_t mask,
				     uint64_t pos)
{
	return (struct frame *)(ring + (pos & mask));
}

static inline void l_push(struct rlist *l, struct req *r, uint8_t where)
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

static inline void l_del(struct rlist *l, struct req *r)
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

static inline void finish(struct ctx *c, struct req *r, int status)
{
	r->status = status;
	r->magic = 0;
	c->completions++;
}

/* ---- the ring's control (shm_ring.c) ----------------------------------- */

/*
 * Wake the owner of `h` if it sleeps in wait. Callers have just made a
 * seq_cst store (or read-modify-write) of what the sleeper looks at; with
 * this seq_cst load of `sleeping` and the sleeper's store of it followed
 * by a seq_cst fence (wait), one of the two sees the other.
 */
void dpl__shm_ring_if_asleep(struct dpl__shm_hdr *h);

/* Wake the owner of `h` after plain stores (a full fence first). */
void dpl__shm_bell(struct dpl__shm_hdr *h);

/* Count a finished frame of peer p's ring and wake its sender. */
void dpl__shm_count_done(struct peer *p);

/* The receiver is done with frame f of peer p's ring (DONE or RELEASED). */
void dpl__shm_frame_finish(struct peer *p, struct frame *f, uint32_t state,
			   int status);

/* Sender: reuse the space of frames the receiver finished with; completes
 * the sends whose frames they were. */
void dpl__shm_reclaim(struct ctx *c, struct peer *p);

/*
 * Sender: room for a frame of `size` bytes at the tail (after a PAD when
 * it would cross the ring's end). Writes the PAD; returns the frame's
 * position in *pos, or DPL_EAGAIN.
 */
int dpl__shm_reserve(struct ctx *c, struct peer *p, uint32_t size,
		     uint64_t *pos);

/* Sender: fill in the frame header at `pos` (state POSTED, not yet
 * visible to the receiver) and move the private tail past it. */
struct frame *dpl__shm_write_frame(struct ctx *c, struct peer *p,
				   uint64_t pos, uint32_t kind, uint32_t size,
				   uint64_t tag, uint64_t len, uint64_t addr);

/* Sender: make the frames written so far visible and wake the receiver. */
void dpl__shm_publish(struct peer *p);

/* ---- the data path (shm_data.c) ---------------------------------------- */

/* Complete the sends whose frames peer p finished; push pulled DATA. */
void dpl__shm_complete_sends(struct ctx *c, struct peer *p);

/* Match the frames that arrived from peer q. */
void dpl__shm_progress_in(struct ctx *c, uint32_t q);

/* The isend and irecv members (arguments checked by dpl_transport_*). */
int dpl__shm_isend(void *vctx, void *vreq, uint32_t peer, uint64_t tag,
		   const void *buf, size_t len, uint32_t mem);
int dpl__shm_irecv(void *vctx, void *vreq, uint32_t peer, uint64_t tag,
		   void *buf, size_t len, uint32_t mem);

/* ---- peers (shm_peers.c) ----------------------------------------------- */

/* End every request of list l with `code`. */
void dpl__shm_fail_list(struct ctx *c, struct rlist *l, int code);

/* With a device hook: wait for peer q's queued copies (peer_gone, which
 * closes its handles) and end them with `code`. No-op without one. */
void dpl__shm_fail_copies(struct ctx *c, uint32_t q, int code);

/* Mark peer q failed: every request with it ends with `code`; `why`
 * names the reason in later errors of posts to it. */
void dpl__shm_fail_peer(struct ctx *c, uint32_t q, int code,
			const char *why);

/* Refresh this rank's heartbeat and look at every peer's flags,
 * heartbeat and process. */
void dpl__shm_check_liveness(struct ctx *c, uint64_t now);

/* dpl__shm_check_liveness once LIVENESS_PERIOD_NS has passed. */
void dpl__shm_maybe_check_liveness(struct ctx *c);

/* From progress: read the clock only every LIVENESS_TICKS calls, since a
 * busy caller progresses millions of times per second. */
static inline void tick_liveness(struct ctx *c)
{
	if ((++c->ticks & (LIVENESS_TICKS - 1)) == 0)
		dpl__shm_maybe_check_liveness(c);
}

/* Copy len bytes at `addr` in peer p's process into buf (one copy):
 * 0, DPL_EPEER when the process is gone, DPL_EIO when refused. */
int dpl__shm_cma_read(const struct peer *p, void *buf, uint64_t addr,
		      size_t len);

/* A pidfd of process `pid`, or -1 where the kernel has none. */
int dpl__shm_pidfd_of(int pid);

/* Let peers read our buffers where Yama restricts ptrace to ancestors. */
void dpl__shm_allow_cma(void);

/* ---- the whole-context members (shm.c) --------------------------------- */

/* The test, progress, cancel and wait members (also cudaipc's). */
int dpl__shm_test(void *vctx, void *vreq);
int dpl__shm_progress(void *vctx);
int dpl__shm_cancel(void *vctx, void *vreq);
int dpl__shm_wait(void *vctx, uint64_t timeout_ns);

/* ---- init and fini (shm_init.c) ---------------------------------------- */

/* The init and fini members (dpl/transport_shm.h says what they do). */
int dpl__shm_init(void *vctx, const struct dpl_transport_params *p);
void dpl__shm_fini(void *vctx);

#endif /* DPL_SHM_INTERNAL_H */
