/*
 * dpl/bootstrap.h - how the ranks of a job meet: a small out-of-band TCP
 * channel for exchanging address blobs and for barriers. It is one
 * provider of the host's out-of-band exchange (struct dpl_oob in
 * dpl/transport.h, see dpl_bootstrap_oob()); an embedder with its own
 * rendezvous (MPI, torchrun's store) passes that instead. Library
 * dpl::bootstrap (libdpl-bootstrap); the core does not need it.
 *
 * Rendezvous: rank 0 listens on the root address ("host:port"); every
 * other rank connects to it, says who it is, and rank 0 answers once all
 * ranks are there (a star). Collectives go through rank 0. Everything is
 * bounded by the timeout given at open; a rank that never arrives is an
 * error naming it.
 *
 * The root address comes from the caller or from the environment, in
 * this order: DPL_RANK, DPL_WORLD_SIZE, DPL_ROOT ("host:port"); else
 * torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT. With torchrun's
 * variables dpl listens on MASTER_PORT + 1, because torchrun's agent (or
 * torch.distributed's store) already holds MASTER_PORT itself.
 *
 * A launcher that starts the ranks itself can bind and listen on the
 * root first and hand rank 0 that socket: DPL_ROOT_FD names the
 * inherited descriptor, a listening TCP socket on DPL_ROOT's port (`dpl
 * train --nprocs` and `python -m dpl.run` do this). Rank 0 then listens
 * on it instead of binding the port itself, so no other process can take
 * the port between the launcher choosing it and rank 0 listening. Read
 * only by rank 0, only when the root comes from the environment, and
 * only until one such open in a process has taken it: that open owns the
 * descriptor from then on (closes it when the rendezvous ends) and later
 * opens bind the root themselves. A value that is not such a socket fails
 * the open with DPL_EINVAL naming it and is left as it is. A launcher
 * that chooses the root inside rank 0's own process (as
 * dpl_bootstrap_mpi_root() does under mpirun) holds it with
 * dpl_bootstrap_hold_root() instead: the same guarantee, with nothing
 * in the environment.
 *
 * The job secret: every rank reads DPL_JOB_SECRET (16..1024 bytes; `dpl
 * train --nprocs` and `python -m dpl.run` put 64 fresh random hex digits
 * there for each job, as a per-job unique id). A joining rank and rank 0
 * each prove that they hold it without sending it: fresh nonces from
 * both sides, answered with HMAC-SHA256 keyed by the secret over the
 * nonces, the rank, the world size and a protocol label (OpenSSL's
 * libcrypto, compared in constant time). Rank 0 admits only ranks that
 * prove it, and a rank trusts only a rank 0 that proves it, so a stray
 * listener cannot collect the job's ranks. A connection that fails (not
 * dpl's protocol, silent for 2 s, a wrong proof, a rank that is already
 * there) is refused, logged on rank 0's stderr in one line naming the
 * peer's address and the reason, and the rendezvous goes on until its
 * timeout; rank 0 runs many handshakes at once and waits on none.
 * Without DPL_JOB_SECRET the rendezvous works as NCCL's and
 * torch.distributed's stores do, admitting any process that reaches the
 * port, and rank 0 says so once per process on stderr (for a world of
 * more than one rank); set the same secret on every rank (torchrun and
 * hand-made launches; under mpirun dpl_bootstrap_mpi_root() sets it) to
 * close it. A secret on some ranks and
 * not on others fails the rendezvous with an error that says so.
 *
 * Blame: rank 0 owns the verdict of the rendezvous. A rank that dies
 * before it connects or during its handshake is named by rank 0 as one
 * that never arrived (with what became of a connection that claimed it),
 * and rank 0 sends that cause to every rank that arrived; a rank that was
 * admitted and dies is named as dead. A connected rank waits up to 1 s
 * past its timeout for rank 0's verdict, and a rank whose timeout passes
 * first tells rank 0 that it stopped waiting, so that it is not taken for
 * dead.
 *
 * Liveness: the channel stays open until close. A peer whose process
 * dies closes its socket; the next collective then fails with DPL_EPEER
 * naming it, and dpl_bootstrap_check() reports it without blocking.
 *
 * Threads: one thread at a time per bootstrap handle.
 */
#ifndef DPL_BOOTSTRAP_H
#define DPL_BOOTSTRAP_H

