/*
 * ucx_xchg.c - the UCX transport's address exchange: every rank learns
 * every other rank's identity (for the /proc liveness checks) and the
 * address of the worker that rank runs for it, through the host's
 * out-of-band exchange (struct dpl_oob), then creates its endpoints.
 *
 * Round 0 carries each rank's identity record and its longest address;
 * round k carries rank r's address for rank (r + k) mod world, in a slot
 * as long as the longest address of the job plus its length. A slot
 * longer than DPL_OOB_BLOB_MAX goes in several allgathers.
 */
#include <stdlib.h>
#include <string.h>

#include "ucx_internal.h"

#define XCHG_MAGIC 0x44504c55u /* "DPLU" */
#define XCHG_VERSION 1u
#define XCHG_HDR (4 * 5)
#define XCHG_ID_LEN (XCHG_HDR + DPL__UCX_IDENT_WIRE)
#define XCHG_ADDR_MAX (1u << 20) /* sanity bound of one worker address */

/* The UCX_TLS this context runs with, for messages. */
static const char *tls_in_use(const struct ctx *c)
{
	const char *env = getenv("UCX_TLS");

	if (c->opt.tls[0] != '\0')
		return c->opt.tls;
	return env != NULL ? env : "(UCX default)";
}

int dpl__ucx_oob_gather(const struct dpl_oob *oob, const unsigned char *mine,
			size_t len, uint32_t from, unsigned char *out,
			unsigned char *tmp)
{
	size_t off, piece;
	int rc;

	for (off = 0; off < len; off += piece) {
		piece = len - off < DPL_OOB_BLOB_MAX ? len - off
						     : DPL_OOB_BLOB_MAX;
		rc = oob->allgather(oob->user, mine + off, piece, tmp);
		if (rc != 0)
			return rc;
		memcpy(out + off, tmp + (size_t)from * piece, piece);
	}
	return 0;
}

/* Round 0: send this rank's identity record, check everyone's, note the
 * peers' identities and return the slot length of the later rounds. */
static int exchange_ids(struct ctx *c, const struct dpl_oob *oob,
			size_t amax, unsigned char *all, size_t *slot)
{
	unsigned char id[XCHG_ID_LEN];
	uint32_t j, n = c->world;
	size_t most = 0;
	int rc;

	dpl_put_u32(id, XCHG_MAGIC);
	dpl_put_u32(id + 4, XCHG_VERSION);
	dpl_put_u32(id + 8, c->rank);
	dpl_put_u32(id + 12, n);
	dpl_put_u32(id + 16, (uint32_t)amax);
	dpl__ucx_ident_pack(&c->self, id + XCHG_HDR);
	if ((rc = oob->allgather(oob->user, id, XCHG_ID_LEN, all)) != 0)
		return rc;
	for (j = 0; j < n; j++) {
		const unsigned char *b = all + (size_t)j * XCHG_ID_LEN;

		if (dpl_get_u32(b) != XCHG_MAGIC ||
		    dpl_get_u32(b + 4) != XCHG_VERSION ||
		    dpl_get_u32(b + 8) != j || dpl_get_u32(b + 12) != n)
			return dpl_set_error(DPL_EIO, "ucx: rank %u sent a "
					     "foreign or mismatched address "
					     "record (another transport or "
					     "version at that rank?)", j);
		if (dpl_get_u32(b + 16) > most)
			most = dpl_get_u32(b + 16);
		if (j != c->rank)
			dpl__ucx_ident_unpack(b + XCHG_HDR, &c->peers[j].id);
	}
	if (most > XCHG_ADDR_MAX)
		return dpl_set_error(DPL_EIO, "ucx: worker addresses of %zu "
				     "bytes exceed %u", most, XCHG_ADDR_MAX);
	*slot = most + 4;
	return 0;
}

/* Connect to the worker at `addr` that rank `from` runs for this rank. */
static int connect_peer(struct ctx *c, uint32_t from, const void *addr)
{
	struct peer *p = &c->peers[from];
	ucp_ep_params_t ep;
	ucs_status_t st;

	memset(&ep, 0, sizeof ep);
	ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
			UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.address = (const ucp_address_t *)addr;
	ep.err_mode = c->opt.err_mode == DPL__UCX_ERR_PEER
			      ? UCP_ERR_HANDLING_MODE_PEER
			      : UCP_ERR_HANDLING_MODE_NONE;
	ep.err_handler.cb = dpl__ucx_ep_error_cb;
	ep.err_handler.arg = p;
	st = ucp_ep_create(p->w, &ep, &p->ep);
	if (st != UCS_OK) {
		p->ep = NULL;
		return dpl_set_error(DPL_EIO, "ucx: cannot reach rank %u "
				     "with UCX_TLS=%s: %s", from,
				     tls_in_use(c), ucs_status_string(st));
	}
	return 0;
}

int dpl__ucx_exchange(struct ctx *c, const struct dpl_oob *oob)
{
	ucp_address_t **addr = NULL;
	size_t *alen = NULL, amax = 0, slot = 0;
	unsigned char *mine = NULL, *got = NULL, *all = NULL;
	uint32_t j, k, n = c->world;
	ucs_status_t st;
	int rc = 0;

	addr = calloc(n, sizeof *addr);
	alen = calloc(n, sizeof *alen);
	all = malloc((size_t)n * DPL_OOB_BLOB_MAX);
	if (addr == NULL || alen == NULL || all == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "ucx: out of memory");
		goto out;
	}
	for (j = 0; j < n; j++) {
		if (j == c->rank)
			continue;
		st = ucp_worker_get_address(c->peers[j].w, &addr[j], &alen[j]);
		if (st != UCS_OK) {
			addr[j] = NULL;
			rc = dpl_set_error(DPL_EIO, "ucx: worker address: "
					   "%s", ucs_status_string(st));
			goto out;
		}
		if (alen[j] > amax)
			amax = alen[j];
	}
	if ((rc = exchange_ids(c, oob, amax, all, &slot)) != 0)
		goto out;
	mine = malloc(slot);
	got = malloc(slot);
	if (mine == NULL || got == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "ucx: out of memory for "
				   "%zu-byte addresses", slot);
		goto out;
	}
	for (k = 1; k < n; k++) {
		uint32_t to = (c->rank + k) % n, from = (c->rank + n - k) % n;
		uint32_t len;

		memset(mine, 0, slot);
		dpl_put_u32(mine, (uint32_t)alen[to]);
		memcpy(mine + 4, addr[to], alen[to]);
		rc = dpl__ucx_oob_gather(oob, mine, slot, from, got, all);
		if (rc != 0)
			goto out;
		len = dpl_get_u32(got);
		if (len == 0 || len > slot - 4) {
			rc = dpl_set_error(DPL_EIO, "ucx: rank %u sent a "
					   "%u-byte worker address", from,
					   len);
			goto out;
		}
		if ((rc = connect_peer(c, from, got + 4)) != 0)
			goto out;
	}
out:
	for (j = 0; addr != NULL && j < n; j++)
		if (addr[j] != NULL)
			ucp_worker_release_address(c->peers[j].w, addr[j]);
	free(addr);
	free(alen);
	free(all);
	free(mine);
	free(got);
	return rc;
}
