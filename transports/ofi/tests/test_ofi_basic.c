/*
 * test_ofi_basic.c - the libfabric transport's table, options, provider
 * choice, loopback pinning, open/close churn, argument checks, memory
 * registration (including a buffer freed and mapped again at the same
 * address), the report of a rank that could not open its endpoint, and
 * init without the host's out-of-band exchange.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ofi_harness.h"
#include "ofi_internal.h"

#define MiB ((size_t)1 << 20)

static const struct dpl_transport_ops *O = &dpl_transport_ofi;

static struct h_job job(const char *prov, uint32_t n, h_rank_fn fn,
			const char *opts)
{
	struct h_job j;

	memset(&j, 0, sizeof j);
	j.provider = prov;
	j.n = n;
	j.fn = fn;
	j.options = opts;
	return j;
}

static void run_ok(struct h_job *j)
{
	char buf[4000];
	int rc = h_job_run(j);

	cr_assert_eq(rc, 0, "%s: %s", j->provider ? j->provider : "(auto)",
		     h_job_report(j, buf, sizeof buf));
	h_job_free(j);
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
	p.oob = h_self_oob();
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

Test(ofi, bad_rank_is_rejected)
{
	struct dpl_transport_params p;
	dpl_transport *t = NULL;

	memset(&p, 0, sizeof p);
	p.rank = 2;
	p.world_size = 2;
	p.oob = h_self_oob();
	cr_assert_eq(dpl_transport_open(O, &p, &t), DPL_EINVAL);
	cr_assert_null(t);
}

/* Loopback as /proc/net/{tcp,udp}6 print it on a little-endian host;
 * IPv4 is computed below for any byte order. */
#define LO6 "00000000000000000000000001000000:"
#define LO6MAP "0000000000000000FFFF00000100007F:"

/* Every inet socket of this process is bound to 127.0.0.1 (or ::1). */
static int loopback_only(struct h_rank *r, int *count)
{
	static const char *tabs[] = {"/proc/self/net/tcp", "/proc/self/net/udp",
				     "/proc/self/net/tcp6",
				     "/proc/self/net/udp6"};
	unsigned long inodes[256];
	int ninode = 0, t;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[300], link[64], line[512], lo4[16];
	ssize_t k;

	/* The kernel prints the address word as a native-order integer. */
	snprintf(lo4, sizeof lo4, "%08X:", (unsigned)htonl(INADDR_LOOPBACK));
	CHECK(r, d != NULL, "opendir");
	while ((e = readdir(d)) != NULL && ninode < 256) {
		snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
		k = readlink(path, link, sizeof link - 1);
		if (k <= 0)
			continue;
		link[k] = '\0';
		if (sscanf(link, "socket:[%lu]", &inodes[ninode]) == 1)
			ninode++;
	}
	closedir(d);
	*count = 0;
	for (t = 0; t < 4; t++) {
		FILE *f = fopen(tabs[t], "r");

		if (f == NULL)
			continue;
		while (fgets(line, sizeof line, f) != NULL) {
			char local[64];
			unsigned long ino;
			int i, mine = 0;

			if (sscanf(line, " %*d: %63s %*s %*s %*s %*s %*s %*s "
				   "%*s %lu", local, &ino) != 2)
				continue;
			for (i = 0; i < ninode; i++)
				mine |= inodes[i] == ino;
			if (!mine)
				continue;
			(*count)++;
			if (t < 2)
				CHECK(r, strncmp(local, lo4, strlen(lo4)) == 0,
				      "socket bound to %s (%s), not 127.0.0.1",
				      local, tabs[t]);
			else
				CHECK(r, strncmp(local, LO6, strlen(LO6)) == 0 ||
						 strncmp(local, LO6MAP,
							 strlen(LO6MAP)) == 0,
				      "socket bound to %s (%s), not loopback",
				      local, tabs[t]);
		}
		fclose(f);
	}
	return 0;
}

