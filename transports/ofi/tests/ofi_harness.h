/*
 * ofi_harness.h - what the libfabric transport's tests add to test_job
 * (test_job.h): ranks that open dpl_transport_ofi over the provider the
 * job names, each case run once over tcp;ofi_rxm and once over shm.
 *
 * Ranks are forked processes. Each enters the network namespace the job
 * names for it, if any, meets the others through dpl's bootstrap on the
 * job's root address, opens the transport with the bootstrap's exchange
 * (closed once the transport is open), runs the job's rank function and
 * closes the context when the function returns. A rank whose open fails
 * fails with "open: " and the reason. libfabric is only ever initialised
 * in those processes, never in the test process itself (contexts of one
 * rank opened there fail before they touch it). Ranks start with
 * FI_PROVIDER unset (the provider comes from the job) unless the job
 * sets it for them. Rank code fails itself with CHECK() and uses
 * test_job's waits, messages, flags and patterns; it calls the ops
 * table (r->ops) on ofi_ctx(r) where a case is about what the table
 * itself returns.
 */
#ifndef DPL_OFI_HARNESS_H
#define DPL_OFI_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include <dpl/backend.h>
#include <dpl/transport_ofi.h>

#include "test_job.h"

/* A job of ofi ranks. Zero fields are defaults. */
struct ofi_job {
	/* size, arg, watch, watch_arg, may_die, deadline_ms; the report
	 * and what tj_job_*() read after the run. tj.fn, tj.meet and
	 * tj.leak_check are the harness's. */
	struct tj_job tj;
	tj_rank_fn fn;          /* run by every rank once it is open */
	const char *provider;   /* "tcp;ofi_rxm", "shm", or NULL */
	const char *options;    /* more options, or NULL */
	const char *env[TJ_MAX_RANKS];   /* "NAME=VALUE" set in that rank */
	const char *netns[TJ_MAX_RANKS]; /* network namespace to enter */
	const char *root_host;  /* rank 0's bootstrap address (default
				   127.0.0.1) */
	bool keep_files;        /* leave the shm files of killed ranks */
	uint32_t timeout_ms;    /* transport timeout (0 = 20000) */
};

/* A job of n ranks over `prov` (NULL: the transport chooses) running
 * fn; the other fields zero. */
void ofi_job_init(struct ofi_job *j, const char *prov, uint32_t n,
		  tj_rank_fn fn);
/* Run the job (tj_job_run()); then, unless keep_files, remove the shm
 * files killed ranks left, as the next job would, so that the suite
 * leaves /dev/shm as it found it. Returns tj_job_run()'s result. */
int ofi_job_run(struct ofi_job *j);

/* After ofi_job_run(): NULL when rank `victim` died of SIGKILL and
 * every other rank finished; else what went wrong, in buf. The job's
 * may_die names the victim. */
const char *ofi_job_killed_one(const struct ofi_job *j, uint32_t victim,
			       char *buf, size_t size);

/* A job of n ranks over `prov` (arg and opts may be NULL): run, free.
 * NULL when every rank finished, else the job's report in buf. */
const char *ofi_run(const char *prov, uint32_t n, tj_rank_fn fn, void *arg,
		    const char *opts, char *buf, size_t size);
/* A job of n ranks over `prov` whose watch SIGKILLs rank `victim`: run,
 * check with ofi_job_killed_one(), free. NULL, or what went wrong in
 * buf. */
const char *ofi_run_killing(const char *prov, uint32_t n, tj_rank_fn fn,
			    tj_watch_fn watch, uint32_t victim, char *buf,
			    size_t size);

/* ------------------------------------------------------------------ */
/* Inside a rank                                                       */

/* TJ_CHECK naming the condition that failed. */
#define CHECK(r, cond, ...) TJ_CHECK((r), (cond), #cond ": " __VA_ARGS__)

/* The rank's ofi context: what the ops table's members and
 * ofi_internal.h take. */
static inline void *ofi_ctx(const struct tj_rank *r)
{
	return r->ext;
}

/* n requests of the rank's context (tj_reqs(); tj_req() picks one),
 * filled with garbage as a caller's storage would be. */
static inline void *ofi_reqs(struct tj_rank *r, size_t n)
{
	void *q = tj_reqs(r, n);

	memset(q, 0xa5, tj_req_stride(r) * (n ? n : 1));
	return q;
}

/*
 * Wait for flag i to reach v without progressing the context, for the
 * cases that need the peer's messages left unread meanwhile. True when
 * it did within ms; gives up when another rank failed.
 */
static inline bool ofi_flag_wait_quiet(struct tj_rank *r, unsigned i,
				       int64_t v, unsigned ms)
{
	dpl_transport *t = r->t;
	int rc;

	r->t = NULL; /* tj_idle() then only yields and sleeps */
	rc = tj_flag_wait(r, i, v, ms);
	r->t = t;
	return rc == 0;
}

/* Progress until the job ends this rank (a signal of the watch, or
 * giving up when another rank failed). */
static inline _Noreturn void ofi_serve_until_killed(struct tj_rank *r)
{
	struct tj_idle id = {0, 0};

	for (;;)
		tj_idle(r, &id, "waiting to be killed");
}

/* Whether /dev/shm holds a libfabric shm file of process pid. */
static inline bool ofi_shm_has_pid(pid_t pid)
{
	char glob[32];

	snprintf(glob, sizeof glob, "%d:*", (int)pid);
	return tj_count_shm(glob) > 0;
}

/* A test run once over each provider: OFI_TEST(name, seconds) { body
 * using `prov` }. */
#define OFI_TEST(name, secs)                                                  \
	static void name##_run(const char *prov);                             \
	Test(ofi_tcp, name, .timeout = (secs))                                \
	{                                                                     \
		name##_run("tcp;ofi_rxm");                                    \
	}                                                                     \
	Test(ofi_shm, name, .timeout = (secs))                                \
	{                                                                     \
		name##_run("shm");                                            \
	}                                                                     \
	static void name##_run(const char *prov)

#endif /* DPL_OFI_HARNESS_H */
