/*
 * test_inproc_runner.c - the runner over the in-process transport with
 * callbacks that check every value moved: every policy on pure pipeline,
 * pure data parallel, pipeline x data parallel and uneven 3:1 layouts,
 * with M < S and M not divisible by the replicas; peak in-flight equal to
 * the schedule's bound; statistics; traces; failures and timeouts.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include <dpl/transport_hook.h>

#include "ar_shim.h"
#include "toy_world.h"

struct layout {
	const char *name;
	uint32_t stages;
	uint32_t replicas[4];
};

static const struct layout layouts[] = {
	{"pipeline", 4, {1, 1, 1, 1}},
	{"data-parallel", 1, {3}},
	{"pipeline-x-dp", 2, {2, 2}},
	{"uneven-3:1", 2, {3, 1}},
};

static void check_world(struct toy_world *w, const char *what)
{
	uint32_t i, s;

	for (i = 0; i < w->world; i++) {
		struct toy_rank *r = &w->res[i];

		cr_assert_eq(r->create_rc, 0, "%s: rank %u create: %s", what, i,
			     r->msg);
		cr_assert_eq(r->steps_ok, w->cfg.iterations,
			     "%s: rank %u: %s", what, i, r->msg);
		cr_assert_eq(r->errors, 0, "%s: %s", what, r->first_error);
		for (s = 0; s < w->nstages; s++)
			if (r->holds[s])
				cr_assert_eq(r->peak[s], r->bound[s],
					     "%s: rank %u stage %u: peak %u, "
					     "bound %u", what, i, s, r->peak[s],
					     r->bound[s]);
	}
	for (s = 0; s < w->nstages; s++) {
		cr_assert_eq(w->samples_f[s], w->cfg.batch * w->cfg.iterations,
			     "%s: stage %u forwarded %llu samples", what, s,
			     (unsigned long long)w->samples_f[s]);
		cr_assert_eq(w->samples_b[s], w->cfg.batch * w->cfg.iterations,
			     "%s: stage %u", what, s);
		cr_assert_eq(w->samples_p[s], (unsigned long long)w->cfg.batch *
						      w->cfg.iterations *
						      w->cfg.passes,
			     "%s: stage %u forwarded %llu samples in passes",
			     what, s, (unsigned long long)w->samples_p[s]);
	}
	for (i = 0; i < w->world; i++)
		cr_assert_eq(w->res[i].passes_ok,
			     w->cfg.passes * w->cfg.iterations,
			     "%s: rank %u: %u passes: %s", what, i,
			     w->res[i].passes_ok, w->res[i].msg);
}

/* Forward-only passes before each step of the next run_case_ex. */
static uint32_t case_passes;

static void run_case_ex(enum dpl_policy pol, const struct layout *l,
			uint32_t mb, uint64_t batch, const char *options,
			bool overlap, bool comms);

static void run_case(enum dpl_policy pol, const struct layout *l,
		     uint32_t mb, uint64_t batch, const char *options)
{
	run_case_ex(pol, l, mb, batch, options, false, false);
}

/* run_case, with stage callbacks that have an overlap member, and/or the
 * schedule as dpl_schedule_write_csv_comms writes it for PyTorch. */
