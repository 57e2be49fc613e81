/*
 * test_ucx_setup.c - the UCX transport's configuration and lifecycle
 * between real processes over loopback, each case once with UCX_TLS=tcp
 * and once with UCX_TLS=sm: the PEER error mode, loopback pinning without
 * UCX_NET_DEVICES, the startup time (reported, not asserted) and
 * open/close cycles without leaks of UCX's files and shared memory. The
 * checked layer's refusal of bad posts is the conformance battery's
 * (caps.posts_reject_bad_arguments).
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ucx_ranks.h"

/* ---- configuration ---------------------------------------------------- */

static void peer_mode_fn(struct tj_rank *rk)
{
	one_transfer(rk, 1, 0, 1u << 20, true, 80, 0, 0, 5);
	one_transfer(rk, 0, 1, 8, false, 81, 0, 0, 6);
}

BOTH(peer_error_mode_keeps_working, 30)
{
	struct ucx_job job = {.n = 2, .tls = tls, .options = "err_mode=peer"};

	ucx_job_run(&job, peer_mode_fn, NULL);
}

static void loopback_fn(struct tj_rank *rk)
{
	char why[256] = "";
	bool ok;
	int n;

	one_transfer(rk, 0, 1, 1u << 20, true, 90, 0, 0, 8);
	if (rk->rank != 0)
		return;
	ok = tj_sockets_loopback(why, sizeof why, &n);
	TJ_CHECK(rk, n > 0, "no socket of this process found (%d)", n);
	TJ_CHECK(rk, ok, "%s, not loopback", why);
}

Test(ucx_tcp, sockets_stay_on_loopback_by_default, .timeout = 30)
{
	struct ucx_job job = {.n = 2, .tls = "tcp"};

	cr_assert_eq(unsetenv("UCX_NET_DEVICES"), 0);
	ucx_job_run(&job, loopback_fn, NULL);
}

/* Startup: open (bootstrap, workers, address exchange, hello round) and
 * the first message, reported for 2 and 4 ranks. */
static void startup_fn(struct tj_rank *rk)
{
	uint64_t t0 = dpl_clock_ns(), v;
	uint32_t j;

	for (j = 0; j < rk->size; j++) {
		if (j == rk->rank)
			continue;
		if (rk->rank < j) {
			token_send(rk, j, 95, rk->rank);
			v = token_recv(rk, j, 95);
		} else {
			v = token_recv(rk, j, 95);
			token_send(rk, j, 95, rk->rank);
		}
		TJ_CHECK(rk, v == j, "first message from %u carries %llu", j,
			 (unsigned long long)v);
	}
	if (rk->rank == 0)
		tj_note(rk, "startup budget, %u ranks: open %.2f ms, first "
			"exchange with every peer %.3f ms", rk->size,
			rk->val[UCX_VAL_OPEN_MS],
			(double)(dpl_clock_ns() - t0) / 1e6);
}

BOTH(startup_is_measured, 60)
{
	struct ucx_job two = {.n = 2, .tls = tls};
	struct ucx_job four = {.n = 4, .tls = tls};

	ucx_job_run(&two, startup_fn, NULL);
	ucx_job_run(&four, startup_fn, NULL);
}

/* ---- lifecycle --------------------------------------------------------- */

/* SysV shared memory segments created by this process. */
static int count_sysv_mine(void)
{
	char line[512];
	int n = 0, cpid;
	FILE *f = fopen("/proc/sysvipc/shm", "r");

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, " %*d %*d %*o %*u %d", &cpid) == 1 &&
		    cpid == (int)getpid())
			n++;
	fclose(f);
	return n;
}

#define CYCLES 8

/* Shared memory of UCX's posix transport still mapped by this process
 * (/dev/shm holds every process's segments, so count our mappings). */
static int count_posix(void)
{
	char line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL)
		if (strstr(line, "/dev/shm/ucx") != NULL)
			n++;
	fclose(f);
	return n;
}

/* Wait up to 3 s for count() to come down to at most `limit`: a
 * segment goes away only once the peer has detached it too. */
static int settle(int (*count)(void), int limit)
{
	int i, n = count();

	for (i = 0; i < 300 && n > limit; i++) {
		tj_sleep_ms(10);
		n = count();
	}
	return n;
}

/* Close and reopen the transport repeatedly: open files, POSIX and SysV
 * shared memory come back to what the second cycle left, and every cycle
 * still carries data. */
static void cycles_fn(struct tj_rank *rk)
{
	int fds0 = 0, posix0 = 0, sysv0 = 0, k, n, rc;

	for (k = 0; k < CYCLES; k++) {
		one_transfer(rk, 0, 1, 1u << 16, true, 130, 0, 0, (uint32_t)k);
		tj_close(rk);
		if (k == 1) { /* after UCX's one-time global setup */
			tj_sleep_ms(100);
			fds0 = tj_count_fds();
			posix0 = count_posix();
			sysv0 = settle(count_sysv_mine, 0);
		} else if (k > 1) {
			n = settle(tj_count_fds, fds0);
			TJ_CHECK(rk, n <= fds0, "cycle %d: %d open files, %d "
				 "after cycle 1", k, n, fds0);
			n = settle(count_posix, posix0);
			TJ_CHECK(rk, n <= posix0, "cycle %d: mappings of "
				 "/dev/shm/ucx* went from %d to %d", k, posix0,
				 n);
			n = settle(count_sysv_mine, sysv0);
			TJ_CHECK(rk, n <= sysv0, "cycle %d: SysV segments went "
				 "from %d to %d", k, sysv0, n);
		}
		tj_meet_renew(rk); /* a new rendezvous, as the first open */
		rc = ucx_open(rk);
		TJ_CHECK(rk, rc == 0, "reopen %d: %s", k, dpl_last_error());
	}
}

BOTH(open_close_cycles_leave_no_files_or_segments, 60)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, cycles_fn, NULL);
}

