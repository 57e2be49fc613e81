/*
 * internal.h - declarations shared by the core's source files; not
 * installed. Internal non-static names carry the dpl__ prefix.
 */
#ifndef DPL_INTERNAL_H
#define DPL_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>

#include <dpl/schedule.h>

#if defined(__GNUC__)
#define DPL__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define DPL__COLD __attribute__((cold, noinline))
#define DPL__NOINLINE __attribute__((noinline))
#else
#define DPL__NOINLINE
#define DPL__PRINTF(a, b)
#define DPL__COLD
#endif

/* Upper bound on actions in one schedule (indices stay in int32). */
#define DPL__MAX_ACTIONS ((size_t)1 << 31)

/*
 * Record `fmt` as the calling thread's last error and return `code`, so
 * that callers write `return dpl__error(DPL_EINVAL, "...", ...);`.
 */
#define dpl__error dpl_set_error
int dpl__verror(int code, const char *fmt, va_list ap);
/* Forget the calling thread's last error message. */
void dpl__clear_error(void);

/* One rank's growable action list. */
struct dpl__list {
	struct dpl_action *a;
	size_t len;
	size_t cap;
};

struct dpl_schedule {
	uint32_t ranks;
	uint32_t stages;
	uint32_t microbatches;
	uint32_t chunks;
	enum dpl_policy policy;
	bool lowered;
	uint32_t *stage_rank; /* [stages] */
	uint32_t *cap;        /* [stages], 0 = none */
	struct dpl__list *lists; /* [ranks] */
};

/* Allocate an empty schedule with the default stage -> rank mapping. */
int dpl__schedule_alloc(uint32_t ranks, uint32_t stages, uint32_t mb,
			dpl_schedule **out);
/* Reserve room for `n` more actions on `rank`'s list. */
int dpl__list_reserve(struct dpl__list *l, size_t n);
/* Append without checks (capacity reserved or grown here). */
int dpl__list_push(struct dpl__list *l, struct dpl_action a);

static inline struct dpl_action dpl__act(uint32_t kind, uint32_t stage,
					 uint32_t mb)
{
	struct dpl_action a = {kind, stage, mb};
	return a;
}

/* Per-(stage, micro-batch) index into flat S * M tables. */
/* Kinds that carry a micro-batch: all but REDUCE_GRAD, STEP, UNSHARD,
 * RESHARD, WAIT_REDUCE_GRAD and the OVERLAP_F_B marker. */
static inline bool dpl__kind_has_mb(uint32_t kind)
{
	return kind != DPL_ACT_REDUCE_GRAD && kind != DPL_ACT_STEP &&
	       kind != DPL_ACT_UNSHARD && kind != DPL_ACT_RESHARD &&
	       kind != DPL_ACT_WAIT_REDUCE_GRAD && kind != DPL_ACT_OVERLAP_F_B;
}

static inline size_t dpl__sm(const dpl_schedule *s, uint32_t stage,
			     uint32_t mb)
{
	return (size_t)stage * s->microbatches + mb;
}

/* Format "rank R, position P (ACTION): " into buf; returns buf. */
const char *dpl__where(char *buf, size_t n, uint32_t rank, size_t pos,
		       struct dpl_action a);

/* Policies (policy.c) used by dpl_schedule_build (schedule.c). */
int dpl__build_policy(const struct dpl_schedule_params *p, dpl_schedule *s);
/* Builders of the policies in policy_looped.c and policy_zb.c. */
int dpl__build_interleaved(const struct dpl_schedule_params *p,
			   dpl_schedule *s);
/* Forwards rank r of interleaved runs before its first backward. */
uint32_t dpl__interleaved_warmup(uint32_t S, uint32_t M, uint32_t V,
				 uint32_t r);
int dpl__build_looped_bfs(const struct dpl_schedule_params *p,
			  dpl_schedule *s);
int dpl__build_interleaved_zb(const struct dpl_schedule_params *p,
			      dpl_schedule *s);
/* The V placement of zbv and dualpipev (2S stages on S ranks): rank r
 * holds stages r and 2S-1-r. */
void dpl__place_v(dpl_schedule *s);
int dpl__build_zbv(const struct dpl_schedule_params *p, dpl_schedule *s);
int dpl__build_zb_h2(const struct dpl_schedule_params *p, dpl_schedule *s);
int dpl__build_zb_auto(const struct dpl_schedule_params *p, dpl_schedule *s);
int dpl__build_dualpipev(const struct dpl_schedule_params *p,
			 dpl_schedule *s);

/*
 * Makespan of a compute-only schedule under `costs` (S entries or NULL)
 * by replaying its lists (replay.c), an input from another rank arriving
 * `transfer` after it was made (0: free communication); `bounded` and
 * zb-auto use it to pick the fastest of their candidate orders. The same
 * numbers as dpl_sim_run() with link latency `transfer`, infinite
 * bandwidth and free reductions, without the simulator. Returns 0 and
 * *makespan, DPL_EDEADLOCK for lists that stall, DPL_ENOMEM.
 */
int dpl__replay_makespan(const dpl_schedule *s,
			 const struct dpl_stage_cost *costs, double transfer,
			 double *makespan);

#endif /* DPL_INTERNAL_H */
