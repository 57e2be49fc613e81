/*
 * transport.c - open transports (table checks, the context) and the
 * checked data path every caller posts through, so that arguments are
 * checked once here and not in each backend.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runner_internal.h"

/* Offset just past member `m` of the transport table. */
#define TOP_END(m)                                                           \
	(offsetof(struct dpl_transport_ops, m) +                             \
	 sizeof(((struct dpl_transport_ops *)0)->m))

static int check_ops(const struct dpl_transport_ops *o)
{
	const char *name;

	if (o == NULL)
		return dpl__error(DPL_EINVAL, "transport table is NULL");
	name = o->name ? o->name : "(unnamed)";
	if (o->abi_version != DPL_TRANSPORT_ABI_VERSION)
		return dpl__error(DPL_EABI,
				  "transport %s: abi_version %u, expected %u",
				  name, o->abi_version,
				  DPL_TRANSPORT_ABI_VERSION);
	if (o->size < TOP_END(cancel))
		return dpl__error(DPL_EABI,
				  "transport %s: table size %u < %zu bytes of "
				  "mandatory members",
				  name, o->size, TOP_END(cancel));
	if (o->name == NULL)
		return dpl__error(DPL_EINVAL, "transport table has no name");
#define NEED(m)                                                              \
	if (o->m == NULL)                                                    \
		return dpl__error(DPL_EINVAL, "transport %s: %s is NULL",     \
				  name, #m);
	NEED(init)
	NEED(fini)
	NEED(isend)
	NEED(irecv)
	NEED(test)
	NEED(progress)
	NEED(cancel)
#undef NEED
	if (o->req_size == 0)
		return dpl__error(DPL_EINVAL, "transport %s: req_size is 0",
				  name);
	return 0;
}

int dpl_transport_open(const struct dpl_transport_ops *ops,
		       const struct dpl_transport_params *p,
		       dpl_transport **out)
{
	dpl_transport *t;
	int rc;

	if ((rc = check_ops(ops)) != 0)
		return rc;
	if (p == NULL)
		return dpl__error(DPL_EINVAL, "transport %s: params are NULL",
				  ops->name);
	if (p->world_size == 0)
		return dpl__error(DPL_EINVAL,
				  "transport %s: world_size must be >= 1",
				  ops->name);
	if (p->rank >= p->world_size)
		return dpl__error(DPL_EINVAL,
				  "transport %s: rank %u out of range for "
				  "world size %u",
				  ops->name, p->rank, p->world_size);
	t = calloc(1, sizeof *t);
	if (t == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	t->ops = ops;
	t->rank = p->rank;
	t->world_size = p->world_size;
	t->can_wait = DPL_HAS_OP(ops, wait);
	t->can_allreduce = DPL_HAS_OP(ops, iallreduce);
	t->mem_cuda = (ops->caps & DPL_TRANSPORT_CAP_MEM_CUDA) != 0;
	if (ops->ctx_size > 0) {
		t->ctx = calloc(1, ops->ctx_size);
		if (t->ctx == NULL) {
			free(t);
			return dpl__error(DPL_ENOMEM, "out of memory");
		}
	}
	dpl__error(0, "%s", "");
	rc = ops->init(t->ctx, p);
	if (rc != 0) {
		free(t->ctx);
		free(t);
		if (rc > 0)
			rc = DPL_EUNKNOWN;
		if (dpl_last_error()[0] == '\0')
			dpl__error(rc, "transport %s: init of rank %u: %s",
				   ops->name, p->rank, dpl_strerror(rc));
		return rc;
	}
	*out = t;
	return 0;
}

void dpl_transport_close(dpl_transport *t)
{
	if (t == NULL)
		return;
	t->ops->fini(t->ctx);
	free(t->ctx);
	free(t);
}

const struct dpl_transport_ops *dpl_transport_ops(const dpl_transport *t)
{
	return t->ops;
}

void *dpl_transport_ctx(dpl_transport *t)
{
	return t->ctx;
}

uint32_t dpl_transport_rank(const dpl_transport *t)
{
	return t->rank;
}

uint32_t dpl_transport_world_size(const dpl_transport *t)
{
	return t->world_size;
}

uint64_t dpl_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t dpl_transport_req_size(const dpl_transport *t)
{
	return t->ops->req_size;
}

int dpl__bad_post(const dpl_transport *t, const char *op,
			      uint32_t peer, uint64_t tag, const void *buf,
			      size_t len, uint32_t mem, const void *req)
{
	const char *name = t->ops->name;

	if (req == NULL)
		return dpl__error(DPL_EINVAL, "%s: %s with a NULL request",
				  name, op);
	if (peer >= t->world_size)
		return dpl__error(DPL_EINVAL,
				  "%s: %s peer %u out of range on rank %u of "
				  "a world of %u", name, op, peer, t->rank,
				  t->world_size);
	if (peer == t->rank)
		return dpl__error(DPL_EINVAL, "%s: %s peer %u is this rank",
				  name, op, peer);
	if (tag > DPL_TAG_MAX)
		return dpl__error(DPL_EINVAL,
				  "%s: %s tag %#llx beyond %d bits", name, op,
				  (unsigned long long)tag, DPL_TAG_BITS);
	if (buf == NULL && len > 0)
		return dpl__error(DPL_EINVAL,
				  "%s: %s of %zu bytes with a NULL buffer",
				  name, op, len);
	if (mem >= DPL_MEM__COUNT)
		return dpl__error(DPL_EINVAL, "%s: %s of unknown memory kind %u",
				  name, op, mem);
	return dpl__error(DPL_ENOTSUP,
			  "%s: %s of memory kind %u (the transport takes "
			  "host memory only)", name, op, mem);
}

int dpl_transport_isend(dpl_transport *t, void *req, uint32_t peer,
			uint64_t tag, const void *buf, size_t len,
			uint32_t mem)
{
	return dpl__tp_isend(t, req, peer, tag, buf, len, mem);
}

int dpl_transport_irecv(dpl_transport *t, void *req, uint32_t peer,
			uint64_t tag, void *buf, size_t len, uint32_t mem)
{
	return dpl__tp_irecv(t, req, peer, tag, buf, len, mem);
}

int dpl_transport_test(dpl_transport *t, void *req)
{
	return dpl__tp_test(t, req);
}

int dpl_transport_progress(dpl_transport *t)
{
	return dpl__tp_progress(t);
}

int dpl_transport_cancel(dpl_transport *t, void *req)
{
	if (req == NULL)
		return dpl__error(DPL_EINVAL, "%s: cancel of a NULL request",
				  t->ops->name);
	return t->ops->cancel(t->ctx, req);
}

int dpl_transport_wait(dpl_transport *t, uint64_t timeout_ns)
{
	if (!t->can_wait) {
		int rc = t->ops->progress(t->ctx);

		return rc < 0 ? rc : 0;
	}
	return t->ops->wait(t->ctx, timeout_ns);
}

/* Nonzero unless group[0..n) is sorted, in range and holds this rank. */
static bool bad_group(const dpl_transport *t, const uint32_t *g, uint32_t n)
{
	bool me = false;

	for (uint32_t i = 0; g != NULL && i < n; i++) {
		if (g[i] >= t->world_size || (i > 0 && g[i] <= g[i - 1]))
			return true;
		me |= g[i] == t->rank;
	}
	return !me;
}

int dpl_transport_iallreduce(dpl_transport *t, void *req,
			     const uint32_t *group, uint32_t n, void *buf,
			     size_t count, uint32_t dtype, uint32_t mem,
			     uint64_t tag)
{
	const char *name = t->ops->name;

	if (!t->can_allreduce)
		return dpl__error(DPL_ENOTSUP, "%s: no native allreduce", name);
	if (req == NULL || bad_group(t, group, n) || tag > DPL_TAG_MAX ||
	    dpl_dtype_size(dtype) == 0 || (buf == NULL && count > 0))
		return dpl__error(DPL_EINVAL,
				  "%s: allreduce of %u ranks, tag %#llx, dtype "
				  "%u: a NULL request or buffer, a group not "
				  "sorted, out of range or without rank %u, or "
				  "a bad tag or dtype", name, n,
				  (unsigned long long)tag, dtype, t->rank);
	if (!dpl__mem_ok(t, mem))
		return dpl__error(DPL_ENOTSUP,
				  "%s: allreduce of memory kind %u", name, mem);
	return t->ops->iallreduce(t->ctx, req, group, n, buf, count, dtype,
				  mem, tag);
}
