/*
 * gpipe_vs_1f1b - DAPPLE's memory and throughput claim on the reference
 * model (CPU device, in-process transport, one thread per stage): GPipe
 * keeps every micro-batch of an iteration alive, 1F1B at most S - s on
 * stage s. Two comparisons:
 *  1. the same M: peak activation memory and throughput of each;
 *  2. the same activation-memory budget, 1F1B's peak at M: GPipe limited
 *     to the largest M' whose peak fits, at the same micro-batch size
 *     (fewer samples per iteration, a larger bubble).
 * Activation memory of a stage = micro-batches alive at its peak x (the
 * model's per-micro-batch activations + the runner's buffers); the figure
 * is the largest over stages (the device that limits). Throughput is
 * samples per second per iteration; the three configurations run side by
 * side in --rounds rounds of --reps iterations each (after a warm-up
 * iteration), and the medians over all iterations are compared, so that
 * a noisy machine slows all three alike.
 * DAPPLE reports 1.6x throughput for 1F1B over GPipe at equal memory.
 *
 * usage: bench_gpipe_vs_1f1b [--stages S] [--microbatches M]
 *            [--mb-size N] [--width W] [--layers L] [--reps N]
 *            [--rounds N] [--json OUT.json]
 * Needs S cores for the stages to run in parallel.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#include <dpl/device_cpu.h>
#include <dpl/model_mlp.h>
#include <dpl/dpl.h>
#include <dpl/transport.h>

#include <dpl/transport_inproc.h>

#define MAX_S 32
#define MAX_L 128
#define MAX_REPS 32
#define MAX_ROUNDS 16

struct cfg {
	uint32_t S, M, mb, width, layers, reps, rounds;
	uint32_t widths[MAX_L + 1];
	uint32_t bounds[MAX_S + 1];
};

struct world {
	const struct cfg *c;
	enum dpl_policy pol;
	uint32_t M;
	dpl_schedule *s;
	char name[64];
	pthread_barrier_t bar;
	double t0[MAX_REPS][MAX_S], t1[MAX_REPS][MAX_S];
	uint64_t stage_bytes[MAX_S]; /* peak activation bytes per stage */
	uint32_t peak[MAX_S];
	int rc;
};

static void *rank_main(void *p)
{
	struct bench_rank *a = p;
	struct world *w = a->world;
	const struct cfg *c = w->c;
	struct dpl_mlp_params mp = {0};
	struct dpl_mlp_layout ml = {0};
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params rp = {0};
	struct dpl_runner_stage_stats ss;
	uint64_t act[MAX_S], per_mb = 0;
	uint32_t slots[MAX_S], i;
	uint8_t local[MAX_S];
	dpl_mlp *m = NULL;
	dpl_transport *t = NULL;
	dpl_device *d = NULL;
	dpl_runner *r = NULL;

	mp.layers = c->layers;
	mp.widths = c->widths;
	mp.optimizer = DPL_MLP_SGD;
	mp.lr = 0.01;
	mp.momentum = 0.9;
	mp.seed = 7;
	for (i = 0; i < c->S; i++) {
		local[i] = i == a->rank;
		slots[i] = dpl_schedule_bound(w->s, i);
	}
	ml.stages = c->S;
	ml.bounds = c->bounds;
	ml.local = local;
	ml.slots = slots;
	ml.max_samples = c->mb;
	ml.batch = (uint64_t)c->mb * w->M;
	dpl_mlp_activation_bytes(&mp, c->bounds, c->S, act);
	tp.rank = a->rank;
	tp.world_size = c->S;
	tp.world = w->name;
	if (dpl_mlp_create(&mp, &ml, &m) ||
	    dpl_transport_open(&dpl_transport_inproc, &tp, &t) ||
	    dpl_device_open(&dpl_device_cpu, NULL, &d))
		w->rc = -1;
	rp.schedule = w->s;
	rp.rank = a->rank;
	rp.batch = (uint64_t)c->mb * w->M;
	rp.activation_bytes = act;
	rp.stage_ops = &dpl_mlp_stage_ops;
	rp.stage_user = m;
	rp.transport = t;
	rp.device = d;
	r = bench_steps(&rp, &w->bar, c->reps, &w->t0[0][a->rank],
			&w->t1[0][a->rank], MAX_S, &w->rc);
	if (w->rc == 0 && dpl_runner_stage_stats(r, a->rank, &ss) == 0 &&
	    dpl_mlp_stage_bytes(m, a->rank, &per_mb) == 0) {
		w->peak[a->rank] = ss.peak_inflight;
		w->stage_bytes[a->rank] =
			ss.peak_inflight * per_mb + ss.peak_buffer_bytes;
	}
	pthread_barrier_wait(&w->bar);
	dpl_runner_destroy(r);
	pthread_barrier_wait(&w->bar);
	dpl_transport_close(t);
	dpl_device_close(d);
	dpl_mlp_destroy(m);
	return NULL;
}



