/*
 * test_plan_cost.c - the planner's cost model against numbers worked out
 * by hand: DAPPLE's pivot formula (the checks of DAPPLE.md §2.1 / §6),
 * split-concat transfers over NVLink and Ethernet, ring allreduce (the
 * VGG-19 FC example), memory, the plan -> schedule -> simulator mapping,
 * the choice of micro-batching, and the plan checks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/plan.h>

#define CLOSE(a, b, tol)                                                      \
	cr_expect(fabs((double)(a) - (double)(b)) <=                          \
		      (tol) * fmax(1.0, fabs((double)(b))),                   \
		  "%s = %.12g, expected %.12g", #a, (double)(a), (double)(b))

Test(plan_cost, pivot_formula_examples_of_dapple)
{
	double f1[] = {1, 1, 1, 1}, b1[] = {2, 2, 2, 2};
	double f2[] = {2, 1, 1, 1}, b2[] = {4, 2, 2, 2};
	double f3[] = {1, 1, 1, 2}, b3[] = {2, 2, 2, 4};
	uint32_t q = 99;

	/* uniform: (M + S - 1)(F + B) = 11 * 3, pivot the last stage */
	cr_expect_eq(dpl_plan_pivot(f1, b1, NULL, 4, 8, &q), 33);
	cr_expect_eq(q, 3);
	/* heavy first stage: 48 with Q = 0 (the simulator says 51) */
	cr_expect_eq(dpl_plan_pivot(f2, b2, NULL, 4, 8, &q), 48);
	cr_expect_eq(q, 0);
	/* heavy last stage: 57 with Q = 3 */
	cr_expect_eq(dpl_plan_pivot(f3, b3, NULL, 4, 8, &q), 57);
	cr_expect_eq(q, 3);
	cr_expect_eq(dpl_plan_pivot(f1, b1, NULL, 0, 8, &q), 0);
	cr_expect_eq(dpl_plan_pivot(f1, b1, NULL, 4, 0, NULL), 0);
}

Test(plan_cost, allreduce_counts_only_where_it_sticks_out)
{
	double f[] = {1, 1}, b[] = {2, 2};
	double hidden[] = {1, 0}, late[] = {0, 10};
	uint32_t q;

	/* S = 2, M = 4: stage 0 ends at 15, stage 1 at 13 */
	cr_expect_eq(dpl_plan_pivot(f, b, NULL, 2, 4, &q), 15);
	/* stage 0's allreduce of 1 cannot hide: 15 + 1 */
	cr_expect_eq(dpl_plan_pivot(f, b, hidden, 2, 4, &q), 16);
	/* stage 1's allreduce of 10 starts at 13 and ends at 23 */
	cr_expect_eq(dpl_plan_pivot(f, b, late, 2, 4, &q), 23);
	cr_expect_eq(q, 1);
	late[1] = 2;
	/* 13 + 2 < 15: hidden */
	cr_expect_eq(dpl_plan_pivot(f, b, late, 2, 4, &q), 15);
}

/* Two layers at profile batch 4: activations 1e8 and 1e6 bytes. */
static dpl_profile *two_layers(void)
{
	struct dpl_layer l[2] = {{"a", "A", 1, 2, 1e8, 4e8},
				 {"b", "B", 2, 4, 1e6, 8e8}};
	dpl_profile *p = NULL;

	cr_assert_eq(dpl_profile_create(l, 2, NULL, 0, &p), 0);
	return p;
}

static struct dpl_plan two_stage(uint64_t d0, uint64_t d1)
{
	struct dpl_plan pl;

	memset(&pl, 0, sizeof pl);
	pl.stages = 2;
	pl.stage[0] = (struct dpl_plan_stage){.first_layer = 0,
					      .last_layer = 0,
					      .devices = d0};
	pl.stage[1] = (struct dpl_plan_stage){.first_layer = 1,
					      .last_layer = 1,
					      .devices = d1};
	pl.microbatch_size = 8;
	pl.microbatches = 4;
	pl.policy = DPL_POLICY_1F1B;
	return pl;
}

