/*
 * train_plan.c - from the flags of `dpl train` (and the plan file that
 * --plan names) to a job: the layout of stages and replicas, the
 * schedule, and the layers of every stage. Every combination the job
 * cannot run is a usage error here, before anything runs.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <dpl/dpl.h>
#include <dpl/json.h>
#include <dpl/plan.h>
#if defined(DPL_HAVE_DEVICE_CPU)
#include <dpl/model_mlp.h>
#endif

#if defined(DPL_HAVE_MODEL_MLP_CUDA)
#include <dpl/device_cuda.h>
#endif

#include "cli.h"
#include "sched_opts.h"
#include "train.h"

static int read_plan(struct train_job *J)
{
	struct train_opts *o = &J->o;
	struct dpl_plan plan;
	uint32_t s, i, world = 0;
	size_t len;
	char *text;
	int rc;

	if ((rc = cli_read_file(CMD, o->plan_path, &text, &len)) != 0)
		return rc;
	rc = dpl_plan_read_json(text, len, &plan);
	free(text);
	if (rc != 0)
		return cli_usage_error(CMD, "%s: %s", o->plan_path,
				       dpl_last_error());
	if (plan.stages > TRAIN_MAX_STAGES)
		return cli_usage_error(CMD, "%s: %u stages (at most %u)",
				       o->plan_path, plan.stages,
				       TRAIN_MAX_STAGES);
	for (s = 0; s < plan.stages; s++)
		world += plan.stage[s].replicas;
	if (o->nreplicas > 0) {
		uint32_t given = 0;

		for (i = 0; i < o->nreplicas; i++)
			given += o->replicas[i];
		if (o->nreplicas == 1)
			given = o->replicas[0] * plan.stages;
		if (given != world)
			return cli_usage_error(CMD, "--plan %s is for a world "
					       "of %u ranks, --replicas gives "
					       "%u", o->plan_path, world,
					       given);
	}
	if (o->stages_set && o->stages != plan.stages)
		return cli_usage_error(CMD, "--plan %s has %u stages, "
				       "--stages says %u", o->plan_path,
				       plan.stages, o->stages);
	if (o->mb_set && o->microbatches != plan.microbatches)
		return cli_usage_error(CMD, "--plan %s has %u micro-batches, "
				       "--microbatches says %u", o->plan_path,
				       plan.microbatches, o->microbatches);
	if (o->policy_set && o->policy != plan.policy)
		return cli_usage_error(CMD, "--plan %s uses %s, --policy "
				       "says %s", o->plan_path,
				       dpl_policy_name(plan.policy),
				       dpl_policy_name(o->policy));
	if (o->batch_set && o->batch != (uint64_t)plan.microbatch_size *
						 plan.microbatches)
		return cli_usage_error(CMD, "--plan %s has a batch of %u x %u "
				       "samples, --batch says %llu",
				       o->plan_path, plan.microbatches,
				       plan.microbatch_size,
				       (unsigned long long)o->batch);
	o->stages = plan.stages;
	o->microbatches = plan.microbatches;
	o->policy = plan.policy;
	o->batch = (uint64_t)plan.microbatch_size * plan.microbatches;
	o->nreplicas = plan.stages;
	for (s = 0; s < plan.stages; s++)
		o->replicas[s] = plan.stage[s].replicas;
	J->layers = plan.stage[plan.stages - 1].last_layer + 1;
	for (s = 0; s < plan.stages; s++)
		J->bounds[s] = plan.stage[s].first_layer;
	J->bounds[plan.stages] = J->layers;
	if (o->widths_set && o->nwidths - 1 != J->layers)
		return cli_usage_error(CMD, "--plan %s cuts %u layers, "
				       "--widths gives %zu", o->plan_path,
				       J->layers, o->nwidths - 1);
	if (!o->widths_set) {
		if (J->layers > TRAIN_MAX_LAYERS)
			return cli_usage_error(CMD, "--plan %s: %u layers "
					       "(at most %u)", o->plan_path,
					       J->layers, TRAIN_MAX_LAYERS);
		o->nwidths = J->layers + 1;
		for (i = 0; i <= J->layers; i++)
			o->widths[i] = i == 0 ? 16 : i == J->layers ? 4 : 64;
	}
	return 0;
}

/*
 * The schedule of --schedule FILE into J->sched, checked against the flags
 * it fixes (which then take its values), lowered when compute-only, and
 * validated. J->ranks and J->nstages are its shape.
 */
