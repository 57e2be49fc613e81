/*
 * test_ofi_queue.c - more receives and more unexpected messages than the
 * provider's receive queue holds (1024 entries on shm 1.17, 2048 on
 * tcp;ofi_rxm), and large requests that share one buffer, over
 * tcp;ofi_rxm and over shm.
 *
 * shm 1.17 takes an entry of one pool for every posted receive and for
 * every unexpected message, and allocates before it matches: once
 * unexpected messages fill the pool, no receive can be posted again
 * (-FI_ENOMEM), not even the one that would match. dpl therefore matches
 * its messages itself, keeps a bounded number of receives posted in the
 * provider and bounds what a sender has in flight with credits.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ofi_harness.h"

#define NMSG 3000 /* more than either provider's receive queue */
#define NTAG 4
#define F_READY 1
#define F_POSTED 2

static void run_job(const char *prov, tj_rank_fn fn)
{
	char buf[5000];
	const char *msg = ofi_run(prov, 2, fn, NULL, NULL, buf, sizeof buf);

	cr_assert_null(msg, "%s: %s", prov, msg);
}

/* Post a send, progressing while the transport pushes back; counts the
 * pushes. */
static int send_push(struct tj_rank *r, void *q, uint64_t tag, const void *b,
		     size_t len, unsigned *eagain)
{
	uint64_t end = dpl_clock_ns() + 60000000000ull;
	int rc;

	while ((rc = r->ops->isend(ofi_ctx(r), q, 1 - r->rank, tag, b, len,
				   DPL_MEM_HOST)) == DPL_EAGAIN &&
	       dpl_clock_ns() < end) {
		(*eagain)++;
		tj_progress(r);
	}
	return rc;
}

/* NMSG receives are posted before the first send, far more than the
 * provider queues: every post is accepted, and all complete in order. */
static void many_receives(struct tj_rank *r)
{
	uint64_t *d = calloc(NMSG * 8, sizeof *d);
	void *q = ofi_reqs(r, NMSG);
	unsigned eagain = 0;
	size_t i;
	int rc;

	CHECK(r, d != NULL, "malloc");
	if (r->rank == 1) {
		for (i = 0; i < NMSG; i++) {
			rc = r->ops->irecv(ofi_ctx(r), tj_req(r, q, i), 0, 5,
					   &d[i * 8], 64, DPL_MEM_HOST);
			CHECK(r, rc == 0, "irecv %zu of %d: %s (%s)", i, NMSG,
			      dpl_err_name(rc), dpl_last_error());
		}
		tj_flag_set(r, F_POSTED, 1);
	} else {
		CHECK(r, ofi_flag_wait_quiet(r, F_POSTED, 1, 30000),
		      "receives never posted");
		for (i = 0; i < NMSG; i++) {
			d[i * 8] = i;
			tj_fill(&d[i * 8 + 1], 56, (uint32_t)i);
			rc = send_push(r, tj_req(r, q, i), 5, &d[i * 8], 64,
				       &eagain);
			CHECK(r, rc == 0, "isend %zu: %s", i, dpl_err_name(rc));
		}
	}
	rc = tj_wait_all(r, q, NMSG, NULL, 60000, NULL);
	CHECK(r, rc == 0, "wait: %s", dpl_err_name(rc));
	for (i = 0; r->rank == 1 && i < NMSG; i++) {
		CHECK(r, d[i * 8] == i, "receive %zu got message %llu", i,
		      (unsigned long long)d[i * 8]);
		CHECK(r, tj_verify(&d[i * 8 + 1], 56, (uint32_t)i) < 0,
		      "message %zu's payload", i);
	}
	free(d);
}

OFI_TEST(receives_beyond_the_provider_queue, 120)
{
	run_job(prov, many_receives);
}

/* NMSG messages on NTAG tags are sent before the receiver posts or
 * progresses anything: the sender is pushed back (DPL_EAGAIN) long before
 * the provider's entries run out; then the receiver takes them tag by
 * tag, the order that needs most of them kept aside, and gets all. */
