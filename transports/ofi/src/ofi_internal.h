/*
 * ofi_internal.h - state and helpers shared by the files of the libfabric
 * transport; not installed. Internal non-static names carry dpl__ofi_.
 *
 * The wire protocol is in ofi_wire.h.
 */
#ifndef DPL_OFI_INTERNAL_H
#define DPL_OFI_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <dpl/backend.h>
#include <dpl/transport_ofi.h>

#include "ofi_wire.h"

#define OFI_NCTRL 4          /* preposted control receives */
#define OFI_MRC_SIZE 64      /* registration cache entries */
#define OFI_NAME_MAX 256     /* fabric address bytes */
#define STAGE_MAX 4096       /* largest message staged to be injected */
/* Arrival ring entries (ofi_match.c): a bounce buffer (index + 1), or
 * an offered receive whose message landed (OOO_OP | slot index + 1). */
#define OOO_OP (UINT32_C(1) << 31)
/* A send being withdrawn (op->wd): WITHDRAW asked and not answered yet;
 * answered "not found" (the message was matched, or is not at the
 * receiver yet: asked again later); taken back. */
enum { WD_NONE, WD_ASKED, WD_RETRY, WD_GONE };

/* A FIFO of array elements by index + 1 (0: none); each element keeps
 * the index + 1 of the next in a link field of its own (ofi_slots.c). */
struct ofi_fifo {
	uint32_t head, tail;
};

/* A bounce buffer of the message channel. */
struct ofi_bounce {
	struct fi_context2 fc;
	uint32_t next; /* free, unexpected or pending list (index + 1) */
	uint32_t peer;
	size_t len;    /* bytes received, header included */
	uint8_t posted;
};

/* An offer a sender holds: its next message with `tag` to that receiver
 * may send `len` bytes straight to OBULK|cookie. */
struct ofi_offer {
	uint64_t tag;
	uint64_t cookie;
	uint64_t len;
	uint32_t seq;  /* used: the sequence number of that message */
	bool valid;
	bool used;     /* consumed by a message sent to OBULK|cookie; kept
			  until a RETRACT asks or a new offer needs it */
};

/* Parsed "key=value,..." options of struct dpl_transport_params. */
struct ofi_opts {
	char provider[64];    /* "" = FI_PROVIDER or dpl's choice */
	char iface[64];       /* domain name, "" = from node */
	char node[64];        /* source address, "" = dpl's choice */
	uint32_t liveness_ms; /* 0 = from params */
	uint64_t inline_max;  /* largest message sent in one piece (eager) */
	bool inline_set;      /* inline_max came from the options */
	uint32_t slots;       /* operation slots */
	bool mr_always;       /* register even when the provider does not ask */
	bool mr_cache;        /* keep registrations for reuse */
	bool warmup;          /* connect to every peer during init */
	bool offer;           /* post large receives ahead (offers) */
};

/* Where a registration came from, held by the slot that uses it. */
struct ofi_mrref {
	struct fid_mr *mr; /* set when this slot owns an uncached one */
	int32_t idx;       /* cache entry, or -1 */
};

struct ofi_mrc_entry {
	uintptr_t base;
	size_t len;
	struct fid_mr *mr;
	uint32_t refs;
	uint64_t used;
};

struct ofi_mrc {
	struct ofi_mrc_entry e[OFI_MRC_SIZE];
	uint32_t n;
	uint64_t clock;
	uint64_t next_key;
};

/* Slot states. */
enum {
	OP_FREE = 0,
	OP_R_HDR,       /* receive: waiting for its message (module queue) */
	OP_R_BULK_WAIT, /* receive: bulk receive to post (fabric was busy) */
	OP_R_BULK,      /* receive: bulk receive posted, CTS sent or queued */
	OP_S_MSG,       /* send: inline message posted */
	OP_S_RTS,       /* send: header sent, waiting for CTS or NACK */
	OP_S_BULK_WAIT, /* send: bulk to post (fabric was busy) */
	OP_S_BULK,      /* send: bulk posted */
	OP_DEAD_WAIT    /* was waiting to post; its request ended */
};

struct ofi_req;

