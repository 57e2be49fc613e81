/*
 * ring_allreduce.c - the core's allreduce: ring reduce-scatter then
 * allgather over isend/irecv, non-blocking, in a fixed order.
 *
 * Position p of n sends to p + 1 and receives from p - 1. In reduce-
 * scatter step k it sends chunk (p - k) and adds the received chunk
 * (p - k - 1) into its own; after n - 1 steps it holds the full sum of
 * chunk (p + 1). In allgather step k it sends chunk (p + 1 - k) and
 * receives chunk (p - k) in place. The additions happen in the same order
 * on every run, and each chunk's sum is made once and copied, so every
 * member ends with the same bits.
 */
#include <string.h>

#include "runner_internal.h"

void dpl__ring_chunk(size_t count, uint32_t n, uint32_t c, size_t *off,
		     size_t *len)
{
	size_t q = count / n, rem = count % n;

	*off = (size_t)c * q + (c < rem ? c : rem);
	*len = q + (c < rem ? 1 : 0);
}

static uint32_t mod(int64_t v, uint32_t n)
{
	int64_t m = v % (int64_t)n;

	return (uint32_t)(m < 0 ? m + n : m);
}

int dpl__ring_start(struct dpl__ring *r, uint64_t iter)
{
	r->iter = iter;
	r->step = 0;
	r->send_posted = r->recv_posted = false;
	r->send_done = r->recv_done = false;
	r->error = 0;
	r->active = r->n > 1;
	return 0;
}

/* Chunks of step `k`: what is sent, what is received. */
static void step_chunks(const struct dpl__ring *r, uint32_t k,
			uint32_t *send_c, uint32_t *recv_c)
{
	uint32_t n = r->n;

	if (k < n - 1) {
		*send_c = mod((int64_t)r->pos - k, n);
		*recv_c = mod((int64_t)r->pos - k - 1, n);
	} else {
		k -= n - 1;
		*send_c = mod((int64_t)r->pos + 1 - k, n);
		*recv_c = mod((int64_t)r->pos - k, n);
	}
}

static int fail(struct dpl__ring *r, int rc, uint32_t peer)
{
	if (r->error == 0) {
		r->error = rc;
		r->error_peer = peer;
	}
	return rc;
}

int dpl__ring_poll(struct dpl__ring *r)
{
	const struct dpl_transport_ops *o;
	char *vec = r->vec;
	uint32_t sc, rcv;
	size_t soff, slen, roff, rlen;
	uint64_t tag;
	int rc;

	if (r->error != 0)
		return r->error;
	if (!r->active)
		return 0;
	o = r->t->ops;
	while (r->step < 2 * (r->n - 1)) {
		step_chunks(r, r->step, &sc, &rcv);
		dpl__ring_chunk(r->count, r->n, sc, &soff, &slen);
		dpl__ring_chunk(r->count, r->n, rcv, &roff, &rlen);
		tag = dpl__tag(DPL__TAG_RING, r->iter, r->stage, r->step);
		if (!r->recv_posted) {
			void *dst = r->step < r->n - 1
					    ? r->scratch
					    : vec + roff * r->esize;

			rc = dpl__tp_irecv(r->t, r->rreq, r->prev, tag, dst,
				      rlen * r->esize, r->dev->ops->mem);
			if (rc == DPL_EAGAIN)
				return rc;
			if (rc != 0)
				return fail(r, rc, r->prev);
			r->recv_posted = true;
			if (r->bytes_received)
				*r->bytes_received += rlen * r->esize;
		}
		if (!r->send_posted) {
			rc = dpl__tp_isend(r->t, r->sreq, r->next, tag,
				      vec + soff * r->esize, slen * r->esize,
				      r->dev->ops->mem);
			if (rc == DPL_EAGAIN)
				return rc;
			if (rc != 0)
				return fail(r, rc, r->next);
			r->send_posted = true;
			if (r->bytes_sent)
				*r->bytes_sent += slen * r->esize;
		}
		if (!r->send_done) {
			rc = o->test(r->t->ctx, r->sreq);
			if (rc != DPL_EAGAIN) {
				r->send_done = true;
				if (rc != 0)
					return fail(r, rc, r->next);
			}
		}
		if (!r->recv_done) {
			rc = o->test(r->t->ctx, r->rreq);
			if (rc != DPL_EAGAIN) {
				r->recv_done = true;
				if (rc != 0)
					return fail(r, rc, r->prev);
			}
		}
		if (!r->send_done || !r->recv_done)
			return DPL_EAGAIN;
		if (r->step < r->n - 1 && rlen > 0) {
			rc = r->dev->ops->sum(r->dev->ctx,
					      vec + roff * r->esize,
					      r->scratch, rlen, r->dtype);
			if (rc != 0)
				return fail(r, rc, r->prev);
		}
		r->step++;
		r->send_posted = r->recv_posted = false;
		r->send_done = r->recv_done = false;
	}
	r->active = false;
	return 0;
}

bool dpl__ring_cancel(struct dpl__ring *r, uint64_t deadline_ns)
{
	bool send = r->send_posted && !r->send_done;
	bool recv = r->recv_posted && !r->recv_done;
	bool ok = true;

	if (send)
		dpl_transport_cancel(r->t, r->sreq);
	if (recv)
		dpl_transport_cancel(r->t, r->rreq);
	/* Either way neither is waited for again; one the transport kept
	 * makes the caller leak the ring's memory. */
	if (send) {
		ok &= dpl__transport_collect(r->t, r->sreq, deadline_ns);
		r->send_done = true;
	}
	if (recv) {
		ok &= dpl__transport_collect(r->t, r->rreq, deadline_ns);
		r->recv_done = true;
	}
	r->active = false;
	return ok;
}
