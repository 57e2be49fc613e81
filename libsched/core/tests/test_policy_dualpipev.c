/*
 * test_policy_dualpipev.c - properties of dualpipev over every S <= 16,
 * M <= 64: the V placement, valid as built and lowered (deadlock-free
 * under rendezvous sends), every forward once and every backward once as
 * B or as I then W, the memory bound min(2M, 2S+1) per rank (reached once
 * M >= 2S), the hand-derived list at S=2, M=4 (PyTorch's
 * ScheduleDualPipeV order with its OVERLAP_F_B pairs as forward then
 * backward; bindings/python/tests/test_zb_vs_torch.py compares with the
 * installed PyTorch), and the fixed chunk count.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>

#include "sched_util.h"

static dpl_schedule *build(uint32_t S, uint32_t M, enum dpl_policy p)
{
	struct dpl_schedule_params prm = {.stages = S, .microbatches = M,
					  .policy = p};
	dpl_schedule *s = NULL;

	cr_assert_eq(dpl_schedule_build(&prm, &s), 0, "S=%u M=%u: %s", S, M,
		     dpl_last_error());
	return s;
}

static uint32_t min_u(uint32_t a, uint32_t b) { return a < b ? a : b; }

Test(policy_dualpipev, every_s_and_m_valid_once_and_bounded, .timeout = 240)
{
	unsigned char *seen = malloc(32 * 64 * 4);

	cr_assert_not_null(seen);
	for (uint32_t S = 1; S <= 16; S++)
		for (uint32_t M = 1; M <= 64; M++) {
			dpl_schedule *s = build(S, M, DPL_POLICY_DUALPIPEV);
			struct dpl_schedule_issue is;
			uint32_t n = 2 * S;

			cr_assert_eq(dpl_schedule_stages(s), n);
			cr_assert_eq(dpl_schedule_ranks(s), S);
			for (uint32_t st = 0; st < n; st++)
				cr_assert_eq(dpl_schedule_stage_rank(s, st),
					     st < S ? st : n - 1 - st);
			memset(seen, 0, 32 * 64 * 4);
			for (uint32_t r = 0; r < S; r++) {
				size_t len;
				const struct dpl_action *a =
				    dpl_schedule_actions(s, r, &len);

				for (size_t i = 0; i < len; i++) {
					size_t k;

					/* A pair: an F of the marker's stage,
					 * then a B of the other chunk. */
					if (a[i].kind == DPL_ACT_OVERLAP_F_B) {
						cr_assert_lt(i + 2, len);
						cr_assert_eq(a[i + 1].kind,
							     DPL_ACT_F);
						cr_assert_eq(a[i + 1].stage,
							     a[i].stage);
						cr_assert_eq(a[i + 2].kind,
							     DPL_ACT_B);
						cr_assert_neq(a[i + 2].stage,
							      a[i].stage);
						continue;
					}
					k = ((size_t)a[i].stage * 64 +
						    a[i].microbatch) *
						       4 +
						   (a[i].kind == DPL_ACT_F ? 0
						    : a[i].kind == DPL_ACT_W
							? 2
							: 1);

					cr_assert(a[i].kind == DPL_ACT_F ||
						  a[i].kind == DPL_ACT_B ||
						  a[i].kind == DPL_ACT_I ||
						  a[i].kind == DPL_ACT_W);
					cr_assert_eq(
					    dpl_schedule_stage_rank(s,
								    a[i].stage),
					    r);
					cr_assert_eq(seen[k], 0,
						     "S=%u M=%u: %u%c%u twice",
						     S, M, a[i].stage,
						     "FBIW"[a[i].kind],
						     a[i].microbatch);
					seen[k] = (unsigned char)(a[i].kind + 1);
				}
				cr_assert_leq(sched_rank_peak(s, r),
					      min_u(2 * M, 2 * S + 1),
					      "S=%u M=%u rank %u", S, M, r);
				if (M >= 2 * S)
					cr_assert_eq(sched_rank_peak(s, r),
						     2 * S + 1);
			}
			for (uint32_t st = 0; st < n; st++)
				for (uint32_t j = 0; j < M; j++) {
					unsigned char *e =
					    &seen[((size_t)st * 64 + j) * 4];

					cr_assert_eq(e[0], DPL_ACT_F + 1,
						     "S=%u M=%u: no %uF%u", S,
						     M, st, j);
					/* B, or I and its W */
					cr_assert(e[1] == DPL_ACT_B + 1
						      ? e[2] == 0
						      : e[1] == DPL_ACT_I + 1 &&
							    e[2] ==
								DPL_ACT_W + 1,
						  "S=%u M=%u: %u/%u backward "
						  "%d %d",
						  S, M, st, j, e[1], e[2]);
				}
			cr_assert_eq(dpl_schedule_validate(s, &is), 0,
				     "S=%u M=%u: %s", S, M, is.message);
			cr_assert_eq(dpl_schedule_lower(s), 0, "%s",
				     dpl_last_error());
			cr_assert_eq(dpl_schedule_validate(s, &is), 0,
				     "lowered S=%u M=%u: %s", S, M,
				     is.message);
			dpl_schedule_destroy(s);
		}
	free(seen);
}

Test(policy_dualpipev, the_list_at_2_by_4)
{
	/* Derived by hand from ScheduleDualPipeV's eight steps (rank 0:
	 * stages 0 and 3; rank 1: stages 1 and 2); PyTorch pairs steps 4
	 * and 5 as OVERLAP_F_B, except the last rank's first F0 B1. */
	static const char *want[2] = {
	    "0F0 0F1 0F2 3F0 3I0 3W0 3F1 0OVERLAP_F_B 0F3 3B1 3OVERLAP_F_B "
	    "3F2 0B0 3B2 3OVERLAP_F_B 3F3 0B1 3B3 0I2 0W2 0I3 0W3",
	    "1F0 2F0 1F1 2F1 1F2 2B0 2OVERLAP_F_B 2F2 1B0 1OVERLAP_F_B 1F3 "
	    "2B1 2OVERLAP_F_B 2F3 1B1 2B2 1B2 2I3 1I3 2W3 1W3"};
	dpl_schedule *s = build(2, 4, DPL_POLICY_DUALPIPEV);

	for (uint32_t r = 0; r < 2; r++) {
		char got[512] = "", t[DPL_ACTION_TEXT_MAX];
		size_t len;
		const struct dpl_action *a = dpl_schedule_actions(s, r, &len);

		for (size_t i = 0; i < len; i++) {
			cr_assert_geq(dpl_action_format(a[i], t, sizeof t), 0);
			if (i)
				strcat(got, " ");
			strcat(got, t);
		}
		cr_assert_str_eq(got, want[r], "rank %u", r);
	}
	dpl_schedule_destroy(s);
}

Test(policy_dualpipev, chunks_are_always_two)
{
	struct dpl_schedule_params p = {.stages = 4, .microbatches = 8,
					.policy = DPL_POLICY_DUALPIPEV,
					.chunks = 3};
	dpl_schedule *s = NULL;

	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "dualpipev: chunks is always 2 "
					   "(got 3)"),
		  "%s", dpl_last_error());
	cr_assert_null(s);
	p.chunks = 2;
	cr_assert_eq(dpl_schedule_build(&p, &s), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_schedule_policy(s), DPL_POLICY_DUALPIPEV);
	dpl_schedule_destroy(s);
	cr_assert_eq(dpl_policy_chunks(DPL_POLICY_DUALPIPEV), 2);
	cr_assert_str_eq(dpl_policy_name(DPL_POLICY_DUALPIPEV), "dualpipev");
}
