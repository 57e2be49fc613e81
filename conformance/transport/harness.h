/*
 * harness.h - what the conformance battery adds to dpl's jobs of ranks
 * (tests/support/test_job.h): the knobs of its registration, the table
 * under test, the guard around the host's exchange, opening through it,
 * and the checked calls every post, test and progress goes through.
 *
 * A test describes a job (struct conf_job: world size, what each rank
 * does) and conf_run() runs it as a job of test_job: the ranks are
 * forked processes, or threads for an in-process transport
 * (DPL_CONF_RANKS); each opens the table under test as the battery's
 * host does (dpl's bootstrap on the job's loopback root with its
 * exchange in params.oob, or a world name in params.world:
 * DPL_CONF_BOOTSTRAP), runs the test's function and closes after a
 * barrier of the ranks that are to survive. A failing rank fails the
 * Criterion test with test_job's report.
 *
 * Rank code is written against test_job (struct tj_rank, TJ_CHECK,
 * tj_step, tj_barrier, tj_wait, tj_alloc, tj_fill ...) and the checked
 * calls below. Every code a transport call returns, in test_job's waits
 * as here, must be 0, DPL_EAGAIN or a dpl error, and progress must not
 * fail (conf_check_code); the battery never calls the table directly.
 *
 * What a backend needs from its registration comes from the environment
 * (see ../README.md): DPL_CONF_RANKS (processes|threads),
 * DPL_CONF_BOOTSTRAP (tcp|name), DPL_CONF_OPTIONS, DPL_CONF_SHM_GLOB and
 * the numbers of the size, time and leak checks.
 *
 * The harness's sources, one job each: harness_env.c (knobs, the
 * table), harness_open.c (the guard, opening and closing),
 * harness_calls.c (checked codes and posts), harness_msg.c (request
 * sets and exchanges), harness_run.c (a job of the battery).
 */
#ifndef DPL_CONF_HARNESS_H
#define DPL_CONF_HARNESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dpl/transport.h>

#include "test_job.h"

#define CONF_MAX_RANKS 8
#define CONF_BLOB (256 * 1024) /* shared user memory of a job (tj_user) */

/* How the ranks of a job meet (DPL_CONF_BOOTSTRAP). */
enum conf_boot {
	CONF_BOOT_TCP, /* dpl's bootstrap on "127.0.0.1:<free port>";
			  params.oob is its exchange */
	CONF_BOOT_NAME /* params.world is a name unique to the job;
			  params.oob is NULL */
};

/*
 * The exchange the battery hands to init: it forwards to the real one
 * (dpl's bootstrap, or a test's own) while init runs and records every
 * use the contract forbids (a call after init returned, from another
 * thread than the one in dpl_transport_open(), a blob outside
 * 1..DPL_OOB_BLOB_MAX bytes). The rank fails with that record.
 */
struct conf_oob {
	struct dpl_oob oob;          /* what params.oob points to */
	const struct dpl_oob *inner; /* forwarded to while init runs */
	pthread_t thread;            /* the thread in dpl_transport_open */
	atomic_int in_init;          /* 1 while dpl_transport_open runs */
	atomic_uint calls;           /* allgathers and barriers forwarded */
	atomic_int noted;            /* bad[] holds a violation */
	char bad[256];               /* the first violation, or "" */
};

/* What every rank of a battery job runs. */
typedef void (*conf_rank_fn)(struct tj_rank *rk);

/* A job. */
struct conf_job {
	uint32_t size;        /* ranks, 1..CONF_MAX_RANKS */
	conf_rank_fn fn;      /* run by every rank */
	void *arg;            /* rk->arg */
	bool no_open;         /* the rank opens and closes itself */
	uint32_t timeout_ms;  /* params.timeout_ms; 0 = conf_timeout_ms() */
	unsigned deadline_s;  /* whole job; 0 = 60 */
	uint32_t may_die;     /* ranks (bit mask) allowed to die by SIGKILL */
	const char *boot;     /* reuse this meeting point, or NULL */
	char boot_used[256];  /* out: the meeting point of the job */
	double val[CONF_MAX_RANKS][TJ_VALS]; /* out: the ranks' rk->val */
};

