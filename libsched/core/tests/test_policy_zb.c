/*
 * test_policy_zb.c - properties of the zero-bubble policies zbv,
 * interleaved-zb, zb-h2 and zb-auto over every S <= 16, M <= 64 they
 * accept: valid as built and lowered (deadlock-free under rendezvous
 * sends), the stated memory bounds, makespans against zb-h1 and the lower
 * bound, refusals naming the reason and the nearest M.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>

#include "sched_util.h"

#define SMAX 16
#define MMAX 64

static const struct dpl_stage_cost FIW = {1, 2, 1, 1};
static const struct dpl_stage_cost SLOW_I = {1, 3, 2, 1};

static uint32_t min_u(uint32_t a, uint32_t b) { return a < b ? a : b; }

static int try_build(uint32_t S, uint32_t M, enum dpl_policy p, uint32_t V,
		     uint32_t cap, const struct dpl_stage_cost *c,
		     dpl_schedule **out)
{
	struct dpl_stage_cost costs[SMAX * 4];
	struct dpl_schedule_params prm = {.stages = S, .microbatches = M,
					  .policy = p, .chunks = V,
					  .cap_all = cap};

	if (c != NULL) {
		for (uint32_t s = 0; s < S; s++)
			costs[s] = *c;
		prm.costs = costs;
	}
	return dpl_schedule_build(&prm, out);
}

static dpl_schedule *build(uint32_t S, uint32_t M, enum dpl_policy p,
			   uint32_t V, uint32_t cap,
			   const struct dpl_stage_cost *c)
{
	dpl_schedule *s = NULL;
	int rc = try_build(S, M, p, V, cap, c, &s);

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

Test(policy_zb, zbv_any_m_v_shape_and_memory, .timeout = 120)
{
	for (uint32_t S = 1; S <= SMAX; S++)
		for (uint32_t M = 1; M <= MMAX; M++) {
			dpl_schedule *z = build(S, M, DPL_POLICY_ZBV, 0, 0,
						NULL);
			double t = makespan(z, FIW);

			cr_assert_eq(dpl_schedule_ranks(z), S);
			cr_assert_eq(dpl_schedule_stages(z), 2 * S);
			for (uint32_t r = 0; r < S; r++) {
				cr_assert_eq(dpl_schedule_stage_rank(z, r), r);
				cr_assert_eq(
				    dpl_schedule_stage_rank(z, 2 * S - 1 - r), r);
				cr_assert_leq(sched_rank_peak(z, r), 2 * min_u(S, M),
					      "S=%u M=%u r=%u", S, M, r);
			}
			/* Never below the work of a rank plus the first
			 * forward's way to the last rank. */
			cr_assert_geq(t, 6.0 * M + (S - 1), "S=%u M=%u", S, M);
			check_valid_and_lowered(z, FIW);
			dpl_schedule_destroy(z);
		}
}

/* PyTorch's ScheduleZBVZeroBubble at S=4, M=8 finishes at 51. */
Test(policy_zb, zbv_matches_pytorch_at_4_by_8)
{
	dpl_schedule *z = build(4, 8, DPL_POLICY_ZBV, 0, 0, NULL);
	size_t n;
	const struct dpl_action *a = dpl_schedule_actions(z, 3, &n);
	char t[DPL_ACTION_TEXT_MAX];
	static const char *const head[] = {"3F0", "4F0", "3F1", "4F1",
					   "3F2", "4F2", "3F3", "4F3",
					   "4I0", "4W0"};

	cr_assert_float_eq(makespan(z, FIW), 51, 1e-9);
	for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) {
		dpl_action_format(a[i], t, sizeof t);
		cr_assert_str_eq(t, head[i], "rank 3, position %zu", i);
	}
	dpl_schedule_destroy(z);
}

Test(policy_zb, zbv_takes_only_two_chunks)
{
	dpl_schedule *z = NULL;

	cr_assert_eq(try_build(4, 8, DPL_POLICY_ZBV, 2, 0, NULL, &z), 0);
	dpl_schedule_destroy(z);
	cr_assert_eq(try_build(4, 8, DPL_POLICY_ZBV, 3, 0, NULL, &z),
		     DPL_EINVAL);
}

