/*
 * test_failure.c - peers that go away: a rank killed mid-stream while a
 * healthy bystander keeps working, a peer that closes with requests
 * pending, a job restarted after a crash on the same bootstrap, and
 * closing with requests in flight (cases 26, 27, 28 and 30).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define FLAG_DEATH 1  /* CLOCK_MONOTONIC ns of the victim's death */
#define FLAG_CLOSED 2 /* CLOCK_MONOTONIC ns of a peer's close */

/* Liveness timeout given to init in these jobs, and the bound within
 * which a dead peer must be reported. */
static uint32_t live_ms(void)
{
	return (uint32_t)conf_env_long("DPL_CONF_LIVENESS_MS", 2000, 100,
				       600000);
}

static uint64_t bound_ms(void)
{
	return (uint64_t)conf_env_long("DPL_CONF_PEER_BOUND_MS",
				       (long)live_ms() + 2000, 1, 3600000);
}

struct fail_arg {
	uint64_t bound_ms;
};

/* Wait for a request that must fail with DPL_EPEER within the bound. */
static void expect_epeer(struct tj_rank *rk, void *req, uint64_t since,
			 uint64_t bound, const char *what, bool may_be_done)
{
	uint64_t ms, end_ms, now_ms;
	int rc;

	tj_step(rk, "waiting for %s to fail", what);
	/* Bounded here, well before the rank's deadline, so that the rank
	 * whose request is stuck is the one that fails and is named. */
	end_ms = since / 1000000u + bound + 1000;
	now_ms = dpl_clock_ns() / 1000000u;
	rc = tj_wait(rk, req, end_ms > now_ms ? (unsigned)(end_ms - now_ms) : 1,
		     NULL);
	ms = (dpl_clock_ns() - since) / 1000000u;
	if (may_be_done && rc == 0)
		return;
	TJ_CHECK(rk, rc != DPL_EAGAIN,
		 "%s is still pending %llu ms after the peer died or closed "
		 "(bound %llu ms): the transport never failed it with "
		 "DPL_EPEER",
		 what, (unsigned long long)ms, (unsigned long long)bound);
	TJ_CHECK(rk, rc == DPL_EPEER, "%s: %s after %llu ms, expected "
				      "DPL_EPEER",
		 what, dpl_err_name(rc), (unsigned long long)ms);
	TJ_CHECK(rk, ms <= bound,
		 "%s: DPL_EPEER came %llu ms after the peer died, bound "
		 "%llu ms",
		 what, (unsigned long long)ms, (unsigned long long)bound);
}

/* A post to a failed peer fails at once or completes with DPL_EPEER. */
static void expect_post_epeer(struct tj_rank *rk, bool send, uint32_t peer,
			      uint64_t since, uint64_t bound)
{
	unsigned char b[64];
	void *req = tj_reqs(rk, 1);
	int rc;

	memset(b, 0, sizeof b);
	rc = send ? dpl_transport_isend(rk->t, req, peer, 99, b, 64,
					DPL_MEM_HOST)
		  : dpl_transport_irecv(rk->t, req, peer, 99, b, 64,
					DPL_MEM_HOST);
	conf_check_code(rk, rc, send ? "isend" : "irecv");
	if (rc == 0) {
		expect_epeer(rk, req, since, bound,
			     send ? "a send posted to a dead peer"
				  : "a receive posted from a dead peer",
			     false);
		return;
	}
	TJ_CHECK(rk, rc == DPL_EPEER,
		 "%s a dead peer: %s, expected DPL_EPEER",
		 send ? "isend to" : "irecv from", dpl_err_name(rc));
}

/* ---------------------------------------------------------------- */

