/*
 * test_policy_looped.c - the policies with V chunks per rank over S <= 16,
 * M <= 64: looped-bfs (PyTorch's ScheduleLoopedBFS order, its closed-form
 * makespan, M V micro-batches alive per rank) and interleaved with any M
 * (micro-batch groups, today's order where M is a multiple of S, peak per
 * rank within min(M V, (V - 1) G + 2 (S - r - 1) + 1)); each (stage, mb)
 * computed once, valid as built and lowered under rendezvous sends.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>

#include "sched_util.h"

#define SMAX 16
#define MMAX 64

static const struct dpl_stage_cost FB = {1, 2, 0, 0};

static dpl_schedule *build(uint32_t S, uint32_t M, enum dpl_policy p,
			   uint32_t V)
{
	struct dpl_schedule_params prm = {.stages = S, .microbatches = M,
					  .policy = p, .chunks = V};
	dpl_schedule *s = NULL;

	cr_assert_eq(dpl_schedule_build(&prm, &s), 0, "S=%u M=%u V=%u %s: %s",
		     S, M, V, dpl_policy_name(p), dpl_last_error());
	return s;
}

static double makespan(const dpl_schedule *s)
{
	struct dpl_sim_params p = {.uniform = FB};
	struct dpl_sim_summary sum;
	dpl_sim *sim;

	cr_assert_eq(dpl_sim_run(s, &p, &sim), 0, "%s", dpl_last_error());
	dpl_sim_summary(sim, &sum);
	dpl_sim_destroy(sim);
	return sum.makespan;
}

/*
 * Loop numbering, each (stage, mb) F and B exactly once on the stage's
 * rank; valid compute-only, lowered, and the same makespan lowered.
 */
static void check_common(dpl_schedule *s, uint32_t S, uint32_t M, uint32_t V)
{
	uint32_t n = S * V;
	unsigned char *seen = calloc((size_t)n * M, 2);
	struct dpl_schedule_issue is;
	double before;

	cr_assert_not_null(seen);
	cr_assert_eq(dpl_schedule_ranks(s), S);
	cr_assert_eq(dpl_schedule_stages(s), n);
	for (uint32_t r = 0; r < S; r++) {
		size_t len;
		const struct dpl_action *a = dpl_schedule_actions(s, r, &len);

		cr_assert_eq(len, 2 * (size_t)M * V);
		for (size_t i = 0; i < len; i++) {
			size_t k = ((size_t)a[i].stage * M + a[i].microbatch) * 2 +
				   (a[i].kind == DPL_ACT_B);

			cr_assert(a[i].kind == DPL_ACT_F || a[i].kind == DPL_ACT_B);
			cr_assert_eq(a[i].stage % S, r);
			cr_assert_eq(dpl_schedule_stage_rank(s, a[i].stage), r);
			cr_assert_lt(a[i].microbatch, M);
			cr_assert_eq(seen[k]++, 0, "S=%u M=%u V=%u: %u/%u twice",
				     S, M, V, a[i].stage, a[i].microbatch);
		}
	}
	free(seen);
	cr_assert_eq(dpl_schedule_validate(s, &is), 0, "S=%u M=%u V=%u: %s", S,
		     M, V, is.message);
	before = makespan(s);
	cr_assert_eq(dpl_schedule_lower(s), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_schedule_validate(s, &is), 0,
		     "S=%u M=%u V=%u lowered: %s", S, M, V, is.message);
	cr_assert_float_eq(makespan(s), before, 1e-9);
}

/* Every S <= 16 and M <= 64 with V = 2, 3; V = 4 on odd M. */
static int in_range(uint32_t M, uint32_t V) { return V < 4 || M % 2 == 1; }

