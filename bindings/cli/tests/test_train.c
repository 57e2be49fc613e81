/*
 * test_train.c - `dpl train` on the reference model against training on
 * one device: every policy on pure pipeline, pure data parallel,
 * pipeline x data parallel and uneven 3:1 layouts, with M < S and M not
 * divisible by the replicas where the layout allows; the same weights
 * digest across policies for one layout; loss going down; peak in-flight
 * equal to the schedule's bound; failures stopping every rank; bad flags;
 * the model in f32 (--dtype f32): one-device weights, one digest across
 * policies and another than f64's, half the activation bytes.
 * Runs the built `dpl` binary and reads its --json output.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli_run.h"

struct out {
	int status;  /* exit code */
	char *text;  /* stdout and stderr */
	cJSON *json; /* stdout parsed, when it was JSON */
};

static struct out run(const char *args, bool merge_stderr)
{
	char cmd[1024];
	struct out o = {0, NULL, NULL};
	size_t cap = 1 << 16, len = 0, n;
	FILE *p;
	int st;

	snprintf(cmd, sizeof cmd, "%s train %s%s", DPL_CLI_PATH, args,
		 merge_stderr ? " 2>&1" : " 2>/dev/null");
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	o.text = malloc(cap);
	while ((n = fread(o.text + len, 1, cap - len - 1, p)) > 0) {
		len += n;
		if (len + 1 == cap)
			o.text = realloc(o.text, cap *= 2);
	}
	o.text[len] = '\0';
	st = pclose(p);
	o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	if (!merge_stderr)
		o.json = cJSON_Parse(o.text);
	return o;
}

static void out_free(struct out *o)
{
	cJSON_Delete(o->json);
	free(o->text);
}

static double num(const cJSON *j, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);

	cr_assert(cJSON_IsNumber(v), "no number '%s'", key);
	return v->valuedouble;
}

static const char *policies[] = {
	"--policy gpipe",  "--policy 1f1b",
	"--policy 1f1b-comm", "--policy bounded --cap 2",
	"--policy interleaved --chunks 2", "--policy zb-h1",
	"--policy looped-bfs --chunks 2",
};

struct layout {
	const char *name;
	const char *flags;
	unsigned stages;
	unsigned m[2];   /* M < S (or the smallest M), M not a multiple */
	unsigned mi[2];  /* the same for interleaved: multiples of S */
	bool replicated;
};

static const struct layout layouts[] = {
	{"pipeline", "--stages 4", 4, {3, 8}, {4, 8}, false},
	{"data-parallel", "--stages 1 --replicas 3", 1, {1, 5}, {1, 5}, true},
	{"pipeline-x-dp", "--stages 2 --replicas 2", 2, {1, 3}, {2, 6}, true},
	{"uneven-3:1", "--stages 2 --replicas 3,1", 2, {1, 5}, {2, 4}, true},
};

/*
 * For each layout and M, every policy trains to the one-device weights
 * (within 1e-5, relative) and all policies end with the same digest
 * where their reduction order is the same: everywhere but interleaved on
 * replicated layouts, whose twice as many stages reduce their gradients
 * in other chunks. Batch M + 6 makes micro-batches uneven and some
 * replica ranges empty.
 */
