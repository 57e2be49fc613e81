/*
 * plan_json.c - the planner's JSON forms (see dpl/json.h): profiles,
 * cluster files and plans. Written with stdio, read with cJSON.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include <dpl/json.h>
#include <dpl/plan.h>

#include "internal.h"
#include "json_util.h"

/* ---- shared reading helpers ---------------------------------------- */



/* Parse `len` bytes as one JSON value; `what` names it in messages. */
static int parse_text(const char *text, size_t len, const char *what,
		      cJSON **out)
{
	const char *end = NULL;
	size_t line, col, pos;
	cJSON *root;

	if (text == NULL && len > 0)
		return dpl__error(DPL_EINVAL, "text must not be NULL");
	for (pos = 0; pos < len && text[pos] && strchr(" \t\r\n", text[pos]);
	     pos++)
		;
	if (pos == len)
		return dpl__error(DPL_EPARSE, "empty input: expected %s", what);
	root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
	if (root == NULL) {
		pos = end && end >= text && end <= text + len
			  ? (size_t)(end - text)
			  : 0;
		dpl__json_line_col(text, pos, &line, &col);
		return dpl__error(DPL_EPARSE,
				  "JSON syntax error at line %zu, column %zu",
				  line, col);
	}
	for (pos = (size_t)(end - text);
	     pos < len && text[pos] && strchr(" \t\r\n", text[pos]); pos++)
		;
	if (pos < len) {
		dpl__json_line_col(text, pos, &line, &col);
		cJSON_Delete(root);
		return dpl__error(DPL_EPARSE,
				  "text after the JSON value at line %zu, "
				  "column %zu",
				  line, col);
	}
	if (!cJSON_IsObject(root)) {
		int rc = dpl__error(DPL_EPARSE,
				    "top level: expected an object, got %s",
				    dpl__json_type_name(root));

		cJSON_Delete(root);
		return rc;
	}
	*out = root;
	return 0;
}

/*
 * Sort an object's members into v[] by the names in keys[]; reject an
 * unknown or repeated key, a wrong "format" or "version" (when `format`
 * names the expected file type), and a missing key whose bit is in
 * `required`.
 */
static int check_format(const cJSON *fmt, const cJSON *ver, const char *want);

static int collect(const cJSON *obj, const char *path, const char *format,
		   const char *const *keys, int n, uint64_t required,
		   const cJSON **v)
{
	const cJSON *e;
	int k, rc;

	for (k = 0; k < n; k++)
		v[k] = NULL;
	cJSON_ArrayForEach(e, obj)
	{
		for (k = 0; k < n; k++)
			if (strcmp(e->string, keys[k]) == 0)
				break;
		if (k == n)
			return dpl__error(DPL_EPARSE, "%s%sunknown key '%.40s'",
					  path, *path ? ": " : "", e->string);
		if (v[k] != NULL)
			return dpl__error(DPL_EPARSE,
					  "%s%skey '%s' appears twice", path,
					  *path ? ": " : "", keys[k]);
		v[k] = e;
	}
	/* keys[0] and keys[1] are "format" and "version" when `format` is
	 * set: a wrong file type says so before any missing key */
	if (format && (rc = check_format(v[0], v[1], format)))
		return rc;
	for (k = 0; k < n; k++)
		if (v[k] == NULL && (required >> k & 1))
			return dpl__error(DPL_EPARSE, "%s%smissing key '%s'",
					  path, *path ? ": " : "", keys[k]);
	return 0;
}

static int get_num(const cJSON *j, const char *path, double min, double *out)
{
	if (!cJSON_IsNumber(j))
		return dpl__error(DPL_EPARSE, "%s: expected a number, got %s",
				  path, dpl__json_type_name(j));
	if (!isfinite(j->valuedouble))
		return dpl__error(DPL_EPARSE, "%s: not a finite number", path);
	if (j->valuedouble < min)
		return dpl__error(DPL_EPARSE, "%s: %.17g is below %g", path,
				  j->valuedouble, min);
	*out = j->valuedouble;
	return 0;
}

