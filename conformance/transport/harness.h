/*
 * harness.h - the conformance battery's world: ranks as forked processes
 * (or as threads for in-process transports), a barrier and flags in
 * shared memory, bounded waits, the host side of the rendezvous, and the
 * checks every call goes through.
 *
 * The battery is written against dpl/transport.h: every post, test,
 * progress, cancel and wait goes through the checked layer
 * (dpl_transport_isend() and its siblings), never through the table. The
 * battery plays the host: in a job of processes each rank opens dpl's
 * bootstrap (dpl/bootstrap.h) on the job's loopback root and hands its
 * out-of-band exchange to init (params.oob); ranks that are threads of
 * an in-process transport meet through params.world instead.
 *
 * A test describes a job (world size, what each rank does) and conf_run()
 * starts the ranks, waits for them with a deadline and reports the first
 * failure through Criterion in the test process. Rank code never uses
 * Criterion's asserts: it calls conf_expect()/conf_fail(), which record
 * the failure, stop the rank and make the other ranks give up at their
 * next wait.
 *
 * What a backend needs from its registration comes from the environment
 * (see ../README.md): DPL_CONF_RANKS (processes|threads),
 * DPL_CONF_BOOTSTRAP (tcp|name), DPL_CONF_OPTIONS, and the numbers of the
 * size, time and leak checks.
 *
 * The harness's sources, one job each: harness_env.c (knobs, the table,
 * meeting points), harness_rank.c (a rank's report, failure and memory),
 * harness_calls.c (checked calls, bounded waits, barriers),
 * harness_msg.c (request sets, exchanges, data patterns),
 * harness_open.c (the host's exchange, opening and closing),
 * harness_run.c (launching and supervising the ranks of a job),
 * harness_proc.c (process state for the leak checks).
 */
#ifndef DPL_CONF_HARNESS_H
#define DPL_CONF_HARNESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dpl/transport.h>

#define CONF_MAX_RANKS 8
#define CONF_FLAGS 32
#define CONF_BLOB (256 * 1024)

/* How the ranks of a job meet (DPL_CONF_BOOTSTRAP). */
enum conf_boot {
	CONF_BOOT_TCP, /* dpl's bootstrap on "127.0.0.1:<free port>";
			  params.oob is its exchange */
	CONF_BOOT_NAME /* params.world is a name unique to the job;
			  params.oob is NULL */
};

/* One rank's report, in shared memory. */
struct conf_slot {
	atomic_int state; /* 0 running, 1 finished, 2 failed */
	char step[160];   /* what the rank was doing last */
	char msg[1024];   /* why it failed */
	char note[512];   /* a line for the test log */
	double val[16];   /* numbers the test reads back */
};

