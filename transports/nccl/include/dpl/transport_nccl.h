/*
 * dpl/transport_nccl.h - a shim transport whose iallreduce is NCCL's.
 *
 * Every point-to-point member (isend, irecv, test, progress, cancel,
 * wait) passes to an inner transport named by nccl.inner=NAME (a name
 * registered with dpl_transport_nccl_register, or anything
 * dpl_transport_load() opens; cudaipc for GPU jobs). Other options go to
 * the inner transport, as with transports/hook.
 *
 * iallreduce on DPL_MEM_CUDA memory runs ncclAllReduce (sum) on the
 * shim's own non-blocking stream; the request completes, seen from
 * test, once a CUDA event recorded after it has completed (the CPU never
 * blocks on the stream). Host memory returns DPL_ENOTSUP (the runner
 * falls back to its ring); the refusal depends only on mem, so every
 * member refuses alike. All four dpl dtypes are taken (see below).
 *
 * Communicators: one per distinct group, created on the group's first
 * device-memory iallreduce: group[0] calls ncclGetUniqueId and sends the
 * id to every other member through the inner transport on the tag the
 * runner passes for that reduction (the runner's ring tag of that
 * iteration and stage, unused by anything else once the transport
 * reduces that stage), then every member calls ncclCommInitRank. The
 * communicator is cached until fini, or dropped on an abort.
 *
 * The fixed-order contract: NCCL gives the same bits on every member,
 * and for a fixed NCCL version, topology, algorithm and protocol its
 * result does not depend on timing; pin them with NCCL_ALGO and
 * NCCL_PROTO across runs that must agree. Its order of additions is not
 * the core ring's, so a gradient digest differs, by rounding, from one
 * of a run without NCCL. BF16 and F16: NCCL adds two elements and rounds
 * the sum to nearest even in the element type after each addition,
 * which is dpl_host_sum's rule (sum as float, round after each
 * addition), so they are taken; only the order differs, as for F32.
 *
 * Failure: a reduction that is pending past the transport's timeout
 * (params.timeout_ms, default 60 s) or whose communicator reports an
 * asynchronous error (ncclCommGetAsyncError, polled in test) is aborted
 * (ncclCommAbort; the communicator is dropped and rebuilt by the next
 * reduction of that group) and ends DPL_ETIMEDOUT or DPL_EPEER. During
 * the id exchange a failed peer ends the request with the inner
 * transport's error (DPL_EPEER naming it).
 *
 * Without a usable GPU (no driver, no device) the first device-memory
 * iallreduce fails with DPL_ENOENT naming the CUDA call and its error;
 * init does not touch CUDA, so host-memory jobs over the shim work on
 * machines without a GPU.
 *
 * Point-to-point over NCCL is not offered as a transport: NCCL's
 * send/recv have no tags and no matching (only per-peer order), no
 * unexpected messages (a send blocks the stream until its receive is
 * posted), no cancel, no error for a size mismatch, and only coarse
 * failure detection (a hung communicator until abort), all of which the
 * dpl transport contract requires.
 *
 * Threads: a context is used by one thread at a time, as any dpl
 * transport.
 */
#ifndef DPL_TRANSPORT_NCCL_H
#define DPL_TRANSPORT_NCCL_H

#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest request storage of an inner transport the shim can wrap. */
#define DPL_NCCL_INNER_REQ_MAX 2048

DPL_EXTERN extern const struct dpl_transport_ops dpl_transport_nccl;
/* The same over a transport whose ranks are threads of one process
 * (inproc): one GPU per thread, as NCCL allows. */
DPL_EXTERN extern const struct dpl_transport_ops dpl_transport_nccl_threads;

/*
 * dpl_transport_nccl_register - make `inner` (a linked table) known to
 * nccl.inner by its name, for programs that link their transports. The
 * table must outlive every context opened on it; registering a name
 * again replaces it. Returns 0, DPL_EINVAL for NULL or a table without
 * a name, DPL_ENOMEM past 32 names. Thread-safe.
 */
DPL_EXTERN int dpl_transport_nccl_register(const struct dpl_transport_ops *inner);

#ifdef __cplusplus
}
#endif
#endif /* DPL_TRANSPORT_NCCL_H */