static void run_case_ex(enum dpl_policy pol, const struct layout *l,
			uint32_t mb, uint64_t batch, const char *options,
			bool overlap, bool comms)
{
	struct toy_world *w = calloc(1, sizeof *w);
	char what[160];
	uint32_t i;
	int rc;

	snprintf(what, sizeof what, "%s on %s, M=%u, B=%llu, %s%s%s",
		 dpl_policy_name(pol), l->name, mb, (unsigned long long)batch,
		 options ? options : "default transport options",
		 overlap ? ", overlap callback" : "",
		 comms ? ", PyTorch comms lists" : "");
	w->cfg.world = what;
	w->cfg.options = options;
	w->cfg.policy = pol;
	w->cfg.stages = l->stages;
	w->cfg.microbatches = mb;
	w->cfg.iterations = 2;
	w->cfg.batch = batch;
	w->cfg.fail_rank = w->cfg.silent_rank = w->cfg.leave_rank = -1;
	if (pol == DPL_POLICY_BOUNDED)
		w->cfg.cap = 2;
	if (dpl_policy_chunks(pol) == 1)
		w->cfg.chunks = 2;
	w->cfg.overlap = overlap;
	w->cfg.pytorch_comms = comms;
	w->cfg.passes = case_passes;
	for (i = 0; i < 4; i++)
		w->cfg.replicas[i] = l->replicas[i];
	rc = toy_run(w);
	cr_assert_eq(rc, 0, "%s: %s", what, dpl_last_error());
	check_world(w, what);
	for (i = 0; i < w->world; i++) {
		struct toy_rank *r = &w->res[i];
		uint64_t pairs = r->st.count[DPL_ACT_OVERLAP_F_B];
		uint32_t held = 0, s;

		for (s = 0; s < w->nstages; s++)
			held += r->holds[s];
		/* Every stage stepped once per iteration, STEP or not. */
		cr_assert_eq(r->steps_called, held * w->cfg.iterations,
			     "%s: rank %u stepped %u times", what, i,
			     r->steps_called);
		/* The callback ran for each pair whose parts both had
		 * samples here, never more; without it, never. */
		if (overlap)
			cr_assert_leq(r->overlaps, pairs, "%s", what);
		else
			cr_assert_eq(r->overlaps, 0, "%s", what);
		if (overlap && pol == DPL_POLICY_DUALPIPEV && batch >= 4 * mb)
			cr_assert_eq(r->overlaps, pairs, "%s: rank %u", what,
				     i);
		if (comms)
			cr_assert_eq(r->st.count[DPL_ACT_WAIT_SEND_F] +
					     r->st.count[DPL_ACT_WAIT_SEND_B],
				     r->st.count[DPL_ACT_SEND_F] +
					     r->st.count[DPL_ACT_SEND_B],
				     "%s: rank %u", what, i);
	}
	toy_free(w);
	free(w);
}

/*
 * M < S: 3 micro-batches on the 4-stage pipeline (1 on the others, whose
 * S <= 2). M not divisible by the replicas: M = 5 with 2 or 3 replicas,
 * batch 7 so that some replica ranges are empty or uneven. Each case
 * twice: with the transport's defaults (these small messages complete
 * when sent) and with eager=0, where every send waits for its receive,
 * so a runner that waited for a send before posting the receive its peer
 * needs would hang here.
 */
static void run_policy(enum dpl_policy pol)
{
	static const char *const options[2] = {NULL, "eager=0"};
	size_t i, k;

	for (k = 0; k < 2; k++)
		for (i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
			const struct layout *l = &layouts[i];
			uint32_t small = l->stages > 1 ? l->stages - 1 : 1;
			const char *o = options[k];

			/* interleaved takes M a multiple of S only
			 * (schedule.h) */
			if (pol != DPL_POLICY_INTERLEAVED ||
			    small % l->stages == 0)
				run_case(pol, l, small, small + 2, o);
			if (pol != DPL_POLICY_INTERLEAVED)
				run_case(pol, l, 5, 7, o);
			else
				run_case(pol, l, 2 * l->stages,
					 2 * l->stages + 3, o);
		}
}

/* A world of every rank healthy: `stages` stages of one replica each
 * (change cfg.replicas after), run for `iters` iterations. */
static struct toy_world *plain_world(const char *name, uint32_t policy,
				     uint32_t stages, uint32_t mb,
				     uint32_t iters, uint64_t batch)
{
	struct toy_world *w = calloc(1, sizeof *w);

	cr_assert_not_null(w);
	w->cfg.world = name;
	w->cfg.policy = policy;
	w->cfg.stages = stages;
	w->cfg.microbatches = mb;
	w->cfg.iterations = iters;
	w->cfg.batch = batch;
	w->cfg.fail_rank = w->cfg.silent_rank = w->cfg.leave_rank = -1;
	return w;
}

Test(runner, gpipe_moves_every_value_right, .timeout = 120)
{
	run_policy(DPL_POLICY_GPIPE);
}

Test(runner, one_f_one_b_moves_every_value_right, .timeout = 120)
{
	run_policy(DPL_POLICY_1F1B);
}

