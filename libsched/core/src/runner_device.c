/* runner_device.c - open devices (dtype.c has the element types). */
#include <stdlib.h>

#include "runner_internal.h"

#define DOP_END(m)                                                           \
	(offsetof(struct dpl_device_ops, m) +                                \
	 sizeof(((struct dpl_device_ops *)0)->m))

static int check_ops(const struct dpl_device_ops *o)
{
	const char *name;
	int nev;

	if (o == NULL)
		return dpl__error(DPL_EINVAL, "device table is NULL");
	name = o->name ? o->name : "(unnamed)";
	if (o->abi_version != DPL_DEVICE_ABI_VERSION)
		return dpl__error(DPL_EABI,
				  "device %s: abi_version %u, expected %u",
				  name, o->abi_version, DPL_DEVICE_ABI_VERSION);
	if (o->size < DOP_END(sum))
		return dpl__error(DPL_EABI,
				  "device %s: table size %u < %zu bytes of "
				  "mandatory members",
				  name, o->size, DOP_END(sum));
	if (o->name == NULL)
		return dpl__error(DPL_EINVAL, "device table has no name");
#define NEED(m)                                                              \
	if (o->m == NULL)                                                    \
		return dpl__error(DPL_EINVAL, "device %s: %s is NULL", name, \
				  #m);
	NEED(init)
	NEED(fini)
	NEED(alloc)
	NEED(free)
	NEED(copy)
	NEED(sum)
#undef NEED
	if (o->mem >= DPL_MEM__COUNT)
		return dpl__error(DPL_EINVAL, "device %s: memory kind %u",
				  name, o->mem);
	nev = DPL_HAS_OP(o, event_create) + DPL_HAS_OP(o, event_destroy) +
	      DPL_HAS_OP(o, event_record) + DPL_HAS_OP(o, event_query);
	if (nev != 0 && (nev != 4 || o->event_size == 0))
		return dpl__error(DPL_EINVAL,
				  "device %s: events need all four members "
				  "and event_size > 0",
				  name);
	return 0;
}

int dpl_device_open(const struct dpl_device_ops *ops,
		    const struct dpl_device_params *p, dpl_device **out)
{
	struct dpl_device_params def = {0, NULL};
	dpl_device *d;
	int rc;

	if ((rc = check_ops(ops)) != 0)
		return rc;
	d = calloc(1, sizeof *d);
	if (d == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	d->ops = ops;
	d->has_events = DPL_HAS_OP(ops, event_record);
	if (ops->ctx_size > 0) {
		d->ctx = calloc(1, ops->ctx_size);
		if (d->ctx == NULL) {
			free(d);
			return dpl__error(DPL_ENOMEM, "out of memory");
		}
	}
	dpl__error(0, "%s", "");
	rc = ops->init(d->ctx, p ? p : &def);
	if (rc != 0) {
		free(d->ctx);
		free(d);
		if (rc > 0)
			rc = DPL_EUNKNOWN;
		if (dpl_last_error()[0] == '\0')
			dpl__error(rc, "device %s: init: %s", ops->name,
				   dpl_strerror(rc));
		return rc;
	}
	*out = d;
	return 0;
}

void dpl_device_close(dpl_device *d)
{
	if (d == NULL)
		return;
	d->ops->fini(d->ctx);
	free(d->ctx);
	free(d);
}

const struct dpl_device_ops *dpl_device_ops(const dpl_device *d)
{
	return d->ops;
}

void *dpl_device_context(const dpl_device *d)
{
	return d != NULL ? d->ctx : NULL;
}

int dpl_device_alloc(dpl_device *d, size_t bytes, void **out)
{
	if (bytes == 0)
		return dpl__error(DPL_EINVAL, "device %s: alloc of 0 bytes",
				  d->ops->name);
	return d->ops->alloc(d->ctx, d->ops->mem, bytes, out);
}

void dpl_device_free(dpl_device *d, void *ptr)
{
	d->ops->free(d->ctx, d->ops->mem, ptr);
}

int dpl_device_copy(dpl_device *d, void *dst, const void *src, size_t bytes)
{
	if (bytes == 0)
		return 0;
	return d->ops->copy(d->ctx, dst, d->ops->mem, src, d->ops->mem,
			    bytes);
}