Test(policy_zb, interleaved_zb_any_m_valid_and_bounded, .timeout = 240)
{
	for (uint32_t V = 2; V <= 4; V++)
		for (uint32_t S = 1; S <= SMAX; S++)
			for (uint32_t M = 1; M <= MMAX; M++) {
				uint32_t rounds = M / S > 1 ? M / S : 1;
				uint32_t G0 = M / rounds + (M % rounds != 0);
				dpl_schedule *z = build(
				    S, M, DPL_POLICY_INTERLEAVED_ZB, V, 0, NULL);

				for (uint32_t st = 0; st < S * V; st++)
					cr_assert_eq(
					    dpl_schedule_stage_rank(z, st),
					    st % S);
				for (uint32_t r = 0; r < S; r++)
					cr_assert_leq(sched_rank_peak(z, r),
						      min_u(V * M,
							    (V - 1) * G0 + S),
						      "S=%u M=%u V=%u r=%u", S,
						      M, V, r);
				/* With M >= S the bubble is S-1 units of
				 * F = I = W, whatever M (PyTorch's when its
				 * rounds are equal). */
				if (M >= S)
					cr_assert_float_eq(
					    makespan(z, FIW),
					    3.0 * V * M + (S - 1), 1e-9,
					    "S=%u M=%u V=%u", S, M, V);
				check_valid_and_lowered(z, FIW);
				dpl_schedule_destroy(z);
			}
}

Test(policy_zb, interleaved_zb_needs_chunks)
{
	dpl_schedule *z = NULL;

	cr_assert_eq(try_build(4, 8, DPL_POLICY_INTERLEAVED_ZB, 1, 0, NULL,
			       &z),
		     DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "chunks"), "%s", dpl_last_error());
}

/* PyTorch's ScheduleInterleavedZeroBubble at S=4, M=8 finishes at 51. */
Test(policy_zb, interleaved_zb_matches_pytorch_at_4_by_8)
{
	dpl_schedule *z = build(4, 8, DPL_POLICY_INTERLEAVED_ZB, 2, 0, NULL);

	cr_assert_float_eq(makespan(z, FIW), 51, 1e-9);
	dpl_schedule_destroy(z);
}

Test(policy_zb, zb_h2_twice_the_memory_no_slower, .timeout = 120)
{
	for (uint32_t S = 1; S <= SMAX; S++)
		for (uint32_t M = 1; M <= MMAX; M++) {
			dpl_schedule *h2 = build(S, M, DPL_POLICY_ZB_H2, 0, 0,
						 &SLOW_I);
			dpl_schedule *h1 = build(S, M, DPL_POLICY_ZB_H1, 0, 0,
						 NULL);
			double t2 = makespan(h2, SLOW_I);
			double lb = 4.0 * M + (S - 1);

			for (uint32_t st = 0; st < S; st++)
				cr_assert_leq(dpl_schedule_bound(h2, st),
					      min_u(2 * S, M));
			cr_assert_leq(t2, makespan(h1, SLOW_I) + 1e-9,
				      "S=%u M=%u", S, M);
			/* F=1, I=2, W=1: nothing idles but the last
			 * stage's wait for its first forward. */
			if (M >= 2 * S)
				cr_assert_float_eq(t2, lb, 1e-9, "S=%u M=%u",
						   S, M);
			check_valid_and_lowered(h2, SLOW_I);
			dpl_schedule_destroy(h2);
			dpl_schedule_destroy(h1);
		}
}

static double bubble(double t, uint32_t M, struct dpl_stage_cost c)
{
	return t - M * (c.f + c.i + c.w);
}

Test(policy_zb, zb_auto_respects_caps_and_beats_zb_h1, .timeout = 240)
{
	const struct dpl_stage_cost profiles[] = {FIW, SLOW_I,
						  {1, 2, 1.5, 0.5}};

	for (size_t k = 0; k < 3; k++) {
		struct dpl_stage_cost c = profiles[k];

		for (uint32_t S = 1; S <= SMAX; S++)
			for (uint32_t M = 1; M <= MMAX; M += 1 + (k > 0) * 2) {
				dpl_schedule *h1 = build(S, M, DPL_POLICY_ZB_H1,
							 0, 0, NULL);
				dpl_schedule *a1 = build(S, M, DPL_POLICY_ZB_AUTO,
							 0, S, &c);
				dpl_schedule *a2 = build(S, M, DPL_POLICY_ZB_AUTO,
							 0, 2 * S, &c);
				double th1 = makespan(h1, c);

				for (uint32_t st = 0; st < S; st++) {
					cr_assert_leq(dpl_schedule_bound(a1, st), S);
					cr_assert_eq(dpl_schedule_cap(a1, st), S);
					cr_assert_leq(dpl_schedule_bound(a2, st),
						      2 * S);
				}
				cr_assert_leq(makespan(a1, c), th1 + 1e-9,
					      "S=%u M=%u", S, M);
				/* Twice the memory halves zb-h1's bubble
				 * where zb-h1 is not already optimal. */
				if (k == 1 && M >= 2 * S)
					cr_assert_leq(
					    bubble(makespan(a2, c), M, c),
					    bubble(th1, M, c) / 2 + 1e-9,
					    "S=%u M=%u", S, M);
				check_valid_and_lowered(a1, c);
				check_valid_and_lowered(a2, c);
				dpl_schedule_destroy(h1);
				dpl_schedule_destroy(a1);
				dpl_schedule_destroy(a2);
			}
	}
}

