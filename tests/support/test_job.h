/*
 * test_job.h - jobs of ranks for dpl's tests: N ranks run as forked
 * processes or as threads of the test process, memory they share with
 * the test, a deadline after which stragglers are killed, a watch that
 * runs in the test process meanwhile, and a report naming every rank
 * that failed and why. Static library dpl_test_job; needs no test
 * framework (the test turns the report into its own failure).
 *
 * A test fills in a struct tj_job (zero fields are defaults), calls
 * tj_job_run(), reads what the ranks left (tj_job_slot(), tj_job_user(),
 * tj_job_flag()) and calls tj_job_free(). Every rank runs job.fn with
 * its own struct tj_rank.
 *
 * Rank code never uses the test framework's asserts: it ends itself with
 * TJ_FAIL()/TJ_CHECK(), which record file:line and a message in the
 * rank's slot, make the other ranks give up at their next wait and end
 * the rank (a process exits with 1, a thread exits). A rank that returns
 * from job.fn has finished.
 *
 * Every wait of this file is bounded. A rank's waits end at the rank's
 * deadline (a little before the job's, so that the rank reports what it
 * was doing): the rank fails there, naming what it waited for. They also
 * end when another rank failed: the rank then gives up (it is reported
 * only beside the rank that failed). The job's deadline kills the ranks
 * still running (SIGKILL); ranks that are threads cannot be killed and
 * are reported as still running, and the job's memory is then left
 * allocated for them.
 *
 * The host part of opening a transport (tj_open(), tj_host_join()):
 * ranks that are processes meet through dpl's bootstrap
 * (dpl/bootstrap.h) on the job's loopback root (127.0.0.1 and a port
 * that loopback_port.h found free), hand its exchange to init in
 * params.oob and close it once dpl_transport_open() returned; ranks that
 * are threads pass a name unique to the job in params.world. A job may
 * choose the other way (struct tj_job, meet_kind).
 *
 * Threads: the test process calls the tj_job_* functions from one
 * thread; a rank calls the rank functions (those taking a struct tj_rank)
 * from its own thread only. The watch runs on a thread of its own.
 */
#ifndef DPL_TEST_JOB_H
#define DPL_TEST_JOB_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <dpl/bootstrap.h>
#include <dpl/transport.h>

#define TJ_MAX_RANKS 16 /* ranks of one job */
#define TJ_FLAGS 32     /* shared 64-bit flags of one job */
#define TJ_VALS 16      /* numbers a rank hands back */

/* How the ranks of a job run. */
enum tj_mode {
	TJ_PROCESSES, /* one forked process per rank (default) */
	TJ_THREADS    /* one thread of the test process per rank */
};

/* How the ranks of a job meet when they open a transport. */
enum tj_meet {
	TJ_MEET_DEFAULT,   /* bootstrap for processes, name for threads */
	TJ_MEET_BOOTSTRAP, /* dpl's bootstrap on "host:port"; params.oob */
	TJ_MEET_NAME       /* params.world is the job's name; no oob */
};

/* Where a rank stands (struct tj_slot, state). */
enum tj_state {
	TJ_RUNNING, /* started, not ended (or never started) */
	TJ_DONE,    /* returned from job.fn */
	TJ_FAILED,  /* ended by TJ_FAIL/TJ_CHECK or a failed wait */
	TJ_GAVE_UP  /* stopped waiting because another rank failed */
};

/* Who ended a rank that did not end by itself (struct tj_slot, cut). */
enum tj_cut {
	TJ_CUT_NONE,     /* nobody: it ended by itself */
	TJ_CUT_WATCH,    /* the watch's last tj_job_signal() */
	TJ_CUT_DEADLINE, /* killed at the deadline (a thread: left
			    running there) */
	TJ_CUT_GRACE     /* killed grace_ms after another rank failed */
};

/*
 * What a rank left, in memory shared with the test. The rank writes
 * step, note and val; the harness writes the rest. After tj_job_run()
 * the test reads it through tj_job_slot() until tj_job_free().
 */
