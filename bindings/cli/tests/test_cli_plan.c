/*
 * test_cli_plan.c - `dpl plan` and `dpl simulate --plan` as a user runs
 * them: the plan file's shape and invariants, identical output for
 * identical input, the saved plan replaying to its predicted time, and
 * one-line errors with exit code 2 and no partial file.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "cli_run.h"

static char dir[] = "/tmp/dpl-cli-plan-XXXXXX";

static void setup(void)
{
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[256];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);

	cr_assert(cJSON_IsNumber(it), "'%s' is not a number", key);
	return it->valuedouble;
}

TestSuite(cli_plan, .init = setup, .fini = teardown);

Test(cli_plan, bad_input_is_one_line_and_exit_2)
{
	static struct cli_res r;
	char bad[512], out[512];
	struct stat sb;
	FILE *f;

	RUN(&r, "plan", "--pbs", "32", "--gbs", "512", "--cluster", "paper-a");
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, "--profile"), "%s", r.err);
	snprintf(bad, sizeof bad, "%s/bad.txt", dir);
	f = fopen(bad, "w");
	cr_assert_not_null(f);
	fputs("node1 -- Input -- forward_compute_time=1, backward_compute_time=1, "
	      "activation_size=10, parameter_size=0\n"
	      "node2 -- L -- forward_compute_time=-3, backward_compute_time=1, "
	      "activation_size=10, parameter_size=5\n"
	      "\tnode1 -- node2\n",
	      f);
	fclose(f);
	snprintf(out, sizeof out, "%s/plan.json", dir);
	RUN(&r, "plan", "--profile", bad, "--pbs", "1", "--gbs", "8",
	    "--cluster", "paper-b", "--out", out);
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, ":2"), "no file:line in '%s'", r.err);
	cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "%s", r.err);
	cr_assert_neq(stat(out, &sb), 0, "partial plan file left");
	RUN(&r, "plan", "--profile", bad, "--pbs", "x", "--gbs", "8",
	    "--cluster", "paper-b");
	cr_assert_eq(r.code, 2);
	cr_assert(strstr(r.err, "--pbs"), "%s", r.err);
	RUN(&r, "plan", "--profile", bad, "--pbs", "1", "--gbs", "8",
	    "--cluster", "paper-z");
	cr_assert_eq(r.code, 2);
	cr_assert(strstr(r.err, "paper-z"), "%s", r.err);
	RUN(&r, "simulate", "--plan", bad);
	cr_assert_eq(r.code, 2, "%s", r.err);
}

Test(cli_plan, vgg_plan_file_invariants_and_replay, .timeout = 120)
{
	static struct cli_res r, again;
	char prof[1024], out[512];
	cJSON *o, *stages, *st, *bl;
	uint64_t seen = 0;
	double pred, mk;

	cli_need_profile(prof, sizeof prof, "vgg-19-pbs-32.txt");
	snprintf(out, sizeof out, "%s/plan.json", dir);
	RUN(&r, "plan", "--profile", prof, "--pbs", "32", "--gbs", "512",
	    "--cluster", "paper-a", "--format", "json", "--out", out);
	cr_assert_eq(r.code, 0, "%s", r.err);
	/* Same input, same plan, byte for byte. */
	RUN(&again, "plan", "--profile", prof, "--pbs", "32", "--gbs", "512",
	    "--cluster", "paper-a", "--format", "json");
	cr_assert_eq(again.code, 0, "%s", again.err);
	cr_assert_str_eq(r.out, again.out, "two runs planned differently");
	o = cJSON_Parse(r.out);
	cr_assert_not_null(o, "not JSON");
	stages = cJSON_GetObjectItem(o, "stages");
	cr_assert(cJSON_GetArraySize(stages) >= 1);
	cJSON_ArrayForEach(st, stages)
	{
		cJSON *d;

		cr_assert_leq(num(st, "first_layer"), num(st, "last_layer"));
		/* The in-flight micro-batches' activations are part of the
		 * stage's memory. */
		cr_assert_gt(num(st, "activation_bytes"), 0);
		cr_assert_leq(num(st, "inflight") * num(st, "activation_bytes"),
			      num(st, "memory_bytes"));
		cJSON_ArrayForEach(d, cJSON_GetObjectItem(st, "devices"))
		{
			cr_assert(d->valueint >= 0 && d->valueint < 16);
			cr_assert_eq(seen & (1ull << d->valueint), 0,
				     "device %d used twice", d->valueint);
			seen |= 1ull << d->valueint;
		}
	}
	/* VGG-19's FC layers (the last three weighted layers, 86% of the
	 * weights) are not replicated across machines. */
	st = cJSON_GetArrayItem(stages, cJSON_GetArraySize(stages) - 1);
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(st, "devices")), 1);
	cr_assert_leq(num(st, "first_layer"), 22);
	cr_assert_geq(num(o, "microbatch_size"), 1);
	cr_assert_geq(num(o, "microbatches"), 1);
	cr_assert_not_null(cJSON_GetStringValue(cJSON_GetObjectItem(o, "policy")));
	cr_assert_leq(num(o, "peak_memory_bytes"), 16e9);
	pred = num(o, "predicted_ms");
	bl = cJSON_GetObjectItem(o, "baselines");
	for (int k = 0; k < 3; k++) {
		static const char *const names[] = {"data_parallel", "pipedream",
						    "gpipe"};
		cJSON *b = cJSON_GetObjectItem(bl, names[k]);

		cr_assert_not_null(b, "baseline %s missing", names[k]);
		cr_assert(cJSON_IsBool(cJSON_GetObjectItem(b, "fits")));
		if (cJSON_IsTrue(cJSON_GetObjectItem(b, "fits")))
			cr_assert_leq(pred, num(b, "predicted_ms") * (1 + 1e-9),
				      "slower than %s", names[k]);
	}
	cJSON_Delete(o);
	/* The saved plan replays to its predicted time. */
	RUN(&r, "simulate", "--plan", out, "--json");
	cr_assert_eq(r.code, 0, "%s", r.err);
	o = cJSON_Parse(r.out);
	cr_assert_not_null(o);
	mk = num(o, "makespan");
	cr_assert(fabs(mk - pred) <= 1e-6 * pred, "replay %g vs plan %g", mk,
		  pred);
	cr_assert(cJSON_IsNull(cJSON_GetObjectItem(
	    cJSON_GetArrayItem(cJSON_GetObjectItem(o, "stages"), 0),
	    "peak_activation_bytes")));
	cJSON_Delete(o);
	RUN(&r, "simulate", "--plan", out, "--latency", "1");
	cr_assert_eq(r.code, 2);
	cr_assert(strstr(r.err, "--plan carries its own costs"), "%s", r.err);
}