static int get_uint(const cJSON *j, const char *path, uint32_t min,
		    uint32_t max, uint32_t *out)
{
	double d;

	if (!cJSON_IsNumber(j))
		return dpl__error(DPL_EPARSE, "%s: expected an integer, got %s",
				  path, dpl__json_type_name(j));
	d = j->valuedouble;
	if (!(d >= 0))
		return dpl__error(DPL_EPARSE, "%s: %.17g is negative", path, d);
	if (d != floor(d))
		return dpl__error(DPL_EPARSE, "%s: %.17g is not an integer",
				  path, d);
	if (d < min || d > max)
		return dpl__error(DPL_EPARSE, "%s: %.17g is out of range "
					      "[%u, %u]",
				  path, d, min, max);
	*out = (uint32_t)d;
	return 0;
}

static int get_bool(const cJSON *j, const char *path, int *out)
{
	if (!cJSON_IsBool(j))
		return dpl__error(DPL_EPARSE, "%s: expected a boolean, got %s",
				  path, dpl__json_type_name(j));
	*out = cJSON_IsTrue(j);
	return 0;
}

static int get_str(const cJSON *j, const char *path, const char **out)
{
	if (!cJSON_IsString(j))
		return dpl__error(DPL_EPARSE, "%s: expected a string, got %s",
				  path, dpl__json_type_name(j));
	*out = j->valuestring;
	return 0;
}

static int check_format(const cJSON *fmt, const cJSON *ver, const char *want)
{
	const char *s = NULL;
	uint32_t v;
	int rc;

	if (fmt) {
		if ((rc = get_str(fmt, "format", &s)))
			return rc;
		if (strcmp(s, want) != 0)
			return dpl__error(DPL_EPARSE,
					  "format: '%.40s' is not a %s file "
					  "(expected \"%s\")",
					  s, want, want);
	}
	if (ver) {
		if ((rc = get_uint(ver, "version", 0, UINT32_MAX, &v)))
			return rc;
		if (v != 1)
			return dpl__error(DPL_EPARSE,
					  "version: %u is not supported (this "
					  "dpl reads version 1)",
					  v);
	}
	return 0;
}

/* A JSON string literal of s (escaped) to f. */
static void put_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static int finish(FILE *f, const char *what)
{
	if (fflush(f) != 0 || ferror(f))
		return dpl__error(DPL_EIO, "writing the JSON %s failed: %s",
				  what, strerror(errno));
	return 0;
}

/* ---- profiles ------------------------------------------------------ */

enum { PK_FORMAT, PK_VERSION, PK_LAYERS, PK_EDGES, PK__N };
static const char *const pkeys[PK__N] = {"format", "version", "layers",
					 "edges"};
enum { LK_ID, LK_NAME, LK_F, LK_B, LK_ACT, LK_PAR, LK__N };
static const char *const lkeys[LK__N] = {
    "id", "name", "forward_ms", "backward_ms", "activation_bytes",
    "parameter_bytes"};

