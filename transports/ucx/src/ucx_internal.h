/*
 * ucx_internal.h - declarations shared by the UCX transport's source
 * files; not installed. Internal non-static names carry the dpl__ucx_
 * prefix and stay hidden in the shared library (only the table
 * dpl_transport_ucx and, in the shared build, dpl_transport_plugin_v1
 * are exported).
 */
#ifndef DPL_UCX_INTERNAL_H
#define DPL_UCX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ucs/type/status.h>

#include <dpl/transport.h>

/* The module's table (ucx.c), exported; the plugin entry point of the
 * shared build returns it. */
extern DPL_EXTERN const struct dpl_transport_ops dpl_transport_ucx;

/*
 * dpl__ucx_status - the dpl code for a UCS status: 0 for UCS_OK,
 * DPL_EAGAIN for UCS_INPROGRESS and UCS_ERR_NO_RESOURCE, DPL_ETRUNC for
 * truncation, DPL_ECANCELED, DPL_EPEER for every link and endpoint
 * failure (unreachable, reset, timeout, rejected), DPL_EIO for device and
 * I/O failures, DPL_EUNKNOWN for values UCS does not define. Never
 * returns a UCS value. Thread-safe.
 */
int dpl__ucx_status(ucs_status_t st);

/* Length of the text form of a Linux boot id plus its terminator. */
#define DPL__UCX_BOOT_ID_LEN 40

/*
 * Who a process is, for liveness checks between processes of one host:
 * the kernel's boot id and the pid namespace say whether two processes
 * see the same pids; pid and start time (in clock ticks since boot) name
 * one process even when its pid is reused later.
 */
struct dpl__ucx_ident {
	char boot_id[DPL__UCX_BOOT_ID_LEN];
	uint64_t pidns_dev;
	uint64_t pidns_ino;
	uint64_t start;
	uint32_t pid;
};

/* Bytes of a packed identity (dpl__ucx_ident_pack). */
#define DPL__UCX_IDENT_WIRE (DPL__UCX_BOOT_ID_LEN + 4 * 8)

/*
 * dpl__ucx_ident_self - the calling process's identity. Returns 0, or
 * DPL_EIO (message set) when /proc cannot be read; then liveness checks
 * by pid are off and *id holds what could be read (pid at least).
 */
int dpl__ucx_ident_self(struct dpl__ucx_ident *id);

/* Serialise an identity into DPL__UCX_IDENT_WIRE bytes and back (fixed
 * little-endian layout, so hosts of another byte order agree). */
void dpl__ucx_ident_pack(const struct dpl__ucx_ident *id, unsigned char *out);
void dpl__ucx_ident_unpack(const unsigned char *in, struct dpl__ucx_ident *id);

/*
 * dpl__ucx_same_pids - true when `a` and `b` run on one kernel in one pid
 * namespace with a readable boot id, so that b's pid means the same
 * process to a.
 */
bool dpl__ucx_same_pids(const struct dpl__ucx_ident *a,
			const struct dpl__ucx_ident *b);

/*
 * dpl__ucx_proc_state - the state of process `id` as seen through /proc:
 * 1 alive, 0 gone (no such pid, a zombie, or another process now holds
 * the pid), -1 cannot tell (/proc unreadable). Only meaningful when
 * dpl__ucx_same_pids() holds. No allocation; a few system calls.
 */
int dpl__ucx_proc_state(const struct dpl__ucx_ident *id);

/* Options of the transport, from dpl_transport_params.options. */
enum dpl__ucx_err_mode {
	DPL__UCX_ERR_NONE = 0, /* UCX error handling off (all lanes) */
	DPL__UCX_ERR_PEER = 1  /* UCP_ERR_HANDLING_MODE_PEER */
};

#define DPL__UCX_OPT_VALUE_MAX 256

struct dpl__ucx_options {
	enum dpl__ucx_err_mode err_mode;
	char tls[DPL__UCX_OPT_VALUE_MAX];         /* "" = the environment's */
	char net_devices[DPL__UCX_OPT_VALUE_MAX]; /* "" = environment or lo */
};

/*
 * dpl__ucx_options_parse - parse "key=value,..." (NULL or "" = defaults)
 * into *o. Keys: err_mode=none|peer, tls=LIST, net_devices=LIST.
 * Returns 0 or DPL_EINVAL naming the bad key or value (message set).
 */
int dpl__ucx_options_parse(const char *s, struct dpl__ucx_options *o);

#endif /* DPL_UCX_INTERNAL_H */
