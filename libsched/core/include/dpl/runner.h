/*
 * dpl/runner.h - execute a lowered schedule for real: one runner per rank
 * calls the trainer's stage callbacks, moves activations and gradients
 * through a transport, and reduces each stage's gradients over its
 * replicas.
 *
 * Layout. A lowered schedule describes one pipeline of P = dpl_schedule_
 * ranks() pipeline ranks; stage s runs on pipeline rank
 * dpl_schedule_stage_rank(s). Pipeline rank p is replicated replicas[p]
 * times (data parallelism inside a stage; counts may differ per rank, as
 * in DAPPLE's uneven plans). World ranks number the replicas pipeline
 * rank by pipeline rank: world rank base(p) + r is replica r of p, where
 * base(p) = replicas[0] + ... + replicas[p-1]; the world size is the sum.
 * Whole-pipeline data parallelism is replicas[p] = R for every p.
 *
 * Samples. An iteration processes `batch` samples numbered [0, batch).
 * Micro-batch j is the j-th of `microbatches` contiguous ranges whose
 * sizes differ by at most one (the first batch % M ranges are one larger),
 * and replica r of a pipeline rank with R replicas takes the r-th of R
 * such sub-ranges of it (possibly empty). Between two stages with
 * different replica counts each replica sends every consumer replica the
 * intersection of their ranges (split-concat); samples are laid out one
 * after the other, activation_bytes[s] bytes each.
 *
 * Execution of a rank's list, in order: RECV_x posts a receive (into a
 * buffer of the runner's); F, B, I, W wait until their inputs arrived,
 * progressing the transport, then call the stage callback; SEND_x posts
 * the send of what the callback just produced; REDUCE_GRAD starts the sum
 * of the stage's gradients over its replicas (the transport's iallreduce,
 * or the core's ring over isend/irecv when the transport has none or
 * refuses the dtype with DPL_ENOTSUP; both in a fixed order, so results
 * are reproducible bit for bit; BF16 and F16 are rounded to nearest even
 * after each addition); STEP waits for that sum and calls step.
 * dpl_runner_step() returns once every action ran and every send
 * completed. Every wait is bounded by the timeout.
 *
 * Loss scaling: the runner sums gradients over replicas. For the sum to
 * equal one-device training on the whole batch, the last stage scales the
 * loss gradient of every sample by 1 / batch (dpl_stage_args.batch), not
 * by the size of its own range.
 *
 * Memory: every buffer the runner moves data through is allocated once,
 * by dpl_runner_create(), through the device: per stage, one set per
 * micro-batch that can be alive at once on it (the schedule's bound plus
 * the receives posted ahead of their consumer). dpl_runner_step() does
 * not allocate.
 *
 * Failure: an error on any rank makes dpl_runner_step() return an error
 * on every rank within the timeout. A rank whose callback, device or
 * transport fails, or that loses a peer, sends every other rank a short
 * failure notice (receives for them are posted at setup), and a rank that
 * gets one stops with DPL_EPEER naming the failing rank and its action.
 * A rank that times out waiting for rank Q sends a notice too, "waiting
 * for Q", and follows the chain: Q's notice says whom Q waits for, and so
 * on, to a rank that lost a peer, failed by itself, or sent no word within
 * the grace period (a quarter of the timeout, at most 0.5 s): a rank
 * stopped, stuck or cut off. Every rank then names that rank ("...
 * waiting for rank 1; rank 1 waits for rank 3; rank 3 sent no word within
 * 500 ms: it is stopped, stuck or cut off"), not the neighbour it waited
 * for; a rank that gets such a notice stops with DPL_EPEER, says whom it
 * waits for itself, and names the same rank. The message (dpl_last_error()
 * on the calling thread, dpl_runner_last_error() from any thread) names
 * the rank, the action and the peer. A rank that sent notices keeps its
 * transport progressed for the grace period after sending them before
 * dpl_runner_step() returns (a rank passing on another's notice: a
 * quarter of it, or to the end of the chain it follows), so that peers
 * read them before they can see it leave (one that saw it leave first
 * could only name it as lost); the caller may close the transport at
 * once. dpl_runner_cause() gives the named rank as a number. A runner that failed stays
 * failed; destroy it.
 *
 * Threads: a runner is used by one thread at a time. Runners of different
 * ranks may run in different threads of one process.
 */