Test(looped_bfs, breadth_first_order_and_closed_form, .timeout = 240)
{
	for (uint32_t V = 2; V <= 4; V++)
		for (uint32_t S = 1; S <= SMAX; S++)
			for (uint32_t M = 1; M <= MMAX; M++) {
				dpl_schedule *s;
				uint32_t hi = M > S ? M : S, lo = M < S ? M : S;

				if (!in_range(M, V))
					continue;
				s = build(S, M, DPL_POLICY_LOOPED_BFS, V);
				for (uint32_t r = 0; r < S; r++) {
					size_t n;
					const struct dpl_action *a =
					    dpl_schedule_actions(s, r, &n);

					/* PyTorch's order: F chunk-major,
					 * then B in reverse. */
					for (size_t k = 0; k < (size_t)M * V; k++) {
						const struct dpl_action *f = &a[k];
						const struct dpl_action *b =
						    &a[(size_t)M * V + k];

						cr_assert_eq(f->kind, DPL_ACT_F);
						cr_assert_eq(f->stage, (k / M) * S + r);
						cr_assert_eq(f->microbatch, k % M);
						cr_assert_eq(b->kind, DPL_ACT_B);
						cr_assert_eq(b->stage,
							     (V - 1 - k / M) * S + r);
						cr_assert_eq(b->microbatch,
							     M - 1 - k % M);
					}
					cr_assert_eq(sched_rank_peak(s, r), M * V);
				}
				for (uint32_t st = 0; st < S * V; st++)
					cr_assert_eq(dpl_schedule_bound(s, st), M);
				cr_assert_float_eq(makespan(s),
						   3.0 * V * hi + 3.0 * (lo - 1),
						   1e-9, "S=%u M=%u V=%u", S, M,
						   V);
				check_common(s, S, M, V);
				dpl_schedule_destroy(s);
			}
}

/* The first (largest) group: max(1, M / S) groups as even as can be. */
static uint32_t group0(uint32_t S, uint32_t M)
{
	uint32_t rounds = M / S > 0 ? M / S : 1;

	return (M + rounds - 1) / rounds;
}

Test(interleaved, any_microbatch_count, .timeout = 240)
{
	for (uint32_t V = 2; V <= 4; V++)
		for (uint32_t S = 1; S <= SMAX; S++)
			for (uint32_t M = 1; M <= MMAX; M++) {
				dpl_schedule *s;

				if (!in_range(M, V))
					continue;
				s = build(S, M, DPL_POLICY_INTERLEAVED, V);
				for (uint32_t r = 0; r < S; r++) {
					uint32_t warm = (V - 1) * group0(S, M) +
							2 * (S - r - 1) + 1;

					cr_assert_leq(sched_rank_peak(s, r),
						      warm < M * V ? warm : M * V,
						      "S=%u M=%u V=%u r=%u", S,
						      M, V, r);
				}
				/* The bubble stays within 1F1B's in chunk
				 * units: 3 (S - 1) for the full groups. */
				if (M >= S)
					cr_assert_leq(makespan(s),
						      3.0 * M * V + 3.0 * (S - 1) *
							  group0(S, M) / S +
						      1e-9,
						      "S=%u M=%u V=%u: %g", S, M,
						      V, makespan(s));
				check_common(s, S, M, V);
				dpl_schedule_destroy(s);
			}
}

/*
 * With M a multiple of S the order is the one dpl has always built: the
 * k-th forward of rank r is micro-batch (k / SV) S + k % S of chunk
 * (k % SV) / S, the k-th backward of chunk V - 1 - (k % SV) / S, after
 * 2 (S - r - 1) + (V - 1) S forwards of warm-up.
 */
