/* action.c - the action IR's names and its PyTorch-compatible text form. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const char *const kind_names[DPL_ACT__COUNT] = {
	[DPL_ACT_F] = "F",
	[DPL_ACT_B] = "B",
	[DPL_ACT_I] = "I",
	[DPL_ACT_W] = "W",
	[DPL_ACT_SEND_F] = "SEND_F",
	[DPL_ACT_RECV_F] = "RECV_F",
	[DPL_ACT_SEND_B] = "SEND_B",
	[DPL_ACT_RECV_B] = "RECV_B",
	[DPL_ACT_REDUCE_GRAD] = "REDUCE_GRAD",
	[DPL_ACT_STEP] = "STEP",
	[DPL_ACT_UNSHARD] = "UNSHARD",
	[DPL_ACT_RESHARD] = "RESHARD",
	[DPL_ACT_WAIT_REDUCE_GRAD] = "WAIT_REDUCE_GRAD",
	[DPL_ACT_WAIT_SEND_F] = "WAIT_SEND_F",
	[DPL_ACT_WAIT_SEND_B] = "WAIT_SEND_B",
	[DPL_ACT_OVERLAP_F_B] = "OVERLAP_F_B",
};


const char *dpl_action_kind_name(uint32_t kind)
{
	return kind < DPL_ACT__COUNT ? kind_names[kind] : NULL;
}

int dpl_action_is_compute(uint32_t kind)
{
	return kind <= DPL_ACT_W;
}

static bool kind_has_mb(uint32_t kind)
{
	return dpl__kind_has_mb(kind);
}

int dpl_action_format(struct dpl_action a, char *buf, size_t size)
{
	int n;

	if (size > 0)
		buf[0] = '\0';
	if (a.kind >= DPL_ACT__COUNT)
		return dpl__error(DPL_EINVAL, "action kind %u is not a kind",
				  a.kind);
	if (kind_has_mb(a.kind) != (a.microbatch != DPL_NO_MICROBATCH))
		return dpl__error(DPL_EINVAL,
				  "action %s: micro-batch %s expected",
				  kind_names[a.kind],
				  kind_has_mb(a.kind) ? "a" : "no");
	if (kind_has_mb(a.kind))
		n = snprintf(buf, size, "%u%s%u", a.stage, kind_names[a.kind],
			     a.microbatch);
	else
		n = snprintf(buf, size, "%u%s", a.stage, kind_names[a.kind]);
	if (n < 0 || (size_t)n >= size) {
		if (size > 0)
			buf[0] = '\0';
		return dpl__error(DPL_ERANGE, "action text needs %d bytes", n);
	}
	return n;
}

/* Parse a decimal uint32 of at most 10 digits; returns digits used. */
static size_t parse_u32(const char *t, size_t len, uint32_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	while (i < len && t[i] >= '0' && t[i] <= '9') {
		v = v * 10 + (uint64_t)(t[i] - '0');
		if (v >= UINT32_MAX)
			return 0; /* UINT32_MAX is reserved */
		i++;
	}
	*out = (uint32_t)v;
	return i;
}

int dpl_action_parse(const char *text, size_t len, struct dpl_action *out)
{
	struct dpl_action a;
	size_t i, n;
	uint32_t k;

	i = parse_u32(text, len, &a.stage);
	if (i == 0)
		goto bad;
	/* Longest kind name first so "B" does not shadow nothing and
	 * "SEND_F" is not read as something shorter. */
	for (k = 0; k < DPL_ACT__COUNT; k++) {
		size_t kl = strlen(kind_names[k]);

		if (len - i < kl || memcmp(text + i, kind_names[k], kl) != 0)
			continue;
		if (kind_has_mb(k)) {
			n = parse_u32(text + i + kl, len - i - kl,
				      &a.microbatch);
			if (n == 0 || i + kl + n != len)
				continue;
		} else {
			if (i + kl != len)
				continue;
			a.microbatch = DPL_NO_MICROBATCH;
		}
		a.kind = k;
		*out = a;
		return 0;
	}
bad:
	return dpl__error(DPL_EPARSE, "'%.*s' is not an action (expected e.g. "
				      "0F3, 1B2, 0SEND_F3, 2REDUCE_GRAD)",
			  (int)(len > 40 ? 40 : len), text);
}
