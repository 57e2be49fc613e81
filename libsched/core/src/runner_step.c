/*
 * runner_step.c - one iteration of a rank's lowered list: post receives
 * ahead, wait for inputs (runner_wait.c), call the stage callbacks, post
 * sends, reduce gradients, step; a failure goes to runner_fail.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runner_internal.h"

/* This replica's samples of micro-batch j on a rank with `nrep`
 * replicas, replica `rep`. */
static void range(const dpl_runner *r, uint32_t j, uint32_t nrep,
		  uint32_t rep, uint64_t *b, uint64_t *e)
{
	uint64_t mb = r->mb_off[j], me = r->mb_off[j + 1], rb, re;

	if (nrep == 1) {
		*b = mb;
		*e = me;
		return;
	}
	dpl_split(me - mb, nrep, rep, &rb, &re);
	*b = mb + rb;
	*e = mb + re;
}

/* Post one message; retries while the transport says DPL_EAGAIN. */
static int post(dpl_runner *r, struct dpl__rreq *q, bool send,
		uint32_t peer, uint64_t tag, void *buf, size_t len)
{
	uint64_t deadline = 0;
	char t[DPL_ACTION_TEXT_MAX];
	int rc;

	for (;;) {
		/* So that a failed post's own message is the one kept. */
		dpl__clear_error();
		if (send)
			rc = dpl__tp_isend(r->t, q->req, peer, tag, buf, len,
				      r->dev->ops->mem);
		else
			rc = dpl__tp_irecv(r->t, q->req, peer, tag, buf, len,
				      r->dev->ops->mem);
		if (rc == 0)
			break;
		if (rc != DPL_EAGAIN)
			return dpl__fail_post(r, rc, peer);
		if (deadline == 0)
			deadline = dpl__now_ns() + r->timeout_ns;
		if ((rc = dpl__pump(r)) < 0)
			return rc;
		if (dpl__now_ns() > deadline)
			return dpl__fail(r, DPL_ETIMEDOUT,
				    "timed out after %llu ms in %s posting to "
				    "rank %u",
				    (unsigned long long)(r->timeout_ns /
							 1000000u),
				    dpl__act_text(r->cur, t, sizeof t), peer);
	}
	q->live = true;
	q->peer = peer;
	if (send)
		r->st.bytes_sent += len;
	else
		r->st.bytes_received += len;
	return 0;
}


/*
 * Post the messages of a slot with the `nrep` replicas of a neighbour
 * whose first world rank is `base`: for each one whose range meets ours,
 * the intersection, at its offset in `buf` (bps bytes per sample).
 */
static int exchange(dpl_runner *r, struct dpl__slot *sl,
		    struct dpl__rreq *q, uint32_t *nq, bool send,
		    uint32_t nrep, uint32_t base, uint64_t tag,
		    unsigned char *buf, uint64_t bps)
{
	uint32_t k;
	uint64_t ob, oe, lo, hi;
	int rc;

	*nq = 0;
	if (sl->begin == sl->end)
		return 0;
	for (k = 0; k < nrep; k++) {
		range(r, sl->mb, nrep, k, &ob, &oe);
		lo = ob > sl->begin ? ob : sl->begin;
		hi = oe < sl->end ? oe : sl->end;
		if (lo >= hi)
			continue;
		rc = post(r, &q[*nq], send, base + k, tag,
			  buf + (lo - sl->begin) * bps, (hi - lo) * bps);
		if (rc != 0)
			return rc;
		(*nq)++;
	}
	return 0;
}

static int slot_sends_done(dpl_runner *r, void *arg, uint32_t *peer)
{
	const struct dpl__lstage *ls = arg;
	struct dpl__slot *sl = &ls->slots[ls->fifo[ls->fifo_head]];
	struct dpl__reqs a;
	int rc;

	a.q = sl->sf;
	a.n = sl->nsf;
	if ((rc = dpl__reqs_done(r, &a, peer)) != 0)
		return rc;
	a.q = sl->sb;
	a.n = sl->nsb;
	return dpl__reqs_done(r, &a, peer);
}