static void sigkill_rank(struct tj_rank *rk)
{
	const struct fail_arg *a = rk->arg;
	const size_t big = 1u << 20;
	unsigned char *b = tj_alloc(rk, big), small[64];
	void *rq = tj_reqs(rk, 4);
	uint64_t death;
	int k;

	tj_barrier(rk);
	if (rk->rank == 1) {
		tj_step(rk, "mid-stream with rank 0");
		conf_exchange(rk, 0, 80, 64u << 10, 1);
		tj_barrier(rk);
		tj_flag_set(rk, FLAG_DEATH, (long)dpl_clock_ns());
		raise(SIGKILL);
	}
	if (rk->rank == 0) {
		conf_exchange(rk, 1, 80, 64u << 10, 1);
		conf_recv(rk, tj_req(rk, rq, 0), 1, 81, small, 64, NULL);
		tj_fill(b, big, 2);
		conf_send(rk, tj_req(rk, rq, 1), 1, 82, b, big, NULL);
	} else {
		conf_recv(rk, tj_req(rk, rq, 0), 1, 83, small, 64, NULL);
	}
	tj_barrier(rk);
	tj_flag_wait(rk, FLAG_DEATH, 1, 0);
	death = (uint64_t)tj_flag_get(rk, FLAG_DEATH);
	if (rk->rank == 0) {
		expect_epeer(rk, tj_req(rk, rq, 0), death, a->bound_ms,
			     "a receive from the killed rank", false);
		expect_epeer(rk, tj_req(rk, rq, 1), death, a->bound_ms,
			     "a 1 MiB send to the killed rank", true);
		tj_step(rk, "posting to the killed rank");
		expect_post_epeer(rk, true, 1, death, a->bound_ms);
		expect_post_epeer(rk, false, 1, death, a->bound_ms);
		rk->val[0] =
			(double)(dpl_clock_ns() - death) / 1e6;
	}
	/* The bystander (rank 2) and rank 0 keep talking. */
	for (k = 0; k < 20; k++) {
		tj_step(rk, "bystander exchange %d", k);
		conf_exchange(rk, rk->rank == 0 ? 2 : 0, 84, 64u << 10, 10 + k);
	}
	if (rk->rank == 2)
		expect_epeer(rk, tj_req(rk, rq, 0), death, a->bound_ms,
			     "the bystander's receive from the killed rank",
			     false);
	tj_step(rk, "survivors' barrier");
	tj_barrier_n(rk, 2);
}

Test(failure, peer_sigkill_with_healthy_bystander, .timeout = 100)
{
	struct fail_arg a;
	struct conf_job job = {.size = 3, .fn = sigkill_rank, .arg = &a,
			       .may_die = 1u << 1, .deadline_s = 80};

	CONF_REQUIRE_PROCESSES("a rank cannot be killed alone");
	CONF_REQUIRE_CAP(DPL_TRANSPORT_CAP_PEER_FAILURE,
			 "peer death is not detected");
	a.bound_ms = bound_ms();
	job.timeout_ms = live_ms();
	cr_log_info("liveness timeout %u ms, bound %llu ms", job.timeout_ms,
		    (unsigned long long)a.bound_ms);
	conf_run(&job);
	cr_log_info("rank 0 saw the death through all its requests in %.0f "
		    "ms", job.val[0][0]);
}

/* ---------------------------------------------------------------- */

static void graceful_rank(struct tj_rank *rk)
{
	const struct fail_arg *a = rk->arg;
	const size_t big = 1u << 20;
	unsigned char *b = tj_alloc(rk, big), *mine;
	void *rq = tj_reqs(rk, 2);
	uint64_t closed;

	if (rk->rank == 0) {
		mine = malloc(64);
		TJ_CHECK(rk, mine != NULL, "out of memory");
		conf_recv(rk, tj_req(rk, rq, 0), 1, 92, mine, 64, NULL);
		tj_barrier(rk);
		tj_step(rk, "closing with a receive pending");
		conf_close(rk);
		/* fini handed the storage and the buffer back */
		memset(tj_req(rk, rq, 0), 0xa5, rk->ops->req_size);
		free(mine);
		tj_flag_set(rk, FLAG_CLOSED, (long)dpl_clock_ns());
		tj_barrier(rk);
		return;
	}
	conf_recv(rk, tj_req(rk, rq, 0), 0, 90, b, 64, NULL);
	tj_fill(b + 64, big - 64, 3);
	conf_send(rk, tj_req(rk, rq, 1), 0, 91, b + 64, big - 64, NULL);
	tj_barrier(rk);
	tj_flag_wait(rk, FLAG_CLOSED, 1, 0);
	closed = (uint64_t)tj_flag_get(rk, FLAG_CLOSED);
	expect_epeer(rk, tj_req(rk, rq, 0), closed, a->bound_ms,
		     "a receive from a rank that closed", false);
	expect_epeer(rk, tj_req(rk, rq, 1), closed, a->bound_ms,
		     "a send to a rank that closed", true);
	expect_post_epeer(rk, true, 0, closed, a->bound_ms);
	/* rank 0's last barrier is this rank's final one */
}

