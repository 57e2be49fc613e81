/*
 * sched_util.h - helpers the schedule tests share: reading fixtures from
 * libsched/tests/data, appending actions by their text, comparing lists,
 * and a write-then-read round trip for any file format.
 */
#ifndef DPL_TEST_SCHED_UTIL_H
#define DPL_TEST_SCHED_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>

/* The whole of DPL_TEST_DATA_DIR/name, NUL-terminated; caller frees. */
static inline char *slurp(const char *name, size_t *len)
{
	char path[1024];
	FILE *f;
	char *buf;
	long n;

	snprintf(path, sizeof path, "%s/%s", DPL_TEST_DATA_DIR, name);
	f = fopen(path, "rb");
	cr_assert_not_null(f, "cannot open %s", path);
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	cr_assert_geq(n, 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* Append the action written as `text` ("0F3") to rank's list. */
static inline void append(dpl_schedule *s, uint32_t rank, const char *text)
{
	struct dpl_action a;

	cr_assert_eq(dpl_action_parse(text, strlen(text), &a), 0, "%s", text);
	cr_assert_eq(dpl_schedule_append(s, rank, a), 0, "%s: %s", text,
		     dpl_last_error());
}

/* Rank `rank`'s list must read as the `n` texts in `want`. */
static inline void expect_list(const dpl_schedule *s, uint32_t rank,
			       const char *const *want, size_t n)
{
	const struct dpl_action *a;
	char t[DPL_ACTION_TEXT_MAX];
	size_t len, i;

	a = dpl_schedule_actions(s, rank, &len);
	cr_assert_eq(len, n, "rank %u: %zu actions, expected %zu", rank, len,
		     n);
	for (i = 0; i < n; i++) {
		cr_assert_geq(dpl_action_format(a[i], t, sizeof t), 0);
		cr_expect_str_eq(t, want[i], "rank %u, position %zu", rank, i);
	}
}

#define EXPECT_LIST(s, rank, ...)                                             \
	do {                                                                  \
		static const char *const want_[] = {__VA_ARGS__};             \
		expect_list(s, rank, want_, sizeof want_ / sizeof want_[0]);  \
	} while (0)

/* Same shape, mapping, lowered flag and lists; with `meta`, also the same
 * policy and caps (formats that carry them). */
static inline void expect_same(const dpl_schedule *a, const dpl_schedule *b,
			       int meta)
{
	uint32_t r, st;
	size_t na, nb;

	cr_assert_eq(dpl_schedule_ranks(a), dpl_schedule_ranks(b));
	cr_assert_eq(dpl_schedule_stages(a), dpl_schedule_stages(b));
	cr_assert_eq(dpl_schedule_microbatches(a),
		     dpl_schedule_microbatches(b));
	cr_assert_eq(!!dpl_schedule_is_lowered(a),
		     !!dpl_schedule_is_lowered(b));
	if (meta)
		cr_assert_eq(dpl_schedule_policy(a), dpl_schedule_policy(b));
	for (st = 0; st < dpl_schedule_stages(a); st++) {
		cr_assert_eq(dpl_schedule_stage_rank(a, st),
			     dpl_schedule_stage_rank(b, st), "stage %u", st);
		if (meta)
			cr_assert_eq(dpl_schedule_cap(a, st),
				     dpl_schedule_cap(b, st), "cap of stage %u",
				     st);
	}
	for (r = 0; r < dpl_schedule_ranks(a); r++) {
		const struct dpl_action *x = dpl_schedule_actions(a, r, &na);
		const struct dpl_action *y = dpl_schedule_actions(b, r, &nb);

		cr_assert_eq(na, nb, "rank %u length", r);
		if (na > 0) /* empty lists may be NULL */
			cr_assert_eq(memcmp(x, y, na * sizeof *x), 0,
				     "rank %u lists", r);
	}
}

typedef int (*sched_writer)(const dpl_schedule *s, FILE *f);
typedef int (*sched_reader)(const char *text, size_t len, dpl_schedule **out);

/* Write `s` with `w` into a string the caller frees. */
static inline char *write_text(const dpl_schedule *s, sched_writer w,
			       size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	cr_assert_not_null(f);
	cr_assert_eq(w(s, f), 0, "write: %s", dpl_last_error());
	fclose(f);
	return buf;
}

/* Writing `s` and reading it back gives the same schedule. */
static inline void expect_round_trip(const dpl_schedule *s, sched_writer w,
				     sched_reader rd, int meta)
{
	dpl_schedule *back = NULL;
	size_t len;
	char *text = write_text(s, w, &len);

	cr_assert_eq(rd(text, len, &back), 0, "reading back failed: %s\n%s",
		     dpl_last_error(), text);
	expect_same(s, back, meta);
	dpl_schedule_destroy(back);
	free(text);
}

/* Micro-batches a rank keeps alive at once, in list order, over all its
 * stages: a forward adds one, its B or W takes it away. */
static inline uint32_t sched_rank_peak(const dpl_schedule *s, uint32_t rank)
{
	size_t n;
	const struct dpl_action *a = dpl_schedule_actions(s, rank, &n);
	uint32_t live = 0, peak = 0;

	for (size_t i = 0; i < n; i++) {
		if (a[i].kind == DPL_ACT_F && ++live > peak)
			peak = live;
		if (a[i].kind == DPL_ACT_W || a[i].kind == DPL_ACT_B)
			live--;
	}
	return peak;
}

#endif
