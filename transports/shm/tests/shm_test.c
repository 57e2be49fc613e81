/*
 * shm_test.c - what shm_test.h adds to test_job.
 */
#include <stdio.h>

#include <criterion/criterion.h>

#include "shm_test.h"

const struct dpl_transport_ops *const O = &dpl_transport_shm;

struct tj_job shm_job(uint32_t n, tj_rank_fn fn, unsigned deadline_ms,
		      const char *opts)
{
	struct tj_job job = {0};

	job.size = n;
	job.mode = TJ_PROCESSES;
	job.meet_kind = TJ_MEET_BOOTSTRAP;
	job.fn = fn;
	job.deadline_ms = deadline_ms;
	job.ops = O;
	job.options = opts;
	return job;
}

void shm_run(struct tj_job *job)
{
	cr_assert_eq(tj_job_run(job), 0, "%s", job->report);
}

void shm_flag_wait_quiet(struct tj_rank *rk, unsigned i, int64_t v)
{
	dpl_transport *t = rk->t;

	rk->t = NULL;
	tj_flag_wait(rk, i, v, 0);
	rk->t = t;
}

int shm_segments(pid_t pid)
{
	char glob[64];

	snprintf(glob, sizeof glob, "dpl-*-p%d", (int)pid);
	return tj_count_shm(glob);
}
