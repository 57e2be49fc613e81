/*
 * test_handoff.c - a send buffer is the caller's again once its send
 * completed: the sender overwrites it at once, and the receiver, which
 * posts its receive only later, still gets what was sent (a backend
 * may copy at post or complete the send after the copy, never before).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <string.h>

#include "harness.h"

#define HANDOFF_SIZES 5
#define HANDOFF_DELAY_MS 50 /* the receiver's head start for the sender */

static const size_t handoff_len[HANDOFF_SIZES] = {
	8, 4096, 64u << 10, 1u << 20, 4u << 20};

static void handoff_rank(struct tj_rank *rk)
{
	unsigned char *buf = tj_alloc(rk, 4u << 20);
	void *rq = tj_reqs(rk, 1);
	long long bad;
	size_t len;
	unsigned i;
	int rc;

	for (i = 0; i < HANDOFF_SIZES; i++) {
		len = handoff_len[i];
		tj_barrier(rk);
		if (rk->rank == 1) {
			tj_fill(buf, len, 700 + i);
			tj_step(rk, "sending %zu bytes, then overwriting them "
				    "once the send completed", len);
			conf_send(rk, rq, 0, 700 + i, buf, len, NULL);
			rc = tj_wait(rk, rq, 0, "a send of the handoff test");
			TJ_CHECK(rk, rc == 0, "a %zu-byte send: %s", len,
				 dpl_err_name(rc));
			tj_fill(buf, len, 900 + i);
			continue;
		}
		tj_step(rk, "receiving %zu bytes %d ms after their send was "
			    "posted", len, HANDOFF_DELAY_MS);
		tj_progress_for(rk, HANDOFF_DELAY_MS);
		memset(buf, 0, len);
		conf_recv(rk, rq, 1, 700 + i, buf, len, NULL);
		rc = tj_wait(rk, rq, 0, "a receive of the handoff test");
		TJ_CHECK(rk, rc == 0, "a %zu-byte receive: %s", len,
			 dpl_err_name(rc));
		bad = tj_verify(buf, len, 700 + i);
		TJ_CHECK(rk, bad < 0,
			 "a %zu-byte message: byte %lld is what the sender "
			 "wrote into the send buffer after its send completed "
			 "(%s): the send completed before its data was copied",
			 len, bad,
			 tj_verify(buf, len, 900 + i) < 0 ? "all of it"
							  : "some of it");
	}
}

Test(msg, send_buffer_reusable_once_complete, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = handoff_rank,
			       .deadline_s = 60};

	conf_run(&job);
}
