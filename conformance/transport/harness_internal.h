/*
 * harness_internal.h - what the harness's own sources share and the tests
 * do not see: the battery's state of a rank and the guard's check.
 */
#ifndef DPL_CONF_HARNESS_INTERNAL_H
#define DPL_CONF_HARNESS_INTERNAL_H

#include <stdio.h>

#include "harness.h"

/* The battery's state of a rank (rk->ext, set by conf_run). */
struct conf_ext {
	struct conf_oob oob;  /* the guard of the rank's opens */
	uint32_t timeout_ms;  /* params.timeout_ms of the job */
};

static inline struct conf_ext *conf__ext(struct tj_rank *rk)
{
	return rk->ext;
}

/* Fail the rank if its exchange's guard recorded a forbidden use. */
void conf__oob_check(struct tj_rank *rk);

/*
 * conf__report_xml - Criterion's reporter for --xml=FILE (report_xml.c):
 * main() registers it under the name "xml" in place of Criterion's own,
 * which drops the reasons of skipped tests. Writes the whole report to
 * `f`; called once, by Criterion, after the run.
 */
struct criterion_global_stats;
void conf__report_xml(FILE *f, struct criterion_global_stats *st);

#endif /* DPL_CONF_HARNESS_INTERNAL_H */
