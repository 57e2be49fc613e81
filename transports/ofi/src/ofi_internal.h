/*
 * ofi_internal.h - state and helpers shared by the files of the libfabric
 * transport; not installed. Internal non-static names carry dpl__ofi_.
 *
 * Wire protocol (all on one FI_EP_RDM endpoint, FI_TAGGED, exact tags):
 *
 *  - The top four bits of the 64-bit fabric tag say what a message is
 *    (OFI_TAG_*); no receive ever has ignore bits.
 *  - Caller messages travel on the message channel, fabric tag MSG (the
 *    same for every caller tag), each behind a 16-byte header: the
 *    caller's tag (bit 63: request to send), a per-sender sequence number
 *    and piggy-backed credits. The receiver keeps a few bounce buffers
 *    posted per peer (directed receives, exact tag), puts arrivals back
 *    in sequence order, and matches them itself against the caller's
 *    receives (exact source and tag, FIFO); arrivals nothing asked for yet
 *    wait in the bounce buffer, in the module, not in the provider.
 *  - Credits: a sender sends on the message channel only while it holds
 *    a credit for that receiver; each message the receiver took out of
 *    the provider (into a bounce buffer, in sequence) returns one
 *    (piggy-backed, or in a CREDIT control message). So the provider
 *    never holds more than a fixed number of messages per peer, and never
 *    runs out of receive entries (shm 1.17 shares one pool of 1024
 *    between posted receives and unexpected messages, and a full pool
 *    blocks every later post).
 *  - A message of L <= the eager limit bytes travels whole after its
 *    header; the receiver compares L (the fabric's length less the
 *    header) with its own and reports DPL_ETRUNC on a mismatch.
 *  - A larger message first sends a request to send: header, the
 *    sender's cookie and L. The receiver answers with a fixed-size
 *    control message: CTS when the lengths agree, after posting an exact
 *    receive on tag BULK|cookie, or NACK when they do not (both sides then
 *    complete with DPL_ETRUNC and the payload never moves). On CTS the
 *    sender posts the payload on tag BULK|cookie.
 *  - Offers (a clear to send ahead of the request): when the caller
 *    posts a receive larger than the eager limit (and at most
 *    OFI_OFFER_MAX) that is the only one waiting for its (peer, tag), the
 *    receiver posts it at once on tag OBULK|its own cookie, behind a
 *    header slot of the operation (2-entry receive), and sends the
 *    peer an offer: cookie, length, tag and how many of the peer's
 *    messages it had taken so far (seq). The offer rides on the next
 *    request to send to that peer (a ping-pong answers right after it
 *    posted its next receive), else it goes alone as an OFFER control
 *    message at the end of that call or in the next progress. The peer
 *    keeps the offer only if it had sent nothing since (its next
 *    sequence number equals seq),
 *    in a table of OFI_OFFERS entries per receiver; the receiver never
 *    has more offers out to one peer than that. The peer's next message
 *    with that tag consumes the offer: a send of exactly that length
 *    sends ONE message on OBULK|cookie (no round trip): a request to
 *    send marked OFI_RTS_OFFER with the receiver's cookie (sequence
 *    number, credits, a riding offer, like any) followed by the payload
 *    (2-entry send vector); the table entry stays, marked used, with
 *    that sequence number. Any other message drops the offer and travels
 *    as usual. On the receiver the header lands in the slot and the
 *    payload in the caller's buffer; the message then takes its turn in
 *    the peer's sequence like a bounce buffer (held while earlier ones
 *    are missing) and completes the offered receive, the first of its
 *    tag from that peer (FIFO). An unmarked message of that tag matches
 *    the offered receive first when the peer had not kept the offer (it
 *    had sent something since): it withdraws the posted payload receive
 *    and carries on as without an offer.
 *  - Cancel of an offered receive withdraws its payload receive from the
 *    fabric first: when the message had already landed the receive
 *    completes normally; otherwise it ends DPL_ECANCELED and the receiver
 *    sends RETRACT. The peer answers RETRACTED when the offer was unused
 *    (removed from its table, or never kept) or USED (sequence number,
 *    tag, length) when its message is already on OBULK|cookie, now
 *    without a receive. Either answer gives the table entry back. USED
 *    arrives in the peer's sequence as a marked request to send (in a
 *    bounce buffer); the next receive of that tag matches it and posts
 *    for the message on OBULK|cookie with a header slot (or drains the
 *    payload into a scratch area when the lengths differ: DPL_ETRUNC);
 *    the header's credits count when it lands. Until USED comes, the
 *    peer's later messages wait behind that sequence number. A used
 *    entry is overwritten only by an offer kept later, which the
 *    receiver made after it took every message sent on used entries.
 *  - Control messages (CTS, NACK, CREDIT, OFFER, RETRACT, RETRACTED,
 *    USED) are
 *    40 bytes on tag CTRL, received into a small ring of preposted
 *    buffers from any source.
 *  - Liveness does not use the fabric (see ofi_live.c).
 */
#ifndef DPL_OFI_INTERNAL_H
#define DPL_OFI_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <dpl/transport.h>

