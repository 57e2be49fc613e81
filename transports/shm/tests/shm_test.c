/*
 * shm_test.c - the harness of shm_test.h.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/bootstrap.h>

#include "forked_ranks.h"
#include "shm_test.h"

const struct dpl_transport_ops *const O = &dpl_transport_shm;
struct job *J;
int RANK;

struct job *job_new(void)
{
	struct job *j = fr_shared(sizeof *j);

	j->port = fr_pick_port();
	return j;
}

void bad(const char *fmt, ...)
{
	struct rank_out *o = &J->out[RANK];
	va_list ap;

	if (o->bad++ == 0) {
		va_start(ap, fmt);
		vsnprintf(o->msg, sizeof o->msg, fmt, ap);
		va_end(ap);
	}
}

static void run_rank(int i, void *arg)
{
	rank_fn fn = *(rank_fn *)arg;

	RANK = i;
	fn(i);
}

void spawn(pid_t *pid, int n, rank_fn fn)
{
	fr_spawn(pid, n, run_rank, &fn);
}

void run(int n, rank_fn fn, int timeout_ms)
{
	pid_t pid[MAXR];
	int i;

	spawn(pid, n, fn);
	cr_assert_eq(fr_reap(pid, n, timeout_ms), n, "a rank crashed or hung");
	for (i = 0; i < n; i++) {
		cr_expect_eq(J->out[i].rc, 0, "rank %d init: %s", i,
			     J->out[i].msg);
		cr_expect_eq(J->out[i].bad, 0,
			     "rank %d: %d problems, first: %s", i,
			     J->out[i].bad, J->out[i].msg);
	}
}

static size_t stride(void)
{
	size_t a = _Alignof(max_align_t);

	return (O->req_size + a - 1) / a * a;
}

void *reqs_new(size_t n)
{
	void *r = calloc(n, stride());

	if (r == NULL)
		abort();
	return r;
}

void *REQ(void *base, size_t i)
{
	return (char *)base + i * stride();
}

dpl_transport *open_t(int rank, int world, const char *opts)
{
	struct rank_out *o = &J->out[rank];
	struct dpl_bootstrap_params bp;
	struct dpl_transport_params p;
	struct dpl_oob oob;
	dpl_bootstrap *b = NULL;
	dpl_transport *t = NULL;
	char root[64];

	snprintf(root, sizeof root, "127.0.0.1:%u", J->port);
	memset(&bp, 0, sizeof bp);
	bp.rank = (uint32_t)rank;
	bp.world_size = (uint32_t)world;
	bp.root = root;
	bp.timeout_ms = 10000;
	o->rc = dpl_bootstrap_open(&bp, &b);
	if (o->rc == 0) {
		dpl_bootstrap_oob(b, &oob);
		memset(&p, 0, sizeof p);
		p.rank = (uint32_t)rank;
		p.world_size = (uint32_t)world;
		p.oob = &oob;
		p.options = opts;
		p.timeout_ms = 10000;
		o->rc = dpl_transport_open(O, &p, &t);
		/* The transport keeps nothing of the rendezvous. */
		dpl_bootstrap_close(b);
	}
	if (o->rc != 0) {
		snprintf(o->msg, sizeof o->msg, "%s", dpl_last_error());
		return NULL;
	}
	return t;
}

int wait_all(dpl_transport *t, void *base, size_t n, int *st, int ms)
{
	uint64_t end = dpl_clock_ns() + (uint64_t)ms * 1000000u;
	size_t i, left = n;

	for (i = 0; i < n; i++)
		st[i] = DPL_EAGAIN;
	while (left > 0) {
		int rc = dpl_transport_progress(t);

		if (rc < 0)
			return rc;
		for (i = 0; i < n; i++)
			if (st[i] == DPL_EAGAIN) {
				st[i] = dpl_transport_test(t, REQ(base, i));
				left -= st[i] != DPL_EAGAIN;
			}
		if (left == 0 || dpl_clock_ns() > end)
			break;
		dpl_transport_wait(t, 1000000);
	}
	return left == 0 ? 0 : DPL_ETIMEDOUT;
}

int wait_one(dpl_transport *t, void *req, int ms)
{
	int st;

	wait_all(t, req, 1, &st, ms);
	return st;
}

bool await_flag(int i, int v, int ms)
{
	uint64_t end = dpl_clock_ns() + (uint64_t)ms * 1000000u;

	while (atomic_load(&J->flag[i]) < v)
		if (dpl_clock_ns() > end)
			return false;
		else
			fr_sleep_ms(1);
	return true;
}

bool await_flag_progress(dpl_transport *t, int i, int v, int ms)
{
	uint64_t end = dpl_clock_ns() + (uint64_t)ms * 1000000u;

	while (atomic_load(&J->flag[i]) < v) {
		if (dpl_clock_ns() > end)
			return false;
		dpl_transport_progress(t);
		dpl_transport_wait(t, 1000000);
	}
	return true;
}

static unsigned char pat(uint32_t seed, size_t i)
{
	uint32_t x = (uint32_t)i * 2654435761u ^ (seed * 40503u + 17u);

	return (unsigned char)(x >> 13 ^ x >> 3 ^ (uint32_t)(i >> 12));
}

void fill(unsigned char *b, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		b[i] = pat(seed, i);
}

size_t verify(const unsigned char *b, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != pat(seed, i))
			return i;
	return n;
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		abort();
	return p;
}

int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

int count_segments(const pid_t *pids, int n)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int found = 0, i;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		const char *p = strrchr(e->d_name, 'p');

		if (strncmp(e->d_name, "dpl-", 4) != 0 || p == NULL ||
		    p[-1] != '-')
			continue;
		for (i = 0; i < n; i++)
			if (atoi(p + 1) == pids[i])
				found++;
	}
	closedir(d);
	return found;
}
