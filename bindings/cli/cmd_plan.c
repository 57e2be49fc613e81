/* cmd_plan.c - `dpl plan`: DAPPLE's planner on a layer profile. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dpl/dpl.h>
#include <dpl/json.h>
#include <dpl/plan.h>

#include "cli.h"

#ifndef DPL_DEFAULT_PROFILES_DIR
#define DPL_DEFAULT_PROFILES_DIR "../shared/profiles"
#endif

static const char *const CMD = "plan";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: dpl plan --profile FILE --pbs N --gbs N --cluster paper-a|paper-b|paper-c|FILE.json\n"
		"                [--optimizer-factor X] [--max-stages N] [--microbatch-size N]\n"
		"                [--rank sim|pivot] [--format text|json] [--out PLAN.json]\n"
		"                [--trace OUT.json]\n\n"
		"Chooses stages, replication per stage, devices, micro-batching and schedule\n"
		"policy for synchronous pipelined data-parallel training (DAPPLE's planner),\n"
		"and prints it with its predicted iteration time, memory per device and the\n"
		"baselines: pure data parallelism, PipeDream's planner and an even GPipe split.\n\n"
		"  --profile FILE        PipeDream graph text or dpl JSON profile. A bare name\n"
		"                        (vgg-19-pbs-32) is looked up in $DPL_PROFILES, then in\n"
		"                        %s\n"
		"  --pbs N               batch size the profile was measured at\n"
		"  --gbs N               global batch size (samples per iteration)\n"
		"  --cluster C           paper-a (2 x 8 V100, NVLink, 25 Gbit/s), paper-b\n"
		"                        (16 x 1, 25 Gbit/s), paper-c (16 x 1, 10 Gbit/s), or a\n"
		"                        JSON cluster file\n"
		"  --optimizer-factor X  optimizer state bytes per weight byte (default 2: Adam;\n"
		"                        1: momentum; 0: plain SGD)\n"
		"  --max-stages N        at most N stages\n"
		"  --microbatch-size N   use this micro-batch size only\n"
		"  --rank sim|pivot      rank candidates by the simulator (default) or by\n"
		"                        DAPPLE's pivot formula alone\n"
		"  --format text|json    what to print (default text)\n"
		"  --out PLAN.json       also write the plan file (read by dpl simulate --plan)\n"
		"  --trace OUT.json      Chrome trace of the plan's simulated iteration\n\n"
		"Every flag is given at most once.\n\n"
		"Exit status: 0 planned; 1 no plan fits memory (the message names the stage\n"
		"and the overflow) or an output file could not be written; 2 bad flags or\n"
		"input, or a refused output path.\n",
		DPL_DEFAULT_PROFILES_DIR);
}

static int exists(const char *path)
{
	return access(path, R_OK) == 0;
}

/* Resolve --profile: a path, or a bare name in the profile directories. */
static char *resolve_profile(const char *arg)
{
	const char *dirs[2] = {getenv("DPL_PROFILES"), DPL_DEFAULT_PROFILES_DIR};
	static const char *const sfx[2] = {"", ".txt"};

	if (exists(arg) || strchr(arg, '/'))
		return strdup(arg);
	for (int d = 0; d < 2; d++) {
		if (dirs[d] == NULL || *dirs[d] == '\0')
			continue;
		for (int s = 0; s < 2; s++) {
			size_t n = strlen(dirs[d]) + strlen(arg) + 8;
			char *p = malloc(n);

			if (p == NULL)
				return NULL;
			snprintf(p, n, "%s/%s%s", dirs[d], arg, sfx[s]);
			if (exists(p))
				return p;
			free(p);
		}
	}
	return strdup(arg);
}

static int load_profile(const char *arg, dpl_profile **out, char **shown)
{
	char *path = resolve_profile(arg), *buf;
	size_t len, i = 0;
	int rc, json;

	if (path == NULL)
		return cli_fail(CMD, "out of memory");
	if ((rc = cli_read_file(CMD, path, &buf, &len))) {
		free(path);
		return rc;
	}
	while (i < len && strchr(" \t\r\n", buf[i]))
		i++;
	json = i < len && buf[i] == '{';
	if (json)
		rc = dpl_profile_read_json(buf, len, out);
	else
		rc = dpl_profile_parse(buf, len, path, out);
	free(buf);
	if (rc) {
		/* the text parser's messages start with the path already */
		if (json)
			rc = cli_usage_error(CMD, "%s: %s", path,
					     dpl_last_error());
		else
			rc = cli_usage_error(CMD, "%s", dpl_last_error());
		free(path);
		return rc;
	}
	*shown = path;
	return 0;
}

