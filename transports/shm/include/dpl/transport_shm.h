/*
 * dpl/transport_shm.h - the shared-memory transport: the ranks of a job
 * are processes of one host. Link dpl::transport_shm and pass
 * &dpl_transport_shm to dpl_transport_open().
 *
 * init (struct dpl_transport_params):
 *  - bootstrap: "host:port" of rank 0's rendezvous (dpl/bootstrap.h);
 *    NULL reads DPL_ROOT, else MASTER_ADDR and MASTER_PORT + 1. A world
 *    of one rank needs none.
 *  - timeout_ms: how long init waits for the other ranks, and how long a
 *    peer may go without calling progress or wait before it counts as
 *    failed (0 = 60 s).
 *  - options: "key=value,..." with sizes in bytes or with a k/m suffix
 *    (1024-based); every rank must pass the same ring and eager:
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
 *                   always stream them through the ring
 *
 * Semantics: those of dpl/transport.h, with host memory only
 * (DPL_ENOTSUP otherwise). Sends complete when the receiver matched
 * them; a full ring makes isend return DPL_EAGAIN; cancel works on
 * receives and on sends the receiver has not matched yet. Peer failure
 * (DPL_TRANSPORT_CAP_PEER_FAILURE): a peer that exits, crashes or calls
 * fini is DPL_EPEER within 50 ms of waiting or progressing (2 s declared);
 * one that stops calling progress and wait for timeout_ms counts as
 * failed. wait
 * is available (DPL_TRANSPORT_CAP_WAIT). No native allreduce.
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
