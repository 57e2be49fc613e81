/*
 * dpl/model_synthetic.h - a model that emulates time and memory: stage
 * callbacks that take a configured time per action by sleeping until a
 * deadline (clock_nanosleep with TIMER_ABSTIME on CLOCK_MONOTONIC, never
 * spinning) and that account a configured activation size per micro-
 * batch, so that a pipeline of 8 or more stages can be timed on two
 * cores. It runs on the synthetic device (dpl/device_synthetic.h), host
 * memory that counts what it allocates.
 *
 * A callback's deadline is taken from the moment it is called, so the
 * emulated compute of different ranks overlaps exactly as real devices
 * would, while the threads sleep. The deadline is moved earlier by the
 * thread's recent wake-up lateness (at most a quarter of the op), so that
 * on a loaded machine an op still takes its configured time on average.
 * On Linux the first call on a thread sets that thread's timer slack to
 * 1 ns (prctl PR_SET_TIMERSLACK), so wake-ups are not batched.
 *
 * Threads: a dpl_synthetic is used by one thread at a time (one per
 * rank); different objects may be used from different threads.
 *
 * Errors: every function that fails returns a negative DPL_E* code and
 * leaves the message in dpl_last_error(); outputs are written only on
 * success.
 *
 * Library: dpl_model_synthetic (dpl::model_synthetic, pkg-config
 * dpl-model-synthetic). Needs libc and libm only.
 */
#ifndef DPL_MODEL_SYNTHETIC_H
#define DPL_MODEL_SYNTHETIC_H

#include <stddef.h>
#include <stdint.h>

#include <dpl/device_synthetic.h>
#include <dpl/runner.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Parameters. Zero-initialise, then set. Costs are per micro-batch in
 * `unit_ns` nanoseconds (1e6: milliseconds), I and W default to B / 2 as
 * in dpl_stage_cost. With samples_per_microbatch > 0 a call's time is
 * scaled by its samples over that number (replicas split the work).
 */
struct dpl_synthetic_params {
	uint32_t stages;                     /* S >= 1 */
	const struct dpl_stage_cost *costs;  /* S entries, or NULL: uniform */
	struct dpl_stage_cost uniform;       /* used when costs is NULL */
	double unit_ns;                      /* > 0 */
	const uint64_t *activation_bytes;    /* S: bytes one micro-batch keeps
						alive from F to B (or W);
						NULL = 0 */
	uint64_t samples_per_microbatch;     /* 0: no scaling */
	size_t grad_count;                   /* float gradients per stage to
						reduce (0: none) */
};

/* One model object: the timing and figures of all S stages. */
typedef struct dpl_synthetic dpl_synthetic;

/*
 * dpl_synthetic_create - an object for all S stages (a rank uses the ones
 * it runs); the caller keeps p (it is copied). On success *out owns it
 * (dpl_synthetic_destroy). DPL_EINVAL naming a bad value (S = 0, a
 * negative or non-finite cost, unit_ns <= 0), DPL_ENOMEM. Does not block.
 * Thread-safe.
 */
DPL_EXTERN int dpl_synthetic_create(const struct dpl_synthetic_params *p,
				    dpl_synthetic **out);

/* dpl_synthetic_destroy - free the object and its gradient buffers; NULL
 * is a no-op. */
DPL_EXTERN void dpl_synthetic_destroy(dpl_synthetic *s);

/*
 * The stage callbacks (name "synthetic"), with `user` = the dpl_synthetic.
 * forward, backward, backward_input and backward_weight each block for
 * the stage's configured time (scaled by the call's samples when
 * samples_per_microbatch is set) and count the call; forward adds the
 * stage's activation bytes to those alive, backward and backward_weight
 * release them. grads hands out one F32 host buffer of grad_count floats
 * per stage, zeroed at creation (no buffer when grad_count is 0); step
 * counts the step. Activation buffers are not read or written. They
 * return DPL_EINVAL for a stage >= S.
 */
DPL_EXTERN extern const struct dpl_stage_ops dpl_synthetic_stage_ops;

/* What one stage of an object saw. Times in nanoseconds. */
struct dpl_synthetic_stats {
	uint64_t calls[4];          /* F, B, I, W */
	uint64_t busy_ns;           /* sum of the configured times */
	uint64_t late_ns;           /* sum of how far ops ended past their
				       configured time */
	uint64_t live_bytes;        /* activations alive now */
	uint64_t peak_live_bytes;   /* their peak */
	uint64_t steps;
};

/*
 * dpl_synthetic_stats - copy stage `stage`'s figures into *out; DPL_EINVAL
 * when stage >= S. Reads the object: call it from the thread that uses
 * the object, or once that thread is done.
 */
DPL_EXTERN int dpl_synthetic_stats(const dpl_synthetic *s, uint32_t stage,
				   struct dpl_synthetic_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* DPL_MODEL_SYNTHETIC_H */
