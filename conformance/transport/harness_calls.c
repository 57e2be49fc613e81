/*
 * harness_calls.c - the checked calls of rank code and its bounded
 * waits: every code a call returns must be 0, DPL_EAGAIN or a dpl error;
 * posts retry DPL_EAGAIN with progress until the rank's deadline; every
 * wait (for a request, a barrier, a peer's flag) progresses the context,
 * gives up when another rank failed and fails at the deadline. Everything
 * goes through the checked layer of dpl/transport.h, never the table.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>

#include "harness_internal.h"

static bool known_code(int rc)
{
	if (rc == 0 || rc == DPL_EUNKNOWN)
		return true;
	return rc < 0 && strcmp(dpl_err_name(rc), "DPL_EUNKNOWN") != 0;
}

int conf_check_code(struct conf_rank *rk, int rc, const char *what)
{
	if (!known_code(rc))
		conf_fail(rk, "%s returned %d, which is not a dpl error code "
			      "(backends map their errors to DPL_E*)",
			  what, rc);
	return rc;
}

int conf_progress(struct conf_rank *rk)
{
	int rc;

	if (rk->t == NULL)
		return 0;
	rc = dpl_transport_progress(rk->t);
	if (rc < 0) {
		conf_check_code(rk, rc, "progress");
		conf_fail(rk, "progress failed: %s (%s)", dpl_err_name(rc),
			  dpl_last_error());
	}
	return rc;
}

void conf_progress_for(struct conf_rank *rk, unsigned ms)
{
	uint64_t until = dpl_clock_ns() + (uint64_t)ms * 1000000ull;
	unsigned n = 0;

	while (dpl_clock_ns() < until) {
		conf_progress(rk);
		if ((++n & 255) == 0)
			sched_yield();
	}
}

void conf__idle_turn(struct conf_rank *rk, struct conf_idle *id,
		     const char *what)
{
	uint64_t now;

	if (id->n == 0)
		id->start = dpl_clock_ns();
	id->n++;
	conf_progress(rk);
	/* On a machine with more runnable threads than cores a spinning
	 * rank must let its peer run. */
	if ((id->n & 15) == 0)
		sched_yield();
	if ((id->n & 63) != 0)
		return;
	if (conf_aborted(rk))
		conf__give_up(rk, "gave up in '%s': another rank failed",
			      what);
	now = dpl_clock_ns();
	if (now > rk->deadline_ns)
		conf_fail(rk, "deadline passed while %s (step: %s)", what,
			  conf__slot(rk)->step);
	if (now - id->start < 2000000ull)
		return;
	if (rk->t != NULL && DPL_HAS_OP(rk->ops, wait)) {
		conf_check_code(rk, dpl_transport_wait(rk->t, 200000ull),
				"wait");
		return;
	}
	if (now - id->start >= 50000000ull)
		conf__sleep_us(50);
}

static void post(struct conf_rank *rk, bool send, void *req, uint32_t peer,
		 uint64_t tag, void *buf, size_t len, struct conf_set *s)
{
	const char *what = send ? "isend" : "irecv";
	struct conf_idle id = {0, 0};
	int rc;

	for (;;) {
		rc = send ? dpl_transport_isend(rk->t, req, peer, tag, buf,
						len, DPL_MEM_HOST)
			  : dpl_transport_irecv(rk->t, req, peer, tag, buf,
						len, DPL_MEM_HOST);
		conf_check_code(rk, rc, what);
		if (rc == 0)
			return;
		if (rc != DPL_EAGAIN)
			conf_fail(rk, "%s peer %u tag %#llx len %zu: %s (%s)",
				  what, peer, (unsigned long long)tag, len,
				  dpl_err_name(rc), dpl_last_error());
		if (s != NULL)
			conf_set_poll(rk, s);
		conf__idle_turn(rk, &id, what);
	}
}

void conf_send(struct conf_rank *rk, void *req, uint32_t peer, uint64_t tag,
	       const void *buf, size_t len, struct conf_set *s)
{
	post(rk, true, req, peer, tag, (void *)buf, len, s);
}

void conf_recv(struct conf_rank *rk, void *req, uint32_t peer, uint64_t tag,
	       void *buf, size_t len, struct conf_set *s)
{
	post(rk, false, req, peer, tag, buf, len, s);
}

int conf_wait(struct conf_rank *rk, void *req, const char *what)
{
	struct conf_idle id = {0, 0};
	int rc;

	for (;;) {
		rc = conf_check_code(rk, dpl_transport_test(rk->t, req),
				     "test");
		if (rc != DPL_EAGAIN)
			return rc;
		conf__idle_turn(rk, &id, what);
	}
}

int conf_wait_ms(struct conf_rank *rk, void *req, unsigned ms)
{
	uint64_t end = dpl_clock_ns() + (uint64_t)ms * 1000000ull;
	struct conf_idle id = {0, 0};
	int rc;

	for (;;) {
		rc = conf_check_code(rk, dpl_transport_test(rk->t, req),
				     "test");
		if (rc != DPL_EAGAIN || dpl_clock_ns() > end)
			return rc;
		conf__idle_turn(rk, &id, "a bounded wait");
	}
}

/* ------------------------------------------------------------------ */
/* Barriers and flags                                                  */

void conf_barrier_n(struct conf_rank *rk, uint32_t n)
{
	struct conf_world *w = rk->w;
	unsigned g = atomic_load(&w->gen);
	struct conf_idle id = {0, 0};

	if (atomic_fetch_add(&w->arrived, 1) + 1 == n) {
		atomic_store(&w->arrived, 0);
		atomic_fetch_add(&w->gen, 1);
		return;
	}
	while (atomic_load(&w->gen) == g)
		conf__idle_turn(rk, &id, "in a barrier");
}

void conf_barrier(struct conf_rank *rk)
{
	conf_barrier_n(rk, rk->size);
}

void conf_set_flag(struct conf_rank *rk, unsigned i, long v)
{
	atomic_store(&rk->w->flag[i], v);
}

long conf_get_flag(struct conf_rank *rk, unsigned i)
{
	return atomic_load(&rk->w->flag[i]);
}

void conf_wait_flag(struct conf_rank *rk, unsigned i, long v)
{
	struct conf_idle id = {0, 0};

	while (atomic_load(&rk->w->flag[i]) < v)
		conf__idle_turn(rk, &id, "waiting for a peer's signal");
}
