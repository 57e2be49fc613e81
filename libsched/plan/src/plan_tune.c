/*
 * plan_tune.c - a plan's schedule and its simulation, dpl_plan_evaluate(),
 * and the choice of micro-batching and policy (dpl_plan_tune()).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

int dpl_plan_schedule(const struct dpl_plan *plan, dpl_schedule **out,
		      struct dpl_plan_sim *sim)
{
	struct dpl_schedule_params sp = {0};
	uint32_t S;

	if (plan == NULL || out == NULL || sim == NULL)
		return dpl_set_error(DPL_EINVAL,
				  "plan, out and sim must not be NULL");
	S = plan->stages;
	if (S < 1 || S > DPL_PLAN_MAX_STAGES)
		return dpl_set_error(DPL_EINVAL,
				  "plan: stages must be in [1, %d] (got %u)",
				  DPL_PLAN_MAX_STAGES, S);
	if (plan->microbatches < 1)
		return dpl_set_error(DPL_EINVAL,
				  "plan: microbatches must be >= 1 (got 0)");
	if (plan->policy != DPL_POLICY_GPIPE &&
	    plan->policy != DPL_POLICY_1F1B &&
	    plan->policy != DPL_POLICY_1F1B_COMM)
		return dpl_set_error(DPL_EINVAL,
				  "plan: policy must be gpipe, 1f1b or "
				  "1f1b-comm (got %d)",
				  (int)plan->policy);
	memset(sim, 0, sizeof *sim);
	for (uint32_t s = 0; s < S; s++) {
		const struct dpl_plan_stage *st = &plan->stage[s];
		uint32_t r = st->replicas ? st->replicas
					  : dpl__popcount64(st->devices);
		double vals[4] = {st->forward_ms, st->backward_ms, st->send_ms,
				  st->allreduce_ms};

		for (int k = 0; k < 4; k++)
			if (!isfinite(vals[k]) || vals[k] < 0 || vals[k] > 1e12)
				return dpl_set_error(DPL_EINVAL,
						  "plan: stage %u: costs must be "
						  "finite, >= 0 and < 1e12 ms "
						  "(got F=%g B=%g send=%g "
						  "allreduce=%g)",
						  s, vals[0], vals[1], vals[2],
						  vals[3]);
		if (r < 1)
			r = 1;
		sim->costs[s].f = st->forward_ms;
		sim->costs[s].b = st->backward_ms;
		sim->costs[s].i = st->backward_ms / 2;
		sim->costs[s].w = st->backward_ms / 2;
		sim->activation_bytes[s] =
		    s + 1 < S ? (uint64_t)llround(st->send_ms * 1e6) : 0;
		sim->grad_bytes[s] = s > 0 ? sim->activation_bytes[s - 1] : 0;
		sim->replicas[s] = r;
		sim->param_bytes[s] =
		    r > 1 ? (uint64_t)llround(st->allreduce_ms * 1e6 * r /
					      (2.0 * (r - 1)))
			  : 0;
	}
	sim->params.costs = sim->costs;
	sim->params.link_bandwidth = 1e6;
	sim->params.activation_bytes = sim->activation_bytes;
	sim->params.grad_bytes = sim->grad_bytes;
	sim->params.replicas = sim->replicas;
	sim->params.param_bytes = sim->param_bytes;
	sim->params.ar_bandwidth = 1e6;
	sp.stages = S;
	sp.microbatches = plan->microbatches;
	sp.policy = plan->policy;
	sp.costs = sim->costs;
	return dpl_schedule_build(&sp, out);
}

int dpl__plan_simulate(const struct dpl_plan *plan, double *ms)
{
	struct dpl_plan_sim *ps = malloc(sizeof *ps);
	struct dpl_sim_summary sum;
	dpl_schedule *s = NULL;
	dpl_sim *sim = NULL;
	int rc;

	if (ps == NULL)
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	rc = dpl_plan_schedule(plan, &s, ps);
	if (rc == 0)
		rc = dpl_sim_run(s, &ps->params, &sim);
	if (rc == 0) {
		dpl_sim_summary(sim, &sum);
		*ms = sum.makespan;
	}
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
	free(ps);
	return rc;
}

/*
 * The frame of dpl_plan_evaluate() and dpl_plan_tune(): a planning
 * context and a working copy of *plan, and at the end the copy written
 * back when all went well.
 */
