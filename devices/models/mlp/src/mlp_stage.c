/*
 * mlp_stage.c - the reference model's layer math and the stage callbacks
 * the runner calls: forward (dense layers, activations, the loss on the
 * last stage), backward_input, backward_weight and the gradient buffers.
 * The step is the optimizer's (mlp_optimizer.c). All arithmetic is in
 * double precision and in a fixed order, so a given layout computes the
 * same bits whatever the schedule.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "mlp_internal.h"

/* ---- math ---- */

static double act(uint32_t kind, double z)
{
	if (kind == DPL_MLP_RELU)
		return z > 0 ? z : 0;
	return 0.5 * z *
	       (1.0 + tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
}

static double act_grad(uint32_t kind, double z)
{
	double u, th;

	if (kind == DPL_MLP_RELU)
		return z > 0 ? 1 : 0;
	u = 0.7978845608028654 * (z + 0.044715 * z * z * z);
	th = tanh(u);
	return 0.5 * (1.0 + th) + 0.5 * z * (1.0 - th * th) *
					  0.7978845608028654 *
					  (1.0 + 3.0 * 0.044715 * z * z);
}

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
	size_t in = (size_t)n * m->widths[s->l0] * 8u;
	size_t out = (size_t)n * m->widths[s->l1] * 8u;

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

/* Input of layer l0 + i for a slot. */
static const double *layer_input(struct mstage *s, uint32_t slot,
				 uint32_t i, const struct dpl_stage_args *a)
{
	uint32_t nl = s->l1 - s->l0;

	if (i > 0)
		return s->a[slot * nl + i - 1];
	return s->has_first ? s->x[slot] : a->input;
}

/* Loss of the last layer's z for n samples; writes dz, adds to loss. */
static void loss(dpl_mlp *m, struct mstage *s, const double *z, double *dz,
		 uint64_t n, const struct dpl_stage_args *a)
{
	uint32_t c, C = m->widths[m->p.layers], cls = 0;
	double *x = s->xs;
	double scale = 1.0 / (double)m->batch, sum = 0, mx, e, lse;
	uint64_t j, k;

	for (j = 0; j < n; j++) {
		const double *zj = z + j * C;
		double *dj = dz + j * C;

		k = (a->iteration * m->batch + a->begin + j) % m->dataset;
		dpl_mlp_sample(&m->p, k, x, &cls, s->t);
		if (m->p.loss == DPL_MLP_MSE) {
			double l = 0;

			for (c = 0; c < C; c++) {
				double d = zj[c] - s->t[c];

				l += d * d;
				dj[c] = 2.0 * d / C * scale;
			}
			sum += l / C;
			continue;
		}
		mx = zj[0];
		for (c = 1; c < C; c++)
			if (zj[c] > mx)
				mx = zj[c];
		e = 0;
		for (c = 0; c < C; c++)
			e += exp(zj[c] - mx);
		lse = mx + log(e);
		for (c = 0; c < C; c++)
			dj[c] = (exp(zj[c] - lse) - (c == cls ? 1.0 : 0.0)) *
				scale;
		sum += lse - zj[cls];
	}
	s->loss_acc += sum * scale;
}

static int mlp_forward(void *user, const struct dpl_stage_args *a)
{
	dpl_mlp *m = user;
	struct mstage *s = NULL;
	uint32_t nl, i, l, in, out;
	uint64_t n = a->end - a->begin, j, k;
	int rc;

	if ((rc = dpl__mlp_find_stage(m, a->stage, &s)) != 0 ||
	    (rc = check_args(m, s, a, false)) != 0)
		return rc;
	nl = s->l1 - s->l0;
	if (s->has_first) {
		uint32_t cls;

		for (j = 0; j < n; j++) {
			k = (a->iteration * m->batch + a->begin + j) %
			    m->dataset;
			dpl_mlp_sample(&m->p, k,
				       s->x[a->slot] + j * m->widths[0], &cls,
				       s->t);
		}
	}
	for (i = 0; i < nl; i++) {
		const double *x = layer_input(s, a->slot, i, a);
		const double *w = s->w + s->off[i];
		double *z = s->z[a->slot * nl + i], *y;

		l = s->l0 + i;
		in = m->widths[l];
		out = m->widths[l + 1];
		cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n,
			    (int)out, (int)in, 1.0, x, (int)in, w, (int)in,
			    0.0, z, (int)out);
		for (j = 0; j < n; j++)
			for (k = 0; k < out; k++)
				z[j * out + k] += w[(size_t)out * in + k];
		if (l + 1 == m->p.layers) {
			loss(m, s, z, s->dz[a->slot * nl + i], n, a);
			continue;
		}
		y = i + 1 == nl ? a->output : s->a[a->slot * nl + i];
		for (j = 0; j < n * out; j++)
			y[j] = act(m->p.activation, z[j]);
	}
	return 0;
}

/* backward_input: dz of every layer and the gradient of the input. */
static int mlp_backward_input(void *user, const struct dpl_stage_args *a)
{
	dpl_mlp *m = user;
	struct mstage *s = NULL;
	uint32_t nl, i, l, in, out;
	uint64_t n = a->end - a->begin, j;
	const double *up;
	int rc;

	if ((rc = dpl__mlp_find_stage(m, a->stage, &s)) != 0 ||
	    (rc = check_args(m, s, a, true)) != 0)
		return rc;
	nl = s->l1 - s->l0;
	up = a->grad_output; /* gradient of the stage output (or none) */
	for (i = nl; i-- > 0;) {
		const double *z = s->z[a->slot * nl + i];
		double *dz = s->dz[a->slot * nl + i], *dst;

		l = s->l0 + i;
		in = m->widths[l];
		out = m->widths[l + 1];
		if (l + 1 != m->p.layers)
			for (j = 0; j < n * out; j++)
				dz[j] = up[j] * act_grad(m->p.activation, z[j]);
		if (i == 0) {
			if (a->grad_input == NULL)
				break;
			dst = a->grad_input;
		} else {
			dst = (i % 2) ? s->da : s->db;
		}
		cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n,
			    (int)in, (int)out, 1.0, dz, (int)out,
			    s->w + s->off[i], (int)in, 0.0, dst, (int)in);
		up = dst;
	}
	return 0;
}

/* backward_weight: accumulate dW and db from the stored dz. */
static int mlp_backward_weight(void *user, const struct dpl_stage_args *a)
{
	dpl_mlp *m = user;
	struct mstage *s = NULL;
	uint32_t nl, i, l, in, out, k;
	uint64_t n = a->end - a->begin, j;
	int rc;

	if ((rc = dpl__mlp_find_stage(m, a->stage, &s)) != 0 ||
	    (rc = check_args(m, s, a, true)) != 0)
		return rc;
	nl = s->l1 - s->l0;
	for (i = nl; i-- > 0;) {
		const double *dz = s->dz[a->slot * nl + i];
		const double *x = layer_input(s, a->slot, i, a);
		double *g = s->g + s->off[i];

		l = s->l0 + i;
		in = m->widths[l];
		out = m->widths[l + 1];
		cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out,
			    (int)in, (int)n, 1.0, dz, (int)out, x, (int)in,
			    1.0, g, (int)in);
		for (j = 0; j < n; j++)
			for (k = 0; k < out; k++)
				g[(size_t)out * in + k] += dz[j * out + k];
	}
	return 0;
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
