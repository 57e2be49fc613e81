/* cmd_simulate.c - `dpl simulate`: replay a schedule with costs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <dpl/json.h>
#include <dpl/plan.h>
#include <dpl/sim.h>

#include "sched_opts.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: dpl simulate (--schedule FILE | --plan PLAN.json |\n"
		"                     --stages S --microbatches M --policy P ...)\n"
		"                    [--costs F,B[,I,W]] [--stage-costs FILE.json]\n"
		"                    [--latency L] [--bandwidth BYTES_PER_UNIT]\n"
		"                    [--activation-bytes N] [--replicas R] [--param-bytes N]\n"
		"                    [--ar-bandwidth BYTES_PER_UNIT] [--ar-latency L]\n"
		"                    [--step-cost T] [--trace OUT.json] [--svg OUT.svg]\n"
		"                    [--timeline] [--json]\n\n"
		"Replays a schedule (PyTorch CSV or dpl JSON file, or built from the flags)\n"
		"and prints its makespan, bubble fraction, and per stage the busy time, peak\n"
		"in-flight micro-batches and peak activation bytes. --plan replays a plan\n"
		"written by `dpl plan --out` with its own per-stage costs, transfers and\n"
		"allreduce times, in milliseconds (cost flags are refused with it; the\n"
		"file has no activation sizes, so peak activation bytes are unknown).\n"
		"--trace writes a Chrome\n"
		"trace (open it in Perfetto); --svg draws the timeline as an SVG picture\n"
		"(one row per rank, transfers as thin lines, the bubble shaded, peak\n"
		"activations per rank in the caption); --timeline prints the ASCII\n"
		"timeline. Files appear whole or not at all.\n"
		"--stage-costs gives per-stage values: {\"stages\": [{\"f\": 1, \"b\": 2,\n"
		"\"i\": 1, \"w\": 1, \"activation_bytes\": N, \"grad_bytes\": N,\n"
		"\"param_bytes\": N, \"replicas\": R}, ...]} (every key optional).\n"
		"A schedule whose size estimate (compute actions x %u bytes) exceeds\n"
		"physical memory, RLIMIT_AS or RLIMIT_DATA is refused before it is built.\n"
		"Every flag is given at most once.\n\n"
		"Exit status: 0 done; 1 the simulation failed or an output file could\n"
		"not be written; 2 bad flags, values or input files, a refused output\n"
		"path, or a schedule too large for memory.\n\n",
		SCHED_EST_BUILD_BYTES + SCHED_EST_SIM_BYTES);
	sched_opts_usage(f);
}

struct stage_vals {
	struct dpl_stage_cost *cost;
	uint64_t *act, *grad, *param;
	uint32_t *rep;
	bool have_grad;
};

static int get_num(const char *cmd, const char *path, const cJSON *o,
		   const char *key, size_t idx, double max, double *out)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);

	if (it == NULL)
		return 0;
	if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) ||
	    it->valuedouble < 0 || it->valuedouble > max)
		return cli_usage_error(cmd, "%s: stages[%zu].%s: expected a "
					    "number in [0, %g]",
				       path, idx, key, max);
	*out = it->valuedouble;
	return 0;
}

static int load_stage_costs(const char *cmd, const char *path, uint32_t S,
			    struct stage_vals *sv)
{
	static const char *const keys[] = {"f", "b", "i", "w",
					   "activation_bytes", "grad_bytes",
					   "param_bytes", "replicas"};
	char *buf;
	size_t len, n;
	cJSON *root = NULL;
	const cJSON *arr, *it;
	int rc;

	if ((rc = cli_read_file(cmd, path, &buf, &len)))
		return rc;
	root = cJSON_ParseWithLength(buf, len);
	free(buf);
	if (root == NULL || !cJSON_IsObject(root)) {
		rc = cli_usage_error(cmd, "%s: not a JSON object", path);
		goto out;
	}
	cJSON_ArrayForEach(it, root)
	{
		if (strcmp(it->string, "stages") != 0) {
			rc = cli_usage_error(cmd, "%s: unknown key '%s'", path,
					     it->string);
			goto out;
		}
	}
	arr = cJSON_GetObjectItemCaseSensitive(root, "stages");
	if (!cJSON_IsArray(arr)) {
		rc = cli_usage_error(cmd, "%s: \"stages\" must be an array",
				     path);
		goto out;
	}
	n = (size_t)cJSON_GetArraySize(arr);
	if (n != S) {
		rc = cli_usage_error(cmd, "%s: %zu stage entries for a schedule "
					  "of %u stages",
				     path, n, S);
		goto out;
	}
	n = 0;
	cJSON_ArrayForEach(it, arr)
	{
		double v[8] = {0};
		const cJSON *k;
		size_t j;

		if (!cJSON_IsObject(it)) {
			rc = cli_usage_error(cmd, "%s: stages[%zu] must be an "
						  "object",
					     path, n);
			goto out;
		}
		cJSON_ArrayForEach(k, it)
		{
			for (j = 0; j < 8 && strcmp(k->string, keys[j]); j++)
				;
			if (j == 8) {
				rc = cli_usage_error(cmd, "%s: stages[%zu]: unknown "
							  "key '%s'",
						     path, n, k->string);
				goto out;
			}
		}
		v[7] = 1;
		for (j = 0; j < 8; j++)
			if ((rc = get_num(cmd, path, it, keys[j], n,
					  j < 4 ? 1e12 : j == 7 ? 1e6 : 1e18,
					  &v[j])))
				goto out;
		if (v[7] < 1 || v[7] != floor(v[7])) {
			rc = cli_usage_error(cmd, "%s: stages[%zu].replicas: "
						  "expected an integer >= 1",
					     path, n);
			goto out;
		}
		if (v[0] + v[1] + v[2] + v[3] > 0)
			sv->cost[n] = (struct dpl_stage_cost){v[0], v[1], v[2],
							      v[3]};
		if (cJSON_GetObjectItemCaseSensitive(it, "activation_bytes"))
			sv->act[n] = (uint64_t)v[4];
		if (cJSON_GetObjectItemCaseSensitive(it, "grad_bytes")) {
			sv->grad[n] = (uint64_t)v[5];
			sv->have_grad = true;
		}
		if (cJSON_GetObjectItemCaseSensitive(it, "param_bytes"))
			sv->param[n] = (uint64_t)v[6];
		sv->rep[n] = (uint32_t)v[7];
		n++;
	}
out:
	cJSON_Delete(root);
	return rc;
}

/* Load a plan file and build its schedule and simulator parameters. */
static int load_plan(const char *cmd, const char *path, dpl_schedule **s,
		     struct dpl_plan_sim *ps)
{
	struct dpl_plan plan;
	char *buf;
	size_t len;
	int rc;

