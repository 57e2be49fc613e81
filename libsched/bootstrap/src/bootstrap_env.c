/*
 * bootstrap_env.c - the rendezvous from the environment
 * (dpl_bootstrap_open_env()): rank, world size and root address from
 * DPL_* or torchrun's variables.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap_internal.h"


/* Strict decimal uint32: digits only, no sign, no blanks. */
static int parse_u32(const char *s, uint32_t *v)
{
	uint64_t x = 0;

	if (s == NULL || *s == '\0')
		return -1;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		x = x * 10 + (uint64_t)(*s - '0');
		if (x > UINT32_MAX)
			return -1;
	}
	*v = (uint32_t)x;
	return 0;
}

/* Read `dpl` or else `torch`; names the one it used in *name. */
static const char *env2(const char *dpl, const char *torch,
			const char **name)
{
	const char *v = getenv(dpl);

	*name = dpl;
	if (v == NULL) {
		v = getenv(torch);
		*name = torch;
	}
	return v;
}

/*
 * The root address from the environment: DPL_ROOT, else MASTER_ADDR and
 * MASTER_PORT + 1 (torchrun's agent or torch.distributed's store already
 * listens on MASTER_PORT itself).
 */
int dpl__bs_env_root(char *buf, size_t size)
{
	const char *v = getenv("DPL_ROOT"), *addr, *port;
	unsigned pn;

	if (v != NULL) {
		if ((size_t)snprintf(buf, size, "%s", v) >= size)
			return dpl_set_error(DPL_EINVAL, "bootstrap: DPL_ROOT is "
					  "longer than %zu bytes", size - 1);
		return 0;
	}
	addr = getenv("MASTER_ADDR");
	port = getenv("MASTER_PORT");
	if (addr == NULL && port == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: neither DPL_ROOT nor "
				  "MASTER_ADDR/MASTER_PORT is set");
	if (addr == NULL || *addr == '\0')
		return dpl_set_error(DPL_EINVAL, "bootstrap: MASTER_PORT is set "
				  "but MASTER_ADDR is %s",
				  addr == NULL ? "not" : "empty");
	if (port == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: MASTER_ADDR is set "
				  "but MASTER_PORT is not");
	if (dpl__bs_parse_port(port, &pn) != 0 || pn == 0 || pn >= 65535)
		return dpl_set_error(DPL_EINVAL, "bootstrap: MASTER_PORT='%s' is "
				  "not a port in 1..65534 (dpl listens on "
				  "MASTER_PORT + 1)", port);
	if ((size_t)snprintf(buf, size, strchr(addr, ':') ? "[%s]:%u"
			     : "%s:%u", addr, pn + 1) >= size)
		return dpl_set_error(DPL_EINVAL, "bootstrap: MASTER_ADDR is "
				  "longer than %zu bytes", size - 16);
	return 0;
}

int dpl_bootstrap_open_env(uint32_t timeout_ms, dpl_bootstrap **out)
{
	struct dpl_bootstrap_params p;
	const char *rs, *ws, *rn, *wn;
	char root[BS_HOST_MAX + 16];
	int rc;

	rs = env2("DPL_RANK", "RANK", &rn);
	ws = env2("DPL_WORLD_SIZE", "WORLD_SIZE", &wn);
	if (rs == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: neither DPL_RANK nor "
				  "RANK is set");
	if (ws == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: neither "
				  "DPL_WORLD_SIZE nor WORLD_SIZE is set");
	memset(&p, 0, sizeof p);
	if (parse_u32(rs, &p.rank) != 0)
		return dpl_set_error(DPL_EINVAL, "bootstrap: %s='%s' is not a "
				  "rank (a decimal integer)", rn, rs);
	if (parse_u32(ws, &p.world_size) != 0 || p.world_size == 0 ||
	    p.world_size > BS_WORLD_MAX)
		return dpl_set_error(DPL_EINVAL, "bootstrap: %s='%s' is not a "
				  "world size (1..%u)", wn, ws, BS_WORLD_MAX);
	if (p.rank >= p.world_size)
		return dpl_set_error(DPL_EINVAL, "bootstrap: %s=%u is not below "
				  "%s=%u", rn, p.rank, wn, p.world_size);
	rc = dpl__bs_env_root(root, sizeof root);
	if (rc != 0)
		return rc;
	p.root = root;
	p.timeout_ms = timeout_ms;
	return dpl_bootstrap_open(&p, out);
}
