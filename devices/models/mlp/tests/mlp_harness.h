/*
 * mlp_harness.h - what the reference model's tests share: a small model's
 * parameters, a model of some stages, all held, a forward (and backward)
 * pass over them on the whole batch with local buffers in the runner's
 * place, in the model's precision, and the check that split backward and
 * stage splits compute the same bits.
 */
#ifndef DPL_TEST_MLP_HARNESS_H
#define DPL_TEST_MLP_HARNESS_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/model_mlp.h>

static const struct dpl_stage_ops *O = &dpl_mlp_stage_ops;

static const uint32_t W4[] = {5, 7, 6, 3};

/* A model of 3 layers, widths W4, trained with SGD at 0.05, seed 42. */
static inline struct dpl_mlp_params small_params(uint32_t act, uint32_t loss,
						 uint32_t precision)
{
	struct dpl_mlp_params p = {0};

	p.layers = 3;
	p.widths = W4;
	p.activation = act;
	p.loss = loss;
	p.optimizer = DPL_MLP_SGD;
	p.lr = 0.05;
	p.seed = 42;
	p.precision = precision;
	return p;
}

/* Bytes a value of p's precision. */
static inline size_t value_bytes(const struct dpl_mlp_params *p)
{
	return p->precision == DPL_MLP_F32 ? sizeof(float) : sizeof(double);
}

/* A model of `stages` stages, all held, batch `batch`. */
static inline dpl_mlp *model(struct dpl_mlp_params *p, uint32_t stages,
			     uint32_t batch)
{
	uint32_t bounds[8];
	struct dpl_mlp_layout l = {0};
	dpl_mlp *m = NULL;

	cr_assert_eq(dpl_mlp_bounds(p->layers, stages, bounds), 0);
	l.stages = stages;
	l.bounds = bounds;
	l.max_samples = batch;
	l.batch = batch;
	cr_assert_eq(dpl_mlp_create(p, &l, &m), 0, "%s", dpl_last_error());
	return m;
}

/* The buffers of stage s's callbacks for the whole batch: its input (and
 * the input's gradient, when backward) from the stage before, its output
 * (or the output's gradient) to the stage after. */
static inline void stage_args(struct dpl_stage_args *a,
			      const struct dpl_mlp_params *p,
			      const uint32_t *bounds, uint32_t stages,
			      uint32_t s, uint32_t batch, void **act,
			      void **grad, bool backward)
{
	size_t e = value_bytes(p);

	memset(a, 0, sizeof *a);
	a->stage = s;
	a->end = batch;
	a->batch = batch;
	if (s > 0) {
		a->input = act[s - 1];
		a->input_bytes = (size_t)batch * p->widths[bounds[s]] * e;
		if (backward) {
			a->grad_input = grad[s - 1];
			a->grad_input_bytes = a->input_bytes;
		}
	}
	if (s + 1 < stages) {
		size_t out = (size_t)batch * p->widths[bounds[s + 1]] * e;

		if (backward) {
			a->grad_output = grad[s];
			a->grad_output_bytes = out;
		} else {
			a->output = act[s];
			a->output_bytes = out;
		}
	}
}

/* Run forward (and backward when asked) over `stages` stages on the
 * whole batch; activations travel through local buffers. */
static inline void pass(dpl_mlp *m, const struct dpl_mlp_params *p,
			uint32_t stages, uint32_t batch, bool backward,
			bool split)
{
	uint32_t bounds[8], s;
	void *act[8] = {0}, *grad[8] = {0};
	size_t e = value_bytes(p);
	struct dpl_stage_args a;

	dpl_mlp_bounds(p->layers, stages, bounds);
	for (s = 0; s + 1 < stages; s++) {
		act[s] = calloc((size_t)batch * p->widths[bounds[s + 1]], e);
		grad[s] = calloc((size_t)batch * p->widths[bounds[s + 1]], e);
	}
	for (s = 0; s < stages; s++) {
		stage_args(&a, p, bounds, stages, s, batch, act, grad, false);
		cr_assert_eq(O->forward(m, &a), 0, "%s", dpl_last_error());
	}
	for (s = stages; backward && s-- > 0;) {
		stage_args(&a, p, bounds, stages, s, batch, act, grad, true);
		if (split) {
			cr_assert_eq(O->backward_input(m, &a), 0);
			cr_assert_eq(O->backward_weight(m, &a), 0);
		} else {
			cr_assert_eq(O->backward(m, &a), 0, "%s",
				     dpl_last_error());
		}
	}
	for (s = 0; s < 8; s++) {
		free(act[s]);
		free(grad[s]);
	}
}

/* The gradients of every layer, concatenated, as bytes (*n of them). */
static inline unsigned char *grad_bytes(const dpl_mlp *m,
					const struct dpl_mlp_params *p,
					size_t *n)
{
	unsigned char *out = malloc(4096 * sizeof(double));
	size_t e = value_bytes(p);
	uint32_t l;

	*n = 0;
	for (l = 0; l < p->layers; l++) {
		struct dpl_mlp_view g;

		cr_assert_eq(dpl_mlp_layer_grad_view(m, l, &g), 0);
		cr_assert_leq(*n + (g.nw + g.nb) * e, 4096 * sizeof(double));
		memcpy(out + *n, g.w, g.nw * e);
		*n += g.nw * e;
		memcpy(out + *n, g.b, g.nb * e);
		*n += g.nb * e;
	}
	return out;
}

/*
 * Split (backward_input then backward_weight) and whole backward, and the
 * model whole or in 3 stages, compute the same gradients bit for bit on
 * p's model of 3 layers, widths 5, 7, 6, 3 (and they are not all 0).
 */
static inline void check_same_bits(struct dpl_mlp_params *p)
{
	dpl_mlp *one = model(p, 1, 6), *three = model(p, 3, 6),
		*sp = model(p, 3, 6);
	unsigned char *g1, *g3, *gs;
	size_t n1, n3, ns, k, zero = 0;

	pass(one, p, 1, 6, true, false);
	pass(three, p, 3, 6, true, false);
	pass(sp, p, 3, 6, true, true);
	g1 = grad_bytes(one, p, &n1);
	g3 = grad_bytes(three, p, &n3);
	gs = grad_bytes(sp, p, &ns);
	cr_assert_eq(n1, (5 * 7 + 7 + 7 * 6 + 6 + 6 * 3 + 3) * value_bytes(p));
	cr_assert_eq(n1, n3);
	cr_assert_eq(n1, ns);
	for (k = 0; k < n1; k++)
		zero += g1[k] == 0;
	cr_assert_lt(zero, n1 / 2, "%zu of %zu gradient bytes are 0", zero,
		     n1);
	cr_assert_eq(memcmp(g1, g3, n1), 0);
	cr_assert_eq(memcmp(g3, gs, n1), 0);
	free(g1), free(g3), free(gs);
	dpl_mlp_destroy(one);
	dpl_mlp_destroy(three);
	dpl_mlp_destroy(sp);
}

#endif /* DPL_TEST_MLP_HARNESS_H */
