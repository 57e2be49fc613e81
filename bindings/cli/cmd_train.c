/*
 * cmd_train.c - `dpl train`: train the reference model (or time the
 * synthetic device) with one runner per rank, the ranks being threads
 * over the in-process transport or processes over a real transport
 * (shm, ucx, ofi: started here with --nprocs, or by a launcher that sets
 * the rank in the environment); report loss, throughput and activation
 * memory per stage, and optionally check the final weights against
 * training on one device.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include <dpl/dpl.h>
#include <dpl/json.h>

#include "cli.h"
#include "launch.h"

#if defined(DPL_HAVE_BUILTINS)
#include <dpl/device_synthetic.h>
#if defined(DPL_HAVE_DEVICE_CPU)
#include <dpl/device_cpu.h>
#endif
extern const struct dpl_transport_ops dpl_transport_inproc;
#endif
#if defined(DPL_HAVE_TRANSPORT_SHM)
extern const struct dpl_transport_ops dpl_transport_shm;
#endif
#if defined(DPL_HAVE_TRANSPORT_UCX)
extern const struct dpl_transport_ops dpl_transport_ucx;
#endif
#if defined(DPL_HAVE_TRANSPORT_OFI)
extern const struct dpl_transport_ops dpl_transport_ofi;
#endif

#define CMD "train"
#define MAX_LAYERS 256
#define MAX_RANKS 256
#define MAX_STAGES 1024
#define CHECK_LIMIT 1e-5

static void usage(FILE *f)
{
	fprintf(f,
		"usage: dpl train [flags]\n"
		"\n"
		"Train a small MLP with one runner per rank and report the loss "
		"per iteration,\nsamples/s and the peak activation buffers per "
		"stage. The ranks are threads\nover the in-process transport, "
		"or processes over shm, ucx or ofi: started\nhere with "
		"--nprocs, or by a launcher that gives each its rank in "
		"DPL_RANK,\nDPL_WORLD_SIZE, DPL_ROOT (or torchrun's RANK, "
		"WORLD_SIZE, MASTER_ADDR,\nMASTER_PORT). Rank 0 prints the "
		"results; the others only their errors.\n"
		"\n"
		"layout and schedule:\n"
		"  --stages S          pipeline stages (ranks for interleaved); "
		"default 4\n"
		"  --replicas R|R0,..  replicas of every stage, or of each "
		"stage; default 1\n"
		"  --microbatches M    micro-batches per iteration; default 8\n"
		"  --policy P          gpipe, 1f1b, 1f1b-comm, bounded, "
		"interleaved, zb-h1;\n"
		"                      default 1f1b\n"
		"  --chunks V          model chunks per rank (interleaved)\n"
		"  --cap C             in-flight micro-batches per stage "
		"(bounded)\n"
		"  --plan PLAN.json    take stages, replicas, micro-batches "
		"and policy from a\n"
		"                      plan written by dpl plan\n"
		"training:\n"
		"  --iterations N      default 20\n"
		"  --batch B           samples per iteration; default 64\n"
		"  --widths W0,..,WL   layer widths (input .. classes); "
		"default\n"
		"                      16,64,64,64,64,64,64,64,4\n"
		"  --seed N            initialisation and data; default 1\n"
		"  --activation relu|gelu   --loss ce|mse   "
		"--optimizer adam|sgd\n"
		"                      defaults relu, ce, adam\n"
		"  --lr X              default 0.003 (adam), 0.05 (sgd)\n"
		"  --momentum X        sgd; default 0.9\n"
		"device:\n"
		"  --device cpu|synthetic   default cpu\n"
		"  --fwd-ms F --bwd-ms B    synthetic: time per micro-batch; "
		"default 1, 2\n"
		"  --act-bytes N       synthetic: activation bytes per sample; "
		"default 4096\n"
		"ranks:\n"
		"  --transport T       inproc (threads), shm, ucx or ofi; "
		"default inproc, or\n"
		"                      shm with --nprocs or a rank in the "
		"environment\n"
		"  --nprocs N          start N local processes, one per rank "
		"(N = the sum of\n"
		"                      the replicas), on 127.0.0.1; once one "
		"fails, the others\n"
		"                      have the timeout + 1 s to exit\n"
		"  --pid-dir DIR       with --nprocs: write DIR/rank-R.pid for "
		"every rank\n"
		"runs and output:\n"
		"  --timeout SECONDS   bound on every wait; default 60\n"
		"  --trace OUT.json    Chrome trace of the last iteration\n"
		"  --json              print one JSON object\n"
		"  --check             also train on one device; exit 1 when "
		"the largest\n"
		"                      relative weight difference exceeds "
		"1e-5\n"
		"  --fail-at RANK:ITER make that rank's forward fail at that "
		"iteration\n"
		"\n"
		"The relative difference of two weights a, b is |a - b| / "
		"max(|a|, |b|, 1e-8).\nExit status: 0 done, 1 training failed "
		"or --check above 1e-5, 2 bad flags,\n3 (a rank process) "
		"stopped because another rank failed.\n");
}

struct opts {
	uint32_t stages;
	bool stages_set;
	uint32_t replicas[MAX_STAGES];
	size_t nreplicas;
	uint32_t microbatches;
	bool mb_set;
	enum dpl_policy policy;
	bool policy_set;
	uint32_t chunks;
	uint32_t cap;
	uint32_t iterations;
	uint64_t batch;
	bool batch_set;
	uint32_t widths[MAX_LAYERS + 1];
	size_t nwidths;
	bool widths_set;
	uint64_t seed;
	bool synthetic;
	const char *plan_path;
	double timeout_s;
	const char *trace_path;
	bool json;
	bool check;
	bool fail;
	uint32_t fail_rank;
	uint32_t fail_iter;
	uint32_t activation;
	uint32_t loss;
	uint32_t optimizer;
	bool optimizer_set;
	double lr;
	double momentum;
	bool momentum_set;
	double fwd_ms, bwd_ms;
	uint64_t act_bytes;
	const char *transport; /* NULL: by mode */
	uint32_t nprocs;       /* 0: not launching */
	const char *pid_dir;
};

static int parse_name(const char *flag, const char *v, const char *a,
		      const char *b, uint32_t *out)
{
	if (strcmp(v, a) == 0) {
		*out = 0;
		return 0;
	}
	if (strcmp(v, b) == 0) {
		*out = 1;
		return 0;
	}
	return cli_usage_error(CMD, "%s: '%s' is not %s or %s", flag, v, a,
			       b);
}

