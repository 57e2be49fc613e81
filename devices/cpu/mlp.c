/*
 * mlp.c - the reference model: a multi-layer perceptron on CBLAS, split
 * into stages of contiguous layers, with the stage callbacks the runner
 * calls. All arithmetic is in double precision and in a fixed order, so a
 * given layout computes the same bits whatever the schedule.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include <dpl/device_cpu.h>

/* One held stage. Per slot and layer: z (pre-activation), a (post-
 * activation, kept for layers feeding another layer of the stage), dz. */
struct mstage {
	uint32_t stage;
	uint32_t l0, l1;    /* layers [l0, l1) */
	bool has_first;     /* holds layer 0 */
	bool has_last;      /* holds layer L-1 */
	uint32_t slots;
	size_t nparams;
	double *w;          /* parameters: W then b, layer by layer */
	double *g;          /* gradients, same layout */
	double *s1, *s2;    /* optimizer state (momentum; Adam m and v) */
	size_t *off;        /* [nl] offset of layer l0 + i's W in w */
	double **z, **a, **dz; /* [slot * nl + i] */
	double **x;         /* [slot] generated inputs (has_first) */
	double *da, *db;    /* scratch: gradients between layers */
	double *t;          /* scratch: one sample's MSE target */
	double *xs;         /* scratch: one sample's inputs */
	double loss_acc;
	double loss_last;
	bool stepped;
	uint64_t steps;
	struct dpl_buffer gbuf;
};

struct dpl_mlp {
	struct dpl_mlp_params p;
	uint32_t *widths;
	uint64_t max_samples;
	uint64_t batch;
	uint64_t dataset;
	uint32_t stages;
	uint32_t *sidx;     /* [stages] index into st, or UINT32_MAX */
	struct mstage *st;
	uint32_t nst;
	uint32_t *layer_st; /* [L] index into st, or UINT32_MAX */
};

/* ---- deterministic random numbers: counter-based, from a hash ---- */

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15u;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
	return x ^ (x >> 31);
}

static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c)
{
	return mix(mix(mix(a) ^ b) ^ c);
}

