/*
 * json_util.h - helpers shared by dpl_json's readers and writers
 * (schedules, plans, profiles, clusters); not installed.
 */
#ifndef DPL_JSON_UTIL_H
#define DPL_JSON_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include <dpl/plan.h>

/* "a number", "an array", ...: what a JSON value is, for messages. */
const char *dpl__json_type_name(const cJSON *j);

/* 1-based line and column of byte `pos` of `text`. */
void dpl__json_line_col(const char *text, size_t pos, size_t *line,
			size_t *col);

/*
 * Parse `len` bytes as one JSON object with nothing after it; `what`
 * ("a JSON plan") names the expected input in messages. On success *out
 * is the tree, for the caller to cJSON_Delete(). DPL_EINVAL for NULL
 * text, DPL_EPARSE naming the line and column of a syntax error.
 */
int dpl__json_parse_text(const char *text, size_t len, const char *what,
			 cJSON **out);

/*
 * Sort an object's members into v[] by the names in keys[]; reject an
 * unknown or repeated key, a wrong "format" or "version" (when `format`
 * names the expected file type; keys[0] and keys[1] are then "format"
 * and "version"), and a missing key whose bit is in `required`. `path`
 * names the object in messages ("" for the top level). DPL_EPARSE.
 */
int dpl__json_collect(const cJSON *obj, const char *path, const char *format,
		      const char *const *keys, int n, uint64_t required,
		      const cJSON **v);

/*
 * A member's value, checked: a finite number >= min; an integer in
 * [min, max]; a boolean (0 or 1); a string (owned by the tree). `path`
 * names the member in messages; DPL_EPARSE, *out untouched, on failure.
 */
int dpl__json_get_num(const cJSON *j, const char *path, double min,
		      double *out);
int dpl__json_get_uint(const cJSON *j, const char *path, uint32_t min,
		       uint32_t max, uint32_t *out);
int dpl__json_get_bool(const cJSON *j, const char *path, int *out);
int dpl__json_get_str(const cJSON *j, const char *path, const char **out);

/* A JSON string literal of s (escaped) to f; NULL writes "". */
void dpl__json_put_str(FILE *f, const char *s);

/* Flush f after writing the JSON `what`; DPL_EIO when writing failed. */
int dpl__json_finish(FILE *f, const char *what);

/* Read a cluster object (cluster_json.c) and check it; a "format" or
 * "version" member, when present, must say "dpl-cluster" version 1.
 * `path` names the object in messages ("" at the top level).
 * DPL_EPARSE, *out untouched, on failure. */
int dpl__json_read_cluster(const cJSON *obj, const char *path,
			   struct dpl_cluster *out);

/* Write a cluster object, each line after the first prefixed by
 * `indent`; with its "format" and "version" when with_format. */
void dpl__json_put_cluster(FILE *f, const struct dpl_cluster *c,
			   const char *indent, int with_format);

#endif
