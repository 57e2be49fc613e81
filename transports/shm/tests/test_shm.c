/*
 * test_shm.c - the shared-memory transport between forked processes of
 * this host: data integrity across sizes and protocol switch points,
 * unaligned buffers, expected and unexpected messages, ordering, exact
 * tag matching, truncation both ways, cancellation, back-pressure,
 * bidirectional large sends, peer death with a healthy bystander,
 * init/fini churn and /dev/shm hygiene, options and argument errors.
 *
 * Each rank is a forked process that records what it saw in a shared
 * anonymous mapping; the test process asserts on it after reaping them.
 * Ranks meet through the TCP bootstrap on 127.0.0.1 at a port picked per
 * test, so tests may run in parallel.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <dpl/transport.h>
#include <dpl/transport_shm.h>

#include "forked_ranks.h"
#include "shm_threads.h"

#define MAXR 4
#define RING DPL_SHM_DEFAULT_RING
#define EAGER DPL_SHM_DEFAULT_EAGER
#define MiB (1024u * 1024u)

static const struct dpl_transport_ops *O = &dpl_transport_shm;

struct rank_out {
	int rc;          /* init */
	int bad;         /* broken expectations */
	char msg[512];   /* the first of them */
	long long v[8];  /* numbers a test reports */
	int st[8];       /* statuses a test reports */
};

struct job {
	struct rank_out out[MAXR];
	atomic_int flag[16];
	atomic_ullong kill_ns;
	unsigned port;
	int param;
	char opts[64];
};

static struct job *J;
static int RANK;

/* ---- harness ---------------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct job *job_new(void)
{
	struct job *j = fr_shared(sizeof *j);

	j->port = fr_pick_port();
	return j;
}

/* Record a broken expectation of this rank (the first message is kept). */
static void bad(const char *fmt, ...)
{
	struct rank_out *o = &J->out[RANK];
	va_list ap;

	if (o->bad++ == 0) {
		va_start(ap, fmt);
		vsnprintf(o->msg, sizeof o->msg, fmt, ap);
		va_end(ap);
	}
}

typedef void (*rank_fn)(int rank);

static void run_rank(int i, void *arg)
{
	rank_fn fn = *(rank_fn *)arg;

	RANK = i;
	fn(i);
}

static void spawn(pid_t *pid, int n, rank_fn fn)
{
	fr_spawn(pid, n, run_rank, &fn);
}

static void run(int n, rank_fn fn, int timeout_ms)
{
	pid_t pid[MAXR];
	int i;

	spawn(pid, n, fn);
	cr_assert_eq(fr_reap(pid, n, timeout_ms), n, "a rank crashed or hung");
	for (i = 0; i < n; i++) {
		cr_expect_eq(J->out[i].rc, 0, "rank %d init: %s", i,
			     J->out[i].msg);
		cr_expect_eq(J->out[i].bad, 0,
			     "rank %d: %d problems, first: %s", i,
			     J->out[i].bad, J->out[i].msg);
	}
}

static size_t stride(void)
{
	size_t a = _Alignof(max_align_t);

	return (O->req_size + a - 1) / a * a;
}

static void *reqs_new(size_t n)
{
	void *r = calloc(n, stride());

	if (r == NULL)
		abort();
	return r;
}

static void *REQ(void *base, size_t i)
{
	return (char *)base + i * stride();
}

static void *open_ctx(int rank, int world, const char *opts)
{
	struct dpl_transport_params p;
	char root[64];
	void *ctx = calloc(1, O->ctx_size);

	if (ctx == NULL)
		abort();
	snprintf(root, sizeof root, "127.0.0.1:%u", J->port);
	memset(&p, 0, sizeof p);
	p.rank = (uint32_t)rank;
	p.world_size = (uint32_t)world;
	p.bootstrap = root;
	p.options = opts;
	p.timeout_ms = 10000;
	J->out[rank].rc = O->init(ctx, &p);
	if (J->out[rank].rc != 0) {
		snprintf(J->out[rank].msg, sizeof J->out[rank].msg, "%s",
			 dpl_last_error());
		free(ctx);
		return NULL;
	}
	return ctx;
}

static void close_ctx(void *ctx)
{
	O->fini(ctx);
	free(ctx);
}

/* Progress (and wait) until every request of base[0..n) completed or
 * ms passed; statuses into st (DPL_EAGAIN for those still pending). */
static int wait_all(void *ctx, void *base, size_t n, int *st, int ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;
	size_t i, left = n;

	for (i = 0; i < n; i++)
		st[i] = DPL_EAGAIN;
	while (left > 0) {
		int rc = O->progress(ctx);

		if (rc < 0)
			return rc;
		for (i = 0; i < n; i++)
			if (st[i] == DPL_EAGAIN) {
				st[i] = O->test(ctx, REQ(base, i));
				left -= st[i] != DPL_EAGAIN;
			}
		if (left == 0 || now_ns() > end)
			break;
		O->wait(ctx, 1000000);
	}
	return left == 0 ? 0 : DPL_ETIMEDOUT;
}

static int wait_one(void *ctx, void *req, int ms)
{
	int st;

	wait_all(ctx, req, 1, &st, ms);
	return st;
}

/* Wait until J->flag[i] >= v (other ranks' progress not needed). */
static bool await_flag(int i, int v, int ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;

	while (atomic_load(&J->flag[i]) < v)
		if (now_ns() > end)
			return false;
		else
			fr_sleep_ms(1);
	return true;
}

/* Wait for the flag while progressing ctx (peers may need us). */
static bool await_flag_progress(void *ctx, int i, int v, int ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;

	while (atomic_load(&J->flag[i]) < v) {
		if (now_ns() > end)
			return false;
		O->progress(ctx);
		O->wait(ctx, 1000000);
	}
	return true;
}

static unsigned char pat(uint32_t seed, size_t i)
{
	uint32_t x = (uint32_t)i * 2654435761u ^ (seed * 40503u + 17u);

	return (unsigned char)(x >> 13 ^ x >> 3 ^ (uint32_t)(i >> 12));
}

static void fill(unsigned char *b, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		b[i] = pat(seed, i);
}

/* Index of the first byte that breaks the pattern, or n. */
static size_t verify(const unsigned char *b, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != pat(seed, i))
			return i;
	return n;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		abort();
	return p;
}

/* ---- sizes across the protocol switch points ------------------------- */

static const size_t sizes[] = {
	0, 1, 8, 63, 64, 4095, 4096, EAGER - 1, EAGER, EAGER + 1,
	RING - 1, RING, RING + 1, 64 * 1024, MiB, 16 * MiB,
};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define GUARD 64

