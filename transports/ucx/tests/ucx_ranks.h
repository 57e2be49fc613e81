/*
 * ucx_ranks.h - what the UCX module's multi-rank tests add to test_job
 * (test_job.h): the transport they open, UCX over TCP or over shared
 * memory with the case's options, and the steps their cases share.
 *
 * A case runs one job of forked ranks; each rank meets the others
 * through dpl's TCP rendezvous on the job's loopback root, opens the
 * UCX transport with it as its out-of-band exchange, as a host does,
 * runs the case's function and closes. UCX_TLS is set in the test
 * process before the ranks are forked and the test process never opens
 * UCX, so no rank inherits a UCX context. Rank code fails through
 * TJ_CHECK()/TJ_FAIL() and posts through the checked layer
 * (dpl_transport_isend() ...); every wait is bounded, and a progress
 * call that fails fails its rank.
 */
#ifndef DPL_UCX_RANKS_H
#define DPL_UCX_RANKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dpl/transport.h>
#include <dpl/transport_ucx.h>

#include "test_job.h"

#define UCX_RANKS_MAX 4

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

/* The rk->val entry where each rank leaves how long its rendezvous and
 * open took, in milliseconds. */
#define UCX_VAL_OPEN_MS 0

/* One job of a case. Zero fields are defaults. */
struct ucx_job {
	uint32_t n;          /* ranks, 1..UCX_RANKS_MAX */
	const char *tls;     /* UCX_TLS for every rank, or NULL */
	const char *options; /* transport options or NULL */
	uint32_t timeout_ms; /* transport timeout (0 = 10 s) */
	uint32_t killed;     /* ranks (bit mask) that must end by SIGKILL:
				through ucx_kill() or their own hand */
};

/*
 * ucx_job_run - run fn on every rank of `job` (rk->arg is `arg`), each
 * with the UCX transport open in rk->t around it, and assert in the
 * test process that every rank finished and those in job->killed were
 * killed. Logs rank 0's open time and each rank's tj_note() line.
 */
void ucx_job_run(const struct ucx_job *job, tj_rank_fn fn, void *arg);

/* Open the UCX transport into rk->t with the job's options and timeout
 * at the job's meeting point (every rank calls it together, after
 * tj_meet_renew() for a reopen). Returns 0 or tj_open()'s error. */
int ucx_open(struct tj_rank *rk);

/* Have the test process SIGKILL rank `peer`; returns once it was sent.
 * The peer must be in the job's killed mask. */
void ucx_kill(struct tj_rank *rk, uint32_t peer);

/* `n` requests (tj_reqs()) filled with 0xee, so that the transport
 * cannot rely on zeroed request storage; tj_req() picks one. */
void *req_new(struct tj_rank *rk, size_t n);

/* Post, wait (10 s) and check one message of host memory. */
void send_now(struct tj_rank *rk, uint32_t peer, uint64_t tag,
	      const void *buf, size_t len);
void recv_now(struct tj_rank *rk, uint32_t peer, uint64_t tag, void *buf,
	      size_t len);
/* 8-byte tokens for ordering steps between ranks on the data path. */
void token_send(struct tj_rank *rk, uint32_t peer, uint64_t tag, uint64_t v);
uint64_t token_recv(struct tj_rank *rk, uint32_t peer, uint64_t tag);

/*
 * One message of `len` bytes from `from` to `to`, checked byte for byte
 * with guard bytes around the receive. expected: the receiver posts
 * first and then tells the sender to go; unexpected: the sender sends,
 * then a token on the same path tells the receiver it is there. soff and
 * roff offset the buffers (unaligned), seed varies the pattern.
 */
void one_transfer(struct tj_rank *rk, uint32_t from, uint32_t to,
		  size_t len, bool expected, uint64_t tag, size_t soff,
		  size_t roff, uint32_t seed);

#endif /* DPL_UCX_RANKS_H */
