/* toy_world.c - see toy_world.h. */
#include "toy_world.h"

#include <dpl/csv.h>

void (*toy_step_enter)(void);
uint64_t (*toy_step_leave)(void);

struct toy {
	struct toy_world *w;
	uint32_t rank;
	uint32_t S;
	double g[TOY_MAX_STAGES][TOY_G];
	struct dpl_buffer gb[TOY_MAX_STAGES];
	uint8_t busy[TOY_MAX_STAGES][64];
	struct toy_rank *res;
	bool pass;               /* inside dpl_runner_forward() */
};

static double base(uint64_t it, uint64_t i, uint32_t k)
{
	return (double)(it * 100000u + i * 10u + k);
}

static double gbase(uint64_t it, uint64_t i, uint32_t k)
{
	return -(double)(it * 100000u + i * 10u + k) - 0.5;
}

static int bad(struct toy *t, const char *what,
	       const struct dpl_stage_args *a)
{
	if (t->res->errors++ == 0)
		snprintf(t->res->first_error, sizeof t->res->first_error,
			 "rank %u: %s at stage %u mb %u samples [%llu, %llu)",
			 t->rank, what, a->stage, a->microbatch,
			 (unsigned long long)a->begin,
			 (unsigned long long)a->end);
	return 0;
}

static int toy_forward(void *u, const struct dpl_stage_args *a)
{
	struct toy *t = u;
	const double *in = a->input;
	double *out = a->output;
	uint64_t n = a->end - a->begin, j;
	uint32_t k, s = a->stage;
	double mark = t->pass ? 0.25 : 0.0;

	if (t->w->cfg.fail_rank == (int)t->rank &&
	    a->iteration == t->w->cfg.fail_iter &&
	    t->pass == t->w->cfg.fail_in_pass)
		return dpl_set_error(DPL_ECALLBACK,
					 "injected failure on rank %u",
					 t->rank);
	if (a->slot >= 64 || t->busy[s][a->slot])
		bad(t, "slot reused while alive", a);
	else if (!t->pass)
		t->busy[s][a->slot] = 1;
	if (t->pass && a->grad_output != NULL)
		bad(t, "gradient buffer in a forward-only pass", a);
	if (s > 0 && a->input_bytes != n * TOY_K * 8)
		bad(t, "input size", a);
	if (s + 1 < t->S && a->output_bytes != n * TOY_K * 8)
		bad(t, "output size", a);
	for (j = 0; j < n; j++)
		for (k = 0; k < TOY_K; k++) {
			double b = base(a->iteration, a->begin + j, k);

			if (s > 0 && in[j * TOY_K + k] != b + s + mark)
				return bad(t, "wrong activation", a);
			if (s + 1 < t->S)
				out[j * TOY_K + k] = b + s + 1 + mark;
		}
	atomic_fetch_add(t->pass ? &t->w->samples_p[s] : &t->w->samples_f[s],
			 n);
	return 0;
}

static int toy_input(void *u, const struct dpl_stage_args *a)
{
	struct toy *t = u;
	const double *go = a->grad_output;
	double *gi = a->grad_input;
	uint64_t n = a->end - a->begin, j;
	uint32_t k, s = a->stage;

	if (t->pass)
		return bad(t, "backward in a forward-only pass", a);

	for (j = 0; j < n; j++)
		for (k = 0; k < TOY_K; k++) {
			double g = gbase(a->iteration, a->begin + j, k);

			if (s + 1 < t->S &&
			    go[j * TOY_K + k] != g + (t->S - s - 1))
				return bad(t, "wrong gradient", a);
			if (s > 0)
				gi[j * TOY_K + k] = g + (t->S - s);
		}
	/* The input is still there for the backward. */
	if (s > 0 && ((const double *)a->input)[0] !=
			     base(a->iteration, a->begin, 0) + s)
		return bad(t, "input gone before backward", a);
	return 0;
}

static int toy_weight(void *u, const struct dpl_stage_args *a)
{
	struct toy *t = u;
	uint64_t i;
	uint32_t k, s = a->stage;

	if (t->pass)
		return bad(t, "weight gradient in a forward-only pass", a);

	for (i = a->begin; i < a->end; i++)
		for (k = 0; k < TOY_G; k++)
			t->g[s][k] += (double)((i + 1) * (k + 1));
	if (a->slot >= 64 || !t->busy[s][a->slot])
		bad(t, "slot not alive at backward", a);
	else
		t->busy[s][a->slot] = 0;
	atomic_fetch_add(&t->w->samples_b[s], a->end - a->begin);
	return 0;
}

static int toy_backward(void *u, const struct dpl_stage_args *a)
{
	int rc = toy_input(u, a);

	return rc ? rc : toy_weight(u, a);
}

