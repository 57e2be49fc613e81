/*
 * test_ucx.c - the UCX transport between real processes over loopback,
 * each case once with UCX_TLS=tcp and once with UCX_TLS=sm: sizes across
 * UCX's protocol thresholds, unaligned buffers, expected and unexpected
 * receives, ordering, exact source and tag matching, truncation, cancel,
 * bidirectional large sends, a SIGKILLed peer beside a healthy one, a
 * stopped peer and a busy one against the liveness timeout, fini with
 * requests pending, a rank that closes while its peer is to fetch its
 * rendezvous data, wait, the PEER error mode, loopback pinning, open/close
 * cycles without leaks, and the startup time (reported, not asserted).
 *
 * The only deadlines asserted are the transport's liveness bounds: a
 * killed peer is reported within LIVENESS_BOUND_MS (2 s), a stopped one
 * within its timeout plus that bound.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ucx_ranks.h"

/* Every case runs over TCP and over shared memory. */
#define BOTH(name, secs)                                                      \
	static void name(const char *tls);                                    \
	Test(ucx_tcp, name, .timeout = (secs)) { name("tcp"); }               \
	Test(ucx_sm, name, .timeout = (secs)) { name("sm"); }                 \
	static void name(const char *tls)

/* Tags of the test's own step tokens (data tags stay below). */
#define TOK (UINT64_C(0xabc) << 40)

static unsigned char *xmalloc(struct rank *r, size_t n)
{
	unsigned char *p = malloc(n ? n : 1);

	check(r, p != NULL, "out of memory for %zu bytes", n);
	return p;
}

/* ---- sizes, expected and unexpected ----------------------------------- */

static const size_t sizes[] = {
	0, 1, 8, 4095, 4096, 8191, 8192, 8193, 65536, 1u << 20, 16u << 20,
};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/*
 * One message of `len` bytes from `from` to `to`. expected: the receiver
 * posts first and then tells the sender to go; unexpected: the sender
 * sends, then a token on the same path tells the receiver it is there.
 */
static void one_transfer(struct rank *r, uint32_t from, uint32_t to,
			 size_t len, bool expected, uint64_t tag,
			 size_t soff, size_t roff, uint32_t seed)
{
	unsigned char *buf;
	void *req;
	size_t bad;
	int rc;

	if (r->id == from) {
		buf = xmalloc(r, len + soff);
		pattern_fill(buf + soff, len, seed);
		if (expected)
			check(r, token_recv(r, to, TOK + 1) == tag,
			      "wrong go token");
		req = req_new(r);
		rc = r->o->isend(r->ctx, req, to, tag, buf + soff, len,
				 DPL_MEM_HOST);
		check(r, rc == 0, "isend %zu: %s", len, dpl_last_error());
		if (!expected)
			token_send(r, to, TOK + 2, tag);
		rc = req_wait(r, req, 10000);
		check(r, rc == 0, "send of %zu bytes (%s): %s (%s)", len,
		      expected ? "expected" : "unexpected", dpl_err_name(rc),
		      dpl_last_error());
		free(req);
		free(buf);
	} else if (r->id == to) {
		buf = xmalloc(r, len + roff + 64);
		memset(buf, 0x5c, len + roff + 64);
		req = req_new(r);
		if (expected) {
			rc = r->o->irecv(r->ctx, req, from, tag, buf + roff,
					 len, DPL_MEM_HOST);
			check(r, rc == 0, "irecv: %s", dpl_last_error());
			token_send(r, from, TOK + 1, tag);
		} else {
			check(r, token_recv(r, from, TOK + 2) == tag,
			      "wrong sent token");
			spin_ms(r, 2);
			rc = r->o->irecv(r->ctx, req, from, tag, buf + roff,
					 len, DPL_MEM_HOST);
			check(r, rc == 0, "irecv: %s", dpl_last_error());
		}
		rc = req_wait(r, req, 10000);
		check(r, rc == 0, "receive of %zu bytes (%s): %s (%s)", len,
		      expected ? "expected" : "unexpected", dpl_err_name(rc),
		      dpl_last_error());
		bad = pattern_bad(buf + roff, len, seed);
		check(r, bad == len, "%zu bytes (%s, offsets %zu/%zu): byte "
		      "%zu differs", len, expected ? "expected" : "unexpected",
		      soff, roff, bad);
		for (bad = 0; bad < 64; bad++)
			check(r, buf[roff + len + bad] == 0x5c,
			      "guard byte %zu after a %zu-byte receive "
			      "overwritten", bad, len);
		for (bad = 0; bad < roff; bad++)
			check(r, buf[bad] == 0x5c, "byte before the receive "
			      "buffer overwritten");
		free(req);
		free(buf);
	}
}

