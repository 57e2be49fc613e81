/*
 * test_plan_search.c - the planner: exhaustive enumeration on small
 * random profiles (the DP finds the pivot-optimal plan; the simulator's
 * ranking never loses against it), the qualitative behaviour DAPPLE
 * claims (small weights -> data parallelism; VGG-19's FC layers off a
 * cross-machine allreduce), and every paper model on every preset: each
 * device used at most once, memory respected, no baseline faster.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/plan.h>

/* ---- a small deterministic generator ------------------------------ */

static uint64_t rng_state;

static uint32_t rnd(void)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(rng_state >> 33);
}

static double unif(double lo, double hi)
{
	return lo + (hi - lo) * (rnd() / 2147483648.0);
}

static uint32_t pick(uint32_t lo, uint32_t hi) /* inclusive */
{
	return lo + rnd() % (hi - lo + 1);
}

/* ---- brute force ---------------------------------------------------- */

struct brute {
	const dpl_profile *prof;
	const struct dpl_cluster *c;
	struct dpl_plan_params p;
	uint32_t n, G;
	struct dpl_plan_stage rev[8]; /* stages from the last one back */
	uint32_t depth;
	double best;
	struct dpl_plan best_plan;
	uint64_t plans;
};

/* Time every micro-batching of the stages in rev[] under the pivot
 * model; keep the fastest that fits. */
static void brute_complete(struct brute *b)
{
	uint32_t gbs = b->p.global_batch, prev = 0, maxr = 1;
	struct dpl_plan pl;

	memset(&pl, 0, sizeof pl);
	pl.stages = b->depth;
	for (uint32_t s = 0; s < b->depth; s++) {
		pl.stage[s] = b->rev[b->depth - 1 - s];
		if (__builtin_popcountll(pl.stage[s].devices) > (int)maxr)
			maxr = (uint32_t)__builtin_popcountll(
			    pl.stage[s].devices);
	}
	pl.policy = DPL_POLICY_1F1B;
	for (uint32_t M = 1; M <= gbs; M++) {
		uint32_t mb = (gbs + M - 1) / M;

		if (mb == prev)
			continue;
		prev = mb;
		if (mb < maxr)
			continue;
		pl.microbatch_size = mb;
		pl.microbatches = M;
		cr_assert_eq(dpl_plan_evaluate(b->prof, b->c, &b->p, &pl), 0,
			     "%s", dpl_last_error());
		b->plans++;
		if (pl.fits && pl.pivot_ms < b->best) {
			b->best = pl.pivot_ms;
			b->best_plan = pl;
		}
	}
}

/* Every cut, device count and placement policy, last stage first (the
 * planner's order of placing stages). */
static void brute_rec(struct brute *b, uint32_t j, uint64_t occ)
{
	uint32_t nfree = b->G - (uint32_t)__builtin_popcountll(occ);

	if (j == 0) {
		brute_complete(b);
		return;
	}
	for (uint32_t i = 0; i < j; i++)
		for (uint32_t r = 1; r <= nfree; r++) {
			uint64_t seen[DPL_PLACE__COUNT];
			uint32_t ns = 0;

			if (i > 0 && r == nfree)
				continue; /* nothing left for layers < i */
			for (int pol = 0; pol < DPL_PLACE__COUNT; pol++) {
				uint64_t g;
				int dup = 0;

				if (dpl_cluster_place(b->c, occ, r,
						      (enum dpl_placement)pol,
						      &g) != 0)
					continue;
				for (uint32_t k = 0; k < ns; k++)
					dup |= seen[k] == g;
				if (dup)
					continue;
				seen[ns++] = g;
				b->rev[b->depth++] = (struct dpl_plan_stage){
				    .first_layer = i,
				    .last_layer = j - 1,
				    .devices = g};
				brute_rec(b, i, occ | g);
				b->depth--;
			}
		}
}

