/*
 * ofi_opts.c - the "key=value,..." options of the libfabric transport.
 *
 * Keys (README.md has the full list): provider, iface, node, liveness_ms,
 * inline_max, slots, mr, mr_cache, warmup, offer. A bad key or value is
 * DPL_EINVAL naming it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ofi_internal.h"

#define OFI_INLINE_DEFAULT (UINT64_C(64) << 10)
#define OFI_INLINE_LIMIT (UINT64_C(64) << 20)

static int num(const char *key, const char *v, uint64_t lo, uint64_t hi,
	       uint64_t *out)
{
	char *end;
	unsigned long long x;

	if (*v < '0' || *v > '9')
		return dpl_set_error(DPL_EINVAL,
				     "ofi: option %s='%s' is not a "
				     "number", key, v);
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno != 0 || *end != '\0')
		return dpl_set_error(DPL_EINVAL,
				     "ofi: option %s='%s' is not a "
				     "number", key, v);
	if (x < lo || x > hi)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: option %s=%llu out of range "
				     "[%llu, %llu]", key, x,
				     (unsigned long long)lo,
				     (unsigned long long)hi);
	*out = x;
	return 0;
}

static int flag(const char *key, const char *v, bool *out)
{
	if (strcmp(v, "1") == 0 || strcmp(v, "on") == 0 ||
	    strcmp(v, "yes") == 0) {
		*out = true;
		return 0;
	}
	if (strcmp(v, "0") == 0 || strcmp(v, "off") == 0 ||
	    strcmp(v, "no") == 0) {
		*out = false;
		return 0;
	}
	return dpl_set_error(DPL_EINVAL,
			     "ofi: option %s='%s' must be 0 or 1", key, v);
}

static int text(const char *key, const char *v, char *dst, size_t size)
{
	if (*v == '\0' || strlen(v) >= size)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: option %s='%s' is empty or "
				     "longer than %zu bytes", key, v,
				     size - 1);
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

static int one(char *kv, struct ofi_opts *o)
{
	char *v = strchr(kv, '=');
	uint64_t x;
	int rc;

	if (v == NULL)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: option '%s' is not key=value",
				     kv);
	*v++ = '\0';
	if (strcmp(kv, "provider") == 0)
		return text(kv, v, o->provider, sizeof o->provider);
	if (strcmp(kv, "iface") == 0)
		return text(kv, v, o->iface, sizeof o->iface);
	if (strcmp(kv, "node") == 0)
		return text(kv, v, o->node, sizeof o->node);
	if (strcmp(kv, "liveness_ms") == 0) {
		rc = num(kv, v, 10, 3600000, &x);
		o->liveness_ms = (uint32_t)x;
		return rc;
	}
	if (strcmp(kv, "inline_max") == 0) {
		rc = num(kv, v, 0, OFI_INLINE_LIMIT, &x);
		o->inline_max = x;
		o->inline_set = true;
		return rc;
	}
	if (strcmp(kv, "slots") == 0) {
		rc = num(kv, v, 16, (UINT64_C(1) << OFI_SLOT_BITS) - 1, &x);
		o->slots = (uint32_t)x;
		return rc;
	}
	if (strcmp(kv, "mr") == 0) {
		if (strcmp(v, "auto") == 0 || strcmp(v, "always") == 0) {
			o->mr_always = strcmp(v, "always") == 0;
			return 0;
		}
		return dpl_set_error(DPL_EINVAL,
				     "ofi: option mr='%s' must be auto or "
				     "always", v);
	}
	if (strcmp(kv, "mr_cache") == 0)
		return flag(kv, v, &o->mr_cache);
	if (strcmp(kv, "warmup") == 0)
		return flag(kv, v, &o->warmup);
	if (strcmp(kv, "offer") == 0)
		return flag(kv, v, &o->offer);
	return dpl_set_error(DPL_EINVAL,
			     "ofi: unknown option '%s' (known: provider, "
			     "iface, node, liveness_ms, inline_max, slots, "
			     "mr, mr_cache, warmup, offer)", kv);
}

int dpl__ofi_opts_parse(const char *s, struct ofi_opts *o)
{
	char buf[512], *p, *next;
	int rc;

	memset(o, 0, sizeof *o);
	o->inline_max = OFI_INLINE_DEFAULT;
	o->slots = 4096;
	o->mr_cache = true;
	o->warmup = true;
	o->offer = true;
	if (s == NULL || *s == '\0')
		return 0;
	if (strlen(s) >= sizeof buf)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: options longer than %zu bytes",
				     sizeof buf - 1);
	memcpy(buf, s, strlen(s) + 1);
	for (p = buf; p != NULL; p = next) {
		next = strchr(p, ',');
		if (next != NULL)
			*next++ = '\0';
		if (*p == '\0')
			continue;
		if ((rc = one(p, o)) != 0)
			return rc;
	}
	return 0;
}