Test(plan_cost, stage_costs_transfer_allreduce_memory_by_hand)
{
	dpl_profile *prof = two_layers();
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 4, .global_batch = 32,
				    .optimizer_factor = 2,
				    .rank = DPL_PLAN_RANK_PIVOT};
	struct dpl_plan pl = two_stage(0x3, 1ULL << 8);
	double send, ar0, fq[3], bq[3], L[3], want;

	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	cr_assert_eq(dpl_plan_evaluate(prof, &c, &p, &pl), 0, "%s",
		     dpl_last_error());
	/* stage 0: 2 replicas, 4 samples each = the profile batch */
	cr_expect_eq(pl.stage[0].replicas, 2);
	CLOSE(pl.stage[0].forward_ms, 1.0, 1e-12);
	CLOSE(pl.stage[0].backward_ms, 2.0, 1e-12);
	/* stage 1: 1 replica, 8 samples = twice the profile batch */
	CLOSE(pl.stage[1].forward_ms, 4.0, 1e-12);
	CLOSE(pl.stage[1].backward_ms, 8.0, 1e-12);
	/* 2e8 bytes leave machine 0 over 3 GB/s Ethernet, + 25 us */
	send = 2e8 / 3e9 * 1e3 + 0.025;
	CLOSE(pl.stage[0].send_ms, send, 1e-12);
	CLOSE(pl.stage[1].send_ms, 0, 1e-12);
	/* ring over 2 NVLink devices: (2 * 1/2 * 4e8) / 25e9, + 2 x 5 us */
	ar0 = 4e8 / 25e9 * 1e3 + 2 * 5e-3;
	CLOSE(pl.stage[0].allreduce_ms, ar0, 1e-12);
	CLOSE(pl.stage[1].allreduce_ms, 0, 1e-12);
	/* memory: W (1 + 2) + W + in-flight * activations */
	cr_expect_eq(pl.stage[0].inflight, 2);
	cr_expect_eq(pl.stage[1].inflight, 1);
	CLOSE(pl.stage[0].memory_bytes, 4e8 * 4 + 2 * 1e8, 1e-12);
	CLOSE(pl.stage[1].memory_bytes, 8e8 * 4 + 1 * 2e6, 1e-12);
	CLOSE(pl.peak_memory_bytes, 8e8 * 4 + 2e6, 1e-12);
	/* one micro-batch's activations per device: the terms above */
	CLOSE(pl.stage[0].activation_bytes, 1e8, 1e-12);
	CLOSE(pl.stage[1].activation_bytes, 2e6, 1e-12);
	cr_expect_eq(pl.worst_stage, 1);
	cr_expect(pl.fits);
	cr_expect_eq(pl.devices_used, 3);
	/* the pivot over compute, transfer, compute, by hand */
	fq[0] = 1, fq[1] = send, fq[2] = 4;
	bq[0] = 2, bq[1] = send, bq[2] = 8;
	L[0] = fq[0] + 3 * (fq[0] + bq[0]) +
	       fmax(ar0 + bq[0], fmax(0, -bq[1]));
	L[1] = fq[0] + fq[1] + 3 * (fq[1] + bq[1]) +
	       fmax(ar0 + bq[0] + bq[1], fmax(bq[1], 0));
	L[2] = fq[0] + fq[1] + fq[2] + 3 * (fq[2] + bq[2]) +
	       fmax(ar0 + bq[0] + bq[1] + bq[2], bq[1] + bq[2]);
	want = fmax(L[0], fmax(L[1], L[2]));
	CLOSE(pl.pivot_ms, want, 1e-12);
	cr_expect_eq(pl.pivot_stage, 0);
	cr_expect(pl.pivot_is_transfer, "the 66 ms transfer is the pivot");
	CLOSE(pl.predicted_ms, pl.pivot_ms, 1e-12);
	dpl_profile_destroy(prof);
}