static dpl_profile *random_profile(uint32_t n)
{
	struct dpl_layer l[8];
	uint32_t e[2 * 64], ne = 0;
	dpl_profile *p = NULL;

	for (uint32_t i = 0; i < n; i++) {
		l[i] = (struct dpl_layer){NULL,
					  NULL,
					  unif(0.1, 5),
					  unif(0.2, 10),
					  unif(1e5, 5e8),
					  rnd() % 4 ? unif(1e6, 2e9) : 0};
		if (i > 0) {
			e[2 * ne] = i - 1;
			e[2 * ne + 1] = i;
			ne++;
		}
		for (uint32_t k = 0; k + 1 < i; k++)
			if (rnd() % 5 == 0) {
				e[2 * ne] = k;
				e[2 * ne + 1] = i;
				ne++;
			}
	}
	cr_assert_eq(dpl_profile_create(l, n, e, ne, &p), 0, "%s",
		     dpl_last_error());
	return p;
}

static void random_cluster(struct dpl_cluster *c, const dpl_profile *prof,
			   double opt)
{
	static const uint32_t shapes[][2] = {{1, 1}, {1, 2}, {1, 3}, {1, 4},
					     {2, 1}, {2, 2}};
	uint32_t k = pick(0, 5);
	double w = 0;

	memset(c, 0, sizeof *c);
	snprintf(c->name, sizeof c->name, "random");
	c->machines = shapes[k][0];
	c->devices_per_machine = shapes[k][1];
	c->intra_bandwidth = unif(1e9, 50e9);
	c->intra_latency = unif(0, 50e-6);
	c->inter_bandwidth = unif(0.5e9, 10e9);
	c->inter_latency = unif(0, 100e-6);
	c->ar_intra_bandwidth = unif(1e9, 50e9);
	c->ar_intra_pairs = (int)(rnd() % 2);
	c->ar_inter_bandwidth = unif(0.5e9, 10e9);
	for (uint32_t i = 0; i < dpl_profile_layers(prof); i++)
		w += dpl_profile_layer(prof, i)->parameter_bytes;
	/* from "only a split fits" to "everything fits" */
	c->device_memory = (w * (2 + opt) + 1e9) * unif(0.3, 1.5);
}

static double rel(double a, double b)
{
	return fabs(a - b) / fmax(1e-12, fabs(b));
}

Test(plan_search, dp_matches_exhaustive_enumeration)
{
	uint32_t feasible = 0, infeasible = 0;

	rng_state = 20240611;
	for (int t = 0; t < 60; t++) {
		struct brute b;
		struct dpl_cluster c;
		struct dpl_plan_report *r = calloc(1, sizeof *r);
		uint32_t n = pick(1, 8);
		dpl_profile *prof = random_profile(n);
		double opt = (double)pick(0, 2), want;
		int rc;

		cr_assert_not_null(r);
		random_cluster(&c, prof, opt);
		memset(&b, 0, sizeof b);
		b.prof = prof;
		b.c = &c;
		b.n = n;
		b.G = dpl_cluster_devices(&c);
		b.p.profile_batch = pick(1, 8);
		b.p.global_batch = pick(1, 16);
		b.p.optimizer_factor = opt;
		b.p.rank = DPL_PLAN_RANK_PIVOT;
		b.p.front_cap = 1000000;
		b.best = HUGE_VAL;
		brute_rec(&b, n, 0);
		/* the baselines are candidates of the planner too */
		want = b.best;
		for (int k = 0; k < DPL_BASELINE__COUNT; k++) {
			struct dpl_plan bp;

			if (dpl_plan_baseline(prof, &c, &b.p,
					      (enum dpl_plan_baseline)k,
					      &bp) == 0 &&
			    bp.fits)
				want = fmin(want, bp.pivot_ms);
		}
		rc = dpl_plan_search(prof, &c, &b.p, r);
		if (want == HUGE_VAL) {
			cr_expect_eq(rc, DPL_ENOFIT,
				     "case %d: nothing fits but rc %d", t, rc);
			infeasible++;
		} else {
			cr_assert_eq(rc, 0, "case %d: %s", t, dpl_last_error());
			cr_expect(r->exact, "case %d: a front was capped", t);
			cr_expect(r->best.fits, "case %d", t);
			cr_expect(rel(r->best.pivot_ms, want) < 1e-9,
				  "case %d (%u layers, %ux%u devices, gbs %u): "
				  "planner %.9g, enumeration %.9g over %llu "
				  "plans",
				  t, n, c.machines, c.devices_per_machine,
				  b.p.global_batch, r->best.pivot_ms, want,
				  (unsigned long long)b.plans);
			feasible++;
		}
		/* ranking by the simulator never does worse than timing
		 * the pivot-optimal enumerated plan in the simulator */
		if (b.best < HUGE_VAL) {
			struct dpl_plan_params ps = b.p;
			struct dpl_plan bp = b.best_plan;

			ps.rank = DPL_PLAN_RANK_SIM;
			cr_assert_eq(dpl_plan_evaluate(prof, &c, &ps, &bp), 0);
			cr_assert_eq(dpl_plan_search(prof, &c, &ps, r), 0, "%s",
				     dpl_last_error());
			cr_expect_leq(r->best.predicted_ms,
				      bp.predicted_ms * (1 + 1e-9),
				      "case %d: simulated %.9g > %.9g", t,
				      r->best.predicted_ms, bp.predicted_ms);
		}
		dpl_profile_destroy(prof);
		free(r);
	}
	/* the generator must exercise both outcomes */
	cr_expect_gt(feasible, 30);
	cr_expect_gt(infeasible, 0);
}