static int read_schedule(struct train_job *J)
{
	struct train_opts *o = &J->o;
	const char *path = o->schedule_path;
	struct dpl_schedule_issue is;
	uint32_t ranks, stages, mb;
	enum dpl_policy pol;
	bool lower;
	int rc;

	if (o->cap != 0)
		return cli_usage_error(CMD, "--cap %u: --schedule %s fixes the "
				       "schedule (caps included)", o->cap,
				       path);
	if (o->bytes.act != NULL)
		return cli_usage_error(CMD, "--cap-act-bytes %s: --schedule %s "
				       "fixes the schedule; --cap-bytes alone "
				       "sets the runners' byte caps",
				       o->bytes.act_text, path);
	if ((rc = sched_load_file(CMD, path, &J->sched)) != 0)
		return rc;
	ranks = dpl_schedule_ranks(J->sched);
	stages = dpl_schedule_stages(J->sched);
	mb = dpl_schedule_microbatches(J->sched);
	pol = dpl_schedule_policy(J->sched);
	if (stages > TRAIN_MAX_STAGES)
		return cli_usage_error(CMD, "--schedule %s: %u stages (at most "
				       "%u)", path, stages, TRAIN_MAX_STAGES);
	if (o->stages_set && o->stages != ranks)
		return cli_usage_error(CMD, "--schedule %s runs on %u ranks (%u "
				       "stages), --stages says %u", path,
				       ranks, stages, o->stages);
	if (o->mb_set && o->microbatches != mb)
		return cli_usage_error(CMD, "--schedule %s has %u "
				       "micro-batches, --microbatches says %u",
				       path, mb, o->microbatches);
	if (o->policy_set && o->policy != pol)
		return cli_usage_error(CMD, "--schedule %s has policy %s, "
				       "--policy says %s", path,
				       dpl_policy_name(pol),
				       dpl_policy_name(o->policy));
	if (o->chunks != 0 &&
	    (stages % ranks != 0 || stages / ranks != o->chunks))
		return cli_usage_error(CMD, "--schedule %s has %u stages on %u "
				       "ranks, --chunks says %u", path, stages,
				       ranks, o->chunks);
	lower = !dpl_schedule_is_lowered(J->sched);
	if (lower) {
		if (dpl_schedule_validate(J->sched, &is) != 0)
			return cli_fail(CMD, "%s: invalid schedule: %s", path,
					is.message);
		if (dpl_schedule_lower(J->sched) != 0)
			return cli_fail(CMD, "%s: %s", path, dpl_last_error());
	}
	if (dpl_schedule_validate(J->sched, &is) != 0)
		return cli_fail(CMD, "%s: invalid schedule%s: %s", path,
				lower ? " once lowered" : "", is.message);
	o->stages = ranks;
	o->microbatches = mb;
	o->policy = pol;
	J->ranks = ranks;
	J->nstages = stages;
	return 0;
}

/* The runners' byte caps of --cap-bytes into J, and for a built bounded
 * or zb-auto schedule the budget into sp (act: S sizes for it). */
static int resolve_cap_bytes(struct train_job *J,
			     struct dpl_schedule_params *sp, uint64_t *act)
{
	struct train_opts *o = &J->o;
	const struct sched_bytes *b = &o->bytes;
	uint32_t s;
	int rc;

	if (!o->schedule_path) {
		rc = sched_bytes_resolve(CMD, "--cap-act-bytes", b, o->policy,
					 o->cap != 0, J->nstages,
					 J->cap_bytes, act,
					 &J->have_cap_bytes);
		if (rc == 0 && J->have_cap_bytes) {
			sp->cap_bytes = J->cap_bytes;
			sp->activation_bytes = act;
		}
		return rc;
	}
	if (b->cap == NULL)
		return 0;
	if (b->ncap != 1 && b->ncap != J->nstages)
		return cli_usage_error(CMD, "--cap-bytes %s: %zu values for "
				       "%u stages (give one, or one per "
				       "stage)", b->cap_text, b->ncap,
				       J->nstages);
	for (s = 0; s < J->nstages; s++)
		J->cap_bytes[s] = b->cap[b->ncap == 1 ? 0 : s];
	J->have_cap_bytes = true;
	return 0;
}

