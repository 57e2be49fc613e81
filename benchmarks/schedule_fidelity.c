/*
 * schedule_fidelity - does the runner execute a schedule as fast as the
 * simulator says it can? Synthetic device (callbacks sleep to deadlines),
 * in-process transport, one thread per rank, S = 8, M = 32, F = 1 ms,
 * B = 2 ms per micro-batch (I = W = 1 ms for the split-backward policies;
 * the policies with chunks run V = 2 chunks of half the cost; bounded
 * with a cap of 4, zb-auto with a cap of S), and an uneven case whose stages cost
 * 1, 1, 1, 1.5, 1, 1, 0.75, 1.25 times as much. For every policy: the
 * measured iteration time (median of the repetitions) over the makespan
 * dpl_sim_run() predicts with the same costs and free communication.
 * Target: <= 1.03.
 *
 * usage: bench_schedule_fidelity [--reps N] [--json OUT.json]
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#include <dpl/device_synthetic.h>
#include <dpl/model_synthetic.h>
#include <dpl/dpl.h>
#include <dpl/sim.h>
#include <dpl/transport.h>

#include <dpl/transport_inproc.h>

#define S_RANKS 8
#define M_MB 32
#define MAX_STAGES 16
#define MAX_REPS 32

struct world {
	dpl_schedule *s;
	struct dpl_stage_cost costs[MAX_STAGES];
	uint32_t nstages, reps;
	char name[64];
	pthread_barrier_t bar;
	double t0[MAX_REPS][S_RANKS], t1[MAX_REPS][S_RANKS];
	uint64_t late[S_RANKS], calls[S_RANKS];
	int rc;
};

static void *rank_main(void *p)
{
	struct bench_rank *a = p;
	struct world *w = a->world;
	struct dpl_synthetic_params sp = {0};
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params rp = {0};
	uint64_t act[MAX_STAGES];
	dpl_synthetic *syn = NULL;
	dpl_transport *t = NULL;
	dpl_device *d = NULL;
	dpl_runner *r = NULL;
	uint32_t i, s;

	for (i = 0; i < MAX_STAGES; i++)
		act[i] = 4096;
	sp.stages = w->nstages;
	sp.costs = w->costs;
	sp.unit_ns = 1e6;
	sp.activation_bytes = act;
	tp.rank = a->rank;
	tp.world_size = S_RANKS;
	tp.world = w->name;
	if (dpl_synthetic_create(&sp, &syn) ||
	    dpl_transport_open(&dpl_transport_inproc, &tp, &t) ||
	    dpl_device_open(&dpl_device_synthetic, NULL, &d))
		w->rc = -1;
	rp.schedule = w->s;
	rp.rank = a->rank;
	rp.batch = M_MB;
	rp.activation_bytes = act;
	rp.stage_ops = &dpl_synthetic_stage_ops;
	rp.stage_user = syn;
	rp.transport = t;
	rp.device = d;
	r = bench_steps(&rp, &w->bar, w->reps, &w->t0[0][a->rank],
			&w->t1[0][a->rank], S_RANKS, &w->rc);
	for (s = 0; syn && s < w->nstages; s++) {
		struct dpl_synthetic_stats st;

		dpl_synthetic_stats(syn, s, &st);
		w->late[a->rank] += st.late_ns;
		w->calls[a->rank] += st.calls[0] + st.calls[1] + st.calls[2] +
				     st.calls[3];
	}
	pthread_barrier_wait(&w->bar);
	dpl_runner_destroy(r);
	pthread_barrier_wait(&w->bar);
	dpl_transport_close(t);
	dpl_device_close(d);
	dpl_synthetic_destroy(syn);
	return NULL;
}



struct result {
	const char *policy;
	const char *shape;
	double measured_ms, predicted_ms, ratio, late_us_per_call;
};

static const double uneven[S_RANKS] = {1, 1, 1, 1.5, 1, 1, 0.75, 1.25};

static int bench(enum dpl_policy pol, bool skew, uint32_t reps,
		 struct result *res)
{
	struct dpl_schedule_params sp = {0};
	struct dpl_sim_params simp = {0};
	struct dpl_sim_summary sum;
	struct world *w = calloc(1, sizeof *w);
	double it[MAX_REPS];
	uint64_t late = 0, calls = 0;
	dpl_sim *sim = NULL;
	uint32_t i, k, v = dpl_policy_chunks(pol) ? 2 : 1;

	w->nstages = S_RANKS * v;
	for (i = 0; i < w->nstages; i++) {
		double f = (skew ? uneven[i % S_RANKS] : 1.0) / v;

		w->costs[i].f = f;
		w->costs[i].b = 2 * f;
		w->costs[i].i = f;
		w->costs[i].w = f;
	}
	sp.stages = S_RANKS;
	sp.microbatches = M_MB;
	sp.policy = pol;
	sp.chunks = dpl_policy_chunks(pol) == 1 ? v : 0;
	/* bounded: half of 1F1B's first-stage peak; zb-auto: all of it */
	sp.cap_all = pol == DPL_POLICY_BOUNDED ? 4 :
		     pol == DPL_POLICY_ZB_AUTO ? S_RANKS : 0;
	sp.costs = w->costs;
	if (dpl_schedule_build(&sp, &w->s) || dpl_schedule_lower(w->s)) {
		fprintf(stderr, "%s\n", dpl_last_error());
		return -1;
	}
	simp.costs = w->costs;
	if (dpl_sim_run(w->s, &simp, &sim) != 0) {
		fprintf(stderr, "%s\n", dpl_last_error());
		return -1;
	}
	dpl_sim_summary(sim, &sum);
	dpl_sim_destroy(sim);
	w->reps = reps;
	snprintf(w->name, sizeof w->name, "fidelity-%d-%d", (int)pol, skew);
	pthread_barrier_init(&w->bar, NULL, S_RANKS);
	bench_run_ranks(S_RANKS, rank_main, w);
	pthread_barrier_destroy(&w->bar);
	if (w->rc != 0)
		return -1;
	for (k = 0; k < reps; k++)
		it[k] = bench_span(w->t0[k], w->t1[k], S_RANKS) * 1e3;
	for (i = 0; i < S_RANKS; i++) {
		late += w->late[i];
		calls += w->calls[i];
	}
	res->policy = dpl_policy_name(pol);
	res->shape = skew ? "uneven" : "even";
	res->measured_ms = bench_median(it, (int)reps);
	res->predicted_ms = sum.makespan;
	res->ratio = res->measured_ms / res->predicted_ms;
	res->late_us_per_call = calls ? late / 1e3 / calls : 0;
	dpl_schedule_destroy(w->s);
	free(w);
	return 0;
}