/* The slot of (stage, j), taking a free one if it has none. */
int dpl__acquire(dpl_runner *r, struct dpl__lstage *ls, uint32_t j,
		 struct dpl__slot **out)
{
	struct dpl__slot *sl;
	uint32_t idx;
	char t[DPL_ACTION_TEXT_MAX];
	int rc;

	if (ls->mb_slot[j] != DPL__NONE) {
		*out = &ls->slots[ls->mb_slot[j]];
		return 0;
	}
	if (ls->fifo_len == 0)
		return dpl__fail(r, DPL_ESCHED, "%s: every buffer set of stage %u "
			    "is in use", dpl__act_text(r->cur, t, sizeof t),
			    ls->stage);
	/* Sends of the slot's previous micro-batch must have completed. */
	if (r->t != NULL &&
	    (rc = dpl__wait_for(r, slot_sends_done, ls)) != 0)
		return rc;
	idx = ls->fifo[ls->fifo_head];
	ls->fifo_head = (ls->fifo_head + 1) % ls->nslots;
	ls->fifo_len--;
	sl = &ls->slots[idx];
	sl->mb = j;
	sl->live_idx = DPL__NONE;
	sl->fwd_done = sl->bw_done = sl->send_b_posted = false;
	sl->nrf = sl->nsb = sl->nrb = sl->nsf = 0;
	range(r, j, r->nrep, r->replica, &sl->begin, &sl->end);
	ls->mb_slot[j] = idx;
	if (++ls->in_use > ls->peak_in_use)
		ls->peak_in_use = ls->in_use;
	*out = sl;
	return 0;
}

/* Give the slot back once B/W ran and, if due, SEND_B was posted. */
void dpl__maybe_release(struct dpl__lstage *ls, struct dpl__slot *sl)
{
	if (!sl->bw_done || (ls->prev_remote && !sl->send_b_posted))
		return;
	dpl__release(ls, sl);
}

void dpl__release(struct dpl__lstage *ls, struct dpl__slot *sl)
{
	uint32_t idx;

	if (sl->mb == DPL__NONE)
		return;
	idx = (uint32_t)(sl - ls->slots);
	ls->mb_slot[sl->mb] = DPL__NONE;
	sl->mb = DPL__NONE;
	ls->fifo[(ls->fifo_head + ls->fifo_len) % ls->nslots] = idx;
	ls->fifo_len++;
	ls->in_use--;
}

int dpl__lookup(dpl_runner *r, struct dpl__lstage *ls, uint32_t j,
		struct dpl__slot **out)
{
	char t[DPL_ACTION_TEXT_MAX];

	if (ls->mb_slot[j] == DPL__NONE)
		return dpl__fail(r, DPL_ESCHED, "%s: micro-batch %u has no buffers "
			    "on stage %u here (out of order)",
			    dpl__act_text(r->cur, t, sizeof t), j, ls->stage);
	*out = &ls->slots[ls->mb_slot[j]];
	return 0;
}

static int ring_done(dpl_runner *r, void *arg, uint32_t *peer)
{
	struct dpl__lstage *ls = arg;
	int rc;

	if (ls->ar_live) {
		*peer = ls->group[0];
		rc = dpl__tp_test(r->t, ls->ar_req);
		if (rc != DPL_EAGAIN)
			ls->ar_live = false;
		return rc;
	}
	rc = dpl__ring_poll(&ls->ring);
	if (rc == DPL_EAGAIN)
		*peer = ls->ring.recv_done ? ls->ring.next : ls->ring.prev;
	else if (rc != 0)
		*peer = ls->ring.error_peer;
	return rc;
}