int train_cuda_transport(const struct train_job *J, const char *name,
			 uint64_t caps)
{
	static const char *const host_only[] = {"inproc", "shm", "ucx",
						"ofi"};
	bool refuse = false;
	size_t i;

	if (!J->o.cuda || J->world <= 1)
		return CLI_OK;
	if (caps != ~(uint64_t)0)
		refuse = (caps & DPL_TRANSPORT_CAP_MEM_CUDA) == 0;
	for (i = 0; caps == ~(uint64_t)0 && i < 4; i++)
		refuse = refuse || strcmp(name, host_only[i]) == 0;
	if (!refuse)
		return CLI_OK;
	return cli_usage_error(CMD, "--device cuda: --transport %s does not "
			       "take CUDA device memory, and the %u ranks "
			       "exchange activations and gradients in it; "
			       "use --transport cudaipc (or one rank: "
			       "--stages 1 without replicas)", name,
			       J->world);
}

/* --device cuda: built in, a transport that can carry device memory
 * (by name; train_threads and train_process check the caps), and a GPU
 * seen here (CLI_FAIL naming the CUDA error at once, before any rank
 * starts). */
static int resolve_cuda(struct train_job *J)
{
	const struct train_opts *o = &J->o;
	int rc;

	if ((rc = train_cuda_transport(J, o->transport ? o->transport
					  : o->nprocs	? "shm"
							: "inproc",
				       ~(uint64_t)0)) != CLI_OK)
		return rc;
#if defined(DPL_HAVE_MODEL_MLP_CUDA)
	{
		uint32_t idx = 0;

		if (dpl_device_cuda_local_index(&idx) != 0)
			return cli_fail(CMD, "--device cuda: %s",
					dpl_last_error());
	}
	return CLI_OK;
#else
	return cli_usage_error(CMD, "--device cuda: dpl was built without "
			       "the GPU model (needs DPL_WITH_CUDA and the CPU "
			       "device)");
#endif
}

