/*
 * dpl/backend.h - small tools every transport and device module needs,
 * so that no module writes its own: the monotonic clock (dpl/common.h),
 * the little-endian byte codec for wire headers (dpl/bytes.h), the "key=value,..." option parser of
 * struct dpl_transport_params.options, what a transport that wraps
 * another one needs (dpl_wrap_*), and the macro that declares a module's
 * plugin entry point. For backend authors; users of dpl do not need it.
 * Library dpl::backend (libdpl-backend), which dpl_add_transport() and
 * dpl_add_device() link for every module.
 *
 * Threads: every function here is thread-safe (the wrap registries'
 * only shared state is under one lock).
 */
#ifndef DPL_BACKEND_H
#define DPL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dpl/common.h>
#include <dpl/bytes.h>
#include <dpl/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dpl_clock_ns() (the one monotonic clock) is declared in dpl/common.h. */

/* Kinds of value an option takes. */
enum dpl_option_kind {
	DPL_OPT_U64 = 0,  /* decimal integer in [lo, hi], into uint64_t */
	DPL_OPT_U32 = 1,  /* decimal integer in [lo, hi], into uint32_t */
	DPL_OPT_SIZE = 2, /* integer with an optional k, m or g suffix
			     (powers of 1024) in [lo, hi], into uint64_t */
	DPL_OPT_BOOL = 3, /* 1, on, yes, true / 0, off, no, false, into bool */
	DPL_OPT_TEXT = 4, /* non-empty text shorter than `size`, into char[] */
	DPL_OPT_ENUM = 5, /* one of `names` (NULL-terminated), its index into
			     uint32_t */
	DPL_OPT_LIST = 6  /* TEXT holding a comma-separated list: the parts
			     without '=' that follow the key continue its
			     value ("tls=sm,tcp,mode=x" gives "sm,tcp") */
};

/*
 * One option a module accepts. `dst` points at the field to fill; `set`,
 * when not NULL, becomes true once the key was given.
 */
struct dpl_option {
	const char *key;
	uint32_t kind; /* enum dpl_option_kind */
	void *dst;
	uint64_t lo, hi;           /* for U64, U32 and SIZE */
	size_t size;               /* for TEXT: bytes at dst */
	const char *const *names;  /* for ENUM */
	bool *set;
};

/*
 * dpl_options_parse - parse `text` ("key=value,key=value", NULL or ""
 * for none) against the n options of `table` and fill their fields in
 * order. `module` prefixes every message ("ofi: option slots='x' is not
 * a number"). Fields of keys that were not given are left alone, so the
 * caller fills in defaults first.
 * Empty parts are skipped, except inside a LIST value.
 * Errors (DPL_EINVAL, naming the key and value in dpl_last_error()): a
 * part without '=' (other than a LIST's), an empty item of a LIST, an
 * unknown key, a key given twice, a value out of range or not of its
 * kind. On error the fields may be partly filled;
 * the caller discards them. DPL_ENOMEM. Does not block.
 */
DPL_EXTERN int dpl_options_parse(const char *module, const char *text,
				 const struct dpl_option *table, size_t n);

/*
 * Transports that wrap another one (dpl_transport_hook, dpl_transport_nccl:
 * their options name the inner transport and add keys of their own) share
 * the three pieces below. `shim` is the wrapping transport's name ("hook"),
 * which starts every message.
 */

/* Inner tables a program registered with one wrapping transport, by name:
 * one zero-initialised static instance per wrapping module. */
#define DPL_WRAP_NAMES_MAX 32
struct dpl_wrap_names {
	const struct dpl_transport_ops *ops[DPL_WRAP_NAMES_MAX];
	size_t n;
};

/*
 * dpl_wrap_register - make `inner` (a linked table that outlives every
 * context opened on it) known in `names` by its name; a name registered
 * again is replaced. Returns 0, DPL_EINVAL for NULL or a table without a
 * name, DPL_ENOMEM past DPL_WRAP_NAMES_MAX names. Thread-safe (one lock
 * in dpl::backend guards every instance).
 */
DPL_EXTERN int dpl_wrap_register(struct dpl_wrap_names *names,
				 const char *shim,
				 const struct dpl_transport_ops *inner);

/*
 * dpl_wrap_split_options - copy the parts of `text` ("key=value,...",
 * NULL for none) whose key starts with `prefix` ("hook.") into `mine` and
 * the others into `theirs`, each in order; a part without '=' continues
 * the value before it (a LIST) and goes where that one went. `mine` and
 * `theirs` must each hold strlen(text) + 1 bytes. Does not fail.
 */
DPL_EXTERN void dpl_wrap_split_options(const char *text, const char *prefix,
				       char *mine, char *theirs);

/*
 * dpl_wrap_open - open the inner transport `inner` for the wrapping
 * transport `shim`: the table registered in `names` under that name, else
 * what dpl_transport_load(inner) finds. The table must fit the wrapper:
 * requests of at most `req_max` bytes (the wrapper keeps the inner's
 * request inside its own; `req_max_name` is the constant the message
 * names), peer-failure detection (DPL_TRANSPORT_CAP_PEER_FAILURE), and
 * ranks that are threads when `threads`, processes otherwise. It is
 * opened with `p`, its options replaced by `options` (NULL or "": the
 * inner's defaults). Blocks as the inner's init does.
 * On success *out is the open inner transport (the caller closes it).
 * On failure *out is NULL and the error names the shim
 * and the inner: DPL_EINVAL for an inner neither registered nor loadable
 * ("'x' is neither registered nor loadable: why") or unfit ("cannot wrap
 * 'x': it does not detect peer failure"), else the inner's init error as
 * "<shim> over <inner>: why". Thread-safe.
 */
DPL_EXTERN int dpl_wrap_open(const struct dpl_wrap_names *names,
			     const char *shim, const char *inner,
			     size_t req_max, const char *req_max_name,
			     bool threads,
			     const struct dpl_transport_params *p,
			     const char *options, dpl_transport **out);

/*
 * DPL_TRANSPORT_PLUGIN(table) - define the entry point a shared build of
 * the module exports for dpl_transport_load() (dpl/transport_load.h),
 * returning &table. Put it once at file scope in the module's source,
 * after the table, followed by a semicolon.
 * It expands to nothing unless DPL_BUILDING_PLUGIN is defined, which the
 * build (cmake's dpl_add_transport) does for shared libraries only, so a
 * static archive holding several modules does not define it twice.
 */
#ifdef DPL_BUILDING_PLUGIN
#define DPL_TRANSPORT_PLUGIN(table)                                          \
	DPL_EXTERN const struct dpl_transport_ops *dpl_transport_plugin_v1(   \
		void);                                                       \
	const struct dpl_transport_ops *dpl_transport_plugin_v1(void)        \
	{                                                                    \
		return &(table);                                             \
	}                                                                    \
	extern const struct dpl_transport_ops table
#else
#define DPL_TRANSPORT_PLUGIN(table)                                          \
	extern const struct dpl_transport_ops table
#endif

#ifdef __cplusplus
}
#endif
#endif /* DPL_BACKEND_H */
