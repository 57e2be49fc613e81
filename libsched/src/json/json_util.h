/*
 * json_util.h - helpers shared by dpl_json's readers (schedules, plans,
 * profiles, clusters); not installed.
 */
#ifndef DPL_JSON_UTIL_H
#define DPL_JSON_UTIL_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* "a number", "an array", ...: what a JSON value is, for messages. */
const char *dpl__json_type_name(const cJSON *j);

/* 1-based line and column of byte `pos` of `text`. */
void dpl__json_line_col(const char *text, size_t pos, size_t *line,
			size_t *col);

#endif
