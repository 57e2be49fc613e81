/*
 * mlp_create.c - the reference model's setup: parameter checks, stage
 * bounds, allocation and seeded initialisation of the held stages.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "mlp_internal.h"

int dpl_mlp_bounds(uint32_t layers, uint32_t stages, uint32_t *bounds)
{
	uint64_t b, e;
	uint32_t s;

	if (stages == 0 || stages > layers)
		return dpl_set_error(DPL_EINVAL,
					 "cannot split %u layers into %u "
					 "stages (each stage needs a layer)",
					 layers, stages);
	for (s = 0; s < stages; s++) {
		dpl_split(layers, stages, s, &b, &e);
		bounds[s] = (uint32_t)b;
	}
	bounds[stages] = layers;
	return 0;
}

void dpl_mlp_activation_bytes(const struct dpl_mlp_params *p,
			      const uint32_t *bounds, uint32_t stages,
			      uint64_t *out)
{
	uint64_t e = p->precision == DPL_MLP_F32 ? sizeof(float)
						  : sizeof(double);
	uint32_t s;

	for (s = 0; s < stages; s++)
		out[s] = e * p->widths[bounds[s + 1]];
}

int dpl__mlp_check_params(const struct dpl_mlp_params *p,
			   const struct dpl_mlp_layout *l)
{
	uint32_t i;

	if (p == NULL || l == NULL)
		return dpl_set_error(DPL_EINVAL, "mlp: params are NULL");
	if (p->layers == 0 || p->widths == NULL)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: layers must be >= 1 (got %u)",
					 p->layers);
	for (i = 0; i <= p->layers; i++)
		if (p->widths[i] == 0 || p->widths[i] > (1u << 20))
			return dpl_set_error(DPL_EINVAL,
						 "mlp: width %u is %u (must "
						 "be 1..2^20)", i,
						 p->widths[i]);
	if (p->activation > DPL_MLP_GELU)
		return dpl_set_error(DPL_EINVAL, "mlp: activation %u",
					 p->activation);
	if (p->loss > DPL_MLP_MSE)
		return dpl_set_error(DPL_EINVAL, "mlp: loss %u", p->loss);
	if (p->optimizer > DPL_MLP_ADAM)
		return dpl_set_error(DPL_EINVAL, "mlp: optimizer %u",
					 p->optimizer);
	if (p->precision > DPL_MLP_F32)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: precision %u (must be "
					 "DPL_MLP_F64 = 0 or DPL_MLP_F32 = 1)",
					 p->precision);
	if (!(p->lr >= 0) || !isfinite(p->lr) || !(p->momentum >= 0) ||
	    !(p->momentum < 1) || !(p->beta1 >= 0) || !(p->beta1 < 1) ||
	    !(p->beta2 >= 0) || !(p->beta2 < 1) || !(p->eps >= 0) ||
	    !isfinite(p->eps))
		return dpl_set_error(DPL_EINVAL,
					 "mlp: lr %g, momentum %g, betas %g "
					 "%g, eps %g out of range", p->lr,
					 p->momentum, p->beta1, p->beta2,
					 p->eps);
	if (l->stages == 0 || l->bounds == NULL)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: layout has no stages");
	if (l->bounds[0] != 0 || l->bounds[l->stages] != p->layers)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: bounds must run from 0 to %u "
					 "layers (got %u..%u)", p->layers,
					 l->bounds[0], l->bounds[l->stages]);
	for (i = 0; i < l->stages; i++)
		if (l->bounds[i + 1] <= l->bounds[i])
			return dpl_set_error(DPL_EINVAL,
						 "mlp: stage %u has no layers "
						 "(bounds %u..%u)", i,
						 l->bounds[i],
						 l->bounds[i + 1]);
	if (l->max_samples == 0 || l->batch == 0)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: max_samples and batch must be "
					 ">= 1");
	if (l->max_samples > (1u << 24))
		return dpl_set_error(DPL_EINVAL,
					 "mlp: max_samples %llu too large",
					 (unsigned long long)l->max_samples);
	return 0;
}

uint64_t dpl__mlp_defaults(struct dpl_mlp_params *p,
			   const struct dpl_mlp_layout *l)
{
	if (p->lr == 0)
		p->lr = p->optimizer == DPL_MLP_ADAM ? 0.001 : 0.05;
	if (p->beta1 == 0)
		p->beta1 = 0.9;
	if (p->beta2 == 0)
		p->beta2 = 0.999;
	if (p->eps == 0)
		p->eps = 1e-8;
	return p->dataset ? p->dataset : l->batch;
}

static void stage_free(struct mstage *s)
{
	uint32_t i, nl = s->l1 - s->l0;

	for (i = 0; s->z && i < s->slots * nl; i++) {
		free(s->z[i]);
		free(s->a[i]);
		free(s->dz[i]);
	}
	for (i = 0; s->x && i < s->slots; i++)
		free(s->x[i]);
	free(s->z);
	free(s->a);
	free(s->dz);
	free(s->x);
	free(s->w);
	free(s->g);
	free(s->s1);
	free(s->s2);
	free(s->off);
	free(s->da);
	free(s->db);
	free(s->t);
	free(s->xs);
}

static int stage_init(dpl_mlp *m, struct mstage *s)
{
	const uint32_t *wd = m->widths;
	uint32_t nl = s->l1 - s->l0, i, maxw = 0, l;
	size_t n = 0, ms = m->max_samples, e = m->k->esize;

	s->off = calloc(nl, sizeof *s->off);
	if (s->off == NULL)
		return DPL_ENOMEM;
	for (l = s->l0; l < s->l1; l++) {
		s->off[l - s->l0] = n;
		n += (size_t)wd[l + 1] * wd[l] + wd[l + 1];
		if (wd[l] > maxw)
			maxw = wd[l];
		if (wd[l + 1] > maxw)
			maxw = wd[l + 1];
	}
	s->nparams = n;
	s->w = calloc(n, e);
	s->g = calloc(n, e);
	s->s1 = calloc(n, e);
	s->s2 = calloc(n, e);
	s->z = calloc((size_t)s->slots * nl, sizeof *s->z);
	s->a = calloc((size_t)s->slots * nl, sizeof *s->a);
	s->dz = calloc((size_t)s->slots * nl, sizeof *s->dz);
	s->da = calloc(ms * maxw, e);
	s->db = calloc(ms * maxw, e);
	s->t = calloc(wd[m->p.layers], sizeof *s->t);
	s->xs = calloc(wd[0], sizeof *s->xs);
	if (!s->w || !s->g || !s->s1 || !s->s2 || !s->z || !s->a || !s->dz ||
	    !s->da || !s->db || !s->t || !s->xs)
		return DPL_ENOMEM;
	for (i = 0; i < s->slots * nl; i++) {
		uint32_t out = wd[s->l0 + i % nl + 1];

		s->z[i] = calloc(ms * out, e);
		s->a[i] = calloc(ms * out, e);
		s->dz[i] = calloc(ms * out, e);
		if (!s->z[i] || !s->a[i] || !s->dz[i])
			return DPL_ENOMEM;
	}
	if (s->has_first) {
		s->x = calloc(s->slots, sizeof *s->x);
		if (s->x == NULL)
			return DPL_ENOMEM;
		for (i = 0; i < s->slots; i++)
			if ((s->x[i] = calloc(ms * wd[0], e)) == NULL)
				return DPL_ENOMEM;
	}
	m->k->init(m, s); /* biases start at 0 (calloc) */
	s->gbuf.ptr = s->g;
	s->gbuf.count = n;
	s->gbuf.dtype = m->k->dtype;
	s->gbuf.mem = DPL_MEM_HOST;
	return 0;
}

