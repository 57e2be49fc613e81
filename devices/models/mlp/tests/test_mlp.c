/*
 * test_mlp.c - the reference model: gradients against finite differences
 * (whole model and split into stages, every activation and loss), split
 * backward equal to whole backward bit for bit, stage splits computing
 * the same bits as the whole model, seeded initialisation, the optimizers
 * and argument checks. The CPU device itself is tested beside it
 * (devices/cpu/tests/test_cpu_device.c).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/model_mlp.h>

#include "mlp_harness.h"

static struct dpl_mlp_params params(uint32_t act, uint32_t loss)
{
	return small_params(act, loss, DPL_MLP_F64);
}

/* Weights of every layer: saved and put back around a step. */
struct snap {
	double v[3][2][64];
};

static void save(dpl_mlp *m, struct snap *s)
{
	const double *w, *b;
	size_t nw, nb;
	uint32_t l;

	for (l = 0; l < 3; l++) {
		cr_assert_eq(dpl_mlp_layer(m, l, &w, &nw, &b, &nb), 0);
		cr_assert_leq(nw, 64);
		memcpy(s->v[l][0], w, nw * 8);
		memcpy(s->v[l][1], b, nb * 8);
	}
}

static void restore(dpl_mlp *m, const struct snap *s)
{
	const double *w, *b;
	size_t nw, nb;
	uint32_t l;

	for (l = 0; l < 3; l++) {
		dpl_mlp_layer(m, l, &w, &nw, &b, &nb);
		memcpy((double *)w, s->v[l][0], nw * 8);
		memcpy((double *)b, s->v[l][1], nb * 8);
	}
}

/* Step every stage without moving the weights: clears the gradients and
 * publishes the loss. */
static void step_in_place(dpl_mlp *m, uint32_t stages)
{
	struct snap sn;
	uint32_t s;

	save(m, &sn);
	for (s = 0; s < stages; s++)
		cr_assert_eq(O->step(m, s, 0), 0);
	restore(m, &sn);
}

/* The loss at the current weights. */
static double loss_now(dpl_mlp *m, const struct dpl_mlp_params *p,
		       uint32_t stages, uint32_t batch)
{
	double l;

	pass(m, p, stages, batch, false, false);
	step_in_place(m, stages);
	cr_assert_eq(dpl_mlp_loss(m, &l), 0);
	return l;
}

static void check_fd(uint32_t act, uint32_t loss, uint32_t stages)
{
	struct dpl_mlp_params p = params(act, loss);
	dpl_mlp *m = model(&p, stages, 4);
	double *g[3][2], h = 1e-6, worst = 0;
	size_t nw[3], nb[3], k;
	uint32_t l, t;

	/* Analytic gradients, copied before they are cleared. */
	pass(m, &p, stages, 4, true, false);
	for (l = 0; l < 3; l++) {
		const double *w, *b;

		cr_assert_eq(dpl_mlp_layer_grad(m, l, &w, &nw[l], &b, &nb[l]),
			     0);
		g[l][0] = malloc(nw[l] * 8);
		g[l][1] = malloc(nb[l] * 8);
		memcpy(g[l][0], w, nw[l] * 8);
		memcpy(g[l][1], b, nb[l] * 8);
	}
	step_in_place(m, stages);
	for (l = 0; l < 3; l++) {
		for (t = 0; t < 2; t++) {
			const double *cw, *cb;
			double *x;
			size_t n;

			dpl_mlp_layer(m, l, &cw, &nw[l], &cb, &nb[l]);
			x = (double *)(t == 0 ? cw : cb);
			n = t == 0 ? nw[l] : nb[l];
			for (k = 0; k < n; k++) {
				double keep = x[k], up, dn, fd, err;

				x[k] = keep + h;
				up = loss_now(m, &p, stages, 4);
				x[k] = keep - h;
				dn = loss_now(m, &p, stages, 4);
				x[k] = keep;
				fd = (up - dn) / (2 * h);
				err = fabs(fd - g[l][t][k]) /
				      fmax(1e-4, fabs(fd) + fabs(g[l][t][k]));
				if (err > worst)
					worst = err;
				cr_expect_lt(err, 1e-5,
					     "layer %u %s[%zu]: analytic %.9g "
					     "finite difference %.9g", l,
					     t ? "b" : "W", k, g[l][t][k], fd);
			}
		}
		free(g[l][0]);
		free(g[l][1]);
	}
	cr_assert_lt(worst, 1e-5);
	dpl_mlp_destroy(m);
}

Test(mlp, gradients_match_finite_differences_relu_ce)
{
	check_fd(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE, 1);
}

