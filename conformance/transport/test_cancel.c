/*
 * test_cancel.c - ending requests early: a posted receive is cancelled
 * promptly and untouched, queued receives keep their order around it, a
 * cancel racing with a match has exactly one outcome, a cancelled send
 * is either delivered or not at all, and a receive that outlived its
 * deadline can still be cancelled (cases 20, 21 and 29 of the battery).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define GUARD_BYTE 0xee

static long long untouched(const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != GUARD_BYTE)
			return (long long)i;
	return -1;
}

static void check_cancel_rc(struct tj_rank *rk, int rc, const char *what)
{
	conf_check_code(rk, rc, "cancel");
	TJ_CHECK(rk, rc == 0 || rc == DPL_EINVAL,
		 "cancel of %s: %s, expected 0 (or DPL_EINVAL once it "
		 "completed)",
		 what, dpl_err_name(rc));
}

/* ---------------------------------------------------------------- */

static void posted_rank(struct tj_rank *rk)
{
	const size_t big = 1u << 20;
	unsigned char *b[3], *bb;
	void *rq = tj_reqs(rk, 8);
	long long bad;
	int rc, i;

	if (rk->rank == 0) {
		unsigned char m1[64], m2[64], *m3 = tj_alloc(rk, big);

		tj_fill(m1, 64, 1);
		tj_fill(m2, 64, 2);
		tj_fill(m3, big, 3);
		tj_barrier(rk);
		tj_step(rk, "sending 2 messages on tag 3, 1 on tag 4");
		conf_send(rk, tj_req(rk, rq, 0), 1, 3, m1, 64, NULL);
		conf_send(rk, tj_req(rk, rq, 1), 1, 3, m2, 64, NULL);
		conf_send(rk, tj_req(rk, rq, 2), 1, 4, m3, big, NULL);
		for (i = 0; i < 3; i++) {
			rc = tj_wait(rk, tj_req(rk, rq, i), 0, "a send");
			TJ_CHECK(rk, rc == 0, "send %d: %s", i,
				 dpl_err_name(rc));
		}
		return;
	}
	for (i = 0; i < 3; i++) {
		b[i] = tj_alloc(rk, 64);
		memset(b[i], GUARD_BYTE, 64);
	}
	bb = tj_alloc(rk, big);
	memset(bb, GUARD_BYTE, big);
	tj_step(rk, "posting 3 receives on tag 3 and a 1 MiB one on tag 4");
	for (i = 0; i < 3; i++)
		conf_recv(rk, tj_req(rk, rq, i), 0, 3, b[i], 64, NULL);
	conf_recv(rk, tj_req(rk, rq, 3), 0, 4, bb, big, NULL);
	tj_progress_for(rk, 10);
	tj_step(rk, "cancelling the middle receive and the large one");
	check_cancel_rc(rk, dpl_transport_cancel(rk->t, tj_req(rk, rq, 1)),
			"a posted receive");
	check_cancel_rc(rk, dpl_transport_cancel(rk->t, tj_req(rk, rq, 3)),
			"a posted 1 MiB receive");
	rc = tj_wait(rk, tj_req(rk, rq, 1), 0, "a cancelled receive");
	TJ_CHECK(rk, rc == DPL_ECANCELED,
		 "cancelled receive with no message: %s, expected "
		 "DPL_ECANCELED",
		 dpl_err_name(rc));
	rc = tj_wait(rk, tj_req(rk, rq, 3), 0, "a cancelled receive");
	TJ_CHECK(rk, rc == DPL_ECANCELED,
		 "cancelled 1 MiB receive with no message: %s, expected "
		 "DPL_ECANCELED",
		 dpl_err_name(rc));
	bad = untouched(b[1], 64);
	TJ_CHECK(rk, bad < 0, "the cancelled receive's buffer was written "
			      "(byte %lld)", bad);
	bad = untouched(bb, big);
	TJ_CHECK(rk, bad < 0, "the cancelled 1 MiB receive's buffer was "
			      "written (byte %lld)", bad);
	tj_barrier(rk);
	tj_step(rk, "the other two receives get the two messages in order");
	rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "the first receive");
	TJ_CHECK(rk, rc == 0 && tj_verify(b[0], 64, 1) < 0,
		 "first receive on tag 3: %s, data %s", dpl_err_name(rc),
		 tj_verify(b[0], 64, 1) < 0 ? "right" : "wrong");
	rc = tj_wait(rk, tj_req(rk, rq, 2), 0, "the third receive");
	TJ_CHECK(rk, rc == 0 && tj_verify(b[2], 64, 2) < 0,
		 "third receive on tag 3 (after a cancelled one): %s, "
		 "data %s (expected the second message)",
		 dpl_err_name(rc),
		 tj_verify(b[2], 64, 2) < 0 ? "right" : "wrong");
	bad = untouched(b[1], 64);
	TJ_CHECK(rk, bad < 0,
		 "a message landed in the cancelled receive's buffer");
	tj_step(rk, "a new receive on tag 4 gets the 1 MiB message");
	conf_recv(rk, tj_req(rk, rq, 4), 0, 4, bb, big, NULL);
	rc = tj_wait(rk, tj_req(rk, rq, 4), 0, "the new 1 MiB receive");
	TJ_CHECK(rk, rc == 0, "1 MiB receive after a cancelled one: %s",
		 dpl_err_name(rc));
	bad = tj_verify(bb, big, 3);
	TJ_CHECK(rk, bad < 0, "1 MiB message differs at byte %lld", bad);
}

