/*
 * test_shm_stream.c - the shared-memory transport on the path the
 * conformance battery never takes: with cma=0 a long message is streamed
 * through the ring as DATA frames (two copies) instead of being read
 * from the sender's memory. The battery (conformance/transport, run on
 * shm with its default options) covers the same cases on the
 * cross-memory path; here they run streamed: sizes across the eager
 * limit, the ring size and ring/4 (the DATA chunk), expected and
 * unexpected; unaligned buffers; the order of 1000 mixed messages;
 * truncation both ways; 4 x 16 MiB both ways before the receives.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "forked_ranks.h"
#include "shm_test.h"

/* A job whose ranks stream long messages through the ring. */
static void stream_job(void)
{
	J = job_new();
	snprintf(J->opts, sizeof J->opts, "cma=0");
}

/* ---- sizes across the protocol switch points ------------------------- */

static const size_t sizes[] = {
	0, 1, 8, 63, 64, 4095, 4096, EAGER - 1, EAGER, EAGER + 1,
	RING - 1, RING, RING + 1, 64 * 1024, MiB, 16 * MiB,
};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/*
 * Both ranks send every size to each other (tag = index) and receive
 * them; param 1: receives posted after the messages arrived
 * (unexpected, in reverse order), 0: before (expected).
 */
static void sizes_rank(int rank)
{
	bool unexpected = J->param & 1;
	dpl_transport *t = open_t(rank, 2, J->opts);
	unsigned char *sb[NSIZES], *rb[NSIZES];
	void *sr = reqs_new(NSIZES), *rr = reqs_new(NSIZES);
	int sst[NSIZES], rst[NSIZES], rc;
	size_t k;
	int peer = 1 - rank;

	if (t == NULL)
		return;
	for (k = 0; k < NSIZES; k++) {
		sb[k] = xmalloc(sizes[k]);
		rb[k] = xmalloc(sizes[k] + GUARD);
		fill(sb[k], sizes[k], (uint32_t)(rank * 100 + k));
		memset(rb[k], 0xA5, sizes[k] + GUARD);
	}
	if (!unexpected) {
		for (k = 0; k < NSIZES; k++)
			if ((rc = dpl_transport_irecv(t, REQ(rr, k),
						      (uint32_t)peer, k, rb[k],
						      sizes[k], DPL_MEM_HOST)))
				bad("irecv %zu: %d", sizes[k], rc);
		atomic_fetch_add(&J->flag[0], 1);
		await_flag(0, 2, 5000);
	}
	for (k = 0; k < NSIZES; k++)
		if ((rc = dpl_transport_isend(t, REQ(sr, k), (uint32_t)peer, k,
					      sb[k], sizes[k], DPL_MEM_HOST)))
			bad("isend %zu: %d", sizes[k], rc);
	if (unexpected) {
		/* Let everything arrive and be seen before any receive. */
		atomic_fetch_add(&J->flag[1], 1);
		await_flag_progress(t, 1, 2, 5000);
		for (k = 0; k < 50; k++) {
			dpl_transport_progress(t);
			fr_sleep_ms(1);
		}
		for (k = NSIZES; k-- > 0;)
			if ((rc = dpl_transport_irecv(t, REQ(rr, k),
						      (uint32_t)peer, k, rb[k],
						      sizes[k], DPL_MEM_HOST)))
				bad("irecv %zu: %d", sizes[k], rc);
	}
	if (wait_all(t, rr, NSIZES, rst, 20000) != 0)
		bad("receives did not complete");
	if (wait_all(t, sr, NSIZES, sst, 20000) != 0)
		bad("sends did not complete");
	for (k = 0; k < NSIZES; k++) {
		size_t at = verify(rb[k], sizes[k],
				   (uint32_t)(peer * 100 + k));
		size_t g;

		if (rst[k] != 0 || sst[k] != 0)
			bad("size %zu: recv %d send %d", sizes[k], rst[k],
			    sst[k]);
		if (at != sizes[k])
			bad("size %zu: byte %zu differs", sizes[k], at);
		for (g = 0; g < GUARD; g++)
			if (rb[k][sizes[k] + g] != 0xA5) {
				bad("size %zu: guard byte %zu written",
				    sizes[k], g);
				break;
			}
		free(sb[k]);
		free(rb[k]);
	}
	/* Nobody leaves before both checked (a leaving rank is a failed
	 * peer for the other). */
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(t, 2, 2, 5000);
	free(sr);
	free(rr);
	dpl_transport_close(t);
}

ParameterizedTestParameters(shm_stream, sizes)
{
	static int modes[] = {0, 1};

	return cr_make_param_array(int, modes, 2);
}

ParameterizedTest(int *mode, shm_stream, sizes, .timeout = 90)
{
	stream_job();
	J->param = *mode;
	cr_log_info("%s receives", *mode ? "unexpected" : "expected");
	run(2, sizes_rank, 80000);
}

/* ---- unaligned buffers --------------------------------------------- */