/* Uniform in (0, 1]. */
static double u01(uint64_t h)
{
	return ((double)(h >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

static double gauss(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t h = hash3(a, b, c);
	double u1 = u01(h), u2 = u01(mix(h));

	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#define SALT_DATA 0x64617461u
#define SALT_TEACHER 0x74656163u
#define SALT_INIT 0x696e6974u

void dpl_mlp_sample(const struct dpl_mlp_params *p, uint64_t k, double *x,
		    uint32_t *cls, double *t)
{
	uint32_t in = p->widths[0], out = p->widths[p->layers], c, i;
	double best = -INFINITY, v;

	for (i = 0; i < in; i++)
		x[i] = gauss(p->seed ^ SALT_DATA, k, i);
	for (c = 0; c < out; c++) {
		v = 0;
		for (i = 0; i < in; i++)
			v += gauss(p->seed ^ SALT_TEACHER, c, i) * x[i];
		v /= sqrt((double)in);
		if (p->loss == DPL_MLP_MSE) {
			t[c] = tanh(v);
		} else if (v > best) {
			best = v;
			*cls = c;
		}
	}
}

/* ---- setup ---- */

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
	uint32_t s;

	for (s = 0; s < stages; s++)
		out[s] = 8u * (uint64_t)p->widths[bounds[s + 1]];
}

static int check_params(const struct dpl_mlp_params *p,
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

static double init_weight(const struct dpl_mlp_params *p, uint32_t layer,
			  uint64_t idx, uint32_t fan_in)
{
	double k = sqrt(3.0 / fan_in);
	double u = u01(hash3(p->seed ^ SALT_INIT, layer, idx));

	return (2.0 * u - 1.0) * k;
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
	size_t n = 0, ms = m->max_samples, k;

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
	s->w = calloc(n, sizeof *s->w);
	s->g = calloc(n, sizeof *s->g);
	s->s1 = calloc(n, sizeof *s->s1);
	s->s2 = calloc(n, sizeof *s->s2);
	s->z = calloc((size_t)s->slots * nl, sizeof *s->z);
	s->a = calloc((size_t)s->slots * nl, sizeof *s->a);
	s->dz = calloc((size_t)s->slots * nl, sizeof *s->dz);
	s->da = calloc(ms * maxw, sizeof *s->da);
	s->db = calloc(ms * maxw, sizeof *s->db);
	s->t = calloc(wd[m->p.layers], sizeof *s->t);
	s->xs = calloc(wd[0], sizeof *s->xs);
	if (!s->w || !s->g || !s->s1 || !s->s2 || !s->z || !s->a || !s->dz ||
	    !s->da || !s->db || !s->t || !s->xs)
		return DPL_ENOMEM;
	for (i = 0; i < s->slots * nl; i++) {
		uint32_t out = wd[s->l0 + i % nl + 1];

		s->z[i] = calloc(ms * out, sizeof(double));
		s->a[i] = calloc(ms * out, sizeof(double));
		s->dz[i] = calloc(ms * out, sizeof(double));
		if (!s->z[i] || !s->a[i] || !s->dz[i])
			return DPL_ENOMEM;
	}
	if (s->has_first) {
		s->x = calloc(s->slots, sizeof *s->x);
		if (s->x == NULL)
			return DPL_ENOMEM;
		for (i = 0; i < s->slots; i++)
			if ((s->x[i] = calloc(ms * wd[0], sizeof(double))) ==
			    NULL)
				return DPL_ENOMEM;
	}
	for (l = s->l0; l < s->l1; l++) {
		double *w = s->w + s->off[l - s->l0];
		size_t nw = (size_t)wd[l + 1] * wd[l];

		for (k = 0; k < nw; k++)
			w[k] = init_weight(&m->p, l, k, wd[l]);
		/* biases start at 0 (calloc) */
	}
	s->gbuf.ptr = s->g;
	s->gbuf.count = n;
	s->gbuf.dtype = DPL_DTYPE_F64;
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

	if ((rc = check_params(p, l)) != 0)
		return rc;
	openblas_set_num_threads(1);
	m = calloc(1, sizeof *m);
	if (m == NULL)
		return dpl_set_error(DPL_ENOMEM, "mlp: out of memory");
	m->p = *p;
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
	if (m->p.lr == 0)
		m->p.lr = p->optimizer == DPL_MLP_ADAM ? 0.001 : 0.05;
	if (m->p.beta1 == 0)
		m->p.beta1 = 0.9;
	if (m->p.beta2 == 0)
		m->p.beta2 = 0.999;
	if (m->p.eps == 0)
		m->p.eps = 1e-8;
	m->max_samples = l->max_samples;
	m->batch = l->batch;
	m->dataset = p->dataset ? p->dataset : l->batch;
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

static int find_stage(dpl_mlp *m, uint32_t stage, struct mstage **out)
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

	if ((rc = find_stage(m, a->stage, &s)) != 0 ||
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

	if ((rc = find_stage(m, a->stage, &s)) != 0 ||
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

	if ((rc = find_stage(m, a->stage, &s)) != 0 ||
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

	if ((rc = find_stage(m, stage, &s)) != 0)
		return rc;
	*bufs = &s->gbuf;
	*n = 1;
	return 0;
}

static int mlp_step(void *user, uint32_t stage, uint64_t iteration)
{
	dpl_mlp *m = user;
	const struct dpl_mlp_params *p = &m->p;
	struct mstage *s = NULL;
	size_t i;
	int rc;

	if ((rc = find_stage(m, stage, &s)) != 0)
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

DPL_EXTERN const struct dpl_stage_ops dpl_mlp_stage_ops = {
	.abi_version = DPL_STAGE_ABI_VERSION,
	.size = sizeof(struct dpl_stage_ops),
	.name = "mlp",
	.forward = mlp_forward,
	.backward = mlp_backward,
	.backward_input = mlp_backward_input,
	.backward_weight = mlp_backward_weight,
	.grads = mlp_grads,
	.step = mlp_step,
};

/* ---- inspection ---- */

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

static int layer_of(const dpl_mlp *m, uint32_t layer, bool grad,
		    const double **w, size_t *nw, const double **b,
		    size_t *nb)
{
	const struct mstage *s;
	const double *p;
	size_t in, out;

	if (layer >= m->p.layers || m->layer_st[layer] == UINT32_MAX)
		return dpl_set_error(DPL_EINVAL,
					 "mlp: layer %u is not held here",
					 layer);
	s = &m->st[m->layer_st[layer]];
	in = m->widths[layer];
	out = m->widths[layer + 1];
	p = (grad ? s->g : s->w) + s->off[layer - s->l0];
	*w = p;
	*nw = in * out;
	*b = p + in * out;
	*nb = out;
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
	*out = n * m->max_samples * sizeof(double);
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