static int plan_begin(const dpl_profile *prof, const struct dpl_cluster *c,
		      const struct dpl_plan_params *p,
		      const struct dpl_plan *plan, struct dpl__pctx *x,
		      struct dpl_plan **tmp)
{
	int rc;

	if (plan == NULL)
		return dpl_set_error(DPL_EINVAL, "plan must not be NULL");
	if ((rc = dpl__pctx_init(x, prof, c, p)))
		return rc;
	*tmp = malloc(sizeof **tmp);
	if (*tmp == NULL) {
		dpl__pctx_fini(x);
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	}
	**tmp = *plan;
	return 0;
}

static int plan_end(struct dpl__pctx *x, struct dpl_plan *tmp,
		    struct dpl_plan *plan, int rc)
{
	if (rc == 0)
		*plan = *tmp;
	free(tmp);
	dpl__pctx_fini(x);
	return rc;
}

int dpl_plan_evaluate(const dpl_profile *prof, const struct dpl_cluster *c,
		      const struct dpl_plan_params *p, struct dpl_plan *plan)
{
	struct dpl__pctx x;
	struct dpl_plan *tmp;
	int rc;

	if ((rc = plan_begin(prof, c, p, plan, &x, &tmp)) != 0)
		return rc;
	if ((rc = dpl__plan_validate(&x, tmp)) == 0) {
		dpl__plan_fill(&x, tmp);
		if (p->rank == DPL_PLAN_RANK_SIM)
			rc = dpl__plan_simulate(tmp, &tmp->predicted_ms);
	}
	return plan_end(&x, tmp, plan, rc);
}

/* ---- choosing the micro-batching ---------------------------------- */

struct choice {
	uint32_t M, mb;
	enum dpl_policy pol;
	double pivot, over;
};

static int cmp_choice(const void *pa, const void *pb)
{
	const struct choice *a = pa, *b = pb;

	if (a->pivot != b->pivot)
		return a->pivot < b->pivot ? -1 : 1;
	if (a->M != b->M)
		return a->M < b->M ? -1 : 1;
	return (int)a->pol - (int)b->pol;
}

/* Simulated candidates per policy while tuning. */
#define TUNE_SIMS 2

