/*
 * test_shm_setup.c - how the shared-memory transport joins and leaves a
 * job: init needs the host's out-of-band exchange (params.oob) and fails
 * without it; a failure of that exchange, or of any rank, at any step of
 * init fails init and leaves no segment and no descriptor; options are
 * checked and named, and every rank must pass the same; a world of one
 * needs no exchange; bad posts are refused by the checked layer, named;
 * every segment is unlinked once init returns, a SIGKILL leaves no
 * /dev/shm entry and init removes those of dead processes; the table
 * declares what the module does; two ranks may be threads of one
 * process.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "shm_test.h"
#include "shm_threads.h"

/* ---- the out-of-band exchange ------------------------------------------- */

/*
 * A fake exchange for rank 0 of two, in this process: rank 1 "says" what
 * rank 0 says (its hello; in an agreement, peer_code). Call number
 * fail_at fails as a host's exchange does when a rank never arrives.
 */
struct fake_oob {
	int calls;
	int fail_at;
	int32_t peer_code;
};

static int fake_allgather(void *user, const void *mine, size_t len,
			  void *all)
{
	struct fake_oob *f = user;

	if (++f->calls == f->fail_at)
		return dpl_set_error(DPL_ETIMEDOUT, "oob: rank 1 never "
				     "arrived");
	memcpy(all, mine, len);
	if (len == sizeof f->peer_code)
		memcpy((char *)all + len, &f->peer_code, len);
	else
		memcpy((char *)all + len, mine, len);
	return 0;
}

static int fake_barrier(void *user)
{
	(void)user;
	return 0;
}

static int open_fake(struct fake_oob *f, const char *opts, dpl_transport **t)
{
	struct dpl_oob oob = {fake_allgather, fake_barrier, f};
	struct dpl_transport_params p;

	memset(&p, 0, sizeof p);
	p.rank = 0;
	p.world_size = 2;
	p.oob = &oob;
	p.options = opts;
	p.timeout_ms = 1000;
	return dpl_transport_open(O, &p, t);
}

Test(shm_setup, init_without_oob_is_einval, .timeout = 10)
{
	struct dpl_oob no_allgather = {NULL, fake_barrier, NULL};
	struct dpl_transport_params p;
	pid_t me = getpid();
	dpl_transport *t = NULL;

	memset(&p, 0, sizeof p);
	p.rank = 1;
	p.world_size = 2;
	p.timeout_ms = 1000;
	cr_expect_eq(dpl_transport_open(O, &p, &t), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "shm:") != NULL &&
		  strstr(dpl_last_error(), "params.oob") != NULL,
		  "'%s' does not name shm and params.oob", dpl_last_error());
	cr_expect_null(t);
	p.oob = &no_allgather;
	cr_expect_eq(dpl_transport_open(O, &p, &t), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "params.oob") != NULL, "%s",
		  dpl_last_error());
	cr_expect_eq(shm_segments(me), 0);
}

/*
 * Rank 0 of two over the fake exchange: it fails in the allgather of
 * hellos, in the agreement after the segments were created, rank 1
 * reports a failure to create its segment, and rank 1's segment is not
 * there to map. Each fails init with the reason, and leaves no segment
 * and no descriptor behind.
 */
Test(shm_setup, failure_at_any_step_of_init_leaves_nothing, .timeout = 20)
{
	static const struct {
		int fail_at;
		int32_t peer_code;
		int want;
		const char *named;
	} cases[] = {
		{1, 0, DPL_ETIMEDOUT, "rank 1 never arrived"},
		{2, 0, DPL_ETIMEDOUT, "rank 1 never arrived"},
		{0, DPL_EIO, DPL_EIO, "rank 1 failed to create its segment"},
		{0, 0, DPL_ENOENT, "-r1-p"},
	};
	pid_t me = getpid();
	int fds = tj_count_fds();
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct fake_oob f = {0, cases[i].fail_at, cases[i].peer_code};
		dpl_transport *t = NULL;
		int rc = open_fake(&f, NULL, &t);

		cr_expect_eq(rc, cases[i].want, "case %zu: %s (%s)", i,
			     dpl_err_name(rc), dpl_last_error());
		cr_expect(strstr(dpl_last_error(), cases[i].named) != NULL,
			  "case %zu: '%s' does not name '%s'", i,
			  dpl_last_error(), cases[i].named);
		cr_expect_eq(shm_segments(me), 0,
			     "case %zu: a segment is left", i);
		if (rc == 0)
			dpl_transport_close(t);
	}
	cr_expect_eq(tj_count_fds(), fds, "failed inits leaked descriptors");
}

/* ---- options ---------------------------------------------------------- */

