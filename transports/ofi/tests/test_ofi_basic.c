/*
 * test_ofi_basic.c - the libfabric transport's table, options, provider
 * choice, loopback pinning, open/close churn, argument checks, memory
 * registration (including a buffer freed and mapped again at the same
 * address), the report of a rank that could not open its endpoint, and
 * init without the host's out-of-band exchange.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ofi_harness.h"
#include "ofi_internal.h"

#define MiB ((size_t)1 << 20)

static const struct dpl_transport_ops *O = &dpl_transport_ofi;

static void run_ok(struct ofi_job *j)
{
	int rc = ofi_job_run(j);

	cr_assert_eq(rc, 0, "%s: %s", j->provider ? j->provider : "(auto)",
		     j->tj.report);
	tj_job_free(&j->tj);
}

static void run_job(const char *prov, uint32_t n, tj_rank_fn fn,
		    const char *opts)
{
	struct ofi_job j;

	ofi_job_init(&j, prov, n, fn);
	j.options = opts;
	run_ok(&j);
}

Test(ofi, table_is_versioned_and_complete)
{
	cr_assert_eq(O->abi_version, DPL_TRANSPORT_ABI_VERSION);
	cr_assert_eq(O->size, sizeof(struct dpl_transport_ops));
	cr_assert_str_eq(O->name, "ofi");
	cr_assert(O->caps & DPL_TRANSPORT_CAP_PEER_FAILURE);
	cr_assert_eq(O->caps & DPL_TRANSPORT_CAP_MEM_CUDA, 0);
	cr_assert_geq(O->req_size, 1);
	cr_assert_geq(O->ctx_size, sizeof(struct ofi_ctx));
	cr_assert(O->init && O->fini && O->isend && O->irecv && O->test &&
		  O->progress && O->cancel);
	/* Callers spin on progress; the core runs its ring. */
	cr_assert(!DPL_HAS_OP(O, wait));
	cr_assert(!DPL_HAS_OP(O, iallreduce));
}

/* These fail before libfabric is touched, so they run in the test. */
static int open1(const char *opts, dpl_transport **t)
{
	struct dpl_transport_params p;

	memset(&p, 0, sizeof p);
	p.rank = 0;
	p.world_size = 1;
	p.oob = tj_solo_oob();
	p.options = opts;
	p.timeout_ms = 5000;
	return dpl_transport_open(O, &p, t);
}

/* The host owns the rendezvous: without its exchange init fails, naming
 * the transport and what is missing, before it touches libfabric. */
Test(ofi, init_needs_the_hosts_exchange)
{
	struct dpl_transport_params p;
	dpl_transport *t = NULL;
	int rc;

	memset(&p, 0, sizeof p);
	p.rank = 0;
	p.world_size = 2;
	p.options = "provider=shm";
	rc = dpl_transport_open(O, &p, &t);
	cr_assert_eq(rc, DPL_EINVAL, "%s (%s)", dpl_err_name(rc),
		     dpl_last_error());
	cr_assert(strstr(dpl_last_error(), "ofi") &&
		  strstr(dpl_last_error(), "oob"), "%s", dpl_last_error());
	cr_assert_null(t);
	p.world_size = 1;
	rc = dpl_transport_open(O, &p, &t);
	cr_assert_eq(rc, DPL_EINVAL, "one rank: %s", dpl_err_name(rc));
	cr_assert_null(t);
}

Test(ofi, bad_options_are_named)
{
	static const struct {
		const char *opts, *word;
		int rc;
	} c[] = {
		{"bogus=1", "bogus", DPL_EINVAL},
		{"liveness_ms=abc", "liveness_ms", DPL_EINVAL},
		{"liveness_ms=5", "liveness_ms", DPL_EINVAL},
		{"slots=99999999", "slots", DPL_EINVAL},
		{"inline_max=-1", "inline_max", DPL_EINVAL},
		{"mr=sometimes", "mr", DPL_EINVAL},
		{"warmup=maybe", "warmup", DPL_EINVAL},
		{"provider", "provider", DPL_EINVAL},
		{"provider=tcp,ofi_rxm", "ofi_rxm", DPL_EINVAL},
		{"provider=sockets", "sockets", DPL_ENOTSUP},
		{"provider=sockets;ofi_rxm", "sockets", DPL_ENOTSUP},
	};
	dpl_transport *t = NULL;
	size_t i;
	int rc;

	unsetenv("FI_PROVIDER");
	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		rc = open1(c[i].opts, &t);
		cr_assert_eq(rc, c[i].rc, "'%s': %s (%s)", c[i].opts,
			     dpl_err_name(rc), dpl_last_error());
		cr_assert(strstr(dpl_last_error(), c[i].word) != NULL,
			  "'%s': message '%s' does not name '%s'", c[i].opts,
			  dpl_last_error(), c[i].word);
		cr_assert_null(t);
	}
}

