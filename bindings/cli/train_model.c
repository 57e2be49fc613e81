/*
 * train_model.c - one rank of `dpl train`: its transport, device, model
 * (the reference MLP or the synthetic stages) and runner, the stage
 * callbacks under the --fail-at wrapper, and the loop over the
 * iterations.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include <dpl/backend.h>
#include <dpl/dpl.h>
#include <dpl/device_synthetic.h>
#include <dpl/model_synthetic.h>
#if defined(DPL_HAVE_DEVICE_CPU)
#include <dpl/device_cpu.h>
#include <dpl/model_mlp.h>
#endif
#if defined(DPL_HAVE_MODEL_MLP_CUDA)
#include <dpl/device_cuda.h>
#include <dpl/model_mlp_cuda.h>
#endif
#include <stdlib.h>

#include "train.h"

/* ---- stage callbacks: the model's, or the model's with a failure ---- */

static int fail_forward(void *u, const struct dpl_stage_args *a)
{
	struct train_rank *k = u;
	const struct train_opts *o = &k->J->o;

	if (o->fail && k->rank == o->fail_rank && a->iteration == o->fail_iter)
		return dpl_set_error(DPL_ECALLBACK,
				     "injected failure (--fail-at %u:%u)",
				     o->fail_rank, o->fail_iter);
	return k->inner->forward(k->model, a);
}

static int pass_backward(void *u, const struct dpl_stage_args *a)
{
	struct train_rank *k = u;

	return k->inner->backward(k->model, a);
}

static int pass_input(void *u, const struct dpl_stage_args *a)
{
	struct train_rank *k = u;

	return k->inner->backward_input(k->model, a);
}

static int pass_weight(void *u, const struct dpl_stage_args *a)
{
	struct train_rank *k = u;

	return k->inner->backward_weight(k->model, a);
}

static int pass_grads(void *u, uint32_t stage, const struct dpl_buffer **b,
		      size_t *n)
{
	struct train_rank *k = u;

	return k->inner->grads(k->model, stage, b, n);
}

static int pass_step(void *u, uint32_t stage, uint64_t it)
{
	struct train_rank *k = u;

	return k->inner->step(k->model, stage, it);
}

static const struct dpl_stage_ops wrap_ops = {
	.abi_version = DPL_STAGE_ABI_VERSION,
	.size = sizeof(struct dpl_stage_ops),
	.name = "train",
	.forward = fail_forward,
	.backward = pass_backward,
	.backward_input = pass_input,
	.backward_weight = pass_weight,
	.grads = pass_grads,
	.step = pass_step,
};

/* Samples per micro-batch on one replica of a rank with `r` replicas. */
static uint64_t max_samples(const struct train_job *J, uint32_t r)
{
	uint64_t b, e, mb;

	dpl_split(J->o.batch, J->o.microbatches, 0, &b, &e);
	mb = e - b;
	dpl_split(mb, r, 0, &b, &e);
	return e - b > 0 ? e - b : 1;
}