/* The table under test (linked in, or loaded from DPL_CONF_TRANSPORT). */
const struct dpl_transport_ops *conf_ops(void);
/* The table linked into this binary, or NULL (dpl-conformance). */
const struct dpl_transport_ops *conf_linked_table(void);

/* Registration knobs. */
bool conf_threads(void);          /* ranks are threads of one process */
enum conf_boot conf_boot_kind(void);
const char *conf_options(void);   /* DPL_CONF_OPTIONS or NULL */
uint32_t conf_timeout_ms(void);   /* DPL_CONF_TIMEOUT_MS, default 10000 */
/* The /dev/shm entries the leak checks count (DPL_CONF_SHM_GLOB), or
 * NULL for all of them. */
const char *conf_shm_glob(void);
long conf_env_long(const char *name, long def, long min, long max);
double conf_env_double(const char *name, double def);
bool conf_has(uint64_t cap);

/*
 * conf_run - run a job; returns when every rank finished, failed or the
 * deadline passed, and fails the Criterion test with the ranks' report
 * when one failed. The ranks' notes go to the test's log.
 */
void conf_run(struct conf_job *job);

/* Open with the job's meeting point and timeout; fails the rank on error. */
void conf_open(struct tj_rank *rk);
/*
 * conf_try_open - open rank `rank` of `size` at the meeting point `boot`
 * the way the registration says: with DPL_CONF_BOOTSTRAP=tcp, open dpl's
 * bootstrap on root `boot` (it waits for every rank of `size`), hand its
 * exchange to init and close it once dpl_transport_open returned; with
 * name, params.world = boot and no exchange. Returns the bootstrap's
 * error when the ranks did not meet, else dpl_transport_open's.
 */
int conf_try_open(struct tj_rank *rk, const char *boot, uint32_t rank,
		  uint32_t size, uint32_t timeout_ms, dpl_transport **out);
/*
 * conf_open_with - dpl_transport_open with the exchange `oob` (NULL for
 * none; wrapped in the rank's guard, struct conf_oob) and the world name
 * `world` (may be NULL). A forbidden use of the exchange fails the rank.
 */
int conf_open_with(struct tj_rank *rk, const struct dpl_oob *oob,
		   const char *world, uint32_t rank, uint32_t size,
		   uint32_t timeout_ms, dpl_transport **out);
/* Close the rank's context; a forbidden use of the exchange since its
 * open fails the rank. */
void conf_close(struct tj_rank *rk);

/*
 * conf_check_code - fail the rank unless `rc` is 0, DPL_EAGAIN or a dpl
 * error, and when `what` is "progress" and rc is negative; returns rc.
 * It is also the check of every battery job (struct tj_job, check).
 */
int conf_check_code(struct tj_rank *rk, int rc, const char *what);

/* Post, retrying DPL_EAGAIN with progress (and testing the set given,
 * if any) until the deadline; any other error fails the rank. */
struct conf_set;
void conf_send(struct tj_rank *rk, void *req, uint32_t peer, uint64_t tag,
	       const void *buf, size_t len, struct conf_set *s);
void conf_recv(struct tj_rank *rk, void *req, uint32_t peer, uint64_t tag,
	       void *buf, size_t len, struct conf_set *s);

/* A send queued by conf_send_early until conf_set_flush posts it. */
struct conf_queued {
	uint32_t peer;
	uint64_t tag;
	const void *buf;
	size_t len;
};

/* rc of a slot whose send is queued, not posted yet. */
#define CONF_QUEUED 1

