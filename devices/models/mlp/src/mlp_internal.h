/*
 * mlp_internal.h - the reference model's state, shared by its source
 * files (creation, data, stage callbacks, arithmetic, optimizer,
 * inspection). Not installed.
 *
 * The state's values are of the model's element type (double or float:
 * struct mkernels' esize); they are kept as void pointers and read
 * through the arithmetic of that type (mlp_kernels.c).
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
	void *w;            /* parameters: W then b, layer by layer */
	void *g;            /* gradients, same layout */
	void *s1, *s2;      /* optimizer state (momentum; Adam m and v) */
	size_t *off;        /* [nl] offset (in values) of layer l0 + i's W */
	void **z, **a, **dz; /* [slot * nl + i] */
	void **x;           /* [slot] generated inputs (has_first) */
	void *da, *db;      /* scratch: gradients between layers */
	double *t;          /* scratch: one sample's MSE target (double) */
	double *xs;         /* scratch: one sample's inputs (double) */
	double loss_acc;
	double loss_last;
	bool stepped;
	uint64_t steps;
	struct dpl_buffer gbuf;
};

struct dpl_mlp;

/* The arithmetic of one element type (mlp_kernels.c). The callbacks'
 * arguments are checked before these run. */
struct mkernels {
	const char *name;       /* "f64", "f32" */
	size_t esize;           /* bytes a value */
	enum dpl_dtype dtype;
	/* The seeded initial weights of the stage's layers (biases stay 0). */
	void (*init)(struct dpl_mlp *m, struct mstage *s);
	/* Forward of the stage's layers for a's samples; the loss on the
	 * last layer. */
	void (*forward)(struct dpl_mlp *m, struct mstage *s,
			const struct dpl_stage_args *a);
	/* dz of every layer and the gradient of the stage input. */
	void (*backward_input)(struct dpl_mlp *m, struct mstage *s,
			       const struct dpl_stage_args *a);
	/* dW and db added to the gradients from the stored dz. */
	void (*backward_weight)(struct dpl_mlp *m, struct mstage *s,
				const struct dpl_stage_args *a);
	/* The optimizer's update of the parameters (s->steps counts this
	 * one); the gradients are left as they are. */
	void (*update)(struct dpl_mlp *m, struct mstage *s);
};

extern const struct mkernels dpl__mlp_kernels_f64;
extern const struct mkernels dpl__mlp_kernels_f32;

struct dpl_mlp {
	struct dpl_mlp_params p;
	const struct mkernels *k; /* the precision's arithmetic */
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
/* Exported (DPL_EXTERN) for the GPU model (devices/models/mlp/cuda),
 * which links this library and shares its host side: not public API. */
DPL_EXTERN double dpl__mlp_init_weight(const struct dpl_mlp_params *p,
				       uint32_t layer, uint64_t idx,
				       uint32_t fan_in);

/* The checks of dpl_mlp_create (mlp_create.c): 0, or DPL_EINVAL naming
 * the bad value. No allocation. Exported for the GPU model. */
DPL_EXTERN int dpl__mlp_check_params(const struct dpl_mlp_params *p,
				     const struct dpl_mlp_layout *l);

/* The defaults of zero rates (lr, beta1, beta2, eps) filled into *p, and
 * the data set size (p->dataset, or l->batch for 0) returned
 * (mlp_create.c). Exported for the GPU model. */
DPL_EXTERN uint64_t dpl__mlp_defaults(struct dpl_mlp_params *p,
				      const struct dpl_mlp_layout *l);

/* The input of layer l0 + i of a slot: the previous layer's
 * activation, the generated inputs or the runner's (mlp_kernels.c). */
const void *dpl__mlp_layer_input(const struct mstage *s, uint32_t slot,
				 uint32_t i, const struct dpl_stage_args *a);

/* The held stage `stage` in *out, or DPL_EINVAL naming it (mlp_stage.c). */
int dpl__mlp_find_stage(dpl_mlp *m, uint32_t stage, struct mstage **out);

/* The step callback: the optimizer update (mlp_optimizer.c). */
int dpl__mlp_step(void *user, uint32_t stage, uint64_t iteration);

#endif /* DPL_MLP_INTERNAL_H */