#ifndef DPL_RUNNER_H
#define DPL_RUNNER_H

#include <stdio.h>

#include <dpl/common.h>
#include <dpl/device.h>
#include <dpl/schedule.h>
#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * What a stage callback gets for one (stage, micro-batch) on this
 * replica. Buffers are the runner's; in a step they stay valid and
 * unchanged from the forward of the micro-batch until its backward (or
 * W) returns (in a forward-only pass, until the forward returns: see
 * dpl_runner_forward). A buffer that does not apply is NULL with 0 bytes.
 */
struct dpl_stage_args {
	uint32_t stage;      /* global stage index */
	uint32_t microbatch; /* j in [0, microbatches) */
	uint32_t slot;       /* in [0, dpl_schedule_bound(stage)): free for
				the callback's own per-micro-batch state, kept
				from F to B (or W) */
	uint32_t replica;    /* this rank's replica index */
	uint64_t iteration;  /* 0 for the first dpl_runner_step() */
	uint64_t begin;      /* this replica's samples: [begin, end) */
	uint64_t end;
	uint64_t batch;      /* samples per iteration (for loss scaling) */
	const void *input;   /* stage input (F..W); NULL on stage 0 */
	size_t input_bytes;
	void *output;        /* F writes the stage output; NULL on the last */
	size_t output_bytes;
	const void *grad_output; /* B, I, W: gradient of the output; NULL on
				    the last stage */
	size_t grad_output_bytes;
	void *grad_input;    /* B, I write the gradient of the input; NULL
				on stage 0 and for W */
	size_t grad_input_bytes;
};

/*
 * Tags for applications that share a transport with a runner: the runner
 * never sends or receives on a tag DPL_RUNNER_APP_TAG(x), x <=
 * DPL_RUNNER_APP_TAG_MAX (the caller's top three tag bits all set), and
 * uses every other tag of DPL_TAG_BITS for itself. An application that
 * posts on the runner's transport between steps uses only these.
 */
#define DPL_RUNNER_APP_TAG_MAX ((UINT64_C(1) << 57) - 1)
#define DPL_RUNNER_APP_TAG(x)                                                \
	((UINT64_C(7) << 57) | ((uint64_t)(x) & DPL_RUNNER_APP_TAG_MAX))

/* Version of struct dpl_stage_ops this header describes. */
#define DPL_STAGE_ABI_VERSION 1

/*
 * The trainer's stage callbacks. Each returns 0 or a negative DPL_E* code
 * (other values count as DPL_ECALLBACK); a failure aborts the iteration
 * on every rank. `user` is dpl_runner_params.stage_user. Callbacks run on
 * the thread that called dpl_runner_step() and must not call back into
 * the runner. Callbacks whose replica range is empty are not called.
 */
struct dpl_stage_ops {
	uint32_t abi_version; /* DPL_STAGE_ABI_VERSION */
	uint32_t size;        /* sizeof(struct dpl_stage_ops) */
	const char *name;     /* for messages and traces; may be NULL */

	/* forward - compute the stage on its input for the range; write
	 * output. Mandatory. */
	int (*forward)(void *user, const struct dpl_stage_args *a);

	/* backward - from grad_output (or the loss, on the last stage)
	 * write grad_input and accumulate the weight gradients. Mandatory
	 * unless the schedule has I and W actions only. */
	int (*backward)(void *user, const struct dpl_stage_args *a);

	/* backward_input / backward_weight - the two halves of backward for
	 * split schedules (zb-h1): I writes grad_input, W accumulates the
	 * weight gradients. Mandatory when the schedule holds I or W. */
	int (*backward_input)(void *user, const struct dpl_stage_args *a);
	int (*backward_weight)(void *user, const struct dpl_stage_args *a);

	/*
	 * grads - the stage's accumulated gradients to be summed over its
	 * replicas, as an array owned by the callee in *bufs (valid until
	 * step returns) and its length in *n. Called once by
	 * dpl_runner_create() to size the reduction and at every REDUCE_GRAD;
	 * the count, dtype and memory kind of every buffer must stay the
	 * same (pointers may change). All buffers of a stage have one dtype.
	 * Mandatory.
	 */
	int (*grads)(void *user, uint32_t stage, const struct dpl_buffer **bufs,
		     size_t *n);

