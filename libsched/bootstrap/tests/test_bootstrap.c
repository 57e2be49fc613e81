/*
 * test_bootstrap.c - the TCP rendezvous (dpl/bootstrap.h) between forked
 * processes on 127.0.0.1: allgather and barrier results, ranks that never
 * arrive or die, duplicate ranks, mismatched collectives, the environment
 * variables of dpl and torchrun, and descriptor hygiene.
 *
 * The ranks are a job of test_job.h: forked processes that share their
 * results with the test; every job meets at a root on a free loopback
 * port of its own (test_job picks it), so the tests may run in parallel.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <dpl/bootstrap.h>

#include "test_job.h"

#define MAXR 8

struct rank_out {
	int rc;         /* the call the test is about */
	int rc2;        /* a second call, where a test makes one */
	int bad;        /* count of wrong bytes or broken rules seen */
	char msg[512];  /* dpl_last_error() after rc */
	char msg2[512]; /* dpl_last_error() after rc2 */
	char root[128];
};

/* What the ranks of a job share with the test (the job's user memory). */
struct job {
	struct rank_out out[MAXR];
	atomic_int arrive[64];
};

/* The shared memory of the rank's job. */
static struct job *job_of(struct tj_rank *rk)
{
	return tj_user(rk);
}

/*
 * Run `n` ranks of fn as forked processes (ranks in `may_die` may die
 * early), killing what is left after deadline_ms; returns what they
 * shared. The job stays readable until tj_job_free().
 */
static struct job *run_job(struct tj_job *tj, uint32_t n, tj_rank_fn fn,
			   void *arg, unsigned deadline_ms, uint32_t may_die)
{
	tj->size = n;
	tj->fn = fn;
	tj->arg = arg;
	tj->user_size = sizeof(struct job);
	tj->deadline_ms = deadline_ms;
	tj->may_die = may_die;
	tj_job_run(tj);
	cr_assert_not_null(tj_job_user(tj), "%s", tj->report);
	return tj_job_user(tj);
}

/* The job's root port (its meeting point is "127.0.0.1:<port>"). */
static unsigned root_port(const char *meet)
{
	const char *colon = strrchr(meet, ':');

	return colon != NULL ? (unsigned)atoi(colon + 1) : 0;
}

static void save(char *dst, int rc)
{
	snprintf(dst, 512, "%s", rc ? dpl_last_error() : "");
}

static int open_rank(struct tj_rank *rk, uint32_t rank, uint32_t world,
		     uint32_t timeout_ms, dpl_bootstrap **b)
{
	struct dpl_bootstrap_params p;

	memset(&p, 0, sizeof p);
	p.rank = rank;
	p.world_size = world;
	p.root = tj_meet(rk);
	p.timeout_ms = timeout_ms;
	return dpl_bootstrap_open(&p, b);
}

/* The byte rank r puts at offset i of its contribution in round k. */
static unsigned char pattern(uint32_t r, size_t i, unsigned k)
{
	return (unsigned char)(r * 37u + i * 11u + k * 101u + 1u);
}

/* ---- allgather and barrier --------------------------------------- */

static const size_t gather_len[] = {0, 1, 7, 256, DPL_BOOTSTRAP_BLOB_MAX};
#define NGATHER (sizeof gather_len / sizeof gather_len[0])

static void gather_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	static unsigned char mine[DPL_BOOTSTRAP_BLOB_MAX];
	static unsigned char all[4 * DPL_BOOTSTRAP_BLOB_MAX];
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;
	unsigned k;
	uint32_t r;
	size_t i;

	o->rc = open_rank(rk, (uint32_t)idx, 4, 10000, &b);
	save(o->msg, o->rc);
	if (o->rc != 0)
		return;
	if (dpl_bootstrap_rank(b) != (uint32_t)idx ||
	    dpl_bootstrap_world_size(b) != 4)
		o->bad++;
	dpl_bootstrap_root(b, o->root, sizeof o->root);
	for (k = 0; k < NGATHER; k++) {
		size_t len = gather_len[k];

		for (i = 0; i < len; i++)
			mine[i] = pattern((uint32_t)idx, i, k);
		memset(all, 0xEE, sizeof all);
		o->rc2 = dpl_bootstrap_allgather(b, mine, len, all);
		if (o->rc2 != 0) {
			save(o->msg2, o->rc2);
			break;
		}
		for (r = 0; r < 4; r++)
			for (i = 0; i < len; i++)
				o->bad += all[r * len + i] != pattern(r, i, k);
		/* Nothing is written past world * len. */
		for (i = 4 * len; i < 4 * len + 16 && i < sizeof all; i++)
			o->bad += all[i] != 0xEE;
	}
	/* Everyone is still connected until everyone left the barrier. */
	if (o->rc2 == 0)
		o->rc2 = dpl_bootstrap_check(b, NULL);
	if (o->rc2 == 0)
		o->rc2 = dpl_bootstrap_barrier(b);
	save(o->msg2, o->rc2);
	dpl_bootstrap_close(b);
}