Test(cli_plan, no_fit_exits_1_naming_the_stage, .timeout = 120)
{
	static struct cli_res r;
	char prof[1024], cl[512];
	FILE *f;

	cli_need_profile(prof, sizeof prof, "bert-48-pbs-2.txt");
	/* 2 devices of 1 GB cannot hold BERT-48's 2.5 GB of weights. */
	snprintf(cl, sizeof cl, "%s/tiny.json", dir);
	f = fopen(cl, "w");
	cr_assert_not_null(f);
	fputs("{\"machines\": 1, \"devices_per_machine\": 2, "
	      "\"device_memory_bytes\": 1e9, \"intra_bandwidth_bytes_per_s\": 1e10}",
	      f);
	fclose(f);
	RUN(&r, "plan", "--profile", prof, "--pbs", "2", "--gbs", "16",
	    "--cluster", cl);
	cr_assert_eq(r.code, 1, "exit %d: %s", r.code, r.err);
	cr_assert(strstr(r.err, "stage"), "%s", r.err);
}

/*
 * The text plan prints each stage's activation bytes per micro-batch, the
 * figures of the JSON plan; given to `dpl schedule --act-bytes` with a
 * budget of two micro-batches' worth per stage, `bounded` keeps at most
 * two alive on each stage.
 */
Test(cli_plan, activation_bytes_feed_byte_caps, .timeout = 120)
{
	static struct cli_res r, j;
	char prof[1024], acts[512] = "", caps[512] = "", m[16];
	const char *line;
	cJSON *o, *st;
	size_t na = 0, nc = 0;
	int n = 0;

	cli_need_profile(prof, sizeof prof, "vgg-19-pbs-32.txt");
	RUN(&r, "plan", "--profile", prof, "--pbs", "32", "--gbs", "256",
	    "--cluster", "paper-a");
	cr_assert_eq(r.code, 0, "%s", r.err);
	RUN(&j, "plan", "--profile", prof, "--pbs", "32", "--gbs", "256",
	    "--cluster", "paper-a", "--format", "json");
	cr_assert_eq(j.code, 0, "%s", j.err);
	o = cJSON_Parse(j.out);
	cr_assert_not_null(o);
	cJSON_ArrayForEach(st, cJSON_GetObjectItem(o, "stages"))
	{
		unsigned long long a =
		    (unsigned long long)num(st, "activation_bytes");

		na += (size_t)snprintf(acts + na, sizeof acts - na, "%s%llu",
				       n ? "," : "", a);
		nc += (size_t)snprintf(caps + nc, sizeof caps - nc, "%s%llu",
				       n ? "," : "", 2 * a);
		n++;
	}
	snprintf(m, sizeof m, "%d", (int)num(o, "microbatches"));
	cJSON_Delete(o);
	line = strstr(r.out, "activations per micro-batch (--act-bytes) ");
	cr_assert_not_null(line, "%s", r.out);
	cr_assert(strncmp(strchr(line, ')') + 2, acts, strlen(acts)) == 0,
		  "text '%.80s' vs JSON %s", line, acts);
	{
		char sn[16];

		snprintf(sn, sizeof sn, "%d", n);
		RUN(&r, "simulate", "--stages", sn, "--microbatches", m,
		    "--policy", "bounded", "--cap-bytes", caps, "--act-bytes",
		    acts, "--json");
	}
	cr_assert_eq(r.code, 0, "%s", r.err);
	o = cJSON_Parse(r.out);
	cr_assert_not_null(o);
	cJSON_ArrayForEach(st, cJSON_GetObjectItem(o, "stages"))
		cr_assert_leq(num(st, "peak_inflight"), 2);
	cJSON_Delete(o);
}
