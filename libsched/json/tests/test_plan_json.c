/*
 * test_plan_json.c - the plan file: what `dpl plan` writes (the keys the
 * runner and `dpl simulate --plan` rely on), that a plan read back
 * simulates to the same time without its profile, and a table of
 * malformed plan files with the JSON path each message must name.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/plan.h>
#include <dpl/json.h>

/* Eight layers with weights at the end (a small VGG-like shape). */
static dpl_profile *small_model(void)
{
	struct dpl_layer l[8];
	dpl_profile *p = NULL;

	for (int i = 0; i < 8; i++)
		l[i] = (struct dpl_layer){NULL, NULL, 4.0 - 0.3 * i,
					  8.0 - 0.6 * i, 4e7 / (i + 1),
					  i < 6 ? 2e7 : 8e8};
	l[0].name = "Input";
	l[7].name = "FC \"last\"";
	cr_assert_eq(dpl_profile_create(l, 8, NULL, 0, &p), 0);
	return p;
}

static char *plan_text(const struct dpl_plan_report *r, const dpl_profile *prof,
		       const struct dpl_cluster *c,
		       const struct dpl_plan_params *p, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	cr_assert_not_null(f);
	cr_assert_eq(dpl_plan_write_json(r, prof, c, p, f), 0, "%s",
		     dpl_last_error());
	fclose(f);
	return buf;
}

Test(plan_json, written_plan_has_the_documented_keys)
{
	dpl_profile *prof = small_model();
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 8, .global_batch = 64,
				    .optimizer_factor = 1};
	struct dpl_plan_report *r = calloc(1, sizeof *r);
	static const char *const bl[] = {"data_parallel", "pipedream", "gpipe"};
	const cJSON *st, *e;
	cJSON *root;
	size_t len;
	char *text;
	uint32_t k = 0;

	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0, "%s",
		     dpl_last_error());
	text = plan_text(r, prof, &c, &p, &len);
	root = cJSON_ParseWithLength(text, len);
	cr_assert_not_null(root, "not JSON:\n%s", text);
	cr_expect_str_eq(cJSON_GetObjectItem(root, "format")->valuestring,
			 "dpl-plan");
	st = cJSON_GetObjectItem(root, "stages");
	cr_assert(cJSON_IsArray(st));
	cr_expect_eq((uint32_t)cJSON_GetArraySize(st), r->best.stages);
	cJSON_ArrayForEach(e, st)
	{
		const cJSON *d = cJSON_GetObjectItem(e, "devices"), *x;
		uint64_t m = 0;

		cr_expect_eq(cJSON_GetObjectItem(e, "first_layer")->valuedouble,
			     r->best.stage[k].first_layer);
		cr_expect_eq(cJSON_GetObjectItem(e, "last_layer")->valuedouble,
			     r->best.stage[k].last_layer);
		cr_assert(cJSON_IsArray(d));
		cJSON_ArrayForEach(x, d) m |= 1ULL << (int)x->valuedouble;
		cr_expect_eq(m, r->best.stage[k].devices, "stage %u", k);
		k++;
	}
	cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(st, 0),
					     "first_name")
			     ->valuestring,
			 "Input");
	cr_expect_str_eq(
	    cJSON_GetObjectItem(cJSON_GetArrayItem(st, (int)k - 1), "last_name")
		->valuestring,
	    "FC \"last\"");
	cr_expect_eq(cJSON_GetObjectItem(root, "microbatch_size")->valuedouble,
		     r->best.microbatch_size);
	cr_expect_eq(cJSON_GetObjectItem(root, "microbatches")->valuedouble,
		     r->best.microbatches);
	cr_expect_str_eq(cJSON_GetObjectItem(root, "policy")->valuestring,
			 dpl_policy_name(r->best.policy));
	cr_expect_eq(cJSON_GetObjectItem(root, "predicted_ms")->valuedouble,
		     r->best.predicted_ms);
	cr_expect_eq(cJSON_GetObjectItem(root, "peak_memory_bytes")->valuedouble,
		     (double)r->best.peak_memory_bytes);
	for (int b = 0; b < 3; b++) {
		const cJSON *o = cJSON_GetObjectItem(
		    cJSON_GetObjectItem(root, "baselines"), bl[b]);

		cr_assert(cJSON_IsObject(o), "baselines.%s", bl[b]);
		cr_expect(cJSON_IsBool(cJSON_GetObjectItem(o, "fits")), "%s",
			  bl[b]);
		if (r->baseline_found[b])
			cr_expect_eq(
			    cJSON_GetObjectItem(o, "predicted_ms")->valuedouble,
			    r->baseline[b].predicted_ms, "%s", bl[b]);
		else
			cr_expect(cJSON_IsNull(
			    cJSON_GetObjectItem(o, "predicted_ms")));
	}
	cJSON_Delete(root);
	free(text);
	free(r);
	dpl_profile_destroy(prof);
}