Test(bootstrap, allgather_four_ranks, .timeout = 30)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 4, gather_rank, NULL, 20000, 0);
	char want[64];
	int i;

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	snprintf(want, sizeof want, "127.0.0.1:%u", root_port(tj.meet_used));
	for (i = 0; i < 4; i++) {
		cr_expect_eq(j->out[i].rc, 0, "rank %d open: %s", i,
			     j->out[i].msg);
		cr_expect_eq(j->out[i].rc2, 0, "rank %d: %s", i,
			     j->out[i].msg2);
		cr_expect_eq(j->out[i].bad, 0, "rank %d: %d wrong bytes", i,
			     j->out[i].bad);
		cr_expect_str_eq(j->out[i].root, want);
	}
	tj_job_free(&tj);
}

static void barrier_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;
	int k;

	o->rc = open_rank(rk, (uint32_t)idx, 3, 10000, &b);
	save(o->msg, o->rc);
	if (o->rc != 0)
		return;
	for (k = 0; k < 40; k++) {
		/* Stagger the ranks so that early ones really wait. */
		if ((k + idx) % 3 == 0)
			tj_sleep_ms(2);
		atomic_fetch_add(&j->arrive[k], 1);
		o->rc2 = dpl_bootstrap_barrier(b);
		if (o->rc2 != 0) {
			save(o->msg2, o->rc2);
			break;
		}
		/* Nobody leaves before everybody arrived. */
		o->bad += atomic_load(&j->arrive[k]) != 3;
	}
	dpl_bootstrap_close(b);
}

Test(bootstrap, barrier_waits_for_everyone, .timeout = 30)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 3, barrier_rank, NULL, 20000, 0);
	int i;

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	for (i = 0; i < 3; i++) {
		cr_expect_eq(j->out[i].rc, 0, "rank %d: %s", i, j->out[i].msg);
		cr_expect_eq(j->out[i].rc2, 0, "rank %d: %s", i,
			     j->out[i].msg2);
		cr_expect_eq(j->out[i].bad, 0, "rank %d left %d barriers early",
			     i, j->out[i].bad);
	}
	tj_job_free(&tj);
}

static void single_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	struct dpl_bootstrap_params p = {0, 1, "127.0.0.1:0", 1000};
	struct rank_out *o = &j->out[0];
	dpl_bootstrap *b = NULL;
	char small[4];
	char mine[5] = "abcd", all[5] = "";
	uint32_t dead = 0;

	o->rc = dpl_bootstrap_open(&p, &b);
	save(o->msg, o->rc);
	if (o->rc != 0)
		return;
	o->bad += dpl_bootstrap_root(b, small, sizeof small) != DPL_ERANGE;
	o->rc2 = dpl_bootstrap_root(b, o->root, sizeof o->root);
	o->bad += dpl_bootstrap_allgather(b, mine, 5, all) != 0;
	o->bad += memcmp(all, "abcd", 5) != 0;
	o->bad += dpl_bootstrap_barrier(b) != 0;
	o->bad += dpl_bootstrap_check(b, &dead) != 0;
	o->bad += dead != DPL_BOOTSTRAP_NO_RANK;
	dpl_bootstrap_close(b);
}

