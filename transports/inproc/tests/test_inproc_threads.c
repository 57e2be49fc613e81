/*
 * test_inproc_threads.c - the in-process transport with a thread per
 * rank: sleeping in wait and waking, large sends posted first on both
 * sides, a ring of ranks exchanging concurrently, and a stream through
 * ring and list that must stay in order.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <time.h>

#include "inproc_test.h"

/* A rank asleep in wait (a minute's timeout) wakes for a ring message
 * and for a peer that leaves; a missed wake-up hangs into the test's
 * timeout. */
struct sleeper {
	dpl_transport *t;
	uint32_t got;
	int rc_msg, rc_dead;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *x = arg;
	void *r = req_quiet(), *r2 = req_quiet();
	int i;

	x->rc_msg = x->rc_dead = DPL_EAGAIN;
	dpl_transport_irecv(x->t, r, 0, 1, &x->got, 4, DPL_MEM_HOST);
	dpl_transport_irecv(x->t, r2, 0, 2, &x->got, 4, DPL_MEM_HOST);
	for (i = 0; i < 1000 && x->rc_msg == DPL_EAGAIN; i++) {
		dpl_transport_wait(x->t, 60u * UINT64_C(1000000000));
		dpl_transport_progress(x->t);
		x->rc_msg = dpl_transport_test(x->t, r);
	}
	for (i = 0; i < 1000 && x->rc_dead == DPL_EAGAIN; i++) {
		dpl_transport_wait(x->t, 60u * UINT64_C(1000000000));
		dpl_transport_progress(x->t);
		x->rc_dead = dpl_transport_test(x->t, r2);
	}
	free(r);
	free(r2);
	return NULL;
}

Test(inproc, a_sleeping_rank_wakes_for_messages_and_departures,
     .timeout = 30)
{
	dpl_transport *a = open_rank("sleep", 0, 2);
	struct sleeper x = {open_rank("sleep", 1, 2), 0, 0, 0};
	struct timespec ts = {0, 20000000};
	uint32_t v = 77;
	void *s = req_new();
	pthread_t th;

	pthread_create(&th, NULL, sleeper_main, &x);
	nanosleep(&ts, NULL); /* let it fall asleep (either way is fine) */
	cr_assert_eq(dpl_transport_isend(a, s, 1, 1, &v, 4, DPL_MEM_HOST), 0);
	nanosleep(&ts, NULL);
	dpl_transport_close(a);
	pthread_join(th, NULL);
	cr_assert_eq(x.rc_msg, 0);
	cr_assert_eq(x.got, 77);
	cr_assert_eq(x.rc_dead, DPL_EPEER);
	dpl_transport_close(x.t);
}

/* Two threads: both post a large send first, then the receive. */
struct bidi {
	const char *world;
	uint32_t rank;
	int rc_send, rc_recv;
	int ok;
};

static void *bidi_main(void *arg)
{
	struct bidi *x = arg;
	dpl_transport *t = open_quiet(x->world, x->rank, 2);
	size_t n = 256u << 10;
	unsigned char *out = malloc(n), *in = malloc(n), *ex = malloc(n);
	void *s = req_quiet(), *r = req_quiet();
	int i;

	if (!t || !out || !in || !ex || !s || !r) {
		x->rc_send = x->rc_recv = DPL_ENOMEM;
		return t;
	}
	fill(out, n, x->rank + 10);
	x->rc_send = dpl_transport_isend(t, s, 1 - x->rank, 1, out, n,
					 DPL_MEM_HOST);
	x->rc_recv = dpl_transport_irecv(t, r, 1 - x->rank, 1, in, n,
					 DPL_MEM_HOST);
	x->rc_send = x->rc_send ? x->rc_send : DPL_EAGAIN;
	x->rc_recv = x->rc_recv ? x->rc_recv : DPL_EAGAIN;
	for (i = 0; i < 2000000 && (x->rc_send == DPL_EAGAIN ||
				    x->rc_recv == DPL_EAGAIN); i++) {
		dpl_transport_progress(t);
		if (x->rc_send == DPL_EAGAIN)
			x->rc_send = dpl_transport_test(t, s);
		if (x->rc_recv == DPL_EAGAIN)
			x->rc_recv = dpl_transport_test(t, r);
		if (x->rc_send == DPL_EAGAIN || x->rc_recv == DPL_EAGAIN)
			dpl_transport_wait(t, 1000000);
	}
	fill(ex, n, (1 - x->rank) + 10);
	x->ok = memcmp(in, ex, n) == 0;
	free(out), free(in), free(ex), free(s), free(r);
	/* Both sides must be done before either leaves: close in main. */
	return t;
}

Test(inproc, bidirectional_large_sends_posted_first_complete)
{
	struct bidi x[2] = {{"bidi", 0, 0, 0, 0}, {"bidi", 1, 0, 0, 0}};
	pthread_t th[2];
	void *t[2];
	int i;

	for (i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, bidi_main, &x[i]);
	for (i = 0; i < 2; i++)
		pthread_join(th[i], &t[i]);
	for (i = 0; i < 2; i++) {
		cr_assert_eq(x[i].rc_send, 0, "rank %d send %d", i,
			     x[i].rc_send);
		cr_assert_eq(x[i].rc_recv, 0, "rank %d recv %d", i,
			     x[i].rc_recv);
		cr_assert(x[i].ok, "rank %d received wrong bytes", i);
		dpl_transport_close(t[i]);
	}
}

/* Four ranks pass numbered messages around a ring concurrently. */
#define RING_N 4
#define RING_MSGS 2000
/* Rounds of test, wait (1 ms at most) and progress per request. */
#define RING_ROUNDS 100000L

