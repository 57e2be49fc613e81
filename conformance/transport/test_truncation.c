/*
 * test_truncation.c - receives are exact-size in dpl: a message of
 * another length completes the receive with DPL_ETRUNC, writes nothing
 * past the receive buffer, lets the sender complete, and leaves the
 * endpoint usable (cases 17, 18 and 19 of the battery; case 19 checks
 * dpl's contract, under which a longer receive is DPL_ETRUNC too, not
 * the fabric's "completes with the actual length").
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define GUARD 256
#define GUARD_BYTE 0xee

struct tcase {
	size_t msg;
	size_t recv;
};

struct targ {
	size_t n;
	struct tcase c[4];
};

static long long guard_check(const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != GUARD_BYTE)
			return (long long)i;
	return -1;
}

static void trunc_one(struct tj_rank *rk, const struct tcase *c,
		      uint64_t tag, bool unexpected)
{
	size_t big = c->msg > c->recv ? c->msg : c->recv;
	unsigned char *buf = tj_alloc(rk, big + GUARD);
	void *rq = tj_reqs(rk, 4);
	const char *how = unexpected ? "unexpected" : "expected";
	long long bad;
	int rc;

	if (rk->rank == 0) {
		tj_fill(buf, c->msg, tag);
		if (!unexpected)
			tj_barrier(rk);
		tj_step(rk, "sending %zu bytes into a %zu-byte receive (%s)",
			c->msg, c->recv, how);
		conf_send(rk, tj_req(rk, rq, 0), 1, tag, buf, c->msg, NULL);
		if (unexpected) {
			tj_progress_for(rk, 20);
			tj_barrier(rk);
		}
		rc = tj_wait(rk, tj_req(rk, rq, 0), 0,
			     "the send of a truncated message");
		TJ_CHECK(rk, rc == 0 || rc == DPL_ETRUNC,
			 "send of %zu bytes into a %zu-byte receive (%s): "
			 "%s, expected 0 or DPL_ETRUNC",
			 c->msg, c->recv, how, dpl_err_name(rc));
		tj_step(rk, "the same tag again, exact size");
		conf_send(rk, tj_req(rk, rq, 1), 1, tag, buf, c->msg, NULL);
		rc = tj_wait(rk, tj_req(rk, rq, 1), 0, "a send after "
						       "truncation");
		TJ_CHECK(rk, rc == 0, "exact-size send after a truncation: "
				      "%s", dpl_err_name(rc));
		tj_barrier(rk);
		conf_exchange(rk, 1, tag + 1, 64, tag);
		return;
	}
	memset(buf, GUARD_BYTE, big + GUARD);
	if (unexpected)
		tj_barrier(rk);
	tj_step(rk, "receiving %zu bytes of a %zu-byte message (%s)",
		c->recv, c->msg, how);
	conf_recv(rk, tj_req(rk, rq, 0), 0, tag, buf, c->recv, NULL);
	if (!unexpected)
		tj_barrier(rk);
	rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "a truncated receive");
	TJ_CHECK(rk, rc == DPL_ETRUNC,
		 "%zu-byte receive of a %zu-byte message (%s): %s, "
		 "expected DPL_ETRUNC",
		 c->recv, c->msg, how, dpl_err_name(rc));
	bad = guard_check(buf + c->recv, GUARD);
	TJ_CHECK(rk, bad < 0,
		 "%zu-byte receive of a %zu-byte message (%s): byte %lld "
		 "after the receive buffer was written",
		 c->recv, c->msg, how, bad);
	tj_step(rk, "the same tag again, exact size");
	memset(buf, 0, big);
	conf_recv(rk, tj_req(rk, rq, 1), 0, tag, buf, c->msg, NULL);
	rc = tj_wait(rk, tj_req(rk, rq, 1), 0, "a receive after truncation");
	TJ_CHECK(rk, rc == 0,
		 "exact-size receive after a truncation (%s): %s; the "
		 "endpoint must stay usable",
		 how, dpl_err_name(rc));
	bad = tj_verify(buf, c->msg, tag);
	TJ_CHECK(rk, bad < 0,
		 "the message after a truncation differs at byte %lld", bad);
	tj_barrier(rk);
	conf_exchange(rk, 0, tag + 1, 64, tag);
}

static void trunc_rank(struct tj_rank *rk)
{
	const struct targ *a = rk->arg;
	size_t i;
	int v;

	for (i = 0; i < a->n; i++)
		for (v = 0; v < 2; v++) {
			trunc_one(rk, &a->c[i], 1000 + 16 * i + 4 * (uint64_t)v,
				  v == 1);
			tj_barrier(rk);
		}
}

Test(trunc, eager_shorter_receive, .timeout = 80)
{
	struct targ a = {.n = 3, .c = {{4096, 16}, {64, 1}, {100, 99}}};
	struct conf_job job = {.size = 2, .fn = trunc_rank, .arg = &a,
			       .deadline_s = 60};

	conf_run(&job);
}

Test(trunc, rendezvous_shorter_receive, .timeout = 80)
{
	struct targ a = {.n = 3,
			 .c = {{1u << 20, 16},
			       {1u << 20, 512u << 10},
			       {256u << 10, (256u << 10) - 1}}};
	struct conf_job job = {.size = 2, .fn = trunc_rank, .arg = &a,
			       .deadline_s = 60};

	conf_run(&job);
}

Test(trunc, longer_receive_is_etrunc, .timeout = 80)
{
	struct targ a = {.n = 3,
			 .c = {{16, 4096},
			       {512u << 10, 1u << 20},
			       {1, 256u << 10}}};
	struct conf_job job = {.size = 2, .fn = trunc_rank, .arg = &a,
			       .deadline_s = 60};

	conf_run(&job);
}
