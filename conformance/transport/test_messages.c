/*
 * test_messages.c - moving bytes: zero-length messages, sizes across the
 * protocol thresholds of the fabrics dpl runs on, unaligned buffers, and
 * expected versus unexpected receives (cases 5 to 11 of the battery).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define GUARD 64
#define GUARD_BYTE 0xee

static void guard_fill(unsigned char *p, size_t n)
{
	memset(p, GUARD_BYTE, n);
}

static long long guard_check(const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != GUARD_BYTE)
			return (long long)i;
	return -1;
}

/* ---------------------------------------------------------------- */

static void zero_rank(struct tj_rank *rk)
{
	unsigned char in[4][16], out[16];
	void *rq = tj_reqs(rk, 8);
	uint32_t peer = 1 - rk->rank;
	int rc;

	if (rk->rank == 0) {
		tj_fill(out, sizeof out, 5);
		tj_step(rk, "send 0 bytes on tag 1 (receive posted first)");
		tj_barrier(rk);
		conf_send(rk, tj_req(rk, rq, 0), peer, 1, out, 0, NULL);
		tj_step(rk, "send 0 bytes on tag 2 before its receive");
		conf_send(rk, tj_req(rk, rq, 1), peer, 2, out, 0, NULL);
		conf_send(rk, tj_req(rk, rq, 2), peer, 3, out, 0, NULL);
		conf_send(rk, tj_req(rk, rq, 3), peer, 4, out, 1, NULL);
		tj_barrier(rk);
		rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "0-byte send");
		TJ_CHECK(rk, rc == 0, "0-byte send (expected): %s",
			 dpl_err_name(rc));
		rc = tj_wait(rk, tj_req(rk, rq, 1), 0, "0-byte send");
		TJ_CHECK(rk, rc == 0, "0-byte send (unexpected): %s",
			 dpl_err_name(rc));
		rc = tj_wait(rk, tj_req(rk, rq, 2), 0, "0-byte send");
		TJ_CHECK(rk, rc == 0 || rc == DPL_ETRUNC,
			 "0-byte send into a 1-byte receive: %s, expected "
			 "0 or DPL_ETRUNC",
			 dpl_err_name(rc));
		rc = tj_wait(rk, tj_req(rk, rq, 3), 0, "1-byte send");
		TJ_CHECK(rk, rc == 0 || rc == DPL_ETRUNC,
			 "1-byte send into a 0-byte receive: %s, expected "
			 "0 or DPL_ETRUNC",
			 dpl_err_name(rc));
		tj_step(rk, "8 bytes on tags 3 and 4 after the mismatches");
		conf_send(rk, tj_req(rk, rq, 4), peer, 3, out, 8, NULL);
		conf_send(rk, tj_req(rk, rq, 5), peer, 4, out, 8, NULL);
		rc = tj_wait(rk, tj_req(rk, rq, 4), 0, "8-byte send");
		TJ_CHECK(rk, rc == 0, "8-byte send: %s", dpl_err_name(rc));
		rc = tj_wait(rk, tj_req(rk, rq, 5), 0, "8-byte send");
		TJ_CHECK(rk, rc == 0, "8-byte send: %s", dpl_err_name(rc));
		return;
	}
	memset(in, GUARD_BYTE, sizeof in);
	conf_recv(rk, tj_req(rk, rq, 0), peer, 1, in[0], 0, NULL);
	tj_barrier(rk);
	tj_barrier(rk);
	tj_step(rk, "receive 0 bytes on tag 2 (message already sent)");
	conf_recv(rk, tj_req(rk, rq, 1), peer, 2, in[1], 0, NULL);
	conf_recv(rk, tj_req(rk, rq, 2), peer, 3, in[2], 1, NULL);
	conf_recv(rk, tj_req(rk, rq, 3), peer, 4, in[3], 0, NULL);
	rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "0-byte receive");
	TJ_CHECK(rk, rc == 0, "0-byte receive (expected): %s",
		 dpl_err_name(rc));
	rc = tj_wait(rk, tj_req(rk, rq, 1), 0, "0-byte receive");
	TJ_CHECK(rk, rc == 0, "0-byte receive (unexpected): %s",
		 dpl_err_name(rc));
	TJ_CHECK(rk, guard_check(in[0], 16) < 0 &&
			     guard_check(in[1], 16) < 0,
		 "a 0-byte receive wrote into its buffer");
	rc = tj_wait(rk, tj_req(rk, rq, 2), 0, "1-byte receive");
	TJ_CHECK(rk, rc == DPL_ETRUNC,
		 "1-byte receive of a 0-byte message: %s, expected "
		 "DPL_ETRUNC (receives are exact-size)",
		 dpl_err_name(rc));
	rc = tj_wait(rk, tj_req(rk, rq, 3), 0, "0-byte receive");
	TJ_CHECK(rk, rc == DPL_ETRUNC,
		 "0-byte receive of a 1-byte message: %s, expected "
		 "DPL_ETRUNC",
		 dpl_err_name(rc));
	TJ_CHECK(rk, guard_check(in[3], 16) < 0,
		 "a 0-byte receive of a 1-byte message wrote into its "
		 "buffer");
	tj_step(rk, "8 bytes on tags 3 and 4 after the mismatches");
	conf_recv(rk, tj_req(rk, rq, 4), peer, 3, in[2], 8, NULL);
	conf_recv(rk, tj_req(rk, rq, 5), peer, 4, in[3], 8, NULL);
	rc = tj_wait(rk, tj_req(rk, rq, 4), 0, "8-byte receive");
	TJ_CHECK(rk, rc == 0 && tj_verify(in[2], 8, 5) < 0,
		 "8 bytes on tag 3 after a mismatch: %s, data %s",
		 dpl_err_name(rc),
		 tj_verify(in[2], 8, 5) < 0 ? "right" : "wrong");
	rc = tj_wait(rk, tj_req(rk, rq, 5), 0, "8-byte receive");
	TJ_CHECK(rk, rc == 0 && tj_verify(in[3], 8, 5) < 0,
		 "8 bytes on tag 4 after a mismatch: %s, data %s",
		 dpl_err_name(rc),
		 tj_verify(in[3], 8, 5) < 0 ? "right" : "wrong");
}