int main(int argc, char **argv)
{
	struct result res[2 * DPL_POLICY__COUNT];
	const char *json = "schedule_fidelity.json";
	uint32_t reps = 5;
	size_t n = 0, i;
	int a, skew, p;
	FILE *f;

	for (a = 1; a < argc; a++) {
		if (strcmp(argv[a], "--reps") == 0 && a + 1 < argc)
			reps = (uint32_t)atoi(argv[++a]);
		else if (strcmp(argv[a], "--json") == 0 && a + 1 < argc)
			json = argv[++a];
		else {
			fprintf(stderr, "usage: %s [--reps N] [--json OUT]\n",
				argv[0]);
			return 2;
		}
	}
	if (reps < 1 || reps > MAX_REPS) {
		fprintf(stderr, "--reps: 1..%d\n", MAX_REPS);
		return 2;
	}
	printf("schedule fidelity: S=%d, M=%d, F=1 ms, B=2 ms, synthetic "
	       "device, inproc, median of %u iterations\n", S_RANKS, M_MB,
	       reps);
	printf("%-14s %-7s %12s %13s %8s %14s\n", "policy", "stages",
	       "measured ms", "predicted ms", "ratio", "late us/call");
	for (skew = 0; skew < 2; skew++)
		for (p = 0; p < DPL_POLICY__COUNT; p++) {
			if (!dpl_policy_buildable((enum dpl_policy)p))
				continue;
			if (bench((enum dpl_policy)p, skew, reps, &res[n]) != 0)
				return 1;
			printf("%-14s %-7s %12.2f %13.2f %8.3f %14.1f\n",
			       res[n].policy, res[n].shape,
			       res[n].measured_ms, res[n].predicted_ms,
			       res[n].ratio, res[n].late_us_per_call);
			n++;
		}
	f = fopen(json, "w");
	if (f == NULL) {
		perror(json);
		return 1;
	}
	fprintf(f, "{\"benchmark\":\"schedule_fidelity\",\"stages\":%d,"
		"\"microbatches\":%d,\"f_ms\":1,\"b_ms\":2,\"reps\":%u,"
		"\"target_ratio\":1.03,\"cases\":[", S_RANKS, M_MB, reps);
	for (i = 0; i < n; i++)
		fprintf(f, "%s\n{\"policy\":\"%s\",\"stages\":\"%s\","
			"\"measured_ms\":%.3f,\"predicted_ms\":%.3f,"
			"\"ratio\":%.4f,\"late_us_per_call\":%.2f}",
			i ? "," : "", res[i].policy, res[i].shape,
			res[i].measured_ms, res[i].predicted_ms, res[i].ratio,
			res[i].late_us_per_call);
	fprintf(f, "\n]}\n");
	fclose(f);
	printf("wrote %s\n", json);
	return 0;
}