static int toy_grads(void *u, uint32_t stage, const struct dpl_buffer **b,
		     size_t *n)
{
	struct toy *t = u;

	t->gb[stage].ptr = t->g[stage];
	t->gb[stage].count = TOY_G;
	t->gb[stage].dtype = DPL_DTYPE_F64;
	t->gb[stage].mem = DPL_MEM_HOST;
	*b = &t->gb[stage];
	*n = 1;
	return 0;
}

static int toy_step(void *u, uint32_t stage, uint64_t it)
{
	struct toy *t = u;
	uint64_t B = t->w->cfg.batch;
	uint32_t k;

	if (t->pass) {
		struct dpl_stage_args a = {0};

		a.stage = stage;
		return bad(t, "step in a forward-only pass", &a);
	}

	/* After the reduction every replica holds the whole batch's sum. */
	for (k = 0; k < TOY_G; k++)
		if (t->g[stage][k] != (double)((k + 1) * B * (B + 1) / 2)) {
			struct dpl_stage_args a = {0};

			a.stage = stage;
			return bad(t, "wrong reduced gradient", &a);
		}
	memset(t->g[stage], 0, sizeof t->g[stage]);
	t->res->steps_called++;
	return 0;
}

/* The pair of an OVERLAP_F_B: both callbacks, one after the other. */
static int toy_overlap(void *u, const struct dpl_stage_args *f,
		       const struct dpl_stage_args *b)
{
	struct toy *t = u;
	int rc = toy_forward(u, f);

	if (rc != 0)
		return rc;
	if (b->grad_input == NULL && b->stage > 0)
		return bad(t, "overlap without the backward's grad_input", b);
	t->res->overlaps++;
	return toy_backward(u, b);
}

static const struct dpl_stage_ops toy_ops = {
	.abi_version = DPL_STAGE_ABI_VERSION,
	.size = sizeof(struct dpl_stage_ops),
	.name = "toy",
	.forward = toy_forward,
	.backward = toy_backward,
	.backward_input = toy_input,
	.backward_weight = toy_weight,
	.grads = toy_grads,
	.step = toy_step,
};

/* toy_ops with the overlap member; filled by toy_run() before any rank
 * thread starts. */
static struct dpl_stage_ops toy_ops_overlap;

struct targ {
	struct toy_world *w;
	uint32_t rank;
};

static void *rank_main(void *arg)
{
	struct targ *ta = arg;
	struct toy_world *w = ta->w;
	struct toy_rank *res = &w->res[ta->rank];
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params rp = {0};
	uint64_t act[TOY_MAX_STAGES];
	dpl_transport *t = NULL;
	dpl_runner *r = NULL;
	struct toy *toy = calloc(1, sizeof *toy);
	uint32_t s, i;

	res->rank = ta->rank;
	toy->w = w;
	toy->rank = ta->rank;
	toy->S = w->nstages;
	toy->res = res;
	for (s = 0; s < TOY_MAX_STAGES; s++)
		act[s] = TOY_K * 8;
	tp.rank = ta->rank;
	tp.world_size = w->world;
	tp.world = w->cfg.world;
	tp.options = w->cfg.options;
	res->create_rc = dpl_transport_open(w->cfg.ops ? w->cfg.ops
						       : &dpl_transport_inproc,
					    &tp, &t);
	if (res->create_rc == 0) {
		rp.schedule = w->sched;
		rp.replicas = w->cfg.replicas;
		rp.rank = ta->rank;
		rp.timeout_ms = w->cfg.timeout_ms;
		rp.batch = w->cfg.batch;
		rp.activation_bytes = act;
		rp.stage_ops = w->cfg.overlap ? &toy_ops_overlap : &toy_ops;
		rp.stage_user = toy;
		rp.transport = t;
		rp.trace_capacity = w->cfg.trace_capacity;
		res->create_rc = dpl_runner_create(&rp, &r);
		if (res->create_rc != 0)
			snprintf(res->msg, sizeof res->msg, "%s",
				 dpl_last_error());
	}
	pthread_barrier_wait(&w->bar);
	if (res->create_rc == 0 && (int)ta->rank == w->cfg.leave_rank) {
		dpl_runner_destroy(r);
		r = NULL;
		dpl_transport_close(t);
		t = NULL;
	}
	for (i = 0; r != NULL && i < w->cfg.iterations &&
		    (int)ta->rank != w->cfg.silent_rank; i++) {
		uint32_t p;
		int prc = 0;

		for (p = 0; p < w->cfg.passes && prc == 0; p++) {
			toy->pass = true;
			if (toy_step_enter)
				toy_step_enter();
			prc = dpl_runner_forward(r);
			if (toy_step_leave)
				res->allocs_in_step += toy_step_leave();
			toy->pass = false;
			if (prc == 0)
				res->passes_ok++;
		}
		if (prc != 0) {
			res->pass_rc = prc;
			snprintf(res->msg, sizeof res->msg, "%s",
				 dpl_last_error());
			break;
		}
		if (toy_step_enter)
			toy_step_enter();
		res->rc[i] = dpl_runner_step(r);
		if (toy_step_leave)
			res->allocs_in_step += toy_step_leave();
		if (res->rc[i] != 0) {
			snprintf(res->msg, sizeof res->msg, "%s",
				 dpl_last_error());
			break;
		}
		res->steps_ok++;
	}
	res->cause = r != NULL ? dpl_runner_cause(r) : DPL_RUNNER_NO_RANK;
	if (r != NULL) {
		dpl_runner_stats(r, &res->st);
		for (s = 0; s < w->nstages; s++) {
			struct dpl_runner_stage_stats ss;

			if (dpl_runner_stage_stats(r, s, &ss) == 0) {
				res->holds[s] = true;
				res->peak[s] = ss.peak_inflight;
				res->bound[s] = dpl_schedule_bound(w->sched,
								   s);
			}
		}
	}
	/* Everyone is done stepping (the silent rank waited here). */
	pthread_barrier_wait(&w->bar);
	free(toy);
	if (w->cfg.trace_capacity > 0) {
		/* Traced worlds keep runner and transport for the caller. */
		res->runner = r;
		return t;
	}
	dpl_runner_destroy(r);
	pthread_barrier_wait(&w->bar);
	dpl_transport_close(t);
	return NULL;
}