Test(msg, zero_length_expected_and_unexpected, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = zero_rank, .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

struct sizes {
	size_t n;
	size_t len[40];
	bool unexpected;
};

static uint64_t seed_of(size_t i, uint32_t from)
{
	return (uint64_t)from * 1000 + i + 1;
}

static void sizes_rank(struct tj_rank *rk)
{
	const struct sizes *a = rk->arg;
	uint32_t peer = 1 - rk->rank;
	unsigned char **in = tj_alloc(rk, a->n * sizeof *in);
	unsigned char **out = tj_alloc(rk, a->n * sizeof *out);
	struct conf_set rs, ss;
	long long bad;
	size_t i;

	conf_set_init(rk, &rs, a->n);
	conf_set_init(rk, &ss, a->n);
	for (i = 0; i < a->n; i++) {
		in[i] = malloc(a->len[i] + GUARD);
		out[i] = malloc(a->len[i] + 1);
		TJ_CHECK(rk, in[i] && out[i], "out of memory (%zu bytes)",
			 a->len[i]);
		guard_fill(in[i], a->len[i] + GUARD);
		tj_fill(out[i], a->len[i], seed_of(i, rk->rank));
	}
	if (a->unexpected) {
		tj_step(rk, "posting %zu sends before the receives", a->n);
		for (i = 0; i < a->n; i++)
			conf_send_early(rk, &ss, peer, i, out[i], a->len[i]);
		if (ss.queued)
			tj_note(rk, "the last %zu sends waited for the "
				    "receives (DPL_EAGAIN)", ss.queued);
		tj_barrier(rk);
	}
	tj_step(rk, "posting %zu receives", a->n);
	for (i = 0; i < a->n; i++) {
		conf_recv(rk, conf_set_next(&rs), peer, i, in[i], a->len[i],
			  &rs);
		conf_set_added(&rs);
	}
	conf_set_flush(rk, &ss);
	if (!a->unexpected) {
		tj_barrier(rk);
		tj_step(rk, "posting %zu sends after the receives", a->n);
		for (i = 0; i < a->n; i++) {
			conf_send(rk, conf_set_next(&ss), peer, i, out[i],
				  a->len[i], &ss);
			conf_set_added(&ss);
		}
	}
	tj_step(rk, "waiting for the receives");
	conf_set_wait(rk, &rs, "receives of the size sweep");
	tj_step(rk, "waiting for the sends");
	conf_set_wait(rk, &ss, "sends of the size sweep");
	for (i = 0; i < a->n; i++) {
		TJ_CHECK(rk, rs.rc[i] == 0, "receive of %zu bytes: %s",
			 a->len[i], dpl_err_name(rs.rc[i]));
		TJ_CHECK(rk, ss.rc[i] == 0, "send of %zu bytes: %s",
			 a->len[i], dpl_err_name(ss.rc[i]));
		bad = tj_verify(in[i], a->len[i], seed_of(i, peer));
		TJ_CHECK(rk, bad < 0,
			 "%zu-byte message: byte %lld differs from what "
			 "rank %u sent",
			 a->len[i], bad, peer);
		bad = guard_check(in[i] + a->len[i], GUARD);
		TJ_CHECK(rk, bad < 0,
			 "%zu-byte message: guard byte %lld after the "
			 "buffer was overwritten",
			 a->len[i], bad);
		free(in[i]);
		free(out[i]);
	}
}

static void sweep(struct sizes *a)
{
	static const size_t base[] = {
		1,      8,      63,     64,     4095,      4096,     8191,
		8192,   8193,   16383,  16384,  16385,     65535,    65536,
		131071, 131072, 131073, 262144, (1u << 20), (16u << 20)};
	long eager = conf_env_long("DPL_CONF_EAGER_LIMIT", 0, 0, 1L << 30);
	size_t i;

	a->n = 0;
	for (i = 0; i < sizeof base / sizeof base[0]; i++)
		a->len[a->n++] = base[i];
	if (eager > 1) {
		a->len[a->n++] = (size_t)eager - 1;
		a->len[a->n++] = (size_t)eager;
		a->len[a->n++] = (size_t)eager + 1;
	}
	if (conf_env_long("DPL_CONF_HUGE", 0, 0, 1))
		a->len[a->n++] = (size_t)256 << 20;
	cr_log_info("%zu sizes from 1 B to %zu B, both directions at once",
		    a->n, a->len[a->n - 1]);
}

Test(msg, sizes_across_thresholds_expected, .timeout = 140)
{
	struct sizes a;
	struct conf_job job = {.size = 2, .fn = sizes_rank, .arg = &a,
			       .deadline_s = 120};

	sweep(&a);
	a.unexpected = false;
	conf_run(&job);
}

Test(msg, sizes_across_thresholds_unexpected, .timeout = 140)
{
	struct sizes a;
	struct conf_job job = {.size = 2, .fn = sizes_rank, .arg = &a,
			       .deadline_s = 120};

	sweep(&a);
	a.unexpected = true;
	conf_run(&job);
}

/* ---------------------------------------------------------------- */

static void unaligned_rank(struct tj_rank *rk)
{
	static const size_t lens[2] = {1000, 300000};
	uint32_t peer = 1 - rk->rank;
	unsigned char *in[16], *out[16];
	struct conf_set rs, ss;
	size_t k, len, so, ro;
	long long bad;

	conf_set_init(rk, &rs, 16);
	conf_set_init(rk, &ss, 16);
	for (k = 0; k < 14; k++) {
		/* offsets 1..7; the receiver's differs from the sender's */
		so = k / 2 + 1;
		ro = 8 - so;
		len = lens[k % 2] + so;
		in[k] = tj_alloc(rk, len + 32);
		out[k] = tj_alloc(rk, len + 16);
		guard_fill(in[k], len + 32);
		tj_fill(out[k] + so, len, seed_of(k, rk->rank));
		conf_recv(rk, conf_set_next(&rs), peer, 100 + k, in[k] + ro,
			  len, &rs);
		conf_set_added(&rs);
	}
	tj_barrier(rk);
	for (k = 0; k < 14; k++) {
		so = k / 2 + 1;
		len = lens[k % 2] + so;
		conf_send(rk, conf_set_next(&ss), peer, 100 + k, out[k] + so,
			  len, &ss);
		conf_set_added(&ss);
	}
	conf_set_wait(rk, &rs, "unaligned receives");
	conf_set_wait(rk, &ss, "unaligned sends");
	for (k = 0; k < 14; k++) {
		/* the peer's message k had the same offsets and length */
		so = k / 2 + 1;
		ro = 8 - so;
		len = lens[k % 2] + so;
		TJ_CHECK(rk, rs.rc[k] == 0 && ss.rc[k] == 0,
			 "message %zu (send offset %zu, receive offset "
			 "%zu, %zu bytes): receive %s, send %s",
			 k, so, ro, len, dpl_err_name(rs.rc[k]),
			 dpl_err_name(ss.rc[k]));
		bad = tj_verify(in[k] + ro, len, seed_of(k, peer));
		TJ_CHECK(rk, bad < 0,
			 "unaligned message %zu (send offset %zu, "
			 "receive offset %zu, %zu bytes): byte %lld "
			 "differs",
			 k, so, ro, len, bad);
		TJ_CHECK(rk, guard_check(in[k], ro) < 0 &&
				     guard_check(in[k] + ro + len, 16) < 0,
			 "unaligned message %zu: bytes before or after "
			 "the receive buffer were written",
			 k);
	}
}

Test(msg, unaligned_buffers, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = unaligned_rank,
			       .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

/* Rank 0 sends 16 small messages of distinct tags and sizes before rank
 * 1 posts anything; rank 1 receives them in reverse tag order. Then the
 * roles swap. */
static void unexpected_small_rank(struct tj_rank *rk)
{
	unsigned char *buf[16];
	struct conf_set s;
	uint32_t round, k, peer = 1 - rk->rank;
	size_t len;

	for (round = 0; round < 2; round++) {
		bool sender = rk->rank == round;

		conf_set_init(rk, &s, 16);
		for (k = 0; k < 16; k++) {
			len = 8 + 61 * k;
			buf[k] = tj_alloc(rk, len);
			if (sender)
				tj_fill(buf[k], len, seed_of(k, rk->rank));
		}
		if (sender) {
			tj_step(rk, "round %u: 16 sends before any receive",
				round);
			for (k = 0; k < 16; k++)
				conf_send_early(rk, &s, peer, 200 + k, buf[k],
						8 + 61 * k);
			/* progress a while so they arrive unexpected */
			tj_progress_for(rk, 50);
			tj_barrier(rk);
			conf_set_flush(rk, &s);
		} else {
			tj_barrier(rk);
			tj_step(rk, "round %u: receives in reverse tag "
				    "order", round);
			for (k = 16; k-- > 0;) {
				conf_recv(rk, conf_set_next(&s), peer,
					  200 + k, buf[k], 8 + 61 * k, &s);
				conf_set_added(&s);
			}
		}
		conf_set_wait(rk, &s, "unexpected small messages");
		for (k = 0; k < 16; k++) {
			TJ_CHECK(rk, s.rc[k] == 0, "%s %u: %s",
				 sender ? "send" : "receive", k,
				 dpl_err_name(s.rc[k]));
			if (!sender) {
				uint32_t tag = 15 - k; /* posted in reverse */
				long long bad = tj_verify(
					buf[tag], 8 + 61 * tag,
					seed_of(tag, peer));

				TJ_CHECK(rk, bad < 0,
					 "unexpected message of tag %u "
					 "differs at byte %lld",
					 200 + tag, bad);
			}
		}
		for (k = 0; k < 16; k++)
			tj_free(rk, buf[k]);
		tj_barrier(rk);
	}
}

Test(msg, unexpected_small_any_tag_order, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = unexpected_small_rank,
			       .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

static void unexpected_large_rank(struct tj_rank *rk)
{
	static const size_t lens[3] = {4u << 20, 256u << 10, 8};
	unsigned char *buf[3];
	struct conf_set s;
	uint32_t k, peer = 1 - rk->rank;
	long long bad;

	conf_set_init(rk, &s, 3);
	for (k = 0; k < 3; k++) {
		buf[k] = tj_alloc(rk, lens[k]);
		if (rk->rank == 0)
			tj_fill(buf[k], lens[k], seed_of(k, 0));
	}
	if (rk->rank == 0) {
		tj_step(rk, "4 MiB, 256 KiB and 8 B before the receives");
		for (k = 0; k < 3; k++)
			conf_send_early(rk, &s, peer, 7 + k, buf[k], lens[k]);
		tj_progress_for(rk, 100);
		tj_barrier(rk);
		conf_set_flush(rk, &s);
	} else {
		tj_barrier(rk);
		tj_step(rk, "receives in reverse order");
		for (k = 3; k-- > 0;) {
			conf_recv(rk, conf_set_next(&s), peer, 7 + k, buf[k],
				  lens[k], &s);
			conf_set_added(&s);
		}
	}
	conf_set_wait(rk, &s, "unexpected large messages");
	for (k = 0; k < 3; k++)
		TJ_CHECK(rk, s.rc[k] == 0, "request %u: %s", k,
			 dpl_err_name(s.rc[k]));
	if (rk->rank == 1)
		for (k = 0; k < 3; k++) {
			bad = tj_verify(buf[k], lens[k], seed_of(k, 0));
			TJ_CHECK(rk, bad < 0,
				 "unexpected %zu-byte message differs at "
				 "byte %lld",
				 lens[k], bad);
		}
}

Test(msg, unexpected_rendezvous_size, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = unexpected_large_rank,
			       .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

/* 2x the declared queue depth of small messages before any receive.
 * The sender may be pushed back (DPL_EAGAIN): it then tells the
 * receiver to start, and everything must drain with nothing lost. */
struct many {
	size_t n;
};

#define FLAG_SENDER_READY 1

static void many_rank(struct tj_rank *rk)
{
	const struct many *a = rk->arg;
	uint32_t peer = 1 - rk->rank;
	uint64_t *data = tj_alloc(rk, a->n * 8 * sizeof *data);
	struct conf_set s;
	uint64_t first_eagain = 0;
	size_t i, posted = 0, tags = 4;
	int rc;

	conf_set_init(rk, &s, a->n);
	if (rk->rank == 0) {
		tj_step(rk, "posting %zu sends before any receive", a->n);
		for (i = 0; i < a->n; i++) {
			data[i * 8] = i;
			tj_fill(&data[i * 8 + 1], 56, i + 1);
		}
		while (posted < a->n) {
			rc = dpl_transport_isend(rk->t, conf_set_next(&s),
						 peer, posted % tags,
						 &data[posted * 8], 64,
						 DPL_MEM_HOST);
			conf_check_code(rk, rc, "isend");
			if (rc == 0) {
				conf_set_added(&s);
				posted++;
				continue;
			}
			TJ_CHECK(rk, rc == DPL_EAGAIN,
				 "isend %zu of %zu: %s (%s)", posted, a->n,
				 dpl_err_name(rc), dpl_last_error());
			if (first_eagain == 0)
				first_eagain = dpl_clock_ns();
			/* pushed back for 200 ms: let the receiver go */
			if (dpl_clock_ns() - first_eagain > 200000000ull)
				tj_flag_set(rk, FLAG_SENDER_READY, 1);
			tj_progress(rk);
			conf_set_poll(rk, &s);
			TJ_CHECK(rk, !tj_aborted(rk) &&
					     dpl_clock_ns() < rk->deadline_ns,
				 "stuck posting send %zu of %zu", posted,
				 a->n);
		}
		tj_note(rk, "%zu sends posted; the first DPL_EAGAIN came %s",
			a->n, first_eagain ? "before all were posted"
					   : "never");
		tj_flag_set(rk, FLAG_SENDER_READY, 1);
		conf_set_wait(rk, &s, "sends of many unexpected messages");
		for (i = 0; i < a->n; i++)
			TJ_CHECK(rk, s.rc[i] == 0, "send %zu: %s", i,
				 dpl_err_name(s.rc[i]));
		return;
	}
	tj_flag_wait(rk, FLAG_SENDER_READY, 1, 0);
	/* Receive tag by tag: each tag's messages in their order. */
	tj_step(rk, "posting %zu receives tag by tag", a->n);
	for (i = 0; i < a->n; i++) {
		size_t tag = i / ((a->n + tags - 1) / tags);
		size_t k = i % ((a->n + tags - 1) / tags);
		size_t msg = k * tags + tag;

		if (msg >= a->n)
			continue;
		conf_recv(rk, conf_set_next(&s), peer, tag, &data[msg * 8], 64,
			  &s);
		conf_set_added(&s);
	}
	conf_set_wait(rk, &s, "receives of many unexpected messages");
	for (i = 0; i < s.n; i++)
		TJ_CHECK(rk, s.rc[i] == 0, "receive %zu: %s", i,
			 dpl_err_name(s.rc[i]));
	for (i = 0; i < a->n; i++) {
		TJ_CHECK(rk, data[i * 8] == i,
			 "message %zu (tag %zu) carries sequence %llu", i,
			 i % tags, (unsigned long long)data[i * 8]);
		TJ_CHECK(rk, tj_verify(&data[i * 8 + 1], 56, i + 1) < 0,
			 "message %zu's payload differs", i);
	}
}

Test(msg, many_unexpected_twice_queue_depth, .timeout = 140)
{
	struct many a;
	struct conf_job job = {.size = 2, .fn = many_rank, .arg = &a,
			       .deadline_s = 120};
	long depth = conf_env_long("DPL_CONF_QUEUE_DEPTH", 1024, 1, 1 << 20);

	a.n = (size_t)depth * 2;
	cr_log_info("%zu messages of 64 B (2 x queue depth %ld) on 4 tags",
		    a.n, depth);
	conf_run(&job);
}