/*
 * Both ranks send every size to each other (tag = index) and receive
 * them; param bit 0: receives posted after the messages arrived
 * (unexpected, in reverse order), else before (expected); bit 1: cma=0.
 */
static void sizes_rank(int rank)
{
	bool unexpected = J->param & 1;
	void *ctx = open_ctx(rank, 2, J->opts);
	unsigned char *sb[NSIZES], *rb[NSIZES];
	void *sr = reqs_new(NSIZES), *rr = reqs_new(NSIZES);
	int sst[NSIZES], rst[NSIZES], rc;
	size_t k;
	int peer = 1 - rank;

	if (ctx == NULL)
		return;
	for (k = 0; k < NSIZES; k++) {
		sb[k] = xmalloc(sizes[k]);
		rb[k] = xmalloc(sizes[k] + GUARD);
		fill(sb[k], sizes[k], (uint32_t)(rank * 100 + k));
		memset(rb[k], 0xA5, sizes[k] + GUARD);
	}
	if (!unexpected) {
		for (k = 0; k < NSIZES; k++)
			if ((rc = O->irecv(ctx, REQ(rr, k), (uint32_t)peer, k,
					   rb[k], sizes[k], DPL_MEM_HOST)))
				bad("irecv %zu: %d", sizes[k], rc);
		atomic_fetch_add(&J->flag[0], 1);
		await_flag(0, 2, 5000);
	}
	for (k = 0; k < NSIZES; k++)
		if ((rc = O->isend(ctx, REQ(sr, k), (uint32_t)peer, k, sb[k],
				   sizes[k], DPL_MEM_HOST)))
			bad("isend %zu: %d", sizes[k], rc);
	if (unexpected) {
		/* Let everything arrive and be seen before any receive. */
		atomic_fetch_add(&J->flag[1], 1);
		await_flag_progress(ctx, 1, 2, 5000);
		for (k = 0; k < 50; k++) {
			O->progress(ctx);
			fr_sleep_ms(1);
		}
		for (k = NSIZES; k-- > 0;)
			if ((rc = O->irecv(ctx, REQ(rr, k), (uint32_t)peer, k,
					   rb[k], sizes[k], DPL_MEM_HOST)))
				bad("irecv %zu: %d", sizes[k], rc);
	}
	if (wait_all(ctx, rr, NSIZES, rst, 20000) != 0)
		bad("receives did not complete");
	if (wait_all(ctx, sr, NSIZES, sst, 20000) != 0)
		bad("sends did not complete");
	for (k = 0; k < NSIZES; k++) {
		size_t at = verify(rb[k], sizes[k],
				   (uint32_t)(peer * 100 + k));
		size_t g;

		if (rst[k] != 0 || sst[k] != 0)
			bad("size %zu: recv %d send %d", sizes[k], rst[k],
			    sst[k]);
		if (at != sizes[k])
			bad("size %zu: byte %zu differs", sizes[k], at);
		for (g = 0; g < GUARD; g++)
			if (rb[k][sizes[k] + g] != 0xA5) {
				bad("size %zu: guard byte %zu written",
				    sizes[k], g);
				break;
			}
		free(sb[k]);
		free(rb[k]);
	}
	/* Nobody leaves before both checked (a leaving rank is a failed
	 * peer for the other). */
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	free(sr);
	free(rr);
	close_ctx(ctx);
}

ParameterizedTestParameters(shm, sizes)
{
	static int modes[] = {0, 1, 2, 3};

	return cr_make_param_array(int, modes, 4);
}

ParameterizedTest(int *mode, shm, sizes, .timeout = 90)
{
	J = job_new();
	J->param = *mode;
	snprintf(J->opts, sizeof J->opts, "%s", *mode & 2 ? "cma=0" : "");
	cr_log_info("mode %d: %s, %s", *mode,
		    *mode & 1 ? "unexpected" : "expected",
		    *mode & 2 ? "streamed through the ring" : "cross-memory");
	run(2, sizes_rank, 80000);
}

/* ---- unaligned buffers --------------------------------------------- */

static const size_t ulens[] = {1, 63, 4097, EAGER + 3, MiB + 5};
#define NULENS (sizeof ulens / sizeof ulens[0])

static void unaligned_rank(int rank)
{
	void *ctx = open_ctx(rank, 2, J->opts);
	size_t n = NULENS * 7;
	unsigned char **sb = calloc(n, sizeof *sb);
	unsigned char **rb = calloc(n, sizeof *rb);
	void *sr = reqs_new(n), *rr = reqs_new(n);
	int *sst = calloc(n, sizeof *sst), *rst = calloc(n, sizeof *rst);
	size_t k, off, i = 0;

	if (ctx == NULL)
		return;
	for (k = 0; k < NULENS; k++)
		for (off = 1; off <= 7; off++, i++) {
			sb[i] = xmalloc(ulens[k] + 8);
			rb[i] = xmalloc(ulens[k] + 8 + GUARD);
			memset(rb[i], 0x5A, ulens[k] + 8 + GUARD);
			fill(sb[i] + off, ulens[k], (uint32_t)(rank + i * 3));
			/* src offset off, dst offset 8 - off */
			if (O->irecv(ctx, REQ(rr, i), (uint32_t)(1 - rank), i,
				     rb[i] + 8 - off, ulens[k],
				     DPL_MEM_HOST) != 0 ||
			    O->isend(ctx, REQ(sr, i), (uint32_t)(1 - rank), i,
				     sb[i] + off, ulens[k],
				     DPL_MEM_HOST) != 0)
				bad("post %zu", i);
		}
	if (wait_all(ctx, rr, n, rst, 20000) != 0 ||
	    wait_all(ctx, sr, n, sst, 20000) != 0)
		bad("requests did not complete");
	for (i = 0, k = 0; k < NULENS; k++)
		for (off = 1; off <= 7; off++, i++) {
			unsigned char *d = rb[i] + 8 - off;
			size_t g;

			if (rst[i] != 0 || sst[i] != 0)
				bad("len %zu off %zu: %d %d", ulens[k], off,
				    rst[i], sst[i]);
			if (verify(d, ulens[k],
				   (uint32_t)(1 - rank + i * 3)) != ulens[k])
				bad("len %zu off %zu: data", ulens[k], off);
			for (g = 0; g < 8 - off; g++)
				if (rb[i][g] != 0x5A)
					bad("len %zu off %zu: byte before "
					    "written", ulens[k], off);
			for (g = 0; g < GUARD; g++)
				if (d[ulens[k] + g] != 0x5A) {
					bad("len %zu off %zu: guard written",
					    ulens[k], off);
					break;
				}
			free(sb[i]);
			free(rb[i]);
		}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	free(sb);
	free(rb);
	free(sr);
	free(rr);
	free(sst);
	free(rst);
	close_ctx(ctx);
}