Test(policy_zb, zb_auto_small_caps_and_bytes, .timeout = 120)
{
	for (uint32_t S = 1; S <= SMAX; S++)
		for (uint32_t M = 1; M <= 32; M++)
			for (uint32_t cap = 1; cap <= 3; cap++) {
				dpl_schedule *a = build(S, M, DPL_POLICY_ZB_AUTO,
							0, cap, &SLOW_I);

				for (uint32_t st = 0; st < S; st++)
					cr_assert_leq(dpl_schedule_bound(a, st),
						      cap);
				check_valid_and_lowered(a, SLOW_I);
				dpl_schedule_destroy(a);
			}
	{
		uint64_t cap_bytes[3] = {400, 250, 100}, act[3] = {100, 100, 50};
		struct dpl_schedule_params p = {.stages = 3, .microbatches = 8,
						.policy = DPL_POLICY_ZB_AUTO,
						.cap_bytes = cap_bytes,
						.activation_bytes = act};
		dpl_schedule *a;

		cr_assert_eq(dpl_schedule_build(&p, &a), 0, "%s",
			     dpl_last_error());
		cr_assert_eq(dpl_schedule_cap(a, 0), 4);
		cr_assert_eq(dpl_schedule_cap(a, 1), 2);
		cr_assert_eq(dpl_schedule_cap(a, 2), 2);
		for (uint32_t st = 0; st < 3; st++)
			cr_assert_leq(dpl_schedule_bound(a, st),
				      dpl_schedule_cap(a, st));
		dpl_schedule_destroy(a);
	}
}

Test(policy_zb, zb_auto_needs_one_cap)
{
	dpl_schedule *a = NULL;
	uint32_t caps[2] = {2, 2};
	struct dpl_schedule_params p = {.stages = 2, .microbatches = 4,
					.policy = DPL_POLICY_ZB_AUTO};

	cr_assert_eq(dpl_schedule_build(&p, &a), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "cap"), "%s", dpl_last_error());
	p.cap_mb = caps;
	p.cap_all = 2;
	cr_assert_eq(dpl_schedule_build(&p, &a), DPL_EINVAL);
}

/* Uneven costs: the greedy uses each stage's own. */
Test(policy_zb, zb_auto_uneven_costs)
{
	struct dpl_stage_cost c[4] = {
	    {1, 2, 1, 1}, {2, 4, 2, 2}, {1, 2, 1, 1}, {1, 3, 2, 1}};
	struct dpl_sim_params sp = {.costs = c};
	struct dpl_schedule_params p = {.stages = 4, .microbatches = 16,
					.policy = DPL_POLICY_ZB_AUTO,
					.cap_all = 8, .costs = c};
	struct dpl_schedule_params h = {.stages = 4, .microbatches = 16,
					.policy = DPL_POLICY_ZB_H1};
	struct dpl_sim_summary sa, sh;
	dpl_schedule *a, *z;
	dpl_sim *sim;

	cr_assert_eq(dpl_schedule_build(&p, &a), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_schedule_build(&h, &z), 0);
	cr_assert_eq(dpl_sim_run(a, &sp, &sim), 0);
	dpl_sim_summary(sim, &sa);
	dpl_sim_destroy(sim);
	cr_assert_eq(dpl_sim_run(z, &sp, &sim), 0);
	dpl_sim_summary(sim, &sh);
	dpl_sim_destroy(sim);
	cr_assert_leq(sa.makespan, sh.makespan + 1e-9);
	/* The slow stage 1 is busy 6 x 16 units at least. */
	cr_assert_geq(sa.makespan, 96);
	dpl_schedule_destroy(a);
	dpl_schedule_destroy(z);
}
