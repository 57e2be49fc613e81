/*
 * test_ucx_fail.c - peer failure and waiting in the UCX transport between
 * real processes over loopback, each case once with UCX_TLS=tcp and once
 * with UCX_TLS=sm: a SIGKILLed peer beside a healthy one, fini with
 * requests pending, a stopped peer and a busy one against the liveness
 * timeout, a rank that closes while its peer is to fetch its rendezvous
 * data, and wait.
 *
 * The only deadlines asserted are the transport's liveness bounds: a
 * killed peer is reported within LIVENESS_BOUND_MS (2 s), a stopped one
 * within its timeout plus that bound.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ucx_ranks.h"

/* ---- peer failure ----------------------------------------------------- */

/* Rank 1 is SIGKILLed by rank 0 while both it and rank 2 have requests
 * with it; rank 0 and rank 2 then work on. */
static void kill_fn(struct tj_rank *rk)
{
	static unsigned char big[1u << 20];
	uint64_t v = 0, mark = 0, t0;
	void *rq, *sq, *late;
	int rc;

	if (rk->rank == 1) {
		token_send(rk, 0, TOK + 7, 1);
		token_send(rk, 2, TOK + 7, 1);
		pause(); /* no progress: only death ends it */
		_exit(3);
	}
	rq = req_new(rk, 1);
	sq = req_new(rk, 1);
	late = req_new(rk, 1);
	token_recv(rk, 1, TOK + 7);
	rc = dpl_transport_irecv(rk->t, rq, 1, 60, &v, sizeof v, DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "irecv from the victim");
	rc = dpl_transport_isend(rk->t, sq, 1, 61, big, sizeof big,
				 DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "rendezvous send to the victim");
	if (rk->rank == 0) {
		token_recv(rk, 2, TOK + 8); /* rank 2 is ready too */
		tj_progress_for(rk, 5);
		ucx_kill(rk, 1);
	} else {
		token_send(rk, 0, TOK + 8, 1);
	}
	t0 = dpl_clock_ns();
	rc = tj_wait(rk, rq, LIVENESS_BOUND_MS, NULL);
	TJ_CHECK(rk, rc == DPL_EPEER, "receive from the killed rank gave %s "
		 "within %u ms", dpl_err_name(rc), LIVENESS_BOUND_MS);
	TJ_CHECK(rk, strstr(dpl_last_error(), "rank 1") != NULL,
		 "error does not name the rank: %s", dpl_last_error());
	rc = tj_wait(rk, sq, LIVENESS_BOUND_MS, NULL);
	TJ_CHECK(rk, rc == DPL_EPEER, "send to the killed rank gave %s",
		 dpl_err_name(rc));
	if (rk->rank == 0)
		tj_note(rk, "peer death seen after %.1f ms (%s)",
			(double)(dpl_clock_ns() - t0) / 1e6, dpl_last_error());
	rc = dpl_transport_isend(rk->t, late, 1, 62, &v, sizeof v,
				 DPL_MEM_HOST);
	TJ_CHECK(rk, rc == DPL_EPEER, "post to a dead rank gave %s",
		 dpl_err_name(rc));
	rc = dpl_transport_irecv(rk->t, late, 1, 62, &v, sizeof v,
				 DPL_MEM_HOST);
	TJ_CHECK(rk, rc == DPL_EPEER, "receive post from a dead rank gave %s",
		 dpl_err_name(rc));
	/* The bystander pair is unaffected, both ways and large. */
	if (rk->rank == 0) {
		tj_fill(big, sizeof big, 71);
		send_now(rk, 2, 63, big, sizeof big);
		mark = token_recv(rk, 2, 64);
		TJ_CHECK(rk, mark == 99, "bystander token %llu",
			 (unsigned long long)mark);
	} else {
		memset(big, 0, sizeof big);
		recv_now(rk, 0, 63, big, sizeof big);
		TJ_CHECK(rk, tj_verify(big, sizeof big, 71) < 0,
			 "bystander data corrupted");
		token_send(rk, 0, 64, 99);
	}
	tj_free(rk, rq);
	tj_free(rk, sq);
	tj_free(rk, late);
}

