/*
 * cudaipc_dev.c - the CUDA IPC transport's device hook on shm's data
 * path (struct dpl__shm_dev_ops, shm_internal.h). A send of device
 * memory exports its allocation into a K_DRTS frame (each allocation's
 * handle asked for once and kept, at most DPL__CUDAIPC_CACHE of them,
 * the allocation found again by its id on every send); the receiver opens
 * the handle once per (peer, allocation), keeping at most
 * DPL__CUDAIPC_CACHE of them (the least recently used is closed first,
 * after a stream_sync, since a queued copy may still read it), queues
 * the copy on the transport's own stream and records an event from a
 * fixed pool; shm marks the frame DONE, which completes the send, once
 * the event is done. With no event free the copy is waited for at once.
 * Host bytes into device memory (eager payloads, DATA chunks) are copied
 * and waited for chunk by chunk, since the ring's space is reused after.
 * The stream and the events are made at the first copy, on the device
 * current then; a context that only sends never makes them.
 */
#include <stdio.h>
#include <string.h>

#include <dpl/backend.h>

#include "cudaipc_internal.h"

static struct dpl__cudaipc_dev *dev_of(struct dpl__shm_dev *h)
{
	return (struct dpl__cudaipc_dev *)h;
}

/* The stream and events, made at the first copy (on the device current
 * then: the receiving rank's, which set it before posting) rather than
 * at init, which would give every rank a context on device 0. */
static int ready(struct dpl__cudaipc_dev *d)
{
	uint32_t i;
	int rc;

	if (d->made)
		return 0;
	rc = d->seam->setup(&d->stream, d->ev, DPL__CUDAIPC_EVENTS);
	if (rc)
		return rc;
	for (i = 0; i < DPL__CUDAIPC_EVENTS; i++)
		d->free_ev[i] = DPL__CUDAIPC_EVENTS - 1 - i;
	d->nfree = DPL__CUDAIPC_EVENTS;
	d->made = true;
	return 0;
}

/* Wait for every queued copy (none when nothing was ever made). */
static int sync_all(struct dpl__cudaipc_dev *d)
{
	return d->made ? d->seam->stream_sync(d->stream) : 0;
}

int dpl__cudaipc_export_of(const struct dpl__cudaipc_seam *seam,
			   const void *ptr, struct dpl__cudaipc_export *out)
{
	int rc = seam->locate(ptr, out);

	return rc ? rc : seam->handle((const unsigned char *)ptr -
					      out->offset, out);
}

/* The handle of allocation x (base at `base`): kept from an earlier send
 * of it, or asked for now and kept (in place of the least recently
 * used). */
static int my_handle(struct dpl__cudaipc_dev *d, uintptr_t base,
		     struct dpl__cudaipc_export *x)
{
	struct dpl__cudaipc_mine *e, *victim = NULL;
	unsigned i;
	int rc;

	d->clock++;
	for (i = 0; i < DPL__CUDAIPC_CACHE; i++) {
		e = &d->mine[i];
		if (e->id == x->id && e->size == x->size && e->base == base &&
		    e->id != 0) {
			e->used = d->clock;
			memcpy(x->handle, e->handle, sizeof x->handle);
			return 0;
		}
		if (victim == NULL || e->id == 0 ||
		    (victim->id != 0 && e->used < victim->used))
			victim = e;
	}
	if ((rc = d->seam->handle((const void *)base, x)) != 0)
		return rc;
	victim->id = x->id;
	victim->size = x->size;
	victim->base = base;
	victim->used = d->clock;
	memcpy(victim->handle, x->handle, sizeof victim->handle);
	return 0;
}

static int dev_export(struct dpl__shm_dev *h, const void *buf, size_t len,
		      void *blk)
{
	struct dpl__cudaipc_dev *d = dev_of(h);
	struct dpl__cudaipc_export x;
	int rc;

	memset(&x, 0, sizeof x);
	rc = d->seam->locate(buf, &x);
	if (rc)
		return rc;
	if (x.offset > x.size || len > x.size - x.offset)
		return dpl_set_error(DPL_EINVAL, "transport cudaipc: send of "
				     "%zu bytes runs past its allocation",
				     len);
	/* An id of 0 is never kept: such an allocation is asked each time. */
	rc = x.id == 0 ? d->seam->handle((const unsigned char *)buf - x.offset,
					 &x)
		       : my_handle(d, (uintptr_t)buf - x.offset, &x);
	if (rc)
		return rc;
	memcpy(blk, &x, sizeof x);
	return 0;
}

/* Close cache entry e (the stream was synchronised). */
static void drop(struct dpl__cudaipc_dev *d, struct dpl__cudaipc_open *e)
{
	d->seam->close(e->base, e->size);
	e->base = NULL;
}

