/*
 * mlp_cuda_stage.c - the GPU model's stage callbacks: the CPU model's
 * forward, backward_input, backward_weight and step (mlp_kernels.h) with
 * each CBLAS row-major GEMM as the cuBLAS column-major GEMM of the
 * transposed product, and the element-wise parts in mlp_cuda_kernels.cu.
 * Arguments are checked on the host before anything is queued; the work
 * goes on the device's stream and no callback waits for it.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "mlp_cuda_model.h"

/* Column-major C = op(A) op(B) + beta C, alpha 1, in the model's type. */
static int gemm(dpl_mlp_cuda *m, cublasOperation_t ta, cublasOperation_t tb,
		uint64_t M, uint64_t N, uint64_t K, const void *A, uint64_t lda,
		const void *B, uint64_t ldb, int beta, void *C, uint64_t ldc)
{
	cublasStatus_t st;

	if (m->f32) {
		float one = 1.0f, b = (float)beta;

		st = cublasSgemm(m->blas, ta, tb, (int)M, (int)N, (int)K, &one,
				 A, (int)lda, B, (int)ldb, &b, C, (int)ldc);
		return dpl__mlpc_blas_err("cublasSgemm", st);
	} else {
		double one = 1.0, b = (double)beta;

		st = cublasDgemm(m->blas, ta, tb, (int)M, (int)N, (int)K, &one,
				 A, (int)lda, B, (int)ldb, &b, C, (int)ldc);
		return dpl__mlpc_blas_err("cublasDgemm", st);
	}
}

static void *at(const dpl_mlp_cuda *m, const void *p, size_t values)
{
	return (char *)p + values * m->esize;
}

static const void *layer_input(const struct cstage *s, uint32_t slot,
			       uint32_t i, const struct dpl_stage_args *a)
{
	uint32_t nl = s->l1 - s->l0;

	if (i > 0)
		return s->a[slot * nl + i - 1];
	return s->has_first ? s->x[slot] : a->input;
}

/* As the CPU model's check_args (mlp_stage.c). */
static int check_args(dpl_mlp_cuda *m, struct cstage *s,
		      const struct dpl_stage_args *a, bool backward)
{
	uint64_t n = a->end - a->begin;
	size_t in = (size_t)n * m->widths[s->l0] * m->esize;
	size_t out = (size_t)n * m->widths[s->l1] * m->esize;

	if (a->end < a->begin || n > m->max_samples)
		return dpl_set_error(DPL_EINVAL,
				     "mlp cuda: stage %u: %llu samples > %llu",
				     s->stage, (unsigned long long)n,
				     (unsigned long long)m->max_samples);
	if (a->slot >= s->slots)
		return dpl_set_error(DPL_EINVAL,
				     "mlp cuda: stage %u: slot %u >= %u",
				     s->stage, a->slot, s->slots);
	if (!s->has_first && (a->input == NULL || a->input_bytes != in))
		return dpl_set_error(DPL_EINVAL, "mlp cuda: stage %u: input "
				     "of %zu bytes, expected %zu", s->stage,
				     a->input_bytes, in);
	if (!s->has_last && !backward &&
	    (a->output == NULL || a->output_bytes != out))
		return dpl_set_error(DPL_EINVAL, "mlp cuda: stage %u: output "
				     "of %zu bytes, expected %zu", s->stage,
				     a->output_bytes, out);
	if (!s->has_last && backward &&
	    (a->grad_output == NULL || a->grad_output_bytes != out))
		return dpl_set_error(DPL_EINVAL, "mlp cuda: stage %u: "
				     "grad_output of %zu bytes, expected %zu",
				     s->stage, a->grad_output_bytes, out);
	if (!s->has_first && backward && a->grad_input != NULL &&
	    a->grad_input_bytes != in)
		return dpl_set_error(DPL_EINVAL, "mlp cuda: stage %u: "
				     "grad_input of %zu bytes, expected %zu",
				     s->stage, a->grad_input_bytes, in);
	return 0;
}

static int forward(dpl_mlp_cuda *m, struct cstage *s,
		   const struct dpl_stage_args *a)
{
	uint32_t nl = s->l1 - s->l0, i, l, in, out;
	uint64_t n = a->end - a->begin;
	uint64_t base = a->iteration * m->batch + a->begin;
	int rc = 0;

	if (s->has_first)
		rc = dpl__mlpc_gather(m->stream, m->f32, s->x[a->slot],
				      m->data_x, base, m->dataset, n,
				      m->widths[0]);
	for (i = 0; rc == 0 && i < nl; i++) {
		const void *w = at(m, s->w, s->off[i]);
		void *z = s->z[a->slot * nl + i], *y;

		l = s->l0 + i;
		in = m->widths[l];
		out = m->widths[l + 1];
		rc = gemm(m, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, in,
			  layer_input(s, a->slot, i, a), in, 0, z, out);
		if (rc != 0)
			break;
		y = l + 1 == m->p.layers ? NULL
		    : i + 1 == nl	 ? a->output
					 : s->a[a->slot * nl + i];
		rc = dpl__mlpc_bias_act(m->stream, m->f32, z,
					at(m, w, (size_t)out * in), y,
					m->p.activation, n, out);
		if (rc == 0 && l + 1 == m->p.layers)
			rc = dpl__mlpc_loss(m->stream, m->f32,
					    m->p.loss == DPL_MLP_MSE, z,
					    s->dz[a->slot * nl + i], s->terms,
					    m->data_t, m->data_cls, base,
					    m->dataset, n, out,
					    (double)m->batch, s->loss);
	}
	return rc;
}

