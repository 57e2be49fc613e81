/*
 * ucx_ranks.c - the multi-process harness of the UCX module's tests, and
 * the helpers their cases share.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dpl/bootstrap.h>

#include "loopback_port.h"
#include "ucx_ranks.h"

#define CHILD_FAIL 10
#define CHILD_OPEN_FAIL 11

static struct job *cur_job; /* of the test process (rank 0) */
static bool in_child;

uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void kill_children(void)
{
	uint32_t i;

	if (cur_job == NULL)
		return;
	for (i = 1; i < cur_job->n; i++)
		if (cur_job->pid[i] > 0) {
			kill(cur_job->pid[i], SIGKILL);
			waitpid(cur_job->pid[i], NULL, 0);
			cur_job->pid[i] = 0;
		}
}

void rank_check(struct rank *r, bool cond, const char *file, int line,
		const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (cond)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (in_child) {
		fprintf(stderr, "rank %u: %s:%d: %s\n", r ? r->id : 0, file,
			line, msg);
		_exit(CHILD_FAIL);
	}
	kill_children();
	cr_assert_fail("rank 0: %s:%d: %s", file, line, msg);
}

void *req_new(struct rank *r)
{
	size_t sz = (r->o->req_size + 63) / 64 * 64;
	void *p = aligned_alloc(64, sz);

	check(r, p != NULL, "out of memory for a request");
	memset(p, 0xee, sz);
	return p;
}

int req_wait(struct rank *r, void *req, uint32_t ms)
{
	uint64_t end = mono_ns() + (uint64_t)ms * 1000000u;
	unsigned spins = 0;
	int rc;

	for (;;) {
		rc = dpl_transport_test(r->t, req);
		if (rc != DPL_EAGAIN)
			return rc;
		check(r, dpl_transport_progress(r->t) >= 0, "progress failed");
		if ((++spins & 1023) == 0) {
			if (mono_ns() > end)
				return DPL_ETIMEDOUT;
			sched_yield(); /* share small machines */
		}
	}
}

void send_now(struct rank *r, uint32_t peer, uint64_t tag, const void *buf,
	      size_t len)
{
	void *req = req_new(r);
	int rc = dpl_transport_isend(r->t, req, peer, tag, buf, len,
				     DPL_MEM_HOST);

	check(r, rc == 0, "isend to %u tag %#llx: %s (%s)", peer,
	      (unsigned long long)tag, dpl_err_name(rc), dpl_last_error());
	rc = req_wait(r, req, 10000);
	check(r, rc == 0, "send to %u tag %#llx of %zu bytes: %s (%s)", peer,
	      (unsigned long long)tag, len, dpl_err_name(rc),
	      dpl_last_error());
	free(req);
}

void recv_now(struct rank *r, uint32_t peer, uint64_t tag, void *buf,
	      size_t len)
{
	void *req = req_new(r);
	int rc = dpl_transport_irecv(r->t, req, peer, tag, buf, len,
				     DPL_MEM_HOST);

	check(r, rc == 0, "irecv from %u tag %#llx: %s (%s)", peer,
	      (unsigned long long)tag, dpl_err_name(rc), dpl_last_error());
	rc = req_wait(r, req, 10000);
	check(r, rc == 0, "receive from %u tag %#llx of %zu bytes: %s (%s)",
	      peer, (unsigned long long)tag, len, dpl_err_name(rc),
	      dpl_last_error());
	free(req);
}

void token_send(struct rank *r, uint32_t peer, uint64_t tag, uint64_t v)
{
	send_now(r, peer, tag, &v, sizeof v);
}

uint64_t token_recv(struct rank *r, uint32_t peer, uint64_t tag)
{
	uint64_t v = 0;

	recv_now(r, peer, tag, &v, sizeof v);
	return v;
}

void spin_ms(struct rank *r, uint32_t ms)
{
	uint64_t end = mono_ns() + (uint64_t)ms * 1000000u;

	while (mono_ns() < end) {
		check(r, dpl_transport_progress(r->t) >= 0,
		      "progress failed");
		sched_yield();
	}
}

void sleep_ms(uint32_t ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0)
		;
}

unsigned char *xmalloc(struct rank *r, size_t n)
{
	unsigned char *p = malloc(n ? n : 1);

	check(r, p != NULL, "out of memory for %zu bytes", n);
	return p;
}

void pattern_fill(unsigned char *buf, size_t len, uint32_t seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (unsigned char)(i * 131u + (i >> 9) + seed * 29u + 7u);
}

size_t pattern_bad(const unsigned char *buf, size_t len, uint32_t seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (buf[i] != (unsigned char)(i * 131u + (i >> 9) +
					      seed * 29u + 7u))
			return i;
	return len;
}

