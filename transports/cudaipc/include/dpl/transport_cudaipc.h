/*
 * dpl/transport_cudaipc.h - the CUDA IPC transport: the ranks of a job
 * are processes of one host, each with a CUDA device, meeting in POSIX
 * shared memory as dpl_transport_shm does (it is shm's code, built a
 * second time, plus a CUDA probe at init).
 *
 * Table: dpl_transport_cudaipc (name "cudaipc"). caps:
 * DPL_TRANSPORT_CAP_PEER_FAILURE. Not yet DPL_TRANSPORT_CAP_MEM_CUDA:
 * device-memory messages (the pull over shm's RTS frame that README.md
 * describes) are not in this version, so the checked layer refuses
 * DPL_MEM_CUDA with DPL_ENOTSUP before the transport sees it.
 *
 * Memory kinds: DPL_MEM_HOST, with shm's protocol (eager frames, one
 * process_vm_readv copy for long messages, streaming where that is not
 * permitted), its matching, truncation, cancel and liveness rules.
 *
 * Options: those of dpl/transport_shm.h (ring, eager, chunk, spin_us,
 * timeout_ms, cma), with the same defaults and errors.
 *
 * init (blocking, collective, one thread): first asks the CUDA runtime
 * for a device. Without one it fails with DPL_ENOENT and a message
 * naming the runtime's error (cudaErrorNoDevice or
 * cudaErrorInsufficientDriver), as dpl_device_cuda does, before any
 * shared memory exists; another CUDA error is DPL_EIO naming it. Then
 * init is shm's (segments, the out-of-band agreement). fini, isend,
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
