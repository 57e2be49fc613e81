/*
 * test_shm_peers.c - what the shared-memory transport promises beyond
 * the conformance battery about requests and peers: cancel of a send the
 * receiver has not matched is always DPL_ECANCELED (the battery allows
 * either outcome), and a second cancel is DPL_EINVAL; a full ring
 * refuses sends with DPL_EAGAIN (nothing dropped) and drains; a killed
 * rank is seen through its pid within 2 s although the heartbeat
 * timeout is 10 s, by rank 0 and by a bystander, and posts to it fail
 * naming it; a rank that calls fini is a failed peer whose posts say it
 * left; wait sleeps on the doorbell futex instead of spinning.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "shm_test.h"

/* ---- cancel ----------------------------------------------------------- */

#define CANARY 'x'

/* The first of n bytes at p that is not c, or NULL when all are. */
static const char *memchr_not(const char *p, char c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != c)
			return p + i;
	return NULL;
}

/*
 * Rank 1 posts a receive (tag 5) and cancels it: DPL_ECANCELED, buffer
 * untouched, a second cancel is DPL_EINVAL. Rank 0 posts a send (tag 9)
 * that rank 1 has not matched and cancels it: DPL_ECANCELED. Then rank 0
 * sends "second" on tag 9 and "late" on tag 5, and rank 1 receives
 * exactly those: the cancelled send never arrives.
 */
static void cancel_rank(struct tj_rank *rk)
{
	dpl_transport *t = rk->t;
	void *r = tj_reqs(rk, 4);
	char buf[3][16];
	size_t big = 2 * MiB;
	unsigned char *lb = tj_alloc(rk, big);
	int st;

	/* A canary: a cancelled receive must leave its buffer as it is. */
	memset(buf, CANARY, sizeof buf);
	if (rk->rank == 1) {
		dpl_transport_irecv(t, tj_req(rk, r, 0), 0, 5, buf[0], 16,
				    DPL_MEM_HOST);
		dpl_transport_progress(t);
		TJ_CHECK(rk, dpl_transport_cancel(t, tj_req(rk, r, 0)) == 0,
			 "cancel of a posted receive failed");
		st = tj_wait(rk, tj_req(rk, r, 0), 1000, NULL);
		rk->val[0] = st;
		TJ_CHECK(rk, st == DPL_ECANCELED, "cancelled receive: %d", st);
		TJ_CHECK(rk,
			 dpl_transport_cancel(t, tj_req(rk, r, 0)) ==
				 DPL_EINVAL,
			 "cancel of a completed request is not EINVAL");
		tj_flag_set(rk, 0, 1);
		tj_flag_wait(rk, 1, 1, 0);
		dpl_transport_irecv(t, tj_req(rk, r, 1), 0, 9, buf[1], 16,
				    DPL_MEM_HOST);
		dpl_transport_irecv(t, tj_req(rk, r, 2), 0, 5, buf[2], 16,
				    DPL_MEM_HOST);
		TJ_CHECK(rk,
			 tj_wait(rk, tj_req(rk, r, 1), 5000, NULL) == 0 &&
				 tj_wait(rk, tj_req(rk, r, 2), 5000, NULL) == 0,
			 "receives after the cancels failed");
		TJ_CHECK(rk, memcmp(buf[1], "second---------", 16) == 0,
			 "tag 9 got '%.16s', not the second send", buf[1]);
		TJ_CHECK(rk, memcmp(buf[2], "late-----------", 16) == 0,
			 "tag 5 got '%.16s'", buf[2]);
		TJ_CHECK(rk, memchr_not(buf[0], CANARY, 16) == NULL,
			 "the cancelled receive's buffer was written");
		/* A long send cancelled before it is matched. */
		dpl_transport_irecv(t, tj_req(rk, r, 3), 0, 11, lb, big,
				    DPL_MEM_HOST);
		TJ_CHECK(rk,
			 tj_wait(rk, tj_req(rk, r, 3), 5000, NULL) == 0 &&
				 tj_verify(lb, big, 11) < 0,
			 "long message after a cancelled long send");
	} else {
		tj_flag_wait(rk, 0, 1, 0);
		dpl_transport_isend(t, tj_req(rk, r, 0), 1, 9,
				    "first----------", 16, DPL_MEM_HOST);
		dpl_transport_progress(t);
		TJ_CHECK(rk, dpl_transport_cancel(t, tj_req(rk, r, 0)) == 0,
			 "cancel of a send failed");
		st = tj_wait(rk, tj_req(rk, r, 0), 1000, NULL);
		rk->val[0] = st;
		TJ_CHECK(rk, st == DPL_ECANCELED,
			 "cancelled unmatched send: %d", st);
		tj_fill(lb, big, 99);
		dpl_transport_isend(t, tj_req(rk, r, 3), 1, 11, lb, big,
				    DPL_MEM_HOST);
		TJ_CHECK(rk,
			 dpl_transport_cancel(t, tj_req(rk, r, 3)) == 0 &&
				 tj_wait(rk, tj_req(rk, r, 3), 1000, NULL) ==
					 DPL_ECANCELED,
			 "cancel of a long send");
		dpl_transport_isend(t, tj_req(rk, r, 1), 1, 9,
				    "second---------", 16, DPL_MEM_HOST);
		dpl_transport_isend(t, tj_req(rk, r, 2), 1, 5,
				    "late-----------", 16, DPL_MEM_HOST);
		tj_fill(lb, big, 11);
		dpl_transport_isend(t, tj_req(rk, r, 3), 1, 11, lb, big,
				    DPL_MEM_HOST);
		tj_flag_set(rk, 1, 1);
		TJ_CHECK(rk,
			 tj_wait(rk, tj_req(rk, r, 1), 5000, NULL) == 0 &&
				 tj_wait(rk, tj_req(rk, r, 2), 5000, NULL) ==
					 0 &&
				 tj_wait(rk, tj_req(rk, r, 3), 5000, NULL) == 0,
			 "sends after the cancel failed");
	}
	tj_barrier(rk);
}

