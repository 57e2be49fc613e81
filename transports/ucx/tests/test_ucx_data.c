/*
 * test_ucx_data.c - the UCX transport's data path between real processes
 * over loopback, each case once with UCX_TLS=tcp and once with
 * UCX_TLS=sm: sizes across UCX's protocol thresholds, unaligned buffers,
 * expected and unexpected receives, ordering, exact source and tag
 * matching, truncation, cancel of receives and sends, and bidirectional
 * large sends.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ucx_ranks.h"

/* ---- sizes, expected and unexpected ----------------------------------- */

static const size_t sizes[] = {
	0, 1, 8, 4095, 4096, 8191, 8192, 8193, 65536, 1u << 20, 16u << 20,
};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void sizes_fn(struct tj_rank *rk)
{
	size_t i;

	for (i = 0; i < NSIZES; i++) {
		uint64_t tag = 100 + i;

		one_transfer(rk, 1, 0, sizes[i], true, tag, 0, 0, (uint32_t)i);
		one_transfer(rk, 1, 0, sizes[i], false, tag, 0, 0,
			     (uint32_t)i + 50);
		one_transfer(rk, 0, 1, sizes[i], true, tag, 0, 0,
			     (uint32_t)i + 100);
		one_transfer(rk, 0, 1, sizes[i], false, tag, 0, 0,
			     (uint32_t)i + 150);
	}
}

BOTH(sizes_across_thresholds_expected_and_unexpected, 120)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, sizes_fn, NULL);
}

static void unaligned_fn(struct tj_rank *rk)
{
	static const size_t lens[] = {1, 13, 4097, 65539, (1u << 20) + 5};
	size_t i, off;

	for (i = 0; i < sizeof lens / sizeof lens[0]; i++)
		for (off = 1; off <= 7; off += 3) {
			one_transfer(rk, 1, 0, lens[i], true, 7 + off, off,
				     8 - off, (uint32_t)(i * 8 + off));
			one_transfer(rk, 0, 1, lens[i], false, 7 + off,
				     8 - off, off, (uint32_t)(i * 8 + off));
		}
}

BOTH(unaligned_buffers_keep_every_byte, 120)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, unaligned_fn, NULL);
}

/* ---- matching and ordering -------------------------------------------- */

#define NORDER 1000

static void order_fn(struct tj_rank *rk)
{
	static uint64_t vals[NORDER];
	void *reqs = req_new(rk, NORDER);
	uint64_t i;
	int rc;

	if (rk->rank == 1) {
		for (i = 0; i < NORDER; i++) {
			vals[i] = i * 3 + 1;
			rc = dpl_transport_isend(rk->t, tj_req(rk, reqs, i), 0,
						 42, &vals[i], sizeof vals[i],
						 DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "isend %llu: %s",
				 (unsigned long long)i, dpl_last_error());
		}
		for (i = 0; i < NORDER; i++) {
			rc = tj_wait(rk, tj_req(rk, reqs, i), 10000, NULL);
			TJ_CHECK(rk, rc == 0, "send %llu: %s",
				 (unsigned long long)i, dpl_err_name(rc));
		}
		tj_free(rk, reqs);
		return;
	}
	/* Half posted before, half after the messages arrive. */
	for (i = 0; i < NORDER / 2; i++) {
		vals[i] = 0;
		rc = dpl_transport_irecv(rk->t, tj_req(rk, reqs, i), 1, 42,
					 &vals[i], sizeof vals[i],
					 DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "irecv %llu", (unsigned long long)i);
	}
	tj_progress_for(rk, 20);
	for (; i < NORDER; i++) {
		vals[i] = 0;
		rc = dpl_transport_irecv(rk->t, tj_req(rk, reqs, i), 1, 42,
					 &vals[i], sizeof vals[i],
					 DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "irecv %llu", (unsigned long long)i);
	}
	for (i = 0; i < NORDER; i++) {
		rc = tj_wait(rk, tj_req(rk, reqs, i), 10000, NULL);
		TJ_CHECK(rk, rc == 0, "receive %llu: %s (%s)",
			 (unsigned long long)i, dpl_err_name(rc),
			 dpl_last_error());
		TJ_CHECK(rk, vals[i] == i * 3 + 1, "message %llu carries %llu",
			 (unsigned long long)i, (unsigned long long)vals[i]);
	}
	tj_free(rk, reqs);
}

BOTH(thousand_messages_same_tag_arrive_in_order, 60)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, order_fn, NULL);
}

#define BIG (4u << 20)