Test(shm_setup, bad_options_are_named, .timeout = 10)
{
	static const struct {
		const char *opts, *named;
	} cases[] = {
		{"ring=1000", "ring=1000"},
		{"ring=32k", "ring=32k"},
		{"ring=100000", "ring=100000"},
		{"ring=64k,eager=32k", "eager=32768"},
		{"colour=blue", "colour"},
		{"ring", "'ring'"},
		{"cma=2", "cma='2'"},
		{"spin_us=x", "spin_us='x'"},
		{"spin_us=2000000", "spin_us=2000000"},
	};
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		/* Options are checked before the exchange is used. */
		struct fake_oob f = {0, 1, 0};
		dpl_transport *t = NULL;

		cr_expect_eq(open_fake(&f, cases[i].opts, &t), DPL_EINVAL,
			     "%s", cases[i].opts);
		cr_expect(strstr(dpl_last_error(), "shm:") != NULL &&
			  strstr(dpl_last_error(), cases[i].named) != NULL,
			  "'%s' does not name %s", dpl_last_error(),
			  cases[i].named);
		cr_expect_eq(f.calls, 0, "%s: the exchange was used",
			     cases[i].opts);
	}
}

/* Good options in every form the parser takes. */
Test(shm_setup, good_options_are_taken, .timeout = 10)
{
	static const char *const good[] = {
		"ring=64k,eager=16k,spin_us=0,cma=0",
		"ring=1m,eager=0",
		"ring=1g,eager=256m,cma=1",
		"ring=131072,spin_us=1000000",
	};
	size_t i;

	for (i = 0; i < sizeof good / sizeof good[0]; i++) {
		/* Past the options, init reaches the exchange, which fails. */
		struct fake_oob f = {0, 1, 0};
		dpl_transport *t = NULL;

		cr_expect_eq(open_fake(&f, good[i], &t), DPL_ETIMEDOUT,
			     "%s: %s", good[i], dpl_last_error());
		cr_expect_eq(f.calls, 1, "%s", good[i]);
	}
}

/* The ranks open shm themselves: init is expected to fail. */
static void mismatch_rank(struct tj_rank *rk)
{
	int rc = tj_open(rk, O, rk->rank == 0 ? "ring=64k" : "ring=128k", 0);

	TJ_CHECK(rk, rc != 0, "init with different rings succeeded");
	TJ_CHECK(rk, rc == DPL_EINVAL &&
			     strstr(dpl_last_error(), "ring=") != NULL,
		 "init: %s (%s)", dpl_err_name(rc), dpl_last_error());
}

Test(shm_setup, ranks_must_agree_on_options, .timeout = 30)
{
	struct tj_job job = shm_job(2, mismatch_rank, 20000, NULL);

	job.ops = NULL;
	shm_run(&job);
	tj_job_free(&job);
}

/* ---- small worlds and bad posts -------------------------------------- */

/* A world of one needs no exchange; posts to itself or beyond it are
 * refused by the layer, naming the peer; progress and wait work. */
Test(shm_setup, world_of_one_and_argument_errors, .timeout = 10)
{
	struct dpl_transport_params p = {0, 1, NULL, NULL, NULL, 1000, 0};
	dpl_transport *t = NULL;
	void *r;
	char b[8];

	cr_assert_eq(dpl_transport_open(O, &p, &t), 0, "%s",
		     dpl_last_error());
	r = calloc(1, dpl_transport_req_size(t));
	cr_assert_not_null(r);
	cr_expect_eq(dpl_transport_isend(t, r, 0, 1, b, 8, DPL_MEM_HOST),
		     DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "peer 0") != NULL, "%s",
		  dpl_last_error());
	cr_expect_eq(dpl_transport_irecv(t, r, 1, 1, b, 8, DPL_MEM_HOST),
		     DPL_EINVAL);
	cr_expect_eq(dpl_transport_progress(t), 0);
	cr_expect_eq(dpl_transport_wait(t, 1000000), 0);
	dpl_transport_close(t);
	free(r);
}

static void argerr_rank(struct tj_rank *rk)
{
	dpl_transport *t = rk->t;
	uint32_t peer = 1 - rk->rank;
	void *r = tj_reqs(rk, 1);
	char b[8];
	int rc;

	rc = dpl_transport_isend(t, r, peer, DPL_TAG_MAX + 1, b, 8,
				 DPL_MEM_HOST);
	TJ_CHECK(rk,
		 rc == DPL_EINVAL && strstr(dpl_last_error(), "tag") != NULL,
		 "tag beyond DPL_TAG_MAX: %d", rc);
	rc = dpl_transport_irecv(t, r, peer, 1, b, 8, DPL_MEM_CUDA);
	TJ_CHECK(rk, rc == DPL_ENOTSUP, "CUDA memory: %d", rc);
	rc = dpl_transport_isend(t, r, 5, 1, b, 8, DPL_MEM_HOST);
	TJ_CHECK(rk,
		 rc == DPL_EINVAL &&
			 strstr(dpl_last_error(), "peer 5") != NULL,
		 "peer out of range: %d", rc);
	rc = dpl_transport_isend(t, r, rk->rank, 1, b, 8, DPL_MEM_HOST);
	TJ_CHECK(rk, rc == DPL_EINVAL, "send to self: %d", rc);
	rc = dpl_transport_isend(t, r, peer, 1, NULL, 8, DPL_MEM_HOST);
	TJ_CHECK(rk, rc == DPL_EINVAL, "NULL buffer: %d", rc);
	tj_barrier(rk);
}

