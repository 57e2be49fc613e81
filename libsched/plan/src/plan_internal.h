/*
 * plan_internal.h - declarations shared by the planner's source files
 * (cluster.c, profile*.c, plan_*.c); not installed.
 */
#ifndef DPL_PLAN_INTERNAL_H
#define DPL_PLAN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dpl/plan.h>

/* ---- profiles (profile.c, profile_build.c, profile_text.c) ---------- */

struct dpl_profile {
	uint32_t n;
	struct dpl_layer *layer; /* [n] topological order */
	uint32_t *line;          /* [n] source line, 0 if none */
	char **strings;          /* [2n] owned id and name strings */
	size_t nedges;
	uint32_t *edge;          /* [2 * nedges] (from, to) sorted */
	double *cut;             /* [n + 1] crossing bytes before layer i */
};

/* A node or an edge as read, before ordering. */
struct raw_node {
	char *id;
	char *name;
	double f, b, act, par;
	uint32_t line;
};

struct raw_edge {
	uint32_t from, to; /* indices into the raw nodes */
	uint32_t line;     /* 0 when not from text */
};

/* The nodes and edges a reader collects; `source` names it in messages. */
struct builder {
	const char *source;
	struct raw_node *node;
	uint32_t n, ncap;
	struct raw_edge *edge;
	size_t ne, ecap;
};

/* String -> index map for node ids (open addressing). */
struct idmap {
	uint32_t *slot; /* node index + 1, 0 = empty */
	size_t cap;     /* power of two */
};

/* Free the strings and arrays of a builder (not the builder itself). */
void dpl__builder_free(struct builder *bl);

/* A NUL-terminated copy of s[0..n), or NULL when out of memory. */
char *dpl__dup_range(const char *s, size_t n);

/* Append a node (the builder owns its strings once this succeeds) or an
 * edge; DPL_ENOMEM or DPL_ERANGE on failure, the builder unchanged. */
int dpl__add_node(struct builder *bl, struct raw_node *nd);
int dpl__add_edge(struct builder *bl, uint32_t from, uint32_t to,
		  uint32_t line);

/* An empty map sized for `want` ids; DPL_ENOMEM on failure. */
int dpl__idmap_init(struct idmap *m, size_t want);

/* Index of the node with id s[0..n), or UINT32_MAX when none. */
uint32_t dpl__idmap_find(const struct idmap *m, const struct builder *bl,
			 const char *s, size_t n);

/* Record that node `idx` has id s (not yet in the map). */
void dpl__idmap_put(struct idmap *m, const char *s, uint32_t idx);

/*
 * Turn the raw nodes and edges into a profile: a chain when there are no
 * edges, duplicate edges merged, the layers in topological order (file
 * order among ready ones), the bytes crossing each cut. Takes the node
 * strings; the caller still frees the builder. DPL_EPARSE names a cycle.
 */
int dpl__profile_finalize(struct builder *bl, dpl_profile **out);

/* ---- the cost model and the search (cluster.c, plan_*.c) ------------ */

/* Number of devices in a mask. */
static inline uint32_t dpl__popcount64(uint64_t m)
{
	return (uint32_t)__builtin_popcountll(m);
}

/* dpl_cluster_place() without the argument checks or the message:
 * returns 0, DPL_ENOENT or DPL_EINVAL. */
int dpl__place(const struct dpl_cluster *c, uint64_t taken, uint32_t want,
	       enum dpl_placement policy, uint64_t *out);

/* Everything the cost model derives once per (profile, cluster, params). */
struct dpl__pctx {
	const dpl_profile *prof;
	const struct dpl_cluster *c;
	const struct dpl_plan_params *p;
	uint32_t n;      /* layers */
	uint32_t G;      /* devices */
	uint64_t all;    /* mask of every device */
	double pbs;
	double opt;      /* optimizer factor */
	double mem;      /* device memory */
	double *F, *B, *A, *P; /* [n + 1] prefix sums at the profile batch */
	double *cut;     /* [n + 1] bytes crossing the cut before layer i */
};

