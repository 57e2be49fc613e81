/*
 * harness_internal.h - what the harness's own sources share and the tests
 * do not see: slot states, the idle turn of every bounded wait, giving
 * up, the job's timeout and meeting points.
 */
#ifndef DPL_CONF_HARNESS_INTERNAL_H
#define DPL_CONF_HARNESS_INTERNAL_H

#include "harness.h"

/* Slot states. */
#define CONF_ST_RUNNING 0
#define CONF_ST_DONE 1
#define CONF_ST_FAILED 2
#define CONF_ST_GAVE_UP 3

/* How long ranks get to report after the supervisor gives up. */
#define CONF_GRACE_NS (3ull * 1000000000ull)

/* One idle turn of a waiting loop (harness_calls.c): give up on abort
 * or deadline, progress, and back off after a while. */
struct conf_idle {
	uint64_t start;
	unsigned n;
};
void conf__idle_turn(struct conf_rank *rk, struct conf_idle *id,
		     const char *what);

/* The rank's report slot; stop the rank because another one failed. */
struct conf_slot *conf__slot(struct conf_rank *rk);
_Noreturn void conf__give_up(struct conf_rank *rk, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Free what conf_alloc handed out. */
void conf__free_all(struct conf_rank *rk);
/* Fail the rank if its exchange's guard recorded a forbidden use. */
void conf__oob_check(struct conf_rank *rk);

void conf__sleep_us(unsigned us);
/* A fresh meeting point of the registration's kind; 0 or -1. */
int conf__make_boot(char *buf, size_t size);
/* params.timeout_ms of the job being run (conf_run sets it). */
void conf__set_job_timeout_ms(uint32_t ms);
uint32_t conf__job_timeout_ms(void);

#endif /* DPL_CONF_HARNESS_INTERNAL_H */