/*
 * One operation slot, owned by the context. A request uses one slot for
 * its whole life; the slot outlives the request when the fabric still
 * holds one of its contexts (a request ended early by peer failure).
 */
struct ofi_op {
	struct fi_context2 fc[3]; /* [0] message/header, [1] bulk,
				     [2] the payload receive of an offer */
	struct ofi_rts w;         /* header sent; cookie of a peer's RTS */
	struct ofi_rts rh;        /* receive: header of an offered payload */
	struct ofi_req *req;      /* request, NULL once it completed */
	void *buf;
	size_t len;
	uint64_t tag;     /* the caller's tag */
	uint64_t doom_at; /* when peer failure cancelled it (ns) */
	uint64_t wd_at;   /* when the last WITHDRAW was not found (ns) */
	uint64_t btag;    /* fabric tag of the bulk send or receive */
	struct ofi_mrref mr;
	uint32_t peer;
	uint32_t gen;     /* bumped at each use; part of the cookie */
	uint32_t next;    /* free list / wait list link (index + 1) */
	uint32_t qnext;   /* peer's receive queue link (index + 1) */
	uint8_t state;
	uint8_t busy;     /* fabric operations outstanding */
	uint8_t cancelling;
	uint8_t waiting;  /* on the wait list */
	uint8_t send;
	uint8_t bulk_rx;  /* counts in ctx->nbulk */
	uint8_t offered;  /* receive: its offer counts in peer offers_out */
	uint8_t offer_rx; /* receive: fc[2] posted (counts in ctx->nbulk) */
	uint8_t offer_done; /* receive: its message landed in fc[2] and
			       waits for its turn in the sequence */
	uint8_t cts;      /* receive: its bulk receive answers with a CTS */
	uint8_t drain;    /* receive: bulk drains into the scratch area */
	uint8_t wd;       /* send being withdrawn: WD_* */
	int offer_st;     /* result of fc[2] once offer_done */
	int doom;         /* result forced at completion, 0 = none */
};

/* The caller's request storage (req_size bytes). */
struct ofi_req {
	int status;    /* DPL_EAGAIN while pending */
	uint32_t slot; /* slot index + 1 while pending */
};

struct ofi_ctrl_slot {
	struct fi_context2 fc;
	struct ofi_ctrl m;
	bool posted;
};

struct ofi_ctrl_out {
	uint32_t peer;
	struct ofi_ctrl m;
};

/*
 * A peer that crashed is failed after a short grace (messages it sent
 * that are already here still get matched). A peer that closed (BYE)
 * told how many messages it completed to us: receives go on until that
 * many matched, or until none matched for a while; sends fail at once.
 */
struct ofi_peer {
	fi_addr_t addr;
	uint64_t sent;     /* messages completed to it */
	uint64_t recvd;    /* messages from it matched */
	uint64_t bye_n;    /* its count, when closing */
	uint64_t since;    /* ns: noticed dying / last match while closing */
	bool dead;         /* failure processed: posts fail */
	bool dying;        /* crash noticed, grace running */
	bool closing;      /* BYE received, draining */
	bool starved;      /* fewer bounce buffers posted than it should */
	uint32_t credits;  /* messages we may still send it */
	uint32_t grant;    /* bounce buffers re-posted for it, not told yet */
	uint32_t posted;   /* bounce receives posted for it */
	uint32_t held;     /* its arrivals waiting for earlier ones */
	uint32_t seq_out;  /* next sequence number to it */
	uint32_t seq_in;   /* next sequence number expected from it */
	uint32_t offers_out; /* our offers it may still hold */
	uint32_t offers_in;  /* its offers we hold (valid entries) */
	uint32_t nused;      /* USED answers waiting for a bounce buffer */
	struct ofi_ctrl used[OFI_OFFERS];
	bool pend_set;       /* an offer of ours waits for a ride */
	struct ofi_offer_wire pend;
	struct ofi_offer *offer; /* [OFI_OFFERS] its offers we hold */
	struct ofi_fifo rq; /* our receives from it (ops, by qnext) */
	struct ofi_fifo ux; /* its unexpected arrivals (bounces, by next) */
};