Test(failure, graceful_close_with_pending_requests, .timeout = 80)
{
	struct fail_arg a;
	struct conf_job job = {.size = 2, .fn = graceful_rank, .arg = &a,
			       .deadline_s = 60};

	CONF_REQUIRE_CAP(DPL_TRANSPORT_CAP_PEER_FAILURE,
			 "a closed peer is not reported");
	a.bound_ms = bound_ms();
	job.timeout_ms = live_ms();
	conf_run(&job);
}

/* ---------------------------------------------------------------- */

struct restart {
	bool kill;
	bool peer_failure;
	uint64_t bound_ms;
};

static void crash_rank(struct tj_rank *rk)
{
	const struct restart *a = rk->arg;
	unsigned char small[64];
	void *rq = tj_reqs(rk, 1);

	conf_exchange(rk, 1 - rk->rank, 93, 1u << 20, 1);
	if (rk->rank == 0 && a->kill && a->peer_failure)
		conf_recv(rk, tj_req(rk, rq, 0), 1, 94, small, 64, NULL);
	tj_barrier(rk);
	if (rk->rank == 1) {
		if (a->kill) {
			tj_flag_set(rk, FLAG_DEATH, (long)dpl_clock_ns());
			raise(SIGKILL);
		}
		return;
	}
	if (a->kill && a->peer_failure) {
		tj_flag_wait(rk, FLAG_DEATH, 1, 0);
		expect_epeer(rk, tj_req(rk, rq, 0),
			     (uint64_t)tj_flag_get(rk, FLAG_DEATH),
			     a->bound_ms, "a receive from the crashed rank",
			     false);
	}
}

static void restarted_rank(struct tj_rank *rk)
{
	conf_exchange(rk, 1 - rk->rank, 93, 1u << 20, 2);
	conf_exchange(rk, 1 - rk->rank, 95, 64, 3);
}

Test(failure, restart_after_crash_on_same_bootstrap, .timeout = 140)
{
	struct restart a;
	struct conf_job crash = {.size = 2, .fn = crash_rank, .arg = &a,
				 .deadline_s = 60};
	struct conf_job again = {.size = 2, .fn = restarted_rank,
				 .deadline_s = 60};
	char *before, *now, names[256];
	int shm0, shm1, i;

	a.kill = !conf_threads();
	a.peer_failure = conf_has(DPL_TRANSPORT_CAP_PEER_FAILURE);
	a.bound_ms = bound_ms();
	crash.timeout_ms = live_ms();
	if (a.kill)
		crash.may_die = 1u << 1;
	shm0 = tj_count_shm(conf_shm_glob());
	before = tj_shm_snapshot(conf_shm_glob());
	conf_run(&crash);
	cr_log_info("first job at '%s' ended with rank 1 %s",
		    crash.boot_used, a.kill ? "killed" : "closed");
	again.boot = crash.boot_used;
	conf_run(&again);
	for (i = 0; i < 20; i++) {
		shm1 = tj_count_shm(conf_shm_glob());
		if (shm1 <= shm0)
			break;
		tj_sleep_ms(100);
	}
	now = tj_shm_snapshot(conf_shm_glob());
	tj_shm_new(before, now, names, sizeof names);
	free(before);
	free(now);
	cr_log_info("/dev/shm entries: %d before, %d after the restart", shm0,
		    shm1);
	cr_assert_leq(shm1, shm0,
		      "%d /dev/shm entries left after a crash and a restart "
		      "(%d before; new: %s)",
		      shm1, shm0, names);
}

/* ---------------------------------------------------------------- */

