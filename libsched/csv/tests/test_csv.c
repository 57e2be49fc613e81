/*
 * test_csv.c - schedules in torch.distributed.pipelining's CSV form:
 * files laid out the way PyTorch writes them, round trips, and a table
 * of malformed inputs with the message each must give.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/csv.h>

#include "sched_util.h"


static dpl_schedule *load_text(const char *text)
{
	dpl_schedule *s = NULL;
	int rc = dpl_schedule_read_csv(text, strlen(text), &s);

	cr_assert_eq(rc, 0, "read_csv failed: %s", dpl_last_error());
	cr_assert_not_null(s);
	return s;
}







/*
 * PyTorch's Schedule1F1B pipeline order for 4 ranks and 8 micro-batches
 * (rank r: r bubbles, 3 - r forwards, 2 (3 - r) bubbles, the 1F1B pairs,
 * then a bubble before each cool-down backward), as csv.writer writes
 * it: bubbles as empty fields, lines ending in CRLF. The last rank's
 * forwards are numbered 0..7.
 */
Test(csv, pytorch_1f1b_fixture)
{
	size_t len;
	char *text = slurp("pytorch_1f1b_4x8.csv", &len);
	dpl_schedule *s = NULL;
	uint32_t st;

	cr_assert_eq(dpl_schedule_read_csv(text, len, &s), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(dpl_schedule_ranks(s), 4);
	cr_assert_eq(dpl_schedule_stages(s), 4);
	cr_assert_eq(dpl_schedule_microbatches(s), 8);
	cr_assert_eq(dpl_schedule_is_lowered(s), 0);
	cr_assert_eq(dpl_schedule_policy(s), DPL_POLICY_CUSTOM);
	for (st = 0; st < 4; st++)
		cr_assert_eq(dpl_schedule_stage_rank(s, st), st);
	EXPECT_LIST(s, 0, "0F0", "0F1", "0F2", "0F3", "0B0", "0F4", "0B1",
		    "0F5", "0B2", "0F6", "0B3", "0F7", "0B4", "0B5", "0B6",
		    "0B7");
	EXPECT_LIST(s, 1, "1F0", "1F1", "1F2", "1B0", "1F3", "1B1", "1F4",
		    "1B2", "1F5", "1B3", "1F6", "1B4", "1F7", "1B5", "1B6",
		    "1B7");
	EXPECT_LIST(s, 2, "2F0", "2F1", "2B0", "2F2", "2B1", "2F3", "2B2",
		    "2F4", "2B3", "2F5", "2B4", "2F6", "2B5", "2F7", "2B6",
		    "2B7");
	EXPECT_LIST(s, 3, "3F0", "3B0", "3F1", "3B1", "3F2", "3B2", "3F3",
		    "3B3", "3F4", "3B4", "3F5", "3B5", "3F6", "3B6", "3F7",
		    "3B7");
	cr_expect_eq(dpl_schedule_bound(s, 0), 4);
	cr_expect_eq(dpl_schedule_bound(s, 3), 1);
	dpl_schedule_destroy(s);
	free(text);
}

/*
 * A compute_comms file: what PyTorch's _add_send_recv makes of 2-stage
 * 1F1B with 2 micro-batches (the sender places its SEND after the
 * compute and the peer's RECV at the end of the peer's list so far).
 */
Test(csv, pytorch_compute_comms_fixture)
{
	size_t len;
	char *text = slurp("pytorch_comms_2x2.csv", &len);
	dpl_schedule *s = NULL;

	cr_assert_eq(dpl_schedule_read_csv(text, len, &s), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(dpl_schedule_ranks(s), 2);
	cr_assert_eq(dpl_schedule_stages(s), 2);
	cr_assert_eq(dpl_schedule_microbatches(s), 2);
	cr_assert_neq(dpl_schedule_is_lowered(s), 0);
	EXPECT_LIST(s, 0, "0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0",
		    "0B0", "0RECV_B1", "0B1");
	EXPECT_LIST(s, 1, "1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0",
		    "1F1", "1B1", "1SEND_B1");
	cr_expect_eq(dpl_schedule_actions(s, 1, &len)[4].kind,
		     DPL_ACT_SEND_B);
	dpl_schedule_destroy(s);
	free(text);
}

/*
 * PyTorch's V-shaped test schedule (stages 0 and 3 on rank 0, 1 and 2 on
 * rank 1), LF endings, no final newline, a trailing empty field.
 */
Test(csv, pytorch_vshape_fixture)
{
	size_t len;
	char *text = slurp("pytorch_vshape_2x4.csv", &len);
	dpl_schedule *s = NULL;

	cr_assert_eq(dpl_schedule_read_csv(text, len, &s), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(dpl_schedule_ranks(s), 2);
	cr_assert_eq(dpl_schedule_stages(s), 4);
	cr_assert_eq(dpl_schedule_microbatches(s), 1);
	cr_expect_eq(dpl_schedule_stage_rank(s, 0), 0);
	cr_expect_eq(dpl_schedule_stage_rank(s, 1), 1);
	cr_expect_eq(dpl_schedule_stage_rank(s, 2), 1);
	cr_expect_eq(dpl_schedule_stage_rank(s, 3), 0);
	EXPECT_LIST(s, 0, "0F0", "3F0", "3B0", "0B0");
	EXPECT_LIST(s, 1, "1F0", "2F0", "2B0", "1B0");
	dpl_schedule_destroy(s);
	free(text);
}

/* Line endings, a final newline or none, blank trailing lines, a BOM. */
Test(csv, accepted_layouts_load_alike)
{
	static const char *const variants[] = {
	    "0F0,0B0\n1F0,1B0\n",
	    "0F0,0B0\r\n1F0,1B0\r\n",
	    "0F0,0B0\n1F0,1B0",
	    "0F0,0B0\r\n1F0,1B0",
	    "0F0,0B0\n1F0,1B0\n\n\n",
	    "0F0,0B0\r\n1F0,1B0\r\n\r\n",
	    ",0F0,,0B0,\n1F0,,,1B0\n",
	    ("\xEF\xBB\xBF"
	     "0F0,0B0\n1F0,1B0\n"),
	};
	dpl_schedule *first = load_text(variants[0]);
	size_t i;

	EXPECT_LIST(first, 0, "0F0", "0B0");
	EXPECT_LIST(first, 1, "1F0", "1B0");
	for (i = 1; i < sizeof variants / sizeof variants[0]; i++) {
		dpl_schedule *s = load_text(variants[i]);

		expect_same(first, s, 0);
		dpl_schedule_destroy(s);
	}
	dpl_schedule_destroy(first);
}

Test(csv, lowered_flag_follows_the_actions)
{
	dpl_schedule *s = load_text("0F0,0B0,0REDUCE_GRAD,0STEP\n");

	cr_expect_neq(dpl_schedule_is_lowered(s), 0);
	cr_expect_eq(dpl_schedule_microbatches(s), 1);
	dpl_schedule_destroy(s);
	s = load_text("0STEP\n");
	cr_expect_neq(dpl_schedule_is_lowered(s), 0);
	cr_expect_eq(dpl_schedule_microbatches(s), 1);
	dpl_schedule_destroy(s);
	s = load_text("0F0,0I0,0W0\n");
	cr_expect_eq(dpl_schedule_is_lowered(s), 0);
	dpl_schedule_destroy(s);
}

struct bad_case {
	const char *text;
	size_t len; /* 0: strlen(text) */
	const char *want;
};

Test(csv, malformed_inputs_name_the_fault)
{
	static const struct bad_case cases[] = {
	    {"", 0, "empty input"},
	    {"\r\n\n", 0, "empty input"},
	    {"\xEF\xBB\xBF", 0, "empty input"},
	    {"0F0,0X1\n", 0, "line 1, field 2: '0X1' is not an action"},
	    {"0F0,,0F\n", 0, "line 1, field 3: '0F' is not an action"},
	    {"0F0\n1F0,2Q0\n2F0\n", 0, "line 2, field 2: '2Q0'"},
	    {"0F0,1F0\n1B0\n", 0,
	     "line 2, field 1: stage 1 appears on lines 1 and 2"},
	    {"0F0\n1F0\n2F0,1B0\n", 0,
	     "line 3, field 2: stage 1 appears on lines 2 and 3"},
	    {"0F0, 0B0\n", 0, "line 1, field 2: ' 0B0' has blanks"},
	    {"0F0 ,0B0\n", 0, "line 1, field 1: '0F0 ' has blanks"},
	    {"0F0,\t0B0\n", 0, "line 1, field 2"},
	    {"0F0\n \n", 0, "line 2, field 1: ' ' has blanks"},
	    {"0F0\n\n1F0\n", 0, "line 2: empty line"},
	    {"0F0\r\n\r\n1F0\r\n", 0, "line 2: empty line"},
	    {"0F0\n,,\n", 0, "line 2: no actions"},
	    {"0F2147483648\n", 0,
	     "line 1, field 1: micro-batch 2147483648 is too large"},
	    {"2147483648F0\n", 0,
	     "line 1, field 1: stage 2147483648 is too large"},
	    {"0F4294967295\n", 0, "line 1, field 1: '0F4294967295' is not"},
	    {"99999999999999999999F0\n", 0, "line 1, field 1: '9999"},
	    {"0F0\n2F0\n", 0,
	     "stage 1 appears on no line, though stage 2 does (line 2, "
	     "field 1)"},
	    {"1F0\n", 0, "stage 0 appears on no line"},
	    {"0F0\n2147483647F0\n", 0, "stage 1 appears on no line"},
	    {"0F0,0F1\n,,5F0,1F0\n", 0,
	     "stage 2 appears on no line, though stage 5 does (line 2, "
	     "field 3)"},
	    {"\"0F0\"\n", 0, "line 1, field 1: '\"0F0\"' is not an action"},
	    {"0F0;0F1\n", 0, "is not an action"},
	    {"0F0\r1F0\n", 0, "line 1, field 1"},
	    {"0F\0000\n", 5, "line 1, field 1"},
	    {"(0F3;1B2)OVERLAP\n", 0,
	     "line 1, field 1: '(0F3;1B2)OVERLAP' is not an action (a "
	     "compound"},
	    {"0F0,(0F3)OVERLAP_F_B\n", 0,
	     "line 1, field 2: '(0F3)OVERLAP_F_B': OVERLAP_F_B holds exactly "
	     "two"},
	    {"(0F3;1B2;1B1)OVERLAP_F_B\n", 0, "holds exactly two"},
	    {"(0B3;1F2)OVERLAP_F_B\n", 0,
	     "'(0B3;1F2)OVERLAP_F_B': OVERLAP_F_B pairs an F with a B or I"},
	    {"(0F3;1W2)OVERLAP_F_B\n", 0, "pairs an F with a B or I"},
	    {"(0F3;1X2)OVERLAP_F_B\n", 0,
	     "line 1, field 1: '1X2' is not an action"},
	    {"(0F3;(1F2;0B1)OVERLAP_F_B)OVERLAP_F_B\n", 0, "line 1, field 1"},
	    {"0F0\n0OVERLAP_F_B\n", 0,
	     "line 2, field 1: OVERLAP_F_B is written with its parts"},
	    {"0UNSHARD1\n", 0, "'0UNSHARD1' is not an action"},
	    {"0WAIT_SEND_F\n", 0, "'0WAIT_SEND_F' is not an action"},
	};
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct bad_case *c = &cases[i];
		dpl_schedule *s = (dpl_schedule *)&cases; /* must stay */
		size_t len = c->len ? c->len : strlen(c->text);
		int rc = dpl_schedule_read_csv(c->text, len, &s);

		cr_expect_eq(rc, DPL_EPARSE, "case %zu: rc %d", i, rc);
		cr_expect_eq(s, (dpl_schedule *)&cases,
			     "case %zu: *out written on failure", i);
		cr_expect_not_null(strstr(dpl_last_error(), c->want),
				   "case %zu: message '%s' lacks '%s'", i,
				   dpl_last_error(), c->want);
	}
}

/* A one-line file of 200000 actions, and 1 MB of junk on one line. */
Test(csv, long_lines)
{
	size_t n = 200000, i, len;
	char *text = malloc(n * 12 + 2), *p = text;
	dpl_schedule *s = NULL;
	const struct dpl_action *a;

	cr_assert_not_null(text);
	for (i = 0; i < n; i++)
		p += sprintf(p, "%s0F%zu", i ? "," : "", i);
	*p++ = '\n';
	cr_assert_eq(dpl_schedule_read_csv(text, (size_t)(p - text), &s), 0,
		     "%s", dpl_last_error());
	cr_assert_eq(dpl_schedule_microbatches(s), n);
	a = dpl_schedule_actions(s, 0, &len);
	cr_assert_eq(len, n);
	cr_expect_eq(a[n - 1].microbatch, n - 1);
	dpl_schedule_destroy(s);

	memset(text, 'x', 1 << 20);
	s = NULL;
	cr_expect_eq(dpl_schedule_read_csv(text, 1 << 20, &s), DPL_EPARSE);
	cr_expect_null(s);
	cr_expect_not_null(strstr(dpl_last_error(), "line 1, field 1: 'xxx"));
	cr_expect_lt(strlen(dpl_last_error()), 300);
	free(text);
}

/* Hand-built lists: plain, V-mapped, lowered. */
Test(csv, round_trip_hand_built)
{
	dpl_schedule *s;
	int i;

	cr_assert_eq(dpl_schedule_create(3, 3, 2, &s), 0);
	static const char *const r0[] = {"0F0", "0F1", "0B0", "0B1"};
	static const char *const r1[] = {"1F0", "1F1", "1B0", "1B1"};
	static const char *const r2[] = {"2F0", "2B0", "2F1", "2B1"};
	for (i = 0; i < 4; i++) {
		append(s, 0, r0[i]);
		append(s, 1, r1[i]);
		append(s, 2, r2[i]);
	}
	expect_round_trip(s, dpl_schedule_write_csv,
			  dpl_schedule_read_csv, 0);
	dpl_schedule_destroy(s);

	cr_assert_eq(dpl_schedule_create(2, 4, 1, &s), 0);
	cr_assert_eq(dpl_schedule_map_stage(s, 3, 0), 0);
	cr_assert_eq(dpl_schedule_map_stage(s, 2, 1), 0);
	append(s, 0, "0F0");
	append(s, 1, "1F0");
	append(s, 1, "2F0");
	append(s, 0, "3F0");
	append(s, 0, "3I0");
	append(s, 1, "2I0");
	append(s, 1, "1I0");
	append(s, 0, "0I0");
	append(s, 0, "0W0");
	append(s, 0, "3W0");
	append(s, 1, "1W0");
	append(s, 1, "2W0");
	expect_round_trip(s, dpl_schedule_write_csv,
			  dpl_schedule_read_csv, 0);
	dpl_schedule_destroy(s);

	cr_assert_eq(dpl_schedule_create(2, 2, 1, &s), 0);
	append(s, 0, "0F0");
	append(s, 0, "0SEND_F0");
	append(s, 1, "1RECV_F0");
	append(s, 1, "1F0");
	append(s, 1, "1B0");
	append(s, 1, "1SEND_B0");
	append(s, 1, "1REDUCE_GRAD");
	append(s, 1, "1STEP");
	append(s, 0, "0RECV_B0");
	append(s, 0, "0B0");
	append(s, 0, "0REDUCE_GRAD");
	append(s, 0, "0STEP");
	expect_round_trip(s, dpl_schedule_write_csv,
			  dpl_schedule_read_csv, 0);
	dpl_schedule_destroy(s);
}

/* The exact text written: one line per rank, LF, no bubbles. */
Test(csv, write_format)
{
	dpl_schedule *s;
	size_t len;
	char *text;

	cr_assert_eq(dpl_schedule_create(2, 2, 2, &s), 0);
	append(s, 0, "0F0");
	append(s, 0, "0F1");
	append(s, 0, "0SEND_F1");
	append(s, 1, "1RECV_F1");
	append(s, 1, "1STEP");
	text = write_text(s, dpl_schedule_write_csv, &len);
	cr_expect_str_eq(text, "0F0,0F1,0SEND_F1\n1RECV_F1,1STEP\n");
	cr_expect_eq(len, strlen(text));
	free(text);
	dpl_schedule_destroy(s);
}

/* Lists a CSV file cannot hold are refused before anything is written. */
Test(csv, write_refuses_what_cannot_load)
{
	dpl_schedule *s;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	cr_assert_eq(dpl_schedule_create(2, 2, 1, &s), 0);
	append(s, 0, "0F0");
	append(s, 0, "0B0");
	f = open_memstream(&buf, &len);
	cr_assert_not_null(f);
	cr_expect_eq(dpl_schedule_write_csv(s, f), DPL_EINVAL);
	cr_expect_not_null(strstr(dpl_last_error(), "rank 1 has no actions"),
			   "%s", dpl_last_error());
	fflush(f);
	cr_expect_eq(len, 0, "partial output");
	dpl_schedule_destroy(s);

	cr_assert_eq(dpl_schedule_create(1, 2, 1, &s), 0);
	cr_assert_eq(dpl_schedule_map_stage(s, 1, 0), 0);
	append(s, 0, "0F0");
	cr_expect_eq(dpl_schedule_write_csv(s, f), DPL_EINVAL);
	cr_expect_not_null(strstr(dpl_last_error(), "stage 1 has no actions"),
			   "%s", dpl_last_error());
	fflush(f);
	cr_expect_eq(len, 0, "partial output");
	dpl_schedule_destroy(s);
	fclose(f);
	free(buf);
}

Test(csv, write_error_is_eio)
{
	dpl_schedule *s;
	FILE *f = fopen("/dev/null", "r");

	cr_assert_not_null(f);
	cr_assert_eq(dpl_schedule_create(1, 1, 1, &s), 0);
	append(s, 0, "0F0");
	append(s, 0, "0B0");
	cr_expect_eq(dpl_schedule_write_csv(s, f), DPL_EIO);
	cr_expect_not_null(strstr(dpl_last_error(), "writing"), "%s",
			   dpl_last_error());
	fclose(f);
	dpl_schedule_destroy(s);
}

/* Every buildable policy, compute-only and lowered, survives a round
 * trip, and the stage mapping of `interleaved` is inferred back. */
Test(csv, round_trip_every_policy)
{
	enum dpl_policy pols[DPL_POLICY__COUNT];
	size_t i, n = 0;
	int lower;

	/* Every policy that builds (dualpipev's lists hold OVERLAP_F_B). */
	for (i = 0; i < DPL_POLICY__COUNT; i++)
		if (dpl_policy_buildable((enum dpl_policy)i))
			pols[n++] = (enum dpl_policy)i;
	for (i = 0; i < n; i++) {
		for (lower = 0; lower < 2; lower++) {
			struct dpl_schedule_params p = {0};
			dpl_schedule *s = NULL;

			p.stages = 4;
			p.microbatches = 8;
			p.policy = pols[i];
			if (dpl_policy_chunks(pols[i]) == 1)
				p.chunks = 2;
			if (pols[i] == DPL_POLICY_BOUNDED ||
			    pols[i] == DPL_POLICY_ZB_AUTO)
				p.cap_all = 2;
			cr_assert_eq(dpl_schedule_build(&p, &s), 0, "%s: %s",
				     dpl_policy_name(pols[i]),
				     dpl_last_error());
			if (lower)
				cr_assert_eq(dpl_schedule_lower(s), 0, "%s: %s",
					     dpl_policy_name(pols[i]),
					     dpl_last_error());
			cr_assert_eq(dpl_schedule_is_lowered(s), lower);
			expect_round_trip(s, dpl_schedule_write_csv,
			  dpl_schedule_read_csv, 0);
			dpl_schedule_destroy(s);
		}
	}
}

/* Every action of `s` as text, ranks on lines, fields joined by ','. */
static char *text_of(const dpl_schedule *s,
		     int (*w)(const dpl_schedule *, FILE *))
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);

	cr_assert_not_null(f);
	cr_assert_eq(w(s, f), 0, "%s", dpl_last_error());
	fclose(f);
	return buf;
}

