/*
 * plan_json.c - plans as JSON (dpl-plan, see dpl/json.h): the planner's
 * report written with stdio, a plan read back with cJSON.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include <dpl/json.h>
#include <dpl/plan.h>

#include "json_util.h"

static void put_devices(FILE *f, uint64_t m)
{
	int first = 1;

	fputc('[', f);
	for (; m; m &= m - 1) {
		fprintf(f, "%s%d", first ? "" : ", ", __builtin_ctzll(m));
		first = 0;
	}
	fputc(']', f);
}

static void put_stages(FILE *f, const struct dpl_plan *pl,
		       const dpl_profile *prof, const char *ind)
{
	fputs("[", f);
	for (uint32_t s = 0; s < pl->stages; s++) {
		const struct dpl_plan_stage *st = &pl->stage[s];
		const struct dpl_layer *a = dpl_profile_layer(prof, st->first_layer);
		const struct dpl_layer *b = dpl_profile_layer(prof, st->last_layer);

		fprintf(f, "%s\n%s  {\"first_layer\": %u, \"last_layer\": %u, ",
			s ? "," : "", ind, st->first_layer, st->last_layer);
		if (a && b) {
			fputs("\"first_name\": ", f);
			dpl__json_put_str(f, a->name);
			fputs(", \"last_name\": ", f);
			dpl__json_put_str(f, b->name);
			fputs(", ", f);
		}
		fputs("\"devices\": ", f);
		put_devices(f, st->devices);
		fprintf(f,
			",\n%s   \"replicas\": %u, \"forward_ms\": %.17g, "
			"\"backward_ms\": %.17g, \"send_ms\": %.17g, "
			"\"allreduce_ms\": %.17g,\n%s   \"inflight\": %u, "
			"\"memory_bytes\": %llu, \"parameter_bytes\": %.17g,\n"
			"%s   \"activation_bytes\": %llu}",
			ind, st->replicas, st->forward_ms, st->backward_ms,
			st->send_ms, st->allreduce_ms, ind, st->inflight,
			(unsigned long long)st->memory_bytes,
			st->parameter_bytes, ind,
			(unsigned long long)st->activation_bytes);
	}
	fprintf(f, "\n%s]", ind);
}

static void put_plan_fields(FILE *f, const struct dpl_plan *pl,
			    const dpl_profile *prof, const char *ind)
{
	fprintf(f, "%s\"stages\": ", ind);
	put_stages(f, pl, prof, ind);
	fprintf(f,
		",\n%s\"microbatch_size\": %u,\n%s\"microbatches\": %u,\n"
		"%s\"policy\": \"%s\",\n%s\"predicted_ms\": %.17g,\n"
		"%s\"pivot_ms\": %.17g,\n%s\"pivot_stage\": %u,\n"
		"%s\"pivot_is_transfer\": %s,\n"
		"%s\"peak_memory_bytes\": %llu,\n%s\"fits\": %s,\n"
		"%s\"devices_used\": %u",
		ind, pl->microbatch_size, ind, pl->microbatches, ind,
		dpl_policy_name(pl->policy), ind, pl->predicted_ms, ind,
		pl->pivot_ms, ind, pl->pivot_stage, ind,
		pl->pivot_is_transfer ? "true" : "false", ind,
		(unsigned long long)pl->peak_memory_bytes, ind,
		pl->fits ? "true" : "false", ind, pl->devices_used);
}

int dpl_plan_write_json(const struct dpl_plan_report *r,
			const dpl_profile *prof, const struct dpl_cluster *c,
			const struct dpl_plan_params *p, FILE *f)
{
	const struct dpl_plan *pl;

	if (r == NULL || f == NULL)
		return dpl_set_error(DPL_EINVAL, "report and file must not be NULL");
	pl = &r->best;
	if (pl->stages < 1 || pl->stages > DPL_PLAN_MAX_STAGES ||
	    dpl_policy_name(pl->policy) == NULL)
		return dpl_set_error(DPL_EINVAL,
				  "report: the plan has %u stages and policy "
				  "%d; not a planned report",
				  pl->stages, (int)pl->policy);
	fputs("{\n  \"format\": \"dpl-plan\",\n  \"version\": 1,\n", f);
	if (prof)
		fprintf(f, "  \"layers\": %u,\n", dpl_profile_layers(prof));
	if (c) {
		fputs("  \"cluster\": ", f);
		dpl__json_put_cluster(f, c, "  ", 0);
		fputs(",\n", f);
	}
	if (p)
		fprintf(f,
			"  \"profile_batch\": %u,\n  \"global_batch\": %u,\n"
			"  \"optimizer_factor\": %.17g,\n",
			p->profile_batch, p->global_batch, p->optimizer_factor);
	put_plan_fields(f, pl, prof, "  ");
	fprintf(f,
		",\n  \"single_device_ms\": %.17g,\n  \"speedup\": %.17g,\n"
		"  \"baselines\": {",
		r->single_device_ms,
		pl->predicted_ms > 0 ? r->single_device_ms / pl->predicted_ms
				     : 0);
	for (int b = 0; b < DPL_BASELINE__COUNT; b++) {
		const struct dpl_plan *bp = &r->baseline[b];

		fprintf(f, "%s\n    \"%s\": {", b ? "," : "",
			dpl_plan_baseline_name((enum dpl_plan_baseline)b));
		if (!r->baseline_found[b]) {
			fputs("\"found\": false, \"fits\": false, "
			      "\"predicted_ms\": null}",
			      f);
			continue;
		}
		fprintf(f, "\n      \"found\": true,\n      \"speedup\": %.17g,\n",
			pl->predicted_ms > 0 ? bp->predicted_ms / pl->predicted_ms
					     : 0);
		put_plan_fields(f, bp, prof, "      ");
		fputs("\n    }", f);
	}
	fprintf(f,
		"\n  },\n  \"search\": {\"chosen\": \"%s\", \"dp_runs\": %u, "
		"\"dp_states\": %llu, \"simulated\": %u, \"exact\": %s}\n}\n",
		r->from_baseline < 0
		    ? "dapple"
		    : dpl_plan_baseline_name(
			  (enum dpl_plan_baseline)r->from_baseline),
		r->dp_runs, (unsigned long long)r->dp_states, r->simulated,
		r->exact ? "true" : "false");
	return dpl__json_finish(f, "plan");
}

/* Keys of a plan file: the top level and each stage. */
enum {
	QK_FORMAT,
	QK_VERSION,
	QK_LAYERS,
	QK_CLUSTER,
	QK_PBS,
	QK_GBS,
	QK_OPT,
	QK_STAGES,
	QK_MBS,
	QK_MB,
	QK_POLICY,
	QK_PRED,
	QK_PIVOT,
	QK_PIVOT_STAGE,
	QK_PIVOT_XFER,
	QK_PEAK,
	QK_FITS,
	QK_USED,
	QK_SINGLE,
	QK_SPEEDUP,
	QK_BASELINES,
	QK_SEARCH,
	QK__N
};
static const char *const qkeys[QK__N] = {
    "format",          "version",      "layers",
    "cluster",         "profile_batch", "global_batch",
    "optimizer_factor", "stages",       "microbatch_size",
    "microbatches",    "policy",       "predicted_ms",
    "pivot_ms",        "pivot_stage",  "pivot_is_transfer",
    "peak_memory_bytes", "fits",       "devices_used",
    "single_device_ms", "speedup",     "baselines",
    "search"};