struct ofi_live;

struct ofi_ctx {
	uint32_t rank;
	uint32_t n;
	struct ofi_opts o;
	uint32_t liveness_ms;

	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	char prov[64];                 /* provider name as chosen */
	char local[OFI_NAME_MAX + 32]; /* local address, printable */
	char shm_name[128];            /* our /dev/shm file, "" if none */
	uint8_t name[OFI_NAME_MAX];    /* fi_getname */
	size_t namelen;
	size_t inject; /* largest inject */
	bool mr_local; /* every local buffer needs a descriptor */
	bool mr_ep;    /* registrations are bound to the endpoint */

	struct ofi_peer *peer; /* [n] */
	uint64_t *sent;        /* [n] copy of peer[].sent for the BYEs */
	uint32_t ndying;
	uint32_t nclosing;

	struct ofi_op *op; /* [nop] */
	uint32_t nop;
	uint32_t free_head; /* index + 1 */
	struct ofi_fifo wait; /* ops waiting for resources (by next) */
	uint32_t ndoomed;
	struct fid_mr *op_mr;

	struct ofi_ctrl_slot *ctrl; /* [OFI_NCTRL] */
	struct fid_mr *ctrl_mr;
	uint32_t ctrl_unposted;
	struct ofi_ctrl_out *out; /* ring of control messages to send */
	uint32_t out_cap, out_head, out_len;

	struct ofi_bounce *bounce; /* [nbounce] */
	uint32_t nbounce;
	uint32_t bfree;       /* free list (index + 1) */
	uint32_t nbfree;
	uint32_t bpp;         /* bounce buffers posted per peer */
	uint32_t credit_max;  /* messages in flight per peer (credits) */
	uint32_t *ooo;        /* [n * credit_max] arrivals out of order
				 (index + 1) */
	uint32_t nstarved;
	char *bdata;          /* nbounce * bsz bytes, address space only */
	size_t bsz;
	size_t bdata_len;
	struct fid_mr *bdata_mr;
	size_t rx_size;       /* provider's receive queue size */
	uint32_t nbulk;       /* bulk receives posted */
	uint32_t bulk_max;

	struct ofi_offer *offers; /* [n * OFI_OFFERS] */
	uint32_t npend;       /* peers with pend_set */
	uint32_t nused;       /* USED answers waiting, all peers */
	uint32_t nwd;         /* sends asking or about to ask WITHDRAW */
	uint64_t offers_posted; /* receives offered (for the tests) */
	uint64_t offers_used;   /* sends that used an offer */
	uint64_t offers_single; /* offered receives filled by one message */
	uint64_t offers_held;   /* of those, landed before an earlier one */
	char *scratch;        /* OFI_OFFER_MAX bytes, address space only:
				 payloads of withdrawn offers that no
				 receive of their length wants */
	struct fid_mr *scratch_mr;

	uint64_t *warm;             /* [n] warm-up receive buffers */
	struct fi_context2 *warm_fc; /* [n] */
	struct fid_mr *warm_mr;
	uint32_t warm_left;

	struct ofi_mrc mrc;
	struct ofi_live *live;
	unsigned live_seen;
	int reported; /* completions not yet returned by progress */
	bool broken;
};

/* Joining and leaving the job (ofi.c); the table is in ofi_ops.c. */
int dpl__ofi_init(void *ctx, const struct dpl_transport_params *p);
void dpl__ofi_fini(void *ctx);
int dpl__ofi_warmup(struct ofi_ctx *c, uint64_t deadline_ns);

/* Options (ofi_opts.c). */
int dpl__ofi_opts_parse(const char *s, struct ofi_opts *o);

/* Fabric objects (ofi_fabric.c). dpl__ofi_fabric_open takes a provider
 * that passed dpl__ofi_provider_check, the source address of IP
 * providers (node, with FI_SOURCE) and their domain (iface; NULL: lo
 * for a loopback node, else any);
 * it picks the entry dpl_transport_ofi_probe names and opens the
 * fabric, domain, completion queue, address vector and endpoint. */
int dpl__ofi_fabric_open(struct ofi_ctx *c, const char *prov,
			 const char *node, const char *iface);
