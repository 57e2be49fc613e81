/*
 * runner_wait.c - how a runner waits: progress the transport, watch the
 * control tag, yield and then sleep, all bounded by the step's timeout.
 */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runner_internal.h"

/*
 * One round of background work: transport progress, running reductions,
 * failure notices. Returns completions seen (>= 0) or an error.
 */
int dpl__pump(dpl_runner *r)
{
	int n, rc;
	uint32_t i;

	if (r->t == NULL)
		return 0;
	n = dpl__tp_progress(r->t);
	if (n < 0)
		return dpl__pump_failed(r, n);
	for (i = 0; i < r->nls; i++) {
		struct dpl__lstage *ls = &r->ls[i];

		if (!ls->reducing || !ls->ring.active)
			continue;
		rc = dpl__ring_poll(&ls->ring);
		if (rc != 0 && rc != DPL_EAGAIN)
			return dpl__ring_failed(r, ls, rc);
	}
	/* A notice is a completion: look after progress delivered some,
	 * and now and then. */
	if (r->world > 1 && (n > 0 || (++r->ctrl_tick & 63) == 0)) {
		if ((rc = dpl__check_ctrl(r, false)) != 0)
			return rc;
	}
	return n;
}

/* How long a waiting rank yields its core before it sleeps. 2 ms, not
 * the 50 us it was: with more ranks than cores (4 dpl.torch ranks on 2
 * cores, benchmarks/torch_pipelining.py case a) a yielding rank hands
 * its core to a rank with work, while one that sleeps must be woken and
 * rescheduled with cold caches; the longer window was faster there in
 * most alternating rounds (docs/benchmarks.md). On a core of its own a yield
 * returns at once, so the window is a 2 ms poll before the sleep. */
#define DPL__YIELD_NS 2000000u


/*
 * Wait until done() says so, progressing meanwhile; at most the timeout.
 * done() returns DPL_EAGAIN (not yet, *peer = who we wait for), 0, or a
 * request's error (with *peer).
 */
/* Not inlined, so that callgrind can leave waits out of an action's
 * count (benchmarks/callgrind_runner_overhead.sh). */
DPL__NOINLINE int dpl__wait_for(dpl_runner *r, dpl__done_fn done, void *arg)
{
	uint64_t t0 = 0, now = 0, deadline = 0, left;
	uint32_t spins = 0, peer = DPL__NONE;
	char t[DPL_ACTION_TEXT_MAX];
	int rc, n;

	for (;;) {
		rc = done(r, arg, &peer);
		if (rc != DPL_EAGAIN) {
			if (rc != 0)
				rc = dpl__fail_peer(r, rc, peer);
			break;
		}
		if (t0 == 0) {
			t0 = dpl__now_ns();
			deadline = t0 + r->timeout_ns;
		}
		r->wait_peer = peer;
		n = dpl__pump(r);
		r->wait_peer = DPL__NONE;
		if (n < 0) {
			rc = n;
			/* A notice that came with the failure of what this
			 * rank waits for: its own account comes first. */
			if (r->by_notice &&
			    (n = done(r, arg, &peer)) != DPL_EAGAIN &&
			    n != 0) {
				r->by_notice = false;
				r->errmsg[0] = '\0';
				rc = dpl__fail_peer(r, n, peer);
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
				rc = dpl__fail(r, DPL_ETIMEDOUT,
					  "timed out after %llu ms in %s",
					  (unsigned long long)(r->timeout_ns /
							       1000000u),
					  dpl__act_text(r->cur, t, sizeof t));
			else
				rc = dpl__timed_out(r, peer);
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
			rc = dpl_transport_wait(r->t, left < 1000000u ? left : 1000000u);
			if (rc < 0) {
				rc = dpl__fail(r, rc, "transport %s: wait: %s",
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

int dpl__reqs_done(dpl_runner *r, void *arg, uint32_t *peer)
{
	struct dpl__reqs *a = arg;
	uint32_t i;
	int rc;

	for (i = 0; i < a->n; i++) {
		struct dpl__rreq *q = &a->q[i];

		if (!q->live)
			continue;
		rc = dpl__tp_test(r->t, q->req);
		*peer = q->peer;
		if (rc == DPL_EAGAIN)
			return rc;
		q->live = false;
		if (rc != 0)
			return rc;
	}
	return 0;
}

int dpl__wait_reqs(dpl_runner *r, struct dpl__rreq *q, uint32_t n)
{
	struct dpl__reqs a = {q, n};
	uint32_t i;

	for (i = 0; i < n && !q[i].live; i++)
		;
	if (i == n)
		return 0;
	return dpl__wait_for(r, dpl__reqs_done, &a);
}

int dpl__event_done(dpl_runner *r, void *arg, uint32_t *peer)
{
	return r->dev->ops->event_query(r->dev->ctx, r->event);
}

/* Post one message; retries while the transport says DPL_EAGAIN. */