struct tj_slot {
	atomic_int state;  /* enum tj_state */
	pid_t pid;         /* the rank's process; 0 for a thread */
	int exit_code;     /* exit status of the process (0 while running);
			      for a thread 0 done, 1 failed or gave up */
	int signal;        /* the signal that ended the process, or 0 */
	int cut;           /* enum tj_cut */
	char where[96];    /* "file.c:line" of TJ_FAIL/TJ_CHECK, or "" */
	char msg[1024];    /* why it failed or gave up */
	char step[160];    /* what it was doing last (tj_step) */
	char note[512];    /* a line for the test's log (tj_note) */
	double val[TJ_VALS]; /* numbers for the test (rk->val) */
	atomic_uint in_barrier; /* 1 + the generation of the barrier it
				   entered last (0: none yet) */
};

struct tj_rank;
struct tj_job;
struct tj_shared; /* the job's shared memory; only test_job.c sees inside */
struct tj_run;    /* the test process's side of a run; likewise */

/* What every rank runs. Returning means the rank finished. */
typedef void (*tj_rank_fn)(struct tj_rank *rk);

/*
 * The job's code check: called with the code of every transport call
 * that test_job makes for the rank (progress, test, wait, isend, irecv;
 * `what` names it) and returns the code the caller goes on with. It may
 * end the rank with TJ_FAIL. NULL: codes are taken as they are.
 */
typedef int (*tj_check_fn)(struct tj_rank *rk, int rc, const char *what);

/*
 * The watch: runs in the test process, on a thread of its own, from
 * right after every rank started. It may signal ranks
 * (tj_job_signal()), wait for flags (tj_job_flag_wait()) and for ranks
 * to end (tj_job_ended()); those waits return once every rank ended, so
 * a watch that uses only them (and short sleeps) returns soon after the
 * job is over. tj_job_run() returns only after the watch returned.
 */
typedef void (*tj_watch_fn)(struct tj_job *job);

/* A job. Zero is the default of every field the test sets. */
struct tj_job {
	/* What the test sets. */
	uint32_t size;          /* ranks, 1..TJ_MAX_RANKS */
	enum tj_mode mode;
	enum tj_meet meet_kind;
	tj_rank_fn fn;          /* run by every rank */
	void *arg;              /* rk->arg (a process sees its own copy) */
	size_t user_size;       /* bytes of shared user memory (zeroed) */
	unsigned deadline_ms;   /* whole job; 0: 60000 */
	unsigned grace_ms;      /* after a rank failed, the others' time to
				   give up before they are killed; 0: 3000 */
	uint32_t may_die;       /* ranks (bit mask) that may end early
				   (killed by a signal, or exiting before
				   they return): not a failure, and the
				   others do not give up */
	const char *meet;       /* meeting point to use, or NULL for a
				   fresh one of meet_kind */
	const struct dpl_transport_ops *ops; /* when set, every rank opens
				   it with tj_open() before fn (failing
				   when it cannot) and closes rk->t after */
	const char *options;    /* params.options of that open */
	uint32_t timeout_ms;    /* params.timeout_ms of that open (and the
				   bootstrap's); 0: 10000 */
	tj_check_fn check;
	tj_watch_fn watch;
	void *watch_arg;        /* for the watch */
	bool leak_check;        /* under AddressSanitizer, a process that
				   finished runs LeakSanitizer's check and
				   fails when it leaked */

	/* What tj_job_run() fills in; valid until tj_job_free(). */
	char meet_used[256];    /* the meeting point of the job */
	char report[4096];      /* "" or lines "rank N: why" ('\n'
				   between them) naming each rank that
				   failed: file:line and message, exit
				   code, signal (and who sent it), or
				   still running at the deadline; ranks
				   that gave up follow in parentheses */
	bool timed_out;         /* the deadline passed */
	struct tj_run *run;     /* private */
};

