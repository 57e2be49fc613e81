/*
 * test_test_job.c - jobs of ranks (test_job.h) as processes and as
 * threads: ranks that finish, a failing rank reported with file:line, a
 * stuck rank killed (or, as a thread, left) at the deadline, the watch
 * killing and stopping a rank, the host's part of opening a transport
 * (dpl's bootstrap between processes; the in-process and shared-memory
 * transports where they are built), the bounded waits, patterns and
 * counters.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "test_job.h"

#ifdef TJ_TEST_INPROC
#include <dpl/transport_inproc.h>
#endif
#ifdef TJ_TEST_SHM
#include <dpl/transport_shm.h>
#endif

/* Shared user memory of the jobs below. */
struct area {
	uint32_t mine[TJ_MAX_RANKS];
	int line;        /* where rank 1 failed */
	pid_t seen_pid;  /* what the watch saw */
	int signal_rc;   /* what tj_job_signal said */
};

#define FLAG_READY 0
#define FLAG_KILLED 1
#define FLAG_NEVER 2

static void expect_in(const char *hay, const char *needle)
{
	cr_expect(strstr(hay, needle) != NULL, "'%s' not in:\n%s", needle,
		  hay);
}

/* ---- ranks that finish ------------------------------------------- */

static void finish_rank(struct tj_rank *rk)
{
	struct area *a = tj_user(rk);
	uint32_t r;

	TJ_CHECK(rk, a != NULL, "no user memory");
	tj_step(rk, "writing my number");
	a->mine[rk->rank] = 100 + rk->rank;
	rk->val[0] = rk->rank * 2.5;
	tj_note(rk, "rank %u of %u", rk->rank, rk->size);
	tj_barrier(rk);
	for (r = 0; r < rk->size; r++)
		TJ_CHECK(rk, a->mine[r] == 100 + r, "rank %u wrote %u", r,
			 a->mine[r]);
	if (rk->rank == 0)
		tj_flag_set(rk, FLAG_READY, 7);
	TJ_CHECK(rk, tj_flag_wait(rk, FLAG_READY, 7, 0) == 0, "flag");
	TJ_CHECK(rk, tj_flag_wait(rk, FLAG_NEVER, 1, 20) == DPL_ETIMEDOUT,
		 "a flag never set was seen");
	tj_barrier(rk);
}

static void run_finish(enum tj_mode mode)
{
	struct tj_job job = {.size = 4, .mode = mode, .fn = finish_rank,
			     .user_size = sizeof(struct area),
			     .deadline_ms = 20000};
	uint32_t r;

	cr_assert_eq(tj_job_run(&job), 0, "%s", job.report);
	cr_expect_str_eq(job.report, "");
	cr_expect(!job.timed_out);
	cr_expect_eq(tj_job_flag(&job, FLAG_READY), 7);
	for (r = 0; r < 4; r++) {
		const struct tj_slot *s = tj_job_slot(&job, r);
		char note[64];

		cr_assert_not_null(s);
		cr_expect_eq(atomic_load(&s->state), TJ_DONE);
		cr_expect_eq(tj_job_exit(&job, r), 0);
		cr_expect_eq(s->val[0], r * 2.5);
		snprintf(note, sizeof note, "rank %u of 4", r);
		cr_expect_str_eq(s->note, note);
		cr_expect_eq(((struct area *)tj_job_user(&job))->mine[r],
			     100 + r);
		cr_expect_eq(s->pid != 0, mode == TJ_PROCESSES);
	}
	if (mode == TJ_PROCESSES)
		cr_expect(strncmp(job.meet_used, "127.0.0.1:", 10) == 0, "%s",
			  job.meet_used);
	else
		cr_expect(strncmp(job.meet_used, "dpltj-", 6) == 0, "%s",
			  job.meet_used);
	tj_job_free(&job);
	tj_job_free(&job); /* twice is a no-op */
	cr_expect_null(tj_job_slot(&job, 0));
}

Test(test_job, processes_finish, .timeout = 30)
{
	run_finish(TJ_PROCESSES);
}

Test(test_job, threads_finish, .timeout = 30)
{
	run_finish(TJ_THREADS);
}