Test(mlp, gradients_match_finite_differences_gelu_mse)
{
	check_fd(DPL_MLP_GELU, DPL_MLP_MSE, 1);
}

Test(mlp, gradients_match_finite_differences_across_stages)
{
	check_fd(DPL_MLP_GELU, DPL_MLP_SOFTMAX_CE, 3);
	check_fd(DPL_MLP_RELU, DPL_MLP_MSE, 2);
}

Test(mlp, split_backward_and_stage_splits_compute_the_same_bits)
{
	struct dpl_mlp_params p = params(DPL_MLP_GELU, DPL_MLP_SOFTMAX_CE);

	check_same_bits(&p);
}

Test(mlp, initialisation_depends_only_on_the_seed)
{
	struct dpl_mlp_params p = params(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE);
	uint32_t bounds[3] = {0, 1, 3};
	uint8_t local[2] = {0, 1};
	struct dpl_mlp_layout l = {2, bounds, local, NULL, 4, 4};
	dpl_mlp *a = model(&p, 1, 4), *b = NULL, *c;
	const double *wa, *ba, *wb, *bb;
	size_t nw, nb, nw2, nb2;

	cr_assert_eq(dpl_mlp_create(&p, &l, &b), 0);
	cr_assert_eq(dpl_mlp_layer(b, 0, &wb, &nw, &bb, &nb), DPL_EINVAL);
	cr_assert_eq(dpl_mlp_layer(a, 2, &wa, &nw, &ba, &nb), 0);
	cr_assert_eq(dpl_mlp_layer(b, 2, &wb, &nw2, &bb, &nb2), 0);
	cr_assert_eq(nw, 6 * 3);
	cr_assert_eq(nb, 3);
	cr_assert_eq(memcmp(wa, wb, nw * 8), 0);
	cr_assert_eq(bb[0], 0.0);
	/* Weights are drawn in [-sqrt(3/in), sqrt(3/in)] and not all equal. */
	cr_assert_leq(fabs(wa[0]), sqrt(3.0 / 6));
	cr_assert_neq(wa[0], wa[1]);
	p.seed = 43;
	c = model(&p, 1, 4);
	cr_assert_eq(dpl_mlp_layer(c, 2, &wb, &nw, &bb, &nb), 0);
	cr_assert_neq(memcmp(wa, wb, nw * 8), 0);
	dpl_mlp_destroy(a);
	dpl_mlp_destroy(b);
	dpl_mlp_destroy(c);
}

Test(mlp, samples_follow_the_teacher)
{
	struct dpl_mlp_params p = params(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE);
	double x[5], x2[5], t[3];
	uint32_t cls = 99, cls2 = 98, counts[3] = {0, 0, 0}, k;

	dpl_mlp_sample(&p, 7, x, &cls, t);
	dpl_mlp_sample(&p, 7, x2, &cls2, t);
	cr_assert_eq(memcmp(x, x2, sizeof x), 0);
	cr_assert_eq(cls, cls2);
	cr_assert_lt(cls, 3);
	for (k = 0; k < 300; k++) {
		dpl_mlp_sample(&p, k, x, &cls, t);
		counts[cls]++;
	}
	/* A random teacher uses every class. */
	cr_assert_gt(counts[0], 0);
	cr_assert_gt(counts[1], 0);
	cr_assert_gt(counts[2], 0);
	p.loss = DPL_MLP_MSE;
	dpl_mlp_sample(&p, 7, x, &cls, t);
	cr_assert_lt(fabs(t[0]), 1.0);
}

