/*
 * test_progress.c - progress and ownership: a receiver that sleeps
 * before progressing, large sends posted by both sides before their
 * receives, 10 000 sends posted without progress, requests that come back
 * exactly once and are never touched again, and a context handed from
 * one thread to another (cases 22, 23, 24, 25 and 34 of the battery).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define FLAG_AWAKE 1

static void asleep_rank(struct tj_rank *rk)
{
	static const size_t lens[3] = {8, 64u << 10, 4u << 20};
	unsigned char *buf[3];
	struct conf_set s;
	bool blocked[3] = {false, false, false};
	unsigned k, posted = 0;
	uint64_t t0;
	long before;
	int rc;

	conf_set_init(rk, &s, 3);
	for (k = 0; k < 3; k++) {
		buf[k] = tj_alloc(rk, lens[k]);
		if (rk->rank == 0)
			tj_fill(buf[k], lens[k], 41 + k);
	}
	tj_barrier(rk);
	if (rk->rank == 1) {
		tj_step(rk, "sleeping 200 ms without progress");
		tj_sleep_ms(200);
		tj_flag_set(rk, FLAG_AWAKE, 1);
		for (k = 0; k < 3; k++) {
			conf_recv(rk, conf_set_next(&s), 0, 41 + k, buf[k],
				  lens[k], &s);
			conf_set_added(&s);
		}
	} else {
		tj_step(rk, "posting 8 B, 64 KiB and 4 MiB to a sleeper");
		while (posted < 3) {
			k = posted;
			before = tj_flag_get(rk, FLAG_AWAKE);
			t0 = dpl_clock_ns();
			rc = dpl_transport_isend(rk->t, conf_set_next(&s), 1,
						 41 + k, buf[k], lens[k],
						 DPL_MEM_HOST);
			conf_check_code(rk, rc, "isend");
			/* The call spanned the peer's waking up: it waited
			 * for the peer. */
			if (before == 0 && tj_flag_get(rk, FLAG_AWAKE) != 0 &&
			    dpl_clock_ns() - t0 > 100000000ull)
				blocked[k] = true;
			if (rc == 0) {
				conf_set_added(&s);
				posted++;
				continue;
			}
			TJ_CHECK(rk, rc == DPL_EAGAIN,
				 "isend of %zu bytes to a sleeping peer: "
				 "%s (%s)",
				 lens[k], dpl_err_name(rc),
				 dpl_last_error());
			tj_progress(rk);
			TJ_CHECK(rk, dpl_clock_ns() < rk->deadline_ns,
				 "isend of %zu bytes kept returning "
				 "DPL_EAGAIN",
				 lens[k]);
		}
		for (k = 0; k < 3; k++)
			TJ_CHECK(rk, !blocked[k],
				 "isend of %zu bytes blocked until the "
				 "receiver woke up (posts never block)",
				 lens[k]);
	}
	conf_set_wait(rk, &s, "messages to a receiver that slept");
	for (k = 0; k < 3; k++) {
		TJ_CHECK(rk, s.rc[k] == 0, "%s of %zu bytes: %s",
			 rk->rank ? "receive" : "send", lens[k],
			 dpl_err_name(s.rc[k]));
		if (rk->rank == 1)
			TJ_CHECK(rk, tj_verify(buf[k], lens[k], 41 + k) < 0,
				 "%zu-byte message differs", lens[k]);
	}
}