static int parse_fail_at(const char *v, struct opts *o)
{
	const char *colon = strchr(v, ':');
	char rank[32];
	int rc;

	if (colon == NULL || (size_t)(colon - v) >= sizeof rank)
		return cli_usage_error(CMD, "--fail-at: '%s' is not "
				       "RANK:ITERATION", v);
	memcpy(rank, v, (size_t)(colon - v));
	rank[colon - v] = '\0';
	if ((rc = cli_u32(CMD, "--fail-at rank", rank, 0, MAX_RANKS - 1,
			  &o->fail_rank)) != 0)
		return rc;
	if ((rc = cli_u32(CMD, "--fail-at iteration", colon + 1, 0,
			  UINT32_MAX - 1, &o->fail_iter)) != 0)
		return rc;
	o->fail = true;
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	const char *v;
	int i, rc = 0;

	for (i = 1; i < argc && rc == 0; i++) {
		if (cli_switch(argv, i, "--json")) {
			o->json = true;
		} else if (cli_switch(argv, i, "--check")) {
			o->check = true;
		} else if (cli_flag(argc, argv, &i, "--stages", &v)) {
			rc = v ? cli_u32(CMD, "--stages", v, 1, MAX_STAGES,
					 &o->stages)
			       : cli_missing(CMD, "--stages");
			o->stages_set = true;
		} else if (cli_flag(argc, argv, &i, "--replicas", &v)) {
			rc = v ? cli_u32_list(CMD, "--replicas", v, 1,
					      MAX_RANKS, o->replicas,
					      MAX_STAGES, &o->nreplicas)
			       : cli_missing(CMD, "--replicas");
		} else if (cli_flag(argc, argv, &i, "--microbatches", &v)) {
			rc = v ? cli_u32(CMD, "--microbatches", v, 1,
					 1u << 20, &o->microbatches)
			       : cli_missing(CMD, "--microbatches");
			o->mb_set = true;
		} else if (cli_flag(argc, argv, &i, "--policy", &v)) {
			if (v == NULL) {
				rc = cli_missing(CMD, "--policy");
			} else if (dpl_policy_parse(v, &o->policy) != 0 ||
				   o->policy == DPL_POLICY_CUSTOM) {
				rc = cli_usage_error(CMD, "--policy: %s",
						     dpl_last_error()[0]
							     ? dpl_last_error()
							     : v);
			}
			o->policy_set = true;
		} else if (cli_flag(argc, argv, &i, "--chunks", &v)) {
			rc = v ? cli_u32(CMD, "--chunks", v, 2, 64,
					 &o->chunks)
			       : cli_missing(CMD, "--chunks");
		} else if (cli_flag(argc, argv, &i, "--cap", &v)) {
			rc = v ? cli_u32(CMD, "--cap", v, 1, 1u << 20, &o->cap)
			       : cli_missing(CMD, "--cap");
		} else if (cli_flag(argc, argv, &i, "--iterations", &v)) {
			rc = v ? cli_u32(CMD, "--iterations", v, 1, 1000000,
					 &o->iterations)
			       : cli_missing(CMD, "--iterations");
		} else if (cli_flag(argc, argv, &i, "--batch", &v)) {
			rc = v ? cli_u64(CMD, "--batch", v, 1, 1u << 24,
					 &o->batch)
			       : cli_missing(CMD, "--batch");
			o->batch_set = true;
		} else if (cli_flag(argc, argv, &i, "--widths", &v)) {
			rc = v ? cli_u32_list(CMD, "--widths", v, 1, 1u << 16,
					      o->widths, MAX_LAYERS + 1,
					      &o->nwidths)
			       : cli_missing(CMD, "--widths");
			if (rc == 0 && o->nwidths < 2)
				rc = cli_usage_error(CMD, "--widths: needs an "
						     "input and an output "
						     "width (got '%s')", v);
			o->widths_set = true;
		} else if (cli_flag(argc, argv, &i, "--seed", &v)) {
			rc = v ? cli_u64(CMD, "--seed", v, 0, UINT64_MAX,
					 &o->seed)
			       : cli_missing(CMD, "--seed");
		} else if (cli_flag(argc, argv, &i, "--device", &v)) {
			uint32_t d = 0;

			rc = v ? parse_name("--device", v, "cpu", "synthetic",
					    &d)
			       : cli_missing(CMD, "--device");
			o->synthetic = d == 1;
		} else if (cli_flag(argc, argv, &i, "--plan", &v)) {
			o->plan_path = v;
			rc = v ? 0 : cli_missing(CMD, "--plan");
		} else if (cli_flag(argc, argv, &i, "--timeout", &v)) {
			rc = v ? cli_double(CMD, "--timeout", v, 0.001, 86400,
					    &o->timeout_s)
			       : cli_missing(CMD, "--timeout");
		} else if (cli_flag(argc, argv, &i, "--trace", &v)) {
			o->trace_path = v;
			rc = v ? 0 : cli_missing(CMD, "--trace");
		} else if (cli_flag(argc, argv, &i, "--fail-at", &v)) {
			rc = v ? parse_fail_at(v, o)
			       : cli_missing(CMD, "--fail-at");
		} else if (cli_flag(argc, argv, &i, "--activation", &v)) {
			rc = v ? parse_name("--activation", v, "relu", "gelu",
					    &o->activation)
			       : cli_missing(CMD, "--activation");
		} else if (cli_flag(argc, argv, &i, "--loss", &v)) {
			rc = v ? parse_name("--loss", v, "ce", "mse", &o->loss)
			       : cli_missing(CMD, "--loss");
		} else if (cli_flag(argc, argv, &i, "--optimizer", &v)) {
			rc = v ? parse_name("--optimizer", v, "sgd", "adam",
					    &o->optimizer)
			       : cli_missing(CMD, "--optimizer");
			o->optimizer_set = true;
		} else if (cli_flag(argc, argv, &i, "--lr", &v)) {
			rc = v ? cli_double(CMD, "--lr", v, 1e-12, 100, &o->lr)
			       : cli_missing(CMD, "--lr");
		} else if (cli_flag(argc, argv, &i, "--momentum", &v)) {
			rc = v ? cli_double(CMD, "--momentum", v, 0, 0.999999,
					    &o->momentum)
			       : cli_missing(CMD, "--momentum");
			o->momentum_set = true;
		} else if (cli_flag(argc, argv, &i, "--fwd-ms", &v)) {
			rc = v ? cli_double(CMD, "--fwd-ms", v, 0, 60000,
					    &o->fwd_ms)
			       : cli_missing(CMD, "--fwd-ms");
		} else if (cli_flag(argc, argv, &i, "--bwd-ms", &v)) {
			rc = v ? cli_double(CMD, "--bwd-ms", v, 0, 60000,
					    &o->bwd_ms)
			       : cli_missing(CMD, "--bwd-ms");
		} else if (cli_flag(argc, argv, &i, "--transport", &v)) {
			o->transport = v;
			rc = v ? 0 : cli_missing(CMD, "--transport");
		} else if (cli_flag(argc, argv, &i, "--nprocs", &v)) {
			rc = v ? cli_u32(CMD, "--nprocs", v, 1, MAX_RANKS,
					 &o->nprocs)
			       : cli_missing(CMD, "--nprocs");
		} else if (cli_flag(argc, argv, &i, "--pid-dir", &v)) {
			o->pid_dir = v;
			rc = v ? 0 : cli_missing(CMD, "--pid-dir");
		} else if (cli_flag(argc, argv, &i, "--act-bytes", &v)) {
			rc = v ? cli_u64(CMD, "--act-bytes", v, 0, 1u << 30,
					 &o->act_bytes)
			       : cli_missing(CMD, "--act-bytes");
		} else {
			rc = cli_unknown(CMD, argv[i]);
		}
	}
	return rc;
}

/* ---- the resolved job ---- */

struct job {
	struct opts o;
	dpl_schedule *sched;
	uint32_t ranks;      /* pipeline ranks */
	uint32_t nstages;    /* S (S * V for interleaved) */
	uint32_t layers;
	uint32_t bounds[MAX_STAGES + 1];
	uint32_t reps[MAX_STAGES]; /* per pipeline rank */
	uint32_t world;
	uint64_t act[MAX_STAGES];
	char world_name[64];
	const struct dpl_transport_ops *tops;
	const char *boot;    /* transport bootstrap; NULL: environment */
	bool procs;          /* ranks are processes (this one runs one) */
	/* results */
	double *loss;        /* [iterations][world], NAN where not last */
	atomic_uint progress;  /* steps done, all ranks */
	atomic_uint finished;  /* rank threads done */
	atomic_int setup_failed;
	pthread_barrier_t bar;
};

