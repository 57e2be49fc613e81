/*
 * shm_data.c - the shared-memory transport's data path: isend writes a
 * frame into the ring in the peer's segment (EAGER with the payload, RTS
 * with the buffer's address), irecv matches the unexpected frames kept
 * in the ring or posts the receive, progress_in matches what arrived in
 * ring order, and the sender streams DATA frames for receives that
 * cannot read its memory. The protocol: shm.c. Arguments were checked by
 * the dpl_transport_* layer; what is checked here is the transport's own
 * state (a peer known failed).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "shm_internal.h"

/* ---- sending ------------------------------------------------------------ */

/* Push DATA frames of the sends the peer pulls, as far as room allows. */
static void push_streams(struct ctx *c, struct peer *p)
{
	bool pushed = false;

	while (p->streams.head != NULL) {
		struct req *r = p->streams.head;
		size_t n = r->len - r->off;
		uint64_t pos;
		uint32_t size;

		if (n > c->chunk)
			n = c->chunk;
		size = frame_size(n);
		if (dpl__shm_reserve(c, p, size, &pos) != 0)
			break;
		dpl__shm_write_frame(c, p, pos, K_DATA, size, r->rts, n,
				     r->off);
		memcpy(p->oring + (pos & c->mask) + FRAME, r->buf + r->off, n);
		r->off += n;
		pushed = true;
		if (r->off == r->len) { /* the last chunk completes it */
			l_del(&p->streams, r);
			r->pos = pos;
			p->shadow[(pos & c->mask) / FRAME] = r;
			l_push(&p->inflight, r, L_INFLIGHT);
		}
	}
	if (pushed)
		dpl__shm_publish(p);
}

/* Complete the sends whose frames the receiver finished. */
void dpl__shm_complete_sends(struct ctx *c, struct peer *p)
{
	uint64_t d = atomic_load_explicit(&p->octl->done,
					  memory_order_acquire);
	struct req *r, *next;

	if (d != p->odone) {
		p->odone = d;
		for (r = p->inflight.head; r != NULL; r = next) {
			struct frame *f;
			uint32_t st;

			next = r->next;
			f = frame_at(p->oring, c->mask, r->pos);
			st = atomic_load_explicit(&f->state,
						  memory_order_acquire);
			if (st == S_DONE) {
				p->shadow[(r->pos & c->mask) / FRAME] = NULL;
				l_del(&p->inflight, r);
				r->pos = POS_NONE;
				finish(c, r, f->status);
			} else if (st == S_PULL) {
				/* The receiver cannot read our memory: it
				 * is done with the RTS, we stream. */
				p->shadow[(r->pos & c->mask) / FRAME] = NULL;
				l_del(&p->inflight, r);
				r->rts = r->pos;
				r->pos = POS_NONE;
				r->off = 0;
				l_push(&p->streams, r, L_STREAMS);
				atomic_store_explicit(&f->state, S_RELEASED,
						      memory_order_release);
			}
		}
		dpl__shm_reclaim(c, p);
	}
	if (p->streams.head != NULL)
		push_streams(c, p);
}

/* A post to or from a peer known failed fails, naming why. */
static int check_alive(const struct ctx *c, uint32_t peer, const char *op)
{
	const struct peer *p = &c->peer[peer];

	if (p->dead)
		return dpl_set_error(p->dead, "shm: %s %s rank %u: %s", op,
				     op[0] == 's' ? "to" : "from", peer,
				     p->why);
	return 0;
}

static void init_req(struct req *r, bool send, uint32_t peer, uint64_t tag,
		     const void *buf, size_t len)
{
	memset(r, 0, sizeof *r);
	r->magic = REQ_LIVE;
	r->send = send;
	r->status = DPL_EAGAIN;
	r->peer = peer;
	r->tag = tag;
	r->buf = (unsigned char *)buf;
	r->len = len;
	r->pos = POS_NONE;
}

