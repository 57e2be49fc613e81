/*
 * ofi_mr.c - memory registration for providers whose mr_mode asks for
 * descriptors of local buffers (FI_MR_LOCAL), or always with the option
 * mr=always.
 *
 * Registrations of caller buffers are cached per address range: a buffer
 * used again (the runner's buffers are allocated once) costs a lookup.
 * The cache holds OFI_MRC_SIZE entries; an entry in use by a pending
 * operation is never evicted, and when all are in use the operation gets
 * a registration of its own, closed when its slot is released. A cached
 * entry is matched by address range only: a buffer freed and allocated
 * again at the same address reuses the entry, which is correct for the
 * providers that do not pin pages (tcp, shm); with a provider that pins
 * pages, turn the cache off (mr_cache=0).
 */
#include <string.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include "ofi_internal.h"

int dpl__ofi_mr_reg(struct ofi_ctx *c, const void *buf, size_t len,
		    struct fid_mr **out)
{
	uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE |
			  FI_REMOTE_READ | FI_REMOTE_WRITE;
	struct fid_mr *mr = NULL;
	int rc;

	rc = fi_mr_reg(c->domain, buf, len, access, 0, c->mrc.next_key++, 0,
		       &mr, NULL);
	if (rc == -FI_EINVAL || rc == -FI_EOPNOTSUPP)
		rc = fi_mr_reg(c->domain, buf, len, FI_SEND | FI_RECV, 0,
			       c->mrc.next_key++, 0, &mr, NULL);
	if (rc != 0)
		return dpl_set_error(DPL_EIO,
				     "ofi: fi_mr_reg(%p, %zu): %s", buf,
				     len, fi_strerror(-rc));
	if (c->mr_ep) {
		rc = fi_mr_bind(mr, &c->ep->fid, 0);
		if (rc == 0)
			rc = fi_mr_enable(mr);
		if (rc != 0) {
			fi_close(&mr->fid);
			return dpl_set_error(DPL_EIO,
					     "ofi: binding a registration "
					     "to the endpoint: %s",
					     fi_strerror(-rc));
		}
	}
	*out = mr;
	return 0;
}

static int cache_slot(struct ofi_ctx *c)
{
	struct ofi_mrc *m = &c->mrc;
	uint32_t i;
	int best = -1;

	if (m->n < OFI_MRC_SIZE)
		return (int)m->n++;
	for (i = 0; i < m->n; i++)
		if (m->e[i].refs == 0 &&
		    (best < 0 || m->e[i].used < m->e[best].used))
			best = (int)i;
	if (best >= 0 && m->e[best].mr != NULL) {
		fi_close(&m->e[best].mr->fid);
		m->e[best].mr = NULL;
	}
	return best;
}

int dpl__ofi_mr_get(struct ofi_ctx *c, const void *buf, size_t len,
		    struct ofi_mrref *ref, void **desc)
{
	struct ofi_mrc *m = &c->mrc;
	uintptr_t a = (uintptr_t)buf;
	struct fid_mr *mr;
	uint32_t i;
	int slot, rc;

	ref->mr = NULL;
	ref->idx = -1;
	*desc = NULL;
	if (!c->mr_local || len == 0)
		return 0;
	if (c->o.mr_cache) {
		for (i = 0; i < m->n; i++) {
			struct ofi_mrc_entry *e = &m->e[i];

			if (e->mr != NULL && e->base <= a &&
			    a - e->base <= e->len &&
			    len <= e->len - (a - e->base)) {
				e->refs++;
				e->used = ++m->clock;
				ref->idx = (int32_t)i;
				*desc = fi_mr_desc(e->mr);
				return 0;
			}
		}
		slot = cache_slot(c);
		if (slot >= 0) {
			if ((rc = dpl__ofi_mr_reg(c, buf, len, &mr)) != 0) {
				m->e[slot].mr = NULL;
				return rc;
			}
			m->e[slot].base = a;
			m->e[slot].len = len;
			m->e[slot].mr = mr;
			m->e[slot].refs = 1;
			m->e[slot].used = ++m->clock;
			ref->idx = slot;
			*desc = fi_mr_desc(mr);
			return 0;
		}
	}
	if ((rc = dpl__ofi_mr_reg(c, buf, len, &mr)) != 0)
		return rc;
	ref->mr = mr;
	*desc = fi_mr_desc(mr);
	return 0;
}

void dpl__ofi_mr_put(struct ofi_ctx *c, struct ofi_mrref *ref)
{
	if (ref->idx >= 0 && c->mrc.e[ref->idx].refs > 0)
		c->mrc.e[ref->idx].refs--;
	if (ref->mr != NULL)
		fi_close(&ref->mr->fid);
	ref->mr = NULL;
	ref->idx = -1;
}

static void close_mr(struct fid_mr **mr)
{
	if (*mr != NULL)
		fi_close(&(*mr)->fid);
	*mr = NULL;
}

void dpl__ofi_mr_clear(struct ofi_ctx *c)
{
	uint32_t i;

	for (i = 0; i < c->mrc.n; i++)
		close_mr(&c->mrc.e[i].mr);
	c->mrc.n = 0;
	if (c->op != NULL)
		for (i = 0; i < c->nop; i++) {
			close_mr(&c->op[i].mr.mr);
			c->op[i].mr.idx = -1;
		}
	close_mr(&c->op_mr);
	close_mr(&c->ctrl_mr);
	close_mr(&c->bdata_mr);
	close_mr(&c->warm_mr);
	close_mr(&c->scratch_mr);
}