Test(test_job, bad_jobs_are_refused)
{
	struct tj_job job = {.size = 0, .fn = finish_rank};

	cr_expect_eq(tj_job_run(&job), DPL_EINVAL);
	expect_in(job.report, "a job of 0 ranks");
	job.size = TJ_MAX_RANKS + 1;
	cr_expect_eq(tj_job_run(&job), DPL_EINVAL);
	job.size = 2;
	job.fn = NULL;
	cr_expect_eq(tj_job_run(&job), DPL_EINVAL);
	expect_in(job.report, "no rank function");
	tj_job_free(&job);
}

/* ---- a failing rank ---------------------------------------------- */

static void failing_rank(struct tj_rank *rk)
{
	struct area *a = tj_user(rk);

	tj_step(rk, "before the failure");
	if (rk->rank == 1) {
		a->line = __LINE__; TJ_CHECK(rk, rk->size == 99, "boom: %u ranks", rk->size);
	}
	tj_step(rk, "waiting for rank 1");
	tj_barrier(rk); /* rank 1 never comes: the others give up */
}

static void run_failing(enum tj_mode mode)
{
	struct tj_job job = {.size = 3, .mode = mode, .fn = failing_rank,
			     .user_size = sizeof(struct area),
			     .deadline_ms = 20000};
	const struct tj_slot *s;
	char want[128];
	uint64_t t0 = dpl_clock_ns();

	cr_assert_eq(tj_job_run(&job), 1, "%s", job.report);
	cr_expect_lt(dpl_clock_ns() - t0, 10000000000ull,
		     "the others did not give up soon");
	snprintf(want, sizeof want, "rank 1: test_test_job.c:%d: boom: 3 "
		 "ranks",
		 ((struct area *)tj_job_user(&job))->line);
	cr_expect(strncmp(job.report, want, strlen(want)) == 0,
		  "report:\n%s\nwanted first: %s", job.report, want);
	expect_in(job.report, "(rank 0 gave up while in a barrier, waiting "
		  "for rank 1");
	expect_in(job.report, "another rank failed; last step: waiting for "
		  "rank 1)");
	expect_in(job.report, "(rank 2 gave up");
	s = tj_job_slot(&job, 1);
	cr_expect_eq(atomic_load(&s->state), TJ_FAILED);
	cr_expect_str_eq(s->step, "before the failure");
	cr_expect_eq(tj_job_exit(&job, 1), 1);
	cr_expect_eq(atomic_load(&tj_job_slot(&job, 0)->state), TJ_GAVE_UP);
	cr_expect(!job.timed_out);
	tj_job_free(&job);
}

Test(test_job, failing_process_is_named_with_file_line, .timeout = 30)
{
	run_failing(TJ_PROCESSES);
}

Test(test_job, failing_thread_is_named_with_file_line, .timeout = 30)
{
	run_failing(TJ_THREADS);
}

/* ---- stuck ranks --------------------------------------------------- */

static void stuck_rank(struct tj_rank *rk)
{
	if (rk->rank != 1)
		return;
	tj_step(rk, "sleeping outside any wait");
	for (;;)
		tj_sleep_ms(100);
}

Test(test_job, stuck_process_is_killed_at_the_deadline, .timeout = 30)
{
	struct tj_job job = {.size = 2, .fn = stuck_rank,
			     .deadline_ms = 1500};
	uint64_t t0 = dpl_clock_ns(), dt;

	cr_assert_eq(tj_job_run(&job), 1, "%s", job.report);
	dt = dpl_clock_ns() - t0;
	cr_expect(dt >= 1400000000ull && dt < 6000000000ull,
		  "returned after %.3f s", (double)dt / 1e9);
	cr_expect(job.timed_out);
	cr_expect_str_eq(job.report,
			 "rank 1: killed by signal 9 (Killed) at the job's "
			 "deadline of 1500 ms; last step: sleeping outside "
			 "any wait");
	cr_expect_eq(tj_job_exit(&job, 1), -SIGKILL);
	cr_expect_eq(tj_job_slot(&job, 1)->cut, TJ_CUT_DEADLINE);
	cr_expect_eq(tj_job_exit(&job, 0), 0);
	tj_job_free(&job);
}

static void waiting_rank(struct tj_rank *rk)
{
	if (rk->rank == 1) {
		tj_step(rk, "waiting for a flag nobody sets");
		tj_flag_wait(rk, FLAG_NEVER, 1, 0);
	}
}

