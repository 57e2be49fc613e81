/*
 * profile_json.c - layer profiles as JSON (dpl-profile, see dpl/json.h):
 * dpl_profile_read_json() and dpl_profile_write_json().
 */
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include <dpl/json.h>
#include <dpl/plan.h>

#include "json_util.h"

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

	if ((rc = dpl__json_collect(root, "", "dpl-profile", pkeys, PK__N,
				    1u << PK_LAYERS, v)))
		return rc;
	if (!cJSON_IsArray(v[PK_LAYERS]))
		return dpl_set_error(DPL_EPARSE, "layers: expected an array, got %s",
				  dpl__json_type_name(v[PK_LAYERS]));
	size = cJSON_GetArraySize(v[PK_LAYERS]);
	if (size < 1)
		return dpl_set_error(DPL_EPARSE, "layers: the list is empty");
	n = (uint32_t)size;
	layers = calloc(n, sizeof *layers);
	if (v[PK_EDGES]) {
		if (!cJSON_IsArray(v[PK_EDGES])) {
			free(layers);
			return dpl_set_error(DPL_EPARSE,
					  "edges: expected an array, got %s",
					  dpl__json_type_name(v[PK_EDGES]));
		}
		ne = (size_t)cJSON_GetArraySize(v[PK_EDGES]);
	}
	edges = malloc((2 * ne + 1) * sizeof *edges);
	if (layers == NULL || edges == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	cJSON_ArrayForEach(e, v[PK_LAYERS])
	{
		struct dpl_layer *l = &layers[k];

		snprintf(path, sizeof path, "layers[%u]", k);
		if (!cJSON_IsObject(e)) {
			rc = dpl_set_error(DPL_EPARSE,
					"%s: expected an object, got %s", path,
					dpl__json_type_name(e));
			goto out;
		}
		if ((rc = dpl__json_collect(e, path, NULL, lkeys, LK__N,
					    (1u << LK_F) | (1u << LK_B) |
						(1u << LK_ACT) | (1u << LK_PAR),
					    lv)))
			goto out;
		if (lv[LK_ID] &&
		    (rc = dpl__json_get_str(lv[LK_ID], "id", &l->id)))
			goto out;
		if (lv[LK_NAME] &&
		    (rc = dpl__json_get_str(lv[LK_NAME], "name", &l->name)))
			goto out;
		snprintf(path, sizeof path, "layers[%u].forward_ms", k);
		if ((rc = dpl__json_get_num(lv[LK_F], path, 0, &l->forward_ms)))
			goto out;
		snprintf(path, sizeof path, "layers[%u].backward_ms", k);
		if ((rc = dpl__json_get_num(lv[LK_B], path, 0,
					    &l->backward_ms)))
			goto out;
		snprintf(path, sizeof path, "layers[%u].activation_bytes", k);
		if ((rc = dpl__json_get_num(lv[LK_ACT], path, 0,
					    &l->activation_bytes)))
			goto out;
		snprintf(path, sizeof path, "layers[%u].parameter_bytes", k);
		if ((rc = dpl__json_get_num(lv[LK_PAR], path, 0,
					    &l->parameter_bytes)))
			goto out;
		k++;
	}
	k = 0;
	if (v[PK_EDGES])
		cJSON_ArrayForEach(e, v[PK_EDGES])
		{
			snprintf(path, sizeof path, "edges[%u]", k);
			if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2) {
				rc = dpl_set_error(DPL_EPARSE,
						"%s: expected [from, to], got %s",
						path, dpl__json_type_name(e));
				goto out;
			}
			snprintf(path, sizeof path, "edges[%u][0]", k);
			if ((rc = dpl__json_get_uint(cJSON_GetArrayItem(e, 0),
						     path, 0, n - 1,
						     &edges[2 * k])))
				goto out;
			snprintf(path, sizeof path, "edges[%u][1]", k);
			if ((rc = dpl__json_get_uint(cJSON_GetArrayItem(e, 1),
						     path, 0, n - 1,
						     &edges[2 * k + 1])))
				goto out;
			k++;
		}
	rc = dpl_profile_create(layers, n, edges, ne, out);
	if (rc && rc != DPL_ENOMEM) {
		snprintf(why, sizeof why, "%s", dpl_last_error());
		rc = dpl_set_error(DPL_EPARSE, "%s", why);
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
		return dpl_set_error(DPL_EINVAL, "out must not be NULL");
	if ((rc = dpl__json_parse_text(text, len, "a JSON profile", &root)))
		return rc;
	rc = read_profile(root, out);
	cJSON_Delete(root);
	return rc;
}

int dpl_profile_write_json(const dpl_profile *p, FILE *f)
{
	uint32_t n = dpl_profile_layers(p);

	if (p == NULL || f == NULL)
		return dpl_set_error(DPL_EINVAL, "profile and file must not be NULL");
	fputs("{\n  \"format\": \"dpl-profile\",\n  \"version\": 1,\n"
	      "  \"layers\": [",
	      f);
	for (uint32_t i = 0; i < n; i++) {
		const struct dpl_layer *l = dpl_profile_layer(p, i);

		fprintf(f, "%s\n    {\"id\": ", i ? "," : "");
		dpl__json_put_str(f, l->id);
		fputs(", \"name\": ", f);
		dpl__json_put_str(f, l->name);
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
	return dpl__json_finish(f, "profile");
}