/* Rank k's model, and its callbacks in k->inner. */
static int make_model(struct train_rank *k)
{
	struct train_job *J = k->J;
	uint32_t s;

	if (J->o.synthetic) {
		struct dpl_synthetic_params sp = {0};
		uint64_t live[TRAIN_MAX_STAGES];
		uint64_t b, e;

		dpl_split(J->o.batch, J->o.microbatches, 0, &b, &e);
		for (s = 0; s < J->nstages; s++)
			live[s] = J->act[s] * (e - b);
		sp.stages = J->nstages;
		sp.uniform.f = J->o.fwd_ms;
		sp.uniform.b = J->o.bwd_ms;
		sp.unit_ns = 1e6;
		sp.activation_bytes = live;
		sp.samples_per_microbatch = e - b;
		k->inner = &dpl_synthetic_stage_ops;
		return dpl_synthetic_create(&sp, (dpl_synthetic **)&k->model);
	}
#if defined(DPL_HAVE_DEVICE_CPU)
	{
		struct dpl_mlp_params mp;
		struct dpl_mlp_layout l = {0};
		uint8_t local[TRAIN_MAX_STAGES];
		uint32_t slots[TRAIN_MAX_STAGES];

		train_mlp_params(&J->o, &mp);
		for (s = 0; s < J->nstages; s++) {
			local[s] = dpl_schedule_stage_rank(J->sched, s) ==
				   k->prank;
			slots[s] = dpl_schedule_bound(J->sched, s);
		}
		l.stages = J->nstages;
		l.bounds = J->bounds;
		l.local = local;
		l.slots = slots;
		l.max_samples = max_samples(J, J->reps[k->prank]);
		l.batch = J->o.batch;
#if defined(DPL_HAVE_MODEL_MLP_CUDA)
		if (J->o.cuda) {
			k->inner = &dpl_mlp_cuda_stage_ops;
			return dpl_mlp_cuda_create(&mp, &l, k->dev,
						   (dpl_mlp_cuda **)&k->model);
		}
#endif
		k->inner = &dpl_mlp_stage_ops;
		return dpl_mlp_create(&mp, &l, (dpl_mlp **)&k->model);
	}
#else
	return dpl_set_error(DPL_ENOTSUP, "built without the CPU device");
#endif
}

/* Rank k's device: the synthetic one, the CPU, or GPU LOCAL_RANK
 * modulo the GPUs seen (dpl_device_cuda_local_index). */
static int open_device(struct train_rank *k)
{
	const struct train_job *J = k->J;

#if defined(DPL_HAVE_MODEL_MLP_CUDA)
	if (J->o.cuda) {
		struct dpl_device_params dp = {0};
		int rc = dpl_device_cuda_local_index(&dp.index);

		return rc != 0 ? rc
			       : dpl_device_open(&dpl_device_cuda, &dp, &k->dev);
	}
#endif
	return dpl_device_open(J->o.synthetic ? &dpl_device_synthetic
#if defined(DPL_HAVE_DEVICE_CPU)
					      : &dpl_device_cpu,
#else
					      : &dpl_device_host,
#endif
			       NULL, &k->dev);
}

int train_rank_setup(struct train_rank *k, const struct dpl_oob *oob)
{
	struct train_job *J = k->J;
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params rp = {0};
	uint32_t timeout_ms = (uint32_t)(J->o.timeout_s * 1000.0 + 0.5);
	size_t nlist = 0;
	int rc;

	tp.rank = k->rank;
	tp.world_size = J->world;
	/* One rendezvous per job, the host's: the processes' exchange, or
	 * the name of the threads' world. */
	if (J->procs)
		tp.oob = oob;
	else
		tp.world = J->world_name;
	tp.timeout_ms = J->procs ? timeout_ms : 0;
	tp.options = J->o.transport_options;
	/* The device first: a GPU rank's CUDA context is then its own
	 * device's when the transport's init makes one (cudaipc's probe). */
	rc = open_device(k);
	if (rc == 0)
		rc = dpl_transport_open(J->tops, &tp, &k->t);
	if (rc == 0)
		rc = make_model(k);
	if (rc == 0) {
		dpl_schedule_actions(J->sched, k->prank, &nlist);
		rp.schedule = J->sched;
		rp.replicas = J->reps;
		rp.rank = k->rank;
		rp.timeout_ms = timeout_ms;
		rp.batch = J->o.batch;
		rp.activation_bytes = J->act;
		rp.stage_ops = &wrap_ops;
		rp.stage_user = k;
		rp.transport = k->t;
		rp.device = k->dev;
		rp.trace_capacity = J->o.trace_path ? nlist : 0;
		rp.cap_bytes = J->have_cap_bytes ? J->cap_bytes : NULL;
		rc = dpl_runner_create(&rp, &k->r);
	}
	if (rc != 0) {
		snprintf(k->msg, sizeof k->msg, "rank %u: setup: %s", k->rank,
			 dpl_last_error());
		k->rc = rc;
	}
	return rc;
}

