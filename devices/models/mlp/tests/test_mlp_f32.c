/*
 * test_mlp_f32.c - the reference model in single precision: its seeded
 * start is the double one rounded, its gradients and loss agree with the
 * double model's on the same seed, split and whole backward and stage
 * splits compute the same bits, gradients go to the runner as
 * DPL_DTYPE_F32, sizes are in 4-byte values, the optimizers follow their
 * rules in float, and a bad precision or a double accessor on a float
 * model is refused with a message naming it.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/model_mlp.h>

#include "mlp_harness.h"

static struct dpl_mlp_params params(uint32_t act, uint32_t loss,
				    uint32_t precision)
{
	return small_params(act, loss, precision);
}

/* Value i of a view's weights (b: its biases) as a double. */
static double at(const struct dpl_mlp_view *v, bool b, size_t i)
{
	const void *p = b ? v->b : v->w;

	return v->dtype == DPL_DTYPE_F32 ? (double)((const float *)p)[i]
					 : ((const double *)p)[i];
}

static struct dpl_mlp_view view(const dpl_mlp *m, uint32_t layer, bool grad)
{
	struct dpl_mlp_view v;

	memset(&v, 0, sizeof v);
	cr_assert_eq(grad ? dpl_mlp_layer_grad_view(m, layer, &v)
			  : dpl_mlp_layer_view(m, layer, &v),
		     0, "%s", dpl_last_error());
	return v;
}

Test(mlp_f32, initialisation_is_the_f64_one_rounded)
{
	struct dpl_mlp_params p64 = params(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE,
					   DPL_MLP_F64);
	struct dpl_mlp_params p32 = params(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE,
					   DPL_MLP_F32);
	dpl_mlp *a = model(&p64, 1, 4), *b = model(&p32, 3, 4);
	struct dpl_mlp_view va, vb;
	uint32_t l;
	size_t k, inexact = 0;

	cr_assert_eq(dpl_mlp_dtype(a), DPL_DTYPE_F64);
	cr_assert_eq(dpl_mlp_dtype(b), DPL_DTYPE_F32);
	for (l = 0; l < 3; l++) {
		va = view(a, l, false);
		vb = view(b, l, false);
		cr_assert_eq(va.dtype, DPL_DTYPE_F64);
		cr_assert_eq(vb.dtype, DPL_DTYPE_F32);
		cr_assert_eq(va.nw, vb.nw);
		cr_assert_eq(va.nb, vb.nb);
		for (k = 0; k < vb.nw; k++) {
			float want = (float)at(&va, false, k);

			cr_assert_eq(((const float *)vb.w)[k], want,
				     "layer %u W[%zu]", l, k);
			inexact += (double)want != at(&va, false, k);
		}
		for (k = 0; k < vb.nb; k++)
			cr_assert_eq(((const float *)vb.b)[k], 0.0f);
	}
	/* The values were rounded, not drawn as floats of their own. */
	cr_assert_gt(inexact, 0);
	dpl_mlp_destroy(a);
	dpl_mlp_destroy(b);
}

/*
 * The float model's gradients against the double model's on the same
 * seed, element by element: relative to the larger of the value and a
 * hundredth of the layer's largest gradient (a gradient near 0 has no
 * relative precision to speak of).
 */
static void check_against_f64(uint32_t act, uint32_t loss, uint32_t stages)
{
	struct dpl_mlp_params p64 = params(act, loss, DPL_MLP_F64);
	struct dpl_mlp_params p32 = params(act, loss, DPL_MLP_F32);
	dpl_mlp *a = model(&p64, stages, 6), *b = model(&p32, stages, 6);
	double worst = 0, la, lb;
	uint32_t l, s;
	int t;

	pass(a, &p64, stages, 6, true, false);
	pass(b, &p32, stages, 6, true, false);
	for (l = 0; l < 3; l++) {
		struct dpl_mlp_view ga = view(a, l, true), gb = view(b, l, true);

		cr_assert_eq(gb.dtype, DPL_DTYPE_F32);
		for (t = 0; t < 2; t++) {
			size_t n = t ? ga.nb : ga.nw, k;
			double big = 0;

			for (k = 0; k < n; k++)
				big = fmax(big, fabs(at(&ga, t, k)));
			cr_assert_gt(big, 0, "layer %u: no gradient", l);
			for (k = 0; k < n; k++) {
				double x = at(&ga, t, k), y = at(&gb, t, k);
				double err = fabs(x - y) /
					     fmax(fabs(x), 0.01 * big);

				worst = fmax(worst, err);
				cr_expect_leq(err, 1e-4,
					      "layer %u %s[%zu]: f64 %.9g "
					      "f32 %.9g", l, t ? "b" : "W", k,
					      x, y);
			}
		}
	}
	cr_assert_leq(worst, 1e-4);
	/* Different, though: the float model did not compute in double. */
	cr_assert_gt(worst, 0);
	for (s = 0; s < stages; s++) {
		cr_assert_eq(O->step(a, s, 0), 0);
		cr_assert_eq(O->step(b, s, 0), 0);
	}
	cr_assert_eq(dpl_mlp_loss(a, &la), 0);
	cr_assert_eq(dpl_mlp_loss(b, &lb), 0);
	cr_assert_gt(la, 0);
	cr_assert_leq(fabs(la - lb) / la, 1e-5, "loss f64 %.9g f32 %.9g", la,
		      lb);
	dpl_mlp_destroy(a);
	dpl_mlp_destroy(b);
}

