/*
 * test_ucx_probe.c - dpl_transport_ucx_probe(): the settings a context
 * gets from dpl's rule (NET_DEVICES=lo unless devices are named), from
 * the options and from the UCX_* environment; a context UCX cannot open
 * and a bad option, each named; bad arguments; answers cut to the
 * buffer. Each case is its own process (Criterion), so the environment
 * it sets stays with it. CTest sets UCX_LOG_LEVEL=fatal: UCX reads it
 * when it loads, and the failing cases would print UCX's own errors.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/transport_ucx.h>

static void clean_env(void)
{
	cr_assert_eq(unsetenv("UCX_TLS"), 0);
	cr_assert_eq(unsetenv("UCX_NET_DEVICES"), 0);
}

TestSuite(ucx_probe, .init = clean_env, .timeout = 30);

/* Probe with options, expecting rc; the answer. */
static const char *probe(const char *options, int rc)
{
	static char buf[512];
	int got;

	memset(buf, 'x', sizeof buf);
	got = dpl_transport_ucx_probe(options, buf, sizeof buf);
	cr_assert_eq(got, rc, "%s: %s (%s)", options ? options : "NULL",
		     dpl_err_name(got), buf);
	cr_assert(memchr(buf, '\0', sizeof buf), "answer not terminated");
	if (rc != 0)
		cr_assert_str_eq(buf, dpl_last_error());
	return buf;
}

Test(ucx_probe, loopback_unless_devices_are_named)
{
	const char *a = probe(NULL, 0);

	cr_assert(strncmp(a, "UCX_TLS=", 8) == 0, "%s", a);
	cr_assert(strstr(a, ", UCX_NET_DEVICES=lo") &&
		  strlen(strstr(a, ", UCX_NET_DEVICES=lo")) == 20, "%s", a);
	cr_assert_str_eq(probe("", 0), a);
	cr_assert_eq(setenv("UCX_NET_DEVICES", "all", 1), 0);
	a = probe(NULL, 0);
	cr_assert(strstr(a, ", UCX_NET_DEVICES=all"), "%s", a);
	/* The option wins over the environment. */
	a = probe("net_devices=lo", 0);
	cr_assert(strstr(a, ", UCX_NET_DEVICES=lo"), "%s", a);
}

Test(ucx_probe, transports_from_the_options_or_the_environment)
{
	cr_assert_str_eq(probe("tls=tcp", 0),
			 "UCX_TLS=tcp, UCX_NET_DEVICES=lo");
	cr_assert_eq(setenv("UCX_TLS", "sm", 1), 0);
	cr_assert_str_eq(probe(NULL, 0), "UCX_TLS=sm, UCX_NET_DEVICES=lo");
	cr_assert_str_eq(probe("tls=tcp,sm", 0),
			 "UCX_TLS=tcp,sm, UCX_NET_DEVICES=lo");
}

Test(ucx_probe, says_why_a_context_cannot_open)
{
	const char *a = probe("tls=nosuchtransport", DPL_EIO);

	cr_assert(strstr(a, "ucp_init") && strstr(a, "nosuchtransport"), "%s",
		  a);
	cr_assert_eq(setenv("UCX_TLS", "tcp", 1), 0);
	a = probe("net_devices=nosuchdev0", DPL_EIO);
	cr_assert(strstr(a, "UCX_TLS=tcp") && strstr(a, "nosuchdev0"), "%s",
		  a);
}

Test(ucx_probe, refuses_bad_arguments)
{
	char buf[64];
	int rc;

	cr_assert(strstr(probe("nokey=1", DPL_EINVAL), "'nokey'"));
	cr_assert(strstr(probe("err_mode=sometimes", DPL_EINVAL),
			 "sometimes"));
	rc = dpl_transport_ucx_probe(NULL, NULL, 16);
	cr_assert_eq(rc, DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "buf"), "%s", dpl_last_error());
	buf[0] = 'x';
	cr_assert_eq(dpl_transport_ucx_probe(NULL, buf, 0), DPL_EINVAL);
	cr_assert_eq(buf[0], 'x', "a buffer of length 0 was written");
	/* A short buffer gets the start of the answer, terminated. */
	cr_assert_eq(dpl_transport_ucx_probe("tls=tcp", buf, 8), 0);
	cr_assert_str_eq(buf, "UCX_TLS");
}