void one_transfer(struct rank *r, uint32_t from, uint32_t to, size_t len,
		  bool expected, uint64_t tag, size_t soff, size_t roff,
		  uint32_t seed)
{
	unsigned char *buf;
	void *req;
	size_t bad;
	int rc;

	if (r->id == from) {
		buf = xmalloc(r, len + soff);
		pattern_fill(buf + soff, len, seed);
		if (expected)
			check(r, token_recv(r, to, TOK + 1) == tag,
			      "wrong go token");
		req = req_new(r);
		rc = dpl_transport_isend(r->t, req, to, tag, buf + soff, len,
					 DPL_MEM_HOST);
		check(r, rc == 0, "isend %zu: %s", len, dpl_last_error());
		if (!expected)
			token_send(r, to, TOK + 2, tag);
		rc = req_wait(r, req, 10000);
		check(r, rc == 0, "send of %zu bytes (%s): %s (%s)", len,
		      expected ? "expected" : "unexpected", dpl_err_name(rc),
		      dpl_last_error());
		free(req);
		free(buf);
	} else if (r->id == to) {
		buf = xmalloc(r, len + roff + 64);
		memset(buf, 0x5c, len + roff + 64);
		req = req_new(r);
		if (expected) {
			rc = dpl_transport_irecv(r->t, req, from, tag,
						 buf + roff, len,
						 DPL_MEM_HOST);
			check(r, rc == 0, "irecv: %s", dpl_last_error());
			token_send(r, from, TOK + 1, tag);
		} else {
			check(r, token_recv(r, from, TOK + 2) == tag,
			      "wrong sent token");
			spin_ms(r, 2);
			rc = dpl_transport_irecv(r->t, req, from, tag,
						 buf + roff, len,
						 DPL_MEM_HOST);
			check(r, rc == 0, "irecv: %s", dpl_last_error());
		}
		rc = req_wait(r, req, 10000);
		check(r, rc == 0, "receive of %zu bytes (%s): %s (%s)", len,
		      expected ? "expected" : "unexpected", dpl_err_name(rc),
		      dpl_last_error());
		bad = pattern_bad(buf + roff, len, seed);
		check(r, bad == len, "%zu bytes (%s, offsets %zu/%zu): byte "
		      "%zu differs", len, expected ? "expected" : "unexpected",
		      soff, roff, bad);
		for (bad = 0; bad < 64; bad++)
			check(r, buf[roff + len + bad] == 0x5c,
			      "guard byte %zu after a %zu-byte receive "
			      "overwritten", bad, len);
		for (bad = 0; bad < roff; bad++)
			check(r, buf[bad] == 0x5c, "byte before the receive "
			      "buffer overwritten");
		free(req);
		free(buf);
	}
}

/* A free loopback port for the bootstrap root. */
static unsigned pick_port(void)
{
	int port = dpl_test_loopback_port();

	cr_assert_gt(port, 0, "no free port on 127.0.0.1");
	return (unsigned)port;
}

int rank_open(struct rank *r)
{
	struct dpl_bootstrap_params bp = {0};
	struct dpl_transport_params p = {0};
	struct dpl_oob oob;
	dpl_bootstrap *b = NULL;
	int rc;

	p.rank = r->id;
	p.world_size = r->job->n;
	p.options = r->job->options;
	p.timeout_ms = r->job->timeout_ms ? r->job->timeout_ms : 10000;
	bp.rank = p.rank;
	bp.world_size = p.world_size;
	bp.root = r->job->root;
	bp.timeout_ms = p.timeout_ms;
	r->t = NULL;
	r->ctx = NULL;
	if ((rc = dpl_bootstrap_open(&bp, &b)) != 0)
		return rc;
	dpl_bootstrap_oob(b, &oob);
	p.oob = &oob;
	rc = dpl_transport_open(r->o, &p, &r->t);
	dpl_bootstrap_close(b); /* the transport keeps no pointer to it */
	if (rc == 0)
		r->ctx = dpl_transport_ctx(r->t);
	return rc;
}

static void run_rank(struct job *job, uint32_t id, rank_fn fn, void *arg,
		     struct rank *r)
{
	uint64_t t0;
	int rc;

	memset(r, 0, sizeof *r);
	r->job = job;
	r->id = id;
	r->o = &dpl_transport_ucx;
	t0 = mono_ns();
	rc = rank_open(r);
	r->open_ns = mono_ns() - t0;
	if (rc != 0 && in_child) {
		fprintf(stderr, "rank %u: open: %s (%s)\n", id,
			dpl_err_name(rc), dpl_last_error());
		_exit(CHILD_OPEN_FAIL);
	}
	check(r, rc == 0, "open: %s (%s)", dpl_err_name(rc), dpl_last_error());
	fn(r, arg);
	dpl_transport_close(r->t);
	r->t = NULL;
}

void job_run(struct job *job, rank_fn fn, void *arg)
{
	uint64_t end;
	struct rank r0;
	uint32_t i;

	cr_assert(job->n >= 1 && job->n <= RANKS_MAX);
	if (job->tls != NULL)
		cr_assert_eq(setenv("UCX_TLS", job->tls, 1), 0);
	snprintf(job->root, sizeof job->root, "127.0.0.1:%u", pick_port());
	cur_job = job;
	job->pid[0] = getpid();
	fflush(NULL);
	for (i = 1; i < job->n; i++) {
		pid_t pid = fork();

		cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
		if (pid == 0) {
			struct rank r;

			in_child = true;
			run_rank(job, i, fn, arg, &r);
			_exit(0);
		}
		job->pid[i] = pid;
	}
	run_rank(job, 0, fn, arg, &r0);
	cr_log_info("%s: rank 0 opened in %.2f ms", job->tls ? job->tls : "",
		    (double)r0.open_ns / 1e6);
	end = mono_ns() + 20000000000ull;
	for (i = 1; i < job->n; i++) {
		int status = 0;
		pid_t w;

		while ((w = waitpid(job->pid[i], &status, WNOHANG)) == 0 &&
		       mono_ns() < end)
			nanosleep(&(struct timespec){0, 2000000}, NULL);
		if (w == 0)
			kill_children();
		cr_assert_eq(w, job->pid[i], "rank %u did not finish", i);
		job->pid[i] = 0;
		if (job->killed & (1u << i)) {
			cr_assert(WIFSIGNALED(status) &&
					  WTERMSIG(status) == SIGKILL,
				  "rank %u was to be killed", i);
			continue;
		}
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "rank %u failed (exit %d, signal %d)", i,
			  WIFEXITED(status) ? WEXITSTATUS(status) : -1,
			  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	}
	cur_job = NULL;
}