Test(progress, receiver_asleep_200ms, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = asleep_rank,
			       .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

static void bidir_rank(struct tj_rank *rk)
{
	const size_t len = 16u << 20;
	uint32_t peer = 1 - rk->rank;
	unsigned char *out[4], *in[4];
	struct conf_set ss, rs;
	unsigned k;
	long long bad;

	conf_set_init(rk, &ss, 4);
	conf_set_init(rk, &rs, 4);
	for (k = 0; k < 4; k++) {
		out[k] = tj_alloc(rk, len);
		in[k] = tj_alloc(rk, len);
		tj_fill(out[k], len, 10 * rk->rank + k);
	}
	tj_barrier(rk);
	tj_step(rk, "4 sends of 16 MiB before any receive");
	for (k = 0; k < 4; k++)
		conf_send_early(rk, &ss, peer, 50 + k, out[k], len);
	if (ss.queued)
		tj_note(rk, "%zu of the 16 MiB sends waited for the receives "
			    "(DPL_EAGAIN)", ss.queued);
	tj_step(rk, "then 4 receives of 16 MiB");
	for (k = 0; k < 4; k++) {
		conf_recv(rk, conf_set_next(&rs), peer, 50 + k, in[k], len,
			  &rs);
		conf_set_added(&rs);
	}
	conf_set_flush(rk, &ss);
	conf_set_wait(rk, &rs, "receives of 4 x 16 MiB both ways");
	conf_set_wait(rk, &ss, "sends of 4 x 16 MiB both ways");
	for (k = 0; k < 4; k++) {
		TJ_CHECK(rk, ss.rc[k] == 0 && rs.rc[k] == 0,
			 "16 MiB message %u: send %s, receive %s", k,
			 dpl_err_name(ss.rc[k]), dpl_err_name(rs.rc[k]));
		bad = tj_verify(in[k], len, 10 * peer + k);
		TJ_CHECK(rk, bad < 0, "16 MiB message %u differs at byte "
				      "%lld", k, bad);
	}
}

Test(progress, bidirectional_4x16MiB, .timeout = 140)
{
	struct conf_job job = {.size = 2, .fn = bidir_rank,
			       .deadline_s = 120};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

#define BP_N 10000
#define FLAG_PHASE1 2

static void backpressure_rank(struct tj_rank *rk)
{
	uint64_t *data = tj_alloc(rk, BP_N * 8 * sizeof *data);
	struct conf_set s;
	size_t i, first = 0;
	int rc;

	conf_set_init(rk, &s, BP_N);
	tj_barrier(rk);
	if (rk->rank == 0) {
		for (i = 0; i < BP_N; i++) {
			data[i * 8] = i;
			tj_fill(&data[i * 8 + 1], 56, i);
		}
		tj_step(rk, "posting %d sends without progress", BP_N);
		for (i = 0; i < BP_N; i++) {
			rc = dpl_transport_isend(rk->t, conf_set_next(&s), 1,
						 12, &data[i * 8], 64,
						 DPL_MEM_HOST);
			conf_check_code(rk, rc, "isend");
			TJ_CHECK(rk, rc == 0 || rc == DPL_EAGAIN,
				 "isend %zu of %d without progress: %s (%s)",
				 i, BP_N, dpl_err_name(rc),
				 dpl_last_error());
			if (rc == DPL_EAGAIN)
				break;
			conf_set_added(&s);
		}
		first = i;
		tj_note(rk, "%zu of %d sends posted before the first "
			    "DPL_EAGAIN%s",
			first, BP_N, first == BP_N ? " (none came)" : "");
		tj_barrier(rk);
		tj_step(rk, "posting the other %zu with progress",
			BP_N - first);
		for (i = first; i < BP_N; i++) {
			conf_send(rk, conf_set_next(&s), 1, 12, &data[i * 8],
				  64, &s);
			conf_set_added(&s);
		}
		conf_set_wait(rk, &s, "10 000 sends");
		for (i = 0; i < BP_N; i++)
			TJ_CHECK(rk, s.rc[i] == 0, "send %zu: %s", i,
				 dpl_err_name(s.rc[i]));
		return;
	}
	tj_barrier(rk);
	tj_step(rk, "posting %d receives", BP_N);
	for (i = 0; i < BP_N; i++) {
		conf_recv(rk, conf_set_next(&s), 0, 12, &data[i * 8], 64, &s);
		conf_set_added(&s);
	}
	conf_set_wait(rk, &s, "10 000 receives");
	for (i = 0; i < BP_N; i++) {
		TJ_CHECK(rk, s.rc[i] == 0, "receive %zu: %s", i,
			 dpl_err_name(s.rc[i]));
		TJ_CHECK(rk, data[i * 8] == i,
			 "receive %zu got message %llu", i,
			 (unsigned long long)data[i * 8]);
		TJ_CHECK(rk, tj_verify(&data[i * 8 + 1], 56, i) < 0,
			 "message %zu's payload differs", i);
	}
}

Test(progress, backpressure_10000_sends, .timeout = 140)
{
	struct conf_job job = {.size = 2, .fn = backpressure_rank,
			       .deadline_s = 120};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

/* Requests of every outcome (done, truncated, cancelled) come back once;
 * after that the caller poisons their storage and frees their buffers,
 * and further progress must touch neither (ASan sees the buffers). */
#define EO_OK 8
#define EO_TRUNC 4
#define EO_CANCEL 4
#define EO_N (EO_OK + EO_TRUNC + EO_CANCEL)
#define POISON 0xa5

static bool poisoned(const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != POISON)
			return false;
	return true;
}

static void once_rank(struct tj_rank *rk)
{
	const size_t rsz = rk->ops->req_size;
	bool sender = rk->rank == 1;
	unsigned nreq = sender ? EO_OK + EO_TRUNC : EO_N;
	void *pool = tj_reqs(rk, EO_N);
	unsigned char *buf[EO_N];
	int rc[EO_N];
	unsigned i, left = nreq, k;

	for (i = 0; i < nreq; i++) {
		buf[i] = malloc(64);
		TJ_CHECK(rk, buf[i] != NULL, "out of memory");
		tj_fill(buf[i], 64, 600 + i);
		rc[i] = DPL_EAGAIN;
	}
	if (sender) {
		tj_barrier(rk);
		for (i = 0; i < nreq; i++)
			conf_send(rk, tj_req(rk, pool, i), 0, 600 + i, buf[i],
				  64, NULL);
	} else {
		for (i = 0; i < nreq; i++)
			conf_recv(rk, tj_req(rk, pool, i), 1, 600 + i, buf[i],
				  i >= EO_OK && i < EO_OK + EO_TRUNC ? 32 : 64,
				  NULL);
		tj_barrier(rk);
		for (i = EO_OK + EO_TRUNC; i < EO_N; i++) {
			int c = dpl_transport_cancel(rk->t,
						     tj_req(rk, pool, i));

			conf_check_code(rk, c, "cancel");
			TJ_CHECK(rk, c == 0, "cancel of a posted receive: %s",
				 dpl_err_name(c));
		}
	}
	tj_step(rk, "collecting %u requests once each", nreq);
	while (left > 0) {
		TJ_CHECK(rk, dpl_clock_ns() < rk->deadline_ns &&
					!tj_aborted(rk),
			 "%u of %u requests never completed", left, nreq);
		tj_progress(rk);
		for (i = 0; i < nreq; i++) {
			if (rc[i] != DPL_EAGAIN)
				continue;
			k = (unsigned)dpl_transport_test(
				rk->t, tj_req(rk, pool, i));
			rc[i] = conf_check_code(rk, (int)k, "test");
			if (rc[i] == DPL_EAGAIN)
				continue;
			/* the caller owns storage and buffer again */
			memset(tj_req(rk, pool, i), POISON, rsz);
			free(buf[i]);
			buf[i] = NULL;
			left--;
		}
	}
	tj_step(rk, "progressing after every request came back");
	for (k = 0; k < 200; k++)
		tj_progress(rk);
	for (i = 0; i < nreq; i++) {
		int want = i < EO_OK ? 0
			   : i < EO_OK + EO_TRUNC ? DPL_ETRUNC
						  : DPL_ECANCELED;

		if (sender)
			TJ_CHECK(rk, rc[i] == 0 || (i >= EO_OK &&
						    rc[i] == DPL_ETRUNC),
				 "send %u: %s", i, dpl_err_name(rc[i]));
		else
			TJ_CHECK(rk, rc[i] == want,
				 "receive %u: %s, expected %s", i,
				 dpl_err_name(rc[i]), dpl_err_name(want));
		TJ_CHECK(rk, poisoned(tj_req(rk, pool, i), rsz),
			 "request %u's storage was written after test "
			 "reported it complete",
			 i);
	}
}

Test(progress, completion_exactly_once_then_hands_off, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = once_rank, .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

/* "A context is used by one thread at a time": one thread posts, joins,
 * and another progresses the same context to completion. */
struct handoff {
	struct tj_rank *rk;
	void *rq;
	unsigned char *in, *out;
	size_t len;
	int rc[2];
};

static void *post_thread(void *arg)
{
	struct handoff *h = arg;
	struct tj_rank *rk = h->rk;

	h->rc[0] = dpl_transport_irecv(rk->t, tj_req(rk, h->rq, 0), 1, 70,
				       h->in, h->len, DPL_MEM_HOST);
	h->rc[1] = dpl_transport_isend(rk->t, tj_req(rk, h->rq, 1), 1, 71,
				       h->out, h->len, DPL_MEM_HOST);
	return NULL;
}

static void *finish_thread(void *arg)
{
	struct handoff *h = arg;
	struct tj_rank *rk = h->rk;
	int i;

	h->rc[0] = h->rc[1] = DPL_EAGAIN;
	while (dpl_clock_ns() < rk->deadline_ns && !tj_aborted(rk)) {
		for (i = 0; i < 2; i++)
			if (h->rc[i] == DPL_EAGAIN)
				h->rc[i] = dpl_transport_test(
					rk->t, tj_req(rk, h->rq, i));
		if (h->rc[0] != DPL_EAGAIN && h->rc[1] != DPL_EAGAIN)
			break;
		if (dpl_transport_progress(rk->t) < 0)
			break;
	}
	return NULL;
}

static void handoff_rank(struct tj_rank *rk)
{
	struct handoff h;
	pthread_t th;
	long long bad;

	h.rk = rk;
	h.len = 1u << 20;
	h.rq = tj_reqs(rk, 2);
	h.in = tj_alloc(rk, h.len);
	h.out = tj_alloc(rk, h.len);
	tj_fill(h.out, h.len, 700 + rk->rank);
	tj_barrier(rk);
	if (rk->rank == 1) {
		conf_recv(rk, tj_req(rk, h.rq, 0), 0, 71, h.in, h.len, NULL);
		conf_send(rk, tj_req(rk, h.rq, 1), 0, 70, h.out, h.len,
			  NULL);
		h.rc[0] = tj_wait(rk, tj_req(rk, h.rq, 0), 0, "a receive");
		h.rc[1] = tj_wait(rk, tj_req(rk, h.rq, 1), 0, "a send");
	} else {
		tj_step(rk, "posting from one thread");
		TJ_CHECK(rk, pthread_create(&th, NULL, post_thread, &h) == 0,
			 "pthread_create");
		pthread_join(th, NULL);
		conf_check_code(rk, h.rc[0], "irecv");
		conf_check_code(rk, h.rc[1], "isend");
		TJ_CHECK(rk, h.rc[0] == 0 && h.rc[1] == 0,
			 "posts from a second thread: irecv %s, isend %s",
			 dpl_err_name(h.rc[0]), dpl_err_name(h.rc[1]));
		tj_step(rk, "completing from another thread");
		TJ_CHECK(rk, pthread_create(&th, NULL, finish_thread, &h) ==
				     0,
			 "pthread_create");
		pthread_join(th, NULL);
		conf_check_code(rk, h.rc[0], "test");
		conf_check_code(rk, h.rc[1], "test");
	}
	TJ_CHECK(rk, h.rc[0] == 0 && h.rc[1] == 0,
		 "requests handed between threads: receive %s, send %s",
		 dpl_err_name(h.rc[0]), dpl_err_name(h.rc[1]));
	bad = tj_verify(h.in, h.len, 700 + (1 - rk->rank));
	TJ_CHECK(rk, bad < 0, "1 MiB message differs at byte %lld", bad);
}

Test(progress, context_moves_between_threads, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = handoff_rank,
			       .deadline_s = 60};

	conf_run(&job);
}
