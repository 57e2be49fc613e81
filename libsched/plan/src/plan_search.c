/*
 * plan_search.c - dpl_plan_search(): the baselines, DAPPLE's DP, and the
 * final ranking of candidates by the simulator.
 */
#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

/* Is plan a faster than b under the ranking? Ties: fewer stages. */
static int better(const struct dpl_plan *a, const struct dpl_plan *b)
{
	double ta = a->predicted_ms, tb = b->predicted_ms;

	if (ta < tb * (1 - 1e-12))
		return 1;
	if (tb < ta * (1 - 1e-12))
		return 0;
	return a->stages < b->stages;
}

static void describe_fail(const struct dpl__pctx *x, const struct dpl_plan *pl)
{
	const struct dpl_plan_stage *st = &pl->stage[pl->worst_stage];
	const struct dpl_layer *a = dpl_profile_layer(x->prof, st->first_layer);
	const struct dpl_layer *b = dpl_profile_layer(x->prof, st->last_layer);

	dpl_set_error(DPL_ENOFIT,
		   "no plan fits devices of %.0f bytes: the closest tried, %u "
		   "stage(s) with micro-batches of %u, needs %llu bytes on "
		   "stage %u (layers %u-%u, %.40s .. %.40s, %u device(s)), "
		   "%.0f bytes over",
		   x->mem, pl->stages, pl->microbatch_size,
		   (unsigned long long)st->memory_bytes, pl->worst_stage,
		   st->first_layer, st->last_layer, a->name, b->name,
		   st->replicas, (double)st->memory_bytes - x->mem);
}

int dpl_plan_search(const dpl_profile *prof, const struct dpl_cluster *c,
		    const struct dpl_plan_params *p,
		    struct dpl_plan_report *out)
{
	struct dpl__pctx x;
	struct dpl__pool pool = {0};
	struct dpl__dp_stats st = {0};
	struct dpl_plan_report *r = NULL;
	struct dpl_plan *cand = NULL, *closest = NULL;
	double bound = HUGE_VAL, closest_over = HUGE_VAL;
	uint32_t ncand;
	int rc, have = 0;

	if (out == NULL)
		return dpl_set_error(DPL_EINVAL, "out must not be NULL");
	if ((rc = dpl__pctx_init(&x, prof, c, p)))
		return rc;
	r = calloc(1, sizeof *r);
	cand = malloc(sizeof *cand);
	closest = malloc(sizeof *closest);
	ncand = p->candidates ? p->candidates : 16;
	pool.cap = ncand;
	pool.plan = malloc(((size_t)ncand + 1) * sizeof *pool.plan);
	pool.pivot = malloc(((size_t)ncand + 1) * sizeof *pool.pivot);
	if (!r || !cand || !closest || !pool.plan || !pool.pivot) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	r->single_device_ms = (double)p->global_batch / x.pbs *
			      (x.F[x.n] + x.B[x.n]);
	r->from_baseline = -1;

	/* The baselines: printed beside the plan and candidates too. */
	for (int b = 0; b < DPL_BASELINE__COUNT; b++) {
		rc = dpl__baseline(&x, (enum dpl_plan_baseline)b,
				   &r->baseline[b], &r->simulated);
		if (rc == DPL_ENOENT) {
			r->baseline_found[b] = 0;
			continue;
		}
		if (rc)
			goto out;
		r->baseline_found[b] = 1;
		/* a baseline competes only within the caller's limits */
		if (r->baseline[b].fits &&
		    (!p->max_stages || r->baseline[b].stages <= p->max_stages)) {
			bound = fmin(bound, r->baseline[b].pivot_ms);
			if (!have || better(&r->baseline[b], &r->best)) {
				r->best = r->baseline[b];
				r->from_baseline = b;
				have = 1;
			}
		} else if (dpl__plan_overflow(&x, &r->baseline[b]) <
			   closest_over) {
			closest_over = dpl__plan_overflow(&x, &r->baseline[b]);
			*closest = r->baseline[b];
		}
	}
	rc = 0;

	/* DAPPLE's DP, then the best structures re-timed. */
	if ((rc = dpl__dp_search(&x, bound, &pool, &st)))
		goto out;
	r->dp_runs = st.runs;
	r->dp_states = st.states;
	r->exact = !st.capped && !st.truncated;
	for (uint32_t k = 0; k < pool.n; k++) {
		*cand = pool.plan[k];
		if ((rc = dpl__plan_tune(&x, cand, &r->simulated)))
			goto out;
		if (cand->fits) {
			if (!have || better(cand, &r->best)) {
				r->best = *cand;
				r->from_baseline = -1;
				have = 1;
			}
		} else if (dpl__plan_overflow(&x, cand) < closest_over) {
			closest_over = dpl__plan_overflow(&x, cand);
			*closest = *cand;
		}
	}
	if (!have) {
		if (closest_over < HUGE_VAL)
			describe_fail(&x, closest);
		else
			dpl_set_error(DPL_ENOFIT,
				   "no plan fits devices of %.0f bytes: every "
				   "layer range is too large for the memory",
				   x.mem);
		rc = DPL_ENOFIT;
		goto out;
	}
	*out = *r;
out:
	free(r);
	free(cand);
	free(closest);
	free(pool.plan);
	free(pool.pivot);
	dpl__pctx_fini(&x);
	return rc;
}