static void many_unexpected(struct tj_rank *r)
{
	uint64_t *d = calloc(NMSG * 8, sizeof *d);
	void *q = ofi_reqs(r, NMSG);
	unsigned eagain = 0, first_push = NMSG;
	size_t i, k, n = 0, per = NMSG / NTAG;
	int rc;

	CHECK(r, d != NULL, "malloc");
	if (r->rank == 0) {
		for (i = 0; i < NMSG; i++) {
			d[i * 8] = i;
			tj_fill(&d[i * 8 + 1], 56, (uint32_t)i);
			rc = r->ops->isend(ofi_ctx(r), tj_req(r, q, i), 1,
					   i % NTAG, &d[i * 8], 64,
					   DPL_MEM_HOST);
			if (rc == DPL_EAGAIN) {
				if (first_push == NMSG)
					first_push = (unsigned)i;
				tj_flag_set(r, F_READY, 1);
				rc = send_push(r, tj_req(r, q, i), i % NTAG,
					       &d[i * 8], 64, &eagain);
			}
			CHECK(r, rc == 0, "isend %zu: %s", i, dpl_err_name(rc));
		}
		tj_flag_set(r, F_READY, 1);
		CHECK(r, first_push < 1024,
		      "no DPL_EAGAIN in the first 1024 sends to a receiver "
		      "that does not progress (first at %u)", first_push);
		rc = tj_wait_all(r, q, NMSG, NULL, 60000, NULL);
		CHECK(r, rc == 0, "sends: %s", dpl_err_name(rc));
	} else {
		CHECK(r, ofi_flag_wait_quiet(r, F_READY, 1, 30000),
		      "the sender was never pushed back");
		for (k = 0; k < NTAG; k++)
			for (i = 0; i < per; i++) {
				size_t m = i * NTAG + k;

				do
					rc = r->ops->irecv(ofi_ctx(r),
							   tj_req(r, q, n), 0,
							   k, &d[m * 8], 64,
							   DPL_MEM_HOST);
				while (rc == DPL_EAGAIN && tj_progress(r) >= 0);
				CHECK(r, rc == 0, "irecv tag %zu #%zu: %s (%s)",
				      k, i, dpl_err_name(rc),
				      dpl_last_error());
				n++;
			}
		rc = tj_wait_all(r, q, n, NULL, 60000, NULL);
		CHECK(r, rc == 0, "receives: %s", dpl_err_name(rc));
		for (i = 0; i < NMSG; i++) {
			CHECK(r, d[i * 8] == i, "message %zu carries %llu", i,
			      (unsigned long long)d[i * 8]);
			CHECK(r, tj_verify(&d[i * 8 + 1], 56, (uint32_t)i) < 0,
			      "message %zu's payload", i);
		}
	}
	free(d);
}

OFI_TEST(unexpected_beyond_the_provider_queue, 120)
{
	run_job(prov, many_unexpected);
}

/* Two sends from one buffer and two receives into one buffer, in flight
 * together, at sizes on both sides of every large-message threshold
 * (16 KiB, 64 KiB, 1 MiB): all complete, with the right bytes. */
static void shared_buffers(struct tj_rank *r)
{
	static const size_t len[] = {16384, 65536, 65537, 1 << 20};
	uint8_t *s = malloc(1 << 20), *d = malloc(1 << 20);
	void *q = ofi_reqs(r, 4);
	uint32_t peer = 1 - r->rank;
	size_t k;
	int rc, i;

	CHECK(r, s != NULL && d != NULL, "malloc");
	tj_fill(s, 1 << 20, 77);
	for (k = 0; k < sizeof len / sizeof len[0]; k++) {
		memset(d, 0, len[k]);
		for (i = 0; i < 2; i++) {
			rc = r->ops->isend(ofi_ctx(r), tj_req(r, q, i), peer,
					   40 + (uint64_t)i, s, len[k],
					   DPL_MEM_HOST);
			CHECK(r, rc == 0, "isend %zu #%d: %s", len[k], i,
			      dpl_err_name(rc));
			rc = r->ops->irecv(ofi_ctx(r), tj_req(r, q, 2 + i),
					   peer, 40 + (uint64_t)i, d, len[k],
					   DPL_MEM_HOST);
			CHECK(r, rc == 0, "irecv %zu #%d: %s", len[k], i,
			      dpl_err_name(rc));
		}
		rc = tj_wait_all(r, q, 4, NULL, 30000, NULL);
		CHECK(r, rc == 0, "%zu bytes: %s", len[k], dpl_err_name(rc));
		CHECK(r, tj_verify(d, len[k], 77) < 0,
		      "%zu bytes: data differs", len[k]);
	}
	free(s);
	free(d);
}

OFI_TEST(two_large_requests_share_a_buffer, 60)
{
	run_job(prov, shared_buffers);
}