Test(plan_search, small_weights_on_a_fast_network_is_data_parallel)
{
	struct dpl_layer l[16];
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 8, .global_batch = 512,
				    .optimizer_factor = 1};
	struct dpl_plan_report *r = calloc(1, sizeof *r);
	dpl_profile *prof = NULL;

	/* 16 MB of weights, 96 ms of compute per 8 samples */
	for (int i = 0; i < 16; i++)
		l[i] = (struct dpl_layer){NULL, NULL, 2, 4, 4e6, 1e6};
	cr_assert_eq(dpl_profile_create(l, 16, NULL, 0, &prof), 0);
	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	c.inter_bandwidth = c.ar_inter_bandwidth = 12.5e9; /* 100 Gbit/s */
	cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(r->best.stages, 1);
	cr_expect_eq(r->best.devices_used, 16);
	cr_expect(r->baseline_found[DPL_BASELINE_DATA_PARALLEL]);
	cr_expect_leq(r->best.predicted_ms,
		      r->baseline[DPL_BASELINE_DATA_PARALLEL].predicted_ms *
			  (1 + 1e-12));
	/* and the same on 16 single-device machines at 25 Gbit/s */
	cr_assert_eq(dpl_cluster_preset("paper-b", &c), 0);
	cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0);
	cr_expect_eq(r->best.stages, 1);
	cr_expect_eq(r->best.devices_used, 16);
	dpl_profile_destroy(prof);
	free(r);
}

Test(plan_search, limits_on_stages_and_micro_batch_size_hold)
{
	struct dpl_layer l[12];
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 4, .global_batch = 256,
				    .optimizer_factor = 2};
	struct dpl_plan_report *r = calloc(1, sizeof *r);
	dpl_profile *prof = NULL;

	/* heavy weights: without limits this wants a deep pipeline */
	for (int i = 0; i < 12; i++)
		l[i] = (struct dpl_layer){NULL, NULL, 5, 10, 5e7, 1.5e9};
	cr_assert_eq(dpl_profile_create(l, 12, NULL, 0, &prof), 0);
	cr_assert_eq(dpl_cluster_preset("paper-c", &c), 0);
	cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0, "%s",
		     dpl_last_error());
	cr_assert_gt(r->best.stages, 3, "the unlimited plan has %u stages",
		     r->best.stages);
	p.max_stages = 3;
	p.optimizer_factor = 0;
	cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0, "%s",
		     dpl_last_error());
	cr_expect_leq(r->best.stages, 3);
	p.max_stages = 0;
	p.microbatch_size = 8;
	cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(r->best.microbatch_size, 8);
	cr_expect_eq(r->best.microbatches, 32);
	for (int b = 0; b < DPL_BASELINE__COUNT; b++)
		if (r->baseline_found[b])
			cr_expect_eq(r->baseline[b].microbatch_size, 8, "%s",
				     dpl_plan_baseline_name(
					 (enum dpl_plan_baseline)b));
	dpl_profile_destroy(prof);
	free(r);
}