/* The final weights and biases of one layer, wherever they live. */
struct layer_view {
	const double *w, *b;
	size_t nw, nb;
};

struct rank {
	struct job *J;
	uint32_t rank, prank, replica;
	dpl_transport *t;
	dpl_device *dev;
	dpl_runner *r;
	void *model;          /* dpl_mlp or dpl_synthetic */
	int rc;
	char msg[700];
	uint32_t steps;
	uint64_t t0, t1;
	/* --fail-at wrapper */
	const struct dpl_stage_ops *inner;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int read_plan(struct job *J)
{
	struct opts *o = &J->o;
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
	if (plan.stages > MAX_STAGES)
		return cli_usage_error(CMD, "%s: %u stages (at most %u)",
				       o->plan_path, plan.stages, MAX_STAGES);
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
		if (J->layers > MAX_LAYERS)
			return cli_usage_error(CMD, "--plan %s: %u layers "
					       "(at most %u)", o->plan_path,
					       J->layers, MAX_LAYERS);
		o->nwidths = J->layers + 1;
		for (i = 0; i <= J->layers; i++)
			o->widths[i] = i == 0 ? 16 : i == J->layers ? 4 : 64;
	}
	return 0;
}

/* Check everything and build the schedule; nothing runs yet. */
static int resolve(struct job *J)
{
	static const uint32_t def_widths[] = {16, 64, 64, 64, 64, 64, 64, 64,
					      4};
	struct opts *o = &J->o;
	struct dpl_schedule_params sp = {0};
	uint64_t world = 0;
	uint32_t p, s;
	int rc;

	if (o->plan_path && (rc = read_plan(J)) != 0)
		return rc;
	if (!o->widths_set && !o->plan_path) {
		memcpy(o->widths, def_widths, sizeof def_widths);
		o->nwidths = sizeof def_widths / sizeof def_widths[0];
	}
	if (!o->plan_path)
		J->layers = (uint32_t)o->nwidths - 1;
	if (o->policy == DPL_POLICY_INTERLEAVED && o->chunks == 0)
		return cli_usage_error(CMD, "--policy interleaved needs "
				       "--chunks V (>= 2)");
	if (o->policy != DPL_POLICY_INTERLEAVED && o->chunks != 0)
		return cli_usage_error(CMD, "--chunks applies to --policy "
				       "interleaved only");
	if (o->policy == DPL_POLICY_BOUNDED && o->cap == 0)
		return cli_usage_error(CMD, "--policy bounded needs --cap C");
	if (o->policy != DPL_POLICY_BOUNDED && o->cap != 0)
		return cli_usage_error(CMD, "--cap applies to --policy "
				       "bounded only");
	J->nstages = o->stages * (o->chunks ? o->chunks : 1);
	J->ranks = o->stages;
	if (J->nstages > MAX_STAGES)
		return cli_usage_error(CMD, "%u stages (at most %u)",
				       J->nstages, MAX_STAGES);
	if (!o->synthetic && J->nstages > J->layers)
		return cli_usage_error(CMD, "more stages (%u) than layers "
				       "(%u): every stage needs a layer",
				       J->nstages, J->layers);
	if (o->nreplicas > 1 && o->nreplicas != J->ranks)
		return cli_usage_error(CMD, "--replicas: %zu values for %u "
				       "stages (give one, or one per stage%s)",
				       o->nreplicas, J->ranks,
				       o->chunks ? " rank" : "");
	for (p = 0; p < J->ranks; p++) {
		J->reps[p] = o->nreplicas == 0   ? 1
			     : o->nreplicas == 1 ? o->replicas[0]
						 : o->replicas[p];
		world += J->reps[p];
	}
	if (world > MAX_RANKS)
		return cli_usage_error(CMD, "%llu ranks: this command runs "
				       "at most %u ranks as threads",
				       (unsigned long long)world, MAX_RANKS);
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
				       "needs --device cpu");
	if (o->fail && o->fail_rank >= J->world)
		return cli_usage_error(CMD, "--fail-at: rank %u out of range "
				       "(world of %u ranks)", o->fail_rank,
				       J->world);
	if (o->fail && o->fail_iter >= o->iterations)
		return cli_usage_error(CMD, "--fail-at: iteration %u out of "
				       "range (%u iterations)", o->fail_iter,
				       o->iterations);
	sp.stages = o->stages;
	sp.microbatches = o->microbatches;
	sp.policy = o->policy;
	sp.chunks = o->chunks;
	sp.cap_all = o->cap;
	if (dpl_schedule_build(&sp, &J->sched) != 0)
		return cli_usage_error(CMD, "%s", dpl_last_error());
	if (dpl_schedule_lower(J->sched) != 0)
		return cli_fail(CMD, "%s", dpl_last_error());
	if (!o->synthetic && !o->plan_path) {
#if defined(DPL_HAVE_DEVICE_CPU)
		if (dpl_mlp_bounds(J->layers, J->nstages, J->bounds) != 0)
			return cli_usage_error(CMD, "%s", dpl_last_error());
#else
		return cli_usage_error(CMD, "--device cpu: dpl was built "
				       "without the CPU device (OpenBLAS)");
#endif
	}
	for (s = 0; s < J->nstages; s++)
		J->act[s] = o->synthetic ? o->act_bytes
					 : 8u * (uint64_t)
							o->widths[J->bounds[s + 1]];
	return 0;
}

/* ---- stage callbacks: the model's, or the model's with a failure ---- */

static int fail_forward(void *u, const struct dpl_stage_args *a)
{
	struct rank *k = u;
	const struct opts *o = &k->J->o;

	if (o->fail && k->rank == o->fail_rank && a->iteration == o->fail_iter)
		return dpl_set_error(DPL_ECALLBACK,
				     "injected failure (--fail-at %u:%u)",
				     o->fail_rank, o->fail_iter);
	return k->inner->forward(k->model, a);
}

static int pass_backward(void *u, const struct dpl_stage_args *a)
{
	struct rank *k = u;

	return k->inner->backward(k->model, a);
}

static int pass_input(void *u, const struct dpl_stage_args *a)
{
	struct rank *k = u;

	return k->inner->backward_input(k->model, a);
}

static int pass_weight(void *u, const struct dpl_stage_args *a)
{
	struct rank *k = u;

	return k->inner->backward_weight(k->model, a);
}

static int pass_grads(void *u, uint32_t stage, const struct dpl_buffer **b,
		      size_t *n)
{
	struct rank *k = u;

	return k->inner->grads(k->model, stage, b, n);
}

