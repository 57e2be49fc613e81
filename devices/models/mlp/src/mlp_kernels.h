/*
 * mlp_kernels.h - the reference model's arithmetic for one element type:
 * a template that mlp_kernels.c includes once per precision, after
 * defining
 *   MLP_T        the element type (double, float),
 *   MLP_SFX(x)   x with the precision's suffix (x##_f64),
 *   MLP_FN(f)    the libm function f of MLP_T (tanh, tanhf),
 *   MLP_GEMM     the CBLAS gemm of MLP_T (cblas_dgemm, cblas_sgemm),
 *   MLP_NAME     the precision's name ("f64"),
 *   MLP_DTYPE    its enum dpl_dtype (DPL_DTYPE_F64).
 * It defines the static functions of a struct mkernels, MLP_SFX(kernels)
 * pointing at them, and undefines the six macros. Every constant is
 * rounded to MLP_T, so the f64 instance is the model's double arithmetic
 * as it always was, operation for operation.
 */

#define MLP_K(x) ((MLP_T)(x))

static MLP_T MLP_SFX(act)(uint32_t kind, MLP_T z)
{
	if (kind == DPL_MLP_RELU)
		return z > 0 ? z : 0;
	return MLP_K(0.5) * z *
	       (MLP_K(1.0) +
		MLP_FN(tanh)(MLP_K(0.7978845608028654) *
			     (z + MLP_K(0.044715) * z * z * z)));
}

static MLP_T MLP_SFX(act_grad)(uint32_t kind, MLP_T z)
{
	MLP_T u, th;

	if (kind == DPL_MLP_RELU)
		return z > 0 ? 1 : 0;
	u = MLP_K(0.7978845608028654) * (z + MLP_K(0.044715) * z * z * z);
	th = MLP_FN(tanh)(u);
	return MLP_K(0.5) * (MLP_K(1.0) + th) +
	       MLP_K(0.5) * z * (MLP_K(1.0) - th * th) *
		       MLP_K(0.7978845608028654) *
		       (MLP_K(1.0) + MLP_K(3.0) * MLP_K(0.044715) * z * z);
}

static void MLP_SFX(init)(dpl_mlp *m, struct mstage *s)
{
	const uint32_t *wd = m->widths;
	size_t nw, k;
	uint32_t l;

	for (l = s->l0; l < s->l1; l++) {
		MLP_T *w = (MLP_T *)s->w + s->off[l - s->l0];

		nw = (size_t)wd[l + 1] * wd[l];
		for (k = 0; k < nw; k++)
			w[k] = (MLP_T)dpl__mlp_init_weight(&m->p, l, k, wd[l]);
	}
}

/* Loss of the last layer's z for n samples; writes dz, adds to loss. */
static void MLP_SFX(loss)(dpl_mlp *m, struct mstage *s, const MLP_T *z,
			  MLP_T *dz, uint64_t n,
			  const struct dpl_stage_args *a)
{
	uint32_t c, C = m->widths[m->p.layers], cls = 0;
	MLP_T scale = MLP_K(1.0) / (MLP_T)m->batch, sum = 0, mx, e, lse;
	uint64_t j, k;

	for (j = 0; j < n; j++) {
		const MLP_T *zj = z + j * C;
		MLP_T *dj = dz + j * C;

		k = (a->iteration * m->batch + a->begin + j) % m->dataset;
		dpl_mlp_sample(&m->p, k, s->xs, &cls, s->t);
		if (m->p.loss == DPL_MLP_MSE) {
			MLP_T l = 0;

			for (c = 0; c < C; c++) {
				MLP_T d = zj[c] - (MLP_T)s->t[c];

				l += d * d;
				dj[c] = MLP_K(2.0) * d / (MLP_T)C * scale;
			}
			sum += l / (MLP_T)C;
			continue;
		}
		mx = zj[0];
		for (c = 1; c < C; c++)
			if (zj[c] > mx)
				mx = zj[c];
		e = 0;
		for (c = 0; c < C; c++)
			e += MLP_FN(exp)(zj[c] - mx);
		lse = mx + MLP_FN(log)(e);
		for (c = 0; c < C; c++)
			dj[c] = (MLP_FN(exp)(zj[c] - lse) -
				 (c == cls ? MLP_K(1.0) : MLP_K(0.0))) *
				scale;
		sum += lse - zj[cls];
	}
	s->loss_acc += (double)(sum * scale);
}