/* A rank stuck in a wait fails itself before the deadline. */
static void run_waiting(enum tj_mode mode)
{
	struct tj_job job = {.size = 2, .mode = mode, .fn = waiting_rank,
			     .deadline_ms = 1200};

	cr_assert_eq(tj_job_run(&job), 1, "%s", job.report);
	cr_expect_str_eq(job.report,
			 "rank 1: deadline passed while waiting for flag 2 "
			 "to reach 1 (step: waiting for a flag nobody sets)");
	cr_expect(!job.timed_out);
	tj_job_free(&job);
}

static void late_rank(struct tj_rank *rk)
{
	if (rk->rank == 2) {
		tj_step(rk, "late");
		tj_flag_wait(rk, FLAG_NEVER, 1, 0);
	}
	tj_barrier(rk);
}

/* The ranks waiting in a barrier name the one that never came (and
 * not each other). */
static void run_late(enum tj_mode mode)
{
	struct tj_job job = {.size = 3, .mode = mode, .fn = late_rank,
			     .deadline_ms = 1200};

	cr_assert_eq(tj_job_run(&job), 1, "%s", job.report);
	/* Whichever of them stops first, by its deadline or on the
	 * others' failure, says whom it waited for. */
	expect_in(job.report, "in a barrier, waiting for rank 2");
	cr_expect_null(strstr(job.report, "in a barrier, waiting for rank 0"),
		       "%s", job.report);
	cr_expect_null(strstr(job.report, "in a barrier, waiting for rank 1"),
		       "%s", job.report);
	tj_job_free(&job);
}

Test(test_job, a_barrier_names_the_rank_that_never_came, .timeout = 30)
{
	run_late(TJ_PROCESSES);
	run_late(TJ_THREADS);
}

Test(test_job, waiting_process_fails_at_its_deadline, .timeout = 30)
{
	run_waiting(TJ_PROCESSES);
}

Test(test_job, waiting_thread_fails_at_its_deadline, .timeout = 30)
{
	run_waiting(TJ_THREADS);
}

static void sleepy_thread(struct tj_rank *rk)
{
	if (rk->rank == 0)
		return;
	tj_step(rk, "a long sleep");
	tj_sleep_ms(3000);
}

Test(test_job, stuck_thread_is_reported_at_the_deadline, .timeout = 30)
{
	struct tj_job job = {.size = 2, .mode = TJ_THREADS,
			     .fn = sleepy_thread, .deadline_ms = 500};

	cr_assert_eq(tj_job_run(&job), 1, "%s", job.report);
	cr_expect(job.timed_out);
	cr_expect_str_eq(job.report,
			 "rank 1: still running at the job's deadline of "
			 "500 ms (a thread cannot be killed); last step: a "
			 "long sleep");
	cr_expect_eq(tj_job_exit(&job, 1), INT_MIN);
	cr_expect_eq(tj_job_exit(&job, 0), 0);
	cr_expect_eq(tj_job_signal(&job, 1, SIGKILL), DPL_ENOTSUP);
	tj_job_free(&job); /* leaves the memory to the sleeping thread */
	cr_expect_null(tj_job_slot(&job, 0));
}

/* ---- the watch ----------------------------------------------------- */

static void victim_rank(struct tj_rank *rk)
{
	if (rk->rank == 1) {
		tj_step(rk, "waiting to be killed");
		tj_flag_set(rk, FLAG_READY, 1);
		for (;;)
			tj_sleep_ms(10);
	}
	tj_flag_wait(rk, FLAG_KILLED, 1, 0);
	tj_step(rk, "after the kill");
}

static void kill_watch(struct tj_job *job)
{
	struct area *a = tj_job_user(job);

	if (!tj_job_flag_wait(job, FLAG_READY, 1, 10000))
		return;
	a->seen_pid = tj_job_pid(job, 1);
	/* A stopped process still dies of SIGKILL. */
	a->signal_rc = tj_job_signal(job, 1, SIGSTOP);
	tj_sleep_ms(20);
	if (a->signal_rc == 0)
		a->signal_rc = tj_job_signal(job, 1, SIGKILL);
	if (tj_job_ended(job, 1, 10000))
		tj_job_flag_set(job, FLAG_KILLED, 1);
	/* The harness never signals a reaped rank. */
	if (tj_job_signal(job, 1, SIGKILL) != DPL_EINVAL)
		a->signal_rc = -12345;
	if (tj_job_pid(job, 1) != 0)
		a->signal_rc = -54321;
}