static int pass_step(void *u, uint32_t stage, uint64_t it)
{
	struct rank *k = u;

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

#if defined(DPL_HAVE_BUILTINS)

static void mlp_params(const struct opts *o, struct dpl_mlp_params *p);

/* Samples per micro-batch on one replica of a rank with `r` replicas. */
static uint64_t max_samples(const struct job *J, uint32_t r)
{
	uint64_t b, e, mb;

	dpl_split(J->o.batch, J->o.microbatches, 0, &b, &e);
	mb = e - b;
	dpl_split(mb, r, 0, &b, &e);
	return e - b > 0 ? e - b : 1;
}

static int make_model(struct rank *k)
{
	struct job *J = k->J;
	uint32_t s;

	if (J->o.synthetic) {
		struct dpl_synthetic_params sp = {0};
		uint64_t live[MAX_STAGES];
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
		uint8_t local[MAX_STAGES];
		uint32_t slots[MAX_STAGES];

		mlp_params(&J->o, &mp);
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
		k->inner = &dpl_mlp_stage_ops;
		return dpl_mlp_create(&mp, &l, (dpl_mlp **)&k->model);
	}
#else
	return dpl_set_error(DPL_ENOTSUP, "built without the CPU device");
#endif
}

/* Open rank k's transport, device, model and runner; 0 or k->rc. */
static int rank_setup(struct rank *k)
{
	struct job *J = k->J;
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params rp = {0};
	uint32_t timeout_ms = (uint32_t)(J->o.timeout_s * 1000.0 + 0.5);
	size_t nlist = 0;
	int rc;

	tp.rank = k->rank;
	tp.world_size = J->world;
	tp.bootstrap = J->boot;
	tp.timeout_ms = J->procs ? timeout_ms : 0;
	rc = dpl_transport_open(J->tops, &tp, &k->t);
	if (rc == 0)
		rc = dpl_device_open(J->o.synthetic ? &dpl_device_synthetic
#if defined(DPL_HAVE_DEVICE_CPU)
						    : &dpl_device_cpu,
#else
						    : &dpl_device_host,
#endif
				     NULL, &k->dev);
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
		rc = dpl_runner_create(&rp, &k->r);
	}
	if (rc != 0) {
		snprintf(k->msg, sizeof k->msg, "rank %u: setup: %s", k->rank,
			 dpl_last_error());
		k->rc = rc;
	}
	return rc;
}

/* Rank k's iterations, until done or the first failure (k->rc). */
static void rank_loop(struct rank *k)
{
	struct job *J = k->J;
	uint32_t it;
	int rc;

	k->t0 = now_ns();
	for (it = 0; !atomic_load(&J->setup_failed) && it < J->o.iterations;
	     it++) {
		rc = dpl_runner_step(k->r);
		if (rc != 0) {
			k->rc = rc;
			snprintf(k->msg, sizeof k->msg, "%s",
				 dpl_last_error());
			break;
		}
		k->steps++;
		atomic_fetch_add(&J->progress, 1);
#if defined(DPL_HAVE_DEVICE_CPU)
		if (!J->o.synthetic) {
			double l;

			if (dpl_mlp_loss(k->model, &l) == 0)
				J->loss[(size_t)it * J->world + k->rank] = l;
		}
#endif
	}
	k->t1 = now_ns();
}

static void *rank_main(void *arg)
{
	struct rank *k = arg;
	struct job *J = k->J;

	if (rank_setup(k) != 0)
		atomic_store(&J->setup_failed, 1);
	pthread_barrier_wait(&J->bar);
	rank_loop(k);
	atomic_fetch_add(&J->finished, 1);
	return NULL;
}

static void destroy_model(struct rank *k)
{
	if (k->J->o.synthetic)
		dpl_synthetic_destroy(k->model);
#if defined(DPL_HAVE_DEVICE_CPU)
	else
		dpl_mlp_destroy(k->model);
#endif
	k->model = NULL;
}

#if defined(DPL_HAVE_DEVICE_CPU)

static void mlp_params(const struct opts *o, struct dpl_mlp_params *p)
{
	memset(p, 0, sizeof *p);
	p->layers = (uint32_t)o->nwidths - 1;
	p->widths = o->widths;
	p->activation = o->activation;
	p->loss = o->loss;
	p->optimizer = o->optimizer;
	p->lr = o->lr > 0 ? o->lr
			  : o->optimizer == DPL_MLP_ADAM ? 0.003 : 0.05;
	p->momentum = o->optimizer == DPL_MLP_SGD
			      ? (o->momentum_set ? o->momentum : 0.9)
			      : 0;
	p->seed = o->seed;
	p->dataset = 16 * o->batch;
}

/* The stage that holds layer `layer`. */
static uint32_t layer_stage(const struct job *J, uint32_t layer)
{
	uint32_t s = 0;

	while (s + 1 < J->nstages && J->bounds[s + 1] <= layer)
		s++;
	return s;
}

/* The model of layer l's stage on replica 0 of its pipeline rank. */
static const dpl_mlp *owner(const struct job *J, struct rank *ranks,
			    uint32_t layer)
{
	uint32_t s, p, base = 0;

	p = dpl_schedule_stage_rank(J->sched, layer_stage(J, layer));
	for (s = 0; s < p; s++)
		base += J->reps[s];
	return ranks[base].model;
}

/* FNV-1a over every layer's weights then biases, layer by layer. */
static uint64_t digest(const struct job *J, const struct layer_view *v)
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

static double rel(double a, double b)
{
	double m = fmax(fmax(fabs(a), fabs(b)), 1e-8);

	return fabs(a - b) / m;
}

