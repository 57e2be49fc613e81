/*
 * runner_internal.h - the runner's pieces shared between the core's
 * source files: open transports and devices, the ring allreduce, the
 * runner's message tags. Not installed.
 */
#ifndef DPL_RUNNER_INTERNAL_H
#define DPL_RUNNER_INTERNAL_H

#include <stdbool.h>

#include <dpl/bytes.h>
#include <dpl/device.h>
#include <dpl/runner.h>
#include <dpl/transport.h>

#include "internal.h"

struct dpl_transport {
	const struct dpl_transport_ops *ops;
	void *ctx;
	uint32_t rank;
	uint32_t world_size;
	bool can_wait;
	bool can_allreduce;
	bool mem_cuda; /* caps has DPL_TRANSPORT_CAP_MEM_CUDA */
};

/*
 * The checked data path of transport.c, inline for the core's own hot
 * callers (the runner, the ring); dpl_transport_isend() and its siblings
 * are these. dpl__bad_post names the broken rule and returns its code.
 */
/* Nonzero when a post's arguments break a rule of dpl/transport.h. */
/* Whether t takes buffers of memory kind `mem`. */
static inline bool dpl__mem_ok(const dpl_transport *t, uint32_t mem)
{
	return mem == DPL_MEM_HOST || (mem == DPL_MEM_CUDA && t->mem_cuda);
}

static inline bool dpl__post_is_bad(const dpl_transport *t, uint32_t peer,
			       uint64_t tag, const void *buf, size_t len,
			       uint32_t mem, const void *req)
{
	return req == NULL || peer >= t->world_size || peer == t->rank ||
	       tag > DPL_TAG_MAX || (buf == NULL && len > 0) ||
	       !dpl__mem_ok(t, mem);
}

int dpl__bad_post(const dpl_transport *t, const char *op, uint32_t peer,
		  uint64_t tag, const void *buf, size_t len, uint32_t mem,
		  const void *req) DPL__COLD;

static inline int dpl__tp_isend(dpl_transport *t, void *req, uint32_t peer,
				uint64_t tag, const void *buf, size_t len,
				uint32_t mem)
{
	if (dpl__post_is_bad(t, peer, tag, buf, len, mem, req))
		return dpl__bad_post(t, "send", peer, tag, buf, len, mem, req);
	return t->ops->isend(t->ctx, req, peer, tag, buf, len, mem);
}

static inline int dpl__tp_irecv(dpl_transport *t, void *req, uint32_t peer,
				uint64_t tag, void *buf, size_t len,
				uint32_t mem)
{
	if (dpl__post_is_bad(t, peer, tag, buf, len, mem, req))
		return dpl__bad_post(t, "receive", peer, tag, buf, len, mem,
				     req);
	return t->ops->irecv(t->ctx, req, peer, tag, buf, len, mem);
}

static inline int dpl__tp_test(dpl_transport *t, void *req)
{
	return t->ops->test(t->ctx, req);
}

static inline int dpl__tp_progress(dpl_transport *t)
{
	return t->ops->progress(t->ctx);
}

struct dpl_device {
	const struct dpl_device_ops *ops;
	void *ctx;
	bool has_events;
};

/* Bytes of one request slot: req_size rounded up to max_align_t. */
size_t dpl__req_stride(const dpl_transport *t);

/* Monotonic clock in nanoseconds. */
#define dpl__now_ns dpl_clock_ns

/* Test and progress until request `req` of t completes (true) or
 * `deadline_ns` passes or the context breaks (false). */
bool dpl__transport_collect(dpl_transport *t, void *req,
			    uint64_t deadline_ns);

/*
 * Message tags of the runner (DPL_TAG_BITS wide):
 *   class (3 bits) | iteration mod 256 (8) | stage (20) | index (29).
 * Activations carry the producing stage, input gradients the stage that
 * produced them (the consumer's stage + 1), ring steps their step index.
 * Control messages (failure notices) use one fixed tag.
 */