static void run_victim(uint32_t may_die)
{
	struct tj_job job = {.size = 3, .fn = victim_rank,
			     .user_size = sizeof(struct area),
			     .watch = kill_watch, .may_die = may_die,
			     .deadline_ms = 20000};
	const struct tj_slot *s;
	struct area *a;
	int rc = tj_job_run(&job);

	a = tj_job_user(&job);
	s = tj_job_slot(&job, 1);
	cr_expect_eq(a->signal_rc, 0);
	cr_expect_neq(a->seen_pid, 0);
	cr_expect_eq(a->seen_pid, s->pid);
	cr_expect_eq(tj_job_exit(&job, 1), -SIGKILL);
	cr_expect_eq(s->cut, TJ_CUT_WATCH);
	cr_expect_eq(tj_job_flag(&job, FLAG_KILLED), 1);
	if (may_die) {
		cr_expect_eq(rc, 0, "%s", job.report);
		cr_expect_eq(tj_job_exit(&job, 0), 0);
		cr_expect_eq(tj_job_exit(&job, 2), 0);
		cr_expect_str_eq(tj_job_slot(&job, 0)->step, "after the kill");
	} else {
		cr_expect_eq(rc, 1);
		cr_expect(strncmp(job.report,
				  "rank 1: killed by signal 9 (Killed), sent "
				  "by the watch; last step: waiting to be "
				  "killed",
				  60) == 0,
			  "%s", job.report);
	}
	tj_job_free(&job);
}

Test(test_job, watch_kills_a_rank_that_may_die, .timeout = 30)
{
	run_victim(1u << 1);
}

Test(test_job, watch_kill_of_another_rank_is_reported, .timeout = 30)
{
	run_victim(0);
}

/* ---- the host's part of opening ------------------------------------ */

static void bootstrap_rank(struct tj_rank *rk)
{
	struct dpl_transport_params p;
	uint32_t mine = 1000 + rk->rank, all[4] = {0, 0, 0, 0};
	struct tj_host h;
	int rc;

	memset(&p, 0, sizeof p);
	p.rank = rk->rank;
	p.world_size = rk->size;
	rc = tj_host_join(rk, NULL, 10000, &p, &h);
	TJ_CHECK(rk, rc == 0, "join: %s: %s", dpl_err_name(rc),
		 dpl_last_error());
	TJ_CHECK(rk, p.oob == &h.oob && p.world == NULL && h.b != NULL,
		 "the params do not point to the bootstrap");
	rc = p.oob->allgather(p.oob->user, &mine, sizeof mine, all);
	TJ_CHECK(rk, rc == 0, "allgather: %s", dpl_last_error());
	for (uint32_t r = 0; r < rk->size; r++)
		TJ_CHECK(rk, all[r] == 1000 + r, "rank %u gave %u", r, all[r]);
	tj_host_leave(&h);
	TJ_CHECK(rk, h.b == NULL, "left");
	tj_host_leave(&h); /* empty: a no-op */
	/* A fresh meeting point for the same ranks. */
	tj_meet_renew(rk);
	rc = tj_host_join(rk, NULL, 10000, &p, &h);
	TJ_CHECK(rk, rc == 0, "second join: %s", dpl_last_error());
	TJ_CHECK(rk, p.oob->barrier(p.oob->user) == 0, "barrier");
	tj_host_leave(&h);
}

Test(test_job, processes_meet_through_the_bootstrap, .timeout = 30)
{
	struct tj_job job = {.size = 4, .fn = bootstrap_rank,
			     .deadline_ms = 20000};

	cr_assert_eq(tj_job_run(&job), 0, "%s", job.report);
	tj_job_free(&job);
}

static void name_rank(struct tj_rank *rk)
{
	struct dpl_transport_params p;
	struct tj_host h;

	memset(&p, 0, sizeof p);
	p.oob = tj_solo_oob();
	TJ_CHECK(rk, tj_host_join(rk, NULL, 0, &p, &h) == 0, "join");
	TJ_CHECK(rk, p.world == tj_meet(rk) && p.oob == NULL && h.b == NULL,
		 "a job of threads meets by name");
	tj_host_leave(&h);
}