Test(runner, one_f_one_b_comm_moves_every_value_right, .timeout = 120)
{
	run_policy(DPL_POLICY_1F1B_COMM);
}

Test(runner, bounded_moves_every_value_right, .timeout = 120)
{
	run_policy(DPL_POLICY_BOUNDED);
}

Test(runner, interleaved_moves_every_value_right, .timeout = 120)
{
	run_policy(DPL_POLICY_INTERLEAVED);
}

Test(runner, zb_h1_moves_every_value_right, .timeout = 120)
{
	run_policy(DPL_POLICY_ZB_H1);
}

/*
 * DualPipeV's OVERLAP_F_B pairs: through the stage callbacks' overlap
 * member and without it, on the pipeline and pipeline x data-parallel
 * layouts, with M below and above 2S, and the lowered lists as PyTorch's
 * runtime would get them (dpl_schedule_write_csv_comms: WAIT_SEND_*,
 * WAIT_REDUCE_GRAD, no STEP) -- every value still checked.
 */
Test(runner, dualpipev_pairs_move_every_value_right, .timeout = 180)
{
	static const uint32_t ls[] = {0, 2, 3};
	static const char *const options[2] = {NULL, "eager=0"};

	for (size_t k = 0; k < 2; k++)
		for (size_t i = 0; i < 3; i++) {
			const struct layout *l = &layouts[ls[i]];
			uint32_t m = 4 * l->stages;

			run_case_ex(DPL_POLICY_DUALPIPEV, l, m, 4 * m + 3,
				    options[k], true, false);
			run_case_ex(DPL_POLICY_DUALPIPEV, l, m, 4 * m + 3,
				    options[k], false, false);
			run_case_ex(DPL_POLICY_DUALPIPEV, l, 3, 5, options[k],
				    true, true);
			run_case_ex(DPL_POLICY_DUALPIPEV, l, m, 4 * m, options[k],
				    true, true);
		}
}

/* The newer policies through PyTorch's lowered form. */
Test(runner, pytorch_comms_lists_move_every_value_right, .timeout = 180)
{
	static const enum dpl_policy pols[] = {
	    DPL_POLICY_1F1B, DPL_POLICY_INTERLEAVED, DPL_POLICY_LOOPED_BFS,
	    DPL_POLICY_INTERLEAVED_ZB, DPL_POLICY_ZBV, DPL_POLICY_ZB_H1};

	for (size_t p = 0; p < sizeof pols / sizeof pols[0]; p++) {
		run_case_ex(pols[p], &layouts[0], 8, 11, "eager=0", false, true);
		run_case_ex(pols[p], &layouts[2], 5, 9, NULL, false, true);
	}
}

/*
 * Forward-only passes (dpl_runner_forward), two before each step, on
 * every policy and layout: every activation of a pass checked (it
 * carries a mark a step's does not), no backward, weight gradient or
 * step callback in a pass, the steps around the passes unchanged. M = 4S
 * makes the passes reuse each stage's buffer sets several times (1F1B's
 * first stage has S of them); M < S where the policy takes it; eager=0
 * makes every send wait for its receive, so a pass that gave a buffer set
 * back before its send was matched, or waited for a send before posting
 * a receive its peer needs, would fail or hang here.
 */