void dpl__ofi_fabric_close(struct ofi_ctx *c);
bool dpl__ofi_is_sockets(const char *prov);
/* 0 when prov is one provider dpl accepts; else DPL_EINVAL for a list
 * or an exclusion, DPL_ENOTSUP for sockets, naming src ("option
 * provider", "FI_PROVIDER") and the value. */
int dpl__ofi_provider_check(const char *src, const char *prov);
int dpl__ofi_err(int fi_err);
bool dpl__ofi_err_is_peer(int fi_err);

/* Stale shared-memory files of dead processes (ofi_shm.c). */
int dpl__ofi_shm_sweep(const char *dir);
void dpl__ofi_shm_unlink(const char *name);

/* Memory registration (ofi_mr.c). */
int dpl__ofi_mr_reg(struct ofi_ctx *c, const void *buf, size_t len,
		    struct fid_mr **out);
int dpl__ofi_mr_get(struct ofi_ctx *c, const void *buf, size_t len,
		    struct ofi_mrref *ref, void **desc);
void dpl__ofi_mr_put(struct ofi_ctx *c, struct ofi_mrref *ref);
void dpl__ofi_mr_clear(struct ofi_ctx *c);

/* Liveness (ofi_live.c). */
struct ofi_live_peer {
	uint32_t ip;   /* IPv4, network order */
	uint16_t port; /* network order */
	int32_t pid;   /* > 0 when on this host and pid namespace */
};
int dpl__ofi_live_open(uint32_t ip, struct ofi_live **out, uint16_t *port);
int dpl__ofi_live_start(struct ofi_live *l, uint32_t rank, uint32_t n,
			const struct ofi_live_peer *peers, uint64_t nonce,
			uint32_t timeout_ms);
unsigned dpl__ofi_live_gen(struct ofi_live *l);
/* Whether peer died; *bye is the count of its BYE, UINT64_MAX if none. */
bool dpl__ofi_live_dead(struct ofi_live *l, uint32_t peer, uint64_t *bye);
/* Stop: BYE carries sent[r] to each rank r (NULL: no counts). */
void dpl__ofi_live_close(struct ofi_live *l, const uint64_t *sent);

/*
 * The data path, one job per file; everything runs on the thread that
 * owns the context and allocates nothing (see each file's comment).
 */

/* Request slots, bounce buffers and their queues (ofi_slots.c). */
int dpl__ofi_data_init(struct ofi_ctx *c);
int dpl__ofi_data_start(struct ofi_ctx *c);
void dpl__ofi_data_fini(struct ofi_ctx *c);
struct ofi_op *dpl__ofi_slot_alloc(struct ofi_ctx *c);
void dpl__ofi_slot_free(struct ofi_ctx *c, struct ofi_op *op);
void dpl__ofi_release_if_idle(struct ofi_ctx *c, struct ofi_op *op);
void dpl__ofi_wd_set(struct ofi_ctx *c, struct ofi_op *op, uint8_t v);
/* End op's request with `status` (once); frees the slot when idle. */
void dpl__ofi_complete(struct ofi_ctx *c, struct ofi_op *op, int status);
/* End every pending request with `status` (the endpoint is gone). */
void dpl__ofi_fail_all(struct ofi_ctx *c, int status);
void dpl__ofi_wait_push(struct ofi_ctx *c, struct ofi_op *op);
void dpl__ofi_rq_push(struct ofi_ctx *c, struct ofi_op *op);
/* The oldest receive of p for tag (or `only`, when given), dequeued. */
struct ofi_op *dpl__ofi_rq_take(struct ofi_ctx *c, uint32_t p, uint64_t tag,
				const struct ofi_op *only);
void dpl__ofi_bounce_free(struct ofi_ctx *c, struct ofi_bounce *b);
struct ofi_bounce *dpl__ofi_bounce_alloc(struct ofi_ctx *c);
void dpl__ofi_ux_push(struct ofi_ctx *c, struct ofi_bounce *b);
struct ofi_bounce *dpl__ofi_ux_take(struct ofi_ctx *c, uint32_t p,
				    uint64_t tag);
