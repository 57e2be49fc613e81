/*
 * test_hook.c - the hook shim's own contract: its options and their
 * errors, the tables it refuses to wrap, the trace, an injected failure
 * of a post and of a completion, and a dropped peer, over inproc with one
 * thread driving both ranks. (The conformance battery checks it is
 * transparent; the runner's tests use its faults.)
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <dpl/transport_hook.h>
#include <dpl/transport_inproc.h>

static void setup(void)
{
	cr_assert_eq(dpl_transport_hook_register(&dpl_transport_inproc), 0);
}

TestSuite(hook, .init = setup);

static int open_rank(const struct dpl_transport_ops *o, const char *world,
		     uint32_t rank, const char *opts, dpl_transport **t)
{
	struct dpl_transport_params p = {0};

	p.rank = rank;
	p.world_size = 2;
	p.world = world;
	p.options = opts;
	return dpl_transport_open(o, &p, t);
}

Test(hook, bad_options_are_refused_naming_them)
{
	static const struct {
		const struct dpl_transport_ops *table;
		const char *opts, *want;
	} cases[] = {
	    {&dpl_transport_hook_threads, NULL, "hook.inner=NAME"},
	    {&dpl_transport_hook_threads, "hook.inner=nosuch",
	     "'nosuch' is neither registered nor loadable"},
	    {&dpl_transport_hook_threads, "hook.inner=inproc,hook.colour=1",
	     "colour"},
	    {&dpl_transport_hook_threads,
	     "hook.inner=inproc,hook.fail_code=eagain", "eagain"},
	    {&dpl_transport_hook_threads, "hook.inner=inproc,hook.fail_op=x",
	     "fail_op"},
	    {&dpl_transport_hook, "hook.inner=inproc",
	     "its ranks are threads (use dpl_transport_hook_threads)"},
	    {&dpl_transport_hook_threads, "hook.inner=inproc,eager=x",
	     "hook over inproc: "},
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		dpl_transport *t = NULL;
		int rc = open_rank(cases[i].table, "hook-bad", 0,
				   cases[i].opts, &t);

		cr_assert_eq(rc, DPL_EINVAL, "case %zu: %d", i, rc);
		cr_assert_null(t);
		cr_assert(strstr(dpl_last_error(), cases[i].want) != NULL,
			  "case %zu: '%s' lacks '%s'", i, dpl_last_error(),
			  cases[i].want);
	}
}

/* Two ranks of one world, driven by this thread. */
struct pair {
	dpl_transport *t[2];
	unsigned char *rq[2];
};

static void open_pair(struct pair *p, const char *world, const char *opts)
{
	for (uint32_t r = 0; r < 2; r++) {
		cr_assert_eq(open_rank(&dpl_transport_hook_threads, world, r,
				       opts, &p->t[r]),
			     0, "rank %u: %s", r, dpl_last_error());
		p->rq[r] = aligned_alloc(64, 4 * 4096);
		cr_assert_not_null(p->rq[r]);
	}
	cr_assert_geq(dpl_transport_req_size(p->t[0]), 1);
	cr_assert_leq(dpl_transport_req_size(p->t[0]), 4096);
}

static void close_pair(struct pair *p)
{
	for (uint32_t r = 0; r < 2; r++) {
		dpl_transport_close(p->t[r]);
		free(p->rq[r]);
	}
}

/* Until `req` of rank r completes (bounded). */
static int finish(struct pair *p, uint32_t r, void *req)
{
	for (int i = 0; i < 100000; i++) {
		int rc = dpl_transport_test(p->t[r], req);

		if (rc != DPL_EAGAIN)
			return rc;
		dpl_transport_progress(p->t[0]);
		dpl_transport_progress(p->t[1]);
	}
	cr_assert_fail("a request never completed");
	return DPL_ETIMEDOUT;
}