Test(runner, forward_only_passes_move_every_value_right, .timeout = 240)
{
	static const enum dpl_policy pols[] = {
	    DPL_POLICY_GPIPE,	      DPL_POLICY_1F1B,
	    DPL_POLICY_1F1B_COMM,     DPL_POLICY_BOUNDED,
	    DPL_POLICY_INTERLEAVED,   DPL_POLICY_ZB_H1,
	    DPL_POLICY_LOOPED_BFS,    DPL_POLICY_INTERLEAVED_ZB,
	    DPL_POLICY_ZBV,	      DPL_POLICY_DUALPIPEV};
	static const char *const options[2] = {NULL, "eager=0"};

	case_passes = 2;
	for (size_t p = 0; p < sizeof pols / sizeof pols[0]; p++)
		for (size_t k = 0; k < 2; k++)
			for (size_t i = 0; i < sizeof layouts / sizeof layouts[0];
			     i++) {
				const struct layout *l = &layouts[i];
				enum dpl_policy pol = pols[p];
				bool v = pol == DPL_POLICY_ZBV ||
					 pol == DPL_POLICY_DUALPIPEV;
				uint32_t m = 4 * l->stages;

				if (v && l->stages < 2)
					continue;
				run_case_ex(pol, l, m, m + 3, options[k],
					    pol == DPL_POLICY_DUALPIPEV, false);
				if (pol != DPL_POLICY_INTERLEAVED &&
				    l->stages > 2)
					run_case_ex(pol, l, l->stages - 1,
						    l->stages + 2, options[k],
						    false, false);
			}
	/* PyTorch's lowered form (WAIT_SEND_*, no STEP). */
	run_case_ex(DPL_POLICY_1F1B, &layouts[0], 8, 11, "eager=0", false,
		    true);
	run_case_ex(DPL_POLICY_ZBV, &layouts[2], 5, 9, NULL, false, true);
	case_passes = 0;
}

Test(runner, single_rank_world_runs_without_a_transport)
{
	struct dpl_schedule_params sp = {0};
	struct dpl_runner_params rp = {0};
	dpl_schedule *s = NULL;
	dpl_runner *r = NULL;
	struct toy_world *w = calloc(1, sizeof *w);

	/* A one-rank world through the toy harness: S = 1, R = 1. */
	w->cfg.world = "single";
	w->cfg.policy = DPL_POLICY_1F1B;
	w->cfg.stages = 1;
	w->cfg.microbatches = 3;
	w->cfg.iterations = 3;
	w->cfg.batch = 9;
	w->cfg.fail_rank = w->cfg.silent_rank = w->cfg.leave_rank = -1;
	cr_assert_eq(toy_run(w), 0);
	check_world(w, "single rank");
	toy_free(w);
	free(w);
	/* And without any transport. */
	sp.stages = 1;
	sp.microbatches = 2;
	sp.policy = DPL_POLICY_GPIPE;
	cr_assert_eq(dpl_schedule_build(&sp, &s), 0);
	cr_assert_eq(dpl_schedule_lower(s), 0);
	rp.schedule = s;
	rp.batch = 2;
	rp.stage_ops = NULL;
	cr_assert_eq(dpl_runner_create(&rp, &r), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "stage_ops") != NULL);
	dpl_schedule_destroy(s);
}

/* World: stage 0 = rank 0, stage 1 = ranks 1 and 2, stage 2 = 3; not
 * run yet. */
static struct toy_world *errors_world(const char *name, int fail,
				      int silent, int leave,
				      uint32_t timeout_ms)
{
	struct toy_world *w = calloc(1, sizeof *w);

	w->cfg.world = name;
	w->cfg.policy = DPL_POLICY_1F1B;
	w->cfg.stages = 3;
	w->cfg.microbatches = 4;
	w->cfg.iterations = 3;
	w->cfg.batch = 8;
	w->cfg.replicas[0] = 1;
	w->cfg.replicas[1] = 2;
	w->cfg.replicas[2] = 1;
	w->cfg.fail_rank = fail;
	w->cfg.fail_iter = 1;
	w->cfg.silent_rank = silent;
	w->cfg.leave_rank = leave;
	w->cfg.timeout_ms = timeout_ms;
	return w;
}

static struct toy_world *world_for_errors(const char *name, int fail,
					  int silent, int leave,
					  uint32_t timeout_ms)
{
	struct toy_world *w = errors_world(name, fail, silent, leave,
					   timeout_ms);

	cr_assert_eq(toy_run(w), 0);
	return w;
}

