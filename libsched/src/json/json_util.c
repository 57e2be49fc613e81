/* json_util.c - helpers shared by dpl_json's readers. */
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
