/*
 * ucx_options.c - the transport's "key=value,..." options string.
 *
 * The list-valued keys (tls, net_devices) take UCX's own comma-separated
 * lists, so a segment without '=' continues the list of the key before
 * it: "tls=sm,tcp,err_mode=peer" sets tls to "sm,tcp".
 */
#include <stdio.h>
#include <string.h>

#include <dpl/common.h>

#include "ucx_internal.h"

/* Append v[0..n) to the list dst (joined with ','). */
static int add_value(char *dst, const char *key, const char *v, size_t n)
{
	size_t have = strlen(dst), sep = have > 0 ? 1 : 0;

	if (n == 0)
		return dpl_set_error(DPL_EINVAL, "ucx: option '%s' has an "
				     "empty value", key);
	if (have + sep + n >= DPL__UCX_OPT_VALUE_MAX)
		return dpl_set_error(DPL_EINVAL, "ucx: option '%s' is "
				     "longer than %d bytes", key,
				     DPL__UCX_OPT_VALUE_MAX - 1);
	if (sep)
		dst[have++] = ',';
	memcpy(dst + have, v, n);
	dst[have + n] = '\0';
	return 0;
}

static int set_err_mode(struct dpl__ucx_options *o, const char *v, size_t n)
{
	if (n == 4 && memcmp(v, "none", 4) == 0)
		o->err_mode = DPL__UCX_ERR_NONE;
	else if (n == 4 && memcmp(v, "peer", 4) == 0)
		o->err_mode = DPL__UCX_ERR_PEER;
	else
		return dpl_set_error(DPL_EINVAL, "ucx: err_mode '%.*s' "
				     "(expected none or peer)", (int)n, v);
	return 0;
}

int dpl__ucx_options_parse(const char *s, struct dpl__ucx_options *o)
{
	char *list = NULL; /* the list a bare segment continues */
	const char *list_key = "";
	int rc;

	memset(o, 0, sizeof *o);
	o->err_mode = DPL__UCX_ERR_NONE;
	while (s != NULL && *s != '\0') {
		const char *end = strchr(s, ',');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		const char *eq = memchr(s, '=', len);
		size_t klen = eq ? (size_t)(eq - s) : len;
		const char *v = eq ? eq + 1 : s;
		size_t vlen = eq ? len - klen - 1 : len;
		char key[32];

		if (eq == NULL) {
			if (list == NULL)
				return dpl_set_error(DPL_EINVAL, "ucx: "
						     "malformed option "
						     "'%.*s' (expected "
						     "key=value)",
						     (int)len, s);
			if ((rc = add_value(list, list_key, v, vlen)) != 0)
				return rc;
		} else {
			if (klen == 0 || klen >= sizeof key)
				return dpl_set_error(DPL_EINVAL, "ucx: "
						     "malformed option "
						     "'%.*s' (expected "
						     "key=value)",
						     (int)len, s);
			memcpy(key, s, klen);
			key[klen] = '\0';
			list = NULL;
			if (strcmp(key, "err_mode") == 0) {
				rc = set_err_mode(o, v, vlen);
			} else if (strcmp(key, "tls") == 0) {
				list = o->tls;
				list_key = "tls";
				o->tls[0] = '\0';
				rc = add_value(list, list_key, v, vlen);
			} else if (strcmp(key, "net_devices") == 0) {
				list = o->net_devices;
				list_key = "net_devices";
				o->net_devices[0] = '\0';
				rc = add_value(list, list_key, v, vlen);
			} else {
				rc = dpl_set_error(DPL_EINVAL, "ucx: "
						   "unknown option '%s' "
						   "(known: err_mode, "
						   "tls, net_devices)",
						   key);
			}
			if (rc != 0)
				return rc;
		}
		if (end == NULL)
			break;
		s = end + 1;
		if (*s == '\0')
			return dpl_set_error(DPL_EINVAL, "ucx: options end "
					     "with ','");
	}
	return 0;
}