Test(runner, a_failing_callback_stops_every_rank_naming_it, .timeout = 60)
{
	/* World: stage 0 = rank 0, stage 1 = ranks 1 and 2, stage 2 = 3. */
	struct toy_world *w = world_for_errors("fail", 2, -1, -1, 20000);
	uint32_t i;

	for (i = 0; i < w->world; i++) {
		struct toy_rank *r = &w->res[i];

		cr_assert_eq(r->steps_ok, 1, "rank %u: %u steps", i,
			     r->steps_ok);
		cr_assert(strstr(r->msg, "rank 2") != NULL, "rank %u: %s", i,
			  r->msg);
		cr_assert_eq(r->cause, 2, "rank %u: cause %u: %s", i, r->cause,
			     r->msg);
		if (i == 2) {
			cr_assert_eq(r->rc[1], DPL_ECALLBACK, "%d", r->rc[1]);
			cr_assert(strstr(r->msg, "forward callback failed in "
						 "1F") != NULL, "%s", r->msg);
			cr_assert(strstr(r->msg, "injected failure") != NULL,
				  "%s", r->msg);
		} else {
			cr_assert_eq(r->rc[1], DPL_EPEER, "rank %u: %d %s", i,
				     r->rc[1], r->msg);
			cr_assert(strstr(r->msg, "rank 2 failed in 1F") != NULL,
				  "%s", r->msg);
		}
	}
	toy_free(w);
	free(w);
}

/*
 * A callback that fails in a forward-only pass stops every rank, naming
 * the rank, as in a step: in that pass, or in its next call for a rank
 * that had done its part of the pass (stage 0 and the failing rank's
 * other replica need nothing back from it). The runner then stays
 * failed.
 */
Test(runner, a_failing_forward_in_a_pass_stops_every_rank_naming_it,
     .timeout = 60)
{
	struct toy_world *w = errors_world("fail-pass", 2, -1, -1, 20000);
	uint32_t i;

	w->cfg.passes = 1;
	w->cfg.fail_in_pass = true;
	cr_assert_eq(toy_run(w), 0);
	for (i = 0; i < w->world; i++) {
		struct toy_rank *r = &w->res[i];

		/* The first pass and step ran; the second pass failed, or
		 * the step after it on a rank done with it. */
		cr_assert_eq(r->steps_ok, 1, "rank %u: %u steps", i,
			     r->steps_ok);
		if (r->passes_ok == 2 && i != 2 && i != 3)
			cr_assert_eq(r->rc[1], DPL_EPEER, "rank %u: %d %s", i,
				     r->rc[1], r->msg);
		else
			cr_assert(r->passes_ok == 1 &&
					  r->pass_rc == (i == 2 ? DPL_ECALLBACK
								: DPL_EPEER),
				  "rank %u: %u passes, %d %s", i,
				  r->passes_ok, r->pass_rc, r->msg);
		cr_assert(strstr(r->msg, i == 2 ? "forward callback failed in 1F"
						: "rank 2 failed in 1F") != NULL,
			  "rank %u: %s", i, r->msg);
		cr_assert_eq(r->cause, 2, "rank %u: cause %u", i, r->cause);
		cr_assert_eq(r->errors, 0, "rank %u: %s", i, r->first_error);
	}
	toy_free(w);
	free(w);
}

/*
 * Rank 3 never answers. Stage 1's replicas (ranks 1 and 2) wait for it,
 * stage 0 (rank 0) waits for stage 1. A rank that times out tells the
 * others whom it waits for, so every rank names rank 3, not the
 * neighbour it waited for: by its own timeout, or by the notice of one
 * that timed out first (DPL_EPEER then).
 */
Test(runner, a_rank_that_never_answers_times_out_naming_it, .timeout = 60)
{
	struct toy_world *w = world_for_errors("silent", -1, 3, -1, 300);
	uint32_t i, timed_out = 0;

	cr_assert_eq(w->res[3].steps_ok, 0);
	for (i = 0; i < 3; i++) {
		struct toy_rank *r = &w->res[i];

		cr_assert_eq(r->steps_ok, 0, "rank %u", i);
		cr_assert(r->rc[0] == DPL_ETIMEDOUT || r->rc[0] == DPL_EPEER,
			  "rank %u: %d %s", i, r->rc[0], r->msg);
		timed_out += r->rc[0] == DPL_ETIMEDOUT;
		cr_assert_eq(r->cause, 3, "rank %u: cause %u: %s", i,
			     r->cause, r->msg);
		cr_assert(strstr(r->msg, "rank 3 sent no word within 75 ms: "
					 "it is stopped, stuck or cut off") !=
				  NULL,
			  "rank %u: %s\n(rank 1: %s)\n(rank 2: %s)", i, r->msg,
			  w->res[1].msg, w->res[2].msg);
		if (r->rc[0] == DPL_ETIMEDOUT)
			cr_assert(strstr(r->msg, "timed out after 300 ms in ") !=
					  NULL,
				  "rank %u: %s", i, r->msg);
		else
			cr_assert(strstr(r->msg, "timed out in ") != NULL,
				  "rank %u: %s", i, r->msg);
	}
	cr_assert_geq(timed_out, 1);
	for (i = 1; i < 3; i++)
		cr_assert(strstr(w->res[i].msg, "waiting for rank 3") != NULL,
			  "rank %u: %s", i, w->res[i].msg);
	/* Rank 0 waited for a replica of stage 1: the chain goes on. */
	cr_assert(strstr(w->res[0].msg, "waits for rank 3") != NULL ||
			  strstr(w->res[0].msg, "waiting for rank 3") != NULL,
		  "%s", w->res[0].msg);
	toy_free(w);
	free(w);
}

