/*
 * mlp_stage.c - the stage callbacks the runner calls: forward (dense
 * layers, activations, the loss on the last stage), backward_input,
 * backward_weight and the gradient buffers. They check their arguments
 * and run the arithmetic of the model's precision (mlp_kernels.c). The
 * step is the optimizer's (mlp_optimizer.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stddef.h>

#include "mlp_internal.h"

int dpl__mlp_find_stage(dpl_mlp *m, uint32_t stage, struct mstage **out)
{
	if (stage >= m->stages || m->sidx[stage] == UINT32_MAX)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: stage %u is not held here",
					 stage);
	*out = &m->st[m->sidx[stage]];
	return 0;
}

static int check_args(dpl_mlp *m, struct mstage *s,
		      const struct dpl_stage_args *a, bool backward)
{
	uint64_t n = a->end - a->begin;
	size_t in = (size_t)n * m->widths[s->l0] * m->k->esize;
	size_t out = (size_t)n * m->widths[s->l1] * m->k->esize;

	if (a->end < a->begin || n > m->max_samples)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: stage %u: %llu samples > %llu",
					 s->stage, (unsigned long long)n,
					 (unsigned long long)m->max_samples);
	if (a->slot >= s->slots)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: stage %u: slot %u >= %u",
					 s->stage, a->slot, s->slots);
	if (!s->has_first && (a->input == NULL || a->input_bytes != in))
		return dpl_set_error(DPL_EINVAL,
					 "mlp: stage %u: input of %zu bytes, "
					 "expected %zu", s->stage,
					 a->input_bytes, in);
	if (!s->has_last && !backward &&
	    (a->output == NULL || a->output_bytes != out))
		return dpl_set_error(DPL_EINVAL,
					 "mlp: stage %u: output of %zu bytes, "
					 "expected %zu", s->stage,
					 a->output_bytes, out);
	if (!s->has_last && backward &&
	    (a->grad_output == NULL || a->grad_output_bytes != out))
		return dpl_set_error(DPL_EINVAL,
					 "mlp: stage %u: grad_output of %zu "
					 "bytes, expected %zu", s->stage,
					 a->grad_output_bytes, out);
	if (!s->has_first && backward && a->grad_input != NULL &&
	    a->grad_input_bytes != in)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: stage %u: grad_input of %zu "
					 "bytes, expected %zu", s->stage,
					 a->grad_input_bytes, in);
	return 0;
}

/* A callback's common part: find the stage, check the arguments, then
 * the precision's arithmetic `fn`. */
static int run(void *user, const struct dpl_stage_args *a, bool backward,
	       void (*fn)(struct dpl_mlp *, struct mstage *,
			  const struct dpl_stage_args *))
{
	dpl_mlp *m = user;
	struct mstage *s = NULL;
	int rc;

	if ((rc = dpl__mlp_find_stage(m, a->stage, &s)) != 0 ||
	    (rc = check_args(m, s, a, backward)) != 0)
		return rc;
	fn(m, s, a);
	return 0;
}

static int mlp_forward(void *user, const struct dpl_stage_args *a)
{
	return run(user, a, false, ((dpl_mlp *)user)->k->forward);
}

/* backward_input: dz of every layer and the gradient of the input. */
static int mlp_backward_input(void *user, const struct dpl_stage_args *a)
{
	return run(user, a, true, ((dpl_mlp *)user)->k->backward_input);
}

/* backward_weight: accumulate dW and db from the stored dz. */
static int mlp_backward_weight(void *user, const struct dpl_stage_args *a)
{
	return run(user, a, true, ((dpl_mlp *)user)->k->backward_weight);
}

static int mlp_backward(void *user, const struct dpl_stage_args *a)
{
	int rc = mlp_backward_input(user, a);

	return rc != 0 ? rc : mlp_backward_weight(user, a);
}

static int mlp_grads(void *user, uint32_t stage,
		     const struct dpl_buffer **bufs, size_t *n)
{
	dpl_mlp *m = user;
	struct mstage *s = NULL;
	int rc;

	if ((rc = dpl__mlp_find_stage(m, stage, &s)) != 0)
		return rc;
	*bufs = &s->gbuf;
	*n = 1;
	return 0;
}

DPL_EXTERN const struct dpl_stage_ops dpl_mlp_stage_ops = {
	.abi_version = DPL_STAGE_ABI_VERSION,
	.size = sizeof(struct dpl_stage_ops),
	.name = "mlp",
	.forward = mlp_forward,
	.backward = mlp_backward,
	.backward_input = mlp_backward_input,
	.backward_weight = mlp_backward_weight,
	.grads = mlp_grads,
	.step = dpl__mlp_step,
};