Test(plan_search, deep_profiles_plan_on_a_bounded_set_of_cuts)
{
	/* 300 layers: the DP thins its cuts to 64 and PipeDream's DP runs
	 * on 128 layer ranges; the plan is still complete and valid */
	enum { N = 300 };
	struct dpl_layer *l = calloc(N, sizeof *l);
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 8, .global_batch = 256,
				    .optimizer_factor = 2};
	struct dpl_plan_report *r = calloc(1, sizeof *r);
	dpl_profile *prof = NULL;
	uint32_t next = 0;

	for (int i = 0; i < N; i++)
		l[i] = (struct dpl_layer){NULL, NULL, 0.5 + (i % 7) * 0.1,
					  1.0 + (i % 5) * 0.2, 2e6, 4e7};
	cr_assert_eq(dpl_profile_create(l, N, NULL, 0, &prof), 0);
	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0, "%s",
		     dpl_last_error());
	cr_expect(r->best.fits);
	for (uint32_t s = 0; s < r->best.stages; s++) {
		cr_expect_eq(r->best.stage[s].first_layer, next);
		next = r->best.stage[s].last_layer + 1;
	}
	cr_expect_eq(next, N);
	cr_assert(r->baseline_found[DPL_BASELINE_PIPEDREAM]);
	next = 0;
	for (uint32_t s = 0; s < r->baseline[DPL_BASELINE_PIPEDREAM].stages;
	     s++) {
		const struct dpl_plan_stage *st =
		    &r->baseline[DPL_BASELINE_PIPEDREAM].stage[s];

		cr_expect_eq(st->first_layer, next);
		next = st->last_layer + 1;
	}
	cr_expect_eq(next, N);
	for (int b = 0; b < DPL_BASELINE__COUNT; b++)
		if (r->baseline_found[b] && r->baseline[b].fits)
			cr_expect_leq(r->best.predicted_ms,
				      r->baseline[b].predicted_ms * (1 + 1e-12));
	dpl_profile_destroy(prof);
	free(l);
	free(r);
}

Test(plan_search, model_too_large_names_stage_and_overflow)
{
	struct dpl_layer l[2] = {{"a", "Embedding", 1, 2, 1e6, 1e9},
				 {"b", "Huge", 1, 2, 1e6, 5e9}};
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 1, .global_batch = 64,
				    .optimizer_factor = 2};
	struct dpl_plan_report *r = calloc(1, sizeof *r);
	dpl_profile *prof = NULL;

	cr_assert_eq(dpl_profile_create(l, 2, NULL, 0, &prof), 0);
	cr_assert_eq(dpl_cluster_preset("paper-b", &c), 0);
	memset(r, 0x11, sizeof *r);
	cr_expect_eq(dpl_plan_search(prof, &c, &p, r), DPL_ENOFIT);
	/* 5e9 x (2 + 2) = 20e9 weights alone on the stage of "Huge" */
	cr_expect(strstr(dpl_last_error(), "layers 1-1, Huge .. Huge") != NULL,
		  "%s", dpl_last_error());
	cr_expect(strstr(dpl_last_error(), "bytes over") != NULL, "%s",
		  dpl_last_error());
	cr_expect_eq(r->best.stages, 0x11111111u, "report written on failure");
	dpl_profile_destroy(prof);
	free(r);
}

