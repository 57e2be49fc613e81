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
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "shm_test.h"

/* A job whose ranks stream long messages through the ring. */
static struct tj_job stream_job(tj_rank_fn fn, unsigned deadline_ms)
{
	return shm_job(2, fn, deadline_ms, "cma=0");
}

/* ---- sizes across the protocol switch points ------------------------- */

static const size_t sizes[] = {
	0, 1, 8, 63, 64, 4095, 4096, EAGER - 1, EAGER, EAGER + 1,
	RING - 1, RING, RING + 1, 64 * 1024, MiB, 16 * MiB,
};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/*
 * Both ranks send every size to each other (tag = index) and receive
 * them; *arg 1: receives posted after the messages arrived
 * (unexpected, in reverse order), 0: before (expected).
 */
static void sizes_rank(struct tj_rank *rk)
{
	bool unexpected = *(const int *)rk->arg & 1;
	dpl_transport *t = rk->t;
	unsigned char *sb[NSIZES], *rb[NSIZES];
	void *sr = tj_reqs(rk, NSIZES), *rr = tj_reqs(rk, NSIZES);
	int sst[NSIZES], rst[NSIZES], rc;
	uint32_t peer = 1 - rk->rank;
	size_t k;

	for (k = 0; k < NSIZES; k++) {
		sb[k] = tj_alloc(rk, sizes[k] + 1);
		rb[k] = tj_alloc(rk, sizes[k] + GUARD);
		tj_fill(sb[k], sizes[k], rk->rank * 100 + k);
		memset(rb[k], 0xA5, sizes[k] + GUARD);
	}
	if (!unexpected) {
		for (k = 0; k < NSIZES; k++) {
			rc = dpl_transport_irecv(t, tj_req(rk, rr, k), peer,
						 k, rb[k], sizes[k],
						 DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "irecv %zu: %d", sizes[k], rc);
		}
		tj_barrier(rk);
	}
	for (k = 0; k < NSIZES; k++) {
		rc = dpl_transport_isend(t, tj_req(rk, sr, k), peer, k, sb[k],
					 sizes[k], DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "isend %zu: %d", sizes[k], rc);
	}
	if (unexpected) {
		/* Let everything arrive and be seen before any receive. */
		tj_barrier(rk);
		tj_progress_for(rk, 50);
		for (k = NSIZES; k-- > 0;) {
			rc = dpl_transport_irecv(t, tj_req(rk, rr, k), peer,
						 k, rb[k], sizes[k],
						 DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "irecv %zu: %d", sizes[k], rc);
		}
	}
	TJ_CHECK(rk, tj_wait_all(rk, rr, NSIZES, rst, 20000, NULL) !=
			     DPL_EAGAIN,
		 "receives did not complete");
	TJ_CHECK(rk, tj_wait_all(rk, sr, NSIZES, sst, 20000, NULL) !=
			     DPL_EAGAIN,
		 "sends did not complete");
	for (k = 0; k < NSIZES; k++) {
		long long at = tj_verify(rb[k], sizes[k], peer * 100 + k);
		size_t g;

		TJ_CHECK(rk, rst[k] == 0 && sst[k] == 0,
			 "size %zu: recv %d send %d", sizes[k], rst[k],
			 sst[k]);
		TJ_CHECK(rk, at < 0, "size %zu: byte %lld differs", sizes[k],
			 at);
		for (g = 0; g < GUARD; g++)
			TJ_CHECK(rk, rb[k][sizes[k] + g] == 0xA5,
				 "size %zu: guard byte %zu written", sizes[k],
				 g);
	}
	/* Nobody leaves before both checked (a leaving rank is a failed
	 * peer for the other). */
	tj_barrier(rk);
}

ParameterizedTestParameters(shm_stream, sizes)
{
	static int modes[] = {0, 1};

	return cr_make_param_array(int, modes, 2);
}

ParameterizedTest(int *mode, shm_stream, sizes, .timeout = 90)
{
	struct tj_job job = stream_job(sizes_rank, 80000);

	job.arg = mode;
	cr_log_info("%s receives", *mode ? "unexpected" : "expected");
	shm_run(&job);
	tj_job_free(&job);
}

/* ---- unaligned buffers --------------------------------------------- */

static const size_t ulens[] = {1, 63, 4097, EAGER + 3, MiB + 5};
#define NULENS (sizeof ulens / sizeof ulens[0])
#define NUNAL (NULENS * 7)

/* Every length from every source offset 1..7 to the destination offset
 * 8 - off, each buffer in a slot of its own with a guard after it. */
