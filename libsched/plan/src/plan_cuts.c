/*
 * plan_cuts.c - the cut positions the planner's searches try: every
 * position between layers less the equivalent ones around layers of no
 * cost, thinned out to a limit by equal shares of the compute.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

uint32_t dpl__coarsen(const struct dpl__pctx *x, uint32_t *cuts, uint32_t n,
		      uint32_t limit)
{
	double total = x->F[x->n] + x->B[x->n];
	uint32_t out = 1, at = 1;

	if (n < 2 || n - 2 <= limit)
		return n;
	for (uint32_t k = 1; k <= limit; k++) {
		double target = total * k / (limit + 1), bd = HUGE_VAL;
		uint32_t best = 0;

		/* positions strictly inside, at or after the last one kept */
		for (uint32_t q = at; q + 1 < n; q++) {
			uint32_t c = cuts[q];
			double w = x->F[c] + x->B[c], dist = fabs(w - target);

			if (dist < bd ||
			    (dist == bd && x->cut[c] < x->cut[cuts[best]])) {
				bd = dist;
				best = q;
			}
			if (w > target)
				break;
		}
		if (best == 0 || (out > 1 && cuts[best] == cuts[out - 1]))
			continue;
		cuts[out++] = cuts[best];
		at = best + 1;
	}
	cuts[out++] = cuts[n - 1];
	return out;
}

static int zero_layer(const struct dpl__pctx *x, uint32_t l)
{
	return x->F[l + 1] == x->F[l] && x->B[l + 1] == x->B[l] &&
	       x->P[l + 1] == x->P[l];
}

/*
 * Cut positions: every position between layers, except around runs of
 * layers with zero time and no weights. Moving a cut across such a run
 * changes only the crossing bytes, so of the positions bordering a run
 * only the one with the fewest crossing bytes stays; a run at the start
 * or the end of the model keeps none (a stage of nothing but such layers
 * would be useless).
 */
int dpl__cut_positions(const struct dpl__pctx *x, uint32_t limit,
		       uint32_t **cuts, uint32_t *ncuts)
{
	uint32_t n = x->n, c = 0;
	uint8_t *ok = malloc((size_t)n + 1);

	*cuts = malloc(((size_t)n + 1) * sizeof **cuts);
	if (*cuts == NULL || ok == NULL) {
		free(ok);
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	}
	memset(ok, 1, (size_t)n + 1);
	for (uint32_t a = 0; a < n;) {
		uint32_t b = a, best;

		if (!zero_layer(x, a)) {
			a++;
			continue;
		}
		while (b < n && zero_layer(x, b))
			b++;
		/* zero layers [a, b): positions a..b are equivalent */
		best = a;
		for (uint32_t q = a; q <= b; q++) {
			if (x->cut[q] < x->cut[best])
				best = q;
			ok[q] = 0;
		}
		if (a > 0 && b < n)
			ok[best] = 1;
		a = b;
	}
	(*cuts)[c++] = 0;
	for (uint32_t p = 1; p < n; p++)
		if (ok[p])
			(*cuts)[c++] = p;
	(*cuts)[c++] = n;
	/* keep the DP tractable on very deep profiles */
	*ncuts = dpl__coarsen(x, *cuts, c, limit);
	free(ok);
	return 0;
}
