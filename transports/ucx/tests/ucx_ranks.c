/*
 * ucx_ranks.c - the UCX cases' jobs on test_job, and the steps the cases
 * share.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "ucx_ranks.h"

/* Flags UCX_FLAG_KILL + r: 1 once a rank asked for r's death, 2 once the
 * watch sent SIGKILL, 3 when sending it failed. */
#define UCX_FLAG_KILL 0

/* What every rank runs: the case's function between an open and a
 * close. */
struct ucx_case {
	tj_rank_fn fn;
	void *arg;
};

/* The bootstrap waits at least this long for the others, whatever the
 * transport's own (liveness) timeout: a case that sets that to a few
 * hundred milliseconds is about the transport, not the rendezvous, which
 * takes longer than that under a sanitizer on a loaded machine. */
#define BOOT_MIN_MS 10000u

int ucx_open(struct tj_rank *rk)
{
	uint32_t tmo = rk->job->timeout_ms ? rk->job->timeout_ms : 10000u;

	return tj_open_boot(rk, &dpl_transport_ucx, rk->job->options, tmo,
			    tmo > BOOT_MIN_MS ? tmo : BOOT_MIN_MS);
}

static void ucx_rank(struct tj_rank *rk)
{
	const struct ucx_case *c = rk->arg;
	uint64_t t0 = dpl_clock_ns();
	int rc;

	rk->arg = c->arg;
	tj_step(rk, "opening rank %u of %u at '%s'", rk->rank, rk->size,
		tj_meet(rk));
	rc = ucx_open(rk);
	rk->val[UCX_VAL_OPEN_MS] = (double)(dpl_clock_ns() - t0) / 1e6;
	TJ_CHECK(rk, rc == 0, "open: %s (%s)", dpl_err_name(rc),
		 dpl_last_error());
	tj_step(rk, "running");
	c->fn(rk);
	tj_close(rk);
}

/* A progress or wait call that fails fails the rank, wherever test_job
 * makes it. */
static int ucx_check(struct tj_rank *rk, int rc, const char *what)
{
	TJ_CHECK(rk, rc >= 0 || (strcmp(what, "progress") != 0 &&
				 strcmp(what, "wait") != 0),
		 "%s failed: %s (%s)", what, dpl_err_name(rc),
		 dpl_last_error());
	return rc;
}

/* The watch: kills the ranks asked for until every rank of the killed
 * mask (job->may_die) was killed or ended; at the latest 15 s after the
 * job's deadline, when the harness has reaped every rank or given up. */
static void ucx_watch(struct tj_job *job)
{
	uint64_t end = dpl_clock_ns() +
		       (uint64_t)(job->deadline_ms + 15000) * 1000000u;
	uint32_t left = job->may_die, i;
	int rc;

	while (left != 0 && dpl_clock_ns() < end) {
		for (i = 0; i < job->size; i++) {
			if ((left & (1u << i)) == 0)
				continue;
			if (tj_job_flag(job, UCX_FLAG_KILL + i) == 1) {
				rc = tj_job_signal(job, i, SIGKILL);
				tj_job_flag_set(job, UCX_FLAG_KILL + i,
						rc == 0 ? 2 : 3);
				left &= ~(1u << i);
			} else if (tj_job_ended(job, i, 0)) {
				left &= ~(1u << i);
			}
		}
		tj_sleep_ms(1);
	}
}

void ucx_kill(struct tj_rank *rk, uint32_t peer)
{
	TJ_CHECK(rk, (rk->job->may_die & (1u << peer)) != 0,
		 "rank %u is not to be killed", peer);
	tj_flag_set(rk, UCX_FLAG_KILL + peer, 1);
	tj_flag_wait(rk, UCX_FLAG_KILL + peer, 2, 0);
	TJ_CHECK(rk, tj_flag_get(rk, UCX_FLAG_KILL + peer) == 2,
		 "the test process could not kill rank %u", peer);
}

void ucx_job_run(const struct ucx_job *job, tj_rank_fn fn, void *arg)
{
	struct ucx_case c = {fn, arg};
	struct tj_job tj = {
		.size = job->n,
		.fn = ucx_rank,
		.arg = &c,
		.deadline_ms = 25000, /* inside the shortest case's timeout */
		.may_die = job->killed,
		.options = job->options,
		.timeout_ms = job->timeout_ms,
		.check = ucx_check,
		.watch = ucx_watch,
	};
	int exits[UCX_RANKS_MAX] = {0};
	const struct tj_slot *s;
	uint32_t i;
	int rc;

	cr_assert(job->n >= 1 && job->n <= UCX_RANKS_MAX);
	if (job->tls != NULL)
		cr_assert_eq(setenv("UCX_TLS", job->tls, 1), 0);
	rc = tj_job_run(&tj);
	for (i = 0; i < job->n; i++) {
		if ((s = tj_job_slot(&tj, i)) == NULL)
			continue;
		if (i == 0)
			cr_log_info("%s: rank 0 opened in %.2f ms",
				    job->tls ? job->tls : "",
				    s->val[UCX_VAL_OPEN_MS]);
		if (s->note[0] != '\0')
			cr_log_info("rank %u: %s", i, s->note);
		exits[i] = tj_job_exit(&tj, i);
	}
	tj_job_free(&tj);
	cr_assert_eq(rc, 0, "%s", tj.report);
	for (i = 0; i < job->n; i++)
		if (job->killed & (1u << i))
			cr_assert_eq(exits[i], -SIGKILL, "rank %u was to be "
				     "killed; it ended with %d", i, exits[i]);
}