static int run_reduce(dpl_runner *r, struct dpl__lstage *ls)
{
	const struct dpl_buffer *b = NULL;
	size_t n = 0, i, total = 0, esize = dpl_dtype_size(ls->gdtype);
	unsigned char *v = ls->gvec;
	int rc;

	if (r->nrep < 2 || ls->gcount == 0)
		return 0;
	dpl__clear_error();
	rc = r->ops->grads(r->user, ls->stage, &b, &n);
	if (rc != 0)
		return dpl__callback_failed(r, rc, "grads");
	for (i = 0; i < n; i++) {
		if (b[i].dtype != ls->gdtype || b[i].mem != r->dev->ops->mem)
			break;
		total += b[i].count;
	}
	if (i < n || total != ls->gcount)
		return dpl__fail(r, DPL_EINVAL, "%uREDUCE_GRAD: the gradient "
			    "buffers changed shape since setup (%zu "
			    "elements, were %zu)", ls->stage, total,
			    ls->gcount);
	for (i = 0; i < n; i++) {
		rc = r->dev->ops->copy(r->dev->ctx, v, r->dev->ops->mem,
				       b[i].ptr, b[i].mem,
				       b[i].count * esize);
		if (rc != 0)
			return dpl__fail(r, rc, "%uREDUCE_GRAD: device copy: %s",
				    ls->stage, dpl_strerror(rc));
		v += b[i].count * esize;
	}
	ls->gbufs = b;
	ls->gn = n;
	ls->reducing = true;
	r->st.bytes_reduced += ls->gcount * esize;
	if (r->t->can_allreduce && !ls->ar_refused) {
		rc = dpl_transport_iallreduce(r->t, ls->ar_req, ls->group,
					   r->nrep, ls->gvec, ls->gcount,
					   ls->gdtype, r->dev->ops->mem,
					   dpl__tag(DPL__TAG_RING, r->iter,
						    ls->stage, 0));
		if (rc == 0) {
			ls->ar_live = true;
			return 0;
		}
		if (rc != DPL_ENOTSUP)
			return dpl__fail_peer(r, rc, ls->group[0]);
		/* Refused, so by every replica alike: the ring, from now on. */
		ls->ar_refused = true;
	}
	dpl__ring_start(&ls->ring, r->iter);
	rc = dpl__ring_poll(&ls->ring);
	if (rc != 0 && rc != DPL_EAGAIN)
		return dpl__fail_peer(r, rc, ls->ring.error_peer);
	return 0;
}

/* Wait for the stage's reduction, if one runs, and copy the sums back. */
static int finish_reduce(dpl_runner *r, struct dpl__lstage *ls)
{
	char t[DPL_ACTION_TEXT_MAX];
	size_t i, esize = dpl_dtype_size(ls->gdtype);
	const unsigned char *v = ls->gvec;
	int rc;

	if (ls->reducing) {
		if ((rc = dpl__wait_for(r, ring_done, ls)) != 0)
			return rc;
		ls->reducing = false;
		for (i = 0; i < ls->gn; i++) {
			const struct dpl_buffer *b = &ls->gbufs[i];

			rc = r->dev->ops->copy(r->dev->ctx, b->ptr, b->mem, v,
					       r->dev->ops->mem,
					       b->count * esize);
			if (rc != 0)
				return dpl__fail(r, rc, "%s: device copy: %s",
					    dpl__act_text(r->cur, t,
							  sizeof t),
					    dpl_strerror(rc));
			v += b->count * esize;
		}
	}
	return 0;
}

static int run_step(dpl_runner *r, struct dpl__lstage *ls)
{
	int rc;

	if ((rc = finish_reduce(r, ls)) != 0)
		return rc;
	dpl__clear_error();
	rc = r->ops->step(r->user, ls->stage, r->iter);
	if (rc != 0)
		return dpl__callback_failed(r, rc, "step");
	return 0;
}

/* The tag of stage s's activation of micro-batch j: forward-only passes
 * have their own class and count, so that no message of a pass can
 * match a receive of a step or of another pass. */
static uint64_t act_tag(const dpl_runner *r, uint32_t s, uint32_t j)
{
	return r->fwd_only ? dpl__tag(DPL__TAG_FWD, r->fwd_iter, s, j)
			   : dpl__tag(DPL__TAG_ACT, r->iter, s, j);
}

/* Whether a forward-only pass runs this kind: the forward and its
 * messages; UNSHARD and RESHARD do nothing in either. */
static bool runs_forward_only(uint32_t kind)
{
	return kind == DPL_ACT_RECV_F || kind == DPL_ACT_F ||
	       kind == DPL_ACT_SEND_F || kind == DPL_ACT_WAIT_SEND_F ||
	       kind == DPL_ACT_UNSHARD || kind == DPL_ACT_RESHARD;
}