#define OFI_TAG_MSG (UINT64_C(0) << 60)
#define OFI_TAG_BULK (UINT64_C(1) << 60)
#define OFI_TAG_CTRL (UINT64_C(2) << 60)
#define OFI_TAG_WARM (UINT64_C(3) << 60)
#define OFI_TAG_OBULK (UINT64_C(4) << 60)

#define OFI_CTRL_MAGIC 0x64706c43u /* "dplC" */
#define OFI_CTRL_CTS 1u
#define OFI_CTRL_NACK 2u
#define OFI_CTRL_CREDIT 3u
#define OFI_CTRL_OFFER 4u
#define OFI_CTRL_RETRACT 5u
#define OFI_CTRL_RETRACTED 6u
#define OFI_CTRL_USED 7u
#define OFI_CTRL_WITHDRAW 8u   /* a sender asks to take back a message */
#define OFI_CTRL_WITHDRAWN 9u  /* the answer: len 1 taken back, 0 not
				  found (matched, or not here yet) */

#define OFI_MH_RTS (UINT64_C(1) << 63) /* header tag bit: request to send */
#define OFI_RTS_OFFER (UINT64_C(1) << 63) /* cookie bit: payload sent on
					     the receiver's offer */

#define OFI_NCTRL 4          /* preposted control receives */
#define OFI_MRC_SIZE 64      /* registration cache entries */
#define OFI_SLOT_BITS 20     /* slot index bits in a cookie */
#define OFI_NAME_MAX 256     /* fabric address bytes */
#define OFI_OFFERS 8         /* offers a sender keeps per receiver */
#define OFI_OFFER_MAX (UINT64_C(4) << 20) /* largest offered receive */

/* The header in front of every message on the message channel. */
struct ofi_mhdr {
	uint64_t tag;    /* caller's tag, | OFI_MH_RTS for a request to send */
	uint32_t seq;    /* per sender and receiver, from 0 */
	uint32_t credit; /* bounce buffers the sender re-posted for the
			    receiver since it last said so */
};

/* An offer as it travels: alone in an OFFER control message, or riding
 * on a request to send to the same peer. */
struct ofi_offer_wire {
	uint64_t cookie; /* the receiver's */
	uint64_t len;
	uint64_t tag;    /* the caller's */
	uint32_t seq;    /* messages of the peer taken so far */
	uint32_t valid;  /* on a request to send: 1 when one rides along */
};

/* A request to send; on a receive, the sender's cookie is kept here. */
struct ofi_rts {
	struct ofi_mhdr h;
	uint64_t cookie;
	uint64_t len;
	struct ofi_offer_wire offer; /* an offer of ours to the same peer */
};

/* A bounce buffer of the message channel. */
/* A FIFO of array elements by index + 1 (0: none); each element keeps
 * the index + 1 of the next in a link field of its own (ofi_data.c). */
struct ofi_fifo {
	uint32_t head, tail;
};

struct ofi_bounce {
	struct fi_context2 fc;
	uint32_t next; /* free, unexpected or pending list (index + 1) */
	uint32_t peer;
	size_t len;    /* bytes received, header included */
	uint8_t posted;
};

/* A control message, fixed size so it never truncates. */
struct ofi_ctrl {
	uint32_t magic;
	uint32_t type;
	uint32_t src;
	uint32_t seq;    /* OFFER: messages of the peer taken so far */
	uint64_t cookie;
	uint64_t len;    /* RETRACTED: 1 when the offer was still held */
	uint64_t tag;    /* OFFER: the caller's tag */
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
	uint8_t wd;       /* send being withdrawn: enum in ofi_data.c */
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

/* The module's table (ofi.c), also returned by the plugin entry point of
 * the shared build (ofi_plugin.c). */
DPL_EXTERN extern const struct dpl_transport_ops dpl_transport_ofi;

/* Options (ofi_opts.c). */
int dpl__ofi_opts_parse(const char *s, struct ofi_opts *o);

/* Fabric objects (ofi_fabric.c). */
int dpl__ofi_fabric_open(struct ofi_ctx *c, const char *prov,
			 const char *node, const char *iface);
void dpl__ofi_fabric_close(struct ofi_ctx *c);
bool dpl__ofi_is_sockets(const char *prov);
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

/* Data path (ofi_data.c). */
int dpl__ofi_data_init(struct ofi_ctx *c);
int dpl__ofi_data_start(struct ofi_ctx *c);
void dpl__ofi_data_fini(struct ofi_ctx *c);
/* Before closing: take back the offers this context has out. */
void dpl__ofi_data_retract(struct ofi_ctx *c);
int dpl__ofi_progress(struct ofi_ctx *c);
int dpl__ofi_isend(struct ofi_ctx *c, struct ofi_req *r, uint32_t peer,
		   uint64_t tag, const void *buf, size_t len);
int dpl__ofi_irecv(struct ofi_ctx *c, struct ofi_req *r, uint32_t peer,
		   uint64_t tag, void *buf, size_t len);
int dpl__ofi_cancel(struct ofi_ctx *c, struct ofi_req *r);
int dpl__ofi_warmup(struct ofi_ctx *c, uint64_t deadline_ns);

/* Monotonic clock in nanoseconds. */
uint64_t dpl__ofi_now(void);

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

#endif /* DPL_OFI_INTERNAL_H */
