/* test_validate.c - each validator rule, broken on purpose. */
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>

/* Build a custom schedule from one text line per rank. */
static dpl_schedule *from_text(uint32_t stages, uint32_t M,
			       const char *const *ranks, uint32_t nranks)
{
	dpl_schedule *s;

	cr_assert_eq(dpl_schedule_create(nranks, stages, M, &s), 0);
	for (uint32_t r = 0; r < nranks; r++) {
		const char *p = ranks[r];

		while (*p) {
			const char *e = strchr(p, ' ');
			size_t len = e ? (size_t)(e - p) : strlen(p);
			struct dpl_action a;

			cr_assert_eq(dpl_action_parse(p, len, &a), 0, "%.*s",
				     (int)len, p);
			cr_assert_eq(dpl_schedule_append(s, r, a), 0, "%s",
				     dpl_last_error());
			p += len;
			while (*p == ' ')
				p++;
		}
	}
	return s;
}

static void expect(dpl_schedule *s, int code, uint32_t rank, size_t pos,
		   const char *text)
{
	struct dpl_schedule_issue is;
	char a[DPL_ACTION_TEXT_MAX];

	cr_assert_eq(dpl_schedule_validate(s, &is), code, "got %d: %s",
		     dpl_schedule_validate(s, &is), is.message);
	cr_assert_eq(is.rank, rank, "%s", is.message);
	cr_assert_eq(is.position, pos, "%s", is.message);
	cr_assert(strstr(is.message, text), "'%s' lacks '%s'", is.message,
		  text);
	cr_assert_str_eq(dpl_last_error(), is.message);
	dpl_action_format(is.action, a, sizeof a);
	cr_assert(strstr(is.message, a), "%s does not name %s", is.message, a);
	dpl_schedule_destroy(s);
}

Test(validate, a_valid_custom_schedule_passes)
{
	const char *r[] = {"0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"};
	dpl_schedule *s = from_text(2, 2, r, 2);

	cr_assert_eq(dpl_schedule_validate(s, NULL), 0, "%s", dpl_last_error());
	dpl_schedule_destroy(s);
}

Test(validate, append_refuses_a_stage_on_the_wrong_rank)
{
	dpl_schedule *s;

	cr_assert_eq(dpl_schedule_create(2, 2, 1, &s), 0);
	cr_assert_eq(dpl_schedule_append(s, 0, (struct dpl_action){DPL_ACT_F, 1, 0}),
		     DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "stage 1 lives on rank 1, not rank 0"));
	cr_assert_eq(dpl_schedule_append(s, 0, (struct dpl_action){DPL_ACT_F, 0, 5}),
		     DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "micro-batch 5 out of range"));
	dpl_schedule_destroy(s);
}

Test(validate, missing_backward)
{
	const char *r[] = {"0F0 0F1 0B0", "1F0 1B0 1F1 1B1"};

	expect(from_text(2, 2, r, 2), DPL_ESCHED, 0, 3, "never runs");
}

Test(validate, duplicate_forward)
{
	const char *r[] = {"0F0 0F0 0B0", "1F0 1B0"};

	expect(from_text(2, 1, r, 2), DPL_ESCHED, 0, 1, "runs twice");
}

Test(validate, backward_before_forward)
{
	const char *r[] = {"0B0 0F0", "1F0 1B0"};

	expect(from_text(2, 1, r, 2), DPL_ESCHED, 0, 0, "before its forward");
}

Test(validate, w_before_i_and_mixing_b_with_i)
{
	const char *r1[] = {"0F0 0W0 0I0"};
	const char *r2[] = {"0F0 0I0 0B0 0W0"};

	expect(from_text(1, 1, r1, 1), DPL_ESCHED, 0, 1, "before its I");
	expect(from_text(1, 1, r2, 1), DPL_ESCHED, 0, 2, "mixes B with I/W");
}

Test(validate, same_rank_order_between_stages)
{
	/* Two stages on one rank (ranks = 1): F of stage 1 before stage 0. */
	const char *r[] = {"1F0 0F0 1B0 0B0"};

	expect(from_text(2, 1, r, 1), DPL_ESCHED, 0, 0,
	       "before F of stage 0 on the same rank");
}

Test(validate, cap_exceeded)
{
	const char *r[] = {"0F0 0F1 0F2 0B0 0B1 0B2"};
	dpl_schedule *s = from_text(1, 3, r, 1);

	cr_assert_eq(dpl_schedule_set_cap(s, 0, 2), 0);
	expect(s, DPL_ESCHED, 0, 2, "keeps 3 micro-batches alive, over its cap 2");
}

