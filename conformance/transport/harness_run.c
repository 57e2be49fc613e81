/*
 * harness_run.c - a job of the battery: a job of test_job whose ranks
 * open the table under test the registration's way (unless the test
 * opens itself), run the test's function, meet the ranks that are to
 * survive and close; its report becomes the Criterion test's failure.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <string.h>

#include "harness_internal.h"

#define CONF_STUCK_FIRST_MS 3000u

/* What every rank of a battery job runs; rk->arg is the conf_job. */
static void battery_rank(struct tj_rank *rk)
{
	const struct conf_job *job = rk->arg;
	struct conf_ext ext;
	uint64_t full;
	uint32_t n;

	memset(&ext, 0, sizeof ext);
	ext.timeout_ms = job->timeout_ms ? job->timeout_ms : conf_timeout_ms();
	rk->ext = &ext;
	rk->arg = job->arg;
	rk->ops = conf_ops();
	if (!job->no_open)
		conf_open(rk);
	tj_step(rk, "running");
	/* A rank stuck in the test reaches its deadline CONF_STUCK_FIRST_MS
	 * before a rank that finished it gives up waiting in the final
	 * barrier, so the report names the stuck rank, not the healthy
	 * one. */
	full = rk->deadline_ns;
	if (full > dpl_clock_ns() + 2 * CONF_STUCK_FIRST_MS * 1000000u)
		rk->deadline_ns = full - CONF_STUCK_FIRST_MS * 1000000u;
	job->fn(rk);
	rk->deadline_ns = full;
	conf__oob_check(rk);
	if (rk->t != NULL) {
		/* Nobody closes while a peer may still need its progress. */
		n = (uint32_t)__builtin_popcount(job->may_die &
						 ((1u << rk->size) - 1));
		tj_step(rk, "final barrier");
		tj_barrier_n(rk, rk->size - n);
		conf_close(rk);
	}
	rk->ext = NULL;
}

void conf_run(struct conf_job *job)
{
	const struct dpl_transport_ops *ops = conf_ops();
	struct tj_job tj;
	char report[sizeof tj.report];
	const struct tj_slot *s;
	uint32_t i;
	int rc;

	cr_assert(job->size >= 1 && job->size <= CONF_MAX_RANKS,
		  "harness: job of %u ranks", job->size);
	memset(&tj, 0, sizeof tj);
	tj.size = job->size;
	tj.mode = conf_threads() ? TJ_THREADS : TJ_PROCESSES;
	tj.meet_kind = conf_boot_kind() == CONF_BOOT_NAME ? TJ_MEET_NAME
							  : TJ_MEET_BOOTSTRAP;
	tj.fn = battery_rank;
	tj.arg = job;
	tj.user_size = CONF_BLOB;
	tj.deadline_ms = (job->deadline_s ? job->deadline_s : 60) * 1000u;
	tj.may_die = job->may_die;
	tj.meet = job->boot;
	tj.check = conf_check_code;
	rc = tj_job_run(&tj);
	snprintf(job->boot_used, sizeof job->boot_used, "%s", tj.meet_used);
	for (i = 0; i < job->size; i++) {
		s = tj_job_slot(&tj, i);
		if (s == NULL)
			continue;
		memcpy(job->val[i], s->val, sizeof job->val[i]);
		if (s->note[0] != '\0')
			cr_log_info("%s rank %u: %s", ops->name, i, s->note);
	}
	snprintf(report, sizeof report, "%s", tj.report);
	tj_job_free(&tj);
	if (rc != 0)
		cr_assert_fail("%s (bootstrap '%s'):\n%s", ops->name,
			       job->boot_used, report);
}
