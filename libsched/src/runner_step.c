/*
 * runner_step.c - one iteration of a rank's lowered list: post receives
 * ahead, wait for inputs while progressing the transport, call the stage
 * callbacks, post sends, reduce gradients, step; and on any failure tell
 * every other rank.
 */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runner_internal.h"

static const char *act_text(struct dpl_action a, char *buf, size_t n)
{
	if (dpl_action_format(a, buf, n) < 0)
		snprintf(buf, n, "?");
	return buf;
}

/* Record the first failure message of this runner; returns code. */
static int fail(dpl_runner *r, int code, const char *fmt, ...)
	DPL__PRINTF(3, 4);

static int fail(dpl_runner *r, int code, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (r->errmsg[0] != '\0')
		return code;
	n = snprintf(r->errmsg, sizeof r->errmsg, "rank %u (stage rank %u, "
		     "replica %u): ", r->rank, r->prank, r->replica);
	if (n < 0 || (size_t)n >= sizeof r->errmsg)
		return code;
	va_start(ap, fmt);
	vsnprintf(r->errmsg + n, sizeof r->errmsg - (size_t)n, fmt, ap);
	va_end(ap);
	return code;
}

/* A request-level failure of the current action with `peer`. */
static int fail_peer(dpl_runner *r, int code, uint32_t peer)
{
	char t[DPL_ACTION_TEXT_MAX];

	if (r->errmsg[0] == '\0')
		r->err_peer = peer;
	return fail(r, code, "%s with rank %u: %s (%s)",
		    act_text(r->cur, t, sizeof t), peer, dpl_strerror(code),
		    dpl_err_name(code));
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* A failure notice from another rank: adopt it as this rank's error. */
static int notice(dpl_runner *r, const unsigned char *m)
{
	int32_t code = (int32_t)get32(m);
	uint32_t origin = get32(m + 4), lost = get32(m + 8);
	struct dpl_action a = {get32(m + 12), get32(m + 16), get32(m + 20)};
	uint32_t iter = get32(m + 24);
	char t[DPL_ACTION_TEXT_MAX], here[DPL_ACTION_TEXT_MAX];

	r->errmsg[0] = '\0';
	r->by_notice = true;
	act_text(r->cur, here, sizeof here);
	act_text(a, t, sizeof t);
	if (code == DPL_EPEER && lost != DPL__NONE)
		return fail(r, DPL_EPEER,
			    "stopped in %s: rank %u lost rank %u in %s at "
			    "iteration %u: peer failed (DPL_EPEER)",
			    here, origin, lost, t, iter);
	return fail(r, DPL_EPEER,
		    "stopped in %s: rank %u failed in %s at iteration %u: "
		    "%s (%s)",
		    here, origin, t, iter, dpl_strerror(code),
		    dpl_err_name(code));
}

/* The code a notice carries. */
static int notice_code(const unsigned char *m)
{
	return (int32_t)get32(m);
}

/*
 * Look for a failure notice; DPL_EPEER when one arrived (adopted as this
 * rank's error), else 0. With `first_hand`, only notices of a rank's own
 * failure (not of a peer it lost) are adopted; the others are kept for
 * a later look.
 */
static int check_ctrl(dpl_runner *r, bool first_hand)
{
	const struct dpl_transport_ops *o = r->t->ops;
	const unsigned char *m;
	uint32_t q;
	int rc;

	for (q = 0; q < r->world; q++) {
		struct dpl__rreq *c = &r->ctrl_r[q];

		m = r->ctrl_in + (size_t)q * DPL__CTRL_BYTES;
		if (c->live) {
			rc = o->test(r->t->ctx, c->req);
			if (rc == DPL_EAGAIN)
				continue;
			c->live = false;
			/* A peer that left normally completes it with an
			 * error; only a delivered notice means failure. */
			if (rc != 0)
				continue;
			r->ctrl_got[q] = true;
		} else if (!r->ctrl_got[q]) {
			continue;
		}
		if (first_hand && notice_code(m) == DPL_EPEER)
			continue;
		return notice(r, m);
	}
	return 0;
}

/* The failure paths of pump(), out of line to keep its frame small. */
static int pump_failed(dpl_runner *r, int n) DPL__COLD;
static int ring_failed(dpl_runner *r, struct dpl__lstage *ls,
		       int rc) DPL__COLD;

static int pump_failed(dpl_runner *r, int n)
{
	char t[DPL_ACTION_TEXT_MAX];

	return fail(r, n, "transport %s failed in %s: %s (%s)",
		    r->t->ops->name, act_text(r->cur, t, sizeof t),
		    dpl_strerror(n), dpl_err_name(n));
}

static int ring_failed(dpl_runner *r, struct dpl__lstage *ls, int rc)
{
	if (r->errmsg[0] == '\0')
		r->err_peer = ls->ring.error_peer;
	return fail(r, rc, "%uREDUCE_GRAD with rank %u: %s (%s)", ls->stage,
		    ls->ring.error_peer, dpl_strerror(rc), dpl_err_name(rc));
}

/*
 * One round of background work: transport progress, running reductions,
 * failure notices. Returns completions seen (>= 0) or an error.
 */
static int pump(dpl_runner *r)
{
	int n, rc;
	uint32_t i;

	if (r->t == NULL)
		return 0;
	n = r->t->ops->progress(r->t->ctx);
	if (n < 0)
		return pump_failed(r, n);
	for (i = 0; i < r->nls; i++) {
		struct dpl__lstage *ls = &r->ls[i];

		if (!ls->reducing || !ls->ring.active)
			continue;
		rc = dpl__ring_poll(&ls->ring);
		if (rc != 0 && rc != DPL_EAGAIN)
			return ring_failed(r, ls, rc);
	}
	/* A notice is a completion: look after progress delivered some,
	 * and now and then. */
	if (r->world > 1 && (n > 0 || (++r->ctrl_tick & 63) == 0)) {
		if ((rc = check_ctrl(r, false)) != 0)
			return rc;
	}
	return n;
}

typedef int (*done_fn)(dpl_runner *r, void *arg, uint32_t *peer);

/* How long a waiting rank yields its core before it sleeps. */
#define DPL__YIELD_NS 50000u

/*
 * Wait until done() says so, progressing meanwhile; at most the timeout.
 * done() returns DPL_EAGAIN (not yet, *peer = who we wait for), 0, or a
 * request's error (with *peer).
 */
/* Not inlined, so that callgrind can leave waits out of an action's
 * count (benchmarks/callgrind_runner_overhead.sh). */
static DPL__NOINLINE int wait_for(dpl_runner *r, done_fn done, void *arg)
{
	uint64_t t0 = 0, now = 0, deadline = 0, left;
	uint32_t spins = 0, peer = DPL__NONE;
	char t[DPL_ACTION_TEXT_MAX];
	int rc, n;

	for (;;) {
		rc = done(r, arg, &peer);
		if (rc != DPL_EAGAIN) {
			if (rc != 0)
				rc = fail_peer(r, rc, peer);
			break;
		}
		if (t0 == 0) {
			t0 = dpl__now_ns();
			deadline = t0 + r->timeout_ns;
		}
		n = pump(r);
		if (n < 0) {
			rc = n;
			/* A notice that came with the failure of what this
			 * rank waits for: its own account comes first. */
			if (r->by_notice &&
			    (n = done(r, arg, &peer)) != DPL_EAGAIN &&
			    n != 0) {
				r->by_notice = false;
				r->errmsg[0] = '\0';
				rc = fail_peer(r, n, peer);
			}
			break;
		}
		if (n > 0) {
			spins = 0;
			continue;
		}
		now = dpl__now_ns();
		if (now > deadline) {
			if (peer == DPL__NONE)
				rc = fail(r, DPL_ETIMEDOUT,
					  "timed out after %llu ms in %s",
					  (unsigned long long)(r->timeout_ns /
							       1000000u),
					  act_text(r->cur, t, sizeof t));
			else
				rc = fail(r, DPL_ETIMEDOUT,
					  "timed out after %llu ms in %s "
					  "waiting for rank %u",
					  (unsigned long long)(r->timeout_ns /
							       1000000u),
					  act_text(r->cur, t, sizeof t), peer);
			break;
		}
		/* Spin a little, then yield the core for a while (a sender
		 * then needs no wake-up call), then sleep in the transport. */
		if (++spins < 16)
			continue;
		if (now - t0 < DPL__YIELD_NS) {
			sched_yield();
			continue;
		}
		left = deadline - now;
		if (r->t != NULL && r->t->can_wait) {
			rc = r->t->ops->wait(r->t->ctx,
					     left < 1000000u ? left : 1000000u);
			if (rc < 0) {
				rc = fail(r, rc, "transport %s: wait: %s",
					  r->t->ops->name, dpl_strerror(rc));
				break;
			}
		} else if (spins < 64) {
			sched_yield();
		} else {
			struct timespec ts = {0, 20000};

			nanosleep(&ts, NULL);
		}
	}
	if (t0 != 0)
		r->wait_acc += dpl__now_ns() - t0;
	return rc;
}

struct reqs {
	struct dpl__rreq *q;
	uint32_t n;
};

static int reqs_done(dpl_runner *r, void *arg, uint32_t *peer)
{
	struct reqs *a = arg;
	uint32_t i;
	int rc;

	for (i = 0; i < a->n; i++) {
		struct dpl__rreq *q = &a->q[i];

		if (!q->live)
			continue;
		rc = r->t->ops->test(r->t->ctx, q->req);
		*peer = q->peer;
		if (rc == DPL_EAGAIN)
			return rc;
		q->live = false;
		if (rc != 0)
			return rc;
	}
	return 0;
}

static int wait_reqs(dpl_runner *r, struct dpl__rreq *q, uint32_t n)
{
	struct reqs a = {q, n};
	uint32_t i;

	for (i = 0; i < n && !q[i].live; i++)
		;
	if (i == n)
		return 0;
	return wait_for(r, reqs_done, &a);
}

static int event_done(dpl_runner *r, void *arg, uint32_t *peer)
{
	return r->dev->ops->event_query(r->dev->ctx, r->event);
}

/* Post one message; retries while the transport says DPL_EAGAIN. */
static int post(dpl_runner *r, struct dpl__rreq *q, bool send,
		uint32_t peer, uint64_t tag, void *buf, size_t len)
{
	const struct dpl_transport_ops *o = r->t->ops;
	uint64_t deadline = 0;
	char t[DPL_ACTION_TEXT_MAX];
	int rc;

	for (;;) {
		if (send)
			rc = o->isend(r->t->ctx, q->req, peer, tag, buf, len,
				      r->dev->ops->mem);
		else
			rc = o->irecv(r->t->ctx, q->req, peer, tag, buf, len,
				      r->dev->ops->mem);
		if (rc == 0)
			break;
		if (rc != DPL_EAGAIN)
			return fail_peer(r, rc, peer);
		if (deadline == 0)
			deadline = dpl__now_ns() + r->timeout_ns;
		if ((rc = pump(r)) < 0)
			return rc;
		if (dpl__now_ns() > deadline)
			return fail(r, DPL_ETIMEDOUT,
				    "timed out after %llu ms in %s posting to "
				    "rank %u",
				    (unsigned long long)(r->timeout_ns /
							 1000000u),
				    act_text(r->cur, t, sizeof t), peer);
	}
	q->live = true;
	q->peer = peer;
	if (send)
		r->st.bytes_sent += len;
	else
		r->st.bytes_received += len;
	return 0;
}

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
	struct reqs a;
	int rc;

	a.q = sl->sf;
	a.n = sl->nsf;
	if ((rc = reqs_done(r, &a, peer)) != 0)
		return rc;
	a.q = sl->sb;
	a.n = sl->nsb;
	return reqs_done(r, &a, peer);
}

