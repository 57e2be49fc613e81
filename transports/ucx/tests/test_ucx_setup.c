/*
 * test_ucx_setup.c - the UCX transport's configuration and lifecycle
 * between real processes over loopback, each case once with UCX_TLS=tcp
 * and once with UCX_TLS=sm: the PEER error mode, bad posts refused by the
 * checked layer, loopback pinning, the startup time (reported, not
 * asserted) and open/close cycles without leaks.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ucx_ranks.h"

/* ---- configuration ---------------------------------------------------- */

static void peer_mode_fn(struct rank *r, void *arg)
{
	one_transfer(r, 1, 0, 1u << 20, true, 80, 0, 0, 5);
	one_transfer(r, 0, 1, 8, false, 81, 0, 0, 6);
}

BOTH(peer_error_mode_keeps_working, 30)
{
	struct job job = {.n = 2, .tls = tls, .options = "err_mode=peer"};

	job_run(&job, peer_mode_fn, NULL);
}

static void bad_posts_fn(struct rank *r, void *arg)
{
	unsigned char buf[8] = {0};
	void *req = req_new(r);
	uint32_t peer = 1 - r->id;

	/* Through the checked layer, which refuses them for every backend
	 * before the table sees them. */
	check(r, dpl_transport_isend(r->t, req, r->id, 1, buf, 8,
				     DPL_MEM_HOST) == DPL_EINVAL,
	      "send to itself");
	check(r, dpl_transport_isend(r->t, req, 2, 1, buf, 8,
				     DPL_MEM_HOST) == DPL_EINVAL,
	      "send to rank 2 of 2");
	check(r, strstr(dpl_last_error(), "peer 2") != NULL, "%s",
	      dpl_last_error());
	check(r, dpl_transport_irecv(r->t, req, peer, DPL_TAG_MAX + 1, buf, 8,
				     DPL_MEM_HOST) == DPL_EINVAL,
	      "tag beyond 60 bits");
	check(r, dpl_transport_isend(r->t, req, peer, 1, buf, 8,
				     DPL_MEM_CUDA) == DPL_ENOTSUP,
	      "CUDA memory");
	check(r, dpl_transport_irecv(r->t, req, peer, 1, NULL, 8,
				     DPL_MEM_HOST) == DPL_EINVAL,
	      "NULL buffer");
	/* Nothing was posted: the pair still talks. */
	one_transfer(r, 0, 1, 8, true, 1, 0, 0, 9);
	free(req);
}

BOTH(bad_posts_are_refused_and_post_nothing, 30)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, bad_posts_fn, NULL);
}

/* Local IPv4 addresses of this process's TCP sockets, from /proc. */
static int tcp_local_addrs(uint32_t *addr, int max)
{
	char path[320], line[512];
	unsigned long inodes[256];
	int ninodes = 0, n = 0;
	struct dirent *e;
	FILE *f;
	DIR *d = opendir("/proc/self/fd");

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL && ninodes < 256) {
		char target[64];
		ssize_t k;

		snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
		k = readlink(path, target, sizeof target - 1);
		if (k <= 0)
			continue;
		target[k] = '\0';
		if (sscanf(target, "socket:[%lu]", &inodes[ninodes]) == 1)
			ninodes++;
	}
	closedir(d);
	f = fopen("/proc/self/net/tcp", "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL && n < max) {
		unsigned long ino;
		unsigned a;
		int i;

		if (sscanf(line, " %*d: %x:%*x %*x:%*x %*x %*x:%*x %*x:%*x "
			   "%*x %*u %*u %lu", &a, &ino) != 2)
			continue;
		for (i = 0; i < ninodes; i++)
			if (inodes[i] == ino && ino != 0)
				addr[n++] = a;
	}
	fclose(f);
	return n;
}

