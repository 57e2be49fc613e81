/*
 * dpl/transport.h - the transport contract: tagged, non-blocking,
 * point-to-point messages between the ranks of one job, with explicit
 * progress.
 *
 * A transport backend is one const struct dpl_transport_ops, exported by
 * its module as `dpl_transport_<name>`. The core allocates the backend's
 * state (ctx_size bytes per context) and the storage of every request
 * (req_size bytes each); the backend fills them in and never calls
 * malloc on the data path.
 *
 * Semantics every backend provides (the conformance suite checks each):
 *
 *  - Messages. isend(peer, tag, buf, len) matches the irecv(peer', tag',
 *    buf', len') on `peer` whose source is the sender and whose tag is
 *    exactly `tag` (no wildcards, no masks). Messages of one sender to one
 *    receiver with the same tag match in the order they were posted.
 *    Message boundaries are kept.
 *  - Tags. Callers use the low 60 bits (DPL_TAG_BITS); the top four bits
 *    are the backend's, e.g. for its own framing.
 *  - Exact-size receives. A receive completes successfully only with a
 *    message of exactly its length. A message of another length completes
 *    the receive with DPL_ETRUNC (buffer contents unspecified) and never
 *    leaves later receives stuck; the backend detects this itself (for
 *    example with a header carrying length and sequence number) instead
 *    of trusting the fabric's truncation reports. The send completes with
 *    0 or DPL_ETRUNC. Zero-length messages are allowed.
 *  - Rendezvous. A send may stay incomplete until the peer posts the
 *    matching receive and both sides progress. Callers never wait for a
 *    send before they have posted the receives their peers' progress
 *    depends on.
 *  - Explicit progress. Nothing is guaranteed to move unless progress (or
 *    wait) is called on the context; a caller that waits calls progress
 *    in its loop.
 *  - Peer failure. A peer that finalised, crashed or stopped answering
 *    makes every request with it complete with DPL_EPEER, and posts to it
 *    fail with DPL_EPEER, within the backend's liveness timeout; it is
 *    never a silent hang. Detection is the backend's own job (heartbeat,
 *    connection state, pid checks); a backend that cannot detect a class
 *    of failure on its fabric clears DPL_TRANSPORT_CAP_PEER_FAILURE and
 *    callers bound their waits (the runner always does).
 *  - Ownership. A buffer passed to a successful post belongs to the
 *    transport until test returns something other than DPL_EAGAIN for its
 *    request. So does the request storage.
 *
 * Threads: a context is used by one thread at a time. Different contexts
 * may be used from different threads at once, including the contexts of
 * several ranks of one process (the in-process transport).
 */
#ifndef DPL_TRANSPORT_H
#define DPL_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include <dpl/common.h>
#include <dpl/device.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Version of struct dpl_transport_ops this header describes.
 *  1: the first table; init received a rendezvous address and each
 *     network backend opened its own TCP rendezvous.
 *  2: the host owns the rendezvous: init receives an out-of-band exchange
 *     (struct dpl_oob) from its caller and opens no socket of its own for
 *     it; `bootstrap` became `world` (in-process transports only); callers
 *     reach the table through dpl_transport_isend() and its siblings, which
 *     check arguments once, so backends no longer do; the caps bits
 *     CAP_ALLREDUCE and CAP_WAIT are gone (DPL_HAS_OP on the member is the
 *     one source of truth).
 * A table of another version is refused with DPL_EABI.
 */
#define DPL_TRANSPORT_ABI_VERSION 2

/* Tag bits available to callers; higher bits belong to the backend. */
#define DPL_TAG_BITS 60
#define DPL_TAG_MAX ((UINT64_C(1) << DPL_TAG_BITS) - 1)

/* Capability bits of dpl_transport_ops.caps. */
#define DPL_TRANSPORT_CAP_PEER_FAILURE (1u << 0) /* detects every peer
							    death */
#define DPL_TRANSPORT_CAP_MEM_CUDA (1u << 1)     /* accepts DPL_MEM_CUDA
							    buffers */