static int tcp_pinned(struct h_rank *r)
{
	uint8_t x = 1;
	int n = 0, rc;

	CHECK(r, strncmp(dpl__ofi_local_address(r->ctx), "127.0.0.1:", 10) == 0,
	      "local address '%s'", dpl__ofi_local_address(r->ctx));
	CHECK(r, strcmp(dpl__ofi_provider(r->ctx), "tcp;ofi_rxm") == 0,
	      "provider '%s'", dpl__ofi_provider(r->ctx));
	rc = r->rank == 0 ? h_send(r, 1, 3, &x, 1) : h_recv(r, 0, 3, &x, 1);
	CHECK(r, rc == 0, "exchange: %s", dpl_err_name(rc));
	if (loopback_only(r, &n) != 0)
		return 1;
	/* rxm's connection and listener, and the liveness socket. */
	CHECK(r, n >= 3, "only %d inet sockets found", n);
	/* Keep the connection until both ranks looked at it. */
	rc = r->rank == 1 ? h_send(r, 0, 4, &x, 1) : h_recv(r, 1, 4, &x, 1);
	CHECK(r, rc == 0, "done: %s", dpl_err_name(rc));
	snprintf(r->sh->note[r->rank], H_MSG, "%s",
		 dpl__ofi_local_address(r->ctx));
	return 0;
}

Test(ofi_tcp, pinned_to_loopback, .timeout = 60)
{
	struct h_job j = job("tcp;ofi_rxm", 2, tcp_pinned, NULL);

	run_ok(&j);
}

/* With FI_PROVIDER=tcp and no option, the tcp provider is used, still on
 * loopback. */
Test(ofi_tcp, fi_provider_environment, .timeout = 60)
{
	struct h_job j = job(NULL, 2, tcp_pinned, NULL);

	j.env[0] = "FI_PROVIDER=tcp;ofi_rxm";
	j.env[1] = "FI_PROVIDER=tcp;ofi_rxm";
	run_ok(&j);
}

static int shm_chosen(struct h_rank *r)
{
	uint8_t x = 1;
	int rc;

	CHECK(r, strcmp(dpl__ofi_provider(r->ctx), "shm") == 0,
	      "provider '%s' (every rank is on this host)",
	      dpl__ofi_provider(r->ctx));
	CHECK(r, strncmp(dpl__ofi_local_address(r->ctx), "fi_shm://", 9) == 0,
	      "local address '%s'", dpl__ofi_local_address(r->ctx));
	rc = r->rank == 0 ? h_send(r, 1, 3, &x, 1) : h_recv(r, 0, 3, &x, 1);
	CHECK(r, rc == 0, "exchange: %s", dpl_err_name(rc));
	return 0;
}

Test(ofi_shm, chosen_when_all_ranks_share_the_host, .timeout = 60)
{
	struct h_job j = job(NULL, 2, shm_chosen, NULL);

	run_ok(&j);
}

/* One rank cannot open its endpoint: every rank fails, naming it. */
static int never_runs(struct h_rank *r)
{
	CHECK(r, false, "open should have failed");
	return 0;
}

Test(ofi, failed_rank_is_named_by_its_peers, .timeout = 60)
{
	struct h_job j = job(NULL, 2, never_runs, NULL);

	j.env[0] = "FI_PROVIDER=tcp;ofi_rxm";
	j.env[1] = "FI_PROVIDER=nosuchprovider";
	cr_assert_neq(h_job_run(&j), 0);
	cr_assert_eq(h_exit_code(&j, 0), 100, "rank 0: %s", j.sh->msg[0]);
	cr_assert_eq(h_exit_code(&j, 1), 100, "rank 1: %s", j.sh->msg[1]);
	cr_assert(strstr(j.sh->msg[0], "rank 1 failed to open") &&
		  strstr(j.sh->msg[0], "nosuchprovider"), "%s", j.sh->msg[0]);
	cr_assert(strstr(j.sh->msg[1], "nosuchprovider"), "%s", j.sh->msg[1]);
	h_job_free(&j);
}

/* Open and close 20 times in one process: no fd, thread or /dev/shm file
 * is left behind. The first round loads libfabric's providers. */
static int churn(const char *prov, char *why, size_t n)
{
	struct dpl_transport_params p;
	char opts[64];
	int fds = 0, th = 0, i;

	snprintf(opts, sizeof opts, "provider=%s", prov);
	memset(&p, 0, sizeof p);
	p.world_size = 1;
	p.oob = h_self_oob();
	p.options = opts;
	for (i = 0; i < 21; i++) {
		dpl_transport *t = NULL;
		int rc = dpl_transport_open(O, &p, &t);

		if (rc != 0) {
			snprintf(why, n, "open %d: %s", i, dpl_last_error());
			return 1;
		}
		dpl_transport_close(t);
		if (i == 0) {
			fds = h_count_fds();
			th = h_count_threads();
		}
	}
	if (h_count_fds() != fds || h_count_threads() != th) {
		snprintf(why, n, "fds %d -> %d, threads %d -> %d", fds,
			 h_count_fds(), th, h_count_threads());
		return 1;
	}
	if (h_shm_has_pid(getpid())) {
		snprintf(why, n, "a /dev/shm file of this process remains");
		return 1;
	}
	return 0;
}

