/* test_action.c - the error table and the action text form. */
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>

Test(errors, codes_are_negative_errno_where_one_fits)
{
	cr_assert_eq(DPL_EINVAL, -EINVAL);
	cr_assert_eq(DPL_ENOMEM, -ENOMEM);
	cr_assert_eq(DPL_ETIMEDOUT, -ETIMEDOUT);
	cr_assert(DPL_ESCHED < 0 && DPL_EDEADLOCK < 0 && DPL_EPEER < 0);
}

Test(errors, names_and_messages)
{
	cr_assert_str_eq(dpl_err_name(DPL_EINVAL), "DPL_EINVAL");
	cr_assert_str_eq(dpl_err_name(DPL_EDEADLOCK), "DPL_EDEADLOCK");
	cr_assert_str_eq(dpl_err_name(12345), "DPL_EUNKNOWN");
	cr_assert_str_eq(dpl_strerror(DPL_ESCHED), "invalid schedule");
	cr_assert_str_eq(dpl_strerror(DPL_OK), "success");
	cr_assert_str_eq(dpl_strerror(-99999), "unknown error");
}

Test(errors, bad_argument_names_itself)
{
	struct dpl_schedule_params p = {.stages = 0, .microbatches = 4,
					.policy = DPL_POLICY_1F1B};
	dpl_schedule *s = (dpl_schedule *)0x1;

	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert_str_eq(dpl_last_error(), "stages must be >= 1 (got 0)");
	cr_assert_eq(s, (dpl_schedule *)0x1, "output written on failure");
	p.stages = 4;
	p.microbatches = 0;
	cr_assert_eq(dpl_schedule_build(&p, &s), DPL_EINVAL);
	cr_assert_str_eq(dpl_last_error(), "microbatches must be >= 1 (got 0)");
}

struct textcase {
	const char *text;
	uint32_t kind, stage, mb;
};

Test(action, parses_pytorch_text)
{
	static const struct textcase cases[] = {
		{"0F3", DPL_ACT_F, 0, 3},
		{"1B2", DPL_ACT_B, 1, 2},
		{"0I1", DPL_ACT_I, 0, 1},
		{"0W1", DPL_ACT_W, 0, 1},
		{"0SEND_F3", DPL_ACT_SEND_F, 0, 3},
		{"1RECV_B2", DPL_ACT_RECV_B, 1, 2},
		{"12RECV_F100", DPL_ACT_RECV_F, 12, 100},
		{"7SEND_B0", DPL_ACT_SEND_B, 7, 0},
		{"3REDUCE_GRAD", DPL_ACT_REDUCE_GRAD, 3, DPL_NO_MICROBATCH},
		{"2STEP", DPL_ACT_STEP, 2, DPL_NO_MICROBATCH},
		{"0UNSHARD", DPL_ACT_UNSHARD, 0, DPL_NO_MICROBATCH},
		{"1RESHARD", DPL_ACT_RESHARD, 1, DPL_NO_MICROBATCH},
		{"2WAIT_REDUCE_GRAD", DPL_ACT_WAIT_REDUCE_GRAD, 2,
		 DPL_NO_MICROBATCH},
		{"0WAIT_SEND_F3", DPL_ACT_WAIT_SEND_F, 0, 3},
		{"5WAIT_SEND_B12", DPL_ACT_WAIT_SEND_B, 5, 12},
		{"3OVERLAP_F_B", DPL_ACT_OVERLAP_F_B, 3, DPL_NO_MICROBATCH},
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct dpl_action a;
		char back[DPL_ACTION_TEXT_MAX];

		cr_assert_eq(dpl_action_parse(cases[i].text,
					      strlen(cases[i].text), &a),
			     0, "%s: %s", cases[i].text, dpl_last_error());
		cr_assert_eq(a.kind, cases[i].kind, "%s", cases[i].text);
		cr_assert_eq(a.stage, cases[i].stage, "%s", cases[i].text);
		cr_assert_eq(a.microbatch, cases[i].mb, "%s", cases[i].text);
		cr_assert_eq(dpl_action_format(a, back, sizeof back),
			     (int)strlen(cases[i].text));
		cr_assert_str_eq(back, cases[i].text);
	}
}

Test(action, rejects_malformed_text)
{
	static const char *const bad[] = {
		"", "F3", "0X3", "0F", "0F3x", "-1F3", "4294967295F1",
		" 0F3", "0F3 ", "0REDUCE_GRAD1", "0STEP3", "0SEND_F",
		"0f3", "99999999999F1", "0F99999999999", "0OVERLAP_F_B1",
		"0UNSHARD2", "1WAIT_SEND_F", "0WAIT_REDUCE_GRAD0",
		"(0F3;1B2)OVERLAP_F_B", "0WAIT_SEND_X1",
	};

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct dpl_action a = {99, 99, 99};

		cr_assert_eq(dpl_action_parse(bad[i], strlen(bad[i]), &a),
			     DPL_EPARSE, "'%s' accepted", bad[i]);
		cr_assert_eq(a.kind, 99u, "output written on failure");
		cr_assert(strstr(dpl_last_error(), "is not an action"));
	}
}

Test(action, format_checks_buffer_and_shape)
{
	char small[3];
	struct dpl_action a = {DPL_ACT_SEND_F, 10, 10};

	cr_assert_eq(dpl_action_format(a, small, sizeof small), DPL_ERANGE);
	cr_assert_str_eq(small, "");
	a.kind = DPL_ACT_STEP;
	cr_assert_eq(dpl_action_format(a, small, sizeof small), DPL_EINVAL,
		     "STEP with a micro-batch must be refused");
	a.kind = 42;
	cr_assert_eq(dpl_action_format(a, small, sizeof small), DPL_EINVAL);
}

Test(policy, names_round_trip)
{
	static const char *const names[] = {"gpipe", "1f1b", "1f1b-comm",
					    "bounded", "interleaved", "zb-h1"};
	enum dpl_policy p;

	for (int i = 0; i < 6; i++) {
		cr_assert_eq(dpl_policy_parse(names[i], &p), 0);
		cr_assert_eq((int)p, i);
		cr_assert_str_eq(dpl_policy_name(p), names[i]);
	}
	cr_assert_eq(dpl_policy_parse("pipedream", &p), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "'pipedream'"));
}
