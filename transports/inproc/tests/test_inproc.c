/*
 * test_inproc.c - the in-process transport against the transport
 * contract, one thread driving every rank: joining a world and its
 * options, matching, ordering, exact sizes, rendezvous, cancel, peer
 * failure, progress counts; in its default mode (small messages through
 * the rings) and with eager=0 (every send waits for its receive), which
 * the cases that check rendezvous use. Threaded cases:
 * test_inproc_threads.c.
 */
#include "inproc_test.h"

Test(inproc, table_is_versioned_and_complete)
{
	cr_assert_eq(O->abi_version, DPL_TRANSPORT_ABI_VERSION);
	cr_assert_eq(O->size, sizeof(struct dpl_transport_ops));
	cr_assert_str_eq(O->name, "inproc");
	cr_assert(DPL_HAS_OP(O, wait));
	cr_assert(!DPL_HAS_OP(O, iallreduce));
	/* Peer failure, and ranks that are threads of one process (wait is
	 * a member, not a bit). */
	cr_assert_eq(O->caps, DPL_TRANSPORT_CAP_PEER_FAILURE |
				      DPL_TRANSPORT_CAP_IN_PROCESS);
	cr_assert(O->req_size > 0);
}

Test(inproc, join_checks_world_size_and_rank)
{
	struct dpl_transport_params p = {0};
	dpl_transport *a = open_rank("join", 0, 2), *b = NULL;

	char name[160];

	p.world = "join";
	p.rank = 1;
	p.world_size = 3;
	cr_assert_eq(dpl_transport_open(O, &p, &b), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "has 2 ranks") != NULL, "%s",
		  dpl_last_error());
	p.world_size = 2;
	p.rank = 0;
	cr_assert_eq(dpl_transport_open(O, &p, &b), DPL_EBUSY);
	cr_assert(strstr(dpl_last_error(), "rank 0") != NULL);
	p.rank = 2;
	cr_assert_eq(dpl_transport_open(O, &p, &b), DPL_EINVAL);
	p.rank = 1;
	p.options = "rendezvous=1";
	cr_assert_eq(dpl_transport_open(O, &p, &b), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "rendezvous") != NULL, "%s",
		  dpl_last_error());
	p.options = "eager=105";
	cr_assert_eq(dpl_transport_open(O, &p, &b), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "eager=105") != NULL, "%s",
		  dpl_last_error());
	p.options = "eager=-1";
	cr_assert_eq(dpl_transport_open(O, &p, &b), DPL_EINVAL);
	p.options = "eager=";
	cr_assert_eq(dpl_transport_open(O, &p, &b), DPL_EINVAL);
	p.options = "eager=104";
	cr_assert_eq(dpl_transport_open(O, &p, &b), 0);
	cr_assert_eq(dpl_transport_rank(b), 1);
	cr_assert_eq(dpl_transport_world_size(b), 2);
	dpl_transport_close(a);
	dpl_transport_close(b);
	/* The world is gone: a new one of another size can take the name. */
	a = open_rank("join", 0, 5);
	dpl_transport_close(a);
	/* World names take up to 127 bytes. */
	memset(name, 'w', sizeof name - 1);
	name[sizeof name - 1] = '\0';
	p.world = name;
	p.options = NULL;
	p.rank = 0;
	cr_assert_eq(dpl_transport_open(O, &p, &b), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "world name") != NULL, "%s",
		  dpl_last_error());
	name[127] = '\0';
	a = open_rank(name, 0, 1);
	dpl_transport_close(a);
}