static void unaligned_rank(struct tj_rank *rk)
{
	dpl_transport *t = rk->t;
	uint32_t peer = 1 - rk->rank;
	unsigned char *sb[NUNAL], *rb[NUNAL], *sall, *rall;
	void *sr = tj_reqs(rk, NUNAL), *rr = tj_reqs(rk, NUNAL);
	int sst[NUNAL], rst[NUNAL];
	size_t k, off, i, stotal = 0, rtotal = 0;

	for (k = 0; k < NULENS; k++) {
		stotal += 7 * (ulens[k] + 8);
		rtotal += 7 * (ulens[k] + 8 + GUARD);
	}
	sall = tj_alloc(rk, stotal);
	rall = tj_alloc(rk, rtotal);
	memset(rall, 0x5A, rtotal);
	for (i = 0, k = 0; k < NULENS; k++)
		for (off = 1; off <= 7; off++, i++) {
			sb[i] = sall;
			rb[i] = rall;
			sall += ulens[k] + 8;
			rall += ulens[k] + 8 + GUARD;
			tj_fill(sb[i] + off, ulens[k], rk->rank + i * 3);
			/* src offset off, dst offset 8 - off */
			TJ_CHECK(rk,
				 dpl_transport_irecv(t, tj_req(rk, rr, i),
						     peer, i, rb[i] + 8 - off,
						     ulens[k],
						     DPL_MEM_HOST) == 0 &&
					 dpl_transport_isend(
						 t, tj_req(rk, sr, i), peer, i,
						 sb[i] + off, ulens[k],
						 DPL_MEM_HOST) == 0,
				 "post %zu", i);
		}
	TJ_CHECK(rk,
		 tj_wait_all(rk, rr, NUNAL, rst, 20000, NULL) != DPL_EAGAIN &&
			 tj_wait_all(rk, sr, NUNAL, sst, 20000, NULL) !=
				 DPL_EAGAIN,
		 "requests did not complete");
	for (i = 0, k = 0; k < NULENS; k++)
		for (off = 1; off <= 7; off++, i++) {
			unsigned char *d = rb[i] + 8 - off;
			size_t g;

			TJ_CHECK(rk, rst[i] == 0 && sst[i] == 0,
				 "len %zu off %zu: %d %d", ulens[k], off,
				 rst[i], sst[i]);
			TJ_CHECK(rk,
				 tj_verify(d, ulens[k], peer + i * 3) < 0,
				 "len %zu off %zu: data", ulens[k], off);
			for (g = 0; g < 8 - off; g++)
				TJ_CHECK(rk, rb[i][g] == 0x5A,
					 "len %zu off %zu: byte before "
					 "written",
					 ulens[k], off);
			for (g = 0; g < GUARD; g++)
				TJ_CHECK(rk, d[ulens[k] + g] == 0x5A,
					 "len %zu off %zu: guard written",
					 ulens[k], off);
		}
	tj_barrier(rk);
}

Test(shm_stream, unaligned_buffers, .timeout = 60)
{
	struct tj_job job = stream_job(unaligned_rank, 50000);

	shm_run(&job);
	tj_job_free(&job);
}

/* ---- ordering ---------------------------------------------------------- */

#define NORDER 1000

/* Rank 0 sends 1000 messages on one tag (sizes cycling through eager and
 * long ones, so long ones come before short ones); rank 1 checks that
 * message i carries index i. */
static void order_rank(struct tj_rank *rk)
{
	static const size_t len[] = {8, 40000, 100, 3 * EAGER, 0, 9000};
	dpl_transport *t = rk->t;
	void *r = tj_reqs(rk, NORDER);
	int *st = tj_alloc(rk, NORDER * sizeof *st);
	unsigned char **b = tj_alloc(rk, NORDER * sizeof *b), *all;
	size_t i, total = 0;
	int rc;

	for (i = 0; i < NORDER; i++)
		total += len[i % 6];
	all = tj_alloc(rk, total);
	for (i = 0; i < NORDER; i++) {
		b[i] = all;
		all += len[i % 6];
		if (rk->rank == 0)
			tj_fill(b[i], len[i % 6], i);
	}
	if (rk->rank == 1) {
		for (i = 0; i < NORDER; i++)
			TJ_CHECK(rk,
				 dpl_transport_irecv(t, tj_req(rk, r, i), 0, 77,
						     b[i], len[i % 6],
						     DPL_MEM_HOST) == 0,
				 "irecv %zu", i);
		tj_flag_set(rk, 0, 1);
	} else {
		tj_flag_wait(rk, 0, 1, 0);
		for (i = 0; i < NORDER; i++) {
			rc = tj_isend(rk, tj_req(rk, r, i), 1, 77, b[i],
				      len[i % 6]);
			TJ_CHECK(rk, rc == 0, "isend %zu: %d", i, rc);
		}
	}
	TJ_CHECK(rk, tj_wait_all(rk, r, NORDER, st, 20000, NULL) !=
			     DPL_EAGAIN,
		 "requests did not complete");
	for (i = 0; i < NORDER; i++) {
		TJ_CHECK(rk, st[i] == 0, "message %zu: status %d", i, st[i]);
		TJ_CHECK(rk,
			 rk->rank == 0 || tj_verify(b[i], len[i % 6], i) < 0,
			 "message %zu arrived out of order or damaged", i);
	}
	tj_barrier(rk);
}