#include <dpl/common.h>
#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest blob one rank contributes to a collective. */
#define DPL_BOOTSTRAP_BLOB_MAX 4096

/* Largest world a rendezvous admits. */
#define DPL_BOOTSTRAP_WORLD_MAX 65536u

struct dpl_bootstrap_params {
	uint32_t rank;       /* < world_size */
	uint32_t world_size; /* >= 1 */
	const char *root;    /* "host:port" of rank 0; "host:0" lets rank 0
				pick a port (see dpl_bootstrap_root); NULL:
				from the environment (DPL_ROOT, else
				MASTER_ADDR:MASTER_PORT + 1; rank 0 then
				takes DPL_ROOT_FD, see above) */
	uint32_t timeout_ms; /* for open and every collective; 0 = 60000 */
};

typedef struct dpl_bootstrap dpl_bootstrap;

/*
 * dpl_bootstrap_open - meet the other ranks. Blocks until all world_size
 * ranks have connected or timeout_ms passes (a rank other than 0 that
 * has connected waits at most 1 s more for rank 0's verdict). Rank 0
 * binds root (loopback or the given host only, never a wildcard address
 * unless asked with "0.0.0.0"), or takes the socket that
 * dpl_bootstrap_hold_root() or DPL_ROOT_FD hands it (see above and
 * below). Reads DPL_JOB_SECRET (see above). On success *out owns the
 * handle.
 * Errors: DPL_EINVAL (rank, world size, root, DPL_ROOT_FD or
 * DPL_JOB_SECRET's length malformed, named; rank 0 did not prove the job
 * secret),
 * DPL_ETIMEDOUT ("ranks 2, 3 never arrived" / "root 127.0.0.1:29500 did
 * not answer"), DPL_EBUSY (a rank arrived twice), DPL_EIO (socket
 * errors, with errno's text), DPL_ENOMEM.
 */
DPL_EXTERN int dpl_bootstrap_open(const struct dpl_bootstrap_params *p,
				  dpl_bootstrap **out);

/*
 * dpl_bootstrap_env_rank - the rank and world size that
 * dpl_bootstrap_open_env() joins with, read from the environment without
 * joining: the rank from DPL_RANK, else RANK; the world size from
 * DPL_WORLD_SIZE, else WORLD_SIZE (each variable on its own, so DPL_RANK
 * with torchrun's WORLD_SIZE is a pair). Values are plain decimal digits
 * (no sign, no blanks), the world size 1..DPL_BOOTSTRAP_WORLD_MAX, the rank
 * below it.
 * Stores both only on success. Reads the environment, so it races with
 * a thread that changes it (getenv); otherwise any thread, no blocking.
 * Errors: DPL_ENOENT when neither DPL_RANK nor RANK is set (no world in
 * the environment: a caller may then run as one rank); DPL_EINVAL
 * naming the variable and its value when the world size is missing or
 * either is malformed, or rank/world_size is NULL.
 */
DPL_EXTERN int dpl_bootstrap_env_rank(uint32_t *rank, uint32_t *world_size);

/*
 * dpl_bootstrap_open_env - dpl_bootstrap_open with rank and world size
 * as dpl_bootstrap_env_rank() reads them, and the root from the
 * environment (see above). DPL_EINVAL naming the variable when one is
 * missing (DPL_RANK/RANK included) or malformed.
 */
DPL_EXTERN int dpl_bootstrap_open_env(uint32_t timeout_ms,
				      dpl_bootstrap **out);

/*
 * dpl_bootstrap_hold_root - choose a root for a rendezvous this process
 * will lead, and hold its port until then: binds and listens on `host`
 * at a port the kernel picks, keeps the socket, and writes the root
 * ("addr:port", "[addr]:port" for IPv6, numeric) into root[0..size).
 * The first dpl_bootstrap_open() as rank 0 in this process at a root
 * that resolves to that address and port (given or from DPL_ROOT) takes
 * the socket instead of binding the port, and closes it when its
 * rendezvous ends. So no other process can take the port between
 * choosing it and the rendezvous, as it can when a free port is found
 * and released; a launcher that hands out roots from rank 0's process
 * calls this (dpl_bootstrap_mpi_root() does).
 * host: a name or a numeric address; NULL is "127.0.0.1". The socket
 * belongs to this process until an open takes it or
 * dpl_bootstrap_release_root() closes it (otherwise at exit); it is
 * close-on-exec. At most 64 roots are held at once.
 * Threads: any thread; holding and taking are serialised by a lock.
 * Errors, each named in dpl_last_error(): DPL_EINVAL (root NULL, host
 * does not resolve), DPL_EIO (no socket on host can be bound and
 * listen), DPL_ERANGE (size below the root's length), DPL_EBUSY (64
 * roots held); nothing is held after an error.
 */