static void sizes_fn(struct rank *r, void *arg)
{
	size_t i;

	for (i = 0; i < NSIZES; i++) {
		uint64_t tag = 100 + i;

		one_transfer(r, 1, 0, sizes[i], true, tag, 0, 0, (uint32_t)i);
		one_transfer(r, 1, 0, sizes[i], false, tag, 0, 0,
			     (uint32_t)i + 50);
		one_transfer(r, 0, 1, sizes[i], true, tag, 0, 0,
			     (uint32_t)i + 100);
		one_transfer(r, 0, 1, sizes[i], false, tag, 0, 0,
			     (uint32_t)i + 150);
	}
}

BOTH(sizes_across_thresholds_expected_and_unexpected, 120)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, sizes_fn, NULL);
}

static void unaligned_fn(struct rank *r, void *arg)
{
	static const size_t lens[] = {1, 13, 4097, 65539, (1u << 20) + 5};
	size_t i, off;

	for (i = 0; i < sizeof lens / sizeof lens[0]; i++)
		for (off = 1; off <= 7; off += 3) {
			one_transfer(r, 1, 0, lens[i], true, 7 + off, off,
				     8 - off, (uint32_t)(i * 8 + off));
			one_transfer(r, 0, 1, lens[i], false, 7 + off,
				     8 - off, off, (uint32_t)(i * 8 + off));
		}
}

BOTH(unaligned_buffers_keep_every_byte, 120)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, unaligned_fn, NULL);
}

/* ---- matching and ordering -------------------------------------------- */

#define NORDER 1000

static void order_fn(struct rank *r, void *arg)
{
	static void *reqs[NORDER];
	static uint64_t vals[NORDER];
	uint64_t i;
	int rc;

	if (r->id == 1) {
		for (i = 0; i < NORDER; i++) {
			vals[i] = i * 3 + 1;
			reqs[i] = req_new(r);
			rc = r->o->isend(r->ctx, reqs[i], 0, 42, &vals[i],
					 sizeof vals[i], DPL_MEM_HOST);
			check(r, rc == 0, "isend %llu: %s",
			      (unsigned long long)i, dpl_last_error());
		}
		for (i = 0; i < NORDER; i++) {
			rc = req_wait(r, reqs[i], 10000);
			check(r, rc == 0, "send %llu: %s",
			      (unsigned long long)i, dpl_err_name(rc));
			free(reqs[i]);
		}
		return;
	}
	/* Half posted before, half after the messages arrive. */
	for (i = 0; i < NORDER / 2; i++) {
		reqs[i] = req_new(r);
		vals[i] = 0;
		rc = r->o->irecv(r->ctx, reqs[i], 1, 42, &vals[i],
				 sizeof vals[i], DPL_MEM_HOST);
		check(r, rc == 0, "irecv %llu", (unsigned long long)i);
	}
	spin_ms(r, 20);
	for (; i < NORDER; i++) {
		reqs[i] = req_new(r);
		vals[i] = 0;
		rc = r->o->irecv(r->ctx, reqs[i], 1, 42, &vals[i],
				 sizeof vals[i], DPL_MEM_HOST);
		check(r, rc == 0, "irecv %llu", (unsigned long long)i);
	}
	for (i = 0; i < NORDER; i++) {
		rc = req_wait(r, reqs[i], 10000);
		check(r, rc == 0, "receive %llu: %s (%s)",
		      (unsigned long long)i, dpl_err_name(rc),
		      dpl_last_error());
		check(r, vals[i] == i * 3 + 1, "message %llu carries %llu",
		      (unsigned long long)i, (unsigned long long)vals[i]);
		free(reqs[i]);
	}
}

BOTH(thousand_messages_same_tag_arrive_in_order, 60)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, order_fn, NULL);
}

#define BIG (4u << 20)