Test(shm_peers, cancel_receive_and_unmatched_send, .timeout = 60)
{
	struct tj_job job = shm_job(2, cancel_rank, 50000, NULL);

	shm_run(&job);
	cr_expect_eq(tj_job_slot(&job, 1)->val[0], DPL_ECANCELED);
	cr_expect_eq(tj_job_slot(&job, 0)->val[0], DPL_ECANCELED);
	tj_job_free(&job);
	job = shm_job(2, cancel_rank, 50000, "cma=0");
	shm_run(&job);
	tj_job_free(&job);
}

/* ---- back-pressure ----------------------------------------------------- */

#define NBP 10000

/* Rank 0 posts 10 000 8-byte sends without progressing: some must be
 * refused with DPL_EAGAIN (nothing dropped, nothing crashes); then it
 * progresses and posts the rest while rank 1 receives all, in order. */
static void bp_rank(struct tj_rank *rk)
{
	dpl_transport *t = rk->t;
	void *r = tj_reqs(rk, NBP);
	uint64_t *v = tj_alloc(rk, NBP * sizeof *v);
	int *st = tj_alloc(rk, NBP * sizeof *st);
	size_t i;
	int rc;

	if (rk->rank == 0) {
		for (i = 0; i < NBP; i++)
			v[i] = i * 7 + 3;
		for (i = 0; i < NBP; i++) {
			rc = dpl_transport_isend(t, tj_req(rk, r, i), 1, 3,
						 &v[i], 8, DPL_MEM_HOST);
			if (rc == DPL_EAGAIN)
				break;
			TJ_CHECK(rk, rc == 0, "isend %zu: %d", i, rc);
		}
		rk->val[0] = (double)i; /* the first refused */
		tj_flag_set(rk, 0, 1);
		/* The rest, progressing while the ring is full. */
		for (; i < NBP; i++) {
			rc = tj_isend(rk, tj_req(rk, r, i), 1, 3, &v[i], 8);
			TJ_CHECK(rk, rc == 0, "isend %zu: %d", i, rc);
		}
	} else {
		/* Rank 0 fills the ring meanwhile: leave it full. */
		shm_flag_wait_quiet(rk, 0, 1);
		for (i = 0; i < NBP; i++)
			TJ_CHECK(rk,
				 dpl_transport_irecv(t, tj_req(rk, r, i), 0, 3,
						     &v[i], 8,
						     DPL_MEM_HOST) == 0,
				 "irecv %zu", i);
	}
	TJ_CHECK(rk, tj_wait_all(rk, r, NBP, st, 30000, NULL) != DPL_EAGAIN,
		 "requests did not drain");
	for (i = 0; i < NBP; i++)
		TJ_CHECK(rk, st[i] == 0 && v[i] == i * 7 + 3,
			 "message %zu: status %d value %llu", i, st[i],
			 (unsigned long long)v[i]);
	tj_barrier(rk);
}

Test(shm_peers, backpressure_eagain_then_drain, .timeout = 90)
{
	struct tj_job job = shm_job(2, bp_rank, 80000, NULL);

	shm_run(&job);
	cr_expect_lt(tj_job_slot(&job, 0)->val[0], NBP,
		     "no DPL_EAGAIN before %d sends", NBP);
	cr_expect_gt(tj_job_slot(&job, 0)->val[0], 0);
	tj_job_free(&job);
}

