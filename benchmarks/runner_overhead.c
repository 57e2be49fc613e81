/*
 * runner_overhead - what the runner itself costs per action: no-op stage
 * callbacks, the in-process transport, one thread per rank, 1f1b with
 * S = 4, 8, 16 stages and M = 64, 256, 1024 micro-batches of one sample
 * (64 bytes of activation each way).
 *
 * Figures per action, medians over the repetitions:
 *  - busy ns: the time the rank threads spend inside actions with the
 *    waits for inputs left out (the runner's events, dpl_runner_events):
 *    bookkeeping, posting, matching and copying, the no-op callback.
 *    This is the runner's overhead; target <= 200 ns per action.
 *  - busy ns, unpreempted: the same over the actions that took less
 *    than PREEMPTED_NS. With up to 16 rank threads on 2 cores, the
 *    kernel now and then takes the core from a thread in the middle of
 *    an action, and that action then counts the other threads' time too;
 *    a no-op action never takes that long otherwise. The share of
 *    actions left out is printed beside it.
 *  - cpu ns: all CPU time of the rank threads inside dpl_runner_step()
 *    (CLOCK_THREAD_CPUTIME_ID), waits included: with more ranks than
 *    cores this is mostly waking and sleeping threads.
 * Wall time per step is printed beside them.
 *
 * usage: bench_runner_overhead [--reps N] [--json OUT.json] [--only S:M]
 * --only runs one case for one step, for
 * `valgrind --tool=callgrind --toggle-collect=dpl_runner_step` to count
 * instructions per action (benchmarks/callgrind_runner_overhead.sh).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#include <dpl/dpl.h>
#include <dpl/transport.h>

#include <dpl/transport_inproc.h>

#define MAX_S 16
#define MAX_REPS 64
/* An action this long was preempted (see above). */
#define PREEMPTED_NS 20000u

static int nop(void *u, const struct dpl_stage_args *a)
{
	return 0;
}

static int nop_grads(void *u, uint32_t s, const struct dpl_buffer **b,
		     size_t *n)
{
	*b = NULL;
	*n = 0;
	return 0;
}

static int nop_step(void *u, uint32_t s, uint64_t it)
{
	return 0;
}

static const struct dpl_stage_ops ops = {
	.abi_version = DPL_STAGE_ABI_VERSION,
	.size = sizeof(struct dpl_stage_ops),
	.name = "nop",
	.forward = nop,
	.backward = nop,
	.grads = nop_grads,
	.step = nop_step,
};

struct world {
	dpl_schedule *s;
	uint32_t S, M, reps;
	char name[64];
	pthread_barrier_t bar;
	double cpu[MAX_REPS][MAX_S];  /* ns per rank per rep */
	double busy[MAX_REPS][MAX_S]; /* ns inside actions, waits excluded */
	double quick[MAX_REPS][MAX_S]; /* the same, actions < PREEMPTED_NS */
	double nquick[MAX_REPS][MAX_S]; /* how many those were */
	double wall0[MAX_REPS][MAX_S], wall1[MAX_REPS][MAX_S];
	/* busy ns and count per action kind, per rep and rank */
	double kbusy[MAX_REPS][MAX_S][DPL_ACT__COUNT];
	double kn[MAX_REPS][MAX_S][DPL_ACT__COUNT];
	size_t actions;               /* per step, all ranks */
	int rc;
};