Test(inproc, one_mib_both_directions_intact)
{
	dpl_transport *a = open_rank("mib", 0, 2), *b = open_rank("mib", 1, 2);
	size_t n = 1u << 20;
	unsigned char *x = malloc(n), *y = malloc(n), *rx = malloc(n),
		      *ry = malloc(n), *ex = malloc(n);
	void *q[4] = {req_new(), req_new(), req_new(), req_new()};

	fill(x, n, 1);
	fill(y, n, 2);
	/* b's receive is posted first (expected), a's after (unexpected). */
	cr_assert_eq(dpl_transport_irecv(b, q[0], 0, 7, rx, n, DPL_MEM_HOST),
		     0);
	cr_assert_eq(dpl_transport_isend(a, q[1], 1, 7, x, n, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_isend(b, q[2], 0, 9, y, n, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_irecv(a, q[3], 1, 9, ry, n, DPL_MEM_HOST),
		     0);
	cr_assert_eq(finish(b, q[0]), 0);
	cr_assert_eq(finish(a, q[1]), 0);
	cr_assert_eq(finish(b, q[2]), 0);
	cr_assert_eq(finish(a, q[3]), 0);
	fill(ex, n, 1);
	cr_assert_eq(memcmp(rx, ex, n), 0);
	fill(ex, n, 2);
	cr_assert_eq(memcmp(ry, ex, n), 0);
	dpl_transport_close(a);
	dpl_transport_close(b);
	free(x), free(y), free(rx), free(ry), free(ex);
}

Test(inproc, unexpected_messages_match_by_exact_tag)
{
	dpl_transport *a = open_rank("unexp", 0, 2),
		      *b = open_rank("unexp", 1, 2);
	uint64_t tags[3] = {5, DPL_TAG_MAX, 6};
	uint32_t v[3] = {50, 60, 70}, got;
	void *s[3], *r = req_new();
	int i;

	for (i = 0; i < 3; i++) {
		s[i] = req_new();
		cr_assert_eq(dpl_transport_isend(a, s[i], 1, tags[i], &v[i], 4,
						 DPL_MEM_HOST), 0);
	}
	/* Received in reverse tag order. */
	for (i = 2; i >= 0; i--) {
		got = 0;
		cr_assert_eq(dpl_transport_irecv(b, r, 0, tags[i], &got, 4,
						 DPL_MEM_HOST), 0);
		cr_assert_eq(finish(b, r), 0);
		cr_assert_eq(got, v[i], "tag %d: got %u", i, got);
		cr_assert_eq(finish(a, s[i]), 0);
	}
	dpl_transport_close(a);
	dpl_transport_close(b);
}

Test(inproc, same_tag_messages_arrive_in_order)
{
	dpl_transport *a = open_rank("order", 0, 2),
		      *b = open_rank("order", 1, 2);
	uint32_t v[5], got[5];
	void *s[5], *r[5];
	int i;

	for (i = 0; i < 5; i++) {
		v[i] = 100u + (uint32_t)i;
		s[i] = req_new();
		r[i] = req_new();
	}
	/* Two receives pre-posted, three sends, three more receives. */
	for (i = 0; i < 2; i++)
		cr_assert_eq(dpl_transport_irecv(b, r[i], 0, 3, &got[i], 4,
						 DPL_MEM_HOST), 0);
	for (i = 0; i < 5; i++)
		cr_assert_eq(dpl_transport_isend(a, s[i], 1, 3, &v[i], 4,
						 DPL_MEM_HOST), 0);
	for (i = 2; i < 5; i++)
		cr_assert_eq(dpl_transport_irecv(b, r[i], 0, 3, &got[i], 4,
						 DPL_MEM_HOST), 0);
	for (i = 0; i < 5; i++) {
		cr_assert_eq(finish(b, r[i]), 0);
		cr_assert_eq(got[i], 100u + (uint32_t)i);
		cr_assert_eq(finish(a, s[i]), 0);
	}
	dpl_transport_close(a);
	dpl_transport_close(b);
}

static void size_mismatch(dpl_transport *a, dpl_transport *b, bool strict)
{
	static unsigned char big[4096], small[16];
	uint64_t v = 0x1122334455667788u, got = 0;
	void *s = req_new(), *r = req_new();

	/* Longer message than the receive (eager-sized case). */
	cr_assert_eq(dpl_transport_isend(a, s, 1, 1, big, sizeof big,
					 DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_irecv(b, r, 0, 1, small, sizeof small,
					 DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), DPL_ETRUNC);
	cr_assert_eq(finish(a, s), DPL_ETRUNC);
	/* Shorter message than the receive: exact size, so also ETRUNC;
	 * a small send that went through the ring completed when posted. */
	cr_assert_eq(dpl_transport_irecv(b, r, 0, 2, big, sizeof big,
					 DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_isend(a, s, 1, 2, small, sizeof small,
					 DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), DPL_ETRUNC);
	cr_assert_eq(finish(a, s), strict ? DPL_ETRUNC : 0);
	/* The pair still works. */
	cr_assert_eq(dpl_transport_irecv(b, r, 0, 1, &got, 8, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_isend(a, s, 1, 1, &v, 8, DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), 0);
	cr_assert_eq(finish(a, s), 0);
	cr_assert_eq(got, v);
	dpl_transport_close(a);
	dpl_transport_close(b);
}

Test(inproc, size_mismatch_is_etrunc_and_later_receives_work)
{
	size_mismatch(open_rank("trunc", 0, 2), open_rank("trunc", 1, 2),
		      false);
}

Test(inproc, size_mismatch_is_etrunc_on_both_sides_when_strict)
{
	size_mismatch(open_strict("trunc0", 0, 2), open_strict("trunc0", 1, 2),
		      true);
}

Test(inproc, small_sends_complete_at_once_and_arrive_later)
{
	dpl_transport *a = open_rank("eager", 0, 2),
		      *b = open_rank("eager", 1, 2);
	unsigned char v[104], got[104];
	void *s = req_new(), *r = req_new();

	fill(v, sizeof v, 3);
	/* The largest ring message completes before any receive exists. */
	cr_assert_eq(dpl_transport_isend(a, s, 1, 4, v, sizeof v, DPL_MEM_HOST),
		     0);
	cr_assert_eq(dpl_transport_test(a, s), 0);
	fill(v, sizeof v, 9); /* the sender's buffer is its own again */
	cr_assert_eq(dpl_transport_irecv(b, r, 0, 4, got, sizeof got,
					 DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), 0);
	fill(v, sizeof v, 3);
	cr_assert_eq(memcmp(got, v, sizeof v), 0);
	/* One byte more waits for its receive. */
	cr_assert_eq(dpl_transport_isend(a, s, 1, 5, v, 100, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_test(a, s), 0);
	{
		static unsigned char big[105];
		void *s2 = req_new();

		cr_assert_eq(dpl_transport_isend(a, s2, 1, 5, big, sizeof big,
						 DPL_MEM_HOST), 0);
		dpl_transport_progress(a);
		dpl_transport_progress(b);
		cr_assert_eq(dpl_transport_test(a, s2), DPL_EAGAIN);
		cr_assert_eq(dpl_transport_irecv(b, r, 0, 5, got, 100,
						 DPL_MEM_HOST), 0);
		cr_assert_eq(finish(b, r), 0);
		cr_assert_eq(dpl_transport_irecv(b, r, 0, 5, big, sizeof big,
						 DPL_MEM_HOST), 0);
		cr_assert_eq(finish(b, r), 0);
		cr_assert_eq(finish(a, s2), 0);
	}
	dpl_transport_close(a);
	dpl_transport_close(b);
}

/* A message that came while its receiver had no receive from the
 * sender, and whose arrival an earlier progress already took note of,
 * is found by the progress after the receive is posted. */
Test(inproc, progress_finds_what_came_before_the_receive)
{
	dpl_transport *a = open_rank("early", 0, 3),
		      *b = open_rank("early", 1, 3),
		      *c = open_rank("early", 2, 3);
	uint32_t v = 5, w = 6, got = 0, got2 = 0;
	void *s = req_new(), *s2 = req_new(), *r = req_new(),
	     *r2 = req_new();

	/* b waits for c only; a's message comes meanwhile. */
	cr_assert_eq(dpl_transport_irecv(b, r2, 2, 1, &got2, 4, DPL_MEM_HOST),
		     0);
	cr_assert_eq(dpl_transport_isend(a, s, 1, 1, &v, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_progress(b), 0);
	cr_assert_eq(dpl_transport_irecv(b, r, 0, 1, &got, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_progress(b), 1);
	cr_assert_eq(dpl_transport_test(b, r), 0);
	cr_assert_eq(got, 5);
	cr_assert_eq(dpl_transport_isend(c, s2, 1, 1, &w, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r2), 0);
	cr_assert_eq(got2, 6);
	dpl_transport_close(a);
	dpl_transport_close(b);
	dpl_transport_close(c);
}

/*
 * More unexpected small messages than a ring holds, on one tag and on
 * many: the ones that find the ring full wait in the list, and every
 * message still arrives, each tag in order, whatever order the receives
 * come in.
 */
#define FLOOD 300

Test(inproc, more_unexpected_messages_than_the_ring_holds)
{
	dpl_transport *a = open_rank("flood", 0, 2),
		      *b = open_rank("flood", 1, 2);
	static unsigned char rq[2 * FLOOD + 4][256];
	static uint64_t v[FLOOD], got[FLOOD];
	static unsigned char big[4][512], bigin[4][512];
	int i, k;

	cr_assert_leq(O->req_size, sizeof rq[0]);
	/* Tag i % 3 for message i; every 100th is a large one on tag 9,
	 * in between, so the list and the ring alternate. */
	for (i = 0, k = 0; i < FLOOD; i++) {
		v[i] = 1000u + (uint64_t)i;
		cr_assert_eq(dpl_transport_isend(a, rq[i], 1, (uint64_t)(i % 3),
						 &v[i], 8, DPL_MEM_HOST), 0);
		if (i % 100 == 50) {
			fill(big[k], sizeof big[k], (unsigned)k);
			cr_assert_eq(dpl_transport_isend(a, rq[FLOOD + k], 1, 9,
							 big[k], sizeof big[k],
							 DPL_MEM_HOST), 0);
			k++;
		}
	}
	/* Receives: tag 2 first, then tag 1, then tag 0 (all of each), then
	 * the large ones. */
	for (k = 2; k >= 0; k--)
		for (i = k; i < FLOOD; i += 3) {
			got[i] = 0;
			cr_assert_eq(dpl_transport_irecv(b, rq[FLOOD + 4 + i],
							 0, (uint64_t)k,
							 &got[i], 8,
							 DPL_MEM_HOST), 0);
			cr_assert_eq(finish(b, rq[FLOOD + 4 + i]), 0,
				     "message %d", i);
			cr_assert_eq(got[i], v[i], "message %d: got %llu", i,
				     (unsigned long long)got[i]);
		}
	for (k = 0; k < 3; k++) {
		cr_assert_eq(dpl_transport_irecv(b, rq[FLOOD + 4 + k], 0, 9,
						 bigin[k], sizeof bigin[k],
						 DPL_MEM_HOST), 0);
		cr_assert_eq(finish(b, rq[FLOOD + 4 + k]), 0);
		cr_assert_eq(memcmp(bigin[k], big[k], sizeof big[k]), 0,
			     "large message %d", k);
		cr_assert_eq(finish(a, rq[FLOOD + k]), 0);
	}
	for (i = 0; i < FLOOD; i++)
		cr_assert_eq(finish(a, rq[i]), 0, "send %d", i);
	dpl_transport_close(a);
	dpl_transport_close(b);
}

Test(inproc, send_completes_only_once_its_receive_is_posted)
{
	dpl_transport *a = open_strict("rndv", 0, 2),
		      *b = open_strict("rndv", 1, 2);
	uint32_t v = 9, got = 0;
	void *s = req_new(), *r = req_new();
	int i;

	cr_assert_eq(dpl_transport_isend(a, s, 1, 4, &v, 4, DPL_MEM_HOST), 0);
	for (i = 0; i < 100; i++) {
		dpl_transport_progress(a);
		dpl_transport_progress(b);
		cr_assert_eq(dpl_transport_test(a, s), DPL_EAGAIN);
	}
	cr_assert_eq(dpl_transport_irecv(b, r, 0, 4, &got, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(finish(a, s), 0);
	cr_assert_eq(finish(b, r), 0);
	cr_assert_eq(got, 9);
	dpl_transport_close(a);
	dpl_transport_close(b);
}

Test(inproc, zero_length_messages_complete)
{
	dpl_transport *a = open_rank("zero", 0, 2),
		      *b = open_rank("zero", 1, 2);
	void *s = req_new(), *r = req_new();

	cr_assert_eq(dpl_transport_irecv(b, r, 0, 8, NULL, 0, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_isend(a, s, 1, 8, NULL, 0, DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), 0);
	cr_assert_eq(finish(a, s), 0);
	dpl_transport_close(a);
	dpl_transport_close(b);
}

Test(inproc, cancel_ends_pending_requests)
{
	dpl_transport *a = open_strict("cancel", 0, 2),
		      *b = open_strict("cancel", 1, 2);
	uint32_t v = 1, got = 0;
	void *s = req_new(), *r = req_new();

	cr_assert_eq(dpl_transport_irecv(b, r, 0, 4, &got, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_cancel(b, r), 0);
	cr_assert_eq(finish(b, r), DPL_ECANCELED);
	cr_assert_eq(dpl_transport_isend(a, s, 1, 5, &v, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_cancel(a, s), 0);
	cr_assert_eq(finish(a, s), DPL_ECANCELED);
	/* The cancelled send is gone: a receive for it stays pending. */
	cr_assert_eq(dpl_transport_irecv(b, r, 0, 5, &got, 4, DPL_MEM_HOST), 0);
	dpl_transport_progress(b);
	cr_assert_eq(dpl_transport_test(b, r), DPL_EAGAIN);
	cr_assert_eq(dpl_transport_cancel(b, r), 0);
	cr_assert_eq(finish(b, r), DPL_ECANCELED);
	dpl_transport_close(a);
	dpl_transport_close(b);
}

Test(inproc, a_peer_that_leaves_is_reported_as_failed)
{
	dpl_transport *a = open_strict("dead", 0, 3),
		      *b = open_strict("dead", 1, 3),
		      *c = open_strict("dead", 2, 3);
	uint32_t v = 1, got;
	void *r = req_new(), *s = req_new(), *r2 = req_new(),
	     *s2 = req_new();

	/* Pending with rank 1: a receive from it and a send to it. */
	cr_assert_eq(dpl_transport_irecv(a, r, 1, 4, &got, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_isend(a, s, 1, 5, &v, 4, DPL_MEM_HOST), 0);
	/* And one with rank 2, which stays alive. */
	cr_assert_eq(dpl_transport_irecv(a, r2, 2, 4, &got, 4, DPL_MEM_HOST),
		     0);
	dpl_transport_progress(a);
	dpl_transport_close(b);
	cr_assert_gt(dpl_transport_progress(a), 0, "leaving rang no doorbell");
	cr_assert_eq(finish(a, r), DPL_EPEER);
	cr_assert_eq(finish(a, s), DPL_EPEER);
	cr_assert_eq(dpl_transport_test(a, r2), DPL_EAGAIN);
	cr_assert_eq(dpl_transport_isend(a, s2, 1, 6, &v, 4, DPL_MEM_HOST),
		     DPL_EPEER);
	cr_assert_eq(dpl_transport_irecv(a, s2, 1, 6, &got, 4, DPL_MEM_HOST),
		     DPL_EPEER);
	cr_assert_eq(dpl_transport_cancel(a, r2), 0);
	cr_assert_eq(finish(a, r2), DPL_ECANCELED);
	dpl_transport_close(a);
	dpl_transport_close(c);
}

Test(inproc, ring_messages_of_a_rank_that_left_still_arrive)
{
	dpl_transport *a = open_rank("left", 0, 2),
		      *b = open_rank("left", 1, 2);
	uint32_t v = 41, got = 0;
	void *s = req_new(), *r = req_new();

	cr_assert_eq(dpl_transport_isend(a, s, 1, 1, &v, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_test(a, s), 0);
	dpl_transport_close(a);
	/* Sent before it left: delivered. */
	cr_assert_eq(dpl_transport_irecv(b, r, 0, 1, &got, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), 0);
	cr_assert_eq(got, 41);
	/* Nothing else will come. */
	cr_assert_eq(dpl_transport_irecv(b, r, 0, 2, &got, 4, DPL_MEM_HOST),
		     DPL_EPEER);
	cr_assert_eq(dpl_transport_isend(b, s, 0, 2, &v, 4, DPL_MEM_HOST),
		     DPL_EPEER);
	dpl_transport_close(b);
}

/* Through the checked layer, which names the bad value; a dead peer,
 * the transport's own check, is a_peer_that_leaves_is_reported_as_failed.
 */
Test(inproc, bad_posts_are_rejected)
{
	dpl_transport *a = open_rank("bad", 0, 2), *b = open_rank("bad", 1, 2);
	uint32_t v = 0;
	void *s = req_new();

	cr_assert_eq(dpl_transport_isend(a, s, 0, 1, &v, 4, DPL_MEM_HOST),
		     DPL_EINVAL);
	cr_assert_eq(dpl_transport_isend(a, s, 2, 1, &v, 4, DPL_MEM_HOST),
		     DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "peer 2") != NULL);
	cr_assert_eq(dpl_transport_isend(a, s, 1, DPL_TAG_MAX + 1, &v, 4,
					 DPL_MEM_HOST), DPL_EINVAL);
	cr_assert_eq(dpl_transport_irecv(a, s, 1, 1, &v, 4, DPL_MEM_CUDA),
		     DPL_ENOTSUP);
	dpl_transport_close(a);
	dpl_transport_close(b);
}

Test(inproc, progress_counts_completions_of_own_requests)
{
	dpl_transport *a = open_rank("count", 0, 2),
		      *b = open_rank("count", 1, 2);
	uint32_t v[3] = {1, 2, 3}, got[3];
	void *s[3] = {req_new(), req_new(), req_new()};
	void *r[3] = {req_new(), req_new(), req_new()};
	int i;

	dpl_transport_progress(a);
	dpl_transport_progress(b);
	for (i = 0; i < 3; i++)
		cr_assert_eq(dpl_transport_irecv(b, r[i], 0, (uint64_t)i,
						 &got[i], 4, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_progress(b), 0);
	for (i = 0; i < 3; i++)
		cr_assert_eq(dpl_transport_isend(a, s[i], 1, (uint64_t)i,
						 &v[i], 4, DPL_MEM_HOST), 0);
	cr_assert_eq(dpl_transport_progress(b), 3);
	cr_assert_eq(dpl_transport_progress(b), 0);
	for (i = 0; i < 3; i++) {
		cr_assert_eq(dpl_transport_test(b, r[i]), 0);
		cr_assert_eq(dpl_transport_test(a, s[i]), 0);
		cr_assert_eq(got[i], v[i]);
	}
	/* Nothing new: wait returns after its timeout. */
	cr_assert_eq(dpl_transport_wait(b, 1000000), 0);
	dpl_transport_close(a);
	dpl_transport_close(b);
}
