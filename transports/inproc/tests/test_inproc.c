/*
 * test_inproc.c - the in-process transport against the transport
 * contract: matching, ordering, exact sizes, rendezvous, cancel, peer
 * failure, progress and wait, and concurrent ranks; in its default mode
 * (small messages through the rings) and with eager=0 (every send waits
 * for its receive), which the cases that check rendezvous use.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dpl/transport.h>

extern const struct dpl_transport_ops dpl_transport_inproc;

static const struct dpl_transport_ops *O = &dpl_transport_inproc;

static dpl_transport *open_opt(const char *world, uint32_t rank,
			       uint32_t size, const char *options)
{
	struct dpl_transport_params p = {0};
	dpl_transport *t = NULL;

	p.rank = rank;
	p.world_size = size;
	p.bootstrap = world;
	p.options = options;
	cr_assert_eq(dpl_transport_open(O, &p, &t), 0, "open rank %u: %s",
		     rank, dpl_last_error());
	return t;
}

static dpl_transport *open_rank(const char *world, uint32_t rank,
				uint32_t size)
{
	return open_opt(world, rank, size, NULL);
}

/* Every send waits for its receive. */
static dpl_transport *open_strict(const char *world, uint32_t rank,
				  uint32_t size)
{
	return open_opt(world, rank, size, "eager=0");
}

/* Request storage for single-threaded tests: a static pool. */
static _Alignas(max_align_t) unsigned char req_pool[32][256];
static int req_next;

static void *req_new(void)
{
	cr_assert_leq(O->req_size, sizeof req_pool[0]);
	cr_assert_lt(req_next, 32);
	return req_pool[req_next++];
}

#define CTX(t) dpl_transport_ctx(t)

/* For threads, which must not use Criterion's asserts. */
static dpl_transport *open_quiet(const char *world, uint32_t rank,
				 uint32_t size)
{
	struct dpl_transport_params p = {0};
	dpl_transport *t = NULL;

	p.rank = rank;
	p.world_size = size;
	p.bootstrap = world;
	if (dpl_transport_open(O, &p, &t) != 0)
		return NULL;
	return t;
}

static void *req_quiet(void)
{
	return aligned_alloc(_Alignof(max_align_t),
			     (O->req_size + 15) / 16 * 16);
}

/* Test until done, progressing, at most `rounds` times; the status, or
 * DPL_ETIMEDOUT. */
static int finish_within(dpl_transport *t, void *req, long rounds)
{
	long i;
	int rc;

	for (i = 0; i < rounds; i++) {
		rc = O->test(CTX(t), req);
		if (rc != DPL_EAGAIN)
			return rc;
		O->progress(CTX(t));
	}
	return DPL_ETIMEDOUT;
}

static int finish(dpl_transport *t, void *req)
{
	return finish_within(t, req, 1000000);
}

Test(inproc, table_is_versioned_and_complete)
{
	cr_assert_eq(O->abi_version, DPL_TRANSPORT_ABI_VERSION);
	cr_assert_eq(O->size, sizeof(struct dpl_transport_ops));
	cr_assert_str_eq(O->name, "inproc");
	cr_assert(DPL_HAS_OP(O, wait));
	cr_assert(!DPL_HAS_OP(O, iallreduce));
	cr_assert(O->caps & DPL_TRANSPORT_CAP_PEER_FAILURE);
	cr_assert(O->req_size > 0);
}

