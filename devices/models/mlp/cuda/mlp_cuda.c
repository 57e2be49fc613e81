/*
 * mlp_cuda.c - the GPU model's setup and inspection: the CPU model's
 * checks and defaults (mlp_create.c, shared), device memory for the held
 * stages, the initial weights and the data set drawn on the host with
 * the CPU model's functions and copied, the cuBLAS handle on the
 * device's stream, and the copies back for the loss and the weights.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <dpl/device_cuda.h>

#include "../src/mlp_internal.h"
#include "mlp_cuda_model.h"

/* The data set lives on the device whole: at most this many samples. */
#define MAX_DATASET (1u << 24)

int dpl__mlpc_cuda_err(const char *what, cudaError_t e)
{
	if (e == cudaSuccess)
		return 0;
	return dpl_set_error(DPL_EIO, "mlp cuda: %s: %s (%s)", what,
			     cudaGetErrorName(e), cudaGetErrorString(e));
}

int dpl__mlpc_blas_err(const char *what, cublasStatus_t s)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return 0;
	return dpl_set_error(DPL_EIO, "mlp cuda: %s: %s (%s)", what,
			     cublasGetStatusName(s), cublasGetStatusString(s));
}

int dpl__mlpc_find(dpl_mlp_cuda *m, uint32_t stage, struct cstage **out)
{
	if (stage >= m->stages || m->sidx[stage] == UINT32_MAX)
		return dpl_set_error(DPL_EINVAL,
				     "mlp cuda: stage %u is not held here",
				     stage);
	*out = &m->st[m->sidx[stage]];
	return 0;
}

/* cudaMalloc of n values (zeroed), or DPL_EIO naming the call. */
static int dalloc(dpl_mlp_cuda *m, void **p, size_t n)
{
	int rc = dpl__mlpc_cuda_err("cudaMalloc", cudaMalloc(p, n));

	if (rc == 0)
		rc = dpl__mlpc_cuda_err("cudaMemset", cudaMemset(*p, 0, n));
	(void)m;
	return rc;
}

static void stage_free(struct cstage *s)
{
	uint32_t i, nl = s->l1 - s->l0;

	for (i = 0; s->z && i < s->slots * nl; i++) {
		cudaFree(s->z[i]);
		cudaFree(s->a[i]);
		cudaFree(s->dz[i]);
	}
	for (i = 0; s->x && i < s->slots; i++)
		cudaFree(s->x[i]);
	free(s->z);
	free(s->a);
	free(s->dz);
	free(s->x);
	free(s->off);
	cudaFree(s->w);
	cudaFree(s->g);
	cudaFree(s->s1);
	cudaFree(s->s2);
	cudaFree(s->da);
	cudaFree(s->db);
	cudaFree(s->terms);
	cudaFree(s->loss);
}

/* The CPU model's initial weights (biases 0), rounded as it rounds them,
 * copied to s->w. */
static int stage_weights(dpl_mlp_cuda *m, struct cstage *s)
{
	const uint32_t *wd = m->widths;
	char *h = calloc(s->nparams, m->esize);
	uint32_t l;
	size_t k, nw;
	int rc;

	if (h == NULL)
		return dpl_set_error(DPL_ENOMEM, "mlp cuda: out of memory");
	for (l = s->l0; l < s->l1; l++) {
		size_t o = s->off[l - s->l0];

		nw = (size_t)wd[l + 1] * wd[l];
		for (k = 0; k < nw; k++) {
			double v = dpl__mlp_init_weight(&m->p, l, k, wd[l]);

			if (m->f32)
				((float *)h)[o + k] = (float)v;
			else
				((double *)h)[o + k] = v;
		}
	}
	rc = dpl__mlpc_cuda_err("cudaMemcpy (weights)",
				cudaMemcpy(s->w, h, s->nparams * m->esize,
					   cudaMemcpyHostToDevice));
	free(h);
	return rc;
}