static int load_cluster(const char *arg, struct dpl_cluster *c)
{
	char *buf;
	size_t len;
	int rc;

	if (dpl_cluster_preset(arg, c) == 0)
		return 0;
	if (!exists(arg))
		return cli_usage_error(CMD,
				       "--cluster: '%s' is neither a preset "
				       "(paper-a, paper-b, paper-c) nor a "
				       "readable file",
				       arg);
	if ((rc = cli_read_file(CMD, arg, &buf, &len)))
		return rc;
	rc = dpl_cluster_read_json(buf, len, c);
	free(buf);
	if (rc)
		return cli_usage_error(CMD, "%s: %s", arg, dpl_last_error());
	if (c->name[0] == '\0') {
		const char *base = strrchr(arg, '/');

		snprintf(c->name, sizeof c->name, "%s", base ? base + 1 : arg);
	}
	return 0;
}

/* "0-10,12" */
static void fmt_devices(uint64_t m, char *buf, size_t n)
{
	size_t off = 0;
	int first = 1;

	buf[0] = '\0';
	while (m && off < n) {
		int a = __builtin_ctzll(m), b = a;

		while (b + 1 < 64 && (m >> (b + 1) & 1))
			b++;
		off += (size_t)snprintf(buf + off, n - off, "%s%d", first ? "" : ",",
					a);
		if (b > a && off < n)
			off += (size_t)snprintf(buf + off, n - off, "-%d", b);
		first = 0;
		m &= b >= 63 ? 0 : ~((2ULL << b) - 1);
	}
}

static void print_stages(FILE *f, const dpl_profile *prof,
			 const struct dpl_plan *pl)
{
	fprintf(f, "  %-5s %-9s %-34s %-12s %4s %9s %9s %8s %9s %4s %9s\n",
		"stage", "layers", "first .. last layer", "devices", "R",
		"F ms", "B ms", "send ms", "AR ms", "live", "mem GB");
	for (uint32_t s = 0; s < pl->stages; s++) {
		const struct dpl_plan_stage *st = &pl->stage[s];
		char lay[32], names[64], dev[128];

		snprintf(lay, sizeof lay, "%u-%u", st->first_layer,
			 st->last_layer);
		snprintf(names, sizeof names, "%.15s .. %.15s",
			 dpl_profile_layer(prof, st->first_layer)->name,
			 dpl_profile_layer(prof, st->last_layer)->name);
		fmt_devices(st->devices, dev, sizeof dev);
		fprintf(f,
			"  %-5u %-9s %-34s %-12s %4u %9.3f %9.3f %8.3f %9.3f %4u "
			"%9.2f\n",
			s, lay, names, dev, st->replicas, st->forward_ms,
			st->backward_ms, st->send_ms, st->allreduce_ms,
			st->inflight, st->memory_bytes / 1e9);
	}
}

