/*
 * test_mlp_cuda.c - the GPU model (dpl/model_mlp_cuda.h).
 *
 * Suite mlp_cuda runs anywhere: creation refuses bad parameters with the
 * CPU model's messages before any CUDA call, a NULL device, a device not
 * opened on dpl_device_cuda and a data set too large to keep on the GPU.
 *
 * Suite mlp_cuda_gpu needs a GPU (CTest test_mlp_cuda_gpu, reported
 * skipped without one): the same layout (two stages in one object, two
 * micro-batches in flight) trained for some steps on the CPU model and
 * on the GPU model ends with every weight within 1e-9 relative in f64,
 * for each activation, loss and optimizer, and within 1e-4 in f32; the
 * losses agree; two GPU runs give the same bits.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/device_cuda.h>
#include <dpl/model_mlp_cuda.h>

static const uint32_t W4[] = {5, 7, 6, 3};
static const uint32_t B2[] = {0, 2, 3};

static struct dpl_mlp_params params(uint32_t act, uint32_t loss,
				    uint32_t opt, uint32_t precision)
{
	struct dpl_mlp_params p = {0};

	p.layers = 3;
	p.widths = W4;
	p.activation = act;
	p.loss = loss;
	p.optimizer = opt;
	p.momentum = opt == DPL_MLP_SGD ? 0.9 : 0;
	p.precision = precision;
	p.seed = 42;
	p.dataset = 24;
	return p;
}

static struct dpl_mlp_layout layout(void)
{
	static const uint32_t slots[] = {2, 2};
	struct dpl_mlp_layout l = {0};

	l.stages = 2;
	l.bounds = B2;
	l.slots = slots;
	l.max_samples = 4;
	l.batch = 8;
	return l;
}

TestSuite(mlp_cuda, .timeout = 60);

Test(mlp_cuda, bad_params_are_refused_before_any_cuda_call)
{
	struct dpl_mlp_params p = params(0, 0, 0, 0);
	struct dpl_mlp_layout l = layout();
	static const uint32_t zero[] = {5, 0, 6, 3};
	static const uint32_t bad_bounds[] = {0, 3, 3};
	dpl_mlp_cuda *m = NULL;

	/* No device at all: the parameters are what is named. */
	p.layers = 0;
	cr_assert_eq(dpl_mlp_cuda_create(&p, &l, NULL, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "layers must be >= 1"), "%s",
		  dpl_last_error());
	p = params(0, 0, 0, 0);
	p.widths = zero;
	cr_assert_eq(dpl_mlp_cuda_create(&p, &l, NULL, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "width 1 is 0"), "%s",
		  dpl_last_error());
	p = params(0, 0, 0, 7);
	cr_assert_eq(dpl_mlp_cuda_create(&p, &l, NULL, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "precision 7"), "%s",
		  dpl_last_error());
	p = params(5, 0, 0, 0);
	cr_assert_eq(dpl_mlp_cuda_create(&p, &l, NULL, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "activation 5"), "%s",
		  dpl_last_error());
	p = params(0, 0, 0, 0);
	l.bounds = bad_bounds;
	cr_assert_eq(dpl_mlp_cuda_create(&p, &l, NULL, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "stage 1 has no layers"), "%s",
		  dpl_last_error());
	cr_assert_null(m);
}

Test(mlp_cuda, the_device_must_be_a_cuda_one)
{
	struct dpl_mlp_params p = params(0, 0, 0, 0);
	struct dpl_mlp_layout l = layout();
	dpl_mlp_cuda *m = NULL;
	dpl_device *host = NULL;

	cr_assert_eq(dpl_mlp_cuda_create(&p, &l, NULL, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "device is NULL"), "%s",
		  dpl_last_error());
	cr_assert_eq(dpl_device_open(&dpl_device_host, NULL, &host), 0);
	cr_assert_eq(dpl_mlp_cuda_create(&p, &l, host, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "not a dpl_device_cuda"), "%s",
		  dpl_last_error());
	p.dataset = (1u << 24) + 1;
	cr_assert_eq(dpl_mlp_cuda_create(&p, &l, host, &m), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "dataset 16777217"), "%s",
		  dpl_last_error());
	cr_assert_null(m);
	dpl_device_close(host);
}

/* ---- needs a GPU ---- */

