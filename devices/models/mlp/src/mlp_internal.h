/*
 * mlp_internal.h - the reference model's state, shared by its source
 * files (creation, data, stage callbacks, optimizer, inspection). Not
 * installed.
 */
#ifndef DPL_MLP_INTERNAL_H
#define DPL_MLP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dpl/model_mlp.h>

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

/* The initial value of weight `idx` of `layer` (mlp_data.c): uniform in
 * [-sqrt(3 / fan_in), sqrt(3 / fan_in)], from the seed alone. */
double dpl__mlp_init_weight(const struct dpl_mlp_params *p, uint32_t layer,
			    uint64_t idx, uint32_t fan_in);

/* The held stage `stage` in *out, or DPL_EINVAL naming it (mlp_stage.c). */
int dpl__mlp_find_stage(dpl_mlp *m, uint32_t stage, struct mstage **out);

/* The step callback: the optimizer update (mlp_optimizer.c). */
int dpl__mlp_step(void *user, uint32_t stage, uint64_t iteration);

#endif /* DPL_MLP_INTERNAL_H */