static int stage_init(dpl_mlp_cuda *m, struct cstage *s)
{
	const uint32_t *wd = m->widths;
	uint32_t nl = s->l1 - s->l0, i, maxw = 0, l;
	size_t n = 0, ms = m->max_samples, e = m->esize;
	int rc = 0;

	s->off = calloc(nl, sizeof *s->off);
	s->z = calloc((size_t)s->slots * nl, sizeof *s->z);
	s->a = calloc((size_t)s->slots * nl, sizeof *s->a);
	s->dz = calloc((size_t)s->slots * nl, sizeof *s->dz);
	if (s->has_first)
		s->x = calloc(s->slots, sizeof *s->x);
	if (!s->off || !s->z || !s->a || !s->dz || (s->has_first && !s->x))
		return dpl_set_error(DPL_ENOMEM, "mlp cuda: out of memory");
	for (l = s->l0; l < s->l1; l++) {
		s->off[l - s->l0] = n;
		n += (size_t)wd[l + 1] * wd[l] + wd[l + 1];
		maxw = wd[l] > maxw ? wd[l] : maxw;
		maxw = wd[l + 1] > maxw ? wd[l + 1] : maxw;
	}
	s->nparams = n;
	if ((rc = dalloc(m, &s->w, n * e)) || (rc = dalloc(m, &s->g, n * e)) ||
	    (rc = dalloc(m, &s->s1, n * e)) ||
	    (rc = dalloc(m, &s->s2, n * e)) ||
	    (rc = dalloc(m, &s->da, ms * maxw * e)) ||
	    (rc = dalloc(m, &s->db, ms * maxw * e)) ||
	    (rc = dalloc(m, &s->terms, ms * e)) ||
	    (rc = dalloc(m, (void **)&s->loss, 2 * sizeof(double))))
		return rc;
	for (i = 0; i < s->slots * nl; i++) {
		size_t b = ms * wd[s->l0 + i % nl + 1] * e;

		if ((rc = dalloc(m, &s->z[i], b)) ||
		    (rc = dalloc(m, &s->a[i], b)) ||
		    (rc = dalloc(m, &s->dz[i], b)))
			return rc;
	}
	for (i = 0; s->has_first && i < s->slots; i++)
		if ((rc = dalloc(m, &s->x[i], ms * wd[0] * e)) != 0)
			return rc;
	s->gbuf.ptr = s->g;
	s->gbuf.count = n;
	s->gbuf.dtype = m->f32 ? DPL_DTYPE_F32 : DPL_DTYPE_F64;
	s->gbuf.mem = DPL_MEM_CUDA;
	return stage_weights(m, s);
}

/* The data set of dpl_mlp_sample drawn on the host, rounded to the
 * element type as the CPU model rounds it, and copied. */
static int make_data(dpl_mlp_cuda *m, bool first, bool last)
{
	uint32_t w0 = m->widths[0], C = m->widths[m->p.layers], cls = 0, c;
	bool mse = m->p.loss == DPL_MLP_MSE;
	size_t e = m->esize, D = m->dataset, k;
	double *xs = malloc(((size_t)w0 + C) * sizeof *xs), *t = xs + w0;
	char *hx = first ? malloc(D * w0 * e) : NULL;
	char *ht = last && mse ? malloc(D * C * e) : NULL;
	uint32_t *hc = last && !mse ? malloc(D * sizeof *hc) : NULL;
	int rc = 0;

	if (!xs || (first && !hx) || (last && mse && !ht) ||
	    (last && !mse && !hc)) {
		rc = dpl_set_error(DPL_ENOMEM, "mlp cuda: out of memory for "
				   "the data set (%zu samples)", D);
		goto out;
	}
	for (k = 0; k < D; k++) {
		dpl_mlp_sample(&m->p, k, xs, &cls, t);
		for (c = 0; hx && c < w0; c++) {
			if (m->f32)
				((float *)hx)[k * w0 + c] = (float)xs[c];
			else
				((double *)hx)[k * w0 + c] = xs[c];
		}
		for (c = 0; ht && c < C; c++) {
			if (m->f32)
				((float *)ht)[k * C + c] = (float)t[c];
			else
				((double *)ht)[k * C + c] = t[c];
		}
		if (hc)
			hc[k] = cls;
	}
	if (hx && ((rc = dalloc(m, &m->data_x, D * w0 * e)) ||
		   (rc = dpl__mlpc_cuda_err("cudaMemcpy (inputs)",
					    cudaMemcpy(m->data_x, hx, D * w0 * e,
						       cudaMemcpyHostToDevice)))))
		goto out;
	if (ht && ((rc = dalloc(m, &m->data_t, D * C * e)) ||
		   (rc = dpl__mlpc_cuda_err("cudaMemcpy (targets)",
					    cudaMemcpy(m->data_t, ht, D * C * e,
						       cudaMemcpyHostToDevice)))))
		goto out;
	if (hc && ((rc = dalloc(m, (void **)&m->data_cls, D * sizeof *hc)) ||
		   (rc = dpl__mlpc_cuda_err("cudaMemcpy (classes)",
					    cudaMemcpy(m->data_cls, hc,
						       D * sizeof *hc,
						       cudaMemcpyHostToDevice)))))
		goto out;
out:
	free(xs);
	free(hx);
	free(ht);
	free(hc);
	return rc;
}

