/*
 * test_lifecycle.c - the table itself and the life of a context:
 * capability sanity, the checked layer's argument errors, init/fini
 * cycles and connect/close churn with flat descriptor, thread and
 * /dev/shm counts (cases 1, 2, 4, 31 and 35 of the battery; init itself
 * is test_init.c).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The cap bits ABI 2 defines. Bits 2 and 3 were CAP_ALLREDUCE and
 * CAP_WAIT in ABI 1: the optional members say it now (DPL_HAS_OP). */
#define KNOWN_CAPS                                                           \
	(DPL_TRANSPORT_CAP_PEER_FAILURE | DPL_TRANSPORT_CAP_MEM_CUDA |        \
	 DPL_TRANSPORT_CAP_IN_PROCESS)
#define ABI1_CAPS ((UINT64_C(1) << 2) | (UINT64_C(1) << 3))

_Static_assert(DPL_TRANSPORT_ABI_VERSION == 2,
	       "the battery checks transport ABI 2; review it for another");

#define END_OF(m)                                                            \
	(offsetof(struct dpl_transport_ops, m) +                             \
	 sizeof(((struct dpl_transport_ops *)0)->m))

Test(caps, table_is_sane, .timeout = 10)
{
	const struct dpl_transport_ops *o = conf_ops();
	const char *c;

	cr_log_info("transport '%s': caps %#llx, ctx_size %zu, req_size %zu, "
		    "wait %s, iallreduce %s",
		    o->name ? o->name : "(null)",
		    (unsigned long long)o->caps, o->ctx_size, o->req_size,
		    DPL_HAS_OP(o, wait) ? "present" : "absent",
		    DPL_HAS_OP(o, iallreduce) ? "present" : "absent");
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
	cr_assert_eq(o->caps & ABI1_CAPS, 0,
		     "caps %#llx sets bit 2 or 3, CAP_ALLREDUCE or CAP_WAIT of "
		     "ABI 1: in ABI 2 the members iallreduce and wait say "
		     "it (DPL_HAS_OP)",
		     (unsigned long long)o->caps);
	cr_assert_eq(o->caps & ~(uint64_t)KNOWN_CAPS, 0,
		     "caps %#llx has bits this ABI does not define",
		     (unsigned long long)o->caps);
	/* The battery runs the ranks as the table says (main.c). */
	cr_assert_eq((o->caps & DPL_TRANSPORT_CAP_IN_PROCESS) != 0,
		     conf_threads(),
		     "CAP_IN_PROCESS is %s but the ranks run as %s "
		     "(DPL_CONF_RANKS)",
		     (o->caps & DPL_TRANSPORT_CAP_IN_PROCESS) ? "set" : "clear",
		     conf_threads() ? "threads" : "processes");
	cr_assert_geq(o->req_size, 1, "req_size is 0");
	cr_assert_leq(o->req_size, 65536, "req_size %zu is implausible",
		      o->req_size);
	cr_assert_leq(o->ctx_size, (size_t)64 << 20,
		      "ctx_size %zu is implausible", o->ctx_size);
	cr_assert(o->init && o->fini && o->isend && o->irecv && o->test &&
		  o->progress && o->cancel,
		  "a mandatory member is NULL");
}

/* ---------------------------------------------------------------- */

/* Expect the checked layer's error `want` for `rc`, with a message. */
static void expect_layer(struct tj_rank *rk, int rc, int want,
			 const char *what)
{
	conf_check_code(rk, rc, what);
	TJ_CHECK(rk, rc == want, "%s: %s, expected %s", what,
		 dpl_err_name(rc), dpl_err_name(want));
	TJ_CHECK(rk, dpl_last_error()[0] != '\0',
		 "%s: %s without a message in dpl_last_error()", what,
		 dpl_err_name(rc));
}

static void clear_error(void)
{
	dpl_set_error(0, "%s", "");
}

/* The layer's checks of iallreduce: a bad group is DPL_EINVAL, a table
 * without the member DPL_ENOTSUP; nothing is posted either way. */