static double ns(clockid_t c)
{
	struct timespec t;

	clock_gettime(c, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static void *rank_main(void *p)
{
	struct bench_rank *a = p;
	struct world *w = a->world;
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params rp = {0};
	uint64_t act[MAX_S];
	dpl_transport *t = NULL;
	dpl_runner *r = NULL;
	const struct dpl_runner_event *ev;
	size_t nev, e, nlist;
	uint32_t i, k;
	double c0;

	for (i = 0; i < MAX_S; i++)
		act[i] = 64;
	tp.rank = a->rank;
	tp.world_size = w->S;
	tp.world = w->name;
	rp.schedule = w->s;
	rp.rank = a->rank;
	rp.batch = w->M;
	rp.activation_bytes = act;
	rp.stage_ops = &ops;
	dpl_schedule_actions(w->s, a->rank, &nlist);
	rp.trace_capacity = nlist;
	if (dpl_transport_open(&dpl_transport_inproc, &tp, &t) != 0) {
		w->rc = -1;
		return NULL;
	}
	rp.transport = t;
	if (dpl_runner_create(&rp, &r) != 0)
		w->rc = -1;
	pthread_barrier_wait(&w->bar);
	for (i = 0; w->rc == 0 && i <= w->reps; i++) {
		pthread_barrier_wait(&w->bar);
		w->wall0[i ? i - 1 : 0][a->rank] = ns(CLOCK_MONOTONIC);
		c0 = ns(CLOCK_THREAD_CPUTIME_ID);
		if (dpl_runner_step(r) != 0) {
			fprintf(stderr, "%s\n", dpl_last_error());
			w->rc = -1;
		}
		/* Repetition 0 warms up; it is overwritten. */
		w->cpu[i ? i - 1 : 0][a->rank] =
			ns(CLOCK_THREAD_CPUTIME_ID) - c0;
		ev = dpl_runner_events(r, &nev);
		k = i ? i - 1 : 0;
		w->busy[k][a->rank] = w->quick[k][a->rank] = 0;
		w->nquick[k][a->rank] = 0;
		memset(w->kbusy[k][a->rank], 0, sizeof w->kbusy[k][a->rank]);
		memset(w->kn[k][a->rank], 0, sizeof w->kn[k][a->rank]);
		for (e = 0; e < nev; e++) {
			uint64_t d = ev[e].end_ns - ev[e].start_ns;
			uint32_t kind = ev[e].action.kind;

			w->busy[k][a->rank] += (double)d;
			if (kind < DPL_ACT__COUNT) {
				w->kbusy[k][a->rank][kind] += (double)d;
				w->kn[k][a->rank][kind]++;
			}
			if (d < PREEMPTED_NS) {
				w->quick[k][a->rank] += (double)d;
				w->nquick[k][a->rank]++;
			}
		}
		w->wall1[i ? i - 1 : 0][a->rank] = ns(CLOCK_MONOTONIC);
		pthread_barrier_wait(&w->bar);
	}
	pthread_barrier_wait(&w->bar);
	dpl_runner_destroy(r);
	pthread_barrier_wait(&w->bar);
	dpl_transport_close(t);
	return NULL;
}



struct result {
	uint32_t S, M;
	size_t actions;
	double busy_ns_per_action;
	double quick_ns_per_action;   /* unpreempted actions only */
	double preempted_share;       /* of the actions, left out above */
	double cpu_ns_per_action;
	double wall_us_per_step;
	double kind_ns[DPL_ACT__COUNT]; /* busy ns per action of a kind */
};

/* The kinds a 1f1b list has, in the order the table prints them. */
static const uint32_t kinds[] = {DPL_ACT_RECV_F, DPL_ACT_F, DPL_ACT_SEND_F,
				 DPL_ACT_RECV_B, DPL_ACT_B, DPL_ACT_SEND_B,
				 DPL_ACT_STEP};
static const char *const kind_names[] = {"RECV_F", "F", "SEND_F", "RECV_B",
					 "B", "SEND_B", "STEP"};
#define NKINDS (sizeof kinds / sizeof kinds[0])

static int bench(uint32_t S, uint32_t M, uint32_t reps, struct result *res)
{
	struct dpl_schedule_params sp = {0};
	struct world *w = calloc(1, sizeof *w);
	double cpu[MAX_REPS], busy[MAX_REPS], wall[MAX_REPS];
	double quick[MAX_REPS], share[MAX_REPS], kv[MAX_REPS];
	uint32_t i, k, kk;
	size_t n;

	sp.stages = S;
	sp.microbatches = M;
	sp.policy = DPL_POLICY_1F1B;
	if (dpl_schedule_build(&sp, &w->s) || dpl_schedule_lower(w->s)) {
		fprintf(stderr, "%s\n", dpl_last_error());
		return -1;
	}
	w->S = S;
	w->M = M;
	w->reps = reps;
	snprintf(w->name, sizeof w->name, "overhead-%u-%u", S, M);
	for (i = 0; i < S; i++) {
		dpl_schedule_actions(w->s, i, &n);
		w->actions += n;
	}
	pthread_barrier_init(&w->bar, NULL, S);
	bench_run_ranks(S, rank_main, w);
	pthread_barrier_destroy(&w->bar);
	if (w->rc != 0)
		return -1;
	for (k = 0; k < reps; k++) {
		double c = 0, b = 0, q = 0, nq = 0;

		for (i = 0; i < S; i++) {
			c += w->cpu[k][i];
			b += w->busy[k][i];
			q += w->quick[k][i];
			nq += w->nquick[k][i];
		}
		cpu[k] = c / (double)w->actions;
		busy[k] = b / (double)w->actions;
		quick[k] = nq > 0 ? q / nq : 0;
		share[k] = 1.0 - nq / (double)w->actions;
		wall[k] = bench_span(w->wall0[k], w->wall1[k], S) / 1e3;
	}
	res->S = S;
	res->M = M;
	res->actions = w->actions;
	res->cpu_ns_per_action = bench_median(cpu, (int)reps);
	res->busy_ns_per_action = bench_median(busy, (int)reps);
	res->quick_ns_per_action = bench_median(quick, (int)reps);
	res->preempted_share = bench_median(share, (int)reps);
	res->wall_us_per_step = bench_median(wall, (int)reps);
	for (kk = 0; kk < DPL_ACT__COUNT; kk++) {
		for (k = 0; k < reps; k++) {
			double b = 0, c = 0;

			for (i = 0; i < S; i++) {
				b += w->kbusy[k][i][kk];
				c += w->kn[k][i][kk];
			}
			kv[k] = c > 0 ? b / c : 0;
		}
		res->kind_ns[kk] = bench_median(kv, (int)reps);
	}
	dpl_schedule_destroy(w->s);
	free(w);
	return 0;
}

int main(int argc, char **argv)
{
	static const uint32_t Ss[] = {4, 8, 16}, Ms[] = {64, 256, 1024};
	struct result res[9];
	const char *json = "runner_overhead.json";
	uint32_t reps = 7, only_s = 0, only_m = 0;
	size_t i, j, n = 0;
	FILE *f;
	int a;

	for (a = 1; a < argc; a++) {
		if (strcmp(argv[a], "--reps") == 0 && a + 1 < argc)
			reps = (uint32_t)atoi(argv[++a]);
		else if (strcmp(argv[a], "--json") == 0 && a + 1 < argc)
			json = argv[++a];
		else if (strcmp(argv[a], "--only") == 0 && a + 1 < argc &&
			 sscanf(argv[++a], "%u:%u", &only_s, &only_m) == 2)
			;
		else {
			fprintf(stderr, "usage: %s [--reps N] [--json OUT] "
				"[--only S:M]\n", argv[0]);
			return 2;
		}
	}
	if (reps < 1 || reps > MAX_REPS || only_s > MAX_S) {
		fprintf(stderr, "--reps 1..%d, S <= %d\n", MAX_REPS, MAX_S);
		return 2;
	}
	if (only_s) {
		if (bench(only_s, only_m, 1, &res[0]) != 0)
			return 1;
		/* a warm-up step and a measured one */
		printf("S=%u M=%u: %zu actions in 2 steps\n", only_s, only_m,
		       2 * res[0].actions);
		return 0;
	}
	printf("runner overhead: 1f1b, no-op callbacks, inproc, one thread "
	       "per rank, median of %u steps\n", reps);
	printf("busy: waits left out; unpreempted: actions under %u us only "
	       "(the share left out beside it)\n", PREEMPTED_NS / 1000);
	printf("%4s %6s %9s %9s %12s %10s %9s %12s\n", "S", "M", "actions",
	       "busy ns", "unpreempted", "left out", "cpu ns", "wall us/step");
	for (i = 0; i < 3; i++)
		for (j = 0; j < 3; j++) {
			if (bench(Ss[i], Ms[j], reps, &res[n]) != 0)
				return 1;
			printf("%4u %6u %9zu %9.1f %12.1f %9.2f%% %9.1f "
			       "%12.1f\n",
			       res[n].S, res[n].M, res[n].actions,
			       res[n].busy_ns_per_action,
			       res[n].quick_ns_per_action,
			       100.0 * res[n].preempted_share,
			       res[n].cpu_ns_per_action,
			       res[n].wall_us_per_step);
			n++;
		}
	printf("\nbusy ns per action by kind (median of %u steps)\n", reps);
	printf("%4s %6s", "S", "M");
	for (j = 0; j < NKINDS; j++)
		printf(" %8s", kind_names[j]);
	printf("\n");
	for (i = 0; i < n; i++) {
		printf("%4u %6u", res[i].S, res[i].M);
		for (j = 0; j < NKINDS; j++)
			printf(" %8.1f", res[i].kind_ns[kinds[j]]);
		printf("\n");
	}
	f = fopen(json, "w");
	if (f == NULL) {
		perror(json);
		return 1;
	}
	fprintf(f, "{\"benchmark\":\"runner_overhead\",\"reps\":%u,"
		"\"target_ns_per_action\":200,\"preempted_ns\":%u,"
		"\"cases\":[", reps, PREEMPTED_NS);
	for (i = 0; i < n; i++) {
		fprintf(f, "%s\n{\"S\":%u,\"M\":%u,\"actions\":%zu,"
			"\"busy_ns_per_action\":%.1f,"
			"\"unpreempted_ns_per_action\":%.1f,"
			"\"preempted_share\":%.5f,"
			"\"cpu_ns_per_action\":%.1f,\"wall_us_per_step\":%.1f,"
			"\"busy_ns_by_kind\":{",
			i ? "," : "", res[i].S, res[i].M, res[i].actions,
			res[i].busy_ns_per_action, res[i].quick_ns_per_action,
			res[i].preempted_share, res[i].cpu_ns_per_action,
			res[i].wall_us_per_step);
		for (j = 0; j < NKINDS; j++)
			fprintf(f, "%s\"%s\":%.1f", j ? "," : "",
				kind_names[j], res[i].kind_ns[kinds[j]]);
		fprintf(f, "}}");
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	printf("wrote %s\n", json);
	return 0;
}