DPL_EXTERN int dpl_bootstrap_hold_root(const char *host, char *root,
				       size_t size);

/*
 * dpl_bootstrap_release_root - close the socket dpl_bootstrap_hold_root()
 * holds for `root` (the string it wrote, or any root that resolves to the
 * same address and port), for a rendezvous that will not happen. Any
 * thread.
 * Errors: DPL_EINVAL (root NULL or not "host:port", named), DPL_ENOENT
 * (no socket is held there: never held, or already taken or released).
 */
DPL_EXTERN int dpl_bootstrap_release_root(const char *root);

/* Rank and world size of an open handle. */
DPL_EXTERN uint32_t dpl_bootstrap_rank(const dpl_bootstrap *b);
DPL_EXTERN uint32_t dpl_bootstrap_world_size(const dpl_bootstrap *b);

/*
 * dpl_bootstrap_root - the root address actually bound ("127.0.0.1:4711"
 * when rank 0 was given port 0), into buf[0..size). Returns the length or
 * DPL_ERANGE when buf is too small.
 */
DPL_EXTERN int dpl_bootstrap_root(const dpl_bootstrap *b, char *buf,
				  size_t size);

/*
 * dpl_bootstrap_allgather - every rank contributes `len` bytes (the same
 * len on all ranks, <= DPL_BOOTSTRAP_BLOB_MAX); on return all[r * len ..]
 * holds rank r's bytes on every rank. Blocks up to the timeout: rank 0
 * for the contributions, the other ranks a grace period longer (a quarter
 * of the timeout, at most 0.5 s) for the result, so that when rank 0
 * gives up its verdict reaches them and every rank names the same ranks.
 * Errors: DPL_EINVAL (len too large or different across ranks),
 * DPL_EPEER naming a rank that died, DPL_ETIMEDOUT naming the ranks that
 * did not take part (on the other ranks: "... (reported by rank 0)"; or
 * rank 0 itself when its verdict did not come either), DPL_EIO.
 */
DPL_EXTERN int dpl_bootstrap_allgather(dpl_bootstrap *b, const void *mine,
				       size_t len, void *all);

/* dpl_bootstrap_barrier - allgather of nothing: same blocking and errors. */
DPL_EXTERN int dpl_bootstrap_barrier(dpl_bootstrap *b);

/* No rank: what dpl_bootstrap_check() stores when it knows of none. */
#define DPL_BOOTSTRAP_NO_RANK UINT32_MAX

/*
 * dpl_bootstrap_check - non-blocking liveness check of the channel:
 * 0 while every peer this rank is connected to is there; DPL_EPEER once
 * one has closed its end (rank 0 sees every rank; other ranks see rank
 * 0), or once a collective failed because a rank died (rank 0 tells the
 * others which one). With DPL_EPEER the dead rank is named in
 * dpl_last_error() and stored in *dead_rank; otherwise *dead_rank is
 * DPL_BOOTSTRAP_NO_RANK. dead_rank may be NULL. DPL_EINVAL for b == NULL.
 */
DPL_EXTERN int dpl_bootstrap_check(dpl_bootstrap *b, uint32_t *dead_rank);

/*
 * dpl_bootstrap_oob - fill *out with `b` as the out-of-band exchange a
 * transport's init uses (params.oob of dpl_transport_open()): its
 * allgather is dpl_bootstrap_allgather(), its barrier
 * dpl_bootstrap_barrier(), with their blocking, timeout and errors. `b`
 * must stay open while a transport's init runs; one handle serves every
 * transport the job opens. Does not block.
 */
DPL_EXTERN void dpl_bootstrap_oob(dpl_bootstrap *b, struct dpl_oob *out);

/* dpl_bootstrap_close - close the channel and free; NULL is a no-op. */
DPL_EXTERN void dpl_bootstrap_close(dpl_bootstrap *b);

#ifdef __cplusplus
}
#endif
#endif /* DPL_BOOTSTRAP_H */