void dpl__ofi_ux_unlink(struct ofi_ctx *c, uint32_t p, uint32_t prev,
			uint32_t i);

/* Liveness of peers and the errors of their requests (ofi_peers.c). */
void dpl__ofi_notice_peer(struct ofi_ctx *c, uint32_t p, uint64_t now);
int dpl__ofi_op_error(struct ofi_ctx *c, struct ofi_op *op, int err);
int dpl__ofi_link_error(struct ofi_ctx *c, struct ofi_op *op, int err);
void dpl__ofi_peer_matched(struct ofi_ctx *c, uint32_t p);
void dpl__ofi_deadlines(struct ofi_ctx *c);
void dpl__ofi_check_live(struct ofi_ctx *c);
int dpl__ofi_post_error(struct ofi_ctx *c, uint32_t peer, const char *what,
			int rc);
int dpl__ofi_dead_peer(struct ofi_ctx *c, uint32_t peer);

/* Control messages and withdrawing sends (ofi_ctrl.c). */
int dpl__ofi_ctrl_post(struct ofi_ctx *c, struct ofi_ctrl_slot *s);
void dpl__ofi_ctrl_repost_all(struct ofi_ctx *c);
void dpl__ofi_ctrl_flush(struct ofi_ctx *c);
/* Send a control message now, or queue it when the fabric is busy. */
void dpl__ofi_ctrl_send_full(struct ofi_ctx *c, uint32_t peer, uint32_t type,
			     uint64_t cookie, uint64_t len, uint64_t tag,
			     uint32_t seq);
void dpl__ofi_ctrl_send(struct ofi_ctx *c, uint32_t peer, uint32_t type,
			uint64_t cookie, uint64_t len);
void dpl__ofi_credit_flush(struct ofi_ctx *c, uint32_t p);
void dpl__ofi_withdraw_ask(struct ofi_ctx *c, struct ofi_op *op);
void dpl__ofi_withdraw_retry(struct ofi_ctx *c);
void dpl__ofi_on_ctrl(struct ofi_ctx *c, struct ofi_ctrl_slot *s, int err);

/* Posting to the fabric (ofi_post.c). Functions returning int give 0,
 * or a negative fi error; post_rts also 1 for an inject. */
void dpl__ofi_feed_starved(struct ofi_ctx *c);
int dpl__ofi_bounce_post(struct ofi_ctx *c, struct ofi_bounce *b, uint32_t p);
void dpl__ofi_top_up(struct ofi_ctx *c, uint32_t p);
void dpl__ofi_op_iov(struct ofi_ctx *c, struct ofi_op *op, void *hdr,
		     size_t hlen, struct iovec iov[2], void *desc[2]);
int dpl__ofi_post_send_msg(struct ofi_ctx *c, struct ofi_op *op);
int dpl__ofi_post_rts(struct ofi_ctx *c, struct ofi_op *op);
int dpl__ofi_post_offered(struct ofi_ctx *c, struct ofi_op *op);
void dpl__ofi_post_bulk_recv(struct ofi_ctx *c, struct ofi_op *op);
void dpl__ofi_post_bulk_send(struct ofi_ctx *c, struct ofi_op *op);
void dpl__ofi_retry_waits(struct ofi_ctx *c);
int dpl__ofi_inject_msg(struct ofi_ctx *c, uint32_t peer, uint64_t tag,
			const void *buf, size_t len);

/* Matching arrivals against receives, in sequence (ofi_match.c). */
void dpl__ofi_deliver(struct ofi_ctx *c, struct ofi_op *op,
		      struct ofi_bounce *b);
bool dpl__ofi_in_seq(struct ofi_ctx *c, uint32_t p, const struct ofi_mhdr *h,
		     uint32_t k);
void dpl__ofi_on_bounce(struct ofi_ctx *c, struct ofi_bounce *b, int err,
			size_t len);

/* Offers, both sides (ofi_offer.c). */
bool dpl__ofi_offer_unsend(struct ofi_ctx *c, struct ofi_op *op);
struct ofi_offer *dpl__ofi_offer_find(struct ofi_ctx *c, uint32_t p,
				      uint64_t tag);
