/*
 * test_replay.c - the core's compute-only replay (replay.c), which the
 * `bounded` policy uses to choose between its candidate orders, gives the
 * same makespan, to the bit, as the simulator with free communication,
 * for every policy's compute-only lists and uneven stage costs; and it
 * reports lists that cannot run instead of looping.
 */
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>

#include "internal.h"

static double sim_makespan(const dpl_schedule *s,
			   const struct dpl_stage_cost *c)
{
	struct dpl_sim_params p;
	struct dpl_sim_summary sum;
	dpl_sim *sim;

	memset(&p, 0, sizeof p);
	p.costs = c;
	cr_assert_eq(dpl_sim_run(s, &p, &sim), 0, "%s", dpl_last_error());
	dpl_sim_summary(sim, &sum);
	dpl_sim_destroy(sim);
	return sum.makespan;
}

Test(replay, equals_the_simulator_for_every_policy)
{
	static const uint32_t shapes[][2] = {{1, 1}, {2, 3}, {4, 8}, {3, 2},
					     {5, 7}, {8, 16}, {6, 24}};
	unsigned seed = 12345, checked = 0, per_policy[DPL_POLICY__COUNT];

	memset(per_policy, 0, sizeof per_policy);
	for (int k = 0; k < DPL_POLICY__COUNT; k++) {
		enum dpl_policy pol = (enum dpl_policy)k;

		if (!dpl_policy_buildable(pol))
			continue;
		for (size_t z = 0; z < sizeof shapes / sizeof shapes[0]; z++) {
			uint32_t S = shapes[z][0], M = shapes[z][1];
			struct dpl_stage_cost c[16];
			struct dpl_schedule_params p;
			dpl_schedule *s;
			double mine;

			memset(&p, 0, sizeof p);
			p.stages = S;
			p.microbatches = M;
			p.policy = pol;
			/* Policies with chunks hold 2 S stages here. */
			if (dpl_policy_chunks(pol) == 1)
				p.chunks = 2;
			if (pol == DPL_POLICY_BOUNDED)
				p.cap_all = S > 2 ? S / 2 : 1;
			if (pol == DPL_POLICY_ZB_AUTO)
				p.cap_all = S;
			/* Uneven costs with fractions, so that a different
			 * order of additions would show in the bits. */
			for (uint32_t st = 0; st < 16; st++) {
				seed = seed * 1103515245u + 12345u;
				c[st].f = 0.3 + (seed >> 16) % 100 / 37.0;
				c[st].b = 2 * c[st].f + (seed >> 8) % 7 / 11.0;
				c[st].i = c[st].b * 0.4;
				c[st].w = c[st].b - c[st].i;
			}
			p.costs = c;
			cr_assert_eq(dpl_schedule_build(&p, &s), 0, "%s S=%u "
				     "M=%u: %s", dpl_policy_name(pol), S, M,
				     dpl_last_error());
			cr_assert_leq(dpl_schedule_stages(s), 16);
			cr_assert_eq(dpl__replay_makespan(s, c, 0, &mine), 0, "%s",
				     dpl_last_error());
			cr_assert_eq(mine, sim_makespan(s, c),
				     "%s S=%u M=%u: replay %.17g, simulator "
				     "%.17g", dpl_policy_name(pol), S, M,
				     mine, sim_makespan(s, c));
			dpl_schedule_destroy(s);
			checked++;
			per_policy[k]++;
		}
	}
	/* Every buildable policy, on every shape it accepts (all of them). */
	for (int k = 0; k < DPL_POLICY__COUNT; k++)
		if (dpl_policy_buildable((enum dpl_policy)k))
			cr_assert_eq(per_policy[k],
				     sizeof shapes / sizeof shapes[0],
				     "%s: %u shapes compared",
				     dpl_policy_name((enum dpl_policy)k),
				     per_policy[k]);
	cr_assert_geq(checked, 70, "only %u schedules compared", checked);
}

Test(replay, default_costs_give_the_1f1b_closed_form)
{
	struct dpl_schedule_params p;
	dpl_schedule *s;
	double t;

	/* F = 1, B = 2: (M + S - 1) * (F + B) for 1F1B. */
	memset(&p, 0, sizeof p);
	p.stages = 4;
	p.microbatches = 8;
	p.policy = DPL_POLICY_1F1B;
	cr_assert_eq(dpl_schedule_build(&p, &s), 0);
	cr_assert_eq(dpl__replay_makespan(s, NULL, 0, &t), 0);
	cr_assert_eq(t, 33.0, "makespan %g", t);
	dpl_schedule_destroy(s);
}

Test(replay, lists_that_stall_are_a_deadlock)
{
	dpl_schedule *s;
	double t = -1;

	/* Rank 0 waits for a backward that rank 1 only runs after a forward
	 * that needs rank 0's forward of micro-batch 1, listed last. */
	cr_assert_eq(dpl_schedule_create(2, 2, 2, &s), 0);
	cr_assert_eq(dpl_schedule_append(s, 0, (struct dpl_action){
						       DPL_ACT_F, 0, 0}), 0);
	cr_assert_eq(dpl_schedule_append(s, 0, (struct dpl_action){
						       DPL_ACT_B, 0, 1}), 0);
	cr_assert_eq(dpl_schedule_append(s, 0, (struct dpl_action){
						       DPL_ACT_F, 0, 1}), 0);
	cr_assert_eq(dpl_schedule_append(s, 1, (struct dpl_action){
						       DPL_ACT_F, 1, 1}), 0);
	cr_assert_eq(dpl_schedule_append(s, 1, (struct dpl_action){
						       DPL_ACT_B, 1, 1}), 0);
	cr_assert_eq(dpl__replay_makespan(s, NULL, 0, &t), DPL_EDEADLOCK);
	cr_assert_eq(t, -1, "the makespan was written on failure");
	cr_assert(strstr(dpl_last_error(), "never got their input") != NULL,
		  "%s", dpl_last_error());
	dpl_schedule_destroy(s);
}