struct ringarg {
	uint32_t rank;
	int bad;
	dpl_transport *t;
};

static void *ring_main(void *arg)
{
	struct ringarg *x = arg;
	dpl_transport *t = open_quiet("ring4", x->rank, RING_N);
	uint32_t next = (x->rank + 1) % RING_N,
		 prev = (x->rank + RING_N - 1) % RING_N;
	void *s = req_quiet(), *r = req_quiet();
	uint64_t out, in;
	int i, rc;

	x->t = t;
	if (!t || !s || !r) {
		x->bad = -1;
		free(s);
		free(r);
		return NULL;
	}
	for (i = 0; i < RING_MSGS; i++) {
		out = ((uint64_t)x->rank << 32) | (uint64_t)i;
		dpl_transport_irecv(t, r, prev, (uint64_t)(i % 7), &in, 8,
				    DPL_MEM_HOST);
		dpl_transport_isend(t, s, next, (uint64_t)(i % 7), &out, 8,
				    DPL_MEM_HOST);
		rc = finish_waiting(t, r, RING_ROUNDS);
		if (rc != 0 || in != (((uint64_t)prev << 32) | (uint64_t)i))
			x->bad++;
		if (finish_waiting(t, s, RING_ROUNDS) != 0)
			x->bad++;
	}
	free(s);
	free(r);
	return NULL;
}

Test(inproc, concurrent_ranks_exchange_in_order)
{
	struct ringarg x[RING_N];
	pthread_t th[RING_N];
	int i;

	for (i = 0; i < RING_N; i++) {
		x[i].rank = (uint32_t)i;
		x[i].bad = 0;
		pthread_create(&th[i], NULL, ring_main, &x[i]);
	}
	for (i = 0; i < RING_N; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < RING_N; i++) {
		cr_assert_eq(x[i].bad, 0, "rank %d: %d bad messages", i,
			     x[i].bad);
		dpl_transport_close(x[i].t);
	}
}

/* One sender streams numbered messages on one tag, past the ring's room
 * into the list and back, while the receiver posts its receives in
 * batches of changing size: every receive gets the next number. A
 * receiver that matched the list before ring messages that went in
 * while it looked would get a later one. */
#define STREAM_N 1000000
#define STREAM_WINDOW 64
/* Rounds of test and progress a stream request may take: the other
 * thread may be off the core for a while. */
#define STREAM_ROUNDS 100000000L

struct streamarg {
	dpl_transport *t;
	long bad_at; /* first receive out of order, or -1 */
	int rc;
};

static void *stream_send_main(void *arg)
{
	struct streamarg *x = arg;
	void *req[STREAM_WINDOW];
	uint64_t val[STREAM_WINDOW];
	int i, k, rc;

	for (k = 0; k < STREAM_WINDOW; k++)
		req[k] = req_quiet();
	for (i = 0; i < STREAM_N && x->rc == 0; i++) {
		k = i % STREAM_WINDOW;
		if (i >= STREAM_WINDOW &&
		    (rc = finish_within(x->t, req[k], STREAM_ROUNDS)) != 0)
			x->rc = rc;
		val[k] = (uint64_t)i;
		rc = dpl_transport_isend(x->t, req[k], 1, 9, &val[k], 8,
					 DPL_MEM_HOST);
		if (rc != 0 && x->rc == 0)
			x->rc = rc;
	}
	for (k = 0; k < STREAM_WINDOW && k < i; k++)
		(void)finish_within(x->t, req[k], STREAM_ROUNDS);
	for (k = 0; k < STREAM_WINDOW; k++)
		free(req[k]);
	return NULL;
}

static void *stream_recv_main(void *arg)
{
	struct streamarg *x = arg;
	void *req[48];
	uint64_t val[48];
	long i = 0;
	int k, n, rc, batch = 0;

	for (k = 0; k < 48; k++)
		req[k] = req_quiet();
	while (i < STREAM_N && x->rc == 0) {
		n = 1 + (batch++ * 7) % 48;
		if (n > STREAM_N - i)
			n = (int)(STREAM_N - i);
		for (k = 0; k < n; k++)
			dpl_transport_irecv(x->t, req[k], 0, 9, &val[k], 8,
					    DPL_MEM_HOST);
		for (k = 0; k < n; k++, i++) {
			rc = finish_within(x->t, req[k], STREAM_ROUNDS);
			if (rc != 0 && x->rc == 0)
				x->rc = rc;
			if (val[k] != (uint64_t)i && x->bad_at < 0)
				x->bad_at = i;
		}
	}
	for (k = 0; k < 48; k++)
		free(req[k]);
	return NULL;
}

Test(inproc, a_stream_through_ring_and_list_stays_in_order, .timeout = 120)
{
	struct streamarg s = {.bad_at = -1}, r = {.bad_at = -1};
	pthread_t ts, tr;

	s.t = open_rank("stream", 0, 2);
	r.t = open_rank("stream", 1, 2);
	pthread_create(&tr, NULL, stream_recv_main, &r);
	pthread_create(&ts, NULL, stream_send_main, &s);
	pthread_join(ts, NULL);
	pthread_join(tr, NULL);
	cr_expect_eq(s.rc, 0, "sender: %s", dpl_err_name(s.rc));
	cr_expect_eq(r.rc, 0, "receiver: %s", dpl_err_name(r.rc));
	cr_expect_eq(r.bad_at, -1, "receive %ld got another message",
		     r.bad_at);
	dpl_transport_close(s.t);
	dpl_transport_close(r.t);
}
