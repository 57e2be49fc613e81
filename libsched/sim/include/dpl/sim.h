/*
 * dpl/sim.h - the discrete-event schedule simulator.
 *
 * It replays a schedule's compute actions, rank by rank in list order:
 * an action starts when its rank is free and its inputs are there. An
 * input made on another rank crosses a link: each directed rank pair is
 * one FIFO link that is busy for bytes / bandwidth and delivers latency
 * later. The gradients of a stage are reduced over its replicas once its
 * last backward is done, without holding the rank (a communication
 * stream), with the ring model
 *     2 (n - 1) / n * bytes / ar_bandwidth + 2 (n - 1) * ar_latency;
 * the stage's STEP waits for that reduction. Lowered and compute-only
 * schedules simulate the same (communication actions cost nothing by
 * themselves; the links carry their time). PyTorch's UNSHARD, RESHARD,
 * WAIT_SEND_* and WAIT_REDUCE_GRAD cost nothing either, and an
 * OVERLAP_F_B pair runs its two parts one after the other, as dpl's
 * runner and PyTorch's runtime do without an overlap callback.
 *
 * Output: makespan, bubble fraction, per-rank busy time, per-stage peak
 * in-flight micro-batches and peak activation bytes, every compute and
 * transfer interval (for the Chrome trace, the ASCII timeline and the SVG
 * picture).
 *
 * Threads: a dpl_sim is immutable once built; concurrent readers are safe.
 */
#ifndef DPL_SIM_H
#define DPL_SIM_H

#include <stdio.h>

#include <dpl/common.h>
#include <dpl/schedule.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Simulation parameters. Zero-initialise; unset members take the defaults
 * given. All times in one unit of the caller's choice (the CLI uses
 * milliseconds for profiles and abstract units for F=1, B=2).
 */
struct dpl_sim_params {
	/* Per-stage costs (dpl_schedule_stages() entries), or NULL to use
	 * `uniform` for every stage. */
	const struct dpl_stage_cost *costs;
	struct dpl_stage_cost uniform; /* all zero: F=1, B=2, I=W=1 */

	/* Links between ranks; bandwidth 0 = infinite (latency only). */
	double link_latency;   /* per transfer */
	double link_bandwidth; /* bytes per time unit */
	/* Bytes stage s sends forward per micro-batch (its activation) and
	 * backward (its input gradient). NULL = 0 bytes. grad_bytes NULL
	 * with activation_bytes set: the input gradient has the size of the
	 * previous stage's activation. */
	const uint64_t *activation_bytes; /* S entries */
	const uint64_t *grad_bytes;       /* S entries */

	/* Gradient reduction per stage over replicas[s] copies of
	 * param_bytes[s] bytes. NULL replicas = 1 (no reduction). */
	const uint32_t *replicas;   /* S entries */
	const uint64_t *param_bytes; /* S entries */
	double ar_bandwidth;        /* bytes per time unit; 0 = infinite */
	double ar_latency;          /* per ring step */

	double step_cost; /* duration of each STEP (default 0) */
};

typedef struct dpl_sim dpl_sim;

/* Per-stage results. */
struct dpl_sim_stage_stats {
	uint32_t rank;            /* rank the stage runs on */
	double busy;              /* compute time of the stage's actions */
	double finish;            /* end of its last action (incl. STEP) */
	double reduce_start;      /* start of its gradient reduction */
	double reduce_end;        /* its end (== start without replicas) */
	uint32_t peak_inflight;   /* micro-batches alive at once, peak */
	uint64_t peak_activation_bytes; /* peak_inflight * activation bytes */
};

/* Whole-schedule results. */
struct dpl_sim_summary {
	double makespan;        /* end of the last action anywhere */
	double bubble_fraction; /* 1 - sum(rank busy) / (ranks * makespan) */
	double total_busy;      /* sum of all compute time */
	uint32_t ranks;
	uint32_t stages;
};