static void mixed_fn(struct rank *r, void *arg)
{
	unsigned char *big = xmalloc(r, BIG), small[8];
	void *rb = req_new(r), *rs = req_new(r);
	int round, rc;

	for (round = 0; round < 2; round++) {
		bool expected = round == 0;

		if (r->id == 1) {
			pattern_fill(big, BIG, 3 + round);
			pattern_fill(small, sizeof small, 4 + round);
			if (expected)
				token_recv(r, 0, TOK + 3);
			rc = r->o->isend(r->ctx, rb, 0, 9, big, BIG,
					 DPL_MEM_HOST);
			check(r, rc == 0, "isend big");
			rc = r->o->isend(r->ctx, rs, 0, 9, small, sizeof small,
					 DPL_MEM_HOST);
			check(r, rc == 0, "isend small");
			if (!expected)
				token_send(r, 0, TOK + 4, 1);
			check(r, req_wait(r, rs, 10000) == 0, "small send");
			check(r, req_wait(r, rb, 10000) == 0, "big send");
			continue;
		}
		memset(big, 0, BIG);
		memset(small, 0, sizeof small);
		if (!expected) {
			token_recv(r, 1, TOK + 4);
			spin_ms(r, 5);
		}
		rc = r->o->irecv(r->ctx, rb, 1, 9, big, BIG, DPL_MEM_HOST);
		check(r, rc == 0, "irecv big");
		rc = r->o->irecv(r->ctx, rs, 1, 9, small, sizeof small,
				 DPL_MEM_HOST);
		check(r, rc == 0, "irecv small");
		if (expected)
			token_send(r, 1, TOK + 3, 1);
		rc = req_wait(r, rs, 10000);
		check(r, rc == 0, "small receive (%s): %s",
		      expected ? "expected" : "unexpected", dpl_err_name(rc));
		rc = req_wait(r, rb, 10000);
		check(r, rc == 0, "big receive (%s): %s",
		      expected ? "expected" : "unexpected", dpl_err_name(rc));
		check(r, pattern_bad(big, BIG, 3 + round) == BIG,
		      "big message corrupted");
		check(r, pattern_bad(small, sizeof small, 4 + round) ==
				 sizeof small, "small message corrupted");
	}
	free(rb);
	free(rs);
	free(big);
}

BOTH(large_then_small_on_one_tag_stay_in_order, 60)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, mixed_fn, NULL);
}

/* Interleaved tags from one peer, and one tag from two peers. */
static void match_fn(struct rank *r, void *arg)
{
	static const uint64_t tags[] = {5, DPL_TAG_MAX, 6, 0,
					UINT64_C(1) << 59};
	uint64_t got[5], v, same[3];
	void *reqs[5], *q[3];
	size_t i;
	int rc;

	if (r->id != 0) {
		/* Ranks 1 and 2 send their own marks, rank 1 also the
		 * interleaved tags in reverse order. */
		if (r->id == 1)
			for (i = 5; i-- > 0;)
				token_send(r, 0, tags[i], 1000 + i);
		token_send(r, 0, 77, 500 + r->id);
		token_send(r, 0, 77, 600 + r->id);
		return;
	}
	for (i = 0; i < 5; i++) {
		reqs[i] = req_new(r);
		got[i] = 0;
		rc = r->o->irecv(r->ctx, reqs[i], 1, tags[i], &got[i], 8,
				 DPL_MEM_HOST);
		check(r, rc == 0, "irecv tag %#llx: %s",
		      (unsigned long long)tags[i], dpl_last_error());
	}
	for (i = 0; i < 5; i++) {
		check(r, req_wait(r, reqs[i], 10000) == 0, "tag %zu", i);
		check(r, got[i] == 1000 + i, "tag %#llx received %llu",
		      (unsigned long long)tags[i], (unsigned long long)got[i]);
		free(reqs[i]);
	}
	/* Source matching: tag 77 from rank 2 first, then from rank 1. */
	for (i = 1; i <= 2; i++) {
		q[i] = req_new(r);
		same[i] = 0;
	}
	rc = r->o->irecv(r->ctx, q[2], 2, 77, &same[2], 8, DPL_MEM_HOST);
	check(r, rc == 0, "irecv from 2");
	rc = r->o->irecv(r->ctx, q[1], 1, 77, &same[1], 8, DPL_MEM_HOST);
	check(r, rc == 0, "irecv from 1");
	check(r, req_wait(r, q[2], 10000) == 0, "from 2");
	check(r, req_wait(r, q[1], 10000) == 0, "from 1");
	check(r, same[1] == 501 && same[2] == 502,
	      "tag 77: rank 1 gave %llu, rank 2 gave %llu",
	      (unsigned long long)same[1], (unsigned long long)same[2]);
	v = token_recv(r, 2, 77);
	check(r, v == 602, "second from 2: %llu", (unsigned long long)v);
	v = token_recv(r, 1, 77);
	check(r, v == 601, "second from 1: %llu", (unsigned long long)v);
	free(q[1]);
	free(q[2]);
}

