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
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "forked_ranks.h"
#include "shm_test.h"

/* ---- cancel ----------------------------------------------------------- */

/*
 * Rank 1 posts a receive (tag 5) and cancels it: DPL_ECANCELED, buffer
 * untouched, a second cancel is DPL_EINVAL. Rank 0 posts a send (tag 9)
 * that rank 1 has not matched and cancels it: DPL_ECANCELED. Then rank 0
 * sends "second" on tag 9 and "late" on tag 5, and rank 1 receives
 * exactly those: the cancelled send never arrives.
 */
static void cancel_rank(int rank)
{
	dpl_transport *t = open_t(rank, 2, J->opts);
	void *r = reqs_new(4);
	char buf[3][16];
	size_t big = 2 * MiB;
	unsigned char *lb = xmalloc(big);
	int st;

	if (t == NULL)
		return;
	memset(buf, 'x', sizeof buf);
	if (rank == 1) {
		dpl_transport_irecv(t, REQ(r, 0), 0, 5, buf[0], 16,
				    DPL_MEM_HOST);
		dpl_transport_progress(t);
		if (dpl_transport_cancel(t, REQ(r, 0)) != 0)
			bad("cancel of a posted receive failed");
		st = wait_one(t, REQ(r, 0), 1000);
		J->out[1].st[0] = st;
		if (st != DPL_ECANCELED)
			bad("cancelled receive: %d", st);
		if (dpl_transport_cancel(t, REQ(r, 0)) != DPL_EINVAL)
			bad("cancel of a completed request is not EINVAL");
		atomic_store(&J->flag[0], 1);
		await_flag_progress(t, 1, 1, 5000);
		dpl_transport_irecv(t, REQ(r, 1), 0, 9, buf[1], 16,
				    DPL_MEM_HOST);
		dpl_transport_irecv(t, REQ(r, 2), 0, 5, buf[2], 16,
				    DPL_MEM_HOST);
		if (wait_one(t, REQ(r, 1), 5000) != 0 ||
		    wait_one(t, REQ(r, 2), 5000) != 0)
			bad("receives after the cancels failed");
		if (memcmp(buf[1], "second---------", 16) != 0)
			bad("tag 9 got '%.16s', not the second send", buf[1]);
		if (memcmp(buf[2], "late-----------", 16) != 0)
			bad("tag 5 got '%.16s'", buf[2]);
		if (memcmp(buf[0], "xxxxxxxxxxxxxxxx", 16) != 0)
			bad("the cancelled receive's buffer was written");
		/* A long send cancelled before it is matched. */
		dpl_transport_irecv(t, REQ(r, 3), 0, 11, lb, big, DPL_MEM_HOST);
		if (wait_one(t, REQ(r, 3), 5000) != 0 ||
		    verify(lb, big, 11) != big)
			bad("long message after a cancelled long send");
	} else {
		await_flag_progress(t, 0, 1, 5000);
		dpl_transport_isend(t, REQ(r, 0), 1, 9, "first----------", 16,
				    DPL_MEM_HOST);
		dpl_transport_progress(t);
		if (dpl_transport_cancel(t, REQ(r, 0)) != 0)
			bad("cancel of a send failed");
		st = wait_one(t, REQ(r, 0), 1000);
		J->out[0].st[0] = st;
		if (st != DPL_ECANCELED)
			bad("cancelled unmatched send: %d", st);
		fill(lb, big, 99);
		dpl_transport_isend(t, REQ(r, 3), 1, 11, lb, big, DPL_MEM_HOST);
		if (dpl_transport_cancel(t, REQ(r, 3)) != 0 ||
		    wait_one(t, REQ(r, 3), 1000) != DPL_ECANCELED)
			bad("cancel of a long send");
		dpl_transport_isend(t, REQ(r, 1), 1, 9, "second---------", 16,
				    DPL_MEM_HOST);
		dpl_transport_isend(t, REQ(r, 2), 1, 5, "late-----------", 16,
				    DPL_MEM_HOST);
		fill(lb, big, 11);
		dpl_transport_isend(t, REQ(r, 3), 1, 11, lb, big, DPL_MEM_HOST);
		atomic_store(&J->flag[1], 1);
		if (wait_one(t, REQ(r, 1), 5000) != 0 ||
		    wait_one(t, REQ(r, 2), 5000) != 0 ||
		    wait_one(t, REQ(r, 3), 5000) != 0)
			bad("sends after the cancel failed");
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(t, 2, 2, 5000);
	free(lb);
	free(r);
	dpl_transport_close(t);
}

Test(shm_peers, cancel_receive_and_unmatched_send, .timeout = 60)
{
	J = job_new();
	run(2, cancel_rank, 50000);
	cr_expect_eq(J->out[1].st[0], DPL_ECANCELED);
	cr_expect_eq(J->out[0].st[0], DPL_ECANCELED);
	J = job_new();
	snprintf(J->opts, sizeof J->opts, "cma=0");
	run(2, cancel_rank, 50000);
}

/* ---- back-pressure ----------------------------------------------------- */

#define NBP 10000

/* Rank 0 posts 10 000 8-byte sends without progressing: some must be
 * refused with DPL_EAGAIN (nothing dropped, nothing crashes); then it
 * progresses and posts the rest while rank 1 receives all, in order. */
static void bp_rank(int rank)
{
	dpl_transport *t = open_t(rank, 2, NULL);
	void *r = reqs_new(NBP);
	uint64_t *v = calloc(NBP, sizeof *v);
	int *st = calloc(NBP, sizeof *st);
	size_t i, first_eagain = NBP, eagains = 0;
	int rc;

	if (t == NULL)
		return;
	if (rank == 0) {
		for (i = 0; i < NBP; i++)
			v[i] = i * 7 + 3;
		for (i = 0; i < NBP; i++) {
			rc = dpl_transport_isend(t, REQ(r, i), 1, 3, &v[i], 8,
						 DPL_MEM_HOST);
			if (rc == DPL_EAGAIN)
				break;
			if (rc != 0)
				bad("isend %zu: %d", i, rc);
		}
		first_eagain = i;
		J->out[0].v[0] = (long long)first_eagain;
		atomic_store(&J->flag[0], 1);
		for (; i < NBP; i++) {
			uint64_t end = dpl_clock_ns() + 10000000000u;

			while ((rc = dpl_transport_isend(
					t, REQ(r, i), 1, 3, &v[i], 8,
					DPL_MEM_HOST)) == DPL_EAGAIN &&
			       dpl_clock_ns() < end) {
				eagains++;
				dpl_transport_progress(t);
			}
			if (rc != 0) {
				bad("isend %zu: %d", i, rc);
				break;
			}
		}
		J->out[0].v[1] = (long long)eagains;
	} else {
		await_flag(0, 1, 10000);
		for (i = 0; i < NBP; i++)
			if (dpl_transport_irecv(t, REQ(r, i), 0, 3, &v[i], 8,
						DPL_MEM_HOST) != 0)
				bad("irecv %zu", i);
	}
	if (wait_all(t, r, NBP, st, 30000) != 0)
		bad("requests did not drain");
	for (i = 0; i < NBP; i++)
		if (st[i] != 0 || v[i] != i * 7 + 3) {
			bad("message %zu: status %d value %llu", i, st[i],
			    (unsigned long long)v[i]);
			break;
		}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(t, 2, 2, 5000);
	free(v);
	free(st);
	free(r);
	dpl_transport_close(t);
}

Test(shm_peers, backpressure_eagain_then_drain, .timeout = 90)
{
	J = job_new();
	run(2, bp_rank, 80000);
	cr_expect_lt(J->out[0].v[0], NBP, "no DPL_EAGAIN before %d sends",
		     NBP);
	cr_expect_gt(J->out[0].v[0], 0);
}

/* ---- peer death ------------------------------------------------------ */

#define DEATH_BOUND_NS UINT64_C(2000000000) /* the declared bound: 2 s */

/*
 * Rank 1 is SIGKILLed by the test while rank 0 has a receive from it and
 * a long send to it pending, and rank 2 (the bystander) a receive from
 * it. Both must see DPL_EPEER within the declared bound after the kill,
 * later posts to rank 1 fail with DPL_EPEER naming it, and ranks 0 and 2
 * keep exchanging messages.
 */
static void death_rank(int rank)
{
	dpl_transport *t = open_t(rank, 3, NULL);
	void *r = reqs_new(4);
	size_t big = 4 * MiB;
	unsigned char *b = xmalloc(big);
	uint64_t kill_ns, end, now;
	int st[2], i, rc;
	char one[8];

	if (t == NULL) {
		atomic_fetch_add(&J->flag[0], 1);
		return;
	}
	memset(b, 1, big);
	if (rank == 1) {
		atomic_fetch_add(&J->flag[0], 1);
		for (i = 0; i < 20000; i++) { /* killed long before */
			dpl_transport_progress(t);
			dpl_transport_wait(t, 1000000);
		}
		return;
	}
	dpl_transport_irecv(t, REQ(r, 0), 1, 1, one, sizeof one, DPL_MEM_HOST);
	if (rank == 0)
		dpl_transport_isend(t, REQ(r, 1), 1, 2, b, big, DPL_MEM_HOST);
	atomic_fetch_add(&J->flag[0], 1);
	/* Progress until the kill, then until both complete. */
	while ((kill_ns = atomic_load(&J->kill_ns)) == 0)
		dpl_transport_progress(t);
	end = kill_ns + DEATH_BOUND_NS;
	now = dpl_clock_ns();
	rc = wait_all(t, r, rank == 0 ? 2 : 1, st,
		      now < end ? (int)((end - now) / 1000000u) : 0);
	J->out[rank].v[0] = (long long)(dpl_clock_ns() - kill_ns);
	if (rc != 0)
		bad("requests with the killed rank still pending 2 s after "
		    "the kill");
	J->out[rank].st[0] = st[0];
	J->out[rank].st[1] = rank == 0 ? st[1] : DPL_EPEER;
	if (st[0] != DPL_EPEER || (rank == 0 && st[1] != DPL_EPEER))
		bad("pending requests with the dead rank: %d %d", st[0],
		    rank == 0 ? st[1] : 0);
	rc = dpl_transport_isend(t, REQ(r, 2), 1, 3, one, 8, DPL_MEM_HOST);
	if (rc != DPL_EPEER || strstr(dpl_last_error(), "rank 1") == NULL)
		bad("post to the dead rank: %d '%s'", rc, dpl_last_error());
	/* The healthy pair goes on. */
	for (i = 0; i < 100; i++) {
		uint32_t out = (uint32_t)(rank * 1000 + i), in = 0;
		uint32_t peer = rank == 0 ? 2 : 0;

		dpl_transport_irecv(t, REQ(r, 2), peer, 50, &in, 4,
				    DPL_MEM_HOST);
		dpl_transport_isend(t, REQ(r, 3), peer, 50, &out, 4,
				    DPL_MEM_HOST);
		wait_all(t, REQ(r, 2), 2, st, 5000);
		if (st[0] != 0 || st[1] != 0 ||
		    in != peer * 1000 + (uint32_t)i) {
			bad("bystander exchange %d: %d %d %u", i, st[0], st[1],
			    in);
			break;
		}
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(t, 2, 2, 5000);
	free(b);
	free(r);
	dpl_transport_close(t);
}

Test(shm_peers, peer_sigkill_with_healthy_bystander, .timeout = 60)
{
	pid_t pid[3];
	int i;

	J = job_new();
	spawn(pid, 3, death_rank);
	for (i = 0; i < 10000 && atomic_load(&J->flag[0]) < 3; i++)
		fr_sleep_ms(1);
	cr_assert_eq(atomic_load(&J->flag[0]), 3, "ranks did not start");
	fr_sleep_ms(20);
	atomic_store(&J->kill_ns, dpl_clock_ns());
	kill(pid[1], SIGKILL);
	waitpid(pid[1], NULL, 0);
	pid[1] = 0;
	fr_reap(pid, 3, 30000);
	for (i = 0; i < 3; i += 2) {
		cr_expect_eq(J->out[i].rc, 0, "rank %d: %s", i, J->out[i].msg);
		cr_expect_eq(J->out[i].bad, 0, "rank %d: %s", i,
			     J->out[i].msg);
		cr_expect_eq(J->out[i].st[0], DPL_EPEER);
		cr_expect_eq(J->out[i].st[1], DPL_EPEER);
		cr_log_info("rank %d saw the death after %.1f ms", i,
			    (double)J->out[i].v[0] / 1e6);
	}
}

/* Rank 1 calls fini while rank 0 waits on it: DPL_EPEER, not a hang. */
static void leave_rank(int rank)
{
	dpl_transport *t = open_t(rank, 2, NULL);
	void *r = reqs_new(2);
	char b[8];
	int st;

	if (t == NULL)
		return;
	if (rank == 1) {
		/* A pending receive of its own is cancelled by fini. */
		dpl_transport_irecv(t, REQ(r, 0), 0, 4, b, 8, DPL_MEM_HOST);
		dpl_transport_close(t);
		free(r);
		return;
	}
	/* Either the post fails (rank 1 is already known gone) or the
	 * receive completes with DPL_EPEER. */
	st = dpl_transport_irecv(t, REQ(r, 0), 1, 4, b, 8, DPL_MEM_HOST);
	if (st == 0)
		st = wait_one(t, REQ(r, 0), 5000);
	if (st != DPL_EPEER)
		bad("receive from a rank that left: %d", st);
	st = dpl_transport_irecv(t, REQ(r, 1), 1, 4, b, 8, DPL_MEM_HOST);
	if (st != DPL_EPEER || strstr(dpl_last_error(), "rank 1 left") == NULL)
		bad("post to a rank that left: %d '%s'", st, dpl_last_error());
	free(r);
	dpl_transport_close(t);
}

Test(shm_peers, fini_makes_the_rank_a_failed_peer, .timeout = 30)
{
	J = job_new();
	run(2, leave_rank, 20000);
}

/* ---- wait ------------------------------------------------------------ */

/* Rank 0 waits for a message rank 1 sends 200 ms later: wait sleeps
 * (a few calls, not a busy loop) and wakes for it. */
static void sleeper_rank(int rank)
{
	dpl_transport *t = open_t(rank, 2, NULL);
	void *r = reqs_new(1);
	uint64_t v = 0, end;
	long long waits = 0;
	int st = DPL_EAGAIN;

	if (t == NULL)
		return;
	if (rank == 1) {
		await_flag(0, 1, 5000);
		fr_sleep_ms(200);
		v = 42;
		dpl_transport_isend(t, r, 0, 8, &v, 8, DPL_MEM_HOST);
		if (wait_one(t, r, 5000) != 0)
			bad("send");
	} else {
		dpl_transport_irecv(t, r, 1, 8, &v, 8, DPL_MEM_HOST);
		atomic_store(&J->flag[0], 1);
		end = dpl_clock_ns() + 5000000000u;
		while (dpl_clock_ns() < end) {
			dpl_transport_progress(t);
			if ((st = dpl_transport_test(t, r)) != DPL_EAGAIN)
				break;
			dpl_transport_wait(t, 10000000000u);
			waits++;
		}
		J->out[0].v[0] = waits;
		if (st != 0 || v != 42)
			bad("message: %d %llu", st, (unsigned long long)v);
		if (waits > 1000)
			bad("wait returned %lld times in 200 ms: it spins",
			    waits);
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(t, 2, 2, 5000);
	free(r);
	dpl_transport_close(t);
}

Test(shm_peers, wait_sleeps_until_a_message_arrives, .timeout = 30)
{
	J = job_new();
	run(2, sleeper_rank, 20000);
	cr_expect_gt(J->out[0].v[0], 0);
}

