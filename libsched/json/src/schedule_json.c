/*
 * schedule_json.c - the JSON schedule file (format "dpl-schedule",
 * version 1; see dpl/json.h). Written with stdio, read with cJSON.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include <dpl/json.h>

#include "json_util.h"

#define SJ_FORMAT "dpl-schedule"
#define SJ_VERSION 1
/* Counts and indices in a file stay below 2^31. */
#define SJ_LIMIT 2147483648.0

int dpl_schedule_write_json(const dpl_schedule *s, FILE *f)
{
	char t[DPL_ACTION_TEXT_MAX];
	const char *pol;
	uint32_t r, st;
	bool caps = false;
	size_t i, n;

	if (s == NULL || f == NULL)
		return dpl_set_error(DPL_EINVAL, "schedule and file must not be NULL");
	pol = dpl_policy_name(dpl_schedule_policy(s));
	fprintf(f,
		"{\n  \"format\": \"%s\",\n  \"version\": %d,\n"
		"  \"policy\": \"%s\",\n  \"ranks\": %u,\n  \"stages\": %u,\n"
		"  \"microbatches\": %u,\n  \"lowered\": %s,\n"
		"  \"stage_to_rank\": [",
		SJ_FORMAT, SJ_VERSION, pol ? pol : "custom",
		dpl_schedule_ranks(s), dpl_schedule_stages(s),
		dpl_schedule_microbatches(s),
		dpl_schedule_is_lowered(s) ? "true" : "false");
	for (st = 0; st < dpl_schedule_stages(s); st++) {
		fprintf(f, "%s%u", st ? ", " : "",
			dpl_schedule_stage_rank(s, st));
		if (dpl_schedule_cap(s, st))
			caps = true;
	}
	fputs("],\n", f);
	if (caps) {
		fputs("  \"caps\": [", f);
		for (st = 0; st < dpl_schedule_stages(s); st++)
			fprintf(f, "%s%u", st ? ", " : "",
				dpl_schedule_cap(s, st));
		fputs("],\n", f);
	}
	fputs("  \"actions\": [", f);
	for (r = 0; r < dpl_schedule_ranks(s); r++) {
		const struct dpl_action *a = dpl_schedule_actions(s, r, &n);

		fprintf(f, "%s\n    [", r ? "," : "");
		for (i = 0; i < n; i++) {
			if (dpl_action_format(a[i], t, sizeof t) < 0)
				snprintf(t, sizeof t, "?");
			fprintf(f, "%s\"%s\"", i ? ", " : "", t);
		}
		fputc(']', f);
	}
	fputs("\n  ]\n}\n", f);
	if (fflush(f) != 0 || ferror(f))
		return dpl_set_error(DPL_EIO,
				  "writing the JSON schedule failed: %s",
				  strerror(errno));
	return 0;
}

/* Where the reader is, for messages: "actions[2][5]". */
struct sj_path {
	char text[64];
};


/* An integer in [min, 2^31) at `path`. */
static int get_u31(const cJSON *j, const char *path, uint32_t min,
		   uint32_t *out)
{
	double d;
	uint32_t u;

	if (!cJSON_IsNumber(j))
		return dpl_set_error(DPL_EPARSE, "%s: expected an integer, got %s",
				  path, dpl__json_type_name(j));
	d = j->valuedouble;
	if (d < 0)
		return dpl_set_error(DPL_EPARSE, "%s: %g is negative", path, d);
	if (!(d < SJ_LIMIT))
		return dpl_set_error(DPL_EPARSE,
				  "%s: %.17g is too large (at most "
				  "2147483647)",
				  path, d);
	u = (uint32_t)d;
	if ((double)u != d)
		return dpl_set_error(DPL_EPARSE, "%s: %.17g is not an integer",
				  path, d);
	if (u < min)
		return dpl_set_error(DPL_EPARSE, "%s: must be >= %u (got %u)",
				  path, min, u);
	*out = u;
	return 0;
}

/* `j` is an array of one entry per stage. */
static int check_size(const cJSON *j, const char *key, uint32_t n)
{
	int size;

	if (!cJSON_IsArray(j))
		return dpl_set_error(DPL_EPARSE, "%s: expected an array, got %s",
				  key, dpl__json_type_name(j));
	size = cJSON_GetArraySize(j);
	if (size < 0 || (uint32_t)size != n)
		return dpl_set_error(DPL_EPARSE,
				  "%s: %d entries, expected %u (one per "
				  "stage)",
				  key, size, n);
	return 0;
}