static int read_profile(const cJSON *root, dpl_profile **out)
{
	const cJSON *v[PK__N], *lv[LK__N], *e;
	struct dpl_layer *layers = NULL;
	uint32_t *edges = NULL, n = 0, k = 0;
	size_t ne = 0;
	char path[64], why[512];
	int rc, size;

	if ((rc = collect(root, "", "dpl-profile", pkeys, PK__N,
			  1u << PK_LAYERS, v)))
		return rc;
	if (!cJSON_IsArray(v[PK_LAYERS]))
		return dpl__error(DPL_EPARSE, "layers: expected an array, got %s",
				  dpl__json_type_name(v[PK_LAYERS]));
	size = cJSON_GetArraySize(v[PK_LAYERS]);
	if (size < 1)
		return dpl__error(DPL_EPARSE, "layers: the list is empty");
	n = (uint32_t)size;
	layers = calloc(n, sizeof *layers);
	if (v[PK_EDGES]) {
		if (!cJSON_IsArray(v[PK_EDGES])) {
			free(layers);
			return dpl__error(DPL_EPARSE,
					  "edges: expected an array, got %s",
					  dpl__json_type_name(v[PK_EDGES]));
		}
		ne = (size_t)cJSON_GetArraySize(v[PK_EDGES]);
	}
	edges = malloc((2 * ne + 1) * sizeof *edges);
	if (layers == NULL || edges == NULL) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	cJSON_ArrayForEach(e, v[PK_LAYERS])
	{
		struct dpl_layer *l = &layers[k];

		snprintf(path, sizeof path, "layers[%u]", k);
		if (!cJSON_IsObject(e)) {
			rc = dpl__error(DPL_EPARSE,
					"%s: expected an object, got %s", path,
					dpl__json_type_name(e));
			goto out;
		}
		if ((rc = collect(e, path, NULL, lkeys, LK__N,
				  (1u << LK_F) | (1u << LK_B) | (1u << LK_ACT) |
				      (1u << LK_PAR),
				  lv)))
			goto out;
		if (lv[LK_ID] && (rc = get_str(lv[LK_ID], "id", &l->id)))
			goto out;
		if (lv[LK_NAME] && (rc = get_str(lv[LK_NAME], "name", &l->name)))
			goto out;
		snprintf(path, sizeof path, "layers[%u].forward_ms", k);
		if ((rc = get_num(lv[LK_F], path, 0, &l->forward_ms)))
			goto out;
		snprintf(path, sizeof path, "layers[%u].backward_ms", k);
		if ((rc = get_num(lv[LK_B], path, 0, &l->backward_ms)))
			goto out;
		snprintf(path, sizeof path, "layers[%u].activation_bytes", k);
		if ((rc = get_num(lv[LK_ACT], path, 0, &l->activation_bytes)))
			goto out;
		snprintf(path, sizeof path, "layers[%u].parameter_bytes", k);
		if ((rc = get_num(lv[LK_PAR], path, 0, &l->parameter_bytes)))
			goto out;
		k++;
	}
	k = 0;
	if (v[PK_EDGES])
		cJSON_ArrayForEach(e, v[PK_EDGES])
		{
			snprintf(path, sizeof path, "edges[%u]", k);
			if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2) {
				rc = dpl__error(DPL_EPARSE,
						"%s: expected [from, to], got %s",
						path, dpl__json_type_name(e));
				goto out;
			}
			snprintf(path, sizeof path, "edges[%u][0]", k);
			if ((rc = get_uint(cJSON_GetArrayItem(e, 0), path, 0,
					   n - 1, &edges[2 * k])))
				goto out;
			snprintf(path, sizeof path, "edges[%u][1]", k);
			if ((rc = get_uint(cJSON_GetArrayItem(e, 1), path, 0,
					   n - 1, &edges[2 * k + 1])))
				goto out;
			k++;
		}
	rc = dpl_profile_create(layers, n, edges, ne, out);
	if (rc && rc != DPL_ENOMEM) {
		snprintf(why, sizeof why, "%s", dpl_last_error());
		rc = dpl__error(DPL_EPARSE, "%s", why);
	}
out:
	free(layers);
	free(edges);
	return rc;
}

int dpl_profile_read_json(const char *text, size_t len, dpl_profile **out)
{
	cJSON *root;
	int rc;

	if (out == NULL)
		return dpl__error(DPL_EINVAL, "out must not be NULL");
	if ((rc = parse_text(text, len, "a JSON profile", &root)))
		return rc;
	rc = read_profile(root, out);
	cJSON_Delete(root);
	return rc;
}

int dpl_profile_write_json(const dpl_profile *p, FILE *f)
{
	uint32_t n = dpl_profile_layers(p);

	if (p == NULL || f == NULL)
		return dpl__error(DPL_EINVAL, "profile and file must not be NULL");
	fputs("{\n  \"format\": \"dpl-profile\",\n  \"version\": 1,\n"
	      "  \"layers\": [",
	      f);
	for (uint32_t i = 0; i < n; i++) {
		const struct dpl_layer *l = dpl_profile_layer(p, i);

		fprintf(f, "%s\n    {\"id\": ", i ? "," : "");
		put_str(f, l->id);
		fputs(", \"name\": ", f);
		put_str(f, l->name);
		fprintf(f,
			", \"forward_ms\": %.17g, \"backward_ms\": %.17g, "
			"\"activation_bytes\": %.17g, \"parameter_bytes\": "
			"%.17g}",
			l->forward_ms, l->backward_ms, l->activation_bytes,
			l->parameter_bytes);
	}
	fputs("\n  ],\n  \"edges\": [", f);
	for (size_t k = 0; k < dpl_profile_edges(p); k++) {
		uint32_t a, b;

		dpl_profile_edge(p, k, &a, &b);
		fprintf(f, "%s[%u, %u]", k ? ", " : "", a, b);
	}
	fputs("]\n}\n", f);
	return finish(f, "profile");
}

