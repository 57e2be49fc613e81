/*
 * test_csv_layout.c - a CSV file read with its layout and written back:
 * PyTorch's files (bubbles as empty fields, CRLF line ends) come back in
 * every byte, so do hand-made layouts (byte order mark, mixed line ends,
 * leading zeros, blank tail lines); a changed schedule keeps the file's
 * shape; a schedule the layout cannot hold is refused before anything is
 * written.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/csv.h>

#include "sched_util.h"

/* What writing `s` in `l` gives, NUL-terminated, with its length. */
static char *written(const dpl_schedule *s, const dpl_csv_layout *l,
		     size_t *n, int *rc)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, n);

	cr_assert_not_null(f);
	*rc = dpl_schedule_write_csv_layout(s, l, f);
	cr_assert_eq(fclose(f), 0);
	return buf;
}

/* Read `len` bytes with the layout, write them back, and require the
 * same bytes and the same schedule as dpl_schedule_read_csv reads. */
static void expect_identical(const char *what, const char *text, size_t len)
{
	dpl_schedule *s = NULL, *plain = NULL;
	dpl_csv_layout *l = NULL;
	char *back;
	size_t n;
	int rc;
	uint32_t r;

	rc = dpl_schedule_read_csv_layout(text, len, &s, &l);
	cr_assert_eq(rc, 0, "%s: %s", what, dpl_last_error());
	cr_assert_not_null(l);
	cr_assert_eq(dpl_schedule_read_csv(text, len, &plain), 0, "%s", what);
	cr_assert_eq(dpl_schedule_ranks(s), dpl_schedule_ranks(plain));
	for (r = 0; r < dpl_schedule_ranks(s); r++) {
		size_t na, nb;
		const struct dpl_action *a = dpl_schedule_actions(s, r, &na);
		const struct dpl_action *b = dpl_schedule_actions(plain, r, &nb);

		cr_assert_eq(na, nb, "%s: rank %u", what, r);
		cr_assert_eq(memcmp(a, b, na * sizeof *a), 0, "%s: rank %u",
			     what, r);
	}
	back = written(s, l, &n, &rc);
	cr_assert_eq(rc, 0, "%s: %s", what, dpl_last_error());
	cr_assert_eq(n, len, "%s: %zu bytes back for %zu", what, n, len);
	cr_assert_eq(memcmp(back, text, len), 0, "%s: got\n%s", what, back);
	free(back);
	dpl_csv_layout_destroy(l);
	dpl_schedule_destroy(plain);
	dpl_schedule_destroy(s);
}

/* Every PyTorch file in the tree, as PyTorch's csv.writer wrote it. */
Test(csv_layout, pytorch_files_come_back_in_every_byte)
{
	static const char *const files[] = {
	    "pytorch_1f1b_4x8.csv", "pytorch_comms_2x2.csv",
	    "pytorch_vshape_2x4.csv", "pytorch_dualpipev_2x4.csv",
	    "pytorch_dualpipev_comms_2x4.csv"};

	for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
		size_t len;
		char *text = slurp(files[k], &len);

		expect_identical(files[k], text, len);
		free(text);
	}
}

/* The 1F1B file has bubbles and CRLF, so the plain writer differs. */
Test(csv_layout, plain_writer_drops_what_the_layout_keeps)
{
	size_t len, n = 0;
	char *text = slurp("pytorch_1f1b_4x8.csv", &len), *plain = NULL;
	dpl_schedule *s = NULL;
	FILE *f;

	cr_assert(strstr(text, ",,") != NULL && strstr(text, "\r\n") != NULL);
	cr_assert_eq(dpl_schedule_read_csv(text, len, &s), 0);
	f = open_memstream(&plain, &n);
	cr_assert_eq(dpl_schedule_write_csv(s, f), 0);
	fclose(f);
	cr_assert(strstr(plain, ",,") == NULL && strchr(plain, '\r') == NULL);
	cr_assert_lt(n, len);
	free(plain);
	free(text);
	dpl_schedule_destroy(s);
}

/* Shapes the reader accepts, each written back as it was. */
Test(csv_layout, accepted_shapes_come_back)
{
	static const char *const cases[] = {
	    "0F0,0B0\n1F0,1B0\n",
	    "0F0,0B0\n1F0,1B0",           /* no last line end */
	    "0F0,0B0\r\n1F0,1B0\n",       /* mixed line ends */
	    "0F0,0B0\n1F0,1B0\r\n\r\n\n", /* blank lines at the end */
	    "\xEF\xBB\xBF" "0F0,0B0\r\n1F0,1B0\r\n",
	    ",,0F0,,0B0,,\n,1F0,,,1B0\n", /* bubbles first, last, repeated */
	    "00F00,0B0\n1F0,01B000\n",    /* leading zeros */
	    "3F0,(0F1;3B0)OVERLAP_F_B,,0F0\n1F0,2F0\n",
	    "0F0,0I0,0W0,0SEND_F0,,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
	};

	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
		expect_identical(cases[k], cases[k], strlen(cases[k]));
}

