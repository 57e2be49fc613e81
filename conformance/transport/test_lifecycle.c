/*
 * test_lifecycle.c - the table itself, init and fini: capability sanity,
 * bad parameters, lone ranks, init from the environment, init/fini
 * cycles and connect/close churn with flat descriptor, thread and
 * /dev/shm counts (cases 1, 2, 3, 4, 31 and 35 of the battery).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define KNOWN_CAPS                                                           \
	(DPL_TRANSPORT_CAP_PEER_FAILURE | DPL_TRANSPORT_CAP_MEM_CUDA |       \
	 DPL_TRANSPORT_CAP_ALLREDUCE | DPL_TRANSPORT_CAP_WAIT)

#define END_OF(m)                                                            \
	(offsetof(struct dpl_transport_ops, m) +                             \
	 sizeof(((struct dpl_transport_ops *)0)->m))

Test(caps, table_is_sane, .timeout = 10)
{
	const struct dpl_transport_ops *o = conf_ops();
	const char *c;

	cr_log_info("transport '%s': caps %#llx, ctx_size %zu, req_size %zu",
		    o->name ? o->name : "(null)",
		    (unsigned long long)o->caps, o->ctx_size, o->req_size);
	cr_assert_eq(o->abi_version, DPL_TRANSPORT_ABI_VERSION,
		     "abi_version %u, this battery checks %u", o->abi_version,
		     DPL_TRANSPORT_ABI_VERSION);
	cr_assert_geq(o->size, END_OF(cancel),
		      "size %u does not cover the mandatory members (%zu)",
		      o->size, END_OF(cancel));
	cr_assert_not_null(o->name, "the table has no name");
	cr_assert(strlen(o->name) >= 1 && strlen(o->name) <= 31,
		  "name '%s' is not 1..31 characters", o->name);
	for (c = o->name; *c != '\0'; c++)
		cr_assert((*c >= 'a' && *c <= 'z') ||
			  (*c >= '0' && *c <= '9') || *c == '_',
			  "name '%s' is not lower-case letters, digits, '_'",
			  o->name);
	cr_assert_eq(o->caps & ~(uint64_t)KNOWN_CAPS, 0,
		     "caps %#llx has bits this ABI does not define",
		     (unsigned long long)o->caps);
	cr_assert_geq(o->req_size, 1, "req_size is 0");
	cr_assert_leq(o->req_size, 65536, "req_size %zu is implausible",
		      o->req_size);
	cr_assert_leq(o->ctx_size, (size_t)64 << 20,
		      "ctx_size %zu is implausible", o->ctx_size);
	cr_assert(o->init && o->fini && o->isend && o->irecv && o->test &&
		  o->progress && o->cancel,
		  "a mandatory member is NULL");
	cr_assert_eq(!!(o->caps & DPL_TRANSPORT_CAP_WAIT),
		     !!DPL_HAS_OP(o, wait),
		     "DPL_TRANSPORT_CAP_WAIT is %s but wait is %s",
		     (o->caps & DPL_TRANSPORT_CAP_WAIT) ? "set" : "clear",
		     DPL_HAS_OP(o, wait) ? "present" : "absent");
	cr_assert_eq(!!(o->caps & DPL_TRANSPORT_CAP_ALLREDUCE),
		     !!DPL_HAS_OP(o, iallreduce),
		     "DPL_TRANSPORT_CAP_ALLREDUCE is %s but iallreduce is %s",
		     (o->caps & DPL_TRANSPORT_CAP_ALLREDUCE) ? "set" : "clear",
		     DPL_HAS_OP(o, iallreduce) ? "present" : "absent");
}

/* ---------------------------------------------------------------- */