/* A set of requests completed in any order. */
struct conf_set {
	void *pool;
	size_t stride; /* bytes between two requests (tj_req_stride) */
	size_t n;     /* slots used */
	size_t cap;
	int *rc;      /* final code per slot; DPL_EAGAIN while pending */
	size_t left;  /* pending */
	size_t *order; /* completion order (slot indices) */
	size_t done;
	struct conf_queued *q; /* per slot, for queued sends */
	size_t queued;         /* sends queued so far */
};
void conf_set_init(struct tj_rank *rk, struct conf_set *s, size_t cap);
void *conf_set_next(struct conf_set *s); /* storage for the next post */
void conf_set_added(struct conf_set *s); /* the post succeeded */
/* Test every pending request once; returns how many finished. */
size_t conf_set_poll(struct tj_rank *rk, struct conf_set *s);
/*
 * conf_send_early - post a send into the next slot of `s` before the
 * peer posted its receive. A backend may push back (DPL_EAGAIN) until
 * the receiver makes room; after 200 ms of that, this send and every
 * later one of the set are queued instead (keeping their order) and
 * conf_set_flush posts them once the receiver is known to be posting.
 */
void conf_send_early(struct tj_rank *rk, struct conf_set *s, uint32_t peer,
		     uint64_t tag, const void *buf, size_t len);
void conf_set_flush(struct tj_rank *rk, struct conf_set *s);
/* Wait for all; fails the rank at the deadline naming `what`. */
void conf_set_wait(struct tj_rank *rk, struct conf_set *s,
		   const char *what);

/* Send `len` bytes to `peer` and receive `len` from it on `tag` at once,
 * checking the data (seeded by the sender's rank and `seed`). */
void conf_exchange(struct tj_rank *rk, uint32_t peer, uint64_t tag,
		   size_t len, uint64_t seed);

/*
 * Counting allocator hooks (alloc_count.c): the battery's executable
 * replaces malloc, calloc, realloc, free and the aligned allocators of
 * the whole process (forwarding to glibc's), and counts their calls
 * while armed. conf_alloc_hooked() - whether the hooks see the
 * libraries' allocations (false under AddressSanitizer or
 * ThreadSanitizer and off glibc; checked with strdup), and resets the
 * count. conf_alloc_arm(true/false) - arm or disarm (nested: counting
 * runs while any rank of the process has armed it); the count is of the
 * whole process, every thread. conf_alloc_calls() - calls counted since
 * the last reset; `first` gets the first one, e.g. "malloc(64)".
 * conf_alloc_reset() - zero the count, and find the code of the
 * libraries DPL_CONF_ALLOC_ALLOW names (comma-separated parts of their
 * file names, e.g. "libfabric"): their own calls are counted apart, in
 * conf_alloc_allowed(). Thread-safe; the hooks never allocate.
 */
bool conf_alloc_hooked(void);
void conf_alloc_arm(bool on);
void conf_alloc_reset(void);
unsigned long long conf_alloc_calls(char *first, size_t size);
unsigned long long conf_alloc_allowed(void);

/* Skip unless the backend declares a capability. */
#define CONF_REQUIRE_CAP(cap, what)                                          \
	do {                                                                 \
		if (!conf_has(cap))                                          \
			cr_skip_test("%s does not declare %s (%s)",          \
				     conf_ops()->name, #cap, what);          \
	} while (0)

/* Skip unless the table has the optional member (DPL_HAS_OP). */
#define CONF_REQUIRE_OP(member, what)                                        \
	do {                                                                 \
		if (!DPL_HAS_OP(conf_ops(), member))                         \
			cr_skip_test("%s has no %s (%s)", conf_ops()->name,  \
				     #member, what);                         \
	} while (0)

#define CONF_REQUIRE_PROCESSES(why)                                          \
	do {                                                                 \
		if (conf_threads())                                          \
			cr_skip_test("ranks of %s are threads of one "       \
				     "process (DPL_CONF_RANKS=threads): %s", \
				     conf_ops()->name, why);                 \
	} while (0)

#endif /* DPL_CONF_HARNESS_H */
