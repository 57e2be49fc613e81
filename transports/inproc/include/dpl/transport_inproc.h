/*
 * dpl/transport_inproc.h - the in-process transport: the ranks of a
 * world are threads of one process, and a message is one or two
 * memcpys. It is the default transport of `dpl train` and of the
 * runner's tests. Link dpl::transport_inproc and pass
 * &dpl_transport_inproc to dpl_transport_open().
 *
 * init (struct dpl_transport_params):
 *  - world: the name of the world the ranks meet in (NULL is
 *    "default"; at most 127 bytes). The first rank that joins creates
 *    it with its world_size; the others must pass the same size
 *    (DPL_EINVAL otherwise); a rank taken twice is DPL_EBUSY. The world
 *    is freed when its last rank leaves, and the name can then be used
 *    again, with any size. init does not wait for the other ranks.
 *  - oob: not used (the threads meet in the process); may be NULL.
 *  - timeout_ms: not used; a thread that stops answering without fini
 *    is not detected, and callers bound their waits.
 *  - options: "key=value,..." (dpl_options_parse), every key optional:
 *      eager=BYTES  0..DPL_INPROC_EAGER_MAX (default DPL_INPROC_EAGER_MAX):
 *                   the largest message copied through the pair's ring,
 *                   so that its send completes at once; eager=0 makes
 *                   every send wait for its receive (rendezvous always,
 *                   the strictest behaviour the contract allows, so
 *                   ordering bugs in a caller show at once)
 *    An unknown key or a value out of range is DPL_EINVAL, naming it.
 *    The ranks of one world may pass different options.
 *
 * Semantics: those of dpl/transport.h: exact tag match, FIFO per
 * (sender, receiver, tag), exact-size receives (a length mismatch
 * completes the receive with DPL_ETRUNC and copies nothing), host memory
 * only. A send of up to `eager` bytes posted while its ring has room and
 * no earlier send to that rank waits completes at once (with 0, even
 * when the receive turns out to have another length); any other send
 * completes when the receiver copied it. isend never returns
 * DPL_EAGAIN: any number of unexpected messages is fine.
 *
 * Peer failure (DPL_TRANSPORT_CAP_PEER_FAILURE): a rank that calls fini
 * is dead for the others at once. What it put in the rings before is
 * still delivered; its waiting sends are cancelled; the others' pending
 * receives from it that nothing it sent can match, and their waiting
 * sends to it, complete with DPL_EPEER; later posts to it fail with
 * DPL_EPEER.
 *
 * Members: wait is present (a rank sleeps on its doorbell until a
 * message for it, a completed send of its or a departing peer wakes it);
 * no iallreduce (the core runs its ring).
 *
 * Threads: every rank of a world is its own context, used by one thread
 * at a time; the ranks of one world, and different worlds, may run in
 * different threads at once. See transports/inproc/README.md.
 */
#ifndef DPL_TRANSPORT_INPROC_H
#define DPL_TRANSPORT_INPROC_H

#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest value of the eager option, and its default: the bytes of
 * message one ring slot holds. */
#define DPL_INPROC_EAGER_MAX 104u

/* The transport table. */
DPL_EXTERN extern const struct dpl_transport_ops dpl_transport_inproc;

#ifdef __cplusplus
}
#endif
#endif /* DPL_TRANSPORT_INPROC_H */