/* CRLF to LF, as PyTorch's csv.writer ends lines with CRLF. */
static void to_lf(char *t)
{
	char *o = t;

	for (; *t; t++)
		if (*t != '\r')
			*o++ = *t;
	*o = '\0';
}

/*
 * PyTorch's ScheduleDualPipeV at 2 ranks and 4 micro-batches, as its
 * _dump_csv writes it, compute only and compute_comms (with UNSHARD,
 * RESHARD, WAIT_REDUCE_GRAD, WAIT_SEND_* and compound OVERLAP_F_B
 * fields): both load, validate, and write back byte for byte (line ends
 * aside).
 */
Test(csv, pytorch_dualpipev_files_round_trip)
{
	static const char *const files[] = {"pytorch_dualpipev_2x4.csv",
					    "pytorch_dualpipev_comms_2x4.csv"};

	for (size_t k = 0; k < 2; k++) {
		size_t len;
		char *text = slurp(files[k], &len), *back;
		dpl_schedule *s = NULL;
		struct dpl_schedule_issue is;
		const struct dpl_action *a;

		cr_assert_eq(dpl_schedule_read_csv(text, len, &s), 0, "%s: %s",
			     files[k], dpl_last_error());
		cr_assert_eq(dpl_schedule_is_lowered(s) != 0, k != 0);
		cr_assert_eq(dpl_schedule_stages(s), 4);
		cr_assert_eq(dpl_schedule_validate(s, &is), 0, "%s: %s",
			     files[k], is.message);
		/* "(0F3;3B1)OVERLAP_F_B" is rank 0's 8th field (compute
		 * only) or 18th (comms): the marker, then its parts. */
		a = dpl_schedule_actions(s, 0, &len);
		{
			size_t at = k ? 17 : 7;

			cr_assert_eq(a[at].kind, DPL_ACT_OVERLAP_F_B);
			cr_assert_eq(a[at].stage, 0);
			cr_assert_eq(a[at + 1].kind, DPL_ACT_F);
			cr_assert_eq(a[at + 1].microbatch, 3);
			cr_assert_eq(a[at + 2].kind, DPL_ACT_B);
			cr_assert_eq(a[at + 2].stage, 3);
			cr_assert_eq(a[at + 2].microbatch, 1);
		}
		if (k) {
			cr_assert_eq(a[0].kind, DPL_ACT_UNSHARD);
			cr_assert_eq(a[len - 1].kind, DPL_ACT_WAIT_SEND_B);
		}
		back = text_of(s, dpl_schedule_write_csv);
		to_lf(text);
		cr_assert_str_eq(back, text, "%s", files[k]);
		if (k) {
			/* The comms writer adds nothing to a file that has
			 * every wait and no STEP. */
			free(back);
			back = text_of(s, dpl_schedule_write_csv_comms);
			cr_assert_str_eq(back, text, "%s (comms)", files[k]);
		}
		free(back);
		free(text);
		dpl_schedule_destroy(s);
	}
}