void dpl_mlp_destroy(dpl_mlp *m)
{
	uint32_t i;

	if (m == NULL)
		return;
	for (i = 0; m->st && i < m->nst; i++)
		stage_free(&m->st[i]);
	free(m->st);
	free(m->sidx);
	free(m->layer_st);
	free(m->widths);
	free(m);
}

int dpl_mlp_create(const struct dpl_mlp_params *p,
		   const struct dpl_mlp_layout *l, dpl_mlp **out)
{
	dpl_mlp *m;
	uint32_t s, i;
	int rc;

	if ((rc = dpl__mlp_check_params(p, l)) != 0)
		return rc;
	openblas_set_num_threads(1);
	m = calloc(1, sizeof *m);
	if (m == NULL)
		return dpl_set_error(DPL_ENOMEM, "mlp: out of memory");
	m->p = *p;
	m->k = p->precision == DPL_MLP_F32 ? &dpl__mlp_kernels_f32
					   : &dpl__mlp_kernels_f64;
	m->widths = malloc((p->layers + 1) * sizeof *m->widths);
	m->sidx = malloc(l->stages * sizeof *m->sidx);
	m->layer_st = malloc(p->layers * sizeof *m->layer_st);
	m->st = calloc(l->stages, sizeof *m->st);
	if (!m->widths || !m->sidx || !m->layer_st || !m->st) {
		dpl_mlp_destroy(m);
		return dpl_set_error(DPL_ENOMEM, "mlp: out of memory");
	}
	memcpy(m->widths, p->widths, (p->layers + 1) * sizeof *m->widths);
	m->p.widths = m->widths;
	m->dataset = dpl__mlp_defaults(&m->p, l);
	m->max_samples = l->max_samples;
	m->batch = l->batch;
	m->stages = l->stages;
	for (i = 0; i < p->layers; i++)
		m->layer_st[i] = UINT32_MAX;
	for (s = 0; s < l->stages; s++) {
		struct mstage *st;

		m->sidx[s] = UINT32_MAX;
		if (l->local != NULL && !l->local[s])
			continue;
		m->sidx[s] = m->nst;
		st = &m->st[m->nst++];
		st->stage = s;
		st->l0 = l->bounds[s];
		st->l1 = l->bounds[s + 1];
		st->has_first = st->l0 == 0;
		st->has_last = st->l1 == p->layers;
		st->slots = l->slots ? l->slots[s] : 1;
		if (st->slots == 0)
			st->slots = 1;
		for (i = st->l0; i < st->l1; i++)
			m->layer_st[i] = m->sidx[s];
		if (stage_init(m, st) != 0) {
			dpl_mlp_destroy(m);
			return dpl_set_error(DPL_ENOMEM,
						 "mlp: out of memory for "
						 "stage %u", s);
		}
	}
	*out = m;
	return 0;
}