Test(ofi, sockets_provider_refused_from_environment)
{
	dpl_transport *t = NULL;
	int rc;

	setenv("FI_PROVIDER", "sockets", 1);
	rc = open1(NULL, &t);
	cr_assert_eq(rc, DPL_ENOTSUP, "%s", dpl_err_name(rc));
	cr_assert(strstr(dpl_last_error(), "FI_PROVIDER") &&
		  strstr(dpl_last_error(), "sockets"), "%s", dpl_last_error());
	setenv("FI_PROVIDER", "^psm2", 1);
	rc = open1(NULL, &t);
	cr_assert_eq(rc, DPL_EINVAL, "%s", dpl_err_name(rc));
	cr_assert(strstr(dpl_last_error(), "^psm2"), "%s", dpl_last_error());
	unsetenv("FI_PROVIDER");
}

/* Every inet socket of the rank is bound to loopback (127.0.0.1 or
 * ::1). */
static void tcp_pinned(struct tj_rank *r)
{
	const char *local = dpl__ofi_local_address(ofi_ctx(r));
	char why[200] = "";
	uint8_t x = 1;
	int n = 0, rc;

	CHECK(r, strncmp(local, "127.0.0.1:", 10) == 0, "local address '%s'",
	      local);
	CHECK(r, strcmp(dpl__ofi_provider(ofi_ctx(r)), "tcp;ofi_rxm") == 0,
	      "provider '%s'", dpl__ofi_provider(ofi_ctx(r)));
	rc = r->rank == 0 ? tj_send(r, 1, 3, &x, 1, 0)
			  : tj_recv(r, 0, 3, &x, 1, 0);
	CHECK(r, rc == 0, "exchange: %s", dpl_err_name(rc));
	CHECK(r, tj_sockets_loopback(why, sizeof why, &n), "%s", why);
	/* rxm's connection and listener, and the liveness socket. */
	CHECK(r, n >= 3, "only %d inet sockets found", n);
	/* Keep the connection until both ranks looked at it. */
	rc = r->rank == 1 ? tj_send(r, 0, 4, &x, 1, 0)
			  : tj_recv(r, 1, 4, &x, 1, 0);
	CHECK(r, rc == 0, "done: %s", dpl_err_name(rc));
	tj_note(r, "%s", local);
}

Test(ofi_tcp, pinned_to_loopback, .timeout = 60)
{
	run_job("tcp;ofi_rxm", 2, tcp_pinned, NULL);
}

/* With FI_PROVIDER=tcp and no option, the tcp provider is used, still on
 * loopback. */
Test(ofi_tcp, fi_provider_environment, .timeout = 60)
{
	struct ofi_job j;

	ofi_job_init(&j, NULL, 2, tcp_pinned);
	j.env[0] = "FI_PROVIDER=tcp;ofi_rxm";
	j.env[1] = "FI_PROVIDER=tcp;ofi_rxm";
	run_ok(&j);
}

static void shm_chosen(struct tj_rank *r)
{
	uint8_t x = 1;
	int rc;

	CHECK(r, strcmp(dpl__ofi_provider(ofi_ctx(r)), "shm") == 0,
	      "provider '%s' (every rank is on this host)",
	      dpl__ofi_provider(ofi_ctx(r)));
	CHECK(r, strncmp(dpl__ofi_local_address(ofi_ctx(r)), "fi_shm://",
			 9) == 0,
	      "local address '%s'", dpl__ofi_local_address(ofi_ctx(r)));
	rc = r->rank == 0 ? tj_send(r, 1, 3, &x, 1, 0)
			  : tj_recv(r, 0, 3, &x, 1, 0);
	CHECK(r, rc == 0, "exchange: %s", dpl_err_name(rc));
}

Test(ofi_shm, chosen_when_all_ranks_share_the_host, .timeout = 60)
{
	run_job(NULL, 2, shm_chosen, NULL);
}