/* How often `what` occurs in `text`. */
static size_t count_of(const char *text, const char *what)
{
	size_t n = 0;

	for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
		n++;
	return n;
}

/*
 * dpl's own lowered dualpipev, interleaved and 1f1b written for PyTorch:
 * no STEP, one WAIT_REDUCE_GRAD per REDUCE_GRAD right after it, one wait
 * per send after it; the file loads back and validates.
 */
Test(csv, comms_writer_adds_pytorchs_waits)
{
	static const enum dpl_policy pols[] = {
	    DPL_POLICY_1F1B, DPL_POLICY_INTERLEAVED, DPL_POLICY_DUALPIPEV,
	    DPL_POLICY_ZBV};

	for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++) {
		struct dpl_schedule_params p = {0};
		dpl_schedule *s = NULL, *t = NULL;
		struct dpl_schedule_issue is;
		char *text, *line, *save = NULL;

		p.stages = 4;
		p.microbatches = 8;
		p.policy = pols[i];
		p.chunks = dpl_policy_chunks(pols[i]) == 1 ? 2 : 0;
		cr_assert_eq(dpl_schedule_build(&p, &s), 0, "%s",
			     dpl_last_error());
		cr_assert_eq(dpl_schedule_lower(s), 0, "%s", dpl_last_error());
		text = text_of(s, dpl_schedule_write_csv_comms);
		cr_assert_eq(count_of(text, "STEP"), 0);
		cr_assert_eq(count_of(text, ",WAIT_REDUCE_GRAD"), 0);
		cr_assert_eq(count_of(text, "REDUCE_GRAD"),
			     2 * count_of(text, "WAIT_REDUCE_GRAD"));
		cr_assert_eq(count_of(text, "SEND_F"),
			     2 * count_of(text, "WAIT_SEND_F"));
		cr_assert_eq(count_of(text, "SEND_B"),
			     2 * count_of(text, "WAIT_SEND_B"));
		if (pols[i] == DPL_POLICY_DUALPIPEV)
			cr_assert_gt(count_of(text, ")OVERLAP_F_B"), 0);
		cr_assert_eq(dpl_schedule_read_csv(text, strlen(text), &t), 0,
			     "%s", dpl_last_error());
		cr_assert_eq(dpl_schedule_validate(t, &is), 0, "%s: %s",
			     dpl_policy_name(pols[i]), is.message);
		/* Each REDUCE_GRAD is followed by its wait. */
		for (line = strtok_r(text, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save)) {
			for (char *q = strstr(line, "REDUCE_GRAD"); q;
			     q = strstr(q + 1, "REDUCE_GRAD")) {
				if (q >= line + 5 &&
				    strncmp(q - 5, "WAIT_", 5) == 0)
					continue;
				cr_assert(strstr(q, ",") != NULL &&
					  strstr(strstr(q, ","), "WAIT_REDUCE_GRAD") ==
					      strstr(q, ",") + 1 +
						  strspn(strstr(q, ",") + 1,
							 "0123456789"),
					  "%s: REDUCE_GRAD without its wait "
					  "next",
					  dpl_policy_name(pols[i]));
			}
		}
		free(text);
		dpl_schedule_destroy(t);
		dpl_schedule_destroy(s);
	}
}
