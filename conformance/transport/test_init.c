/*
 * test_init.c - init and the host's out-of-band exchange: bad parameters
 * and malformed meeting points, an exchange that fails at each of init's
 * calls, no exchange at all for ranks in several processes (DPL_EINVAL),
 * and a lone rank whose peers never take part (DPL_ETIMEDOUT) (case 3 of
 * the battery and the contract's init).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/bootstrap.h>

#include "harness.h"

#define FLAG_LONE_DONE 1 /* the lone rank's init returned */

static void bad_init_rank(struct tj_rank *rk)
{
	static char longboot[4096];
	char opts[512], root[256];
	dpl_transport *t = NULL;
	const char *base = conf_options();
	bool tcp = conf_boot_kind() == CONF_BOOT_TCP;
	int fds0, fds1, rc;

	fds0 = tj_count_fds();
	snprintf(opts, sizeof opts, "%s%sdpl_conformance_no_such_option=1",
		 base ? base : "", base ? "," : "");
	tj_step(rk, "init with options '%s'", opts);
	{
		struct dpl_transport_params p;

		memset(&p, 0, sizeof p);
		p.rank = 0;
		p.world_size = 1;
		p.oob = tj_solo_oob();
		p.world = tj_meet(rk);
		p.options = opts;
		p.timeout_ms = 2000;
		rc = dpl_transport_open(rk->ops, &p, &t);
	}
	conf_check_code(rk, rc, "dpl_transport_open");
	if (rc == 0)
		dpl_transport_close(t);
	TJ_CHECK(rk, rc == DPL_EINVAL,
		 "an unknown option ('dpl_conformance_no_such_option=1'): "
		 "%s, expected DPL_EINVAL",
		 dpl_err_name(rc));
	TJ_CHECK(rk, dpl_last_error()[0] != '\0',
		 "the failed init left no message in dpl_last_error()");

	tj_step(rk, "rank 2 of a world of 2");
	rc = conf_open_with(rk, tj_solo_oob(), tj_meet(rk), 2, 2, 2000, &t);
	TJ_CHECK(rk, rc == DPL_EINVAL, "rank 2 of 2: %s, expected "
				       "DPL_EINVAL", dpl_err_name(rc));
	tj_step(rk, "a world of 0 ranks");
	rc = conf_open_with(rk, tj_solo_oob(), tj_meet(rk), 0, 0, 2000, &t);
	TJ_CHECK(rk, rc == DPL_EINVAL, "world size 0: %s, expected "
				       "DPL_EINVAL", dpl_err_name(rc));

	/* A malformed meeting point, as rank 1 of 2: a world name the
	 * in-process transport must refuse, or a root the host's
	 * rendezvous must refuse before any transport sees it. */
	tj_step(rk, "a 4095-byte %s", tcp ? "bootstrap root" : "world name");
	memset(longboot, 'x', sizeof longboot - 1);
	rc = conf_try_open(rk, longboot, 1, 2, 1000, &t);
	conf_check_code(rk, rc, "dpl_transport_open");
	if (rc == 0)
		dpl_transport_close(t);
	TJ_CHECK(rk, rc < 0, "a 4095-byte %s was accepted",
		 tcp ? "bootstrap root" : "world name");
	if (tcp) {
		static const char *const bad[] = {
			"127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:12ab",
			"127.0.0.1", ":4000", "256.1.1.1:4000"};
		size_t i;

		for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			tj_step(rk, "bootstrap '%s'", bad[i]);
			rc = conf_try_open(rk, bad[i], 1, 2, 1000, &t);
			conf_check_code(rk, rc, "dpl_bootstrap_open");
			if (rc == 0)
				dpl_transport_close(t);
			TJ_CHECK(rk, rc < 0,
				 "malformed bootstrap '%s' was accepted",
				 bad[i]);
		}
	}
	/* After the failures, a good init works and nothing leaked. */
	tj_step(rk, "a good init after the failures");
	snprintf(root, sizeof root, "%s", tj_meet(rk));
	rc = conf_try_open(rk, root, 0, 1, 5000, &t);
	TJ_CHECK(rk, rc == 0, "world of 1 at '%s': %s (%s)", root,
		 dpl_err_name(rc), dpl_last_error());
	dpl_transport_close(t);
	fds1 = tj_count_fds();
	tj_note(rk, "descriptors %d before, %d after the failed inits",
		fds0, fds1);
	TJ_CHECK(rk, fds1 <= fds0 + 1,
		 "failed inits leaked descriptors: %d before, %d after",
		 fds0, fds1);
}