void train_rank_loop(struct train_rank *k)
{
	struct train_job *J = k->J;
	uint32_t it;
	int rc;

	k->t0 = dpl_clock_ns();
	for (it = 0; !atomic_load(&J->setup_failed) && it < J->o.iterations;
	     it++) {
		rc = dpl_runner_step(k->r);
		if (rc != 0) {
			k->rc = rc;
			k->cause = dpl_runner_cause(k->r);
			snprintf(k->msg, sizeof k->msg, "%s",
				 dpl_last_error());
			break;
		}
		k->steps++;
		atomic_fetch_add(&J->progress, 1);
#if defined(DPL_HAVE_DEVICE_CPU)
		if (!J->o.synthetic) {
			double l;

			if (
#if defined(DPL_HAVE_MODEL_MLP_CUDA)
			    J->o.cuda ? dpl_mlp_cuda_loss(k->model, &l) == 0 :
#endif
			    dpl_mlp_loss(k->model, &l) == 0)
				J->loss[(size_t)it * J->world + k->rank] = l;
		}
#endif
	}
	k->t1 = dpl_clock_ns();
}

void train_model_destroy(struct train_rank *k)
{
	uint32_t l;

	if (k->J->o.synthetic)
		dpl_synthetic_destroy(k->model);
#if defined(DPL_HAVE_MODEL_MLP_CUDA)
	else if (k->J->o.cuda)
		dpl_mlp_cuda_destroy(k->model);
#endif
#if defined(DPL_HAVE_DEVICE_CPU)
	else
		dpl_mlp_destroy(k->model);
#endif
	k->model = NULL;
	for (l = 0; l < TRAIN_MAX_LAYERS; l++) {
		free(k->host[l]);
		k->host[l] = NULL;
	}
}

#if defined(DPL_HAVE_DEVICE_CPU)

int train_layer_view(struct train_rank *k, uint32_t layer,
		     struct dpl_mlp_view *v)
{
#if defined(DPL_HAVE_MODEL_MLP_CUDA)
	if (k->J->o.cuda) {
		const uint32_t *wd = k->J->o.widths;
		size_t e = train_value_bytes(&k->J->o), nw, nb;
		int rc;

		if (layer >= k->J->layers || layer >= TRAIN_MAX_LAYERS)
			return dpl_set_error(DPL_EINVAL, "layer %u", layer);
		nw = (size_t)wd[layer] * wd[layer + 1];
		nb = wd[layer + 1];
		if (k->host[layer] == NULL &&
		    (k->host[layer] = malloc((nw + nb) * e)) == NULL)
			return dpl_set_error(DPL_ENOMEM, "out of memory");
		rc = dpl_mlp_cuda_layer(k->model, layer, 0, k->host[layer],
					nw, &v->nw, (char *)k->host[layer] +
							    nw * e,
					nb, &v->nb);
		if (rc != 0)
			return rc;
		v->w = k->host[layer];
		v->b = (char *)k->host[layer] + nw * e;
		v->dtype = dpl_mlp_cuda_dtype(k->model);
		return 0;
	}
#endif
	return dpl_mlp_layer_view(k->model, layer, v);
}

void train_mlp_params(const struct train_opts *o, struct dpl_mlp_params *p)
{
	memset(p, 0, sizeof *p);
	p->layers = (uint32_t)o->nwidths - 1;
	p->widths = o->widths;
	p->activation = o->activation;
	p->loss = o->loss;
	p->optimizer = o->optimizer;
	p->precision = o->precision;
	p->lr = o->lr > 0 ? o->lr
			  : o->optimizer == DPL_MLP_ADAM ? 0.003 : 0.05;
	p->momentum = o->optimizer == DPL_MLP_SGD
			      ? (o->momentum_set ? o->momentum : 0.9)
			      : 0;
	p->seed = o->seed;
	p->dataset = 16 * o->batch;
}
#endif /* DPL_HAVE_DEVICE_CPU */
