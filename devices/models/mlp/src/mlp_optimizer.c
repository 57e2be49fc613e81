/*
 * mlp_optimizer.c - the reference model's step: SGD with momentum or Adam
 * with bias correction over a stage's parameters, then the gradients are
 * cleared and the last stage publishes the iteration's loss.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include "mlp_internal.h"

int dpl__mlp_step(void *user, uint32_t stage, uint64_t iteration)
{
	dpl_mlp *m = user;
	const struct dpl_mlp_params *p = &m->p;
	struct mstage *s = NULL;
	size_t i;
	int rc;

	if ((rc = dpl__mlp_find_stage(m, stage, &s)) != 0)
		return rc;
	s->steps++;
	if (p->optimizer == DPL_MLP_SGD) {
		for (i = 0; i < s->nparams; i++) {
			s->s1[i] = p->momentum * s->s1[i] + s->g[i];
			s->w[i] -= p->lr * s->s1[i];
		}
	} else {
		double c1 = 1.0 - pow(p->beta1, (double)s->steps);
		double c2 = 1.0 - pow(p->beta2, (double)s->steps);

		for (i = 0; i < s->nparams; i++) {
			double g = s->g[i];

			s->s1[i] = p->beta1 * s->s1[i] + (1 - p->beta1) * g;
			s->s2[i] = p->beta2 * s->s2[i] + (1 - p->beta2) * g * g;
			s->w[i] -= p->lr * (s->s1[i] / c1) /
				   (sqrt(s->s2[i] / c2) + p->eps);
		}
	}
	memset(s->g, 0, s->nparams * sizeof *s->g);
	if (s->has_last) {
		s->loss_last = s->loss_acc;
		s->loss_acc = 0;
		s->stepped = true;
	}
	return 0;
}