Test(bootstrap, world_of_one_picks_a_port, .timeout = 10)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 1, single_rank, NULL, 5000, 0);
	unsigned port = 0;

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	cr_assert_eq(j->out[0].rc, 0, "%s", j->out[0].msg);
	cr_expect_eq(j->out[0].bad, 0);
	cr_expect_eq(j->out[0].rc2, (int)strlen(j->out[0].root));
	cr_assert_eq(sscanf(j->out[0].root, "127.0.0.1:%u", &port), 1,
		     "root '%s'", j->out[0].root);
	cr_expect_neq(port, 0u);
	tj_job_free(&tj);
}

/* ---- ranks that do not come, or die -------------------------------- */

static void partial_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;

	if (idx == 1)
		tj_sleep_ms(100); /* rank 0 listens first: it owns the verdict */
	o->rc = open_rank(rk, (uint32_t)idx, 3, 600, &b);
	save(o->msg, o->rc);
	dpl_bootstrap_close(b);
}

Test(bootstrap, rank_that_never_arrives_is_named, .timeout = 20)
{
	struct tj_job tj = {0};
	/* ranks 0 and 1 of 3 */
	struct job *j = run_job(&tj, 2, partial_rank, NULL, 10000, 0);

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	cr_expect_eq(j->out[0].rc, DPL_ETIMEDOUT, "%s", j->out[0].msg);
	cr_expect(strstr(j->out[0].msg, "rank 2 never arrived") != NULL,
		  "rank 0: %s", j->out[0].msg);
	cr_expect_eq(j->out[1].rc, DPL_ETIMEDOUT, "%s", j->out[1].msg);
	cr_expect(strstr(j->out[1].msg, "rank 2 never arrived") != NULL,
		  "rank 1: %s", j->out[1].msg);
	tj_job_free(&tj);
}

static void orphan_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	struct rank_out *o = &j->out[0];
	dpl_bootstrap *b = NULL;

	o->rc = open_rank(rk, 1, 2, 300, &b);
	save(o->msg, o->rc);
	dpl_bootstrap_close(b);
}

Test(bootstrap, absent_root_is_named, .timeout = 20)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 1, orphan_rank, NULL, 10000, 0);
	char want[64];

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	snprintf(want, sizeof want, "root 127.0.0.1:%u (rank 0) did not "
		 "answer rank 1", root_port(tj.meet_used));
	cr_expect_eq(j->out[0].rc, DPL_ETIMEDOUT);
	cr_expect(strstr(j->out[0].msg, want) != NULL, "%s", j->out[0].msg);
	tj_job_free(&tj);
}

/* Rank 2 opens, then dies (*arg 0: _exit, 1: SIGKILL) without close;
 * ranks 0 and 1 then run an allgather, and once more afterwards. */
static void dying_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;
	uint32_t v = 1, all[3], dead = 0;

	o->rc = open_rank(rk, (uint32_t)idx, 3, 5000, &b);
	save(o->msg, o->rc);
	if (o->rc != 0)
		return;
	if (idx == 2) {
		if (*(const int *)rk->arg == 1)
			raise(SIGKILL);
		_exit(0);
	}
	o->rc2 = dpl_bootstrap_allgather(b, &v, sizeof v, all);
	save(o->msg2, o->rc2);
	/* The channel stays failed, with the same cause. */
	o->bad += dpl_bootstrap_allgather(b, &v, sizeof v, all) != o->rc2;
	o->bad += strstr(dpl_last_error(), "rank 2") == NULL;
	/* The check names rank 2 as a value too, on rank 0, which saw it
	 * die, and on rank 1, which rank 0 told. */
	o->bad += dpl_bootstrap_check(b, &dead) != DPL_EPEER;
	o->bad += dead != 2;
	dpl_bootstrap_close(b);
}

static void check_dead_rank_named(int how)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 3, dying_rank, &how, 15000, 1u << 2);
	int i;

	cr_expect(tj.report[0] == '\0', "%s", tj.report);
	for (i = 0; i < 3; i++)
		cr_expect_eq(j->out[i].rc, 0, "rank %d open: %s", i,
			     j->out[i].msg);
	for (i = 0; i < 2; i++) {
		cr_expect_eq(j->out[i].rc2, DPL_EPEER, "rank %d: %d %s", i,
			     j->out[i].rc2, j->out[i].msg2);
		cr_expect(strstr(j->out[i].msg2, "rank 2 died") != NULL,
			  "rank %d: %s", i, j->out[i].msg2);
		cr_expect_eq(j->out[i].bad, 0, "rank %d", i);
	}
	tj_job_free(&tj);
}