BOTH(sigkilled_peer_fails_requests_and_bystander_works, 60)
{
	struct ucx_job job = {.n = 3, .tls = tls, .killed = 1u << 1};

	ucx_job_run(&job, kill_fn, NULL);
}

/* Rank 1 sends its last message and leaves (fini); rank 0's pending
 * receive from it fails, the message that arrived is still taken. */
static void fini_fn(struct tj_rank *rk)
{
	uint64_t last = 0, never = 0;
	void *rq, *late;
	int rc;

	if (rk->rank == 1) {
		token_recv(rk, 0, TOK + 9);
		token_send(rk, 0, 70, 4242);
		return; /* the harness closes the transport */
	}
	rq = req_new(rk, 1);
	late = req_new(rk, 1);
	rc = dpl_transport_irecv(rk->t, rq, 1, 71, &never, sizeof never,
				 DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "irecv");
	token_send(rk, 1, TOK + 9, 1);
	rc = tj_wait(rk, rq, LIVENESS_BOUND_MS, NULL);
	TJ_CHECK(rk, rc == DPL_EPEER, "pending receive from a rank that left "
		 "gave %s", dpl_err_name(rc));
	rc = dpl_transport_irecv(rk->t, late, 1, 70, &last, sizeof last,
				 DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "receive of the last message: %s",
		 dpl_last_error());
	TJ_CHECK(rk, tj_wait(rk, late, 2000, NULL) == 0, "last message");
	TJ_CHECK(rk, last == 4242, "last message carries %llu",
		 (unsigned long long)last);
	rc = dpl_transport_irecv(rk->t, late, 1, 70, &last, sizeof last,
				 DPL_MEM_HOST);
	TJ_CHECK(rk, rc == DPL_EPEER, "a second receive from a rank that left "
		 "gave %s", dpl_err_name(rc));
	tj_free(rk, rq);
	tj_free(rk, late);
}

BOTH(fini_fails_pending_requests_and_delivers_last_sends, 30)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, fini_fn, NULL);
}

/* ---- liveness timeout ------------------------------------------------- */

/* Rank 1 stops (SIGSTOP): its process is there but it answers nothing,
 * so only the heartbeat deadline finds it. */
static void stopped_fn(struct tj_rank *rk)
{
	uint64_t v = 0;
	void *rq;
	int rc;

	if (rk->rank == 1) {
		token_send(rk, 0, TOK + 10, 1);
		kill(getpid(), SIGSTOP);
		_exit(4); /* never resumed: rank 0 kills it */
	}
	rq = req_new(rk, 1);
	token_recv(rk, 1, TOK + 10);
	rc = dpl_transport_irecv(rk->t, rq, 1, 100, &v, sizeof v, DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "irecv");
	rc = tj_wait(rk, rq, rk->job->timeout_ms + LIVENESS_BOUND_MS, NULL);
	TJ_CHECK(rk, rc == DPL_EPEER, "a stopped rank gave %s",
		 dpl_err_name(rc));
	TJ_CHECK(rk, strstr(dpl_last_error(), "silent") != NULL,
		 "error does not say the rank went silent: %s",
		 dpl_last_error());
	ucx_kill(rk, 1);
	tj_free(rk, rq);
}

BOTH(stopped_peer_fails_after_the_liveness_timeout, 30)
{
	struct ucx_job job = {.n = 2, .tls = tls, .timeout_ms = 1000,
			      .killed = 1u << 1};

	ucx_job_run(&job, stopped_fn, NULL);
}

/* Rank 1 computes (no progress) for less than the timeout between
 * messages while rank 0 waits: no false alarm. Then both compute for
 * longer than the timeout at once: each forgives its own absence. */
static void busy_fn(struct tj_rank *rk)
{
	uint64_t v;
	int k;

	for (k = 0; k < 3; k++) {
		if (rk->rank == 1) {
			tj_sleep_ms(rk->job->timeout_ms * 4 / 10);
			token_send(rk, 0, 110, (uint64_t)k);
		} else {
			v = token_recv(rk, 1, 110);
			TJ_CHECK(rk, v == (uint64_t)k,
				 "message %d carries %llu", k,
				 (unsigned long long)v);
		}
	}
	token_send(rk, 1 - rk->rank, 111, 7);
	TJ_CHECK(rk, token_recv(rk, 1 - rk->rank, 111) == 7,
		 "token before the pause");
	tj_sleep_ms(rk->job->timeout_ms * 3 / 2);
	token_send(rk, 1 - rk->rank, 112, 8);
	TJ_CHECK(rk, token_recv(rk, 1 - rk->rank, 112) == 8,
		 "token after the pause");
}

