/*
 * test_sim.c - the simulator against closed forms, cases worked out by
 * hand, and an independent reference replay.
 */
#include <math.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>

#include "refsim.h"

static dpl_schedule *build(uint32_t S, uint32_t M, enum dpl_policy p)
{
	struct dpl_schedule_params prm = {.stages = S, .microbatches = M,
					  .policy = p};
	dpl_schedule *s;

	cr_assert_eq(dpl_schedule_build(&prm, &s), 0, "%s", dpl_last_error());
	return s;
}

static dpl_sim *run(const dpl_schedule *s, const struct dpl_sim_params *p)
{
	dpl_sim *sim;

	cr_assert_eq(dpl_sim_run(s, p, &sim), 0, "%s", dpl_last_error());
	return sim;
}

static double mk(const dpl_sim *sim)
{
	struct dpl_sim_summary sum;

	dpl_sim_summary(sim, &sum);
	return sum.makespan;
}

Test(sim, uniform_1f1b_closed_form)
{
	/* S=4, M=8, F=1, B=2: (M+S-1)(F+B) = 33, bubble (S-1)/(M+S-1). */
	dpl_schedule *s = build(4, 8, DPL_POLICY_1F1B);
	dpl_sim *sim = run(s, NULL);
	struct dpl_sim_summary sum;
	struct dpl_sim_stage_stats st;

	dpl_sim_summary(sim, &sum);
	cr_assert_float_eq(sum.makespan, 33, 1e-12);
	cr_assert_float_eq(sum.bubble_fraction, 3.0 / 11.0, 1e-12);
	cr_assert_float_eq(sum.total_busy, 4 * 8 * 3, 1e-12);
	for (uint32_t k = 0; k < 4; k++) {
		cr_assert_eq(dpl_sim_stage(sim, k, &st), 0);
		cr_assert_eq(st.peak_inflight, 4 - k);
		cr_assert_float_eq(st.busy, 24, 1e-12);
		cr_assert_eq(st.rank, k);
	}
	cr_assert_eq(dpl_sim_stage(sim, 4, &st), DPL_EINVAL);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

Test(sim, uneven_stages_from_dapple_notes)
{
	/* DAPPLE.md section 6, claim 4: F=[2,1,1,1], B=[4,2,2,2], M=8
	 * simulates to 51 (the pivot formula says 48); F=[1,1,1,2],
	 * B=[2,2,2,4] simulates to 57. */
	struct dpl_stage_cost c1[4] = {{2, 4, 0, 0}, {1, 2, 0, 0}, {1, 2, 0, 0},
				       {1, 2, 0, 0}};
	struct dpl_stage_cost c2[4] = {{1, 2, 0, 0}, {1, 2, 0, 0}, {1, 2, 0, 0},
				       {2, 4, 0, 0}};
	struct dpl_sim_params p = {.costs = c1};
	dpl_schedule *s = build(4, 8, DPL_POLICY_1F1B);
	dpl_sim *sim = run(s, &p);

	cr_assert_float_eq(mk(sim), 51, 1e-12);
	dpl_sim_destroy(sim);
	p.costs = c2;
	sim = run(s, &p);
	cr_assert_float_eq(mk(sim), 57, 1e-12);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

Test(sim, link_latency_by_hand)
{
	/* S=2, M=1, latency 0.5: F0 [0,1], arrives 1.5; F1 [1.5,2.5];
	 * B1 [2.5,4.5], arrives 5; B0 [5,7]. */
	struct dpl_sim_params p = {.link_latency = 0.5};
	dpl_schedule *s = build(2, 1, DPL_POLICY_1F1B);
	dpl_sim *sim = run(s, &p);
	size_t n, transfers = 0;
	const struct dpl_sim_event *ev = dpl_sim_events(sim, &n);

	cr_assert_float_eq(mk(sim), 7, 1e-12);
	for (size_t i = 0; i < n; i++)
		if (ev[i].kind == DPL_SIM_TRANSFER) {
			transfers++;
			cr_assert_float_eq(ev[i].end - ev[i].start, 0.5, 1e-12);
		}
	cr_assert_eq(transfers, 2);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

Test(sim, link_bandwidth_is_a_fifo)
{
	/* gpipe S=2 M=2, F=B=1, 2 bytes at 1 byte/unit: rank 0 F0 [0,1]
	 * F1 [1,2]; link [1,3] then [3,5]; rank 1 F0 [3,4] F1 [5,6] B0
	 * [6,7] B1 [7,8]; gradients (2 bytes) [7,9] [9,11]; rank 0 B0
	 * [9,10] B1 [11,12]. */
	uint64_t act[2] = {2, 2};
	struct dpl_sim_params p = {.uniform = {1, 1, 0, 0},
				   .link_bandwidth = 1,
				   .activation_bytes = act};
	dpl_schedule *s = build(2, 2, DPL_POLICY_GPIPE);
	dpl_sim *sim = run(s, &p);
	struct dpl_sim_stage_stats st;

	cr_assert_float_eq(mk(sim), 12, 1e-12);
	dpl_sim_stage(sim, 0, &st);
	cr_assert_eq(st.peak_inflight, 2);
	cr_assert_eq(st.peak_activation_bytes, 4);
	cr_assert_float_eq(st.finish, 12, 1e-12);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

Test(sim, ring_allreduce_model)
{
	/* One stage, 4 replicas, 1000 bytes at 100/unit, 0.5 per step:
	 * 2*3/4*1000/100 + 2*3*0.5 = 18 after the backward ends at 3. */
	uint32_t rep[1] = {4};
	uint64_t par[1] = {1000};
	struct dpl_sim_params p = {.replicas = rep, .param_bytes = par,
				   .ar_bandwidth = 100, .ar_latency = 0.5};
	dpl_schedule *s = build(1, 1, DPL_POLICY_1F1B);
	dpl_sim *sim = run(s, &p);
	struct dpl_sim_stage_stats st;

	cr_assert_float_eq(mk(sim), 21, 1e-12);
	dpl_sim_stage(sim, 0, &st);
	cr_assert_float_eq(st.reduce_start, 3, 1e-12);
	cr_assert_float_eq(st.reduce_end, 21, 1e-12);
	dpl_sim_destroy(sim);
	/* Lowered: the STEP waits for the reduction. */
	p.step_cost = 2;
	cr_assert_eq(dpl_schedule_lower(s), 0);
	sim = run(s, &p);
	cr_assert_float_eq(mk(sim), 23, 1e-12);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

Test(sim, reductions_hide_behind_later_stages)
{
	/* 1F1B S=4 M=8 F=1 B=2: stage 3 ends its backwards at 27 and stage
	 * 0 at 33; a reduction of 5 on stage 3 (27..32) hides, on stage 0
	 * (33..38) it sticks out. */
	uint32_t rep[4] = {1, 1, 1, 2};
	uint64_t par[4] = {0, 0, 0, 5};
	struct dpl_sim_params p = {.replicas = rep, .param_bytes = par,
				   .ar_bandwidth = 2}; /* 2*1/2*5/2 = 2.5 */
	dpl_schedule *s = build(4, 8, DPL_POLICY_1F1B);
	dpl_sim *sim = run(s, &p);
	struct dpl_sim_stage_stats st;

	dpl_sim_stage(sim, 3, &st);
	cr_assert_float_eq(st.reduce_start, 27, 1e-12);
	cr_assert_float_eq(st.reduce_end, 29.5, 1e-12);
	cr_assert_float_eq(mk(sim), 33, 1e-12);
	dpl_sim_destroy(sim);
	rep[3] = 1;
	rep[0] = 2;
	par[0] = 5;
	sim = run(s, &p);
	cr_assert_float_eq(mk(sim), 35.5, 1e-12);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

Test(sim, agrees_with_reference_replay)
{
	unsigned seed = 99;
	enum dpl_policy pol[] = {DPL_POLICY_GPIPE, DPL_POLICY_1F1B,
				 DPL_POLICY_1F1B_COMM};

	for (uint32_t S = 1; S <= 9; S++)
		for (uint32_t M = 1; M <= 20; M += 3)
			for (int k = 0; k < 3; k++) {
				double f[9], b[9];
				struct dpl_stage_cost c[9];
				struct dpl_sim_params p = {.costs = c};
				dpl_schedule *s = build(S, M, pol[k]);
				dpl_sim *sim;

				for (uint32_t i = 0; i < S; i++) {
					seed = seed * 1664525u + 1013904223u;
					f[i] = 0.5 + (seed >> 20) % 7;
					b[i] = 1 + (seed >> 10) % 11;
					c[i] = (struct dpl_stage_cost){f[i], b[i], 0, 0};
				}
				sim = run(s, &p);
				cr_assert_float_eq(mk(sim), ref_makespan(s, f, b),
						   1e-9, "S=%u M=%u %s", S, M,
						   dpl_policy_name(pol[k]));
				dpl_sim_destroy(sim);
				dpl_schedule_destroy(s);
			}
}

Test(sim, events_cover_every_action)
{
	uint64_t act[3] = {10, 10, 10};
	struct dpl_sim_params p = {.link_bandwidth = 10,
				   .activation_bytes = act};
	dpl_schedule *s = build(3, 5, DPL_POLICY_1F1B);
	dpl_sim *sim = run(s, &p);
	size_t n, compute = 0, transfer = 0;
	const struct dpl_sim_event *ev = dpl_sim_events(sim, &n);

	for (size_t i = 0; i < n; i++) {
		if (ev[i].kind == DPL_SIM_COMPUTE)
			compute++;
		if (ev[i].kind == DPL_SIM_TRANSFER)
			transfer++;
		cr_assert_geq(ev[i].end, ev[i].start);
		if (i > 0 && ev[i].rank == ev[i - 1].rank)
			cr_assert_geq(ev[i].start, ev[i - 1].start);
	}
	cr_assert_eq(compute, 2 * 3 * 5);
	cr_assert_eq(transfer, 2 * 2 * 5);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

Test(sim, bad_parameters_name_themselves)
{
	dpl_schedule *s = build(2, 2, DPL_POLICY_1F1B);
	struct dpl_sim_params p = {.link_latency = -1};
	struct dpl_stage_cost c[2] = {{1, 2, 0, 0}, {NAN, 2, 0, 0}};
	uint32_t rep[2] = {1, 0};
	dpl_sim *sim = (dpl_sim *)0x1;

	cr_assert_eq(dpl_sim_run(s, &p, &sim), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "link_latency"));
	cr_assert_eq(sim, (dpl_sim *)0x1);
	p.link_latency = 0;
	p.costs = c;
	cr_assert_eq(dpl_sim_run(s, &p, &sim), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "stage 1: costs"));
	p.costs = NULL;
	p.replicas = rep;
	cr_assert_eq(dpl_sim_run(s, &p, &sim), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "stage 1: replicas"));
	dpl_schedule_destroy(s);
}

Test(sim, invalid_schedules_are_refused)
{
	dpl_schedule *s;
	dpl_sim *sim;

	cr_assert_eq(dpl_schedule_create(2, 2, 1, &s), 0);
	dpl_schedule_append(s, 0, (struct dpl_action){DPL_ACT_F, 0, 0});
	cr_assert_eq(dpl_sim_run(s, NULL, &sim), DPL_ESCHED);
	cr_assert(strstr(dpl_last_error(), "never runs"));
	dpl_schedule_destroy(s);
}
