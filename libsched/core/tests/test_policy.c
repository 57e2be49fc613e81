/*
 * test_policy.c - properties of every policy over all S <= 16, M <= 64:
 * validity (compute-only and lowered, deadlock-free under rendezvous),
 * in-flight bounds, makespans against closed forms, bounded against an
 * independent greedy reference.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>

#include "refsim.h"
#include "sched_util.h"

#define SMAX 16
#define MMAX 64

static dpl_schedule *build(uint32_t S, uint32_t M, enum dpl_policy p,
			   uint32_t V)
{
	struct dpl_schedule_params prm = {.stages = S, .microbatches = M,
					  .policy = p, .chunks = V};
	dpl_schedule *s = NULL;
	int rc = dpl_schedule_build(&prm, &s);

	cr_assert_eq(rc, 0, "S=%u M=%u %s: %s", S, M, dpl_policy_name(p),
		     dpl_last_error());
	return s;
}

static double makespan(const dpl_schedule *s, struct dpl_stage_cost c)
{
	struct dpl_sim_params p = {.uniform = c};
	struct dpl_sim_summary sum;
	dpl_sim *sim;

	cr_assert_eq(dpl_sim_run(s, &p, &sim), 0, "%s", dpl_last_error());
	dpl_sim_summary(sim, &sum);
	dpl_sim_destroy(sim);
	return sum.makespan;
}

/* Valid as built, lowered without deadlock, same makespan lowered. */
static void check_valid_and_lowered(dpl_schedule *s, struct dpl_stage_cost c)
{
	struct dpl_schedule_issue is;
	double before = makespan(s, c);
	int rc;

	rc = dpl_schedule_validate(s, &is);
	cr_assert_eq(rc, 0, "%s", is.message);
	cr_assert_eq(dpl_schedule_lower(s), 0, "%s", dpl_last_error());
	rc = dpl_schedule_validate(s, &is);
	cr_assert_eq(rc, 0, "lowered: %s", is.message);
	cr_assert_float_eq(makespan(s, c), before, 1e-9);
}

static uint32_t min_u(uint32_t a, uint32_t b) { return a < b ? a : b; }

static const struct dpl_stage_cost FB = {1, 2, 0, 0};

Test(policy, gpipe_and_1f1b, .timeout = 120)
{
	for (uint32_t S = 1; S <= SMAX; S++)
		for (uint32_t M = 1; M <= MMAX; M++) {
			dpl_schedule *g = build(S, M, DPL_POLICY_GPIPE, 0);
			dpl_schedule *o = build(S, M, DPL_POLICY_1F1B, 0);
			double want = 3.0 * (M + S - 1);

			for (uint32_t s = 0; s < S; s++) {
				cr_assert_eq(dpl_schedule_bound(g, s), M);
				cr_assert_eq(dpl_schedule_bound(o, s),
					     min_u(S - s, M), "S=%u M=%u s=%u", S,
					     M, s);
			}
			cr_assert_float_eq(makespan(g, FB), want, 1e-9,
					   "gpipe S=%u M=%u", S, M);
			cr_assert_float_eq(makespan(o, FB), want, 1e-9,
					   "1f1b S=%u M=%u", S, M);
			check_valid_and_lowered(g, FB);
			check_valid_and_lowered(o, FB);
			dpl_schedule_destroy(g);
			dpl_schedule_destroy(o);
		}
}

Test(policy, onef1b_warmup_is_dapple_policy_a)
{
	/* Stage s runs exactly min(S-s, M) forwards before its first B. */
	for (uint32_t S = 1; S <= SMAX; S++)
		for (uint32_t M = 1; M <= MMAX; M++) {
			dpl_schedule *o = build(S, M, DPL_POLICY_1F1B, 0);

			for (uint32_t s = 0; s < S; s++) {
				size_t n, k = 0;
				const struct dpl_action *a =
				    dpl_schedule_actions(o, s, &n);

				while (k < n && a[k].kind == DPL_ACT_F)
					k++;
				cr_assert_eq(k, min_u(S - s, M));
				/* Then strictly alternating while forwards
				 * remain. */
				for (size_t j = k; j + 1 < n && j < 2 * M - k - 1;
				     j += 2)
					if (a[j].kind == DPL_ACT_B &&
					    j + 1 < n - (k - 1))
						cr_assert_eq(a[j + 1].kind,
							     DPL_ACT_F);
			}
			dpl_schedule_destroy(o);
		}
}