/* An array of exactly `n` integers in [0, limit) at `key`. */
static int get_u31_array(const cJSON *j, const char *key, uint32_t n,
			 uint32_t limit, const char *what, uint32_t *out)
{
	char path[64];
	const cJSON *e;
	uint32_t i = 0;
	int rc;

	if ((rc = check_size(j, key, n)))
		return rc;
	cJSON_ArrayForEach(e, j)
	{
		snprintf(path, sizeof path, "%s[%u]", key, i);
		if ((rc = get_u31(e, path, 0, &out[i])))
			return rc;
		if (out[i] >= limit)
			return dpl_set_error(DPL_EPARSE,
					  "%s: %s %u out of range (0..%u)", path,
					  what, out[i], limit - 1);
		i++;
	}
	return 0;
}

/* The keys of a version 1 file, in the order they are checked. */
enum sj_key {
	K_FORMAT,
	K_VERSION,
	K_POLICY,
	K_RANKS,
	K_STAGES,
	K_MICROBATCHES,
	K_LOWERED,
	K_STAGE_TO_RANK,
	K_CAPS,
	K_ACTIONS,
	K__COUNT
};

static const char *const key_names[K__COUNT] = {
    "format",  "version",       "policy", "ranks",  "stages",
    "microbatches", "lowered", "stage_to_rank", "caps", "actions",
};

/* Sort the root's members into v[]; reject unknown, repeated, missing. */
static int collect_keys(const cJSON *root, const cJSON **v)
{
	const cJSON *e;
	int k;

	cJSON_ArrayForEach(e, root)
	{
		for (k = 0; k < K__COUNT; k++)
			if (strcmp(e->string, key_names[k]) == 0)
				break;
		if (k == K__COUNT)
			return dpl_set_error(
			    DPL_EPARSE,
			    "unknown key '%.40s' (a version 1 schedule has "
			    "format, version, policy, ranks, stages, "
			    "microbatches, lowered, stage_to_rank, caps, "
			    "actions)",
			    e->string);
		if (v[k] != NULL)
			return dpl_set_error(DPL_EPARSE, "key '%s' appears twice",
					  key_names[k]);
		v[k] = e;
	}
	for (k = 0; k < K__COUNT; k++)
		if (v[k] == NULL && k != K_CAPS)
			return dpl_set_error(DPL_EPARSE, "missing key '%s'",
					  key_names[k]);
	return 0;
}

/* Line and column (1-based) of byte `pos` of text. */

struct sj_head {
	enum dpl_policy policy;
	uint32_t ranks, stages, mb;
	bool lowered;
};

static int read_head(const cJSON *const *v, struct sj_head *h)
{
	char why[512];
	uint32_t version;
	int rc;

	if (!cJSON_IsString(v[K_FORMAT]))
		return dpl_set_error(DPL_EPARSE, "format: expected a string, got %s",
				  dpl__json_type_name(v[K_FORMAT]));
	if (strcmp(v[K_FORMAT]->valuestring, SJ_FORMAT) != 0)
		return dpl_set_error(DPL_EPARSE,
				  "format: '%.40s' is not a dpl schedule "
				  "(expected \"" SJ_FORMAT "\")",
				  v[K_FORMAT]->valuestring);
	if ((rc = get_u31(v[K_VERSION], "version", 0, &version)))
		return rc;
	if (version != SJ_VERSION)
		return dpl_set_error(DPL_EPARSE,
				  "version: %u is not supported (this dpl "
				  "reads version %d)",
				  version, SJ_VERSION);
	if (!cJSON_IsString(v[K_POLICY]))
		return dpl_set_error(DPL_EPARSE, "policy: expected a string, got %s",
				  dpl__json_type_name(v[K_POLICY]));
	if (dpl_policy_parse(v[K_POLICY]->valuestring, &h->policy) != 0) {
		snprintf(why, sizeof why, "%s", dpl_last_error());
		return dpl_set_error(DPL_EPARSE, "policy: %s", why);
	}
	if ((rc = get_u31(v[K_RANKS], "ranks", 1, &h->ranks)) ||
	    (rc = get_u31(v[K_STAGES], "stages", 1, &h->stages)) ||
	    (rc = get_u31(v[K_MICROBATCHES], "microbatches", 1, &h->mb)))
		return rc;
	if (h->stages < h->ranks)
		return dpl_set_error(DPL_EPARSE,
				  "stages: %u is fewer than ranks (%u); every "
				  "rank needs a stage",
				  h->stages, h->ranks);
	if (!cJSON_IsBool(v[K_LOWERED]))
		return dpl_set_error(DPL_EPARSE,
				  "lowered: expected a boolean, got %s",
				  dpl__json_type_name(v[K_LOWERED]));
	h->lowered = cJSON_IsTrue(v[K_LOWERED]);
	return 0;
}