Test(shm, unaligned_buffers, .timeout = 60)
{
	J = job_new();
	run(2, unaligned_rank, 50000);
	J = job_new();
	snprintf(J->opts, sizeof J->opts, "cma=0");
	run(2, unaligned_rank, 50000);
}

/* ---- ordering ---------------------------------------------------------- */

#define NORDER 1000

/* Rank 0 sends 1000 messages on one tag (sizes cycling through eager and
 * long ones, so long ones come before short ones); rank 1 checks that
 * message i carries index i. */
static void order_rank(int rank)
{
	static const size_t len[] = {8, 40000, 100, 3 * EAGER, 0, 9000};
	void *ctx = open_ctx(rank, 2, J->opts);
	void *r = reqs_new(NORDER);
	int *st = calloc(NORDER, sizeof *st);
	unsigned char **b = calloc(NORDER, sizeof *b);
	size_t i;
	int rc;

	if (ctx == NULL)
		return;
	for (i = 0; i < NORDER; i++) {
		size_t n = len[i % 6];

		b[i] = xmalloc(n);
		if (rank == 0)
			fill(b[i], n, (uint32_t)i);
		else
			memset(b[i], 0, n);
	}
	if (rank == 1) {
		for (i = 0; i < NORDER; i++)
			if (O->irecv(ctx, REQ(r, i), 0, 77, b[i], len[i % 6],
				     DPL_MEM_HOST) != 0)
				bad("irecv %zu", i);
		atomic_store(&J->flag[0], 1);
	} else {
		await_flag(0, 1, 5000);
		for (i = 0; i < NORDER; i++) {
			uint64_t end = now_ns() + 5000000000u;

			while ((rc = O->isend(ctx, REQ(r, i), 1, 77, b[i],
					      len[i % 6], DPL_MEM_HOST)) ==
				       DPL_EAGAIN &&
			       now_ns() < end)
				O->progress(ctx);
			if (rc != 0) {
				bad("isend %zu: %d", i, rc);
				break;
			}
		}
	}
	if (wait_all(ctx, r, NORDER, st, 20000) != 0)
		bad("requests did not complete");
	for (i = 0; i < NORDER; i++) {
		if (st[i] != 0)
			bad("message %zu: status %d", i, st[i]);
		else if (rank == 1 && verify(b[i], len[i % 6], (uint32_t)i) !=
					      len[i % 6])
			bad("message %zu arrived out of order or damaged", i);
		free(b[i]);
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	free(b);
	free(st);
	free(r);
	close_ctx(ctx);
}

Test(shm, ordering_of_1000_messages, .timeout = 60)
{
	J = job_new();
	run(2, order_rank, 50000);
	J = job_new();
	snprintf(J->opts, sizeof J->opts, "cma=0");
	run(2, order_rank, 50000);
}

/* ---- exact tag matching among four ranks -------------------------------- */

#define NTAGS 5
#define PER 20

/* Every rank sends PER messages on each of NTAGS tags to every other
 * rank, tags interleaved; receives are posted per (source, tag) in a
 * scrambled order. Payload: source, tag, index. */
static void tags_rank(int rank)
{
	void *ctx = open_ctx(rank, 4, NULL);
	size_t n = 3 * NTAGS * PER, i = 0, k;
	void *sr = reqs_new(n), *rr = reqs_new(n);
	uint32_t (*sb)[3] = calloc(n, sizeof *sb), (*rb)[3] =
					calloc(n, sizeof *rb);
	int *sst = calloc(n, sizeof *sst), *rst = calloc(n, sizeof *rst);
	uint32_t q, t, m;

	if (ctx == NULL)
		return;
	/* Receives: tags in reverse, sources rotated. */
	for (t = NTAGS; t-- > 0;)
		for (q = 1; q < 4; q++) {
			uint32_t src = ((uint32_t)rank + q) % 4;

			for (m = 0; m < PER; m++, i++)
				if (O->irecv(ctx, REQ(rr, i), src, 1000 + t,
					     rb[i], sizeof rb[i],
					     DPL_MEM_HOST) != 0)
					bad("irecv");
		}
	for (i = 0, m = 0; m < PER; m++)
		for (t = 0; t < NTAGS; t++)
			for (q = 0; q < 4; q++) {
				int rc;
				uint64_t end = now_ns() + 5000000000u;

				if (q == (uint32_t)rank)
					continue;
				sb[i][0] = (uint32_t)rank;
				sb[i][1] = t;
				sb[i][2] = m;
				while ((rc = O->isend(ctx, REQ(sr, i), q,
						      1000 + t, sb[i],
						      sizeof sb[i],
						      DPL_MEM_HOST)) ==
					       DPL_EAGAIN &&
				       now_ns() < end)
					O->progress(ctx);
				if (rc != 0)
					bad("isend: %d", rc);
				i++;
			}
	if (wait_all(ctx, rr, n, rst, 20000) != 0 ||
	    wait_all(ctx, sr, n, sst, 20000) != 0)
		bad("requests did not complete");
	for (i = 0, t = NTAGS; t-- > 0;)
		for (q = 1; q < 4; q++) {
			uint32_t src = ((uint32_t)rank + q) % 4;

			for (m = 0; m < PER; m++, i++)
				if (rst[i] != 0 || rb[i][0] != src ||
				    rb[i][1] != t || rb[i][2] != m)
					bad("from %u tag %u #%u got %u/%u/%u "
					    "(%d)", src, t, m, rb[i][0],
					    rb[i][1], rb[i][2], rst[i]);
		}
	for (k = 0; k < n; k++)
		if (sst[k] != 0)
			bad("send %zu: %d", k, sst[k]);
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 4, 5000);
	free(sr);
	free(rr);
	free(sb);
	free(rb);
	free(sst);
	free(rst);
	close_ctx(ctx);
}

Test(shm, exact_tag_matching_four_ranks, .timeout = 60)
{
	J = job_new();
	run(4, tags_rank, 50000);
}

/* ---- truncation ------------------------------------------------------- */

/*
 * Rank 0 sends, for a short and a long size L: L bytes into a receive of
 * L/2, L bytes into a receive of 2L, then L bytes into a receive of L.
 * The first two end DPL_ETRUNC on both sides and copy nothing; the third
 * arrives intact.
 */
