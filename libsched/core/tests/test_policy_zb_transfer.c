/*
 * test_policy_zb_transfer.c - zb-auto's transfer time T: the core's
 * replay under T gives the simulator's makespan with link latency T; an
 * order built with T, simulated with T, is never slower than zb-h1 or
 * than the order built for free communication, and faster than the latter
 * somewhere; bad values of T are refused with their value named.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>

#include "internal.h"

static const struct dpl_stage_cost FIW = {1, 2, 1, 1};
static const struct dpl_stage_cost SLOW_I = {1, 3, 2, 1};

static dpl_schedule *build(uint32_t S, uint32_t M, enum dpl_policy p,
			   uint32_t cap, struct dpl_stage_cost c, double T)
{
	struct dpl_stage_cost costs[16];
	struct dpl_schedule_params prm = {.stages = S, .microbatches = M,
					  .policy = p, .cap_all = cap,
					  .costs = costs, .transfer = T};
	dpl_schedule *s = NULL;

	for (uint32_t k = 0; k < S; k++)
		costs[k] = c;
	cr_assert_eq(dpl_schedule_build(&prm, &s), 0, "%s S=%u M=%u T=%g: %s",
		     dpl_policy_name(p), S, M, T, dpl_last_error());
	return s;
}

/* The simulator's makespan, links of latency T and infinite bandwidth. */
static double sim_makespan(const dpl_schedule *s, struct dpl_stage_cost c,
			   double T)
{
	struct dpl_sim_params p = {.uniform = c, .link_latency = T};
	struct dpl_sim_summary sum;
	dpl_sim *sim;

	cr_assert_eq(dpl_sim_run(s, &p, &sim), 0, "%s", dpl_last_error());
	dpl_sim_summary(sim, &sum);
	dpl_sim_destroy(sim);
	return sum.makespan;
}

Test(policy_zb_transfer, replay_equals_the_simulator_with_latency)
{
	static const double Ts[] = {0, 0.25, 1, 3};
	struct dpl_stage_cost costs[16];
	unsigned checked = 0;

	for (uint32_t S = 1; S <= 8; S *= 2)
		for (uint32_t M = 1; M <= 4 * S; M += S)
			for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++) {
				dpl_schedule *s = build(S, M,
							DPL_POLICY_ZB_AUTO, S,
							SLOW_I, Ts[t]);
				double mine;

				for (uint32_t k = 0; k < S; k++)
					costs[k] = SLOW_I;
				cr_assert_eq(dpl__replay_makespan(
						 s, costs, Ts[t], &mine),
					     0, "%s", dpl_last_error());
				cr_assert_float_eq(
				    mine, sim_makespan(s, SLOW_I, Ts[t]), 1e-9,
				    "S=%u M=%u T=%g: replay %.17g", S, M,
				    Ts[t], mine);
				/* and so the lowered lists, as the runner
				 * runs them */
				cr_assert_eq(dpl_schedule_lower(s), 0);
				cr_assert_float_eq(
				    mine, sim_makespan(s, SLOW_I, Ts[t]), 1e-9);
				dpl_schedule_destroy(s);
				checked++;
			}
	cr_assert_geq(checked, 40);
}

Test(policy_zb_transfer, never_slower_and_sometimes_faster, .timeout = 120)
{
	static const double Ts[] = {0.25, 0.5, 1, 2};
	const struct dpl_stage_cost cs[] = {FIW, SLOW_I};
	unsigned cases = 0, faster = 0;
	double gain = 0;

	for (size_t ci = 0; ci < 2; ci++)
		for (uint32_t S = 2; S <= 8; S *= 2)
			for (uint32_t M = S; M <= 4 * S; M *= 2)
				for (uint32_t cap = S; cap <= 2 * S; cap *= 2)
					for (size_t t = 0;
					     t < sizeof Ts / sizeof Ts[0];
					     t++) {
						struct dpl_stage_cost c =
						    cs[ci];
						double T = Ts[t];
						dpl_schedule *a, *f, *h;
						double ta, tf, th;

						a = build(S, M,
							  DPL_POLICY_ZB_AUTO,
							  cap, c, T);
						f = build(S, M,
							  DPL_POLICY_ZB_AUTO,
							  cap, c, 0);
						h = build(S, M,
							  DPL_POLICY_ZB_H1, 0,
							  c, 0);
						ta = sim_makespan(a, c, T);
						tf = sim_makespan(f, c, T);
						th = sim_makespan(h, c, T);
						cr_assert_leq(ta, th + 1e-9,
							      "S=%u M=%u "
							      "cap=%u T=%g: "
							      "%g > zb-h1 %g",
							      S, M, cap, T, ta,
							      th);
						cr_assert_leq(ta, tf + 1e-9,
							      "S=%u M=%u "
							      "cap=%u T=%g: "
							      "%g > free-comm "
							      "order %g",
							      S, M, cap, T, ta,
							      tf);
						for (uint32_t st = 0; st < S;
						     st++)
							cr_assert_leq(
							    dpl_schedule_bound(
								a, st),
							    cap);
						if (ta < tf - 1e-9) {
							faster++;
							gain = fmax(gain,
								    1 - ta / tf);
						}
						cases++;
						dpl_schedule_destroy(a);
						dpl_schedule_destroy(f);
						dpl_schedule_destroy(h);
					}
	cr_assert_eq(cases, 2 * 3 * 3 * 2 * 4);
	/* Planning with T must pay off somewhere, or it does nothing. */
	cr_assert_geq(faster, 5, "faster in %u of %u cases", faster, cases);
	cr_log_info("transfer-aware zb-auto faster in %u of %u cases, by up "
		    "to %.1f%%", faster, cases, 100 * gain);
}

Test(policy_zb_transfer, bad_transfer_is_refused_and_named)
{
	struct dpl_schedule_params p = {.stages = 4, .microbatches = 8,
					.policy = DPL_POLICY_ZB_AUTO,
					.cap_all = 4};
	dpl_schedule *s = NULL;

	p.transfer = -1;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "got -1"), "%s", dpl_last_error());
	p.transfer = NAN;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "nan"), "%s", dpl_last_error());
	p.transfer = INFINITY;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "inf"), "%s", dpl_last_error());
	p.transfer = 0.5;
	p.policy = DPL_POLICY_1F1B;
	p.cap_all = 0;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "only policy zb-auto"), "%s",
		  dpl_last_error());
	cr_assert(strstr(dpl_last_error(), "1f1b"), "%s", dpl_last_error());
	cr_assert_null(s);
}
