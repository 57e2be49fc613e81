/*
 * train_weights.c - what `dpl train` says about the final weights: a
 * digest that equal runs share bit for bit, and with --check the largest
 * relative difference against training the same model on one device.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include <dpl/dpl.h>
#if defined(DPL_HAVE_DEVICE_CPU)
#include <dpl/model_mlp.h>
#endif

#include "cli.h"
#include "train.h"

uint32_t train_layer_stage(const struct train_job *J, uint32_t layer)
{
	uint32_t s = 0;

	while (s + 1 < J->nstages && J->bounds[s + 1] <= layer)
		s++;
	return s;
}

#if defined(DPL_HAVE_DEVICE_CPU)

/* FNV-1a over every layer's weights then biases, layer by layer. */
static uint64_t digest(const struct train_job *J,
		       const struct train_layer *v)
{
	uint64_t h = 0xcbf29ce484222325u;
	const unsigned char *p;
	size_t i;
	uint32_t l;

	for (l = 0; l < J->layers; l++) {
		p = (const unsigned char *)v[l].w;
		for (i = 0; i < v[l].nw * sizeof *v[l].w; i++)
			h = (h ^ p[i]) * 0x100000001b3u;
		p = (const unsigned char *)v[l].b;
		for (i = 0; i < v[l].nb * sizeof *v[l].b; i++)
			h = (h ^ p[i]) * 0x100000001b3u;
	}
	return h;
}

/* The relative difference of a and b, as the help text defines it. */
static double rel(double a, double b)
{
	double m = fmax(fmax(fabs(a), fabs(b)), 1e-8);

	return fabs(a - b) / m;
}

/* Train on one device (no runner) and compare the final weights. */
static int check_one_device(const struct train_job *J,
			    const struct train_layer *v, double *max_rel)
{
	struct dpl_mlp_params mp;
	struct dpl_mlp_layout l = {0};
	struct dpl_stage_args a = {0};
	uint32_t bounds[2] = {0, J->layers}, it, layer;
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
		const double *w1, *b1;
		size_t nw, nb, i;

		dpl_mlp_layer(m, layer, &w1, &nw, &b1, &nb);
		if (nw != v[layer].nw || nb != v[layer].nb) {
			dpl_mlp_destroy(m);
			return dpl_set_error(DPL_EINVAL, "layer %u: %zu + %zu "
					     "values, one device has %zu + "
					     "%zu", layer, v[layer].nw,
					     v[layer].nb, nw, nb);
		}
		for (i = 0; i < nw; i++)
			*max_rel = fmax(*max_rel, rel(w1[i], v[layer].w[i]));
		for (i = 0; i < nb; i++)
			*max_rel = fmax(*max_rel, rel(b1[i], v[layer].b[i]));
	}
	dpl_mlp_destroy(m);
	return 0;
}

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
		if (check_one_device(J, v, &R->max_rel) != 0)
			return cli_fail(CMD, "one-device training: %s",
					dpl_last_error());
		R->have_check = true;
	}
#endif
	return CLI_OK;
}