Test(plan_cost, split_concat_stays_on_nvlink_when_halves_match)
{
	dpl_profile *prof = two_layers();
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 4, .global_batch = 32,
				    .rank = DPL_PLAN_RANK_PIVOT};
	/* replica 0 on machine 0 feeds device 1, replica 1 feeds 9 */
	struct dpl_plan same = two_stage(1ULL | 1ULL << 8, 1ULL << 1 | 1ULL << 9);
	/* replica 1 (device 8) now feeds device 2 on the other machine */
	struct dpl_plan mixed = two_stage(1ULL | 1ULL << 8, 1ULL << 1 | 1ULL << 2);

	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	cr_assert_eq(dpl_plan_evaluate(prof, &c, &p, &same), 0);
	cr_assert_eq(dpl_plan_evaluate(prof, &c, &p, &mixed), 0);
	/* each device sends its half (1e8 bytes) over NVLink */
	CLOSE(same.stage[0].send_ms, 1e8 / 25e9 * 1e3 + 5e-3, 1e-12);
	/* machine 1 sends a half over Ethernet */
	CLOSE(mixed.stage[0].send_ms, 1e8 / 3e9 * 1e3 + 25e-3, 1e-12);
	/* across machines the allreduce runs at 3 GB/s */
	CLOSE(same.stage[0].allreduce_ms, 4e8 / 3e9 * 1e3 + 2 * 25e-3, 1e-12);
	dpl_profile_destroy(prof);
}

Test(plan_cost, vgg_fc_allreduce_example)
{
	/* DAPPLE.md §6 claim 7: the FC weights (471.6 MB) data parallel
	 * over 16 GPUs on two machines take about 0.295 s per iteration */
	struct dpl_layer l = {"fc", "FC", 1, 1, 1, 471.6e6};
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 16, .global_batch = 16,
				    .rank = DPL_PLAN_RANK_PIVOT};
	struct dpl_plan pl;
	dpl_profile *prof = NULL;

	cr_assert_eq(dpl_profile_create(&l, 1, NULL, 0, &prof), 0);
	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	memset(&pl, 0, sizeof pl);
	pl.stages = 1;
	pl.stage[0].devices = 0xFFFF;
	pl.microbatch_size = 16;
	pl.microbatches = 1;
	pl.policy = DPL_POLICY_1F1B;
	cr_assert_eq(dpl_plan_evaluate(prof, &c, &p, &pl), 0);
	CLOSE(pl.stage[0].allreduce_ms,
	      (2.0 * 15 / 16 * 471.6e6 / 3e9 + 30 * 25e-6) * 1e3, 1e-12);
	cr_expect(fabs(pl.stage[0].allreduce_ms - 295) < 1.0, "%g",
		  pl.stage[0].allreduce_ms);
	/* inside one machine: 8 devices reach 25 GB/s x 4 = 100 GB/s */
	pl.stage[0].devices = 0xFF;
	pl.microbatch_size = 8;
	cr_assert_eq(dpl_plan_evaluate(prof, &c, &p, &pl), 0);
	CLOSE(pl.stage[0].allreduce_ms,
	      (2.0 * 7 / 8 * 471.6e6 / 100e9 + 14 * 5e-6) * 1e3, 1e-12);
	dpl_profile_destroy(prof);
}

/* S layers with F = 1, B = 2 per sample and nothing else. */
static dpl_profile *uniform(uint32_t S)
{
	struct dpl_layer l[8];
	dpl_profile *p = NULL;

	for (uint32_t i = 0; i < S; i++)
		l[i] = (struct dpl_layer){NULL, NULL, 1, 2, 0, 0};
	cr_assert_eq(dpl_profile_create(l, S, NULL, 0, &p), 0);
	return p;
}

