/*
 * planner.c - the DAPPLE planner on the paper's five models, three
 * clusters and three global batch sizes: the chosen plan, its simulated
 * iteration time, its speedup over PipeDream's planner, pure data
 * parallelism and an even GPipe split (all timed synchronously under the
 * same cost model), and the planning time.
 *
 * usage: planner [OUT.json]     (default planner.json in the current
 *                                directory; profiles from $DPL_PROFILES
 *                                or the configured DPL_PROFILES_DIR)
 *
 * Planning time is the median of REPS runs, wall clock and CPU time of
 * the process (the planner is single-threaded).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#include <dpl/dpl.h>
#include <dpl/plan.h>

#ifndef DPL_PROFILES_DIR
#define DPL_PROFILES_DIR "../shared/profiles"
#endif

#define REPS 3

static const struct {
	const char *name, *file;
	uint32_t pbs;
} models[] = {
    {"VGG-19", "vgg-19-pbs-32.txt", 32},
    {"BERT-48", "bert-48-pbs-2.txt", 2},
    {"XLNet-36", "xlnet-36-pbs-1.txt", 1},
    {"AmoebaNet-36", "amoeba-36-pbs-1.txt", 1},
    {"GNMT-16", "gnmt-16-pbs-64.txt", 64},
};
static const char *const clusters[] = {"paper-a", "paper-b", "paper-c"};
static const uint32_t batches[] = {128, 512, 2048};

/*
 * Two sections: A lets the planner choose the micro-batching (any size;
 * under linear scaling small micro-batches cost nothing, so deep
 * pipelines lose little to the flush); B fixes 8 micro-batches per
 * iteration, as DAPPLE's runtime scripts run (8 to 12), for every plan
 * and baseline alike.
 */
static const struct {
	const char *name;
	uint32_t microbatches; /* 0: chosen */
} sections[] = {{"A", 0}, {"B", 8}};



/* "8:8 mb8x64 1f1b-comm"; runs of three or more equal replica counts
 * are written R*n ("1*16" is a straight 16-stage pipeline). */
static void shape(const struct dpl_plan *p, char *buf, size_t n)
{
	size_t off = 0;

	for (uint32_t s = 0; s < p->stages && off < n;) {
		uint32_t e = s;

		while (e + 1 < p->stages &&
		       p->stage[e + 1].replicas == p->stage[s].replicas)
			e++;
		if (e - s >= 2) {
			off += (size_t)snprintf(buf + off, n - off, "%s%u*%u",
						s ? ":" : "",
						p->stage[s].replicas, e - s + 1);
			s = e + 1;
		} else {
			off += (size_t)snprintf(buf + off, n - off, "%s%u",
						s ? ":" : "",
						p->stage[s].replicas);
			s++;
		}
	}
	if (off < n)
		snprintf(buf + off, n - off, " mb%ux%u %s", p->microbatch_size,
			 p->microbatches, dpl_policy_name(p->policy));
}

static void json_plan(FILE *f, const struct dpl_plan *p)
{
	fprintf(f, "{\"stages\": [");
	for (uint32_t s = 0; s < p->stages; s++)
		fprintf(f, "%s{\"first_layer\": %u, \"last_layer\": %u, "
			   "\"replicas\": %u, \"devices\": %llu}",
			s ? ", " : "", p->stage[s].first_layer,
			p->stage[s].last_layer, p->stage[s].replicas,
			(unsigned long long)p->stage[s].devices);
	fprintf(f,
		"], \"microbatch_size\": %u, \"microbatches\": %u, "
		"\"policy\": \"%s\", \"predicted_ms\": %.6f, \"pivot_ms\": "
		"%.6f, \"peak_memory_bytes\": %llu, \"fits\": %s}",
		p->microbatch_size, p->microbatches, dpl_policy_name(p->policy),
		p->predicted_ms, p->pivot_ms,
		(unsigned long long)p->peak_memory_bytes,
		p->fits ? "true" : "false");
}

