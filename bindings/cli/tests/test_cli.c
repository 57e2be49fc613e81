/*
 * test_cli.c - the `dpl` command as a user runs it: exit codes, one-line
 * messages naming the bad flag or file position, no partial output files,
 * and outputs checked against values worked out by hand.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "cli_run.h"
#include "scratch.h"



static char dir[] = "/tmp/dpl-cli-XXXXXX";

static void setup(void)
{
	scratch_make(dir);
}

static void teardown(void)
{
	scratch_remove(dir);
}




static void one_line_error(const struct cli_res *r, const char *want)
{
	cr_assert_eq(r->code, 2, "exit %d, stderr: %s", r->code, r->err);
	cr_assert(strstr(r->err, want), "stderr '%s' lacks '%s'", r->err, want);
	cr_assert_eq(strchr(r->err, '\n'), r->err + strlen(r->err) - 1,
		     "not one line: %s", r->err);
	cr_assert_str_eq(r->out, "");
}

static void path_in(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", dir, name);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

/* Nothing but stdout/stderr in the scratch dir. */
static void no_stray_files(void)
{
	char cmd[256], buf[256];
	FILE *p;

	snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -v -x -e stdout -e stderr -e bad.csv -e bad.json", dir);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	buf[0] = '\0';
	if (fgets(buf, sizeof buf, p) == NULL)
		buf[0] = '\0';
	pclose(p);
	cr_assert_str_eq(buf, "", "left behind: %s", buf);
}

TestSuite(cli, .init = setup, .fini = teardown, .timeout = 60);

Test(cli, version_and_help)
{
	struct cli_res r;

	RUN(&r, "--version");
	cr_assert_eq(r.code, 0);
	cr_assert_str_eq(r.out, "dpl 0.1.0\n");
	RUN(&r, "help");
	cr_assert_eq(r.code, 0);
	cr_assert(strstr(r.out, "schedule") && strstr(r.out, "simulate"));
	RUN(&r, "schedule", "--help");
	cr_assert_eq(r.code, 0);
	cr_assert(strstr(r.out, "--microbatches"));
	RUN(&r, "frobnicate");
	cr_assert_eq(r.code, 2);
	cr_assert(strstr(r.err, "unknown command 'frobnicate'"));
}

Test(cli, bad_flags_name_themselves)
{
	struct cli_res r;

	RUN(&r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "1f1b", "--frob");
	one_line_error(&r, "unknown argument '--frob'");
	RUN(&r, "schedule", "--microbatches", "8", "--policy", "1f1b",
	    "--stages");
	one_line_error(&r, "--stages: missing value");
	RUN(&r, "schedule", "--stages", "four", "--microbatches", "8",
	    "--policy", "1f1b");
	one_line_error(&r, "--stages: expected an integer, got 'four'");
	RUN(&r, "schedule", "--stages", "0", "--microbatches", "8", "--policy",
	    "1f1b");
	one_line_error(&r, "--stages: must be >= 1 (got '0')");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "-3", "--policy",
	    "1f1b");
	one_line_error(&r, "--microbatches: must be >= 1 (got '-3')");
	RUN(&r, "schedule", "--stages", "4", "--microbatches",
	    "99999999999999999999999", "--policy", "1f1b");
	one_line_error(&r, "--microbatches: must be <=");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "pipedream");
	one_line_error(&r, "unknown policy 'pipedream'");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "interleaved", "--chunks", "2", "--format", "xml");
	one_line_error(&r, "--format: expected text, csv, csv-comms, json or svg "
			   "(got 'xml')");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "6", "--policy",
	    "looped-bfs");
	one_line_error(&r, "policy looped-bfs needs --chunks V with V >= 2");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "6", "--policy",
	    "zbv", "--chunks", "3");
	one_line_error(&r, "only policies interleaved, looped-bfs and");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "6", "--policy",
	    "bounded", "--cap", "2,2");
	one_line_error(&r, "--cap: 2 values for 4 stages");
	RUN(&r, "simulate", "--stages", "4", "--microbatches", "6", "--policy",
	    "1f1b", "--costs", "1,nan");
	one_line_error(&r, "--costs: expected a number, got 'nan'");
	RUN(&r, "simulate", "--stages", "4", "--microbatches", "6", "--policy",
	    "1f1b", "--latency", "-1");
	one_line_error(&r, "--latency: must be in");
}