/* One message 0 -> 1; the send's and the receive's results. */
static void exchange(struct pair *p, int *rs, int *rr)
{
	char out[16] = "hook", in[16] = "";
	void *sq = p->rq[0], *rq = p->rq[1];

	*rr = dpl_transport_irecv(p->t[1], rq, 0, 5, in, sizeof in,
				  DPL_MEM_HOST);
	*rs = dpl_transport_isend(p->t[0], sq, 1, 5, out, sizeof out,
				  DPL_MEM_HOST);
	if (*rs == 0)
		*rs = finish(p, 0, sq);
	if (*rr == 0) {
		if (*rs != 0) /* nothing comes: end the receive */
			dpl_transport_cancel(p->t[1], rq);
		*rr = finish(p, 1, rq);
	}
	if (*rr == 0)
		cr_assert_str_eq(in, "hook");
}

Test(hook, passes_messages_and_fails_the_nth_post)
{
	struct pair p;
	int rs, rr;

	/* Rank 0's second post fails; everything else goes through. */
	open_pair(&p, "hook-fail", "hook.inner=inproc,eager=0,hook.rank=0,"
				   "hook.fail_after=2,hook.fail_code=enomem");
	exchange(&p, &rs, &rr);
	cr_assert_eq(rs, 0);
	cr_assert_eq(rr, 0);
	exchange(&p, &rs, &rr);
	cr_assert_eq(rs, DPL_ENOMEM);
	cr_assert(strstr(dpl_last_error(), "failed as asked") != NULL, "%s",
		  dpl_last_error());
	cr_assert_eq(rr, DPL_ECANCELED);
	exchange(&p, &rs, &rr);
	cr_assert_eq(rs, 0);
	cr_assert_eq(rr, 0);
	close_pair(&p);
}

Test(hook, fails_the_nth_completion)
{
	struct pair p;
	int rs, rr;

	open_pair(&p, "hook-test", "hook.inner=inproc,hook.rank=1,"
				   "hook.fail_op=test,hook.fail_after=1");
	exchange(&p, &rs, &rr);
	cr_assert_eq(rs, 0);
	cr_assert_eq(rr, DPL_EIO, "%d", rr);
	exchange(&p, &rs, &rr);
	cr_assert_eq(rr, 0);
	close_pair(&p);
}

Test(hook, a_dropped_peer_fails_posts_and_pending_requests)
{
	struct pair p;
	char in[16];

	/* Rank 1 takes rank 0 for dead once it has posted once: the
	 * receive it posted then ends with DPL_EPEER (the shim cancels it
	 * in inproc), and later posts to rank 0 fail at once. */
	open_pair(&p, "hook-drop", "hook.inner=inproc,hook.rank=1,"
				   "hook.drop_peer=0,hook.drop_after=1");
	cr_assert_eq(dpl_transport_irecv(p.t[1], p.rq[1], 0, 6, in, sizeof in,
					 DPL_MEM_HOST),
		     0);
	cr_assert_eq(finish(&p, 1, p.rq[1]), DPL_EPEER);
	cr_assert_eq(dpl_transport_irecv(p.t[1], p.rq[1], 0, 6, in, sizeof in,
					 DPL_MEM_HOST),
		     DPL_EPEER);
	cr_assert(strstr(dpl_last_error(), "rank 0 is dropped") != NULL, "%s",
		  dpl_last_error());
	close_pair(&p);
}

Test(hook, traces_every_operation)
{
	char path[] = "/tmp/dpl-hook-trace-XXXXXX", line[256];
	int fd = mkstemp(path), saved = dup(2), rs, rr, n = 0;
	struct pair p;
	FILE *f;

	cr_assert_geq(fd, 0);
	fflush(stderr);
	dup2(fd, 2);
	open_pair(&p, "hook-trace", "hook.inner=inproc,hook.trace=1");
	exchange(&p, &rs, &rr);
	close_pair(&p);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	f = fdopen(fd, "r");
	rewind(f);
	while (fgets(line, sizeof line, f))
		n += strstr(line, "hook rank 0: isend peer 1 tag 0x5 16 B: 0") !=
			     NULL ||
		     strstr(line, "hook rank 1: irecv peer 0 tag 0x5 16 B: 0") !=
			     NULL;
	fclose(f);
	unlink(path);
	cr_assert_eq(rs, 0);
	cr_assert_eq(n, 2, "trace lines of the two posts: %d", n);
}
