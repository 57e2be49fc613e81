/*
 * harness_open.c - the battery as the host of a job: opening a rank's
 * transport (the host's part is test_job's: dpl's bootstrap on the
 * job's loopback root, or an in-process world name), the guard that
 * checks what init does with the host's out-of-band exchange, and
 * closing.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "harness_internal.h"

/* ------------------------------------------------------------------ */
/* The guard of the host's exchange                                    */

static void guard_note(struct conf_oob *g, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void guard_note(struct conf_oob *g, const char *fmt, ...)
{
	va_list ap;

	if (atomic_exchange(&g->noted, 1) != 0)
		return;
	va_start(ap, fmt);
	vsnprintf(g->bad, sizeof g->bad, fmt, ap);
	va_end(ap);
}

/* May the transport use the exchange now? Records why not. */
static bool guard_admits(struct conf_oob *g, const char *what)
{
	if (!atomic_load(&g->in_init)) {
		guard_note(g, "%s called after init returned (a transport "
			      "keeps no pointer to params.oob)",
			   what);
		return false;
	}
	if (!pthread_equal(pthread_self(), g->thread))
		guard_note(g, "%s called from another thread than the one "
			      "in dpl_transport_open()",
			   what);
	return true;
}

static int guard_allgather(void *user, const void *mine, size_t len,
			   void *all)
{
	struct conf_oob *g = user;

	if (!guard_admits(g, "allgather"))
		return dpl_set_error(DPL_EINVAL, "conformance: the host's "
						 "exchange is closed");
	if (len == 0 || len > DPL_OOB_BLOB_MAX) {
		guard_note(g, "allgather of %zu bytes: the contract allows "
			      "1..%d per call (larger data goes in several "
			      "calls)",
			   len, DPL_OOB_BLOB_MAX);
		return dpl_set_error(DPL_EINVAL, "conformance: allgather of "
						 "%zu bytes", len);
	}
	atomic_fetch_add(&g->calls, 1);
	return g->inner->allgather(g->inner->user, mine, len, all);
}

static int guard_barrier(void *user)
{
	struct conf_oob *g = user;

	if (!guard_admits(g, "barrier"))
		return dpl_set_error(DPL_EINVAL, "conformance: the host's "
						 "exchange is closed");
	atomic_fetch_add(&g->calls, 1);
	return g->inner->barrier(g->inner->user);
}

void conf__oob_check(struct tj_rank *rk)
{
	struct conf_oob *g = &conf__ext(rk)->oob;

	if (atomic_load(&g->noted))
		TJ_FAIL(rk, "%s: the host's out-of-band exchange: %s",
			rk->ops->name, g->bad);
}

/* ------------------------------------------------------------------ */
/* Opening and closing                                                 */

int conf_open_with(struct tj_rank *rk, const struct dpl_oob *oob,
		   const char *world, uint32_t rank, uint32_t size,
		   uint32_t timeout_ms, dpl_transport **out)
{
	struct conf_oob *g = &conf__ext(rk)->oob;
	struct dpl_transport_params p;
	int rc;

	conf__oob_check(rk);
	memset(&p, 0, sizeof p);
	p.rank = rank;
	p.world_size = size;
	p.world = world;
	p.options = conf_options();
	p.timeout_ms = timeout_ms;
	if (oob != NULL) {
		g->inner = oob;
		g->oob.allgather = guard_allgather;
		g->oob.barrier = guard_barrier;
		g->oob.user = g;
		g->thread = pthread_self();
		atomic_store(&g->calls, 0);
		atomic_store(&g->in_init, 1);
		p.oob = &g->oob;
	}
	rc = dpl_transport_open(rk->ops, &p, out);
	atomic_store(&g->in_init, 0);
	conf__oob_check(rk);
	return rc;
}

int conf_try_open(struct tj_rank *rk, const char *boot, uint32_t rank,
		  uint32_t size, uint32_t timeout_ms, dpl_transport **out)
{
	struct dpl_transport_params p;
	struct tj_host h;
	int rc;

	/* The host's rendezvous gets the registration's patience even
	 * when init is given a short liveness timeout. */
	memset(&p, 0, sizeof p);
	p.rank = rank;
	p.world_size = size;
	rc = tj_host_join(rk, boot,
			  timeout_ms > conf_timeout_ms() ? timeout_ms
							 : conf_timeout_ms(),
			  &p, &h);
	if (rc != 0)
		return rc;
	rc = conf_open_with(rk, p.oob, p.world, rank, size, timeout_ms, out);
	tj_host_leave(&h);
	return rc;
}

void conf_open(struct tj_rank *rk)
{
	dpl_transport *t = NULL;
	int rc;

	tj_step(rk, "opening rank %u of %u at '%s'", rk->rank, rk->size,
		tj_meet(rk));
	rc = conf_try_open(rk, tj_meet(rk), rk->rank, rk->size,
			   conf__ext(rk)->timeout_ms, &t);
	conf_check_code(rk, rc, "dpl_transport_open");
	if (rc != 0) {
		if (tj_aborted(rk))
			tj_give_up(rk, "gave up opening: another rank failed "
				   "(%s: %s)",
				   dpl_err_name(rc), dpl_last_error());
		TJ_FAIL(rk, "open rank %u of %u (bootstrap '%s'): %s: %s",
			rk->rank, rk->size, tj_meet(rk), dpl_err_name(rc),
			dpl_last_error());
	}
	rk->t = t;
}

void conf_close(struct tj_rank *rk)
{
	tj_step(rk, "closing rank %u", rk->rank);
	dpl_transport_close(rk->t);
	rk->t = NULL;
	conf__oob_check(rk);
}