/* The slot of (stage, j), taking a free one if it has none. */
static int acquire(dpl_runner *r, struct dpl__lstage *ls, uint32_t j,
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
		return fail(r, DPL_ESCHED, "%s: every buffer set of stage %u "
			    "is in use", act_text(r->cur, t, sizeof t),
			    ls->stage);
	/* Sends of the slot's previous micro-batch must have completed. */
	if (r->t != NULL &&
	    (rc = wait_for(r, slot_sends_done, ls)) != 0)
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
static void maybe_release(struct dpl__lstage *ls, struct dpl__slot *sl)
{
	uint32_t idx;

	if (!sl->bw_done || (ls->prev_remote && !sl->send_b_posted))
		return;
	idx = (uint32_t)(sl - ls->slots);
	ls->mb_slot[sl->mb] = DPL__NONE;
	sl->mb = DPL__NONE;
	ls->fifo[(ls->fifo_head + ls->fifo_len) % ls->nslots] = idx;
	ls->fifo_len++;
	ls->in_use--;
}

static int lookup(dpl_runner *r, struct dpl__lstage *ls, uint32_t j,
		  struct dpl__slot **out)
{
	char t[DPL_ACTION_TEXT_MAX];

	if (ls->mb_slot[j] == DPL__NONE)
		return fail(r, DPL_ESCHED, "%s: micro-batch %u has no buffers "
			    "on stage %u here (out of order)",
			    act_text(r->cur, t, sizeof t), j, ls->stage);
	*out = &ls->slots[ls->mb_slot[j]];
	return 0;
}

static int callback_failed(dpl_runner *r, int rc, const char *what)
{
	char t[DPL_ACTION_TEXT_MAX];
	const char *msg = dpl_last_error();

	if (rc > 0)
		rc = DPL_ECALLBACK;
	return fail(r, rc, "%s callback failed in %s at iteration %llu: %s "
		    "(%s)%s%s",
		    what, act_text(r->cur, t, sizeof t),
		    (unsigned long long)r->iter, dpl_strerror(rc),
		    dpl_err_name(rc), msg[0] ? ": " : "", msg);
}

/* Wait until the device finished the work a callback queued. */
static int device_sync(dpl_runner *r)
{
	char t[DPL_ACTION_TEXT_MAX];
	int rc;

	if (!r->dev->has_events)
		return 0;
	rc = r->dev->ops->event_record(r->dev->ctx, r->event);
	if (rc != 0)
		return fail(r, rc, "device %s: event_record in %s: %s",
			    r->dev->ops->name, act_text(r->cur, t, sizeof t),
			    dpl_strerror(rc));
	rc = wait_for(r, event_done, NULL);
	return rc;
}

/* The arguments of a compute action on a slot. */
static int fill_args(dpl_runner *r, struct dpl__lstage *ls,
		     struct dpl__slot *sl, uint32_t kind,
		     struct dpl_stage_args *a)
{
	uint64_t n = sl->end - sl->begin;
	struct dpl__slot *psl = NULL;
	int rc;

	memset(a, 0, sizeof *a);
	a->stage = ls->stage;
	a->microbatch = sl->mb;
	a->slot = sl->live_idx;
	a->replica = r->replica;
	a->iteration = r->iter;
	a->begin = sl->begin;
	a->end = sl->end;
	a->batch = r->batch;
	if (!ls->first && !ls->prev_remote) {
		struct dpl__lstage *lp = &r->ls[r->lidx[ls->stage - 1]];

		if ((rc = lookup(r, lp, sl->mb, &psl)) != 0)
			return rc;
	}
	if (!ls->first) {
		a->input = ls->prev_remote ? sl->in_act : psl->out_act;
		a->input_bytes = (size_t)(n * ls->in_bps);
	}
	if (!ls->last) {
		a->output = sl->out_act;
		a->output_bytes = (size_t)(n * ls->out_bps);
	}
	if (kind == DPL_ACT_F)
		return 0;
	if (!ls->last) {
		a->grad_output = sl->in_grad;
		a->grad_output_bytes = (size_t)(n * ls->out_bps);
	}
	if (!ls->first && kind != DPL_ACT_W) {
		a->grad_input = ls->prev_remote ? sl->out_grad : psl->in_grad;
		a->grad_input_bytes = (size_t)(n * ls->in_bps);
	}
	return 0;
}

static int run_forward(dpl_runner *r, struct dpl__lstage *ls, uint32_t j)
{
	struct dpl_stage_args a;
	struct dpl__slot *sl;
	char t[DPL_ACTION_TEXT_MAX];
	int rc;

	if ((rc = acquire(r, ls, j, &sl)) != 0)
		return rc;
	if (ls->prev_remote && (rc = wait_reqs(r, sl->rf, sl->nrf)) != 0)
		return rc;
	if (ls->live_top == 0)
		return fail(r, DPL_ESCHED, "%s: more micro-batches alive on "
			    "stage %u than its bound %u",
			    act_text(r->cur, t, sizeof t), ls->stage,
			    ls->bound);
	sl->live_idx = ls->live_free[--ls->live_top];
	if (++ls->live > ls->peak_live)
		ls->peak_live = ls->live;
	if (sl->begin == sl->end) {
		sl->fwd_done = true;
		return 0;
	}
	if ((rc = fill_args(r, ls, sl, DPL_ACT_F, &a)) != 0)
		return rc;
	/* Clear the thread's message so that a failing callback's own
	 * dpl_set_error() text is the one reported. */
	dpl__clear_error();
	rc = r->ops->forward(r->user, &a);
	if (rc != 0)
		return callback_failed(r, rc, "forward");
	sl->fwd_done = true;
	return device_sync(r);
}

static int run_backward(dpl_runner *r, struct dpl__lstage *ls, uint32_t j,
			uint32_t kind)
{
	struct dpl_stage_args a;
	struct dpl__slot *sl;
	int rc;

	if ((rc = lookup(r, ls, j, &sl)) != 0)
		return rc;
	if (kind != DPL_ACT_W && ls->next_remote &&
	    (rc = wait_reqs(r, sl->rb, sl->nrb)) != 0)
		return rc;
	if (sl->begin != sl->end) {
		if ((rc = fill_args(r, ls, sl, kind, &a)) != 0)
			return rc;
		dpl__clear_error();
		if (kind == DPL_ACT_B)
			rc = r->ops->backward(r->user, &a);
		else if (kind == DPL_ACT_I)
			rc = r->ops->backward_input(r->user, &a);
		else
			rc = r->ops->backward_weight(r->user, &a);
		if (rc != 0)
			return callback_failed(r, rc,
					       kind == DPL_ACT_B ? "backward"
					       : kind == DPL_ACT_I
						       ? "backward_input"
						       : "backward_weight");
		if ((rc = device_sync(r)) != 0)
			return rc;
	}
	if (kind == DPL_ACT_I)
		return 0;
	if (sl->live_idx != DPL__NONE) {
		ls->live_free[ls->live_top++] = sl->live_idx;
		sl->live_idx = DPL__NONE;
		ls->live--;
	}
	sl->bw_done = true;
	maybe_release(ls, sl);
	return 0;
}

static int ring_done(dpl_runner *r, void *arg, uint32_t *peer)
{
	struct dpl__lstage *ls = arg;
	int rc;

	if (ls->ar_live) {
		*peer = ls->group[0];
		rc = r->t->ops->test(r->t->ctx, ls->ar_req);
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
		return callback_failed(r, rc, "grads");
	for (i = 0; i < n; i++) {
		if (b[i].dtype != ls->gdtype || b[i].mem != r->dev->ops->mem)
			break;
		total += b[i].count;
	}
	if (i < n || total != ls->gcount)
		return fail(r, DPL_EINVAL, "%uREDUCE_GRAD: the gradient "
			    "buffers changed shape since setup (%zu "
			    "elements, were %zu)", ls->stage, total,
			    ls->gcount);
	for (i = 0; i < n; i++) {
		rc = r->dev->ops->copy(r->dev->ctx, v, r->dev->ops->mem,
				       b[i].ptr, b[i].mem,
				       b[i].count * esize);
		if (rc != 0)
			return fail(r, rc, "%uREDUCE_GRAD: device copy: %s",
				    ls->stage, dpl_strerror(rc));
		v += b[i].count * esize;
	}
	ls->gbufs = b;
	ls->gn = n;
	ls->reducing = true;
	r->st.bytes_reduced += ls->gcount * esize;
	if (r->t->can_allreduce) {
		rc = r->t->ops->iallreduce(r->t->ctx, ls->ar_req, ls->group,
					   r->nrep, ls->gvec, ls->gcount,
					   ls->gdtype, r->dev->ops->mem,
					   dpl__tag(DPL__TAG_RING, r->iter,
						    ls->stage, 0));
		if (rc != 0)
			return fail_peer(r, rc, ls->group[0]);
		ls->ar_live = true;
		return 0;
	}
	dpl__ring_start(&ls->ring, r->iter);
	rc = dpl__ring_poll(&ls->ring);
	if (rc != 0 && rc != DPL_EAGAIN)
		return fail_peer(r, rc, ls->ring.error_peer);
	return 0;
}

static int run_step(dpl_runner *r, struct dpl__lstage *ls)
{
	size_t i, esize = dpl_dtype_size(ls->gdtype);
	const unsigned char *v = ls->gvec;
	int rc;

	if (ls->reducing) {
		if ((rc = wait_for(r, ring_done, ls)) != 0)
			return rc;
		ls->reducing = false;
		for (i = 0; i < ls->gn; i++) {
			const struct dpl_buffer *b = &ls->gbufs[i];

			rc = r->dev->ops->copy(r->dev->ctx, b->ptr, b->mem, v,
					       r->dev->ops->mem,
					       b->count * esize);
			if (rc != 0)
				return fail(r, rc, "%uSTEP: device copy: %s",
					    ls->stage, dpl_strerror(rc));
			v += b->count * esize;
		}
	}
	dpl__clear_error();
	rc = r->ops->step(r->user, ls->stage, r->iter);
	if (rc != 0)
		return callback_failed(r, rc, "step");
	return 0;
}

/* Not inlined: callgrind counts actions by it (see wait_for). */
static DPL__NOINLINE int run_action(dpl_runner *r, struct dpl_action a)
{
	struct dpl__lstage *ls = &r->ls[r->lidx[a.stage]];
	struct dpl__slot *sl;
	uint32_t j = a.microbatch;
	int rc;

	switch (a.kind) {
	case DPL_ACT_RECV_F:
		if ((rc = acquire(r, ls, j, &sl)) != 0)
			return rc;
		return exchange(r, sl, sl->rf, &sl->nrf, false, ls->prev_r,
				ls->prev_base,
				dpl__tag(DPL__TAG_ACT, r->iter, a.stage - 1, j),
				sl->in_act, ls->in_bps);
	case DPL_ACT_F:
		return run_forward(r, ls, j);
	case DPL_ACT_SEND_F:
		if ((rc = lookup(r, ls, j, &sl)) != 0)
			return rc;
		return exchange(r, sl, sl->sf, &sl->nsf, true, ls->next_r,
				ls->next_base,
				dpl__tag(DPL__TAG_ACT, r->iter, a.stage, j),
				sl->out_act, ls->out_bps);
	case DPL_ACT_RECV_B:
		if ((rc = acquire(r, ls, j, &sl)) != 0)
			return rc;
		return exchange(r, sl, sl->rb, &sl->nrb, false, ls->next_r,
				ls->next_base,
				dpl__tag(DPL__TAG_GRAD, r->iter, a.stage + 1,
					 j),
				sl->in_grad, ls->out_bps);
	case DPL_ACT_B:
	case DPL_ACT_I:
	case DPL_ACT_W:
		return run_backward(r, ls, j, a.kind);
	case DPL_ACT_SEND_B:
		if ((rc = lookup(r, ls, j, &sl)) != 0)
			return rc;
		rc = exchange(r, sl, sl->sb, &sl->nsb, true, ls->prev_r,
			      ls->prev_base,
			      dpl__tag(DPL__TAG_GRAD, r->iter, a.stage, j),
			      sl->out_grad, ls->in_bps);
		if (rc != 0)
			return rc;
		sl->send_b_posted = true;
		maybe_release(ls, sl);
		return 0;
	case DPL_ACT_REDUCE_GRAD:
		return run_reduce(r, ls);
	case DPL_ACT_STEP:
		return run_step(r, ls);
	default:
		return fail(r, DPL_ESCHED, "action kind %u", a.kind);
	}
}

static int all_sends_done(dpl_runner *r, void *arg, uint32_t *peer)
{
	struct reqs a;
	uint32_t i, j;
	int rc;

	for (i = 0; i < r->nls; i++) {
		struct dpl__lstage *ls = &r->ls[i];

		for (j = 0; j < ls->nslots; j++) {
			a.q = ls->slots[j].sf;
			a.n = ls->slots[j].nsf;
			if ((rc = reqs_done(r, &a, peer)) != 0)
				return rc;
			a.q = ls->slots[j].sb;
			a.n = ls->slots[j].nsb;
			if ((rc = reqs_done(r, &a, peer)) != 0)
				return rc;
		}
	}
	return 0;
}

/* Tell every other rank that this one failed (best effort). */
static void broadcast(dpl_runner *r, int code)
{
	const struct dpl_transport_ops *o = r->t->ops;
	uint64_t tag = dpl__tag(DPL__TAG_CTRL, 0, 0, 0);
	uint64_t deadline;
	uint32_t q;
	bool live;

	put32(r->ctrl_out, (uint32_t)code);
	put32(r->ctrl_out + 4, r->rank);
	put32(r->ctrl_out + 8, code == DPL_EPEER ? r->err_peer : DPL__NONE);
	put32(r->ctrl_out + 12, r->cur.kind);
	put32(r->ctrl_out + 16, r->cur.stage);
	put32(r->ctrl_out + 20, r->cur.microbatch);
	put32(r->ctrl_out + 24, (uint32_t)r->iter);
	for (q = 0; q < r->world; q++) {
		if (q == r->rank || r->ctrl_s[q].live)
			continue;
		if (o->isend(r->t->ctx, r->ctrl_s[q].req, q, tag, r->ctrl_out,
			     DPL__CTRL_BYTES, DPL_MEM_HOST) == 0)
			r->ctrl_s[q].live = true;
	}
	/* Give the notices a moment to leave; peers have their receives
	 * posted since setup. */
	deadline = dpl__now_ns() + (r->timeout_ns < 1000000000u
					    ? r->timeout_ns
					    : 1000000000u);
	do {
		live = false;
		if (o->progress(r->t->ctx) < 0)
			return;
		for (q = 0; q < r->world; q++) {
			struct dpl__rreq *c = &r->ctrl_s[q];

			if (c->live &&
			    o->test(r->t->ctx, c->req) != DPL_EAGAIN)
				c->live = false;
			live |= c->live;
		}
	} while (live && dpl__now_ns() < deadline);
}

static int step_failed(dpl_runner *r, int rc)
{
	r->failed = true;
	if (r->errmsg[0] == '\0')
		fail(r, rc, "%s (%s)", dpl_strerror(rc), dpl_err_name(rc));
	if (r->world > 1 && !r->by_notice) {
		/* A lost peer or a timeout may be the echo of another rank's
		 * own failure: name that rank if its notice is here. */
		if (rc == DPL_EPEER || rc == DPL_ETIMEDOUT) {
			r->t->ops->progress(r->t->ctx);
			if (check_ctrl(r, true) != 0)
				rc = DPL_EPEER;
		}
		if (!r->by_notice && rc != DPL_ETIMEDOUT)
			broadcast(r, rc);
	}
	dpl__runner_cancel_all(r);
	dpl__error(rc, "%s", r->errmsg);
	return rc;
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

int dpl_runner_step(dpl_runner *r)
{
	uint64_t t0, ta, te;
	size_t i;
	int rc;

	if (r == NULL)
		return dpl__error(DPL_EINVAL, "runner is NULL");
	if (r->failed)
		return dpl__error(DPL_ECANCELED,
				  "rank %u: the runner failed earlier: %s",
				  r->rank, r->errmsg);
	t0 = dpl__now_ns();
	r->trace_len = 0;
	te = t0;
	for (i = 0; i < r->nlist; i++) {
		struct dpl_action a = r->list[i];

		r->cur = a;
		r->cur_pos = i;
		r->wait_acc = 0;
		ta = te;
		rc = run_action(r, a);
		te = dpl__now_ns();
		if (rc != 0)
			return step_failed(r, rc);
		r->st.count[a.kind]++;
		r->st.ns[a.kind] += te - ta - r->wait_acc;
		r->st.wait_ns += r->wait_acc;
		trace_add(r, a, ta + r->wait_acc, te);
	}
	r->st.actions += r->nlist;
	if (r->t != NULL) {
		r->wait_acc = 0;
		if ((rc = wait_for(r, all_sends_done, NULL)) != 0)
			return step_failed(r, rc);
		r->st.wait_ns += r->wait_acc;
	}
	for (i = 0; i < r->nls; i++)
		dpl__runner_reset_stage(&r->ls[i], r->nmb);
	r->iter++;
	r->st.iterations++;
	r->st.step_ns += dpl__now_ns() - t0;
	return 0;
}