static void mixed_fn(struct tj_rank *rk)
{
	unsigned char *big = tj_alloc(rk, BIG), small[8];
	void *rb = req_new(rk, 1), *rs = req_new(rk, 1);
	int round, rc;

	for (round = 0; round < 2; round++) {
		bool expected = round == 0;

		if (rk->rank == 1) {
			tj_fill(big, BIG, 3 + round);
			tj_fill(small, sizeof small, 4 + round);
			if (expected)
				token_recv(rk, 0, TOK + 3);
			rc = dpl_transport_isend(rk->t, rb, 0, 9, big, BIG,
						 DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "isend big");
			rc = dpl_transport_isend(rk->t, rs, 0, 9, small,
						 sizeof small, DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "isend small");
			if (!expected)
				token_send(rk, 0, TOK + 4, 1);
			TJ_CHECK(rk, tj_wait(rk, rs, 10000, NULL) == 0,
				 "small send");
			TJ_CHECK(rk, tj_wait(rk, rb, 10000, NULL) == 0,
				 "big send");
			continue;
		}
		memset(big, 0, BIG);
		memset(small, 0, sizeof small);
		if (!expected) {
			token_recv(rk, 1, TOK + 4);
			tj_progress_for(rk, 5);
		}
		rc = dpl_transport_irecv(rk->t, rb, 1, 9, big, BIG,
					 DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "irecv big");
		rc = dpl_transport_irecv(rk->t, rs, 1, 9, small, sizeof small,
					 DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "irecv small");
		if (expected)
			token_send(rk, 1, TOK + 3, 1);
		rc = tj_wait(rk, rs, 10000, NULL);
		TJ_CHECK(rk, rc == 0, "small receive (%s): %s",
			 expected ? "expected" : "unexpected",
			 dpl_err_name(rc));
		rc = tj_wait(rk, rb, 10000, NULL);
		TJ_CHECK(rk, rc == 0, "big receive (%s): %s",
			 expected ? "expected" : "unexpected",
			 dpl_err_name(rc));
		TJ_CHECK(rk, tj_verify(big, BIG, 3 + round) < 0,
			 "big message corrupted");
		TJ_CHECK(rk, tj_verify(small, sizeof small, 4 + round) < 0,
			 "small message corrupted");
	}
	tj_free(rk, rb);
	tj_free(rk, rs);
	tj_free(rk, big);
}

BOTH(large_then_small_on_one_tag_stay_in_order, 60)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, mixed_fn, NULL);
}

/* Interleaved tags from one peer, and one tag from two peers. */
static void match_fn(struct tj_rank *rk)
{
	static const uint64_t tags[] = {5, DPL_TAG_MAX, 6, 0,
					UINT64_C(1) << 59};
	uint64_t got[5], v, same[3];
	void *reqs[5], *q[3];
	size_t i;
	int rc;

	if (rk->rank != 0) {
		/* Ranks 1 and 2 send their own marks, rank 1 also the
		 * interleaved tags in reverse order. */
		if (rk->rank == 1)
			for (i = 5; i-- > 0;)
				token_send(rk, 0, tags[i], 1000 + i);
		token_send(rk, 0, 77, 500 + rk->rank);
		token_send(rk, 0, 77, 600 + rk->rank);
		return;
	}
	for (i = 0; i < 5; i++) {
		reqs[i] = req_new(rk, 1);
		got[i] = 0;
		rc = dpl_transport_irecv(rk->t, reqs[i], 1, tags[i], &got[i], 8,
					 DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "irecv tag %#llx: %s",
			 (unsigned long long)tags[i], dpl_last_error());
	}
	for (i = 0; i < 5; i++) {
		TJ_CHECK(rk, tj_wait(rk, reqs[i], 10000, NULL) == 0,
			 "tag %zu", i);
		TJ_CHECK(rk, got[i] == 1000 + i, "tag %#llx received %llu",
			 (unsigned long long)tags[i],
			 (unsigned long long)got[i]);
		tj_free(rk, reqs[i]);
	}
	/* Source matching: tag 77 from rank 2 first, then from rank 1. */
	for (i = 1; i <= 2; i++) {
		q[i] = req_new(rk, 1);
		same[i] = 0;
	}
	rc = dpl_transport_irecv(rk->t, q[2], 2, 77, &same[2], 8, DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "irecv from 2");
	rc = dpl_transport_irecv(rk->t, q[1], 1, 77, &same[1], 8, DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "irecv from 1");
	TJ_CHECK(rk, tj_wait(rk, q[2], 10000, NULL) == 0, "from 2");
	TJ_CHECK(rk, tj_wait(rk, q[1], 10000, NULL) == 0, "from 1");
	TJ_CHECK(rk, same[1] == 501 && same[2] == 502,
		 "tag 77: rank 1 gave %llu, rank 2 gave %llu",
		 (unsigned long long)same[1], (unsigned long long)same[2]);
	v = token_recv(rk, 2, 77);
	TJ_CHECK(rk, v == 602, "second from 2: %llu", (unsigned long long)v);
	v = token_recv(rk, 1, 77);
	TJ_CHECK(rk, v == 601, "second from 1: %llu", (unsigned long long)v);
	tj_free(rk, q[1]);
	tj_free(rk, q[2]);
}

