/*
 * test_train_schedule.c - `dpl train --schedule FILE` and byte caps on
 * `dpl train`: files written by `dpl schedule` (1f1b, zb-h1; CSV and JSON,
 * compute-only and lowered), a hand-written CSV and a PyTorch-style
 * compute-only CSV with an interleaved placement, PyTorch's own DualPipeV
 * files (compound OVERLAP_F_B, its comms kinds) all train to the
 * one-device weights, as threads, with replicas and as processes over
 * shm; a file of a policy ends with the weights digest of that policy
 * built from the flags; bad, missing and invalid files and flags that
 * disagree with the file are refused before anything runs; --cap-bytes
 * builds the schedule of its cap in micro-batches and makes every rank
 * refuse to start when a stage's buffers exceed it (the bytes worked out
 * by hand). Runs the built `dpl` binary.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "scratch.h"

struct out {
	int status;  /* exit code */
	char *text;  /* stdout (and stderr when merged) */
	cJSON *json; /* stdout parsed, when it was JSON */
};

static char dir[] = "/tmp/dpl-train-sched-XXXXXX";

static void setup(void)
{
	scratch_make(dir);
}

static void teardown(void)
{
	scratch_remove(dir);
}

TestSuite(train_schedule, .init = setup, .fini = teardown);

/* `dpl <args>` in the scratch directory. */
static struct out run(const char *args, bool merge_stderr)
{
	char cmd[1024];
	struct out o = {0, NULL, NULL};
	size_t cap = 1 << 16, len = 0, n;
	FILE *p;
	int st;