enum dpl__tag_class {
	DPL__TAG_ACT = 1,
	DPL__TAG_GRAD = 2,
	DPL__TAG_RING = 3,
	DPL__TAG_CTRL = 4,
	DPL__TAG_FWD = 5   /* activations of a forward-only pass */
};

#define DPL__TAG_STAGE_LIMIT (UINT32_C(1) << 20)
#define DPL__TAG_INDEX_LIMIT (UINT32_C(1) << 28)

static inline uint64_t dpl__tag(uint32_t cls, uint64_t iter, uint32_t stage,
				uint32_t index)
{
	return ((uint64_t)cls << 57) | ((iter & 0xffu) << 49) |
	       ((uint64_t)stage << 29) | (uint64_t)index;
}

/*
 * The core's ring allreduce (reduce-scatter then allgather) over
 * isend/irecv: a non-blocking state machine the runner advances while it
 * waits. The sum of chunk c is accumulated in ring order starting after
 * the chunk's owner, the same on every run, and every member ends with
 * the same bits.
 */
struct dpl__ring {
	dpl_transport *t;
	dpl_device *dev;
	uint32_t n;       /* members */
	uint32_t pos;     /* this rank's position */
	uint32_t prev;    /* world rank of position pos - 1 */
	uint32_t next;    /* world rank of position pos + 1 */
	uint32_t stage;   /* for tags */
	uint32_t dtype;
	size_t esize;
	void *vec;        /* count elements, reduced in place */
	size_t count;
	void *scratch;    /* one chunk, for reduce-scatter receives */
	void *sreq;       /* request storage, send */
	void *rreq;       /* request storage, receive */
	uint64_t iter;
	uint32_t step;    /* 0 .. 2(n-1) */
	bool send_posted; /* this step's requests: posted, completed */
	bool recv_posted;
	bool send_done;
	bool recv_done;
	bool active;
	int error;        /* first error; the ring stops */
	uint32_t error_peer;
	uint64_t *bytes_sent;     /* counters to add to, or NULL */
	uint64_t *bytes_received;
};

/* Elements of chunk c of `count` over n chunks: [*off, *off + *len). */
void dpl__ring_chunk(size_t count, uint32_t n, uint32_t c, size_t *off,
		     size_t *len);

/* Start a sum of r->vec over the ring for iteration `iter`. */
int dpl__ring_start(struct dpl__ring *r, uint64_t iter);

/*
 * Advance: 0 when finished, DPL_EAGAIN while running, or an error (the
 * ring then has no live request left, or the caller cancels them with
 * dpl__ring_cancel).
 */
int dpl__ring_poll(struct dpl__ring *r);

/* Cancel live requests and collect them, waiting at most until
 * `deadline_ns`; false when the transport kept one (its memory must not
 * be freed). Neither is waited for again. */
bool dpl__ring_cancel(struct dpl__ring *r, uint64_t deadline_ns);

/* ---- The runner ---- */

#define DPL__NONE UINT32_MAX

/* One message of the runner: its transport storage and state. */
struct dpl__rreq {
	void *req;     /* req_stride bytes of transport storage */
	uint32_t peer; /* world rank */
	bool live;     /* posted and not yet completed */
};

/* The buffers and messages of one micro-batch alive on a stage. */
struct dpl__slot {
	uint32_t mb;        /* owning micro-batch, DPL__NONE when free */
	uint32_t live_idx;  /* callback slot, DPL__NONE outside F..B/W */
	bool fwd_done;
	bool bw_done;       /* B or W ran */
	bool send_b_posted;
	uint64_t begin;     /* this replica's samples of the micro-batch */
	uint64_t end;
	unsigned char *in_act;   /* received input (remote previous stage) */
	unsigned char *out_act;  /* output (not on the last stage) */
	unsigned char *in_grad;  /* gradient of the output */
	unsigned char *out_grad; /* gradient of the input (remote previous) */
	struct dpl__rreq *rf;    /* receives of in_act, [prev_r] */
	struct dpl__rreq *sb;    /* sends of out_grad, [prev_r] */
	struct dpl__rreq *rb;    /* receives of in_grad, [next_r] */
	struct dpl__rreq *sf;    /* sends of out_act, [next_r] */
	uint32_t nrf, nsb, nrb, nsf; /* used entries this micro-batch */
};

