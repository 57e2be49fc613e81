/*
 * dpl/transport_ucx.h - the UCX transport: UCP tag messages between the
 * processes of a job, over shared memory and cross-memory attach on one
 * host, or TCP between hosts, as UCX_TLS selects. Link dpl::transport_ucx
 * and pass &dpl_transport_ucx to dpl_transport_open().
 *
 * init (struct dpl_transport_params):
 *  - oob: the host's out-of-band exchange (dpl/transport.h), used during
 *    init for the worker-address exchange and a closing barrier; NULL is
 *    DPL_EINVAL ("ucx: init needs the host's out-of-band exchange
 *    (params.oob)"). dpl's TCP rendezvous (dpl/bootstrap.h,
 *    dpl_bootstrap_oob) is one provider. A world of one calls it never.
 *  - timeout_ms: how long init waits for every peer's hello, and the
 *    liveness timeout: a peer heard from for longer is failed (0 = 60 s).
 *    Heartbeats go every timeout_ms / 8 (10 ms to 1 s).
 *  - options: "key=value,..."; a list value continues over commas
 *    ("tls=sm,tcp,err_mode=peer"):
 *      err_mode=none|peer  UCX's endpoint error mode (default none: the
 *                          PEER mode drops UCX's shared-memory lanes)
 *      tls=LIST            UCX_TLS for this context (default: the
 *                          environment's)
 *      net_devices=LIST    UCX_NET_DEVICES for this context (default: the
 *                          environment's, else "lo")
 *    Each value is at most 255 bytes; an unknown key, a key given twice
 *    or a bad value is DPL_EINVAL naming it.
 *  - world is ignored.
 *
 * Semantics: those of dpl/transport.h, with host memory only. Peer
 * failure (DPL_TRANSPORT_CAP_PEER_FAILURE): a peer on this host whose
 * process is gone is found within one 100 ms liveness sweep, a lost TCP
 * connection when UCX reports it, a peer that called fini by its
 * goodbye, a silent one after timeout_ms. wait sleeps on the workers'
 * event descriptors, never past the next liveness sweep. No native
 * allreduce. See transports/ucx/README.md.
 */
#ifndef DPL_TRANSPORT_UCX_H
#define DPL_TRANSPORT_UCX_H

#include <stddef.h>

#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The transport table. */
DPL_EXTERN extern const struct dpl_transport_ops dpl_transport_ucx;

/*
 * dpl_transport_ucx_probe - the UCP context init would open with
 * `options` (the init options above; NULL or "" for none): the same
 * UCX_* environment, tls and net_devices, NET_DEVICES=lo unless devices
 * are named, and the same context parameters. The context is opened and
 * closed again; no worker, no endpoint. `dpl info` reports through it.
 *
 * buf, len: where the answer goes, NUL-terminated and cut to len:
 *           "UCX_TLS=T, UCX_NET_DEVICES=D" (the values the context got,
 *           as UCX prints its configuration) when ucp_init succeeds, else
 *           the message dpl_last_error() also holds.
 *
 * Returns 0; DPL_EINVAL for a NULL buf, a len of 0, a bad option (named)
 * or a setting UCX refuses (named); DPL_EIO when ucp_init fails (its
 * status named), DPL_ENOMEM.
 *
 * Blocking: ucp_init and ucp_cleanup, which load UCX's transports and
 * look at this host's devices (tens of milliseconds). Threads: any.
 */
DPL_EXTERN int dpl_transport_ucx_probe(const char *options, char *buf,
				       size_t len);

#ifdef __cplusplus
}
#endif
#endif /* DPL_TRANSPORT_UCX_H */
