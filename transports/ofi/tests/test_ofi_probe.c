/*
 * test_ofi_probe.c - dpl_transport_ofi_probe(): it names the entry init
 * took (same provider, fabric and domain) over shm and over tcp;ofi_rxm,
 * it says why when libfabric has nothing usable (FI_PROVIDER, an unknown
 * provider), it refuses bad arguments before touching libfabric, and it
 * cuts its answer to the buffer.
 *
 * Probes that reach libfabric run in ranks (ofi_harness.h), so that the
 * test process never initialises it.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "ofi_harness.h"
#include "ofi_internal.h"

/* The probe, on the provider and node this rank opened with, answers
 * with the entry init took. */
static void probe_matches_open(struct tj_rank *r)
{
	const struct ofi_ctx *c = ofi_ctx(r);
	const char *prov = dpl__ofi_provider(ofi_ctx(r));
	const struct fi_info *fi = c->info;
	bool shm = strcmp(prov, "shm") == 0;
	char buf[256], want[256];
	int rc;

	rc = dpl_transport_ofi_probe(prov, shm ? NULL : "127.0.0.1", buf,
				     sizeof buf);
	CHECK(r, rc == 0, "%s: %s (%s)", prov, dpl_err_name(rc), buf);
	snprintf(want, sizeof want, "provider %s, fabric %s, domain %s",
		 fi->fabric_attr->prov_name, fi->fabric_attr->name,
		 fi->domain_attr->name);
	CHECK(r, strcmp(buf, want) == 0, "probe '%s', open took '%s'", buf,
	      want);
	/* What init pins a loopback node to, independently of the above. */
	if (!shm)
		CHECK(r, strcmp(fi->domain_attr->name, "lo") == 0,
		      "domain '%s'", fi->domain_attr->name);
	/* A short buffer gets the start of the answer, terminated. */
	rc = dpl_transport_ofi_probe(prov, shm ? NULL : "127.0.0.1", buf, 10);
	CHECK(r, rc == 0 && strlen(buf) == 9 &&
		 strncmp(buf, want, 9) == 0, "cut answer '%s'", buf);
}

OFI_TEST(probe_names_the_entry_init_took, 60)
{
	char buf[4096];
	const char *why = ofi_run(prov, 1, probe_matches_open, NULL, NULL,
				  buf, sizeof buf);

	cr_assert_null(why, "%s: %s", prov, why);
}

/* With FI_PROVIDER=tcp;ofi_rxm libfabric hides shm; a provider it does
 * not have is named. */
static void probe_refusals(struct tj_rank *r)
{
	char buf[256];
	int rc;

	rc = dpl_transport_ofi_probe("shm", NULL, buf, sizeof buf);
	CHECK(r, rc == DPL_ENOTSUP, "shm: %s", dpl_err_name(rc));
	CHECK(r, strstr(buf, "'shm'") && strstr(buf, "FI_PROVIDER=tcp;ofi_rxm"),
	      "%s", buf);
	CHECK(r, strcmp(buf, dpl_last_error()) == 0, "'%s' against '%s'", buf,
	      dpl_last_error());
	rc = dpl_transport_ofi_probe("nosuchprovider", "127.0.0.1", buf,
				     sizeof buf);
	CHECK(r, rc == DPL_ENOTSUP, "nosuchprovider: %s", dpl_err_name(rc));
	CHECK(r, strstr(buf, "'nosuchprovider'") && strstr(buf, "127.0.0.1"),
	      "%s", buf);
	/* Still usable: the one FI_PROVIDER allows. */
	rc = dpl_transport_ofi_probe("tcp;ofi_rxm", "127.0.0.1", buf,
				     sizeof buf);
	CHECK(r, rc == 0 && strstr(buf, "domain lo"), "%s: %s",
	      dpl_err_name(rc), buf);
}

Test(ofi_tcp, probe_says_why_nothing_is_usable, .timeout = 60)
{
	struct ofi_job j;

	ofi_job_init(&j, "tcp;ofi_rxm", 1, probe_refusals);
	j.env[0] = "FI_PROVIDER=tcp;ofi_rxm";
	cr_assert_eq(ofi_job_run(&j), 0, "%s", j.tj.report);
	tj_job_free(&j.tj);
}

/* Refused before libfabric is touched, so these run in the test. */
Test(ofi_probe, refuses_bad_arguments)
{
	static const struct {
		const char *prov;
		int code;
		const char *named;
	} bad[] = {
		{NULL, DPL_EINVAL, "no provider"},
		{"", DPL_EINVAL, "no provider"},
		{"tcp,shm", DPL_EINVAL, "'tcp,shm'"},
		{"^shm", DPL_EINVAL, "'^shm'"},
		{"sockets", DPL_ENOTSUP, "'sockets'"},
		{"sockets;ofi_rxm", DPL_ENOTSUP, "'sockets;ofi_rxm'"},
	};
	char buf[256];
	size_t k;
	int rc;

	for (k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		memset(buf, 'x', sizeof buf);
		rc = dpl_transport_ofi_probe(bad[k].prov, NULL, buf,
					     sizeof buf);
		cr_assert_eq(rc, bad[k].code, "%s: %s",
			     bad[k].prov ? bad[k].prov : "NULL",
			     dpl_err_name(rc));
		cr_assert(strstr(buf, bad[k].named), "%s", buf);
		cr_assert_str_eq(buf, dpl_last_error());
	}
	/* A short buffer gets the start of the message, terminated. */
	rc = dpl_transport_ofi_probe("tcp,shm", NULL, buf, 8);
	cr_assert_eq(rc, DPL_EINVAL);
	cr_assert_eq(strlen(buf), 7);
	cr_assert(strncmp(buf, dpl_last_error(), 7) == 0, "%s", buf);
	/* No room for an answer. */
	rc = dpl_transport_ofi_probe("shm", NULL, NULL, 16);
	cr_assert_eq(rc, DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "buf"), "%s", dpl_last_error());
	buf[0] = 'x';
	rc = dpl_transport_ofi_probe("shm", NULL, buf, 0);
	cr_assert_eq(rc, DPL_EINVAL);
	cr_assert_eq(buf[0], 'x', "a buffer of length 0 was written");
}