Test(cancel, posted_receive, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = posted_rank,
			       .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

struct race {
	unsigned rounds;
};

static size_t race_len(unsigned k)
{
	return k % 2 ? 256u << 10 : 64;
}

static void race_rank(struct tj_rank *rk)
{
	const struct race *a = rk->arg;
	unsigned char *buf = tj_alloc(rk, 256u << 10);
	void *rq = tj_reqs(rk, 2);
	unsigned k, spins, done = 0, cancelled = 0, i;
	uint64_t sentinel = 999999;
	unsigned redo_ms = conf_timeout_ms() / 2;
	int rc;

	for (k = 0; k < a->rounds; k++) {
		size_t len = race_len(k);

		if (rk->rank == 0) {
			tj_fill(buf, len, 5000 + k);
			tj_barrier(rk);
			tj_step(rk, "round %u: sending %zu bytes", k, len);
			conf_send(rk, tj_req(rk, rq, 0), 1, 11, buf, len,
				  NULL);
			rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "a send");
			TJ_CHECK(rk, rc == 0, "round %u: send: %s", k,
				 dpl_err_name(rc));
			tj_barrier(rk);
			continue;
		}
		conf_recv(rk, tj_req(rk, rq, 0), 0, 11, buf, len, NULL);
		tj_barrier(rk);
		/* cancel at varying distances from the match */
		spins = (k * 7919u) % 64;
		for (i = 0; i < spins; i++) {
			tj_progress(rk);
			if (k % 3 == 0)
				sched_yield();
		}
		tj_step(rk, "round %u: cancel after %u progress calls", k,
			spins);
		check_cancel_rc(rk,
				dpl_transport_cancel(rk->t,
						     tj_req(rk, rq, 0)),
				"a receive racing with its message");
		rc = tj_wait(rk, tj_req(rk, rq, 0), 0,
			     "a receive cancelled during a match");
		TJ_CHECK(rk, rc == 0 || rc == DPL_ECANCELED,
			 "round %u: a receive cancelled while its message "
			 "arrived: %s, expected 0 or DPL_ECANCELED",
			 k, dpl_err_name(rc));
		if (rc == DPL_ECANCELED) {
			cancelled++;
			tj_step(rk, "round %u: cancelled; receiving again",
				k);
			conf_recv(rk, tj_req(rk, rq, 1), 0, 11, buf, len,
				  NULL);
			/* Its sender is waiting for it: it comes at once,
			 * unless the cancelled receive took it. */
			rc = tj_wait(rk, tj_req(rk, rq, 1), redo_ms, NULL);
			TJ_CHECK(rk, rc != DPL_EAGAIN,
				 "round %u: a receive was reported cancelled "
				 "but its message did not reach the next "
				 "receive within %u ms: the cancel reported "
				 "DPL_ECANCELED for a receive that had "
				 "completed",
				 k, redo_ms);
			TJ_CHECK(rk, rc == 0,
				 "round %u: the message whose receive was "
				 "cancelled did not reach the next receive: "
				 "%s",
				 k, dpl_err_name(rc));
		} else {
			done++;
		}
		TJ_CHECK(rk, tj_verify(buf, len, 5000 + k) < 0,
			 "round %u: received data is not message %u "
			 "(completed %s)",
			 k, k, rc == 0 ? "by the first receive" : "later");
		tj_barrier(rk);
	}
	/* Nothing left over: the next message is the sentinel. */
	tj_step(rk, "sentinel after %u rounds", a->rounds);
	if (rk->rank == 0) {
		conf_send(rk, tj_req(rk, rq, 0), 1, 11, &sentinel, 8, NULL);
		rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "the sentinel");
		TJ_CHECK(rk, rc == 0, "sentinel send: %s", dpl_err_name(rc));
		return;
	}
	sentinel = 0;
	conf_recv(rk, tj_req(rk, rq, 0), 0, 11, &sentinel, 8, NULL);
	rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "the sentinel");
	TJ_CHECK(rk, rc == 0 && sentinel == 999999,
		 "after the races the next message was not the sentinel "
		 "(%s, value %llu): a message was delivered twice",
		 dpl_err_name(rc), (unsigned long long)sentinel);
	tj_note(rk, "%u rounds: %u completed before the cancel, %u "
		    "cancelled",
		a->rounds, done, cancelled);
}

