/*
 * ofi_harness.h - multi-process jobs for the libfabric transport's tests.
 *
 * A test forks one process per rank; each meets the others through dpl's
 * bootstrap on a fresh loopback root address, opens dpl_transport_ofi
 * with the bootstrap's out-of-band exchange (closed once the transport
 * is open), runs a rank function and exits with its result: 102 when the
 * bootstrap failed, 100 when the transport did not open. libfabric is
 * only ever initialised in those processes, never in the test process
 * itself (contexts of one rank opened there fail before they touch it).
 * Ranks start with FI_PROVIDER unset (the provider comes from the job)
 * unless the job sets it. Rank functions must not use Criterion's
 * asserts: they use CHECK(), which records a message for the test to
 * report and returns from the rank function.
 */
#ifndef DPL_OFI_HARNESS_H
#define DPL_OFI_HARNESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <dpl/backend.h>
#include <dpl/transport_ofi.h>

#define H_MAX_RANKS 8
#define H_MSG 600

/* Memory shared by the test and its rank processes. */
struct h_shared {
	atomic_int flag[32];
	atomic_uint_fast64_t t[32];
	atomic_int pid[H_MAX_RANKS];
	char msg[H_MAX_RANKS][H_MSG];
	char note[H_MAX_RANKS][H_MSG]; /* free-form text a rank reports */
};

struct h_rank {
	dpl_transport *t;
	const struct dpl_transport_ops *o;
	void *ctx;
	uint32_t rank;
	uint32_t n;
	struct h_shared *sh;
	const void *arg;
};

typedef int (*h_rank_fn)(struct h_rank *r);
/* Runs in the test process while the ranks run; may signal them. A
 * rank it reaps itself counts as exit 0 for the harness. */
typedef void (*h_ctl_fn)(struct h_shared *sh, const pid_t *pids, uint32_t n,
			 const void *arg);

struct h_job {
	const char *provider;   /* "tcp;ofi_rxm", "shm", or NULL */
	const char *options;    /* more options, or NULL */
	const char *env[H_MAX_RANKS]; /* "NAME=VALUE" set in that rank only */
	const char *netns[H_MAX_RANKS]; /* network namespace to enter */
	const char *root_host;  /* rank 0's bootstrap address (default
				   127.0.0.1) */
	bool keep_files;        /* leave the shm files of killed ranks */
	uint32_t n;
	uint32_t timeout_ms;    /* transport timeout (0 = 20000) */
	uint32_t deadline_ms;   /* whole job (0 = 60000) */
	h_rank_fn fn;
	h_ctl_fn ctl;
	const void *arg;
	/* results */
	int status[H_MAX_RANKS]; /* wait status */
	pid_t pid[H_MAX_RANKS];
	struct h_shared *sh;
	bool timed_out;
};

/* The out-of-band exchange of a world of one rank (the test process's
 * own contexts). */
const struct dpl_oob *h_self_oob(void);

/* Run a job; the shared area stays mapped until h_job_free. Returns 0
 * when every rank exited with 0. */
int h_job_run(struct h_job *j);
/* One line per failed rank, into buf. */
const char *h_job_report(const struct h_job *j, char *buf, size_t size);
void h_job_free(struct h_job *j);
/* Exit code of rank r, or -signal. */
int h_exit_code(const struct h_job *j, uint32_t r);
/* After h_job_run: NULL when rank `victim` died of SIGKILL and every
 * other rank exited with 0; else what went wrong, in buf. */
const char *h_job_killed_one(const struct h_job *j, uint32_t victim,
			     char *buf, size_t size);
/* A job of n ranks over `prov` (arg and opts may be NULL): run, free.
 * NULL when every rank exited with 0, else h_job_report's text in buf. */
const char *h_run(const char *prov, uint32_t n, h_rank_fn fn,
		  const void *arg, const char *opts, char *buf, size_t size);
/* A job of n ranks over `prov` whose ctl kills rank `victim`: run,
 * check with h_job_killed_one, free. NULL, or what went wrong in buf. */
const char *h_run_killing(const char *prov, uint32_t n, h_rank_fn fn,
			  h_ctl_fn ctl, uint32_t victim, char *buf,
			  size_t size);

/* Inside a rank. */
#define CHECK(r, cond, ...)                                                   \
	do {                                                                  \
		if (!(cond)) {                                                \
			h_fail((r), __LINE__, #cond, __VA_ARGS__);            \
			return 1;                                             \
		}                                                             \
	} while (0)

void h_fail(struct h_rank *r, int line, const char *cond, const char *fmt,
	    ...) __attribute__((format(printf, 4, 5)));
void *h_req(struct h_rank *r);
/* Progress until the request completes or ms pass; its status or
 * DPL_ETIMEDOUT. */
int h_wait(struct h_rank *r, void *req, uint32_t ms);
/* Progress until all n requests complete; 0, the first non-zero status,
 * or DPL_ETIMEDOUT. */
int h_wait_all(struct h_rank *r, void **req, uint32_t n, uint32_t ms);
/* Blocking send/receive of a small message (control between ranks). */
int h_send(struct h_rank *r, uint32_t peer, uint64_t tag, const void *buf,
	   size_t len);
int h_recv(struct h_rank *r, uint32_t peer, uint64_t tag, void *buf,
	   size_t len);
/* Progress for ms milliseconds. */
void h_spin(struct h_rank *r, uint32_t ms);
/* Pattern fill and check (returns the first bad index or SIZE_MAX). */
void h_fill(void *buf, size_t len, uint32_t seed);
size_t h_check(const void *buf, size_t len, uint32_t seed);
/* Wait for sh->flag[i] >= v for up to ms; true when it did. */
bool h_wait_flag(struct h_shared *sh, int i, int v, uint32_t ms);

/* Count this process's open fds and threads. */
int h_count_fds(void);
int h_count_threads(void);
/* Whether /dev/shm holds a libfabric shm file of process pid. */
bool h_shm_has_pid(pid_t pid);

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
