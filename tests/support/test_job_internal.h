/*
 * test_job_internal.h - what the sources of test_job share and its users
 * do not see: the memory of a job, how a rank starts, small helpers.
 */
#ifndef DPL_TEST_JOB_INTERNAL_H
#define DPL_TEST_JOB_INTERNAL_H

#include "test_job.h"

#define TJ_MS 1000000ull /* nanoseconds */

/* The memory a job's ranks share with the test. */
struct tj_shared {
	uint32_t size;
	enum tj_mode mode;
	enum tj_meet kind;   /* resolved: BOOTSTRAP or NAME */
	atomic_uint arrived; /* barrier */
	atomic_uint gen;
	atomic_int abort;    /* a rank failed: everyone gives up */
	atomic_int over;     /* the test stopped supervising */
	_Atomic int64_t flag[TJ_FLAGS];
	char meet[256];
	struct tj_slot slot[TJ_MAX_RANKS];
	size_t bytes;        /* of the whole block */
	size_t user_size;
	size_t user_off;     /* from the start of the block */
};

/* Run rank `rank` of `job` (test_job_rank.c): open when the job says
 * so, job->fn, close; its slot then says TJ_DONE. Returns only then. */
void tj__rank_main(const struct tj_job *job, struct tj_shared *sh,
		   uint32_t rank, uint64_t deadline_ns);

void tj__sleep_us(unsigned us);

static inline size_t tj__round_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

#endif /* DPL_TEST_JOB_INTERNAL_H */
