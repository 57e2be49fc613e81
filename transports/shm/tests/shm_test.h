/*
 * shm_test.h - the harness of the shared-memory transport's own tests:
 * ranks are forked processes of this host that record what they saw in
 * a shared anonymous mapping (struct job); the test process asserts on
 * it after reaping them. Ranks meet through dpl's TCP rendezvous on
 * 127.0.0.1 at a port picked per job (so tests may run in parallel) and
 * hand it to init as the out-of-band exchange, as a host does. They post
 * through the checked layer (dpl_transport_isend() and its siblings).
 */
#ifndef DPL_TEST_SHM_TEST_H
#define DPL_TEST_SHM_TEST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <dpl/backend.h>
#include <dpl/transport.h>
#include <dpl/transport_shm.h>

#define MAXR 4
#define RING DPL_SHM_DEFAULT_RING
#define EAGER DPL_SHM_DEFAULT_EAGER
#define MiB (1024u * 1024u)
#define GUARD 64

/* What one rank reports to the test process. */
struct rank_out {
	int rc;          /* init */
	int bad;         /* broken expectations */
	char msg[512];   /* the first of them */
	long long v[8];  /* numbers a test reports */
	int st[8];       /* statuses a test reports */
};

/* One job: shared by the test process and the ranks it forks. */
struct job {
	struct rank_out out[MAXR];
	atomic_int flag[16];
	atomic_ullong kill_ns;
	unsigned port;
	int param;
	char opts[64];
};

extern const struct dpl_transport_ops *const O; /* &dpl_transport_shm */
extern struct job *J;                           /* the current job */
extern int RANK;                                /* in a rank: its rank */

typedef void (*rank_fn)(int rank);

/* A new job on a fresh port (memory shared with ranks forked later). */
struct job *job_new(void);

/* In a rank: record a broken expectation (the first message is kept). */
void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Fork n ranks running fn. */
void spawn(pid_t *pid, int n, rank_fn fn);

/* Fork n ranks running fn, reap them within timeout_ms, and expect each
 * to have initialised and seen nothing broken. */
void run(int n, rank_fn fn, int timeout_ms);

/* Storage for n requests, and request i of it. */
void *reqs_new(size_t n);
void *REQ(void *base, size_t i);

/*
 * In a rank: meet the job's other ranks on J->port and open the shm
 * transport as `rank` of `world` over that rendezvous. On failure
 * records the code and message in J->out[rank] and returns NULL.
 */
dpl_transport *open_t(int rank, int world, const char *opts);

/* Progress (and wait) until every request of base[0..n) completed or
 * ms passed; statuses into st (DPL_EAGAIN for those still pending).
 * Returns 0, DPL_ETIMEDOUT, or progress's error. */
int wait_all(dpl_transport *t, void *base, size_t n, int *st, int ms);
int wait_one(dpl_transport *t, void *req, int ms);

/* Wait until J->flag[i] >= v: without progressing (other ranks do not
 * need us), or progressing t (they may). False after ms. */
bool await_flag(int i, int v, int ms);
bool await_flag_progress(dpl_transport *t, int i, int v, int ms);

/* A pattern of n bytes per seed, and the first byte that breaks it (n
 * when none does). */
void fill(unsigned char *b, size_t n, uint32_t seed);
size_t verify(const unsigned char *b, size_t n, uint32_t seed);

void *xmalloc(size_t n);

/* Open descriptors of this process. */
int count_fds(void);

/* Entries of /dev/shm named "dpl-...-p<pid>" for a pid of pids[0..n). */
int count_segments(const pid_t *pids, int n);

#endif /* DPL_TEST_SHM_TEST_H */
