/*
 * test_cli_bytes.c - byte budgets on `dpl schedule` and `dpl simulate`:
 * --cap-bytes B with --act-bytes A builds the schedule a cap of floor(B /
 * A) micro-batches builds (per stage, worked out by hand), the simulator
 * keeps every stage within its budget, and each bad combination is a
 * one-line usage error naming the flag and its value.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "cli_run.h"
#include "scratch.h"

static char dir[] = "/tmp/dpl-cli-bytes-XXXXXX";

static void setup(void)
{
	scratch_make(dir);
}

static void teardown(void)
{
	scratch_remove(dir);
}

TestSuite(cli_bytes, .init = setup, .fini = teardown);

static void one_line_error(const struct cli_res *r, const char *want)
{
	cr_assert_eq(r->code, 2, "exit %d, stderr: %s", r->code, r->err);
	cr_assert(strstr(r->err, want), "stderr '%s' lacks '%s'", r->err, want);
	cr_assert_eq(strchr(r->err, '\n'), r->err + strlen(r->err) - 1,
		     "not one line: %s", r->err);
	cr_assert_str_eq(r->out, "");
}

/* Per stage: 1999/500 = 3, 1500/500 = 3, 1000/500 = 2, 999/333 = 3. */
Test(cli_bytes, a_byte_budget_builds_the_schedule_of_its_cap_in_microbatches)
{
	static const char *const policies[] = {"bounded", "zb-auto"};
	struct cli_res *a = malloc(sizeof *a), *b = malloc(sizeof *b);
	cJSON *j, *caps;
	size_t p;
	int i;

	for (p = 0; p < 2; p++) {
		RUN(a, "schedule", "--stages", "4", "--microbatches", "8",
		    "--policy", policies[p], "--cap-bytes",
		    "1999,1500,1000,999", "--act-bytes", "500,500,500,333",
		    "--format", "json");
		cr_assert_eq(a->code, 0, "%s", a->err);
		RUN(b, "schedule", "--stages", "4", "--microbatches", "8",
		    "--policy", policies[p], "--cap", "3,3,2,3", "--format",
		    "json");
		cr_assert_eq(b->code, 0, "%s", b->err);
		cr_assert_str_eq(a->out, b->out, "%s", policies[p]);
		j = cJSON_Parse(a->out);
		cr_assert_not_null(j);
		caps = cJSON_GetObjectItem(j, "caps");
		cr_assert_eq(cJSON_GetArraySize(caps), 4);
		for (i = 0; i < 4; i++)
			cr_assert_eq(cJSON_GetArrayItem(caps, i)->valueint,
				     i == 2 ? 2 : 3, "%s: stage %d",
				     policies[p], i);
		cJSON_Delete(j);
	}
	/* One value for every stage: 1000 / 500 = 2 everywhere. */
	RUN(a, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "bounded", "--cap-bytes", "1000", "--act-bytes", "500", "--format",
	    "csv");
	RUN(b, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "bounded", "--cap", "2", "--format", "csv");
	cr_assert_eq(a->code, 0, "%s", a->err);
	cr_assert_str_eq(a->out, b->out);
	/* The budget changes the lists: a cap of 1 is not a cap of 2. */
	RUN(b, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "bounded", "--cap", "1", "--format", "csv");
	cr_assert_str_neq(a->out, b->out);
	free(a);
	free(b);
}

/* Simulated with 500 bytes per micro-batch and a budget of 1000 bytes a
 * stage: 2 micro-batches in flight on stages 0..2 and 1 on the last
 * (bounded keeps 1F1B's min(S - s, cap)), so 1000, 1000, 1000, 500. */