	/* step - apply the summed gradients (the optimizer) and clear them
	 * for the next iteration. Mandatory. */
	int (*step)(void *user, uint32_t stage, uint64_t iteration);

	/*
	 * overlap - run a forward and a backward together (DualPipeV's
	 * OVERLAP_F_B pairs, see dpl/schedule.h): `f` is the forward's
	 * arguments, as forward() would get them, `b` the backward's (its
	 * kind is the schedule's: B, or I for a split backward), as
	 * backward() or backward_input() would get them; both inputs are
	 * there when it is called, and on return both outputs must be
	 * written, as the two callbacks would have. Optional (a member
	 * past `size`, or NULL): the runner then calls forward and then the
	 * backward. Called only when both parts have samples on this
	 * replica; otherwise the one that has runs through its own callback.
	 * Same threads, errors and device rules as the others.
	 */
	int (*overlap)(void *user, const struct dpl_stage_args *f,
		       const struct dpl_stage_args *b);
};

/* Default bound on every wait of a runner. */
#define DPL_RUNNER_TIMEOUT_MS 60000u

/*
 * Parameters of dpl_runner_create(). Zero-initialise, then set. Pointers
 * are borrowed: they must outlive the runner.
 */
struct dpl_runner_params {
	const dpl_schedule *schedule; /* lowered (dpl_schedule_lower) */
	const uint32_t *replicas;     /* dpl_schedule_ranks() counts >= 1;
					 NULL = 1 each */
	uint32_t rank;                /* this runner's world rank */
	uint32_t timeout_ms;          /* every wait; 0: DPL_RUNNER_TIMEOUT_MS */
	uint64_t batch;               /* samples per iteration, >= M */
	const uint64_t *activation_bytes; /* S values: bytes per sample of
					     stage s's output (the last is
					     unused); NULL = all 0 */
	const struct dpl_stage_ops *stage_ops;
	void *stage_user;
	dpl_transport *transport; /* rank == `rank`, world size == the sum of
				     replicas; NULL only for a world of 1 */
	dpl_device *device;       /* NULL = host memory (dpl_device_host) */
	size_t trace_capacity;    /* events kept per step for the trace;
				     0 = no trace */
	const uint64_t *cap_bytes; /* S values, 0 = none; NULL = no caps:
				      the most bytes of activation buffers
				      each stage this rank runs may take
				      (see dpl_runner_create) */
};

typedef struct dpl_runner dpl_runner;

/*
 * dpl_runner_create - set up the runner of world rank p->rank: check the
 * layout, allocate every buffer, post the receives that carry failure
 * notices from other ranks. On success *out owns the runner
 * (dpl_runner_destroy). Does not communicate.
 *
 * Byte caps: with p->cap_bytes, each stage s this rank runs whose cap
 * p->cap_bytes[s] is not 0 must fit its activation buffers in it: the
 * buffer sets it allocates for the stage (struct dpl_runner_stage_stats
 * slots, one per micro-batch alive at once plus the receives posted
 * ahead) times the bytes of one set (slot_bytes: the stage's input and
 * output activations and their gradients for the largest micro-batch of
 * this replica, each rounded up to 64 bytes) must not exceed it. A
 * schedule that needs more is refused before that stage's buffers are
 * allocated, and the failed create keeps nothing.
 *
 * Errors: DPL_EINVAL naming the bad parameter (schedule not lowered, a
 * replica count of 0, rank outside the world, a transport of another
 * world size or rank, batch < M, missing callbacks, gradient buffers of
 * mixed dtypes, a stage whose buffers exceed its byte cap: the message
 * names the stage, the bytes needed, the cap and the schedule's
 * in-flight bound for the stage), DPL_ERANGE for counts beyond the tag
 * space (stages >= 2^20, micro-batches >= 2^28), DPL_ENOMEM, DPL_ENOTSUP
 * when a replicated stage's gradients must go through the core's ring
 * (the transport has no iallreduce) and the device cannot sum their
 * dtype, or the error of grads or of the device. Thread-safe.
 */