Test(init, rejects_bad_parameters, .timeout = 80)
{
	struct conf_job job = {.size = 1, .fn = bad_init_rank,
			       .no_open = true, .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

/* dpl's bootstrap as init's exchange, failing its call number `fail_at`
 * (0: the first) with `code` on every rank, as a host whose rendezvous
 * broke would; the other calls go through. */
struct failing_oob {
	struct dpl_oob oob;
	const struct dpl_oob *inner;
	unsigned calls, fail_at;
	int code;
};

static int failing_turn(struct failing_oob *f, const char *what)
{
	if (f->calls++ != f->fail_at)
		return 0;
	return dpl_set_error(f->code, "conformance: the host's exchange "
				      "failed its %s (call %u) on purpose",
			     what, f->fail_at);
}

static int failing_allgather(void *user, const void *mine, size_t len,
			     void *all)
{
	struct failing_oob *f = user;
	int rc = failing_turn(f, "allgather");

	return rc ? rc : f->inner->allgather(f->inner->user, mine, len, all);
}

static int failing_barrier(void *user)
{
	struct failing_oob *f = user;
	int rc = failing_turn(f, "barrier");

	return rc ? rc : f->inner->barrier(f->inner->user);
}

/* One init of the job's 2 ranks whose exchange fails its call `k`;
 * returns how many calls init made. */
static unsigned failing_init(struct tj_rank *rk, unsigned k, int code,
			     int *rc_out, dpl_transport **t)
{
	struct dpl_bootstrap_params bp;
	struct failing_oob f;
	struct dpl_oob real;
	dpl_bootstrap *b = NULL;
	int rc;

	tj_meet_renew(rk);
	memset(&bp, 0, sizeof bp);
	bp.rank = rk->rank;
	bp.world_size = rk->size;
	bp.root = tj_meet(rk);
	bp.timeout_ms = conf_timeout_ms();
	rc = dpl_bootstrap_open(&bp, &b);
	TJ_CHECK(rk, rc == 0, "the host's bootstrap at '%s': %s (%s)",
		 bp.root, dpl_err_name(rc), dpl_last_error());
	dpl_bootstrap_oob(b, &real);
	memset(&f, 0, sizeof f);
	f.oob.allgather = failing_allgather;
	f.oob.barrier = failing_barrier;
	f.oob.user = &f;
	f.inner = &real;
	f.fail_at = k;
	f.code = code;
	tj_step(rk, "init whose exchange fails its call %u with %s", k,
		dpl_err_name(code));
	*rc_out = conf_open_with(rk, &f.oob, NULL, rk->rank, rk->size,
				 conf_timeout_ms(), t);
	dpl_bootstrap_close(b);
	conf_check_code(rk, *rc_out, "dpl_transport_open");
	return f.calls;
}

static void failing_exchange_rank(struct tj_rank *rk)
{
	static const int codes[2] = {DPL_EPEER, DPL_EIO};
	char *shm_before, *shm_after, names[256];
	int fds0, fds1, shm0, shm1, rc, tries;
	dpl_transport *t = NULL;
	unsigned k, calls;

	tj_barrier(rk);
	fds0 = tj_count_fds();
	shm0 = tj_count_shm(conf_shm_glob());
	shm_before = tj_shm_snapshot(conf_shm_glob());
	tj_barrier(rk);
	for (k = 0;; k++) {
		TJ_CHECK(rk, k < 32, "init made more than 32 calls of the "
				     "host's exchange");
		calls = failing_init(rk, k, codes[k % 2], &rc, &t);
		if (calls > k) {
			if (rc == 0)
				dpl_transport_close(t);
			TJ_CHECK(rk, rc < 0,
				 "init went on after the host's exchange "
				 "failed its call %u with %s",
				 k, dpl_err_name(codes[k % 2]));
			continue;
		}
		/* init made k calls: each has failed once; this one ran */
		TJ_CHECK(rk, rc == 0,
			 "init with a working exchange of %u calls: %s (%s)",
			 calls, dpl_err_name(rc), dpl_last_error());
		rk->t = t;
		conf_exchange(rk, 1 - rk->rank, 6, 4096, k);
		tj_barrier(rk);
		conf_close(rk);
		break;
	}
	tj_barrier(rk);
	for (tries = 0; tries <= 20; tries++) {
		fds1 = tj_count_fds();
		shm1 = tj_count_shm(conf_shm_glob());
		if (fds1 <= fds0 && shm1 <= shm0)
			break;
		tj_sleep_ms(100);
	}
	shm_after = tj_shm_snapshot(conf_shm_glob());
	tj_shm_new(shm_before, shm_after, names, sizeof names);
	free(shm_before);
	free(shm_after);
	tj_note(rk, "init makes %u calls of the host's exchange, each "
		    "failed once: descriptors %d -> %d, /dev/shm %d -> %d",
		calls, fds0, fds1, shm0, shm1);
	TJ_CHECK(rk, fds1 <= fds0,
		 "inits whose exchange failed leaked descriptors: %d "
		 "before, %d after",
		 fds0, fds1);
	TJ_CHECK(rk, shm1 <= shm0,
		 "inits whose exchange failed left /dev/shm entries: %d "
		 "before, %d after (new: %s)",
		 shm0, shm1, names);
}

Test(init, fails_cleanly_when_the_exchange_fails, .timeout = 140)
{
	struct conf_job job = {.size = 2, .fn = failing_exchange_rank,
			       .no_open = true, .deadline_s = 120};

	if (conf_boot_kind() != CONF_BOOT_TCP)
		cr_skip_test("%s meets through params.world "
			     "(DPL_CONF_BOOTSTRAP=name): init gets no "
			     "exchange to fail",
			     conf_ops()->name);
	conf_run(&job);
}

/* ---------------------------------------------------------------- */

static void no_oob_rank(struct tj_rank *rk)
{
	uint32_t who;
	dpl_transport *t = NULL;
	char msg[512];
	uint64_t t0, ms;
	int rc;

	for (who = 0; who < 2; who++) {
		tj_step(rk, "init of rank %u of 2 with params.oob NULL", who);
		t0 = dpl_clock_ns();
		rc = conf_open_with(rk, NULL, NULL, who, 2, 2000, &t);
		ms = (dpl_clock_ns() - t0) / 1000000u;
		snprintf(msg, sizeof msg, "%s", dpl_last_error());
		conf_check_code(rk, rc, "dpl_transport_open");
		if (rc == 0)
			dpl_transport_close(t);
		TJ_CHECK(rk, rc == DPL_EINVAL,
			 "init of rank %u of 2 without the host's "
			 "out-of-band exchange (params.oob NULL): %s (%s), "
			 "expected DPL_EINVAL",
			 who, dpl_err_name(rc), msg);
		TJ_CHECK(rk, strstr(msg, rk->ops->name) != NULL,
			 "params.oob NULL: the message '%s' does not name "
			 "the transport '%s'",
			 msg, rk->ops->name);
		TJ_CHECK(rk, ms < 2000,
			 "params.oob NULL: DPL_EINVAL came after %llu ms; "
			 "init must not wait for peers it cannot reach",
			 (unsigned long long)ms);
	}
	tj_note(rk, "params.oob NULL: %s", msg);
}

Test(init, needs_the_hosts_oob, .timeout = 30)
{
	struct conf_job job = {.size = 1, .fn = no_oob_rank, .no_open = true,
			       .deadline_s = 20};

	if (conf_threads())
		cr_skip_test("ranks of %s are threads of one process "
			     "(DPL_CONF_RANKS=threads): an in-process "
			     "transport meets through params.world, not "
			     "params.oob",
			     conf_ops()->name);
	conf_run(&job);
}

/* ---------------------------------------------------------------- */

/* The lone rank's init and what it must say. */
static void lone_check(struct tj_rank *rk, uint32_t who, int rc,
		       uint64_t t0, dpl_transport *t)
{
	rk->val[0] = (double)(dpl_clock_ns() - t0) / 1e6;
	conf_check_code(rk, rc, "dpl_transport_open");
	tj_note(rk, "rank %u of 2 alone: %s after %.0f ms%s%s", who,
		dpl_err_name(rc), rk->val[0],
		rc ? ": " : "", rc ? dpl_last_error() : "");
	if (rc == 0) {
		dpl_transport_close(t);
		return;
	}
	TJ_CHECK(rk, rc == DPL_ETIMEDOUT,
		 "rank %u of 2 alone: %s (%s), expected DPL_ETIMEDOUT or "
		 "a lazy 0",
		 who, dpl_err_name(rc), dpl_last_error());
	TJ_CHECK(rk, dpl_last_error()[0] != '\0',
		 "DPL_ETIMEDOUT without a message naming the missing "
		 "rank");
}

/*
 * With a world name, rank `who` is alone in its world. With dpl's
 * bootstrap, both ranks meet there (opening it waits for every rank) but
 * the other one never calls init, so the lone rank's init waits in the
 * host's exchange until the bootstrap's timeout.
 */
static void lone_rank(struct tj_rank *rk)
{
	uint32_t who = *(uint32_t *)rk->arg;
	struct dpl_bootstrap_params bp;
	dpl_bootstrap *b = NULL;
	dpl_transport *t = NULL;
	struct dpl_oob oob;
	uint64_t t0 = dpl_clock_ns();
	int rc;

	if (conf_boot_kind() == CONF_BOOT_NAME) {
		tj_step(rk, "rank %u of 2 alone, timeout 1000 ms", who);
		rc = conf_try_open(rk, tj_meet(rk), who, 2, 1000, &t);
		lone_check(rk, who, rc, t0, t);
		return;
	}
	memset(&bp, 0, sizeof bp);
	bp.rank = rk->rank;
	bp.world_size = 2;
	bp.root = tj_meet(rk);
	bp.timeout_ms = 2000;
	tj_step(rk, "the host's bootstrap of 2 ranks at '%s'", bp.root);
	rc = dpl_bootstrap_open(&bp, &b);
	conf_check_code(rk, rc, "dpl_bootstrap_open");
	TJ_CHECK(rk, rc == 0, "the host's bootstrap at '%s': %s (%s)",
		 bp.root, dpl_err_name(rc), dpl_last_error());
	if (rk->rank != who) {
		tj_step(rk, "in the bootstrap, never calling init");
		tj_flag_wait(rk, FLAG_LONE_DONE, 1, 0);
		dpl_bootstrap_close(b);
		return;
	}
	dpl_bootstrap_oob(b, &oob);
	tj_step(rk, "rank %u of 2 alone in init, timeout 1000 ms", who);
	t0 = dpl_clock_ns();
	rc = conf_open_with(rk, &oob, NULL, who, 2, 1000, &t);
	tj_flag_set(rk, FLAG_LONE_DONE, 1);
	lone_check(rk, who, rc, t0, t);
	dpl_bootstrap_close(b);
}

Test(init, lone_rank_times_out, .timeout = 80)
{
	uint32_t n = conf_boot_kind() == CONF_BOOT_TCP ? 2 : 1;
	uint32_t who[2] = {0, 1};
	struct conf_job a = {.size = n, .fn = lone_rank, .arg = &who[0],
			     .no_open = true, .deadline_s = 30};
	struct conf_job b = {.size = n, .fn = lone_rank, .arg = &who[1],
			     .no_open = true, .deadline_s = 30};

	conf_run(&a);
	conf_run(&b);
}
