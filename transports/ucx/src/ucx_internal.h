/*
 * ucx_internal.h - declarations shared by the UCX transport's source
 * files; not installed. Internal non-static names carry the dpl__ucx_
 * prefix and stay hidden in the shared library (only the table
 * dpl_transport_ucx and, in the shared build, dpl_transport_plugin_v1
 * are exported). How the transport works is told in ucx_ops.c.
 *
 *  ucx_ops.c    the table
 *  ucx_setup.c  init and fini: the UCP context, workers, hellos, goodbyes
 *  ucx_xchg.c   the worker-address exchange over the host's dpl_oob
 *  ucx_data.c   posting and completion: isend, irecv, test, cancel, wait
 *  ucx_ctrl.c   pending lists, peer failure, control messages, progress
 *  ucx_ident.c  process identities and /proc liveness checks
 *  ucx_options.c, ucx_status.c  the options string, UCS status codes
 */
#ifndef DPL_UCX_INTERNAL_H
#define DPL_UCX_INTERNAL_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include <dpl/backend.h>
#include <dpl/transport.h>
#include <dpl/transport_ucx.h>

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
	uint32_t err_mode;                        /* enum dpl__ucx_err_mode */
	char tls[DPL__UCX_OPT_VALUE_MAX];         /* "" = the environment's */
	char net_devices[DPL__UCX_OPT_VALUE_MAX]; /* "" = environment or lo */
};

/*
 * dpl__ucx_options_parse - parse "key=value,..." (NULL or "" = defaults)
 * into *o. Keys: err_mode=none|peer, tls=LIST, net_devices=LIST; a list
 * takes UCX's own comma-separated form, so a part without '=' continues
 * the list before it ("tls=sm,tcp,err_mode=peer"). Returns 0, or
 * DPL_EINVAL naming the bad key or value (message set), DPL_ENOMEM.
 */
int dpl__ucx_options_parse(const char *s, struct dpl__ucx_options *o);

/* ---- ucx_setup.c: what the UCP context is opened with ----------------- */

/*
 * dpl__ucx_config - the UCP configuration init starts from: the UCX_*
 * environment, with the options' tls and net_devices, and NET_DEVICES=lo
 * unless the options or UCX_NET_DEVICES name devices. The caller
 * releases *out (ucp_config_release). Returns 0, or DPL_EINVAL naming
 * the setting UCX refused (message set).
 */
int dpl__ucx_config(const struct dpl__ucx_options *o, ucp_config_t **out);

/* dpl__ucx_params - the UCP context parameters init uses (tag matching,
 * wake-ups, dpl's request size, workers not shared). */
void dpl__ucx_params(ucp_params_t *prm);

/* ---- the transport's state ------------------------------------------- */

/* The top four tag bits carry the message kind: 0 for the caller's
 * messages, 1 for the transport's own control messages. */
#define KIND_SHIFT 60
#define KIND_CTRL UINT64_C(1)
#define CTRL_TAG (KIND_CTRL << KIND_SHIFT)

/* Control messages: one 64-bit word, magic | type | sender rank. */
#define CTRL_MAGIC UINT64_C(0x44504c)
enum ctrl_type { CTRL_HELLO = 1, CTRL_BEAT = 2, CTRL_BYE = 3 };

#define MS ((uint64_t)1000000)
#define DEFAULT_TIMEOUT_MS 60000u
#define SWEEP_NS (100 * MS)   /* liveness sweep period */
#define BEAT_MIN_NS (10 * MS)
#define BEAT_MAX_NS (1000 * MS)
#define FINI_DRAIN_NS (100 * MS) /* fini's bound for goodbyes */
#define DRAIN_NS (20 * MS)       /* a dead peer's last messages */
#define DRAIN_IDLE_PASSES 8
#define CTRL_BURST 64          /* control messages handled per progress */
#define HOUSE_EVERY 8          /* progress calls per clock read (2^k) */

struct ctx;

/* One request, in the caller's req_size storage. */
struct ureq {
	struct ureq *prev, *next; /* in the peer's pending list */
	void *ucp;                /* UCX's request while pending */
	size_t len;
	uint32_t peer;
	int status; /* DPL_EAGAIN while pending */
	bool recv;
	bool linked;
	bool failing; /* dpl__ucx_peer_fail's mark */
};

struct peer {
	struct ctx *c;
	uint32_t rank;
	ucp_worker_h w; /* this rank's worker for the peer */
	int efd;        /* w's wake-up descriptor */
	ucp_ep_h ep;
	struct ureq *head, *tail; /* pending requests */
	/* control messages */
	void *crreq;              /* posted control receive */
	void *beat_req;           /* hello or heartbeat in flight */
	void *bye_req;
	void *flush_req;          /* fini's flush of the worker */
	bool ctrl_ready;          /* crreq has completed */
	uint64_t crbuf;
	uint64_t beat_buf;
	uint64_t bye_buf;
	/* liveness */
	uint64_t heard_ns;  /* last message from it, dpl_clock_ns() */
	uint64_t beat_ns;   /* last heartbeat sent */
	ucs_status_t failed; /* set by UCX's endpoint error handler */
	bool hello;         /* its hello arrived */
	bool dead;
	bool pid_check;
	struct dpl__ucx_ident id;
	char why[96];
};