Test(cli, absurd_sizes_are_refused)
{
	struct cli_res r;

	RUN(&r, "schedule", "--stages", "4096", "--microbatches", "1048576",
	    "--policy", "gpipe", "--format", "csv");
	one_line_error(&r, "too large");
}

Test(cli, csv_is_pytorch_compute_only)
{
	struct cli_res r;

	/* DAPPLE policy A by hand: stage s warms up with min(S-s, M). */
	RUN(&r, "schedule", "--stages", "3", "--microbatches", "4", "--policy",
	    "1f1b", "--format", "csv");
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_assert_str_eq(r.out, "0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3\n"
				"1F0,1F1,1B0,1F2,1B1,1F3,1B2,1B3\n"
				"2F0,2B0,2F1,2B1,2F2,2B2,2F3,2B3\n");
}

Test(cli, simulate_json_and_trace)
{
	struct cli_res r;
	char trace[256], buf[1 << 16];
	cJSON *o, *st;

	path_in(trace, sizeof trace, "trace.json");
	RUN(&r, "simulate", "--stages", "4", "--microbatches", "8", "--policy",
	    "1f1b", "--activation-bytes", "100", "--json", "--trace", trace);
	cr_assert_eq(r.code, 0, "%s", r.err);
	o = cJSON_Parse(r.out);
	cr_assert_not_null(o, "not JSON: %s", r.out);
	cr_assert_float_eq(cJSON_GetObjectItem(o, "makespan")->valuedouble, 33,
			   1e-9);
	cr_assert_float_eq(cJSON_GetObjectItem(o, "bubble_fraction")->valuedouble,
			   3.0 / 11, 1e-9);
	st = cJSON_GetObjectItem(o, "stages");
	cr_assert_eq(cJSON_GetArraySize(st), 4);
	for (int k = 0; k < 4; k++) {
		cJSON *e = cJSON_GetArrayItem(st, k);

		cr_assert_float_eq(cJSON_GetObjectItem(e, "busy")->valuedouble,
				   24, 1e-9);
		cr_assert_eq(cJSON_GetObjectItem(e, "peak_inflight")->valueint,
			     4 - k);
		cr_assert_eq(cJSON_GetObjectItem(e, "peak_activation_bytes")
				 ->valueint,
			     100 * (4 - k));
	}
	cJSON_Delete(o);
	cli_slurp(trace, buf, sizeof buf);
	o = cJSON_Parse(buf);
	cr_assert_not_null(o, "trace is not JSON");
	cr_assert(cJSON_IsArray(cJSON_GetObjectItem(o, "traceEvents")));
	cJSON_Delete(o);
}

static double sim_makespan(const struct cli_res *r)
{
	cJSON *o = cJSON_Parse(r->out);
	double t;

	cr_assert_eq(r->code, 0, "%s", r->err);
	cr_assert_not_null(o, "not JSON: %s", r->out);
	t = cJSON_GetObjectItem(o, "makespan")->valuedouble;
	cJSON_Delete(o);
	return t;
}

/* zb-auto's --transfer: planned for links of latency 2 it beats the order
 * planned for free links, simulated with latency 2 (both 106 and 82 come
 * from dpl's Python tests of the same case, through another path). */