static void bad_posts_rank(struct conf_rank *rk)
{
	const struct dpl_transport_ops *o = rk->ops;
	uint32_t peer = 1 - rk->rank;
	unsigned char buf[64];
	void *req = conf_reqs(rk, 1);
	int rc;

	struct {
		const char *what;
		bool send;
		uint32_t peer;
		uint64_t tag;
		uint32_t mem;
		int want;
	} cases[] = {
		{"isend to its own rank", true, rk->rank, 1, DPL_MEM_HOST,
		 DPL_EINVAL},
		{"irecv from its own rank", false, rk->rank, 1, DPL_MEM_HOST,
		 DPL_EINVAL},
		{"isend to rank world_size", true, rk->size, 1, DPL_MEM_HOST,
		 DPL_EINVAL},
		{"irecv from rank world_size", false, rk->size, 1,
		 DPL_MEM_HOST, DPL_EINVAL},
		{"isend to rank UINT32_MAX", true, UINT32_MAX, 1,
		 DPL_MEM_HOST, DPL_EINVAL},
		{"isend with tag DPL_TAG_MAX + 1", true, peer,
		 DPL_TAG_MAX + 1, DPL_MEM_HOST, DPL_EINVAL},
		{"irecv with tag DPL_TAG_MAX + 1", false, peer,
		 DPL_TAG_MAX + 1, DPL_MEM_HOST, DPL_EINVAL},
		{"isend with tag UINT64_MAX", true, peer, UINT64_MAX,
		 DPL_MEM_HOST, DPL_EINVAL},
	};
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		conf_step(rk, "%s", cases[i].what);
		memset(req, 0x5a, o->req_size);
		rc = cases[i].send
			     ? o->isend(rk->ctx, req, cases[i].peer,
					cases[i].tag, buf, sizeof buf,
					cases[i].mem)
			     : o->irecv(rk->ctx, req, cases[i].peer,
					cases[i].tag, buf, sizeof buf,
					cases[i].mem);
		conf_check_code(rk, rc, cases[i].what);
		conf_expect(rk, rc == cases[i].want, "%s: %s, expected %s",
			    cases[i].what, dpl_err_name(rc),
			    dpl_err_name(cases[i].want));
	}
	if (!(o->caps & DPL_TRANSPORT_CAP_MEM_CUDA)) {
		conf_step(rk, "isend of DPL_MEM_CUDA without the capability");
		rc = o->isend(rk->ctx, req, peer, 1, buf, sizeof buf,
			      DPL_MEM_CUDA);
		conf_check_code(rk, rc, "isend(DPL_MEM_CUDA)");
		conf_expect(rk, rc == DPL_ENOTSUP,
			    "isend of DPL_MEM_CUDA memory without "
			    "DPL_TRANSPORT_CAP_MEM_CUDA: %s, expected "
			    "DPL_ENOTSUP",
			    dpl_err_name(rc));
		rc = o->irecv(rk->ctx, req, peer, 1, buf, sizeof buf,
			      DPL_MEM_CUDA);
		conf_check_code(rk, rc, "irecv(DPL_MEM_CUDA)");
		conf_expect(rk, rc == DPL_ENOTSUP,
			    "irecv of DPL_MEM_CUDA memory without "
			    "DPL_TRANSPORT_CAP_MEM_CUDA: %s, expected "
			    "DPL_ENOTSUP",
			    dpl_err_name(rc));
	}
	conf_step(rk, "isend of an unknown memory kind");
	rc = o->isend(rk->ctx, req, peer, 1, buf, sizeof buf, 77);
	conf_check_code(rk, rc, "isend(mem 77)");
	conf_expect(rk, rc == DPL_ENOTSUP || rc == DPL_EINVAL,
		    "isend of memory kind 77: %s, expected DPL_ENOTSUP or "
		    "DPL_EINVAL",
		    dpl_err_name(rc));
	/* Failed posts posted nothing: the same storage works, and the
	 * extreme tags are usable. */
	conf_barrier(rk);
	conf_step(rk, "exchange on tag DPL_TAG_MAX");
	conf_exchange(rk, peer, DPL_TAG_MAX, 64, 1);
	conf_step(rk, "exchange on tag 0");
	conf_exchange(rk, peer, 0, 64, 2);
}