Test(bootstrap, rank_that_exits_is_named, .timeout = 30)
{
	check_dead_rank_named(0);
}

Test(bootstrap, rank_killed_is_named, .timeout = 30)
{
	check_dead_rank_named(1);
}

/*
 * Rank 3 stops itself (SIGSTOP) instead of joining a collective; the
 * other ranks join it late by different amounts, rank 0 last. Rank 0
 * times out naming rank 3, and the other ranks, which wait a grace
 * period longer, hear its verdict and name rank 3 too, not rank 0.
 */
static void stopped_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;
	uint32_t v = 1, all[4];

	o->rc = open_rank(rk, (uint32_t)idx, 4, 1000, &b);
	save(o->msg, o->rc);
	if (o->rc != 0)
		return;
	if (idx == 3)
		raise(SIGSTOP); /* killed there by the job's deadline */
	/* Rank 0 begins 60 ms after rank 1, 30 ms after rank 2. */
	tj_sleep_ms(idx == 0 ? 60 : idx == 2 ? 30 : 0);
	o->rc2 = dpl_bootstrap_allgather(b, &v, sizeof v, all);
	save(o->msg2, o->rc2);
	dpl_bootstrap_close(b);
}

Test(bootstrap, rank_stopped_in_a_collective_is_named_by_all, .timeout = 30)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 4, stopped_rank, NULL, 6000, 1u << 3);
	int i;

	for (i = 0; i < 3; i++) {
		cr_expect_eq(j->out[i].rc, 0, "rank %d open: %s", i,
			     j->out[i].msg);
		cr_expect_eq(j->out[i].rc2, DPL_ETIMEDOUT, "rank %d: %d %s", i,
			     j->out[i].rc2, j->out[i].msg2);
		cr_expect(strstr(j->out[i].msg2, "rank 3 did not take part in "
					 "collective 1 within 1000 ms") !=
				  NULL,
			  "rank %d: %s", i, j->out[i].msg2);
	}
	for (i = 1; i < 3; i++)
		cr_expect(strstr(j->out[i].msg2, "(reported by rank 0)") !=
				  NULL,
			  "rank %d: %s", i, j->out[i].msg2);
	tj_job_free(&tj);
}

/* Rank 0 checked while rank 1 was alive (or rank 1 failed to open). */
#define FLAG_CHECKED 0

static void watched_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;
	uint32_t dead = 0;
	int k;

	o->rc = open_rank(rk, (uint32_t)idx, 2, 5000, &b);
	save(o->msg, o->rc);
	if (o->rc != 0) {
		tj_flag_set(rk, FLAG_CHECKED, 1);
		return;
	}
	if (idx == 1) {
		for (k = 0; k < 2000 && tj_flag_get(rk, FLAG_CHECKED) == 0;
		     k++)
			tj_sleep_ms(5);
		raise(SIGKILL);
	}
	o->rc2 = dpl_bootstrap_check(b, &dead); /* rank 1 is alive */
	o->bad += dead != DPL_BOOTSTRAP_NO_RANK;
	tj_flag_set(rk, FLAG_CHECKED, 1);
	for (k = 0; k < 1000; k++) {
		o->rc = dpl_bootstrap_check(b, &dead);
		if (o->rc != 0)
			break;
		tj_sleep_ms(5);
	}
	o->bad += o->rc == DPL_EPEER && dead != 1;
	save(o->msg, o->rc);
	dpl_bootstrap_close(b);
}

Test(bootstrap, check_reports_dead_rank, .timeout = 30)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 2, watched_rank, NULL, 15000, 1u << 1);

	cr_expect(tj.report[0] == '\0', "%s", tj.report);
	cr_expect_eq(j->out[0].rc2, 0, "check while alive");
	cr_expect_eq(j->out[0].rc, DPL_EPEER, "%s", j->out[0].msg);
	cr_expect(strstr(j->out[0].msg, "rank 1") != NULL, "%s",
		  j->out[0].msg);
	cr_expect_eq(j->out[0].bad, 0, "the dead rank as a value");
	tj_job_free(&tj);
}

/* ---- bad collectives and bad joins -------------------------------- */

