/*
 * test_ucx_data.c - what the UCX transport's data path needs beyond the
 * conformance battery (conformance/transport, run on UCX as
 * conformance_ucx_tcp and conformance_ucx_sm, which holds the generic
 * contract: sizes, ordering, matching, truncation, receive cancel,
 * bidirectional large sends), each case once with UCX_TLS=tcp and once
 * with UCX_TLS=sm: unaligned buffers at sizes across UCX's protocol
 * thresholds, expected and unexpected, and cancel of a pending send,
 * which UCX 1.13 cannot do.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "ucx_ranks.h"

/* ---- unaligned buffers, expected and unexpected ------------------------ */

/* Sizes across UCX's eager and rendezvous protocols at odd offsets, with
 * the receive posted before and after the message arrived (the battery's
 * unaligned case posts its receives first only). */
static void unaligned_fn(struct tj_rank *rk)
{
	static const size_t lens[] = {1, 13, 4097, 65539, (1u << 20) + 5};
	size_t i, off;

	for (i = 0; i < sizeof lens / sizeof lens[0]; i++)
		for (off = 1; off <= 7; off += 3) {
			one_transfer(rk, 1, 0, lens[i], true, 7 + off, off,
				     8 - off, (uint32_t)(i * 8 + off));
			one_transfer(rk, 0, 1, lens[i], false, 7 + off,
				     8 - off, off, (uint32_t)(i * 8 + off));
		}
}

BOTH(unaligned_buffers_keep_every_byte, 120)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, unaligned_fn, NULL);
}

/* ---- cancel of a send ------------------------------------------------- */

/* UCX 1.13 cannot cancel a send; the request still completes exactly
 * once, and when it says 0 the receiver has the data. Stricter than the
 * battery's send_is_delivered_or_not_at_all: a send still pending after
 * its cancel must complete with 0 once its receive is posted. */
static void cancel_send_fn(struct tj_rank *rk)
{
	static unsigned char big[1u << 20];
	uint64_t outcome;
	void *sq;
	int rc;

	if (rk->rank == 1) {
		token_recv(rk, 0, TOK + 11);
		outcome = token_recv(rk, 0, TOK + 12);
		if (outcome == 0) {
			recv_now(rk, 0, 120, big, sizeof big);
			TJ_CHECK(rk, tj_verify(big, sizeof big, 31) < 0,
				 "data of a send that completed is corrupted");
		}
		return;
	}
	tj_fill(big, sizeof big, 31);
	sq = req_new(rk, 1);
	rc = dpl_transport_isend(rk->t, sq, 1, 120, big, sizeof big,
				 DPL_MEM_HOST);
	TJ_CHECK(rk, rc == 0, "isend");
	tj_progress_for(rk, 5);
	TJ_CHECK(rk, dpl_transport_cancel(rk->t, sq) == 0,
		 "cancel of a pending send: %s", dpl_last_error());
	token_send(rk, 1, TOK + 11, 1);
	rc = tj_wait(rk, sq, 200, NULL);
	if (rc == DPL_EAGAIN) {
		/* Not cancelled: it waits for its receive. */
		token_send(rk, 1, TOK + 12, 0);
		rc = tj_wait(rk, sq, 10000, NULL);
		TJ_CHECK(rk, rc == 0, "uncancelled send gave %s",
			 dpl_err_name(rc));
	} else {
		TJ_CHECK(rk, rc == DPL_ECANCELED || rc == 0,
			 "cancelled send gave %s", dpl_err_name(rc));
		token_send(rk, 1, TOK + 12, rc == 0 ? 0 : 1);
	}
	tj_free(rk, sq);
}

BOTH(cancel_of_a_pending_send_completes_it_once, 30)
{
	struct ucx_job job = {.n = 2, .tls = tls};

	ucx_job_run(&job, cancel_send_fn, NULL);
}