int dpl__shm_isend(void *vctx, void *vreq, uint32_t peer, uint64_t tag,
		   const void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct req *r = vreq;
	struct peer *p;
	/* Device memory (only with a hook: the layer lets DPL_MEM_CUDA
	 * through only where the table's caps say so) goes as K_DRTS. */
	bool dev = mem == DPL_MEM_CUDA && c->dev != NULL;
	bool eager = !dev && len <= c->eager;
	uint32_t size = frame_size(dev ? DPL__SHM_DEV_BLOCK : eager ? len : 0);
	unsigned char blk[DPL__SHM_DEV_BLOCK];
	uint64_t pos;
	int rc;

	if ((rc = check_alive(c, peer, "send")) != 0)
		return rc;
	if (dev && (rc = c->dev->ops->export(c->dev, buf, len, blk)) != 0)
		return rc;
	p = &c->peer[peer];
	if (dpl__shm_reserve(c, p, size, &pos) != 0) {
		dpl__shm_complete_sends(c, p);
		if (p->dead)
			return dpl_set_error(p->dead, "shm: send to rank %u: "
					     "%s", peer, p->why);
		if (dpl__shm_reserve(c, p, size, &pos) != 0)
			return DPL_EAGAIN;
	}
	init_req(r, true, peer, tag, buf, len);
	dpl__shm_write_frame(c, p, pos, dev ? K_DRTS : eager ? K_EAGER : K_RTS,
			     size, tag, len, (uint64_t)(uintptr_t)buf);
	if (eager && len > 0)
		memcpy(p->oring + (pos & c->mask) + FRAME, buf, len);
	if (dev)
		memcpy(p->oring + (pos & c->mask) + FRAME, blk, sizeof blk);
	r->pos = pos;
	p->shadow[(pos & c->mask) / FRAME] = r;
	l_push(&p->inflight, r, L_INFLIGHT);
	dpl__shm_publish(p);
	return 0;
}

/* ---- receiving ------------------------------------------------------- */

/*
 * Deliver the frame at `pos` of peer q's ring to receive r (matched on
 * tag). Returns false when the sender cancelled it first (the frame is
 * released and r stays unmatched).
 */
static bool deliver(struct ctx *c, uint32_t q, uint64_t pos, struct req *r)
{
	struct peer *p = &c->peer[q];
	struct frame *f = frame_at(p->iring, c->mask, pos);
	uint32_t want = S_POSTED;
	int st = 0;

	if (!atomic_compare_exchange_strong_explicit(
		    &f->state, &want, S_CLAIMED, memory_order_acq_rel,
		    memory_order_acquire)) {
		dpl__shm_frame_finish(p, f, S_RELEASED, 0);
		return false;
	}
	if (r->where == L_POSTED)
		l_del(&p->posted, r);
	if (f->len != r->len || (f->kind == K_DRTS && c->dev == NULL)) {
		st = f->len != r->len ? DPL_ETRUNC : DPL_EIO;
	} else if (f->kind == K_DRTS) {
		int32_t ev = -1;

		st = c->dev->ops->pull(c->dev, q, (unsigned char *)f + FRAME,
				       r->buf, r->dmem, r->len, &ev);
		if (st == 0 && ev >= 0) {
			/* The frame stays CLAIMED (the sender's buffer is
			 * still read) until progress sees the event. */
			r->rts = pos;
			r->ev = ev;
			l_push(&p->copies, r, L_COPIES);
			return true;
		}
	} else if (f->kind == K_EAGER && r->dmem) {
		if (r->len > 0)
			st = c->dev->ops->h2d(c->dev, r->buf,
					      (unsigned char *)f + FRAME,
					      r->len);
	} else if (f->kind == K_EAGER) {
		if (r->len > 0)
			memcpy(r->buf, (unsigned char *)f + FRAME, r->len);
	} else if (p->cma && !r->dmem) {
		/* (process_vm_readv cannot write device memory: a device
		 * receive of host memory is always streamed.) */
		st = dpl__shm_cma_read(p, r->buf, f->addr, r->len);
	} else {
		/* The sender streams it; DATA frames fill r. */
		r->rts = pos;
		r->off = 0;
		l_push(&p->pulls, r, L_PULLS);
		atomic_store_explicit(&f->state, S_PULL, memory_order_release);
		dpl__shm_count_done(p);
		return true;
	}
	dpl__shm_frame_finish(p, f, S_DONE, st);
	finish(c, r, st);
	if (st == DPL_EPEER) {
		char why[160];

		snprintf(why, sizeof why, "rank %u (pid %d) died", q, p->pid);
		dpl__shm_fail_peer(c, q, DPL_EPEER, why);
	}
	return true;
}