static void layout_matrix(const struct layout *l)
{
	char args[512], digest[2][32] = {"", ""};
	size_t p;
	int k;

	for (p = 0; p < sizeof policies / sizeof policies[0]; p++) {
		bool inter = strstr(policies[p], "--chunks") != NULL;

		for (k = 0; k < 2; k++) {
			unsigned m = inter ? l->mi[k] : l->m[k];
			struct out o;
			const cJSON *d, *pk, *bd;
			char key[32];
			int i;

			snprintf(args, sizeof args,
				 "%s %s --microbatches %u --batch %u "
				 "--iterations 3 --check --json",
				 l->flags, policies[p], m, m + 6);
			o = run(args, false);
			cr_assert_eq(o.status, 0, "%s: exit %d", args,
				     o.status);
			cr_assert_not_null(o.json, "%s: no JSON", args);
			cr_assert_leq(num(o.json, "max_rel_diff"), 1e-5,
				      "%s", args);
			pk = cJSON_GetObjectItem(o.json, "peak_inflight");
			bd = cJSON_GetObjectItem(o.json, "bound");
			cr_assert_eq(cJSON_GetArraySize(pk),
				     cJSON_GetArraySize(bd));
			for (i = 0; i < cJSON_GetArraySize(pk); i++)
				cr_assert_eq(
					cJSON_GetArrayItem(pk, i)->valueint,
					cJSON_GetArrayItem(bd, i)->valueint,
					"%s: stage %d", args, i);
			d = cJSON_GetObjectItem(o.json, "weights_digest");
			cr_assert(cJSON_IsString(d));
			/* Interleaved may run another M: compare like with
			 * like. looped-bfs adds its backwards from the last
			 * micro-batch down, so its sums round otherwise. */
			snprintf(key, sizeof key, "%s", d->valuestring);
			if (!inter && digest[k][0] == '\0')
				snprintf(digest[k], sizeof digest[k], "%s", key);
			else if (!inter || (m == l->m[k] && !l->replicated &&
					    !strstr(policies[p], "looped-bfs")))
				cr_assert_str_eq(key, digest[k], "%s", args);
			out_free(&o);
		}
	}
}

/*
 * The policies with chunks on M that is not a multiple of the ranks (and
 * M < S): one-device weights, and the peak in flight equals the bound.
 */
Test(train, chunked_policies_take_any_microbatch_count, .timeout = 240)
{
	static const char *const chunked[] = {
		"--policy interleaved --chunks 2",
		"--policy looped-bfs --chunks 2",
		"--policy interleaved-zb --chunks 2",
		"--policy zbv",
		"--policy dualpipev",
	};
	static const struct {
		const char *flags;
		unsigned m;
	} runs[] = {
		{"--stages 4", 6}, {"--stages 4", 3}, {"--stages 4", 9},
		{"--stages 2 --replicas 2", 3}, {"--stages 2 --replicas 3,1", 5},
	};
	char args[512];

	for (size_t p = 0; p < sizeof chunked / sizeof chunked[0]; p++)
		for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
			const cJSON *pk, *bd;
			struct out o;

			snprintf(args, sizeof args,
				 "%s %s --microbatches %u --batch %u "
				 "--iterations 3 --check --json",
				 runs[k].flags, chunked[p], runs[k].m,
				 runs[k].m + 6);
			o = run(args, false);
			cr_assert_eq(o.status, 0, "%s: exit %d", args, o.status);
			cr_assert_not_null(o.json, "%s: no JSON", args);
			cr_assert_leq(num(o.json, "max_rel_diff"), 1e-5, "%s",
				      args);
			pk = cJSON_GetObjectItem(o.json, "peak_inflight");
			bd = cJSON_GetObjectItem(o.json, "bound");
			cr_assert_gt(cJSON_GetArraySize(pk), 0, "%s", args);
			for (int i = 0; i < cJSON_GetArraySize(pk); i++)
				cr_assert_eq(
				    cJSON_GetArrayItem(pk, i)->valueint,
				    cJSON_GetArrayItem(bd, i)->valueint,
				    "%s: stage %d", args, i);
			out_free(&o);
		}
}

Test(train, pipeline_matches_one_device_for_every_policy, .timeout = 240)
{
	layout_matrix(&layouts[0]);
}

Test(train, data_parallel_matches_one_device_for_every_policy,
     .timeout = 240)
{
	layout_matrix(&layouts[1]);
}

Test(train, pipeline_x_dp_matches_one_device_for_every_policy,
     .timeout = 240)
{
	layout_matrix(&layouts[2]);
}

Test(train, uneven_replication_matches_one_device_for_every_policy,
     .timeout = 240)
{
	layout_matrix(&layouts[3]);
}