/* ---- peer death ------------------------------------------------------ */

#define DEATH_BOUND_NS UINT64_C(2000000000) /* the declared bound: 2 s */
#define F_KILL 3 /* flags 0..2: rank r started; 3: when rank 1 was killed */

/*
 * Rank 1 is SIGKILLed by the test while rank 0 has a receive from it and
 * a long send to it pending, and rank 2 (the bystander) a receive from
 * it. Both must see DPL_EPEER within the declared bound after the kill,
 * later posts to rank 1 fail with DPL_EPEER naming it, and ranks 0 and 2
 * keep exchanging messages. Each reports the statuses (val[0], val[1])
 * and the nanoseconds from the kill to seeing it (val[2]).
 */
static void death_rank(struct tj_rank *rk)
{
	dpl_transport *t = rk->t;
	uint32_t rank = rk->rank;
	void *r = tj_reqs(rk, 4);
	size_t big = 4 * MiB;
	unsigned char *b = tj_alloc(rk, big);
	uint64_t kill_ns, end, now;
	struct tj_idle id = {0};
	int st[2], i, rc;
	char one[8];

	memset(b, 1, big);
	if (rank == 1) {
		tj_flag_set(rk, rank, 1);
		for (;;) /* until killed */
			tj_idle(rk, &id, "the kill");
	}
	dpl_transport_irecv(t, tj_req(rk, r, 0), 1, 1, one, sizeof one,
			    DPL_MEM_HOST);
	if (rank == 0)
		dpl_transport_isend(t, tj_req(rk, r, 1), 1, 2, b, big,
				    DPL_MEM_HOST);
	tj_flag_set(rk, rank, 1);
	/* Progress until the kill, then until both complete. */
	tj_flag_wait(rk, F_KILL, 1, 0);
	kill_ns = (uint64_t)tj_flag_get(rk, F_KILL);
	end = kill_ns + DEATH_BOUND_NS;
	now = dpl_clock_ns();
	rc = tj_wait_all(rk, r, rank == 0 ? 2 : 1, st,
			 now < end ? (unsigned)((end - now) / 1000000u) + 1 : 1,
			 NULL);
	rk->val[2] = (double)(dpl_clock_ns() - kill_ns);
	TJ_CHECK(rk, rc != DPL_EAGAIN,
		 "requests with the killed rank still pending 2 s after the "
		 "kill");
	rk->val[0] = st[0];
	rk->val[1] = rank == 0 ? st[1] : DPL_EPEER;
	TJ_CHECK(rk, st[0] == DPL_EPEER && (rank != 0 || st[1] == DPL_EPEER),
		 "pending requests with the dead rank: %d %d", st[0],
		 rank == 0 ? st[1] : 0);
	rc = dpl_transport_isend(t, tj_req(rk, r, 2), 1, 3, one, 8,
				 DPL_MEM_HOST);
	TJ_CHECK(rk,
		 rc == DPL_EPEER && strstr(dpl_last_error(), "rank 1") != NULL,
		 "post to the dead rank: %d '%s'", rc, dpl_last_error());
	/* The healthy pair goes on. */
	for (i = 0; i < 100; i++) {
		uint32_t out = rank * 1000 + (uint32_t)i, in = 0;
		uint32_t peer = rank == 0 ? 2 : 0;

		dpl_transport_irecv(t, tj_req(rk, r, 2), peer, 50, &in, 4,
				    DPL_MEM_HOST);
		dpl_transport_isend(t, tj_req(rk, r, 3), peer, 50, &out, 4,
				    DPL_MEM_HOST);
		tj_wait_all(rk, tj_req(rk, r, 2), 2, st, 5000, NULL);
		TJ_CHECK(rk,
			 st[0] == 0 && st[1] == 0 &&
				 in == peer * 1000 + (uint32_t)i,
			 "bystander exchange %d: %d %d %u", i, st[0], st[1],
			 in);
	}
	tj_barrier_n(rk, 2);
}

/* The test's side: kill rank 1 once every rank started and stamp the
 * time in F_KILL. *watch_arg is set when they all started. */
static void death_watch(struct tj_job *job)
{
	bool *started = job->watch_arg;
	uint32_t r;

	for (r = 0; r < 3; r++)
		if (!tj_job_flag_wait(job, r, 1, 10000))
			return;
	*started = true;
	tj_sleep_ms(20);
	tj_job_flag_set(job, F_KILL, (int64_t)dpl_clock_ns());
	tj_job_signal(job, 1, SIGKILL);
}