void *req_new(struct tj_rank *rk, size_t n)
{
	void *p = tj_reqs(rk, n);

	memset(p, 0xee, n * tj_req_stride(rk));
	return p;
}

void send_now(struct tj_rank *rk, uint32_t peer, uint64_t tag,
	      const void *buf, size_t len)
{
	int rc = tj_send(rk, peer, tag, buf, len, 10000);

	TJ_CHECK(rk, rc == 0, "send to %u tag %#llx of %zu bytes: %s (%s)",
		 peer, (unsigned long long)tag, len, dpl_err_name(rc),
		 dpl_last_error());
}

void recv_now(struct tj_rank *rk, uint32_t peer, uint64_t tag, void *buf,
	      size_t len)
{
	int rc = tj_recv(rk, peer, tag, buf, len, 10000);

	TJ_CHECK(rk, rc == 0,
		 "receive from %u tag %#llx of %zu bytes: %s (%s)", peer,
		 (unsigned long long)tag, len, dpl_err_name(rc),
		 dpl_last_error());
}

void token_send(struct tj_rank *rk, uint32_t peer, uint64_t tag, uint64_t v)
{
	send_now(rk, peer, tag, &v, sizeof v);
}

uint64_t token_recv(struct tj_rank *rk, uint32_t peer, uint64_t tag)
{
	uint64_t v = 0;

	recv_now(rk, peer, tag, &v, sizeof v);
	return v;
}

void one_transfer(struct tj_rank *rk, uint32_t from, uint32_t to,
		  size_t len, bool expected, uint64_t tag, size_t soff,
		  size_t roff, uint32_t seed)
{
	const char *kind = expected ? "expected" : "unexpected";
	unsigned char *buf;
	long long bad;
	void *req;
	size_t i;
	int rc;

	if (rk->rank == from) {
		buf = tj_alloc(rk, len + soff);
		tj_fill(buf + soff, len, seed);
		if (expected)
			TJ_CHECK(rk, token_recv(rk, to, TOK + 1) == tag,
				 "wrong go token");
		req = req_new(rk, 1);
		rc = dpl_transport_isend(rk->t, req, to, tag, buf + soff, len,
					 DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "isend %zu: %s", len, dpl_last_error());
		if (!expected)
			token_send(rk, to, TOK + 2, tag);
		rc = tj_wait(rk, req, 10000, NULL);
		TJ_CHECK(rk, rc == 0, "send of %zu bytes (%s): %s (%s)", len,
			 kind, dpl_err_name(rc), dpl_last_error());
		tj_free(rk, req);
		tj_free(rk, buf);
	} else if (rk->rank == to) {
		buf = tj_alloc(rk, len + roff + 64);
		memset(buf, 0x5c, len + roff + 64);
		req = req_new(rk, 1);
		if (expected) {
			rc = dpl_transport_irecv(rk->t, req, from, tag,
						 buf + roff, len,
						 DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "irecv: %s", dpl_last_error());
			token_send(rk, from, TOK + 1, tag);
		} else {
			TJ_CHECK(rk, token_recv(rk, from, TOK + 2) == tag,
				 "wrong sent token");
			tj_progress_for(rk, 2);
			rc = dpl_transport_irecv(rk->t, req, from, tag,
						 buf + roff, len,
						 DPL_MEM_HOST);
			TJ_CHECK(rk, rc == 0, "irecv: %s", dpl_last_error());
		}
		rc = tj_wait(rk, req, 10000, NULL);
		TJ_CHECK(rk, rc == 0, "receive of %zu bytes (%s): %s (%s)",
			 len, kind, dpl_err_name(rc), dpl_last_error());
		bad = tj_verify(buf + roff, len, seed);
		TJ_CHECK(rk, bad < 0, "%zu bytes (%s, offsets %zu/%zu): byte "
			 "%lld differs", len, kind, soff, roff, bad);
		for (i = 0; i < 64; i++)
			TJ_CHECK(rk, buf[roff + len + i] == 0x5c,
				 "guard byte %zu after a %zu-byte receive "
				 "overwritten", i, len);
		for (i = 0; i < roff; i++)
			TJ_CHECK(rk, buf[i] == 0x5c, "byte before the "
				 "receive buffer overwritten");
		tj_free(rk, req);
		tj_free(rk, buf);
	}
}