static int read_actions(const cJSON *j, dpl_schedule *s,
			const struct sj_head *h)
{
	char path[64], why[512];
	const cJSON *list, *e;
	struct dpl_action a;
	uint32_t r = 0;
	int size;
	size_t i;
	bool comm = false;

	if (!cJSON_IsArray(j))
		return dpl_set_error(DPL_EPARSE,
				  "actions: expected an array, got %s",
				  dpl__json_type_name(j));
	size = cJSON_GetArraySize(j);
	if (size < 0 || (uint32_t)size != h->ranks)
		return dpl_set_error(DPL_EPARSE,
				  "actions: %d lists, expected %u (one per "
				  "rank)",
				  size, h->ranks);
	cJSON_ArrayForEach(list, j)
	{
		if (!cJSON_IsArray(list))
			return dpl_set_error(DPL_EPARSE,
					  "actions[%u]: expected an array, "
					  "got %s",
					  r, dpl__json_type_name(list));
		i = 0;
		cJSON_ArrayForEach(e, list)
		{
			snprintf(path, sizeof path, "actions[%u][%zu]", r, i);
			if (!cJSON_IsString(e))
				return dpl_set_error(DPL_EPARSE,
						  "%s: expected a string, "
						  "got %s",
						  path, dpl__json_type_name(e));
			if (dpl_action_parse(e->valuestring,
					     strlen(e->valuestring), &a) ||
			    dpl_schedule_append(s, r, a)) {
				snprintf(why, sizeof why, "%s",
					 dpl_last_error());
				return dpl_set_error(DPL_EPARSE, "%s: %s", path,
						  why);
			}
			if (!dpl_action_is_compute(a.kind) &&
			    a.kind != DPL_ACT_OVERLAP_F_B && !comm) {
				comm = true;
				if (!h->lowered)
					return dpl_set_error(
					    DPL_EPARSE,
					    "%s: '%s' in a schedule marked "
					    "\"lowered\": false",
					    path, e->valuestring);
			}
			i++;
		}
		r++;
	}
	if (h->lowered && !comm)
		return dpl_set_error(DPL_EPARSE,
				  "lowered: true, but no list holds a SEND, "
				  "RECV, REDUCE_GRAD or STEP action");
	return 0;
}

static int read_root(const cJSON *root, dpl_schedule **out)
{
	const cJSON *v[K__COUNT] = {0};
	struct sj_head h;
	dpl_schedule *s = NULL;
	uint32_t *map = NULL, *caps = NULL, st;
	int rc;

	if (!cJSON_IsObject(root))
		return dpl_set_error(DPL_EPARSE,
				  "top level: expected an object, got %s",
				  dpl__json_type_name(root));
	if ((rc = collect_keys(root, v)) || (rc = read_head(v, &h)))
		return rc;
	/* Sizes first: the arrays bound what "stages" may allocate. */
	if ((rc = check_size(v[K_STAGE_TO_RANK], "stage_to_rank", h.stages)) ||
	    (v[K_CAPS] && (rc = check_size(v[K_CAPS], "caps", h.stages))))
		return rc;
	map = malloc(h.stages * sizeof *map);
	caps = calloc(h.stages, sizeof *caps);
	if (map == NULL || caps == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory for %u stages",
				h.stages);
		goto done;
	}
	if ((rc = get_u31_array(v[K_STAGE_TO_RANK], "stage_to_rank", h.stages,
				h.ranks, "rank", map)))
		goto done;
	if (v[K_CAPS] &&
	    (rc = get_u31_array(v[K_CAPS], "caps", h.stages, UINT32_MAX,
				"cap", caps)))
		goto done;
	if ((rc = dpl_schedule_create(h.ranks, h.stages, h.mb, &s)))
		goto done;
	if ((rc = dpl_schedule_set_policy(s, h.policy)))
		goto done;
	for (st = 0; st < h.stages && rc == 0; st++)
		if ((rc = dpl_schedule_map_stage(s, st, map[st])) == 0)
			rc = dpl_schedule_set_cap(s, st, caps[st]);
	if (rc)
		goto done;
	if ((rc = read_actions(v[K_ACTIONS], s, &h)))
		goto done;
	*out = s;
	s = NULL;
done:
	dpl_schedule_destroy(s);
	free(map);
	free(caps);
	return rc;
}

int dpl_schedule_read_json(const char *text, size_t len, dpl_schedule **out)
{
	cJSON *root;
	int rc;

	if (out == NULL || (text == NULL && len > 0))
		return dpl_set_error(DPL_EINVAL, "text and out must not be NULL");
	if ((rc = dpl__json_parse_text(text, len, "a JSON schedule", &root)))
		return rc;
	rc = read_root(root, out);
	cJSON_Delete(root);
	return rc;
}
