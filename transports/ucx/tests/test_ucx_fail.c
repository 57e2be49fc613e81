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
static void kill_fn(struct rank *r, void *arg)
{
	static unsigned char big[1u << 20];
	uint64_t v = 0, mark = 0, t0;
	void *rq, *sq, *late;
	int rc;

	if (r->id == 1) {
		token_send(r, 0, TOK + 7, 1);
		token_send(r, 2, TOK + 7, 1);
		pause(); /* no progress: only death ends it */
		_exit(3);
	}
	rq = req_new(r);
	sq = req_new(r);
	late = req_new(r);
	token_recv(r, 1, TOK + 7);
	rc = dpl_transport_irecv(r->t, rq, 1, 60, &v, sizeof v, DPL_MEM_HOST);
	check(r, rc == 0, "irecv from the victim");
	rc = dpl_transport_isend(r->t, sq, 1, 61, big, sizeof big,
				 DPL_MEM_HOST);
	check(r, rc == 0, "rendezvous send to the victim");
	if (r->id == 0) {
		token_recv(r, 2, TOK + 8); /* rank 2 is ready too */
		spin_ms(r, 5);
		check(r, kill(r->job->pid[1], SIGKILL) == 0, "kill");
	} else {
		token_send(r, 0, TOK + 8, 1);
	}
	t0 = mono_ns();
	rc = req_wait(r, rq, LIVENESS_BOUND_MS);
	check(r, rc == DPL_EPEER, "receive from the killed rank gave %s "
	      "within %u ms", dpl_err_name(rc), LIVENESS_BOUND_MS);
	check(r, strstr(dpl_last_error(), "rank 1") != NULL,
	      "error does not name the rank: %s", dpl_last_error());
	rc = req_wait(r, sq, LIVENESS_BOUND_MS);
	check(r, rc == DPL_EPEER, "send to the killed rank gave %s",
	      dpl_err_name(rc));
	if (r->id == 0)
		cr_log_info("peer death seen after %.1f ms (%s)",
			    (double)(mono_ns() - t0) / 1e6, dpl_last_error());
	rc = dpl_transport_isend(r->t, late, 1, 62, &v, sizeof v, DPL_MEM_HOST);
	check(r, rc == DPL_EPEER, "post to a dead rank gave %s",
	      dpl_err_name(rc));
	rc = dpl_transport_irecv(r->t, late, 1, 62, &v, sizeof v, DPL_MEM_HOST);
	check(r, rc == DPL_EPEER, "receive post from a dead rank gave %s",
	      dpl_err_name(rc));
	/* The bystander pair is unaffected, both ways and large. */
	if (r->id == 0) {
		pattern_fill(big, sizeof big, 71);
		send_now(r, 2, 63, big, sizeof big);
		mark = token_recv(r, 2, 64);
		check(r, mark == 99, "bystander token %llu",
		      (unsigned long long)mark);
	} else {
		memset(big, 0, sizeof big);
		recv_now(r, 0, 63, big, sizeof big);
		check(r, pattern_bad(big, sizeof big, 71) == sizeof big,
		      "bystander data corrupted");
		token_send(r, 0, 64, 99);
	}
	free(rq);
	free(sq);
	free(late);
}

BOTH(sigkilled_peer_fails_requests_and_bystander_works, 60)
{
	struct job job = {.n = 3, .tls = tls, .killed = 1u << 1};

	job_run(&job, kill_fn, NULL);
}

/* Rank 1 sends its last message and leaves (fini); rank 0's pending
 * receive from it fails, the message that arrived is still taken. */
static void fini_fn(struct rank *r, void *arg)
{
	uint64_t last = 0, never = 0;
	void *rq, *late;
	int rc;

	if (r->id == 1) {
		token_recv(r, 0, TOK + 9);
		token_send(r, 0, 70, 4242);
		return; /* the harness closes the transport */
	}
	rq = req_new(r);
	late = req_new(r);
	rc = dpl_transport_irecv(r->t, rq, 1, 71, &never, sizeof never,
				 DPL_MEM_HOST);
	check(r, rc == 0, "irecv");
	token_send(r, 1, TOK + 9, 1);
	rc = req_wait(r, rq, LIVENESS_BOUND_MS);
	check(r, rc == DPL_EPEER, "pending receive from a rank that left "
	      "gave %s", dpl_err_name(rc));
	rc = dpl_transport_irecv(r->t, late, 1, 70, &last, sizeof last,
				 DPL_MEM_HOST);
	check(r, rc == 0, "receive of the last message: %s",
	      dpl_last_error());
	check(r, req_wait(r, late, 2000) == 0, "last message");
	check(r, last == 4242, "last message carries %llu",
	      (unsigned long long)last);
	rc = dpl_transport_irecv(r->t, late, 1, 70, &last, sizeof last,
				 DPL_MEM_HOST);
	check(r, rc == DPL_EPEER, "a second receive from a rank that left "
	      "gave %s", dpl_err_name(rc));
	free(rq);
	free(late);
}