/* One optimizer step on a known gradient changes weights as the rule. */
Test(mlp, sgd_momentum_and_adam_follow_their_rules)
{
	struct dpl_mlp_params p = params(DPL_MLP_RELU, DPL_MLP_MSE);
	dpl_mlp *m;
	const double *w0, *b0, *g, *gb;
	double before[64], grad[64], v;
	size_t nw, nb, k;

	p.lr = 0.1;
	p.momentum = 0.5;
	m = model(&p, 1, 4);
	dpl_mlp_layer(m, 0, &w0, &nw, &b0, &nb);
	memcpy(before, w0, nw * 8);
	pass(m, &p, 1, 4, true, false);
	dpl_mlp_layer_grad(m, 0, &g, &nw, &gb, &nb);
	memcpy(grad, g, nw * 8);
	O->step(m, 0, 0);
	for (k = 0; k < nw; k++)
		cr_assert_float_eq(w0[k], before[k] - 0.1 * grad[k], 1e-15);
	/* Second step with momentum: v = 0.5 g1 + g2. */
	memcpy(before, w0, nw * 8);
	pass(m, &p, 1, 4, true, false);
	dpl_mlp_layer_grad(m, 0, &g, &nw, &gb, &nb);
	for (k = 0; k < nw; k++) {
		v = 0.5 * grad[k] + g[k];
		grad[k] = before[k] - 0.1 * v; /* expected */
	}
	O->step(m, 0, 0);
	for (k = 0; k < nw; k++)
		cr_assert_float_eq(w0[k], grad[k], 1e-14);
	dpl_mlp_destroy(m);

	p.optimizer = DPL_MLP_ADAM;
	p.lr = 0.01;
	m = model(&p, 1, 4);
	dpl_mlp_layer(m, 0, &w0, &nw, &b0, &nb);
	memcpy(before, w0, nw * 8);
	pass(m, &p, 1, 4, true, false);
	dpl_mlp_layer_grad(m, 0, &g, &nw, &gb, &nb);
	memcpy(grad, g, nw * 8);
	O->step(m, 0, 0);
	/* First Adam step moves each weight by lr * g / (|g| + eps). */
	for (k = 0; k < nw; k++)
		cr_assert_float_eq(w0[k],
				   before[k] - 0.01 * grad[k] /
						       (fabs(grad[k]) + 1e-8),
				   1e-12);
	dpl_mlp_destroy(m);
}

Test(mlp, bad_parameters_are_named)
{
	struct dpl_mlp_params p = params(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE);
	uint32_t bad_w[] = {5, 0, 6, 3}, bounds[4];
	struct dpl_mlp_layout l = {0};
	dpl_mlp *m = NULL;

	cr_assert_eq(dpl_mlp_bounds(3, 4, bounds), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "3 layers into 4 stages") != NULL);
	cr_assert_eq(dpl_mlp_bounds(3, 0, bounds), DPL_EINVAL);
	dpl_mlp_bounds(3, 2, bounds);
	l.stages = 2;
	l.bounds = bounds;
	l.max_samples = 4;
	l.batch = 4;
	p.widths = bad_w;
	cr_assert_eq(dpl_mlp_create(&p, &l, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "width 1 is 0") != NULL, "%s",
		  dpl_last_error());
	p.widths = W4;
	p.activation = 7;
	cr_assert_eq(dpl_mlp_create(&p, &l, &m), DPL_EINVAL);
	p.activation = DPL_MLP_RELU;
	p.lr = -1;
	cr_assert_eq(dpl_mlp_create(&p, &l, &m), DPL_EINVAL);
	p.lr = 0;
	bounds[1] = 0;
	cr_assert_eq(dpl_mlp_create(&p, &l, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "stage 0 has no layers") != NULL);
	cr_assert_null(m);
}

Test(mlp, callbacks_reject_wrong_buffers_and_foreign_stages)
{
	struct dpl_mlp_params p = params(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE);
	dpl_mlp *m = model(&p, 3, 4);
	struct dpl_stage_args a = {0};
	double buf[64];

	a.stage = 1;
	a.end = 4;
	a.batch = 4;
	a.input = buf;
	a.input_bytes = 8; /* wrong: 4 samples x 7 wide */
	a.output = buf;
	a.output_bytes = 4 * 6 * 8;
	cr_assert_eq(O->forward(m, &a), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "input of 8 bytes") != NULL);
	a.stage = 5;
	cr_assert_eq(O->forward(m, &a), DPL_EINVAL);
	cr_assert_eq(dpl_mlp_loss(m, buf), DPL_EINVAL);
	dpl_mlp_destroy(m);
}

Test(mlp, stage_bytes_count_the_kept_activations)
{
	struct dpl_mlp_params p = params(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE);
	dpl_mlp *m = model(&p, 3, 4);
	uint64_t b = 0;

	/* widths 5, 7, 6, 3; 4 samples of 8-byte values. Stage 0 keeps its
	 * inputs (5) and z, a, dz of 7; stage 1 z, a, dz of 6; stage 2 of 3. */
	cr_assert_eq(dpl_mlp_stage_bytes(m, 0, &b), 0);
	cr_assert_eq(b, (5 + 3 * 7) * 4 * 8);
	cr_assert_eq(dpl_mlp_stage_bytes(m, 1, &b), 0);
	cr_assert_eq(b, 3 * 6 * 4 * 8);
	cr_assert_eq(dpl_mlp_stage_bytes(m, 2, &b), 0);
	cr_assert_eq(b, 3 * 3 * 4 * 8);
	cr_assert_eq(dpl_mlp_stage_bytes(m, 3, &b), DPL_EINVAL);
	dpl_mlp_destroy(m);
}