struct result {
	const char *policy;
	uint32_t M;
	double samples_per_s;  /* median */
	double iteration_ms;   /* median */
	uint64_t peak_bytes;   /* largest stage */
	uint32_t peak_inflight0;
	double its[MAX_REPS * MAX_ROUNDS]; /* iteration times, s */
	int nits;
};

/* One round: `reps` iterations after a warm-up; appends to res->its. */
static int run(const struct cfg *c, enum dpl_policy pol, uint32_t M,
	       struct result *res)
{
	struct dpl_schedule_params sp = {0};
	struct world *w = calloc(1, sizeof *w);
	double it[MAX_REPS * MAX_ROUNDS];
	uint32_t i, k;

	w->c = c;
	w->pol = pol;
	w->M = M;
	sp.stages = c->S;
	sp.microbatches = M;
	sp.policy = pol;
	if (dpl_schedule_build(&sp, &w->s) || dpl_schedule_lower(w->s)) {
		fprintf(stderr, "%s\n", dpl_last_error());
		return -1;
	}
	snprintf(w->name, sizeof w->name, "g1-%d-%u", (int)pol, M);
	pthread_barrier_init(&w->bar, NULL, c->S);
	bench_run_ranks(c->S, rank_main, w);
	pthread_barrier_destroy(&w->bar);
	if (w->rc != 0)
		return -1;
	for (k = 0; k < c->reps; k++)
		res->its[res->nits++] = bench_span(w->t0[k], w->t1[k], c->S);
	memcpy(it, res->its, (size_t)res->nits * sizeof *it);
	res->policy = dpl_policy_name(pol);
	res->M = M;
	res->iteration_ms = bench_median(it, res->nits) * 1e3;
	res->samples_per_s = (double)c->mb * M / (res->iteration_ms / 1e3);
	res->peak_bytes = 0;
	for (i = 0; i < c->S; i++)
		if (w->stage_bytes[i] > res->peak_bytes)
			res->peak_bytes = w->stage_bytes[i];
	res->peak_inflight0 = w->peak[0];
	dpl_schedule_destroy(w->s);
	free(w);
	return 0;
}

static int arg_u32(int argc, char **argv, int *a, const char *name,
		   uint32_t *out)
{
	if (strcmp(argv[*a], name) != 0 || *a + 1 >= argc)
		return 0;
	*out = (uint32_t)strtoul(argv[++*a], NULL, 10);
	return 1;
}

static void row(const char *what, const struct result *r)
{
	printf("%-22s %-6s %5u %11.1f %13.2f %16.2f %10u\n", what, r->policy,
	       r->M, r->samples_per_s, r->iteration_ms,
	       r->peak_bytes / 1048576.0, r->peak_inflight0);
}