static void trunc_rank(int rank)
{
	static const size_t L[] = {100, 3 * MiB};
	void *ctx = open_ctx(rank, 2, J->opts);
	void *r = reqs_new(6);
	int st[6], k;
	unsigned char *b[6];

	if (ctx == NULL)
		return;
	for (k = 0; k < 6; k++) {
		size_t len = L[k / 3];
		size_t rl = k % 3 == 0 ? len / 2 : k % 3 == 1 ? 2 * len : len;

		b[k] = xmalloc(2 * len);
		if (rank == 0) {
			fill(b[k], len, (uint32_t)k);
			if (O->isend(ctx, REQ(r, k), 1, 5, b[k], len,
				     DPL_MEM_HOST) != 0)
				bad("isend %d", k);
		} else {
			memset(b[k], 0xC3, 2 * len);
			if (O->irecv(ctx, REQ(r, k), 0, 5, b[k], rl,
				     DPL_MEM_HOST) != 0)
				bad("irecv %d", k);
		}
	}
	wait_all(ctx, r, 6, st, 20000);
	for (k = 0; k < 6; k++) {
		size_t len = L[k / 3], i;
		int want = k % 3 == 2 ? 0 : DPL_ETRUNC;

		J->out[rank].st[k] = st[k];
		if (st[k] != want)
			bad("case %d (len %zu): status %d, want %d", k, len,
			    st[k], want);
		if (rank == 1 && want == DPL_ETRUNC) {
			for (i = 0; i < 2 * len; i++)
				if (b[k][i] != 0xC3) {
					bad("case %d: truncated receive "
					    "wrote byte %zu", k, i);
					break;
				}
		}
		if (rank == 1 && want == 0 &&
		    verify(b[k], len, (uint32_t)k) != len)
			bad("case %d: data after truncations", k);
		free(b[k]);
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	free(r);
	close_ctx(ctx);
}

Test(shm, truncation_both_ways_keeps_endpoint_usable, .timeout = 60)
{
	J = job_new();
	run(2, trunc_rank, 50000);
	J = job_new();
	snprintf(J->opts, sizeof J->opts, "cma=0");
	run(2, trunc_rank, 50000);
}

/* ---- cancel ----------------------------------------------------------- */

/*
 * Rank 1 posts a receive (tag 5) and cancels it: DPL_ECANCELED, buffer
 * untouched, a second cancel is DPL_EINVAL. Rank 0 posts a send (tag 9)
 * that rank 1 has not matched and cancels it: DPL_ECANCELED. Then rank 0
 * sends "second" on tag 9 and "late" on tag 5, and rank 1 receives
 * exactly those: the cancelled send never arrives.
 */
static void cancel_rank(int rank)
{
	void *ctx = open_ctx(rank, 2, J->opts);
	void *r = reqs_new(4);
	char buf[3][16];
	size_t big = 2 * MiB;
	unsigned char *lb = xmalloc(big);
	int st;

	if (ctx == NULL)
		return;
	memset(buf, 'x', sizeof buf);
	if (rank == 1) {
		O->irecv(ctx, REQ(r, 0), 0, 5, buf[0], 16, DPL_MEM_HOST);
		O->progress(ctx);
		if (O->cancel(ctx, REQ(r, 0)) != 0)
			bad("cancel of a posted receive failed");
		st = wait_one(ctx, REQ(r, 0), 1000);
		J->out[1].st[0] = st;
		if (st != DPL_ECANCELED)
			bad("cancelled receive: %d", st);
		if (O->cancel(ctx, REQ(r, 0)) != DPL_EINVAL)
			bad("cancel of a completed request is not EINVAL");
		atomic_store(&J->flag[0], 1);
		await_flag_progress(ctx, 1, 1, 5000);
		O->irecv(ctx, REQ(r, 1), 0, 9, buf[1], 16, DPL_MEM_HOST);
		O->irecv(ctx, REQ(r, 2), 0, 5, buf[2], 16, DPL_MEM_HOST);
		if (wait_one(ctx, REQ(r, 1), 5000) != 0 ||
		    wait_one(ctx, REQ(r, 2), 5000) != 0)
			bad("receives after the cancels failed");
		if (memcmp(buf[1], "second---------", 16) != 0)
			bad("tag 9 got '%.16s', not the second send", buf[1]);
		if (memcmp(buf[2], "late-----------", 16) != 0)
			bad("tag 5 got '%.16s'", buf[2]);
		if (memcmp(buf[0], "xxxxxxxxxxxxxxxx", 16) != 0)
			bad("the cancelled receive's buffer was written");
		/* A long send cancelled before it is matched. */
		O->irecv(ctx, REQ(r, 3), 0, 11, lb, big, DPL_MEM_HOST);
		if (wait_one(ctx, REQ(r, 3), 5000) != 0 ||
		    verify(lb, big, 11) != big)
			bad("long message after a cancelled long send");
	} else {
		await_flag_progress(ctx, 0, 1, 5000);
		O->isend(ctx, REQ(r, 0), 1, 9, "first----------", 16,
			 DPL_MEM_HOST);
		O->progress(ctx);
		if (O->cancel(ctx, REQ(r, 0)) != 0)
			bad("cancel of a send failed");
		st = wait_one(ctx, REQ(r, 0), 1000);
		J->out[0].st[0] = st;
		if (st != DPL_ECANCELED)
			bad("cancelled unmatched send: %d", st);
		fill(lb, big, 99);
		O->isend(ctx, REQ(r, 3), 1, 11, lb, big, DPL_MEM_HOST);
		if (O->cancel(ctx, REQ(r, 3)) != 0 ||
		    wait_one(ctx, REQ(r, 3), 1000) != DPL_ECANCELED)
			bad("cancel of a long send");
		O->isend(ctx, REQ(r, 1), 1, 9, "second---------", 16,
			 DPL_MEM_HOST);
		O->isend(ctx, REQ(r, 2), 1, 5, "late-----------", 16,
			 DPL_MEM_HOST);
		fill(lb, big, 11);
		O->isend(ctx, REQ(r, 3), 1, 11, lb, big, DPL_MEM_HOST);
		atomic_store(&J->flag[1], 1);
		if (wait_one(ctx, REQ(r, 1), 5000) != 0 ||
		    wait_one(ctx, REQ(r, 2), 5000) != 0 ||
		    wait_one(ctx, REQ(r, 3), 5000) != 0)
			bad("sends after the cancel failed");
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	free(lb);
	free(r);
	close_ctx(ctx);
}

Test(shm, cancel_receive_and_unmatched_send, .timeout = 60)
{
	J = job_new();
	run(2, cancel_rank, 50000);
	cr_expect_eq(J->out[1].st[0], DPL_ECANCELED);
	cr_expect_eq(J->out[0].st[0], DPL_ECANCELED);
	J = job_new();
	snprintf(J->opts, sizeof J->opts, "cma=0");
	run(2, cancel_rank, 50000);
}

/* ---- back-pressure ----------------------------------------------------- */

#define NBP 10000

/* Rank 0 posts 10 000 8-byte sends without progressing: some must be
 * refused with DPL_EAGAIN (nothing dropped, nothing crashes); then it
 * progresses and posts the rest while rank 1 receives all, in order. */
static void bp_rank(int rank)
{
	void *ctx = open_ctx(rank, 2, NULL);
	void *r = reqs_new(NBP);
	uint64_t *v = calloc(NBP, sizeof *v);
	int *st = calloc(NBP, sizeof *st);
	size_t i, first_eagain = NBP, eagains = 0;
	int rc;

	if (ctx == NULL)
		return;
	if (rank == 0) {
		for (i = 0; i < NBP; i++)
			v[i] = i * 7 + 3;
		for (i = 0; i < NBP; i++) {
			rc = O->isend(ctx, REQ(r, i), 1, 3, &v[i], 8,
				      DPL_MEM_HOST);
			if (rc == DPL_EAGAIN)
				break;
			if (rc != 0)
				bad("isend %zu: %d", i, rc);
		}
		first_eagain = i;
		J->out[0].v[0] = (long long)first_eagain;
		atomic_store(&J->flag[0], 1);
		for (; i < NBP; i++) {
			uint64_t end = now_ns() + 10000000000u;

			while ((rc = O->isend(ctx, REQ(r, i), 1, 3, &v[i], 8,
					      DPL_MEM_HOST)) == DPL_EAGAIN &&
			       now_ns() < end) {
				eagains++;
				O->progress(ctx);
			}
			if (rc != 0) {
				bad("isend %zu: %d", i, rc);
				break;
			}
		}
		J->out[0].v[1] = (long long)eagains;
	} else {
		await_flag(0, 1, 10000);
		for (i = 0; i < NBP; i++)
			if (O->irecv(ctx, REQ(r, i), 0, 3, &v[i], 8,
				     DPL_MEM_HOST) != 0)
				bad("irecv %zu", i);
	}
	if (wait_all(ctx, r, NBP, st, 30000) != 0)
		bad("requests did not drain");
	for (i = 0; i < NBP; i++)
		if (st[i] != 0 || v[i] != i * 7 + 3) {
			bad("message %zu: status %d value %llu", i, st[i],
			    (unsigned long long)v[i]);
			break;
		}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	free(v);
	free(st);
	free(r);
	close_ctx(ctx);
}

Test(shm, backpressure_eagain_then_drain, .timeout = 90)
{
	J = job_new();
	run(2, bp_rank, 80000);
	cr_expect_lt(J->out[0].v[0], NBP, "no DPL_EAGAIN before %d sends",
		     NBP);
	cr_expect_gt(J->out[0].v[0], 0);
}

/* ---- bidirectional large sends ------------------------------------------ */

#define NBIG 4

static void bidir_rank(int rank)
{
	size_t len = 16 * MiB;
	void *ctx = open_ctx(rank, 2, J->opts);
	void *sr = reqs_new(NBIG), *rr = reqs_new(NBIG);
	unsigned char *sb[NBIG], *rb[NBIG];
	int sst[NBIG], rst[NBIG], k;

	if (ctx == NULL)
		return;
	for (k = 0; k < NBIG; k++) {
		sb[k] = xmalloc(len);
		rb[k] = xmalloc(len);
		fill(sb[k], len, (uint32_t)(rank * 10 + k));
		memset(rb[k], 0, len);
	}
	/* Sends first, on both sides, then the receives. */
	for (k = 0; k < NBIG; k++)
		if (O->isend(ctx, REQ(sr, k), (uint32_t)(1 - rank),
			     (uint64_t)k, sb[k], len, DPL_MEM_HOST) != 0)
			bad("isend %d", k);
	atomic_fetch_add(&J->flag[0], 1);
	await_flag_progress(ctx, 0, 2, 5000);
	for (k = 0; k < NBIG; k++)
		if (O->irecv(ctx, REQ(rr, k), (uint32_t)(1 - rank),
			     (uint64_t)k, rb[k], len, DPL_MEM_HOST) != 0)
			bad("irecv %d", k);
	if (wait_all(ctx, rr, NBIG, rst, 30000) != 0 ||
	    wait_all(ctx, sr, NBIG, sst, 30000) != 0)
		bad("deadlock: requests did not complete");
	for (k = 0; k < NBIG; k++) {
		if (rst[k] != 0 || sst[k] != 0)
			bad("message %d: %d %d", k, rst[k], sst[k]);
		if (verify(rb[k], len, (uint32_t)((1 - rank) * 10 + k)) != len)
			bad("message %d: data", k);
		free(sb[k]);
		free(rb[k]);
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	free(sr);
	free(rr);
	close_ctx(ctx);
}

Test(shm, bidirectional_4x16MiB_sends_before_receives, .timeout = 90)
{
	J = job_new();
	run(2, bidir_rank, 80000);
	J = job_new();
	snprintf(J->opts, sizeof J->opts, "cma=0");
	run(2, bidir_rank, 80000);
}

/* ---- peer death ------------------------------------------------------ */

#define DEATH_BOUND_NS UINT64_C(2000000000) /* the declared bound: 2 s */

/*
 * Rank 1 is SIGKILLed by the test while rank 0 has a receive from it and
 * a long send to it pending, and rank 2 (the bystander) a receive from
 * it. Both must see DPL_EPEER within the declared bound after the kill,
 * later posts to rank 1 fail with DPL_EPEER naming it, and ranks 0 and 2
 * keep exchanging messages.
 */
static void death_rank(int rank)
{
	void *ctx = open_ctx(rank, 3, NULL);
	void *r = reqs_new(4);
	size_t big = 4 * MiB;
	unsigned char *b = xmalloc(big);
	uint64_t kill_ns, end;
	int st[2], i, rc;
	char one[8];

	if (ctx == NULL) {
		atomic_fetch_add(&J->flag[0], 1);
		return;
	}
	memset(b, 1, big);
	if (rank == 1) {
		atomic_fetch_add(&J->flag[0], 1);
		for (i = 0; i < 20000; i++) { /* killed long before */
			O->progress(ctx);
			O->wait(ctx, 1000000);
		}
		return;
	}
	O->irecv(ctx, REQ(r, 0), 1, 1, one, sizeof one, DPL_MEM_HOST);
	if (rank == 0)
		O->isend(ctx, REQ(r, 1), 1, 2, b, big, DPL_MEM_HOST);
	atomic_fetch_add(&J->flag[0], 1);
	/* Progress until the kill, then until both complete. */
	while ((kill_ns = atomic_load(&J->kill_ns)) == 0)
		O->progress(ctx);
	end = kill_ns + DEATH_BOUND_NS;
	rc = wait_all(ctx, r, rank == 0 ? 2 : 1, st,
		      now_ns() < end ? (int)((end - now_ns()) / 1000000u)
				     : 0);
	J->out[rank].v[0] = (long long)(now_ns() - kill_ns);
	if (rc != 0)
		bad("requests with the killed rank still pending 2 s after "
		    "the kill");
	J->out[rank].st[0] = st[0];
	J->out[rank].st[1] = rank == 0 ? st[1] : DPL_EPEER;
	if (st[0] != DPL_EPEER || (rank == 0 && st[1] != DPL_EPEER))
		bad("pending requests with the dead rank: %d %d", st[0],
		    rank == 0 ? st[1] : 0);
	rc = O->isend(ctx, REQ(r, 2), 1, 3, one, 8, DPL_MEM_HOST);
	if (rc != DPL_EPEER || strstr(dpl_last_error(), "rank 1") == NULL)
		bad("post to the dead rank: %d '%s'", rc, dpl_last_error());
	/* The healthy pair goes on. */
	for (i = 0; i < 100; i++) {
		uint32_t out = (uint32_t)(rank * 1000 + i), in = 0;
		uint32_t peer = rank == 0 ? 2 : 0;

		O->irecv(ctx, REQ(r, 2), peer, 50, &in, 4, DPL_MEM_HOST);
		O->isend(ctx, REQ(r, 3), peer, 50, &out, 4, DPL_MEM_HOST);
		wait_all(ctx, REQ(r, 2), 2, st, 5000);
		if (st[0] != 0 || st[1] != 0 ||
		    in != peer * 1000 + (uint32_t)i) {
			bad("bystander exchange %d: %d %d %u", i, st[0], st[1],
			    in);
			break;
		}
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	free(b);
	free(r);
	close_ctx(ctx);
}

Test(shm, peer_sigkill_with_healthy_bystander, .timeout = 60)
{
	pid_t pid[3];
	int i;

	J = job_new();
	spawn(pid, 3, death_rank);
	for (i = 0; i < 10000 && atomic_load(&J->flag[0]) < 3; i++)
		fr_sleep_ms(1);
	cr_assert_eq(atomic_load(&J->flag[0]), 3, "ranks did not start");
	fr_sleep_ms(20);
	atomic_store(&J->kill_ns, now_ns());
	kill(pid[1], SIGKILL);
	waitpid(pid[1], NULL, 0);
	pid[1] = 0;
	fr_reap(pid, 3, 30000);
	for (i = 0; i < 3; i += 2) {
		cr_expect_eq(J->out[i].rc, 0, "rank %d: %s", i, J->out[i].msg);
		cr_expect_eq(J->out[i].bad, 0, "rank %d: %s", i,
			     J->out[i].msg);
		cr_expect_eq(J->out[i].st[0], DPL_EPEER);
		cr_expect_eq(J->out[i].st[1], DPL_EPEER);
		cr_log_info("rank %d saw the death after %.1f ms", i,
			    (double)J->out[i].v[0] / 1e6);
	}
}

/* Rank 1 calls fini while rank 0 waits on it: DPL_EPEER, not a hang. */
static void leave_rank(int rank)
{
	void *ctx = open_ctx(rank, 2, NULL);
	void *r = reqs_new(2);
	char b[8];
	int st;

	if (ctx == NULL)
		return;
	if (rank == 1) {
		/* A pending receive of its own is cancelled by fini. */
		O->irecv(ctx, REQ(r, 0), 0, 4, b, 8, DPL_MEM_HOST);
		close_ctx(ctx);
		free(r);
		return;
	}
	/* Either the post fails (rank 1 is already known gone) or the
	 * receive completes with DPL_EPEER. */
	st = O->irecv(ctx, REQ(r, 0), 1, 4, b, 8, DPL_MEM_HOST);
	if (st == 0)
		st = wait_one(ctx, REQ(r, 0), 5000);
	if (st != DPL_EPEER)
		bad("receive from a rank that left: %d", st);
	st = O->irecv(ctx, REQ(r, 1), 1, 4, b, 8, DPL_MEM_HOST);
	if (st != DPL_EPEER || strstr(dpl_last_error(), "rank 1 left") == NULL)
		bad("post to a rank that left: %d '%s'", st, dpl_last_error());
	free(r);
	close_ctx(ctx);
}

Test(shm, fini_makes_the_rank_a_failed_peer, .timeout = 30)
{
	J = job_new();
	run(2, leave_rank, 20000);
}

/* ---- churn and /dev/shm hygiene ----------------------------------------- */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Entries of /dev/shm whose name ends in "-p<pid>" for a pid of pids[]. */
static int count_segments(const pid_t *pids, int n)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int found = 0, i;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		const char *p = strrchr(e->d_name, 'p');

		if (strncmp(e->d_name, "dpl-", 4) != 0 || p == NULL ||
		    p[-1] != '-')
			continue;
		for (i = 0; i < n; i++)
			if (atoi(p + 1) == pids[i])
				found++;
	}
	closedir(d);
	return found;
}

static void churn_rank(int rank)
{
	int before = count_fds(), k;
	pid_t me = getpid();

	for (k = 0; k < 100; k++) {
		void *ctx = open_ctx(rank, 2, NULL);
		void *r = reqs_new(2);
		uint32_t out = (uint32_t)k, in = ~0u;
		int st[2];

		if (ctx == NULL) {
			bad("init %d: %s", k, J->out[rank].msg);
			free(r);
			return;
		}
		O->irecv(ctx, REQ(r, 0), (uint32_t)(1 - rank), 1, &in, 4,
			 DPL_MEM_HOST);
		O->isend(ctx, REQ(r, 1), (uint32_t)(1 - rank), 1, &out, 4,
			 DPL_MEM_HOST);
		if (wait_all(ctx, r, 2, st, 5000) != 0 || st[0] != 0 ||
		    st[1] != 0 || in != (uint32_t)k)
			bad("round %d: %d %d %u", k, st[0], st[1], in);
		/* The peer may leave once both have their message: make
		 * sure it also got ours before leaving ourselves. */
		atomic_fetch_add(&J->flag[3], 1);
		await_flag(3, 2 * (k + 1), 5000);
		close_ctx(ctx);
		free(r);
		if (count_segments(&me, 1) != 0)
			bad("round %d: a segment of this rank is left", k);
	}
	J->out[rank].v[0] = count_fds() - before;
	if (J->out[rank].v[0] != 0)
		bad("%lld descriptors more after 100 rounds",
		    J->out[rank].v[0]);
}

Test(shm, init_fini_100_times_leaks_nothing, .timeout = 120)
{
	J = job_new();
	run(2, churn_rank, 110000);
}

/* Rank 1 is killed after init; rank 0 sees it and leaves. Afterwards no
 * segment of either remains, and a segment left by a dead process is
 * removed by the next job's init. */
static void litter_rank(int rank)
{
	void *ctx = open_ctx(rank, 2, NULL);
	void *r = reqs_new(1);
	char b[4];

	if (ctx == NULL) {
		atomic_store(&J->flag[0], 1);
		return;
	}
	if (rank == 1) {
		O->isend(ctx, REQ(r, 0), 0, 1, "abc", 4, DPL_MEM_HOST);
		wait_one(ctx, REQ(r, 0), 5000);
		raise(SIGKILL);
	}
	O->irecv(ctx, REQ(r, 0), 1, 1, b, 4, DPL_MEM_HOST);
	if (wait_one(ctx, REQ(r, 0), 5000) != 0)
		bad("first message");
	O->irecv(ctx, REQ(r, 0), 1, 2, b, 4, DPL_MEM_HOST);
	if (wait_one(ctx, REQ(r, 0), 5000) != DPL_EPEER)
		bad("killed rank not seen");
	free(r);
	close_ctx(ctx);
}

static void solo_rank(int rank)
{
	void *ctx = open_ctx(rank, 2, NULL);

	if (ctx != NULL) {
		atomic_fetch_add(&J->flag[2], 1);
		await_flag_progress(ctx, 2, 2, 5000);
		close_ctx(ctx);
	}
}

Test(shm, sigkill_leaves_no_dev_shm_litter, .timeout = 60)
{
	pid_t pid[2], keep[2], dead;
	char stale[128];
	FILE *f;

	J = job_new();
	spawn(pid, 2, litter_rank);
	keep[0] = pid[0];
	keep[1] = pid[1];
	fr_reap(pid, 2, 20000);
	cr_expect_eq(J->out[0].bad, 0, "%s", J->out[0].msg);
	cr_expect_eq(count_segments(keep, 2), 0,
		     "segments of the killed job remain");

	/* A segment of a process that is gone (a rank killed inside init). */
	dead = fork();
	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	snprintf(stale, sizeof stale,
		 "/dev/shm/dpl-shm-0123456789abcdef-r1-p%d", (int)dead);
	f = fopen(stale, "w");
	cr_assert_not_null(f);
	fclose(f);
	J = job_new();
	run(2, solo_rank, 20000);
	cr_expect_eq(count_segments(&dead, 1), 0,
		     "the next job did not remove the stale segment");
	unlink(stale);
}

/* ---- options, arguments, small worlds ---------------------------------- */

Test(shm, world_of_one_and_argument_errors, .timeout = 10)
{
	struct dpl_transport_params p = {0, 1, NULL, NULL, 1000, 0};
	void *ctx = calloc(1, O->ctx_size);
	void *r = reqs_new(1);
	char b[8];

	J = job_new();
	cr_assert_eq(O->init(ctx, &p), 0, "%s", dpl_last_error());
	cr_expect_eq(O->isend(ctx, r, 0, 1, b, 8, DPL_MEM_HOST), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "peer 0") != NULL, "%s",
		  dpl_last_error());
	cr_expect_eq(O->irecv(ctx, r, 1, 1, b, 8, DPL_MEM_HOST), DPL_EINVAL);
	cr_expect_eq(O->progress(ctx), 0);
	cr_expect_eq(O->wait(ctx, 1000000), 0);
	O->fini(ctx);
	free(ctx);
	free(r);
}

static void argerr_rank(int rank)
{
	void *ctx = open_ctx(rank, 2, NULL);
	void *r = reqs_new(1);
	char b[8];
	int rc;

	if (ctx == NULL)
		return;
	if ((rc = O->isend(ctx, r, 1 - rank, DPL_TAG_MAX + 1, b, 8,
			   DPL_MEM_HOST)) != DPL_EINVAL ||
	    strstr(dpl_last_error(), "tag") == NULL)
		bad("tag beyond DPL_TAG_MAX: %d", rc);
	if ((rc = O->irecv(ctx, r, 1 - rank, 1, b, 8, DPL_MEM_CUDA)) !=
	    DPL_ENOTSUP)
		bad("CUDA memory: %d", rc);
	if ((rc = O->isend(ctx, r, 5, 1, b, 8, DPL_MEM_HOST)) != DPL_EINVAL ||
	    strstr(dpl_last_error(), "peer 5") == NULL)
		bad("peer out of range: %d", rc);
	if ((rc = O->isend(ctx, r, (uint32_t)rank, 1, b, 8, DPL_MEM_HOST)) !=
	    DPL_EINVAL)
		bad("send to self: %d", rc);
	if ((rc = O->isend(ctx, r, 1 - rank, 1, NULL, 8, DPL_MEM_HOST)) !=
	    DPL_EINVAL)
		bad("NULL buffer: %d", rc);
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	free(r);
	close_ctx(ctx);
}

Test(shm, bad_posts_are_named, .timeout = 30)
{
	J = job_new();
	run(2, argerr_rank, 20000);
}

Test(shm, bad_options_are_named, .timeout = 10)
{
	static const struct {
		const char *opts, *named;
	} cases[] = {
		{"ring=1000", "ring=1000"},
		{"ring=32k", "ring=32768"},
		{"ring=64k,eager=32k", "eager=32768"},
		{"colour=blue", "colour=blue"},
		{"ring", "'ring'"},
		{"cma=2", "cma=2"},
		{"spin_us=x", "spin_us=x"},
		{"spin_us=2000000", "spin_us=2000000"},
	};
	size_t i;

	J = job_new();
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct dpl_transport_params p = {0, 2, "127.0.0.1:1",
						 cases[i].opts, 200, 0};
		void *ctx = calloc(1, O->ctx_size);

		cr_expect_eq(O->init(ctx, &p), DPL_EINVAL, "%s",
			     cases[i].opts);
		cr_expect(strstr(dpl_last_error(), cases[i].named) != NULL,
			  "'%s' does not name %s", dpl_last_error(),
			  cases[i].named);
		free(ctx);
	}
}

