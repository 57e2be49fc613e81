/*
 * mlp_optimizer.c - the reference model's step: SGD with momentum or Adam
 * with bias correction over a stage's parameters (the precision's update,
 * mlp_kernels.h), then the gradients are cleared and the last stage
 * publishes the iteration's loss.
 */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "mlp_internal.h"

int dpl__mlp_step(void *user, uint32_t stage, uint64_t iteration)
{
	dpl_mlp *m = user;
	struct mstage *s = NULL;
	int rc;

	if ((rc = dpl__mlp_find_stage(m, stage, &s)) != 0)
		return rc;
	s->steps++;
	m->k->update(m, s);
	memset(s->g, 0, s->nparams * m->k->esize);
	if (s->has_last) {
		s->loss_last = s->loss_acc;
		s->loss_acc = 0;
		s->stepped = true;
	}
	return 0;
}