BOTH(busy_peer_within_the_timeout_stays_alive, 30)
{
	struct ucx_job job = {.n = 2, .tls = tls, .timeout_ms = 2000};

	ucx_job_run(&job, busy_fn, NULL);
}

/* ---- closing with rendezvous data not yet fetched ---------------------- */

#define FETCH_LEN (4u << 20)

/*
 * Rank 0 sends a rendezvous-sized message to rank 1, closes with the send
 * in flight and unmaps the data; rank 1's receive must then end as a peer
 * failure (or with the right data), never an I/O error or wrong data,
 * and rank 1 must close cleanly with rank 0 dead: UCX 1.13 aborts when a
 * worker is destroyed with cross-memory-attach copies still queued
 * (ucs_arbiter_group_is_empty).
 *  - posted_first (rk->arg non-NULL): rank 1 posts the receive, then stops
 *    progressing while rank 0 sends and closes; when it progresses again
 *    the receive matches and its fetch finds no data.
 *  - otherwise rank 1 keeps progressing, takes in the announcement and
 *    rank 0's goodbye (a sentinel receive fails), and only then posts the
 *    receive: it matches a message whose sender is known gone, and the
 *    fetch it starts must be over before the post returns.
 */
static void fetch_gone_fn(struct tj_rank *rk)
{
	bool posted_first = rk->arg != NULL;
	unsigned char *buf;
	uint64_t never;
	void *rq = req_new(rk, 1), *sentinel = req_new(rk, 1);
	long long bad;
	int rc;

	if (rk->rank == 1) {
		buf = tj_alloc(rk, FETCH_LEN);
		memset(buf, 0, FETCH_LEN);
		if (posted_first) {
			rc = dpl_transport_irecv(rk->t, rq, 0, 140, buf,
						 FETCH_LEN, DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "irecv: %s", dpl_last_error());
			token_send(rk, 0, TOK + 14, 1);
			tj_sleep_ms(300); /* rank 0 sends and closes */
			rc = tj_wait(rk, rq, LIVENESS_BOUND_MS, NULL);
		} else {
			rc = dpl_transport_irecv(rk->t, sentinel, 0, 142,
						 &never, sizeof never,
						 DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "irecv: %s", dpl_last_error());
			token_send(rk, 0, TOK + 14, 1);
			rc = tj_wait(rk, sentinel, LIVENESS_BOUND_MS, NULL);
			TJ_CHECK(rk, rc == DPL_EPEER, "receive from a rank "
				 "that closed: %s", dpl_err_name(rc));
			rc = dpl_transport_irecv(rk->t, rq, 0, 140, buf,
						 FETCH_LEN, DPL_MEM_HOST);
			if (rc == 0)
				rc = tj_wait(rk, rq, LIVENESS_BOUND_MS, NULL);
		}
		bad = rc == 0 ? tj_verify(buf, FETCH_LEN, 14) : 0;
		TJ_CHECK(rk, rc == DPL_EPEER || (rc == 0 && bad < 0),
			 "receive of data its sender closed on: %s%s (%s)",
			 dpl_err_name(rc), rc == 0 ? " with wrong data" : "",
			 dpl_last_error());
		rc = dpl_transport_isend(rk->t, rq, 0, 141, buf, 8,
					 DPL_MEM_HOST);
		TJ_CHECK(rk, rc == DPL_EPEER, "send to a closed rank: %s",
			 dpl_err_name(rc));
		tj_free(rk, buf);
		tj_free(rk, sentinel);
		tj_free(rk, rq);
		return; /* closes with rank 0 dead */
	}
	buf = mmap(NULL, FETCH_LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	TJ_CHECK(rk, buf != MAP_FAILED, "mmap of %u bytes", FETCH_LEN);
	tj_fill(buf, FETCH_LEN, 14);
	token_recv(rk, 1, TOK + 14);
	rc = dpl_transport_isend(rk->t, rq, 1, 140, buf, FETCH_LEN,
				 DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "isend: %s", dpl_last_error());
	tj_progress_for(rk, 20);
	tj_close(rk);
	TJ_CHECK(rk, munmap(buf, FETCH_LEN) == 0, "munmap");
	tj_free(rk, sentinel);
	tj_free(rk, rq);
}

BOTH(close_before_the_peer_fetched_rendezvous_data, 30)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, fetch_gone_fn, "posted first");
}