static const size_t ulens[] = {1, 63, 4097, EAGER + 3, MiB + 5};
#define NULENS (sizeof ulens / sizeof ulens[0])

static void unaligned_rank(int rank)
{
	dpl_transport *t = open_t(rank, 2, J->opts);
	size_t n = NULENS * 7;
	unsigned char **sb = calloc(n, sizeof *sb);
	unsigned char **rb = calloc(n, sizeof *rb);
	void *sr = reqs_new(n), *rr = reqs_new(n);
	int *sst = calloc(n, sizeof *sst), *rst = calloc(n, sizeof *rst);
	size_t k, off, i = 0;

	if (t == NULL)
		return;
	for (k = 0; k < NULENS; k++)
		for (off = 1; off <= 7; off++, i++) {
			sb[i] = xmalloc(ulens[k] + 8);
			rb[i] = xmalloc(ulens[k] + 8 + GUARD);
			memset(rb[i], 0x5A, ulens[k] + 8 + GUARD);
			fill(sb[i] + off, ulens[k], (uint32_t)(rank + i * 3));
			/* src offset off, dst offset 8 - off */
			if (dpl_transport_irecv(t, REQ(rr, i),
						(uint32_t)(1 - rank), i,
						rb[i] + 8 - off, ulens[k],
						DPL_MEM_HOST) != 0 ||
			    dpl_transport_isend(
				    t, REQ(sr, i), (uint32_t)(1 - rank), i,
				    sb[i] + off, ulens[k], DPL_MEM_HOST) != 0)
				bad("post %zu", i);
		}
	if (wait_all(t, rr, n, rst, 20000) != 0 ||
	    wait_all(t, sr, n, sst, 20000) != 0)
		bad("requests did not complete");
	for (i = 0, k = 0; k < NULENS; k++)
		for (off = 1; off <= 7; off++, i++) {
			unsigned char *d = rb[i] + 8 - off;
			size_t g;

			if (rst[i] != 0 || sst[i] != 0)
				bad("len %zu off %zu: %d %d", ulens[k], off,
				    rst[i], sst[i]);
			if (verify(d, ulens[k],
				   (uint32_t)(1 - rank + i * 3)) != ulens[k])
				bad("len %zu off %zu: data", ulens[k], off);
			for (g = 0; g < 8 - off; g++)
				if (rb[i][g] != 0x5A)
					bad("len %zu off %zu: byte before "
					    "written", ulens[k], off);
			for (g = 0; g < GUARD; g++)
				if (d[ulens[k] + g] != 0x5A) {
					bad("len %zu off %zu: guard written",
					    ulens[k], off);
					break;
				}
			free(sb[i]);
			free(rb[i]);
		}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(t, 2, 2, 5000);
	free(sb);
	free(rb);
	free(sr);
	free(rr);
	free(sst);
	free(rst);
	dpl_transport_close(t);
}

Test(shm_stream, unaligned_buffers, .timeout = 60)
{
	stream_job();
	run(2, unaligned_rank, 50000);
}

/* ---- ordering ---------------------------------------------------------- */

#define NORDER 1000

/* Rank 0 sends 1000 messages on one tag (sizes cycling through eager and
 * long ones, so long ones come before short ones); rank 1 checks that
 * message i carries index i. */
