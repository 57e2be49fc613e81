/*
 * schedule_build - how long dpl takes to build, lower, validate and
 * simulate a schedule, per policy, at (S, M) = (8, 64), (32, 256),
 * (64, 1024); and how much memory the result holds per action.
 *
 * usage: bench_schedule_build [--reps N] [--json OUT.json] [--only P:S:M]
 * Prints a table of medians over N repetitions (default 5) and writes
 * JSON (default schedule_build.json). --only runs one case once, for
 * `valgrind --tool=callgrind --toggle-collect=bench_case` to count
 * instructions per action (benchmarks/callgrind_schedule_build.sh).
 */
#define _POSIX_C_SOURCE 200809L
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#include <dpl/dpl.h>
#include <dpl/sim.h>

struct result {
	double build, lower, validate, simulate; /* seconds, medians */
	size_t actions;                         /* lowered */
	double bytes_per_action;                /* schedule + sim result */
};




static struct dpl_schedule_params params(enum dpl_policy p, uint32_t S,
					 uint32_t M)
{
	struct dpl_schedule_params prm = {.stages = S, .microbatches = M,
					  .policy = p};

	if (dpl_policy_chunks(p) == 1)
		prm.chunks = 2;
	if (p == DPL_POLICY_BOUNDED)
		prm.cap_all = S / 2 > 0 ? S / 2 : 1;
	if (p == DPL_POLICY_ZB_AUTO)
		prm.cap_all = S; /* 1F1B's first-stage peak */
	return prm;
}

/* One full pass; kept out of line so callgrind can collect it alone. */
static __attribute__((noinline)) int bench_case(enum dpl_policy p, uint32_t S,
				 uint32_t M, double t[4],
					 size_t *actions, size_t *bytes)
{
	struct dpl_schedule_params prm = params(p, S, M);
	dpl_schedule *s;
	dpl_sim *sim;
	struct mallinfo2 m0 = mallinfo2(), m1;
	double a = bench_seconds(CLOCK_MONOTONIC), b, c, d, e;

	if (dpl_schedule_build(&prm, &s))
		return -1;
	b = bench_seconds(CLOCK_MONOTONIC);
	if (dpl_schedule_lower(s))
		return -1;
	c = bench_seconds(CLOCK_MONOTONIC);
	if (dpl_schedule_validate(s, NULL))
		return -1;
	d = bench_seconds(CLOCK_MONOTONIC);
	if (dpl_sim_run(s, NULL, &sim))
		return -1;
	e = bench_seconds(CLOCK_MONOTONIC);
	m1 = mallinfo2();
	*actions = dpl_schedule_action_count(s);
	*bytes = m1.uordblks - m0.uordblks;
	t[0] = b - a;
	t[1] = c - b;
	t[2] = d - c;
	t[3] = e - d;
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
	return 0;
}

int main(int argc, char **argv)
{
	enum dpl_policy pols[DPL_POLICY__COUNT];
	size_t npol = 0;
	static const uint32_t sizes[][2] = {{8, 64}, {32, 256}, {64, 1024}};
	const char *json = "schedule_build.json", *only = NULL;
	int reps = 5;
	FILE *jf;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
			json = argv[++i];
		else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
			only = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--reps N] [--json OUT] "
					"[--only POLICY:S:M]\n",
				argv[0]);
			return 2;
		}
	}
	if (reps < 1 || reps > 1000) {
		fprintf(stderr, "--reps must be in 1..1000\n");
		return 2;
	}
	if (only) {
		char name[32];
		unsigned S, M;
		enum dpl_policy p;
		double t[4];
		size_t n, bytes;

		if (sscanf(only, "%31[^:]:%u:%u", name, &S, &M) != 3 ||
		    dpl_policy_parse(name, &p)) {
			fprintf(stderr, "--only: expected POLICY:S:M\n");
			return 2;
		}
		if (bench_case(p, S, M, t, &n, &bytes)) {
			fprintf(stderr, "%s\n", dpl_last_error());
			return 1;
		}
		printf("%s S=%u M=%u: %zu actions\n", name, S, M, n);
		return 0;
	}
	for (int p = 0; p < DPL_POLICY__COUNT; p++)
		if (dpl_policy_buildable((enum dpl_policy)p))
			pols[npol++] = (enum dpl_policy)p;
	jf = fopen(json, "w");
	if (jf == NULL) {
		perror(json);
		return 1;
	}
	fprintf(jf, "{\"benchmark\":\"schedule_build\",\"reps\":%d,\"cases\":[",
		reps);
	printf("%-14s %4s %5s %9s %9s %9s %9s %9s %11s %9s\n", "policy", "S",
	       "M", "actions", "build_ms", "lower_ms", "valid_ms", "sim_ms",
	       "b+l+v_ms", "B/action");
	for (size_t z = 0; z < 3; z++)
		for (size_t k = 0; k < npol; k++) {
			double tb[1000], tl[1000], tv[1000], ts[1000], tt[1000];
			uint32_t S = sizes[z][0], M = sizes[z][1];
			size_t n = 0, bytes = 0;
			struct result r;

			for (int i = 0; i < reps; i++) {
				double t[4];

				if (bench_case(pols[k], S, M, t, &n, &bytes)) {
					fprintf(stderr, "%s S=%u M=%u: %s\n",
						dpl_policy_name(pols[k]), S, M,
						dpl_last_error());
					return 1;
				}
				tb[i] = t[0];
				tl[i] = t[1];
				tv[i] = t[2];
				ts[i] = t[3];
				tt[i] = t[0] + t[1] + t[2];
			}
			r.build = bench_median(tb, reps);
			r.lower = bench_median(tl, reps);
			r.validate = bench_median(tv, reps);
			r.simulate = bench_median(ts, reps);
			r.actions = n;
			r.bytes_per_action = (double)bytes / n;
			printf("%-14s %4u %5u %9zu %9.3f %9.3f %9.3f %9.3f %11.3f "
			       "%9.1f\n",
			       dpl_policy_name(pols[k]), S, M, n, r.build * 1e3,
			       r.lower * 1e3, r.validate * 1e3, r.simulate * 1e3,
			       bench_median(tt, reps) * 1e3, r.bytes_per_action);
			fprintf(jf,
				"%s{\"policy\":\"%s\",\"stages\":%u,"
				"\"microbatches\":%u,\"actions\":%zu,"
				"\"build_s\":%.6g,\"lower_s\":%.6g,"
				"\"validate_s\":%.6g,\"simulate_s\":%.6g,"
				"\"build_lower_validate_s\":%.6g,"
				"\"bytes_per_action\":%.2f}",
				(z || k) ? "," : "", dpl_policy_name(pols[k]), S,
				M, n, r.build, r.lower, r.validate, r.simulate,
				bench_median(tt, reps), r.bytes_per_action);
		}
	fprintf(jf, "]}\n");
	if (fclose(jf) != 0) {
		perror(json);
		return 1;
	}
	printf("wrote %s\n", json);
	return 0;
}
