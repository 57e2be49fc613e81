/*
 * test_alloc.c - dpl/transport.h: "the backend never calls malloc on the
 * data path". After a warm-up, two ranks exchange messages of 64 B,
 * 64 KiB and 1 MiB (eager and rendezvous on most fabrics) with the
 * battery's counting allocator hooks armed (alloc_count.c): posts,
 * tests and progress of the steady state must not call malloc, calloc,
 * realloc, free or the aligned allocators at all.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define AL_SIZES 3
#define AL_WARM 200
#define AL_ROUNDS 1000

static const size_t al_len[AL_SIZES] = {64, 64u << 10, 1u << 20};

/* Post, retrying DPL_EAGAIN with progress until `deadline`; nothing but
 * the transport is called (no logging, no harness). */
static int quiet_post(struct tj_rank *rk, bool send, void *req, uint32_t peer,
		      uint64_t tag, void *buf, size_t len, uint64_t deadline)
{
	int rc;

	for (;;) {
		rc = send ? dpl_transport_isend(rk->t, req, peer, tag, buf, len,
						DPL_MEM_HOST)
			  : dpl_transport_irecv(rk->t, req, peer, tag, buf, len,
						DPL_MEM_HOST);
		if (rc != DPL_EAGAIN)
			return rc;
		if (dpl_clock_ns() > deadline)
			return DPL_ETIMEDOUT;
		rc = dpl_transport_progress(rk->t);
		if (rc < 0)
			return rc;
	}
}

/* One exchange with the peer: a receive and a send posted, then tests
 * and progress until both completed. Returns 0 or the first error
 * (DPL_ETIMEDOUT past `deadline`). */
static int quiet_round(struct tj_rank *rk, void *rq, uint32_t peer,
		       size_t len, void *in, const void *out,
		       uint64_t deadline)
{
	void *r0 = tj_req(rk, rq, 0), *r1 = tj_req(rk, rq, 1);
	int rc0 = DPL_EAGAIN, rc1 = DPL_EAGAIN, rc;
	unsigned spins = 0;

	rc = quiet_post(rk, false, r0, peer, 77, in, len, deadline);
	if (rc != 0)
		return rc;
	rc = quiet_post(rk, true, r1, peer, 77, (void *)out, len, deadline);
	if (rc != 0)
		return rc; /* the receive stays posted: the rank fails */
	while (rc0 == DPL_EAGAIN || rc1 == DPL_EAGAIN) {
		rc = dpl_transport_progress(rk->t);
		if (rc < 0)
			return rc;
		if (rc0 == DPL_EAGAIN)
			rc0 = dpl_transport_test(rk->t, r0);
		if (rc1 == DPL_EAGAIN)
			rc1 = dpl_transport_test(rk->t, r1);
		if ((++spins & 63u) == 0) {
			if (dpl_clock_ns() > deadline)
				return DPL_ETIMEDOUT;
			sched_yield();
		}
	}
	return rc0 != 0 ? rc0 : rc1;
}

static void steady_rank(struct tj_rank *rk)
{
	uint32_t peer = 1 - rk->rank;
	unsigned char *out = tj_alloc(rk, 1u << 20);
	unsigned char *in = tj_alloc(rk, 1u << 20);
	void *rq = tj_reqs(rk, 2);
	bool threads = conf_threads();
	unsigned long long n;
	char first[64];
	unsigned s, i;
	size_t len;
	int rc;

	for (s = 0; s < AL_SIZES; s++) {
		len = al_len[s];
		tj_fill(out, len, 800 + 10 * s + rk->rank);
		tj_step(rk, "warming up: %u exchanges of %zu bytes", AL_WARM,
			len);
		for (i = 0; i < AL_WARM; i++) {
			conf_recv(rk, tj_req(rk, rq, 0), peer, 77, in, len,
				  NULL);
			conf_send(rk, tj_req(rk, rq, 1), peer, 77, out, len,
				  NULL);
			rc = tj_wait_all(rk, rq, 2, NULL, 0, "a warm-up "
							      "exchange");
			TJ_CHECK(rk, rc == 0, "warm-up exchange %u of %zu "
					      "bytes: %s",
				 i, len, dpl_err_name(rc));
		}
		/* one count per process: each rank's in a job of
		 * processes, both ranks' in a job of threads */
		if (!threads || rk->rank == 0)
			conf_alloc_reset();
		tj_barrier(rk);
		tj_step(rk, "%u exchanges of %zu bytes, allocations counted",
			AL_ROUNDS, len);
		conf_alloc_arm(true);
		for (i = 0, rc = 0; i < AL_ROUNDS && rc == 0; i++)
			rc = quiet_round(rk, rq, peer, len, in, out,
					 rk->deadline_ns);
		conf_alloc_arm(false);
		tj_barrier(rk);
		n = conf_alloc_calls(first, sizeof first);
		TJ_CHECK(rk, rc == 0, "exchange %u of %zu bytes: %s", i, len,
			 dpl_err_name(rc));
		TJ_CHECK(rk, tj_verify(in, len, 800 + 10 * s + peer) < 0,
			 "the last %zu-byte message differs from what rank %u "
			 "sent", len, peer);
		TJ_CHECK(rk, n == 0,
			 "%llu allocator calls during %u steady-state "
			 "exchanges of %zu bytes (posts, tests and progress; "
			 "the first: %s): a backend never allocates on the "
			 "data path",
			 n, AL_ROUNDS, len, first);
		tj_note(rk, "%zu bytes: no allocation in %u exchanges%s", len,
			AL_ROUNDS,
			conf_alloc_allowed() > 0
				? " but those of the libraries "
				  "DPL_CONF_ALLOC_ALLOW names"
				: "");
		if (conf_alloc_allowed() > 0)
			tj_note(rk, "%llu allocator calls of the libraries "
				    "DPL_CONF_ALLOC_ALLOW='%s' names during "
				    "%u exchanges of %zu bytes",
				conf_alloc_allowed(),
				getenv("DPL_CONF_ALLOC_ALLOW"), AL_ROUNDS, len);
		tj_barrier(rk);
	}
}

Test(memory, steady_state_posts_allocate_nothing, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = steady_rank, .deadline_s = 60};

	if (!conf_alloc_hooked())
		cr_skip_test("the allocator cannot be replaced in this build "
			     "(AddressSanitizer or ThreadSanitizer replace it "
			     "themselves, or the C library is not glibc): "
			     "steady-state allocations are not counted");
	conf_run(&job);
}
