/*
 * mlp_cuda_model.h - the GPU model's state (C only; the kernels see
 * mlp_cuda_internal.h). Not installed. All value pointers below are
 * device memory of the model's element type unless said otherwise.
 */
#ifndef DPL_MLP_CUDA_MODEL_H
#define DPL_MLP_CUDA_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <dpl/model_mlp_cuda.h>

#include "mlp_cuda_internal.h"

/* One held stage, laid out as the CPU model's struct mstage. */
struct cstage {
	uint32_t stage;
	uint32_t l0, l1;
	bool has_first, has_last;
	uint32_t slots;
	size_t nparams;
	void *w, *g, *s1, *s2; /* W then b, layer by layer */
	size_t *off;           /* host: [nl] offset of layer l0 + i's W */
	void **z, **a, **dz;   /* host array of [slot * nl + i] */
	void **x;              /* host array of [slot] (has_first) */
	void *da, *db;         /* gradients between layers */
	void *terms;           /* [max_samples] loss terms (has_last) */
	double *loss;          /* [2]: the accumulating and the last loss */
	bool stepped;
	uint64_t steps;
	struct dpl_buffer gbuf; /* DPL_MEM_CUDA over g */
};

struct dpl_mlp_cuda {
	struct dpl_mlp_params p; /* defaults filled, widths owned */
	uint32_t *widths;
	bool f32;
	size_t esize;
	uint64_t max_samples, batch, dataset;
	uint32_t stages;
	uint32_t *sidx;      /* [stages] index into st, or UINT32_MAX */
	struct cstage *st;
	uint32_t nst;
	uint32_t *layer_st;  /* [L] index into st, or UINT32_MAX */
	dpl_device *dev;
	cudaStream_t stream;
	int ordinal;
	cublasHandle_t blas;
	bool have_blas;
	void *data_x;        /* [dataset][w0] inputs (a stage has layer 0) */
	void *data_t;        /* [dataset][C] MSE targets (last layer held) */
	uint32_t *data_cls;  /* [dataset] classes (softmax-CE) */
};

/* DPL_EIO naming the CUDA call `what` and e, or 0 for cudaSuccess. */
int dpl__mlpc_cuda_err(const char *what, cudaError_t e);

/* DPL_EIO naming the cuBLAS call `what` and s, or 0. */
int dpl__mlpc_blas_err(const char *what, cublasStatus_t s);

/* The held stage `stage`, or DPL_EINVAL naming it. */
int dpl__mlpc_find(dpl_mlp_cuda *m, uint32_t stage, struct cstage **out);

#endif /* DPL_MLP_CUDA_MODEL_H */
