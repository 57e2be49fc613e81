/*
 * dpl/transport_ofi.h - the libfabric transport: tagged messages over an
 * FI_EP_RDM endpoint with FI_TAGGED and FI_DIRECTED_RECV, one completion
 * queue and manual progress. By default it uses shm when every rank is
 * on this host and tcp;ofi_rxm otherwise. Link dpl::transport_ofi and
 * pass &dpl_transport_ofi to dpl_transport_open().
 *
 * init (struct dpl_transport_params):
 *  - oob: required (DPL_EINVAL naming ofi when NULL). Through it the
 *    ranks exchange who runs where (host, namespaces, IPv4 addresses),
 *    then their fabric addresses; a rank that cannot open its endpoint
 *    tells the others why, and every rank fails naming it. IP providers
 *    bind this rank's address on a subnet that rank 0 (for rank 0:
 *    rank 1) also has an address on, else the route towards it; the
 *    options node and iface override that.
 *  - timeout_ms: how long the warm-up (one small message each way with
 *    every peer) may take, and the liveness timeout unless the option
 *    liveness_ms is given (0 = 60 s for the warm-up, 1.5 s for
 *    liveness).
 *  - world: not used.
 *  - options: "key=value,..." (dpl_options_parse), every key optional:
 *      provider=NAME   one provider (tcp;ofi_rxm, shm, tcp, net, ...);
 *                      else FI_PROVIDER, else dpl's choice above; lists
 *                      and ^ exclusions are refused, sockets is refused
 *                      with DPL_ENOTSUP
 *      node=ADDR       source address of IP providers
 *      iface=NAME      domain (interface) name of IP providers (lo for
 *                      a loopback node)
 *      liveness_ms=N   10..3600000: a peer silent this long is failed
 *      inline_max=N    0..67108864 bytes: the largest message sent in
 *                      one piece (default 65536); larger ones ask first
 *      slots=N         16..1048575 operations in flight per context
 *                      (default 4096; beyond: DPL_EAGAIN)
 *      mr=auto|always  always: register buffers even when the provider
 *                      does not ask
 *      mr_cache=0|1    keep registrations per address range (default 1)
 *      warmup=0|1      exchange one message with every peer during init
 *                      (default 1)
 *      offer=0|1       post large receives ahead and tell the sender
 *                      (default 1)
 *    An unknown key or a value out of range is DPL_EINVAL, naming it.
 *    All ranks must end up on the same provider.
 *
 * Semantics: those of dpl/transport.h, host memory only: exact tag and
 * source matching, FIFO per (sender, tag), exact sizes (DPL_ETRUNC).
 * isend returns DPL_EAGAIN while the receiver has no room for another
 * message (credits) or every slot is in use. cancel ends a receive that
 * has not matched, and a send whose message still waits unmatched at
 * the receiver; others complete normally. fini ends pending requests
 * with DPL_ECANCELED.
 *
 * Peer failure (DPL_TRANSPORT_CAP_PEER_FAILURE): a thread per context
 * sends UDP heartbeats; a peer is failed when silent for the liveness
 * timeout, when it says goodbye (its fini), when a heartbeat to it
 * comes back "port unreachable", or when its pidfd fires (same host).
 * Its requests then complete with DPL_EPEER.
 *
 * Members: no wait (callers spin on progress), no iallreduce (the core
 * runs its ring).
 *
 * Threads: one thread at a time per context. See transports/ofi/README.md.
 */
#ifndef DPL_TRANSPORT_OFI_H
#define DPL_TRANSPORT_OFI_H

#include <stddef.h>

#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The transport table. */
DPL_EXTERN extern const struct dpl_transport_ops dpl_transport_ofi;

/*
 * dpl_transport_ofi_probe - whether this host's libfabric offers what
 * init would take for `provider`: the same hints (RDM, tagged, directed
 * receive, send-after-send order) and the same checks (2-entry send
 * vectors, inject room for a control message, no sockets), opening
 * nothing. `dpl info` reports through it.
 *
 * provider: one name as the option provider= takes it ("shm",
 *           "tcp;ofi_rxm", ...); required.
 * node:     IP providers' source address, as the option node= (a
 *           loopback address also pins the domain to lo, as init
 *           does); NULL for any address. Ignored by shm.
 * buf, len: where the answer goes, NUL-terminated and cut to len:
 *           "provider P, fabric F, domain D" when usable, else the
 *           message dpl_last_error() also holds.
 *
 * Returns 0 when usable; DPL_EINVAL for a NULL buf, a len of 0, a NULL
 * or empty provider, a list or an exclusion (',' '^'); DPL_ENOTSUP for
 * the sockets provider, or when libfabric has no usable entry (FI_PROVIDER
 * and FI_PROVIDER_PATH apply, as for init); DPL_ENOMEM.
 *
 * Blocking: one fi_getinfo(), which loads libfabric's providers the
 * first time in a process (tens of milliseconds). Threads: any.
 */
DPL_EXTERN int dpl_transport_ofi_probe(const char *provider, const char *node,
				       char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* DPL_TRANSPORT_OFI_H */