Test(runner, a_peer_that_leaves_is_an_error_naming_it, .timeout = 60)
{
	struct toy_world *w = world_for_errors("leave", -1, -1, 0, 20000);
	uint32_t i;

	for (i = 1; i < w->world; i++) {
		struct toy_rank *r = &w->res[i];

		cr_assert_eq(r->steps_ok, 0);
		cr_assert_neq(r->rc[0], 0);
		cr_assert_eq(r->cause, 0, "rank %u: cause %u: %s", i,
			     r->cause, r->msg);
	}
	/* Stage 1 (ranks 1, 2) receives from rank 0: it sees the peer
	 * failure itself; stage 2 (rank 3) hears of it. */
	for (i = 1; i < 3; i++) {
		cr_assert_eq(w->res[i].rc[0], DPL_EPEER, "%s", w->res[i].msg);
		/* Which of its posted receives or waits sees it first
		 * (1RECV_F0, 1RECV_F1, 1F0, ...) is a matter of timing. */
		cr_assert(strstr(w->res[i].msg, " with rank 0: peer failed") !=
				  NULL, "%s", w->res[i].msg);
		cr_assert(strstr(w->res[i].msg, "1RECV_F") != NULL ||
				  strstr(w->res[i].msg, "1F") != NULL,
			  "%s", w->res[i].msg);
	}
	cr_assert_eq(w->res[3].rc[0], DPL_EPEER, "%s", w->res[3].msg);
	cr_assert(strstr(w->res[3].msg, "lost rank 0") != NULL, "%s",
		  w->res[3].msg);
	toy_free(w);
	free(w);
}

Test(runner, statistics_add_up)
{
	struct toy_world *w;
	uint64_t sent = 0, recvd = 0, f = 0;
	uint32_t i;

	w = plain_world("stats", DPL_POLICY_1F1B, 2, 4, 2, 8);
	w->cfg.replicas[0] = 2;
	w->cfg.replicas[1] = 1;
	cr_assert_eq(toy_run(w), 0);
	check_world(w, "stats");
	for (i = 0; i < w->world; i++) {
		sent += w->res[i].st.bytes_sent;
		recvd += w->res[i].st.bytes_received;
		f += w->res[i].st.count[DPL_ACT_F];
		cr_assert_eq(w->res[i].st.iterations, 2);
		cr_assert_gt(w->res[i].st.buffer_bytes, 0);
	}
	cr_assert_eq(sent, recvd);
	/* Per iteration: 8 samples x 24 bytes forward and back (384), and
	 * stage 0's ring over 2 replicas: 5 doubles in chunks of 3 and 2,
	 * each rank sending one chunk in each of 2 steps (2 x 40 = 80). */
	cr_assert_eq(sent, 2 * (384 + 80), "sent %llu",
		     (unsigned long long)sent);
	cr_assert_eq(f, 2 * (4 + 4 + 4));
	toy_free(w);
	free(w);
}