Test(cancel, race_with_match_has_one_outcome, .timeout = 140)
{
	struct race a = {
		.rounds = (unsigned)conf_env_long("DPL_CONF_CANCEL_ROUNDS", 200,
						  1, 100000)};
	struct conf_job job = {.size = 2, .fn = race_rank, .arg = &a,
			       .deadline_s = 120};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

/* Outcome of cancelled send k, in flag FLAG_OUTCOME0 + k. */
#define FLAG_OUTCOME0 2
#define OUT_DELIVERED 1 /* test said 0 */
#define OUT_CANCELLED 2 /* test said DPL_ECANCELED */
#define OUT_PENDING 3   /* still pending: it may complete anyway once
			   the receive is posted (rendezvous) */

static const char *outcome_name(long o)
{
	return o == OUT_DELIVERED   ? "completed"
	       : o == OUT_CANCELLED ? "cancelled"
				    : "pending";
}

static void send_cancel_rank(struct tj_rank *rk)
{
	static const size_t lens[2] = {8, 1u << 20};
	unsigned char *buf[2];
	void *rq = tj_reqs(rk, 2);
	int rc, k;

	for (k = 0; k < 2; k++) {
		buf[k] = tj_alloc(rk, lens[k]);
		memset(buf[k], GUARD_BYTE, lens[k]);
	}
	if (rk->rank == 0) {
		tj_step(rk, "sending 8 B and 1 MiB nobody receives yet");
		for (k = 0; k < 2; k++) {
			tj_fill(buf[k], lens[k], 77 + k);
			conf_send(rk, tj_req(rk, rq, k), 1, 21 + k, buf[k],
				  lens[k], NULL);
		}
		tj_progress_for(rk, 20);
		for (k = 0; k < 2; k++) {
			check_cancel_rc(rk, dpl_transport_cancel(
						    rk->t, tj_req(rk, rq, k)),
					"an unmatched send");
			rc = tj_wait(rk, tj_req(rk, rq, k), 500, NULL);
			TJ_CHECK(rk, rc == 0 || rc == DPL_ECANCELED ||
					     rc == DPL_EAGAIN,
				 "cancelled %zu-byte send: %s, expected 0 "
				 "or DPL_ECANCELED",
				 lens[k], dpl_err_name(rc));
			tj_flag_set(rk, FLAG_OUTCOME0 + k,
				    rc == 0		  ? OUT_DELIVERED
				    : rc == DPL_ECANCELED ? OUT_CANCELLED
							  : OUT_PENDING);
		}
		tj_note(rk, "cancelled sends before any receive: 8 B %s, "
			    "1 MiB %s",
			outcome_name(tj_flag_get(rk, FLAG_OUTCOME0)),
			outcome_name(tj_flag_get(rk, FLAG_OUTCOME0 + 1)));
		tj_barrier(rk);
		for (k = 0; k < 2; k++) {
			if (tj_flag_get(rk, FLAG_OUTCOME0 + k) != OUT_PENDING)
				continue;
			tj_step(rk, "waiting for the %zu-byte send that "
				    "outlived its cancel", lens[k]);
			rc = tj_wait(rk, tj_req(rk, rq, k), 0,
				     "a send that outlived its cancel");
			TJ_CHECK(rk, rc == 0 || rc == DPL_ECANCELED,
				 "cancelled %zu-byte send: %s, expected 0 "
				 "or DPL_ECANCELED",
				 lens[k], dpl_err_name(rc));
			tj_flag_set(rk, FLAG_OUTCOME0 + k,
				    rc == 0 ? OUT_DELIVERED : OUT_CANCELLED);
		}
		return;
	}
	tj_barrier(rk);
	for (k = 0; k < 2; k++) {
		long o = tj_flag_get(rk, FLAG_OUTCOME0 + k);
		bool received = false;

		tj_step(rk, "receiving the %zu-byte send (%s)", lens[k],
			outcome_name(o));
		conf_recv(rk, tj_req(rk, rq, k), 0, 21 + k, buf[k], lens[k],
			  NULL);
		/* A pending send completes now, or reports its cancel. */
		while (o == OUT_PENDING) {
			rc = tj_wait(rk, tj_req(rk, rq, k), 10, NULL);
			o = tj_flag_get(rk, FLAG_OUTCOME0 + k);
			TJ_CHECK(rk, dpl_clock_ns() < rk->deadline_ns &&
						!tj_aborted(rk),
				 "a send pending after its cancel never "
				 "completed though its receive was posted");
			if (rc == DPL_EAGAIN)
				continue;
			received = true;
			TJ_CHECK(rk, rc == 0 &&
						tj_verify(buf[k], lens[k],
							  77 + k) < 0,
				 "the receive of a %zu-byte send whose "
				 "cancel was pending got %s",
				 lens[k], dpl_err_name(rc));
			/* the sender must see 0, not a cancel */
			while (tj_flag_get(rk, FLAG_OUTCOME0 + k) ==
			       OUT_PENDING) {
				tj_progress(rk);
				TJ_CHECK(rk, dpl_clock_ns() <
						     rk->deadline_ns &&
							!tj_aborted(rk),
					 "the sender of a delivered "
					 "message never completed");
			}
			o = tj_flag_get(rk, FLAG_OUTCOME0 + k);
			TJ_CHECK(rk, o == OUT_DELIVERED,
				 "a %zu-byte send was delivered but its "
				 "sender saw DPL_ECANCELED",
				 lens[k]);
		}
		if (o == OUT_DELIVERED) {
			if (received)
				continue;
			rc = tj_wait(rk, tj_req(rk, rq, k), 0,
				     "a send that completed despite cancel");
			TJ_CHECK(rk, rc == 0 && tj_verify(buf[k], lens[k],
							  77 + k) < 0,
				 "a %zu-byte send completed with 0 after "
				 "cancel, but its receive got %s",
				 lens[k], dpl_err_name(rc));
			continue;
		}
		rc = tj_wait(rk, tj_req(rk, rq, k), 300, NULL);
		TJ_CHECK(rk, rc == DPL_EAGAIN,
			 "a %zu-byte send reported DPL_ECANCELED, but a "
			 "receive then completed with %s: a cancelled "
			 "send must not be delivered",
			 lens[k], dpl_err_name(rc));
		check_cancel_rc(rk,
				dpl_transport_cancel(rk->t,
						     tj_req(rk, rq, k)),
				"a receive of a cancelled send");
		rc = tj_wait(rk, tj_req(rk, rq, k), 0, "a cancelled receive");
		TJ_CHECK(rk, rc == DPL_ECANCELED,
			 "receive of a cancelled send, cancelled: %s",
			 dpl_err_name(rc));
	}
}

Test(cancel, send_is_delivered_or_not_at_all, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = send_cancel_rank,
			       .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

static void deadline_rank(struct tj_rank *rk)
{
	unsigned char buf[64];
	void *rq = tj_reqs(rk, 2);
	uint64_t t0, waited;
	int rc, i;

	if (rk->rank == 0) {
		tj_barrier(rk);
		tj_fill(buf, 64, 31);
		conf_send(rk, tj_req(rk, rq, 0), 1, 31, buf, 64, NULL);
		rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "a send");
		TJ_CHECK(rk, rc == 0, "send: %s", dpl_err_name(rc));
		return;
	}
	memset(buf, GUARD_BYTE, sizeof buf);
	conf_recv(rk, tj_req(rk, rq, 0), 0, 31, buf, 64, NULL);
	t0 = dpl_clock_ns();
	if (DPL_HAS_OP(rk->ops, wait)) {
		tj_step(rk, "wait(50 ms) x 4 with nothing coming");
		for (i = 0; i < 4; i++) {
			rc = dpl_transport_wait(rk->t, 50000000ull);
			conf_check_code(rk, rc, "wait");
			TJ_CHECK(rk, rc == 0, "wait(50 ms): %s",
				 dpl_err_name(rc));
			tj_progress(rk);
			rc = dpl_transport_test(rk->t, tj_req(rk, rq, 0));
			TJ_CHECK(rk, rc == DPL_EAGAIN,
				 "a receive nobody sent to completed with "
				 "%s",
				 dpl_err_name(rc));
		}
	} else {
		tj_step(rk, "progressing 200 ms with nothing coming");
		tj_progress_for(rk, 200);
	}
	waited = dpl_clock_ns() - t0;
	rc = dpl_transport_test(rk->t, tj_req(rk, rq, 0));
	TJ_CHECK(rk, rc == DPL_EAGAIN,
		 "a receive nobody sent to completed with %s",
		 dpl_err_name(rc));
	TJ_CHECK(rk, waited < 10000000000ull,
		 "four waits of 50 ms took %.1f s", (double)waited / 1e9);
	tj_note(rk, "deadline reached after %.0f ms of %s",
		(double)waited / 1e6,
		DPL_HAS_OP(rk->ops, wait) ? "wait" : "progress");
	tj_step(rk, "cancelling the receive that timed out");
	check_cancel_rc(rk, dpl_transport_cancel(rk->t, tj_req(rk, rq, 0)),
			"a receive past its deadline");
	rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "a cancelled receive");
	TJ_CHECK(rk, rc == DPL_ECANCELED,
		 "cancel after a deadline: %s, expected DPL_ECANCELED",
		 dpl_err_name(rc));
	TJ_CHECK(rk, untouched(buf, 64) < 0,
		 "the cancelled receive's buffer was written");
	tj_barrier(rk);
	conf_recv(rk, tj_req(rk, rq, 1), 0, 31, buf, 64, NULL);
	rc = tj_wait(rk, tj_req(rk, rq, 1), 0, "a receive after cancel");
	TJ_CHECK(rk, rc == 0 && tj_verify(buf, 64, 31) < 0,
		 "the receive after a cancelled one: %s, data %s",
		 dpl_err_name(rc),
		 tj_verify(buf, 64, 31) < 0 ? "right" : "wrong");
}

Test(cancel, deadline_then_cancel, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = deadline_rank,
			       .deadline_s = 60};

	conf_run(&job);
}