static void bad_allreduce(struct tj_rank *rk)
{
	float v[4] = {1, 2, 3, 4};
	uint32_t peer = 1 - rk->rank;
	uint32_t g_ok[2] = {0, 1}, g_unsorted[2] = {1, 0};
	uint32_t g_without[1] = {peer}, g_range[2] = {0, rk->size};
	void *req = tj_reqs(rk, 1);
	struct {
		const char *what;
		const uint32_t *group;
		uint32_t n;
	} bad[] = {
		{"iallreduce over 0 ranks", g_ok, 0},
		{"iallreduce over a group without this rank", g_without, 1},
		{"iallreduce over the unsorted group {1, 0}", g_unsorted, 2},
		{"iallreduce over a group with rank world_size", g_range, 2},
	};
	size_t i;
	int rc;

	if (!DPL_HAS_OP(rk->ops, iallreduce)) {
		tj_step(rk, "iallreduce of a table without the member");
		clear_error();
		rc = dpl_transport_iallreduce(rk->t, req, g_ok, 2, v, 4,
					      DPL_DTYPE_F32, DPL_MEM_HOST, 5);
		expect_layer(rk, rc, DPL_ENOTSUP,
			     "iallreduce of a table without iallreduce");
		return;
	}
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tj_step(rk, "%s", bad[i].what);
		clear_error();
		rc = dpl_transport_iallreduce(rk->t, req, bad[i].group,
					      bad[i].n, v, 4, DPL_DTYPE_F32,
					      DPL_MEM_HOST, 5);
		expect_layer(rk, rc, DPL_EINVAL, bad[i].what);
	}
}

static void bad_posts_rank(struct tj_rank *rk)
{
	const struct dpl_transport_ops *o = rk->ops;
	uint32_t peer = 1 - rk->rank;
	unsigned char buf[64];
	void *req = tj_reqs(rk, 1);
	int rc;

	struct {
		const char *what;
		bool send;
		uint32_t peer;
		uint64_t tag;
		bool null_buf;
		bool null_req;
		uint32_t mem;
		int want;
	} cases[] = {
		{"isend to its own rank", true, rk->rank, 1, false, false,
		 DPL_MEM_HOST, DPL_EINVAL},
		{"irecv from its own rank", false, rk->rank, 1, false, false,
		 DPL_MEM_HOST, DPL_EINVAL},
		{"isend to rank world_size", true, rk->size, 1, false, false,
		 DPL_MEM_HOST, DPL_EINVAL},
		{"irecv from rank world_size", false, rk->size, 1, false,
		 false, DPL_MEM_HOST, DPL_EINVAL},
		{"isend to rank UINT32_MAX", true, UINT32_MAX, 1, false, false,
		 DPL_MEM_HOST, DPL_EINVAL},
		{"isend with tag DPL_TAG_MAX + 1", true, peer,
		 DPL_TAG_MAX + 1, false, false, DPL_MEM_HOST, DPL_EINVAL},
		{"irecv with tag DPL_TAG_MAX + 1", false, peer,
		 DPL_TAG_MAX + 1, false, false, DPL_MEM_HOST, DPL_EINVAL},
		{"isend with tag UINT64_MAX", true, peer, UINT64_MAX, false,
		 false, DPL_MEM_HOST, DPL_EINVAL},
		{"isend of 64 bytes from a NULL buffer", true, peer, 1, true,
		 false, DPL_MEM_HOST, DPL_EINVAL},
		{"irecv of 64 bytes into a NULL buffer", false, peer, 1, true,
		 false, DPL_MEM_HOST, DPL_EINVAL},
		{"isend with NULL request storage", true, peer, 1, false, true,
		 DPL_MEM_HOST, DPL_EINVAL},
		{"irecv with NULL request storage", false, peer, 1, false,
		 true, DPL_MEM_HOST, DPL_EINVAL},
		{"isend of an unknown memory kind (77)", true, peer, 1, false,
		 false, 77, DPL_EINVAL},
		{"irecv of an unknown memory kind (77)", false, peer, 1, false,
		 false, 77, DPL_EINVAL},
		{"isend of DPL_MEM_CUDA memory without "
		 "DPL_TRANSPORT_CAP_MEM_CUDA",
		 true, peer, 1, false, false, DPL_MEM_CUDA, DPL_ENOTSUP},
		{"irecv of DPL_MEM_CUDA memory without "
		 "DPL_TRANSPORT_CAP_MEM_CUDA",
		 false, peer, 1, false, false, DPL_MEM_CUDA, DPL_ENOTSUP},
	};
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		void *r = cases[i].null_req ? NULL : req;
		void *b = cases[i].null_buf ? NULL : buf;

		if (cases[i].mem == DPL_MEM_CUDA &&
		    (o->caps & DPL_TRANSPORT_CAP_MEM_CUDA))
			continue;
		tj_step(rk, "%s", cases[i].what);
		memset(req, 0x5a, o->req_size);
		clear_error();
		rc = cases[i].send
			     ? dpl_transport_isend(rk->t, r, cases[i].peer,
						   cases[i].tag, b, sizeof buf,
						   cases[i].mem)
			     : dpl_transport_irecv(rk->t, r, cases[i].peer,
						   cases[i].tag, b, sizeof buf,
						   cases[i].mem);
		expect_layer(rk, rc, cases[i].want, cases[i].what);
	}
	bad_allreduce(rk);
	/* Failed posts posted nothing: the same storage works, and the
	 * extreme tags are usable. */
	tj_barrier(rk);
	tj_step(rk, "exchange on tag DPL_TAG_MAX");
	conf_exchange(rk, peer, DPL_TAG_MAX, 64, 1);
	tj_step(rk, "exchange on tag 0");
	conf_exchange(rk, peer, 0, 64, 2);
}