int dpl__plan_tune(const struct dpl__pctx *x, struct dpl_plan *plan,
		   uint32_t *sims)
{
	uint32_t gbs = x->p->global_batch, maxr = 1, nc = 0;
	enum dpl_policy pols[2];
	uint32_t npol = 1;
	struct choice *ch, best_fail = {0};
	struct dpl_plan *tmp;
	double best_ms = HUGE_VAL, best_over = HUGE_VAL;
	struct choice best = {0};
	int have = 0, rc = 0;

	for (uint32_t s = 0; s < plan->stages && s < DPL_PLAN_MAX_STAGES; s++) {
		uint32_t r = dpl__popcount64(plan->stage[s].devices);

		if (r > maxr)
			maxr = r;
	}
	if (plan->policy == DPL_POLICY_GPIPE) {
		pols[0] = DPL_POLICY_GPIPE;
	} else {
		pols[0] = DPL_POLICY_1F1B;
		if (plan->stages > 1)
			pols[npol++] = DPL_POLICY_1F1B_COMM;
	}
	/* Distinct sizes ceil(gbs / M): at most 2 sqrt(gbs) + 2 of them. */
	ch = malloc(npol * (2 * (size_t)sqrt((double)gbs) + 4) * sizeof *ch);
	tmp = malloc(sizeof *tmp);
	if (ch == NULL || tmp == NULL) {
		free(ch);
		free(tmp);
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	}
	*tmp = *plan;
	tmp->microbatch_size = UINT32_MAX; /* checked per size below */
	tmp->microbatches = 1;
	if ((rc = dpl__plan_validate(x, tmp)))
		goto out;
	for (uint32_t M = 1;;) {
		uint32_t mb = (uint32_t)(((uint64_t)gbs + M - 1) / M);

		if (x->p->microbatch_size) {
			mb = x->p->microbatch_size;
			M = (uint32_t)(((uint64_t)gbs + mb - 1) / mb);
		}
		if (mb >= maxr)
			for (uint32_t k = 0; k < npol; k++) {
				*tmp = *plan;
				tmp->microbatches = M;
				tmp->microbatch_size = mb;
				tmp->policy = pols[k];
				dpl__plan_fill(x, tmp);
				ch[nc++] = (struct choice){
				    M, mb, pols[k], tmp->pivot_ms,
				    dpl__plan_overflow(x, tmp)};
			}
		if (x->p->microbatch_size || mb <= maxr || mb == 1)
			break;
		M = (uint32_t)(((uint64_t)gbs + mb - 2) / (mb - 1));
	}
	if (nc == 0) {
		if (x->p->microbatch_size)
			rc = dpl_set_error(DPL_EINVAL,
					"micro-batch size %u is smaller than "
					"the %u replicas of a stage",
					x->p->microbatch_size, maxr);
		else
			rc = dpl_set_error(DPL_EINVAL,
					"no micro-batch size fits: the global "
					"batch %u is smaller than the %u "
					"replicas of a stage",
					gbs, maxr);
		goto out;
	}
	qsort(ch, nc, sizeof *ch, cmp_choice);
	for (uint32_t k = 0; k < npol; k++) {
		uint32_t tried = 0;

		for (uint32_t c = 0; c < nc && tried < TUNE_SIMS; c++) {
			double ms;

			if (ch[c].pol != pols[k] || ch[c].over > 0)
				continue;
			if (x->p->rank == DPL_PLAN_RANK_PIVOT) {
				/* pivot ties between policies: the first
				 * (1f1b, less memory) wins */
				if (ch[c].pivot < best_ms) {
					best_ms = ch[c].pivot;
					best = ch[c];
					have = 1;
				}
				break;
			}
			*tmp = *plan;
			tmp->microbatches = ch[c].M;
			tmp->microbatch_size = ch[c].mb;
			tmp->policy = ch[c].pol;
			dpl__plan_fill(x, tmp);
			if ((rc = dpl__plan_simulate(tmp, &ms)))
				goto out;
			tried++;
			if (sims)
				(*sims)++;
			if (ms < best_ms) {
				best_ms = ms;
				best = ch[c];
				have = 1;
			}
		}
	}
	if (!have) {
		for (uint32_t c = 0; c < nc; c++)
			if (ch[c].over < best_over) {
				best_over = ch[c].over;
				best_fail = ch[c];
			}
		best = best_fail;
	}
	*tmp = *plan;
	tmp->microbatches = best.M;
	tmp->microbatch_size = best.mb;
	tmp->policy = best.pol;
	dpl__plan_fill(x, tmp);
	if (x->p->rank == DPL_PLAN_RANK_SIM) {
		if (have) {
			tmp->predicted_ms = best_ms;
		} else {
			if ((rc = dpl__plan_simulate(tmp, &tmp->predicted_ms)))
				goto out;
			if (sims)
				(*sims)++;
		}
	}
	*plan = *tmp;
out:
	free(ch);
	free(tmp);
	return rc;
}

int dpl_plan_tune(const dpl_profile *prof, const struct dpl_cluster *c,
		  const struct dpl_plan_params *p, struct dpl_plan *plan)
{
	struct dpl__pctx x;
	struct dpl_plan *tmp;
	int rc;

	if ((rc = plan_begin(prof, c, p, plan, &x, &tmp)) != 0)
		return rc;
	/* Check the structure with a placeholder micro-batching. */
	if (tmp->microbatch_size == 0)
		tmp->microbatch_size = p->global_batch;
	if (tmp->microbatches == 0)
		tmp->microbatches = 1;
	if (tmp->policy != DPL_POLICY_GPIPE &&
	    tmp->policy != DPL_POLICY_1F1B_COMM)
		tmp->policy = DPL_POLICY_1F1B;
	{
		struct dpl_plan probe = *tmp;

		probe.microbatch_size = UINT32_MAX;
		rc = dpl__plan_validate(&x, &probe);
	}
	if (rc == 0)
		rc = dpl__plan_tune(&x, tmp, NULL);
	return plan_end(&x, tmp, plan, rc);
}