static void mismatch_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;
	static char mine[DPL_BOOTSTRAP_BLOB_MAX + 1];
	static char all[3 * (DPL_BOOTSTRAP_BLOB_MAX + 1)];

	o->rc = open_rank(rk, (uint32_t)idx, 3, 5000, &b);
	save(o->msg, o->rc);
	if (o->rc != 0)
		return;
	/* Collective 1: rank 2 gives 8 bytes where the others give 4. */
	o->rc2 = dpl_bootstrap_allgather(b, mine, idx == 2 ? 8 : 4, all);
	save(o->msg2, o->rc2);
	dpl_bootstrap_close(b);
}

Test(bootstrap, length_mismatch_fails_everyone, .timeout = 30)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 3, mismatch_rank, NULL, 15000, 0);
	int i;

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	for (i = 0; i < 3; i++) {
		cr_expect_eq(j->out[i].rc, 0, "%s", j->out[i].msg);
		cr_expect_eq(j->out[i].rc2, DPL_EINVAL, "rank %d: %s", i,
			     j->out[i].msg2);
		cr_expect(strstr(j->out[i].msg2, "rank 2 contributed 8 bytes")
				  != NULL, "rank %d: %s", i, j->out[i].msg2);
	}
	tj_job_free(&tj);
}

static void oversize_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;
	static char mine[DPL_BOOTSTRAP_BLOB_MAX + 1];
	static char all[2 * (DPL_BOOTSTRAP_BLOB_MAX + 1)];

	o->rc = open_rank(rk, (uint32_t)idx, 2, 5000, &b);
	save(o->msg, o->rc);
	if (o->rc != 0)
		return;
	o->rc2 = dpl_bootstrap_allgather(b, mine, idx == 1
					 ? DPL_BOOTSTRAP_BLOB_MAX + 1 : 1,
					 all);
	save(o->msg2, o->rc2);
	dpl_bootstrap_close(b);
}

Test(bootstrap, oversize_blob_fails_everyone, .timeout = 30)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 2, oversize_rank, NULL, 15000, 0);

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	cr_expect_eq(j->out[1].rc2, DPL_EINVAL, "%s", j->out[1].msg2);
	cr_expect(strstr(j->out[1].msg2, "4097 bytes") != NULL, "%s",
		  j->out[1].msg2);
	cr_expect_eq(j->out[0].rc2, DPL_EINVAL, "%s", j->out[0].msg2);
	cr_expect(strstr(j->out[0].msg2, "rank 1 failed") != NULL, "%s",
		  j->out[0].msg2);
	tj_job_free(&tj);
}

static void twin_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	static const uint32_t rank[] = {0, 1, 1, 2};
	static const int delay[] = {0, 20, 200, 400};
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;

	tj_sleep_ms(delay[idx]);
	o->rc = open_rank(rk, rank[idx], 3, 5000, &b);
	save(o->msg, o->rc);
	if (o->rc == 0)
		o->rc2 = dpl_bootstrap_barrier(b);
	dpl_bootstrap_close(b);
}

Test(bootstrap, rank_arriving_twice_is_busy, .timeout = 30)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 4, twin_rank, NULL, 15000, 0);

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	cr_expect_eq(j->out[0].rc, 0, "%s", j->out[0].msg);
	cr_expect_eq(j->out[1].rc, 0, "%s", j->out[1].msg);
	cr_expect_eq(j->out[3].rc, 0, "%s", j->out[3].msg);
	cr_expect_eq(j->out[2].rc, DPL_EBUSY, "%s", j->out[2].msg);
	cr_expect(strstr(j->out[2].msg, "rank 1 arrived twice") != NULL, "%s",
		  j->out[2].msg);
	cr_expect_eq(j->out[0].rc2, 0);
	cr_expect_eq(j->out[1].rc2, 0);
	cr_expect_eq(j->out[3].rc2, 0);
	tj_job_free(&tj);
}

static void wrong_world_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;

	if (idx == 1)
		tj_sleep_ms(50);
	o->rc = open_rank(rk, (uint32_t)idx, idx == 0 ? 2 : 3, 3000, &b);
	save(o->msg, o->rc);
	dpl_bootstrap_close(b);
}

