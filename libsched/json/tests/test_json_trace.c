/*
 * test_json_trace.c - the Chrome trace of a simulation is valid JSON
 * (parsed back with cJSON) and holds one slice per simulated interval on
 * the right track, the track names, and one flow per transfer joining
 * the producing and the consuming compute action.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>

#include "sched_util.h"


/* 1F1B, 2 ranks, 2 micro-batches, lowered; links take 0.5, each stage
 * has 2 replicas whose reduction takes 2 * 1 * 0.25 = 0.5, STEP 0.25. */
static dpl_sim *run_lowered(void)
{
	static const char *const r0[] = {"0F0", "0F1", "0B0", "0B1"};
	static const char *const r1[] = {"1F0", "1B0", "1F1", "1B1"};
	static const uint32_t replicas[] = {2, 2};
	struct dpl_sim_params p = {0};
	dpl_schedule *s;
	dpl_sim *sim = NULL;
	int i;

	cr_assert_eq(dpl_schedule_create(2, 2, 2, &s), 0);
	for (i = 0; i < 4; i++) {
		append(s, 0, r0[i]);
		append(s, 1, r1[i]);
	}
	cr_assert_eq(dpl_schedule_lower(s), 0, "%s", dpl_last_error());
	p.link_latency = 0.5;
	p.replicas = replicas;
	p.ar_latency = 0.25;
	p.step_cost = 0.25;
	cr_assert_eq(dpl_sim_run(s, &p, &sim), 0, "%s", dpl_last_error());
	dpl_schedule_destroy(s);
	return sim;
}

static cJSON *trace(const dpl_sim *sim, double us_per_unit)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cJSON *root;

	cr_assert_not_null(f);
	cr_assert_eq(dpl_sim_write_trace(sim, f, us_per_unit), 0, "%s",
		     dpl_last_error());
	fclose(f);
	root = cJSON_ParseWithLength(buf, len);
	cr_assert_not_null(root, "trace is not valid JSON:\n%s", buf);
	free(buf);
	return root;
}

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	cr_assert(cJSON_IsNumber(v), "key %s missing or not a number", key);
	return v->valuedouble;
}

/* Name of a simulated interval in the trace. */
static void event_name(const struct dpl_sim_event *e, char *buf, size_t n)
{
	struct dpl_action a = e->action;

	if (e->kind == DPL_SIM_TRANSFER)
		a.kind = a.kind == DPL_ACT_F ? DPL_ACT_SEND_F : DPL_ACT_SEND_B;
	cr_assert_geq(dpl_action_format(a, buf, n), 0);
}

Test(json_trace, slices_match_the_events)
{
	dpl_sim *sim = run_lowered();
	cJSON *root = trace(sim, 0), *evs, *e;
	const struct dpl_sim_event *ev;
	size_t n, x = 0, kinds[4] = {0};
	char name[DPL_ACTION_TEXT_MAX];

	ev = dpl_sim_events(sim, &n);
	for (size_t i = 0; i < n; i++)
		kinds[ev[i].kind]++;
	/* What the schedule implies, counted by hand. */
	cr_assert_eq(kinds[DPL_SIM_COMPUTE], 8);
	cr_assert_eq(kinds[DPL_SIM_TRANSFER], 4);
	cr_assert_eq(kinds[DPL_SIM_REDUCE], 2);
	cr_assert_eq(kinds[DPL_SIM_STEP], 2);

	cr_assert_str_eq(str(root, "displayTimeUnit"), "ms");
	evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
	cr_assert(cJSON_IsArray(evs));
	/* Complete events come in the order of dpl_sim_events(). */
	cJSON_ArrayForEach(e, evs)
	{
		const struct dpl_sim_event *s;
		double tid, want_tid;

		if (strcmp(str(e, "ph"), "X") != 0)
			continue;
		cr_assert_lt(x, n, "more slices than events");
		s = &ev[x++];
		event_name(s, name, sizeof name);
		cr_expect_str_eq(str(e, "name"), name);
		cr_expect_eq(num(e, "pid"), 0);
		cr_expect_float_eq(num(e, "ts"), s->start * 1000, 5e-4,
				   "%s", name);
		cr_expect_float_eq(num(e, "dur"), (s->end - s->start) * 1000,
				   1e-3, "%s", name);
		tid = num(e, "tid");
		switch (s->kind) {
		case DPL_SIM_TRANSFER:
			want_tid = 1000 + s->rank * 2 + s->peer;
			cr_expect_str_eq(str(e, "cat"), "transfer");
			break;
		case DPL_SIM_REDUCE:
			want_tid = 1000 + 4 + s->rank;
			cr_expect_str_eq(str(e, "cat"), "REDUCE_GRAD");
			break;
		default:
			want_tid = s->rank;
			cr_expect_str_eq(str(e, "cat"),
					 dpl_action_kind_name(s->action.kind));
		}
		cr_expect_eq(tid, want_tid, "%s on tid %g", name, tid);
	}
	cr_expect_eq(x, n, "%zu slices for %zu events", x, n);
	cJSON_Delete(root);
	dpl_sim_destroy(sim);
}

/* A complete event on `tid` whose interval holds `ts`, or NULL. */
static const cJSON *slice_at(const cJSON *evs, double tid, double ts)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, evs)
	{
		if (strcmp(str(e, "ph"), "X") != 0 || num(e, "tid") != tid)
			continue;
		if (num(e, "ts") < ts && ts < num(e, "ts") + num(e, "dur"))
			return e;
	}
	return NULL;
}

