/*
 * mlp_inspect.c - what the reference model shows tools and tests: the
 * last iteration's loss, its element type, a layer's weights and
 * gradients (as doubles, or as a view in the model's own type), and the
 * activation memory a stage keeps per micro-batch.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>

#include "mlp_internal.h"

int dpl_mlp_loss(const dpl_mlp *m, double *out)
{
	uint32_t i;

	for (i = 0; i < m->nst; i++)
		if (m->st[i].has_last) {
			if (!m->st[i].stepped)
				return dpl_set_error(DPL_EINVAL,
							 "mlp: no step ran "
							 "yet");
			*out = m->st[i].loss_last;
			return 0;
		}
	return dpl_set_error(DPL_EINVAL,
				 "mlp: the last layer is not held here");
}

static int view_of(const dpl_mlp *m, uint32_t layer, bool grad,
		   struct dpl_mlp_view *out)
{
	const struct mstage *s;
	const char *p;
	size_t in, out_w, e = m->k->esize;

	if (layer >= m->p.layers || m->layer_st[layer] == UINT32_MAX)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: layer %u is not held here",
					 layer);
	s = &m->st[m->layer_st[layer]];
	in = m->widths[layer];
	out_w = m->widths[layer + 1];
	p = (const char *)(grad ? s->g : s->w) + s->off[layer - s->l0] * e;
	out->w = p;
	out->nw = in * out_w;
	out->b = p + in * out_w * e;
	out->nb = out_w;
	out->dtype = m->k->dtype;
	return 0;
}

/* The doubles of an f64 model's layer, or DPL_EINVAL naming the
 * precision. */
static int layer_of(const dpl_mlp *m, uint32_t layer, bool grad,
		    const double **w, size_t *nw, const double **b,
		    size_t *nb)
{
	struct dpl_mlp_view v;
	int rc;

	if (m->k->dtype != DPL_DTYPE_F64)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: layer %u: the model is %s, "
					 "not f64: %s hands out doubles (use "
					 "%s)", layer, m->k->name,
					 grad ? "dpl_mlp_layer_grad"
					      : "dpl_mlp_layer",
					 grad ? "dpl_mlp_layer_grad_view"
					      : "dpl_mlp_layer_view");
	if ((rc = view_of(m, layer, grad, &v)) != 0)
		return rc;
	*w = v.w;
	*nw = v.nw;
	*b = v.b;
	*nb = v.nb;
	return 0;
}

int dpl_mlp_stage_bytes(const dpl_mlp *m, uint32_t stage, uint64_t *out)
{
	const struct mstage *s;
	uint64_t n = 0;
	uint32_t l;

	if (stage >= m->stages || m->sidx[stage] == UINT32_MAX)
		return dpl_set_error(DPL_EINVAL,
				     "mlp: stage %u is not held here", stage);
	s = &m->st[m->sidx[stage]];
	for (l = s->l0; l < s->l1; l++)
		n += 3u * (uint64_t)m->widths[l + 1];
	if (s->has_first)
		n += m->widths[0];
	*out = n * m->max_samples * m->k->esize;
	return 0;
}

int dpl_mlp_layer(const dpl_mlp *m, uint32_t layer, const double **w,
		  size_t *nw, const double **b, size_t *nb)
{
	return layer_of(m, layer, false, w, nw, b, nb);
}

int dpl_mlp_layer_grad(const dpl_mlp *m, uint32_t layer, const double **w,
		       size_t *nw, const double **b, size_t *nb)
{
	return layer_of(m, layer, true, w, nw, b, nb);
}

enum dpl_dtype dpl_mlp_dtype(const dpl_mlp *m)
{
	return m->k->dtype;
}

int dpl_mlp_layer_view(const dpl_mlp *m, uint32_t layer,
		       struct dpl_mlp_view *out)
{
	return view_of(m, layer, false, out);
}

int dpl_mlp_layer_grad_view(const dpl_mlp *m, uint32_t layer,
			    struct dpl_mlp_view *out)
{
	return view_of(m, layer, true, out);
}