void dpl_mlp_cuda_destroy(dpl_mlp_cuda *m)
{
	uint32_t i;

	if (m == NULL)
		return;
	if (m->have_blas)
		cudaStreamSynchronize(m->stream);
	for (i = 0; m->st && i < m->nst; i++)
		stage_free(&m->st[i]);
	cudaFree(m->data_x);
	cudaFree(m->data_t);
	cudaFree(m->data_cls);
	if (m->have_blas)
		cublasDestroy(m->blas);
	free(m->st);
	free(m->sidx);
	free(m->layer_st);
	free(m->widths);
	free(m);
}

/* The host-side layout (as dpl_mlp_create's), no CUDA call. */
static int layout(dpl_mlp_cuda *m, const struct dpl_mlp_layout *l)
{
	uint32_t s, i, L = m->p.layers;

	for (i = 0; i < L; i++)
		m->layer_st[i] = UINT32_MAX;
	for (s = 0; s < l->stages; s++) {
		struct cstage *st;

		m->sidx[s] = UINT32_MAX;
		if (l->local != NULL && !l->local[s])
			continue;
		m->sidx[s] = m->nst;
		st = &m->st[m->nst++];
		st->stage = s;
		st->l0 = l->bounds[s];
		st->l1 = l->bounds[s + 1];
		st->has_first = st->l0 == 0;
		st->has_last = st->l1 == L;
		st->slots = l->slots && l->slots[s] ? l->slots[s] : 1;
		for (i = st->l0; i < st->l1; i++)
			m->layer_st[i] = m->sidx[s];
	}
	return 0;
}

static int open_cuda(dpl_mlp_cuda *m)
{
	int rc;

	if ((rc = dpl__mlpc_cuda_err("cudaSetDevice",
				     cudaSetDevice(m->ordinal))) != 0)
		return rc;
	if ((rc = dpl__mlpc_blas_err("cublasCreate",
				     cublasCreate(&m->blas))) != 0)
		return rc;
	m->have_blas = true;
	/* Pedantic math: no TF32 or reduced-precision reductions; atomics
	 * mode stays at its default (not allowed), so GEMMs repeat bit for
	 * bit on one device. */
	if ((rc = dpl__mlpc_blas_err("cublasSetMathMode",
				     cublasSetMathMode(m->blas,
						       CUBLAS_PEDANTIC_MATH))))
		return rc;
	return dpl__mlpc_blas_err("cublasSetStream",
				  cublasSetStream(m->blas, m->stream));
}

