/*
 * dpl/transport_shm.h - the shared-memory transport: the ranks of a job
 * are processes of one host. Link dpl::transport_shm and pass
 * &dpl_transport_shm to dpl_transport_open().
 *
 * init (struct dpl_transport_params):
 *  - oob: the host's out-of-band exchange (dpl/transport.h; e.g.
 *    dpl_bootstrap_oob() of dpl/bootstrap.h, MPI, or the embedder's
 *    own). init uses its allgather only: once for the ranks' hellos
 *    (pid, options, host, user; rank 0's job id names the segments),
 *    then once per step to agree that every rank created and mapped
 *    its segments. The transport opens no rendezvous of its own and
 *    reads no environment. NULL (or no allgather) is DPL_EINVAL,
 *    except in a world of one rank, which needs no exchange. A failure
 *    of the exchange fails init with its error and message.
 *  - timeout_ms: how long a peer may go without calling progress or
 *    wait before it counts as failed (0 = 60 s). How long init waits
 *    for the other ranks is the exchange's business.
 *  - options: "key=value,..." (dpl_options_parse() of dpl/backend.h:
 *    each key at most once, sizes in bytes or with a k, m or g suffix,
 *    1024-based); every rank must pass the same ring and eager:
 *      ring=BYTES   bytes of each inbound ring, a power of two in
 *                   64k..1024m (default DPL_SHM_DEFAULT_RING); each rank's
 *                   segment holds world_size - 1 of them
 *      eager=BYTES  messages up to this size are copied through the ring,
 *                   longer ones are read from the sender's memory at
 *                   most ring/4 (default DPL_SHM_DEFAULT_EAGER)
 *      spin_us=N    how long wait spins before it sleeps (default
 *                   DPL_SHM_DEFAULT_SPIN_US, at most 1000000)
 *      cma=0|1      1 (default): long messages move with one
 *                   process_vm_readv where the kernel allows it; 0:
 *                   always stream them through the ring (on/off,
 *                   yes/no, true/false work too)
 *
 * Semantics: those of dpl/transport.h, with host memory only (the layer
 * refuses other kinds with DPL_ENOTSUP). Sends complete when the receiver matched
 * them; a full ring makes isend return DPL_EAGAIN; cancel works on
 * receives and on sends the receiver has not matched yet. Peer failure
 * (DPL_TRANSPORT_CAP_PEER_FAILURE): a peer that exits, crashes or calls
 * fini is DPL_EPEER within 50 ms of waiting or progressing (2 s declared);
 * one that stops calling progress and wait for timeout_ms counts as
 * failed. The table has wait (it sleeps on a futex) and no iallreduce
 * (the core runs its ring). Callers post through dpl_transport_isend()
 * and its siblings, which check peers, tags, buffers and memory kinds;
 * the transport itself refuses only posts to a peer known failed
 * (DPL_EPEER, naming the rank and why).
 *
 * Segments are named /dev/shm/dpl-shm-<job>-r<rank>-p<pid> and removed as
 * soon as every rank has mapped them; init removes those left by ranks
 * that died during an earlier init. See transports/shm/README.md.
 */
#ifndef DPL_TRANSPORT_SHM_H
#define DPL_TRANSPORT_SHM_H

#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_SHM_DEFAULT_RING (256u * 1024u)
#define DPL_SHM_DEFAULT_EAGER (16u * 1024u)
#define DPL_SHM_DEFAULT_SPIN_US 50u

/* The transport table. */
DPL_EXTERN extern const struct dpl_transport_ops dpl_transport_shm;

#ifdef __cplusplus
}
#endif
#endif /* DPL_TRANSPORT_SHM_H */