/* One interval of the replay, for traces. */
enum dpl_sim_event_kind {
	DPL_SIM_COMPUTE = 0, /* a compute action on `rank` */
	DPL_SIM_TRANSFER = 1, /* a transfer from `rank` to `peer` */
	DPL_SIM_REDUCE = 2,   /* a stage's gradient reduction */
	DPL_SIM_STEP = 3      /* a stage's optimizer step */
};

struct dpl_sim_event {
	uint32_t kind;            /* enum dpl_sim_event_kind */
	uint32_t rank;            /* where it runs (sender for transfers) */
	uint32_t peer;            /* receiver for transfers, else rank */
	struct dpl_action action; /* compute action, or the producer for a
	                             transfer, REDUCE_GRAD / STEP */
	double start;
	double end;
};

/*
 * dpl_sim_run - simulate `s` (compute-only or lowered) under `p` (NULL:
 * all defaults). On success *out owns the result (dpl_sim_destroy).
 * Errors: DPL_EINVAL for a negative or non-finite cost, bandwidth or
 * latency (named in dpl_last_error()), DPL_ESCHED / DPL_EDEADLOCK as
 * dpl_schedule_validate() reports them (the schedule is validated first),
 * DPL_ENOMEM. O(actions) time and memory. Thread-safe.
 */
DPL_EXTERN int dpl_sim_run(const dpl_schedule *s,
			   const struct dpl_sim_params *p, dpl_sim **out);

/* dpl_sim_destroy - free a result; NULL is a no-op. */
DPL_EXTERN void dpl_sim_destroy(dpl_sim *sim);

/* dpl_sim_summary - copy the totals into *out. */
DPL_EXTERN void dpl_sim_summary(const dpl_sim *sim,
				struct dpl_sim_summary *out);

/* Busy time of rank r (0 when out of range). */
DPL_EXTERN double dpl_sim_rank_busy(const dpl_sim *sim, uint32_t rank);

/*
 * dpl_sim_stage - copy stage `stage`'s results into *out; DPL_EINVAL when
 * the stage is out of range (*out untouched).
 */
DPL_EXTERN int dpl_sim_stage(const dpl_sim *sim, uint32_t stage,
			     struct dpl_sim_stage_stats *out);

/*
 * dpl_sim_events - the replay's intervals, ordered by rank then start
 * time; a pointer owned by the result and its count in *count.
 */
DPL_EXTERN const struct dpl_sim_event *dpl_sim_events(const dpl_sim *sim,
						      size_t *count);

/*
 * dpl_sim_write_trace - Chrome trace-event JSON (opens in Perfetto and
 * chrome://tracing): one complete ("X") event per compute action on a
 * track per rank, transfers on a track per rank pair, flow arrows ("s"/
 * "f") from each producing compute action to the one consuming its
 * output on another rank, one time unit = `us_per_unit`
 * microseconds (<= 0: 1000, i.e. milliseconds). DPL_EIO on a write
 * error.
 */
DPL_EXTERN int dpl_sim_write_trace(const dpl_sim *sim, FILE *f,
				   double us_per_unit);

/*
 * dpl_sim_write_ascii - the timeline for terminals: one row per rank, one
 * column per `unit` of time (<= 0: the smallest compute cost), each
 * action as its kind letter and micro-batch (prefixed with its stage when
 * a rank holds several stages: "2F0"), continued with '-', idle as
 * '.', e.g.
 *     rank 0 |F0 F1 B0 -- F2 B1 -- ...
 * Rows are wrapped every `width` columns (0: no wrapping). DPL_EIO on a
 * write error.
 */
DPL_EXTERN int dpl_sim_write_ascii(const dpl_sim *sim, FILE *f, double unit,
				   unsigned width);