/* One model of either kind, driven the same way. */
struct drv {
	const struct dpl_stage_ops *ops;
	void *m;
	bool gpu;
	void *act[2][2], *grad[2][2]; /* [slot][boundary]: one boundary */
};

static void *buf(bool gpu, size_t bytes)
{
	void *p = NULL;

	if (!gpu)
		return calloc(1, bytes);
	cr_assert_eq(cudaMalloc(&p, bytes), cudaSuccess);
	cr_assert_eq(cudaMemset(p, 0, bytes), cudaSuccess);
	return p;
}

static void args(struct dpl_stage_args *a, struct drv *d, size_t e,
		 uint32_t s, uint32_t mb, uint64_t it, bool backward)
{
	size_t bytes = 4 * (size_t)W4[2] * e;

	memset(a, 0, sizeof *a);
	a->stage = s;
	a->microbatch = mb;
	a->slot = mb;
	a->iteration = it;
	a->begin = 4 * mb;
	a->end = a->begin + 4;
	a->batch = 8;
	if (s == 1) {
		a->input = d->act[mb][0];
		a->input_bytes = bytes;
		if (backward) {
			a->grad_input = d->grad[mb][0];
			a->grad_input_bytes = bytes;
		}
	} else if (backward) {
		a->grad_output = d->grad[mb][0];
		a->grad_output_bytes = bytes;
	} else {
		a->output = d->act[mb][0];
		a->output_bytes = bytes;
	}
}

/* `iters` iterations: F of both micro-batches, B in reverse, step. */
static void train(struct drv *d, size_t e, uint32_t iters)
{
	struct dpl_stage_args a;
	uint32_t it, mb, s;

	for (mb = 0; mb < 2; mb++) {
		d->act[mb][0] = buf(d->gpu, 4 * W4[2] * e);
		d->grad[mb][0] = buf(d->gpu, 4 * W4[2] * e);
	}
	for (it = 0; it < iters; it++) {
		for (mb = 0; mb < 2; mb++)
			for (s = 0; s < 2; s++) {
				args(&a, d, e, s, mb, it, false);
				cr_assert_eq(d->ops->forward(d->m, &a), 0,
					     "%s", dpl_last_error());
			}
		for (mb = 2; mb-- > 0;)
			for (s = 2; s-- > 0;) {
				args(&a, d, e, s, mb, it, true);
				cr_assert_eq(d->ops->backward_input(d->m, &a),
					     0, "%s", dpl_last_error());
				cr_assert_eq(d->ops->backward_weight(d->m, &a),
					     0, "%s", dpl_last_error());
			}
		for (s = 0; s < 2; s++)
			cr_assert_eq(d->ops->step(d->m, s, it), 0, "%s",
				     dpl_last_error());
	}
	for (mb = 0; mb < 2; mb++) {
		if (d->gpu) {
			cudaFree(d->act[mb][0]);
			cudaFree(d->grad[mb][0]);
		} else {
			free(d->act[mb][0]);
			free(d->grad[mb][0]);
		}
	}
}

static double value(const void *p, size_t i, size_t e)
{
	return e == 4 ? (double)((const float *)p)[i]
		      : ((const double *)p)[i];
}

/* Every weight and bias of the GPU model against the CPU model's: the
 * largest relative difference (floor on the divisor as --check's). */
static double compare(dpl_mlp *cpu, dpl_mlp_cuda *gpu, size_t e,
		      unsigned char *bits, size_t *nbits)
{
	double worst = 0, floor_ = e == 4 ? 1.0 : 1e-8;
	char w[64 * 8], b[8 * 8];
	uint32_t l;
	size_t i, nw, nb;

	*nbits = 0;
	for (l = 0; l < 3; l++) {
		struct dpl_mlp_view v;

		cr_assert_eq(dpl_mlp_layer_view(cpu, l, &v), 0);
		cr_assert_eq(dpl_mlp_cuda_layer(gpu, l, 0, w, 64, &nw, b, 8,
						&nb),
			     0, "%s", dpl_last_error());
		cr_assert_eq(nw, v.nw);
		cr_assert_eq(nb, v.nb);
		for (i = 0; i < nw + nb; i++) {
			double x = i < nw ? value(v.w, i, e)
					  : value(v.b, i - nw, e);
			double y = i < nw ? value(w, i, e)
					  : value(b, i - nw, e);
			double m = fmax(fmax(fabs(x), fabs(y)), floor_);

			worst = fmax(worst, fabs(x - y) / m);
		}
		memcpy(bits + *nbits, w, nw * e);
		*nbits += nw * e;
		memcpy(bits + *nbits, b, nb * e);
		*nbits += nb * e;
	}
	return worst;
}