Test(plan_json, plan_read_back_simulates_to_the_same_time)
{
	dpl_profile *prof = small_model();
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 8, .global_batch = 64,
				    .optimizer_factor = 1};
	struct dpl_plan_report *r = calloc(1, sizeof *r);
	struct dpl_plan *q = calloc(1, sizeof *q);
	struct dpl_plan_sim ps;
	struct dpl_sim_summary sum;
	dpl_schedule *s = NULL;
	dpl_sim *sim = NULL;
	size_t len;
	char *text;

	for (int k = 0; k < 3; k++) {
		static const char *const names[] = {"paper-a", "paper-b",
						    "paper-c"};

		cr_assert_eq(dpl_cluster_preset(names[k], &c), 0);
		cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0, "%s",
			     dpl_last_error());
		text = plan_text(r, prof, &c, &p, &len);
		cr_assert_eq(dpl_plan_read_json(text, len, q), 0, "%s",
			     dpl_last_error());
		cr_assert_eq(q->stages, r->best.stages);
		for (uint32_t i = 0; i < q->stages; i++) {
			const struct dpl_plan_stage *a = &r->best.stage[i];
			const struct dpl_plan_stage *b = &q->stage[i];

			cr_expect_eq(a->first_layer, b->first_layer);
			cr_expect_eq(a->last_layer, b->last_layer);
			cr_expect_eq(a->devices, b->devices);
			cr_expect_eq(a->replicas, b->replicas);
			cr_expect_eq(a->forward_ms, b->forward_ms);
			cr_expect_eq(a->backward_ms, b->backward_ms);
			cr_expect_eq(a->send_ms, b->send_ms);
			cr_expect_eq(a->allreduce_ms, b->allreduce_ms);
			cr_expect_eq(a->memory_bytes, b->memory_bytes);
		}
		cr_expect_eq(q->microbatch_size, r->best.microbatch_size);
		cr_expect_eq(q->microbatches, r->best.microbatches);
		cr_expect_eq(q->policy, r->best.policy);
		cr_expect_eq(q->predicted_ms, r->best.predicted_ms);
		cr_expect_eq(q->pivot_ms, r->best.pivot_ms);
		cr_expect_eq(q->fits, 1);
		/* no profile needed to replay it */
		cr_assert_eq(dpl_plan_schedule(q, &s, &ps), 0, "%s",
			     dpl_last_error());
		cr_assert_eq(dpl_sim_run(s, &ps.params, &sim), 0, "%s",
			     dpl_last_error());
		dpl_sim_summary(sim, &sum);
		cr_expect(fabs(sum.makespan - r->best.predicted_ms) <=
			      1e-9 * r->best.predicted_ms,
			  "%s: replay %.12g, planned %.12g", names[k],
			  sum.makespan, r->best.predicted_ms);
		dpl_sim_destroy(sim);
		dpl_schedule_destroy(s);
		free(text);
	}
	free(q);
	free(r);
	dpl_profile_destroy(prof);
}

#define STAGE(first, last, devs)                                              \
	"{\"first_layer\": " #first ", \"last_layer\": " #last                \
	", \"devices\": " devs ", \"forward_ms\": 1, \"backward_ms\": 2, "    \
	"\"send_ms\": 0.5, \"allreduce_ms\": 0}"
#define PLAN(extra, stages)                                                   \
	"{\"format\": \"dpl-plan\", \"version\": 1, " extra                   \
	"\"stages\": [" stages "], \"microbatch_size\": 4, "                  \
	"\"microbatches\": 8, \"policy\": \"1f1b\"}"