DPL_EXTERN int dpl_runner_create(const struct dpl_runner_params *p,
				 dpl_runner **out);

/*
 * dpl_runner_step - run one iteration: this rank's actions in order, as
 * described above. Blocks until done; every wait is bounded by the
 * timeout. A wait polls the transport (progress), spinning a few times,
 * then calling sched_yield() between polls for up to 2 ms, then sleeping
 * in the transport's wait until a request may have completed (20 ms at
 * most per call, 1 ms while waiting for a device event; without a
 * transport wait, 20 us naps): a waiting rank costs a core for up to
 * 2 ms, and gives it to any rank of the host that has work meanwhile.
 * Once most of the rank's recent waits lasted longer than 2 ms, it
 * yields for 50 us only, until most are short again: yielding through a
 * long wait takes turns on a core that a computing rank needs.
 * Returns 0; a callback's code (or DPL_ECALLBACK); DPL_EPEER
 * when another rank failed (the message names it); DPL_ETIMEDOUT naming
 * rank, action and the peer waited for; a transport or device error.
 * After a failure every later call returns DPL_ECANCELED.
 */
DPL_EXTERN int dpl_runner_step(dpl_runner *r);

/*
 * dpl_runner_forward - run a forward-only pass (inference, evaluation):
 * the same list as dpl_runner_step() with only its RECV_F, F, SEND_F and
 * WAIT_SEND_F actions, in the list's order; no B, I, W, gradient
 * reduction or STEP, and no gradient messages. Removing actions removes
 * waits only, so the order stays free of deadlocks. Every rank of the
 * job calls it at the same point of its sequence of steps and passes.
 * The forward callback sees what a step's does, with these differences:
 * its buffers (input and output) are the runner's only until the
 * callback returns (the runner sends the output after), `slot` is free
 * again when it returns, and `iteration` is the number of
 * dpl_runner_step() calls made so far (a pass does not count as one).
 * The caller knows it asked for a pass: the arguments do not say so.
 * A pass's messages have tags of their own, so a pass and the steps
 * around it never mix. Blocks like dpl_runner_step(), with the same
 * waits, errors and failure handling: a failure on any rank makes every
 * rank's call return an error within the timeout, and the runner stays
 * failed. Adds to the action counts, per-action times and wait_ns of
 * dpl_runner_stats(), not to `iterations` or `step_ns`. Does not
 * allocate.
 */
DPL_EXTERN int dpl_runner_forward(dpl_runner *r);

/*
 * dpl_runner_destroy - cancel what is pending, free every buffer; NULL
 * is a no-op. Does not close the transport or the device. Cancels every
 * pending request first, then waits at most the timeout for them to come
 * back. A request the transport still holds then (or held when a failed
 * step gave up on it) keeps its buffers allocated: they are not freed
 * while the transport may use them.
 */
DPL_EXTERN void dpl_runner_destroy(dpl_runner *r);

/*
 * dpl_runner_last_error - the message of the runner's last failure (""
 * when none), readable from any thread once the failing step returned.
 */
DPL_EXTERN const char *dpl_runner_last_error(const dpl_runner *r);

/*
 * dpl_runner_cause - the world rank the runner's failure names as its
 * cause, the rank its message names so (dpl_runner_last_error):
 *   - this rank, when it failed by itself (a callback, the device, or a
 *     transport error of its own such as DPL_EIO);
 *   - the peer it lost (DPL_EPEER), or the rank at the end of the chain
 *     of timeout notices it followed (DPL_ETIMEDOUT: the rank that lost
 *     a peer, failed, or sent no word);
 *   - the rank another rank's failure notice names, when it stopped on
 *     one (the failing rank, the rank it lost, the end of its chain).
 * DPL_RUNNER_NO_RANK while no step failed. Launchers and bindings use it
 * to agree on one cause without parsing messages. Readable from any
 * thread once the failing step returned; never fails.
 */
#define DPL_RUNNER_NO_RANK UINT32_MAX
DPL_EXTERN uint32_t dpl_runner_cause(const dpl_runner *r);