Test(bootstrap, world_size_disagreement_fails_both, .timeout = 20)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 2, wrong_world_rank, NULL, 10000, 0);
	int i;

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	for (i = 0; i < 2; i++) {
		cr_expect_eq(j->out[i].rc, DPL_EINVAL, "rank %d: %s", i,
			     j->out[i].msg);
		cr_expect(strstr(j->out[i].msg, "rank 1 says the world has 3 "
				 "ranks, rank 0 says 2") != NULL,
			  "rank %d: %s", i, j->out[i].msg);
	}
	tj_job_free(&tj);
}

Test(bootstrap, bad_parameters_are_named, .timeout = 10)
{
	static const char *roots[] = {
		"127.0.0.1", "[::1", "[::1]", ":80", "h:", "h:65536", "h:-1",
		"::1:80", "h:1x", "h:0123456",
	};
	struct dpl_bootstrap_params p = {0, 2, "127.0.0.1:1", 100};
	dpl_bootstrap *b = (dpl_bootstrap *)&p;
	size_t i;

	cr_expect_eq(dpl_bootstrap_open(NULL, &b), DPL_EINVAL);
	p.world_size = 0;
	cr_expect_eq(dpl_bootstrap_open(&p, &b), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "world size 0") != NULL, "%s",
		  dpl_last_error());
	p.world_size = 2;
	p.rank = 2;
	cr_expect_eq(dpl_bootstrap_open(&p, &b), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "rank 2") != NULL, "%s",
		  dpl_last_error());
	p.rank = 1;
	for (i = 0; i < sizeof roots / sizeof roots[0]; i++) {
		p.root = roots[i];
		cr_expect_eq(dpl_bootstrap_open(&p, &b), DPL_EINVAL, "%s",
			     roots[i]);
		cr_expect(strstr(dpl_last_error(), roots[i]) != NULL, "%s",
			  dpl_last_error());
	}
	p.root = "127.0.0.1:0";
	cr_expect_eq(dpl_bootstrap_open(&p, &b), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "port 0") != NULL, "%s",
		  dpl_last_error());
	/* Failures write no output. */
	cr_expect_eq(b, (dpl_bootstrap *)&p);
	cr_expect_eq(dpl_bootstrap_allgather(NULL, NULL, 0, NULL), DPL_EINVAL);
	cr_expect_eq(dpl_bootstrap_check(NULL, NULL), DPL_EINVAL);
	dpl_bootstrap_close(NULL);
}

/* ---- environment --------------------------------------------------- */

static const char *const env_names[] = {
	"DPL_RANK", "DPL_WORLD_SIZE", "DPL_ROOT", "RANK", "WORLD_SIZE",
	"MASTER_ADDR", "MASTER_PORT",
};