Test(plan_json, minimal_hand_written_plan_loads)
{
	static const char text[] =
	    PLAN("\"layers\": 5, ", STAGE(0, 2, "[0, 1]") ", " STAGE(3, 4, "[5]"));
	struct dpl_plan *q = calloc(1, sizeof *q);

	cr_assert_eq(dpl_plan_read_json(text, strlen(text), q), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(q->stages, 2);
	cr_expect_eq(q->stage[0].devices, 0x3);
	cr_expect_eq(q->stage[1].devices, 0x20);
	cr_expect_eq(q->stage[0].replicas, 2);
	cr_expect_eq(q->stage[1].last_layer, 4);
	cr_expect_eq(q->devices_used, 3);
	cr_expect_eq(q->policy, DPL_POLICY_1F1B);
	cr_expect_eq(q->stage[0].send_ms, 0.5);
	free(q);
}

Test(plan_json, malformed_plans_name_the_fault)
{
	static const struct {
		const char *text, *want;
	} bad[] = {
	    {"{\"format\": \"dpl-plan\", \"version\": 1, \"microbatch_size\": "
	     "4, \"microbatches\": 8, \"policy\": \"1f1b\"}",
	     "missing key 'stages'"},
	    {PLAN("", STAGE(0, 1, "[0]") ", " STAGE(3, 4, "[1]")),
	     "stages[1].first_layer: 3, expected 2"},
	    {PLAN("", STAGE(0, 1, "[0, 1]") ", " STAGE(2, 4, "[1]")),
	     "stages[1].devices[0]: device 1 is used twice"},
	    {PLAN("", STAGE(0, 1, "[0, 64]")),
	     "stages[0].devices[1]: 64 is out of range [0, 63]"},
	    {PLAN("", STAGE(0, 1, "[]")), "stages[0].devices: expected a "
					  "non-empty array"},
	    {PLAN("\"layers\": 9, ", STAGE(0, 1, "[0]")),
	     "the last stage ends at layer 1, but the profile has 9 layers"},
	    {PLAN("", "{\"first_layer\": 0, \"last_layer\": 1, \"devices\": "
		      "[0], \"replicas\": 3, \"forward_ms\": 1, "
		      "\"backward_ms\": 2, \"send_ms\": 0, \"allreduce_ms\": "
		      "0}"),
	     "stages[0].replicas: 3, but 1 devices are listed"},
	    {PLAN("", "{\"first_layer\": 0, \"last_layer\": 1, \"devices\": "
		      "[0], \"forward_ms\": -1, \"backward_ms\": 2, "
		      "\"send_ms\": 0, \"allreduce_ms\": 0}"),
	     "stages[0].forward_ms: -1 is below 0"},
	    {PLAN("", "{\"first_layer\": 0, \"last_layer\": 1, \"devices\": "
		      "[0], \"forward_ms\": 1, \"backward_ms\": 2, "
		      "\"allreduce_ms\": 0}"),
	     "stages[0]: missing key 'send_ms'"},
	    {PLAN("\"foo\": 1, ", STAGE(0, 1, "[0]")), "unknown key 'foo'"},
	    {PLAN("\"baselines\": [], ", STAGE(0, 1, "[0]")),
	     "baselines: expected an object, got an array"},
	    {PLAN("\"cluster\": {\"machines\": 1}, ", STAGE(0, 1, "[0]")),
	     "cluster: missing key 'devices_per_machine'"},
	    {"{\"format\": \"dpl-schedule\", \"version\": 1}",
	     "format: 'dpl-schedule' is not a dpl-plan file"},
	    {"{\"format\": \"dpl-plan\", \"version\": 2}",
	     "version: 2 is not supported"},
	    {"{\"format\": \"dpl-plan\", \"version\": 1, \"stages\": [" STAGE(
		 0, 1, "[0]") "], \"microbatch_size\": 4, \"microbatches\": 8, "
			      "\"policy\": \"bounded\"}",
	     "policy: 'bounded' is not a plan policy"},
	    {"{\"format\": \"dpl-plan\", \"version\": 1, \"stages\": [" STAGE(
		 0, 1, "[0]") "], \"microbatch_size\": 4, \"microbatches\": 0, "
			      "\"policy\": \"1f1b\"}",
	     "microbatches: 0 is out of range"},
	    {"{\"format\": \"dpl-plan\"", "JSON syntax error at line 1"},
	    {"", "empty input"},
	};
	struct dpl_plan *q = calloc(1, sizeof *q);

	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		q->stages = 77;
		cr_expect_eq(dpl_plan_read_json(bad[k].text, strlen(bad[k].text),
						q),
			     DPL_EPARSE, "case %zu", k);
		cr_expect(strstr(dpl_last_error(), bad[k].want) != NULL,
			  "case %zu: '%s' lacks '%s'", k, dpl_last_error(),
			  bad[k].want);
		cr_expect_eq(q->stages, 77, "case %zu: written on failure", k);
	}
	cr_expect_eq(dpl_plan_read_json("{}", 2, NULL), DPL_EINVAL);
	free(q);
}

Test(plan_json, write_rejects_what_is_not_a_plan)
{
	struct dpl_plan_report *r = calloc(1, sizeof *r);
	FILE *f = fopen("/dev/null", "w");

	cr_assert_not_null(f);
	cr_expect_eq(dpl_plan_write_json(NULL, NULL, NULL, NULL, f),
		     DPL_EINVAL);
	cr_expect_eq(dpl_plan_write_json(r, NULL, NULL, NULL, f), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "0 stages") != NULL, "%s",
		  dpl_last_error());
	fclose(f);
	free(r);
}
