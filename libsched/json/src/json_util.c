/*
 * json_util.c - helpers shared by dpl_json's readers and writers: what a
 * value is and where, parsing a whole text, sorting an object's keys,
 * typed and checked member values, escaped strings, the end of a write.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/common.h>

#include "json_util.h"

const char *dpl__json_type_name(const cJSON *j)
{
	if (cJSON_IsBool(j))
		return "a boolean";
	if (cJSON_IsNull(j))
		return "null";
	if (cJSON_IsNumber(j))
		return "a number";
	if (cJSON_IsString(j))
		return "a string";
	if (cJSON_IsArray(j))
		return "an array";
	if (cJSON_IsObject(j))
		return "an object";
	return "something else";
}

void dpl__json_line_col(const char *text, size_t pos, size_t *line,
			size_t *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < pos; i++) {
		if (text[i] == '\n') {
			(*line)++;
			*col = 1;
		} else {
			(*col)++;
		}
	}
}

/* Parse `len` bytes as one JSON value; `what` names it in messages. */
int dpl__json_parse_text(const char *text, size_t len, const char *what,
			 cJSON **out)
{
	const char *end = NULL;
	size_t line, col, pos;
	cJSON *root;

	if (text == NULL && len > 0)
		return dpl_set_error(DPL_EINVAL, "text must not be NULL");
	for (pos = 0; pos < len && text[pos] && strchr(" \t\r\n", text[pos]);
	     pos++)
		;
	if (pos == len)
		return dpl_set_error(DPL_EPARSE, "empty input: expected %s", what);
	root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
	if (root == NULL) {
		pos = end && end >= text && end <= text + len
			  ? (size_t)(end - text)
			  : 0;
		dpl__json_line_col(text, pos, &line, &col);
		return dpl_set_error(DPL_EPARSE,
				  "JSON syntax error at line %zu, column %zu",
				  line, col);
	}
	for (pos = (size_t)(end - text);
	     pos < len && text[pos] && strchr(" \t\r\n", text[pos]); pos++)
		;
	if (pos < len) {
		dpl__json_line_col(text, pos, &line, &col);
		cJSON_Delete(root);
		return dpl_set_error(DPL_EPARSE,
				  "text after the JSON value at line %zu, "
				  "column %zu",
				  line, col);
	}
	if (!cJSON_IsObject(root)) {
		int rc = dpl_set_error(DPL_EPARSE,
				    "top level: expected an object, got %s",
				    dpl__json_type_name(root));

		cJSON_Delete(root);
		return rc;
	}
	*out = root;
	return 0;
}

static int check_format(const cJSON *fmt, const cJSON *ver, const char *want);

/*
 * Sort an object's members into v[] by the names in keys[]; reject an
 * unknown or repeated key, a wrong "format" or "version" (when `format`
 * names the expected file type), and a missing key whose bit is in
 * `required`.
 */
int dpl__json_collect(const cJSON *obj, const char *path, const char *format,
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
			return dpl_set_error(DPL_EPARSE, "%s%sunknown key '%.40s'",
					  path, *path ? ": " : "", e->string);
		if (v[k] != NULL)
			return dpl_set_error(DPL_EPARSE,
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
			return dpl_set_error(DPL_EPARSE, "%s%smissing key '%s'",
					  path, *path ? ": " : "", keys[k]);
	return 0;
}

int dpl__json_get_num(const cJSON *j, const char *path, double min,
		      double *out)
{
	if (!cJSON_IsNumber(j))
		return dpl_set_error(DPL_EPARSE, "%s: expected a number, got %s",
				  path, dpl__json_type_name(j));
	if (!isfinite(j->valuedouble))
		return dpl_set_error(DPL_EPARSE, "%s: not a finite number", path);
	if (j->valuedouble < min)
		return dpl_set_error(DPL_EPARSE, "%s: %.17g is below %g", path,
				  j->valuedouble, min);
	*out = j->valuedouble;
	return 0;
}

int dpl__json_get_uint(const cJSON *j, const char *path, uint32_t min,
		       uint32_t max, uint32_t *out)
{
	double d;

	if (!cJSON_IsNumber(j))
		return dpl_set_error(DPL_EPARSE, "%s: expected an integer, got %s",
				  path, dpl__json_type_name(j));
	d = j->valuedouble;
	if (!(d >= 0))
		return dpl_set_error(DPL_EPARSE, "%s: %.17g is negative", path, d);
	if (d != floor(d))
		return dpl_set_error(DPL_EPARSE, "%s: %.17g is not an integer",
				  path, d);
	if (d < min || d > max)
		return dpl_set_error(DPL_EPARSE, "%s: %.17g is out of range "
					      "[%u, %u]",
				  path, d, min, max);
	*out = (uint32_t)d;
	return 0;
}

int dpl__json_get_bool(const cJSON *j, const char *path, int *out)
{
	if (!cJSON_IsBool(j))
		return dpl_set_error(DPL_EPARSE, "%s: expected a boolean, got %s",
				  path, dpl__json_type_name(j));
	*out = cJSON_IsTrue(j);
	return 0;
}

int dpl__json_get_str(const cJSON *j, const char *path, const char **out)
{
	if (!cJSON_IsString(j))
		return dpl_set_error(DPL_EPARSE, "%s: expected a string, got %s",
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
		if ((rc = dpl__json_get_str(fmt, "format", &s)))
			return rc;
		if (strcmp(s, want) != 0)
			return dpl_set_error(DPL_EPARSE,
					  "format: '%.40s' is not a %s file "
					  "(expected \"%s\")",
					  s, want, want);
	}
	if (ver) {
		if ((rc = dpl__json_get_uint(ver, "version", 0, UINT32_MAX,
					      &v)))
			return rc;
		if (v != 1)
			return dpl_set_error(DPL_EPARSE,
					  "version: %u is not supported (this "
					  "dpl reads version 1)",
					  v);
	}
	return 0;
}

/* A JSON string literal of s (escaped) to f. */
void dpl__json_put_str(FILE *f, const char *s)
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

int dpl__json_finish(FILE *f, const char *what)
{
	if (fflush(f) != 0 || ferror(f))
		return dpl_set_error(DPL_EIO, "writing the JSON %s failed: %s",
				  what, strerror(errno));
	return 0;
}