Test(caps, posts_reject_bad_arguments, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = bad_posts_rank,
			       .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

struct cycles {
	unsigned n;
	bool exchange;
	int retries;
};

static void counts(int c[3])
{
	c[0] = tj_count_fds();
	c[1] = tj_count_threads();
	c[2] = tj_count_shm(conf_shm_glob());
}

static void cycles_rank(struct tj_rank *rk)
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
			tj_barrier(rk);
			if (measure) {
				counts(before);
				shm_before = tj_shm_snapshot(conf_shm_glob());
			}
			tj_barrier(rk);
			t0 = dpl_clock_ns();
		}
		tj_meet_renew(rk);
		tj_step(rk, "cycle %u of %u: open", k, a->n);
		conf_open(rk);
		if (a->exchange) {
			tj_step(rk, "cycle %u of %u: exchange", k, a->n);
			conf_exchange(rk, 1 - rk->rank, 7, 4096, k);
		}
		tj_step(rk, "cycle %u of %u: final barrier", k, a->n);
		tj_barrier(rk);
		conf_close(rk);
	}
	tj_barrier(rk);
	rk->val[0] =
		(double)(dpl_clock_ns() - t0) / 1e6 / (a->n ? a->n : 1);
	if (!measure)
		return;
	/* Threads and descriptors of a closed context may take a moment
	 * to go; give them a bounded while. */
	for (tries = 0; tries <= a->retries; tries++) {
		counts(after);
		if (after[0] <= before[0] && after[1] <= before[1] &&
		    after[2] <= before[2])
			break;
		tj_sleep_ms(100);
	}
	shm_after = tj_shm_snapshot(conf_shm_glob());
	tj_shm_new(shm_before, shm_after, names, sizeof names);
	free(shm_before);
	free(shm_after);
	tj_note(rk, "%u cycles, %.2f ms each: fds %d -> %d, threads %d -> "
		    "%d, /dev/shm %d -> %d",
		a->n, rk->val[0], before[0], after[0],
		before[1], after[1], before[2], after[2]);
	TJ_CHECK(rk, after[0] <= before[0],
		 "%u cycles leaked descriptors: %d before, %d after", a->n,
		 before[0], after[0]);
	TJ_CHECK(rk, after[1] <= before[1],
		 "%u cycles leaked threads: %d before, %d after", a->n,
		 before[1], after[1]);
	TJ_CHECK(rk, after[2] <= before[2],
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