BOTH(tags_and_sources_match_exactly, 60)
{
	struct job job = {.n = 3, .tls = tls};

	job_run(&job, match_fn, NULL);
}

/* ---- truncation and cancel -------------------------------------------- */

static void trunc_case(struct rank *r, size_t slen, size_t rlen, int step)
{
	unsigned char *buf, ok[16];
	void *req = req_new(r);
	size_t i;
	int rc;

	if (r->id == 1) {
		buf = xmalloc(r, slen);
		pattern_fill(buf, slen, 11);
		token_recv(r, 0, TOK + 5);
		rc = r->o->isend(r->ctx, req, 0, 20, buf, slen, DPL_MEM_HOST);
		check(r, rc == 0, "isend");
		rc = req_wait(r, req, 10000);
		check(r, rc == 0 || rc == DPL_ETRUNC,
		      "mismatched send %zu->%zu completed with %s", slen, rlen,
		      dpl_err_name(rc));
		/* The endpoint still carries the next message. */
		pattern_fill(ok, sizeof ok, 12 + step);
		send_now(r, 0, 20, ok, sizeof ok);
		free(buf);
		free(req);
		return;
	}
	buf = xmalloc(r, rlen + 4096);
	memset(buf, 0x77, rlen + 4096);
	rc = r->o->irecv(r->ctx, req, 1, 20, buf, rlen, DPL_MEM_HOST);
	check(r, rc == 0, "irecv");
	token_send(r, 1, TOK + 5, 1);
	rc = req_wait(r, req, 10000);
	check(r, rc == DPL_ETRUNC, "a %zu-byte message into %zu bytes gave %s",
	      slen, rlen, dpl_err_name(rc));
	for (i = rlen; i < rlen + 4096; i++)
		check(r, buf[i] == 0x77, "byte %zu past a %zu-byte receive "
		      "overwritten", i - rlen, rlen);
	memset(ok, 0, sizeof ok);
	recv_now(r, 1, 20, ok, sizeof ok);
	check(r, pattern_bad(ok, sizeof ok, 12 + step) == sizeof ok,
	      "message after a truncation corrupted");
	free(buf);
	free(req);
}

static void trunc_fn(struct rank *r, void *arg)
{
	trunc_case(r, 4096, 16, 0);            /* eager, too long */
	trunc_case(r, 8, 16, 1);               /* too short */
	trunc_case(r, 1u << 20, 256u << 10, 2); /* rendezvous, too long */
	trunc_case(r, 256u << 10, 1u << 20, 3); /* rendezvous, too short */
}

BOTH(length_mismatch_is_etrunc_and_endpoint_stays_usable, 60)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, trunc_fn, NULL);
}

static void cancel_fn(struct rank *r, void *arg)
{
	unsigned char buf[64], want[64];
	void *req;
	size_t i;
	int rc;

	if (r->id == 1) {
		token_recv(r, 0, TOK + 6);
		pattern_fill(want, sizeof want, 21);
		send_now(r, 0, 30, want, sizeof want);
		return;
	}
	req = req_new(r);
	memset(buf, 0x3d, sizeof buf);
	rc = r->o->irecv(r->ctx, req, 1, 30, buf, sizeof buf, DPL_MEM_HOST);
	check(r, rc == 0, "irecv");
	spin_ms(r, 5);
	check(r, r->o->cancel(r->ctx, req) == 0, "cancel: %s",
	      dpl_last_error());
	rc = req_wait(r, req, 2000);
	check(r, rc == DPL_ECANCELED, "cancelled receive gave %s",
	      dpl_err_name(rc));
	for (i = 0; i < sizeof buf; i++)
		check(r, buf[i] == 0x3d, "cancelled buffer written");
	/* The message sent afterwards goes to the next receive. */
	token_send(r, 1, TOK + 6, 1);
	recv_now(r, 1, 30, buf, sizeof buf);
	check(r, pattern_bad(buf, sizeof buf, 21) == sizeof buf,
	      "message after a cancel corrupted");
	free(req);
}