Test(test_job, threads_meet_by_name, .timeout = 30)
{
	struct tj_job job = {.size = 2, .mode = TJ_THREADS, .fn = name_rank};

	cr_assert_eq(tj_job_run(&job), 0, "%s", job.report);
	tj_job_free(&job);
}

Test(test_job, solo_oob_and_meeting_points)
{
	const struct dpl_oob *o = tj_solo_oob();
	char a[64], b[64], x[4] = "abc", y[4] = "";

	cr_expect_eq(o->allgather(o->user, x, 4, y), 0);
	cr_expect_str_eq(y, "abc");
	cr_expect_eq(o->barrier(o->user), 0);
	cr_assert_eq(tj_meet_make(TJ_MEET_NAME, a, sizeof a), 0);
	cr_assert_eq(tj_meet_make(TJ_MEET_NAME, b, sizeof b), 0);
	cr_expect_str_neq(a, b);
	cr_assert_eq(tj_meet_make(TJ_MEET_DEFAULT, a, sizeof a), 0);
	cr_expect(strncmp(a, "127.0.0.1:", 10) == 0, "%s", a);
}

/* ---- messages over a transport ------------------------------------ */

#define MSG 5000

#if defined(TJ_TEST_INPROC) || defined(TJ_TEST_SHM)
static void message_rank(struct tj_rank *rk)
{
	uint32_t peer = rk->rank ^ 1u;
	unsigned char *out = tj_alloc(rk, MSG), *in = tj_alloc(rk, MSG);
	unsigned char *in2 = tj_alloc(rk, MSG);
	void *rq = tj_reqs(rk, 2);
	int rc, st[2];

	TJ_CHECK(rk, rk->t != NULL, "the job did not open the transport");
	TJ_CHECK(rk, tj_req_stride(rk) >= dpl_transport_req_size(rk->t),
		 "stride");
	tj_fill(out, MSG, rk->rank);
	/* Posted pair, waited for in any order. */
	TJ_CHECK(rk, tj_irecv(rk, tj_req(rk, rq, 0), peer, 1, in, MSG) == 0,
		 "irecv");
	TJ_CHECK(rk, tj_isend(rk, tj_req(rk, rq, 1), peer, 1, out, MSG) == 0,
		 "isend");
	rc = tj_wait_all(rk, rq, 2, st, 0, "the exchange");
	TJ_CHECK(rk, rc == 0 && st[0] == 0 && st[1] == 0,
		 "exchange: %s (%d %d)", dpl_err_name(rc), st[0], st[1]);
	TJ_CHECK(rk, tj_verify(in, MSG, peer) == -1, "byte %lld differs",
		 tj_verify(in, MSG, peer));
	/* Blocking pair. */
	if (rk->rank == 0) {
		rc = tj_send(rk, peer, 2, out, MSG, 0);
		TJ_CHECK(rk, rc == 0, "send: %s", dpl_err_name(rc));
		rc = tj_recv(rk, peer, 3, in2, MSG, 10000);
	} else {
		rc = tj_recv(rk, peer, 2, in2, MSG, 10000);
		TJ_CHECK(rk, rc == 0, "recv: %s", dpl_err_name(rc));
		rc = tj_send(rk, peer, 3, out, MSG, 0);
	}
	TJ_CHECK(rk, rc == 0, "second message: %s", dpl_err_name(rc));
	TJ_CHECK(rk, tj_verify(in2, MSG, peer) == -1, "second message");
	/* Bounded waits of a receive nobody matches. */
	TJ_CHECK(rk, tj_irecv(rk, tj_req(rk, rq, 0), peer, 9, in, 8) == 0,
		 "irecv");
	rc = tj_wait(rk, tj_req(rk, rq, 0), 30, NULL);
	TJ_CHECK(rk, rc == DPL_EAGAIN, "unmatched receive: %s",
		 dpl_err_name(rc));
	TJ_CHECK(rk, dpl_transport_cancel(rk->t, tj_req(rk, rq, 0)) == 0,
		 "cancel");
	rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "the cancel");
	TJ_CHECK(rk, rc == DPL_ECANCELED, "cancelled: %s", dpl_err_name(rc));
	rc = tj_recv(rk, peer, 10, in, 8, 30);
	TJ_CHECK(rk, rc == DPL_ETIMEDOUT, "bounded receive: %s",
		 dpl_err_name(rc));
	TJ_CHECK(rk, tj_progress_for(rk, 5) == 0, "progress");
	tj_barrier(rk);
}
#endif