/* One rank cannot open its endpoint: every rank fails, naming it. */
static void never_runs(struct tj_rank *r)
{
	CHECK(r, false, "open should have failed");
}

Test(ofi, failed_rank_is_named_by_its_peers, .timeout = 60)
{
	const struct tj_slot *s[2];
	struct ofi_job j;
	uint32_t i;

	ofi_job_init(&j, NULL, 2, never_runs);
	j.env[0] = "FI_PROVIDER=tcp;ofi_rxm";
	j.env[1] = "FI_PROVIDER=nosuchprovider";
	cr_assert_neq(ofi_job_run(&j), 0);
	for (i = 0; i < 2; i++) {
		s[i] = tj_job_slot(&j.tj, i);
		cr_assert(atomic_load(&s[i]->state) == TJ_FAILED &&
			  tj_job_exit(&j.tj, i) == 1 &&
			  strncmp(s[i]->msg, "open: ", 6) == 0,
			  "rank %u did not fail its open: %s", i, j.tj.report);
	}
	cr_assert(strstr(s[0]->msg, "rank 1 failed to open") &&
		  strstr(s[0]->msg, "nosuchprovider"), "%s", s[0]->msg);
	cr_assert(strstr(s[1]->msg, "nosuchprovider"), "%s", s[1]->msg);
	tj_job_free(&j.tj);
}

/* Open and close 20 times in one process (a rank of its own, so that
 * the test process never initialises libfabric): no fd, thread or
 * /dev/shm file is left behind. The first round loads libfabric's
 * providers. */
static void churn(struct tj_rank *r)
{
	struct dpl_transport_params p;
	char opts[64];
	int fds = 0, th = 0, i;

	unsetenv("FI_PROVIDER");
	snprintf(opts, sizeof opts, "provider=%s", (const char *)r->arg);
	memset(&p, 0, sizeof p);
	p.world_size = 1;
	p.oob = tj_solo_oob();
	p.options = opts;
	for (i = 0; i < 21; i++) {
		dpl_transport *t = NULL;
		int rc = dpl_transport_open(O, &p, &t);

		CHECK(r, rc == 0, "open %d: %s", i, dpl_last_error());
		dpl_transport_close(t);
		if (i == 0) {
			fds = tj_count_fds();
			th = tj_count_threads();
		}
	}
	CHECK(r, tj_count_fds() == fds && tj_count_threads() == th,
	      "fds %d -> %d, threads %d -> %d", fds, tj_count_fds(), th,
	      tj_count_threads());
	CHECK(r, !ofi_shm_has_pid(getpid()),
	      "a /dev/shm file of this process remains");
}

static void churn_in_child(const char *prov)
{
	struct tj_job j;

	memset(&j, 0, sizeof j);
	j.size = 1;
	j.fn = churn;
	j.arg = (void *)prov;
	cr_assert_eq(tj_job_run(&j), 0, "%s: %s", prov, j.report);
	tj_job_free(&j);
}

Test(ofi_tcp, open_close_churn, .timeout = 120)
{
	churn_in_child("tcp;ofi_rxm");
}

Test(ofi_shm, open_close_churn, .timeout = 120)
{
	churn_in_child("shm");
}

/* Posts with bad arguments, through the checked layer every caller
 * uses (dpl_transport_isend() ...), fail at once, naming the argument;
 * a cancel of a request this context never posted is the backend's own
 * DPL_EINVAL. */