BOTH(cancel_of_a_posted_receive, 30)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, cancel_fn, NULL);
}

/* ---- bidirectional large sends ---------------------------------------- */

#define BIDIR_N 4
#define BIDIR_LEN (16u << 20)

static void bidir_fn(struct rank *r, void *arg)
{
	unsigned char *out[BIDIR_N], *in[BIDIR_N];
	void *sreq[BIDIR_N], *rreq[BIDIR_N];
	uint32_t peer = 1 - r->id, k;
	int rc;

	for (k = 0; k < BIDIR_N; k++) {
		out[k] = xmalloc(r, BIDIR_LEN);
		in[k] = xmalloc(r, BIDIR_LEN);
		pattern_fill(out[k], BIDIR_LEN, r->id * 10 + k);
		sreq[k] = req_new(r);
		rreq[k] = req_new(r);
		rc = r->o->isend(r->ctx, sreq[k], peer, 50 + k, out[k],
				 BIDIR_LEN, DPL_MEM_HOST);
		check(r, rc == 0, "isend %u: %s", k, dpl_last_error());
	}
	for (k = 0; k < BIDIR_N; k++) {
		rc = r->o->irecv(r->ctx, rreq[k], peer, 50 + k, in[k],
				 BIDIR_LEN, DPL_MEM_HOST);
		check(r, rc == 0, "irecv %u: %s", k, dpl_last_error());
	}
	for (k = 0; k < BIDIR_N; k++) {
		rc = req_wait(r, rreq[k], 20000);
		check(r, rc == 0, "receive %u: %s", k, dpl_err_name(rc));
		check(r, pattern_bad(in[k], BIDIR_LEN, peer * 10 + k) ==
				 BIDIR_LEN, "receive %u corrupted", k);
	}
	for (k = 0; k < BIDIR_N; k++) {
		rc = req_wait(r, sreq[k], 20000);
		check(r, rc == 0, "send %u: %s", k, dpl_err_name(rc));
		free(out[k]);
		free(in[k]);
		free(sreq[k]);
		free(rreq[k]);
	}
}

BOTH(bidirectional_sends_posted_before_receives, 120)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, bidir_fn, NULL);
}

/* ---- peer failure ----------------------------------------------------- */

#define LIVENESS_BOUND_MS 2000u

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
	rc = r->o->irecv(r->ctx, rq, 1, 60, &v, sizeof v, DPL_MEM_HOST);
	check(r, rc == 0, "irecv from the victim");
	rc = r->o->isend(r->ctx, sq, 1, 61, big, sizeof big, DPL_MEM_HOST);
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
	rc = r->o->isend(r->ctx, late, 1, 62, &v, sizeof v, DPL_MEM_HOST);
	check(r, rc == DPL_EPEER, "post to a dead rank gave %s",
	      dpl_err_name(rc));
	rc = r->o->irecv(r->ctx, late, 1, 62, &v, sizeof v, DPL_MEM_HOST);
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
	rc = r->o->irecv(r->ctx, rq, 1, 71, &never, sizeof never,
			 DPL_MEM_HOST);
	check(r, rc == 0, "irecv");
	token_send(r, 1, TOK + 9, 1);
	rc = req_wait(r, rq, LIVENESS_BOUND_MS);
	check(r, rc == DPL_EPEER, "pending receive from a rank that left "
	      "gave %s", dpl_err_name(rc));
	rc = r->o->irecv(r->ctx, late, 1, 70, &last, sizeof last,
			 DPL_MEM_HOST);
	check(r, rc == 0, "receive of the last message: %s",
	      dpl_last_error());
	check(r, req_wait(r, late, 2000) == 0, "last message");
	check(r, last == 4242, "last message carries %llu",
	      (unsigned long long)last);
	rc = r->o->irecv(r->ctx, late, 1, 70, &last, sizeof last,
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

/* ---- configuration ---------------------------------------------------- */

static void peer_mode_fn(struct rank *r, void *arg)
{
	one_transfer(r, 1, 0, 1u << 20, true, 80, 0, 0, 5);
	one_transfer(r, 0, 1, 8, false, 81, 0, 0, 6);
}

BOTH(peer_error_mode_keeps_working, 30)
{
	struct job job = {.n = 2, .tls = tls, .options = "err_mode=peer"};

	job_run(&job, peer_mode_fn, NULL);
}

static void bad_posts_fn(struct rank *r, void *arg)
{
	unsigned char buf[8] = {0};
	void *req = req_new(r);
	uint32_t peer = 1 - r->id;

	check(r, r->o->isend(r->ctx, req, r->id, 1, buf, 8, DPL_MEM_HOST) ==
			 DPL_EINVAL, "send to itself");
	check(r, r->o->isend(r->ctx, req, 2, 1, buf, 8, DPL_MEM_HOST) ==
			 DPL_EINVAL, "send to rank 2 of 2");
	check(r, strstr(dpl_last_error(), "peer 2") != NULL, "%s",
	      dpl_last_error());
	check(r, r->o->irecv(r->ctx, req, peer, DPL_TAG_MAX + 1, buf, 8,
			     DPL_MEM_HOST) == DPL_EINVAL, "tag beyond 60 bits");
	check(r, r->o->isend(r->ctx, req, peer, 1, buf, 8, DPL_MEM_CUDA) ==
			 DPL_ENOTSUP, "CUDA memory");
	check(r, r->o->irecv(r->ctx, req, peer, 1, NULL, 8, DPL_MEM_HOST) ==
			 DPL_EINVAL, "NULL buffer");
	/* Nothing was posted: the pair still talks. */
	one_transfer(r, 0, 1, 8, true, 1, 0, 0, 9);
	free(req);
}

BOTH(bad_posts_are_refused_and_post_nothing, 30)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, bad_posts_fn, NULL);
}