/* A changed schedule with as many fields per rank keeps the file's shape;
 * a field keeps its text only where its action is the one read there. */
Test(csv_layout, changed_schedule_keeps_the_shape)
{
	static const char file[] = "00F0,,0B0,\r\n1F0,01B0\n\n";
	static const char other[] = "0F1,0B0\n1F1,1B1\n";
	dpl_schedule *s = NULL, *t = NULL;
	dpl_csv_layout *l = NULL;
	char *back;
	size_t n;
	int rc;

	cr_assert_eq(dpl_schedule_read_csv_layout(file, strlen(file), &s, &l),
		     0);
	cr_assert_eq(dpl_schedule_read_csv(other, strlen(other), &t), 0);
	back = written(t, l, &n, &rc);
	cr_assert_eq(rc, 0, "%s", dpl_last_error());
	cr_assert_str_eq(back, "0F1,,0B0,\r\n1F1,1B1\n\n");
	free(back);
	dpl_schedule_destroy(t);
	dpl_schedule_destroy(s);
	dpl_csv_layout_destroy(l);
}

/* What the layout cannot hold is refused, naming the counts, and nothing
 * is written. */
Test(csv_layout, misfits_are_refused_before_writing)
{
	static const char file[] = "0F0,,0B0\n1F0,1B0\n";
	static const struct {
		const char *text, *message;
	} cases[] = {
	    {"0F0,0B0\n", "the schedule has 1 ranks; the layout is that of a "
			  "file of 2 lines"},
	    {"0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n",
	     "rank 0 writes 4 fields, but line 1 of the layout's file held 2 "
	     "actions"},
	    {"0F0,0B0\n1F0,1I0,1W0\n",
	     "rank 1 writes 3 fields, but line 2 of the layout's file held 2 "
	     "actions"},
	};
	dpl_schedule *s = NULL;
	dpl_csv_layout *l = NULL;

	cr_assert_eq(dpl_schedule_read_csv_layout(file, strlen(file), &s, &l),
		     0);
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		dpl_schedule *t = NULL;
		char *back;
		size_t n;
		int rc;

		cr_assert_eq(dpl_schedule_read_csv(cases[k].text,
						   strlen(cases[k].text), &t),
			     0);
		back = written(t, l, &n, &rc);
		cr_assert_eq(rc, DPL_EINVAL, "case %zu", k);
		cr_assert(strstr(dpl_last_error(), cases[k].message) != NULL,
			  "case %zu: %s", k, dpl_last_error());
		cr_assert_eq(n, 0, "case %zu: %zu bytes written", k, n);
		free(back);
		dpl_schedule_destroy(t);
	}
	cr_assert_eq(dpl_schedule_write_csv_layout(NULL, l, stdout),
		     DPL_EINVAL);
	cr_assert_eq(dpl_schedule_write_csv_layout(s, NULL, stdout),
		     DPL_EINVAL);
	dpl_schedule_destroy(s);
	dpl_csv_layout_destroy(l);
	dpl_csv_layout_destroy(NULL);
}

/* Malformed input fails as dpl_schedule_read_csv fails, and leaves both
 * outputs alone. */
Test(csv_layout, malformed_input_fails_alike)
{
	static const char *const bad[] = {
	    "", "\n\n", "0F0,\n\n1F0", "0F0, 0B0\n", "0X0\n",
	    "0F0\n0B0\n",  "(0F0;0F1)OVERLAP_F_B\n", "1F0\n",
	    "0F0,0B0\n1F0,(1F1;1B1\n",
	};

	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		dpl_schedule *s = NULL, *t = NULL;
		dpl_csv_layout *l = NULL;
		char want[512];
		int a, b;

		a = dpl_schedule_read_csv(bad[k], strlen(bad[k]), &s);
		snprintf(want, sizeof want, "%s", dpl_last_error());
		b = dpl_schedule_read_csv_layout(bad[k], strlen(bad[k]), &t, &l);
		cr_assert_neq(a, 0, "case %zu loads", k);
		cr_assert_eq(a, b, "case %zu", k);
		cr_assert_str_eq(dpl_last_error(), want, "case %zu", k);
		cr_assert_null(t);
		cr_assert_null(l);
		cr_assert_null(s);
	}
	cr_assert_eq(dpl_schedule_read_csv_layout("0F0\n", 4, NULL, NULL),
		     DPL_EINVAL);
}