Test(caps, posts_reject_bad_arguments, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = bad_posts_rank,
			       .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

static void bad_init_rank(struct conf_rank *rk)
{
	static char longboot[4096];
	char opts[512], root[256];
	dpl_transport *t = NULL;
	const char *base = conf_options();
	int fds0, fds1, rc;

	fds0 = conf_count_fds();
	snprintf(opts, sizeof opts, "%s%sdpl_conformance_no_such_option=1",
		 base ? base : "", base ? "," : "");
	conf_step(rk, "init with options '%s'", opts);
	{
		struct dpl_transport_params p;

		memset(&p, 0, sizeof p);
		p.rank = 0;
		p.world_size = 1;
		p.bootstrap = rk->w->boot;
		p.options = opts;
		p.timeout_ms = 2000;
		rc = dpl_transport_open(rk->ops, &p, &t);
	}
	conf_check_code(rk, rc, "dpl_transport_open");
	if (rc == 0)
		dpl_transport_close(t);
	conf_expect(rk, rc == DPL_EINVAL,
		    "an unknown option ('dpl_conformance_no_such_option=1'): "
		    "%s, expected DPL_EINVAL",
		    dpl_err_name(rc));
	conf_expect(rk, dpl_last_error()[0] != '\0',
		    "the failed init left no message in dpl_last_error()");

	conf_step(rk, "rank 2 of a world of 2");
	rc = conf_try_open(rk, rk->w->boot, 2, 2, 2000, &t);
	conf_expect(rk, rc == DPL_EINVAL, "rank 2 of 2: %s, expected "
					  "DPL_EINVAL", dpl_err_name(rc));
	conf_step(rk, "a world of 0 ranks");
	rc = conf_try_open(rk, rk->w->boot, 0, 0, 2000, &t);
	conf_expect(rk, rc == DPL_EINVAL, "world size 0: %s, expected "
					  "DPL_EINVAL", dpl_err_name(rc));

	/* Malformed bootstraps, as rank 1 of 2: it has to use the string. */
	conf_step(rk, "a 4095-byte bootstrap string");
	memset(longboot, 'x', sizeof longboot - 1);
	rc = conf_try_open(rk, longboot, 1, 2, 1000, &t);
	conf_check_code(rk, rc, "dpl_transport_open");
	if (rc == 0)
		dpl_transport_close(t);
	conf_expect(rk, rc < 0, "a 4095-byte bootstrap string was accepted");
	if (conf_boot_kind() == CONF_BOOT_TCP) {
		static const char *const bad[] = {
			"127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:12ab",
			"127.0.0.1", ":4000", "256.1.1.1:4000"};
		size_t i;

		for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			conf_step(rk, "bootstrap '%s'", bad[i]);
			rc = conf_try_open(rk, bad[i], 1, 2, 1000, &t);
			conf_check_code(rk, rc, "dpl_transport_open");
			if (rc == 0)
				dpl_transport_close(t);
			conf_expect(rk, rc < 0,
				    "malformed bootstrap '%s' was accepted",
				    bad[i]);
		}
	}
	/* After the failures, a good init works and nothing leaked. */
	conf_step(rk, "a good init after the failures");
	snprintf(root, sizeof root, "%s", rk->w->boot);
	rc = conf_try_open(rk, root, 0, 1, 5000, &t);
	conf_expect(rk, rc == 0, "world of 1 at '%s': %s (%s)", root,
		    dpl_err_name(rc), dpl_last_error());
	dpl_transport_close(t);
	fds1 = conf_count_fds();
	conf_note(rk, "descriptors %d before, %d after the failed inits",
		  fds0, fds1);
	conf_expect(rk, fds1 <= fds0 + 1,
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

static void lone_rank(struct conf_rank *rk)
{
	uint32_t who = *(uint32_t *)rk->arg;
	dpl_transport *t = NULL;
	uint64_t t0 = conf_now_ns();
	int rc;

	conf_step(rk, "rank %u of 2 alone, timeout 1000 ms", who);
	rc = conf_try_open(rk, rk->w->boot, who, 2, 1000, &t);
	conf_check_code(rk, rc, "dpl_transport_open");
	rk->w->slot[0].val[0] = (double)(conf_now_ns() - t0) / 1e6;
	conf_note(rk, "rank %u of 2 alone: %s after %.0f ms%s%s", who,
		  dpl_err_name(rc), rk->w->slot[0].val[0],
		  rc ? ": " : "", rc ? dpl_last_error() : "");
	if (rc == 0) {
		dpl_transport_close(t);
		return;
	}
	conf_expect(rk, rc == DPL_ETIMEDOUT,
		    "rank %u of 2 alone: %s (%s), expected DPL_ETIMEDOUT or "
		    "a lazy 0",
		    who, dpl_err_name(rc), dpl_last_error());
	conf_expect(rk, dpl_last_error()[0] != '\0',
		    "DPL_ETIMEDOUT without a message naming the missing "
		    "rank");
}

Test(init, lone_rank_times_out, .timeout = 80)
{
	uint32_t who[2] = {0, 1};
	struct conf_job a = {.size = 1, .fn = lone_rank, .arg = &who[0],
			     .no_open = true, .deadline_s = 30};
	struct conf_job b = {.size = 1, .fn = lone_rank, .arg = &who[1],
			     .no_open = true, .deadline_s = 30};

	conf_run(&a);
	conf_run(&b);
}

/* ---------------------------------------------------------------- */

struct cycles {
	unsigned n;
	bool exchange;
	int retries;
};

static void counts(int c[3])
{
	c[0] = conf_count_fds();
	c[1] = conf_count_threads();
	c[2] = conf_count_shm();
}

static void cycles_rank(struct conf_rank *rk)
{
	const struct cycles *a = rk->arg;
	bool measure = !conf_threads() || rk->rank == 0;
	int before[3] = {0, 0, 0}, after[3] = {0, 0, 0};
	char *shm_before = NULL, *shm_after, names[256];
	uint64_t t0 = 0;
	unsigned k;
	int tries;

	/* Cycle 0 warms up what a library keeps for the process. */
	for (k = 0; k <= a->n; k++) {
		if (k == 1) {
			conf_barrier(rk);
			if (measure) {
				counts(before);
				shm_before = conf_shm_snapshot();
			}
			conf_barrier(rk);
			t0 = conf_now_ns();
		}
		conf_new_boot(rk);
		conf_step(rk, "cycle %u of %u: open", k, a->n);
		conf_open(rk);
		if (a->exchange) {
			conf_step(rk, "cycle %u of %u: exchange", k, a->n);
			conf_exchange(rk, 1 - rk->rank, 7, 4096, k);
		}
		conf_step(rk, "cycle %u of %u: final barrier", k, a->n);
		conf_barrier(rk);
		conf_close(rk);
	}
	conf_barrier(rk);
	rk->w->slot[rk->rank].val[0] =
		(double)(conf_now_ns() - t0) / 1e6 / (a->n ? a->n : 1);
	if (!measure)
		return;
	/* Threads and descriptors of a closed context may take a moment
	 * to go; give them a bounded while. */
	for (tries = 0; tries <= a->retries; tries++) {
		counts(after);
		if (after[0] <= before[0] && after[1] <= before[1] &&
		    after[2] <= before[2])
			break;
		conf_sleep_ms(100);
	}
	shm_after = conf_shm_snapshot();
	conf_shm_new(shm_before, shm_after, names, sizeof names);
	free(shm_before);
	free(shm_after);
	conf_note(rk, "%u cycles, %.2f ms each: fds %d -> %d, threads %d -> "
		      "%d, /dev/shm %d -> %d",
		  a->n, rk->w->slot[rk->rank].val[0], before[0], after[0],
		  before[1], after[1], before[2], after[2]);
	conf_expect(rk, after[0] <= before[0],
		    "%u cycles leaked descriptors: %d before, %d after", a->n,
		    before[0], after[0]);
	conf_expect(rk, after[1] <= before[1],
		    "%u cycles leaked threads: %d before, %d after", a->n,
		    before[1], after[1]);
	conf_expect(rk, after[2] <= before[2],
		    "%u cycles leaked /dev/shm entries: %d before, %d after "
		    "(new: %s)",
		    a->n, before[2], after[2], names);
}

Test(lifecycle, init_fini_cycles_leave_counts_flat, .timeout = 320)
{
	struct cycles a = {
		.n = (unsigned)conf_env_long("DPL_CONF_CYCLES", 100, 1, 100000),
		.exchange = false,
		.retries = 20};
	struct conf_job job = {.size = 2, .fn = cycles_rank, .arg = &a,
			       .no_open = true, .deadline_s = 300};

	conf_run(&job);
}

Test(lifecycle, connect_exchange_close_churn, .timeout = 320)
{
	struct cycles a = {
		.n = (unsigned)conf_env_long("DPL_CONF_CHURN", 200, 1, 100000),
		.exchange = true,
		.retries = 20};
	struct conf_job job = {.size = 2, .fn = cycles_rank, .arg = &a,
			       .no_open = true, .deadline_s = 300};

	conf_run(&job);
}