/* Local IPv4 addresses of this process's TCP sockets, from /proc. */
static int tcp_local_addrs(uint32_t *addr, int max)
{
	char path[320], line[512];
	unsigned long inodes[256];
	int ninodes = 0, n = 0;
	struct dirent *e;
	FILE *f;
	DIR *d = opendir("/proc/self/fd");

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL && ninodes < 256) {
		char target[64];
		ssize_t k;

		snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
		k = readlink(path, target, sizeof target - 1);
		if (k <= 0)
			continue;
		target[k] = '\0';
		if (sscanf(target, "socket:[%lu]", &inodes[ninodes]) == 1)
			ninodes++;
	}
	closedir(d);
	f = fopen("/proc/self/net/tcp", "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL && n < max) {
		unsigned long ino;
		unsigned a;
		int i;

		if (sscanf(line, " %*d: %x:%*x %*x:%*x %*x %*x:%*x %*x:%*x "
			   "%*x %*u %*u %lu", &a, &ino) != 2)
			continue;
		for (i = 0; i < ninodes; i++)
			if (inodes[i] == ino && ino != 0)
				addr[n++] = a;
	}
	fclose(f);
	return n;
}

static void loopback_fn(struct rank *r, void *arg)
{
	uint32_t addr[64];
	int n, i;

	one_transfer(r, 0, 1, 1u << 20, true, 90, 0, 0, 8);
	if (r->id != 0)
		return;
	n = tcp_local_addrs(addr, 64);
	check(r, n > 0, "no TCP socket of this process found (%d)", n);
	for (i = 0; i < n; i++)
		check(r, (addr[i] & 0xff) == 127, "a socket is bound to "
		      "%u.%u.%u.%u, not loopback", addr[i] & 0xff,
		      (addr[i] >> 8) & 0xff, (addr[i] >> 16) & 0xff,
		      addr[i] >> 24);
}

Test(ucx_tcp, sockets_stay_on_loopback_by_default, .timeout = 30)
{
	struct job job = {.n = 2, .tls = "tcp"};

	cr_assert_eq(unsetenv("UCX_NET_DEVICES"), 0);
	job_run(&job, loopback_fn, NULL);
}

/* Startup: open (bootstrap, workers, address exchange, hello round) and
 * the first message, reported for 2 and 4 ranks. */
static void startup_fn(struct rank *r, void *arg)
{
	uint64_t t0 = mono_ns(), v;
	uint32_t j;

	for (j = 0; j < r->job->n; j++) {
		if (j == r->id)
			continue;
		if (r->id < j) {
			token_send(r, j, 95, r->id);
			v = token_recv(r, j, 95);
		} else {
			v = token_recv(r, j, 95);
			token_send(r, j, 95, r->id);
		}
		check(r, v == j, "first message from %u carries %llu", j,
		      (unsigned long long)v);
	}
	if (r->id == 0)
		cr_log_info("startup budget, %u ranks: open %.2f ms, first "
			    "exchange with every peer %.3f ms", r->job->n,
			    (double)r->open_ns / 1e6,
			    (double)(mono_ns() - t0) / 1e6);
}