/* Bits 2 and 3 were CAP_ALLREDUCE and CAP_WAIT in ABI 1; never reuse. */
#define DPL_TRANSPORT_CAP_IN_PROCESS (1u << 4)   /* the ranks of a job are
							    threads of one process:
							    init meets through
							    params.world and does
							    not need params.oob */

/* Largest blob a transport hands to one dpl_oob allgather. */
#define DPL_OOB_BLOB_MAX 4096

/*
 * struct dpl_oob - the out-of-band exchange the host supplies, as in
 * NCCL's unique id, UCX's worker-address exchange or UCC's oob_coll: the
 * caller runs the rendezvous (dpl's TCP bootstrap, MPI, torchrun's store,
 * a test harness) and the transport only uses it during init. One
 * exchange serves every transport a job opens. Ranks and world size are
 * those of struct dpl_transport_params.
 *
 *  allgather: every rank contributes `len` bytes (the same len on every
 *    rank, 0 < len <= DPL_OOB_BLOB_MAX); on return all[r * len ..] holds
 *    rank r's bytes, on every rank. Collective: every rank calls it the
 *    same number of times, in the same order.
 *  barrier: returns once every rank has entered it.
 *
 * Both block, and must return within a bounded time chosen by the
 * provider (dpl's bootstrap uses its own timeout): 0, or a negative
 * DPL_E* code (DPL_EPEER, DPL_ETIMEDOUT, DPL_EIO ...) with the reason in
 * dpl_last_error() of the calling thread. `user` is passed back as is.
 * The transport calls them only from inside init, on the thread that
 * called dpl_transport_open(); it keeps no pointer to the struct after
 * init returns.
 */
struct dpl_oob {
	int (*allgather)(void *user, const void *mine, size_t len, void *all);
	int (*barrier)(void *user);
	void *user;
};

/*
 * What init needs to join a job.
 *  oob: the host's out-of-band exchange. Backends whose ranks live in
 *    several processes need it (init fails with DPL_EINVAL naming the
 *    transport when it is NULL); the in-process transport ignores it.
 *  world: for the in-process transport only, the name of the world its
 *    threads meet in (all ranks of one world pass the same string; NULL
 *    is "default"); other backends ignore it.
 *  timeout_ms: how long init may wait for peers in the data path, and
 *    the liveness timeout after which a silent peer counts as failed;
 *    0 = the backend's default (60 s).
 */
struct dpl_transport_params {
	uint32_t rank;       /* this context's rank, < world_size */
	uint32_t world_size; /* ranks in the job, >= 1 */
	const struct dpl_oob *oob;
	const char *world;
	const char *options; /* backend-specific "key=value,..." or NULL */
	uint32_t timeout_ms;
	uint32_t reserved0; /* zero */
};

/*
 * The transport table. Members after `iallreduce` may be appended by
 * later ABI versions; existing ones never move.
 *
 * Return values of the data path: 0 on success, DPL_EAGAIN where named,
 * or a negative DPL_E* code. A post that fails posted nothing and its
 * request storage is the caller's again.
 *
 * Callers reach the table through dpl_transport_isend() and its siblings
 * below, which check the arguments once: a backend's isend and irecv are
 * only called with peer < world_size and peer != own rank, tag <=
 * DPL_TAG_MAX, buf != NULL when len > 0, and mem DPL_MEM_HOST (or
 * DPL_MEM_CUDA when caps has DPL_TRANSPORT_CAP_MEM_CUDA). Optional
 * members are NULL when absent and are found with DPL_HAS_OP().
 */
struct dpl_transport_ops {
	uint32_t abi_version; /* DPL_TRANSPORT_ABI_VERSION it was written for */
	uint32_t size;        /* sizeof(struct dpl_transport_ops) it was built
				 with */
	const char *name;     /* short lower-case name: "inproc", "ucx" */
	uint64_t caps;        /* DPL_TRANSPORT_CAP_* */
	size_t ctx_size;      /* bytes of private state per context; the core
				 allocates them zeroed, aligned for any type */
	size_t req_size;      /* bytes of one request's storage (>= 1); the
				 caller allocates it aligned for any type */