/* ---- clusters ------------------------------------------------------ */

enum {
	CK_FORMAT,
	CK_VERSION,
	CK_NAME,
	CK_MACHINES,
	CK_DPM,
	CK_MEM,
	CK_IBW,
	CK_ILAT,
	CK_XBW,
	CK_XLAT,
	CK_ARI,
	CK_ARP,
	CK_ARX,
	CK__N
};
static const char *const ckeys[CK__N] = {
    "format",
    "version",
    "name",
    "machines",
    "devices_per_machine",
    "device_memory_bytes",
    "intra_bandwidth_bytes_per_s",
    "intra_latency_s",
    "inter_bandwidth_bytes_per_s",
    "inter_latency_s",
    "allreduce_intra_bandwidth_bytes_per_s",
    "allreduce_intra_pairs",
    "allreduce_inter_bandwidth_bytes_per_s",
};

static int read_cluster(const cJSON *obj, const char *path,
			struct dpl_cluster *out)
{
	const cJSON *v[CK__N];
	struct dpl_cluster c = {0};
	char p[96], why[512];
	const char *name = NULL;
	int rc;

#define CPATH(k) (snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", \
			   ckeys[k]),                                     \
		  p)
	if ((rc = collect(obj, path, "dpl-cluster", ckeys, CK__N,
			  (1u << CK_MACHINES) | (1u << CK_DPM) | (1u << CK_MEM),
			  v)))
		return rc;
	if (v[CK_NAME]) {
		if ((rc = get_str(v[CK_NAME], CPATH(CK_NAME), &name)))
			return rc;
		snprintf(c.name, sizeof c.name, "%s", name);
	}
	if ((rc = get_uint(v[CK_MACHINES], CPATH(CK_MACHINES), 1,
			   DPL_PLAN_MAX_DEVICES, &c.machines)) ||
	    (rc = get_uint(v[CK_DPM], CPATH(CK_DPM), 1, DPL_PLAN_MAX_DEVICES,
			   &c.devices_per_machine)) ||
	    (rc = get_num(v[CK_MEM], CPATH(CK_MEM), 0, &c.device_memory)))
		return rc;
	if (v[CK_IBW] &&
	    (rc = get_num(v[CK_IBW], CPATH(CK_IBW), 0, &c.intra_bandwidth)))
		return rc;
	if (v[CK_ILAT] &&
	    (rc = get_num(v[CK_ILAT], CPATH(CK_ILAT), 0, &c.intra_latency)))
		return rc;
	if (v[CK_XBW] &&
	    (rc = get_num(v[CK_XBW], CPATH(CK_XBW), 0, &c.inter_bandwidth)))
		return rc;
	if (v[CK_XLAT] &&
	    (rc = get_num(v[CK_XLAT], CPATH(CK_XLAT), 0, &c.inter_latency)))
		return rc;
	c.ar_intra_bandwidth = c.intra_bandwidth;
	c.ar_inter_bandwidth = c.inter_bandwidth;
	if (v[CK_ARI] && (rc = get_num(v[CK_ARI], CPATH(CK_ARI), 0,
				       &c.ar_intra_bandwidth)))
		return rc;
	if (v[CK_ARP] &&
	    (rc = get_bool(v[CK_ARP], CPATH(CK_ARP), &c.ar_intra_pairs)))
		return rc;
	if (v[CK_ARX] && (rc = get_num(v[CK_ARX], CPATH(CK_ARX), 0,
				       &c.ar_inter_bandwidth)))
		return rc;
#undef CPATH
	if ((rc = dpl_cluster_check(&c))) {
		snprintf(why, sizeof why, "%s", dpl_last_error());
		return dpl__error(DPL_EPARSE, "%s", why);
	}
	*out = c;
	return 0;
}

int dpl_cluster_read_json(const char *text, size_t len,
			  struct dpl_cluster *out)
{
	cJSON *root;
	int rc;

	if (out == NULL)
		return dpl__error(DPL_EINVAL, "out must not be NULL");
	if ((rc = parse_text(text, len, "a JSON cluster", &root)))
		return rc;
	rc = read_cluster(root, "", out);
	cJSON_Delete(root);
	return rc;
}

