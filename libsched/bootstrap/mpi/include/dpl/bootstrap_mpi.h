/*
 * dpl/bootstrap_mpi.h - dpl's TCP rendezvous (dpl/bootstrap.h) for jobs
 * started by an MPI launcher (mpirun, srun with PMIx): the ranks and the
 * root address come from an MPI communicator instead of the environment.
 * Part of the separate library dpl::mpi (libdpl-mpi), built when CMake
 * finds MPI (DPL_WITH_MPI); the core does not depend on MPI.
 *
 * MPI is used only here, once, to agree on the root: the transports then
 * meet and move data on their own. MPI must be initialised (MPI_Init or
 * MPI_Init_thread) by the caller before these calls, and finalised by it
 * after the last dpl object that used the root is closed.
 *
 * Threads: both calls are collectives over `comm`; call them from one
 * thread per process, as MPI's own collectives.
 */
#ifndef DPL_BOOTSTRAP_MPI_H
#define DPL_BOOTSTRAP_MPI_H

#include <mpi.h>

#include <dpl/bootstrap.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Room for any root address dpl_bootstrap_mpi_root() writes. */
#define DPL_BOOTSTRAP_MPI_ROOT_MAX 300

/*
 * dpl_bootstrap_mpi_root - agree on a rendezvous root over `comm`.
 * Collective: every rank of comm calls it. Rank 0 of comm finds a free
 * TCP port on `host` and broadcasts "host:port" ("[host]:port" for an
 * IPv6 address); every rank receives it in root[0..size) and its own
 * rank and the size of comm in *rank and *world_size, ready for
 * struct dpl_bootstrap_params or a transport's `bootstrap` field.
 * host: what rank 0 binds and the others connect to; NULL picks
 * 127.0.0.1 when every rank of comm runs on rank 0's node (the
 * MPI_COMM_TYPE_SHARED split), else $DPL_MPI_ROOT_HOST, else rank 0's
 * host name.
 * Rank 0 also broadcasts the job secret (its own DPL_JOB_SECRET, else 64
 * fresh random hex digits) and every rank of comm sets DPL_JOB_SECRET to
 * it in its environment (setenv: call it before other threads read the
 * environment), so that the rendezvous admits only this job's ranks
 * (dpl/bootstrap.h).
 * Rank 0 holds the root's port from then on (dpl_bootstrap_hold_root):
 * its first dpl_bootstrap_open() at that root (given, from DPL_ROOT, or
 * through a transport's `bootstrap` field) listens on the held socket,
 * so no other process can take the port in between; a rank 0 that will
 * not open there releases it with dpl_bootstrap_release_root(root).
 * Errors, each named in dpl_last_error(): DPL_EINVAL (comm is
 * MPI_COMM_NULL, root, rank or world_size NULL, MPI not initialised or
 * already finalised) is found before any communication, so, as with
 * MPI's own collectives, every rank must pass valid arguments;
 * DPL_ERANGE on a rank whose size is below the root's length
 * (DPL_BOOTSTRAP_MPI_ROOT_MAX is always enough); DPL_EIO, the same on
 * every rank, when host does not resolve, no port can be bound on it or
 * an MPI call failed.
 */
DPL_EXTERN int dpl_bootstrap_mpi_root(MPI_Comm comm, const char *host,
				      char *root, size_t size,
				      uint32_t *rank, uint32_t *world_size);

/*
 * dpl_bootstrap_open_mpi - dpl_bootstrap_open() for the ranks of `comm`,
 * at the root dpl_bootstrap_mpi_root(comm, NULL, ...) agrees on.
 * Collective; blocks as dpl_bootstrap_open() does (timeout_ms, 0 =
 * 60000). On success *out owns the handle (dpl_bootstrap_close); on
 * failure rank 0 holds no socket.
 * Errors: those of dpl_bootstrap_mpi_root() and dpl_bootstrap_open().
 */
DPL_EXTERN int dpl_bootstrap_open_mpi(MPI_Comm comm, uint32_t timeout_ms,
				      dpl_bootstrap **out);

#ifdef __cplusplus
}
#endif

#endif
