/*
 * test_cli_svg.c - `dpl schedule --format svg` and `dpl simulate --svg`
 * as a user runs them: one rect per compute action of the lists the
 * same command prints as CSV, the simulated makespan in the caption,
 * costs from --costs, files whole or absent, one-line errors naming the
 * path.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "cli_run.h"
#include "scratch.h"

static char dir[] = "/tmp/dpl-cli-svg-XXXXXX";

static void setup(void)
{
	scratch_make(dir);
}

static void teardown(void)
{
	scratch_remove(dir);
}

TestSuite(cli_svg, .init = setup, .fini = teardown, .timeout = 60);

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0, k = strlen(needle);

	for (const char *p = strstr(hay, needle); p; p = strstr(p + k, needle))
		n++;
	return n;
}

/* Files in the scratch dir other than the captured stdout/stderr. */
static size_t files_left(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.' && strcmp(e->d_name, "stdout") &&
		     strcmp(e->d_name, "stderr");
	closedir(d);
	return n;
}

/* The CSV of the same command: "<stage><kind><mb>" items per kind (a
 * digit then F, B, I or W; stage numbers end in a digit). */
static void csv_counts(const char *csv, size_t out[4])
{
	static const char kinds[] = "FBIW";

	memset(out, 0, 4 * sizeof *out);
	for (const char *p = csv; *p; p++)
		if (*p >= '0' && *p <= '9' && p[1] && strchr(kinds, p[1]))
			out[strchr(kinds, p[1]) - kinds]++;
}

Test(cli_svg, schedule_svg_matches_the_lists)
{
	static const char *const pol[] = {"1f1b", "zb-h1", "gpipe"};
	static const char *const key[] = {"<rect class=\"F\"", "<rect class=\"B\"",
					  "<rect class=\"I\"", "<rect class=\"W\""};
	static struct cli_res r;

	for (int p = 0; p < 3; p++) {
		size_t want[4];

		RUN(&r, "schedule", "--stages", "4", "--microbatches", "8",
		    "--policy", pol[p], "--format", "csv");
		cr_assert_eq(r.code, 0, "%s", r.err);
		csv_counts(r.out, want);
		cr_assert_eq(want[0], 32, "%s", r.out);
		RUN(&r, "schedule", "--stages", "4", "--microbatches", "8",
		    "--policy", pol[p], "--format", "svg");
		cr_assert_eq(r.code, 0, "%s", r.err);
		cr_assert_eq(strncmp(r.out, "<?xml", 5), 0);
		cr_assert(strstr(r.out, "</svg>\n"));
		for (int k = 0; k < 4; k++)
			cr_expect_eq(count(r.out, key[k]), want[k],
				     "%s: %s", pol[p], key[k]);
		for (int rank = 0; rank < 4; rank++) {
			char row[32];

			snprintf(row, sizeof row, ">rank %d</text>", rank);
			cr_expect_eq(count(r.out, row), 1);
		}
	}
}

/* The caption's makespan is what `dpl simulate --json` reports for the
 * same flags, default costs and --costs alike. */
Test(cli_svg, caption_makespan_equals_simulate)
{
	static const char *const costs[] = {NULL, "1,3", "0.5,1.25"};
	static struct cli_res r;

	for (int c = 0; c < 3; c++) {
		char want[64];
		const char *m;
		cJSON *o;
		size_t n;

		if (costs[c])
			RUN(&r, "simulate", "--stages", "4", "--microbatches",
			    "8", "--policy", "1f1b", "--costs", costs[c],
			    "--json");
		else
			RUN(&r, "simulate", "--stages", "4", "--microbatches",
			    "8", "--policy", "1f1b", "--json");
		cr_assert_eq(r.code, 0, "%s", r.err);
		o = cJSON_Parse(r.out);
		cr_assert_not_null(o);
		snprintf(want, sizeof want, ">makespan %.4f",
			 cJSON_GetObjectItem(o, "makespan")->valuedouble);
		cJSON_Delete(o);
		n = strlen(want);
		while (want[n - 1] == '0')
			want[--n] = '\0';
		if (want[n - 1] == '.')
			want[--n] = '\0';
		strcat(want, ",");
		if (costs[c])
			RUN(&r, "schedule", "--stages", "4", "--microbatches",
			    "8", "--policy", "1f1b", "--costs", costs[c],
			    "--format", "svg");
		else
			RUN(&r, "schedule", "--stages", "4", "--microbatches",
			    "8", "--policy", "1f1b", "--format", "svg");
		cr_assert_eq(r.code, 0, "%s", r.err);
		m = strstr(r.out, ">makespan ");
		cr_expect(m && strncmp(m, want, strlen(want)) == 0,
			  "want '%s', got '%.24s'", want, m ? m : "(none)");
	}
}