Test(runner, traces_hold_every_action_of_every_rank)
{
	struct toy_world *w;
	const dpl_runner *rs[TOY_MAX_RANKS];
	size_t len = 0, n = 0, actions = 0;
	char *buf = NULL, *p;
	FILE *f;
	uint32_t i;

	w = plain_world("trace", DPL_POLICY_GPIPE, 3, 2, 1, 4);
	w->cfg.trace_capacity = 256;
	cr_assert_eq(toy_run(w), 0);
	for (i = 0; i < w->world; i++) {
		rs[i] = w->res[i].runner;
		actions += w->res[i].st.actions;
	}
	f = open_memstream(&buf, &len);
	cr_assert_eq(dpl_runner_write_traces(rs, w->world, f), 0);
	fclose(f);
	for (p = buf; (p = strstr(p, "\"ph\":\"X\"")) != NULL; p++)
		n++;
	cr_assert_eq(n, actions, "%zu events, %zu actions", n, actions);
	cr_assert(strstr(buf, "\"name\":\"1SEND_F0\"") != NULL);
	cr_assert(strstr(buf, "\"traceEvents\":[") != NULL);
	cr_assert_eq(buf[len - 2], '}');
	free(buf);
	cr_assert_eq(dpl_runner_write_traces(rs, 0, stdout), DPL_EINVAL);
	toy_free(w);
	free(w);
}

Test(runner, events_follow_each_ranks_action_list)
{
	struct toy_world *w;
	uint32_t i;

	w = plain_world("events", DPL_POLICY_1F1B, 3, 4, 2, 8);
	w->cfg.trace_capacity = 1024;
	cr_assert_eq(toy_run(w), 0);
	for (i = 0; i < w->world; i++) {
		const struct dpl_runner_event *ev;
		const struct dpl_action *list;
		size_t n, nlist, k;

		ev = dpl_runner_events(w->res[i].runner, &n);
		list = dpl_schedule_actions(w->sched, i, &nlist);
		cr_assert_not_null(list);
		/* The last step only, every action once, in list order. */
		cr_assert_eq(n, nlist, "rank %u: %zu events, %zu actions", i,
			     n, nlist);
		for (k = 0; k < n; k++) {
			cr_assert(ev[k].action.kind == list[k].kind &&
				  ev[k].action.stage == list[k].stage &&
				  ev[k].action.microbatch ==
					  list[k].microbatch,
				  "rank %u event %zu", i, k);
			cr_assert_leq(ev[k].start_ns, ev[k].end_ns);
			if (k > 0)
				cr_assert_geq(ev[k].start_ns,
					      ev[k - 1].end_ns);
		}
		cr_assert_eq(w->res[i].st.trace_dropped, 0);
	}
	toy_free(w);
	free(w);
}

Test(runner, events_stop_at_the_trace_capacity)
{
	struct toy_world *w;
	size_t n, nlist;
	uint32_t i;

	w = plain_world("events-cap", DPL_POLICY_GPIPE, 2, 4, 1, 4);
	w->cfg.trace_capacity = 3;
	cr_assert_eq(toy_run(w), 0);
	for (i = 0; i < w->world; i++) {
		cr_assert_not_null(dpl_runner_events(w->res[i].runner, &n));
		dpl_schedule_actions(w->sched, i, &nlist);
		cr_assert_eq(n, 3);
		cr_assert_eq(w->res[i].st.trace_dropped, nlist - 3);
	}
	cr_assert_null(dpl_runner_events(NULL, &n));
	cr_assert_eq(n, 0);
	toy_free(w);
	free(w);
}

Test(runner, a_native_allreduce_replaces_the_ring, .timeout = 60)
{
	struct toy_world *w;
	uint32_t i;

	w = plain_world("native-ar", DPL_POLICY_1F1B, 2, 5, 2, 7);
	w->cfg.ops = dpl_test_ar_shim();
	w->cfg.replicas[0] = 3;
	w->cfg.replicas[1] = 2;
	cr_assert_eq(toy_run(w), 0);
	/* The toy's step checks the reduced gradient on every replica. */
	check_world(w, "native allreduce");
	/* 5 ranks in replicated stages, 2 iterations. */
	cr_assert_eq(atomic_load(&dpl_test_ar_calls), 10);
	for (i = 0; i < w->world; i++)
		cr_assert_eq(w->res[i].st.bytes_reduced,
			     2 * 5 * sizeof(double));
	toy_free(w);
	free(w);
}