/* Check everything and build the schedule; nothing runs yet. */
int train_resolve(struct train_job *J)
{
	static const uint32_t def_widths[] = {16, 64, 64, 64, 64, 64, 64, 64,
					      4};
	struct train_opts *o = &J->o;
	struct dpl_schedule_params sp = {0};
	uint64_t world = 0, cap_act[TRAIN_MAX_STAGES];
	uint32_t p, s, chunks;
	int rc;

	if (o->plan_path && o->schedule_path)
		return cli_usage_error(CMD, "--schedule %s and --plan %s both "
				       "fix the schedule: give one",
				       o->schedule_path, o->plan_path);
	if (o->plan_path && (rc = read_plan(J)) != 0)
		return rc;
	if (!o->widths_set && !o->plan_path) {
		memcpy(o->widths, def_widths, sizeof def_widths);
		o->nwidths = sizeof def_widths / sizeof def_widths[0];
	}
	if (!o->plan_path)
		J->layers = (uint32_t)o->nwidths - 1;
	if (o->schedule_path) {
		if ((rc = read_schedule(J)) != 0)
			return rc;
		chunks = J->nstages != J->ranks;
	} else {
		chunks = dpl_policy_chunks(o->policy);
		if (chunks == 1 && o->chunks == 0)
			return cli_usage_error(CMD, "--policy %s needs --chunks "
					       "V (>= 2)",
					       dpl_policy_name(o->policy));
		if (chunks != 1 && o->chunks != 0)
			return cli_usage_error(CMD, "--chunks applies to "
					       "--policy interleaved, "
					       "looped-bfs and interleaved-zb "
					       "only%s", chunks
					       ? " (zbv and dualpipev always "
						 "have 2)"
					       : "");
		if (chunks == 1)
			chunks = o->chunks;
		if ((o->policy == DPL_POLICY_BOUNDED ||
		     o->policy == DPL_POLICY_ZB_AUTO) && o->cap == 0 &&
		    o->bytes.cap == NULL)
			return cli_usage_error(CMD, "--policy %s needs --cap C, "
					       "or --cap-bytes B with "
					       "--cap-act-bytes A",
					       dpl_policy_name(o->policy));
		if (o->policy != DPL_POLICY_BOUNDED &&
		    o->policy != DPL_POLICY_ZB_AUTO && o->cap != 0)
			return cli_usage_error(CMD, "--cap applies to --policy "
					       "bounded and zb-auto only");
		J->nstages = o->stages * (chunks ? chunks : 1);
		J->ranks = o->stages;
	}
	if (J->nstages > TRAIN_MAX_STAGES)
		return cli_usage_error(CMD, "%u stages (at most %u)",
				       J->nstages, TRAIN_MAX_STAGES);
	if (!o->synthetic && J->nstages > J->layers)
		return cli_usage_error(CMD, "more stages (%u) than layers "
				       "(%u): every stage needs a layer",
				       J->nstages, J->layers);
	if (o->nreplicas > 1 && o->nreplicas != J->ranks)
		return cli_usage_error(CMD, "--replicas: %zu values for %u "
				       "stages (give one, or one per stage%s)",
				       o->nreplicas, J->ranks,
				       chunks ? " rank" : "");
	for (p = 0; p < J->ranks; p++) {
		J->reps[p] = o->nreplicas == 0   ? 1
			     : o->nreplicas == 1 ? o->replicas[0]
						 : o->replicas[p];
		world += J->reps[p];
	}
	if (world > TRAIN_MAX_RANKS)
		return cli_usage_error(CMD, "%llu ranks: this command runs "
				       "at most %u ranks as threads",
				       (unsigned long long)world,
				       TRAIN_MAX_RANKS);
	J->world = (uint32_t)world;
	if (o->batch < o->microbatches)
		return cli_usage_error(CMD, "--batch %llu < --microbatches "
				       "%u: every micro-batch needs a sample",
				       (unsigned long long)o->batch,
				       o->microbatches);
	if (o->momentum_set && o->optimizer != 0)
		return cli_usage_error(CMD, "--momentum applies to "
				       "--optimizer sgd only");
	if (o->check && o->synthetic)
		return cli_usage_error(CMD, "--check compares weights: it "
				       "needs --device cpu or cuda");
	if (o->precision_set && o->synthetic)
		return cli_usage_error(CMD, "--dtype %s: the synthetic device "
				       "has no model (--act-bytes sizes its "
				       "activations); it needs --device cpu "
				       "or cuda",
				       train_dtype_name(o));
	if (o->fail && o->fail_rank >= J->world)
		return cli_usage_error(CMD, "--fail-at: rank %u out of range "
				       "(world of %u ranks)", o->fail_rank,
				       J->world);
	if (o->fail && o->fail_iter >= o->iterations)
		return cli_usage_error(CMD, "--fail-at: iteration %u out of "
				       "range (%u iterations)", o->fail_iter,
				       o->iterations);
	if (o->cuda && (rc = resolve_cuda(J)) != 0)
		return rc;
	if ((rc = resolve_cap_bytes(J, &sp, cap_act)) != 0)
		return rc;
	if (!o->schedule_path) {
		sp.stages = o->stages;
		sp.microbatches = o->microbatches;
		sp.policy = o->policy;
		sp.chunks = o->chunks;
		sp.cap_all = o->cap;
		if (dpl_schedule_build(&sp, &J->sched) != 0)
			return cli_usage_error(CMD, "%s", dpl_last_error());
		if (dpl_schedule_lower(J->sched) != 0)
			return cli_fail(CMD, "%s", dpl_last_error());
	}
	if (!o->synthetic && !o->plan_path) {
#if defined(DPL_HAVE_DEVICE_CPU)
		if (dpl_mlp_bounds(J->layers, J->nstages, J->bounds) != 0)
			return cli_usage_error(CMD, "%s", dpl_last_error());
#else
		return cli_usage_error(CMD, "--device cpu: dpl was built "
				       "without the CPU device (OpenBLAS)");
#endif
	}
	/* What the model's dpl_mlp_activation_bytes says: a value per
	 * output of the stage's last layer. */
	for (s = 0; s < J->nstages; s++) {
		uint64_t w = o->widths[J->bounds[s + 1]];

		J->act[s] = o->synthetic ? o->act_bytes
					 : train_value_bytes(o) * w;
	}
	return 0;
}