static struct req *find_posted(struct peer *p, uint64_t tag)
{
	struct req *r;

	for (r = p->posted.head; r != NULL; r = r->next)
		if (r->tag == tag)
			return r;
	return NULL;
}

static void unexp_push(struct ctx *c, struct peer *p, uint64_t pos)
{
	frame_at(p->iring, c->mask, pos)->next = 0;
	if (p->utail)
		frame_at(p->iring, c->mask, p->utail - 1)->next = pos + 1;
	else
		p->uhead = pos + 1;
	p->utail = pos + 1;
}

/* Unlink the unexpected frame at `pos`, whose predecessor is `prev`. */
static void unexp_del(struct ctx *c, struct peer *p, uint64_t prev,
		      uint64_t pos)
{
	uint64_t next = frame_at(p->iring, c->mask, pos)->next;

	if (prev)
		frame_at(p->iring, c->mask, prev - 1)->next = next;
	else
		p->uhead = next;
	if (p->utail == pos + 1)
		p->utail = prev;
}

/* Release unexpected frames whose sends were cancelled. */
static void sweep_cancelled(struct ctx *c, struct peer *p)
{
	uint64_t cur = p->uhead, prev = 0, n = c->ring / FRAME;

	while (cur && n-- > 0) {
		struct frame *f = frame_at(p->iring, c->mask, cur - 1);
		uint64_t next = f->next;

		if (atomic_load_explicit(&f->state, memory_order_acquire) ==
		    S_CANCELLED) {
			unexp_del(c, p, prev, cur - 1);
			dpl__shm_frame_finish(p, f, S_RELEASED, 0);
		} else {
			prev = cur;
		}
		cur = next;
	}
}

static void corrupt(struct ctx *c, uint32_t q, uint64_t pos, const char *what)
{
	char why[160];

	snprintf(why, sizeof why, "ring from rank %u is corrupt at position "
		 "%" PRIu64 " (%s)", q, pos, what);
	dpl__shm_fail_peer(c, q, DPL_EIO, why);
}

/* A DATA frame: the next chunk of a pulled message. */
static void take_data(struct ctx *c, uint32_t q, uint64_t pos,
		      struct frame *f)
{
	struct peer *p = &c->peer[q];
	struct req *r;
	int st;

	for (r = p->pulls.head; r != NULL; r = r->next)
		if (r->rts == f->tag)
			break;
	if (r == NULL || f->addr != r->off || f->len > r->len - r->off) {
		corrupt(c, q, pos, "DATA for no pending pull");
		return;
	}
	if (r->dmem) {
		st = c->dev->ops->h2d(c->dev, r->buf + r->off,
				      (unsigned char *)f + FRAME, f->len);

		if (st != 0) { /* the rest streams on; r ends with st */
			r->ev = st;
			r->buf = NULL;
		}
	} else if (r->buf != NULL) {
		memcpy(r->buf + r->off, (unsigned char *)f + FRAME, f->len);
	}
	r->off += f->len;
	if (r->off < r->len) {
		dpl__shm_frame_finish(p, f, S_RELEASED, 0);
		return;
	}
	l_del(&p->pulls, r);
	st = r->buf == NULL && r->len > 0 ? r->ev : 0;
	dpl__shm_frame_finish(p, f, S_DONE, st);
	finish(c, r, st);
}

/* With a device hook: finish the receives whose queued copy is done,
 * marking their RTS frames DONE (which completes the sends). */