static void MLP_SFX(forward)(dpl_mlp *m, struct mstage *s,
			     const struct dpl_stage_args *a)
{
	uint32_t nl = s->l1 - s->l0, i, l, in, out, w0 = m->widths[0];
	uint64_t n = a->end - a->begin, j, k;

	for (j = 0; s->has_first && j < n; j++) {
		MLP_T *xj = (MLP_T *)s->x[a->slot] + j * w0;
		uint32_t cls;

		k = (a->iteration * m->batch + a->begin + j) % m->dataset;
		dpl_mlp_sample(&m->p, k, s->xs, &cls, s->t);
		for (i = 0; i < w0; i++)
			xj[i] = (MLP_T)s->xs[i];
	}
	for (i = 0; i < nl; i++) {
		const MLP_T *x = dpl__mlp_layer_input(s, a->slot, i, a);
		const MLP_T *w = (const MLP_T *)s->w + s->off[i];
		MLP_T *z = s->z[a->slot * nl + i], *y;

		l = s->l0 + i;
		in = m->widths[l];
		out = m->widths[l + 1];
		MLP_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n,
			 (int)out, (int)in, MLP_K(1.0), x, (int)in, w, (int)in,
			 MLP_K(0.0), z, (int)out);
		for (j = 0; j < n; j++)
			for (k = 0; k < out; k++)
				z[j * out + k] += w[(size_t)out * in + k];
		if (l + 1 == m->p.layers) {
			MLP_SFX(loss)(m, s, z, s->dz[a->slot * nl + i], n, a);
			continue;
		}
		y = i + 1 == nl ? a->output : s->a[a->slot * nl + i];
		for (j = 0; j < n * out; j++)
			y[j] = MLP_SFX(act)(m->p.activation, z[j]);
	}
}

static void MLP_SFX(backward_input)(dpl_mlp *m, struct mstage *s,
				    const struct dpl_stage_args *a)
{
	uint32_t nl = s->l1 - s->l0, i, l, in, out;
	uint64_t n = a->end - a->begin, j;
	/* The gradient of the stage output (none on the last stage). */
	const MLP_T *up = a->grad_output;

	for (i = nl; i-- > 0;) {
		const MLP_T *z = s->z[a->slot * nl + i];
		MLP_T *dz = s->dz[a->slot * nl + i], *dst;

		l = s->l0 + i;
		in = m->widths[l];
		out = m->widths[l + 1];
		if (l + 1 != m->p.layers)
			for (j = 0; j < n * out; j++)
				dz[j] = up[j] *
					MLP_SFX(act_grad)(m->p.activation,
							  z[j]);
		if (i == 0) {
			if (a->grad_input == NULL)
				break;
			dst = a->grad_input;
		} else {
			dst = (i % 2) ? s->da : s->db;
		}
		MLP_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n,
			 (int)in, (int)out, MLP_K(1.0), dz, (int)out,
			 (const MLP_T *)s->w + s->off[i], (int)in, MLP_K(0.0),
			 dst, (int)in);
		up = dst;
	}
}

static void MLP_SFX(backward_weight)(dpl_mlp *m, struct mstage *s,
				     const struct dpl_stage_args *a)
{
	uint32_t nl = s->l1 - s->l0, i, l, in, out, k;
	uint64_t n = a->end - a->begin, j;

	for (i = nl; i-- > 0;) {
		const MLP_T *dz = s->dz[a->slot * nl + i];
		const MLP_T *x = dpl__mlp_layer_input(s, a->slot, i, a);
		MLP_T *g = (MLP_T *)s->g + s->off[i];

		l = s->l0 + i;
		in = m->widths[l];
		out = m->widths[l + 1];
		MLP_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out,
			 (int)in, (int)n, MLP_K(1.0), dz, (int)out, x, (int)in,
			 MLP_K(1.0), g, (int)in);
		for (j = 0; j < n; j++)
			for (k = 0; k < out; k++)
				g[(size_t)out * in + k] += dz[j * out + k];
	}
}

static void MLP_SFX(update)(dpl_mlp *m, struct mstage *s)
{
	const struct dpl_mlp_params *p = &m->p;
	MLP_T *w = s->w, *s1 = s->s1, *s2 = s->s2;
	const MLP_T *g = s->g;
	MLP_T lr = (MLP_T)p->lr;
	size_t i;

	if (p->optimizer == DPL_MLP_SGD) {
		MLP_T mom = (MLP_T)p->momentum;

		for (i = 0; i < s->nparams; i++) {
			s1[i] = mom * s1[i] + g[i];
			w[i] -= lr * s1[i];
		}
	} else {
		/* The bias corrections in double, then rounded. */
		MLP_T c1 = (MLP_T)(1.0 - pow(p->beta1, (double)s->steps));
		MLP_T c2 = (MLP_T)(1.0 - pow(p->beta2, (double)s->steps));
		MLP_T b1 = (MLP_T)p->beta1, b2 = (MLP_T)p->beta2;
		MLP_T eps = (MLP_T)p->eps;

		for (i = 0; i < s->nparams; i++) {
			MLP_T gi = g[i];

			s1[i] = b1 * s1[i] + (1 - b1) * gi;
			s2[i] = b2 * s2[i] + (1 - b2) * gi * gi;
			w[i] -= lr * (s1[i] / c1) /
				(MLP_FN(sqrt)(s2[i] / c2) + eps);
		}
	}
}

const struct mkernels MLP_SFX(dpl__mlp_kernels) = {
	.name = MLP_NAME,
	.esize = sizeof(MLP_T),
	.dtype = MLP_DTYPE,
	.init = MLP_SFX(init),
	.forward = MLP_SFX(forward),
	.backward_input = MLP_SFX(backward_input),
	.backward_weight = MLP_SFX(backward_weight),
	.update = MLP_SFX(update),
};

#undef MLP_K
#undef MLP_T
#undef MLP_SFX
#undef MLP_FN
#undef MLP_GEMM
#undef MLP_NAME
#undef MLP_DTYPE