static void churn_in_child(const char *prov)
{
	char *why = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int st = 0;
	pid_t pid;

	cr_assert_neq(why, MAP_FAILED);
	why[0] = '\0';
	pid = fork();
	if (pid == 0) {
		unsetenv("FI_PROVIDER");
		_exit(churn(prov, why, 4096));
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s", prov, why);
	munmap(why, 4096);
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
static int bad_posts(struct h_rank *r)
{
	uint8_t b[8] = {0};
	void *q = h_req(r);
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
	memset(q, 0, r->o->req_size);
	rc = dpl_transport_cancel(r->t, q);
	CHECK(r, rc == DPL_EINVAL, "cancel of nothing: %s", dpl_err_name(rc));
	/* The largest tag works. */
	if (r->rank == 0)
		rc = h_send(r, 1, DPL_TAG_MAX, b, 8);
	else
		rc = h_recv(r, 0, DPL_TAG_MAX, b, 8);
	CHECK(r, rc == 0, "tag DPL_TAG_MAX: %s", dpl_err_name(rc));
	free(q);
	return 0;
}

Test(ofi_tcp, bad_posts, .timeout = 60)
{
	struct h_job j = job("tcp;ofi_rxm", 2, bad_posts, NULL);

	run_ok(&j);
}

Test(ofi_shm, bad_posts, .timeout = 60)
{
	struct h_job j = job("shm", 2, bad_posts, NULL);

	run_ok(&j);
}

/* Registered buffers: sizes on both paths, then a buffer unmapped and
 * mapped again at the same address with new contents, on both sides. */
static int registered(struct h_rank *r)
{
	static const size_t sz[] = {8, 4096, 70000, MiB, 6 * MiB};
	size_t len = 6 * MiB, i, bad;
	uint8_t *b;
	int rc, round;

	for (i = 0; i < sizeof sz / sizeof sz[0]; i++) {
		b = malloc(sz[i]);
		CHECK(r, b != NULL, "malloc");
		if (r->rank == 0) {
			h_fill(b, sz[i], (uint32_t)i);
			rc = h_send(r, 1, 30 + i, b, sz[i]);
		} else {
			rc = h_recv(r, 0, 30 + i, b, sz[i]);
			bad = h_check(b, sz[i], (uint32_t)i);
			CHECK(r, bad == SIZE_MAX, "%zu bytes: byte %zu", sz[i],
			      bad);
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
				h_fill(b, n, (uint32_t)(round * 10 + i));
				rc = h_send(r, 1, 50 + (uint64_t)i, b, n);
			} else {
				memset(b, 0, n);
				rc = h_recv(r, 0, 50 + (uint64_t)i, b, n);
				bad = h_check(b, n, (uint32_t)(round * 10 + i));
				CHECK(r, bad == SIZE_MAX,
				      "round %d, %zu bytes: byte %zu", round, n,
				      bad);
			}
			CHECK(r, rc == 0, "round %d: %s", round,
			      dpl_err_name(rc));
		}
	}
	munmap(b, len);
	return 0;
}

Test(ofi_tcp, registered_buffers_and_reuse_after_free, .timeout = 60)
{
	struct h_job j = job("tcp;ofi_rxm", 2, registered, "mr=always");

	run_ok(&j);
}

Test(ofi_shm, registered_buffers_and_reuse_after_free, .timeout = 60)
{
	struct h_job j = job("shm", 2, registered, "mr=always");

	run_ok(&j);
}

Test(ofi_shm, registered_buffers_uncached, .timeout = 60)
{
	struct h_job j = job("shm", 2, registered, "mr=always,mr_cache=0");

	run_ok(&j);
}

Test(ofi_tcp, buffer_reuse_after_free_unregistered, .timeout = 60)
{
	struct h_job j = job("tcp;ofi_rxm", 2, registered, NULL);

	run_ok(&j);
}