BOTH(startup_is_measured, 60)
{
	struct job two = {.n = 2, .tls = tls};
	struct job four = {.n = 4, .tls = tls};

	job_run(&two, startup_fn, NULL);
	job_run(&four, startup_fn, NULL);
}

/* ---- liveness timeout ------------------------------------------------- */

static void sleep_ms(uint32_t ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0)
		;
}

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
	rc = r->o->irecv(r->ctx, rq, 1, 100, &v, sizeof v, DPL_MEM_HOST);
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

/* UCX 1.13 cannot cancel a send; the request still completes exactly
 * once, and when it says 0 the receiver has the data. */
static void cancel_send_fn(struct rank *r, void *arg)
{
	static unsigned char big[1u << 20];
	uint64_t outcome;
	void *sq;
	int rc;

	if (r->id == 1) {
		token_recv(r, 0, TOK + 11);
		outcome = token_recv(r, 0, TOK + 12);
		if (outcome == 0) {
			recv_now(r, 0, 120, big, sizeof big);
			check(r, pattern_bad(big, sizeof big, 31) == sizeof big,
			      "data of a send that completed is corrupted");
		}
		return;
	}
	pattern_fill(big, sizeof big, 31);
	sq = req_new(r);
	rc = r->o->isend(r->ctx, sq, 1, 120, big, sizeof big, DPL_MEM_HOST);
	check(r, rc == 0, "isend");
	spin_ms(r, 5);
	check(r, r->o->cancel(r->ctx, sq) == 0, "cancel of a pending send: %s",
	      dpl_last_error());
	token_send(r, 1, TOK + 11, 1);
	rc = req_wait(r, sq, 200);
	if (rc == DPL_ETIMEDOUT) {
		/* Not cancelled: it waits for its receive. */
		token_send(r, 1, TOK + 12, 0);
		rc = req_wait(r, sq, 10000);
		check(r, rc == 0, "uncancelled send gave %s", dpl_err_name(rc));
	} else {
		check(r, rc == DPL_ECANCELED || rc == 0,
		      "cancelled send gave %s", dpl_err_name(rc));
		token_send(r, 1, TOK + 12, rc == 0 ? 0 : 1);
	}
	free(sq);
}

BOTH(cancel_of_a_pending_send_completes_it_once, 30)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, cancel_send_fn, NULL);
}

/* ---- lifecycle --------------------------------------------------------- */

static int count_dir(const char *path, const char *prefix)
{
	struct dirent *e;
	int n = 0;
	DIR *d = opendir(path);

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.' &&
		    strncmp(e->d_name, prefix, strlen(prefix)) == 0)
			n++;
	closedir(d);
	return n;
}

/* SysV shared memory segments created by this process. */
static int count_sysv_mine(void)
{
	char line[512];
	int n = 0, cpid;
	FILE *f = fopen("/proc/sysvipc/shm", "r");

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, " %*d %*d %*o %*u %d", &cpid) == 1 &&
		    cpid == (int)getpid())
			n++;
	fclose(f);
	return n;
}

#define CYCLES 8

static int count_fds(void)
{
	return count_dir("/proc/self/fd", "");
}

/* Shared memory of UCX's posix transport still mapped by this process
 * (/dev/shm holds every process's segments, so count our mappings). */
static int count_posix(void)
{
	char line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL)
		if (strstr(line, "/dev/shm/ucx") != NULL)
			n++;
	fclose(f);
	return n;
}

/* Wait up to 3 s for count() to come down to at most `limit`: a
 * segment goes away only once the peer has detached it too. */
static int settle(int (*count)(void), int limit)
{
	int i, n = count();

	for (i = 0; i < 300 && n > limit; i++) {
		sleep_ms(10);
		n = count();
	}
	return n;
}

/* Close and reopen the transport repeatedly: open files, POSIX and SysV
 * shared memory come back to what the second cycle left, and every cycle
 * still carries data. */