/* What a rank works with. */
struct tj_rank {
	const struct tj_job *job;  /* the job (a process: its copy) */
	struct tj_shared *sh;      /* private */
	uint32_t rank;
	uint32_t size;
	void *arg;                 /* job.arg */
	const struct dpl_transport_ops *ops; /* what tj_open opened, or
				      what the rank sets for tj_reqs */
	dpl_transport *t;          /* the context the rank functions
				      progress; the rank may set it */
	void *ext;                 /* for a harness built on test_job */
	uint64_t deadline_ns;      /* dpl_clock_ns() when waits fail */
	double *val;               /* the rank's slot's val[TJ_VALS] */
	void *mem[64];             /* private: tj_alloc's blocks */
	unsigned nmem;             /* private */
};

/* ------------------------------------------------------------------ */
/* The test process                                                    */

/*
 * tj_job_run - start job->size ranks, each running job->fn, run the
 * watch meanwhile, and return once every rank ended (or, for threads,
 * the deadline passed). A rank that is a process and still runs at the
 * deadline, or job->grace_ms after another rank failed, is killed with
 * SIGKILL. Fills in meet_used, report and timed_out. Blocks up to the
 * deadline plus a few seconds. The job's memory stays until
 * tj_job_free(), even when this fails; a job run before is freed
 * first. Returns 0 when every rank finished (or ended as may_die allows); 1
 * when the report names a rank; DPL_EINVAL for a bad job (size, fn),
 * DPL_ENOMEM, or DPL_EIO when a rank could not be started (fork,
 * pthread_create, no free port), each with the reason in the report.
 */
int tj_job_run(struct tj_job *job);

/*
 * tj_job_free - release what tj_job_run() allocated (shared memory, the
 * ranks' records). A job whose threads were left running keeps its
 * memory for them (it is leaked on purpose). A job never run, or freed
 * already, is a no-op. The report and meet_used stay readable.
 */
void tj_job_free(struct tj_job *job);

/* What rank `r` left (see struct tj_slot), or NULL when r is out of
 * range or the job did not run. Valid until tj_job_free(). */
const struct tj_slot *tj_job_slot(const struct tj_job *job, uint32_t r);

/*
 * tj_job_exit - how rank `r` ended: its exit status (0 for a thread that
 * finished, 1 for one that failed), or minus the signal that killed it;
 * INT_MIN when it did not end (a thread past the deadline) or r is out
 * of range.
 */
int tj_job_exit(const struct tj_job *job, uint32_t r);

/* The job's shared user memory (job->user_size bytes), or NULL. */
void *tj_job_user(const struct tj_job *job);

/* Flag `i` (< TJ_FLAGS) of the job; the watch and the test may set it. */
int64_t tj_job_flag(const struct tj_job *job, unsigned i);
void tj_job_flag_set(struct tj_job *job, unsigned i, int64_t v);

/*
 * tj_job_flag_wait - wait (sleeping) until flag `i` is at least `v`.
 * Returns true when it is; false after `ms` milliseconds or once every
 * rank ended. For the watch.
 */
bool tj_job_flag_wait(struct tj_job *job, unsigned i, int64_t v,
		      unsigned ms);

/* The process of rank `r` while the job runs, or 0 (a thread, a rank
 * that ended, r out of range). For the watch. */
pid_t tj_job_pid(const struct tj_job *job, uint32_t r);

/*
 * tj_job_signal - send `sig` (SIGKILL, SIGSTOP, SIGCONT ...) to rank
 * `r`'s process; the harness never signals a process it reaped. A rank
 * killed this way is reported as killed by the watch unless may_die
 * names it. For the watch. Returns 0; DPL_ENOTSUP for a job of threads;
 * DPL_EINVAL when r is out of range or the rank ended.
 */
int tj_job_signal(struct tj_job *job, uint32_t r, int sig);

/*
 * tj_job_ended - wait (sleeping) until rank `r` ended and was reaped.
 * Returns true when it did, false after `ms` milliseconds. For the
 * watch; tj_job_exit() then says how it ended.
 */
