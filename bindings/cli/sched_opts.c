/* sched_opts.c - the schedule-building flags shared by several commands. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <dpl/csv.h>
#include <dpl/json.h>

#include "sched_opts.h"

/* Strict comma-separated u64 list, each item in [1, 2^63]; *out is a new
 * array of *n values. */
static int u64_list(const char *cmd, const char *flag, const char *text,
		    uint64_t **out, size_t *n)
{
	const char *p = text, *comma;
	uint64_t *v;
	size_t k = 1, j = 0;
	char item[32];
	int rc;

	if (text == NULL)
		return cli_missing(cmd, flag);
	if (text[0] == '\0' || text[0] == ',' ||
	    text[strlen(text) - 1] == ',' || strstr(text, ",,"))
		return cli_usage_error(cmd, "%s: empty item in '%s'", flag,
				       text);
	for (comma = text; (comma = strchr(comma, ',')) != NULL; comma++)
		k++;
	if (k > CLI_MAX_STAGES)
		return cli_usage_error(cmd, "%s: more than %u items", flag,
				       CLI_MAX_STAGES);
	if ((v = malloc(k * sizeof *v)) == NULL)
		return cli_fail(cmd, "out of memory");
	for (j = 0; j < k; j++) {
		size_t len;

		comma = strchr(p, ',');
		len = comma ? (size_t)(comma - p) : strlen(p);
		if (len >= sizeof item) {
			free(v);
			return cli_usage_error(cmd, "%s: expected an integer, "
					       "got '%.*s'", flag, (int)len,
					       p);
		}
		memcpy(item, p, len);
		item[len] = '\0';
		if ((rc = cli_u64(cmd, flag, item, 1, UINT64_C(1) << 63,
				  &v[j])) != 0) {
			free(v);
			return rc;
		}
		p = comma ? comma + 1 : p + len;
	}
	*out = v;
	*n = k;
	return 0;
}

int sched_bytes_take(const char *cmd, const char *act_flag,
		     struct sched_bytes *b, int argc, char **argv, int *i)
{
	uint64_t *v = NULL;
	const char *t;
	size_t n = 0;
	int rc;

	if (cli_flag(argc, argv, i, "--cap-bytes", &t)) {
		if ((rc = u64_list(cmd, "--cap-bytes", t, &v, &n)) != 0)
			return -rc;
		free(b->cap);
		b->cap = v;
		b->ncap = n;
		b->cap_text = t;
		return 1;
	}
	if (cli_flag(argc, argv, i, act_flag, &t)) {
		if ((rc = u64_list(cmd, act_flag, t, &v, &n)) != 0)
			return -rc;
		free(b->act);
		b->act = v;
		b->nact = n;
		b->act_text = t;
		return 1;
	}
	return 0;
}

static bool takes_cap(enum dpl_policy p)
{
	return p == DPL_POLICY_BOUNDED || p == DPL_POLICY_ZB_AUTO;
}

int sched_bytes_resolve(const char *cmd, const char *act_flag,
			const struct sched_bytes *b, enum dpl_policy policy,
			bool have_cap, uint32_t stages, uint64_t *cap,
			uint64_t *act, bool *have)
{
	uint32_t s;

	*have = false;
	if (b->cap == NULL && b->act == NULL)
		return CLI_OK;
	if (b->cap == NULL)
		return cli_usage_error(cmd, "%s %s: applies with --cap-bytes "
				       "only", act_flag, b->act_text);
	if (!takes_cap(policy))
		return cli_usage_error(cmd, "--cap-bytes %s: only policies "
				       "bounded and zb-auto take a cap (the "
				       "policy is %s)", b->cap_text,
				       dpl_policy_name(policy));
	if (have_cap)
		return cli_usage_error(cmd, "--cap-bytes %s: --cap gives the "
				       "cap in micro-batches already; give "
				       "one of the two", b->cap_text);
	if (b->act == NULL)
		return cli_usage_error(cmd, "--cap-bytes %s: needs %s A or "
				       "A0,A1,... (bytes of one micro-batch's "
				       "activations per stage)", b->cap_text,
				       act_flag);
	if (b->ncap != 1 && b->ncap != stages)
		return cli_usage_error(cmd, "--cap-bytes %s: %zu values for "
				       "%u stages (give one, or one per "
				       "stage)", b->cap_text, b->ncap,
				       stages);
	if (b->nact != 1 && b->nact != stages)
		return cli_usage_error(cmd, "%s %s: %zu values for %u stages "
				       "(give one, or one per stage)",
				       act_flag, b->act_text, b->nact,
				       stages);
	for (s = 0; s < stages; s++) {
		cap[s] = b->cap[b->ncap == 1 ? 0 : s];
		act[s] = b->act[b->nact == 1 ? 0 : s];
	}
	*have = true;
	return CLI_OK;
}

