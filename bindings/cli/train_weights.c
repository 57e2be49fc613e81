/*
 * train_weights.c - what `dpl train` says about the final weights: a
 * digest that equal runs share bit for bit, and with --check the largest
 * relative difference against training the same model (the same --dtype)
 * on one device. The weights are doubles or floats as --dtype says.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include <dpl/dpl.h>
#include <stdlib.h>
#if defined(DPL_HAVE_DEVICE_CPU)
#include <dpl/model_mlp.h>
#endif
#if defined(DPL_HAVE_MODEL_MLP_CUDA)
#include <dpl/device_cuda.h>
#include <dpl/model_mlp_cuda.h>
#endif

#include "cli.h"
#include "train.h"

size_t train_value_bytes(const struct train_opts *o)
{
	return o->precision == 1 ? sizeof(float) : sizeof(double);
}

const char *train_dtype_name(const struct train_opts *o)
{
	return o->precision == 1 ? "f32" : "f64";
}

double train_check_limit(const struct train_opts *o)
{
	return o->precision == 1 ? TRAIN_CHECK_LIMIT_F32 : TRAIN_CHECK_LIMIT_F64;
}

uint32_t train_layer_stage(const struct train_job *J, uint32_t layer)
{
	uint32_t s = 0;

	while (s + 1 < J->nstages && J->bounds[s + 1] <= layer)
		s++;
	return s;
}

#if defined(DPL_HAVE_DEVICE_CPU)

/* FNV-1a over the bytes of every layer's weights then biases, layer by
 * layer, as the model holds them (doubles or floats). */
static uint64_t digest(const struct train_job *J,
		       const struct train_layer *v)
{
	uint64_t h = 0xcbf29ce484222325u;
	size_t e = train_value_bytes(&J->o), i;
	const unsigned char *p;
	uint32_t l;

	for (l = 0; l < J->layers; l++) {
		p = v[l].w;
		for (i = 0; i < v[l].nw * e; i++)
			h = (h ^ p[i]) * 0x100000001b3u;
		p = v[l].b;
		for (i = 0; i < v[l].nb * e; i++)
			h = (h ^ p[i]) * 0x100000001b3u;
	}
	return h;
}

/* Value i of p, a float (e = 4) or a double, as a double. */
static double value(const void *p, size_t i, size_t e)
{
	return e == sizeof(float) ? (double)((const float *)p)[i]
				  : ((const double *)p)[i];
}

/* The relative difference of a and b, as the help text defines it: with
 * a floor of 1e-8 on the divisor for doubles, and of 1 for floats, whose
 * rounding leaves a weight that crosses 0 an error of a few units in the
 * last place of the weights around it, not of itself. */
static double rel(double a, double b, size_t e)
{
	double m = fmax(fmax(fabs(a), fabs(b)),
			e == sizeof(float) ? 1.0 : 1e-8);

	return fabs(a - b) / m;
}

/* The largest relative difference of one layer's values. */
static double layer_rel(const struct train_layer *a,
			const struct train_layer *b, size_t e)
{
	double r = 0;
	size_t i;

	for (i = 0; i < a->nw; i++)
		r = fmax(r, rel(value(a->w, i, e), value(b->w, i, e), e));
	for (i = 0; i < a->nb; i++)
		r = fmax(r, rel(value(a->b, i, e), value(b->b, i, e), e));
	return r;
}

/* Train on one device (no runner) and compare the final weights. */
static int check_one_device(const struct train_job *J,
			    const struct train_layer *v, double *max_rel)
{
	struct dpl_mlp_params mp;
	struct dpl_mlp_layout l = {0};
	struct dpl_stage_args a = {0};
	uint32_t bounds[2] = {0, J->layers}, it, layer;
	size_t e = train_value_bytes(&J->o);
	dpl_mlp *m = NULL;
	int rc;

	train_mlp_params(&J->o, &mp);
	l.stages = 1;
	l.bounds = bounds;
	l.max_samples = J->o.batch;
	l.batch = J->o.batch;
	if ((rc = dpl_mlp_create(&mp, &l, &m)) != 0)
		return rc;
	a.end = J->o.batch;
	a.batch = J->o.batch;
	for (it = 0; it < J->o.iterations; it++) {
		a.iteration = it;
		if ((rc = dpl_mlp_stage_ops.forward(m, &a)) != 0 ||
		    (rc = dpl_mlp_stage_ops.backward(m, &a)) != 0 ||
		    (rc = dpl_mlp_stage_ops.step(m, 0, it)) != 0) {
			dpl_mlp_destroy(m);
			return rc;
		}
	}
	*max_rel = 0;
	for (layer = 0; layer < J->layers; layer++) {
		struct dpl_mlp_view one;
		struct train_layer t;

		dpl_mlp_layer_view(m, layer, &one);
		if (one.nw != v[layer].nw || one.nb != v[layer].nb) {
			dpl_mlp_destroy(m);
			return dpl_set_error(DPL_EINVAL, "layer %u: %zu + %zu "
					     "values, one device has %zu + "
					     "%zu", layer, v[layer].nw,
					     v[layer].nb, one.nw, one.nb);
		}
		t.w = one.w;
		t.b = one.b;
		t.nw = one.nw;
		t.nb = one.nb;
		*max_rel = fmax(*max_rel, layer_rel(&t, &v[layer], e));
	}
	dpl_mlp_destroy(m);
	return 0;
}