	snprintf(cmd, sizeof cmd, "cd '%s' && %s %s%s", dir, DPL_CLI_PATH,
		 args, merge_stderr ? " 2>&1" : " 2>/dev/null");
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

static void write_file(const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

static void make_schedule(const char *flags, const char *name)
{
	char args[512];
	struct out o;

	snprintf(args, sizeof args, "schedule %s --out %s", flags, name);
	o = run(args, true);
	cr_assert_eq(o.status, 0, "%s: %s", args, o.text);
	out_free(&o);
}

/* `dpl train <args> --json`: exit 0, --check within 1e-5, the peak in
 * flight equal to the bound on every stage; the weights digest into
 * digest (when not NULL) and the bounds into bound[] (when not NULL). */
static void train_ok(const char *args, char digest[32], int *bound,
		     int nbound)
{
	char full[768];
	const cJSON *pk, *bd, *d;
	struct out o;
	int i;

	snprintf(full, sizeof full, "train %s --json", args);
	o = run(full, false);
	cr_assert_eq(o.status, 0, "%s: exit %d", full, o.status);
	cr_assert_not_null(o.json, "%s: no JSON", full);
	if (strstr(args, "--check"))
		cr_assert_leq(cJSON_GetObjectItem(o.json, "max_rel_diff")
				      ->valuedouble,
			      1e-5, "%s", full);
	pk = cJSON_GetObjectItem(o.json, "peak_inflight");
	bd = cJSON_GetObjectItem(o.json, "bound");
	cr_assert_gt(cJSON_GetArraySize(pk), 0, "%s", full);
	cr_assert_eq(cJSON_GetArraySize(pk), cJSON_GetArraySize(bd));
	for (i = 0; i < cJSON_GetArraySize(pk); i++)
		cr_assert_eq(cJSON_GetArrayItem(pk, i)->valueint,
			     cJSON_GetArrayItem(bd, i)->valueint, "%s: stage %d",
			     full, i);
	if (bound != NULL) {
		cr_assert_eq(cJSON_GetArraySize(bd), nbound, "%s", full);
		for (i = 0; i < nbound; i++)
			cr_assert_eq(cJSON_GetArrayItem(bd, i)->valueint,
				     bound[i], "%s: bound of stage %d", full,
				     i);
	}
	if (digest != NULL) {
		d = cJSON_GetObjectItem(o.json, "weights_digest");
		cr_assert(cJSON_IsString(d), "%s", full);
		snprintf(digest, 32, "%s", d->valuestring);
	}
	out_free(&o);
}

/* `dpl train <args>` is refused with exit `code` before anything ran,
 * and the output holds `want`. */
static void refused(const char *args, int code, const char *want)
{
	char full[768];
	struct out o;

	snprintf(full, sizeof full, "train %s", args);
	o = run(full, true);
	cr_assert_eq(o.status, code, "%s: exit %d: %s", full, o.status,
		     o.text);
	cr_assert(strstr(o.text, want) != NULL, "%s: '%s' not in: %s", full,
		  want, o.text);
	cr_assert(strstr(o.text, "samples/s") == NULL, "%s ran", full);
	out_free(&o);
}

/*
 * Files `dpl schedule` writes for 1f1b and zb-h1 (S = 4, M = 8) train to
 * the one-device weights and to the digest of the same policy built from
 * the flags, compute-only CSV, lowered CSV and JSON alike, on a pipeline
 * and on a replicated layout.
 */
Test(train_schedule, files_of_dpl_schedule_train_as_their_policy,
     .timeout = 240)
{
	static const char *const pols[] = {"1f1b", "zb-h1"};
	static const char *const forms[] = {"--format csv",
					    "--format csv --lower",
					    "--format json"};
	static const char *const layouts[] = {"", "--replicas 2,1,1,2"};
	char args[512], want[32], got[32], name[64];
	size_t p, f, l;

	for (p = 0; p < 2; p++)
		for (l = 0; l < 2; l++) {
			snprintf(args, sizeof args,
				 "--stages 4 --microbatches 8 --policy %s %s "
				 "--batch 14 --iterations 3 --check",
				 pols[p], layouts[l]);
			train_ok(args, want, NULL, 0);
			for (f = 0; f < 3; f++) {
				snprintf(name, sizeof name, "%s-%zu.%s",
					 pols[p], f, f == 2 ? "json" : "csv");
				snprintf(args, sizeof args,
					 "--stages 4 --microbatches 8 "
					 "--policy %s %s",
					 pols[p], forms[f]);
				make_schedule(args, name);
				snprintf(args, sizeof args,
					 "--schedule %s %s --batch 14 "
					 "--iterations 3 --check", name,
					 layouts[l]);
				train_ok(args, got, NULL, 0);
				cr_assert_str_eq(got, want, "%s", args);
			}
		}
}

/*
 * A hand-written CSV in PyTorch's compute-only form, bubbles as empty
 * fields: 3 ranks, M = 3, rank 2 runs its backwards newest first. Bounds
 * by hand: rank 0 runs F0 F1 F2 before B0 (3), rank 1 F0 F1 then B0, F2
 * (2), rank 2 F0 F1 before B1 (2).
 */
Test(train_schedule, a_hand_written_csv_trains_to_one_device_weights,
     .timeout = 120)
{
	int bound[3] = {3, 2, 2};

	write_file("hand.csv", "0F0,0F1,0F2,,,,0B0,0B1,0B2\n"
			       ",1F0,1F1,,1B0,1F2,1B1,1B2\n"
			       ",,2F0,2F1,2B1,2B0,2F2,2B2\n");
	train_ok("--schedule hand.csv --iterations 3 --check", NULL, bound,
		 3);
	train_ok("--schedule hand.csv --replicas 1,2,1 --batch 13 "
		 "--iterations 3 --check", NULL, bound, 3);
	train_ok("--schedule hand.csv --stages 3 --microbatches 3 "
		 "--iterations 2 --check", NULL, NULL, 0);
}

/*
 * A compute-only CSV as PyTorch writes one for an interleaved placement:
 * one line per rank, PyTorch's stage indices (rank r holds stages r and
 * r + 2, read from the line each stage is on), bubbles as empty fields;
 * 2 ranks, 4 stages, M = 4. Bounds by hand from the lists: stage 0 runs
 * F0..F3 before B0 (4); stage 1 F0 F1 F2 before B0, then F3 after it
 * (3); stage 2 F0 F1 F2 before B0, then F3 after it (3); stage 3 one at
 * a time (1).
 */
Test(train_schedule, a_pytorch_interleaved_csv_trains_to_one_device_weights,
     .timeout = 240)
{
	int bound[4] = {4, 3, 3, 1};

	write_file("inter.csv",
		   "0F0,0F1,2F0,0F2,2F1,0F3,2F2,2B0,2F3,2B1,0B0,2B2,0B1,"
		   "2B3,0B2,0B3\n"
		   ",1F0,1F1,3F0,3B0,1F2,3F1,3B1,1B0,3F2,3B2,1F3,1B1,3F3,"
		   "3B3,1B2,1B3\n");
	train_ok("--schedule inter.csv --iterations 3 --check", NULL, bound,
		 4);
	train_ok("--schedule inter.csv --stages 2 --chunks 2 --replicas 2,1 "
		 "--batch 11 --iterations 3 --check", NULL, bound, 4);
	train_ok("--schedule inter.csv --device synthetic --fwd-ms 0 "
		 "--bwd-ms 0 --iterations 2", NULL, bound, 4);
}

/*
 * PyTorch's own ScheduleDualPipeV files (2 ranks, 4 stages, M = 4, from
 * its _dump_csv): compute-only with (F;B)OVERLAP_F_B fields, and
 * compute_comms with UNSHARD, RESHARD, WAIT_SEND_*, WAIT_REDUCE_GRAD and
 * no STEP; and dpl's dualpipev written for PyTorch's runtime
 * (--format csv-comms). All train to the one-device weights, as threads
 * and as processes; the two PyTorch files to the same weights.
 */
Test(train_schedule, pytorch_dualpipev_files_train_to_one_device_weights,
     .timeout = 240)
{
	char a[32], b[32], c[32], args[1300];

	snprintf(args, sizeof args,
		 "--schedule %s/pytorch_dualpipev_2x4.csv --iterations 3 "
		 "--check", DPL_TEST_DATA_DIR);
	train_ok(args, a, NULL, 0);
	snprintf(args, sizeof args,
		 "--schedule %s/pytorch_dualpipev_comms_2x4.csv --iterations 3 "
		 "--check", DPL_TEST_DATA_DIR);
	train_ok(args, b, NULL, 0);
	cr_assert_str_eq(a, b);
	snprintf(args, sizeof args,
		 "--schedule %s/pytorch_dualpipev_comms_2x4.csv --iterations 3 "
		 "--check --nprocs 2 --timeout 30", DPL_TEST_DATA_DIR);
	train_ok(args, c, NULL, 0);
	cr_assert_str_eq(b, c);
	make_schedule("--stages 2 --microbatches 4 --policy dualpipev "
		      "--format csv-comms", "dpv.csv");
	train_ok("--schedule dpv.csv --iterations 3 --check", c, NULL, 0);
	cr_assert_str_eq(a, c);
	train_ok("--schedule dpv.csv --replicas 2,1 --batch 13 --iterations 3 "
		 "--check", NULL, NULL, 0);
}

/* One process per rank over shm, the file read by every rank. */
Test(train_schedule, a_schedule_file_trains_with_one_process_per_rank,
     .timeout = 240)
{
	char a[32], b[32];

	make_schedule("--stages 2 --microbatches 4 --policy zb-h1 --format csv",
		      "zb.csv");
	train_ok("--schedule zb.csv --iterations 3 --check", a, NULL, 0);
	train_ok("--schedule zb.csv --iterations 3 --check --nprocs 2 "
		 "--timeout 30", b, NULL, 0);
	cr_assert_str_eq(a, b);
	train_ok("--schedule zb.csv --replicas 2 --iterations 3 --check "
		 "--nprocs 4 --timeout 30", NULL, NULL, 0);
}

Test(train_schedule, bad_files_and_disagreeing_flags_are_refused,
     .timeout = 120)
{
	char want[256];

	write_file("two.csv", "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
	write_file("typo.csv", "0F0,0F1,0B0,0B1\n1F0,1X0,1F1,1B1\n");
	write_file("typo.json", "{\"format\": \"dpl-schedule\",\n"
				"\"version\": 1,\n \"ranks\": x}\n");
	/* rank 0 waits for 0B0 before rank 1 ran 1B0 after 1F1, which
	 * needs 0F1: a deadlock. */
	write_file("dead.csv", "0F0,0B0,0F1,0B1\n1F0,1F1,1B1,1B0\n");
	write_file("short.csv", "0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n");
	refused("--schedule /nonexistent/dir/s.csv", 2,
		"dpl train: /nonexistent/dir/s.csv: ");
	refused("--schedule typo.csv", 2,
		"dpl train: typo.csv: line 2, field 2: '1X0'");
	refused("--schedule typo.json", 2, "dpl train: typo.json: ");
	refused("--schedule typo.json", 2, "line 3");
	refused("--schedule dead.csv", 1,
		"dpl train: dead.csv: invalid schedule: rank 0, position 1 "
		"(0B0)");
	refused("--schedule short.csv", 1,
		"dpl train: short.csv: invalid schedule: rank 0");
	refused("--schedule two.csv --stages 3", 2,
		"--schedule two.csv runs on 2 ranks (2 stages), --stages "
		"says 3");
	refused("--schedule two.csv --microbatches 8", 2,
		"--schedule two.csv has 2 micro-batches, --microbatches says "
		"8");
	refused("--schedule two.csv --policy 1f1b", 2,
		"--schedule two.csv has policy custom, --policy says 1f1b");
	refused("--schedule two.csv --chunks 2", 2,
		"--schedule two.csv has 2 stages on 2 ranks, --chunks says 2");
	refused("--schedule two.csv --cap 2", 2,
		"--cap 2: --schedule two.csv fixes the schedule");
	refused("--schedule two.csv --cap-bytes 9 --cap-act-bytes 3", 2,
		"--cap-act-bytes 3: --schedule two.csv fixes the schedule");
	refused("--schedule two.csv --cap-bytes 1,2,3", 2,
		"--cap-bytes 1,2,3: 3 values for 2 stages");
	refused("--schedule two.csv --replicas 1,1,1", 2,
		"--replicas: 3 values for 2 stages");
	refused("--schedule two.csv --widths 4,4", 2,
		"more stages (2) than layers (1)");
	refused("--schedule two.csv --plan p.json", 2,
		"--schedule two.csv and --plan p.json both fix the schedule");
	make_schedule("--stages 2 --microbatches 4 --policy interleaved "
		      "--chunks 2 --format json", "il.json");
	refused("--schedule il.json --policy gpipe", 2,
		"--schedule il.json has policy interleaved, --policy says "
		"gpipe");
	snprintf(want, sizeof want, "--batch 3 < --microbatches 4");
	refused("--schedule il.json --batch 3", 2, want);
}

/*
 * --cap-bytes B with --cap-act-bytes A builds bounded's schedule of cap
 * floor(B / A): 1000000 / 400000 = 2 trains to the digest of --cap 2;
 * per stage, 3, 2, 1 and 1 (1999999 / 1000000 = 1) give bounded's
 * bounds min(S - s, cap) = 3, 2, 1, 1. The budgets are far above the
 * runners' buffers (at most 4 sets of 16384 bytes), so every rank starts.
 */
Test(train_schedule, a_byte_budget_builds_the_schedule_of_its_cap,
     .timeout = 120)
{
	char a[32], b[32];
	int bound[4] = {3, 2, 1, 1};

	train_ok("--stages 4 --microbatches 8 --policy bounded --cap 2 "
		 "--iterations 3 --check", a, NULL, 0);
	train_ok("--stages 4 --microbatches 8 --policy bounded --cap-bytes "
		 "1000000 --cap-act-bytes 400000 --iterations 3 --check", b,
		 NULL, 0);
	cr_assert_str_eq(a, b);
	train_ok("--stages 4 --microbatches 8 --policy bounded --cap-bytes "
		 "3000000,2000000,1999999,1000000 --cap-act-bytes 1000000 "
		 "--iterations 3 --check", NULL, bound, 4);
	train_ok("--stages 4 --microbatches 8 --policy zb-auto --cap-bytes "
		 "4000000 --cap-act-bytes 1000000 --iterations 3 --check",
		 NULL, NULL, 0);
	/* --act-bytes stays the synthetic device's bytes per sample. */
	train_ok("--device synthetic --fwd-ms 0 --bwd-ms 0 --act-bytes 100 "
		 "--iterations 2", NULL, NULL, 0);
	refused("--policy bounded --cap-bytes 2500", 2,
		"--cap-bytes 2500: needs --cap-act-bytes");
	refused("--policy bounded --cap-act-bytes 10 --cap 2", 2,
		"--cap-act-bytes 10: applies with --cap-bytes only");
	refused("--policy bounded --cap-bytes 2500 --cap-act-bytes 1000 "
		"--cap 2", 2, "--cap-bytes 2500: --cap gives the cap");
	refused("--policy 1f1b --cap-bytes 2500 --cap-act-bytes 1000", 2,
		"--cap-bytes 2500: only policies bounded and zb-auto take a "
		"cap (the policy is 1f1b)");
	refused("--policy bounded --cap-bytes 1,2 --cap-act-bytes 1", 2,
		"--cap-bytes 1,2: 2 values for 4 stages");
	refused("--policy bounded --cap-bytes 5 --cap-act-bytes 1,2,3", 2,
		"--cap-act-bytes 1,2,3: 3 values for 4 stages");
	refused("--policy bounded --cap-bytes 0 --cap-act-bytes 1", 2,
		"--cap-bytes: must be >= 1 (got '0')");
	refused("--policy bounded --cap-bytes 5 --cap-act-bytes 0", 2,
		"--cap-act-bytes: must be >= 1 (got '0')");
	refused("--policy bounded", 2,
		"--policy bounded needs --cap C, or --cap-bytes B with "
		"--cap-act-bytes A");
}

/*
 * Every rank checks its stages' buffers against --cap-bytes. two.csv on
 * the default model (widths 16,64,...,64,4; 8 layers, 4 a stage), a
 * batch of 64 in 2 micro-batches: 32 samples of 64 doubles = 16384 bytes
 * cross the cut. Stage 0 keeps F0 and F1 before B0, and stage 1 posts
 * the receive of micro-batch 1 before B0: 2 buffer sets each of
 * activations and gradient, 2 x 16384: 65536 bytes per stage.
 */
Test(train_schedule, each_rank_refuses_buffers_beyond_the_byte_cap,
     .timeout = 120)
{
	struct out o;

	write_file("two.csv", "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
	train_ok("--schedule two.csv --cap-bytes 65536 --iterations 2 "
		 "--check", NULL, NULL, 0);
	train_ok("--schedule two.csv --cap-bytes 65536,1000000 --iterations 2",
		 NULL, NULL, 0);
	o = run("train --schedule two.csv --cap-bytes 65535 --iterations 2",
		true);
	cr_assert_eq(o.status, 1, "exit %d: %s", o.status, o.text);
	cr_assert(strstr(o.text, "rank 0: setup: stage 0: its activation "
				 "buffers need 65536 bytes (2 buffer sets of "
				 "32768 bytes; the schedule keeps up to 2 "
				 "micro-batches in flight), above its cap of "
				 "65535 bytes") != NULL, "%s", o.text);
	cr_assert(strstr(o.text, "rank 1: setup: stage 1: its activation "
				 "buffers need 65536 bytes (2 buffer sets of "
				 "32768 bytes; the schedule keeps up to 1 "
				 "micro-batch in flight), above its cap of "
				 "65535 bytes") != NULL, "%s", o.text);
	cr_assert(strstr(o.text, "samples/s") == NULL);
	out_free(&o);
	/* Stage 0 at its need, stage 1 a byte short: rank 0 starts, rank
	 * 1 refuses. */
	o = run("train --schedule two.csv --cap-bytes 65536,65535 "
		"--iterations 2", true);
	cr_assert_eq(o.status, 1, "exit %d: %s", o.status, o.text);
	cr_assert(strstr(o.text, "rank 1: setup: stage 1:") != NULL, "%s",
		  o.text);
	cr_assert(strstr(o.text, "rank 0: setup") == NULL, "%s", o.text);
	out_free(&o);
	/* Built bounded schedules are checked too: bounded at cap 2 on
	 * 4 stages keeps 2 sets on stage 0, 8 samples of 64 doubles:
	 * 2 x 2 x 4096 = 16384 bytes; a budget of 16383 bytes with 8191
	 * bytes per micro-batch still gives cap 2 but not the buffers. */
	o = run("train --policy bounded --cap-bytes 16383 --cap-act-bytes "
		"8191 --iterations 2", true);
	cr_assert_eq(o.status, 1, "exit %d: %s", o.status, o.text);
	cr_assert(strstr(o.text, "rank 0: setup: stage 0: its activation "
				 "buffers need 16384 bytes") != NULL, "%s",
		  o.text);
	out_free(&o);
}