Test(cli_bytes, the_simulator_keeps_each_stage_within_its_budget)
{
	static const double want[4] = {1000, 1000, 1000, 500};
	struct cli_res *r = malloc(sizeof *r);
	cJSON *j, *st;
	int i;

	RUN(r, "simulate", "--stages", "4", "--microbatches", "8",
	    "--policy", "bounded", "--cap-bytes", "1000", "--act-bytes",
	    "500", "--activation-bytes", "500", "--json");
	cr_assert_eq(r->code, 0, "%s", r->err);
	j = cJSON_Parse(r->out);
	cr_assert_not_null(j);
	st = cJSON_GetObjectItem(j, "stages");
	cr_assert_eq(cJSON_GetArraySize(st), 4);
	for (i = 0; i < 4; i++) {
		const cJSON *s = cJSON_GetArrayItem(st, i);

		cr_assert_eq(cJSON_GetObjectItem(s, "peak_activation_bytes")
				     ->valuedouble,
			     want[i], "stage %d", i);
	}
	cJSON_Delete(j);
	/* zb-auto under the same budget: every stage at most 1000. */
	RUN(r, "simulate", "--stages", "4", "--microbatches", "8",
	    "--policy", "zb-auto", "--cap-bytes", "1000", "--act-bytes",
	    "500", "--activation-bytes", "500", "--json");
	cr_assert_eq(r->code, 0, "%s", r->err);
	j = cJSON_Parse(r->out);
	cr_assert_not_null(j);
	st = cJSON_GetObjectItem(j, "stages");
	for (i = 0; i < 4; i++)
		cr_assert_leq(cJSON_GetObjectItem(cJSON_GetArrayItem(st, i),
						  "peak_activation_bytes")
				      ->valuedouble,
			      1000, "stage %d", i);
	cJSON_Delete(j);
	free(r);
}

Test(cli_bytes, bad_budgets_are_one_line_errors_naming_flag_and_value)
{
	static const struct {
		const char *policy, *flags[4], *want;
	} cases[] = {
		{"bounded", {"--cap-bytes", "1000"},
		 "--cap-bytes 1000: needs --act-bytes"},
		{"bounded", {"--act-bytes", "500", "--cap", "2"},
		 "--act-bytes 500: applies with --cap-bytes only"},
		{"bounded", {"--cap-bytes", "1000", "--act-bytes", "500"},
		 NULL}, /* fine; --cap added below */
		{"1f1b", {"--cap-bytes", "1000", "--act-bytes", "500"},
		 "--cap-bytes 1000: only policies bounded and zb-auto take a "
		 "cap (the policy is 1f1b)"},
		{"zb-h1", {"--cap-bytes", "1000", "--act-bytes", "500"},
		 "--cap-bytes 1000: only policies bounded and zb-auto"},
		{"bounded", {"--cap-bytes", "1000,1000", "--act-bytes", "500"},
		 "--cap-bytes 1000,1000: 2 values for 4 stages"},
		{"zb-auto", {"--cap-bytes", "1000", "--act-bytes", "5,5,5"},
		 "--act-bytes 5,5,5: 3 values for 4 stages"},
		{"bounded", {"--cap-bytes", "0", "--act-bytes", "500"},
		 "--cap-bytes: must be >= 1 (got '0')"},
		{"bounded", {"--cap-bytes", "1000", "--act-bytes", "5,0,5,5"},
		 "--act-bytes: must be >= 1 (got '0')"},
		{"bounded", {"--cap-bytes", "1000,,1", "--act-bytes", "5"},
		 "--cap-bytes: empty item in '1000,,1'"},
		{"bounded", {"--cap-bytes", "lots", "--act-bytes", "5"},
		 "--cap-bytes: expected an integer, got 'lots'"},
		{"bounded", {"--cap-bytes", "100", "--act-bytes", "500"},
		 "stage 0: cap 100 bytes holds no micro-batch of 500"},
	};
	static const char *const cmds[] = {"schedule", "simulate"};
	struct cli_res *r = malloc(sizeof *r);
	size_t c, k;

	for (k = 0; k < 2; k++)
		for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
			const char *const *f = cases[c].flags;
			const char *const args[] = {
				cmds[k], "--stages", "4", "--microbatches", "8",
				"--policy", cases[c].policy, f[0], f[1],
				f[2] ? f[2] : "--transfer", f[2] ? f[3] : "0",
				NULL};

			cli_run(r, dir, args);
			if (cases[c].want == NULL) {
				cr_assert_eq(r->code, 0, "%s", r->err);
				continue;
			}
			one_line_error(r, cases[c].want);
		}
	RUN(r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "bounded", "--cap-bytes", "1000", "--act-bytes", "500", "--cap",
	    "2");
	one_line_error(r, "--cap-bytes 1000: --cap gives the cap in "
			  "micro-batches already");
	RUN(r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "bounded");
	one_line_error(r, "or --cap-bytes with --act-bytes");
	free(r);
}