static void mismatch_rank(int rank)
{
	void *ctx = open_ctx(rank, 2, rank == 0 ? "ring=64k" : "ring=128k");

	if (ctx != NULL) {
		bad("init with different rings succeeded");
		close_ctx(ctx);
		return;
	}
	if (J->out[rank].rc == DPL_EINVAL &&
	    strstr(J->out[rank].msg, "ring=") != NULL)
		J->out[rank].rc = 0; /* the expected failure */
}

Test(shm, ranks_must_agree_on_options, .timeout = 30)
{
	J = job_new();
	run(2, mismatch_rank, 20000);
}

static void lonely_rank(int rank)
{
	struct dpl_transport_params p;
	char root[64];
	void *ctx = calloc(1, O->ctx_size);

	snprintf(root, sizeof root, "127.0.0.1:%u", J->port);
	memset(&p, 0, sizeof p);
	p.rank = 0;
	p.world_size = 2;
	p.bootstrap = root;
	p.timeout_ms = 300;
	J->out[0].st[0] = O->init(ctx, &p);
	snprintf(J->out[0].msg, sizeof J->out[0].msg, "%s", dpl_last_error());
	free(ctx);
}

Test(shm, init_times_out_naming_the_missing_rank, .timeout = 20)
{
	pid_t pid[1], keep;

	J = job_new();
	spawn(pid, 1, lonely_rank);
	keep = pid[0];
	cr_assert_eq(fr_reap(pid, 1, 10000), 1);
	cr_expect_eq(J->out[0].st[0], DPL_ETIMEDOUT, "%s", J->out[0].msg);
	cr_expect(strstr(J->out[0].msg, "rank 1 never arrived") != NULL, "%s",
		  J->out[0].msg);
	cr_expect_eq(count_segments(&keep, 1), 0);
}

