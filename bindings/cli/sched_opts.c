/* sched_opts.c - the schedule-building flags shared by several commands. */
#include <stdlib.h>
#include <string.h>

#include <dpl/csv.h>
#include <dpl/json.h>

#include "sched_opts.h"

int sched_opts_take(const char *cmd, struct sched_opts *o, int argc,
		    char **argv, int *i)
{
	const char *v;
	int rc;

	if (cli_flag(argc, argv, i, "--stages", &v)) {
		rc = cli_u32(cmd, "--stages", v, 1, CLI_MAX_STAGES, &o->stages);
		o->have_stages = true;
	} else if (cli_flag(argc, argv, i, "--microbatches", &v)) {
		rc = cli_u32(cmd, "--microbatches", v, 1, CLI_MAX_MICROBATCHES,
			     &o->microbatches);
		o->have_microbatches = true;
	} else if (cli_flag(argc, argv, i, "--chunks", &v)) {
		rc = cli_u32(cmd, "--chunks", v, 1, 64, &o->chunks);
	} else if (cli_flag(argc, argv, i, "--policy", &v)) {
		if (v == NULL)
			return -cli_missing(cmd, "--policy");
		if (dpl_policy_parse(v, &o->policy) != 0 ||
		    o->policy == DPL_POLICY_CUSTOM)
			return -cli_usage_error(cmd, "--policy: %s",
						dpl_last_error());
		o->have_policy = true;
		rc = 0;
	} else if (cli_flag(argc, argv, i, "--cap", &v)) {
		uint32_t *tmp;
		size_t n;

		if (v == NULL)
			return -cli_missing(cmd, "--cap");
		tmp = malloc(CLI_MAX_STAGES * sizeof *tmp);
		if (tmp == NULL)
			return -cli_fail(cmd, "out of memory");
		rc = cli_u32_list(cmd, "--cap", v, 1, CLI_MAX_MICROBATCHES, tmp,
				  CLI_MAX_STAGES, &n);
		if (rc) {
			free(tmp);
			return -rc;
		}
		free(o->cap);
		o->cap = NULL;
		o->cap_all = 0;
		if (n == 1) {
			o->cap_all = tmp[0];
			free(tmp);
		} else {
			o->cap = tmp;
			o->ncap = n;
		}
	} else if (cli_flag(argc, argv, i, "--costs", &v)) {
		double c[4] = {0};
		size_t n;

		rc = cli_double_list(cmd, "--costs", v, 0, 1e12, c, 4, &n);
		if (rc == 0 && n < 2)
			rc = cli_usage_error(cmd, "--costs: expected F,B or "
						  "F,B,I,W (got '%s')",
					     v);
		if (rc == 0 && n == 3)
			rc = cli_usage_error(cmd, "--costs: give I and W both "
						  "(got '%s')",
					     v);
		if (rc == 0 && c[0] + c[1] <= 0)
			rc = cli_usage_error(cmd, "--costs: F + B must be > 0 "
						  "(got '%s')",
					     v);
		o->costs = (struct dpl_stage_cost){c[0], c[1], c[2], c[3]};
		o->have_costs = true;
	} else {
		return 0;
	}
	return rc ? -rc : 1;
}