/* Train on one device (no runner) and compare the final weights. */
static int check_one_device(const struct job *J, const struct layer_view *v,
			    double *max_rel)
{
	struct dpl_mlp_params mp;
	struct dpl_mlp_layout l = {0};
	struct dpl_stage_args a = {0};
	uint32_t bounds[2] = {0, J->layers}, it, layer;
	dpl_mlp *m = NULL;
	int rc;

	mlp_params(&J->o, &mp);
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

/* ---- output ---- */

struct result {
	double *loss;          /* [iterations] */
	double samples_per_s;
	double seconds;
	uint32_t peak[MAX_STAGES];
	uint32_t bound[MAX_STAGES];
	uint64_t peak_bytes[MAX_STAGES];
	bool have_digest;
	uint64_t digest;
	bool have_check;
	double max_rel;
};

static void print_text(const struct job *J, const struct result *R)
{
	const struct opts *o = &J->o;
	uint64_t b, e;
	uint32_t it, s;

	dpl_split(o->batch, o->microbatches, 0, &b, &e);
	printf("dpl train: %u stages on %u ranks, %u micro-batches of up to "
	       "%llu samples, %s, %s, %s\n",
	       J->nstages, J->world, o->microbatches,
	       (unsigned long long)(e - b), dpl_policy_name(o->policy),
	       J->tops->name, o->synthetic ? "synthetic" : "cpu");
	if (!o->synthetic) {
		printf("%9s  %s\n", "iteration", "loss");
		for (it = 0; it < o->iterations; it++)
			printf("%9u  %.6f\n", it + 1, R->loss[it]);
	}
	printf("samples/s: %.0f (%u iterations of %llu samples in %.3f s)\n",
	       R->samples_per_s, o->iterations, (unsigned long long)o->batch,
	       R->seconds);
	printf("peak activation buffers per stage (replica 0):\n");
	for (s = 0; s < J->nstages; s++)
		printf("  stage %u: %u micro-batches in flight (bound %u), "
		       "%llu bytes\n", s, R->peak[s], R->bound[s],
		       (unsigned long long)R->peak_bytes[s]);
	if (R->have_digest)
		printf("weights digest: %016llx\n",
		       (unsigned long long)R->digest);
	if (R->have_check)
		printf("check: largest relative weight difference against one "
		       "device %.3g (%s %g)\n", R->max_rel,
		       R->max_rel <= CHECK_LIMIT ? "within" : "ABOVE",
		       CHECK_LIMIT);
}

static int print_json(const struct job *J, const struct result *R)
{
	const struct opts *o = &J->o;
	cJSON *root = cJSON_CreateObject(), *a;
	char hex[24], *text;
	uint32_t i;

	if (root == NULL)
		return cli_fail(CMD, "out of memory");
	cJSON_AddStringToObject(root, "policy", dpl_policy_name(o->policy));
	cJSON_AddNumberToObject(root, "stages", J->nstages);
	cJSON_AddNumberToObject(root, "world_size", J->world);
	cJSON_AddStringToObject(root, "transport", J->tops->name);
	cJSON_AddNumberToObject(root, "microbatches", o->microbatches);
	cJSON_AddNumberToObject(root, "batch", (double)o->batch);
	cJSON_AddNumberToObject(root, "iterations", o->iterations);
	cJSON_AddStringToObject(root, "device",
				o->synthetic ? "synthetic" : "cpu");
	a = cJSON_AddArrayToObject(root, "loss");
	for (i = 0; !o->synthetic && i < o->iterations; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(R->loss[i]));
	cJSON_AddNumberToObject(root, "samples_per_s", R->samples_per_s);
	cJSON_AddNumberToObject(root, "seconds", R->seconds);
	a = cJSON_AddArrayToObject(root, "peak_inflight");
	for (i = 0; i < J->nstages; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(R->peak[i]));
	a = cJSON_AddArrayToObject(root, "bound");
	for (i = 0; i < J->nstages; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(R->bound[i]));
	a = cJSON_AddArrayToObject(root, "peak_buffer_bytes");
	for (i = 0; i < J->nstages; i++)
		cJSON_AddItemToArray(
			a, cJSON_CreateNumber((double)R->peak_bytes[i]));
	if (R->have_check)
		cJSON_AddNumberToObject(root, "max_rel_diff", R->max_rel);
	if (R->have_digest) {
		snprintf(hex, sizeof hex, "%016llx",
			 (unsigned long long)R->digest);
		cJSON_AddStringToObject(root, "weights_digest", hex);
	}
	text = cJSON_Print(root);
	cJSON_Delete(root);
	if (text == NULL)
		return cli_fail(CMD, "out of memory");
	printf("%s\n", text);
	free(text);
	return 0;
}

static void progress_bar(struct job *J)
{
	unsigned total = J->o.iterations * J->world, done;
	struct timespec ts = {0, 100000000};
	int w = 30, n;

	for (;;) {
		done = atomic_load(&J->progress);
		n = (int)((uint64_t)done * (unsigned)w / total);
		fprintf(stderr, "\r  training [%.*s%*s] %u/%u", n,
			"##############################", w - n, "",
			done / J->world, J->o.iterations);
		if (done >= total || atomic_load(&J->finished) == J->world)
			break;
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "\r%*s\r", w + 30, "");
}

static int write_trace(const struct job *J, struct rank *ranks)
{
	const dpl_runner **rs = calloc(J->world, sizeof *rs);
	struct cli_out out;
	uint32_t i;
	int rc;

	if (rs == NULL)
		return cli_fail(CMD, "out of memory");
	for (i = 0; i < J->world; i++)
		rs[i] = ranks[i].r;
	if ((rc = cli_out_open(CMD, J->o.trace_path, &out)) != 0) {
		free(rs);
		return rc;
	}
	if (dpl_runner_write_traces(rs, J->world, out.f) != 0) {
		cli_out_abort(&out);
		free(rs);
		return cli_fail(CMD, "%s: %s", J->o.trace_path,
				dpl_last_error());
	}
	free(rs);
	return cli_out_commit(CMD, &out);
}

/* Sum the loss over the ranks of each iteration; the bound per stage. */
static void finish_results(const struct job *J, struct result *R)
{
	uint32_t i, s;

	for (i = 0; i < J->o.iterations; i++) {
		double sum = 0;

		for (s = 0; s < J->world; s++)
			if (!isnan(J->loss[(size_t)i * J->world + s]))
				sum += J->loss[(size_t)i * J->world + s];
		R->loss[i] = sum;
	}
	for (s = 0; s < J->nstages; s++)
		R->bound[s] = dpl_schedule_bound(J->sched, s);
}

/* Digest and --check over the final weights in v. CLI exit code. */
static int weights_results(const struct job *J, const struct layer_view *v,
			   struct result *R)
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

/* Run the ranks as threads; fill R. Returns a CLI exit code. */
static int train(struct job *J, struct result *R)
{
	struct rank *ranks = calloc(J->world, sizeof *ranks);
	pthread_t *th = calloc(J->world, sizeof *th);
	struct layer_view *v = calloc(J->layers + 1, sizeof *v);
	uint64_t t0 = UINT64_MAX, t1 = 0;
	uint32_t i, p, s, failed = 0;
	int rc = CLI_OK;

	if (ranks == NULL || th == NULL || v == NULL) {
		free(ranks);
		free(th);
		free(v);
		return cli_fail(CMD, "out of memory");
	}
	snprintf(J->world_name, sizeof J->world_name, "dpl-train-%ld",
		 (long)getpid());
	J->boot = J->world_name;
	pthread_barrier_init(&J->bar, NULL, J->world);
	for (i = 0, p = 0; p < J->ranks; p++)
		for (s = 0; s < J->reps[p]; s++, i++) {
			ranks[i].J = J;
			ranks[i].rank = i;
			ranks[i].prank = p;
			ranks[i].replica = s;
		}
	for (i = 0; i < J->world; i++)
		if (pthread_create(&th[i], NULL, rank_main, &ranks[i]) != 0) {
			fprintf(stderr, "dpl train: cannot start thread %u\n",
				i);
			exit(CLI_FAIL);
		}
	if (isatty(STDERR_FILENO) && !J->o.json)
		progress_bar(J);
	for (i = 0; i < J->world; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&J->bar);
	for (i = 0; i < J->world; i++) {
		if (ranks[i].rc != 0) {
			fprintf(stderr, "dpl train: %s\n", ranks[i].msg);
			failed++;
		}
		t0 = ranks[i].t0 < t0 ? ranks[i].t0 : t0;
		t1 = ranks[i].t1 > t1 ? ranks[i].t1 : t1;
	}
	if (failed) {
		rc = cli_fail(CMD, "%u of %u ranks failed", failed, J->world);
		goto out;
	}
	R->seconds = (double)(t1 - t0) / 1e9;
	R->samples_per_s = (double)J->o.batch * J->o.iterations / R->seconds;
	finish_results(J, R);
	for (s = 0; s < J->nstages; s++) {
		struct dpl_runner_stage_stats ss;
		uint32_t base = 0;

		p = dpl_schedule_stage_rank(J->sched, s);
		for (i = 0; i < p; i++)
			base += J->reps[i];
		if (dpl_runner_stage_stats(ranks[base].r, s, &ss) == 0) {
			R->peak[s] = ss.peak_inflight;
			R->peak_bytes[s] = ss.peak_buffer_bytes;
		}
	}
#if defined(DPL_HAVE_DEVICE_CPU)
	for (i = 0; !J->o.synthetic && i < J->layers; i++)
		dpl_mlp_layer(owner(J, ranks, i), i, &v[i].w, &v[i].nw,
			      &v[i].b, &v[i].nb);
#endif
	if ((rc = weights_results(J, v, R)) != CLI_OK)
		goto out;
	if (J->o.trace_path)
		rc = write_trace(J, ranks);
out:
	/* Runners first, then the transports: leaving is a failure to the
	 * ranks still there. */
	for (i = 0; i < J->world; i++)
		dpl_runner_destroy(ranks[i].r);
	for (i = 0; i < J->world; i++) {
		dpl_transport_close(ranks[i].t);
		destroy_model(&ranks[i]);
		dpl_device_close(ranks[i].dev);
	}
	free(ranks);
	free(th);
	free(v);
	return rc;
}

/* ---- one rank of a multi-process job ---- */

/*
 * After training, every rank sends rank 0 its results through the
 * transport (the runner is gone by then, so tags of a class the runner
 * does not use): the length of its report, then the report, an array of
 * doubles:
 *   loss[iterations] (NAN where this rank has none),
 *   n, then n x {stage, peak in flight, peak buffer bytes}   (replica 0),
 *   n, then n x {layer, nw, nb, w[nw], b[nb]}                 (replica 0).
 * Rank 0 answers every rank when it has them all; then all close.
 */
#define TAG_RESULTS(i) ((UINT64_C(7) << 57) | (i))
#define TAG_LEN TAG_RESULTS(1)
#define TAG_BODY TAG_RESULTS(2)
#define TAG_ACK TAG_RESULTS(3)

static size_t report_build(struct rank *k, double *out)
{
	struct job *J = k->J;
	size_t n = 0, at;
	uint32_t s, l;

	for (l = 0; l < J->o.iterations; l++, n++)
		if (out)
			out[n] = J->loss[(size_t)l * J->world + k->rank];
	at = n++;
	if (out)
		out[at] = 0;
	for (s = 0; k->replica == 0 && s < J->nstages; s++) {
		struct dpl_runner_stage_stats ss;

		if (dpl_runner_stage_stats(k->r, s, &ss) != 0)
			continue;
		if (out) {
			out[at]++;
			out[n] = s;
			out[n + 1] = ss.peak_inflight;
			out[n + 2] = (double)ss.peak_buffer_bytes;
		}
		n += 3;
	}
	at = n++;
	if (out)
		out[at] = 0;
#if defined(DPL_HAVE_DEVICE_CPU)
	for (l = 0; !J->o.synthetic && k->replica == 0 && l < J->layers;
	     l++) {
		const double *w, *b;
		size_t nw, nb;

		if (dpl_schedule_stage_rank(J->sched, layer_stage(J, l)) !=
			    k->prank ||
		    dpl_mlp_layer(k->model, l, &w, &nw, &b, &nb) != 0)
			continue;
		if (out) {
			out[at]++;
			out[n] = l;
			out[n + 1] = (double)nw;
			out[n + 2] = (double)nb;
			memcpy(out + n + 3, w, nw * sizeof *w);
			memcpy(out + n + 3 + nw, b, nb * sizeof *b);
		}
		n += 3 + nw + nb;
	}
#endif
	return n;
}

/* Is v a whole number in [0, max]? (NAN is not.) */
static bool whole(double v, double max)
{
	return v >= 0 && v <= max && v == floor(v);
}

/* Read rank q's report of n doubles into J and R; views point into it. */
static int report_read(struct job *J, struct result *R, uint32_t q,
		       const double *d, size_t n, struct layer_view *v)
{
	size_t at = J->o.iterations, i, cnt;

	if (n < at + 2)
		goto bad;
	for (i = 0; i < J->o.iterations; i++)
		J->loss[i * J->world + q] = d[i];
	if (!whole(d[at], J->nstages))
		goto bad;
	cnt = (size_t)d[at++];
	if (n - at < cnt * 3 + 1)
		goto bad;
	for (i = 0; i < cnt; i++, at += 3) {
		if (!whole(d[at], J->nstages - 1) ||
		    !whole(d[at + 1], UINT32_MAX) ||
		    !whole(d[at + 2], 0x1p53))
			goto bad;
		R->peak[(uint32_t)d[at]] = (uint32_t)d[at + 1];
		R->peak_bytes[(uint32_t)d[at]] = (uint64_t)d[at + 2];
	}
	if (!whole(d[at], J->layers))
		goto bad;
	cnt = (size_t)d[at++];
	for (i = 0; i < cnt; i++) {
		size_t nw, nb;
		uint32_t l;

		if (n - at < 3 || !whole(d[at], J->layers - 1) ||
		    !whole(d[at + 1], (double)(n - at)) ||
		    !whole(d[at + 2], (double)(n - at)))
			goto bad;
		l = (uint32_t)d[at];
		nw = (size_t)d[at + 1];
		nb = (size_t)d[at + 2];
		at += 3;
		if (nw > n - at || nb > n - at - nw)
			goto bad;
		v[l].w = d + at;
		v[l].nw = nw;
		v[l].b = d + at + nw;
		v[l].nb = nb;
		at += nw + nb;
	}
	if (at != n)
		goto bad;
	return 0;
bad:
	return cli_fail(CMD, "rank %u sent a malformed report (%zu values)",
			q, n);
}

struct xreq {
	void *req;
	uint32_t peer;
	bool live;
};

/*
 * Progress until every live request in x[0..n) completed, or the
 * deadline. On an error, k->msg says what (`what` and the peer) and the
 * code is returned; requests still live then stay with the transport
 * until it is closed.
 */
static int wait_all(struct rank *k, struct xreq *x, size_t n,
		    uint64_t deadline, const char *what)
{
	const struct dpl_transport_ops *o = dpl_transport_ops(k->t);
	void *ctx = dpl_transport_ctx(k->t);
	struct timespec nap = {0, 20000};
	size_t i, live;
	int rc;

	for (;;) {
		if ((rc = o->progress(ctx)) < 0) {
			snprintf(k->msg, sizeof k->msg, "rank %u: %s: %s",
				 k->rank, what, dpl_last_error());
			return rc;
		}
		for (i = 0, live = 0; i < n; i++) {
			if (!x[i].live)
				continue;
			rc = o->test(ctx, x[i].req);
			if (rc == DPL_EAGAIN) {
				live++;
				continue;
			}
			x[i].live = false;
			if (rc != 0) {
				snprintf(k->msg, sizeof k->msg,
					 "rank %u: %s rank %u: %s (%s)",
					 k->rank, what, x[i].peer,
					 dpl_strerror(rc), dpl_err_name(rc));
				return rc;
			}
		}
		if (live == 0)
			return 0;
		if (now_ns() > deadline) {
			for (i = 0; i < n && !x[i].live; i++)
				;
			snprintf(k->msg, sizeof k->msg,
				 "rank %u: %s rank %u: no answer within %g s "
				 "(DPL_ETIMEDOUT)", k->rank, what, x[i].peer,
				 k->J->o.timeout_s);
			return DPL_ETIMEDOUT;
		}
		if (o->wait && (o->caps & DPL_TRANSPORT_CAP_WAIT))
			o->wait(ctx, 1000000);
		else
			nanosleep(&nap, NULL);
	}
}

/* Send rank 0 the report, or (rank 0) gather all of them into J and R. */
static int exchange(struct rank *k, struct result *R, double *mine,
		    uint64_t nmine)
{
	struct job *J = k->J;
	const struct dpl_transport_ops *o = dpl_transport_ops(k->t);
	void *ctx = dpl_transport_ctx(k->t);
	size_t rsz = (o->req_size + 63) / 64 * 64;
	uint64_t deadline = now_ns() + (uint64_t)(J->o.timeout_s * 1e9);
	uint64_t *lens = calloc(J->world, sizeof *lens);
	double **bodies = calloc(J->world, sizeof *bodies);
	struct layer_view *v = calloc(J->layers + 1, sizeof *v);
	struct xreq *x = calloc(J->world, sizeof *x);
	unsigned char *reqs = calloc(J->world, rsz), ack = 0;
	uint32_t q;
	int rc = 0;

	if (!lens || !bodies || !v || !x || !reqs) {
		snprintf(k->msg, sizeof k->msg, "rank %u: out of memory",
			 k->rank);
		rc = DPL_ENOMEM;
		goto out;
	}
	for (q = 0; q < J->world; q++) {
		x[q].req = reqs + (size_t)q * rsz;
		x[q].peer = k->rank == 0 ? q : 0;
	}
	if (k->rank != 0) {
		lens[0] = nmine;
		rc = o->isend(ctx, x[0].req, 0, TAG_LEN, &lens[0],
			      sizeof lens[0], DPL_MEM_HOST);
		x[0].live = rc == 0;
		if (rc == 0)
			rc = wait_all(k, x, 1, deadline,
				      "sending results to");
		if (rc == 0) {
			rc = o->isend(ctx, x[0].req, 0, TAG_BODY, mine,
				      nmine * sizeof *mine, DPL_MEM_HOST);
			x[0].live = rc == 0;
		}
		if (rc == 0)
			rc = wait_all(k, x, 1, deadline,
				      "sending results to");
		if (rc == 0) {
			rc = o->irecv(ctx, x[0].req, 0, TAG_ACK, &ack, 0,
				      DPL_MEM_HOST);
			x[0].live = rc == 0;
		}
		if (rc == 0)
			rc = wait_all(k, x, 1, deadline,
				      "waiting for the end from");
		else if (k->msg[0] == '\0')
			snprintf(k->msg, sizeof k->msg, "rank %u: posting "
				 "results for rank 0: %s", k->rank,
				 dpl_last_error());
		goto out;
	}
	for (q = 1; q < J->world && rc == 0; q++) {
		rc = o->irecv(ctx, x[q].req, q, TAG_LEN, &lens[q],
			      sizeof lens[q], DPL_MEM_HOST);
		x[q].live = rc == 0;
	}
	if (rc == 0)
		rc = wait_all(k, x, J->world, deadline, "results from");
	for (q = 1; q < J->world && rc == 0; q++) {
		if (lens[q] > ((uint64_t)1 << 32)) {
			snprintf(k->msg, sizeof k->msg, "rank %u: rank %u "
				 "announced a report of %llu values", k->rank,
				 q, (unsigned long long)lens[q]);
			rc = DPL_EINVAL;
			break;
		}
		bodies[q] = malloc((size_t)lens[q] * sizeof **bodies + 1);
		if (bodies[q] == NULL) {
			rc = DPL_ENOMEM;
			snprintf(k->msg, sizeof k->msg, "rank %u: out of "
				 "memory", k->rank);
			break;
		}
		rc = o->irecv(ctx, x[q].req, q, TAG_BODY, bodies[q],
			      (size_t)lens[q] * sizeof **bodies,
			      DPL_MEM_HOST);
		x[q].live = rc == 0;
	}
	if (rc == 0)
		rc = wait_all(k, x, J->world, deadline, "results from");
	for (q = 1; q < J->world && rc == 0; q++) {
		rc = o->isend(ctx, x[q].req, q, TAG_ACK, &ack, 0,
			      DPL_MEM_HOST);
		x[q].live = rc == 0;
	}
	if (rc == 0) {
		rc = wait_all(k, x, J->world, deadline, "ending with");
		/* Every result is in. A rank that got its ACK may close before
		 * this side sees the send complete: that is the end, not a
		 * failure. */
		if (rc == DPL_EPEER) {
			rc = 0;
			k->msg[0] = '\0';
		}
	}
	if (rc != 0) {
		if (k->msg[0] == '\0')
			snprintf(k->msg, sizeof k->msg, "rank %u: gathering "
				 "results: %s", k->rank, dpl_last_error());
		goto out;
	}
	if (report_read(J, R, 0, mine, nmine, v) != 0) {
		rc = DPL_EINVAL;
		goto done;
	}
	for (q = 1; q < J->world; q++)
		if (report_read(J, R, q, bodies[q], lens[q], v) != 0) {
			rc = DPL_EINVAL;
			goto done;
		}
	R->seconds = (double)(k->t1 - k->t0) / 1e9;
	R->samples_per_s = (double)J->o.batch * J->o.iterations / R->seconds;
	finish_results(J, R);
	rc = weights_results(J, v, R) == CLI_OK ? 0 : DPL_EINVAL;
done:
	/* Reported already: no rank message. */
	if (rc != 0)
		k->msg[0] = '\0';
out:
	/* Requests still pending belong to the transport: close it before
	 * their buffers go. */
	for (q = 0; q < J->world; q++)
		if (x && x[q].live) {
			dpl_transport_close(k->t);
			k->t = NULL;
			break;
		}
	for (q = 0; bodies && q < J->world; q++)
		free(bodies[q]);
	free(bodies);
	free(lens);
	free(v);
	free(x);
	free(reqs);
	return rc;
}

/*
 * After a failure, stay reachable for a moment (progressing, so the
 * transport keeps its heartbeats) before leaving: a peer that still waits
 * on this rank then reads its failure notice, which names the rank that
 * failed first, before it sees this one leave and names it instead.
 */
static void linger(struct rank *k)
{
	const struct dpl_transport_ops *o = dpl_transport_ops(k->t);
	void *ctx = dpl_transport_ctx(k->t);
	double s = fmin(0.5, k->J->o.timeout_s / 2);
	uint64_t end = now_ns() + (uint64_t)(s * 1e9);
	struct timespec nap = {0, 1000000};

	while (now_ns() < end && o->progress(ctx) >= 0)
		nanosleep(&nap, NULL);
}

/* Run this process's rank of a multi-process job; fill R on rank 0. */
static int train_rank(struct job *J, struct result *R, uint32_t rank)
{
	struct rank k;
	double *mine = NULL;
	size_t n = 0;
	bool ran;
	int rc;

	memset(&k, 0, sizeof k);
	k.J = J;
	k.rank = rank;
	J->boot = NULL;
	dpl_runner_position(J->sched, J->reps, rank, &k.prank, &k.replica);
	if (rank_setup(&k) == 0)
		rank_loop(&k);
	if (k.rc == 0) {
		n = report_build(&k, NULL);
		mine = malloc(n * sizeof *mine + 1);
		if (mine == NULL) {
			k.rc = DPL_ENOMEM;
			snprintf(k.msg, sizeof k.msg, "rank %u: out of memory",
				 rank);
		} else {
			report_build(&k, mine);
		}
	}
	ran = k.r != NULL;
	dpl_runner_destroy(k.r);
	k.r = NULL;
	if (k.rc == 0)
		k.rc = exchange(&k, R, mine, n);
	else if (ran)
		linger(&k);
	dpl_transport_close(k.t);
	destroy_model(&k);
	dpl_device_close(k.dev);
	free(mine);
	rc = k.rc;
	if (rc == 0)
		return CLI_OK;
	if (k.msg[0] != '\0')
		fprintf(stderr, "dpl train: %s\n", k.msg);
	return rc == DPL_EPEER ? CLI_PEER_FAILED : CLI_FAIL;
}

/* The transport named `name`, or a usage error. */
static int find_transport(const char *name,
			  const struct dpl_transport_ops **out)
{
	static const struct {
		const char *name;
		const struct dpl_transport_ops *ops;
	} t[] = {
		{"inproc", &dpl_transport_inproc},
#if defined(DPL_HAVE_TRANSPORT_SHM)
		{"shm", &dpl_transport_shm},
#else
		{"shm", NULL},
#endif
#if defined(DPL_HAVE_TRANSPORT_UCX)
		{"ucx", &dpl_transport_ucx},
#else
		{"ucx", NULL},
#endif
#if defined(DPL_HAVE_TRANSPORT_OFI)
		{"ofi", &dpl_transport_ofi},
#else
		{"ofi", NULL},
#endif
	};
	size_t i;

	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		if (strcmp(name, t[i].name) != 0)
			continue;
		if (t[i].ops == NULL)
			return cli_usage_error(CMD, "--transport %s: dpl was "
					       "built without that transport",
					       name);
		*out = t[i].ops;
		return 0;
	}
	return cli_usage_error(CMD, "--transport: '%s' is not inproc, shm, "
			       "ucx or ofi", name);
}