Test(train, loss_goes_down_on_the_learnable_task, .timeout = 120)
{
	struct out o = run("--iterations 30 --json", false);
	const cJSON *l;
	double first = 0, last = 0;
	int i;

	cr_assert_eq(o.status, 0);
	l = cJSON_GetObjectItem(o.json, "loss");
	cr_assert_eq(cJSON_GetArraySize(l), 30);
	for (i = 0; i < 5; i++) {
		first += cJSON_GetArrayItem(l, i)->valuedouble;
		last += cJSON_GetArrayItem(l, 25 + i)->valuedouble;
	}
	/* Four classes: chance is ln 4 = 1.386. */
	cr_assert_gt(first / 5, 1.2);
	cr_assert_lt(last / 5, 0.8 * first / 5, "first %g last %g", first / 5,
		     last / 5);
	out_free(&o);
}

Test(train, a_failing_rank_stops_every_rank_naming_it, .timeout = 60)
{
	struct out o = run("--stages 3 --replicas 1,2,1 --fail-at 2:1 "
			   "--iterations 4 --timeout 10", true);
	const char *p = o.text;
	int lines = 0;

	cr_assert_eq(o.status, 1, "exit %d: %s", o.status, o.text);
	/* One line per rank, each naming rank 2. */
	while ((p = strstr(p, "dpl train: rank ")) != NULL) {
		const char *eol = strchr(p, '\n');
		char line[800];

		snprintf(line, sizeof line, "%.*s", (int)(eol - p), p);
		cr_assert(strstr(line, "rank 2") != NULL, "%s", line);
		lines++;
		p = eol;
	}
	cr_assert_eq(lines, 4, "%s", o.text);
	cr_assert(strstr(o.text, "injected failure (--fail-at 2:1)") != NULL);
	cr_assert(strstr(o.text, "4 of 4 ranks failed") != NULL);
	out_free(&o);
}

Test(train, bad_flags_and_impossible_layouts_are_refused)
{
	static const struct {
		const char *args;
		const char *reason;
	} cases[] = {
		{"--stages 9", "more stages (9) than layers (8)"},
		{"--replicas 0", "--replicas: must be >= 1"},
		{"--replicas 1,2", "2 values for 4 stages"},
		{"--policy interleaved", "needs --chunks"},
		{"--policy bounded", "needs --cap"},
		{"--chunks 2", "interleaved, looped-bfs and interleaved-zb only"},
		{"--policy looped-bfs", "--policy looped-bfs needs --chunks"},
		{"--microbatches 0", "--microbatches"},
		{"--batch 4", "--batch 4 < --microbatches 8"},
		{"--fail-at 7:0", "rank 7 out of range"},
		{"--fail-at 1", "RANK:ITERATION"},
		{"--device gpu", "--device: 'gpu'"},
		{"--check --device synthetic", "needs --device cpu"},
		{"--dtype f16", "--dtype: 'f16' is not f64 or f32"},
		{"--dtype F32", "--dtype: 'F32' is not f64 or f32"},
		{"--dtype", "--dtype: missing value"},
		{"--dtype f32 --device synthetic", "--dtype f32: the synthetic "
						   "device has no model"},
		{"--plan /nonexistent/plan.json", "/nonexistent/plan.json"},
		{"--widths 8", "needs an input and an output"},
		{"--frobnicate", "unknown argument"},
	};
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct out o = run(cases[i].args, true);

		cr_assert_eq(o.status, 2, "%s: exit %d", cases[i].args,
			     o.status);
		cr_assert(strstr(o.text, cases[i].reason) != NULL,
			  "%s: %s", cases[i].args, o.text);
		/* Refused before anything ran. */
		cr_assert(strstr(o.text, "samples/s") == NULL);
		out_free(&o);
	}
}

Test(train, trace_holds_the_last_iteration_of_every_rank)
{
	char path[] = "/tmp/dpl-train-trace-XXXXXX", args[256];
	struct out o;
	cJSON *t;
	FILE *f;
	char buf[1 << 16];
	size_t n;
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0);
	close(fd);
	snprintf(args, sizeof args, "--stages 2 --microbatches 2 --batch 4 "
		 "--iterations 2 --trace %s --json", path);
	o = run(args, false);
	cr_assert_eq(o.status, 0);
	f = fopen(path, "r");
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	t = cJSON_Parse(buf);
	cr_assert_not_null(t);
	/* 2 rank names + 2 x (2F + 2B + 2 sends + 2 receives + REDUCE_GRAD
	 * + STEP) actions. */
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t, "traceEvents")),
		     2 + 2 * 10);
	cJSON_Delete(t);
	out_free(&o);
	unlink(path);
}