#if defined(DPL_HAVE_MODEL_MLP_CUDA)
/* --device cuda: the same on one GPU (LOCAL_RANK's), in the same dtype;
 * the callbacks queue on one stream, the layer copies wait for it. */
static int check_one_gpu(const struct train_job *J,
			 const struct train_layer *v, double *max_rel)
{
	struct dpl_mlp_params mp;
	struct dpl_mlp_layout l = {0};
	struct dpl_stage_args a = {0};
	struct dpl_device_params dp = {0};
	uint32_t bounds[2] = {0, J->layers}, it, layer;
	size_t e = train_value_bytes(&J->o);
	dpl_device *dev = NULL;
	dpl_mlp_cuda *m = NULL;
	void *buf = NULL;
	int rc;

	train_mlp_params(&J->o, &mp);
	l.stages = 1;
	l.bounds = bounds;
	l.max_samples = J->o.batch;
	l.batch = J->o.batch;
	if ((rc = dpl_device_cuda_local_index(&dp.index)) != 0 ||
	    (rc = dpl_device_open(&dpl_device_cuda, &dp, &dev)) != 0 ||
	    (rc = dpl_mlp_cuda_create(&mp, &l, dev, &m)) != 0)
		goto out;
	a.end = J->o.batch;
	a.batch = J->o.batch;
	for (it = 0; it < J->o.iterations; it++) {
		a.iteration = it;
		if ((rc = dpl_mlp_cuda_stage_ops.forward(m, &a)) != 0 ||
		    (rc = dpl_mlp_cuda_stage_ops.backward(m, &a)) != 0 ||
		    (rc = dpl_mlp_cuda_stage_ops.step(m, 0, it)) != 0)
			goto out;
	}
	*max_rel = 0;
	for (layer = 0; layer < J->layers; layer++) {
		struct train_layer one;

		free(buf);
		buf = malloc((v[layer].nw + v[layer].nb) * e + 1);
		if (buf == NULL) {
			rc = dpl_set_error(DPL_ENOMEM, "out of memory");
			goto out;
		}
		one.w = buf;
		one.b = (char *)buf + v[layer].nw * e;
		if ((rc = dpl_mlp_cuda_layer(m, layer, 0, buf, v[layer].nw,
					     &one.nw, (char *)buf +
							      v[layer].nw * e,
					     v[layer].nb, &one.nb)) != 0)
			goto out;
		*max_rel = fmax(*max_rel, layer_rel(&one, &v[layer], e));
	}
out:
	free(buf);
	dpl_mlp_cuda_destroy(m);
	dpl_device_close(dev);
	return rc;
}
#endif

#endif /* DPL_HAVE_DEVICE_CPU */

int train_weights_results(const struct train_job *J,
			  const struct train_layer *v, struct train_result *R)
{
#if defined(DPL_HAVE_DEVICE_CPU)
	if (!J->o.synthetic) {
		R->have_digest = true;
		R->digest = digest(J, v);
	}
	if (J->o.check) {
		if (
#if defined(DPL_HAVE_MODEL_MLP_CUDA)
		    J->o.cuda ? check_one_gpu(J, v, &R->max_rel) != 0 :
#endif
		    check_one_device(J, v, &R->max_rel) != 0)
			return cli_fail(CMD, "one-device training: %s",
					dpl_last_error());
		R->have_check = true;
	}
#endif
	return CLI_OK;
}