static void poll_copies(struct ctx *c, struct peer *p)
{
	struct req *r, *next;

	for (r = p->copies.head; r != NULL; r = next) {
		int st = c->dev->ops->copy_done(c->dev, r->ev);

		next = r->next;
		if (st == 0)
			continue;
		st = st < 0 ? st : 0;
		l_del(&p->copies, r);
		dpl__shm_frame_finish(p, frame_at(p->iring, c->mask, r->rts),
				      S_DONE, st);
		finish(c, r, st);
	}
}

/* Match the frames that arrived from peer q. */
void dpl__shm_progress_in(struct ctx *c, uint32_t q)
{
	struct peer *p = &c->peer[q];
	uint64_t tail = atomic_load_explicit(&p->ictl->tail,
					     memory_order_acquire);
	uint64_t cancels;

	if (p->copies.head != NULL)
		poll_copies(c, p);
	if (tail - p->iscan > c->ring) {
		corrupt(c, q, p->iscan, "tail beyond the ring");
		return;
	}
	while (p->iscan < tail && !p->dead) {
		uint64_t pos = p->iscan;
		struct frame *f = frame_at(p->iring, c->mask, pos);
		uint64_t off = pos & c->mask;
		struct req *r;

		if (f->size < FRAME || f->size % FRAME != 0 ||
		    off + f->size > c->ring || f->size > tail - pos) {
			corrupt(c, q, pos, "bad frame size");
			return;
		}
		if (f->seq != p->iseq) {
			corrupt(c, q, pos, "sequence gap");
			return;
		}
		if (((f->kind == K_EAGER || f->kind == K_DATA) &&
		     f->len > f->size - FRAME) ||
		    (f->kind == K_RTS && f->size != FRAME) ||
		    (f->kind == K_DRTS &&
		     f->size != frame_size(DPL__SHM_DEV_BLOCK)) ||
		    f->kind < K_EAGER || f->kind > K_DRTS) {
			corrupt(c, q, pos, "bad frame kind or length");
			return;
		}
		p->iseq++;
		p->iscan = pos + f->size;
		if (f->kind == K_PAD) {
			dpl__shm_frame_finish(p, f, S_RELEASED, 0);
			continue;
		}
		if (f->kind == K_DATA) {
			take_data(c, q, pos, f);
			continue;
		}
		if (atomic_load_explicit(&f->state, memory_order_acquire) ==
		    S_CANCELLED) {
			dpl__shm_frame_finish(p, f, S_RELEASED, 0);
			continue;
		}
		/* A receive stays posted when the sender cancelled first. */
		r = find_posted(p, f->tag);
		if (r == NULL)
			unexp_push(c, p, pos);
		else
			deliver(c, q, pos, r);
	}
	cancels = atomic_load_explicit(&p->ictl->cancels,
				       memory_order_acquire);
	if (cancels != p->icancels && !p->dead) {
		p->icancels = cancels;
		sweep_cancelled(c, p);
	}
}

int dpl__shm_irecv(void *vctx, void *vreq, uint32_t peer, uint64_t tag,
		   void *buf, size_t len, uint32_t mem)
{
	struct ctx *c = vctx;
	struct req *r = vreq;
	struct peer *p;
	uint64_t cur, prev = 0, n = c->ring / FRAME;
	int rc;

	if ((rc = check_alive(c, peer, "receive")) != 0)
		return rc;
	p = &c->peer[peer];
	init_req(r, false, peer, tag, buf, len);
	r->dmem = mem == DPL_MEM_CUDA && c->dev != NULL;
	/* The oldest unexpected message with this tag, if any (at most a
	 * ring's worth of frames: the chain lives in shared memory). */
	for (cur = p->uhead; cur && n-- > 0;) {
		struct frame *f = frame_at(p->iring, c->mask, cur - 1);
		uint64_t next = f->next;

		if (f->tag == tag) {
			unexp_del(c, p, prev, cur - 1);
			if (deliver(c, peer, cur - 1, r))
				return 0;
			/* cancelled by its sender: look further */
		} else {
			prev = cur;
		}
		cur = next;
	}
	l_push(&p->posted, r, L_POSTED);
	return 0;
}
