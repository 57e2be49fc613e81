/*
 * ofi_wire.h - the wire protocol of the libfabric transport: fabric tags,
 * message headers and control messages, as every rank sends and reads
 * them (ranks of one job run the same build, so structs travel as they
 * are). Included by ofi_internal.h; not installed.
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
#ifndef DPL_OFI_WIRE_H
#define DPL_OFI_WIRE_H

#include <stdint.h>

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

#define OFI_SLOT_BITS 20     /* slot index bits in a cookie */
#define OFI_OFFERS 8         /* offers a sender keeps per receiver */
#define OFI_OFFER_MAX (UINT64_C(4) << 20) /* largest offered receive */
#define TAG_LOW ((UINT64_C(1) << 60) - 1) /* a fabric tag less its kind */

/* The header in front of every message on the message channel. */
struct ofi_mhdr {
	uint64_t tag;    /* caller's tag, | OFI_MH_RTS for a request to send */
	uint32_t seq;    /* per sender and receiver, from 0 */
	uint32_t credit; /* bounce buffers the sender re-posted for the
			    receiver since it last said so */
};

#define MHDR sizeof(struct ofi_mhdr)

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

#endif /* DPL_OFI_WIRE_H */