BOTH(tags_and_sources_match_exactly, 60)
{
	struct ucx_job job = {.n = 3, .tls = tls};

	ucx_job_run(&job, match_fn, NULL);
}

/* ---- truncation and cancel -------------------------------------------- */

static void trunc_case(struct tj_rank *rk, size_t slen, size_t rlen, int step)
{
	unsigned char *buf, ok[16];
	void *req = req_new(rk, 1);
	size_t i;
	int rc;

	if (rk->rank == 1) {
		buf = tj_alloc(rk, slen);
		tj_fill(buf, slen, 11);
		token_recv(rk, 0, TOK + 5);
		rc = dpl_transport_isend(rk->t, req, 0, 20, buf, slen,
					 DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "isend");
		rc = tj_wait(rk, req, 10000, NULL);
		TJ_CHECK(rk, rc == 0 || rc == DPL_ETRUNC,
			 "mismatched send %zu->%zu completed with %s", slen,
			 rlen, dpl_err_name(rc));
		/* The endpoint still carries the next message. */
		tj_fill(ok, sizeof ok, 12 + step);
		send_now(rk, 0, 20, ok, sizeof ok);
		tj_free(rk, buf);
		tj_free(rk, req);
		return;
	}
	buf = tj_alloc(rk, rlen + 4096);
	memset(buf, 0x77, rlen + 4096);
	rc = dpl_transport_irecv(rk->t, req, 1, 20, buf, rlen, DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "irecv");
	token_send(rk, 1, TOK + 5, 1);
	rc = tj_wait(rk, req, 10000, NULL);
	TJ_CHECK(rk, rc == DPL_ETRUNC,
		 "a %zu-byte message into %zu bytes gave %s", slen, rlen,
		 dpl_err_name(rc));
	for (i = rlen; i < rlen + 4096; i++)
		TJ_CHECK(rk, buf[i] == 0x77, "byte %zu past a %zu-byte receive "
			 "overwritten", i - rlen, rlen);
	memset(ok, 0, sizeof ok);
	recv_now(rk, 1, 20, ok, sizeof ok);
	TJ_CHECK(rk, tj_verify(ok, sizeof ok, 12 + step) < 0,
		 "message after a truncation corrupted");
	tj_free(rk, buf);
	tj_free(rk, req);
}

static void trunc_fn(struct tj_rank *rk)
{
	trunc_case(rk, 4096, 16, 0);            /* eager, too long */
	trunc_case(rk, 8, 16, 1);               /* too short */
	trunc_case(rk, 1u << 20, 256u << 10, 2); /* rendezvous, too long */
	trunc_case(rk, 256u << 10, 1u << 20, 3); /* rendezvous, too short */
}

BOTH(length_mismatch_is_etrunc_and_endpoint_stays_usable, 60)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, trunc_fn, NULL);
}

static void cancel_fn(struct tj_rank *rk)
{
	unsigned char buf[64], want[64];
	void *req;
	size_t i;
	int rc;

	if (rk->rank == 1) {
		token_recv(rk, 0, TOK + 6);
		tj_fill(want, sizeof want, 21);
		send_now(rk, 0, 30, want, sizeof want);
		return;
	}
	req = req_new(rk, 1);
	memset(buf, 0x3d, sizeof buf);
	rc = dpl_transport_irecv(rk->t, req, 1, 30, buf, sizeof buf,
				 DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "irecv");
	tj_progress_for(rk, 5);
	TJ_CHECK(rk, dpl_transport_cancel(rk->t, req) == 0, "cancel: %s",
		 dpl_last_error());
	rc = tj_wait(rk, req, 2000, NULL);
	TJ_CHECK(rk, rc == DPL_ECANCELED, "cancelled receive gave %s",
		 dpl_err_name(rc));
	for (i = 0; i < sizeof buf; i++)
		TJ_CHECK(rk, buf[i] == 0x3d, "cancelled buffer written");
	/* The message sent afterwards goes to the next receive. */
	token_send(rk, 1, TOK + 6, 1);
	recv_now(rk, 1, 30, buf, sizeof buf);
	TJ_CHECK(rk, tj_verify(buf, sizeof buf, 21) < 0,
		 "message after a cancel corrupted");
	tj_free(rk, req);
}

