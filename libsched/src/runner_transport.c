/* runner_transport.c - open transports: table checks and the context. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runner_internal.h"

/* Offset just past member `m` of the transport table. */
#define TOP_END(m)                                                           \
	(offsetof(struct dpl_transport_ops, m) +                             \
	 sizeof(((struct dpl_transport_ops *)0)->m))

uint64_t dpl__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool dpl__transport_collect(dpl_transport *t, void *req,
			    uint64_t deadline_ns)
{
	while (t->ops->test(t->ctx, req) == DPL_EAGAIN)
		if (t->ops->progress(t->ctx) < 0 || dpl__now_ns() > deadline_ns)
			return false;
	return true;
}

size_t dpl__req_stride(const dpl_transport *t)
{
	size_t a = _Alignof(max_align_t);

	return (t->ops->req_size + a - 1) / a * a;
}

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
