/*
 * info_probe.h - what `dpl info` asks libfabric and UCX at run time
 * (through dlopen, so that nothing is linked for it): whether a provider
 * offers what dpl's ofi transport asks for, and UCX's effective settings.
 */
#ifndef DPL_CLI_INFO_PROBE_H
#define DPL_CLI_INFO_PROBE_H

/*
 * info_probe_ofi - ask fi_getinfo for provider `prov` ("shm",
 * "tcp;ofi_rxm") with the hints of dpl's ofi transport (RDM endpoints,
 * tagged and directed receives, send-after-send order). A new string
 * (caller frees): "yes (fabric F, domain D)", "no: <fi_strerror>", or
 * "libfabric not loadable"; NULL when out of memory. Blocks while
 * libfabric looks at this host's interfaces. Main thread only.
 */
char *info_probe_ofi(const char *prov);

/*
 * info_probe_ucx - the value UCX would use for setting `name` ("TLS",
 * "NET_DEVICES"), read with ucp_config_read from the UCX_* environment:
 * a new string (caller frees), or NULL when UCX cannot be loaded or has
 * no such setting. Main thread only.
 */
char *info_probe_ucx(const char *name);

#endif