static int backward_input(dpl_mlp_cuda *m, struct cstage *s,
			  const struct dpl_stage_args *a)
{
	uint32_t nl = s->l1 - s->l0, i, l, in, out;
	uint64_t n = a->end - a->begin;
	const void *up = a->grad_output;
	int rc = 0;

	for (i = nl; rc == 0 && i-- > 0;) {
		void *dz = s->dz[a->slot * nl + i], *dst;

		l = s->l0 + i;
		in = m->widths[l];
		out = m->widths[l + 1];
		if (l + 1 != m->p.layers &&
		    (rc = dpl__mlpc_act_grad(m->stream, m->f32, dz, up,
					     s->z[a->slot * nl + i],
					     m->p.activation, n * out)) != 0)
			break;
		if (i == 0) {
			if (a->grad_input == NULL)
				break;
			dst = a->grad_input;
		} else {
			dst = (i % 2) ? s->da : s->db;
		}
		rc = gemm(m, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out,
			  at(m, s->w, s->off[i]), in, dz, out, 0, dst, in);
		up = dst;
	}
	return rc;
}

static int backward_weight(dpl_mlp_cuda *m, struct cstage *s,
			   const struct dpl_stage_args *a)
{
	uint32_t nl = s->l1 - s->l0, i, l, in, out;
	uint64_t n = a->end - a->begin;
	int rc = 0;

	for (i = nl; rc == 0 && i-- > 0;) {
		const void *dz = s->dz[a->slot * nl + i];
		void *g = at(m, s->g, s->off[i]);

		l = s->l0 + i;
		in = m->widths[l];
		out = m->widths[l + 1];
		rc = gemm(m, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n,
			  layer_input(s, a->slot, i, a), in, dz, out, 1, g,
			  in);
		if (rc == 0)
			rc = dpl__mlpc_bias_grad(m->stream, m->f32,
						 at(m, g, (size_t)out * in), dz,
						 n, out);
	}
	return rc;
}

typedef int (*stage_fn)(dpl_mlp_cuda *, struct cstage *,
			const struct dpl_stage_args *);

static int run(void *user, const struct dpl_stage_args *a, bool backward,
	       stage_fn fn)
{
	dpl_mlp_cuda *m = user;
	struct cstage *s = NULL;
	int rc;

	if ((rc = dpl__mlpc_find(m, a->stage, &s)) != 0 ||
	    (rc = check_args(m, s, a, backward)) != 0)
		return rc;
	if ((rc = dpl__mlpc_cuda_err("cudaSetDevice",
				     cudaSetDevice(m->ordinal))) != 0)
		return rc;
	return fn(m, s, a);
}

static int cb_forward(void *user, const struct dpl_stage_args *a)
{
	return run(user, a, false, forward);
}

static int cb_backward_input(void *user, const struct dpl_stage_args *a)
{
	return run(user, a, true, backward_input);
}

static int cb_backward_weight(void *user, const struct dpl_stage_args *a)
{
	return run(user, a, true, backward_weight);
}

static int cb_backward(void *user, const struct dpl_stage_args *a)
{
	int rc = cb_backward_input(user, a);

	return rc != 0 ? rc : cb_backward_weight(user, a);
}

static int cb_grads(void *user, uint32_t stage, const struct dpl_buffer **bufs,
		    size_t *n)
{
	dpl_mlp_cuda *m = user;
	struct cstage *s = NULL;
	int rc;

	if ((rc = dpl__mlpc_find(m, stage, &s)) != 0)
		return rc;
	*bufs = &s->gbuf;
	*n = 1;
	return 0;
}

/* The optimizer, the gradients cleared, the loss moved: all queued. */
static int cb_step(void *user, uint32_t stage, uint64_t iteration)
{
	dpl_mlp_cuda *m = user;
	const struct dpl_mlp_params *p = &m->p;
	struct cstage *s = NULL;
	double c1 = 0, c2 = 0;
	int rc;

	(void)iteration;
	if ((rc = dpl__mlpc_find(m, stage, &s)) != 0 ||
	    (rc = dpl__mlpc_cuda_err("cudaSetDevice",
				     cudaSetDevice(m->ordinal))) != 0)
		return rc;
	s->steps++;
	if (p->optimizer == DPL_MLP_ADAM) {
		c1 = 1.0 - pow(p->beta1, (double)s->steps);
		c2 = 1.0 - pow(p->beta2, (double)s->steps);
	}
	rc = dpl__mlpc_update(m->stream, m->f32, p->optimizer == DPL_MLP_ADAM,
			      s->w, s->s1, s->s2, s->g, s->nparams, p->lr,
			      p->momentum, p->beta1, p->beta2, p->eps, c1, c2);
	if (rc == 0)
		rc = dpl__mlpc_cuda_err("cudaMemsetAsync (gradients)",
					cudaMemsetAsync(s->g, 0,
							s->nparams * m->esize,
							m->stream));
	if (rc == 0 && s->has_last) {
		rc = dpl__mlpc_cuda_err("cudaMemcpyAsync (loss)",
					cudaMemcpyAsync(s->loss + 1, s->loss,
							sizeof(double),
							cudaMemcpyDeviceToDevice,
							m->stream));
		if (rc == 0)
			rc = dpl__mlpc_cuda_err("cudaMemsetAsync (loss)",
						cudaMemsetAsync(s->loss, 0,
								sizeof(double),
								m->stream));
		s->stepped = rc == 0;
	}
	return rc;
}

DPL_EXTERN const struct dpl_stage_ops dpl_mlp_cuda_stage_ops = {
	.abi_version = DPL_STAGE_ABI_VERSION,
	.size = sizeof(struct dpl_stage_ops),
	.name = "mlp_cuda",
	.forward = cb_forward,
	.backward = cb_backward,
	.backward_input = cb_backward_input,
	.backward_weight = cb_backward_weight,
	.grads = cb_grads,
	.step = cb_step,
};