Test(plan_search, rejects_bad_parameters)
{
	struct dpl_layer l = {"a", "A", 1, 2, 1, 1};
	struct dpl_cluster c;
	struct dpl_plan_params p = {.profile_batch = 1, .global_batch = 4};
	struct dpl_plan_report *r = calloc(1, sizeof *r);
	dpl_profile *prof = NULL;

	cr_assert_eq(dpl_profile_create(&l, 1, NULL, 0, &prof), 0);
	cr_assert_eq(dpl_cluster_preset("paper-b", &c), 0);
	p.global_batch = 0;
	cr_expect_eq(dpl_plan_search(prof, &c, &p, r), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "global batch") != NULL);
	p.global_batch = 4;
	p.optimizer_factor = -1;
	cr_expect_eq(dpl_plan_search(prof, &c, &p, r), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "optimizer factor") != NULL);
	p.optimizer_factor = 0;
	p.microbatch_size = 5;
	cr_expect_eq(dpl_plan_search(prof, &c, &p, r), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "micro-batch size 5") != NULL);
	p.microbatch_size = 0;
	c.machines = 0;
	cr_expect_eq(dpl_plan_search(prof, &c, &p, r), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "machines") != NULL);
	cr_expect_eq(dpl_plan_search(NULL, &c, &p, r), DPL_EINVAL);
	/* one layer and 4 samples on 16 devices: 4 replicas at most */
	cr_assert_eq(dpl_cluster_preset("paper-b", &c), 0);
	cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0, "%s",
		     dpl_last_error());
	cr_expect_leq(r->best.devices_used, 4);
	cr_expect_not(r->baseline_found[DPL_BASELINE_DATA_PARALLEL]);
	dpl_profile_destroy(prof);
	free(r);
}

/* ---- the released profiles ------------------------------------------ */

static const struct {
	const char *file;
	uint32_t pbs;
} models[] = {
    {"vgg-19-pbs-32.txt", 32},  {"bert-48-pbs-2.txt", 2},
    {"xlnet-36-pbs-1.txt", 1},  {"amoeba-36-pbs-1.txt", 1},
    {"gnmt-16-pbs-64.txt", 64},
};

static const char *const presets[] = {"paper-a", "paper-b", "paper-c"};

static dpl_profile *released(const char *name)
{
	const char *dir = getenv("DPL_PROFILES");
	char path[1024];
	dpl_profile *p = NULL;

	snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : DPL_PROFILES_DIR,
		 name);
	if (access(path, R_OK) != 0)
		cr_skip_test("profile %s not found (set DPL_PROFILES or "
			     "configure DPL_PROFILES_DIR)",
			     path);
	cr_assert_eq(dpl_profile_load(path, &p), 0, "%s", dpl_last_error());
	return p;
}

static void check_plan(const char *what, const struct dpl_cluster *c,
		       const struct dpl_plan_report *r)
{
	const struct dpl_plan *b = &r->best;
	uint64_t used = 0;

	cr_expect(b->fits, "%s: does not fit", what);
	cr_expect_leq((double)b->peak_memory_bytes, c->device_memory, "%s",
		      what);
	for (uint32_t s = 0; s < b->stages; s++) {
		cr_expect_eq(b->stage[s].devices & used, 0,
			     "%s: stage %u reuses a device", what, s);
		cr_expect_eq(b->stage[s].devices >> dpl_cluster_devices(c), 0,
			     "%s: stage %u uses a device the cluster lacks",
			     what, s);
		cr_expect_leq((double)b->stage[s].memory_bytes,
			      c->device_memory, "%s: stage %u", what, s);
		used |= b->stage[s].devices;
	}
	for (int k = 0; k < DPL_BASELINE__COUNT; k++)
		if (r->baseline_found[k] && r->baseline[k].fits)
			cr_expect_leq(b->predicted_ms,
				      r->baseline[k].predicted_ms * (1 + 1e-12),
				      "%s: %s is faster (%.3f < %.3f ms)", what,
				      dpl_plan_baseline_name(
					  (enum dpl_plan_baseline)k),
				      r->baseline[k].predicted_ms,
				      b->predicted_ms);
}