static void cycles_fn(struct rank *r, void *arg)
{
	struct dpl_transport_params p = {0};
	int fds0 = 0, posix0 = 0, sysv0 = 0, k, n, rc;

	p.rank = r->id;
	p.world_size = r->job->n;
	p.bootstrap = r->job->root;
	p.timeout_ms = 10000;
	for (k = 0; k < CYCLES; k++) {
		one_transfer(r, 0, 1, 1u << 16, true, 130, 0, 0, (uint32_t)k);
		dpl_transport_close(r->t);
		r->t = NULL;
		if (k == 1) { /* after UCX's one-time global setup */
			sleep_ms(100);
			fds0 = count_fds();
			posix0 = count_posix();
			sysv0 = settle(count_sysv_mine, 0);
		} else if (k > 1) {
			n = settle(count_fds, fds0);
			check(r, n <= fds0, "cycle %d: %d open files, %d "
			      "after cycle 1", k, n, fds0);
			n = settle(count_posix, posix0);
			check(r, n <= posix0, "cycle %d: mappings of "
			      "/dev/shm/ucx* went from %d to %d", k, posix0, n);
			n = settle(count_sysv_mine, sysv0);
			check(r, n <= sysv0, "cycle %d: SysV segments went "
			      "from %d to %d", k, sysv0, n);
		}
		rc = dpl_transport_open(r->o, &p, &r->t);
		check(r, rc == 0, "reopen %d: %s", k, dpl_last_error());
		r->ctx = dpl_transport_ctx(r->t);
	}
}

BOTH(open_close_cycles_leave_no_files_or_segments, 60)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, cycles_fn, NULL);
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
			rc = r->o->irecv(r->ctx, rq, 0, 140, buf, FETCH_LEN,
					 DPL_MEM_HOST);
			check(r, rc == 0, "irecv: %s", dpl_last_error());
			token_send(r, 0, TOK + 14, 1);
			sleep_ms(300); /* rank 0 sends and closes */
			rc = req_wait(r, rq, LIVENESS_BOUND_MS);
		} else {
			rc = r->o->irecv(r->ctx, sentinel, 0, 142, &never,
					 sizeof never, DPL_MEM_HOST);
			check(r, rc == 0, "irecv: %s", dpl_last_error());
			token_send(r, 0, TOK + 14, 1);
			rc = req_wait(r, sentinel, LIVENESS_BOUND_MS);
			check(r, rc == DPL_EPEER, "receive from a rank that "
			      "closed: %s", dpl_err_name(rc));
			rc = r->o->irecv(r->ctx, rq, 0, 140, buf, FETCH_LEN,
					 DPL_MEM_HOST);
			if (rc == 0)
				rc = req_wait(r, rq, LIVENESS_BOUND_MS);
		}
		bad = rc == 0 ? pattern_bad(buf, FETCH_LEN, 14) : FETCH_LEN;
		check(r, rc == DPL_EPEER || (rc == 0 && bad == FETCH_LEN),
		      "receive of data its sender closed on: %s%s (%s)",
		      dpl_err_name(rc), rc == 0 ? " with wrong data" : "",
		      dpl_last_error());
		rc = r->o->isend(r->ctx, rq, 0, 141, buf, 8, DPL_MEM_HOST);
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
	rc = r->o->isend(r->ctx, rq, 1, 140, buf, FETCH_LEN, DPL_MEM_HOST);
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
	check(r, (r->o->caps & DPL_TRANSPORT_CAP_WAIT) && r->o->wait != NULL,
	      "the table declares no wait");
	rq = req_new(r);
	rc = r->o->irecv(r->ctx, rq, 1, 150, &v, sizeof v, DPL_MEM_HOST);
	check(r, rc == 0, "irecv: %s", dpl_last_error());
	token_send(r, 1, TOK + 15, 1);
	while ((rc = r->o->test(r->ctx, rq)) == DPL_EAGAIN) {
		rc = r->o->wait(r->ctx, 60000000000ull);
		check(r, rc == 0, "wait: %s", dpl_last_error());
		check(r, r->o->progress(r->ctx) >= 0, "progress: %s",
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
	rc = r->o->irecv(r->ctx, rq, 1, 151, &v, sizeof v, DPL_MEM_HOST);
	check(r, rc == 0, "irecv: %s", dpl_last_error());
	token_send(r, 1, TOK + 16, 1);
	while ((rc = r->o->test(r->ctx, rq)) == DPL_EAGAIN) {
		check(r, r->o->wait(r->ctx, 60000000000ull) == 0, "wait: %s",
		      dpl_last_error());
		check(r, r->o->progress(r->ctx) >= 0, "progress: %s",
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