Test(shm_peers, peer_sigkill_with_healthy_bystander, .timeout = 60)
{
	struct tj_job job = shm_job(3, death_rank, 30000, NULL);
	bool started = false;
	uint32_t i;
	int rc;

	job.may_die = 1u << 1;
	job.watch = death_watch;
	job.watch_arg = &started;
	rc = tj_job_run(&job);
	cr_assert(started, "ranks did not start: %s", job.report);
	cr_expect_eq(rc, 0, "%s", job.report);
	cr_expect_eq(tj_job_exit(&job, 1), -SIGKILL, "rank 1 was not killed");
	for (i = 0; i < 3; i += 2) {
		const struct tj_slot *s = tj_job_slot(&job, i);

		cr_expect_eq(s->val[0], DPL_EPEER);
		cr_expect_eq(s->val[1], DPL_EPEER);
		cr_log_info("rank %u saw the death after %.1f ms", i,
			    s->val[2] / 1e6);
	}
	tj_job_free(&job);
}

/* Rank 1 calls fini while rank 0 waits on it: DPL_EPEER, not a hang. */
static void leave_rank(struct tj_rank *rk)
{
	dpl_transport *t = rk->t;
	void *r = tj_reqs(rk, 2);
	char b[8];
	int st;

	if (rk->rank == 1) {
		/* A pending receive of its own is cancelled by fini. */
		dpl_transport_irecv(t, tj_req(rk, r, 0), 0, 4, b, 8,
				    DPL_MEM_HOST);
		tj_close(rk);
		return;
	}
	/* Either the post fails (rank 1 is already known gone) or the
	 * receive completes with DPL_EPEER. */
	st = dpl_transport_irecv(t, tj_req(rk, r, 0), 1, 4, b, 8,
				 DPL_MEM_HOST);
	if (st == 0)
		st = tj_wait(rk, tj_req(rk, r, 0), 5000, NULL);
	TJ_CHECK(rk, st == DPL_EPEER, "receive from a rank that left: %d",
		 st);
	st = dpl_transport_irecv(t, tj_req(rk, r, 1), 1, 4, b, 8,
				 DPL_MEM_HOST);
	TJ_CHECK(rk,
		 st == DPL_EPEER &&
			 strstr(dpl_last_error(), "rank 1 left") != NULL,
		 "post to a rank that left: %d '%s'", st, dpl_last_error());
}

Test(shm_peers, fini_makes_the_rank_a_failed_peer, .timeout = 30)
{
	struct tj_job job = shm_job(2, leave_rank, 20000, NULL);

	shm_run(&job);
	tj_job_free(&job);
}

/* ---- wait ------------------------------------------------------------ */

/* Rank 0 waits for a message rank 1 sends 200 ms later: wait sleeps
 * (a few calls, not a busy loop) and wakes for it. */
static void sleeper_rank(struct tj_rank *rk)
{
	dpl_transport *t = rk->t;
	void *r = tj_reqs(rk, 1);
	uint64_t v = 0, end;
	long long waits = 0;
	int st = DPL_EAGAIN;

	if (rk->rank == 1) {
		tj_flag_wait(rk, 0, 1, 0);
		tj_sleep_ms(200);
		v = 42;
		dpl_transport_isend(t, r, 0, 8, &v, 8, DPL_MEM_HOST);
		TJ_CHECK(rk, tj_wait(rk, r, 5000, NULL) == 0, "send");
	} else {
		dpl_transport_irecv(t, r, 1, 8, &v, 8, DPL_MEM_HOST);
		tj_flag_set(rk, 0, 1);
		end = dpl_clock_ns() + 5000000000u;
		while (dpl_clock_ns() < end) {
			dpl_transport_progress(t);
			if ((st = dpl_transport_test(t, r)) != DPL_EAGAIN)
				break;
			dpl_transport_wait(t, 10000000000u);
			waits++;
		}
		rk->val[0] = (double)waits;
		TJ_CHECK(rk, st == 0 && v == 42, "message: %d %llu", st,
			 (unsigned long long)v);
		TJ_CHECK(rk, waits <= 1000,
			 "wait returned %lld times in 200 ms: it spins",
			 waits);
	}
	tj_barrier(rk);
}

Test(shm_peers, wait_sleeps_until_a_message_arrives, .timeout = 30)
{
	struct tj_job job = shm_job(2, sleeper_rank, 20000, NULL);

	shm_run(&job);
	cr_expect_gt(tj_job_slot(&job, 0)->val[0], 0);
	tj_job_free(&job);
}