static void print_text(FILE *f, const char *path, const dpl_profile *prof,
		       const struct dpl_cluster *c,
		       const struct dpl_plan_params *p,
		       const struct dpl_plan_report *r)
{
	const struct dpl_plan *b = &r->best;

	fprintf(f,
		"plan for %s (%u layers) on %s (%u x %u devices, %.3g GB each)\n"
		"global batch %u, profile batch %u, optimizer factor %g\n\n",
		path, dpl_profile_layers(prof), c->name, c->machines,
		c->devices_per_machine, c->device_memory / 1e9,
		p->global_batch, p->profile_batch, p->optimizer_factor);
	print_stages(f, prof, b);
	fprintf(f,
		"\n  micro-batch size %u, %u micro-batches, policy %s, %u "
		"devices\n"
		"  predicted iteration time %.3f ms (%s; pivot model %.3f ms, "
		"pivot %s %u)\n"
		"  speedup over one device  %.2fx\n"
		"  peak memory per device   %.2f GB of %.2f GB (stage %u)\n",
		b->microbatch_size, b->microbatches, dpl_policy_name(b->policy),
		b->devices_used, b->predicted_ms,
		p->rank == DPL_PLAN_RANK_PIVOT ? "pivot formula" : "simulated",
		b->pivot_ms, b->pivot_is_transfer ? "transfer after stage" : "stage",
		b->pivot_stage, r->single_device_ms / b->predicted_ms,
		b->peak_memory_bytes / 1e9, c->device_memory / 1e9,
		b->worst_stage);
	/* One micro-batch's activations per device and stage: the figure
	 * byte caps take (dpl schedule --cap-bytes B --act-bytes ...). */
	fprintf(f, "  activations per micro-batch (--act-bytes) ");
	for (uint32_t s = 0; s < b->stages; s++)
		fprintf(f, "%s%llu", s ? "," : "",
			(unsigned long long)b->stage[s].activation_bytes);
	fprintf(f, "\n");
	fprintf(f, "\n  %-14s %13s %5s %9s  %s\n", "baseline", "predicted ms",
		"fits", "speedup", "plan");
	for (int k = 0; k < DPL_BASELINE__COUNT; k++) {
		const struct dpl_plan *bp = &r->baseline[k];
		char shape[160];
		size_t off = 0;

		if (!r->baseline_found[k]) {
			fprintf(f, "  %-14s %13s %5s %9s  %s\n",
				dpl_plan_baseline_name((enum dpl_plan_baseline)k),
				"-", "-", "-", "no plan");
			continue;
		}
		for (uint32_t s = 0; s < bp->stages && off < sizeof shape; s++)
			off += (size_t)snprintf(shape + off, sizeof shape - off,
						"%s%u", s ? ":" : "",
						bp->stage[s].replicas);
		if (off < sizeof shape)
			snprintf(shape + off, sizeof shape - off,
				 " (layers split %u way%s), mb %u x %u, %s",
				 bp->stages, bp->stages > 1 ? "s" : "",
				 bp->microbatch_size, bp->microbatches,
				 dpl_policy_name(bp->policy));
		fprintf(f, "  %-14s %13.3f %5s %8.2fx  %s\n",
			dpl_plan_baseline_name((enum dpl_plan_baseline)k),
			bp->predicted_ms, bp->fits ? "yes" : "no",
			bp->predicted_ms / b->predicted_ms, shape);
	}
	fprintf(f,
		"\n  chosen from %s; %u DP runs, %llu partial plans kept, %u "
		"simulations%s\n",
		r->from_baseline < 0
		    ? "DAPPLE's DP"
		    : dpl_plan_baseline_name(
			  (enum dpl_plan_baseline)r->from_baseline),
		r->dp_runs, (unsigned long long)r->dp_states, r->simulated,
		r->exact ? ""
			 : "\n  (search states were capped or the work limit "
			   "was reached: not proven pivot-optimal)");
}

static int write_trace(const char *path, const struct dpl_plan *pl)
{
	struct dpl_plan_sim *ps = malloc(sizeof *ps);
	struct cli_out o;
	dpl_schedule *s = NULL;
	dpl_sim *sim = NULL;
	int rc;

	if (ps == NULL)
		return cli_fail(CMD, "out of memory");
	if (dpl_plan_schedule(pl, &s, ps) || dpl_sim_run(s, &ps->params, &sim)) {
		rc = cli_fail(CMD, "simulating the plan: %s", dpl_last_error());
		goto out;
	}
	if ((rc = cli_out_open(CMD, path, &o)))
		goto out;
	if (dpl_sim_write_trace(sim, o.f, 1000) != 0) {
		rc = cli_out_fail(&o, dpl_last_error());
		goto out;
	}
	rc = cli_out_commit(CMD, &o);
out:
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
	free(ps);
	return rc;
}