/* A stage this rank runs. */
struct dpl__lstage {
	uint32_t stage;
	bool first, last;
	bool prev_remote, next_remote;
	uint32_t prev_r, next_r;       /* replicas of the remote neighbours */
	uint32_t prev_base, next_base; /* their first world rank */
	uint64_t in_bps, out_bps;      /* bytes per sample in and out */
	uint64_t max_samples;          /* per replica and micro-batch */
	uint32_t nslots;
	struct dpl__slot *slots;
	uint32_t *fifo;                /* free slots, oldest first */
	uint32_t fifo_head, fifo_len;
	uint32_t *mb_slot;             /* [M] slot of a micro-batch */
	uint32_t bound;                /* dpl_schedule_bound */
	uint32_t *live_free;           /* free callback slots (stack) */
	uint32_t live_top;
	uint32_t live, peak_live;
	uint32_t in_use, peak_in_use;
	uint64_t slot_bytes;
	void *mem;                     /* every slot's buffers */
	/* gradient reduction */
	const struct dpl_buffer *gbufs;
	size_t gn;
	size_t gcount;
	uint32_t gdtype;
	void *gvec;                    /* packed gradients */
	void *gscratch;                /* one ring chunk */
	struct dpl__ring ring;
	void *ar_req;                  /* native allreduce request */
	uint32_t *group;               /* world ranks of the replicas */
	bool ar_live;
	bool ar_refused;               /* the transport refused the dtype:
					  the ring reduces this stage */
	bool reducing;
	bool has_step;                 /* the list holds this stage's STEP */
};

/*
 * Wire form of a failure notice: eight little-endian 32-bit words: code,
 * reporting rank, peer (the rank it lost with DPL_EPEER, the rank it
 * waited for with DPL_ETIMEDOUT, else DPL__NONE), action kind, stage,
 * micro-batch, iteration, and with DPL_ETIMEDOUT the microseconds left
 * of the chain's grace period (else 0). A rank that times out sends one
 * too, then follows the chain of the ranks waiting for each other to the
 * one that is the cause (runner_blame.c).
 */
#define DPL__CTRL_BYTES 32

/* The longest a rank that timed out waits for the next notice of the
 * chain; a quarter of the timeout when that is shorter. */
#define DPL__GRACE_MAX_NS 500000000u

struct dpl_runner {
	const dpl_schedule *sched;
	const struct dpl_stage_ops *ops;
	/* ops->overlap where ops->size holds it, else NULL */
	int (*overlap)(void *user, const struct dpl_stage_args *f,
		       const struct dpl_stage_args *b);
	void *user;
	dpl_transport *t;
	dpl_device *dev;
	dpl_device *own_dev;     /* opened here when the caller gave none */
	uint32_t rank, world;
	uint32_t prank, replica, nrep; /* pipeline rank, replica, replicas */
	uint32_t nranks, nstages, nmb;
	uint32_t *base;          /* [nranks + 1] first world rank */
	uint32_t *reps;          /* [nranks] replicas */
	uint64_t batch;
	uint64_t *mb_off;        /* [nmb + 1] first sample of micro-batch j */
	uint64_t timeout_ns;
	uint32_t *lidx;          /* [nstages] index into ls, or DPL__NONE */
	struct dpl__lstage *ls;
	uint32_t nls;
	const struct dpl_action *list;
	size_t nlist;
	size_t req_stride;
	void *req_mem;           /* every request's transport storage */
	struct dpl__rreq *rreqs;
	void *event;             /* device event, when the device has them */
	/* failure notices */
	unsigned char *ctrl_in;  /* [world][DPL__CTRL_BYTES] */
	bool *ctrl_got;          /* [world] a notice was delivered */
	unsigned char ctrl_out[DPL__CTRL_BYTES];
	struct dpl__rreq *ctrl_r; /* [world] receives */
	struct dpl__rreq *ctrl_s; /* [world] sends */
	uint32_t ctrl_tick;
	/* state */
	uint64_t iter;
	uint64_t fwd_iter;       /* forward-only passes run (their tags) */
	bool fwd_only;           /* in dpl_runner_forward() */
	bool failed;
	bool by_notice;          /* the failure came from another rank */
	uint32_t err_peer;       /* peer of a request-level failure */
	uint32_t cause;          /* dpl_runner_cause(), DPL__NONE before */
	uint32_t wait_peer;      /* the rank a wait is for, or DPL__NONE */
	uint64_t notice_ns;      /* when this rank posted its notices, or 0 */
	uint64_t chain_end;      /* a timeout chain's deadline, or 0 */
	bool leak;               /* requests could not be collected */
	struct dpl_action cur;   /* action being run */
	size_t cur_pos;
	uint64_t wait_acc;       /* ns waited inside the current action */
	int8_t long_waits;       /* dpl__wait_score() of the recent waits */
	char errmsg[512];
	/* stats and trace */
	struct dpl_runner_stats st;
	struct dpl_runner_event *trace;
	size_t trace_cap, trace_len;
};