static void put_cluster(FILE *f, const struct dpl_cluster *c,
			const char *indent, int with_format)
{
	fprintf(f, "{\n");
	if (with_format)
		fprintf(f, "%s  \"format\": \"dpl-cluster\",\n%s  \"version\": 1,\n",
			indent, indent);
	fprintf(f, "%s  \"name\": ", indent);
	put_str(f, c->name);
	fprintf(f,
		",\n%s  \"machines\": %u,\n%s  \"devices_per_machine\": %u,\n"
		"%s  \"device_memory_bytes\": %.17g,\n"
		"%s  \"intra_bandwidth_bytes_per_s\": %.17g,\n"
		"%s  \"intra_latency_s\": %.17g,\n"
		"%s  \"inter_bandwidth_bytes_per_s\": %.17g,\n"
		"%s  \"inter_latency_s\": %.17g,\n"
		"%s  \"allreduce_intra_bandwidth_bytes_per_s\": %.17g,\n"
		"%s  \"allreduce_intra_pairs\": %s,\n"
		"%s  \"allreduce_inter_bandwidth_bytes_per_s\": %.17g\n%s}",
		indent, c->machines, indent, c->devices_per_machine, indent,
		c->device_memory, indent, c->intra_bandwidth, indent,
		c->intra_latency, indent, c->inter_bandwidth, indent,
		c->inter_latency, indent, c->ar_intra_bandwidth, indent,
		c->ar_intra_pairs ? "true" : "false", indent,
		c->ar_inter_bandwidth, indent);
}

int dpl_cluster_write_json(const struct dpl_cluster *c, FILE *f)
{
	if (c == NULL || f == NULL)
		return dpl__error(DPL_EINVAL, "cluster and file must not be NULL");
	put_cluster(f, c, "", 1);
	fputc('\n', f);
	return finish(f, "cluster");
}

/* ---- plans --------------------------------------------------------- */

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
			put_str(f, a->name);
			fputs(", \"last_name\": ", f);
			put_str(f, b->name);
			fputs(", ", f);
		}
		fputs("\"devices\": ", f);
		put_devices(f, st->devices);
		fprintf(f,
			",\n%s   \"replicas\": %u, \"forward_ms\": %.17g, "
			"\"backward_ms\": %.17g, \"send_ms\": %.17g, "
			"\"allreduce_ms\": %.17g,\n%s   \"inflight\": %u, "
			"\"memory_bytes\": %llu, \"parameter_bytes\": %.17g}",
			ind, st->replicas, st->forward_ms, st->backward_ms,
			st->send_ms, st->allreduce_ms, ind, st->inflight,
			(unsigned long long)st->memory_bytes,
			st->parameter_bytes);
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
		return dpl__error(DPL_EINVAL, "report and file must not be NULL");
	pl = &r->best;
	if (pl->stages < 1 || pl->stages > DPL_PLAN_MAX_STAGES ||
	    dpl_policy_name(pl->policy) == NULL)
		return dpl__error(DPL_EINVAL,
				  "report: the plan has %u stages and policy "
				  "%d; not a planned report",
				  pl->stages, (int)pl->policy);
	fputs("{\n  \"format\": \"dpl-plan\",\n  \"version\": 1,\n", f);
	if (prof)
		fprintf(f, "  \"layers\": %u,\n", dpl_profile_layers(prof));
	if (c) {
		fputs("  \"cluster\": ", f);
		put_cluster(f, c, "  ", 0);
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
	return finish(f, "plan");
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
	SK__N
};
static const char *const skeys[SK__N] = {
    "first_layer", "last_layer",  "first_name", "last_name",
    "devices",     "replicas",    "forward_ms", "backward_ms",
    "send_ms",     "allreduce_ms", "inflight",  "memory_bytes",
    "parameter_bytes"};

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
		return dpl__error(DPL_EPARSE, "%s: expected an object, got %s",
				  path, dpl__json_type_name(e));
	if ((rc = collect(e, path, NULL, skeys, SK__N,
			  (1u << SK_FIRST) | (1u << SK_LAST) |
			      (1u << SK_DEVICES) | (1u << SK_F) | (1u << SK_B) |
			      (1u << SK_SEND) | (1u << SK_AR),
			  v)))
		return rc;
