/*
 * ucx_ranks.h - run the ranks of one job as processes over loopback for
 * the UCX module's tests.
 *
 * The test process is rank 0; ranks 1.. are forked before anything opens
 * UCX, so no process inherits a UCX context. Each rank meets the others
 * through dpl's TCP rendezvous (dpl/bootstrap.h) on the job's root and
 * hands it to the transport as its out-of-band exchange, as a host does.
 * Every rank runs the same function; a failed check in a forked rank
 * prints where and exits with a status the test process asserts on, a
 * failed check in rank 0 kills the others first. Every wait is bounded.
 * Ranks post through the checked layer (dpl_transport_isend() ...).
 */
#ifndef DPL_UCX_RANKS_H
#define DPL_UCX_RANKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <dpl/transport.h>
#include <dpl/transport_ucx.h>

#define RANKS_MAX 4

/* Every case runs over TCP and over shared memory. */
#define BOTH(name, secs)                                                      \
	static void name(const char *tls);                                    \
	Test(ucx_tcp, name, .timeout = (secs)) { name("tcp"); }               \
	Test(ucx_sm, name, .timeout = (secs)) { name("sm"); }                 \
	static void name(const char *tls)

/* Tags of the test's own step tokens (data tags stay below). */
#define TOK (UINT64_C(0xabc) << 40)

/* How soon a killed peer must be reported; a stopped one within its
 * timeout plus this. */
#define LIVENESS_BOUND_MS 2000u

struct job {
	uint32_t n;               /* ranks */
	const char *tls;          /* UCX_TLS for every rank */
	const char *options;      /* transport options or NULL */
	uint32_t timeout_ms;      /* transport timeout (0 = 10 s) */
	uint32_t killed;          /* ranks the test SIGKILLs (bit mask) */
	pid_t pid[RANKS_MAX];
	char root[32];
};

struct rank {
	struct job *job;
	uint32_t id;
	dpl_transport *t;
	const struct dpl_transport_ops *o;
	void *ctx;
	uint64_t open_ns; /* how long the rendezvous and the open took */
};

typedef void (*rank_fn)(struct rank *r, void *arg);

/* Run fn on every rank of `job` (opened and closed around it), wait for
 * all ranks and assert they succeeded. */
void job_run(struct job *job, rank_fn fn, void *arg);

/* Meet the other ranks on the job's root and open the transport with the
 * job's settings into r->t and r->ctx (both ranks call it together).
 * Returns 0 or the error of the rendezvous or the open. */
int rank_open(struct rank *r);

/* Fail the calling rank with a message unless cond holds. */
#define check(r, cond, ...)                                                   \
	rank_check((r), (cond), __FILE__, __LINE__, __VA_ARGS__)
void rank_check(struct rank *r, bool cond, const char *file, int line,
		const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Request storage of the transport's req_size (freed at exit). */
void *req_new(struct rank *r);

/* test + progress until the request completes or `ms` pass: the
 * request's result, or DPL_ETIMEDOUT (the request is still pending). */
int req_wait(struct rank *r, void *req, uint32_t ms);

/* Blocking helpers built on isend/irecv and req_wait (10 s bound); they
 * check success themselves. */
void send_now(struct rank *r, uint32_t peer, uint64_t tag, const void *buf,
	      size_t len);
void recv_now(struct rank *r, uint32_t peer, uint64_t tag, void *buf,
	      size_t len);
/* 8-byte tokens for ordering steps between ranks. */
void token_send(struct rank *r, uint32_t peer, uint64_t tag, uint64_t v);
uint64_t token_recv(struct rank *r, uint32_t peer, uint64_t tag);

/* Progress for `ms` milliseconds. */
void spin_ms(struct rank *r, uint32_t ms);

/* Sleep for `ms` milliseconds without progress. */
void sleep_ms(uint32_t ms);

/* malloc(n) (at least 1 byte) or fail the rank. */
unsigned char *xmalloc(struct rank *r, size_t n);

/*
 * One message of `len` bytes from `from` to `to`, checked byte for byte
 * with guard bytes around the receive. expected: the receiver posts
 * first and then tells the sender to go; unexpected: the sender sends,
 * then a token on the same path tells the receiver it is there. soff and
 * roff offset the buffers (unaligned), seed varies the pattern.
 */
void one_transfer(struct rank *r, uint32_t from, uint32_t to, size_t len,
		  bool expected, uint64_t tag, size_t soff, size_t roff,
		  uint32_t seed);

/* A pattern of `len` bytes that depends on every byte index and on seed;
 * pattern_bad is the first index that differs, or len when none. */
void pattern_fill(unsigned char *buf, size_t len, uint32_t seed);
size_t pattern_bad(const unsigned char *buf, size_t len, uint32_t seed);

uint64_t mono_ns(void);

#endif /* DPL_UCX_RANKS_H */