BOTH(fini_fails_pending_requests_and_delivers_last_sends, 30)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, fini_fn, NULL);
}

/* ---- liveness timeout ------------------------------------------------- */

/* Rank 1 stops (SIGSTOP): its process is there but it answers nothing,
 * so only the heartbeat deadline finds it. */
static void stopped_fn(struct rank *r, void *arg)
{
	uint64_t v = 0;
	void *rq;
	int rc;

	if (r->id == 1) {
		token_send(r, 0, TOK + 10, 1);
		kill(getpid(), SIGSTOP);
		_exit(4); /* never resumed: rank 0 kills it */
	}
	rq = req_new(r);
	token_recv(r, 1, TOK + 10);
	rc = dpl_transport_irecv(r->t, rq, 1, 100, &v, sizeof v, DPL_MEM_HOST);
	check(r, rc == 0, "irecv");
	rc = req_wait(r, rq, r->job->timeout_ms + LIVENESS_BOUND_MS);
	check(r, rc == DPL_EPEER, "a stopped rank gave %s", dpl_err_name(rc));
	check(r, strstr(dpl_last_error(), "silent") != NULL,
	      "error does not say the rank went silent: %s", dpl_last_error());
	kill(r->job->pid[1], SIGKILL);
	free(rq);
}

BOTH(stopped_peer_fails_after_the_liveness_timeout, 30)
{
	struct job job = {.n = 2, .tls = tls, .timeout_ms = 1000,
			  .killed = 1u << 1};

	job_run(&job, stopped_fn, NULL);
}

/* Rank 1 computes (no progress) for less than the timeout between
 * messages while rank 0 waits: no false alarm. Then both compute for
 * longer than the timeout at once: each forgives its own absence. */
static void busy_fn(struct rank *r, void *arg)
{
	uint64_t v;
	int k;

	for (k = 0; k < 3; k++) {
		if (r->id == 1) {
			sleep_ms(r->job->timeout_ms * 4 / 10);
			token_send(r, 0, 110, (uint64_t)k);
		} else {
			v = token_recv(r, 1, 110);
			check(r, v == (uint64_t)k, "message %d carries %llu", k,
			      (unsigned long long)v);
		}
	}
	token_send(r, 1 - r->id, 111, 7);
	check(r, token_recv(r, 1 - r->id, 111) == 7, "token before the pause");
	sleep_ms(r->job->timeout_ms * 3 / 2);
	token_send(r, 1 - r->id, 112, 8);
	check(r, token_recv(r, 1 - r->id, 112) == 8, "token after the pause");
}

BOTH(busy_peer_within_the_timeout_stays_alive, 30)
{
	struct job job = {.n = 2, .tls = tls, .timeout_ms = 2000};

	job_run(&job, busy_fn, NULL);
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
 *  - posted_first (arg non-NULL): rank 1 posts the receive, then stops
 *    progressing while rank 0 sends and closes; when it progresses again
 *    the receive matches and its fetch finds no data.
 *  - otherwise rank 1 keeps progressing, takes in the announcement and
 *    rank 0's goodbye (a sentinel receive fails), and only then posts the
 *    receive: it matches a message whose sender is known gone, and the
 *    fetch it starts must be over before the post returns.
 */
static void fetch_gone_fn(struct rank *r, void *arg)
{
	bool posted_first = arg != NULL;
	unsigned char *buf;
	uint64_t never;
	void *rq = req_new(r), *sentinel = req_new(r);
	size_t bad;
	int rc;

	if (r->id == 1) {
		buf = xmalloc(r, FETCH_LEN);
		memset(buf, 0, FETCH_LEN);
		if (posted_first) {
			rc = dpl_transport_irecv(r->t, rq, 0, 140, buf,
						 FETCH_LEN, DPL_MEM_HOST);
			check(r, rc == 0, "irecv: %s", dpl_last_error());
			token_send(r, 0, TOK + 14, 1);
			sleep_ms(300); /* rank 0 sends and closes */
			rc = req_wait(r, rq, LIVENESS_BOUND_MS);
		} else {
			rc = dpl_transport_irecv(r->t, sentinel, 0, 142, &never,
						 sizeof never, DPL_MEM_HOST);
			check(r, rc == 0, "irecv: %s", dpl_last_error());
			token_send(r, 0, TOK + 14, 1);
			rc = req_wait(r, sentinel, LIVENESS_BOUND_MS);
			check(r, rc == DPL_EPEER, "receive from a rank that "
			      "closed: %s", dpl_err_name(rc));
			rc = dpl_transport_irecv(r->t, rq, 0, 140, buf,
						 FETCH_LEN, DPL_MEM_HOST);
			if (rc == 0)
				rc = req_wait(r, rq, LIVENESS_BOUND_MS);
		}
		bad = rc == 0 ? pattern_bad(buf, FETCH_LEN, 14) : FETCH_LEN;
		check(r, rc == DPL_EPEER || (rc == 0 && bad == FETCH_LEN),
		      "receive of data its sender closed on: %s%s (%s)",
		      dpl_err_name(rc), rc == 0 ? " with wrong data" : "",
		      dpl_last_error());
		rc = dpl_transport_isend(r->t, rq, 0, 141, buf, 8,
					 DPL_MEM_HOST);
		check(r, rc == DPL_EPEER, "send to a closed rank: %s",
		      dpl_err_name(rc));
		free(buf);
		free(sentinel);
		free(rq);
		return; /* closes with rank 0 dead */
	}
	buf = mmap(NULL, FETCH_LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	check(r, buf != MAP_FAILED, "mmap of %u bytes", FETCH_LEN);
	pattern_fill(buf, FETCH_LEN, 14);
	token_recv(r, 1, TOK + 14);
	rc = dpl_transport_isend(r->t, rq, 1, 140, buf, FETCH_LEN,
				 DPL_MEM_HOST);
	check(r, rc == 0, "isend: %s", dpl_last_error());
	spin_ms(r, 20);
	dpl_transport_close(r->t);
	r->t = NULL;
	r->ctx = NULL;
	check(r, munmap(buf, FETCH_LEN) == 0, "munmap");
	free(sentinel);
	free(rq);
}

BOTH(close_before_the_peer_fetched_rendezvous_data, 30)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, fetch_gone_fn, "posted first");
}

