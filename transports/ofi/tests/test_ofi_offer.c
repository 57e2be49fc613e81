/*
 * test_ofi_offer.c - offers (receives above the eager limit posted ahead,
 * so their send moves the payload without asking first), over
 * tcp;ofi_rxm and over shm: a receive posted long before its send; a
 * request to send crossing the offer; FIFO order with offers, eager
 * messages and requests to send mixed on one tag at varying timings; a
 * cancel after the offer left (the send used it before it heard of the
 * cancel, or did not); more large receives than a sender keeps offers
 * for; a receiver killed or closed while the sender holds its offer; a
 * sender killed with its offered messages not yet read.
 *
 * The transport's internal counters say whether a send went on an offer,
 * so each case checks that the path it is about was taken.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ofi_internal.h"
#include "ofi_harness.h"

#define KiB ((size_t)1 << 10)
/* Above the eager limit of both providers (64 KiB on tcp;ofi_rxm, about
 * 4 KiB on shm). */
#define BIG (256 * KiB)
#define DETECT_NS (UINT64_C(2000) * 1000000u)

/* The job's flags. F_USED + rank: that rank's sends on offers, plus one;
 * T_KILL: dpl_clock_ns() at the kill. */
enum { F_POSTED = 1, F_STORED, F_CANCELLED, F_CLOSED, F_READY0, F_READY1 };
enum { F_USED = 10, F_WD_DONE = 20, T_KILL = 30 };

static void run(const char *prov, uint32_t n, tj_rank_fn fn)
{
	char buf[5000];
	const char *msg = ofi_run(prov, n, fn, NULL, NULL, buf, sizeof buf);

	cr_assert_null(msg, "%s: %s", prov, msg);
}

/* The module's offer counters: receives offered, sends that used an
 * offer, offered receives their message filled in one piece, and those
 * that landed before an earlier message of the same sender (held for
 * their turn). */
struct counts {
	uint64_t posted, used, single, held;
};

static struct counts counts_of(struct tj_rank *r)
{
	struct counts k;

	dpl__ofi_offer_counts(ofi_ctx(r), &k.posted, &k.used, &k.single,
			      &k.held);
	return k;
}

/* ---------------------------------------------------------------- */

/* Rank 1 posts two large receives long before rank 0 sends; rank 0's
 * sends go on the offers. Then again with the sends first (no offer:
 * the receives find the requests to send already there). */