/* Every activation and loss, whole and split into stages. */
Test(mlp_f32, gradients_and_loss_agree_with_f64)
{
	static const uint32_t cases[][3] = {
		{DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE, 1},
		{DPL_MLP_GELU, DPL_MLP_MSE, 1},
		{DPL_MLP_GELU, DPL_MLP_SOFTMAX_CE, 3},
		{DPL_MLP_RELU, DPL_MLP_MSE, 2},
	};
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
		check_against_f64(cases[i][0], cases[i][1], cases[i][2]);
}

Test(mlp_f32, split_backward_and_stage_splits_compute_the_same_bits)
{
	struct dpl_mlp_params p = params(DPL_MLP_GELU, DPL_MLP_SOFTMAX_CE,
					 DPL_MLP_F32);

	check_same_bits(&p);
}

Test(mlp_f32, gradients_are_handed_to_the_runner_as_f32)
{
	struct dpl_mlp_params p = params(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE,
					 DPL_MLP_F32);
	dpl_mlp *m = model(&p, 2, 4);
	const struct dpl_buffer *b = NULL;
	struct dpl_mlp_view g0 = view(m, 0, true), g2 = view(m, 2, true);
	size_t n = 0;

	/* Stage 0 holds layers 0 and 1, stage 1 layer 2. */
	cr_assert_eq(O->grads(m, 0, &b, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_eq(b->dtype, DPL_DTYPE_F32);
	cr_assert_eq(b->mem, DPL_MEM_HOST);
	cr_assert_eq(b->count, 5 * 7 + 7 + 7 * 6 + 6);
	cr_assert_eq(b->ptr, g0.w);
	cr_assert_eq(O->grads(m, 1, &b, &n), 0);
	cr_assert_eq(b->dtype, DPL_DTYPE_F32);
	cr_assert_eq(b->count, 6 * 3 + 3);
	/* The buffer ends with the last layer's biases. */
	cr_assert_eq((const float *)b->ptr + b->count,
		     (const float *)g2.b + g2.nb);
	dpl_mlp_destroy(m);
	p.precision = DPL_MLP_F64;
	m = model(&p, 2, 4);
	cr_assert_eq(O->grads(m, 0, &b, &n), 0);
	cr_assert_eq(b->dtype, DPL_DTYPE_F64);
	dpl_mlp_destroy(m);
}

Test(mlp_f32, activations_and_stage_bytes_are_in_4_byte_values)
{
	struct dpl_mlp_params p = params(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE,
					 DPL_MLP_F32);
	uint32_t bounds[4];
	uint64_t act[3], b = 0;
	struct dpl_stage_args a = {0};
	float buf[64];
	dpl_mlp *m;

	dpl_mlp_bounds(3, 3, bounds);
	dpl_mlp_activation_bytes(&p, bounds, 3, act);
	cr_assert_eq(act[0], 4 * 7);
	cr_assert_eq(act[1], 4 * 6);
	p.precision = DPL_MLP_F64;
	dpl_mlp_activation_bytes(&p, bounds, 3, act);
	cr_assert_eq(act[0], 8 * 7);
	p.precision = DPL_MLP_F32;
	m = model(&p, 3, 4);
	cr_assert_eq(dpl_mlp_stage_bytes(m, 0, &b), 0);
	cr_assert_eq(b, (5 + 3 * 7) * 4 * 4);
	cr_assert_eq(dpl_mlp_stage_bytes(m, 2, &b), 0);
	cr_assert_eq(b, 3 * 3 * 4 * 4);
	/* Stage 1 takes 4 samples x 7 floats: 8-byte values are refused. */
	a.stage = 1;
	a.end = 4;
	a.batch = 4;
	a.input = buf;
	a.input_bytes = 4 * 7 * 8;
	a.output = buf + 32;
	a.output_bytes = 4 * 6 * 4;
	cr_assert_eq(O->forward(m, &a), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "input of 224 bytes, expected "
				      "112") != NULL, "%s", dpl_last_error());
	dpl_mlp_destroy(m);
}

/* One SGD step and one Adam step on a known gradient, in float. */
Test(mlp_f32, sgd_and_adam_follow_their_rules_in_float)
{
	struct dpl_mlp_params p = params(DPL_MLP_RELU, DPL_MLP_MSE,
					 DPL_MLP_F32);
	float before[64], grad[64], lr;
	struct dpl_mlp_view w, g;
	dpl_mlp *m;
	size_t k;
	int opt;

	for (opt = 0; opt < 2; opt++) {
		p.optimizer = opt ? DPL_MLP_ADAM : DPL_MLP_SGD;
		p.lr = opt ? 0.01 : 0.1;
		lr = (float)p.lr;
		m = model(&p, 1, 4);
		w = view(m, 0, false);
		memcpy(before, w.w, w.nw * sizeof(float));
		pass(m, &p, 1, 4, true, false);
		g = view(m, 0, true);
		memcpy(grad, g.w, g.nw * sizeof(float));
		cr_assert_eq(O->step(m, 0, 0), 0);
		for (k = 0; k < w.nw; k++) {
			/* SGD: w - lr g; Adam's first step: w - lr g / (|g| +
			 * eps), both corrections being 1 - beta. */
			float want = opt ? before[k] - lr * grad[k] /
							 (fabsf(grad[k]) +
							  1e-8f)
					 : before[k] - lr * grad[k];

			cr_assert_float_eq(((const float *)w.w)[k], want, 1e-6,
					   "%s W[%zu]", opt ? "adam" : "sgd",
					   k);
		}
		/* The gradients are cleared. */
		g = view(m, 0, true);
		for (k = 0; k < g.nw; k++)
			cr_assert_eq(((const float *)g.w)[k], 0.0f);
		dpl_mlp_destroy(m);
	}
}

Test(mlp_f32, a_bad_precision_and_double_accessors_are_refused)
{
	struct dpl_mlp_params p = params(DPL_MLP_RELU, DPL_MLP_SOFTMAX_CE, 2);
	uint32_t bounds[4];
	struct dpl_mlp_layout l = {0};
	struct dpl_mlp_view v;
	const double *w = NULL, *b = NULL;
	size_t nw = 7, nb = 7;
	dpl_mlp *m = NULL;

	dpl_mlp_bounds(3, 2, bounds);
	l.stages = 2;
	l.bounds = bounds;
	l.max_samples = 4;
	l.batch = 4;
	cr_assert_eq(dpl_mlp_create(&p, &l, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "precision 2") != NULL, "%s",
		  dpl_last_error());
	cr_assert_null(m);
	p.precision = DPL_MLP_F32;
	cr_assert_eq(dpl_mlp_create(&p, &l, &m), 0);
	cr_assert_eq(dpl_mlp_layer(m, 0, &w, &nw, &b, &nb), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "the model is f32") != NULL &&
		  strstr(dpl_last_error(), "dpl_mlp_layer_view") != NULL,
		  "%s", dpl_last_error());
	cr_assert_eq(dpl_mlp_layer_grad(m, 1, &w, &nw, &b, &nb), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "dpl_mlp_layer_grad_view") != NULL,
		  "%s", dpl_last_error());
	/* Nothing written on failure. */
	cr_assert_null(w);
	cr_assert_null(b);
	cr_assert_eq(nw, 7);
	cr_assert_eq(nb, 7);
	memset(&v, 0xab, sizeof v);
	cr_assert_eq(dpl_mlp_layer_view(m, 3, &v), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "layer 3 is not held") != NULL);
	cr_assert_eq(v.nw, (size_t)0xabababababababab);
	dpl_mlp_destroy(m);
}