int sched_opts_build(const char *cmd, const struct sched_opts *o,
		     dpl_schedule **out)
{
	struct dpl_schedule_params p = {0};
	struct dpl_stage_cost *costs = NULL;
	int rc;

	if (!o->have_stages)
		return cli_usage_error(cmd, "--stages is required");
	if (!o->have_microbatches)
		return cli_usage_error(cmd, "--microbatches is required");
	if (!o->have_policy)
		return cli_usage_error(cmd, "--policy is required");
	if (dpl_policy_chunks(o->policy) == 1 && o->chunks < 2)
		return cli_usage_error(cmd, "--chunks: policy %s needs "
					    "--chunks V with V >= 2",
				       dpl_policy_name(o->policy));
	if (dpl_policy_chunks(o->policy) != 1 && o->chunks > 1)
		return cli_usage_error(cmd, "--chunks %u: only policies "
					    "interleaved, looped-bfs and "
					    "interleaved-zb take chunks (zbv "
					    "always has 2)",
				       o->chunks);
	if ((o->policy == DPL_POLICY_BOUNDED ||
	     o->policy == DPL_POLICY_ZB_AUTO) && !o->cap && !o->cap_all)
		return cli_usage_error(cmd, "--cap: policy %s needs --cap K "
					    "or one value per stage",
				       dpl_policy_name(o->policy));
	if (o->policy != DPL_POLICY_BOUNDED &&
	    o->policy != DPL_POLICY_ZB_AUTO && (o->cap || o->cap_all))
		return cli_usage_error(cmd, "--cap: only policies bounded and "
					    "zb-auto take a cap");
	if (o->cap && o->ncap != o->stages)
		return cli_usage_error(cmd, "--cap: %zu values for %u stages",
				       o->ncap, o->stages);
	p.stages = o->stages;
	p.microbatches = o->microbatches;
	p.policy = o->policy;
	p.chunks = o->chunks;
	p.cap_mb = o->cap;
	p.cap_all = o->cap_all;
	if (o->have_costs && (o->policy == DPL_POLICY_BOUNDED ||
			      o->policy == DPL_POLICY_ZB_AUTO ||
			      o->policy == DPL_POLICY_ZB_H2)) {
		costs = malloc(o->stages * sizeof *costs);
		if (costs == NULL)
			return cli_fail(cmd, "out of memory");
		for (uint32_t s = 0; s < o->stages; s++)
			costs[s] = o->costs;
		p.costs = costs;
	}
	rc = dpl_schedule_build(&p, out);
	free(costs);
	if (rc == DPL_EINVAL || rc == DPL_ERANGE)
		return cli_usage_error(cmd, "%s", dpl_last_error());
	if (rc)
		return cli_fail(cmd, "%s", dpl_last_error());
	return CLI_OK;
}

void sched_opts_free(struct sched_opts *o)
{
	free(o->cap);
	o->cap = NULL;
}

void sched_opts_usage(FILE *f)
{
	fprintf(f,
		"  --stages S           pipeline stages (ranks for policies with chunks), 1..%u\n"
		"  --microbatches M     micro-batches per iteration, 1..%u\n"
		"  --policy P           gpipe | 1f1b | 1f1b-comm | bounded | interleaved | zb-h1 |\n"
		"                       looped-bfs | interleaved-zb | zbv | zb-h2 | zb-auto\n"
		"  --chunks V           model chunks per rank, V >= 2 (interleaved, looped-bfs,\n"
		"                       interleaved-zb; zbv always has 2)\n"
		"  --cap K | K0,K1,...  in-flight micro-batch cap, all stages or per stage\n"
		"                       (bounded, zb-auto)\n"
		"  --costs F,B[,I,W]    per-micro-batch costs of every stage (default 1,2)\n",
		CLI_MAX_STAGES, CLI_MAX_MICROBATCHES);
}

int sched_load_file(const char *cmd, const char *path, dpl_schedule **out)
{
	char *buf;
	size_t len, k = 0;
	int rc;

	if ((rc = cli_read_file(cmd, path, &buf, &len)))
		return rc;
	while (k < len && (buf[k] == ' ' || buf[k] == '\n' || buf[k] == '\t' ||
			   buf[k] == '\r'))
		k++;
	if (k < len && buf[k] == '{')
		rc = dpl_schedule_read_json(buf, len, out);
	else
		rc = dpl_schedule_read_csv(buf, len, out);
	free(buf);
	if (rc)
		return cli_usage_error(cmd, "%s: %s", path, dpl_last_error());
	return CLI_OK;
}