static void env_clear(void)
{
	size_t i;

	for (i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
		unsetenv(env_names[i]);
}

struct env_case {
	const char *set[8]; /* NAME=VALUE, NULL-terminated */
	const char *named;  /* must appear in the message */
};

Test(bootstrap, malformed_environment_names_the_variable, .timeout = 10)
{
	static const struct env_case cases[] = {
		{{NULL}, "DPL_RANK"},
		{{"DPL_RANK=x", "DPL_WORLD_SIZE=2", NULL}, "DPL_RANK='x'"},
		{{"DPL_RANK=1", NULL}, "DPL_WORLD_SIZE"},
		{{"DPL_RANK=1", "DPL_WORLD_SIZE=0", NULL},
		 "DPL_WORLD_SIZE='0'"},
		{{"DPL_RANK=1", "DPL_WORLD_SIZE= 2", NULL},
		 "DPL_WORLD_SIZE=' 2'"},
		{{"DPL_RANK=3", "DPL_WORLD_SIZE=2", NULL},
		 "DPL_RANK=3 is not below DPL_WORLD_SIZE=2"},
		{{"RANK=-1", "WORLD_SIZE=2", NULL}, "RANK='-1'"},
		{{"RANK=0", "WORLD_SIZE=99999999999", NULL}, "WORLD_SIZE"},
		{{"DPL_RANK=0", "DPL_WORLD_SIZE=2", NULL}, "DPL_ROOT"},
		{{"DPL_RANK=1", "DPL_WORLD_SIZE=2", "DPL_ROOT=nocolon", NULL},
		 "nocolon"},
		{{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
		  "MASTER_PORT=abc", NULL}, "MASTER_PORT='abc'"},
		{{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
		  "MASTER_PORT=70000", NULL}, "MASTER_PORT='70000'"},
		{{"RANK=1", "WORLD_SIZE=2", "MASTER_PORT=29500", NULL},
		 "MASTER_ADDR"},
		{{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", NULL},
		 "MASTER_PORT"},
	};
	size_t i, k;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		dpl_bootstrap *b = NULL;
		int rc;

		env_clear();
		for (k = 0; cases[i].set[k] != NULL; k++)
			cr_assert_eq(putenv((char *)cases[i].set[k]), 0);
		rc = dpl_bootstrap_open_env(200, &b);
		cr_expect_eq(rc, DPL_EINVAL, "case %zu: %d %s", i, rc,
			     dpl_last_error());
		cr_expect(strstr(dpl_last_error(), cases[i].named) != NULL,
			  "case %zu: '%s' does not name %s", i,
			  dpl_last_error(), cases[i].named);
		cr_expect_null(b, "case %zu", i);
	}
	env_clear();
}

/* The rank read alone: each variable on its own (DPL_* first), the same
 * rules as the join, nothing stored on an error. */
Test(bootstrap, env_rank_reads_what_the_join_would, .timeout = 10)
{
	static const struct {
		const char *set[5];
		int rc;
		uint32_t rank, size; /* on success */
		const char *named;   /* on an error: in the message */
	} cases[] = {
		{{NULL}, DPL_ENOENT, 0, 0, "neither DPL_RANK nor RANK"},
		{{"WORLD_SIZE=4", NULL}, DPL_ENOENT, 0, 0, "RANK"},
		{{"DPL_RANK=2", "DPL_WORLD_SIZE=3", NULL}, 0, 2, 3, NULL},
		{{"RANK=1", "WORLD_SIZE=2", NULL}, 0, 1, 2, NULL},
		{{"DPL_RANK=1", "DPL_WORLD_SIZE=2", "RANK=5", "WORLD_SIZE=8",
		  NULL}, 0, 1, 2, NULL},
		{{"DPL_RANK=3", "WORLD_SIZE=4", NULL}, 0, 3, 4, NULL},
		{{"RANK=0", "DPL_WORLD_SIZE=65536", NULL}, 0, 0, 65536, NULL},
		{{"DPL_RANK=0", NULL}, DPL_EINVAL, 0, 0,
		 "DPL_RANK is set but neither DPL_WORLD_SIZE nor WORLD_SIZE"},
		{{"DPL_RANK=+1", "DPL_WORLD_SIZE=2", NULL}, DPL_EINVAL, 0, 0,
		 "DPL_RANK='+1' is not a rank"},
		{{"RANK=1", "WORLD_SIZE=2_0", NULL}, DPL_EINVAL, 0, 0,
		 "WORLD_SIZE='2_0' is not a world size (1..65536)"},
		{{"RANK=0", "WORLD_SIZE=65537", NULL}, DPL_EINVAL, 0, 0,
		 "WORLD_SIZE='65537'"},
		{{"DPL_RANK=2", "WORLD_SIZE=2", NULL}, DPL_EINVAL, 0, 0,
		 "DPL_RANK=2 is not below WORLD_SIZE=2"},
	};
	size_t i, k;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint32_t r = 77, n = 77;
		int rc;

		env_clear();
		for (k = 0; cases[i].set[k] != NULL; k++)
			cr_assert_eq(putenv((char *)cases[i].set[k]), 0);
		rc = dpl_bootstrap_env_rank(&r, &n);
		cr_expect_eq(rc, cases[i].rc, "case %zu: %d %s", i, rc,
			     dpl_last_error());
		if (cases[i].rc == 0) {
			cr_expect_eq(r, cases[i].rank, "case %zu", i);
			cr_expect_eq(n, cases[i].size, "case %zu", i);
			continue;
		}
		cr_expect(r == 77 && n == 77, "case %zu: stored on error", i);
		cr_expect(strstr(dpl_last_error(), cases[i].named) != NULL,
			  "case %zu: '%s' does not name %s", i,
			  dpl_last_error(), cases[i].named);
	}
	env_clear();
	cr_expect_eq(dpl_bootstrap_env_rank(NULL, &(uint32_t){0}), DPL_EINVAL);
	cr_expect_eq(dpl_bootstrap_env_rank(&(uint32_t){0}, NULL), DPL_EINVAL);
}

