/*
 * fuzz_plan.c - libFuzzer target: the JSON plan reader. A plan that loads
 * rebuilds its schedule (dpl_plan_schedule, simulated when it builds), is
 * written back as the best plan of a report, and that text must load
 * again and write the same.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/json.h>
#include <dpl/plan.h>
#include <dpl/sim.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *text_of(const struct dpl_plan *pl, size_t *len)
{
	static struct dpl_plan_report r;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (f == NULL)
		fuzz_fail("open_memstream");
	memset(&r, 0, sizeof r);
	r.best = *pl;
	if (dpl_plan_write_json(&r, NULL, NULL, NULL, f) != 0)
		fuzz_fail("a loaded plan does not write");
	fclose(f);
	return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct dpl_plan a, b;
	struct dpl_plan_sim ps;
	dpl_schedule *s = NULL;
	char *t1, *t2;
	size_t n1, n2;

	if (dpl_plan_read_json((const char *)data, size, &a) != 0) {
		if (dpl_last_error()[0] == '\0')
			fuzz_fail("failure without a message");
		return 0;
	}
	/* Big M is slow, not wrong: rebuild only what builds quickly. */
	if (a.microbatches <= 4096 &&
	    dpl_plan_schedule(&a, &s, &ps) == 0) {
		dpl_sim *sim = NULL;

		if (dpl_sim_run(s, &ps.params, &sim) != 0)
			fuzz_fail("the plan's schedule does not simulate");
		dpl_sim_destroy(sim);
		dpl_schedule_destroy(s);
	}
	t1 = text_of(&a, &n1);
	if (dpl_plan_read_json(t1, n1, &b) != 0)
		fuzz_fail("the written plan does not load");
	t2 = text_of(&b, &n2);
	if (n1 != n2 || memcmp(t1, t2, n1) != 0)
		fuzz_fail("writing is not stable");
	free(t1);
	free(t2);
	return 0;
}
