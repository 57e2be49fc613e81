/*
 * shm_ring.c - the control of a ring between two ranks: the sender
 * reserves room at its private tail, writes frames and publishes them
 * with a release store of the ring's `tail`, and reuses their space once
 * the receiver marked them DONE or RELEASED; the receiver counts the
 * frames it finished in `done`. Either side rings the other's doorbell
 * futex when the other sleeps in wait. The protocol: shm.c.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shm_internal.h"

static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/*
 * Wake the owner of `h` if it sleeps in wait. Callers have just made a
 * seq_cst store (or read-modify-write) of what the sleeper looks at; with
 * this seq_cst load of `sleeping` and the sleeper's store of it followed
 * by a seq_cst fence (wait), one of the two sees the other.
 */
void dpl__shm_ring_if_asleep(struct dpl__shm_hdr *h)
{
	if (atomic_load_explicit(&h->sleeping, memory_order_seq_cst)) {
		atomic_fetch_add(&h->doorbell, 1);
		futex_wake(&h->doorbell);
	}
}

/* Wake the owner of `h` after plain stores (a full fence first). */
void dpl__shm_bell(struct dpl__shm_hdr *h)
{
	atomic_thread_fence(memory_order_seq_cst);
	dpl__shm_ring_if_asleep(h);
}

/* Count a finished frame of peer p's ring and wake its sender. */
void dpl__shm_count_done(struct peer *p)
{
	atomic_store_explicit(&p->ictl->done, ++p->idone,
			      memory_order_seq_cst);
	dpl__shm_ring_if_asleep(p->hdr);
}

/* The receiver is done with frame f of peer p's ring (DONE or RELEASED). */
void dpl__shm_frame_finish(struct peer *p, struct frame *f, uint32_t state,
			   int status)
{
	f->status = status;
	atomic_store_explicit(&f->state, state, memory_order_release);
	dpl__shm_count_done(p);
}

/* Reuse the space of frames the receiver finished with; a send whose
 * frame it was completes with the receiver's status. */
void dpl__shm_reclaim(struct ctx *c, struct peer *p)
{
	while (p->oreclaim < p->otail) {
		struct frame *f = frame_at(p->oring, c->mask, p->oreclaim);
		uint32_t st = atomic_load_explicit(&f->state,
						   memory_order_acquire);
		uint64_t slot = (p->oreclaim & c->mask) / FRAME;
		struct req *r = p->shadow[slot];

		if (st != S_DONE && st != S_RELEASED)
			break;
		if (f->size < FRAME || f->size % FRAME != 0 ||
		    f->size > p->otail - p->oreclaim) {
			char why[96];
			uint32_t q = (uint32_t)(p - c->peer);

			snprintf(why, sizeof why, "ring to rank %u was "
				 "overwritten", q);
			dpl__shm_fail_peer(c, q, DPL_EIO, why);
			return;
		}
		if (r != NULL) { /* a send that completes with this frame */
			p->shadow[slot] = NULL;
			l_del(&p->inflight, r);
			r->pos = POS_NONE;
			finish(c, r, f->status);
		}
		p->oreclaim += f->size;
	}
}

/*
 * Room for a frame of `size` bytes at the tail (after a PAD when it
 * would cross the ring's end). Writes the PAD; returns the frame's
 * position in *pos, or DPL_EAGAIN.
 */
int dpl__shm_reserve(struct ctx *c, struct peer *p, uint32_t size,
		     uint64_t *pos)
{
	uint64_t off = p->otail & c->mask;
	uint64_t pad = off + size > c->ring ? c->ring - off : 0;

	if (c->ring - (p->otail - p->oreclaim) < pad + size) {
		dpl__shm_reclaim(c, p);
		if (c->ring - (p->otail - p->oreclaim) < pad + size)
			return DPL_EAGAIN;
	}
	if (pad > 0) {
		struct frame *f = frame_at(p->oring, c->mask, p->otail);

		f->status = 0;
		f->size = (uint32_t)pad;
		f->kind = K_PAD;
		f->seq = p->oseq++;
		f->tag = f->len = f->addr = f->spare = f->next = 0;
		atomic_store_explicit(&f->state, S_POSTED,
				      memory_order_relaxed);
		p->otail += pad;
	}
	*pos = p->otail;
	return 0;
}

/* Fill in the frame header at `pos` and move the private tail past it. */
struct frame *dpl__shm_write_frame(struct ctx *c, struct peer *p,
				   uint64_t pos, uint32_t kind, uint32_t size,
				   uint64_t tag, uint64_t len, uint64_t addr)
{
	struct frame *f = frame_at(p->oring, c->mask, pos);

	f->status = 0;
	f->size = size;
	f->kind = kind;
	f->seq = p->oseq++;
	f->tag = tag;
	f->len = len;
	f->addr = addr;
	f->spare = 0;
	f->next = 0;
	atomic_store_explicit(&f->state, S_POSTED, memory_order_relaxed);
	p->otail = pos + size;
	return f;
}

/* Make the frames written so far visible and wake the receiver. */
void dpl__shm_publish(struct peer *p)
{
	atomic_store_explicit(&p->octl->tail, p->otail, memory_order_seq_cst);
	dpl__shm_ring_if_asleep(p->hdr);
}