enum {
	SK_FIRST,
	SK_LAST,
	SK_FNAME,
	SK_LNAME,
	SK_DEVICES,
	SK_REPLICAS,
	SK_F,
	SK_B,
	SK_SEND,
	SK_AR,
	SK_INFLIGHT,
	SK_MEM,
	SK_PAR,
	SK_ACT,
	SK__N
};
static const char *const skeys[SK__N] = {
    "first_layer", "last_layer",  "first_name", "last_name",
    "devices",     "replicas",    "forward_ms", "backward_ms",
    "send_ms",     "allreduce_ms", "inflight",  "memory_bytes",
    "parameter_bytes", "activation_bytes"};

static int read_stage(const cJSON *e, uint32_t s, struct dpl_plan_stage *st,
		      uint64_t *used)
{
	const cJSON *v[SK__N], *d;
	char path[64], p[96];
	const char *str = NULL;
	uint32_t k = 0, id;
	double dv;
	int rc;

	snprintf(path, sizeof path, "stages[%u]", s);
	if (!cJSON_IsObject(e))
		return dpl_set_error(DPL_EPARSE, "%s: expected an object, got %s",
				  path, dpl__json_type_name(e));
	if ((rc = dpl__json_collect(e, path, NULL, skeys, SK__N,
				    (1u << SK_FIRST) | (1u << SK_LAST) |
					(1u << SK_DEVICES) | (1u << SK_F) |
					(1u << SK_B) | (1u << SK_SEND) |
					(1u << SK_AR),
				    v)))
		return rc;
#define SPATH(k) (snprintf(p, sizeof p, "%s.%s", path, skeys[k]), p)
	if ((rc = dpl__json_get_uint(v[SK_FIRST], SPATH(SK_FIRST), 0,
				     INT32_MAX, &st->first_layer)) ||
	    (rc = dpl__json_get_uint(v[SK_LAST], SPATH(SK_LAST), 0, INT32_MAX,
				     &st->last_layer)))
		return rc;
	if (v[SK_FNAME] &&
	    (rc = dpl__json_get_str(v[SK_FNAME], SPATH(SK_FNAME), &str)))
		return rc;
	if (v[SK_LNAME] &&
	    (rc = dpl__json_get_str(v[SK_LNAME], SPATH(SK_LNAME), &str)))
		return rc;
	if (!cJSON_IsArray(v[SK_DEVICES]) ||
	    cJSON_GetArraySize(v[SK_DEVICES]) < 1)
		return dpl_set_error(DPL_EPARSE,
				  "%s.devices: expected a non-empty array of "
				  "device ids",
				  path);
	cJSON_ArrayForEach(d, v[SK_DEVICES])
	{
		snprintf(p, sizeof p, "%s.devices[%u]", path, k++);
		if ((rc = dpl__json_get_uint(d, p, 0, DPL_PLAN_MAX_DEVICES - 1,
					     &id)))
			return rc;
		if ((st->devices | *used) >> id & 1)
			return dpl_set_error(DPL_EPARSE,
					  "%s: device %u is used twice", p, id);
		st->devices |= 1ULL << id;
	}
	*used |= st->devices;
	st->replicas = (uint32_t)__builtin_popcountll(st->devices);
	if (v[SK_REPLICAS]) {
		if ((rc = dpl__json_get_uint(v[SK_REPLICAS],
					     SPATH(SK_REPLICAS), 1,
					     DPL_PLAN_MAX_DEVICES, &k)))
			return rc;
		if (k != st->replicas)
			return dpl_set_error(DPL_EPARSE,
					  "%s.replicas: %u, but %u devices are "
					  "listed",
					  path, k, st->replicas);
	}
	if ((rc = dpl__json_get_num(v[SK_F], SPATH(SK_F), 0,
				    &st->forward_ms)) ||
	    (rc = dpl__json_get_num(v[SK_B], SPATH(SK_B), 0,
				    &st->backward_ms)) ||
	    (rc = dpl__json_get_num(v[SK_SEND], SPATH(SK_SEND), 0,
				    &st->send_ms)) ||
	    (rc = dpl__json_get_num(v[SK_AR], SPATH(SK_AR), 0,
				    &st->allreduce_ms)))
		return rc;
	if (v[SK_INFLIGHT] &&
	    (rc = dpl__json_get_uint(v[SK_INFLIGHT], SPATH(SK_INFLIGHT), 0,
				     UINT32_MAX, &st->inflight)))
		return rc;
	if (v[SK_MEM]) {
		if ((rc = dpl__json_get_num(v[SK_MEM], SPATH(SK_MEM), 0, &dv)))
			return rc;
		st->memory_bytes = dv >= 1.8e19 ? UINT64_MAX : (uint64_t)dv;
	}
	if (v[SK_PAR] &&
	    (rc = dpl__json_get_num(v[SK_PAR], SPATH(SK_PAR), 0,
				    &st->parameter_bytes)))
		return rc;
	if (v[SK_ACT]) {
		if ((rc = dpl__json_get_num(v[SK_ACT], SPATH(SK_ACT), 0, &dv)))
			return rc;
		st->activation_bytes = dv >= 1.8e19 ? UINT64_MAX : (uint64_t)dv;
	}
#undef SPATH
	return 0;
}