Test(validate, compute_deadlock_names_the_blocked_action)
{
	/* Rank 0 wants stage 1's B0 before sending F1; rank 1 runs F1 first. */
	const char *r[] = {"0F0 0B0 0F1 0B1", "1F1 1B1 1F0 1B0"};

	expect(from_text(2, 2, r, 2), DPL_EDEADLOCK, 0, 1,
	       "blocked: its input never arrives");
}

Test(validate, rendezvous_deadlock_in_lowered_lists)
{
	/* Without rendezvous these run; with it, rank 0's SEND_F1 waits for
	 * RECV_F1, which rank 1 posts only after its SEND_B0, which waits
	 * for rank 0's RECV_B0, posted after SEND_F1. */
	const char *r[] = {
	    "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0RECV_B1 0B0 0B1",
	    "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1"};

	expect(from_text(2, 2, r, 2), DPL_EDEADLOCK, 0, 3,
	       "receive is never posted first (rendezvous)");
}

Test(validate, lowered_needs_its_receive)
{
	const char *r[] = {"0F0 0SEND_F0 0RECV_B0 0B0",
			   "1F0 1B0 1SEND_B0"};

	expect(from_text(2, 1, r, 2), DPL_ESCHED, 1, 0,
	       "needs its RECV_F before it");
}

Test(validate, send_without_receiver)
{
	const char *r[] = {"0F0 0SEND_B0 0B0"};

	expect(from_text(1, 1, r, 1), DPL_ESCHED, 0, 1,
	       "no stage on another rank receives it");
}

Test(validate, reduce_grad_rules)
{
	const char *r1[] = {"0F0 0SEND_F0 0REDUCE_GRAD 0RECV_B0 0B0",
			    "1RECV_F0 1F0 1B0 1SEND_B0"};
	const char *r2[] = {"0F0 0B0 0REDUCE_GRAD 0REDUCE_GRAD"};

	expect(from_text(2, 1, r1, 2), DPL_ESCHED, 0, 4, "after stage 0's REDUCE_GRAD");
	expect(from_text(1, 1, r2, 1), DPL_ESCHED, 0, 3, "second REDUCE_GRAD");
}

Test(validate, lowering_refuses_invalid_lists_and_double_lowering)
{
	const char *bad[] = {"0F0 0B0", "1F0"};
	dpl_schedule *s = from_text(2, 1, bad, 2);
	struct dpl_schedule_params p = {.stages = 3, .microbatches = 4,
					.policy = DPL_POLICY_1F1B};
	dpl_schedule *ok;

	cr_assert_eq(dpl_schedule_lower(s), DPL_ESCHED);
	cr_assert_eq(dpl_schedule_is_lowered(s), 0, "changed on failure");
	dpl_schedule_destroy(s);
	cr_assert_eq(dpl_schedule_build(&p, &ok), 0);
	cr_assert_eq(dpl_schedule_lower(ok), 0);
	cr_assert_eq(dpl_schedule_lower(ok), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "already lowered"));
	dpl_schedule_destroy(ok);
}

Test(validate, lowering_adds_every_piece_once)
{
	struct dpl_schedule_params p = {.stages = 4, .microbatches = 6,
					.policy = DPL_POLICY_1F1B};
	dpl_schedule *s;
	size_t counts[DPL_ACT__COUNT] = {0};

	cr_assert_eq(dpl_schedule_build(&p, &s), 0);
	cr_assert_eq(dpl_schedule_lower(s), 0);
	for (uint32_t r = 0; r < 4; r++) {
		size_t n;
		const struct dpl_action *a = dpl_schedule_actions(s, r, &n);

		cr_assert_eq(a[n - 1].kind, DPL_ACT_STEP, "rank %u ends in STEP", r);
		cr_assert_eq(a[n - 2].kind, DPL_ACT_REDUCE_GRAD);
		for (size_t i = 0; i < n; i++)
			counts[a[i].kind]++;
	}
	cr_assert_eq(counts[DPL_ACT_F], 24);
	cr_assert_eq(counts[DPL_ACT_B], 24);
	cr_assert_eq(counts[DPL_ACT_SEND_F], 18); /* 3 links x 6 */
	cr_assert_eq(counts[DPL_ACT_RECV_F], 18);
	cr_assert_eq(counts[DPL_ACT_SEND_B], 18);
	cr_assert_eq(counts[DPL_ACT_RECV_B], 18);
	cr_assert_eq(counts[DPL_ACT_REDUCE_GRAD], 4);
	cr_assert_eq(counts[DPL_ACT_STEP], 4);
	dpl_schedule_destroy(s);
}