Test(policy, onef1b_comm_policy_b, .timeout = 120)
{
	for (uint32_t S = 1; S <= SMAX; S++)
		for (uint32_t M = 1; M <= MMAX; M++) {
			dpl_schedule *c = build(S, M, DPL_POLICY_1F1B_COMM, 0);

			for (uint32_t s = 0; s < S; s++)
				cr_assert_eq(dpl_schedule_bound(c, s),
					     min_u(2 * (S - s) - 1, M),
					     "S=%u M=%u s=%u", S, M, s);
			check_valid_and_lowered(c, FB);
			dpl_schedule_destroy(c);
		}
}

/* Peak micro-batches alive counted from F to I (not W). */
static uint32_t bound_to_i(const dpl_schedule *s, uint32_t stage)
{
	size_t n;
	const struct dpl_action *a = dpl_schedule_actions(s, stage, &n);
	uint32_t live = 0, peak = 0;

	for (size_t i = 0; i < n; i++) {
		if (a[i].kind == DPL_ACT_F && ++live > peak)
			peak = live;
		if (a[i].kind == DPL_ACT_I)
			live--;
	}
	return peak;
}

Test(policy, zb_h1_third_of_the_bubble, .timeout = 120)
{
	const struct dpl_stage_cost fiw = {1, 2, 1, 1};

	for (uint32_t S = 1; S <= SMAX; S++)
		for (uint32_t M = 1; M <= MMAX; M++) {
			dpl_schedule *z = build(S, M, DPL_POLICY_ZB_H1, 0);
			double t = makespan(z, fiw);
			double bubble = S * t - 3.0 * S * M;
			double bubble_1f1b = 3.0 * (S - 1) * S;
			uint32_t peak = 0;

			if (M >= S)
				cr_assert_float_eq(3 * bubble, bubble_1f1b, 1e-9,
						   "S=%u M=%u", S, M);
			else /* Lower bound: stage 0 waits 2S-1 for its
			      * first I, then has 2M-1 units of I and W. */
				cr_assert_float_eq(t, 2.0 * S + 2.0 * M - 1, 1e-9,
						   "S=%u M=%u", S, M);
			for (uint32_t s = 0; s < S; s++) {
				uint32_t b = dpl_schedule_bound(z, s);

				peak = b > peak ? b : peak;
				cr_assert_leq(bound_to_i(z, s), min_u(S - s, M));
			}
			cr_assert_leq(peak, min_u(S, M), "S=%u M=%u", S, M);
			check_valid_and_lowered(z, fiw);
			dpl_schedule_destroy(z);
		}
}

Test(policy, interleaved_bubble_in_chunk_units, .timeout = 120)
{
	for (uint32_t V = 2; V <= 4; V++)
		for (uint32_t S = 1; S <= SMAX; S++)
			for (uint32_t M = S; M <= MMAX; M += S) {
				dpl_schedule *il =
				    build(S, M, DPL_POLICY_INTERLEAVED, V);

				cr_assert_eq(dpl_schedule_ranks(il), S);
				cr_assert_eq(dpl_schedule_stages(il), S * V);
				for (uint32_t st = 0; st < S * V; st++)
					cr_assert_eq(dpl_schedule_stage_rank(il, st),
						     st % S);
				cr_assert_float_eq(makespan(il, FB),
						   3.0 * M * V + 3.0 * (S - 1),
						   1e-9, "S=%u M=%u V=%u", S, M,
						   V);
				check_valid_and_lowered(il, FB);
				dpl_schedule_destroy(il);
			}
}

/* Any M >= 1 builds (test_policy_looped.c); chunks are checked. */
Test(policy, interleaved_checks_chunks)
{
	struct dpl_schedule_params p = {.stages = 4, .microbatches = 8,
					.policy = DPL_POLICY_INTERLEAVED,
					.chunks = 1};
	dpl_schedule *s = NULL;

	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "chunks must be >= 2 (got 1)"));
	p.policy = DPL_POLICY_1F1B;
	p.chunks = 2;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert_null(s);
}