Test(plan_cost, uniform_pipeline_simulates_to_the_formula)
{
	dpl_profile *prof = uniform(4);
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 1, .global_batch = 8};
	struct dpl_plan pl;

	cr_assert_eq(dpl_cluster_preset("paper-b", &c), 0);
	memset(&pl, 0, sizeof pl);
	pl.stages = 4;
	for (uint32_t s = 0; s < 4; s++)
		pl.stage[s] = (struct dpl_plan_stage){
		    .first_layer = s, .last_layer = s, .devices = 1ULL << s};
	pl.microbatch_size = 1;
	pl.microbatches = 8;
	pl.policy = DPL_POLICY_1F1B;
	cr_assert_eq(dpl_plan_evaluate(prof, &c, &p, &pl), 0, "%s",
		     dpl_last_error());
	CLOSE(pl.pivot_ms, 33, 1e-12);
	CLOSE(pl.predicted_ms, 33, 1e-9);
	/* in-flight 4, 3, 2, 1 under 1f1b; M under gpipe */
	for (uint32_t s = 0; s < 4; s++)
		cr_expect_eq(pl.stage[s].inflight, 4 - s);
	pl.policy = DPL_POLICY_GPIPE;
	cr_assert_eq(dpl_plan_evaluate(prof, &c, &p, &pl), 0);
	for (uint32_t s = 0; s < 4; s++)
		cr_expect_eq(pl.stage[s].inflight, 8);
	CLOSE(pl.predicted_ms, 33, 1e-9);
	pl.policy = DPL_POLICY_1F1B_COMM;
	cr_assert_eq(dpl_plan_evaluate(prof, &c, &p, &pl), 0);
	cr_expect_eq(pl.stage[0].inflight, 7);
	cr_expect_eq(pl.stage[3].inflight, 1);
	dpl_profile_destroy(prof);
}

Test(plan_cost, schedule_carries_transfer_and_allreduce_times)
{
	dpl_profile *prof = two_layers();
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 4, .global_batch = 32,
				    .optimizer_factor = 2};
	struct dpl_plan pl = two_stage(0x3, 1ULL << 8);
	struct dpl_plan_sim ps;
	struct dpl_sim_stage_stats st;
	struct dpl_sim_summary sum;
	const struct dpl_sim_event *ev;
	dpl_schedule *s = NULL;
	dpl_sim *sim = NULL;
	size_t nev, transfers = 0;

	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	cr_assert_eq(dpl_plan_evaluate(prof, &c, &p, &pl), 0);
	cr_assert_eq(dpl_plan_schedule(&pl, &s, &ps), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(dpl_schedule_stages(s), 2);
	cr_expect_eq(dpl_schedule_microbatches(s), 4);
	cr_expect_eq(dpl_schedule_policy(s), DPL_POLICY_1F1B);
	cr_expect_eq(ps.replicas[0], 2);
	cr_expect_eq(ps.replicas[1], 1);
	cr_assert_eq(dpl_sim_run(s, &ps.params, &sim), 0, "%s",
		     dpl_last_error());
	/* every transfer lasts send_ms (1 "byte" = 1 ns at 1e6 per ms) */
	ev = dpl_sim_events(sim, &nev);
	for (size_t k = 0; k < nev; k++)
		if (ev[k].kind == DPL_SIM_TRANSFER) {
			CLOSE(ev[k].end - ev[k].start, pl.stage[0].send_ms,
			      1e-6);
			transfers++;
		}
	cr_expect_eq(transfers, 8, "4 activations and 4 gradients");
	cr_assert_eq(dpl_sim_stage(sim, 0, &st), 0);
	CLOSE(st.reduce_end - st.reduce_start, pl.stage[0].allreduce_ms, 1e-6);
	dpl_sim_summary(sim, &sum);
	CLOSE(sum.makespan, pl.predicted_ms, 1e-12);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
	dpl_profile_destroy(prof);
}