/* Rule 7: the kinds PyTorch's lowered lists add, and OVERLAP_F_B. */
Test(validate, pytorch_comms_kinds_pass_in_order)
{
	const char *r[] = {"0UNSHARD 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 "
			   "0WAIT_SEND_F0 0RECV_B1 0B1 0REDUCE_GRAD "
			   "0WAIT_REDUCE_GRAD 0RESHARD 0WAIT_SEND_F1",
			   "1RECV_F0 1RECV_F1 1F0 1B0 1SEND_B0 1F1 1B1 "
			   "1SEND_B1 1REDUCE_GRAD 1WAIT_SEND_B0 1WAIT_SEND_B1"};
	dpl_schedule *s = from_text(2, 2, r, 2);

	cr_assert_eq(dpl_schedule_validate(s, NULL), 0, "%s", dpl_last_error());
	dpl_schedule_destroy(s);
}

Test(validate, wait_send_rules)
{
	const char *before[] = {"0F0 0WAIT_SEND_F0 0SEND_F0 0RECV_B0 0B0",
				"1RECV_F0 1F0 1B0 1SEND_B0"};
	const char *twice[] = {"0F0 0SEND_F0 0WAIT_SEND_F0 0WAIT_SEND_F0 "
			       "0RECV_B0 0B0",
			       "1RECV_F0 1F0 1B0 1SEND_B0"};
	const char *wrong[] = {"0F0 0SEND_F0 0RECV_B0 0B0 0WAIT_SEND_B0",
			       "1RECV_F0 1F0 1B0 1SEND_B0"};

	expect(from_text(2, 1, before, 2), DPL_ESCHED, 0, 1, "before its SEND_F");
	expect(from_text(2, 1, twice, 2), DPL_ESCHED, 0, 3,
	       "second wait for one send");
	expect(from_text(2, 1, wrong, 2), DPL_ESCHED, 0, 4, "before its SEND_B");
}

Test(validate, wait_reduce_grad_rules)
{
	const char *before[] = {"0F0 0B0 0WAIT_REDUCE_GRAD 0REDUCE_GRAD"};
	const char *twice[] = {"0F0 0B0 0REDUCE_GRAD 0WAIT_REDUCE_GRAD "
			       "0WAIT_REDUCE_GRAD"};
	const char *late[] = {"0F0 0B0 0REDUCE_GRAD 0STEP 0WAIT_REDUCE_GRAD"};
	dpl_schedule *s;
	struct dpl_action a = {DPL_ACT_WAIT_REDUCE_GRAD, 0, 0};

	expect(from_text(1, 1, before, 1), DPL_ESCHED, 0, 2,
	       "before its REDUCE_GRAD");
	expect(from_text(1, 1, twice, 1), DPL_ESCHED, 0, 4,
	       "second WAIT_REDUCE_GRAD");
	expect(from_text(1, 1, late, 1), DPL_ESCHED, 0, 4,
	       "after the stage's STEP");
	/* A micro-batch on a kind that carries none is refused on append. */
	cr_assert_eq(dpl_schedule_create(1, 1, 1, &s), 0);
	cr_assert_eq(dpl_schedule_append(s, 0, a), DPL_EINVAL);
	dpl_schedule_destroy(s);
}

Test(validate, unshard_reshard_rules)
{
	const char *twice[] = {"0UNSHARD 0UNSHARD 0F0 0B0 0REDUCE_GRAD"};
	const char *lone[] = {"0UNSHARD 0F0 0B0 0RESHARD 0RESHARD "
			      "0REDUCE_GRAD"};
	const char *sharded[] = {"0UNSHARD 0F0 0RESHARD 0B0 0REDUCE_GRAD"};
	const char *compute_only[] = {"0UNSHARD 0F0 0B0"};
	dpl_schedule *s;

	expect(from_text(1, 1, twice, 1), DPL_ESCHED, 0, 1,
	       "stage 0 is unsharded already");
	expect(from_text(1, 1, lone, 1), DPL_ESCHED, 0, 4,
	       "without an UNSHARD of stage 0");
	expect(from_text(1, 1, sharded, 1), DPL_ESCHED, 0, 3,
	       "stage 0 is sharded here");
	/* UNSHARD makes the list lowered on append, so a compute-only list
	 * never holds one; the lowered list then lacks nothing here. */
	s = from_text(1, 1, compute_only, 1);
	cr_assert_neq(dpl_schedule_is_lowered(s), 0);
	dpl_schedule_destroy(s);
}