static dpl_device *gpu_device(void)
{
	struct dpl_device_params dp = {0};
	dpl_device *d = NULL;
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		cr_skip_test("no CUDA device here");
	cr_assert_eq(dpl_device_open(&dpl_device_cuda, &dp, &d), 0, "%s",
		     dpl_last_error());
	return d;
}

static void cpu_against_gpu(uint32_t precision, double limit)
{
	dpl_device *dev = gpu_device();
	uint32_t act, loss, opt;
	size_t e = precision == DPL_MLP_F32 ? 4 : 8;

	for (act = 0; act < 2; act++)
		for (loss = 0; loss < 2; loss++)
			for (opt = 0; opt < 2; opt++) {
				struct dpl_mlp_params p =
					params(act, loss, opt, precision);
				struct dpl_mlp_layout l = layout();
				struct drv c = {&dpl_mlp_stage_ops, NULL,
						false, {{0}}, {{0}}};
				struct drv g = {&dpl_mlp_cuda_stage_ops, NULL,
						true, {{0}}, {{0}}};
				struct drv g2 = g;
				unsigned char b1[4096], b2[4096];
				size_t n1, n2;
				double lc, lg, rel;

				cr_assert_eq(dpl_mlp_create(&p, &l,
							    (dpl_mlp **)&c.m),
					     0);
				cr_assert_eq(dpl_mlp_cuda_create(
						     &p, &l, dev,
						     (dpl_mlp_cuda **)&g.m),
					     0, "%s", dpl_last_error());
				cr_assert_eq(dpl_mlp_cuda_create(
						     &p, &l, dev,
						     (dpl_mlp_cuda **)&g2.m),
					     0, "%s", dpl_last_error());
				train(&c, e, 6);
				train(&g, e, 6);
				train(&g2, e, 6);
				rel = compare(c.m, g.m, e, b1, &n1);
				cr_assert_leq(rel, limit,
					      "act %u loss %u opt %u: %g",
					      act, loss, opt, rel);
				compare(c.m, g2.m, e, b2, &n2);
				cr_assert_eq(n1, n2);
				cr_assert_eq(memcmp(b1, b2, n1), 0,
					     "two GPU runs differ");
				cr_assert_eq(dpl_mlp_loss(c.m, &lc), 0);
				cr_assert_eq(dpl_mlp_cuda_loss(g.m, &lg), 0);
				cr_assert_leq(fabs(lc - lg),
					      limit * fmax(fabs(lc), 1.0),
					      "loss %g against %g", lg, lc);
				dpl_mlp_destroy(c.m);
				dpl_mlp_cuda_destroy(g.m);
				dpl_mlp_cuda_destroy(g2.m);
			}
	dpl_device_close(dev);
}

TestSuite(mlp_cuda_gpu, .timeout = 300);

Test(mlp_cuda_gpu, f64_matches_the_cpu_model_within_1e_9)
{
	cpu_against_gpu(DPL_MLP_F64, 1e-9);
}

Test(mlp_cuda_gpu, f32_matches_the_cpu_model_within_1e_4)
{
	cpu_against_gpu(DPL_MLP_F32, 1e-4);
}

Test(mlp_cuda_gpu, the_loss_needs_a_step_and_layers_need_room)
{
	dpl_device *dev = gpu_device();
	struct dpl_mlp_params p = params(0, 0, 0, 0);
	struct dpl_mlp_layout l = layout();
	dpl_mlp_cuda *m = NULL;
	double loss, w[4], b[1];
	size_t nw, nb;

	cr_assert_eq(dpl_mlp_cuda_create(&p, &l, dev, &m), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(dpl_mlp_cuda_loss(m, &loss), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "no step ran yet"));
	cr_assert_eq(dpl_mlp_cuda_layer(m, 0, 0, w, 4, &nw, b, 1, &nb),
		     DPL_EINVAL);
	cr_assert_eq(nw, 35);
	cr_assert_eq(nb, 7);
	cr_assert_eq(dpl_mlp_cuda_layer(m, 3, 0, w, 4, &nw, b, 1, &nb),
		     DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "layer 3 is not held"));
	dpl_mlp_cuda_destroy(m);
	dpl_device_close(dev);
}
