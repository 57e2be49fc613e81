/*
 * replay.c - the makespan of compute-only lists with free communication,
 * for the `bounded` policy's choice between its two candidate orders.
 *
 * The core keeps this small replay on purpose instead of calling the
 * simulator (libsched/sim): a policy must not pull the simulator, its
 * traces and its link model into the core, and with free communication
 * the answer needs only the list order and the stage costs. Each action
 * starts when its rank is free and its input exists (F after F of the
 * stage before, B or I after B or I of the stage after or after the own
 * F on the last stage, W after the own I) and takes its stage's cost; the
 * arithmetic is the simulator's, so both give the same bits. An input
 * that comes from another rank arrives `transfer` later (zb-auto's
 * transfer time: the simulator's link latency with infinite bandwidth).
 */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

/* `t` plus the transfer time when stages `from` and `to` are on two ranks. */
static double arrive(const dpl_schedule *s, uint32_t from, uint32_t to,
		     double t, double transfer)
{
	return s->stage_rank[from] != s->stage_rank[to] ? t + transfer : t;
}

/* When the input of an action is there, or NAN if not made yet. */
static double input_end(const dpl_schedule *s, const double *fend,
			const double *bend, const double *iend,
			struct dpl_action a, double transfer)
{
	uint32_t S = s->stages;

	switch (a.kind) {
	case DPL_ACT_F:
		return a.stage > 0
			       ? arrive(s, a.stage - 1, a.stage,
					fend[dpl__sm(s, a.stage - 1,
						     a.microbatch)],
					transfer)
			       : 0;
	case DPL_ACT_B:
	case DPL_ACT_I:
		return a.stage + 1 < S
			       ? arrive(s, a.stage + 1, a.stage,
					bend[dpl__sm(s, a.stage + 1,
						     a.microbatch)],
					transfer)
			       : fend[dpl__sm(s, a.stage, a.microbatch)];
	case DPL_ACT_W:
		return iend[dpl__sm(s, a.stage, a.microbatch)];
	default:
		return 0;
	}
}

static double cost(const struct dpl_stage_cost *costs, struct dpl_action a)
{
	struct dpl_stage_cost c = {0};

	if (costs != NULL)
		c = costs[a.stage];
	c = dpl_stage_cost_resolve(c);
	switch (a.kind) {
	case DPL_ACT_F:
		return c.f;
	case DPL_ACT_B:
		return c.b;
	case DPL_ACT_I:
		return c.i;
	case DPL_ACT_W:
		return c.w;
	default:
		return 0;
	}
}

int dpl__replay_makespan(const dpl_schedule *s,
			 const struct dpl_stage_cost *costs, double transfer,
			 double *makespan)
{
	size_t n = (size_t)s->stages * s->microbatches, left = 0, *pc;
	double *fend, *bend, *iend, *tfree, end = 0;
	bool moved = true;
	int rc = 0;

	fend = malloc(3 * n * sizeof *fend);
	tfree = calloc(s->ranks, sizeof *tfree);
	pc = calloc(s->ranks, sizeof *pc);
	if (fend == NULL || tfree == NULL || pc == NULL) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	bend = fend + n;
	iend = bend + n;
	for (size_t k = 0; k < 3 * n; k++)
		fend[k] = NAN;
	/* Each pass runs every rank as far as its inputs allow. */
	while (moved) {
		moved = false;
		left = 0;
		for (uint32_t r = 0; r < s->ranks; r++) {
			const struct dpl__list *l = &s->lists[r];

			for (; pc[r] < l->len; pc[r]++) {
				struct dpl_action a = l->a[pc[r]];
				double in = input_end(s, fend, bend, iend, a,
						      transfer);
				size_t k;

				if (!dpl_action_is_compute(a.kind))
					continue;
				if (isnan(in))
					break;
				tfree[r] = fmax(tfree[r], in) + cost(costs, a);
				end = fmax(end, tfree[r]);
				k = dpl__sm(s, a.stage, a.microbatch);
				if (a.kind == DPL_ACT_F)
					fend[k] = tfree[r];
				if (a.kind == DPL_ACT_B || a.kind == DPL_ACT_I)
					bend[k] = tfree[r];
				if (a.kind == DPL_ACT_I)
					iend[k] = tfree[r];
				moved = true;
			}
			left += l->len - pc[r];
		}
	}
	if (left > 0)
		rc = dpl__error(DPL_EDEADLOCK,
				"replay: %zu actions never got their input",
				left);
	else
		*makespan = end;
out:
	free(fend);
	free(tfree);
	free(pc);
	return rc;
}