int dpl_mlp_cuda_create(const struct dpl_mlp_params *p,
			const struct dpl_mlp_layout *l, dpl_device *dev,
			dpl_mlp_cuda **out)
{
	dpl_mlp_cuda *m;
	bool first = false, last = false;
	uint32_t i;
	int rc;

	if ((rc = dpl__mlp_check_params(p, l)) != 0)
		return rc;
	if (out == NULL)
		return dpl_set_error(DPL_EINVAL, "mlp cuda: out is NULL");
	if (dev == NULL)
		return dpl_set_error(DPL_EINVAL, "mlp cuda: device is NULL");
	m = calloc(1, sizeof *m);
	if (m == NULL)
		return dpl_set_error(DPL_ENOMEM, "mlp cuda: out of memory");
	m->p = *p;
	m->dataset = dpl__mlp_defaults(&m->p, l);
	if (m->dataset > MAX_DATASET) {
		free(m);
		return dpl_set_error(DPL_EINVAL, "mlp cuda: dataset %llu > "
				     "%u samples (the data set is kept on the "
				     "device)",
				     (unsigned long long)p->dataset,
				     MAX_DATASET);
	}
	if (dpl_device_cuda_stream(dev, &m->stream) != 0 ||
	    dpl_device_cuda_ordinal(dev, &m->ordinal) != 0) {
		free(m);
		return dpl_set_error(DPL_EINVAL, "mlp cuda: the device is not "
				     "a dpl_device_cuda one");
	}
	m->dev = dev;
	m->f32 = p->precision == DPL_MLP_F32;
	m->esize = m->f32 ? sizeof(float) : sizeof(double);
	m->max_samples = l->max_samples;
	m->batch = l->batch;
	m->stages = l->stages;
	m->widths = malloc((p->layers + 1) * sizeof *m->widths);
	m->sidx = malloc(l->stages * sizeof *m->sidx);
	m->layer_st = malloc(p->layers * sizeof *m->layer_st);
	m->st = calloc(l->stages, sizeof *m->st);
	if (!m->widths || !m->sidx || !m->layer_st || !m->st) {
		dpl_mlp_cuda_destroy(m);
		return dpl_set_error(DPL_ENOMEM, "mlp cuda: out of memory");
	}
	memcpy(m->widths, p->widths, (p->layers + 1) * sizeof *m->widths);
	m->p.widths = m->widths;
	layout(m, l);
	rc = open_cuda(m);
	for (i = 0; rc == 0 && i < m->nst; i++) {
		first = first || m->st[i].has_first;
		last = last || m->st[i].has_last;
		rc = stage_init(m, &m->st[i]);
	}
	if (rc == 0)
		rc = make_data(m, first, last);
	if (rc != 0) {
		dpl_mlp_cuda_destroy(m);
		return rc;
	}
	*out = m;
	return 0;
}

enum dpl_dtype dpl_mlp_cuda_dtype(const dpl_mlp_cuda *m)
{
	return m->f32 ? DPL_DTYPE_F32 : DPL_DTYPE_F64;
}

int dpl_mlp_cuda_loss(dpl_mlp_cuda *m, double *out)
{
	uint32_t i;
	int rc;

	for (i = 0; i < m->nst; i++) {
		if (!m->st[i].has_last)
			continue;
		if (!m->st[i].stepped)
			return dpl_set_error(DPL_EINVAL,
					     "mlp cuda: no step ran yet");
		if ((rc = dpl__mlpc_cuda_err("cudaStreamSynchronize",
					     cudaStreamSynchronize(m->stream))))
			return rc;
		return dpl__mlpc_cuda_err("cudaMemcpy (loss)",
					  cudaMemcpy(out, m->st[i].loss + 1,
						     sizeof *out,
						     cudaMemcpyDeviceToHost));
	}
	return dpl_set_error(DPL_EINVAL,
			     "mlp cuda: the last layer is not held here");
}

int dpl_mlp_cuda_layer(dpl_mlp_cuda *m, uint32_t layer, int grad, void *w,
		       size_t cap_w, size_t *nw, void *b, size_t cap_b,
		       size_t *nb)
{
	const struct cstage *s;
	size_t in, ow, e = m->esize;
	const char *p;
	int rc;

	if (layer >= m->p.layers || m->layer_st[layer] == UINT32_MAX)
		return dpl_set_error(DPL_EINVAL,
				     "mlp cuda: layer %u is not held here",
				     layer);
	s = &m->st[m->layer_st[layer]];
	in = m->widths[layer];
	ow = m->widths[layer + 1];
	*nw = in * ow;
	*nb = ow;
	if (cap_w < in * ow || cap_b < ow || !w || !b)
		return dpl_set_error(DPL_EINVAL,
				     "mlp cuda: layer %u has %zu weights and "
				     "%zu biases; buffers of %zu and %zu",
				     layer, in * ow, ow, cap_w, cap_b);
	/* The stream's pending work first (copies on the legacy stream
	 * would not wait for a non-blocking one). */
	if ((rc = dpl__mlpc_cuda_err("cudaStreamSynchronize",
				     cudaStreamSynchronize(m->stream))))
		return rc;
	p = (const char *)(grad ? s->g : s->w) + s->off[layer - s->l0] * e;
	if ((rc = dpl__mlpc_cuda_err("cudaMemcpy (weights)",
				     cudaMemcpy(w, p, in * ow * e,
						cudaMemcpyDeviceToHost))))
		return rc;
	return dpl__mlpc_cuda_err("cudaMemcpy (biases)",
				  cudaMemcpy(b, p + in * ow * e, ow * e,
					     cudaMemcpyDeviceToHost));
}
