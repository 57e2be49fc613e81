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

/*
 * How a waiting rank gives its core away. It polls a few times, then
 * yields between polls for a while, then sleeps in the transport until a
 * request may have completed.
 *
 * The yield window adapts to the waits the rank has had lately. While
 * most of them end within DPL__YIELD_NS (2 ms), it yields for that long:
 * with more ranks than cores (4 dpl.torch ranks on 2 cores,
 * benchmarks/torch_pipelining.py case a) a yielding rank hands its core
 * to a rank with work and needs no wake-up, while one that sleeps must be
 * woken and rescheduled with cold caches (docs/benchmarks.md, "The
 * runner's yield window"). Once most of its waits last longer (stages of
 * several milliseconds, case c), yielding only hands the core back and
 * forth: each time the yielding rank's turn comes, a computing rank is
 * preempted for a poll. It then yields DPL__YIELD_SHORT_NS (50 us) and
 * sleeps. On a core of its own a yield returns at once, so the window is
 * a poll before the sleep either way.
 */
uint64_t dpl__yield_window(int8_t score)
{
	return score > 0 ? DPL__YIELD_SHORT_NS : DPL__YIELD_NS;
}

int8_t dpl__wait_score(int8_t score, uint64_t waited_ns)
{
	if (waited_ns > DPL__YIELD_NS)
		return score < DPL__WAIT_SCORE_MAX ? (int8_t)(score + 1) : score;
	return score > -DPL__WAIT_SCORE_MAX ? (int8_t)(score - 1) : score;
}

/* The longest sleep in the transport between two looks at the deadline.
 * A transport's wait returns once a request may have completed (failure
 * notices and reductions arrive as requests too), so this only bounds a
 * missed wake-up; a wait on a device event, which the transport does not
 * see, sleeps at most DPL__EVENT_NAP_NS at a time. The short nap it once
 * had for every wait woke a sleeping rank every millisecond, each time
 * preempting a rank with work. */
#define DPL__NAP_NS 20000000u
#define DPL__EVENT_NAP_NS 1000000u

/*
 * Wait until done() says so, progressing meanwhile; at most the timeout.
 * done() returns DPL_EAGAIN (not yet, *peer = who we wait for), 0, or a
 * request's error (with *peer).
 */
/* Not inlined, so that callgrind can leave waits out of an action's
 * count (benchmarks/callgrind_runner_overhead.sh). */
DPL__NOINLINE int dpl__wait_for(dpl_runner *r, dpl__done_fn done, void *arg)
{
	uint64_t t0 = 0, now = 0, deadline = 0, left, nap, window = 0;
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
		if (window == 0)
			window = dpl__yield_window(r->long_waits);
		if (now - t0 < window) {
			sched_yield();
			continue;
		}
		left = deadline - now;
		if (r->t != NULL && r->t->can_wait) {
			nap = done == dpl__event_done ? DPL__EVENT_NAP_NS
						      : DPL__NAP_NS;
			rc = dpl_transport_wait(r->t, left < nap ? left : nap);
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
	if (t0 != 0) {
		now = dpl__now_ns();
		r->wait_acc += now - t0;
		/* Only waits that got past the polls say how long waits are. */
		if (window != 0)
			r->long_waits = dpl__wait_score(r->long_waits, now - t0);
	}
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
