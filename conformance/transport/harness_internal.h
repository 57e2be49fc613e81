/*
 * harness_internal.h - what the harness's own sources share and the tests
 * do not see: the battery's state of a rank and the guard's check.
 */
#ifndef DPL_CONF_HARNESS_INTERNAL_H
#define DPL_CONF_HARNESS_INTERNAL_H

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

#endif /* DPL_CONF_HARNESS_INTERNAL_H */
