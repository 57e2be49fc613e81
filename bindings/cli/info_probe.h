/*
 * info_probe.h - what `dpl info` asks UCX at run time (through dlopen,
 * so that nothing is linked for it): UCX's effective settings.
 */
#ifndef DPL_CLI_INFO_PROBE_H
#define DPL_CLI_INFO_PROBE_H

/*
 * info_probe_ucx - the value UCX would use for setting `name` ("TLS",
 * "NET_DEVICES"), read with ucp_config_read from the UCX_* environment:
 * a new string (caller frees), or NULL when UCX cannot be loaded or has
 * no such setting. Main thread only.
 */
char *info_probe_ucx(const char *name);

#endif
