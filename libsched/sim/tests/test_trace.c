/*
 * test_trace.c - the ASCII timeline of a simulation, compared with text
 * worked out by hand.
 *
 * The schedule: 1F1B on 2 ranks with 2 micro-batches, F = 1, B = 2, free
 * links. Rank 0 runs 0F0 0F1 0B0 0B1, rank 1 runs 1F0 1B0 1F1 1B1:
 *   rank 0: F0 [0,1]  F1 [1,2]  B0 [4,6]  B1 [7,9]
 *   rank 1: F0 [1,2]  B0 [2,4]  F1 [4,5]  B1 [5,7]
 * (rank 0's backwards wait for rank 1's: 1B0 ends at 4, 1B1 at 7).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>

#include "sched_util.h"


static dpl_sim *run_1f1b_2x2(void)
{
	static const char *const r0[] = {"0F0", "0F1", "0B0", "0B1"};
	static const char *const r1[] = {"1F0", "1B0", "1F1", "1B1"};
	dpl_schedule *s;
	dpl_sim *sim = NULL;
	struct dpl_sim_summary sum;
	int i;

	cr_assert_eq(dpl_schedule_create(2, 2, 2, &s), 0);
	for (i = 0; i < 4; i++) {
		append(s, 0, r0[i]);
		append(s, 1, r1[i]);
	}
	cr_assert_eq(dpl_sim_run(s, NULL, &sim), 0, "%s", dpl_last_error());
	dpl_schedule_destroy(s);
	dpl_sim_summary(sim, &sum);
	cr_assert_float_eq(sum.makespan, 9.0, 1e-12);
	return sim;
}

static char *ascii(const dpl_sim *sim, double unit, unsigned width)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	cr_assert_eq(dpl_sim_write_ascii(sim, f, unit, width), 0, "%s",
		     dpl_last_error());
	fclose(f);
	return buf;
}

Test(trace, ascii_default_unit)
{
	dpl_sim *sim = run_1f1b_2x2();
	char *text = ascii(sim, 0, 0);

	cr_expect_str_eq(text, "time   |0  1  2  3  4  5  6  7  8\n"
			       "rank 0 |F0 F1 .. .. B0 -- .. B1 --\n"
			       "rank 1 |.. F0 B0 -- F1 B1 -- .. ..\n");
	free(text);
	dpl_sim_destroy(sim);
}

/* Half a time unit per column: each action spans twice the cells, and
 * the scale labels every other column so that "0.5" never crowds. */
Test(trace, ascii_half_unit)
{
	dpl_sim *sim = run_1f1b_2x2();
	char *text = ascii(sim, 0.5, 0);

	cr_expect_str_eq(
	    text,
	    "time   |0     1     2     3     4     5     6     7     8\n"
	    "rank 0 |F0 -- F1 -- .. .. .. .. B0 -- -- -- .. .. B1 -- -- --\n"
	    "rank 1 |.. .. F0 -- B0 -- -- -- F1 -- B1 -- -- -- .. .. .. ..\n");
	free(text);
	dpl_sim_destroy(sim);
}

Test(trace, ascii_wrapped)
{
	dpl_sim *sim = run_1f1b_2x2();
	char *text = ascii(sim, 1, 4);

	cr_expect_str_eq(text, "time   |0  1  2  3\n"
			       "rank 0 |F0 F1 .. ..\n"
			       "rank 1 |.. F0 B0 --\n"
			       "\n"
			       "time   |4  5  6  7\n"
			       "rank 0 |B0 -- .. B1\n"
			       "rank 1 |F1 B1 -- ..\n"
			       "\n"
			       "time   |8\n"
			       "rank 0 |--\n"
			       "rank 1 |..\n");
	free(text);
	dpl_sim_destroy(sim);
}

/* Labels of different widths: cells take the widest plus one. */
Test(trace, ascii_wide_labels)
{
	dpl_schedule *s;
	dpl_sim *sim = NULL;
	char name[16], *text;
	int j;

	cr_assert_eq(dpl_schedule_create(1, 1, 11, &s), 0);
	for (j = 0; j < 11; j++) {
		snprintf(name, sizeof name, "0F%d", j);
		append(s, 0, name);
	}
	for (j = 0; j < 11; j++) {
		snprintf(name, sizeof name, "0B%d", j);
		append(s, 0, name);
	}
	cr_assert_eq(dpl_sim_run(s, NULL, &sim), 0, "%s", dpl_last_error());
	text = ascii(sim, 0, 12);
	cr_expect_str_eq(
	    text,
	    "time   |0   1   2   3   4   5   6   7   8   9   10  11\n"
	    "rank 0 |F0  F1  F2  F3  F4  F5  F6  F7  F8  F9  F10 B0\n"
	    "\n"
	    "time   |12  13  14  15  16  17  18  19  20  21  22  23\n"
	    "rank 0 |--- B1  --- B2  --- B3  --- B4  --- B5  --- B6\n"
	    "\n"
	    "time   |24  25  26  27  28  29  30  31  32\n"
	    "rank 0 |--- B7  --- B8  --- B9  --- B10 ---\n");
	free(text);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

Test(trace, ascii_bad_arguments)
{
	dpl_sim *sim = run_1f1b_2x2();
	FILE *f = fopen("/dev/null", "w");

	cr_assert_not_null(f);
	cr_expect_eq(dpl_sim_write_ascii(sim, f, 1e-9, 0), DPL_ERANGE);
	cr_expect_not_null(strstr(dpl_last_error(), "columns"), "%s",
			   dpl_last_error());
	cr_expect_eq(dpl_sim_write_ascii(sim, f, NAN, 0), DPL_EINVAL);
	cr_expect_not_null(strstr(dpl_last_error(), "unit must be finite"));
	fclose(f);
	f = fopen("/dev/null", "r");
	cr_assert_not_null(f);
	cr_expect_eq(dpl_sim_write_ascii(sim, f, 0, 0), DPL_EIO);
	fclose(f);
	dpl_sim_destroy(sim);
}