Test(cli, zb_auto_transfer)
{
	struct cli_res r;
	double planned, free_order;

	RUN(&r, "simulate", "--stages", "4", "--microbatches", "16", "--policy",
	    "zb-auto", "--cap", "8", "--costs", "1,3,2,1", "--latency", "2",
	    "--transfer", "2", "--json");
	planned = sim_makespan(&r);
	RUN(&r, "simulate", "--stages", "4", "--microbatches", "16", "--policy",
	    "zb-auto", "--cap", "8", "--costs", "1,3,2,1", "--latency", "2",
	    "--json");
	free_order = sim_makespan(&r);
	cr_assert_lt(planned, free_order, "%g >= %g", planned, free_order);
	cr_assert_float_eq(planned, 82, 1e-9);
	cr_assert_float_eq(free_order, 106, 1e-9);
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "1f1b", "--transfer", "1");
	one_line_error(&r, "transfer 1: only policy zb-auto takes a transfer "
			   "time (got policy 1f1b)");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "zb-auto", "--cap", "4", "--transfer", "-1");
	one_line_error(&r, "--transfer: must be in [0, 1e+12] (got '-1')");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "zb-auto", "--cap", "4", "--transfer");
	one_line_error(&r, "--transfer: missing value");
}

/* A schedule file fixes the schedule: flags that would shape a built one
 * are refused, not ignored. */
Test(cli, simulate_file_refuses_shaping_flags)
{
	static const char *const flags[][2] = {
	    {"--cap", "2"}, {"--cap-bytes", "4096"}, {"--act-bytes", "1024"},
	    {"--transfer", "1"}, {"--chunks", "2"}};
	struct cli_res r;
	char path[256];

	path_in(path, sizeof path, "s.json");
	RUN(&r, "schedule", "--stages", "2", "--microbatches", "4", "--policy",
	    "1f1b", "--format", "json", "--out", path);
	cr_assert_eq(r.code, 0, "%s", r.err);
	for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) {
		RUN(&r, "simulate", "--schedule", path, flags[k][0],
		    flags[k][1]);
		one_line_error(&r, "--schedule fixes the schedule");
	}
	RUN(&r, "simulate", "--schedule", path, "--costs", "1,2", "--json");
	cr_assert_float_eq(sim_makespan(&r), 15, 1e-9);   /* (M+S-1)(F+B) */
}

Test(cli, csv_round_trip_through_simulate)
{
	struct cli_res r;
	char csv[256];

	path_in(csv, sizeof csv, "zb.csv");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "zb-h1", "--format", "csv", "--out", csv);
	cr_assert_eq(r.code, 0, "%s", r.err);
	RUN(&r, "simulate", "--schedule", csv, "--costs", "1,2,1,1", "--json");
	cr_assert_eq(r.code, 0, "%s", r.err);
	/* zb-h1, F=I=W=1, M >= S: 3M + (S - 1) = 27. */
	cr_assert(strstr(r.out, "\"makespan\":\t27") ||
		      strstr(r.out, "\"makespan\": 27"),
		  "%s", r.out);
}

Test(cli, malformed_files_give_their_position)
{
	struct cli_res r;
	char bad[256];

	path_in(bad, sizeof bad, "bad.csv");
	write_file(bad, "0F0,0B0\n1F0,1X0,1B0\n");
	RUN(&r, "simulate", "--schedule", bad);
	one_line_error(&r, "line 2, field 2");
	path_in(bad, sizeof bad, "bad.json");
	write_file(bad, "{\"format\": \"dpl-schedule\", \"version\": 1, ");
	RUN(&r, "simulate", "--schedule", bad);
	cr_assert_eq(r.code, 2, "%s", r.err);
	RUN(&r, "simulate", "--schedule", "/nonexistent/x.csv");
	one_line_error(&r, "/nonexistent/x.csv: No such file or directory");
}

Test(cli, no_partial_output_file)
{
	struct cli_res r;
	char out[256];
	struct stat sb;

	path_in(out, sizeof out, "sched.json");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "0", "--policy",
	    "1f1b", "--format", "json", "--out", out);
	cr_assert_eq(r.code, 2);
	cr_assert_neq(stat(out, &sb), 0, "output file created on failure");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "4", "--policy",
	    "1f1b", "--format", "json", "--out", "/nonexistent/dir/x.json");
	cr_assert_eq(r.code, 2, "%s", r.err);
	RUN(&r, "schedule", "--stages", "2", "--microbatches", "2", "--policy",
	    "1f1b", "--format", "json", "--out", out);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_assert_eq(stat(out, &sb), 0);
	cr_assert_gt(sb.st_size, 10);
	unlink(out);
	no_stray_files();
}