	if ((rc = cli_read_file(cmd, path, &buf, &len)))
		return rc;
	rc = dpl_plan_read_json(buf, len, &plan);
	free(buf);
	if (rc)
		return cli_usage_error(cmd, "%s: %s", path, dpl_last_error());
	if (dpl_plan_schedule(&plan, s, ps) != 0)
		return cli_usage_error(cmd, "%s: %s", path, dpl_last_error());
	return CLI_OK;
}

/*
 * bytes_known: false for --plan, whose file has per-stage times but not
 * activation sizes (its transfers are given to the simulator as times),
 * so peak activation bytes are reported as unknown.
 */
static void print_text(const dpl_schedule *s, const dpl_sim *sim,
		       bool bytes_known)
{
	struct dpl_sim_summary sum;
	struct dpl_sim_stage_stats st;

	dpl_sim_summary(sim, &sum);
	printf("schedule: %s, %u stages on %u ranks, %u micro-batches%s\n",
	       dpl_policy_name(dpl_schedule_policy(s)), sum.stages, sum.ranks,
	       dpl_schedule_microbatches(s),
	       dpl_schedule_is_lowered(s) ? " (lowered)" : "");
	printf("makespan %.6g   bubble %.2f%%   busy %.6g\n", sum.makespan,
	       100 * sum.bubble_fraction, sum.total_busy);
	printf("%6s %5s %12s %13s %22s %12s\n", "stage", "rank", "busy",
	       "peak_inflight", "peak_activation_bytes", "finish");
	for (uint32_t i = 0; i < sum.stages; i++) {
		dpl_sim_stage(sim, i, &st);
		char bytes[24] = "-";

		if (bytes_known)
			snprintf(bytes, sizeof bytes, "%llu",
				 (unsigned long long)st.peak_activation_bytes);
		printf("%6u %5u %12.6g %13u %22s %12.6g\n", i, st.rank, st.busy,
		       st.peak_inflight, bytes, st.finish);
	}
}

