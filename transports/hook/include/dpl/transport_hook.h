/*
 * dpl/transport_hook.h - a shim over any transport, for tests and for
 * finding out what a job does: it passes every operation to an inner
 * transport and can trace each one, delay posts, fail the Nth operation
 * with a chosen error, or make a peer look dead. The runner's error-path
 * tests drive it over every transport; with no fault set it is
 * transparent (the conformance battery passes on it as on its inner
 * transport). Link dpl::transport_hook and pass &dpl_transport_hook (the
 * inner transport's ranks are processes) or &dpl_transport_hook_threads
 * (they are threads of one process: inproc) to dpl_transport_open().
 *
 * init (struct dpl_transport_params): rank, world_size, oob, world and
 * timeout_ms go to the inner transport as they are. options: the keys
 * that start with "hook." are the shim's; every other part goes, in
 * order, to the inner transport ("hook.inner=inproc,eager=0" opens
 * inproc with "eager=0"). The shim's keys:
 *   hook.inner=NAME|PATH  the inner transport (required): a table given
 *                         to dpl_transport_hook_register() by that name,
 *                         else what dpl_transport_load(NAME|PATH) finds
 *   hook.trace=BOOL       one line per operation on stderr ("hook rank 1:
 *                         isend peer 2 tag 0x.. 4096 B: 0")
 *   hook.delay_us=N       sleep N microseconds before each isend/irecv
 *   hook.fail_after=N     the Nth counted operation of this context
 *                         (1-based; 0, the default, never) fails with
 *                         hook.fail_code: a post returns it having
 *                         posted nothing, a completion reports it (the
 *                         request is the caller's again, as after any
 *                         completion)
 *   hook.fail_op=post|isend|irecv|test  which operations count
 *                         (default post: isend and irecv)
 *   hook.fail_code=eio|epeer|enomem|etimedout  (default eio)
 *   hook.drop_peer=R      after hook.drop_after posts of this context
 *                         (default 0: from init on), rank R counts as
 *                         dead here: posts to it return DPL_EPEER, and
 *                         requests with it are cancelled in the inner
 *                         transport and complete with DPL_EPEER
 *   hook.rank=R           the faults above apply on rank R only (default:
 *                         every rank of the job)
 * An unknown hook key, a bad value, a missing or unknown inner transport,
 * an inner whose request storage exceeds DPL_HOOK_INNER_REQ_MAX, or an
 * inner whose ranks run otherwise than the table chosen says
 * (DPL_TRANSPORT_CAP_IN_PROCESS) is DPL_EINVAL naming it; the inner
 * transport's own init errors come back as they are.
 *
 * Semantics: the inner transport's; caps: DPL_TRANSPORT_CAP_PEER_FAILURE
 * (the inner must have it: init refuses one without), and
 * DPL_TRANSPORT_CAP_IN_PROCESS on dpl_transport_hook_threads; host
 * memory only. wait goes to the inner transport (which progresses once
 * when it has none); the shim has no iallreduce, so the runner reduces
 * with its own ring over it. The data path allocates nothing.
 *
 * Threads: as the inner transport; the registry below is locked.
 */
#ifndef DPL_TRANSPORT_HOOK_H
#define DPL_TRANSPORT_HOOK_H

#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest request storage of an inner transport the shim can wrap. */
#define DPL_HOOK_INNER_REQ_MAX 2048

DPL_EXTERN extern const struct dpl_transport_ops dpl_transport_hook;
DPL_EXTERN extern const struct dpl_transport_ops dpl_transport_hook_threads;

/*
 * dpl_transport_hook_register - make `inner` (a linked table, e.g.
 * &dpl_transport_inproc) known to hook.inner by its name, for programs
 * that link their transports instead of loading them. The table must
 * outlive every context opened on it. Registering a name again replaces
 * it. Returns 0, DPL_EINVAL for NULL or a table without a name,
 * DPL_ENOMEM past 32 names. Thread-safe.
 */
DPL_EXTERN int dpl_transport_hook_register(const struct dpl_transport_ops *inner);

#ifdef __cplusplus
}
#endif
#endif /* DPL_TRANSPORT_HOOK_H */
