/*
 * ucx_options.c - the transport's "key=value,..." options string, read
 * with dpl_options_parse() against a table.
 *
 * The list-valued keys (tls, net_devices) take UCX's own comma-separated
 * lists (DPL_OPT_LIST): a part without '=' continues the list of the key
 * before it, so "tls=sm,tcp,err_mode=peer" sets tls to "sm,tcp".
 */
#include <string.h>

#include <dpl/common.h>

#include "ucx_internal.h"

static const char *const err_modes[] = {"none", "peer", NULL};

int dpl__ucx_options_parse(const char *s, struct dpl__ucx_options *o)
{
	const struct dpl_option table[] = {
		{.key = "err_mode", .kind = DPL_OPT_ENUM, .dst = &o->err_mode,
		 .names = err_modes},
		{.key = "tls", .kind = DPL_OPT_LIST, .dst = o->tls,
		 .size = sizeof o->tls},
		{.key = "net_devices", .kind = DPL_OPT_LIST,
		 .dst = o->net_devices, .size = sizeof o->net_devices},
	};

	memset(o, 0, sizeof *o);
	o->err_mode = DPL__UCX_ERR_NONE;
	return dpl_options_parse("ucx", s, table,
				 sizeof table / sizeof table[0]);
}
