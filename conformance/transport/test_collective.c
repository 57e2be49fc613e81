/*
 * test_collective.c - a backend's own iallreduce, when its table has
 * one (DPL_HAS_OP(ops, iallreduce)), posted through the checked layer:
 * exact sums over the whole world and over disjoint subgroups at once,
 * and the same bits on every member and in every run whatever the timing
 * (the contract's fixed reduction order).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const size_t counts[4] = {1, 7, 1000, 1u << 18};

/* Integer-valued elements: every partial sum is exact in f32 and f64. */
static double exact_value(uint32_t rank, size_t i)
{
	return (double)(rank + 1) * (double)(i % 97 + 1);
}

static void run_allreduce(struct tj_rank *rk, const uint32_t *group,
			  uint32_t n, void *buf, size_t count, uint32_t dtype,
			  uint64_t tag)
{
	void *req = tj_reqs(rk, 1);
	int rc;

	rc = dpl_transport_iallreduce(rk->t, req, group, n, buf, count, dtype,
				 DPL_MEM_HOST, tag);
	conf_check_code(rk, rc, "iallreduce");
	TJ_CHECK(rk, rc == 0, "iallreduce of %zu elements over %u ranks: "
			      "%s (%s)",
		 count, n, dpl_err_name(rc), dpl_last_error());
	rc = tj_wait(rk, req, 0, "an allreduce");
	TJ_CHECK(rk, rc == 0, "allreduce of %zu elements over %u ranks "
			      "completed with %s",
		 count, n, dpl_err_name(rc));
	tj_free(rk, req);
}

static void exact_rank(struct tj_rank *rk)
{
	static const uint32_t world[4] = {0, 1, 2, 3};
	static const uint32_t evens[2] = {0, 2}, odds[2] = {1, 3};
	const uint32_t *sub = rk->rank % 2 ? odds : evens;
	size_t c, i, count;
	uint32_t d;

	for (c = 0; c < 4; c++)
		for (d = 0; d < 2; d++) {
			size_t es = d == DPL_DTYPE_F32 ? 4 : 8;
			unsigned char *buf;
			double want, got;
			int pass;

			count = counts[c];
			buf = tj_alloc(rk, count * es);
			for (pass = 0; pass < 2; pass++) {
				const uint32_t *g = pass ? sub : world;
				uint32_t n = pass ? 2 : 4, m;

				for (i = 0; i < count; i++) {
					double v = exact_value(rk->rank, i);

					if (d == DPL_DTYPE_F32)
						((float *)buf)[i] = (float)v;
					else
						((double *)buf)[i] = v;
				}
				tj_step(rk, "allreduce of %zu %s over %s",
					count, d ? "f64" : "f32",
					pass ? "a pair" : "the world");
				run_allreduce(rk, g, n, buf, count, d,
					      100 + c * 4 + d * 2 + pass);
				for (i = 0; i < count; i++) {
					want = 0;
					for (m = 0; m < n; m++)
						want += exact_value(g[m], i);
					got = d == DPL_DTYPE_F32
						      ? ((float *)buf)[i]
						      : ((double *)buf)[i];
					TJ_CHECK(rk, got == want,
						 "allreduce of %zu %s over "
						 "%u ranks: element %zu is "
						 "%.17g, expected %.17g",
						 count, d ? "f64" : "f32", n,
						 i, got, want);
				}
			}
			tj_free(rk, buf);
		}
}

Test(collective, allreduce_sums_exactly, .timeout = 140)
{
	struct conf_job job = {.size = 4, .fn = exact_rank,
			       .deadline_s = 120};

	CONF_REQUIRE_OP(iallreduce,
			"the core's ring allreduce is used instead");
	conf_run(&job);
}

/* ---------------------------------------------------------------- */

#define DET_COUNT 100003
#define DET_RUNS 3

static double noisy(uint32_t rank, size_t i)
{
	uint64_t x = (uint64_t)rank * 0x9e3779b97f4a7c15ull ^ (i + 1);

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return ((double)(x >> 11) / 9007199254740992.0) * 2.0 - 1.0;
}

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static void det_rank(struct tj_rank *rk)
{
	static const uint32_t world[4] = {0, 1, 2, 3};
	uint64_t *hashes = (uint64_t *)tj_user(rk);
	double *buf = tj_alloc(rk, DET_COUNT * sizeof *buf);
	double ref;
	size_t i;
	uint32_t m;
	int run;

	for (run = 0; run < DET_RUNS; run++) {
		for (i = 0; i < DET_COUNT; i++)
			buf[i] = noisy(rk->rank, i);
		tj_barrier(rk);
		/* a different rank arrives last in every run */
		tj_sleep_ms(((rk->rank + (uint32_t)run) % 4) * 15);
		tj_step(rk, "run %d of a noisy f64 allreduce", run);
		run_allreduce(rk, world, 4, buf, DET_COUNT, DPL_DTYPE_F64,
			      200 + (uint64_t)run);
		for (i = 0; i < DET_COUNT; i += 997) {
			ref = 0;
			for (m = 0; m < 4; m++)
				ref += noisy(m, i);
			TJ_CHECK(rk, fabs(buf[i] - ref) <= 1e-12,
				 "run %d: element %zu is %.17g, the sum is "
				 "%.17g",
				 run, i, buf[i], ref);
		}
		hashes[run * 4 + rk->rank] = fnv(buf, DET_COUNT * sizeof *buf);
	}
	tj_barrier(rk);
	if (rk->rank != 0)
		return;
	for (run = 0; run < DET_RUNS; run++)
		for (m = 0; m < 4; m++)
			TJ_CHECK(rk, hashes[run * 4 + m] == hashes[0],
				 "run %d rank %u got other bits than run 0 "
				 "rank 0 (%016llx vs %016llx): the sum "
				 "depends on timing or rank",
				 run, m,
				 (unsigned long long)hashes[run * 4 + m],
				 (unsigned long long)hashes[0]);
}

Test(collective, allreduce_is_deterministic, .timeout = 140)
{
	struct conf_job job = {.size = 4, .fn = det_rank, .deadline_s = 120};

	CONF_REQUIRE_OP(iallreduce,
			"the core's ring allreduce is used instead");
	conf_run(&job);
}