Test(shm_setup, bad_posts_are_named, .timeout = 30)
{
	struct tj_job job = shm_job(2, argerr_rank, 20000, NULL);

	shm_run(&job);
	tj_job_free(&job);
}

/* ---- /dev/shm hygiene ---------------------------------------------------- */

#define NUNLINK 10

/* Each round: once init returned, this rank's segment has no name any
 * more; a message goes both ways; after fini nothing is left. After the
 * rounds, no descriptor is left either. The ranks open shm themselves,
 * once a round. */
static void unlinked_rank(struct tj_rank *rk)
{
	int before = tj_count_fds(), k, rc;
	uint32_t peer = 1 - rk->rank;
	pid_t me = getpid();

	for (k = 0; k < NUNLINK; k++) {
		uint32_t out = (uint32_t)k, in = ~0u;
		int st[2];
		void *r;

		rc = tj_open(rk, O, NULL, 0);
		TJ_CHECK(rk, rc == 0, "init %d: %s", k, dpl_last_error());
		TJ_CHECK(rk, shm_segments(me) == 0,
			 "round %d: the segment still has a name after init",
			 k);
		r = tj_reqs(rk, 2);
		dpl_transport_irecv(rk->t, tj_req(rk, r, 0), peer, 1, &in, 4,
				    DPL_MEM_HOST);
		dpl_transport_isend(rk->t, tj_req(rk, r, 1), peer, 1, &out, 4,
				    DPL_MEM_HOST);
		rc = tj_wait_all(rk, r, 2, st, 5000, NULL);
		TJ_CHECK(rk, rc == 0 && in == (uint32_t)k,
			 "round %d: %d %d %u", k, st[0], st[1], in);
		/* The peer may leave once both have their message: make
		 * sure it also got ours before leaving ourselves. */
		tj_barrier(rk);
		tj_close(rk);
		tj_free(rk, r);
		TJ_CHECK(rk, shm_segments(me) == 0,
			 "round %d: a segment of this rank is left", k);
	}
	rc = tj_count_fds() - before;
	TJ_CHECK(rk, rc == 0, "%d descriptors more after %d rounds", rc,
		 NUNLINK);
}

Test(shm_setup, segments_are_unlinked_once_init_returns, .timeout = 60)
{
	struct tj_job job = shm_job(2, unlinked_rank, 50000, NULL);

	job.ops = NULL;
	shm_run(&job);
	tj_job_free(&job);
}

/* Rank 1 is killed after init; rank 0 sees it and leaves. Afterwards no
 * segment of either remains, and a segment left by a dead process is
 * removed by the next job's init. */
static void litter_rank(struct tj_rank *rk)
{
	dpl_transport *t = rk->t;
	void *r = tj_reqs(rk, 1);
	char b[4];

	if (rk->rank == 1) {
		dpl_transport_isend(t, r, 0, 1, "abc", 4, DPL_MEM_HOST);
		tj_wait(rk, r, 5000, NULL);
		raise(SIGKILL);
	}
	dpl_transport_irecv(t, r, 1, 1, b, 4, DPL_MEM_HOST);
	TJ_CHECK(rk, tj_wait(rk, r, 5000, NULL) == 0, "first message");
	dpl_transport_irecv(t, r, 1, 2, b, 4, DPL_MEM_HOST);
	TJ_CHECK(rk, tj_wait(rk, r, 5000, NULL) == DPL_EPEER,
		 "killed rank not seen");
}

Test(shm_setup, sigkill_leaves_no_dev_shm_litter, .timeout = 60)
{
	struct tj_job job = shm_job(2, litter_rank, 20000, NULL);
	pid_t dead;
	char stale[128];
	FILE *f;

	job.may_die = 1u << 1;
	shm_run(&job);
	cr_expect_eq(tj_job_exit(&job, 1), -SIGKILL);
	cr_expect_eq(shm_segments(tj_job_slot(&job, 0)->pid) +
			     shm_segments(tj_job_slot(&job, 1)->pid),
		     0, "segments of the killed job remain");
	tj_job_free(&job);

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
	/* Ranks that only open and close. */
	job = shm_job(2, tj_barrier, 20000, NULL);
	shm_run(&job);
	tj_job_free(&job);
	cr_expect_eq(shm_segments(dead), 0,
		     "the next job did not remove the stale segment");
	unlink(stale);
}

/* ---- the table and threads ---------------------------------------------- */

/* What the table declares (caps/table_is_sane checks that it is sane). */
Test(shm_setup, table_declares_the_module, .timeout = 5)
{
	cr_expect_str_eq(O->name, "shm");
	cr_expect_eq(O->caps, DPL_TRANSPORT_CAP_PEER_FAILURE,
		     "caps %#llx: peer failure, host memory only",
		     (unsigned long long)O->caps);
	cr_expect(DPL_HAS_OP(O, wait), "shm sleeps in wait");
	cr_expect(!DPL_HAS_OP(O, iallreduce), "shm has no allreduce");
}

Test(shm_setup, ranks_as_threads_of_one_process, .timeout = 60)
{
	char msg[4096];

	cr_expect_eq(dpl_test_shm_threads(msg, sizeof msg), 0, "%s", msg);
}