Test(interleaved, multiples_of_s_keep_megatron_order, .timeout = 120)
{
	for (uint32_t V = 2; V <= 4; V++)
		for (uint32_t S = 1; S <= SMAX; S++)
			for (uint32_t M = S; M <= MMAX; M += S) {
				dpl_schedule *s = build(S, M, DPL_POLICY_INTERLEAVED, V);
				uint64_t SV = (uint64_t)S * V, total = (uint64_t)M * V;

				for (uint32_t r = 0; r < S; r++) {
					uint64_t warm = 2 * (uint64_t)(S - r - 1) +
							(uint64_t)(V - 1) * S;
					uint64_t f = 0, b = 0;
					size_t n, i = 0;
					const struct dpl_action *a =
					    dpl_schedule_actions(s, r, &n);

					if (warm > total)
						warm = total;
#define EXPECT(kd, k, chunk)                                                 \
	do {                                                                   \
		cr_assert_eq(a[i].kind, kd, "S=%u M=%u V=%u r=%u i=%zu", S,   \
			     M, V, r, i);                                      \
		cr_assert_eq(a[i].stage, (chunk) * S + r);                     \
		cr_assert_eq(a[i].microbatch, ((k) / SV) * S + (k) % S);       \
		i++;                                                           \
	} while (0)
					for (; f < warm; f++)
						EXPECT(DPL_ACT_F, f, (f % SV) / S);
					for (; f < total; f++, b++) {
						EXPECT(DPL_ACT_F, f, (f % SV) / S);
						EXPECT(DPL_ACT_B, b,
						       V - 1 - (b % SV) / S);
					}
					for (; b < total; b++)
						EXPECT(DPL_ACT_B, b,
						       V - 1 - (b % SV) / S);
#undef EXPECT
					cr_assert_eq(i, n);
				}
				dpl_schedule_destroy(s);
			}
}

/* PyTorch's two examples: M = 6 and M = 2 on 4 ranks, one round each. */
Test(interleaved, pytorch_examples_on_four_ranks)
{
	dpl_schedule *s = build(4, 6, DPL_POLICY_INTERLEAVED, 2);
	size_t n;
	const struct dpl_action *a = dpl_schedule_actions(s, 0, &n);

	/* Rank 0 warms up with (V - 1) 6 + 2 * 3 = 12 forwards: all. */
	for (size_t k = 0; k < 12; k++)
		cr_assert_eq(a[k].kind, DPL_ACT_F);
	a = dpl_schedule_actions(s, 3, &n);
	/* Rank 3: 6 forwards of chunk 0, then 1F1B on chunk 1. */
	for (size_t k = 0; k < 6; k++) {
		cr_assert_eq(a[k].stage, 3);
		cr_assert_eq(a[k].microbatch, k);
	}
	cr_assert_eq(a[6].stage, 7);
	cr_assert_eq(a[7].kind, DPL_ACT_B);
	cr_assert_eq(a[7].stage, 7);
	cr_assert_eq(a[7].microbatch, 0);
	check_common(s, 4, 6, 2);
	dpl_schedule_destroy(s);
	s = build(4, 2, DPL_POLICY_INTERLEAVED, 2);
	check_common(s, 4, 2, 2);
	dpl_schedule_destroy(s);
}

Test(chunks, are_checked_per_policy)
{
	struct dpl_schedule_params p = {.stages = 4, .microbatches = 6,
					.policy = DPL_POLICY_LOOPED_BFS};
	dpl_schedule *s = NULL;

	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert_str_eq(dpl_last_error(),
			 "looped-bfs: chunks must be >= 2 (got 0)");
	p.policy = DPL_POLICY_INTERLEAVED;
	p.chunks = 1;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert_str_eq(dpl_last_error(),
			 "interleaved: chunks must be >= 2 (got 1)");
	p.policy = DPL_POLICY_1F1B;
	p.chunks = 2;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "policy 1f1b takes no chunks"),
		  "%s", dpl_last_error());
	p.policy = DPL_POLICY_ZBV;
	p.chunks = 3;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert_str_eq(dpl_last_error(), "zbv: chunks is always 2 (got 3)");
	cr_assert_null(s);
	cr_assert_eq(dpl_policy_chunks(DPL_POLICY_LOOPED_BFS), 1);
	cr_assert_eq(dpl_policy_chunks(DPL_POLICY_ZBV), 2);
	cr_assert_eq(dpl_policy_chunks(DPL_POLICY_1F1B), 0);
	cr_assert(dpl_policy_buildable(DPL_POLICY_LOOPED_BFS));
	cr_assert(!dpl_policy_buildable(DPL_POLICY_CUSTOM));
}