/* A NULL bootstrap string reads DPL_ROOT (as under `dpl train`). */
static void env_rank(int rank)
{
	const struct dpl_transport_ops *o = O;
	struct dpl_transport_params p = {(uint32_t)rank, 2, NULL, NULL,
					 10000, 0};
	void *ctx = calloc(1, o->ctx_size), *r = reqs_new(2);
	char root[64];
	uint32_t out = (uint32_t)rank + 5, in = 0;
	int st[2];

	unsetenv("DPL_ROOT");
	unsetenv("MASTER_ADDR");
	unsetenv("MASTER_PORT");
	if (o->init(ctx, &p) != DPL_EINVAL ||
	    strstr(dpl_last_error(), "DPL_ROOT") == NULL)
		bad("init without any root: '%s'", dpl_last_error());
	snprintf(root, sizeof root, "127.0.0.1:%u", J->port);
	setenv("DPL_ROOT", root, 1);
	J->out[rank].rc = o->init(ctx, &p);
	if (J->out[rank].rc != 0) {
		snprintf(J->out[rank].msg, sizeof J->out[rank].msg, "%s",
			 dpl_last_error());
		return;
	}
	o->irecv(ctx, REQ(r, 0), (uint32_t)(1 - rank), 1, &in, 4,
		 DPL_MEM_HOST);
	o->isend(ctx, REQ(r, 1), (uint32_t)(1 - rank), 1, &out, 4,
		 DPL_MEM_HOST);
	if (wait_all(ctx, r, 2, st, 5000) != 0 || st[0] != 0 || st[1] != 0 ||
	    in != (uint32_t)(1 - rank) + 5)
		bad("exchange: %d %d %u", st[0], st[1], in);
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	o->fini(ctx);
	free(ctx);
	free(r);
}