static void loopback_fn(struct rank *r, void *arg)
{
	uint32_t addr[64];
	int n, i;

	one_transfer(r, 0, 1, 1u << 20, true, 90, 0, 0, 8);
	if (r->id != 0)
		return;
	n = tcp_local_addrs(addr, 64);
	check(r, n > 0, "no TCP socket of this process found (%d)", n);
	for (i = 0; i < n; i++)
		check(r, (addr[i] & 0xff) == 127, "a socket is bound to "
		      "%u.%u.%u.%u, not loopback", addr[i] & 0xff,
		      (addr[i] >> 8) & 0xff, (addr[i] >> 16) & 0xff,
		      addr[i] >> 24);
}

Test(ucx_tcp, sockets_stay_on_loopback_by_default, .timeout = 30)
{
	struct job job = {.n = 2, .tls = "tcp"};

	cr_assert_eq(unsetenv("UCX_NET_DEVICES"), 0);
	job_run(&job, loopback_fn, NULL);
}

/* Startup: open (bootstrap, workers, address exchange, hello round) and
 * the first message, reported for 2 and 4 ranks. */
static void startup_fn(struct rank *r, void *arg)
{
	uint64_t t0 = mono_ns(), v;
	uint32_t j;

	for (j = 0; j < r->job->n; j++) {
		if (j == r->id)
			continue;
		if (r->id < j) {
			token_send(r, j, 95, r->id);
			v = token_recv(r, j, 95);
		} else {
			v = token_recv(r, j, 95);
			token_send(r, j, 95, r->id);
		}
		check(r, v == j, "first message from %u carries %llu", j,
		      (unsigned long long)v);
	}
	if (r->id == 0)
		cr_log_info("startup budget, %u ranks: open %.2f ms, first "
			    "exchange with every peer %.3f ms", r->job->n,
			    (double)r->open_ns / 1e6,
			    (double)(mono_ns() - t0) / 1e6);
}

BOTH(startup_is_measured, 60)
{
	struct job two = {.n = 2, .tls = tls};
	struct job four = {.n = 4, .tls = tls};

	job_run(&two, startup_fn, NULL);
	job_run(&four, startup_fn, NULL);
}

/* ---- lifecycle --------------------------------------------------------- */

static int count_dir(const char *path, const char *prefix)
{
	struct dirent *e;
	int n = 0;
	DIR *d = opendir(path);

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.' &&
		    strncmp(e->d_name, prefix, strlen(prefix)) == 0)
			n++;
	closedir(d);
	return n;
}

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

static int count_fds(void)
{
	return count_dir("/proc/self/fd", "");
}

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
		sleep_ms(10);
		n = count();
	}
	return n;
}

/* Close and reopen the transport repeatedly: open files, POSIX and SysV
 * shared memory come back to what the second cycle left, and every cycle
 * still carries data. */
static void cycles_fn(struct rank *r, void *arg)
{
	int fds0 = 0, posix0 = 0, sysv0 = 0, k, n, rc;

	for (k = 0; k < CYCLES; k++) {
		one_transfer(r, 0, 1, 1u << 16, true, 130, 0, 0, (uint32_t)k);
		dpl_transport_close(r->t);
		r->t = NULL;
		if (k == 1) { /* after UCX's one-time global setup */
			sleep_ms(100);
			fds0 = count_fds();
			posix0 = count_posix();
			sysv0 = settle(count_sysv_mine, 0);
		} else if (k > 1) {
			n = settle(count_fds, fds0);
			check(r, n <= fds0, "cycle %d: %d open files, %d "
			      "after cycle 1", k, n, fds0);
			n = settle(count_posix, posix0);
			check(r, n <= posix0, "cycle %d: mappings of "
			      "/dev/shm/ucx* went from %d to %d", k, posix0, n);
			n = settle(count_sysv_mine, sysv0);
			check(r, n <= sysv0, "cycle %d: SysV segments went "
			      "from %d to %d", k, sysv0, n);
		}
		rc = rank_open(r); /* a new rendezvous, as the first open */
		check(r, rc == 0, "reopen %d: %s", k, dpl_last_error());
	}
}

BOTH(open_close_cycles_leave_no_files_or_segments, 60)
{
	struct job job = {.n = 2, .tls = tls};

	job_run(&job, cycles_fn, NULL);
}