/* Not inlined: callgrind counts actions by it (see dpl__wait_for). */
static DPL__NOINLINE int run_action(dpl_runner *r, struct dpl_action a)
{
	struct dpl__lstage *ls = &r->ls[r->lidx[a.stage]];
	struct dpl__slot *sl;
	uint32_t j = a.microbatch;
	int rc;

	switch (a.kind) {
	case DPL_ACT_RECV_F:
		if ((rc = dpl__acquire(r, ls, j, &sl)) != 0)
			return rc;
		return exchange(r, sl, sl->rf, &sl->nrf, false, ls->prev_r,
				ls->prev_base, act_tag(r, a.stage - 1, j),
				sl->in_act, ls->in_bps);
	case DPL_ACT_F:
	case DPL_ACT_B:
	case DPL_ACT_I:
	case DPL_ACT_W:
		return dpl__run_compute(r, a);
	case DPL_ACT_SEND_F:
		if ((rc = dpl__lookup(r, ls, j, &sl)) != 0)
			return rc;
		rc = exchange(r, sl, sl->sf, &sl->nsf, true, ls->next_r,
			      ls->next_base, act_tag(r, a.stage, j),
			      sl->out_act, ls->out_bps);
		/* Forward only: the output is all the slot still holds, and
		 * the slot's next user waits for these sends (dpl__acquire). */
		if (rc == 0 && r->fwd_only && sl->fwd_done)
			dpl__release(ls, sl);
		return rc;
	case DPL_ACT_RECV_B:
		if ((rc = dpl__acquire(r, ls, j, &sl)) != 0)
			return rc;
		return exchange(r, sl, sl->rb, &sl->nrb, false, ls->next_r,
				ls->next_base,
				dpl__tag(DPL__TAG_GRAD, r->iter, a.stage + 1,
					 j),
				sl->in_grad, ls->out_bps);
	case DPL_ACT_SEND_B:
		if ((rc = dpl__lookup(r, ls, j, &sl)) != 0)
			return rc;
		rc = exchange(r, sl, sl->sb, &sl->nsb, true, ls->prev_r,
			      ls->prev_base,
			      dpl__tag(DPL__TAG_GRAD, r->iter, a.stage, j),
			      sl->out_grad, ls->in_bps);
		if (rc != 0)
			return rc;
		sl->send_b_posted = true;
		dpl__maybe_release(ls, sl);
		return 0;
	case DPL_ACT_REDUCE_GRAD:
		return run_reduce(r, ls);
	case DPL_ACT_STEP:
		return run_step(r, ls);
	case DPL_ACT_WAIT_REDUCE_GRAD:
		return finish_reduce(r, ls);
	case DPL_ACT_WAIT_SEND_F:
	case DPL_ACT_WAIT_SEND_B:
		/* A send whose slot went back was already complete. */
		if (ls->mb_slot[j] == DPL__NONE)
			return 0;
		sl = &ls->slots[ls->mb_slot[j]];
		return a.kind == DPL_ACT_WAIT_SEND_F
			       ? dpl__wait_reqs(r, sl->sf, sl->nsf)
			       : dpl__wait_reqs(r, sl->sb, sl->nsb);
	case DPL_ACT_UNSHARD:
	case DPL_ACT_RESHARD:
	case DPL_ACT_OVERLAP_F_B:
		/* Skipped: dpl's stages hold their parameters whole; an
		 * overlap marker without an overlap callback runs its parts
		 * as the next two actions (see dpl/schedule.h). */
		return 0;
	default:
		return dpl__fail(r, DPL_ESCHED, "action kind %u", a.kind);
	}
}

static int all_sends_done(dpl_runner *r, void *arg, uint32_t *peer)
{
	struct dpl__reqs a;
	uint32_t i, j;
	int rc;

	for (i = 0; i < r->nls; i++) {
		struct dpl__lstage *ls = &r->ls[i];

		for (j = 0; j < ls->nslots; j++) {
			a.q = ls->slots[j].sf;
			a.n = ls->slots[j].nsf;
			if ((rc = dpl__reqs_done(r, &a, peer)) != 0)
				return rc;
			a.q = ls->slots[j].sb;
			a.n = ls->slots[j].nsb;
			if ((rc = dpl__reqs_done(r, &a, peer)) != 0)
				return rc;
		}
	}
	return 0;
}