static void bad_posts(struct tj_rank *r)
{
	uint8_t b[8] = {0};
	void *q = ofi_reqs(r, 1);
	int rc;

	rc = dpl_transport_isend(r->t, q, 7, 1, b, 8, DPL_MEM_HOST);
	CHECK(r, rc == DPL_EINVAL && strstr(dpl_last_error(), "peer 7"),
	      "peer 7: %s %s", dpl_err_name(rc), dpl_last_error());
	rc = dpl_transport_irecv(r->t, q, r->rank, 1, b, 8, DPL_MEM_HOST);
	CHECK(r, rc == DPL_EINVAL, "own rank: %s", dpl_err_name(rc));
	rc = dpl_transport_isend(r->t, q, 1 - r->rank, DPL_TAG_MAX + 1, b, 8,
				 DPL_MEM_HOST);
	CHECK(r, rc == DPL_EINVAL && strstr(dpl_last_error(), "tag"),
	      "tag: %s %s", dpl_err_name(rc), dpl_last_error());
	rc = dpl_transport_irecv(r->t, q, 1 - r->rank, 1, b, 8, DPL_MEM_CUDA);
	CHECK(r, rc == DPL_ENOTSUP, "cuda: %s", dpl_err_name(rc));
	rc = dpl_transport_isend(r->t, q, 1 - r->rank, 1, NULL, 8,
				 DPL_MEM_HOST);
	CHECK(r, rc == DPL_EINVAL, "NULL buffer: %s", dpl_err_name(rc));
	memset(q, 0, r->ops->req_size);
	rc = dpl_transport_cancel(r->t, q);
	CHECK(r, rc == DPL_EINVAL, "cancel of nothing: %s", dpl_err_name(rc));
	/* The largest tag works. */
	if (r->rank == 0)
		rc = tj_send(r, 1, DPL_TAG_MAX, b, 8, 0);
	else
		rc = tj_recv(r, 0, DPL_TAG_MAX, b, 8, 0);
	CHECK(r, rc == 0, "tag DPL_TAG_MAX: %s", dpl_err_name(rc));
}

Test(ofi_tcp, bad_posts, .timeout = 60)
{
	run_job("tcp;ofi_rxm", 2, bad_posts, NULL);
}

Test(ofi_shm, bad_posts, .timeout = 60)
{
	run_job("shm", 2, bad_posts, NULL);
}

/* Registered buffers: sizes on both paths, then a buffer unmapped and
 * mapped again at the same address with new contents, on both sides. */
static void registered(struct tj_rank *r)
{
	static const size_t sz[] = {8, 4096, 70000, MiB, 6 * MiB};
	size_t len = 6 * MiB, i;
	long long bad;
	uint8_t *b;
	int rc, round;

	for (i = 0; i < sizeof sz / sizeof sz[0]; i++) {
		b = malloc(sz[i]);
		CHECK(r, b != NULL, "malloc");
		if (r->rank == 0) {
			tj_fill(b, sz[i], (uint32_t)i);
			rc = tj_send(r, 1, 30 + i, b, sz[i], 0);
		} else {
			rc = tj_recv(r, 0, 30 + i, b, sz[i], 0);
			bad = tj_verify(b, sz[i], (uint32_t)i);
			CHECK(r, bad < 0, "%zu bytes: byte %lld", sz[i], bad);
		}
		CHECK(r, rc == 0, "%zu bytes: %s", sz[i], dpl_err_name(rc));
		free(b);
	}
	b = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(r, b != MAP_FAILED, "mmap");
	for (round = 0; round < 3; round++) {
		if (round > 0) {
			uint8_t *again;

			munmap(b, len);
			again = mmap(b, len, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS |
					     MAP_FIXED_NOREPLACE,
				     -1, 0);
			CHECK(r, again == b, "could not map %p again", (void *)b);
		}
		for (i = 0; i < 2; i++) {
			size_t n = i == 0 ? 4096 : len;

			if (r->rank == 0) {
				tj_fill(b, n, (uint32_t)(round * 10 + i));
				rc = tj_send(r, 1, 50 + (uint64_t)i, b, n,
					     0);
			} else {
				memset(b, 0, n);
				rc = tj_recv(r, 0, 50 + (uint64_t)i, b, n,
					     0);
				bad = tj_verify(b, n,
						(uint32_t)(round * 10 + i));
				CHECK(r, bad < 0,
				      "round %d, %zu bytes: byte %lld", round,
				      n, bad);
			}
			CHECK(r, rc == 0, "round %d: %s", round,
			      dpl_err_name(rc));
		}
	}
	munmap(b, len);
}

Test(ofi_tcp, registered_buffers_and_reuse_after_free, .timeout = 60)
{
	run_job("tcp;ofi_rxm", 2, registered, "mr=always");
}

Test(ofi_shm, registered_buffers_and_reuse_after_free, .timeout = 60)
{
	run_job("shm", 2, registered, "mr=always");
}

Test(ofi_shm, registered_buffers_uncached, .timeout = 60)
{
	run_job("shm", 2, registered, "mr=always,mr_cache=0");
}

Test(ofi_tcp, buffer_reuse_after_free_unregistered, .timeout = 60)
{
	run_job("tcp;ofi_rxm", 2, registered, NULL);
}
