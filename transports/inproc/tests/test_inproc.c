/*
 * test_inproc.c - the in-process transport against the transport
 * contract: matching, ordering, exact sizes, rendezvous, cancel, peer
 * failure, progress and wait, and concurrent ranks.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/transport.h>

extern const struct dpl_transport_ops dpl_transport_inproc;

static const struct dpl_transport_ops *O = &dpl_transport_inproc;

static dpl_transport *open_rank(const char *world, uint32_t rank,
				uint32_t size)
{
	struct dpl_transport_params p = {0};
	dpl_transport *t = NULL;

	p.rank = rank;
	p.world_size = size;
	p.bootstrap = world;
	cr_assert_eq(dpl_transport_open(O, &p, &t), 0, "open rank %u: %s",
		     rank, dpl_last_error());
	return t;
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

/* Test until done, progressing; bounded. */
static int finish(dpl_transport *t, void *req)
{
	int rc, i;

	for (i = 0; i < 1000000; i++) {
		rc = O->test(CTX(t), req);
		if (rc != DPL_EAGAIN)
			return rc;
		O->progress(CTX(t));
	}
	return DPL_ETIMEDOUT;
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
	p.options = "eager=1";
	cr_assert_eq(dpl_transport_open(O, &p, &b), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "eager=1") != NULL);
	p.options = NULL;
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

Test(inproc, size_mismatch_is_etrunc_and_later_receives_work)
{
	dpl_transport *a = open_rank("trunc", 0, 2),
		      *b = open_rank("trunc", 1, 2);
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
	/* Shorter message than the receive: exact size, so also ETRUNC. */
	cr_assert_eq(O->irecv(CTX(b), r, 0, 2, big, sizeof big,
			      DPL_MEM_HOST), 0);
	cr_assert_eq(O->isend(CTX(a), s, 1, 2, small, sizeof small,
			      DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), DPL_ETRUNC);
	cr_assert_eq(finish(a, s), DPL_ETRUNC);
	/* The pair still works. */
	cr_assert_eq(O->irecv(CTX(b), r, 0, 1, &got, 8, DPL_MEM_HOST), 0);
	cr_assert_eq(O->isend(CTX(a), s, 1, 1, &v, 8, DPL_MEM_HOST), 0);
	cr_assert_eq(finish(b, r), 0);
	cr_assert_eq(finish(a, s), 0);
	cr_assert_eq(got, v);
	dpl_transport_close(a);
	dpl_transport_close(b);
}

Test(inproc, send_completes_only_once_its_receive_is_posted)
{
	dpl_transport *a = open_rank("rndv", 0, 2),
		      *b = open_rank("rndv", 1, 2);
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
	dpl_transport *a = open_rank("cancel", 0, 2),
		      *b = open_rank("cancel", 1, 2);
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
	dpl_transport *a = open_rank("dead", 0, 3),
		      *b = open_rank("dead", 1, 3),
		      *c = open_rank("dead", 2, 3);
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
