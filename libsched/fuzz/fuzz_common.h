/*
 * fuzz_common.h - what the schedule-file fuzzers share: the comparison
 * of two schedules and writing one into memory.
 */
#ifndef DPL_FUZZ_COMMON_H
#define DPL_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/dpl.h>
#include <dpl/csv.h>
#include <dpl/plan.h>
#include <dpl/sim.h>

/* Abort (a finding) with a one-line reason. */
static inline void fuzz_fail(const char *why)
{
	fprintf(stderr, "fuzz: %s (%s)\n", why, dpl_last_error());
	abort();
}

/* Abort unless `a` and `b` hold the same shape, mapping, flags, caps (when
 * `caps`), policy (when `policy`) and lists. */
static inline void fuzz_expect_same(const dpl_schedule *a,
				    const dpl_schedule *b, int caps,
				    int policy)
{
	uint32_t r, st;
	size_t na, nb;

	if (dpl_schedule_ranks(a) != dpl_schedule_ranks(b) ||
	    dpl_schedule_stages(a) != dpl_schedule_stages(b) ||
	    dpl_schedule_microbatches(a) != dpl_schedule_microbatches(b) ||
	    !dpl_schedule_is_lowered(a) != !dpl_schedule_is_lowered(b))
		fuzz_fail("shape differs after the round trip");
	if (policy && dpl_schedule_policy(a) != dpl_schedule_policy(b))
		fuzz_fail("policy differs after the round trip");
	for (st = 0; st < dpl_schedule_stages(a); st++) {
		if (dpl_schedule_stage_rank(a, st) !=
		    dpl_schedule_stage_rank(b, st))
			fuzz_fail("stage mapping differs after the round trip");
		if (caps && dpl_schedule_cap(a, st) != dpl_schedule_cap(b, st))
			fuzz_fail("caps differ after the round trip");
	}
	for (r = 0; r < dpl_schedule_ranks(a); r++) {
		const struct dpl_action *x = dpl_schedule_actions(a, r, &na);
		const struct dpl_action *y = dpl_schedule_actions(b, r, &nb);

		if (na != nb || (na && memcmp(x, y, na * sizeof *x) != 0))
			fuzz_fail("lists differ after the round trip");
	}
}

/* Write `s` with `write` into a malloc'd buffer; aborts on failure. */
static inline char *fuzz_write(const dpl_schedule *s,
			       int (*write)(const dpl_schedule *, FILE *),
			       size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (f == NULL)
		abort();
	if (write(s, f) != 0)
		fuzz_fail("a loaded schedule could not be written");
	if (fclose(f) != 0)
		abort();
	return buf;
}

/*
 * The round trip for one input: load it; if it loads, write it, load the
 * text again, and check that the two schedules and the two texts match.
 */
static inline int fuzz_round_trip(
    const unsigned char *data, size_t size,
    int (*read)(const char *, size_t, dpl_schedule **),
    int (*write)(const dpl_schedule *, FILE *), int keeps_all)
{
	dpl_schedule *s = NULL, *t = NULL;
	char *text, *again;
	size_t len, len2;

	if (read((const char *)data, size, &s) != 0) {
		if (s != NULL)
			fuzz_fail("*out written on failure");
		if (dpl_last_error()[0] == '\0')
			fuzz_fail("failure without a message");
		return 0;
	}
	text = fuzz_write(s, write, &len);
	if (read(text, len, &t) != 0)
		fuzz_fail("written text does not load");
	fuzz_expect_same(s, t, keeps_all, keeps_all);
	again = fuzz_write(t, write, &len2);
	if (len != len2 || memcmp(text, again, len) != 0)
		fuzz_fail("writing is not stable");
	free(again);
	free(text);
	dpl_schedule_destroy(t);
	dpl_schedule_destroy(s);
	return 0;
}

#endif /* DPL_FUZZ_COMMON_H */