Test(plan_search, paper_models_on_every_preset)
{
	struct dpl_plan_report *r = calloc(1, sizeof *r);

	for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
		dpl_profile *prof = released(models[m].file);

		for (size_t k = 0; k < 3; k++) {
			struct dpl_cluster c;
			struct dpl_plan_params p = {
			    .profile_batch = models[m].pbs,
			    .global_batch = 512,
			    .optimizer_factor = 2};
			char what[128];

			snprintf(what, sizeof what, "%s on %s", models[m].file,
				 presets[k]);
			cr_assert_eq(dpl_cluster_preset(presets[k], &c), 0);
			cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0,
				     "%s: %s", what, dpl_last_error());
			check_plan(what, &c, r);
		}
		dpl_profile_destroy(prof);
	}
	free(r);
}

Test(plan_search, vgg19_keeps_fc_layers_off_cross_machine_allreduce)
{
	dpl_profile *prof = released("vgg-19-pbs-32.txt");
	struct dpl_plan_report *r = calloc(1, sizeof *r);
	static const uint32_t gbs[] = {128, 512, 2048};
	uint32_t fc1 = 0;

	for (uint32_t i = 0; i < dpl_profile_layers(prof); i++)
		if (strcmp(dpl_profile_layer(prof, i)->name, "FC1") == 0)
			fc1 = i;
	cr_assert_gt(fc1, 0);
	for (size_t k = 0; k < 3; k++)
		for (size_t g = 0; g < 3; g++) {
			struct dpl_cluster c;
			struct dpl_plan_params p = {.profile_batch = 32,
						    .global_batch = gbs[g],
						    .optimizer_factor = 2};
			uint32_t dpm;

			cr_assert_eq(dpl_cluster_preset(presets[k], &c), 0);
			dpm = c.devices_per_machine;
			cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0, "%s",
				     dpl_last_error());
			for (uint32_t s = 0; s < r->best.stages; s++) {
				const struct dpl_plan_stage *st =
				    &r->best.stage[s];
				uint64_t d = st->devices;
				uint32_t lo = (uint32_t)__builtin_ctzll(d);
				uint32_t hi = 63 - (uint32_t)__builtin_clzll(d);

				if (st->first_layer > fc1 + 2 ||
				    st->last_layer < fc1)
					continue;
				/* FC1..Prediction: one machine, so any
				 * allreduce of them runs on NVLink */
				cr_expect_eq(lo / dpm, hi / dpm,
					     "%s gbs %u: stage %u (layers "
					     "%u-%u) spans machines",
					     presets[k], gbs[g], s,
					     st->first_layer, st->last_layer);
			}
			/* and DP over 16 devices is slower: its allreduce
			 * of 548 MB crosses machines */
			cr_expect_gt(r->best.stages, 1, "%s gbs %u", presets[k],
				     gbs[g]);
		}
	dpl_profile_destroy(prof);
	free(r);
}

Test(plan_search, large_nlp_models_on_two_servers_split_per_server)
{
	/* DAPPLE.md §6 claim 9: 2 stages, one server each ("8:8") */
	static const size_t which[] = {1, 2};
	struct dpl_plan_report *r = calloc(1, sizeof *r);

	for (size_t w = 0; w < 2; w++) {
		dpl_profile *prof = released(models[which[w]].file);
		struct dpl_cluster c;
		struct dpl_plan_params p = {.profile_batch = models[which[w]].pbs,
					    .global_batch = 512,
					    .optimizer_factor = 2};

		cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
		cr_assert_eq(dpl_plan_search(prof, &c, &p, r), 0, "%s",
			     dpl_last_error());
		cr_expect_eq(r->best.stages, 2, "%s", models[which[w]].file);
		for (uint32_t s = 0; s < r->best.stages && s < 2; s++)
			cr_expect(r->best.stage[s].devices == 0x00FFULL ||
				      r->best.stage[s].devices == 0xFF00ULL,
				  "%s: stage %u is not one whole server "
				  "(%#llx)",
				  models[which[w]].file, s,
				  (unsigned long long)r->best.stage[s].devices);
		dpl_profile_destroy(prof);
	}
	free(r);
}