Test(train, a_plan_from_the_planner_runs_and_matches_one_device,
     .timeout = 120)
{
	char plan[] = "/tmp/dpl-train-plan-XXXXXX", cmd[1024], args[512];
	char text[1 << 16], want[128], profile[512];
	struct out o;
	cJSON *pj, *stage;
	int fd, st, world = 0, stages = 0;
	size_t n;
	FILE *f;

	cli_need_profile(profile, sizeof profile, "vgg-19-pbs-32.txt");
	fd = mkstemp(plan);
	cr_assert_geq(fd, 0);
	close(fd);
	/* VGG-19 on 16 devices: an uneven plan (such as 8:4:3:1). */
	snprintf(cmd, sizeof cmd, "%s plan --profile %s "
		 "--pbs 32 --gbs 64 --cluster paper-b --max-stages 4 "
		 "--out %s > /dev/null 2>&1", DPL_CLI_PATH, profile, plan);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "dpl plan --profile "
		  "%s failed", profile);
	f = fopen(plan, "r");
	n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[n] = '\0';
	pj = cJSON_Parse(text);
	cr_assert_not_null(pj);
	cJSON_ArrayForEach(stage, cJSON_GetObjectItem(pj, "stages")) {
		world += cJSON_GetObjectItem(stage, "replicas")->valueint;
		stages++;
	}
	cJSON_Delete(pj);
	cr_assert_gt(world, stages, "the plan replicates no stage");
	snprintf(args, sizeof args, "--plan %s --iterations 2 --check --json",
		 plan);
	o = run(args, false);
	cr_assert_eq(o.status, 0, "%s", o.text);
	cr_assert_eq(num(o.json, "world_size"), world);
	cr_assert_eq(num(o.json, "stages"), stages);
	cr_assert_leq(num(o.json, "max_rel_diff"), 1e-5);
	out_free(&o);
	/* A plan for another world size is refused before anything runs. */
	snprintf(args, sizeof args, "--plan %s --replicas 1", plan);
	o = run(args, true);
	cr_assert_eq(o.status, 2, "%s", o.text);
	snprintf(want, sizeof want, "is for a world of %d ranks, --replicas "
		 "gives %d", world, stages);
	cr_assert(strstr(o.text, want) != NULL, "%s", o.text);
	out_free(&o);
	unlink(plan);
}

static const char *str(const cJSON *j, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);

	cr_assert(cJSON_IsString(v), "no string '%s'", key);
	return v->valuestring;
}

/*
 * --dtype f32 on pipelined and replicated layouts: the one-device f32
 * weights within 1e-5, a digest of its own (not f64's, nor the same run's
 * in f64 with other flags), activation buffers of half the bytes, and the
 * setting in the JSON output.
 */