/*
 * The runner's error paths through the hook shim (dpl/transport_hook.h)
 * over inproc: stage 0 = rank 0, stage 1 = ranks 1 and 2, stage 2 =
 * rank 3, 1f1b, M = 4, three iterations; `faults` are the shim's options.
 */
static char hook_opts[256];

static struct toy_world *hook_world(const char *name, const char *faults)
{
	struct toy_world *w = plain_world(name, DPL_POLICY_1F1B, 3, 4, 3, 8);

	w->cfg.replicas[0] = 1;
	w->cfg.replicas[1] = 2;
	w->cfg.replicas[2] = 1;
	w->cfg.timeout_ms = 2000;
	snprintf(hook_opts, sizeof hook_opts, "hook.inner=inproc,%s", faults);
	w->cfg.ops = &dpl_transport_hook_threads;
	w->cfg.options = hook_opts;
	cr_assert_eq(dpl_transport_hook_register(&dpl_transport_inproc), 0);
	cr_assert_eq(toy_run(w), 0, "%s", dpl_last_error());
	return w;
}

/* The first failed step of a rank, and its code. */
static int first_failure(const struct toy_rank *r)
{
	return r->steps_ok < TOY_ITERS_MAX ? r->rc[r->steps_ok] : 0;
}

/* Without faults the shim changes nothing. */
Test(runner, the_hook_shim_without_faults_moves_every_value_right,
     .timeout = 60)
{
	struct toy_world *w = hook_world("hook-clean", "hook.trace=0");

	check_world(w, "hook over inproc");
	toy_free(w);
	free(w);
}

Test(runner, a_failing_post_stops_every_rank_naming_it, .timeout = 60)
{
	struct toy_world *w = hook_world("hook-fail", "hook.rank=2,"
					 "hook.fail_after=7,"
					 "hook.fail_code=eio");

	for (uint32_t i = 0; i < w->world; i++) {
		struct toy_rank *r = &w->res[i];

		cr_assert_lt(r->steps_ok, 3, "rank %u ran every step", i);
		cr_assert(strstr(r->msg, "rank 2") != NULL, "rank %u: %s", i,
			  r->msg);
		cr_assert_eq(r->cause, 2, "rank %u: cause %u: %s", i,
			     r->cause, r->msg);
	}
	cr_assert_eq(first_failure(&w->res[2]), DPL_EIO, "%d: %s",
		     first_failure(&w->res[2]), w->res[2].msg);
	cr_assert(strstr(w->res[2].msg, "failed as asked") != NULL, "%s",
		  w->res[2].msg);
	toy_free(w);
	free(w);
}

Test(runner, a_dropped_peer_is_named_by_the_rank_that_lost_it,
     .timeout = 60)
{
	struct toy_world *w = hook_world("hook-drop", "hook.rank=0,"
					 "hook.drop_peer=1,"
					 "hook.drop_after=6");

	cr_assert_eq(first_failure(&w->res[0]), DPL_EPEER, "%d: %s",
		     first_failure(&w->res[0]), w->res[0].msg);
	cr_assert(strstr(w->res[0].msg, "rank 1") != NULL, "%s",
		  w->res[0].msg);
	/* Ranks 2 and 3 learn the cause from rank 0's notice. Rank 1, which
	 * only rank 0 takes for dead (the drop is one-sided, like a
	 * partition), never gets rank 0's notice, but ranks 2 and 3 pass it
	 * on: it too stops with the cause, before its own bound. */
	for (uint32_t i = 1; i < w->world; i++)
		cr_assert(strstr(w->res[i].msg, "rank 0 lost rank 1") != NULL,
			  "rank %u: %s", i, w->res[i].msg);
	for (uint32_t i = 0; i < w->world; i++)
		cr_assert_eq(w->res[i].cause, 1, "rank %u: cause %u: %s", i,
			     w->res[i].cause, w->res[i].msg);
	cr_assert_lt(w->res[1].steps_ok, 3);
	cr_assert_eq(first_failure(&w->res[1]), DPL_EPEER, "%s",
		     w->res[1].msg);
	toy_free(w);
	free(w);
}