void sched_bytes_free(struct sched_bytes *b)
{
	free(b->cap);
	free(b->act);
	b->cap = b->act = NULL;
	b->ncap = b->nact = 0;
}

int sched_opts_take(const char *cmd, struct sched_opts *o, int argc,
		    char **argv, int *i)
{
	const char *v;
	int rc;

	if ((rc = sched_bytes_take(cmd, "--act-bytes", &o->bytes, argc, argv,
				   i)) != 0)
		return rc;
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
	} else if (cli_flag(argc, argv, i, "--transfer", &v)) {
		size_t n;

		if (v == NULL)
			return -cli_missing(cmd, "--transfer");
		rc = cli_double_list(cmd, "--transfer", v, 0, 1e12,
				     &o->transfer, 1, &n);
	} else {
		return 0;
	}
	return rc ? -rc : 1;
}

static bool splits_w(enum dpl_policy p)
{
	return p == DPL_POLICY_ZB_H1 || p == DPL_POLICY_INTERLEAVED_ZB ||
	       p == DPL_POLICY_ZBV || p == DPL_POLICY_ZB_H2 ||
	       p == DPL_POLICY_ZB_AUTO || p == DPL_POLICY_DUALPIPEV;
}

/* The memory limit in bytes and what sets it. */
static double memory_limit(const char **what)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	double lim = pages > 0 && psize > 0 ? (double)pages * (double)psize
					    : 1e300;
	struct rlimit r;

	*what = "physical memory";
	if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY &&
	    (double)r.rlim_cur < lim) {
		lim = (double)r.rlim_cur;
		*what = "RLIMIT_AS";
	}
	if (getrlimit(RLIMIT_DATA, &r) == 0 && r.rlim_cur != RLIM_INFINITY &&
	    (double)r.rlim_cur < lim) {
		lim = (double)r.rlim_cur;
		*what = "RLIMIT_DATA";
	}
	return lim;
}

int sched_estimate(const char *cmd, uint32_t stages, uint32_t microbatches,
		   enum dpl_policy policy, uint32_t chunks, unsigned uses)
{
	uint32_t v = dpl_policy_chunks(policy) == 1 ? (chunks ? chunks : 1)
		   : dpl_policy_chunks(policy) == 2 ? 2
						    : 1;
	double actions = (splits_w(policy) ? 3.0 : 2.0) * stages * v *
			 microbatches;
	double per = SCHED_EST_BUILD_BYTES, lim, need;
	const char *what;

	if (!(uses & SCHED_USE_KNOWN))
		uses = SCHED_USE_LOWER | SCHED_USE_SIM;
	if (uses & SCHED_USE_LOWER)
		per += SCHED_EST_LOWER_BYTES;
	if (uses & SCHED_USE_SIM)
		per += SCHED_EST_SIM_BYTES;
	need = actions * per;
	lim = memory_limit(&what);
	if (need <= lim)
		return CLI_OK;
	return cli_usage_error(cmd, "--stages %u x --microbatches %u (policy "
			       "%s) is too large: about %.1f GB for %.0f actions (%.0f "
			       "bytes each%s%s), more than the %.1f GB of %s",
			       stages, microbatches, dpl_policy_name(policy),
			       need / 1e9, actions, per,
			       uses & SCHED_USE_LOWER ? ", lowered" : "",
			       uses & SCHED_USE_SIM ? ", simulated" : "",
			       lim / 1e9, what);
}