void dpl__ofi_offer_drop(struct ofi_ctx *c, uint32_t p, struct ofi_offer *o);
void dpl__ofi_offer_keep(struct ofi_ctx *c, uint32_t src,
			 const struct ofi_offer_wire *m);
void dpl__ofi_offer_retract(struct ofi_ctx *c, const struct ofi_ctrl *m);
void dpl__ofi_used_arrive(struct ofi_ctx *c, const struct ofi_ctrl *m);
void dpl__ofi_used_retry(struct ofi_ctx *c);
void dpl__ofi_offer_flush_all(struct ofi_ctx *c);
void dpl__ofi_offer_post(struct ofi_ctx *c, struct ofi_op *op);
/* Before closing: take back the offers this context has out. */
void dpl__ofi_data_retract(struct ofi_ctx *c);

/* The completion queue and progress (ofi_cq.c). */
int dpl__ofi_cq_drain(struct ofi_ctx *c);
/* One round of progress; completions accumulate in c->reported. */
int dpl__ofi_progress_once(struct ofi_ctx *c);
int dpl__ofi_progress(struct ofi_ctx *c);

/* Posting and cancelling requests (ofi_ops.c). */
int dpl__ofi_isend(struct ofi_ctx *c, struct ofi_req *r, uint32_t peer,
		   uint64_t tag, const void *buf, size_t len);
int dpl__ofi_irecv(struct ofi_ctx *c, struct ofi_req *r, uint32_t peer,
		   uint64_t tag, void *buf, size_t len);
int dpl__ofi_cancel(struct ofi_ctx *c, struct ofi_req *r);

/* For the module's tests: the endpoint's address as text ("127.0.0.1:PORT"
 * or "fi_shm://PID:UID:IDX") and the provider chosen. */
const char *dpl__ofi_local_address(void *ctx);
const char *dpl__ofi_provider(void *ctx);
/* For the module's tests: receives this context offered, its sends that
 * went on a peer's offer (one message, no request to send answered
 * first), its offered receives that such a message filled, and how many
 * of those landed before an earlier message of that peer. */
void dpl__ofi_offer_counts(void *ctx, uint64_t *posted, uint64_t *used,
			   uint64_t *single, uint64_t *held);

/* Small helpers of the data path. */

/* A posted fabric operation that may succeed later: shm 1.17 says
 * -FI_ENOMEM when its receive entries are in use, which is transient. */
static inline bool fabric_busy(int rc)
{
	return rc == -FI_EAGAIN || rc == -FI_ENOMEM;
}

static inline uint32_t idx_of(const struct ofi_ctx *c,
			      const struct ofi_op *op)
{
	return (uint32_t)(op - c->op);
}

static inline uint64_t cookie_of(const struct ofi_ctx *c,
				 const struct ofi_op *op)
{
	return ((uint64_t)op->gen << OFI_SLOT_BITS) | idx_of(c, op);
}

static inline void *desc_of(struct ofi_ctx *c, const struct ofi_mrref *ref)
{
	if (ref->idx >= 0 && c->mrc.e[ref->idx].mr != NULL)
		return fi_mr_desc(c->mrc.e[ref->idx].mr);
	if (ref->mr != NULL)
		return fi_mr_desc(ref->mr);
	return NULL;
}

static inline void *static_desc(struct fid_mr *mr)
{
	return mr != NULL ? fi_mr_desc(mr) : NULL;
}

static inline struct ofi_mhdr *bhdr(struct ofi_ctx *c,
				    const struct ofi_bounce *b)
{
	return (struct ofi_mhdr *)(c->bdata + (size_t)(b - c->bounce) * c->bsz);
}

static inline char *bpayload(struct ofi_ctx *c, const struct ofi_bounce *b)
{
	return (char *)bhdr(c, b) + MHDR;
}

/* Whether op's bulk tag is an offer's (OBULK|cookie). */
static inline bool obulk(const struct ofi_op *op)
{
	return (op->btag & ~TAG_LOW) == OFI_TAG_OBULK;
}

#endif /* DPL_OFI_INTERNAL_H */