/* Every slot of a stage free, for the next step (runner.c). */
void dpl__runner_reset_stage(struct dpl__lstage *ls, uint32_t nmb);

/* Cancel every data request, then collect them, at most the timeout
 * long; sets r->leak for requests the transport kept, which are not
 * waited for again (runner.c). */
void dpl__runner_cancel_all(dpl_runner *r);


/*
 * Set-up steps of dpl_runner_create() (runner_setup.c), in the order it
 * calls them; each returns 0 or an error with its message recorded, and
 * leaves what it allocated for dpl_runner_destroy() to free.
 */
int dpl__scan_list(dpl_runner *r);
int dpl__setup_stage_neighbours(dpl_runner *r, struct dpl__lstage *ls,
				const uint64_t *act);
int dpl__setup_grads(dpl_runner *r, struct dpl__lstage *ls);
int dpl__setup_requests(dpl_runner *r);
/* cap: the stage's byte cap, 0 = none; checked before allocating. */
int dpl__setup_slots(dpl_runner *r, struct dpl__lstage *ls, uint64_t cap);
int dpl__setup_ctrl(dpl_runner *r);

/*
 * Failures (runner_fail.c). dpl__fail records the first message of this
 * runner and returns `code`; the _peer, _pump and _ring forms add the
 * action and the rank it failed with. dpl__check_ctrl adopts a failure
 * notice of another rank if one came in (0 when none). dpl__step_failed
 * ends a failed step: names a cause, tells the other ranks, cancels every
 * request; returns `rc` or the cause it found.
 */
const char *dpl__act_text(struct dpl_action a, char *buf, size_t n);
int dpl__fail(dpl_runner *r, int code, const char *fmt, ...)
	DPL__PRINTF(3, 4);
int dpl__fail_peer(dpl_runner *r, int code, uint32_t peer);
/* dpl__fail_peer for a post the transport refused, with the transport's
 * own message (the thread's, cleared before the post) when it left one. */
int dpl__fail_post(dpl_runner *r, int code, uint32_t peer);
int dpl__pump_failed(dpl_runner *r, int n) DPL__COLD;
int dpl__ring_failed(dpl_runner *r, struct dpl__lstage *ls, int rc) DPL__COLD;
int dpl__check_ctrl(dpl_runner *r, bool first_hand);
int dpl__step_failed(dpl_runner *r, int rc);
/* Post this rank's notice (code, the peer word) to every other rank,
 * without waiting for the sends. */
void dpl__post_notices(dpl_runner *r, int code, uint32_t peer);

/*
 * Timeouts (runner_blame.c). dpl__ctrl_poll marks the notices that came
 * in (adopting none). dpl__blame_chain follows the chain of timeout
 * notices from rank q, waiting for the next one until r->chain_end, to
 * the rank that is the cause: b->culprit, and b->text (empty, or
 * starting "; ") says how. dpl__join_chain sets r->chain_end from a
 * timeout notice (what is left of its grace; an eighth of this rank's
 * at least). dpl__timed_out fails the runner with DPL_ETIMEDOUT waiting
 * for `peer`: sets the chain's deadline, posts its notice, follows the
 * chain and names the cause; returns DPL_ETIMEDOUT.
 */
