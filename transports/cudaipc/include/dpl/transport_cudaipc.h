/*
 * dpl/transport_cudaipc.h - the CUDA IPC transport: the ranks of a job
 * are processes of one host, each with a CUDA device, meeting in POSIX
 * shared memory as dpl_transport_shm does (it is shm's code, built a
 * second time, plus a CUDA probe at init and a device-memory path).
 *
 * Table: dpl_transport_cudaipc (name "cudaipc"). caps:
 * DPL_TRANSPORT_CAP_PEER_FAILURE | DPL_TRANSPORT_CAP_MEM_CUDA.
 *
 * Memory kinds: DPL_MEM_HOST, with shm's protocol (eager frames, one
 * process_vm_readv copy for long messages, streaming where that is not
 * permitted), its matching, truncation, cancel and liveness rules.
 * DPL_MEM_CUDA on either side or both: the sender's buffer goes as a
 * CUDA IPC handle in shm's RTS frame; the receiver opens it (once per
 * peer and allocation, cached) and copies on its own stream, and both
 * requests complete once that copy is done. A host send into a device
 * receive is copied host to device from the ring. Matching and
 * DPL_ETRUNC (both sides, nothing copied) are shm's; a receive whose
 * copy is queued cannot be cancelled (cancel returns 0 and it
 * completes). A device buffer the runtime cannot export fails isend
 * with DPL_EINVAL or DPL_EIO. A handle the receiver cannot open later
 * (ranks that init's check did not pair: GPUs without peer access) ends
 * both requests with DPL_EIO, the receiver's message naming the sender
 * and the CUDA error. The copies
 * run on a stream made at the first one, on the device current then
 * (the receiving thread's: set it before posting device receives).
 * README.md says what has not run on a GPU.
 *
 * Options: those of dpl/transport_shm.h (ring, eager, chunk, spin_us,
 * timeout_ms, cma), with the same defaults and errors.
 *
 * init (blocking, collective, one thread): first asks the CUDA runtime
 * for a device. Without one it fails with DPL_ENOENT and a message
 * naming the runtime's error (cudaErrorNoDevice or
 * cudaErrorInsufficientDriver), as dpl_device_cuda does, before any
 * shared memory exists; another CUDA error is DPL_EIO naming it. Then
 * init is shm's (segments, the out-of-band agreement), then, with more
 * than one rank, a collective check that the platform allows CUDA IPC:
 * each rank allocates 4 KiB of device memory (making the CUDA context of
 * the device current then: set the rank's device before opening, as for
 * NCCL), exports it and maps the next rank's; where any rank cannot,
 * init fails on every rank with DPL_EIO (or the CUDA call's code) and
 * one message naming that rank, what it could not map and the CUDA
 * error, and nothing is left. fini (which also waits for
 * queued copies and closes the handles it opened), isend,
 * irecv, test, progress, cancel and wait are shm's: see
 * dpl/transport_shm.h for their blocking, thread and error rules.
 *
 * Limits: one host; the ranks' processes must see the same /dev/shm.
 */
#ifndef DPL_TRANSPORT_CUDAIPC_H
#define DPL_TRANSPORT_CUDAIPC_H

#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA IPC transport's table (see above). */
DPL_EXTERN extern const struct dpl_transport_ops dpl_transport_cudaipc;

#ifdef __cplusplus
}
#endif

#endif /* DPL_TRANSPORT_CUDAIPC_H */