Test(json_trace, flows_join_producer_and_consumer)
{
	/* Transfer -> (producer, consumer, sender, receiver), by hand. */
	static const char *const want[][4] = {
	    {"0SEND_F0", "0F0", "1F0", "01"},
	    {"0SEND_F1", "0F1", "1F1", "01"},
	    {"1SEND_B0", "1B0", "0B0", "10"},
	    {"1SEND_B1", "1B1", "0B1", "10"},
	};
	dpl_sim *sim = run_lowered();
	cJSON *root = trace(sim, 2.0), *evs, *e, *f;
	size_t found[4] = {0}, nflow = 0, i;

	evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
	cJSON_ArrayForEach(e, evs)
	{
		const cJSON *src, *dst;

		if (strcmp(str(e, "ph"), "s") != 0)
			continue;
		nflow++;
		/* Its finish: same id, ph "f", bound to the enclosing slice. */
		cJSON_ArrayForEach(f, evs)
		{
			if (strcmp(str(f, "ph"), "f") == 0 &&
			    num(f, "id") == num(e, "id"))
				break;
		}
		cr_assert_not_null(f, "flow %g has no end", num(e, "id"));
		cr_expect_str_eq(str(f, "bp"), "e");
		for (i = 0; i < 4; i++)
			if (strcmp(str(e, "name"), want[i][0]) == 0)
				break;
		cr_assert_lt(i, 4, "unexpected flow %s", str(e, "name"));
		found[i]++;
		cr_expect_eq(num(e, "tid"), want[i][3][0] - '0');
		cr_expect_eq(num(f, "tid"), want[i][3][1] - '0');
		src = slice_at(evs, num(e, "tid"), num(e, "ts"));
		dst = slice_at(evs, num(f, "tid"), num(f, "ts"));
		cr_assert_not_null(src, "%s starts in no slice", want[i][0]);
		cr_assert_not_null(dst, "%s ends in no slice", want[i][0]);
		cr_expect_str_eq(str(src, "name"), want[i][1]);
		cr_expect_str_eq(str(dst, "name"), want[i][2]);
	}
	cr_expect_eq(nflow, 4);
	for (i = 0; i < 4; i++)
		cr_expect_eq(found[i], 1, "flow %s seen %zu times", want[i][0],
			     found[i]);
	cJSON_Delete(root);
	dpl_sim_destroy(sim);
}

Test(json_trace, tracks_are_named)
{
	static const struct {
		double tid;
		const char *name;
	} want[] = {
	    {0, "rank 0"},         {1, "rank 1"},         {1001, "link 0->1"},
	    {1002, "link 1->0"},   {1004, "rank 0 comm"}, {1005, "rank 1 comm"},
	};
	dpl_sim *sim = run_lowered();
	cJSON *root = trace(sim, 0), *evs, *e;
	size_t seen[6] = {0}, threads = 0, procs = 0, i;

	evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
	cJSON_ArrayForEach(e, evs)
	{
		const cJSON *args;

		if (strcmp(str(e, "ph"), "M") != 0)
			continue;
		args = cJSON_GetObjectItemCaseSensitive(e, "args");
		if (strcmp(str(e, "name"), "process_name") == 0) {
			procs++;
			cr_expect_not_null(str(args, "name"));
			continue;
		}
		if (strcmp(str(e, "name"), "thread_name") != 0)
			continue;
		threads++;
		for (i = 0; i < 6; i++)
			if (num(e, "tid") == want[i].tid)
				break;
		cr_assert_lt(i, 6, "unexpected track %g", num(e, "tid"));
		cr_expect_str_eq(str(args, "name"), want[i].name);
		seen[i]++;
	}
	cr_expect_eq(procs, 1);
	cr_expect_eq(threads, 6);
	for (i = 0; i < 6; i++)
		cr_expect_eq(seen[i], 1, "%s", want[i].name);
	cJSON_Delete(root);
	dpl_sim_destroy(sim);
}

/* us_per_unit scales every timestamp; 0 means milliseconds. */
Test(json_trace, time_scale)
{
	dpl_sim *sim = run_lowered();
	cJSON *a = trace(sim, 0), *b = trace(sim, 2.5), *ea, *eb;
	cJSON *la = cJSON_GetObjectItemCaseSensitive(a, "traceEvents");
	cJSON *lb = cJSON_GetObjectItemCaseSensitive(b, "traceEvents");
	size_t checked = 0;

	cr_assert_eq(cJSON_GetArraySize(la), cJSON_GetArraySize(lb));
	for (ea = la->child, eb = lb->child; ea && eb;
	     ea = ea->next, eb = eb->next) {
		if (strcmp(str(ea, "ph"), "X") != 0)
			continue;
		cr_expect_float_eq(num(ea, "ts") * 2.5 / 1000, num(eb, "ts"),
				   1e-3);
		checked++;
	}
	cr_expect_eq(checked, 16);
	cJSON_Delete(a);
	cJSON_Delete(b);
	dpl_sim_destroy(sim);
}

Test(json_trace, bad_arguments)
{
	dpl_sim *sim = run_lowered();
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	cr_expect_eq(dpl_sim_write_trace(sim, f, NAN), DPL_EINVAL);
	cr_expect_eq(dpl_sim_write_trace(sim, f, INFINITY), DPL_EINVAL);
	cr_expect_not_null(strstr(dpl_last_error(), "us_per_unit"));
	fflush(f);
	cr_expect_eq(len, 0, "output written on failure");
	fclose(f);
	free(buf);
	f = fopen("/dev/null", "r");
	cr_assert_not_null(f);
	cr_expect_eq(dpl_sim_write_trace(sim, f, 0), DPL_EIO);
	fclose(f);
	dpl_sim_destroy(sim);
}