static void order_rank(int rank)
{
	static const size_t len[] = {8, 40000, 100, 3 * EAGER, 0, 9000};
	dpl_transport *t = open_t(rank, 2, J->opts);
	void *r = reqs_new(NORDER);
	int *st = calloc(NORDER, sizeof *st);
	unsigned char **b = calloc(NORDER, sizeof *b);
	size_t i;
	int rc;

	if (t == NULL)
		return;
	for (i = 0; i < NORDER; i++) {
		size_t n = len[i % 6];

		b[i] = xmalloc(n);
		if (rank == 0)
			fill(b[i], n, (uint32_t)i);
		else
			memset(b[i], 0, n);
	}
	if (rank == 1) {
		for (i = 0; i < NORDER; i++)
			if (dpl_transport_irecv(t, REQ(r, i), 0, 77, b[i],
						len[i % 6], DPL_MEM_HOST) != 0)
				bad("irecv %zu", i);
		atomic_store(&J->flag[0], 1);
	} else {
		await_flag(0, 1, 5000);
		for (i = 0; i < NORDER; i++) {
			uint64_t end = dpl_clock_ns() + 5000000000u;

			while ((rc = dpl_transport_isend(
					t, REQ(r, i), 1, 77, b[i], len[i % 6],
					DPL_MEM_HOST)) == DPL_EAGAIN &&
			       dpl_clock_ns() < end)
				dpl_transport_progress(t);
			if (rc != 0) {
				bad("isend %zu: %d", i, rc);
				break;
			}
		}
	}
	if (wait_all(t, r, NORDER, st, 20000) != 0)
		bad("requests did not complete");
	for (i = 0; i < NORDER; i++) {
		if (st[i] != 0)
			bad("message %zu: status %d", i, st[i]);
		else if (rank == 1 && verify(b[i], len[i % 6], (uint32_t)i) !=
					      len[i % 6])
			bad("message %zu arrived out of order or damaged", i);
		free(b[i]);
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(t, 2, 2, 5000);
	free(b);
	free(st);
	free(r);
	dpl_transport_close(t);
}

Test(shm_stream, ordering_of_1000_messages, .timeout = 60)
{
	stream_job();
	run(2, order_rank, 50000);
}

/* ---- truncation ------------------------------------------------------- */

/*
 * Rank 0 sends, for a short and a long size L: L bytes into a receive of
 * L/2, L bytes into a receive of 2L, then L bytes into a receive of L.
 * The first two end DPL_ETRUNC on both sides and copy nothing; the third
 * arrives intact.
 */
static void trunc_rank(int rank)
{
	static const size_t L[] = {100, 3 * MiB};
	dpl_transport *t = open_t(rank, 2, J->opts);
	void *r = reqs_new(6);
	int st[6], k;
	unsigned char *b[6];

	if (t == NULL)
		return;
	for (k = 0; k < 6; k++) {
		size_t len = L[k / 3];
		size_t rl = k % 3 == 0 ? len / 2 : k % 3 == 1 ? 2 * len : len;

		b[k] = xmalloc(2 * len);
		if (rank == 0) {
			fill(b[k], len, (uint32_t)k);
			if (dpl_transport_isend(t, REQ(r, k), 1, 5, b[k], len,
						DPL_MEM_HOST) != 0)
				bad("isend %d", k);
		} else {
			memset(b[k], 0xC3, 2 * len);
			if (dpl_transport_irecv(t, REQ(r, k), 0, 5, b[k], rl,
						DPL_MEM_HOST) != 0)
				bad("irecv %d", k);
		}
	}
	wait_all(t, r, 6, st, 20000);
	for (k = 0; k < 6; k++) {
		size_t len = L[k / 3], i;
		int want = k % 3 == 2 ? 0 : DPL_ETRUNC;

		J->out[rank].st[k] = st[k];
		if (st[k] != want)
			bad("case %d (len %zu): status %d, want %d", k, len,
			    st[k], want);
		if (rank == 1 && want == DPL_ETRUNC) {
			for (i = 0; i < 2 * len; i++)
				if (b[k][i] != 0xC3) {
					bad("case %d: truncated receive "
					    "wrote byte %zu", k, i);
					break;
				}
		}
		if (rank == 1 && want == 0 &&
		    verify(b[k], len, (uint32_t)k) != len)
			bad("case %d: data after truncations", k);
		free(b[k]);
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(t, 2, 2, 5000);
	free(r);
	dpl_transport_close(t);
}

Test(shm_stream, truncation_both_ways_keeps_endpoint_usable, .timeout = 60)
{
	stream_job();
	run(2, trunc_rank, 50000);
}

/* ---- bidirectional large sends ------------------------------------------ */

#define NBIG 4

static void bidir_rank(int rank)
{
	size_t len = 16 * MiB;
	dpl_transport *t = open_t(rank, 2, J->opts);
	void *sr = reqs_new(NBIG), *rr = reqs_new(NBIG);
	unsigned char *sb[NBIG], *rb[NBIG];
	int sst[NBIG], rst[NBIG], k;

	if (t == NULL)
		return;
	for (k = 0; k < NBIG; k++) {
		sb[k] = xmalloc(len);
		rb[k] = xmalloc(len);
		fill(sb[k], len, (uint32_t)(rank * 10 + k));
		memset(rb[k], 0, len);
	}
	/* Sends first, on both sides, then the receives. */
	for (k = 0; k < NBIG; k++)
		if (dpl_transport_isend(t, REQ(sr, k), (uint32_t)(1 - rank),
					(uint64_t)k, sb[k], len,
					DPL_MEM_HOST) != 0)
			bad("isend %d", k);
	atomic_fetch_add(&J->flag[0], 1);
	await_flag_progress(t, 0, 2, 5000);
	for (k = 0; k < NBIG; k++)
		if (dpl_transport_irecv(t, REQ(rr, k), (uint32_t)(1 - rank),
					(uint64_t)k, rb[k], len,
					DPL_MEM_HOST) != 0)
			bad("irecv %d", k);
	if (wait_all(t, rr, NBIG, rst, 30000) != 0 ||
	    wait_all(t, sr, NBIG, sst, 30000) != 0)
		bad("deadlock: requests did not complete");
	for (k = 0; k < NBIG; k++) {
		if (rst[k] != 0 || sst[k] != 0)
			bad("message %d: %d %d", k, rst[k], sst[k]);
		if (verify(rb[k], len, (uint32_t)((1 - rank) * 10 + k)) != len)
			bad("message %d: data", k);
		free(sb[k]);
		free(rb[k]);
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(t, 2, 2, 5000);
	free(sr);
	free(rr);
	dpl_transport_close(t);
}

Test(shm_stream, bidirectional_4x16MiB_sends_before_receives, .timeout = 90)
{
	stream_job();
	run(2, bidir_rank, 80000);
}