static void torchrun_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	struct rank_out *o = &j->out[idx];
	dpl_bootstrap *b = NULL;
	char port[16], rank[16];
	uint32_t v = 100u + (uint32_t)idx, all[2] = {0, 0};

	env_clear();
	snprintf(rank, sizeof rank, "%d", idx);
	snprintf(port, sizeof port, "%u", root_port(tj_meet(rk)) - 1);
	setenv("RANK", rank, 1);
	setenv("WORLD_SIZE", "2", 1);
	setenv("MASTER_ADDR", "127.0.0.1", 1);
	setenv("MASTER_PORT", port, 1);
	o->rc = dpl_bootstrap_open_env(5000, &b);
	save(o->msg, o->rc);
	if (o->rc != 0)
		return;
	dpl_bootstrap_root(b, o->root, sizeof o->root);
	o->rc2 = dpl_bootstrap_allgather(b, &v, sizeof v, all);
	o->bad += all[0] != 100 || all[1] != 101;
	dpl_bootstrap_close(b);
}

Test(bootstrap, torchrun_environment_uses_master_port_plus_one,
     .timeout = 20)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 2, torchrun_rank, NULL, 10000, 0);
	char want[64];
	int i;

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	snprintf(want, sizeof want, "127.0.0.1:%u", root_port(tj.meet_used));
	for (i = 0; i < 2; i++) {
		cr_expect_eq(j->out[i].rc, 0, "rank %d: %s", i, j->out[i].msg);
		cr_expect_eq(j->out[i].rc2, 0);
		cr_expect_eq(j->out[i].bad, 0);
		cr_expect_str_eq(j->out[i].root, want);
	}
	tj_job_free(&tj);
}

Test(bootstrap, dpl_variables_win_over_torchrun, .timeout = 10)
{
	dpl_bootstrap *b = NULL;
	char root[64];
	unsigned port = 0;

	env_clear();
	setenv("DPL_RANK", "0", 1);
	setenv("DPL_WORLD_SIZE", "1", 1);
	setenv("DPL_ROOT", "127.0.0.1:0", 1);
	setenv("RANK", "7", 1);
	setenv("WORLD_SIZE", "x", 1);
	setenv("MASTER_ADDR", "192.0.2.99", 1);
	setenv("MASTER_PORT", "bad", 1);
	cr_assert_eq(dpl_bootstrap_open_env(1000, &b), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(dpl_bootstrap_rank(b), 0u);
	cr_expect_eq(dpl_bootstrap_world_size(b), 1u);
	cr_assert(dpl_bootstrap_root(b, root, sizeof root) > 0);
	cr_expect_eq(sscanf(root, "127.0.0.1:%u", &port), 1, "%s", root);
	cr_expect_neq(port, 0u);
	dpl_bootstrap_close(b);
	env_clear();
}

/* ---- descriptors --------------------------------------------------- */

static void churn_rank(struct tj_rank *rk)
{
	struct job *j = job_of(rk);
	int idx = (int)rk->rank;
	struct rank_out *o = &j->out[idx];
	int before = tj_count_fds(), k;

	for (k = 0; k < 30; k++) {
		dpl_bootstrap *b = NULL;

		o->rc = open_rank(rk, (uint32_t)idx, 2, 5000, &b);
		if (o->rc == 0)
			o->rc = dpl_bootstrap_barrier(b);
		save(o->msg, o->rc);
		dpl_bootstrap_close(b);
		if (o->rc != 0)
			return;
	}
	o->bad = tj_count_fds() - before;
}

Test(bootstrap, open_close_churn_leaks_no_descriptor, .timeout = 60)
{
	struct tj_job tj = {0};
	struct job *j = run_job(&tj, 2, churn_rank, NULL, 50000, 0);
	int i;

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	for (i = 0; i < 2; i++) {
		cr_expect_eq(j->out[i].rc, 0, "rank %d: %s", i, j->out[i].msg);
		cr_expect_eq(j->out[i].bad, 0, "rank %d: %d more descriptors",
			     i, j->out[i].bad);
	}
	tj_job_free(&tj);
}
