/*
 * test_ofi_netns.c - ranks on two "hosts": two network namespaces joined
 * by a veth pair (10.213.N.1 and 10.213.N.2), neither able to reach the
 * other's loopback. dpl must pick tcp;ofi_rxm, bind each rank to the
 * address of its route to rank 0, move messages of every protocol size,
 * and see a rank that closes or is killed. Skipped, with the reason,
 * where namespaces cannot be created (needs root and iproute2).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ofi_harness.h"
#include "ofi_internal.h"

#define MiB ((size_t)1 << 20)

static char ns[2][32], host[2][32];
static bool have_ns;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	return system(cmd);
}

static void setup(void)
{
	int id = (int)(getpid() % 200) + 20;

	snprintf(ns[0], sizeof ns[0], "dplofi%da", (int)getpid());
	snprintf(ns[1], sizeof ns[1], "dplofi%db", (int)getpid());
	snprintf(host[0], sizeof host[0], "10.213.%d.1", id);
	snprintf(host[1], sizeof host[1], "10.213.%d.2", id);
	have_ns = sh("ip netns add %s >/dev/null 2>&1", ns[0]) == 0 &&
		  sh("ip netns add %s >/dev/null 2>&1", ns[1]) == 0 &&
		  sh("ip link add dpv%da type veth peer name dpv%db >/dev/null "
		     "2>&1", id, id) == 0 &&
		  sh("ip link set dpv%da netns %s && ip link set dpv%db netns "
		     "%s", id, ns[0], id, ns[1]) == 0 &&
		  sh("ip -n %s addr add %s/24 dev dpv%da && ip -n %s link set "
		     "dpv%da up && ip -n %s link set lo up", ns[0], host[0], id,
		     ns[0], id, ns[0]) == 0 &&
		  sh("ip -n %s addr add %s/24 dev dpv%db && ip -n %s link set "
		     "dpv%db up && ip -n %s link set lo up", ns[1], host[1], id,
		     ns[1], id, ns[1]) == 0;
}

static void teardown(void)
{
	/* Deleting a namespace removes its end of the veth pair, and so the
	 * pair. */
	sh("ip netns del %s >/dev/null 2>&1", ns[0]);
	sh("ip netns del %s >/dev/null 2>&1", ns[1]);
}

static void two_hosts(struct tj_rank *r)
{
	static const size_t sz[] = {0, 8, 4096, 65536, MiB, 6 * MiB};
	const char *me = host[r->rank];
	const char *local = dpl__ofi_local_address(ofi_ctx(r));
	uint8_t *b = malloc(6 * MiB);
	long long bad;
	size_t i;
	int rc;

	CHECK(r, b != NULL, "malloc");
	CHECK(r, strcmp(dpl__ofi_provider(ofi_ctx(r)), "tcp;ofi_rxm") == 0,
	      "provider '%s' for ranks on two hosts",
	      dpl__ofi_provider(ofi_ctx(r)));
	CHECK(r, strncmp(local, me, strlen(me)) == 0 &&
			 local[strlen(me)] == ':',
	      "local address '%s', expected %s:PORT", local, me);
	for (i = 0; i < sizeof sz / sizeof sz[0]; i++) {
		if (r->rank == 0) {
			tj_fill(b, sz[i], (uint32_t)i);
			rc = tj_send(r, 1, 10 + i, b, sz[i], 0);
		} else {
			rc = tj_recv(r, 0, 10 + i, b, sz[i], 0);
			bad = tj_verify(b, sz[i], (uint32_t)i);
			CHECK(r, bad < 0, "%zu bytes: byte %lld", sz[i], bad);
		}
		CHECK(r, rc == 0, "%zu bytes: %s", sz[i], dpl_err_name(rc));
	}
	/* Rank 1 leaves; rank 0's pending receive from it fails. */
	if (r->rank == 0) {
		rc = tj_recv(r, 1, 99, b, 8, 0);
		CHECK(r, rc == DPL_EPEER, "receive from a rank that left: %s",
		      dpl_err_name(rc));
	}
	free(b);
}

Test(ofi_netns, two_hosts_over_veth, .init = setup, .fini = teardown,
     .timeout = 60)
{
	struct ofi_job j;

	if (!have_ns)
		cr_skip_test("cannot create network namespaces and a veth pair "
			     "(needs root and iproute2)");
	ofi_job_init(&j, NULL, 2, two_hosts);
	j.netns[0] = ns[0];
	j.netns[1] = ns[1];
	j.root_host = host[0];
	cr_assert_eq(ofi_job_run(&j), 0, "%s", j.tj.report);
	tj_job_free(&j.tj);
}

/* Always runs: the option parser and error mapping need no fabric. */
Test(ofi, error_codes_map_to_dpl)
{
	cr_assert_eq(dpl__ofi_err(FI_ECANCELED), DPL_ECANCELED);
	cr_assert_eq(dpl__ofi_err(FI_ETRUNC), DPL_ETRUNC);
	cr_assert_eq(dpl__ofi_err(-FI_ETRUNC), DPL_ETRUNC, "shm's sign");
	cr_assert_eq(dpl__ofi_err(FI_ECONNRESET), DPL_EPEER);
	cr_assert_eq(dpl__ofi_err(FI_ENOTCONN), DPL_EPEER);
	cr_assert_eq(dpl__ofi_err(FI_ENOMEM), DPL_ENOMEM);
	cr_assert_eq(dpl__ofi_err(FI_EOTHER), DPL_EIO, "unknown codes");
	cr_assert_eq(dpl__ofi_err(123456), DPL_EIO, "unknown codes");
	cr_assert(dpl__ofi_is_sockets("sockets"));
	cr_assert(dpl__ofi_is_sockets("sockets;ofi_rxm"));
	cr_assert(!dpl__ofi_is_sockets("tcp;ofi_rxm"));
	cr_assert(!dpl__ofi_is_sockets("socketsx"));
}