Test(shm, null_bootstrap_reads_the_environment, .timeout = 30)
{
	J = job_new();
	run(2, env_rank, 20000);
}

/* ---- wait ------------------------------------------------------------ */

/* Rank 0 waits for a message rank 1 sends 200 ms later: wait sleeps
 * (a few calls, not a busy loop) and wakes for it. */
static void sleeper_rank(int rank)
{
	void *ctx = open_ctx(rank, 2, NULL);
	void *r = reqs_new(1);
	uint64_t v = 0, end;
	long long waits = 0;
	int st = DPL_EAGAIN;

	if (ctx == NULL)
		return;
	if (rank == 1) {
		await_flag(0, 1, 5000);
		fr_sleep_ms(200);
		v = 42;
		O->isend(ctx, r, 0, 8, &v, 8, DPL_MEM_HOST);
		if (wait_one(ctx, r, 5000) != 0)
			bad("send");
	} else {
		O->irecv(ctx, r, 1, 8, &v, 8, DPL_MEM_HOST);
		atomic_store(&J->flag[0], 1);
		end = now_ns() + 5000000000u;
		while (now_ns() < end) {
			O->progress(ctx);
			if ((st = O->test(ctx, r)) != DPL_EAGAIN)
				break;
			O->wait(ctx, 10000000000u);
			waits++;
		}
		J->out[0].v[0] = waits;
		if (st != 0 || v != 42)
			bad("message: %d %llu", st, (unsigned long long)v);
		if (waits > 1000)
			bad("wait returned %lld times in 200 ms: it spins",
			    waits);
	}
	atomic_fetch_add(&J->flag[2], 1);
	await_flag_progress(ctx, 2, 2, 5000);
	free(r);
	close_ctx(ctx);
}

Test(shm, wait_sleeps_until_a_message_arrives, .timeout = 30)
{
	J = job_new();
	run(2, sleeper_rank, 20000);
	cr_expect_gt(J->out[0].v[0], 0);
}

Test(shm, table_is_complete, .timeout = 5)
{
	cr_expect_eq(O->abi_version, DPL_TRANSPORT_ABI_VERSION);
	cr_expect_eq(O->size, sizeof(struct dpl_transport_ops));
	cr_expect_str_eq(O->name, "shm");
	cr_expect(O->caps & DPL_TRANSPORT_CAP_PEER_FAILURE);
	cr_expect(O->caps & DPL_TRANSPORT_CAP_WAIT);
	cr_expect(O->init && O->fini && O->isend && O->irecv && O->test &&
		  O->progress && O->cancel && O->wait);
	cr_expect_null(O->iallreduce);
	cr_expect_geq(O->req_size, 1u);
}

/* ---- ranks as threads of one process ------------------------------- */

Test(shm, ranks_as_threads_of_one_process, .timeout = 60)
{
	char msg[256];

	cr_expect_eq(dpl_test_shm_threads(msg, sizeof msg), 0, "%s", msg);
}