int sched_opts_build(const char *cmd, const struct sched_opts *o,
		     dpl_schedule **out)
{
	struct dpl_schedule_params p = {0};
	struct dpl_stage_cost *costs = NULL;
	uint64_t *cap_bytes = NULL, *act = NULL;
	bool have_bytes = false, have_cap = o->cap || o->cap_all;
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
					    "and dualpipev always have 2)",
				       o->chunks);
	if (takes_cap(o->policy) && !have_cap && o->bytes.cap == NULL)
		return cli_usage_error(cmd, "--cap: policy %s needs --cap K "
					    "or one value per stage, or "
					    "--cap-bytes with --act-bytes",
				       dpl_policy_name(o->policy));
	if (!takes_cap(o->policy) && have_cap)
		return cli_usage_error(cmd, "--cap: only policies bounded and "
					    "zb-auto take a cap");
	if (o->cap && o->ncap != o->stages)
		return cli_usage_error(cmd, "--cap: %zu values for %u stages",
				       o->ncap, o->stages);
	if ((rc = sched_estimate(cmd, o->stages, o->microbatches, o->policy,
				 o->chunks, o->uses)) != 0)
		return rc;
	if (o->bytes.cap || o->bytes.act) {
		cap_bytes = malloc(o->stages * sizeof *cap_bytes);
		act = malloc(o->stages * sizeof *act);
		if (cap_bytes == NULL || act == NULL) {
			free(cap_bytes);
			free(act);
			return cli_fail(cmd, "out of memory");
		}
	}
	if ((rc = sched_bytes_resolve(cmd, "--act-bytes", &o->bytes,
				      o->policy, have_cap, o->stages,
				      cap_bytes, act, &have_bytes)) != 0) {
		free(cap_bytes);
		free(act);
		return rc;
	}
	p.stages = o->stages;
	p.microbatches = o->microbatches;
	p.policy = o->policy;
	p.chunks = o->chunks;
	p.cap_mb = o->cap;
	p.cap_all = o->cap_all;
	p.cap_bytes = have_bytes ? cap_bytes : NULL;
	p.activation_bytes = have_bytes ? act : NULL;
	p.transfer = o->transfer;
	if (o->have_costs && (o->policy == DPL_POLICY_BOUNDED ||
			      o->policy == DPL_POLICY_ZB_AUTO ||
			      o->policy == DPL_POLICY_ZB_H2)) {
		costs = malloc(o->stages * sizeof *costs);
		if (costs == NULL) {
			free(cap_bytes);
			free(act);
			return cli_fail(cmd, "out of memory");
		}
		for (uint32_t s = 0; s < o->stages; s++)
			costs[s] = o->costs;
		p.costs = costs;
	}
	rc = dpl_schedule_build(&p, out);
	free(costs);
	free(cap_bytes);
	free(act);
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
	sched_bytes_free(&o->bytes);
}

void sched_opts_usage(FILE *f)
{
	fprintf(f,
		"  --stages S           pipeline stages (ranks for policies with chunks), 1..%u\n"
		"  --microbatches M     micro-batches per iteration, 1..%u\n"
		"  --policy P           gpipe | 1f1b | 1f1b-comm | bounded | interleaved | zb-h1 |\n"
		"                       looped-bfs | interleaved-zb | zbv | zb-h2 | zb-auto |\n"
		"                       dualpipev\n"
		"  --chunks V           model chunks per rank, V >= 2 (interleaved, looped-bfs,\n"
		"                       interleaved-zb; zbv and dualpipev always have 2)\n"
		"  --cap K | K0,K1,...  in-flight micro-batch cap, all stages or per stage\n"
		"                       (bounded, zb-auto)\n"
		"  --cap-bytes B | B0,B1,...\n"
		"                       activation byte budget, all stages or per stage,\n"
		"                       instead of --cap (bounded, zb-auto); stage s keeps\n"
		"                       at most B_s / A_s micro-batches in flight\n"
		"  --act-bytes A | A0,A1,...\n"
		"                       with --cap-bytes: bytes of one micro-batch's\n"
		"                       activations, all stages or per stage\n"
		"  --costs F,B[,I,W]    per-micro-batch costs of every stage (default 1,2)\n"
		"  --transfer T         zb-auto: time an activation or gradient takes to the\n"
		"                       next rank, in the costs' unit; the order is planned\n"
		"                       and chosen under it (default 0: free)\n",
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
