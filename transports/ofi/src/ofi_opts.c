/*
 * ofi_opts.c - the "key=value,..." options of the libfabric transport, as
 * a table for dpl_options_parse() (dpl/backend.h).
 *
 * Keys (dpl/transport_ofi.h and README.md have their meaning): provider,
 * iface, node, liveness_ms, inline_max, slots, mr, mr_cache, warmup,
 * offer. A bad key or value is DPL_EINVAL naming it.
 */
#include <string.h>

#include "ofi_internal.h"

#define OFI_INLINE_DEFAULT (UINT64_C(64) << 10)
#define OFI_INLINE_LIMIT (UINT64_C(64) << 20)

int dpl__ofi_opts_parse(const char *s, struct ofi_opts *o)
{
	static const char *const mr_modes[] = {"auto", "always", NULL};
	uint32_t mr = 0;
	const struct dpl_option table[] = {
		{.key = "provider", .kind = DPL_OPT_TEXT, .dst = o->provider,
		 .size = sizeof o->provider},
		{.key = "iface", .kind = DPL_OPT_TEXT, .dst = o->iface,
		 .size = sizeof o->iface},
		{.key = "node", .kind = DPL_OPT_TEXT, .dst = o->node,
		 .size = sizeof o->node},
		{.key = "liveness_ms", .kind = DPL_OPT_U32,
		 .dst = &o->liveness_ms, .lo = 10, .hi = 3600000},
		{.key = "inline_max", .kind = DPL_OPT_U64,
		 .dst = &o->inline_max, .lo = 0, .hi = OFI_INLINE_LIMIT,
		 .set = &o->inline_set},
		{.key = "slots", .kind = DPL_OPT_U32, .dst = &o->slots,
		 .lo = 16, .hi = (UINT64_C(1) << OFI_SLOT_BITS) - 1},
		{.key = "mr", .kind = DPL_OPT_ENUM, .dst = &mr,
		 .names = mr_modes},
		{.key = "mr_cache", .kind = DPL_OPT_BOOL, .dst = &o->mr_cache},
		{.key = "warmup", .kind = DPL_OPT_BOOL, .dst = &o->warmup},
		{.key = "offer", .kind = DPL_OPT_BOOL, .dst = &o->offer},
	};
	int rc;

	memset(o, 0, sizeof *o);
	o->inline_max = OFI_INLINE_DEFAULT;
	o->slots = 4096;
	o->mr_cache = true;
	o->warmup = true;
	o->offer = true;
	rc = dpl_options_parse("ofi", s, table, sizeof table / sizeof table[0]);
	if (rc != 0)
		return rc;
	o->mr_always = mr == 1;
	return 0;
}