struct dpl__blame {
	uint32_t culprit;
	char text[320];
};
uint64_t dpl__grace_ns(const dpl_runner *r);
void dpl__ctrl_poll(dpl_runner *r);
void dpl__blame_chain(dpl_runner *r, uint32_t q, struct dpl__blame *b);
void dpl__join_chain(dpl_runner *r, const unsigned char *m);
int dpl__timed_out(dpl_runner *r, uint32_t peer) DPL__COLD;
/* After posting its notices, keep the transport progressed until the
 * grace period since has passed, so that peers read them before they
 * see this rank go. */
void dpl__stay(dpl_runner *r);

/*
 * Waiting (runner_wait.c). A done function returns DPL_EAGAIN (not yet,
 * *peer = the rank waited for), 0, or a request's error (with *peer).
 * dpl__wait_for progresses until done() says so, at most the timeout;
 * dpl__pump progresses once and watches the control tag.
 */
typedef int (*dpl__done_fn)(dpl_runner *r, void *arg, uint32_t *peer);
/* Requests q[0..n) for dpl__reqs_done: done once none is live. */
struct dpl__reqs {
	struct dpl__rreq *q;
	uint32_t n;
};
int dpl__reqs_done(dpl_runner *r, void *arg, uint32_t *peer);
int dpl__pump(dpl_runner *r);
int dpl__wait_for(dpl_runner *r, dpl__done_fn done, void *arg);
int dpl__wait_reqs(dpl_runner *r, struct dpl__rreq *q, uint32_t n);
/*
 * How long a wait yields its core before it sleeps, from the score of
 * the rank's recent waits: DPL__YIELD_NS while most of them ended within
 * it, DPL__YIELD_SHORT_NS once most lasted longer (score > 0).
 * dpl__wait_score adds one wait that got past the first polls: +1 when
 * it lasted more than DPL__YIELD_NS, -1 otherwise, kept within
 * [-DPL__WAIT_SCORE_MAX, DPL__WAIT_SCORE_MAX].
 */
#define DPL__YIELD_NS 2000000u
#define DPL__YIELD_SHORT_NS 50000u
#define DPL__WAIT_SCORE_MAX 4
uint64_t dpl__yield_window(int8_t score);
int8_t dpl__wait_score(int8_t score, uint64_t waited_ns);

/*
 * Slots (runner_step.c): dpl__acquire gives (stage, j) its slot, taking a
 * free one once the sends of its last user completed; dpl__lookup finds
 * the slot of a micro-batch that has one (DPL_ESCHED otherwise);
 * dpl__maybe_release returns it once its B/W ran and its SEND_B is out.
 */
int dpl__acquire(dpl_runner *r, struct dpl__lstage *ls, uint32_t j,
		 struct dpl__slot **out);
int dpl__lookup(dpl_runner *r, struct dpl__lstage *ls, uint32_t j,
		struct dpl__slot **out);
void dpl__maybe_release(struct dpl__lstage *ls, struct dpl__slot *sl);
/* Give the slot back now (dpl__maybe_release once due; a forward-only
 * pass once its output was sent or read). */
void dpl__release(struct dpl__lstage *ls, struct dpl__slot *sl);

/*
 * Compute (runner_compute.c): dpl__run_compute runs one F, B, I or W;
 * dpl__run_overlap runs the OVERLAP_F_B pair (f, b) through r->overlap
 * (non-NULL); dpl__callback_failed records a callback's failure.
 */
int dpl__run_compute(dpl_runner *r, struct dpl_action a);
int dpl__run_overlap(dpl_runner *r, struct dpl_action f, struct dpl_action b);
int dpl__callback_failed(dpl_runner *r, int rc, const char *what);
int dpl__event_done(dpl_runner *r, void *arg, uint32_t *peer);

#endif /* DPL_RUNNER_INTERNAL_H */