/* Shared by the ranks of one job (anonymous shared memory). */
struct conf_world {
	uint32_t size;
	atomic_uint arrived;
	atomic_uint gen;
	atomic_int abort;             /* a rank failed: everyone gives up */
	atomic_long flag[CONF_FLAGS]; /* test-specific signals */
	char boot[256];               /* the job's meeting point: the
					 bootstrap's root or the world name */
	struct conf_slot slot[CONF_MAX_RANKS];
	_Alignas(64) unsigned char blob[CONF_BLOB]; /* test-specific data */
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

/* What rank code works with. */
struct conf_rank {
	struct conf_world *w;
	uint32_t rank;
	uint32_t size;
	const struct dpl_transport_ops *ops;
	dpl_transport *t; /* the open context, or NULL */
	void *arg;        /* the test's argument */
	uint64_t deadline_ns;
	void *mem[64];    /* allocations freed when the rank ends */
	unsigned nmem;
	struct conf_oob oob; /* the guard of the rank's opens */
};

typedef void (*conf_rank_fn)(struct conf_rank *rk);

/* A job. */
struct conf_job {
	uint32_t size;        /* ranks */
	conf_rank_fn fn;      /* run by every rank */
	void *arg;
	bool no_open;         /* the rank opens and closes itself */
	uint32_t timeout_ms;  /* params.timeout_ms; 0 = conf_timeout_ms() */
	unsigned deadline_s;  /* whole job; 0 = 60 */
	uint32_t may_die;     /* ranks (bit mask) allowed to die by SIGKILL */
	const char *boot;     /* reuse this meeting point, or NULL */
	char boot_used[256];  /* out: the meeting point of the job */
	double val[CONF_MAX_RANKS][16]; /* out: the ranks' numbers */
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
long conf_env_long(const char *name, long def, long min, long max);
double conf_env_double(const char *name, double def);
bool conf_has(uint64_t cap);

/*
 * conf_run - run a job; returns when every rank finished, failed or the
 * deadline passed, and fails the Criterion test with the ranks' messages
 * when one failed.
 */
void conf_run(struct conf_job *job);

/* Open with the job's meeting point and timeout; fails the rank on error. */
void conf_open(struct conf_rank *rk);
/*
 * conf_try_open - open rank `rank` of `size` at the meeting point `boot`
 * the way the registration says: with DPL_CONF_BOOTSTRAP=tcp, open dpl's
 * bootstrap on root `boot` (it waits for every rank of `size`), hand its
 * exchange to init and close it once dpl_transport_open returned; with
 * name, params.world = boot and no exchange. Returns the bootstrap's
 * error when the ranks did not meet, else dpl_transport_open's.
 */
int conf_try_open(struct conf_rank *rk, const char *boot, uint32_t rank,
		  uint32_t size, uint32_t timeout_ms, dpl_transport **out);
/*
 * conf_open_with - dpl_transport_open with the exchange `oob` (NULL for
 * none; wrapped in the rank's guard, struct conf_oob) and the world name
 * `world` (may be NULL). A forbidden use of the exchange fails the rank.
 */
int conf_open_with(struct conf_rank *rk, const struct dpl_oob *oob,
		   const char *world, uint32_t rank, uint32_t size,
		   uint32_t timeout_ms, dpl_transport **out);
/* An exchange of a world of one rank, in memory: allgather copies the
 * rank's own bytes, barrier returns; for checks that need no peers. */
const struct dpl_oob *conf_solo_oob(void);
/* Close the rank's context; a forbidden use of the exchange since its
 * open fails the rank. */
void conf_close(struct conf_rank *rk);
/* rank 0 picks a fresh meeting point for the next job of the same
 * ranks; every rank calls it (it is a barrier). */
void conf_new_boot(struct conf_rank *rk);

_Noreturn void conf_fail(struct conf_rank *rk, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void conf_step(struct conf_rank *rk, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void conf_note(struct conf_rank *rk, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
#define conf_expect(rk, cond, ...)                                           \
	do {                                                                 \
		if (!(cond))                                                 \
			conf_fail((rk), __VA_ARGS__);                        \
	} while (0)

/* Barrier of the whole job (progresses the rank's context meanwhile). */
void conf_barrier(struct conf_rank *rk);
/* Barrier of `n` ranks, for jobs where a rank died. */
void conf_barrier_n(struct conf_rank *rk, uint32_t n);
/* Wait until flag `i` is at least `v` (progressing meanwhile). */
void conf_wait_flag(struct conf_rank *rk, unsigned i, long v);
void conf_set_flag(struct conf_rank *rk, unsigned i, long v);
long conf_get_flag(struct conf_rank *rk, unsigned i);
bool conf_aborted(struct conf_rank *rk);

/* Memory freed when the rank ends; zeroed; aligned to 64 bytes. */
void *conf_alloc(struct conf_rank *rk, size_t bytes);
void conf_free(struct conf_rank *rk, void *p);
/* n request slots of the table's req_size; conf_req(rk, pool, i). */
void *conf_reqs(struct conf_rank *rk, size_t n);
void *conf_req(struct conf_rank *rk, void *pool, size_t i);
size_t conf_req_stride(const struct dpl_transport_ops *ops);

/* Checked calls: the code must be 0, DPL_EAGAIN or a dpl error. */
int conf_check_code(struct conf_rank *rk, int rc, const char *what);
int conf_progress(struct conf_rank *rk);
/* Progress for `ms` milliseconds (so that messages arrive). */
void conf_progress_for(struct conf_rank *rk, unsigned ms);
/* Post, retrying DPL_EAGAIN with progress (and testing the set given,
 * if any) until the deadline; any other error fails the rank. */
struct conf_set;
void conf_send(struct conf_rank *rk, void *req, uint32_t peer, uint64_t tag,
	       const void *buf, size_t len, struct conf_set *s);
void conf_recv(struct conf_rank *rk, void *req, uint32_t peer, uint64_t tag,
	       void *buf, size_t len, struct conf_set *s);
/* Wait for one request; returns its final code (never DPL_EAGAIN). */
int conf_wait(struct conf_rank *rk, void *req, const char *what);
/* Wait with a bound in ms; returns DPL_EAGAIN if still pending. */
int conf_wait_ms(struct conf_rank *rk, void *req, unsigned ms);

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
	size_t n;     /* slots used */
	size_t cap;
	int *rc;      /* final code per slot; DPL_EAGAIN while pending */
	size_t left;  /* pending */
	size_t *order; /* completion order (slot indices) */
	size_t done;
	struct conf_queued *q; /* per slot, for queued sends */
	size_t queued;         /* sends queued so far */
};
void conf_set_init(struct conf_rank *rk, struct conf_set *s, size_t cap);
void *conf_set_next(struct conf_set *s); /* storage for the next post */
void conf_set_added(struct conf_set *s); /* the post succeeded */
/* Test every pending request once; returns how many finished. */
size_t conf_set_poll(struct conf_rank *rk, struct conf_set *s);
/*
 * conf_send_early - post a send into the next slot of `s` before the
 * peer posted its receive. A backend may push back (DPL_EAGAIN) until
 * the receiver makes room; after 200 ms of that, this send and every
 * later one of the set are queued instead (keeping their order) and
 * conf_set_flush posts them once the receiver is known to be posting.
 */
void conf_send_early(struct conf_rank *rk, struct conf_set *s, uint32_t peer,
		     uint64_t tag, const void *buf, size_t len);
void conf_set_flush(struct conf_rank *rk, struct conf_set *s);
/* Wait for all; fails the rank at the deadline naming `what`. */
void conf_set_wait(struct conf_rank *rk, struct conf_set *s,
		   const char *what);

/* Send `len` bytes to `peer` and receive `len` from it on `tag` at once,
 * checking the data (seeded by the sender's rank and `seed`). */
void conf_exchange(struct conf_rank *rk, uint32_t peer, uint64_t tag,
		   size_t len, uint64_t seed);
/* A fresh "127.0.0.1:<port>" whatever the bootstrap kind; 0 or -1. */
int conf_make_root(char *buf, size_t size);

/* Data patterns. */
void conf_fill(void *buf, size_t len, uint64_t seed);
/* Offset of the first byte that differs from the pattern, or -1. */
long long conf_verify(const void *buf, size_t len, uint64_t seed);

/* Process state counts (for leak checks); -1 when unavailable. */
int conf_count_fds(void);
int conf_count_threads(void);
int conf_count_shm(void); /* /dev/shm entries matching DPL_CONF_SHM_GLOB */
/* The /dev/shm entries (matching DPL_CONF_SHM_GLOB) now, as a malloc'd
 * list of NUL-terminated names ending with an empty one; NULL when
 * /dev/shm cannot be read. */
char *conf_shm_snapshot(void);
/* How many entries are in `now` but not in `before`; their names, comma
 * separated, into buf. */
int conf_shm_new(const char *before, const char *now, char *buf,
		 size_t size);
/* Every TCP/UDP socket of this process is bound to a loopback address;
 * otherwise returns false and describes the first bad one in `why`. */
bool conf_sockets_loopback(char *why, size_t size, int *nsockets);

/* Sleep, resuming after signals. Clocks are dpl_clock_ns(). */
void conf_sleep_ms(unsigned ms);

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