int main(int argc, char **argv)
{
	const char *out = argc > 1 ? argv[1] : "planner.json";
	const char *dir = getenv("DPL_PROFILES");
	struct dpl_plan_report *r = malloc(sizeof *r);
	FILE *jf;
	double max_pd[2] = {0, 0}, max_plan_s = 0, max_cpu_s = 0;
	char max_pd_case[2][128] = {"", ""};
	int slower = 0, cases = 0, nofit = 0, first = 1;

	if (dir == NULL || *dir == '\0')
		dir = DPL_PROFILES_DIR;
	if (r == NULL)
		return 1;
	jf = fopen(out, "w");
	if (jf == NULL) {
		perror(out);
		return 1;
	}
	fprintf(jf, "{\n  \"benchmark\": \"planner\",\n  \"reps\": %d,\n"
		    "  \"cases\": [",
		REPS);
	printf("%-12s %-8s %5s  %-34s %11s %7s %8s %8s %8s %7s %7s\n", "model",
	       "cluster", "gbs", "plan: replicas per stage, mb x M",
	       "pred ms", "x1 dev", "vs PD", "vs DP", "vs GPipe", "plan s",
	       "cpu s");
	for (size_t sec = 0; sec < 2; sec++)
	for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
		char path[1024];
		dpl_profile *prof = NULL;

		snprintf(path, sizeof path, "%s/%s", dir, models[m].file);
		if (dpl_profile_load(path, &prof) != 0) {
			fprintf(stderr, "planner: %s (set DPL_PROFILES)\n",
				dpl_last_error());
			fclose(jf);
			remove(out);
			return 1;
		}
		for (size_t c = 0; c < 3; c++)
			for (size_t g = 0; g < 3; g++) {
				struct dpl_cluster cl;
				struct dpl_plan_params p = {
				    .profile_batch = models[m].pbs,
				    .global_batch = batches[g],
				    .optimizer_factor = 2};
				uint32_t fixed = sections[sec].microbatches;

				if (fixed)
					p.microbatch_size = batches[g] / fixed;
				if (m == 0 && c == 0 && g == 0)
					printf("%s-- section %s: %s\n",
					       sec ? "\n" : "", sections[sec].name,
					       fixed ? "8 micro-batches per "
						       "iteration for every plan"
						     : "micro-batching chosen "
						       "per plan");
				double wall[REPS], cpu[REPS], sp[3];
				char sh[64], cell[3][16];
				int rc = 0;

				dpl_cluster_preset(clusters[c], &cl);
				for (int k = 0; k < REPS; k++) {
					double w0 = bench_seconds(CLOCK_MONOTONIC);
					double c0 = bench_seconds(CLOCK_PROCESS_CPUTIME_ID);

					rc = dpl_plan_search(prof, &cl, &p, r);
					wall[k] = bench_seconds(CLOCK_MONOTONIC) - w0;
					cpu[k] = bench_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
				}
				qsort(wall, REPS, sizeof wall[0], bench_cmp_double);
				qsort(cpu, REPS, sizeof cpu[0], bench_cmp_double);
				cases++;
				if (wall[REPS / 2] > max_plan_s)
					max_plan_s = wall[REPS / 2];
				if (cpu[REPS / 2] > max_cpu_s)
					max_cpu_s = cpu[REPS / 2];
				fprintf(jf,
					"%s\n    {\"section\": \"%s\", "
					"\"fixed_microbatches\": %u, "
					"\"model\": \"%s\", \"profile\": "
					"\"%s\", \"cluster\": \"%s\", "
					"\"global_batch\": %u, \"planning_s\": "
					"%.4f, \"planning_cpu_s\": %.4f, ",
					first ? "" : ",", sections[sec].name,
					fixed, models[m].name,
					models[m].file, clusters[c], batches[g],
					wall[REPS / 2], cpu[REPS / 2]);
				first = 0;
				if (rc == DPL_ENOFIT) {
					nofit++;
					printf("%-12s %-8s %5u  %-34s %11s %7s %8s "
					       "%8s %8s %7.3f %7.3f\n",
					       models[m].name, clusters[c],
					       batches[g], "does not fit", "-", "-",
					       "-", "-", "-", wall[REPS / 2],
					       cpu[REPS / 2]);
					fprintf(jf, "\"fits\": false, \"reason\": ");
					fputc('"', jf);
					for (const char *s = dpl_last_error(); *s;
					     s++)
						if (*s != '"' && *s != '\\')
							fputc(*s, jf);
					fputs("\"}", jf);
					continue;
				}
				if (rc != 0) {
					fprintf(stderr, "planner: %s %s: %s\n",
						models[m].file, clusters[c],
						dpl_last_error());
					fclose(jf);
					remove(out);
					return 1;
				}
				shape(&r->best, sh, sizeof sh);
				for (int b = 0; b < 3; b++) {
					const struct dpl_plan *bp = &r->baseline[b];

					sp[b] = 0;
					if (!r->baseline_found[b]) {
						snprintf(cell[b], sizeof cell[b],
							 "none");
						continue;
					}
					sp[b] = bp->predicted_ms /
						r->best.predicted_ms;
					if (bp->fits && sp[b] < 1 - 1e-12)
						slower++;
					snprintf(cell[b], sizeof cell[b],
						 "%.2fx%s", sp[b],
						 bp->fits ? "" : "*");
				}
				if (r->baseline_found[DPL_BASELINE_PIPEDREAM] &&
				    r->baseline[DPL_BASELINE_PIPEDREAM].fits &&
				    sp[DPL_BASELINE_PIPEDREAM] > max_pd[sec]) {
					max_pd[sec] = sp[DPL_BASELINE_PIPEDREAM];
					snprintf(max_pd_case[sec],
						 sizeof max_pd_case[sec],
						 "%s on %s, gbs %u", models[m].name,
						 clusters[c], batches[g]);
				}
				printf("%-12s %-8s %5u  %-34s %11.2f %7.2f %8s "
				       "%8s %8s %7.3f %7.3f\n",
				       models[m].name, clusters[c], batches[g],
				       sh, r->best.predicted_ms,
				       r->single_device_ms / r->best.predicted_ms,
				       cell[DPL_BASELINE_PIPEDREAM],
				       cell[DPL_BASELINE_DATA_PARALLEL],
				       cell[DPL_BASELINE_GPIPE], wall[REPS / 2],
				       cpu[REPS / 2]);
				fprintf(jf,
					"\"fits\": true, \"single_device_ms\": "
					"%.6f, \"chosen\": \"%s\", \"plan\": ",
					r->single_device_ms,
					r->from_baseline < 0
					    ? "dapple"
					    : dpl_plan_baseline_name(
						  (enum dpl_plan_baseline)
						      r->from_baseline));
				json_plan(jf, &r->best);
				fprintf(jf, ", \"baselines\": {");
				for (int b = 0; b < 3; b++) {
					fprintf(jf, "%s\"%s\": ", b ? ", " : "",
						dpl_plan_baseline_name(
						    (enum dpl_plan_baseline)b));
					if (!r->baseline_found[b]) {
						fputs("null", jf);
						continue;
					}
					fprintf(jf, "{\"speedup\": %.6f, \"plan\": ",
						sp[b]);
					json_plan(jf, &r->baseline[b]);
					fputc('}', jf);
				}
				fputs("}}", jf);
			}
		dpl_profile_destroy(prof);
	}
	fprintf(jf,
		"\n  ],\n  \"summary\": {\"cases\": %d, \"does_not_fit\": %d, "
		"\"slower_than_a_fitting_baseline\": %d, "
		"\"max_speedup_over_pipedream\": {\"A\": %.4f, \"B\": %.4f}, "
		"\"max_speedup_over_pipedream_case\": {\"A\": \"%s\", "
		"\"B\": \"%s\"}, \"max_planning_s\": %.4f, "
		"\"max_planning_cpu_s\": %.4f}\n}\n",
		cases, nofit, slower, max_pd[0], max_pd[1], max_pd_case[0],
		max_pd_case[1], max_plan_s, max_cpu_s);
	if (fclose(jf) != 0) {
		perror(out);
		return 1;
	}
	printf("\n%d cases, %d do not fit; slower than a fitting baseline: %d\n"
	       "largest speedup over PipeDream: A %.2fx (%s), B %.2fx (%s)\n"
	       "planning time at most %.3f s wall, %.3f s CPU (median of %d)\n"
	       "(* = that baseline does not fit device memory; its time is "
	       "what it would take if it did)\nJSON: %s\n",
	       cases, nofit, slower, max_pd[0], max_pd_case[0], max_pd[1],
	       max_pd_case[1], max_plan_s, max_cpu_s, REPS, out);
	free(r);
	return 0;
}