/*
 * The timeline as a picture: SVG 1.1 text, no scripts, no external
 * fonts or files, the same bytes for the same input (numbers are written
 * without the C library's locale).
 *
 * One row per rank ("rank r"), time left to right scaled so the makespan
 * fills `width` pixels (plus 96 pixels of margins and labels). Each
 * compute action is one rect coloured by kind with class "F", "B", "I"
 * or "W" (STEPs that take time: "STEP"; stage reductions that take time,
 * a thin strip under the row: "REDUCE_GRAD"), a tooltip with its text
 * form and interval, and inside it, where the text fits, its micro-batch
 * ("3", or "s5:3" with the stage when ranks hold several stages and that
 * fits). When ranks hold several stages, those of odd chunks (stage /
 * ranks odd) are drawn lighter. A rank's idle time between 0 and the
 * makespan is drawn as rects of class "idle" (hatched: the bubble), so
 * their widths add up to bubble_fraction * ranks * width. Transfers,
 * when asked for, are lines of class "transfer". Legend swatches have
 * class "key <kind>". Below the rows: a time axis, the legend and the
 * caption:
 *     1f1b: 4 stages on 4 ranks, 8 micro-batches
 *     makespan 33, bubble 27.27%, busy 96
 *     peak activations per rank: rank 0: 4 mb (400 B), rank 1: ...
 * Times in the caption are printed like printf's "%.4f" with trailing
 * zeros (and a trailing point) removed, the bubble as "%.2f%%". The peak
 * of a rank counts the micro-batches alive over all its stages at once
 * (forward done, B or W not yet) along its list, as dpl_sim_stage()
 * counts them per stage; with one stage per rank it is that stage's
 * peak_inflight. Bytes are shown when some stage has
 * peak_activation_bytes > 0.
 */
struct dpl_sim_svg_params {
	/* First caption line; NULL: "<policy>: S stages on R ranks, M
	 * micro-batches" from the schedule. Escaped for XML. */
	const char *title;
	/* Pixels of the time axis; 0: 960. 200 to 100000. */
	unsigned width;
	/* Nonzero: draw each transfer as a thin line from the sender's row
	 * to the receiver's. */
	int transfers;
	/* Nonzero: never show bytes (for simulations whose activation
	 * figures are not bytes, such as those of dpl_plan_schedule()). */
	int hide_bytes;
	/* Time unit appended to the makespan ("ms"); NULL: none. */
	const char *time_unit;
};

/*
 * dpl_sim_write_svg - write the picture of `sim`, the result of
 * dpl_sim_run() on `s`, to `f` under `p` (NULL: all defaults). The
 * schedule supplies the caption's policy and micro-batch count; nothing
 * is kept. Blocks on `f` only. Thread-safe: reads `sim` and `s` only
 * (any number of threads may draw the same result into distinct streams).
 * Errors: DPL_EINVAL for a NULL argument, a width out of range or a
 * schedule whose rank or stage count differs from the simulation's;
 * DPL_ENOMEM; DPL_EIO on a write error (what was written is left in the
 * stream: use dpl_sim_save_svg() for a file that appears whole or not at
 * all).
 */
DPL_EXTERN int dpl_sim_write_svg(const dpl_sim *sim, const dpl_schedule *s,
				 FILE *f,
				 const struct dpl_sim_svg_params *p);

/*
 * dpl_sim_save_svg - dpl_sim_write_svg() into the file `path`, written to
 * a temporary file beside it, flushed to disk and renamed into place: the
 * file appears whole or not at all, and an existing file is replaced only
 * on success. The file gets the mode open() with 0666 would give.
 * Errors: those of dpl_sim_write_svg() (checked before any file is
 * created), DPL_EINVAL for an empty path, DPL_EIO naming `path` and the
 * reason when the directory cannot be written or the write fails (the
 * temporary file is then removed).
 */
DPL_EXTERN int dpl_sim_save_svg(const dpl_sim *sim, const dpl_schedule *s,
				const char *path,
				const struct dpl_sim_svg_params *p);

#ifdef __cplusplus
}
#endif
#endif /* DPL_SIM_H */