static int print_json(const char *cmd, const dpl_schedule *s,
		      const dpl_sim *sim, bool bytes_known)
{
	struct dpl_sim_summary sum;
	cJSON *o = cJSON_CreateObject(), *arr, *busy;
	char *text;

	dpl_sim_summary(sim, &sum);
	cJSON_AddStringToObject(o, "policy",
				dpl_policy_name(dpl_schedule_policy(s)));
	cJSON_AddNumberToObject(o, "ranks", sum.ranks);
	cJSON_AddNumberToObject(o, "microbatches", dpl_schedule_microbatches(s));
	cJSON_AddNumberToObject(o, "makespan", sum.makespan);
	cJSON_AddNumberToObject(o, "bubble_fraction", sum.bubble_fraction);
	cJSON_AddNumberToObject(o, "total_busy", sum.total_busy);
	busy = cJSON_AddArrayToObject(o, "rank_busy");
	for (uint32_t r = 0; r < sum.ranks; r++)
		cJSON_AddItemToArray(busy,
				     cJSON_CreateNumber(dpl_sim_rank_busy(sim, r)));
	arr = cJSON_AddArrayToObject(o, "stages");
	for (uint32_t i = 0; i < sum.stages; i++) {
		struct dpl_sim_stage_stats st;
		cJSON *e = cJSON_CreateObject();

		dpl_sim_stage(sim, i, &st);
		cJSON_AddNumberToObject(e, "stage", i);
		cJSON_AddNumberToObject(e, "rank", st.rank);
		cJSON_AddNumberToObject(e, "busy", st.busy);
		cJSON_AddNumberToObject(e, "peak_inflight", st.peak_inflight);
		if (bytes_known)
			cJSON_AddNumberToObject(e, "peak_activation_bytes",
						(double)st.peak_activation_bytes);
		else
			cJSON_AddNullToObject(e, "peak_activation_bytes");
		cJSON_AddNumberToObject(e, "finish", st.finish);
		cJSON_AddNumberToObject(e, "reduce_start", st.reduce_start);
		cJSON_AddNumberToObject(e, "reduce_end", st.reduce_end);
		cJSON_AddItemToArray(arr, e);
	}
	text = cJSON_Print(o);
	cJSON_Delete(o);
	if (text == NULL)
		return cli_fail(cmd, "out of memory");
	puts(text);
	free(text);
	return CLI_OK;
}

/* The picture; a plan's times are milliseconds and its "bytes" are not. */
static int write_svg(const char *cmd, const char *path, const dpl_schedule *s,
		     const dpl_sim *sim, bool from_plan)
{
	struct dpl_sim_svg_params sp = {.transfers = 1};
	struct cli_out out;
	int rc;

	if (from_plan) {
		sp.hide_bytes = 1;
		sp.time_unit = "ms";
	}
	if ((rc = cli_out_open(cmd, path, &out)))
		return rc;
	if (dpl_sim_write_svg(sim, s, out.f, &sp) != 0)
		return cli_out_fail(&out, dpl_last_error());
	return cli_out_commit(cmd, &out);
}