static void posted_early(struct tj_rank *r)
{
	uint8_t *a = malloc(BIG), *b = malloc(BIG + 1);
	void *pool = ofi_reqs(r, 2);
	void *q[2] = {pool, tj_req(r, pool, 1)};
	int rc;

	CHECK(r, a != NULL && b != NULL, "malloc");
	if (r->rank == 1) {
		memset(a, 0, BIG);
		memset(b, 0, BIG + 1);
		rc = r->ops->irecv(ofi_ctx(r), q[0], 0, 20, a, BIG,
				   DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
		rc = r->ops->irecv(ofi_ctx(r), q[1], 0, 21, b, BIG + 1,
				   DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
		CHECK(r, counts_of(r).posted == 2, "%llu receives offered, not 2",
		      (unsigned long long)counts_of(r).posted);
		tj_progress_for(r, 50);
		tj_flag_set(r, F_POSTED, 1);
		rc = tj_wait_all(r, pool, 2, NULL, 10000, NULL);
		CHECK(r, rc == 0, "receives: %s", dpl_err_name(rc));
		CHECK(r, tj_verify(a, BIG, 20) < 0, "tag 20 data");
		CHECK(r, tj_verify(b, BIG + 1, 21) < 0, "tag 21 data");
		/* Each came as one message, header and payload, in either
		 * order (tag 21 was sent first). */
		CHECK(r, counts_of(r).single == 2, "%llu receives filled by one "
		      "message, not 2", (unsigned long long)counts_of(r).single);
		/* Second round: the sends come first. */
		CHECK(r, ofi_flag_wait_quiet(r, F_STORED, 1, 10000), "rank 0");
		tj_progress_for(r, 50);
		rc = r->ops->irecv(ofi_ctx(r), q[0], 0, 20, a, BIG,
				   DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
		rc = r->ops->irecv(ofi_ctx(r), q[1], 0, 21, b, BIG + 1,
				   DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
		rc = tj_wait_all(r, pool, 2, NULL, 10000, NULL);
		CHECK(r, rc == 0, "receives: %s", dpl_err_name(rc));
		CHECK(r, tj_verify(a, BIG, 120) < 0, "tag 20 data");
		CHECK(r, tj_verify(b, BIG + 1, 121) < 0, "tag 21 data");
		CHECK(r, counts_of(r).posted == 2, "%llu receives offered, not 2",
		      (unsigned long long)counts_of(r).posted);
		CHECK(r, counts_of(r).single == 2, "%llu receives filled by one "
		      "message, not 2", (unsigned long long)counts_of(r).single);
	} else {
		tj_fill(a, BIG, 20);
		tj_fill(b, BIG + 1, 21);
		CHECK(r, ofi_flag_wait_quiet(r, F_POSTED, 1, 10000), "rank 1");
		tj_progress_for(r, 50);
		rc = r->ops->isend(ofi_ctx(r), q[1], 1, 21, b, BIG + 1,
				   DPL_MEM_HOST);
		CHECK(r, rc == 0, "isend: %s", dpl_err_name(rc));
		rc = r->ops->isend(ofi_ctx(r), q[0], 1, 20, a, BIG,
				   DPL_MEM_HOST);
		CHECK(r, rc == 0, "isend: %s", dpl_err_name(rc));
		rc = tj_wait_all(r, pool, 2, NULL, 10000, NULL);
		CHECK(r, rc == 0, "sends: %s", dpl_err_name(rc));
		CHECK(r, counts_of(r).used == 2, "%llu sends on offers, not 2",
		      (unsigned long long)counts_of(r).used);
		tj_fill(a, BIG, 120);
		tj_fill(b, BIG + 1, 121);
		rc = r->ops->isend(ofi_ctx(r), q[0], 1, 20, a, BIG,
				   DPL_MEM_HOST);
		CHECK(r, rc == 0, "isend: %s", dpl_err_name(rc));
		rc = r->ops->isend(ofi_ctx(r), q[1], 1, 21, b, BIG + 1,
				   DPL_MEM_HOST);
		CHECK(r, rc == 0, "isend: %s", dpl_err_name(rc));
		tj_flag_set(r, F_STORED, 1);
		rc = tj_wait_all(r, pool, 2, NULL, 10000, NULL);
		CHECK(r, rc == 0, "sends: %s", dpl_err_name(rc));
		CHECK(r, counts_of(r).used == 2, "%llu sends on offers, not 2",
		      (unsigned long long)counts_of(r).used);
	}
	free(a);
	free(b);
}

OFI_TEST(receive_posted_long_before_send, 60)
{
	run(prov, 2, posted_early);
}

/* ---------------------------------------------------------------- */

/* The request to send leaves before the receive is posted, and the
 * offer leaves before the request to send is taken: they cross. Then
 * the length differs in a crossing: DPL_ETRUNC on both sides. */
static void crossed(struct tj_rank *r)
{
	uint8_t *a = malloc(BIG);
	void *q = ofi_reqs(r, 1);
	int rc, k;

	CHECK(r, a != NULL, "malloc");
	for (k = 0; k < 2; k++) {
		size_t rlen = k == 0 ? BIG : BIG - 1;

		/* Rank 1 is past what reads the fabric (its init, the last
		 * round's wait) before rank 0 sends, and reads nothing
		 * until it posted. */
		if (r->rank == 1)
			tj_flag_set(r, F_READY1, k + 1);
		if (r->rank == 0) {
			CHECK(r, tj_flag_wait(r, F_READY1, k + 1, 10000) == 0,
			      "rank 1");
			tj_fill(a, BIG, 30 + (uint32_t)k);
			rc = r->ops->isend(ofi_ctx(r), q, 1, 30, a, BIG,
					   DPL_MEM_HOST);
			CHECK(r, rc == 0, "isend: %s", dpl_err_name(rc));
			tj_flag_set(r, F_POSTED, k + 1);
			rc = tj_wait(r, q, 10000, NULL);
			CHECK(r, rc == (k == 0 ? 0 : DPL_ETRUNC),
			      "round %d: send: %s", k, dpl_err_name(rc));
			continue;
		}
		memset(a, 0, BIG);
		CHECK(r, ofi_flag_wait_quiet(r, F_POSTED, k + 1, 10000),
		      "rank 0");
		/* No progress since: the request to send is not taken yet,
		 * so this receive is offered and the two cross. */
		rc = r->ops->irecv(ofi_ctx(r), q, 0, 30, a, rlen, DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
		CHECK(r, counts_of(r).posted == (uint64_t)k + 1,
		      "round %d: %llu receives offered", k,
		      (unsigned long long)counts_of(r).posted);
		rc = tj_wait(r, q, 10000, NULL);
		CHECK(r, rc == (k == 0 ? 0 : DPL_ETRUNC), "round %d: receive: %s",
		      k, dpl_err_name(rc));
		if (k == 0)
			CHECK(r, tj_verify(a, BIG, 30) < 0, "data");
	}
	/* The endpoint carries on, in both directions. */
	tj_fill(a, BIG, 39);
	rc = r->rank == 0 ? tj_recv(r, 1, 31, a, BIG, 0)
			  : tj_send(r, 0, 31, a, BIG, 0);
	CHECK(r, rc == 0, "after the crossing: %s", dpl_err_name(rc));
	CHECK(r, tj_verify(a, BIG, 39) < 0, "data after the crossing");
	if (r->rank == 0)
		CHECK(r, counts_of(r).used == 0, "a send used a crossed offer");
	free(a);
}

OFI_TEST(request_to_send_crosses_offer, 60)
{
	run(prov, 2, crossed);
}

/* ---------------------------------------------------------------- */

#define NMIX 400
#define WIN 4

static size_t mix_len(unsigned i)
{
	static const size_t lens[] = {BIG, 100, 64 * KiB, BIG + 8, 5000, 0,
				      BIG, BIG};

	return lens[(i * 7u) % (sizeof lens / sizeof lens[0])];
}

/* Eager messages, requests to send and offered sends on one tag in both
 * directions, with receives posted ahead by up to WIN and progress
 * interleaved at varying points: every message reaches the receive of
 * its position, intact. */
static void mixed(struct tj_rank *r)
{
	uint8_t *sb = malloc((size_t)WIN * (BIG + 8));
	uint8_t *rb = malloc((size_t)WIN * (BIG + 8));
	void *sq[WIN], *rq[WIN];
	unsigned i, k, posted = 0, spin;
	uint32_t peer = 1 - r->rank;
	char note[96];
	int rc;

	CHECK(r, sb != NULL && rb != NULL, "malloc");
	for (k = 0; k < WIN; k++) {
		sq[k] = ofi_reqs(r, 1);
		rq[k] = ofi_reqs(r, 1);
	}
	for (i = 0; i < NMIX; i++) {
		k = i % WIN;
		/* keep up to WIN receives posted ahead; every other block of
		 * 16 only the next one (then it can be offered) */
		while (posted < NMIX &&
		       posted < i + ((i / 16) % 2 ? 1 : WIN)) {
			unsigned s = posted % WIN;

			rc = r->ops->irecv(ofi_ctx(r), rq[s], peer, 40,
					   rb + (size_t)s * (BIG + 8),
					   mix_len(posted), DPL_MEM_HOST);
			CHECK(r, rc == 0, "irecv %u: %s", posted,
			      dpl_err_name(rc));
			posted++;
			if ((posted * 13u + r->rank) % 5 == 0)
				break;
		}
		if (i >= WIN) {
			rc = tj_wait(r, sq[k], 10000, NULL);
			CHECK(r, rc == 0, "send %u: %s", i - WIN,
			      dpl_err_name(rc));
		}
		tj_fill(sb + (size_t)k * (BIG + 8), mix_len(i), i + 7 * r->rank);
		rc = tj_isend(r, sq[k], peer, 40, sb + (size_t)k * (BIG + 8),
			      mix_len(i));
		CHECK(r, rc == 0, "isend %u: %s", i, dpl_err_name(rc));
		for (spin = (i * 31u + r->rank * 17u) % 23; spin > 0; spin--)
			(void)tj_progress(r);
		if (posted <= i) {
			rc = r->ops->irecv(ofi_ctx(r), rq[k], peer, 40,
					   rb + (size_t)k * (BIG + 8),
					   mix_len(i), DPL_MEM_HOST);
			CHECK(r, rc == 0, "irecv %u: %s", i, dpl_err_name(rc));
			posted++;
		}
		rc = tj_wait(r, rq[k], 10000, NULL);
		CHECK(r, rc == 0, "receive %u (%zu bytes): %s", i, mix_len(i),
		      dpl_err_name(rc));
		CHECK(r, tj_verify(rb + (size_t)k * (BIG + 8), mix_len(i),
				   i + 7 * peer) < 0,
		      "message %u (%zu bytes) is not the %u-th sent", i,
		      mix_len(i), i);
	}
	for (i = NMIX - WIN; i < NMIX; i++) {
		rc = tj_wait(r, sq[i % WIN], 10000, NULL);
		CHECK(r, rc == 0, "send %u: %s", i, dpl_err_name(rc));
	}
	snprintf(note, sizeof note, "%llu offered, %llu sent on offers",
		 (unsigned long long)counts_of(r).posted,
		 (unsigned long long)counts_of(r).used);
	tj_note(r, "%s", note);
	/* Both ranks' counts: some sends went on offers. */
	tj_flag_set(r, F_USED + r->rank, (int64_t)counts_of(r).used + 1);
	tj_flag_set(r, F_READY0 + r->rank, 1);
	CHECK(r, ofi_flag_wait_quiet(r, F_READY0 + peer, 1, 10000), "peer");
	CHECK(r, tj_flag_get(r, F_USED) + tj_flag_get(r, F_USED + 1) > 2,
	      "no send went on an offer (%s)", note);
	free(sb);
	free(rb);
}

OFI_TEST(fifo_with_offers_mixed_sizes, 120)
{
	run(prov, 2, mixed);
}

/* ---------------------------------------------------------------- */

#define NAHEAD 16

/* Rank 0 sends NAHEAD small messages on tag 71 and then one on rank 1's
 * offer (tag 70) while rank 1 does not progress: more small ones than
 * rank 1 has bounce buffers posted wait in the provider, so (on shm) the
 * offered message lands first. It still takes its turn: the receive
 * completes once the earlier ones arrived, and they match in order. */
static void offered_overtakes(struct tj_rank *r)
{
	struct ofi_ctx *c = ofi_ctx(r);
	uint8_t *a = malloc(BIG), s[64];
	void *q = ofi_reqs(r, 1), *qs = ofi_reqs(r, NAHEAD);
	uint32_t n = c->credit_max - 1 < NAHEAD ? c->credit_max - 1 : NAHEAD;
	uint32_t i;
	int rc;

	CHECK(r, a != NULL, "malloc");
	CHECK(r, n > c->bpp, "%u credits, %u bounce buffers: nothing can wait",
	      c->credit_max, c->bpp);
	if (r->rank == 1) {
		memset(a, 0, BIG);
		rc = r->ops->irecv(ofi_ctx(r), q, 0, 70, a, BIG, DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
		CHECK(r, counts_of(r).posted == 1, "receive not offered");
		tj_progress_for(r, 20);
		tj_flag_set(r, F_POSTED, 1);
		CHECK(r, ofi_flag_wait_quiet(r, F_STORED, 1, 10000), "rank 0");
		rc = tj_wait(r, q, 10000, NULL);
		CHECK(r, rc == 0, "offered receive: %s", dpl_err_name(rc));
		CHECK(r, tj_verify(a, BIG, 70) < 0, "tag 70 data");
		/* shm lands it first; tcp;ofi_rxm reads its socket in
		 * order and fetches the large payload later. */
		CHECK(r, counts_of(r).single == 1 &&
			 (strcmp(dpl__ofi_provider(ofi_ctx(r)), "shm") == 0
				  ? counts_of(r).held == 1
				  : counts_of(r).held <= 1),
		      "%llu filled by one message, %llu of them held",
		      (unsigned long long)counts_of(r).single,
		      (unsigned long long)counts_of(r).held);
		for (i = 0; i < n; i++) {
			rc = tj_recv(r, 0, 71, s, sizeof s, 0);
			CHECK(r, rc == 0 && tj_verify(s, sizeof s, 100 + i) < 0,
			      "small message %u: %s", i, dpl_err_name(rc));
		}
	} else {
		CHECK(r, ofi_flag_wait_quiet(r, F_POSTED, 1, 10000), "rank 1");
		tj_progress_for(r, 20); /* the offer is here */
		for (i = 0; i < n; i++) {
			tj_fill(s, sizeof s, 100 + i);
			rc = r->ops->isend(ofi_ctx(r), tj_req(r, qs, i), 1, 71,
					   s, sizeof s, DPL_MEM_HOST);
			CHECK(r, rc == 0, "isend %u: %s", i, dpl_err_name(rc));
		}
		tj_fill(a, BIG, 70);
		rc = r->ops->isend(ofi_ctx(r), q, 1, 70, a, BIG, DPL_MEM_HOST);
		CHECK(r, rc == 0, "isend: %s", dpl_err_name(rc));
		CHECK(r, counts_of(r).used == 1, "the send did not use the offer");
		tj_flag_set(r, F_STORED, 1);
		rc = tj_wait_all(r, qs, n, NULL, 10000, NULL);
		CHECK(r, rc == 0, "small sends: %s", dpl_err_name(rc));
		rc = tj_wait(r, q, 10000, NULL);
		CHECK(r, rc == 0, "send: %s", dpl_err_name(rc));
	}
	free(a);
}

OFI_TEST(offered_message_waits_its_turn, 60)
{
	run(prov, 2, offered_overtakes);
}

/* ---------------------------------------------------------------- */

/* Rank 1 cancels an offered receive. Round 0: rank 0 sends on the offer
 * before it hears of the cancel; the next receive of that tag gets the
 * message. Round 1: the same, and the next receive is shorter: it ends
 * DPL_ETRUNC, the send completes, and the following message arrives.
 * Round 2: rank 0 heard of the cancel first: the send does not use the
 * withdrawn offer. */
static void cancel_offered(struct tj_rank *r)
{
	uint8_t *a = malloc(BIG), *g = malloc(BIG);
	void *q = ofi_reqs(r, 1);
	size_t i;
	int rc, k;

	CHECK(r, a != NULL && g != NULL, "malloc");
	for (k = 0; k < 3; k++) {
		int base = 10 * k;

		if (r->rank == 1) {
			memset(g, 0xa5, BIG);
			rc = r->ops->irecv(ofi_ctx(r), q, 0, 50, g, BIG,
					   DPL_MEM_HOST);
			CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
			tj_progress_for(r, 20);
			tj_flag_set(r, F_POSTED, base + 1);
			CHECK(r, ofi_flag_wait_quiet(r, F_STORED, base + 1,
						     10000),
			      "rank 0");
			rc = r->ops->cancel(ofi_ctx(r), q);
			CHECK(r, rc == 0, "cancel: %s", dpl_err_name(rc));
			rc = tj_wait(r, q, 10000, NULL);
			CHECK(r, rc == DPL_ECANCELED,
			      "round %d: cancelled offered receive: %s", k,
			      dpl_err_name(rc));
			for (i = 0; i < BIG; i++)
				CHECK(r, g[i] == 0xa5,
				      "round %d: cancelled receive's buffer "
				      "written at %zu", k, i);
			tj_flag_set(r, F_CANCELLED, base + 1);
			memset(a, 0, BIG);
			rc = r->ops->irecv(ofi_ctx(r), q, 0, 50, a,
					   k == 1 ? BIG / 2 : BIG,
					   DPL_MEM_HOST);
			CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
			rc = tj_wait(r, q, 10000, NULL);
			CHECK(r, rc == (k == 1 ? DPL_ETRUNC : 0),
			      "round %d: the receive after the cancel: %s", k,
			      dpl_err_name(rc));
			if (k != 1)
				CHECK(r, tj_verify(a, BIG,
						   50 + (uint32_t)k) < 0,
				      "round %d: data", k);
			/* Rounds 0 and 1: the message sent on the withdrawn
			 * offer was fetched by the next receive, not taken
			 * as the offered receive's own. */
			CHECK(r, k == 2 || counts_of(r).single == 0,
			      "round %d: %llu offered receives filled", k,
			      (unsigned long long)counts_of(r).single);
			for (i = 0; i < BIG; i++)
				CHECK(r, g[i] == 0xa5,
				      "round %d: cancelled receive's buffer "
				      "written at %zu", k, i);
			/* The next message on the tag is the next one. */
			rc = tj_recv(r, 0, 50, a, 64, 0);
			CHECK(r, rc == 0 && tj_verify(a, 64, 60) < 0,
			      "round %d: following message: %s", k,
			      dpl_err_name(rc));
			continue;
		}
		CHECK(r, ofi_flag_wait_quiet(r, F_POSTED, base + 1, 10000),
		      "rank 1");
		tj_progress_for(r, 20); /* the offer is here */
		tj_flag_set(r, F_STORED, base + 1);
		CHECK(r, ofi_flag_wait_quiet(r, F_CANCELLED, base + 1, 10000),
		      "rank 1");
		if (k == 2)
			tj_progress_for(r, 20); /* the retraction is here too */
		tj_fill(a, BIG, 50 + (uint32_t)k);
		rc = r->ops->isend(ofi_ctx(r), q, 1, 50, a, BIG, DPL_MEM_HOST);
		CHECK(r, rc == 0, "isend: %s", dpl_err_name(rc));
		rc = tj_wait(r, q, 10000, NULL);
		CHECK(r, rc == 0, "round %d: send: %s", k, dpl_err_name(rc));
		/* Rounds 0 and 1 send on the retracted offer. In round 2
		 * the retraction came first; the send asks first, or goes
		 * on the offer of the receive posted after the cancel. */
		CHECK(r, k < 2 ? counts_of(r).used == (uint64_t)k + 1
			       : counts_of(r).used == 2 || counts_of(r).used == 3,
		      "round %d: %llu sends on offers", k,
		      (unsigned long long)counts_of(r).used);
		tj_fill(a, 64, 60);
		rc = tj_send(r, 1, 50, a, 64, 0);
		CHECK(r, rc == 0, "following message: %s", dpl_err_name(rc));
	}
	free(a);
	free(g);
}

OFI_TEST(cancel_after_offer_left, 60)
{
	run(prov, 2, cancel_offered);
}

/* ---------------------------------------------------------------- */

/* Rank 0 cancels sends whose message waits at rank 1 unmatched, while
 * rank 1 only progresses: they end DPL_ECANCELED, and the next receive
 * of the tag gets the message sent after them. Round 0: a message on an
 * offer whose receive rank 1 cancelled before it landed. Round 1: a
 * request to send, nothing posted for it. Round 2: rank 1's receive is
 * posted when the cancel comes: the send completes normally and the
 * message arrives. */
static void withdrawn(struct tj_rank *r)
{
	uint8_t *a = malloc(BIG), *g = malloc(BIG);
	void *q = ofi_reqs(r, 1);
	int rc, k;

	CHECK(r, a != NULL && g != NULL, "malloc");
	for (k = 0; k < 3; k++) {
		uint64_t tag = 60 + (uint64_t)k;

		if (r->rank == 1) {
			if (k == 0) {
				/* as in cancel_offered: the offer leaves,
				 * then the receive is cancelled */
				rc = r->ops->irecv(ofi_ctx(r), q, 0, tag, g,
						   BIG, DPL_MEM_HOST);
				CHECK(r, rc == 0, "irecv: %s",
				      dpl_err_name(rc));
				tj_progress_for(r, 20);
				tj_flag_set(r, F_POSTED, k + 1);
				CHECK(r, ofi_flag_wait_quiet(r, F_STORED, k + 1,
							     10000),
				      "rank 0");
				rc = r->ops->cancel(ofi_ctx(r), q);
				CHECK(r, rc == 0 &&
						 tj_wait(r, q, 10000, NULL) ==
							 DPL_ECANCELED,
				      "cancelled offered receive");
				tj_flag_set(r, F_CANCELLED, k + 1);
			}
			if (k == 2) {
				memset(a, 0, BIG);
				rc = r->ops->irecv(ofi_ctx(r), q, 0, tag, a,
						   BIG, DPL_MEM_HOST);
				CHECK(r, rc == 0, "irecv: %s",
				      dpl_err_name(rc));
				tj_flag_set(r, F_POSTED, k + 1);
				rc = tj_wait(r, q, 10000, NULL);
				CHECK(r, rc == 0 && tj_verify(a, BIG, 70) < 0,
				      "round 2: receive: %s",
				      dpl_err_name(rc));
			}
			/* Progress only, until rank 0's send ended. */
			rc = tj_flag_wait(r, F_WD_DONE, k + 1, 10000);
			CHECK(r, rc == 0, "round %d: rank 0's send did "
			      "not end", k);
			rc = tj_recv(r, 0, tag, a, 64, 0);
			CHECK(r, rc == 0 &&
					 tj_verify(a, 64, 80 + (uint32_t)k) < 0,
			      "round %d: the message after the cancelled one: "
			      "%s", k, dpl_err_name(rc));
			continue;
		}
		if (k == 0) {
			CHECK(r, ofi_flag_wait_quiet(r, F_POSTED, k + 1, 10000),
			      "rank 1");
			tj_progress_for(r, 20); /* the offer is here */
			tj_flag_set(r, F_STORED, k + 1);
			CHECK(r, ofi_flag_wait_quiet(r, F_CANCELLED, k + 1,
						     10000),
			      "rank 1");
		}
		if (k == 2)
			CHECK(r, ofi_flag_wait_quiet(r, F_POSTED, k + 1, 10000),
			      "rank 1");
		tj_fill(a, BIG, 70);
		rc = r->ops->isend(ofi_ctx(r), q, 1, tag, a, BIG, DPL_MEM_HOST);
		CHECK(r, rc == 0, "isend: %s", dpl_err_name(rc));
		if (k == 0)
			CHECK(r, counts_of(r).used == 1, "round 0: the send "
			      "did not go on the offer");
		if (k != 2)
			tj_progress_for(r, 20); /* at rank 1; the retraction
						   here */
		rc = r->ops->cancel(ofi_ctx(r), q);
		/* In round 2 the send may be done already. */
		CHECK(r, rc == 0 || (k == 2 && rc == DPL_EINVAL), "cancel: %s",
		      dpl_err_name(rc));
		rc = tj_wait(r, q, 10000, NULL);
		CHECK(r, rc == (k == 2 ? 0 : DPL_ECANCELED),
		      "round %d: cancelled send: %s", k, dpl_err_name(rc));
		tj_flag_set(r, F_WD_DONE, k + 1);
		tj_fill(a, 64, 80 + (uint32_t)k);
		rc = tj_send(r, 1, tag, a, 64, 0);
		CHECK(r, rc == 0, "round %d: next send: %s", k,
		      dpl_err_name(rc));
	}
	free(a);
	free(g);
}

OFI_TEST(cancelled_send_waiting_at_the_receiver_is_withdrawn, 60)
{
	run(prov, 2, withdrawn);
}

/* ---------------------------------------------------------------- */

#define NBEYOND (3 * OFI_OFFERS + 5)

/* More large receives (distinct tags) than a sender keeps offers for:
 * OFI_OFFERS are offered, the rest ask first; all arrive intact, sent in
 * the opposite order. */
static void beyond_table(struct tj_rank *r)
{
	uint8_t *b = malloc((size_t)NBEYOND * BIG);
	void *q = ofi_reqs(r, NBEYOND);
	int rc, i;

	CHECK(r, b != NULL, "malloc");
	if (r->rank == 1) {
		memset(b, 0, (size_t)NBEYOND * BIG);
		for (i = 0; i < NBEYOND; i++) {
			rc = r->ops->irecv(ofi_ctx(r), tj_req(r, q, i), 0,
					   100 + (uint64_t)i,
					   b + (size_t)i * BIG, BIG,
					   DPL_MEM_HOST);
			CHECK(r, rc == 0, "irecv %d: %s", i, dpl_err_name(rc));
		}
		CHECK(r, counts_of(r).posted == OFI_OFFERS,
		      "%llu receives offered, expected %d",
		      (unsigned long long)counts_of(r).posted, OFI_OFFERS);
		tj_progress_for(r, 20);
		tj_flag_set(r, F_POSTED, 1);
		rc = tj_wait_all(r, q, NBEYOND, NULL, 20000, NULL);
		CHECK(r, rc == 0, "receives: %s", dpl_err_name(rc));
		for (i = 0; i < NBEYOND; i++)
			CHECK(r, tj_verify(b + (size_t)i * BIG, BIG,
					   (uint32_t)i) < 0,
			      "tag %d data", 100 + i);
	} else {
		for (i = 0; i < NBEYOND; i++)
			tj_fill(b + (size_t)i * BIG, BIG, (uint32_t)i);
		CHECK(r, ofi_flag_wait_quiet(r, F_POSTED, 1, 10000), "rank 1");
		tj_progress_for(r, 20);
		for (i = NBEYOND - 1; i >= 0; i--) {
			rc = tj_isend(r, tj_req(r, q, i), 1, 100 + (uint64_t)i,
				      b + (size_t)i * BIG, BIG);
			CHECK(r, rc == 0, "isend %d: %s", i, dpl_err_name(rc));
		}
		rc = tj_wait_all(r, q, NBEYOND, NULL, 20000, NULL);
		CHECK(r, rc == 0, "sends: %s", dpl_err_name(rc));
		CHECK(r, counts_of(r).used == OFI_OFFERS,
		      "%llu sends on offers, expected %d",
		      (unsigned long long)counts_of(r).used, OFI_OFFERS);
	}
	free(b);
}

OFI_TEST(more_large_receives_than_offers, 60)
{
	run(prov, 2, beyond_table);
}

/* ---------------------------------------------------------------- */

/* Ranks 0 and 1 each hold an offer of the other when rank 1 is killed:
 * rank 0's offered receive fails with DPL_EPEER within 2 s, a send to
 * rank 1 then fails at once, and rank 0 and rank 2 go on exchanging
 * offered messages. */
static void killed_holder(struct tj_rank *r)
{
	uint8_t *a = malloc(BIG), *b = malloc(BIG);
	void *q = ofi_reqs(r, 1), *sq = ofi_reqs(r, 1);
	uint64_t t0, dt;
	int rc, i;

	CHECK(r, a != NULL && b != NULL, "malloc");
	if (r->rank == 1) {
		rc = r->ops->irecv(ofi_ctx(r), q, 0, 70, a, BIG, DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
		tj_flag_set(r, F_READY1, 1);
		ofi_serve_until_killed(r);
	}
	if (r->rank == 0) {
		rc = r->ops->irecv(ofi_ctx(r), q, 1, 71, a, BIG, DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
		CHECK(r, counts_of(r).posted == 1, "receive not offered");
		tj_progress_for(r, 50); /* rank 1's offer is here */
		tj_flag_set(r, F_READY0, 1);
		rc = tj_wait(r, q, 10000, NULL);
		t0 = (uint64_t)tj_flag_get(r, T_KILL);
		dt = dpl_clock_ns() - t0;
		CHECK(r, rc == DPL_EPEER, "offered receive from the killed "
					  "rank: %s", dpl_err_name(rc));
		CHECK(r, t0 != 0, "finished before the kill");
		CHECK(r, dt < DETECT_NS, "noticed %.3f s after the kill",
		      (double)dt / 1e9);
		rc = r->ops->isend(ofi_ctx(r), sq, 1, 70, b, BIG,
				   DPL_MEM_HOST);
		CHECK(r, rc == DPL_EPEER, "send on the dead rank's offer: %s",
		      dpl_err_name(rc));
	}
	/* Ranks 0 and 2: a ping-pong of offered messages (each posts its
	 * receive before it sends). */
	for (i = 0; i < 20; i++) {
		uint32_t peer = r->rank == 0 ? 2 : 0;

		rc = r->ops->irecv(ofi_ctx(r), q, peer, 72, a, BIG,
				   DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
		if (r->rank == 2) {
			rc = tj_wait(r, q, 10000, NULL);
			CHECK(r, rc == 0 && tj_verify(a, BIG, (uint32_t)i) < 0,
			      "bystander ping %d: %s", i, dpl_err_name(rc));
		}
		tj_fill(b, BIG, (uint32_t)(r->rank == 0 ? i : 1000 + i));
		rc = r->ops->isend(ofi_ctx(r), sq, peer, 72, b, BIG,
				   DPL_MEM_HOST);
		CHECK(r, rc == 0, "isend: %s", dpl_err_name(rc));
		rc = tj_wait(r, sq, 10000, NULL);
		CHECK(r, rc == 0, "bystander send %d: %s", i,
		      dpl_err_name(rc));
		if (r->rank == 0) {
			rc = tj_wait(r, q, 10000, NULL);
			CHECK(r, rc == 0 && tj_verify(a, BIG,
						      1000 + (uint32_t)i) < 0,
			      "bystander pong %d: %s", i, dpl_err_name(rc));
		}
	}
	if (r->rank == 2) {
		tj_fill(b, BIG, 99);
		rc = tj_send(r, 0, 73, b, BIG, 0);
		CHECK(r, rc == 0, "last send: %s", dpl_err_name(rc));
	} else {
		rc = tj_recv(r, 2, 73, a, BIG, 0);
		CHECK(r, rc == 0 && tj_verify(a, BIG, 99) < 0,
		      "last receive: %s", dpl_err_name(rc));
	}
	CHECK(r, counts_of(r).used > 0, "no bystander send went on an offer");
	free(a);
	free(b);
}

static void kill_ctl(struct tj_job *job)
{
	if (!tj_job_flag_wait(job, F_READY0, 1, 30000) ||
	    !tj_job_flag_wait(job, F_READY1, 1, 30000))
		return;
	usleep(50000);
	tj_job_flag_set(job, T_KILL, (int64_t)dpl_clock_ns());
	tj_job_signal(job, 1, SIGKILL);
}

OFI_TEST(killed_peer_with_offers_out, 90)
{
	char buf[5000];
	const char *msg = ofi_run_killing(prov, 3, killed_holder, kill_ctl, 1,
					  buf, sizeof buf);

	cr_assert_null(msg, "%s", msg);
}

/* ---------------------------------------------------------------- */

/* Rank 1 sends 8 messages on rank 0's offers and is killed before rank 0
 * looks at them, then rank 0 takes them in: on shm the payload is still
 * in the dead sender's memory. Each receive ends with the message intact
 * or with DPL_EPEER (a peer's death, not an I/O error), and a ninth
 * receive, which nothing was sent for, with DPL_EPEER within 2 s. */
#define KS_N 8
#define KS_LEN 4096 /* above shm's eager limit, as dpl train's activations */

static void killed_sender(struct tj_rank *r)
{
	uint8_t *a = malloc((KS_N + 1) * KS_LEN);
	void *q = ofi_reqs(r, KS_N + 1);
	uint64_t t0, dt;
	uint32_t i;
	int rc;

	CHECK(r, a != NULL, "malloc");
	if (r->rank == 1) {
		CHECK(r, ofi_flag_wait_quiet(r, F_READY0, 1, 10000), "rank 0");
		tj_progress_for(r, 50); /* the offers are here */
		for (i = 0; i < KS_N; i++) {
			tj_fill(a + i * KS_LEN, KS_LEN, i);
			rc = r->ops->isend(ofi_ctx(r), tj_req(r, q, i), 0,
					   80 + i, a + i * KS_LEN, KS_LEN,
					   DPL_MEM_HOST);
			CHECK(r, rc == 0, "isend %u: %s", i, dpl_err_name(rc));
		}
		tj_flag_set(r, F_READY1, 1);
		ofi_serve_until_killed(r);
	}
	memset(a, 0, (KS_N + 1) * KS_LEN);
	for (i = 0; i <= KS_N; i++) {
		rc = r->ops->irecv(ofi_ctx(r), tj_req(r, q, i), 1, 80 + i,
				   a + i * KS_LEN, KS_LEN, DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv %u: %s", i, dpl_err_name(rc));
	}
	tj_flag_set(r, F_READY0, 1);
	/* No progress until rank 1 is gone. */
	ofi_flag_wait_quiet(r, T_KILL, 1, 10000);
	t0 = (uint64_t)tj_flag_get(r, T_KILL);
	CHECK(r, t0 != 0, "rank 1 was not killed");
	usleep(20000);
	for (i = 0; i <= KS_N; i++) {
		rc = tj_wait(r, tj_req(r, q, i), 10000, NULL);
		CHECK(r, rc == DPL_EPEER ||
				 (rc == 0 && i < KS_N &&
				  tj_verify(a + i * KS_LEN, KS_LEN, i) < 0),
		      "receive %u from the killed sender: %s", i,
		      dpl_err_name(rc));
	}
	dt = dpl_clock_ns() - t0;
	CHECK(r, dt < DETECT_NS + 20000000u, "noticed %.3f s after the kill",
	      (double)dt / 1e9);
	free(a);
}

static void kill_sender_ctl(struct tj_job *job)
{
	if (!tj_job_flag_wait(job, F_READY1, 1, 30000))
		return;
	tj_job_signal(job, 1, SIGKILL);
	usleep(10000);
	tj_job_flag_set(job, T_KILL, (int64_t)dpl_clock_ns());
}

OFI_TEST(killed_sender_with_messages_unread, 90)
{
	char buf[5000];
	const char *msg = ofi_run_killing(prov, 2, killed_sender,
					  kill_sender_ctl, 1, buf, sizeof buf);

	cr_assert_null(msg, "%s", msg);
}

/* ---------------------------------------------------------------- */

/* Rank 1 closes its context with an offered receive pending; rank 0,
 * which held the offer, then fails its send to rank 1 with DPL_EPEER
 * instead of moving the payload. */
static void closed_holder(struct tj_rank *r)
{
	/* Static: rank 1 returns with its receive pending, and the
	 * harness closes the context after that. */
	static uint8_t a[BIG];
	static _Alignas(64) uint8_t q[1024];
	int rc;

	CHECK(r, r->ops->req_size <= sizeof q, "req_size %zu",
	      r->ops->req_size);
	if (r->rank == 1) {
		rc = r->ops->irecv(ofi_ctx(r), q, 0, 80, a, BIG, DPL_MEM_HOST);
		CHECK(r, rc == 0, "irecv: %s", dpl_err_name(rc));
		CHECK(r, counts_of(r).posted == 1, "receive not offered");
		tj_flag_set(r, F_POSTED, 1);
		CHECK(r, ofi_flag_wait_quiet(r, F_STORED, 1, 10000), "rank 0");
		tj_flag_set(r, F_CLOSED, 1);
		/* The harness closes the context with the receive pending
		 * (its request and buffer stay allocated until exit). */
		return;
	}
	CHECK(r, ofi_flag_wait_quiet(r, F_POSTED, 1, 10000), "rank 1");
	tj_progress_for(r, 50);
	tj_flag_set(r, F_STORED, 1);
	CHECK(r, ofi_flag_wait_quiet(r, F_CLOSED, 1, 10000), "rank 1");
	tj_progress_for(r, 200); /* its goodbye arrives */
	rc = r->ops->isend(ofi_ctx(r), q, 1, 80, a, BIG, DPL_MEM_HOST);
	if (rc == 0)
		rc = tj_wait(r, q, 5000, NULL);
	CHECK(r, rc == DPL_EPEER, "send to the closed rank: %s",
	      dpl_err_name(rc));
	CHECK(r, counts_of(r).used == 0, "a send went on a closed rank's offer");
}

OFI_TEST(closed_peer_with_offer_out, 60)
{
	run(prov, 2, closed_holder);
}

/* A plain check that runs without a fabric: the offer table's size and
 * the largest offered receive are what the wire protocol relies on. */
Test(ofi_offer, limits_fit_the_protocol)
{
	cr_assert_gt(OFI_OFFERS, 0);
	cr_assert_geq(sizeof(struct ofi_rts), sizeof(struct ofi_mhdr) + 48,
		      "a request to send carries an offer");
	cr_assert_lt(OFI_OFFER_MAX, UINT64_C(1) << 32);
}