/* Totals since creation. Times in nanoseconds. */
struct dpl_runner_stats {
	uint64_t iterations;              /* successful steps */
	uint64_t actions;                 /* actions run */
	uint64_t count[DPL_ACT__COUNT];   /* actions run, per kind */
	uint64_t ns[DPL_ACT__COUNT];      /* time inside each kind, waits
					     for inputs excluded */
	uint64_t wait_ns;                 /* time spent waiting */
	uint64_t step_ns;                 /* time inside dpl_runner_step */
	uint64_t bytes_sent;
	uint64_t bytes_received;
	uint64_t bytes_reduced;           /* gradient bytes summed */
	uint64_t buffer_bytes;            /* allocated at setup */
	uint64_t trace_dropped;           /* events past trace_capacity */
};

/* Per-stage figures of the stages this rank runs. */
struct dpl_runner_stage_stats {
	uint32_t stage;
	uint32_t slots;           /* buffer sets allocated */
	uint32_t peak_inflight;   /* micro-batches alive at once (F to B/W),
				     peak over all steps */
	uint32_t reserved0;
	uint64_t slot_bytes;      /* bytes of one buffer set */
	uint64_t peak_buffer_bytes; /* peak bytes of buffer sets in use */
};

/* dpl_runner_stats - copy the totals into *out. */
DPL_EXTERN void dpl_runner_stats(const dpl_runner *r,
				 struct dpl_runner_stats *out);

/*
 * dpl_runner_stage_stats - copy stage `stage`'s figures into *out;
 * DPL_EINVAL when this rank does not run that stage.
 */
DPL_EXTERN int dpl_runner_stage_stats(const dpl_runner *r, uint32_t stage,
				      struct dpl_runner_stage_stats *out);

/*
 * One action of the last step, as kept for the trace: `start_ns` is when
 * its inputs were there (the wait for them left out), `end_ns` when it
 * returned; CLOCK_MONOTONIC nanoseconds.
 */
struct dpl_runner_event {
	struct dpl_action action;
	uint64_t start_ns;
	uint64_t end_ns;
};

/*
 * dpl_runner_events - the events of the last step, in the order the
 * actions ran, and their number in *n (at most trace_capacity; 0 when
 * the runner keeps no trace). The array belongs to the runner and is
 * valid until its next dpl_runner_step() or dpl_runner_destroy(); read it
 * from the stepping thread or while the runner does not step.
 */
DPL_EXTERN const struct dpl_runner_event *
dpl_runner_events(const dpl_runner *r, size_t *n);

/*
 * dpl_runner_write_traces - the last step of each of the `n` runners as
 * one Chrome trace-event JSON document (Perfetto, chrome://tracing): one
 * track per world rank, one complete event per action, microseconds from
 * the earliest event. Runners need trace_capacity > 0. DPL_EINVAL for
 * n == 0 or a runner without a trace, DPL_EIO on a write error. Call it
 * while no runner in the list steps.
 */
DPL_EXTERN int dpl_runner_write_traces(const dpl_runner *const *r, size_t n,
				       FILE *f);

/*
 * dpl_runner_world_size - the world size of a layout: the sum of
 * replicas[0 .. dpl_schedule_ranks(s)) (NULL: 1 each) in *out.
 * DPL_EINVAL naming a replica count of 0, DPL_ERANGE beyond 2^31.
 */
DPL_EXTERN int dpl_runner_world_size(const dpl_schedule *s,
				     const uint32_t *replicas,
				     uint32_t *out);

/*
 * dpl_runner_position - the pipeline rank and replica index of world rank
 * `rank` in a layout. DPL_EINVAL when rank is outside the world.
 */
DPL_EXTERN int dpl_runner_position(const dpl_schedule *s,
				   const uint32_t *replicas, uint32_t rank,
				   uint32_t *pipeline_rank, uint32_t *replica);

/*
 * dpl_split - the `index`-th of `parts` contiguous pieces of [0, total)
 * whose sizes differ by at most one, larger ones first: *begin, *end.
 * DPL_EINVAL for parts == 0 or index >= parts. Micro-batch ranges and
 * replica ranges are both made this way.
 */
DPL_EXTERN int dpl_split(uint64_t total, uint64_t parts, uint64_t index,
			 uint64_t *begin, uint64_t *end);

#ifdef __cplusplus
}
#endif
#endif /* DPL_RUNNER_H */