static void inflight_rank(struct tj_rank *rk)
{
	static const size_t lens[2] = {8, 4u << 20};
	bool peer_failure =
		(rk->ops->caps & DPL_TRANSPORT_CAP_PEER_FAILURE) != 0;
	const struct fail_arg *a = rk->arg;
	const size_t rsz = rk->ops->req_size;
	unsigned char *buf[3], *saved;
	void *rq = tj_reqs(rk, 3);
	uint64_t closed;
	int rc, k;

	if (rk->rank == 0) {
		for (k = 0; k < 3; k++) {
			buf[k] = malloc(k == 2 ? 64 : lens[k]);
			TJ_CHECK(rk, buf[k] != NULL, "out of memory");
		}
		conf_recv(rk, tj_req(rk, rq, 2), 1, 95, buf[2], 64, NULL);
		for (k = 0; k < 2; k++) {
			tj_fill(buf[k], lens[k], 96 + k);
			conf_send(rk, tj_req(rk, rq, k), 1, 96 + k, buf[k],
				  lens[k], NULL);
		}
		tj_progress_for(rk, 20);
		tj_barrier(rk);
		tj_step(rk, "closing with 3 requests in flight");
		conf_close(rk);
		/* Storage and buffers are the caller's again: the buffers
		 * are overwritten and the storage kept as close left it, both
		 * alive until the peer is done, so that a transport that kept
		 * a request past close is seen (wrong data at the peer, or
		 * storage written after close) rather than crashing. */
		saved = tj_alloc(rk, 3 * rsz);
		for (k = 0; k < 3; k++) {
			memcpy(saved + (size_t)k * rsz, tj_req(rk, rq, k), rsz);
			memset(buf[k], 0x5a, k == 2 ? 64 : lens[k]);
		}
		tj_flag_set(rk, FLAG_CLOSED, (long)dpl_clock_ns());
		tj_barrier(rk);
		for (k = 0; k < 3; k++) {
			TJ_CHECK(rk, memcmp(saved + (size_t)k * rsz,
					    tj_req(rk, rq, k), rsz) == 0,
				 "request %d's storage was written after close "
				 "handed it back: the transport kept the "
				 "request past fini",
				 k);
			free(buf[k]);
		}
		return;
	}
	tj_barrier(rk);
	tj_flag_wait(rk, FLAG_CLOSED, 1, 0);
	closed = (uint64_t)tj_flag_get(rk, FLAG_CLOSED);
	for (k = 0; k < 2; k++) {
		buf[k] = tj_alloc(rk, lens[k]);
		tj_step(rk, "receiving what a closed rank had in flight "
			    "(%zu bytes)", lens[k]);
		rc = dpl_transport_irecv(rk->t, tj_req(rk, rq, k), 0,
					 96 + k, buf[k], lens[k],
					 DPL_MEM_HOST);
		conf_check_code(rk, rc, "irecv");
		if (rc == DPL_EPEER)
			continue;
		TJ_CHECK(rk, rc == 0, "irecv from a closed rank: %s",
			 dpl_err_name(rc));
		rc = tj_wait(rk, tj_req(rk, rq, k),
			     (unsigned)a->bound_ms, NULL);
		if (rc == DPL_EAGAIN) {
			TJ_CHECK(rk, !peer_failure,
				 "a receive from a rank that closed %llu ms "
				 "ago is still pending",
				 (unsigned long long)((dpl_clock_ns() -
						       closed) /
						      1000000u));
			dpl_transport_cancel(rk->t, tj_req(rk, rq, k));
			rc = tj_wait(rk, tj_req(rk, rq, k), 0,
				     "a cancelled receive");
			TJ_CHECK(rk, rc == DPL_ECANCELED || rc == DPL_EPEER,
				 "cancelled receive from a closed rank: %s",
				 dpl_err_name(rc));
			continue;
		}
		TJ_CHECK(rk, rc == DPL_EPEER ||
				     (rc == 0 &&
					 tj_verify(buf[k], lens[k], 96 + k) <
					      0),
			 "a %zu-byte message in flight when its sender "
			 "closed: %s%s",
			 lens[k], dpl_err_name(rc),
			 rc == 0 ? " with wrong data" : "");
	}
	/* rank 0's last barrier is this rank's final one */
}

Test(failure, close_with_requests_in_flight, .timeout = 80)
{
	struct fail_arg a;
	struct conf_job job = {.size = 2, .fn = inflight_rank, .arg = &a,
			       .deadline_s = 60};

	a.bound_ms = bound_ms();
	job.timeout_ms = live_ms();
	conf_run(&job);
}