Test(cli_svg, simulate_svg_file_and_bad_paths)
{
	static struct cli_res r;
	static char buf[1 << 17];
	char path[256];
	struct stat sb;

	snprintf(path, sizeof path, "%s/t.svg", dir);
	RUN(&r, "simulate", "--stages", "4", "--microbatches", "8", "--policy",
	    "1f1b", "--latency", "0.25", "--activation-bytes", "2048", "--svg",
	    path);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_assert(strstr(r.out, "makespan"), "summary still printed: %s", r.out);
	cli_slurp(path, buf, sizeof buf);
	cr_expect_eq(count(buf, "<rect class=\"F\""), 32);
	/* One line per activation and per gradient crossing ranks. */
	cr_expect_eq(count(buf, "<line class=\"transfer\""), 2 * 3 * 8);
	cr_expect(strstr(buf, " rank 0: 4 mb (8 KiB),"), "%s",
		  strstr(buf, "peak"));
	cr_expect_eq(files_left(), 1);
	unlink(path);

	RUN(&r, "simulate", "--stages", "4", "--microbatches", "8", "--policy",
	    "1f1b", "--svg", "/nonexistent/dir/t.svg");
	cr_expect_eq(r.code, 2, "%s", r.err);
	cr_expect(strstr(r.err, "/nonexistent/dir/t.svg"), "%s", r.err);
	cr_expect_eq(count(r.err, "\n"), 1, "%s", r.err);
	RUN(&r, "simulate", "--stages", "4", "--microbatches", "8", "--policy",
	    "1f1b", "--svg");
	cr_expect_eq(r.code, 2);
	cr_expect(strstr(r.err, "--svg"), "%s", r.err);

	RUN(&r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "1f1b", "--format", "svg", "--out", "/nonexistent/dir/s.svg");
	cr_expect_eq(r.code, 2, "%s", r.err);
	cr_expect(strstr(r.err, "/nonexistent/dir/s.svg"), "%s", r.err);
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "0", "--policy",
	    "1f1b", "--format", "svg", "--out", path);
	cr_expect_eq(r.code, 2);
	cr_expect_neq(stat(path, &sb), 0, "output file created on failure");
	RUN(&r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "zbv", "--lower", "--format", "svg", "--out", path);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(r.out, "");
	cli_slurp(path, buf, sizeof buf);
	cr_expect(strstr(buf, "zbv: 8 stages on 4 ranks, 8 micro-batches "
			      "(lowered)"));
	cr_expect_eq(files_left(), 1);

	RUN(&r, "schedule", "--stages", "4", "--microbatches", "8", "--policy",
	    "1f1b", "--format", "png");
	cr_expect_eq(r.code, 2);
	cr_expect(strstr(r.err, "svg"), "%s", r.err);
}

/* A plan's replay: times in milliseconds, its activation figures are not
 * bytes and are not shown; the caption's makespan is simulate's. */
Test(cli_svg, plan_picture_in_milliseconds)
{
	static struct cli_res r;
	static char buf[1 << 18];
	char prof[512], plan[256], path[256], want[64];
	const char *m;
	cJSON *o;
	size_t n;

	cli_need_profile(prof, sizeof prof, "vgg-19-pbs-32.txt");
	snprintf(plan, sizeof plan, "%s/plan.json", dir);
	snprintf(path, sizeof path, "%s/plan.svg", dir);
	RUN(&r, "plan", "--profile", prof, "--pbs", "32", "--gbs", "512",
	    "--cluster", "paper-a", "--out", plan);
	cr_assert_eq(r.code, 0, "%s", r.err);
	RUN(&r, "simulate", "--plan", plan, "--json", "--svg", path);
	cr_assert_eq(r.code, 0, "%s", r.err);
	o = cJSON_Parse(r.out);
	cr_assert_not_null(o, "%s", r.out);
	snprintf(want, sizeof want, ">makespan %.4f",
		 cJSON_GetObjectItem(o, "makespan")->valuedouble);
	cJSON_Delete(o);
	n = strlen(want);
	while (want[n - 1] == '0')
		want[--n] = '\0';
	if (want[n - 1] == '.')
		want[--n] = '\0';
	strcat(want, " ms,");
	cli_slurp(path, buf, sizeof buf);
	m = strstr(buf, ">makespan ");
	cr_expect(m && strncmp(m, want, strlen(want)) == 0,
		  "want '%s', got '%.32s'", want, m ? m : "(none)");
	cr_expect(strstr(buf, "peak activations per rank: rank 0: "));
	cr_expect_null(strstr(buf, " B)"));
	cr_expect_null(strstr(buf, "iB)"));
	cr_expect(strstr(buf, "</svg>\n"));
}