int main(int argc, char **argv)
{
	struct cfg c = {4, 16, 32, 512, 8, 3, 3, {0}, {0}};
	static struct result g, o, gm, probe;
	const char *json = "gpipe_vs_1f1b.json";
	uint32_t i, Mfit;
	int a;
	FILE *f;

	for (a = 1; a < argc; a++) {
		if (arg_u32(argc, argv, &a, "--stages", &c.S) ||
		    arg_u32(argc, argv, &a, "--microbatches", &c.M) ||
		    arg_u32(argc, argv, &a, "--mb-size", &c.mb) ||
		    arg_u32(argc, argv, &a, "--width", &c.width) ||
		    arg_u32(argc, argv, &a, "--layers", &c.layers) ||
		    arg_u32(argc, argv, &a, "--reps", &c.reps) ||
		    arg_u32(argc, argv, &a, "--rounds", &c.rounds))
			continue;
		if (strcmp(argv[a], "--json") == 0 && a + 1 < argc) {
			json = argv[++a];
			continue;
		}
		fprintf(stderr, "usage: %s [--stages S] [--microbatches M] "
			"[--mb-size N] [--width W] [--layers L] [--reps N] "
			"[--json OUT]\n", argv[0]);
		return 2;
	}
	if (c.S < 2 || c.S > MAX_S || c.layers < c.S || c.layers > MAX_L ||
	    c.M < 1 || c.mb < 1 || c.width < 1 || c.reps < 1 ||
	    c.reps > MAX_REPS || c.rounds < 1 || c.rounds > MAX_ROUNDS) {
		fprintf(stderr, "need 2 <= S <= %d, S <= layers <= %d, "
			"1 <= reps <= %d, 1 <= rounds <= %d\n", MAX_S, MAX_L,
			MAX_REPS, MAX_ROUNDS);
		return 2;
	}
	for (i = 0; i <= c.layers; i++)
		c.widths[i] = i == c.layers ? 10 : c.width;
	dpl_mlp_bounds(c.layers, c.S, c.bounds);
	printf("gpipe vs 1f1b: %u stages (one thread each), %u layers of %u, "
	       "micro-batches of %u samples, median of %u rounds x %u "
	       "iterations\n", c.S, c.layers, c.width, c.mb, c.rounds, c.reps);
	/* 1F1B's peak sets the budget; the largest M' whose GPipe peak fits
	 * it (GPipe keeps M' micro-batches alive on every stage). Memory
	 * does not depend on timing: one iteration per probe is enough. */
	{
		struct cfg one = c;

		one.reps = 1;
		if (run(&one, DPL_POLICY_1F1B, c.M, &probe) != 0)
			return 1;
		o.peak_bytes = probe.peak_bytes;
		Mfit = 0;
		for (i = c.M; i >= 1 && Mfit == 0; i--) {
			memset(&probe, 0, sizeof probe);
			if (run(&one, DPL_POLICY_GPIPE, i, &probe) != 0)
				return 1;
			if (probe.peak_bytes <= o.peak_bytes)
				Mfit = i;
		}
	}
	if (Mfit == 0) {
		printf("GPipe does not fit 1F1B's budget even with M = 1\n");
		return 1;
	}
	memset(&o, 0, sizeof o);
	for (i = 0; i < c.rounds; i++)
		if (run(&c, DPL_POLICY_GPIPE, c.M, &g) ||
		    run(&c, DPL_POLICY_1F1B, c.M, &o) ||
		    run(&c, DPL_POLICY_GPIPE, Mfit, &gm))
			return 1;
	printf("%-22s %-6s %5s %11s %13s %16s %10s\n", "case", "policy", "M",
	       "samples/s", "iteration ms", "peak act MiB", "in flight");
	row("same M", &g);
	row("same M", &o);
	row("same memory budget", &gm);
	row("same memory budget", &o);
	printf("1f1b / gpipe throughput: %.2fx at the same M (memory %.2fx "
	       "less), %.2fx at the same memory (gpipe M' = %u)\n",
	       o.samples_per_s / g.samples_per_s,
	       (double)g.peak_bytes / (double)o.peak_bytes,
	       o.samples_per_s / gm.samples_per_s, Mfit);
	f = fopen(json, "w");
	if (f == NULL) {
		perror(json);
		return 1;
	}
	fprintf(f, "{\"benchmark\":\"gpipe_vs_1f1b\",\"stages\":%u,"
		"\"layers\":%u,\"width\":%u,\"mb_size\":%u,\"reps\":%u,"
		"\"rounds\":%u,\n"
		"\"same_m\":{\"M\":%u,\"gpipe\":{\"samples_per_s\":%.1f,"
		"\"peak_bytes\":%llu},\"1f1b\":{\"samples_per_s\":%.1f,"
		"\"peak_bytes\":%llu}},\n\"same_memory\":{\"budget_bytes\":%llu,"
		"\"gpipe\":{\"M\":%u,\"samples_per_s\":%.1f,\"peak_bytes\":%llu},"
		"\"1f1b\":{\"M\":%u,\"samples_per_s\":%.1f}},\n"
		"\"speedup_same_m\":%.3f,\"speedup_same_memory\":%.3f}\n",
		c.S, c.layers, c.width, c.mb, c.reps, c.rounds, c.M,
		g.samples_per_s,
		(unsigned long long)g.peak_bytes, o.samples_per_s,
		(unsigned long long)o.peak_bytes,
		(unsigned long long)o.peak_bytes, Mfit, gm.samples_per_s,
		(unsigned long long)gm.peak_bytes, c.M, o.samples_per_s,
		o.samples_per_s / g.samples_per_s,
		o.samples_per_s / gm.samples_per_s);
	fclose(f);
	printf("wrote %s\n", json);
	return 0;
}
