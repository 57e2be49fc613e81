/*
 * shm_threads.c - ranks as threads of one process: the bootstrap with four
 * threads, and two shm contexts driven from two threads at once (the
 * contract lets different contexts run on different threads), each
 * opened over its own thread's bootstrap handle. Shared by the Criterion
 * test and the plain driver that ThreadSanitizer builds run (Criterion
 * cannot start under TSan), so nothing here uses Criterion.
 */
#include <stdio.h>
#include <string.h>

#include <dpl/bootstrap.h>
#include <dpl/transport.h>
#include <dpl/transport_shm.h>

#include "shm_threads.h"
#include "test_job.h"

#define BIG (3u << 20)

static void bootstrap_thread(struct tj_rank *rk)
{
	struct dpl_bootstrap_params bp = {rk->rank, rk->size, tj_meet(rk),
					  10000};
	dpl_bootstrap *b = NULL;
	uint32_t mine, all[4];
	int k, rc;
	uint32_t r;

	rc = dpl_bootstrap_open(&bp, &b);
	TJ_CHECK(rk, rc == 0, "bootstrap open: %s (%s)", dpl_err_name(rc),
		 dpl_last_error());
	for (k = 0; k < 50; k++) {
		mine = rk->rank * 1000u + (uint32_t)k;
		rc = dpl_bootstrap_allgather(b, &mine, sizeof mine, all);
		TJ_CHECK(rk, rc == 0, "allgather %d: %s (%s)", k,
			 dpl_err_name(rc), dpl_last_error());
		for (r = 0; r < rk->size; r++)
			TJ_CHECK(rk, all[r] == r * 1000u + (uint32_t)k,
				 "allgather %d: %u from rank %u", k, all[r], r);
	}
	dpl_bootstrap_close(b);
}

/* Exchange with the other thread on the context test_job opened. */
static void shm_thread(struct tj_rank *rk)
{
	static const size_t sizes[] = {0, 8, 5000, 70000, BIG};
	uint32_t peer = 1 - rk->rank;
	unsigned char *sb = tj_alloc(rk, BIG), *rb = tj_alloc(rk, BIG);
	void *r = tj_reqs(rk, 2);
	void *sr = tj_req(rk, r, 0), *rr = tj_req(rk, r, 1);
	size_t k, i;
	int rc, round;

	for (round = 0; round < 3; round++)
		for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
			size_t n = sizes[k];

			for (i = 0; i < n; i++)
				sb[i] = (unsigned char)(i * 7 + k + rk->rank);
			memset(rb, 0, n ? n : 1);
			rc = dpl_transport_irecv(rk->t, rr, peer, k, rb, n,
						 DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "irecv %zu: %s", n,
				 dpl_err_name(rc));
			rc = dpl_transport_isend(rk->t, sr, peer, k, sb, n,
						 DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "isend %zu: %s", n,
				 dpl_err_name(rc));
			rc = tj_wait(rk, rr, 0, "the receive");
			TJ_CHECK(rk, rc == 0, "receive %zu: %s", n,
				 dpl_err_name(rc));
			rc = tj_wait(rk, sr, 0, "the send");
			TJ_CHECK(rk, rc == 0, "send %zu: %s", n,
				 dpl_err_name(rc));
			for (i = 0; i < n; i++)
				TJ_CHECK(rk,
					 rb[i] == (unsigned char)(i * 7 + k +
								  peer),
					 "round %d, %zu bytes: byte %zu "
					 "differs",
					 round, n, i);
		}
	/* Both sides must be done before either leaves. */
	tj_barrier(rk);
}

static int run_threads(uint32_t n, tj_rank_fn fn,
		       const struct dpl_transport_ops *ops, const char *opts,
		       char *msg, size_t size)
{
	struct tj_job job = {0};
	int rc;

	job.size = n;
	job.mode = TJ_THREADS;
	job.meet_kind = TJ_MEET_BOOTSTRAP; /* shm needs params.oob */
	job.fn = fn;
	job.ops = ops;
	job.options = opts;
	job.deadline_ms = 30000;
	rc = tj_job_run(&job);
	if (rc != 0)
		snprintf(msg, size, "%s", job.report);
	tj_job_free(&job);
	return rc != 0;
}

int dpl_test_shm_threads(char *msg, size_t size)
{
	msg[0] = '\0';
	if (run_threads(4, bootstrap_thread, NULL, NULL, msg, size) != 0)
		return 1;
	if (run_threads(2, shm_thread, &dpl_transport_shm, NULL, msg,
			size) != 0)
		return 1;
	return run_threads(2, shm_thread, &dpl_transport_shm,
			   "cma=0,ring=64k,eager=1k", msg, size);
}
