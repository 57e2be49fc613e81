/*
 * plan_baseline.c - the plans dpl's planner is compared against: pure
 * data parallelism, PipeDream's planner timed synchronously, and a
 * GPipe-style straight pipeline of equal layer counts.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

const char *dpl_plan_baseline_name(enum dpl_plan_baseline b)
{
	switch (b) {
	case DPL_BASELINE_DATA_PARALLEL:
		return "data_parallel";
	case DPL_BASELINE_PIPEDREAM:
		return "pipedream";
	case DPL_BASELINE_GPIPE:
		return "gpipe";
	default:
		return NULL;
	}
}

int dpl__baseline(const struct dpl__pctx *x, enum dpl_plan_baseline which,
		  struct dpl_plan *out, uint32_t *sims)
{
	struct dpl_plan *pl = malloc(sizeof *pl);
	uint32_t S, n = x->n;
	int rc = 0;

	if (pl == NULL)
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	memset(pl, 0, sizeof *pl);
	switch (which) {
	case DPL_BASELINE_DATA_PARALLEL:
		if (x->p->global_batch < x->G) {
			rc = dpl_set_error(DPL_ENOENT,
					"data parallelism needs at least one "
					"sample per device (%u samples, %u "
					"devices)",
					x->p->global_batch, x->G);
			break;
		}
		pl->stages = 1;
		pl->stage[0] = (struct dpl_plan_stage){
		    .first_layer = 0, .last_layer = n - 1, .devices = x->all};
		pl->policy = DPL_POLICY_1F1B;
		break;
	case DPL_BASELINE_PIPEDREAM:
		rc = dpl__pipedream_stages(x, pl);
		break;
	case DPL_BASELINE_GPIPE:
		S = x->G < n ? x->G : n;
		if (S > DPL_PLAN_MAX_STAGES)
			S = DPL_PLAN_MAX_STAGES;
		pl->stages = S;
		for (uint32_t s = 0; s < S; s++)
			pl->stage[s] = (struct dpl_plan_stage){
			    .first_layer = (uint32_t)((uint64_t)s * n / S),
			    .last_layer =
				(uint32_t)((uint64_t)(s + 1) * n / S) - 1,
			    .devices = 1ULL << s};
		pl->policy = DPL_POLICY_GPIPE;
		break;
	default:
		rc = dpl_set_error(DPL_EINVAL, "unknown baseline %d", (int)which);
		break;
	}
	if (rc == 0) {
		uint32_t maxr = 1;

		for (uint32_t s = 0; s < pl->stages; s++) {
			uint32_t r = (uint32_t)__builtin_popcountll(
			    pl->stage[s].devices);

			if (r > maxr)
				maxr = r;
		}
		if (maxr > x->p->global_batch ||
		    (x->p->microbatch_size && maxr > x->p->microbatch_size))
			rc = dpl_set_error(DPL_ENOENT,
					"%s: a stage has %u replicas, more "
					"than the samples per micro-batch",
					dpl_plan_baseline_name(which), maxr);
	}
	if (rc == 0)
		rc = dpl__plan_tune(x, pl, sims);
	if (rc == 0)
		*out = *pl;
	free(pl);
	return rc;
}

int dpl_plan_baseline(const dpl_profile *prof, const struct dpl_cluster *c,
		      const struct dpl_plan_params *p,
		      enum dpl_plan_baseline which, struct dpl_plan *out)
{
	struct dpl__pctx x;
	int rc;

	if (out == NULL)
		return dpl_set_error(DPL_EINVAL, "out must not be NULL");
	if (dpl_plan_baseline_name(which) == NULL)
		return dpl_set_error(DPL_EINVAL, "unknown baseline %d", (int)which);
	if ((rc = dpl__pctx_init(&x, prof, c, p)))
		return rc;
	rc = dpl__baseline(&x, which, out, NULL);
	dpl__pctx_fini(&x);
	return rc;
}
