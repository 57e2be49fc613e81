/*
 * ucx_options.c - the transport's "key=value,..." options string, read
 * with dpl_options_parse() against a table.
 *
 * The list-valued keys (tls, net_devices) take UCX's own comma-separated
 * lists, so a part without '=' continues the list of the key before it:
 * "tls=sm,tcp,err_mode=peer" sets tls to "sm,tcp". Before parsing, the
 * commas inside a list become LIST_SEP, so that the shared parser sees
 * one part per key; they are commas again in the parsed values.
 */
#include <stdlib.h>
#include <string.h>

#include <dpl/common.h>

#include "ucx_internal.h"

#define LIST_SEP '\x1f'

static const char *const err_modes[] = {"none", "peer", NULL};

/* The list key that key[0..n) names, or NULL when it names none. */
static const char *list_key(const char *key, size_t n)
{
	if (n == 3 && memcmp(key, "tls", 3) == 0)
		return "tls";
	if (n == 11 && memcmp(key, "net_devices", 11) == 0)
		return "net_devices";
	return NULL;
}

/* Copy s into out (strlen(s) + 1 bytes) with each comma that continues
 * a list turned into LIST_SEP. */
static int join_lists(const char *s, char *out)
{
	const char *list = NULL; /* the key whose list a bare part continues */
	size_t n = strlen(s), i = 0;

	if (memchr(s, LIST_SEP, n) != NULL)
		return dpl_set_error(DPL_EINVAL, "ucx: options hold the "
				     "control character 0x1f");
	if (n > 0 && s[n - 1] == ',')
		return dpl_set_error(DPL_EINVAL, "ucx: options end with ','");
	for (;;) {
		size_t len = strcspn(s, ",");
		const char *eq = memchr(s, '=', len);

		if (eq != NULL) {
			list = list_key(s, (size_t)(eq - s));
		} else if (list != NULL) {
			if (len == 0)
				return dpl_set_error(DPL_EINVAL, "ucx: option "
						     "'%s' has an empty "
						     "value", list);
			out[i - 1] = LIST_SEP; /* the comma before */
		}
		memcpy(out + i, s, len);
		i += len;
		if (s[len] == '\0')
			break;
		out[i++] = ',';
		s += len + 1;
	}
	out[i] = '\0';
	return 0;
}

static void split_lists(char *v)
{
	for (; *v != '\0'; v++)
		if (*v == LIST_SEP)
			*v = ',';
}

int dpl__ucx_options_parse(const char *s, struct dpl__ucx_options *o)
{
	const struct dpl_option table[] = {
		{.key = "err_mode", .kind = DPL_OPT_ENUM, .dst = &o->err_mode,
		 .names = err_modes},
		{.key = "tls", .kind = DPL_OPT_TEXT, .dst = o->tls,
		 .size = sizeof o->tls},
		{.key = "net_devices", .kind = DPL_OPT_TEXT,
		 .dst = o->net_devices, .size = sizeof o->net_devices},
	};
	char *text;
	int rc;

	memset(o, 0, sizeof *o);
	o->err_mode = DPL__UCX_ERR_NONE;
	if (s == NULL || *s == '\0')
		return 0;
	text = malloc(strlen(s) + 1);
	if (text == NULL)
		return dpl_set_error(DPL_ENOMEM, "ucx: out of memory for the "
				     "options");
	rc = join_lists(s, text);
	if (rc == 0)
		rc = dpl_options_parse("ucx", text, table,
				       sizeof table / sizeof table[0]);
	free(text);
	if (rc != 0)
		return rc;
	split_lists(o->tls);
	split_lists(o->net_devices);
	return 0;
}