static int read_plan(const cJSON *root, struct dpl_plan *pl)
{
	const cJSON *v[QK__N], *e;
	uint64_t used = 0;
	uint32_t s = 0, layers = 0, u;
	const char *str = NULL;
	char why[512];
	double dv;
	int rc, size, b;

	if ((rc = dpl__json_collect(root, "", "dpl-plan", qkeys, QK__N,
				    (1u << QK_FORMAT) | (1u << QK_VERSION) |
					(1u << QK_STAGES) | (1u << QK_MBS) |
					(1u << QK_MB) | (1u << QK_POLICY),
				    v)))
		return rc;
	if (v[QK_LAYERS] &&
	    (rc = dpl__json_get_uint(v[QK_LAYERS], "layers", 1, INT32_MAX,
				     &layers)))
		return rc;
	if (v[QK_CLUSTER]) {
		struct dpl_cluster c;

		if (!cJSON_IsObject(v[QK_CLUSTER]))
			return dpl_set_error(DPL_EPARSE,
					  "cluster: expected an object, got %s",
					  dpl__json_type_name(v[QK_CLUSTER]));
		if ((rc = dpl__json_read_cluster(v[QK_CLUSTER], "cluster",
						 &c)))
			return rc;
	}
	if ((v[QK_PBS] &&
	     (rc = dpl__json_get_uint(v[QK_PBS], "profile_batch", 1,
				      UINT32_MAX, &u))) ||
	    (v[QK_GBS] &&
	     (rc = dpl__json_get_uint(v[QK_GBS], "global_batch", 1,
				      UINT32_MAX, &u))) ||
	    (v[QK_OPT] &&
	     (rc = dpl__json_get_num(v[QK_OPT], "optimizer_factor", 0, &dv))))
		return rc;
	if (!cJSON_IsArray(v[QK_STAGES]))
		return dpl_set_error(DPL_EPARSE, "stages: expected an array, got %s",
				  dpl__json_type_name(v[QK_STAGES]));
	size = cJSON_GetArraySize(v[QK_STAGES]);
	if (size < 1 || size > DPL_PLAN_MAX_STAGES)
		return dpl_set_error(DPL_EPARSE,
				  "stages: %d entries (a plan has 1 to %d)",
				  size, DPL_PLAN_MAX_STAGES);
	memset(pl, 0, sizeof *pl);
	pl->stages = (uint32_t)size;
	cJSON_ArrayForEach(e, v[QK_STAGES])
	{
		struct dpl_plan_stage *st = &pl->stage[s];
		uint32_t want = s ? pl->stage[s - 1].last_layer + 1 : 0;

		if ((rc = read_stage(e, s, st, &used)))
			return rc;
		if (st->first_layer != want)
			return dpl_set_error(DPL_EPARSE,
					  "stages[%u].first_layer: %u, expected "
					  "%u (stages cover the layers in "
					  "order)",
					  s, st->first_layer, want);
		if (st->last_layer < st->first_layer)
			return dpl_set_error(DPL_EPARSE,
					  "stages[%u].last_layer: %u is before "
					  "first_layer %u",
					  s, st->last_layer, st->first_layer);
		s++;
	}
	if (layers && pl->stage[s - 1].last_layer + 1 != layers)
		return dpl_set_error(DPL_EPARSE,
				  "stages: the last stage ends at layer %u, "
				  "but the profile has %u layers",
				  pl->stage[s - 1].last_layer, layers);
	if ((rc = dpl__json_get_uint(v[QK_MBS], "microbatch_size", 1,
				     INT32_MAX, &pl->microbatch_size)) ||
	    (rc = dpl__json_get_uint(v[QK_MB], "microbatches", 1, INT32_MAX,
				     &pl->microbatches)) ||
	    (rc = dpl__json_get_str(v[QK_POLICY], "policy", &str)))
		return rc;
	if (dpl_policy_parse(str, &pl->policy)) {
		snprintf(why, sizeof why, "%s", dpl_last_error());
		return dpl_set_error(DPL_EPARSE, "policy: %s", why);
	}
	if (pl->policy != DPL_POLICY_GPIPE && pl->policy != DPL_POLICY_1F1B &&
	    pl->policy != DPL_POLICY_1F1B_COMM)
		return dpl_set_error(DPL_EPARSE,
				  "policy: '%s' is not a plan policy (gpipe, "
				  "1f1b or 1f1b-comm)",
				  str);
	if (v[QK_PRED] &&
	    (rc = dpl__json_get_num(v[QK_PRED], "predicted_ms", 0,
				    &pl->predicted_ms)))
		return rc;
	if (v[QK_PIVOT] &&
	    (rc = dpl__json_get_num(v[QK_PIVOT], "pivot_ms", 0,
				    &pl->pivot_ms)))
		return rc;
	if (v[QK_PIVOT_STAGE] &&
	    (rc = dpl__json_get_uint(v[QK_PIVOT_STAGE], "pivot_stage", 0,
				     pl->stages - 1, &pl->pivot_stage)))
		return rc;
	if (v[QK_PIVOT_XFER] &&
	    (rc = dpl__json_get_bool(v[QK_PIVOT_XFER], "pivot_is_transfer",
				     &pl->pivot_is_transfer)))
		return rc;
	if (v[QK_PEAK]) {
		if ((rc = dpl__json_get_num(v[QK_PEAK], "peak_memory_bytes", 0,
					    &dv)))
			return rc;
		pl->peak_memory_bytes = dv >= 1.8e19 ? UINT64_MAX : (uint64_t)dv;
	}
	pl->fits = 1;
	if (v[QK_FITS] &&
	    (rc = dpl__json_get_bool(v[QK_FITS], "fits", &pl->fits)))
		return rc;
	pl->devices_used = (uint32_t)__builtin_popcountll(used);
	if (v[QK_USED] &&
	    (rc = dpl__json_get_uint(v[QK_USED], "devices_used", 0,
				     DPL_PLAN_MAX_DEVICES, &u)))
		return rc;
	if ((v[QK_SINGLE] &&
	     (rc = dpl__json_get_num(v[QK_SINGLE], "single_device_ms", 0,
				     &dv))) ||
	    (v[QK_SPEEDUP] &&
	     (rc = dpl__json_get_num(v[QK_SPEEDUP], "speedup", 0, &dv))))
		return rc;
	for (b = QK_BASELINES; b <= QK_SEARCH; b++)
		if (v[b] && !cJSON_IsObject(v[b]))
			return dpl_set_error(DPL_EPARSE,
					  "%s: expected an object, got %s",
					  qkeys[b], dpl__json_type_name(v[b]));
	return 0;
}

int dpl_plan_read_json(const char *text, size_t len, struct dpl_plan *out)
{
	struct dpl_plan *tmp;
	cJSON *root;
	int rc;

	if (out == NULL)
		return dpl_set_error(DPL_EINVAL, "out must not be NULL");
	if ((rc = dpl__json_parse_text(text, len, "a JSON plan", &root)))
		return rc;
	tmp = malloc(sizeof *tmp);
	if (tmp == NULL) {
		cJSON_Delete(root);
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	}
	rc = read_plan(root, tmp);
	if (rc == 0)
		*out = *tmp;
	free(tmp);
	cJSON_Delete(root);
	return rc;
}