static int run(int argc, char **argv)
{
	const char *cmd = "simulate", *v, *schedule = NULL, *costs_path = NULL,
		   *trace = NULL, *plan = NULL, *svg = NULL;
	struct dpl_plan_sim *ps = NULL;
	int cost_flags = 0;
	struct sched_opts o = {0};
	struct dpl_sim_params p = {0};
	struct stage_vals sv = {0};
	uint64_t act_all = 0, param_all = 0;
	uint32_t rep_all = 1, S;
	bool json = false, timeline = false;
	dpl_schedule *s = NULL;
	dpl_sim *sim = NULL;
	int rc = CLI_OK, i;

	o.uses = SCHED_USE_KNOWN | SCHED_USE_SIM;
	for (i = 1; i < argc; i++) {
		int t = sched_opts_take(cmd, &o, argc, argv, &i);

		if (t < 0) {
			rc = -t;
			goto done;
		}
		if (t == 1)
			continue;
		if (cli_flag(argc, argv, &i, "--schedule", &v)) {
			if (!v || !*v) {
				rc = cli_missing(cmd, "--schedule");
				goto done;
			}
			schedule = v;
		} else if (cli_flag(argc, argv, &i, "--plan", &v)) {
			if (!v || !*v) {
				rc = cli_missing(cmd, "--plan");
				goto done;
			}
			plan = v;
		} else if (cli_flag(argc, argv, &i, "--stage-costs", &v)) {
			cost_flags++;
			if (!v || !*v) {
				rc = cli_missing(cmd, "--stage-costs");
				goto done;
			}
			costs_path = v;
		} else if (cli_flag(argc, argv, &i, "--trace", &v)) {
			if (!v || !*v) {
				rc = cli_missing(cmd, "--trace");
				goto done;
			}
			trace = v;
		} else if (cli_flag(argc, argv, &i, "--svg", &v)) {
			if (!v || !*v) {
				rc = cli_missing(cmd, "--svg");
				goto done;
			}
			svg = v;
		} else if (cli_flag(argc, argv, &i, "--latency", &v)) {
			cost_flags++;
			rc = cli_double(cmd, "--latency", v, 0, 1e12,
					&p.link_latency);
		} else if (cli_flag(argc, argv, &i, "--bandwidth", &v)) {
			cost_flags++;
			rc = cli_double(cmd, "--bandwidth", v, 1e-12, 1e18,
					&p.link_bandwidth);
		} else if (cli_flag(argc, argv, &i, "--ar-bandwidth", &v)) {
			cost_flags++;
			rc = cli_double(cmd, "--ar-bandwidth", v, 1e-12, 1e18,
					&p.ar_bandwidth);
		} else if (cli_flag(argc, argv, &i, "--ar-latency", &v)) {
			cost_flags++;
			rc = cli_double(cmd, "--ar-latency", v, 0, 1e12,
					&p.ar_latency);
		} else if (cli_flag(argc, argv, &i, "--step-cost", &v)) {
			rc = cli_double(cmd, "--step-cost", v, 0, 1e12,
					&p.step_cost);
		} else if (cli_flag(argc, argv, &i, "--activation-bytes", &v)) {
			cost_flags++;
			rc = cli_u64(cmd, "--activation-bytes", v, 0,
				     (uint64_t)1 << 50, &act_all);
		} else if (cli_flag(argc, argv, &i, "--param-bytes", &v)) {
			cost_flags++;
			rc = cli_u64(cmd, "--param-bytes", v, 0,
				     (uint64_t)1 << 50, &param_all);
		} else if (cli_flag(argc, argv, &i, "--replicas", &v)) {
			cost_flags++;
			rc = cli_u32(cmd, "--replicas", v, 1, 1u << 20, &rep_all);
		} else if (cli_switch(argv, i, "--json")) {
			json = true;
		} else if (cli_switch(argv, i, "--timeline")) {
			timeline = true;
		} else {
			rc = cli_unknown(cmd, argv[i]);
		}
		if (rc)
			goto done;
	}
	if ((trace && (rc = cli_out_check(cmd, trace))) ||
	    (svg && (rc = cli_out_check(cmd, svg))))
		goto done;
	if ((schedule != NULL) + (plan != NULL) +
		(o.have_stages || o.have_microbatches || o.have_policy) > 1) {
		rc = cli_usage_error(cmd, "--schedule, --plan and --stages/"
					  "--microbatches/--policy exclude each "
					  "other");
		goto done;
	}
	if ((schedule != NULL || plan != NULL) &&
	    (o.cap || o.cap_all || o.bytes.cap || o.bytes.act ||
	     o.transfer != 0 || o.chunks)) {
		rc = cli_usage_error(cmd, "--%s fixes the schedule; --chunks, "
					  "--cap, --cap-bytes, --act-bytes and "
					  "--transfer only shape one built from "
					  "--stages/--microbatches/--policy",
				     schedule ? "schedule" : "plan");
		goto done;
	}
	if (plan && (cost_flags || o.have_costs)) {
		rc = cli_usage_error(cmd, "--plan carries its own costs; cost, "
					  "link and allreduce flags are refused "
					  "with it");
		goto done;
	}
	if (plan) {
		ps = calloc(1, sizeof *ps);
		if (ps == NULL) {
			rc = cli_fail(cmd, "out of memory");
			goto done;
		}
		rc = load_plan(cmd, plan, &s, ps);
	} else if (schedule) {
		rc = sched_load_file(cmd, schedule, &s);
	} else {
		rc = sched_opts_build(cmd, &o, &s);
	}
	if (rc)
		goto done;
	S = dpl_schedule_stages(s);
	sv.cost = calloc(S, sizeof *sv.cost);
	sv.act = calloc(S, sizeof *sv.act);
	sv.grad = calloc(S, sizeof *sv.grad);
	sv.param = calloc(S, sizeof *sv.param);
	sv.rep = calloc(S, sizeof *sv.rep);
	if (!sv.cost || !sv.act || !sv.grad || !sv.param || !sv.rep) {
		rc = cli_fail(cmd, "out of memory");
		goto done;
	}
	for (uint32_t k = 0; k < S; k++) {
		sv.cost[k] = o.costs;
		sv.act[k] = act_all;
		sv.param[k] = param_all;
		sv.rep[k] = rep_all;
	}
	if (costs_path && (rc = load_stage_costs(cmd, costs_path, S, &sv)))
		goto done;
	p.costs = sv.cost;
	p.activation_bytes = sv.act;
	p.grad_bytes = sv.have_grad ? sv.grad : NULL;
	p.param_bytes = sv.param;
	p.replicas = sv.rep;
	if (ps)
		p = ps->params;
	if (dpl_sim_run(s, &p, &sim) != 0) {
		rc = cli_fail(cmd, "%s", dpl_last_error());
		goto done;
	}
	if (trace) {
		struct cli_out out;

		if ((rc = cli_out_open(cmd, trace, &out)))
			goto done;
		if (dpl_sim_write_trace(sim, out.f, 0) != 0) {
			rc = cli_out_fail(&out, dpl_last_error());
			goto done;
		}
		if ((rc = cli_out_commit(cmd, &out)))
			goto done;
	}
	if (svg && (rc = write_svg(cmd, svg, s, sim, ps != NULL)))
		goto done;
	if (json) {
		rc = print_json(cmd, s, sim, ps == NULL);
	} else {
		print_text(s, sim, ps == NULL);
		if (timeline && dpl_sim_write_ascii(sim, stdout, 0, 120) != 0)
			rc = cli_fail(cmd, "%s", dpl_last_error());
	}
done:
	free(ps);
	free(sv.cost);
	free(sv.act);
	free(sv.grad);
	free(sv.param);
	free(sv.rep);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
	sched_opts_free(&o);
	return rc;
}

const struct dpl_cli_cmd dpl_cli_cmd_simulate = {
	.name = "simulate",
	.summary = "replay a schedule: makespan, bubble, memory, trace",
	.run = run,
	.usage = usage,
};