/* The mapping of peer's allocation x: from the cache, or opened now. */
static int lookup(struct dpl__cudaipc_dev *d, uint32_t peer,
		  const struct dpl__cudaipc_export *x, void **base)
{
	struct dpl__cudaipc_open *e, *victim = NULL;
	unsigned i;
	int rc;

	d->clock++;
	for (i = 0; i < DPL__CUDAIPC_CACHE; i++) {
		e = &d->cache[i];
		if (e->base != NULL && e->peer == peer && e->id == x->id &&
		    e->size == x->size &&
		    memcmp(e->handle, x->handle, sizeof e->handle) == 0) {
			e->used = d->clock;
			*base = e->base;
			return 0;
		}
		if (victim == NULL || e->base == NULL ||
		    (victim->base != NULL && e->used < victim->used))
			victim = e;
	}
	if (victim->base != NULL) {
		/* A queued copy may still read the old mapping. */
		(void)sync_all(d);
		drop(d, victim);
	}
	rc = d->seam->open(x, &victim->base);
	if (rc) {
		char why[256];

		victim->base = NULL;
		snprintf(why, sizeof why, "%s", dpl_last_error());
		return dpl_set_error(rc, "transport cudaipc: cannot map rank "
				     "%u's device buffer (%s): is CUDA IPC "
				     "refused between these processes? (in "
				     "containers it needs the host's IPC and "
				     "PID namespaces)", peer, why);
	}
	victim->peer = peer;
	victim->id = x->id;
	victim->size = x->size;
	victim->used = d->clock;
	memcpy(victim->handle, x->handle, sizeof victim->handle);
	*base = victim->base;
	return 0;
}

static int dev_pull(struct dpl__shm_dev *h, uint32_t peer, const void *blk,
		    void *dst, bool dst_dev, size_t len, int32_t *ev)
{
	struct dpl__cudaipc_dev *d = dev_of(h);
	struct dpl__cudaipc_export x;
	uint32_t k;
	void *base = NULL;
	int rc;

	memcpy(&x, blk, sizeof x);
	*ev = -1;
	if (x.offset > x.size || len > x.size - x.offset)
		return dpl_set_error(DPL_EIO, "transport cudaipc: rank %u "
				     "sent an export past its allocation",
				     peer);
	if (len == 0)
		return 0;
	if ((rc = ready(d)) != 0)
		return rc;
	rc = lookup(d, peer, &x, &base);
	if (rc)
		return rc;
	rc = d->seam->copy_async(d->stream, dst,
				 (unsigned char *)base + x.offset, len,
				 dst_dev ? DPL__CUDAIPC_D2D : DPL__CUDAIPC_D2H);
	if (rc)
		return rc;
	if (d->nfree == 0) /* no event free: wait for it here */
		return d->seam->stream_sync(d->stream);
	k = d->free_ev[--d->nfree];
	rc = d->seam->event_record(d->stream, d->ev[k]);
	if (rc) {
		d->free_ev[d->nfree++] = k;
		(void)d->seam->stream_sync(d->stream);
		return rc;
	}
	*ev = (int32_t)k;
	return 0;
}

static int dev_h2d(struct dpl__shm_dev *h, void *dst, const void *src,
		   size_t len)
{
	struct dpl__cudaipc_dev *d = dev_of(h);
	int rc = ready(d);

	if (rc == 0)
		rc = d->seam->copy_async(d->stream, dst, src, len,
					 DPL__CUDAIPC_H2D);
	return rc ? rc : d->seam->stream_sync(d->stream);
}

static int dev_copy_done(struct dpl__shm_dev *h, int32_t ev)
{
	struct dpl__cudaipc_dev *d = dev_of(h);
	int rc;

	if (!d->made || ev < 0 || ev >= (int32_t)DPL__CUDAIPC_EVENTS)
		return 1;
	rc = d->seam->event_query(d->ev[ev]);
	if (rc == 0)
		return 0;
	d->free_ev[d->nfree++] = (uint32_t)ev;
	return rc;
}

static void dev_peer_gone(struct dpl__shm_dev *h, uint32_t peer)
{
	struct dpl__cudaipc_dev *d = dev_of(h);
	unsigned i;

	(void)sync_all(d);
	for (i = 0; i < DPL__CUDAIPC_CACHE; i++)
		if (d->cache[i].base != NULL && d->cache[i].peer == peer)
			drop(d, &d->cache[i]);
}

static const struct dpl__shm_dev_ops dev_ops = {
	.export = dev_export,
	.pull = dev_pull,
	.h2d = dev_h2d,
	.copy_done = dev_copy_done,
	.peer_gone = dev_peer_gone,
};

int dpl__cudaipc_dev_init(struct dpl__cudaipc_dev *d,
			  const struct dpl__cudaipc_seam *seam)
{
	memset(d, 0, sizeof *d);
	d->hook.ops = &dev_ops;
	d->seam = seam;
	return 0;
}

void dpl__cudaipc_dev_fini(struct dpl__cudaipc_dev *d)
{
	unsigned i;

	if (d->seam == NULL)
		return;
	(void)sync_all(d);
	for (i = 0; i < DPL__CUDAIPC_CACHE; i++)
		if (d->cache[i].base != NULL)
			drop(d, &d->cache[i]);
	if (d->made)
		d->seam->teardown(d->stream, d->ev, DPL__CUDAIPC_EVENTS);
	d->made = false;
	d->seam = NULL;
}