static void trace_add(dpl_runner *r, struct dpl_action a, uint64_t t0,
		      uint64_t t1)
{
	if (r->trace_cap == 0)
		return;
	if (r->trace_len == r->trace_cap) {
		r->st.trace_dropped++;
		return;
	}
	r->trace[r->trace_len].action = a;
	r->trace[r->trace_len].start_ns = t0;
	r->trace[r->trace_len].end_ns = t1;
	r->trace_len++;
}

/* The rank's list once, as a step (r->fwd_only false) or as a
 * forward-only pass; the stages' slots free again at the end. */
static int run_list(dpl_runner *r)
{
	uint64_t ta, te = dpl__now_ns();
	size_t i, ran = 0;
	int rc;

	r->trace_len = 0;
	for (i = 0; i < r->nlist; i++) {
		struct dpl_action a = r->list[i];

		if (r->fwd_only && !runs_forward_only(a.kind))
			continue;
		r->cur = a;
		r->cur_pos = i;
		r->wait_acc = 0;
		ta = te;
		if (a.kind == DPL_ACT_OVERLAP_F_B && r->overlap != NULL) {
			/* The pair runs as one action: its time is the
			 * marker's, its parts count as run. */
			rc = dpl__run_overlap(r, r->list[i + 1], r->list[i + 2]);
			r->st.count[r->list[i + 1].kind]++;
			r->st.count[r->list[i + 2].kind]++;
			r->cur = a;
			i += 2;
		} else {
			rc = run_action(r, a);
		}
		te = dpl__now_ns();
		if (rc != 0)
			return dpl__step_failed(r, rc);
		ran++;
		r->st.count[a.kind]++;
		r->st.ns[a.kind] += te - ta - r->wait_acc;
		r->st.wait_ns += r->wait_acc;
		trace_add(r, a, ta + r->wait_acc, te);
	}
	/* A list without a stage's STEP (PyTorch's lowered lists) steps
	 * that stage after its last action. */
	for (i = 0; i < r->nls && !r->fwd_only; i++) {
		if (r->ls[i].has_step)
			continue;
		r->cur = dpl__act(DPL_ACT_STEP, r->ls[i].stage,
				  DPL_NO_MICROBATCH);
		r->wait_acc = 0;
		ta = te;
		rc = run_step(r, &r->ls[i]);
		te = dpl__now_ns();
		if (rc != 0)
			return dpl__step_failed(r, rc);
		r->st.count[DPL_ACT_STEP]++;
		r->st.ns[DPL_ACT_STEP] += te - ta - r->wait_acc;
		r->st.wait_ns += r->wait_acc;
	}
	r->st.actions += ran;
	if (r->t != NULL) {
		r->wait_acc = 0;
		if ((rc = dpl__wait_for(r, all_sends_done, NULL)) != 0)
			return dpl__step_failed(r, rc);
		r->st.wait_ns += r->wait_acc;
	}
	for (i = 0; i < r->nls; i++)
		dpl__runner_reset_stage(&r->ls[i], r->nmb);
	return 0;
}

/* What dpl_runner_step and dpl_runner_forward check first. */
static int ready(const dpl_runner *r)
{
	if (r == NULL)
		return dpl__error(DPL_EINVAL, "runner is NULL");
	if (r->failed)
		return dpl__error(DPL_ECANCELED,
				  "rank %u: the runner failed earlier: %s",
				  r->rank, r->errmsg);
	return 0;
}

int dpl_runner_step(dpl_runner *r)
{
	uint64_t t0;
	int rc;

	if ((rc = ready(r)) != 0)
		return rc;
	t0 = dpl__now_ns();
	if ((rc = run_list(r)) != 0)
		return rc;
	r->iter++;
	r->st.iterations++;
	r->st.step_ns += dpl__now_ns() - t0;
	return 0;
}

int dpl_runner_forward(dpl_runner *r)
{
	int rc;

	if ((rc = ready(r)) != 0)
		return rc;
	r->fwd_only = true;
	rc = run_list(r);
	r->fwd_only = false;
	if (rc == 0)
		r->fwd_iter++;
	return rc;
}