Test(train, f32_matches_one_device_on_pipelined_replicated_layouts,
     .timeout = 120)
{
	static const char *const layouts32[] = {
		"--stages 3 --replicas 2,1,1 --policy 1f1b",
		"--stages 2 --replicas 2 --policy zb-h1 --microbatches 3 "
		"--batch 9",
		"--stages 2 --replicas 3,1 --policy gpipe --microbatches 5 "
		"--batch 11",
	};
	char args[512];
	size_t i;
	int k;

	for (i = 0; i < sizeof layouts32 / sizeof layouts32[0]; i++) {
		struct out o32, o64;
		const cJSON *b32, *b64;

		snprintf(args, sizeof args, "%s --iterations 4 --check --json "
			 "--dtype f32", layouts32[i]);
		o32 = run(args, false);
		cr_assert_eq(o32.status, 0, "%s: exit %d", args, o32.status);
		cr_assert_not_null(o32.json, "%s: no JSON", args);
		cr_assert_str_eq(str(o32.json, "dtype"), "f32");
		/* Float rounding of other summation orders (the replicas'
		 * shares, BLAS kernels picked by shape and processor) grows
		 * with the steps: 1.0e-5 to 1.3e-5 seen on these layouts. */
		cr_assert_leq(num(o32.json, "max_rel_diff"), 1e-4, "%s", args);
		cr_assert_eq(num(o32.json, "check_limit"), 1e-4, "%s", args);
		snprintf(args, sizeof args, "%s --iterations 4 --check --json "
			 "--dtype f64", layouts32[i]);
		o64 = run(args, false);
		cr_assert_eq(o64.status, 0, "%s: exit %d", args, o64.status);
		cr_assert_str_eq(str(o64.json, "dtype"), "f64");
		cr_assert_eq(num(o64.json, "check_limit"), 1e-5, "%s", args);
		cr_assert_str_neq(str(o32.json, "weights_digest"),
				  str(o64.json, "weights_digest"), "%s", args);
		/* The same training, to float's precision. */
		for (k = 0; k < 4; k++) {
			double l32 = cJSON_GetArrayItem(
				cJSON_GetObjectItem(o32.json, "loss"), k)
					     ->valuedouble;
			double l64 = cJSON_GetArrayItem(
				cJSON_GetObjectItem(o64.json, "loss"), k)
					     ->valuedouble;

			cr_assert_lt(fabs(l32 - l64), 1e-4 * l64,
				     "%s: iteration %d: loss %g in f32, %g in "
				     "f64", layouts32[i], k, l32, l64);
		}
		b32 = cJSON_GetObjectItem(o32.json, "peak_buffer_bytes");
		b64 = cJSON_GetObjectItem(o64.json, "peak_buffer_bytes");
		cr_assert_eq(cJSON_GetArraySize(b32), cJSON_GetArraySize(b64));
		for (k = 0; k < cJSON_GetArraySize(b32); k++)
			cr_assert_eq(2 * cJSON_GetArrayItem(b32, k)->valuedouble,
				     cJSON_GetArrayItem(b64, k)->valuedouble,
				     "%s: stage %d", layouts32[i], k);
		out_free(&o32);
		out_free(&o64);
	}
}

/* In f32 too, a layout computes the same bits whatever the schedule. */
Test(train, f32_digest_is_the_same_for_every_policy, .timeout = 120)
{
	static const char *const pols[] = {
		"--policy gpipe", "--policy 1f1b", "--policy 1f1b-comm",
		"--policy zb-h1", "--policy bounded --cap 2",
	};
	char args[512], first[32] = "";
	size_t p;

	for (p = 0; p < sizeof pols / sizeof pols[0]; p++) {
		struct out o;

		snprintf(args, sizeof args, "--stages 2 --replicas 2,1 %s "
			 "--microbatches 5 --batch 11 --iterations 3 --json "
			 "--dtype f32", pols[p]);
		o = run(args, false);
		cr_assert_eq(o.status, 0, "%s: exit %d", args, o.status);
		cr_assert_not_null(o.json, "%s: no JSON", args);
		if (first[0] == '\0')
			snprintf(first, sizeof first, "%s",
				 str(o.json, "weights_digest"));
		else
			cr_assert_str_eq(str(o.json, "weights_digest"), first,
					 "%s", args);
		out_free(&o);
	}
}

/* The text output names the precision in its header. */
Test(train, the_header_names_the_dtype)
{
	struct out o = run("--stages 2 --iterations 1 --dtype f32", true);

	cr_assert_eq(o.status, 0, "%s", o.text);
	cr_assert(strstr(o.text, "1f1b, inproc, cpu, f32\n") != NULL, "%s",
		  o.text);
	out_free(&o);
	o = run("--stages 2 --iterations 1", true);
	cr_assert(strstr(o.text, "1f1b, inproc, cpu, f64\n") != NULL, "%s",
		  o.text);
	out_free(&o);
}