BOTH(receive_posted_after_goodbye_matches_unfetched_data, 30)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, fetch_gone_fn, NULL);
}

/* ---- wait ---------------------------------------------------------------- */

/*
 * Rank 0 waits for a message only through wait and progress while rank 1
 * keeps it waiting for 2.5 liveness timeouts: the waiting rank must keep
 * its heartbeats going (rank 1 would otherwise find it silent and fail
 * its send), must sleep in wait rather than return at once (far fewer
 * calls than a spinning loop makes), and the message must arrive. Then
 * rank 1 is killed while rank 0 waits.
 */
#define WAIT_LIVENESS_MS 400u

static void wait_fn(struct tj_rank *rk)
{
	uint64_t v = 0, waits = 0;
	void *rq;
	int rc;

	if (rk->rank == 1) {
		token_recv(rk, 0, TOK + 15);
		tj_progress_for(rk, WAIT_LIVENESS_MS * 5 / 2);
		v = 0x5157;
		send_now(rk, 0, 150, &v, sizeof v);
		token_recv(rk, 0, TOK + 16);
		raise(SIGKILL);
		return;
	}
	TJ_CHECK(rk, DPL_HAS_OP(rk->ops, wait), "the table declares no wait");
	rq = req_new(rk, 1);
	rc = dpl_transport_irecv(rk->t, rq, 1, 150, &v, sizeof v, DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "irecv: %s", dpl_last_error());
	token_send(rk, 1, TOK + 15, 1);
	while ((rc = dpl_transport_test(rk->t, rq)) == DPL_EAGAIN) {
		rc = dpl_transport_wait(rk->t, 60000000000ull);
		TJ_CHECK(rk, rc == 0, "wait: %s", dpl_last_error());
		TJ_CHECK(rk, dpl_transport_progress(rk->t) >= 0, "progress: %s",
			 dpl_last_error());
		waits++;
	}
	TJ_CHECK(rk, rc == 0, "receive while waiting: %s (%s)",
		 dpl_err_name(rc), dpl_last_error());
	TJ_CHECK(rk, v == 0x5157, "received %#llx", (unsigned long long)v);
	/* one wake-up per liveness sweep (100 ms at most) and one per
	 * heartbeat or message: a few dozen; a wait that never slept would
	 * have been called hundreds of thousands of times */
	TJ_CHECK(rk, waits < 2000, "wait returned %llu times in %u ms",
		 (unsigned long long)waits, WAIT_LIVENESS_MS * 5 / 2);
	/* a peer that dies while this rank sleeps in wait is found by the
	 * sweep that wait wakes up for: a wait without that bound would
	 * sleep its whole minute, past the test's timeout */
	rc = dpl_transport_irecv(rk->t, rq, 1, 151, &v, sizeof v, DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "irecv: %s", dpl_last_error());
	token_send(rk, 1, TOK + 16, 1);
	while ((rc = dpl_transport_test(rk->t, rq)) == DPL_EAGAIN) {
		TJ_CHECK(rk, dpl_transport_wait(rk->t, 60000000000ull) == 0,
			 "wait: %s", dpl_last_error());
		TJ_CHECK(rk, dpl_transport_progress(rk->t) >= 0, "progress: %s",
			 dpl_last_error());
	}
	TJ_CHECK(rk, rc == DPL_EPEER, "receive from a rank killed during wait: "
		 "%s", dpl_err_name(rc));
	tj_free(rk, rq);
}

BOTH(wait_sleeps_keeps_heartbeats_and_wakes_for_messages, 30)
{
	struct ucx_job job = {.n = 2, .tls = tls,
			      .timeout_ms = WAIT_LIVENESS_MS,
			      .killed = 1u << 1};

	ucx_job_run(&job, wait_fn, NULL);
}
