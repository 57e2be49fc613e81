/*
 * test_collective.c - a backend's own iallreduce, when its table has
 * one (DPL_HAS_OP(ops, iallreduce)), posted through the checked layer:
 * exact sums over the whole world and over disjoint subgroups at once,
 * of every dtype (a backend may refuse a dtype, or host memory, with
 * DPL_ENOTSUP alike on every member: the runner then uses the core's
 * ring; those dtypes are left out, and a case where every one was
 * refused is skipped, saying so), and the
 * same bits on every member and in every run whatever the timing (the
 * contract's fixed reduction order).
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
static const char *const dtype_names[DPL_DTYPE__COUNT] = {"f32", "f64",
							  "bf16", "f16"};

/* Integer-valued elements: every partial sum is exact in f32 and f64,
 * and, kept below 256 for the 16-bit types, in bf16 and f16. */
static double exact_value(uint32_t rank, size_t i, uint32_t dtype)
{
	size_t period = dpl_dtype_size(dtype) == 2 ? 13 : 97;

	return (double)(rank + 1) * (double)(i % period + 1);
}

static void put(void *buf, size_t i, uint32_t dtype, double v)
{
	switch (dtype) {
	case DPL_DTYPE_F32:
		((float *)buf)[i] = (float)v;
		break;
	case DPL_DTYPE_F64:
		((double *)buf)[i] = v;
		break;
	case DPL_DTYPE_BF16:
		((uint16_t *)buf)[i] = dpl_f32_to_bf16((float)v);
		break;
	default:
		((uint16_t *)buf)[i] = dpl_f32_to_f16((float)v);
	}
}

static double get(const void *buf, size_t i, uint32_t dtype)
{
	switch (dtype) {
	case DPL_DTYPE_F32:
		return ((const float *)buf)[i];
	case DPL_DTYPE_F64:
		return ((const double *)buf)[i];
	case DPL_DTYPE_BF16:
		return dpl_bf16_to_f32(((const uint16_t *)buf)[i]);
	default:
		return dpl_f16_to_f32(((const uint16_t *)buf)[i]);
	}
}

/* Post and complete an allreduce; false when the backend refused it
 * with DPL_ENOTSUP, which the contract allows for a dtype or a memory
 * kind (a 16-bit dtype; host memory, for a backend that reduces only
 * device memory) as long as every member refuses alike: a member that
 * did not refuse would wait for the others and fail the job. */
static bool run_allreduce(struct tj_rank *rk, const uint32_t *group,
			  uint32_t n, void *buf, size_t count, uint32_t dtype,
			  uint64_t tag)
{
	void *req = tj_reqs(rk, 1);
	int rc;

	rc = dpl_transport_iallreduce(rk->t, req, group, n, buf, count, dtype,
				 DPL_MEM_HOST, tag);
	conf_check_code(rk, rc, "iallreduce");
	if (rc == DPL_ENOTSUP) {
		tj_free(rk, req);
		return false;
	}
	TJ_CHECK(rk, rc == 0, "iallreduce of %zu elements over %u ranks: "
			      "%s (%s)",
		 count, n, dpl_err_name(rc), dpl_last_error());
	rc = tj_wait(rk, req, 0, "an allreduce");
	TJ_CHECK(rk, rc == 0, "allreduce of %zu elements over %u ranks "
			      "completed with %s",
		 count, n, dpl_err_name(rc));
	tj_free(rk, req);
	return true;
}

static void exact_rank(struct tj_rank *rk)
{
	static const uint32_t world[4] = {0, 1, 2, 3};
	static const uint32_t evens[2] = {0, 2}, odds[2] = {1, 3};
	const uint32_t *sub = rk->rank % 2 ? odds : evens;
	bool refused[DPL_DTYPE__COUNT] = {false};
	size_t c, i, count;
	uint32_t d;

	for (c = 0; c < 4; c++)
		for (d = 0; d < DPL_DTYPE__COUNT; d++) {
			size_t es = dpl_dtype_size(d);
			unsigned char *buf;
			double want, got;
			int pass;

			if (refused[d])
				continue;
			count = counts[c];
			buf = tj_alloc(rk, count * es);
			for (pass = 0; pass < 2 && !refused[d]; pass++) {
				const uint32_t *g = pass ? sub : world;
				uint32_t n = pass ? 2 : 4, m;

				for (i = 0; i < count; i++)
					put(buf, i, d,
					    exact_value(rk->rank, i, d));
				tj_step(rk, "allreduce of %zu %s over %s",
					count, dtype_names[d],
					pass ? "a pair" : "the world");
				if (!run_allreduce(rk, g, n, buf, count, d,
						   100 + c * 8 + d * 2 +
							   pass)) {
					refused[d] = true;
					tj_note(rk, "%s refused with "
						"DPL_ENOTSUP: the core's ring "
						"reduces it", dtype_names[d]);
					break;
				}
				for (i = 0; i < count; i++) {
					want = 0;
					for (m = 0; m < n; m++)
						want += exact_value(g[m], i, d);
					got = get(buf, i, d);
					TJ_CHECK(rk, got == want,
						 "allreduce of %zu %s over "
						 "%u ranks: element %zu is "
						 "%.17g, expected %.17g",
						 count, dtype_names[d], n, i,
						 got, want);
				}
			}
			tj_free(rk, buf);
		}
	for (d = 0; d < DPL_DTYPE__COUNT; d++)
		rk->val[0] += !refused[d];
}