bool tj_job_ended(struct tj_job *job, uint32_t r, unsigned ms);

/* ------------------------------------------------------------------ */
/* A rank's end and its report                                         */

/*
 * TJ_FAIL(rk, fmt, ...) - in a rank only: record file:line and the
 * message in the rank's slot, make the other ranks give up, and end the rank: a process
 * exits with 1, a thread frees tj_alloc's memory and exits (the context
 * in rk->t is left open). Never returns.
 */
#define TJ_FAIL(rk, ...) tj_fail_at((rk), __FILE__, __LINE__, __VA_ARGS__)

/* TJ_CHECK(rk, cond, fmt, ...) - TJ_FAIL unless `cond` holds. */
#define TJ_CHECK(rk, cond, ...)                                              \
	do {                                                                 \
		if (!(cond))                                                 \
			tj_fail_at((rk), __FILE__, __LINE__, __VA_ARGS__);   \
	} while (0)

/* What TJ_FAIL calls; `file` may be NULL (no place is recorded). */
_Noreturn void tj_fail_at(struct tj_rank *rk, const char *file, int line,
			  const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
_Noreturn void tj_vfail_at(struct tj_rank *rk, const char *file, int line,
			   const char *fmt, va_list ap);

/*
 * tj_give_up - end the rank as one that stopped because another rank
 * failed (reported beside that rank only). Never returns.
 */
_Noreturn void tj_give_up(struct tj_rank *rk, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* What the rank is doing, for the report (kept until the next call). */
void tj_step(struct tj_rank *rk, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The rank's step as last set. */
const char *tj_step_now(const struct tj_rank *rk);
/* A line for the test's log (kept until the next call). */
void tj_note(struct tj_rank *rk, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Whether a rank failed (the others are giving up). Non-blocking. */
bool tj_aborted(const struct tj_rank *rk);

/* The job's shared user memory (job.user_size bytes), or NULL. */
void *tj_user(const struct tj_rank *rk);

/* ------------------------------------------------------------------ */
/* Memory of a rank                                                    */

/*
 * tj_alloc - `bytes` zeroed bytes aligned to 64, owned by the rank until
 * tj_free() or the rank's end (at most 64 blocks at once). Fails the
 * rank when out of memory.
 */
void *tj_alloc(struct tj_rank *rk, size_t bytes);
/* Free a block of tj_alloc() before the rank ends; NULL or a pointer
 * tj_alloc() did not return is ignored. */
void tj_free(struct tj_rank *rk, void *p);

/*
 * Request storage: tj_req_stride() is the bytes between two requests of
 * the rank: dpl_transport_req_size(rk->t) (rk->ops->req_size before
 * the rank opened) rounded up to max_align_t. tj_reqs() allocates `n`
 * of them (tj_alloc; it fails the rank when it has neither rk->t nor
 * rk->ops), tj_req() is the i-th of such a pool.
 */
size_t tj_req_stride(const struct tj_rank *rk);
void *tj_reqs(struct tj_rank *rk, size_t n);
void *tj_req(const struct tj_rank *rk, void *pool, size_t i);

/* ------------------------------------------------------------------ */
/* Opening a transport (the host's part)                               */

/* The job's meeting point ("127.0.0.1:port" or a world name). */
const char *tj_meet(const struct tj_rank *rk);

/*
 * tj_meet_renew - every rank calls it (a barrier); rank 0 picks a fresh
 * meeting point of the job's kind for the next open of the same ranks.
 * Fails the rank when no port is free.
 */
void tj_meet_renew(struct tj_rank *rk);

/*
 * tj_meet_make - a fresh meeting point of `kind` (TJ_MEET_DEFAULT is
 * TJ_MEET_BOOTSTRAP) into buf: "127.0.0.1:<a free port>" or a name
 * unique to this process. Returns 0, or -1 when no port was free.
 */
int tj_meet_make(enum tj_meet kind, char *buf, size_t size);

/* The host's side of one open: the bootstrap it holds meanwhile. */
struct tj_host {
	dpl_bootstrap *b;   /* NULL when the ranks meet by name */
	struct dpl_oob oob; /* the bootstrap's exchange (params.oob) */
};

/*
 * tj_host_join - meet the other ranks of p->world_size at `meet` (NULL:
 * the job's) the way the job says: bootstrap: open dpl's bootstrap as
 * rank p->rank with `timeout_ms`, p->oob = its exchange, p->world =
 * NULL; name: p->world = meet, p->oob = NULL. Blocks until every rank
 * arrived (bootstrap). Returns 0, or the bootstrap's error (reason in
 * dpl_last_error()); *h is then empty. Call tj_host_leave() once
 * dpl_transport_open() returned.
 */
int tj_host_join(struct tj_rank *rk, const char *meet, uint32_t timeout_ms,
		 struct dpl_transport_params *p, struct tj_host *h);
/* Close what tj_host_join() opened; an empty host is a no-op. */
void tj_host_leave(struct tj_host *h);

/*
 * tj_open - open `ops` as rank rk->rank of rk->size at the job's meeting
 * point (tj_host_join, dpl_transport_open, tj_host_leave) with
 * params.options `options` and params.timeout_ms `timeout_ms` (0:
 * 10000; the bootstrap gets the same). Sets rk->ops = ops and, on
 * success, rk->t. Blocks as init does. Returns 0, or the bootstrap's or
 * dpl_transport_open()'s error (reason in dpl_last_error()).
 */
int tj_open(struct tj_rank *rk, const struct dpl_transport_ops *ops,
	    const char *options, uint32_t timeout_ms);
/* tj_open with the bootstrap's timeout apart (boot_ms; 0: 10000): for a
 * case whose transport timeout is shorter than a rendezvous may take. */
int tj_open_boot(struct tj_rank *rk, const struct dpl_transport_ops *ops,
		 const char *options, uint32_t timeout_ms, uint32_t boot_ms);
/* Close rk->t (NULL is a no-op) and clear it. */
void tj_close(struct tj_rank *rk);

/* An exchange of a world of one rank, in memory: allgather copies the
 * rank's own bytes, barrier returns 0. For contexts that need no peers. */
const struct dpl_oob *tj_solo_oob(void);

/* ------------------------------------------------------------------ */
/* Bounded waits of a rank                                             */

/* The state of one waiting loop; zero it before the first tj_idle. */
struct tj_idle {
	uint64_t start;
	unsigned n;
};

/*
 * tj_idle - one turn of a waiting loop: progress rk->t (when open),
 * yield now and then, and after a while sleep in dpl_transport_wait()
 * (or nanosleep). Every 64 turns: gives up when another rank failed,
 * fails the rank naming `what` at its deadline. Returns 0, or the
 * negative code progress returned (after the job's check).
 */
int tj_idle(struct tj_rank *rk, struct tj_idle *id, const char *what);

/* One dpl_transport_progress() of rk->t through the job's check; 0 when
 * rk->t is NULL. */
int tj_progress(struct tj_rank *rk);
/* Progress rk->t for `ms` milliseconds; 0 or the first negative code. */
int tj_progress_for(struct tj_rank *rk, unsigned ms);

/*
 * tj_isend / tj_irecv - post on rk->t, retrying DPL_EAGAIN with idle
 * turns until the rank's deadline. Host memory. The buffer and `req`
 * belong to the transport until the request completes. Returns 0, or
 * the post's error (nothing posted).
 */
int tj_isend(struct tj_rank *rk, void *req, uint32_t peer, uint64_t tag,
	     const void *buf, size_t len);
int tj_irecv(struct tj_rank *rk, void *req, uint32_t peer, uint64_t tag,
	     void *buf, size_t len);

/*
 * tj_wait - test `req` with idle turns until it completes. `ms` bounds
 * it (0: the rank's deadline, where the rank fails naming `what`, which
 * may be NULL). Returns the request's final code; DPL_EAGAIN when it
 * is still pending after `ms` (it still belongs to the transport); or
 * progress's negative code when progress failed and the request did not
 * complete.
 */
int tj_wait(struct tj_rank *rk, void *req, unsigned ms, const char *what);

/*
 * tj_wait_all - tj_wait for the `n` requests of a pool of tj_reqs(),
 * completing in any order. `rc` (may be NULL) gets each final code
 * (DPL_EAGAIN for one still pending). Returns 0 when all completed with
 * 0; else the first non-zero final code; DPL_EAGAIN when some are still
 * pending after `ms`; or progress's negative code as tj_wait.
 */
int tj_wait_all(struct tj_rank *rk, void *pool, size_t n, int *rc,
		unsigned ms, const char *what);

/*
 * tj_send / tj_recv - post and wait for one message of host memory,
 * with request storage of their own. `ms` bounds the wait (0: the
 * rank's deadline). Returns the completion's code, the post's error, or
 * DPL_ETIMEDOUT when it did not complete in `ms` (the request is then
 * cancelled and its storage kept until the rank ends).
 */
int tj_send(struct tj_rank *rk, uint32_t peer, uint64_t tag,
	    const void *buf, size_t len, unsigned ms);
int tj_recv(struct tj_rank *rk, uint32_t peer, uint64_t tag, void *buf,
	    size_t len, unsigned ms);

/* ------------------------------------------------------------------ */
/* Barriers and flags of a rank                                        */

/* Barrier of every rank of the job (idle turns meanwhile). */
void tj_barrier(struct tj_rank *rk);
/* Barrier of `n` ranks, for jobs where some ranks died. */
void tj_barrier_n(struct tj_rank *rk, uint32_t n);

/* Flag `i` (< TJ_FLAGS) of the job. */
void tj_flag_set(struct tj_rank *rk, unsigned i, int64_t v);
int64_t tj_flag_get(const struct tj_rank *rk, unsigned i);
/*
 * tj_flag_wait - idle turns until flag `i` is at least `v`. `ms` bounds
 * it (0: the rank's deadline, where the rank fails). Returns 0, or
 * DPL_ETIMEDOUT after `ms`.
 */
int tj_flag_wait(struct tj_rank *rk, unsigned i, int64_t v, unsigned ms);

/* ------------------------------------------------------------------ */
/* Data patterns, sleeping, process state                              */

/* Fill `len` bytes with the pattern of `seed`. */
void tj_fill(void *buf, size_t len, uint64_t seed);
/* Offset of the first byte that differs from the pattern, or -1. */
long long tj_verify(const void *buf, size_t len, uint64_t seed);

/* Sleep `ms` milliseconds, resuming after signals. */
void tj_sleep_ms(unsigned ms);

/* Counts of this process's state; -1 when unavailable. */
int tj_count_fds(void);     /* open descriptors */
int tj_count_threads(void); /* threads */
/* /dev/shm entries matching the fnmatch(3) pattern `glob` (NULL: all). */
int tj_count_shm(const char *glob);

/*
 * tj_shm_snapshot - the /dev/shm entries matching `glob` (NULL: all) as
 * one malloc'd list of NUL-terminated names ending with an empty one
 * (the caller frees it); NULL when /dev/shm cannot be read.
 */
char *tj_shm_snapshot(const char *glob);
/* How many names are in `now` but not in `before` (snapshots); those
 * names, comma separated, into buf (cut at `size`). */
int tj_shm_new(const char *before, const char *now, char *buf,
	       size_t size);

/*
 * tj_sockets_loopback - whether every TCP/UDP socket of this process is
 * unbound or bound to a loopback address; otherwise false and the first
 * bad one described in `why`. *nsockets gets the sockets seen.
 */
bool tj_sockets_loopback(char *why, size_t size, int *nsockets);

#endif /* DPL_TEST_JOB_H */