static void *transports[TOY_MAX_RANKS];

/* Replace w->sched by its PyTorch compute_comms CSV, read back. */
static int to_pytorch_comms(struct toy_world *w)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	dpl_schedule *s = NULL;
	int rc;

	if (f == NULL)
		return DPL_ENOMEM;
	rc = dpl_schedule_write_csv_comms(w->sched, f);
	fclose(f);
	if (rc == 0)
		rc = dpl_schedule_read_csv(buf, n, &s);
	free(buf);
	if (rc != 0)
		return rc;
	dpl_schedule_destroy(w->sched);
	w->sched = s;
	return 0;
}

int toy_run(struct toy_world *w)
{
	struct dpl_schedule_params sp = {0};
	pthread_t th[TOY_MAX_RANKS];
	struct targ ta[TOY_MAX_RANKS];
	uint32_t i;
	int rc;

	toy_ops_overlap = toy_ops;
	toy_ops_overlap.name = "toy-overlap";
	toy_ops_overlap.overlap = toy_overlap;
	sp.stages = w->cfg.stages;
	sp.microbatches = w->cfg.microbatches;
	sp.policy = w->cfg.policy;
	sp.chunks = w->cfg.chunks;
	sp.cap_all = w->cfg.cap;
	if ((rc = dpl_schedule_build(&sp, &w->sched)) != 0)
		return rc;
	if ((rc = dpl_schedule_lower(w->sched)) != 0)
		return rc;
	if (w->cfg.pytorch_comms && (rc = to_pytorch_comms(w)) != 0)
		return rc;
	for (i = 0; i < dpl_schedule_ranks(w->sched); i++)
		if (w->cfg.replicas[i] == 0)
			w->cfg.replicas[i] = 1;
	if ((rc = dpl_runner_world_size(w->sched, w->cfg.replicas,
					&w->world)) != 0)
		return rc;
	if (w->world > TOY_MAX_RANKS)
		return DPL_ERANGE;
	w->nstages = dpl_schedule_stages(w->sched);
	if (w->cfg.timeout_ms == 0)
		w->cfg.timeout_ms = 20000;
	pthread_barrier_init(&w->bar, NULL, w->world);
	for (i = 0; i < w->world; i++) {
		ta[i].w = w;
		ta[i].rank = i;
		pthread_create(&th[i], NULL, rank_main, &ta[i]);
	}
	for (i = 0; i < w->world; i++)
		pthread_join(th[i], &transports[i]);
	pthread_barrier_destroy(&w->bar);
	return 0;
}

void toy_free(struct toy_world *w)
{
	uint32_t i;

	for (i = 0; i < w->world; i++) {
		dpl_runner_destroy(w->res[i].runner);
		w->res[i].runner = NULL;
	}
	for (i = 0; i < w->world; i++) {
		dpl_transport_close(transports[i]);
		transports[i] = NULL;
	}
	dpl_schedule_destroy(w->sched);
	w->sched = NULL;
}