Test(inproc, join_checks_world_size_and_rank)
{
	struct dpl_transport_params p = {0};
	dpl_transport *a = open_rank("join", 0, 2), *b = NULL;

	p.bootstrap = "join";
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
	cr_assert(strstr(dpl_last_error(), "rendezvous=1") != NULL, "%s",
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
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 9));
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
	cr_assert_eq(O->irecv(CTX(b), q[0], 0, 7, rx, n, DPL_MEM_HOST), 0);
	cr_assert_eq(O->isend(CTX(a), q[1], 1, 7, x, n, DPL_MEM_HOST), 0);
	cr_assert_eq(O->isend(CTX(b), q[2], 0, 9, y, n, DPL_MEM_HOST), 0);
	cr_assert_eq(O->irecv(CTX(a), q[3], 1, 9, ry, n, DPL_MEM_HOST), 0);
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
		cr_assert_eq(O->isend(CTX(a), s[i], 1, tags[i], &v[i], 4,
				      DPL_MEM_HOST), 0);
	}
	/* Received in reverse tag order. */
	for (i = 2; i >= 0; i--) {
		got = 0;
		cr_assert_eq(O->irecv(CTX(b), r, 0, tags[i], &got, 4,
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
		cr_assert_eq(O->irecv(CTX(b), r[i], 0, 3, &got[i], 4,
				      DPL_MEM_HOST), 0);
	for (i = 0; i < 5; i++)
		cr_assert_eq(O->isend(CTX(a), s[i], 1, 3, &v[i], 4,
				      DPL_MEM_HOST), 0);
	for (i = 2; i < 5; i++)
		cr_assert_eq(O->irecv(CTX(b), r[i], 0, 3, &got[i], 4,
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
	cr_assert_eq(O->isend(CTX(a), s, 1, 1, big, sizeof big, DPL_MEM_HOST),
		     0);
	cr_assert_eq(O->irecv(CTX(b), r, 0, 1, small, sizeof small,
			      DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), DPL_ETRUNC);
	cr_assert_eq(finish(a, s), DPL_ETRUNC);
	/* Shorter message than the receive: exact size, so also ETRUNC;
	 * a small send that went through the ring completed when posted. */
	cr_assert_eq(O->irecv(CTX(b), r, 0, 2, big, sizeof big,
			      DPL_MEM_HOST), 0);
	cr_assert_eq(O->isend(CTX(a), s, 1, 2, small, sizeof small,
			      DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), DPL_ETRUNC);
	cr_assert_eq(finish(a, s), strict ? DPL_ETRUNC : 0);
	/* The pair still works. */
	cr_assert_eq(O->irecv(CTX(b), r, 0, 1, &got, 8, DPL_MEM_HOST), 0);
	cr_assert_eq(O->isend(CTX(a), s, 1, 1, &v, 8, DPL_MEM_HOST), 0);
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
	cr_assert_eq(O->isend(CTX(a), s, 1, 4, v, sizeof v, DPL_MEM_HOST),
		     0);
	cr_assert_eq(O->test(CTX(a), s), 0);
	fill(v, sizeof v, 9); /* the sender's buffer is its own again */
	cr_assert_eq(O->irecv(CTX(b), r, 0, 4, got, sizeof got,
			      DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), 0);
	fill(v, sizeof v, 3);
	cr_assert_eq(memcmp(got, v, sizeof v), 0);
	/* One byte more waits for its receive. */
	cr_assert_eq(O->isend(CTX(a), s, 1, 5, v, 100, DPL_MEM_HOST), 0);
	cr_assert_eq(O->test(CTX(a), s), 0);
	{
		static unsigned char big[105];
		void *s2 = req_new();

		cr_assert_eq(O->isend(CTX(a), s2, 1, 5, big, sizeof big,
				      DPL_MEM_HOST), 0);
		O->progress(CTX(a));
		O->progress(CTX(b));
		cr_assert_eq(O->test(CTX(a), s2), DPL_EAGAIN);
		cr_assert_eq(O->irecv(CTX(b), r, 0, 5, got, 100,
				      DPL_MEM_HOST), 0);
		cr_assert_eq(finish(b, r), 0);
		cr_assert_eq(O->irecv(CTX(b), r, 0, 5, big, sizeof big,
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
	cr_assert_eq(O->irecv(CTX(b), r2, 2, 1, &got2, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(O->isend(CTX(a), s, 1, 1, &v, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(O->progress(CTX(b)), 0);
	cr_assert_eq(O->irecv(CTX(b), r, 0, 1, &got, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(O->progress(CTX(b)), 1);
	cr_assert_eq(O->test(CTX(b), r), 0);
	cr_assert_eq(got, 5);
	cr_assert_eq(O->isend(CTX(c), s2, 1, 1, &w, 4, DPL_MEM_HOST), 0);
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
		cr_assert_eq(O->isend(CTX(a), rq[i], 1, (uint64_t)(i % 3), &v[i],
				      8, DPL_MEM_HOST), 0);
		if (i % 100 == 50) {
			fill(big[k], sizeof big[k], (unsigned)k);
			cr_assert_eq(O->isend(CTX(a), rq[FLOOD + k], 1, 9,
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
			cr_assert_eq(O->irecv(CTX(b), rq[FLOOD + 4 + i], 0,
					      (uint64_t)k, &got[i], 8,
					      DPL_MEM_HOST), 0);
			cr_assert_eq(finish(b, rq[FLOOD + 4 + i]), 0,
				     "message %d", i);
			cr_assert_eq(got[i], v[i], "message %d: got %llu", i,
				     (unsigned long long)got[i]);
		}
	for (k = 0; k < 3; k++) {
		cr_assert_eq(O->irecv(CTX(b), rq[FLOOD + 4 + k], 0, 9,
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

	cr_assert_eq(O->isend(CTX(a), s, 1, 4, &v, 4, DPL_MEM_HOST), 0);
	for (i = 0; i < 100; i++) {
		O->progress(CTX(a));
		O->progress(CTX(b));
		cr_assert_eq(O->test(CTX(a), s), DPL_EAGAIN);
	}
	cr_assert_eq(O->irecv(CTX(b), r, 0, 4, &got, 4, DPL_MEM_HOST), 0);
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

	cr_assert_eq(O->irecv(CTX(b), r, 0, 8, NULL, 0, DPL_MEM_HOST), 0);
	cr_assert_eq(O->isend(CTX(a), s, 1, 8, NULL, 0, DPL_MEM_HOST), 0);
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

	cr_assert_eq(O->irecv(CTX(b), r, 0, 4, &got, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(O->cancel(CTX(b), r), 0);
	cr_assert_eq(finish(b, r), DPL_ECANCELED);
	cr_assert_eq(O->isend(CTX(a), s, 1, 5, &v, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(O->cancel(CTX(a), s), 0);
	cr_assert_eq(finish(a, s), DPL_ECANCELED);
	/* The cancelled send is gone: a receive for it stays pending. */
	cr_assert_eq(O->irecv(CTX(b), r, 0, 5, &got, 4, DPL_MEM_HOST), 0);
	O->progress(CTX(b));
	cr_assert_eq(O->test(CTX(b), r), DPL_EAGAIN);
	cr_assert_eq(O->cancel(CTX(b), r), 0);
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
	cr_assert_eq(O->irecv(CTX(a), r, 1, 4, &got, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(O->isend(CTX(a), s, 1, 5, &v, 4, DPL_MEM_HOST), 0);
	/* And one with rank 2, which stays alive. */
	cr_assert_eq(O->irecv(CTX(a), r2, 2, 4, &got, 4, DPL_MEM_HOST), 0);
	O->progress(CTX(a));
	dpl_transport_close(b);
	cr_assert_gt(O->progress(CTX(a)), 0, "leaving rang no doorbell");
	cr_assert_eq(finish(a, r), DPL_EPEER);
	cr_assert_eq(finish(a, s), DPL_EPEER);
	cr_assert_eq(O->test(CTX(a), r2), DPL_EAGAIN);
	cr_assert_eq(O->isend(CTX(a), s2, 1, 6, &v, 4, DPL_MEM_HOST),
		     DPL_EPEER);
	cr_assert_eq(O->irecv(CTX(a), s2, 1, 6, &got, 4, DPL_MEM_HOST),
		     DPL_EPEER);
	cr_assert_eq(O->cancel(CTX(a), r2), 0);
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

	cr_assert_eq(O->isend(CTX(a), s, 1, 1, &v, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(O->test(CTX(a), s), 0);
	dpl_transport_close(a);
	/* Sent before it left: delivered. */
	cr_assert_eq(O->irecv(CTX(b), r, 0, 1, &got, 4, DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), 0);
	cr_assert_eq(got, 41);
	/* Nothing else will come. */
	cr_assert_eq(O->irecv(CTX(b), r, 0, 2, &got, 4, DPL_MEM_HOST),
		     DPL_EPEER);
	cr_assert_eq(O->isend(CTX(b), s, 0, 2, &v, 4, DPL_MEM_HOST),
		     DPL_EPEER);
	dpl_transport_close(b);
}

/* A rank asleep in wait (a minute's timeout) wakes for a ring message
 * and for a peer that leaves; a missed wake-up hangs into the test's
 * timeout. */
struct sleeper {
	dpl_transport *t;
	uint32_t got;
	int rc_msg, rc_dead;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *x = arg;
	void *r = req_quiet(), *r2 = req_quiet();
	int i;

	x->rc_msg = x->rc_dead = DPL_EAGAIN;
	O->irecv(CTX(x->t), r, 0, 1, &x->got, 4, DPL_MEM_HOST);
	O->irecv(CTX(x->t), r2, 0, 2, &x->got, 4, DPL_MEM_HOST);
	for (i = 0; i < 1000 && x->rc_msg == DPL_EAGAIN; i++) {
		O->wait(CTX(x->t), 60u * UINT64_C(1000000000));
		O->progress(CTX(x->t));
		x->rc_msg = O->test(CTX(x->t), r);
	}
	for (i = 0; i < 1000 && x->rc_dead == DPL_EAGAIN; i++) {
		O->wait(CTX(x->t), 60u * UINT64_C(1000000000));
		O->progress(CTX(x->t));
		x->rc_dead = O->test(CTX(x->t), r2);
	}
	free(r);
	free(r2);
	return NULL;
}

Test(inproc, a_sleeping_rank_wakes_for_messages_and_departures,
     .timeout = 30)
{
	dpl_transport *a = open_rank("sleep", 0, 2);
	struct sleeper x = {open_rank("sleep", 1, 2), 0, 0, 0};
	struct timespec ts = {0, 20000000};
	uint32_t v = 77;
	void *s = req_new();
	pthread_t th;

	pthread_create(&th, NULL, sleeper_main, &x);
	nanosleep(&ts, NULL); /* let it fall asleep (either way is fine) */
	cr_assert_eq(O->isend(CTX(a), s, 1, 1, &v, 4, DPL_MEM_HOST), 0);
	nanosleep(&ts, NULL);
	dpl_transport_close(a);
	pthread_join(th, NULL);
	cr_assert_eq(x.rc_msg, 0);
	cr_assert_eq(x.got, 77);
	cr_assert_eq(x.rc_dead, DPL_EPEER);
	dpl_transport_close(x.t);
}

Test(inproc, bad_posts_are_rejected)
{
	dpl_transport *a = open_rank("bad", 0, 2), *b = open_rank("bad", 1, 2);
	uint32_t v = 0;
	void *s = req_new();

	cr_assert_eq(O->isend(CTX(a), s, 0, 1, &v, 4, DPL_MEM_HOST),
		     DPL_EINVAL);
	cr_assert_eq(O->isend(CTX(a), s, 2, 1, &v, 4, DPL_MEM_HOST),
		     DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "peer 2") != NULL);
	cr_assert_eq(O->isend(CTX(a), s, 1, DPL_TAG_MAX + 1, &v, 4,
			      DPL_MEM_HOST), DPL_EINVAL);
	cr_assert_eq(O->irecv(CTX(a), s, 1, 1, &v, 4, DPL_MEM_CUDA),
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

	O->progress(CTX(a));
	O->progress(CTX(b));
	for (i = 0; i < 3; i++)
		cr_assert_eq(O->irecv(CTX(b), r[i], 0, (uint64_t)i, &got[i], 4,
				      DPL_MEM_HOST), 0);
	cr_assert_eq(O->progress(CTX(b)), 0);
	for (i = 0; i < 3; i++)
		cr_assert_eq(O->isend(CTX(a), s[i], 1, (uint64_t)i, &v[i], 4,
				      DPL_MEM_HOST), 0);
	cr_assert_eq(O->progress(CTX(b)), 3);
	cr_assert_eq(O->progress(CTX(b)), 0);
	for (i = 0; i < 3; i++) {
		cr_assert_eq(O->test(CTX(b), r[i]), 0);
		cr_assert_eq(O->test(CTX(a), s[i]), 0);
		cr_assert_eq(got[i], v[i]);
	}
	/* Nothing new: wait returns after its timeout. */
	cr_assert_eq(O->wait(CTX(b), 1000000), 0);
	dpl_transport_close(a);
	dpl_transport_close(b);
}

/* Two threads: both post a large send first, then the receive. */
struct bidi {
	const char *world;
	uint32_t rank;
	int rc_send, rc_recv;
	int ok;
};

static void *bidi_main(void *arg)
{
	struct bidi *x = arg;
	dpl_transport *t = open_quiet(x->world, x->rank, 2);
	size_t n = 256u << 10;
	unsigned char *out = malloc(n), *in = malloc(n), *ex = malloc(n);
	void *s = req_quiet(), *r = req_quiet();
	int i;

	if (!t || !out || !in || !ex || !s || !r) {
		x->rc_send = x->rc_recv = DPL_ENOMEM;
		return t;
	}
	fill(out, n, x->rank + 10);
	x->rc_send = O->isend(CTX(t), s, 1 - x->rank, 1, out, n, DPL_MEM_HOST);
	x->rc_recv = O->irecv(CTX(t), r, 1 - x->rank, 1, in, n, DPL_MEM_HOST);
	x->rc_send = x->rc_send ? x->rc_send : DPL_EAGAIN;
	x->rc_recv = x->rc_recv ? x->rc_recv : DPL_EAGAIN;
	for (i = 0; i < 2000000 && (x->rc_send == DPL_EAGAIN ||
				    x->rc_recv == DPL_EAGAIN); i++) {
		O->progress(CTX(t));
		if (x->rc_send == DPL_EAGAIN)
			x->rc_send = O->test(CTX(t), s);
		if (x->rc_recv == DPL_EAGAIN)
			x->rc_recv = O->test(CTX(t), r);
		if (x->rc_send == DPL_EAGAIN || x->rc_recv == DPL_EAGAIN)
			O->wait(CTX(t), 1000000);
	}
	fill(ex, n, (1 - x->rank) + 10);
	x->ok = memcmp(in, ex, n) == 0;
	free(out), free(in), free(ex), free(s), free(r);
	/* Both sides must be done before either leaves: close in main. */
	return t;
}

Test(inproc, bidirectional_large_sends_posted_first_complete)
{
	struct bidi x[2] = {{"bidi", 0, 0, 0, 0}, {"bidi", 1, 0, 0, 0}};
	pthread_t th[2];
	void *t[2];
	int i;

	for (i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, bidi_main, &x[i]);
	for (i = 0; i < 2; i++)
		pthread_join(th[i], &t[i]);
	for (i = 0; i < 2; i++) {
		cr_assert_eq(x[i].rc_send, 0, "rank %d send %d", i,
			     x[i].rc_send);
		cr_assert_eq(x[i].rc_recv, 0, "rank %d recv %d", i,
			     x[i].rc_recv);
		cr_assert(x[i].ok, "rank %d received wrong bytes", i);
		dpl_transport_close(t[i]);
	}
}

/* Four ranks pass numbered messages around a ring concurrently. */
#define RING_N 4
#define RING_MSGS 2000

struct ringarg {
	uint32_t rank;
	int bad;
	dpl_transport *t;
};

static void *ring_main(void *arg)
{
	struct ringarg *x = arg;
	dpl_transport *t = open_quiet("ring4", x->rank, RING_N);
	uint32_t next = (x->rank + 1) % RING_N,
		 prev = (x->rank + RING_N - 1) % RING_N;
	void *s = req_quiet(), *r = req_quiet();
	uint64_t out, in;
	int i, rc;

	x->t = t;
	if (!t || !s || !r) {
		x->bad = -1;
		free(s);
		free(r);
		return NULL;
	}
	for (i = 0; i < RING_MSGS; i++) {
		out = ((uint64_t)x->rank << 32) | (uint64_t)i;
		O->irecv(CTX(t), r, prev, (uint64_t)(i % 7), &in, 8,
			 DPL_MEM_HOST);
		O->isend(CTX(t), s, next, (uint64_t)(i % 7), &out, 8,
			 DPL_MEM_HOST);
		while ((rc = O->test(CTX(t), r)) == DPL_EAGAIN)
			O->wait(CTX(t), 1000000), O->progress(CTX(t));
		if (rc != 0 || in != (((uint64_t)prev << 32) | (uint64_t)i))
			x->bad++;
		while ((rc = O->test(CTX(t), s)) == DPL_EAGAIN)
			O->wait(CTX(t), 1000000), O->progress(CTX(t));
		if (rc != 0)
			x->bad++;
	}
	free(s);
	free(r);
	return NULL;
}

Test(inproc, concurrent_ranks_exchange_in_order)
{
	struct ringarg x[RING_N];
	pthread_t th[RING_N];
	int i;

	for (i = 0; i < RING_N; i++) {
		x[i].rank = (uint32_t)i;
		x[i].bad = 0;
		pthread_create(&th[i], NULL, ring_main, &x[i]);
	}
	for (i = 0; i < RING_N; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < RING_N; i++) {
		cr_assert_eq(x[i].bad, 0, "rank %d: %d bad messages", i,
			     x[i].bad);
		dpl_transport_close(x[i].t);
	}
}

/* One sender streams numbered messages on one tag, past the ring's room
 * into the list and back, while the receiver posts its receives in
 * batches of changing size: every receive gets the next number. A
 * receiver that matched the list before ring messages that went in
 * while it looked would get a later one. */
#define STREAM_N 1000000
#define STREAM_WINDOW 64
/* Rounds of test and progress a stream request may take: the other
 * thread may be off the core for a while. */
#define STREAM_ROUNDS 100000000L

struct streamarg {
	dpl_transport *t;
	long bad_at; /* first receive out of order, or -1 */
	int rc;
};

static void *stream_send_main(void *arg)
{
	struct streamarg *x = arg;
	void *req[STREAM_WINDOW];
	uint64_t val[STREAM_WINDOW];
	int i, k, rc;

	for (k = 0; k < STREAM_WINDOW; k++)
		req[k] = req_quiet();
	for (i = 0; i < STREAM_N && x->rc == 0; i++) {
		k = i % STREAM_WINDOW;
		if (i >= STREAM_WINDOW &&
		    (rc = finish_within(x->t, req[k], STREAM_ROUNDS)) != 0)
			x->rc = rc;
		val[k] = (uint64_t)i;
		rc = O->isend(CTX(x->t), req[k], 1, 9, &val[k], 8,
			      DPL_MEM_HOST);
		if (rc != 0 && x->rc == 0)
			x->rc = rc;
	}
	for (k = 0; k < STREAM_WINDOW && k < i; k++)
		(void)finish_within(x->t, req[k], STREAM_ROUNDS);
	for (k = 0; k < STREAM_WINDOW; k++)
		free(req[k]);
	return NULL;
}

static void *stream_recv_main(void *arg)
{
	struct streamarg *x = arg;
	void *req[48];
	uint64_t val[48];
	long i = 0;
	int k, n, rc, batch = 0;

	for (k = 0; k < 48; k++)
		req[k] = req_quiet();
	while (i < STREAM_N && x->rc == 0) {
		n = 1 + (batch++ * 7) % 48;
		if (n > STREAM_N - i)
			n = (int)(STREAM_N - i);
		for (k = 0; k < n; k++)
			O->irecv(CTX(x->t), req[k], 0, 9, &val[k], 8,
				 DPL_MEM_HOST);
		for (k = 0; k < n; k++, i++) {
			rc = finish_within(x->t, req[k], STREAM_ROUNDS);
			if (rc != 0 && x->rc == 0)
				x->rc = rc;
			if (val[k] != (uint64_t)i && x->bad_at < 0)
				x->bad_at = i;
		}
	}
	for (k = 0; k < 48; k++)
		free(req[k]);
	return NULL;
}

Test(inproc, a_stream_through_ring_and_list_stays_in_order, .timeout = 120)
{
	struct streamarg s = {.bad_at = -1}, r = {.bad_at = -1};
	pthread_t ts, tr;

	s.t = open_rank("stream", 0, 2);
	r.t = open_rank("stream", 1, 2);
	pthread_create(&tr, NULL, stream_recv_main, &r);
	pthread_create(&ts, NULL, stream_send_main, &s);
	pthread_join(ts, NULL);
	pthread_join(tr, NULL);
	cr_expect_eq(s.rc, 0, "sender: %s", dpl_err_name(s.rc));
	cr_expect_eq(r.rc, 0, "receiver: %s", dpl_err_name(r.rc));
	cr_expect_eq(r.bad_at, -1, "receive %ld got another message",
		     r.bad_at);
	dpl_transport_close(s.t);
	dpl_transport_close(r.t);
}