Test(validate, overlap_needs_its_parts)
{
	const char *ok[] = {"0F0 1F0 0OVERLAP_F_B 0F1 1B0 0B0 1F1 1B1 0B1"};
	const char *short_[] = {"0F0 1F0 1B0 0B0 0F1 1F1 1B1 0B1 0OVERLAP_F_B"};
	const char *not_f[] = {"0F0 1F0 0OVERLAP_F_B 1B0 0F1 0B0 1F1 1B1 0B1"};
	const char *not_b[] = {"0F0 1F0 0OVERLAP_F_B 0F1 1F1 1B0 0B0 1B1 0B1"};
	const char *stage[] = {"0F0 1F0 1OVERLAP_F_B 0F1 1B0 0B0 1F1 1B1 0B1"};
	dpl_schedule *s = from_text(2, 2, ok, 1);

	cr_assert_eq(dpl_schedule_is_lowered(s), 0);
	cr_assert_eq(dpl_schedule_validate(s, NULL), 0, "%s", dpl_last_error());
	/* Lowering keeps a pair together and the lowered list validates. */
	cr_assert_eq(dpl_schedule_lower(s), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_schedule_validate(s, NULL), 0, "%s", dpl_last_error());
	dpl_schedule_destroy(s);
	expect(from_text(2, 2, short_, 1), DPL_ESCHED, 0, 8,
	       "needs its two parts");
	expect(from_text(2, 2, not_f, 1), DPL_ESCHED, 0, 3,
	       "the first part of OVERLAP_F_B must be an F of stage 0");
	expect(from_text(2, 2, not_b, 1), DPL_ESCHED, 0, 4,
	       "the second part of OVERLAP_F_B must be a B or an I");
	expect(from_text(2, 2, stage, 1), DPL_ESCHED, 0, 3,
	       "must be an F of stage 1");
}

/* Lowering a pair whose parts talk to other ranks: the receives of both
 * go before the marker and the sends after the second part. */
Test(validate, lowering_keeps_a_pair_together)
{
	const char *r[] = {"0F0 0F1 0B0 0B1",
			   "1F0 1OVERLAP_F_B 1F1 1B0 1B1"};
	dpl_schedule *s = from_text(2, 2, r, 2);
	const struct dpl_action *a;
	size_t len, m = SIZE_MAX;

	cr_assert_eq(dpl_schedule_validate(s, NULL), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_schedule_lower(s), 0, "%s", dpl_last_error());
	a = dpl_schedule_actions(s, 1, &len);
	for (size_t i = 0; i < len; i++)
		if (a[i].kind == DPL_ACT_OVERLAP_F_B)
			m = i;
	cr_assert_lt(m + 3, len);
	cr_assert_eq(a[m + 1].kind, DPL_ACT_F);
	cr_assert_eq(a[m + 1].microbatch, 1);
	cr_assert_eq(a[m + 2].kind, DPL_ACT_B);
	cr_assert_eq(a[m + 2].microbatch, 0);
	cr_assert_eq(a[m + 3].kind, DPL_ACT_SEND_B);
	cr_assert_eq(a[m + 3].microbatch, 0);
	for (size_t i = m + 1; i < len; i++)
		cr_assert_neq(a[i].kind, DPL_ACT_RECV_F,
			      "RECV_F after the marker");
	cr_assert_eq(dpl_schedule_validate(s, NULL), 0, "%s", dpl_last_error());
	dpl_schedule_destroy(s);
}

/* One huge micro-batch index makes M huge: refused by counting, before
 * any state for S x M (here 2^32 entries) is allocated. */
Test(validate, a_huge_microbatch_index_is_refused_by_count)
{
	const char *r[] = {"0F0 0B0 0F2147483647", "1F0 1B0"};
	dpl_schedule *s = from_text(2, 2147483648u, r, 2);

	expect(s, DPL_ESCHED, 0, 2,
	       "2 stages and 2147483648 micro-batches need at least "
	       "8589934592 compute actions");
}