BOTH(cancel_of_a_posted_receive, 30)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, cancel_fn, NULL);
}

/* ---- bidirectional large sends ---------------------------------------- */

#define BIDIR_N 4
#define BIDIR_LEN (16u << 20)

static void bidir_fn(struct tj_rank *rk)
{
	unsigned char *out[BIDIR_N], *in[BIDIR_N];
	void *sreq[BIDIR_N], *rreq[BIDIR_N];
	uint32_t peer = 1 - rk->rank, k;
	int rc;

	for (k = 0; k < BIDIR_N; k++) {
		out[k] = tj_alloc(rk, BIDIR_LEN);
		in[k] = tj_alloc(rk, BIDIR_LEN);
		tj_fill(out[k], BIDIR_LEN, rk->rank * 10 + k);
		sreq[k] = req_new(rk, 1);
		rreq[k] = req_new(rk, 1);
		rc = dpl_transport_isend(rk->t, sreq[k], peer, 50 + k, out[k],
					 BIDIR_LEN, DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "isend %u: %s", k, dpl_last_error());
	}
	for (k = 0; k < BIDIR_N; k++) {
		rc = dpl_transport_irecv(rk->t, rreq[k], peer, 50 + k, in[k],
					 BIDIR_LEN, DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "irecv %u: %s", k, dpl_last_error());
	}
	for (k = 0; k < BIDIR_N; k++) {
		rc = tj_wait(rk, rreq[k], 20000, NULL);
		TJ_CHECK(rk, rc == 0, "receive %u: %s", k, dpl_err_name(rc));
		TJ_CHECK(rk, tj_verify(in[k], BIDIR_LEN, peer * 10 + k) < 0,
			 "receive %u corrupted", k);
	}
	for (k = 0; k < BIDIR_N; k++) {
		rc = tj_wait(rk, sreq[k], 20000, NULL);
		TJ_CHECK(rk, rc == 0, "send %u: %s", k, dpl_err_name(rc));
		tj_free(rk, out[k]);
		tj_free(rk, in[k]);
		tj_free(rk, sreq[k]);
		tj_free(rk, rreq[k]);
	}
}

BOTH(bidirectional_sends_posted_before_receives, 120)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, bidir_fn, NULL);
}

/* UCX 1.13 cannot cancel a send; the request still completes exactly
 * once, and when it says 0 the receiver has the data. */
static void cancel_send_fn(struct tj_rank *rk)
{
	static unsigned char big[1u << 20];
	uint64_t outcome;
	void *sq;
	int rc;

	if (rk->rank == 1) {
		token_recv(rk, 0, TOK + 11);
		outcome = token_recv(rk, 0, TOK + 12);
		if (outcome == 0) {
			recv_now(rk, 0, 120, big, sizeof big);
			TJ_CHECK(rk, tj_verify(big, sizeof big, 31) < 0,
				 "data of a send that completed is corrupted");
		}
		return;
	}
	tj_fill(big, sizeof big, 31);
	sq = req_new(rk, 1);
	rc = dpl_transport_isend(rk->t, sq, 1, 120, big, sizeof big,
				 DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "isend");
	tj_progress_for(rk, 5);
	TJ_CHECK(rk, dpl_transport_cancel(rk->t, sq) == 0,
		 "cancel of a pending send: %s", dpl_last_error());
	token_send(rk, 1, TOK + 11, 1);
	rc = tj_wait(rk, sq, 200, NULL);
	if (rc == DPL_EAGAIN) {
		/* Not cancelled: it waits for its receive. */
		token_send(rk, 1, TOK + 12, 0);
		rc = tj_wait(rk, sq, 10000, NULL);
		TJ_CHECK(rk, rc == 0, "uncancelled send gave %s",
			 dpl_err_name(rc));
	} else {
		TJ_CHECK(rk, rc == DPL_ECANCELED || rc == 0,
			 "cancelled send gave %s", dpl_err_name(rc));
		token_send(rk, 1, TOK + 12, rc == 0 ? 0 : 1);
	}
	tj_free(rk, sq);
}

BOTH(cancel_of_a_pending_send_completes_it_once, 30)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, cancel_send_fn, NULL);
}