#ifdef TJ_TEST_INPROC
Test(test_job, threads_open_inproc, .timeout = 30)
{
	struct tj_job job = {.size = 2, .mode = TJ_THREADS,
			     .fn = message_rank, .ops = &dpl_transport_inproc,
			     .deadline_ms = 20000};

	cr_assert_eq(tj_job_run(&job), 0, "%s", job.report);
	tj_job_free(&job);
}
#endif

#ifdef TJ_TEST_SHM
Test(test_job, processes_open_shm, .timeout = 30)
{
	struct tj_job job = {.size = 2, .fn = message_rank,
			     .ops = &dpl_transport_shm, .deadline_ms = 20000};

	cr_assert_eq(tj_job_run(&job), 0, "%s", job.report);
	tj_job_free(&job);
}
#endif

/* A failed open is reported: rank 1 meets rank 0, which never comes. */
static void lonely_rank(struct tj_rank *rk)
{
	static const struct dpl_transport_ops none; /* never reached */
	int rc;

	if (rk->rank == 0)
		return;
	tj_step(rk, "opening alone");
	rc = tj_open(rk, &none, NULL, 300);
	TJ_CHECK(rk, rc != 0, "opened alone");
	TJ_CHECK(rk, rk->t == NULL && rk->ops == &none, "outputs");
	TJ_FAIL(rk, "open: %s: %s", dpl_err_name(rc), dpl_last_error());
}

Test(test_job, failed_open_names_the_bootstrap, .timeout = 30)
{
	struct tj_job job = {.size = 2, .fn = lonely_rank,
			     .deadline_ms = 20000};
	char root[64], want[160];

	cr_assert_eq(tj_meet_make(TJ_MEET_BOOTSTRAP, root, sizeof root), 0);
	job.meet = root;
	cr_assert_eq(tj_job_run(&job), 1, "%s", job.report);
	cr_expect_str_eq(job.meet_used, root);
	expect_in(job.report, "rank 1: test_test_job.c:");
	snprintf(want, sizeof want, "open: DPL_ETIMEDOUT: bootstrap: root %s "
		 "(rank 0) did not answer rank 1", root);
	expect_in(job.report, want);
	tj_job_free(&job);
}

/* ---- patterns, memory, counters ------------------------------------ */

Test(test_job, patterns)
{
	unsigned char b[100];

	tj_fill(b, sizeof b, 42);
	cr_expect_eq(tj_verify(b, sizeof b, 42), -1);
	cr_expect_eq(tj_verify(b, 0, 43), -1);
	cr_expect_geq(tj_verify(b, sizeof b, 43), 0);
	b[57] ^= 1;
	cr_expect_eq(tj_verify(b, sizeof b, 42), 57);
}

Test(test_job, counters)
{
	char name[64], *before, *now, list[256];
	int fds = tj_count_fds(), fd, n;
	bool ok;

	cr_expect_gt(fds, 2);
	cr_expect_geq(tj_count_threads(), 1);
	snprintf(name, sizeof name, "dpl-tj-test-%d", (int)getpid());
	before = tj_shm_snapshot("dpl-tj-test-*");
	cr_assert_not_null(before);
	fd = shm_open(name, O_CREAT | O_RDWR, 0600);
	cr_assert_geq(fd, 0);
	cr_expect_eq(tj_count_fds(), fds + 1);
	cr_expect_geq(tj_count_shm("dpl-tj-test-*"), 1);
	now = tj_shm_snapshot("dpl-tj-test-*");
	cr_expect_eq(tj_shm_new(before, now, list, sizeof list), 1);
	cr_expect_str_eq(list, name);
	cr_expect_eq(tj_shm_new(now, now, list, sizeof list), 0);
	close(fd);
	shm_unlink(name);
	free(before);
	free(now);
	cr_expect_eq(tj_count_fds(), fds);
	ok = tj_sockets_loopback(list, sizeof list, &n);
	cr_expect(ok, "%s", list);
}