	/*
	 * init - join the job as rank p->rank of p->world_size ranks. Blocks
	 * until the backend can reach its peers or p->timeout_ms passes.
	 * Returns 0, DPL_EINVAL for a bad rank, world size or option,
	 * DPL_EBUSY when the rank is already taken in that world,
	 * DPL_ETIMEDOUT when peers did not show up, DPL_ENOMEM, DPL_EIO.
	 * On failure the core frees ctx without calling fini. Mandatory.
	 */
	int (*init)(void *ctx, const struct dpl_transport_params *p);

	/*
	 * fini - leave the job: outstanding requests of this context are
	 * cancelled (their storage and buffers are the caller's again on
	 * return), and peers see this rank as failed (DPL_EPEER) from now
	 * on. Does not block on peers. Mandatory.
	 */
	void (*fini)(void *ctx);

	/*
	 * isend - post a send of buf[0..len) to rank `peer` with tag `tag`
	 * (<= DPL_TAG_MAX), in memory of kind `mem`. `req` is req_size bytes
	 * of caller storage that becomes the transport's until test reports
	 * completion. Non-blocking. Returns 0 (posted), DPL_EAGAIN (no
	 * resources now: progress and post again; nothing was posted),
	 * DPL_EPEER (peer known failed), DPL_EINVAL (peer out of range or
	 * the own rank, tag too large), DPL_ENOTSUP (memory kind).
	 * Mandatory.
	 */
	int (*isend)(void *ctx, void *req, uint32_t peer, uint64_t tag,
		     const void *buf, size_t len, uint32_t mem);

	/*
	 * irecv - post a receive of exactly `len` bytes from rank `peer`
	 * with tag `tag` into buf. Same arguments, ownership and returns as
	 * isend. Mandatory.
	 */
	int (*irecv)(void *ctx, void *req, uint32_t peer, uint64_t tag,
		     void *buf, size_t len, uint32_t mem);

	/*
	 * test - the state of a posted request: DPL_EAGAIN while pending;
	 * otherwise it has completed, its buffer and storage are the
	 * caller's again, and test returns 0 (done), DPL_ETRUNC (length
	 * mismatch), DPL_EPEER (the peer failed first), DPL_ECANCELED
	 * (cancelled) or another error. Must not be called again on a
	 * completed request. Non-blocking; need not progress. Mandatory.
	 */
	int (*test)(void *ctx, void *req);

	/*
	 * progress - move every pending operation of the context as far as
	 * it goes without blocking. Returns the number of requests that
	 * completed (>= 0; an upper bound is fine, 0 means nothing new), or
	 * a negative code when the context itself is broken (then every
	 * pending request also completes with an error). Mandatory.
	 */
	int (*progress)(void *ctx);

	/*
	 * cancel - ask for a posted request to end early. The request still
	 * completes through test: DPL_ECANCELED, or its normal result when
	 * it completed first. A receive is cancelled promptly; a send may
	 * complete anyway. Non-blocking. Returns 0, or DPL_EINVAL for a
	 * request that is not pending. Mandatory.
	 */
	int (*cancel)(void *ctx, void *req);

	/*
	 * wait - block until a request of this context may have completed,
	 * or until `timeout_ns` passed; lets a caller that has nothing to do
	 * sleep instead of spinning. Spurious returns are fine. Returns 0,
	 * or a negative code like progress. Optional (NULL: callers spin on
	 * progress).
	 */
	int (*wait)(void *ctx, uint64_t timeout_ns);

	/*
	 * iallreduce - post an in-place sum of `count` elements of `dtype`
	 * at buf over the `n` ranks group[0..n) (sorted, including this
	 * rank; every member passes the same group, count, dtype and tag).
	 * Completes through test like a receive. The result must be the same
	 * bits on every member and independent of timing (a fixed reduction
	 * order); BF16 and F16 elements are summed as float and rounded to
	 * nearest even after each addition (dpl_host_sum in <dpl/device.h>).
	 * A transport that does not reduce a dtype or memory kind returns
	 * DPL_ENOTSUP and posts nothing; that refusal must depend only on
	 * what every member passes alike (n, count, dtype, mem), so that all
	 * members refuse together. The runner then reduces that stage with
	 * the core's ring for the rest of its life; any other error fails
	 * the step. Optional (NULL: the core runs a ring over isend/irecv).
	 */
	int (*iallreduce)(void *ctx, void *req, const uint32_t *group,
			  uint32_t n, void *buf, size_t count, uint32_t dtype,
			  uint32_t mem, uint64_t tag);
};