Test(plan_cost, evaluate_rejects_bad_plans)
{
	dpl_profile *prof = two_layers();
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 4, .global_batch = 32};
	static const struct {
		uint64_t d0, d1;
		uint32_t last0, mb;
		int policy;
		const char *want;
	} bad[] = {
	    {0x3, 0x2, 0, 8, 1, "stage 1 reuses device 1"},
	    {0x3, 0, 0, 8, 1, "stage 1 has no device"},
	    {0x3, 1ULL << 16, 0, 8, 1, "names device 16; the cluster has 16"},
	    {0x3, 0x4, 0, 1, 1, "stage 0 has 2 replicas for 1 samples"},
	    {0x3, 0x4, 1, 8, 1, "stage 1 ends at layer 1 (first 2, layers 2)"},
	    {0x3, 0x4, 0, 8, 3, "policy must be gpipe, 1f1b or 1f1b-comm"},
	};
	struct dpl_plan pl;

	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		struct dpl_plan before;

		pl = two_stage(bad[k].d0, bad[k].d1);
		pl.stage[0].last_layer = bad[k].last0;
		if (bad[k].last0 == 1)
			pl.stage[1].first_layer = 2;
		pl.microbatch_size = bad[k].mb;
		pl.policy = (enum dpl_policy)bad[k].policy;
		memcpy(&before, &pl, sizeof pl);
		cr_expect_eq(dpl_plan_evaluate(prof, &c, &p, &pl), DPL_EINVAL,
			     "case %zu", k);
		cr_expect(strstr(dpl_last_error(), bad[k].want) != NULL,
			  "case %zu: '%s' lacks '%s'", k, dpl_last_error(),
			  bad[k].want);
		cr_expect_eq(memcmp(&before, &pl, sizeof pl), 0,
			     "case %zu: plan changed on failure", k);
	}
	pl = two_stage(0x3, 0x4);
	pl.stage[1].last_layer = 0;
	pl.stage[1].first_layer = 1;
	cr_expect_eq(dpl_plan_evaluate(prof, &c, &p, &pl), DPL_EINVAL);
	p.profile_batch = 0;
	pl = two_stage(0x3, 0x4);
	cr_expect_eq(dpl_plan_evaluate(prof, &c, &p, &pl), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "profile batch") != NULL);
	dpl_profile_destroy(prof);
}

Test(plan_cost, tune_picks_micro_batches_that_fit)
{
	/* one layer, 1e9 activation bytes per sample, no weights */
	struct dpl_layer l = {"x", "X", 1, 2, 1e9, 0};
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 1, .global_batch = 16};
	struct dpl_plan pl;
	dpl_profile *prof = NULL;

	cr_assert_eq(dpl_profile_create(&l, 1, NULL, 0, &prof), 0);
	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	c.machines = 1;
	c.device_memory = 3e9; /* three samples per device */
	memset(&pl, 0, sizeof pl);
	pl.stages = 1;
	pl.stage[0].devices = 0x3;
	pl.policy = DPL_POLICY_1F1B;
	cr_assert_eq(dpl_plan_tune(prof, &c, &p, &pl), 0, "%s",
		     dpl_last_error());
	cr_expect(pl.fits);
	/* 8 sample-times per device: mb 4 (M 4) beats mb 6 (M 3, 9) and
	 * ties with mb 2 (M 8), which has more micro-batches */
	cr_expect_eq(pl.microbatch_size, 4);
	cr_expect_eq(pl.microbatches, 4);
	CLOSE(pl.predicted_ms, 8 * 3.0, 1e-9);
	cr_expect_leq(pl.peak_memory_bytes, 3e9);
	/* below one sample per device nothing fits: the closest is kept */
	c.device_memory = 0.5e9;
	memset(&pl, 0, sizeof pl);
	pl.stages = 1;
	pl.stage[0].devices = 0x3;
	pl.policy = DPL_POLICY_1F1B;
	cr_assert_eq(dpl_plan_tune(prof, &c, &p, &pl), 0);
	cr_expect_not(pl.fits);
	cr_expect_eq(pl.microbatch_size, 2);
	CLOSE(pl.peak_memory_bytes, 1e9, 1e-12);
	/* the global batch must cover the replicas */
	p.global_batch = 1;
	memset(&pl, 0, sizeof pl);
	pl.stages = 1;
	pl.stage[0].devices = 0x3;
	cr_expect_eq(dpl_plan_tune(prof, &c, &p, &pl), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "smaller than the 2 replicas") !=
		  NULL, "%s", dpl_last_error());
	/* a gpipe plan stays gpipe: M micro-batches in flight, so with
	 * 16 samples the device holds 8 whatever the size */
	p.global_batch = 16;
	c.device_memory = 8e9;
	memset(&pl, 0, sizeof pl);
	pl.stages = 1;
	pl.stage[0].devices = 0x3;
	pl.policy = DPL_POLICY_GPIPE;
	cr_assert_eq(dpl_plan_tune(prof, &c, &p, &pl), 0);
	cr_expect_eq(pl.policy, DPL_POLICY_GPIPE);
	cr_expect(pl.fits);
	CLOSE(pl.peak_memory_bytes, 8e9, 1e-12);
	dpl_profile_destroy(prof);
}