static int run(int argc, char **argv)
{
	const char *profile = NULL, *cluster = NULL, *out = NULL, *trace = NULL;
	const char *format = "text", *val, *rank = "sim";
	struct dpl_plan_params p = {.optimizer_factor = 2};
	struct dpl_plan_report *r = NULL;
	struct dpl_cluster c;
	dpl_profile *prof = NULL;
	char *shown = NULL;
	int rc = 0, have_pbs = 0, have_gbs = 0;

	for (int i = 1; i < argc; i++) {
		if (cli_flag(argc, argv, &i, "--profile", &val)) {
			if (!val)
				return cli_missing(CMD, "--profile");
			profile = val;
		} else if (cli_flag(argc, argv, &i, "--pbs", &val)) {
			if (!val)
				return cli_missing(CMD, "--pbs");
			if ((rc = cli_u32(CMD, "--pbs", val, 1, 1u << 30,
					  &p.profile_batch)))
				return rc;
			have_pbs = 1;
		} else if (cli_flag(argc, argv, &i, "--gbs", &val)) {
			if (!val)
				return cli_missing(CMD, "--gbs");
			if ((rc = cli_u32(CMD, "--gbs", val, 1, 1u << 24,
					  &p.global_batch)))
				return rc;
			have_gbs = 1;
		} else if (cli_flag(argc, argv, &i, "--cluster", &val)) {
			if (!val)
				return cli_missing(CMD, "--cluster");
			cluster = val;
		} else if (cli_flag(argc, argv, &i, "--optimizer-factor", &val)) {
			if (!val)
				return cli_missing(CMD, "--optimizer-factor");
			if ((rc = cli_double(CMD, "--optimizer-factor", val, 0, 64,
					     &p.optimizer_factor)))
				return rc;
		} else if (cli_flag(argc, argv, &i, "--max-stages", &val)) {
			if (!val)
				return cli_missing(CMD, "--max-stages");
			if ((rc = cli_u32(CMD, "--max-stages", val, 1,
					  DPL_PLAN_MAX_STAGES, &p.max_stages)))
				return rc;
		} else if (cli_flag(argc, argv, &i, "--microbatch-size", &val)) {
			if (!val)
				return cli_missing(CMD, "--microbatch-size");
			if ((rc = cli_u32(CMD, "--microbatch-size", val, 1,
					  1u << 24, &p.microbatch_size)))
				return rc;
		} else if (cli_flag(argc, argv, &i, "--rank", &val)) {
			if (!val)
				return cli_missing(CMD, "--rank");
			rank = val;
		} else if (cli_flag(argc, argv, &i, "--format", &val)) {
			if (!val)
				return cli_missing(CMD, "--format");
			format = val;
		} else if (cli_flag(argc, argv, &i, "--out", &val)) {
			if (!val)
				return cli_missing(CMD, "--out");
			out = val;
		} else if (cli_flag(argc, argv, &i, "--trace", &val)) {
			if (!val)
				return cli_missing(CMD, "--trace");
			trace = val;
		} else {
			return cli_unknown(CMD, argv[i]);
		}
	}
	if (!profile)
		return cli_usage_error(CMD, "--profile is required");
	if (!have_pbs)
		return cli_usage_error(CMD, "--pbs is required (the batch size "
					    "the profile was measured at)");
	if (!have_gbs)
		return cli_usage_error(CMD, "--gbs is required");
	if (!cluster)
		return cli_usage_error(CMD, "--cluster is required (paper-a, "
					    "paper-b, paper-c or a JSON file)");
	if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0)
		return cli_usage_error(CMD, "--format: '%s' is not text or json",
				       format);
	if (strcmp(rank, "sim") == 0)
		p.rank = DPL_PLAN_RANK_SIM;
	else if (strcmp(rank, "pivot") == 0)
		p.rank = DPL_PLAN_RANK_PIVOT;
	else
		return cli_usage_error(CMD, "--rank: '%s' is not sim or pivot",
				       rank);
	if (p.microbatch_size > p.global_batch)
		return cli_usage_error(CMD,
				       "--microbatch-size: %u is larger than "
				       "--gbs %u",
				       p.microbatch_size, p.global_batch);
	if ((out && (rc = cli_out_check(CMD, out))) ||
	    (trace && (rc = cli_out_check(CMD, trace))))
		return rc;
	if ((rc = load_cluster(cluster, &c)))
		return rc;
	if ((rc = load_profile(profile, &prof, &shown)))
		return rc;
	r = malloc(sizeof *r);
	if (r == NULL) {
		rc = cli_fail(CMD, "out of memory");
		goto done;
	}
	rc = dpl_plan_search(prof, &c, &p, r);
	if (rc == DPL_ENOFIT) {
		rc = cli_fail(CMD, "%s", dpl_last_error());
		goto done;
	}
	if (rc == DPL_EINVAL) {
		rc = cli_usage_error(CMD, "%s", dpl_last_error());
		goto done;
	}
	if (rc) {
		rc = cli_fail(CMD, "%s", dpl_last_error());
		goto done;
	}
	if (out) {
		struct cli_out o;

		if ((rc = cli_out_open(CMD, out, &o)))
			goto done;
		if (dpl_plan_write_json(r, prof, &c, &p, o.f)) {
			rc = cli_out_fail(&o, dpl_last_error());
			goto done;
		}
		if ((rc = cli_out_commit(CMD, &o)))
			goto done;
	}
	if (trace && (rc = write_trace(trace, &r->best)))
		goto done;
	if (strcmp(format, "json") == 0) {
		if (dpl_plan_write_json(r, prof, &c, &p, stdout)) {
			rc = cli_fail(CMD, "stdout: %s", dpl_last_error());
			goto done;
		}
	} else {
		print_text(stdout, shown, prof, &c, &p, r);
		if (fflush(stdout) != 0)
			rc = cli_fail(CMD, "stdout: write error");
	}
done:
	free(r);
	free(shown);
	dpl_profile_destroy(prof);
	return rc;
}

const struct dpl_cli_cmd dpl_cli_cmd_plan = {
    .name = "plan",
    .summary = "choose a hybrid data/pipeline plan for a layer profile",
    .run = run,
    .usage = usage,
};