BOTH(receive_posted_after_goodbye_matches_unfetched_data, 30)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, fetch_gone_fn, NULL);
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

static void wait_fn(struct rank *r, void *arg)
{
	uint64_t v = 0, waits = 0;
	void *rq;
	int rc;

	if (r->id == 1) {
		token_recv(r, 0, TOK + 15);
		spin_ms(r, WAIT_LIVENESS_MS * 5 / 2);
		v = 0x5157;
		send_now(r, 0, 150, &v, sizeof v);
		token_recv(r, 0, TOK + 16);
		raise(SIGKILL);
		return;
	}
	check(r, DPL_HAS_OP(r->o, wait), "the table declares no wait");
	rq = req_new(r);
	rc = dpl_transport_irecv(r->t, rq, 1, 150, &v, sizeof v, DPL_MEM_HOST);
	check(r, rc == 0, "irecv: %s", dpl_last_error());
	token_send(r, 1, TOK + 15, 1);
	while ((rc = dpl_transport_test(r->t, rq)) == DPL_EAGAIN) {
		rc = dpl_transport_wait(r->t, 60000000000ull);
		check(r, rc == 0, "wait: %s", dpl_last_error());
		check(r, dpl_transport_progress(r->t) >= 0, "progress: %s",
		      dpl_last_error());
		waits++;
	}
	check(r, rc == 0, "receive while waiting: %s (%s)", dpl_err_name(rc),
	      dpl_last_error());
	check(r, v == 0x5157, "received %#llx", (unsigned long long)v);
	/* one wake-up per liveness sweep (100 ms at most) and one per
	 * heartbeat or message: a few dozen; a wait that never slept would
	 * have been called hundreds of thousands of times */
	check(r, waits < 2000, "wait returned %llu times in %u ms",
	      (unsigned long long)waits, WAIT_LIVENESS_MS * 5 / 2);
	/* a peer that dies while this rank sleeps in wait is found by the
	 * sweep that wait wakes up for: a wait without that bound would
	 * sleep its whole minute, past the test's timeout */
	rc = dpl_transport_irecv(r->t, rq, 1, 151, &v, sizeof v, DPL_MEM_HOST);
	check(r, rc == 0, "irecv: %s", dpl_last_error());
	token_send(r, 1, TOK + 16, 1);
	while ((rc = dpl_transport_test(r->t, rq)) == DPL_EAGAIN) {
		check(r, dpl_transport_wait(r->t, 60000000000ull) == 0,
		      "wait: %s", dpl_last_error());
		check(r, dpl_transport_progress(r->t) >= 0, "progress: %s",
		      dpl_last_error());
	}
	check(r, rc == DPL_EPEER, "receive from a rank killed during wait: "
	      "%s", dpl_err_name(rc));
	free(rq);
}

BOTH(wait_sleeps_keeps_heartbeats_and_wakes_for_messages, 30)
{
	struct job job = {.n = 2, .tls = tls, .timeout_ms = WAIT_LIVENESS_MS,
			  .killed = 1u << 1};

	job_run(&job, wait_fn, NULL);
}