/* A backend that refused every reduction of host memory has nothing
 * checked here: the case is skipped, saying so, not passed. */
static void skip_if_all_refused(const struct conf_job *job)
{
	if (job->val[0][0] == 0)
		cr_skip_test("%s refuses iallreduce on host memory with "
			     "DPL_ENOTSUP for every dtype (the contract "
			     "allows it; the core's ring reduces host "
			     "memory): nothing to check here",
			     conf_ops()->name);
}

Test(collective, allreduce_sums_exactly, .timeout = 140)
{
	struct conf_job job = {.size = 4, .fn = exact_rank,
			       .deadline_s = 120};

	CONF_REQUIRE_OP(iallreduce,
			"the core's ring allreduce is used instead");
	conf_run(&job);
	skip_if_all_refused(&job);
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

/* The dtypes of the noisy runs, and how far each sum of four elements in
 * [-1, 1) may be from the exact one: three roundings at most. */
static const uint32_t det_dtypes[3] = {DPL_DTYPE_F64, DPL_DTYPE_BF16,
				       DPL_DTYPE_F16};
static const double det_tol[3] = {1e-12, 3 * 4 * 0x1p-8, 3 * 4 * 0x1p-11};

static void det_rank(struct tj_rank *rk)
{
	static const uint32_t world[4] = {0, 1, 2, 3};
	uint64_t *hashes = (uint64_t *)tj_user(rk);
	void *buf = tj_alloc(rk, DET_COUNT * sizeof(double));
	uint64_t *h;
	double ref, got;
	size_t i, bytes;
	uint32_t m, d, k;
	int run;

	for (k = 0; k < 3; k++) {
		d = det_dtypes[k];
		bytes = DET_COUNT * dpl_dtype_size(d);
		h = hashes + k * DET_RUNS * 4;
		for (run = 0; run < DET_RUNS; run++) {
			for (i = 0; i < DET_COUNT; i++)
				put(buf, i, d, noisy(rk->rank, i));
			tj_barrier(rk);
			/* a different rank arrives last in every run */
			tj_sleep_ms(((rk->rank + (uint32_t)run) % 4) * 15);
			tj_step(rk, "run %d of a noisy %s allreduce", run,
				dtype_names[d]);
			if (!run_allreduce(rk, world, 4, buf, DET_COUNT, d,
					   200 + k * DET_RUNS +
						   (uint64_t)run)) {
				tj_note(rk, "%s refused with DPL_ENOTSUP",
					dtype_names[d]);
				h[0] = 0; /* every member refuses alike */
				break;
			}
			if (run == 0)
				rk->val[0]++;
			for (i = 0; i < DET_COUNT; i += 997) {
				ref = 0;
				for (m = 0; m < 4; m++)
					ref += noisy(m, i);
				got = get(buf, i, d);
				TJ_CHECK(rk, fabs(got - ref) <= det_tol[k],
					 "%s run %d: element %zu is %.17g, "
					 "the sum is %.17g",
					 dtype_names[d], run, i, got, ref);
			}
			h[run * 4 + rk->rank] = fnv(buf, bytes);
		}
	}
	tj_barrier(rk);
	if (rk->rank != 0)
		return;
	for (k = 0; k < 3; k++) {
		h = hashes + k * DET_RUNS * 4;
		for (run = 0; run < DET_RUNS && h[0] != 0; run++)
			for (m = 0; m < 4; m++)
				TJ_CHECK(rk, h[run * 4 + m] == h[0],
					 "%s run %d rank %u got other bits "
					 "than run 0 rank 0 (%016llx vs "
					 "%016llx): the sum depends on "
					 "timing or rank",
					 dtype_names[det_dtypes[k]], run, m,
					 (unsigned long long)h[run * 4 + m],
					 (unsigned long long)h[0]);
	}
}

Test(collective, allreduce_is_deterministic, .timeout = 140)
{
	struct conf_job job = {.size = 4, .fn = det_rank, .deadline_s = 120};

	CONF_REQUIRE_OP(iallreduce,
			"the core's ring allreduce is used instead");
	conf_run(&job);
	skip_if_all_refused(&job);
}