Test(shm_stream, ordering_of_1000_messages, .timeout = 60)
{
	struct tj_job job = stream_job(order_rank, 50000);

	shm_run(&job);
	tj_job_free(&job);
}

/* ---- truncation ------------------------------------------------------- */

/*
 * Rank 0 sends, for a short and a long size L: L bytes into a receive of
 * L/2, L bytes into a receive of 2L, then L bytes into a receive of L.
 * The first two end DPL_ETRUNC on both sides and copy nothing; the third
 * arrives intact.
 */
static void trunc_rank(struct tj_rank *rk)
{
	static const size_t L[] = {100, 3 * MiB};
	dpl_transport *t = rk->t;
	void *r = tj_reqs(rk, 6);
	int st[6], k;
	unsigned char *b[6];

	for (k = 0; k < 6; k++) {
		size_t len = L[k / 3];
		size_t rl = k % 3 == 0 ? len / 2 : k % 3 == 1 ? 2 * len : len;

		b[k] = tj_alloc(rk, 2 * len);
		if (rk->rank == 0) {
			tj_fill(b[k], len, (uint64_t)k);
			TJ_CHECK(rk,
				 dpl_transport_isend(t, tj_req(rk, r, k), 1, 5,
						     b[k], len,
						     DPL_MEM_HOST) == 0,
				 "isend %d", k);
		} else {
			memset(b[k], 0xC3, 2 * len);
			TJ_CHECK(rk,
				 dpl_transport_irecv(t, tj_req(rk, r, k), 0, 5,
						     b[k], rl,
						     DPL_MEM_HOST) == 0,
				 "irecv %d", k);
		}
	}
	tj_wait_all(rk, r, 6, st, 20000, NULL);
	for (k = 0; k < 6; k++) {
		size_t len = L[k / 3], i;
		int want = k % 3 == 2 ? 0 : DPL_ETRUNC;

		TJ_CHECK(rk, st[k] == want,
			 "case %d (len %zu): status %d, want %d", k, len,
			 st[k], want);
		if (rk->rank == 1 && want == DPL_ETRUNC)
			for (i = 0; i < 2 * len; i++)
				TJ_CHECK(rk, b[k][i] == 0xC3,
					 "case %d: truncated receive wrote "
					 "byte %zu",
					 k, i);
		TJ_CHECK(rk,
			 rk->rank == 0 || want != 0 ||
				 tj_verify(b[k], len, (uint64_t)k) < 0,
			 "case %d: data after truncations", k);
	}
	tj_barrier(rk);
}

Test(shm_stream, truncation_both_ways_keeps_endpoint_usable, .timeout = 60)
{
	struct tj_job job = stream_job(trunc_rank, 50000);

	shm_run(&job);
	tj_job_free(&job);
}

/* ---- bidirectional large sends ------------------------------------------ */

#define NBIG 4

static void bidir_rank(struct tj_rank *rk)
{
	size_t len = 16 * MiB;
	dpl_transport *t = rk->t;
	uint32_t peer = 1 - rk->rank;
	void *sr = tj_reqs(rk, NBIG), *rr = tj_reqs(rk, NBIG);
	unsigned char *sb[NBIG], *rb[NBIG];
	int sst[NBIG], rst[NBIG], k;

	for (k = 0; k < NBIG; k++) {
		sb[k] = tj_alloc(rk, len);
		rb[k] = tj_alloc(rk, len);
		tj_fill(sb[k], len, rk->rank * 10u + (uint64_t)k);
	}
	/* Sends first, on both sides, then the receives. */
	for (k = 0; k < NBIG; k++)
		TJ_CHECK(rk,
			 dpl_transport_isend(t, tj_req(rk, sr, k), peer,
					     (uint64_t)k, sb[k], len,
					     DPL_MEM_HOST) == 0,
			 "isend %d", k);
	tj_barrier(rk);
	for (k = 0; k < NBIG; k++)
		TJ_CHECK(rk,
			 dpl_transport_irecv(t, tj_req(rk, rr, k), peer,
					     (uint64_t)k, rb[k], len,
					     DPL_MEM_HOST) == 0,
			 "irecv %d", k);
	TJ_CHECK(rk,
		 tj_wait_all(rk, rr, NBIG, rst, 30000, NULL) != DPL_EAGAIN &&
			 tj_wait_all(rk, sr, NBIG, sst, 30000, NULL) !=
				 DPL_EAGAIN,
		 "deadlock: requests did not complete");
	for (k = 0; k < NBIG; k++) {
		TJ_CHECK(rk, rst[k] == 0 && sst[k] == 0, "message %d: %d %d",
			 k, rst[k], sst[k]);
		TJ_CHECK(rk,
			 tj_verify(rb[k], len, peer * 10u + (uint64_t)k) < 0,
			 "message %d: data", k);
	}
	tj_barrier(rk);
}

Test(shm_stream, bidirectional_4x16MiB_sends_before_receives, .timeout = 90)
{
	struct tj_job job = stream_job(bidir_rank, 80000);

	shm_run(&job);
	tj_job_free(&job);
}
