/* cmd_schedule.c - `dpl schedule`: build a policy's lists and print them
 * (or draw them: --format svg). */
#include <stdlib.h>
#include <string.h>

#include <dpl/csv.h>
#include <dpl/json.h>
#include <dpl/sim.h>

#include "sched_opts.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: dpl schedule --stages S --microbatches M --policy P\n"
		   "                    [--chunks V] [--cap K|K0,K1,...] [--costs F,B[,I,W]]\n"
		   "                    [--lower] [--format text|csv|csv-comms|json|svg]\n"
		   "                    [--out FILE]\n\n"
		   "Builds the policy's action lists. text is the ASCII timeline (F=1, B=2\n"
		   "unless --costs); csv is PyTorch's compute-only format (one line per rank;\n"
		   "with --lower, dpl's lowered lists); csv-comms is the lowered lists as\n"
		   "PyTorch's _PipelineScheduleRuntime runs them with _load_csv(FILE,\n"
		   "format=\"compute_comms\") (implies --lower: no STEP, a WAIT_REDUCE_GRAD\n"
		   "after each REDUCE_GRAD, a WAIT_SEND_F/B for each send);\n"
		   "json is dpl's schedule file; svg is the simulated timeline as a picture\n"
		   "(same costs as text: one row per rank, the bubble shaded, a legend, and\n"
		   "makespan, bubble and peak activations per rank in the caption). --lower\n"
		   "adds sends, receives, REDUCE_GRAD and STEP. --out writes the file whole\n"
		   "or not at all (default stdout). Every flag is given at most once.\n\n"
		   "Exit status: 0 printed or written; 1 the build, lowering or an output\n"
		   "write failed; 2 bad flags or values, a refused output path, or a\n"
		   "schedule too large for memory.\n\n");
	sched_opts_usage(f);
}

static int run(int argc, char **argv)
{
	const char *cmd = "schedule", *format = "text", *outpath = "-", *v;
	struct sched_opts o = {0};
	struct cli_out out;
	dpl_schedule *s = NULL;
	dpl_sim *sim = NULL;
	bool lower = false;
	int rc = CLI_OK, i;

	for (i = 1; i < argc; i++) {
		int t = sched_opts_take(cmd, &o, argc, argv, &i);

		if (t < 0) {
			rc = -t;
			goto done;
		}
		if (t == 1)
			continue;
		if (cli_flag(argc, argv, &i, "--format", &v)) {
			if (v == NULL) {
				rc = cli_missing(cmd, "--format");
				goto done;
			}
			if (strcmp(v, "text") && strcmp(v, "csv") &&
			    strcmp(v, "csv-comms") && strcmp(v, "json") &&
			    strcmp(v, "svg")) {
				rc = cli_usage_error(cmd, "--format: expected text, "
							  "csv, csv-comms, json or "
							  "svg (got '%s')",
						     v);
				goto done;
			}
			format = v;
		} else if (cli_flag(argc, argv, &i, "--out", &v)) {
			if (v == NULL || v[0] == '\0') {
				rc = cli_missing(cmd, "--out");
				goto done;
			}
			outpath = v;
		} else if (cli_switch(argv, i, "--lower")) {
			lower = true;
		} else {
			rc = cli_unknown(cmd, argv[i]);
			goto done;
		}
	}
	if (strcmp(format, "csv-comms") == 0)
		lower = true;
	/* What the estimate of the schedule's memory must count. */
	o.uses = SCHED_USE_KNOWN | (lower ? SCHED_USE_LOWER : 0) |
		 (!strcmp(format, "text") || !strcmp(format, "svg")
			  ? SCHED_USE_SIM
			  : 0);
	if ((rc = cli_out_check(cmd, outpath)))
		goto done;
	if ((rc = sched_opts_build(cmd, &o, &s)))
		goto done;
	if (lower && dpl_schedule_lower(s) != 0) {
		rc = cli_fail(cmd, "%s", dpl_last_error());
		goto done;
	}
	if (strcmp(format, "text") == 0 || strcmp(format, "svg") == 0) {
		struct dpl_sim_params p = {0};

		if (o.have_costs)
			p.uniform = o.costs;
		if (dpl_sim_run(s, &p, &sim) != 0) {
			rc = cli_fail(cmd, "%s", dpl_last_error());
			goto done;
		}
	}
	if ((rc = cli_out_open(cmd, outpath, &out)))
		goto done;
	if (strcmp(format, "csv") == 0)
		rc = dpl_schedule_write_csv(s, out.f);
	else if (strcmp(format, "csv-comms") == 0)
		rc = dpl_schedule_write_csv_comms(s, out.f);
	else if (strcmp(format, "json") == 0)
		rc = dpl_schedule_write_json(s, out.f);
	else if (strcmp(format, "svg") == 0)
		rc = dpl_sim_write_svg(sim, s, out.f, NULL);
	else
		rc = dpl_sim_write_ascii(sim, out.f, 0, 0);
	if (rc) {
		rc = cli_out_fail(&out, dpl_last_error());
		goto done;
	}
	rc = cli_out_commit(cmd, &out);
done:
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
	sched_opts_free(&o);
	return rc;
}

const struct dpl_cli_cmd dpl_cli_cmd_schedule = {
	.name = "schedule",
	.summary = "build a policy's action lists (timeline, PyTorch CSV, JSON, SVG)",
	.run = run,
	.usage = usage,
};
