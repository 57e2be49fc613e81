/*
 * dpl/transport_load.h - load a transport module from a shared library at
 * run time, for programs that choose their transport after they were
 * linked (the `dpl-conformance --transport PATH.so` runner, plugins of
 * third parties).
 *
 * A loadable module is a shared library that exports
 *
 *     const struct dpl_transport_ops *dpl_transport_plugin_v1(void);
 *
 * returning its table (the same `dpl_transport_<name>` it exports for
 * link-time use). The function takes no locks and allocates nothing; it
 * may be called more than once and returns the same table each time.
 */
#ifndef DPL_TRANSPORT_LOAD_H
#define DPL_TRANSPORT_LOAD_H

#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Name of the entry point a loadable transport module exports. */
#define DPL_TRANSPORT_PLUGIN_SYMBOL "dpl_transport_plugin_v1"

/* Type of that entry point. */
typedef const struct dpl_transport_ops *(*dpl_transport_plugin_fn)(void);

/*
 * dpl_transport_load - find a transport module and return its table.
 *
 * `name_or_path` is either a path (it contains a '/'), opened as given,
 * or a module name of lower-case letters, digits and '_' ("shm", "ucx"),
 * looked up through the dynamic linker's search path as
 * "libdpl-transport-<name>.so" and then "libdpl_transport_<name>.so".
 * The library is opened with RTLD_NOW | RTLD_LOCAL, its
 * dpl_transport_plugin_v1() is called, and the table it returns is
 * checked: abi_version must be DPL_TRANSPORT_ABI_VERSION and size must
 * cover the mandatory members (init .. cancel). The mandatory members
 * themselves are checked later by dpl_transport_open().
 *
 * On success *out is the table, which stays valid for the life of the
 * process: a loaded module is never unloaded. On failure *out is
 * untouched, the library (if it was opened) is closed again, and
 * dpl_last_error() names the path and the dynamic linker's reason.
 *
 * Errors: DPL_EINVAL (NULL, empty or malformed name, or the module
 * returned no table), DPL_ENOENT (no such library, it cannot be loaded,
 * or it lacks the entry point), DPL_EABI (the table was built for
 * another ABI version or is too short).
 *
 * Blocks while the library loads (its constructors run). Thread-safe.
 */
DPL_EXTERN int dpl_transport_load(const char *name_or_path,
				  const struct dpl_transport_ops **out);

#ifdef __cplusplus
}
#endif
#endif /* DPL_TRANSPORT_LOAD_H */
