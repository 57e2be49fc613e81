/*
 * harness_rank.c - a rank's report and its end: the step it is in, the
 * note for the log, failing (conf_fail) or giving up because another
 * rank failed, and the memory that is freed when the rank ends.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness_internal.h"

struct conf_slot *conf__slot(struct conf_rank *rk)
{
	return &rk->w->slot[rk->rank];
}

void conf__free_all(struct conf_rank *rk)
{
	unsigned i;

	for (i = 0; i < rk->nmem; i++)
		free(rk->mem[i]);
	rk->nmem = 0;
}

static _Noreturn void rank_exit(struct conf_rank *rk, int code)
{
	if (conf_threads()) {
		conf__free_all(rk);
		pthread_exit(NULL);
	}
	_exit(code);
}

static _Noreturn void fail_state(struct conf_rank *rk, int state,
				 const char *fmt, va_list ap)
{
	struct conf_slot *s = conf__slot(rk);

	vsnprintf(s->msg, sizeof s->msg, fmt, ap);
	atomic_store(&s->state, state);
	atomic_store(&rk->w->abort, 1);
	rank_exit(rk, 1);
}

void conf_fail(struct conf_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fail_state(rk, CONF_ST_FAILED, fmt, ap);
}

void conf__give_up(struct conf_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fail_state(rk, CONF_ST_GAVE_UP, fmt, ap);
}

void conf_step(struct conf_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(conf__slot(rk)->step, sizeof conf__slot(rk)->step, fmt, ap);
	va_end(ap);
}

void conf_note(struct conf_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(conf__slot(rk)->note, sizeof conf__slot(rk)->note, fmt, ap);
	va_end(ap);
}

bool conf_aborted(struct conf_rank *rk)
{
	return atomic_load(&rk->w->abort) != 0;
}

/* ------------------------------------------------------------------ */
/* Memory of the rank                                                  */

void *conf_alloc(struct conf_rank *rk, size_t bytes)
{
	void *p;

	if (rk->nmem == sizeof rk->mem / sizeof rk->mem[0])
		conf_fail(rk, "harness: more than %zu allocations",
			  sizeof rk->mem / sizeof rk->mem[0]);
	p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
	if (p == NULL)
		conf_fail(rk, "out of memory allocating %zu bytes", bytes);
	memset(p, 0, (bytes + 63) / 64 * 64 + 64);
	rk->mem[rk->nmem++] = p;
	return p;
}

void conf_free(struct conf_rank *rk, void *p)
{
	unsigned i;

	for (i = 0; i < rk->nmem; i++)
		if (rk->mem[i] == p) {
			free(p);
			rk->mem[i] = rk->mem[--rk->nmem];
			return;
		}
}

void *conf_reqs(struct conf_rank *rk, size_t n)
{
	return conf_alloc(rk, conf_req_stride(rk->ops) * (n ? n : 1));
}

void *conf_req(struct conf_rank *rk, void *pool, size_t i)
{
	return (unsigned char *)pool + conf_req_stride(rk->ops) * i;
}
