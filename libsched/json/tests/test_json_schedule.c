/*
 * test_json_schedule.c - the JSON schedule file: hand-written files,
 * the exact text written, round trips of every policy, and a table of
 * malformed files with the JSON path each message must name.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>

#include "sched_util.h"
#include <dpl/json.h>








Test(json_schedule, hand_written_lowered_file)
{
	size_t len;
	char *text = slurp("schedule_1f1b_2x2.json", &len);
	dpl_schedule *s = NULL;

	cr_assert_eq(dpl_schedule_read_json(text, len, &s), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(dpl_schedule_policy(s), DPL_POLICY_1F1B);
	cr_expect_eq(dpl_schedule_ranks(s), 2);
	cr_expect_eq(dpl_schedule_stages(s), 2);
	cr_expect_eq(dpl_schedule_microbatches(s), 2);
	cr_expect_neq(dpl_schedule_is_lowered(s), 0);
	cr_expect_eq(dpl_schedule_cap(s, 0), 2);
	cr_expect_eq(dpl_schedule_cap(s, 1), 1);
	EXPECT_LIST(s, 0, "0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0",
		    "0B0", "0RECV_B1", "0B1", "0REDUCE_GRAD", "0STEP");
	EXPECT_LIST(s, 1, "1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0",
		    "1F1", "1B1", "1SEND_B1", "1REDUCE_GRAD", "1STEP");
	dpl_schedule_destroy(s);
	free(text);
}

/* Keys in any order, no caps, a V-shaped mapping. */
Test(json_schedule, hand_written_vshape_file)
{
	size_t len;
	char *text = slurp("schedule_vshape_2x4.json", &len);
	dpl_schedule *s = NULL;
	uint32_t st;

	cr_assert_eq(dpl_schedule_read_json(text, len, &s), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(dpl_schedule_policy(s), DPL_POLICY_CUSTOM);
	cr_expect_eq(dpl_schedule_stages(s), 4);
	cr_expect_eq(dpl_schedule_is_lowered(s), 0);
	cr_expect_eq(dpl_schedule_stage_rank(s, 0), 0);
	cr_expect_eq(dpl_schedule_stage_rank(s, 1), 1);
	cr_expect_eq(dpl_schedule_stage_rank(s, 2), 1);
	cr_expect_eq(dpl_schedule_stage_rank(s, 3), 0);
	for (st = 0; st < 4; st++)
		cr_expect_eq(dpl_schedule_cap(s, st), 0);
	EXPECT_LIST(s, 0, "0F0", "3F0", "3B0", "0B0");
	EXPECT_LIST(s, 1, "1F0", "2F0", "2B0", "1B0");
	dpl_schedule_destroy(s);
	free(text);
}

Test(json_schedule, write_format)
{
	dpl_schedule *s;
	size_t len;
	char *text;

	cr_assert_eq(dpl_schedule_create(2, 3, 2, &s), 0);
	cr_assert_eq(dpl_schedule_map_stage(s, 2, 1), 0);
	cr_assert_eq(dpl_schedule_set_cap(s, 1, 3), 0);
	append(s, 0, "0F0");
	append(s, 0, "0F1");
	append(s, 1, "1F0");
	append(s, 1, "2STEP");
	text = write_text(s, dpl_schedule_write_json, &len);
	cr_expect_str_eq(text, "{\n"
			       "  \"format\": \"dpl-schedule\",\n"
			       "  \"version\": 1,\n"
			       "  \"policy\": \"custom\",\n"
			       "  \"ranks\": 2,\n"
			       "  \"stages\": 3,\n"
			       "  \"microbatches\": 2,\n"
			       "  \"lowered\": true,\n"
			       "  \"stage_to_rank\": [0, 1, 1],\n"
			       "  \"caps\": [0, 3, 0],\n"
			       "  \"actions\": [\n"
			       "    [\"0F0\", \"0F1\"],\n"
			       "    [\"1F0\", \"2STEP\"]\n"
			       "  ]\n"
			       "}\n");
	cr_expect_eq(len, strlen(text));
	free(text);
	dpl_schedule_destroy(s);
}

Test(json_schedule, round_trip_every_policy)
{
	enum dpl_policy pols[DPL_POLICY__COUNT];
	size_t i, n = 0;
	int lower;

	/* Every policy that builds (dualpipev's lists hold OVERLAP_F_B). */
	for (i = 0; i < DPL_POLICY__COUNT; i++)
		if (dpl_policy_buildable((enum dpl_policy)i))
			pols[n++] = (enum dpl_policy)i;
	for (i = 0; i < n; i++) {
		for (lower = 0; lower < 2; lower++) {
			struct dpl_schedule_params p = {0};
			dpl_schedule *s = NULL;

			p.stages = 4;
			p.microbatches = 8;
			p.policy = pols[i];
			if (dpl_policy_chunks(pols[i]) == 1)
				p.chunks = 2;
			if (pols[i] == DPL_POLICY_BOUNDED ||
			    pols[i] == DPL_POLICY_ZB_AUTO)
				p.cap_all = 2;
			cr_assert_eq(dpl_schedule_build(&p, &s), 0, "%s: %s",
				     dpl_policy_name(pols[i]),
				     dpl_last_error());
			if (lower)
				cr_assert_eq(dpl_schedule_lower(s), 0, "%s: %s",
					     dpl_policy_name(pols[i]),
					     dpl_last_error());
			if (pols[i] == DPL_POLICY_BOUNDED)
				cr_assert_eq(dpl_schedule_cap(s, 0), 2);
			expect_round_trip(s, dpl_schedule_write_json,
			  dpl_schedule_read_json, 1);
			dpl_schedule_destroy(s);
		}
	}
}

/* What only JSON keeps: empty lists and stages without actions. */
Test(json_schedule, round_trip_sparse)
{
	dpl_schedule *s;

	cr_assert_eq(dpl_schedule_create(3, 5, 4, &s), 0);
	cr_assert_eq(dpl_schedule_map_stage(s, 4, 0), 0);
	append(s, 0, "0F3");
	append(s, 0, "4F0");
	append(s, 2, "2B1");
	cr_assert_eq(dpl_schedule_set_cap(s, 4, 2147483647u), 0);
	expect_round_trip(s, dpl_schedule_write_json,
			  dpl_schedule_read_json, 1);
	dpl_schedule_destroy(s);
}

Test(json_schedule, write_error_is_eio)
{
	dpl_schedule *s;
	FILE *f = fopen("/dev/null", "r");

	cr_assert_not_null(f);
	cr_assert_eq(dpl_schedule_create(1, 1, 1, &s), 0);
	append(s, 0, "0F0");
	cr_expect_eq(dpl_schedule_write_json(s, f), DPL_EIO);
	cr_expect_not_null(strstr(dpl_last_error(), "writing"), "%s",
			   dpl_last_error());
	fclose(f);
	dpl_schedule_destroy(s);
}

/* A valid two-rank file with one key's value replaced, removed (NULL)
 * or, for a key not in the file, added. */
static const char *const base_keys[] = {
    "format", "version",       "policy",  "ranks", "stages",
    "microbatches", "lowered", "stage_to_rank", "actions",
};
static const char *const base_vals[] = {
    "\"dpl-schedule\"", "1", "\"custom\"", "2", "2", "1", "false", "[0, 1]",
    "[[\"0F0\", \"0B0\"], [\"1F0\", \"1B0\"]]",
};
#define NBASE (sizeof base_keys / sizeof base_keys[0])

static char *doc(const char *key, const char *val)
{
	char *buf = NULL;
	size_t len = 0, i;
	bool found = false, first = true;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	fputc('{', f);
	for (i = 0; i < NBASE; i++) {
		const char *v = base_vals[i];

		if (key && strcmp(key, base_keys[i]) == 0) {
			found = true;
			v = val;
		}
		if (v == NULL)
			continue;
		fprintf(f, "%s\"%s\": %s", first ? "" : ", ", base_keys[i], v);
		first = false;
	}
	if (key && !found)
		fprintf(f, ", \"%s\": %s", key, val);
	fputc('}', f);
	fclose(f);
	return buf;
}

Test(json_schedule, base_document_loads)
{
	char *text = doc(NULL, NULL);
	dpl_schedule *s = NULL;

	cr_assert_eq(dpl_schedule_read_json(text, strlen(text), &s), 0,
		     "%s: %s", text, dpl_last_error());
	EXPECT_LIST(s, 1, "1F0", "1B0");
	dpl_schedule_destroy(s);
	free(text);
}

struct bad_case {
	const char *key; /* NULL: `val` is the whole text */
	const char *val;
	const char *want;
};

Test(json_schedule, malformed_files_name_the_path)
{
	static const struct bad_case cases[] = {
	    {NULL, "", "empty input"},
	    {NULL, " \n\t", "empty input"},
	    {NULL, "{", "JSON syntax error at line 1"},
	    {NULL, "{\n\"format\": ,\n}", "JSON syntax error at line 2"},
	    {NULL, "[]", "top level: expected an object, got an array"},
	    {NULL, "\"dpl-schedule\"", "top level: expected an object"},
	    {NULL, "{} {}", "text after the JSON value at line 1, column 4"},
	    {NULL, "{\"ranks\": 1, \"ranks\": 1}", "key 'ranks' appears twice"},
	    {"extra", "1", "unknown key 'extra'"},
	    {"ranks", NULL, "missing key 'ranks'"},
	    {"actions", NULL, "missing key 'actions'"},
	    {"format", "\"other\"", "format: 'other' is not a dpl schedule"},
	    {"format", "1", "format: expected a string, got a number"},
	    {"version", "2", "version: 2 is not supported"},
	    {"version", "\"1\"", "version: expected an integer, got a string"},
	    {"policy", "\"fast\"", "policy: unknown policy 'fast'"},
	    {"policy", "3", "policy: expected a string, got a number"},
	    {"ranks", "\"2\"", "ranks: expected an integer, got a string"},
	    {"ranks", "true", "ranks: expected an integer, got a boolean"},
	    {"ranks", "-1", "ranks: -1 is negative"},
	    {"ranks", "1.5", "ranks: 1.5 is not an integer"},
	    {"ranks", "0", "ranks: must be >= 1 (got 0)"},
	    {"microbatches", "1099511627776",
	     "microbatches: 1099511627776 is too large"},
	    {"microbatches", "2147483648", "microbatches: 2147483648 is too"},
	    {"microbatches", "1e400", "microbatches: inf is too large"},
	    {"microbatches", "null", "microbatches: expected an integer, got "
				     "null"},
	    {"stages", "1", "stages: 1 is fewer than ranks (2)"},
	    {"lowered", "0", "lowered: expected a boolean, got a number"},
	    {"stage_to_rank", "[0]", "stage_to_rank: 1 entries, expected 2"},
	    {"stage_to_rank", "{}", "stage_to_rank: expected an array, got an "
				    "object"},
	    {"stage_to_rank", "[0, 2]",
	     "stage_to_rank[1]: rank 2 out of range (0..1)"},
	    {"stage_to_rank", "[0, \"1\"]",
	     "stage_to_rank[1]: expected an integer, got a string"},
	    {"stage_to_rank", "[0, 0.5]", "stage_to_rank[1]: 0.5 is not an "
					  "integer"},
	    {"stage_to_rank", "[1, 0]",
	     "actions[0][0]: 0F0: stage 0 lives on rank 1, not rank 0"},
	    {"caps", "[1]", "caps: 1 entries, expected 2"},
	    {"caps", "[1, -2]", "caps[1]: -2 is negative"},
	    {"caps", "null", "caps: expected an array, got null"},
	    {"actions", "[[\"0F0\"]]", "actions: 1 lists, expected 2"},
	    {"actions", "{}", "actions: expected an array, got an object"},
	    {"actions", "[[\"0F0\", \"xx\"], [\"1F0\"]]",
	     "actions[0][1]: 'xx' is not an action"},
	    {"actions", "[[\"0F0\", 5], [\"1F0\"]]",
	     "actions[0][1]: expected a string, got a number"},
	    {"actions", "[[\"0F0\"], {}]",
	     "actions[1]: expected an array, got an object"},
	    {"actions", "[[\"0F3\"], [\"1F0\"]]",
	     "actions[0][0]: 0F3: micro-batch 3 out of range"},
	    {"actions", "[[\"0F0\"], [\"2F0\"]]",
	     "actions[1][0]: 2F0: stage 2 out of range"},
	    {"actions", "[[\"0F0\", \"0SEND_F0\"], [\"1F0\"]]",
	     "actions[0][1]: '0SEND_F0' in a schedule marked \"lowered\": "
	     "false"},
	    {"lowered", "true", "lowered: true, but no list holds"},
	};
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct bad_case *c = &cases[i];
		char *text = c->key ? doc(c->key, c->val) : strdup(c->val);
		dpl_schedule *s = (dpl_schedule *)&cases; /* must stay */
		int rc = dpl_schedule_read_json(text, strlen(text), &s);

		cr_expect_eq(rc, DPL_EPARSE, "case %zu (%s): rc %d", i, text,
			     rc);
		cr_expect_eq(s, (dpl_schedule *)&cases,
			     "case %zu: *out written on failure", i);
		cr_expect_not_null(strstr(dpl_last_error(), c->want),
				   "case %zu: message '%s' lacks '%s'", i,
				   dpl_last_error(), c->want);
		free(text);
	}
}

/* The length bounds the parse: no NUL needed, bytes past it unread. */
Test(json_schedule, length_bounds_the_text)
{
	char *text = doc(NULL, NULL);
	size_t n = strlen(text);
	char *copy = malloc(n + 8);
	dpl_schedule *s = NULL;

	cr_assert_not_null(copy);
	memcpy(copy, text, n);
	memcpy(copy + n, "garbage", 7);
	cr_expect_eq(dpl_schedule_read_json(copy, n, &s), 0, "%s",
		     dpl_last_error());
	dpl_schedule_destroy(s);
	s = NULL;
	cr_expect_eq(dpl_schedule_read_json(copy, n - 1, &s), DPL_EPARSE);
	cr_expect_null(s);
	free(copy);
	free(text);
}