struct ctx {
	ucp_context_h uc;
	struct peer *peers; /* [world]; the own entry has no worker */
	struct pollfd *pfd; /* [world], for wait */
	uint32_t rank;
	uint32_t world;
	uint32_t timeout_ms;
	uint64_t liveness_ns;
	uint64_t beat_every_ns;
	uint64_t next_sweep_ns;
	uint64_t last_progress_ns;
	uint64_t ncomp; /* completions since the last progress */
	uint64_t passes;
	struct dpl__ucx_options opt;
	struct dpl__ucx_ident self;
	bool self_ok;
};

/* What a receive callback leaves in UCX's request for test to read
 * (UCP's request_size space, where `request` points). */
struct recv_note {
	size_t length;
};

/* ---- ucx_ctrl.c: pending lists, peer failure, control, progress ------ */

/* Append r to p's pending list, or take it out (no-op when not in). */
void dpl__ucx_link_req(struct peer *p, struct ureq *r);
void dpl__ucx_unlink_req(struct peer *p, struct ureq *r);

/* UCX's endpoint error handler; arg is the struct peer. Only notes the
 * status for the next progress. */
void dpl__ucx_ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status);

/* Let go of a UCX request that may still be running: a pending receive
 * is cancelled; UCX frees the request once it has completed. NULL is a
 * no-op. */
void dpl__ucx_release_ucp(struct peer *p, void *ucp, bool recv);

/* Progress p's worker until UCX request `ucp` has completed or
 * dpl_clock_ns() passed `end`; returns whether it completed. */
bool dpl__ucx_settle(struct peer *p, void *ucp, uint64_t end);

/* dpl__ucx_settle every pending receive of p that is still running. */
void dpl__ucx_settle_recvs(struct peer *p, uint64_t end);

/* Take in what p's worker still holds (bounded by DRAIN_NS). */
void dpl__ucx_drain_worker(struct peer *p);

/* Mark peer p dead with the reason fmt: its pending requests complete
 * with DPL_EPEER and later posts fail. Never from a UCX callback. */
void dpl__ucx_peer_fail(struct ctx *c, struct peer *p, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* DPL_EPEER with the message "ucx: rank N failed: why". */
int dpl__ucx_peer_error(const struct peer *p);

/* Post control message t to p from *buf; *req holds UCX's request, or
 * NULL when it was done at once or failed (then p->failed is set). */
void dpl__ucx_ctrl_send(struct ctx *c, struct peer *p, enum ctrl_type t,
			uint64_t *buf, void **req);

/* Free *req and set it to NULL once UCX has finished it. */
void dpl__ucx_ctrl_reap(void **req);

/* Post p's control receive (p->crreq). */
void dpl__ucx_ctrl_post_recv(struct ctx *c, struct peer *p);

/* Handle arrived control messages of p (now: the clock) and keep one
 * receive posted. */
void dpl__ucx_ctrl_poll(struct ctx *c, struct peer *p, uint64_t now);

/* ---- the table's members (ucx_setup.c, ucx_data.c, ucx_ctrl.c) ------- */

int dpl__ucx_init(void *ctx, const struct dpl_transport_params *p);
void dpl__ucx_fini(void *ctx);
int dpl__ucx_isend(void *ctx, void *req, uint32_t peer, uint64_t tag,
		   const void *buf, size_t len, uint32_t mem);
int dpl__ucx_irecv(void *ctx, void *req, uint32_t peer, uint64_t tag,
		   void *buf, size_t len, uint32_t mem);
int dpl__ucx_test(void *ctx, void *req);
int dpl__ucx_progress(void *ctx);
int dpl__ucx_cancel(void *ctx, void *req);
int dpl__ucx_wait(void *ctx, uint64_t timeout_ns);

/* ---- ucx_xchg.c: the address exchange -------------------------------- */

/*
 * dpl__ucx_exchange - exchange identities and worker addresses with every
 * rank through the host's `oob`, and create the endpoints (c->peers[j].ep)
 * to every peer's worker. Collective over all ranks. Returns 0, DPL_EIO
 * (a foreign or mismatched record, an endpoint UCX cannot create),
 * DPL_ENOMEM, or the oob's error.
 */
int dpl__ucx_exchange(struct ctx *c, const struct dpl_oob *oob);

/*
 * dpl__ucx_oob_gather - an allgather of mine[0..len) (the same len on
 * every rank, any size) in pieces of at most DPL_OOB_BLOB_MAX bytes,
 * keeping only the contribution of rank `from`: it lands in out[0..len).
 * `tmp` holds world * min(len, DPL_OOB_BLOB_MAX) bytes. Collective.
 * Returns 0 or the oob's error.
 */
int dpl__ucx_oob_gather(const struct dpl_oob *oob, const unsigned char *mine,
			size_t len, uint32_t from, unsigned char *out,
			unsigned char *tmp);

#endif /* DPL_UCX_INTERNAL_H */