Test(policy, bounded_with_room_is_1f1b, .timeout = 60)
{
	for (uint32_t S = 1; S <= SMAX; S++)
		for (uint32_t M = 1; M <= MMAX; M++) {
			uint32_t cap[SMAX];
			struct dpl_schedule_params p = {
			    .stages = S, .microbatches = M,
			    .policy = DPL_POLICY_BOUNDED, .cap_mb = cap};
			dpl_schedule *b, *o = build(S, M, DPL_POLICY_1F1B, 0);

			for (uint32_t s = 0; s < S; s++)
				cap[s] = S - s + (s % 3); /* >= S - s */
			cr_assert_eq(dpl_schedule_build(&p, &b), 0);
			expect_same(b, o, 0);
			dpl_schedule_destroy(b);
			dpl_schedule_destroy(o);
		}
}

Test(policy, bounded_respects_cap_and_beats_greedy, .timeout = 120)
{
	unsigned seed = 12345;

	for (uint32_t S = 1; S <= SMAX; S++)
		for (uint32_t M = 1; M <= MMAX; M++) {
			uint32_t cap[SMAX];
			double f[SMAX], b[SMAX];
			struct dpl_stage_cost c[SMAX];
			struct dpl_schedule_params p = {
			    .stages = S, .microbatches = M,
			    .policy = DPL_POLICY_BOUNDED, .cap_mb = cap,
			    .costs = c};
			dpl_schedule *s;
			double got, greedy;

			for (uint32_t k = 0; k < S; k++) {
				seed = seed * 1103515245u + 12345u;
				cap[k] = 1 + (seed >> 16) % (S - k + 1);
				f[k] = 1 + (seed >> 8) % 3;
				b[k] = 2 * f[k] + (seed >> 4) % 2;
				c[k] = (struct dpl_stage_cost){f[k], b[k], 0, 0};
			}
			cr_assert_eq(dpl_schedule_build(&p, &s), 0, "%s",
				     dpl_last_error());
			for (uint32_t k = 0; k < S; k++) {
				cr_assert_leq(dpl_schedule_bound(s, k), cap[k]);
				cr_assert_eq(dpl_schedule_cap(s, k), cap[k]);
			}
			got = ref_makespan(s, f, b);
			greedy = ref_greedy_makespan(S, M, cap, f, b);
			cr_assert_gt(greedy, 0);
			cr_assert_leq(got, greedy + 1e-9, "S=%u M=%u: %g > %g", S,
				      M, got, greedy);
			cr_assert_eq(dpl_schedule_lower(s), 0, "%s",
				     dpl_last_error());
			cr_assert_eq(dpl_schedule_validate(s, NULL), 0);
			dpl_schedule_destroy(s);
		}
}

Test(policy, bounded_caps_in_bytes)
{
	uint64_t budget[4] = {4096, 4096, 4096, 4096};
	uint64_t act[4] = {1024, 2048, 4096, 1000};
	struct dpl_schedule_params p = {.stages = 4, .microbatches = 16,
					.policy = DPL_POLICY_BOUNDED,
					.cap_bytes = budget,
					.activation_bytes = act};
	dpl_schedule *s;

	cr_assert_eq(dpl_schedule_build(&p, &s), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_schedule_cap(s, 0), 4);
	cr_assert_eq(dpl_schedule_cap(s, 1), 2);
	cr_assert_eq(dpl_schedule_cap(s, 2), 1);
	cr_assert_eq(dpl_schedule_cap(s, 3), 4);
	for (uint32_t k = 0; k < 4; k++)
		cr_assert_leq(dpl_schedule_bound(s, k) * act[k], budget[k]);
	dpl_schedule_destroy(s);
	act[2] = 5000;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(),
			 "stage 2: cap 4096 bytes holds no micro-batch of 5000"),
		  "%s", dpl_last_error());
}

Test(policy, bounded_needs_exactly_one_cap)
{
	struct dpl_schedule_params p = {.stages = 3, .microbatches = 4,
					.policy = DPL_POLICY_BOUNDED};
	uint32_t cap[3] = {2, 0, 1};
	dpl_schedule *s;

	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "needs a cap"));
	p.cap_mb = cap;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert_str_eq(dpl_last_error(), "stage 1: cap 0 < 1");
	p.cap_all = 2;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "only one of"));
}

Test(policy, absurd_sizes_are_refused)
{
	struct dpl_schedule_params p = {.stages = 65536, .microbatches = 1u << 20,
					.policy = DPL_POLICY_GPIPE};
	dpl_schedule *s;

	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_ERANGE);
	cr_assert(strstr(dpl_last_error(), "too large"));
}