#define SPATH(k) (snprintf(p, sizeof p, "%s.%s", path, skeys[k]), p)
	if ((rc = get_uint(v[SK_FIRST], SPATH(SK_FIRST), 0, INT32_MAX,
			   &st->first_layer)) ||
	    (rc = get_uint(v[SK_LAST], SPATH(SK_LAST), 0, INT32_MAX,
			   &st->last_layer)))
		return rc;
	if (v[SK_FNAME] && (rc = get_str(v[SK_FNAME], SPATH(SK_FNAME), &str)))
		return rc;
	if (v[SK_LNAME] && (rc = get_str(v[SK_LNAME], SPATH(SK_LNAME), &str)))
		return rc;
	if (!cJSON_IsArray(v[SK_DEVICES]) ||
	    cJSON_GetArraySize(v[SK_DEVICES]) < 1)
		return dpl__error(DPL_EPARSE,
				  "%s.devices: expected a non-empty array of "
				  "device ids",
				  path);
	cJSON_ArrayForEach(d, v[SK_DEVICES])
	{
		snprintf(p, sizeof p, "%s.devices[%u]", path, k++);
		if ((rc = get_uint(d, p, 0, DPL_PLAN_MAX_DEVICES - 1, &id)))
			return rc;
		if ((st->devices | *used) >> id & 1)
			return dpl__error(DPL_EPARSE,
					  "%s: device %u is used twice", p, id);
		st->devices |= 1ULL << id;
	}
	*used |= st->devices;
	st->replicas = (uint32_t)__builtin_popcountll(st->devices);
	if (v[SK_REPLICAS]) {
		if ((rc = get_uint(v[SK_REPLICAS], SPATH(SK_REPLICAS), 1,
				   DPL_PLAN_MAX_DEVICES, &k)))
			return rc;
		if (k != st->replicas)
			return dpl__error(DPL_EPARSE,
					  "%s.replicas: %u, but %u devices are "
					  "listed",
					  path, k, st->replicas);
	}
	if ((rc = get_num(v[SK_F], SPATH(SK_F), 0, &st->forward_ms)) ||
	    (rc = get_num(v[SK_B], SPATH(SK_B), 0, &st->backward_ms)) ||
	    (rc = get_num(v[SK_SEND], SPATH(SK_SEND), 0, &st->send_ms)) ||
	    (rc = get_num(v[SK_AR], SPATH(SK_AR), 0, &st->allreduce_ms)))
		return rc;
	if (v[SK_INFLIGHT] && (rc = get_uint(v[SK_INFLIGHT], SPATH(SK_INFLIGHT),
					     0, UINT32_MAX, &st->inflight)))
		return rc;
	if (v[SK_MEM]) {
		if ((rc = get_num(v[SK_MEM], SPATH(SK_MEM), 0, &dv)))
			return rc;
		st->memory_bytes = dv >= 1.8e19 ? UINT64_MAX : (uint64_t)dv;
	}
	if (v[SK_PAR] &&
	    (rc = get_num(v[SK_PAR], SPATH(SK_PAR), 0, &st->parameter_bytes)))
		return rc;
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

	if ((rc = collect(root, "", "dpl-plan", qkeys, QK__N,
			  (1u << QK_FORMAT) | (1u << QK_VERSION) |
			      (1u << QK_STAGES) | (1u << QK_MBS) |
			      (1u << QK_MB) | (1u << QK_POLICY),
			  v)))
		return rc;
	if (v[QK_LAYERS] &&
	    (rc = get_uint(v[QK_LAYERS], "layers", 1, INT32_MAX, &layers)))
		return rc;
	if (v[QK_CLUSTER]) {
		struct dpl_cluster c;

		if (!cJSON_IsObject(v[QK_CLUSTER]))
			return dpl__error(DPL_EPARSE,
					  "cluster: expected an object, got %s",
					  dpl__json_type_name(v[QK_CLUSTER]));
		if ((rc = read_cluster(v[QK_CLUSTER], "cluster", &c)))
			return rc;
	}
	if ((v[QK_PBS] &&
	     (rc = get_uint(v[QK_PBS], "profile_batch", 1, UINT32_MAX, &u))) ||
	    (v[QK_GBS] &&
	     (rc = get_uint(v[QK_GBS], "global_batch", 1, UINT32_MAX, &u))) ||
	    (v[QK_OPT] && (rc = get_num(v[QK_OPT], "optimizer_factor", 0, &dv))))
		return rc;
	if (!cJSON_IsArray(v[QK_STAGES]))
		return dpl__error(DPL_EPARSE, "stages: expected an array, got %s",
				  dpl__json_type_name(v[QK_STAGES]));
	size = cJSON_GetArraySize(v[QK_STAGES]);
	if (size < 1 || size > DPL_PLAN_MAX_STAGES)
		return dpl__error(DPL_EPARSE,
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
			return dpl__error(DPL_EPARSE,
					  "stages[%u].first_layer: %u, expected "
					  "%u (stages cover the layers in "
					  "order)",
					  s, st->first_layer, want);
		if (st->last_layer < st->first_layer)
			return dpl__error(DPL_EPARSE,
					  "stages[%u].last_layer: %u is before "
					  "first_layer %u",
					  s, st->last_layer, st->first_layer);
		s++;
	}
	if (layers && pl->stage[s - 1].last_layer + 1 != layers)
		return dpl__error(DPL_EPARSE,
				  "stages: the last stage ends at layer %u, "
				  "but the profile has %u layers",
				  pl->stage[s - 1].last_layer, layers);
	if ((rc = get_uint(v[QK_MBS], "microbatch_size", 1, INT32_MAX,
			   &pl->microbatch_size)) ||
	    (rc = get_uint(v[QK_MB], "microbatches", 1, INT32_MAX,
			   &pl->microbatches)) ||
	    (rc = get_str(v[QK_POLICY], "policy", &str)))
		return rc;
	if (dpl_policy_parse(str, &pl->policy)) {
		snprintf(why, sizeof why, "%s", dpl_last_error());
		return dpl__error(DPL_EPARSE, "policy: %s", why);
	}
	if (pl->policy != DPL_POLICY_GPIPE && pl->policy != DPL_POLICY_1F1B &&
	    pl->policy != DPL_POLICY_1F1B_COMM)
		return dpl__error(DPL_EPARSE,
				  "policy: '%s' is not a plan policy (gpipe, "
				  "1f1b or 1f1b-comm)",
				  str);
	if (v[QK_PRED] &&
	    (rc = get_num(v[QK_PRED], "predicted_ms", 0, &pl->predicted_ms)))
		return rc;
	if (v[QK_PIVOT] &&
	    (rc = get_num(v[QK_PIVOT], "pivot_ms", 0, &pl->pivot_ms)))
		return rc;
	if (v[QK_PIVOT_STAGE] &&
	    (rc = get_uint(v[QK_PIVOT_STAGE], "pivot_stage", 0, pl->stages - 1,
			   &pl->pivot_stage)))
		return rc;
	if (v[QK_PIVOT_XFER] &&
	    (rc = get_bool(v[QK_PIVOT_XFER], "pivot_is_transfer",
			   &pl->pivot_is_transfer)))
		return rc;
	if (v[QK_PEAK]) {
		if ((rc = get_num(v[QK_PEAK], "peak_memory_bytes", 0, &dv)))
			return rc;
		pl->peak_memory_bytes = dv >= 1.8e19 ? UINT64_MAX : (uint64_t)dv;
	}
	pl->fits = 1;
	if (v[QK_FITS] && (rc = get_bool(v[QK_FITS], "fits", &pl->fits)))
		return rc;
	pl->devices_used = (uint32_t)__builtin_popcountll(used);
	if (v[QK_USED] && (rc = get_uint(v[QK_USED], "devices_used", 0,
					 DPL_PLAN_MAX_DEVICES, &u)))
		return rc;
	if ((v[QK_SINGLE] && (rc = get_num(v[QK_SINGLE], "single_device_ms", 0,
					   &dv))) ||
	    (v[QK_SPEEDUP] && (rc = get_num(v[QK_SPEEDUP], "speedup", 0, &dv))))
		return rc;
	for (b = QK_BASELINES; b <= QK_SEARCH; b++)
		if (v[b] && !cJSON_IsObject(v[b]))
			return dpl__error(DPL_EPARSE,
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
		return dpl__error(DPL_EINVAL, "out must not be NULL");
	if ((rc = parse_text(text, len, "a JSON plan", &root)))
		return rc;
	tmp = malloc(sizeof *tmp);
	if (tmp == NULL) {
		cJSON_Delete(root);
		return dpl__error(DPL_ENOMEM, "out of memory");
	}
	rc = read_plan(root, tmp);
	if (rc == 0)
		*out = *tmp;
	free(tmp);
	cJSON_Delete(root);
	return rc;
}