int dpl__pctx_init(struct dpl__pctx *x, const dpl_profile *prof,
		   const struct dpl_cluster *c, const struct dpl_plan_params *p);
void dpl__pctx_fini(struct dpl__pctx *x);

/* Check a cluster and planner params; DPL_EINVAL naming the fault. */
int dpl__plan_check(const dpl_profile *prof, const struct dpl_cluster *c,
		    const struct dpl_plan_params *p);

/* Split-concat transfer of `bytes` (the whole micro-batch of `mb`
 * samples) from the replicas in `from` to those in `to`, in ms. */
double dpl__xfer_ms(const struct dpl__pctx *x, double bytes, uint32_t mb,
		    uint64_t from, uint64_t to);

/* Ring allreduce of `bytes` over the devices in `devs`, in ms. */
double dpl__ar_ms(const struct dpl__pctx *x, double bytes, uint64_t devs);

/* Warm-up depth (micro-batches alive) of stage s of S under a policy. */
uint32_t dpl__inflight(enum dpl_policy pol, uint32_t S, uint32_t s,
		       uint32_t M);

/* Fill a plan's derived fields without the simulator (predicted_ms =
 * pivot); the plan must be well formed (dpl__plan_validate). */
void dpl__plan_fill(const struct dpl__pctx *x, struct dpl_plan *plan);

/* Check stages, devices, micro-batching and policy of a plan. */
int dpl__plan_validate(const struct dpl__pctx *x, const struct dpl_plan *pl);

/* Simulate a filled plan; *ms = makespan (plan_tune.c). */
int dpl__plan_simulate(const struct dpl_plan *plan, double *ms);

/* dpl_plan_tune() on a context; *sims counts simulator runs
 * (plan_tune.c). */
int dpl__plan_tune(const struct dpl__pctx *x, struct dpl_plan *plan,
		   uint32_t *sims);

/* Largest memory overflow of a filled plan, in bytes (<= 0: fits). */
double dpl__plan_overflow(const struct dpl__pctx *x,
			  const struct dpl_plan *plan);

/*
 * Thin out cut positions (plan_cuts.c): `cuts` holds n sorted positions,
 * 0 and the layer count among them; when more than `limit` lie in
 * between, keep `limit` of them, for each of `limit` equal shares of the
 * compute (forward + backward) the position nearest to the share's end
 * (ties: fewer crossing bytes). Returns the new count.
 */
uint32_t dpl__coarsen(const struct dpl__pctx *x, uint32_t *cuts, uint32_t n,
		      uint32_t limit);

/*
 * The cut positions DAPPLE's DP tries (plan_cuts.c), ascending, 0 and the
 * layer count among them, thinned out by dpl__coarsen() to `limit` inner
 * ones; *cuts is malloc'ed (set, and to be freed, even when this fails
 * with DPL_ENOMEM).
 */
int dpl__cut_positions(const struct dpl__pctx *x, uint32_t limit,
		       uint32_t **cuts, uint32_t *ncuts);

/* Baselines on a context (plan_baseline.c). */
int dpl__baseline(const struct dpl__pctx *x, enum dpl_plan_baseline which,
		  struct dpl_plan *out, uint32_t *sims);

/* PipeDream's optimizer (plan_pipedream.c): the stages of its plan. */
int dpl__pipedream_stages(const struct dpl__pctx *x, struct dpl_plan *out);

/* Candidate plan structures found by the DP (plan_dp.c). */
struct dpl__pool {
	struct dpl_plan *plan; /* structures: stages and devices */
	double *pivot;         /* their best pivot latency seen */
	uint32_t n, cap;
};

struct dpl__dp_stats {
	uint32_t runs;
	uint64_t states;
	int capped;    /* a state dropped partial plans (front_cap) */
	int truncated; /* a run reached its share of the work limit */
};

/* Run the DP for every micro-batch size; keep the best `pool->cap`
 * structures by pivot latency. `bound` is the pivot latency of a known
 * plan (HUGE_VAL if none). */
int dpl__dp_search(const struct dpl__pctx *x, double bound,
		   struct dpl__pool *pool, struct dpl__dp_stats *st);

#endif /* DPL_PLAN_INTERNAL_H */
