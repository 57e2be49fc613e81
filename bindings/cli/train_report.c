/*
 * train_report.c - what `dpl train` prints on rank 0: the loss per
 * iteration, throughput, peak activation buffers per stage, the weights
 * digest and the --check figure, as text or as one JSON object.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include <dpl/dpl.h>

#include "cli.h"
#include "train.h"

/* Sum the loss over the ranks of each iteration; the bound per stage. */
void train_finish_results(const struct train_job *J, struct train_result *R)
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

void train_print_text(const struct train_job *J, const struct train_result *R)
{
	const struct train_opts *o = &J->o;
	uint64_t b, e;
	uint32_t it, s;

	dpl_split(o->batch, o->microbatches, 0, &b, &e);
	printf("dpl train: %u stages on %u ranks, %u micro-batches of up to "
	       "%llu samples, %s, %s, %s%s\n",
	       J->nstages, J->world, o->microbatches,
	       (unsigned long long)(e - b), dpl_policy_name(o->policy),
	       J->tops->name,
	       o->synthetic ? "synthetic" : o->cuda ? "cuda, " : "cpu, ",
	       o->synthetic ? "" : train_dtype_name(o));
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
		       R->max_rel <= train_check_limit(o) ? "within" : "ABOVE",
		       train_check_limit(o));
}

int train_print_json(const struct train_job *J, const struct train_result *R)
{
	const struct train_opts *o = &J->o;
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
				o->synthetic ? "synthetic"
				: o->cuda    ? "cuda"
					     : "cpu");
	if (!o->synthetic)
		cJSON_AddStringToObject(root, "dtype", train_dtype_name(o));
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
	if (R->have_check) {
		cJSON_AddNumberToObject(root, "max_rel_diff", R->max_rel);
		cJSON_AddNumberToObject(root, "check_limit",
					train_check_limit(o));
	}
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