/* This command line less --nprocs and --pid-dir, for the ranks. */
static char **rank_argv(int argc, char **argv, const char *transport)
{
	char **a = calloc((size_t)argc + 4, sizeof *a);
	const char *v;
	int i, n = 0, j;

	if (a == NULL)
		return NULL;
	a[n++] = (char *)"dpl";
	a[n++] = argv[0];
	for (i = 1; i < argc; i++) {
		j = i;
		if (cli_flag(argc, argv, &j, "--nprocs", &v) ||
		    cli_flag(argc, argv, &j, "--pid-dir", &v)) {
			i = j;
			continue;
		}
		a[n++] = argv[i];
	}
	if (transport) {
		a[n++] = (char *)"--transport";
		a[n++] = (char *)transport;
	}
	a[n] = NULL;
	return a;
}

static int run(int argc, char **argv)
{
	struct job *J = calloc(1, sizeof *J);
	struct result R;
	uint32_t env_rank = 0, env_world = 0, i;
	bool env = false;
	int rc;

	if (J == NULL)
		return cli_fail(CMD, "out of memory");
	memset(&R, 0, sizeof R);
	J->o.stages = 4;
	J->o.microbatches = 8;
	J->o.policy = DPL_POLICY_1F1B;
	J->o.iterations = 20;
	J->o.batch = 64;
	J->o.seed = 1;
	J->o.timeout_s = 60;
	J->o.fwd_ms = 1;
	J->o.bwd_ms = 2;
	J->o.act_bytes = 4096;
	J->o.optimizer = 1; /* adam */
	if ((rc = parse(argc, argv, &J->o)) != 0 || (rc = resolve(J)) != 0)
		goto out;
	if (J->o.nprocs == 0 &&
	    (rc = cli_launch_env(CMD, &env, &env_rank, &env_world)) != 0)
		goto out;
	J->procs = J->o.nprocs > 0 || env;
	if ((rc = find_transport(J->o.transport ? J->o.transport
				 : J->procs	? "shm"
						: "inproc",
				 &J->tops)) != 0)
		goto out;
	if (J->procs && J->tops == &dpl_transport_inproc) {
		rc = cli_usage_error(CMD, "--transport inproc runs the ranks "
				     "as threads of one process; %s needs "
				     "shm, ucx or ofi",
				     J->o.nprocs ? "--nprocs"
						 : "a rank from the "
						   "environment");
		goto out;
	}
	if (J->o.pid_dir && J->o.nprocs == 0) {
		rc = cli_usage_error(CMD, "--pid-dir applies to --nprocs only");
		goto out;
	}
	if (!J->procs && J->tops != &dpl_transport_inproc) {
		rc = cli_usage_error(CMD, "--transport %s runs one process per "
				     "rank: give --nprocs %u, or start the "
				     "ranks with DPL_RANK, DPL_WORLD_SIZE and "
				     "DPL_ROOT set", J->tops->name, J->world);
		goto out;
	}
	if (J->procs && J->o.trace_path) {
		rc = cli_usage_error(CMD, "--trace needs all ranks in one "
				     "process (--transport inproc)");
		goto out;
	}
	if (J->procs && (J->o.nprocs ? J->o.nprocs : env_world) != J->world) {
		char reps[256] = "";
		size_t len = 0;

		for (i = 0; i < J->ranks && len + 12 < sizeof reps; i++)
			len += (size_t)snprintf(reps + len, sizeof reps - len,
						"%s%u", i ? "," : "",
						J->reps[i]);
		rc = cli_usage_error(CMD, "%s %u ranks, but the layout has %u "
				     "(the sum of the replicas %s)",
				     J->o.nprocs ? "--nprocs starts"
						 : "the environment's world "
						   "has",
				     J->o.nprocs ? J->o.nprocs : env_world,
				     J->world, reps);
		goto out;
	}
	if (J->o.nprocs > 0) {
		struct cli_launch lp = {0};
		char **a = rank_argv(argc, argv,
				     J->o.transport ? NULL : "shm");

		if (a == NULL) {
			rc = cli_fail(CMD, "out of memory");
			goto out;
		}
		lp.nprocs = J->o.nprocs;
		lp.grace_s = J->o.timeout_s + 1;
		lp.pid_dir = J->o.pid_dir;
		lp.argv = a;
		rc = cli_launch_run(CMD, &lp);
		free(a);
		goto out;
	}
	R.loss = calloc(J->o.iterations, sizeof *R.loss);
	J->loss = malloc((size_t)J->o.iterations * J->world * sizeof *J->loss);
	if (R.loss == NULL || J->loss == NULL) {
		rc = cli_fail(CMD, "out of memory");
		goto out;
	}
	for (i = 0; i < J->o.iterations * J->world; i++)
		J->loss[i] = NAN;
	if (J->procs) {
		if ((rc = train_rank(J, &R, env_rank)) != 0 || env_rank != 0)
			goto out;
	} else if ((rc = train(J, &R)) != 0) {
		goto out;
	}
	rc = J->o.json ? print_json(J, &R) : (print_text(J, &R), 0);
	if (rc == 0 && R.have_check && !(R.max_rel <= CHECK_LIMIT))
		rc = cli_fail(CMD, "--check: largest relative weight "
			      "difference %.3g is above %g", R.max_rel,
			      CHECK_LIMIT);
out:
	free(R.loss);
	free(J->loss);
	dpl_schedule_destroy(J->sched);
	free(J);
	return rc;
}

#else /* !DPL_HAVE_BUILTINS */

static int run(int argc, char **argv)
{
	struct opts o;

	memset(&o, 0, sizeof o);
	(void)wrap_ops;
	if (parse(argc, argv, &o) != 0)
		return CLI_USAGE;
	return cli_usage_error(CMD, "dpl was built without the in-process "
			       "transport and the devices (transports/, "
			       "devices/)");
}

#endif /* DPL_HAVE_BUILTINS */

const struct dpl_cli_cmd dpl_cli_cmd_train = {
	.name = "train",
	.summary = "train a model with one runner per rank (threads or "
		   "processes)",
	.run = run,
	.usage = usage,
};