/* An open transport context: the table, its state and its rank. */
typedef struct dpl_transport dpl_transport;

/*
 * dpl_transport_open - check `ops` (abi_version, size, mandatory members,
 * req_size >= 1), allocate its context and call init with `p`. On
 * success *out owns the context (dpl_transport_close).
 * Errors: DPL_EABI for a table of another ABI version or too short for
 * its mandatory members; DPL_EINVAL for a missing mandatory member,
 * req_size 0, rank >= world_size or world_size 0 (named in
 * dpl_last_error()); DPL_ENOMEM; or init's error. Blocks as init does.
 * Thread-safe.
 */
DPL_EXTERN int dpl_transport_open(const struct dpl_transport_ops *ops,
				  const struct dpl_transport_params *p,
				  dpl_transport **out);

/*
 * dpl_transport_close - fini and free; NULL is a no-op. Outstanding
 * requests are cancelled by fini; their storage is the caller's again.
 */
DPL_EXTERN void dpl_transport_close(dpl_transport *t);

/* Accessors of an open transport. */
DPL_EXTERN const struct dpl_transport_ops *
dpl_transport_ops(const dpl_transport *t);
DPL_EXTERN void *dpl_transport_ctx(dpl_transport *t);
DPL_EXTERN uint32_t dpl_transport_rank(const dpl_transport *t);
DPL_EXTERN uint32_t dpl_transport_world_size(const dpl_transport *t);

/*
 * The checked data path: every caller (the runner, applications that
 * share a transport with it, the conformance battery) posts through these
 * instead of calling the table, so arguments are checked in one place.
 * Each has the blocking, ownership and return values of the member it
 * calls (see struct dpl_transport_ops); the checks add:
 *  isend/irecv: DPL_EINVAL for peer >= world size or the own rank, a tag
 *    beyond DPL_TAG_MAX, buf NULL with len > 0 or req NULL; DPL_ENOTSUP
 *    for a memory kind the transport does not take (DPL_MEM_CUDA without
 *    DPL_TRANSPORT_CAP_MEM_CUDA); DPL_EINVAL for an unknown kind. Each
 *    names the bad value in dpl_last_error(). Nothing is posted then.
 *  wait: without the optional member, progresses once and returns.
 *  iallreduce: DPL_ENOTSUP without the optional member; DPL_EINVAL for
 *    n == 0, a group not sorted, out of range or without this rank.
 * `req` is dpl_transport_req_size(t) bytes of storage aligned for any
 * type. Same threads rule as the table: one thread at a time per
 * transport.
 */
DPL_EXTERN int dpl_transport_isend(dpl_transport *t, void *req,
				   uint32_t peer, uint64_t tag,
				   const void *buf, size_t len, uint32_t mem);
DPL_EXTERN int dpl_transport_irecv(dpl_transport *t, void *req,
				   uint32_t peer, uint64_t tag, void *buf,
				   size_t len, uint32_t mem);
DPL_EXTERN int dpl_transport_test(dpl_transport *t, void *req);
DPL_EXTERN int dpl_transport_progress(dpl_transport *t);
DPL_EXTERN int dpl_transport_cancel(dpl_transport *t, void *req);
DPL_EXTERN int dpl_transport_wait(dpl_transport *t, uint64_t timeout_ns);
DPL_EXTERN int dpl_transport_iallreduce(dpl_transport *t, void *req,
					const uint32_t *group, uint32_t n,
					void *buf, size_t count,
					uint32_t dtype, uint32_t mem,
					uint64_t tag);
/* Bytes of one request's storage for this transport (>= 1). */
DPL_EXTERN size_t dpl_transport_req_size(const dpl_transport *t);

#ifdef __cplusplus
}
#endif
#endif /* DPL_TRANSPORT_H */
