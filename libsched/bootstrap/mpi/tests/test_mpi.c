/*
 * test_mpi.c - the rendezvous under mpirun: ranks agree on one root over
 * MPI and meet there; errors reach every rank; `dpl train` started by
 * mpirun joins as the rank MPI gives it and trains the same weights as
 * `dpl train --nprocs`. Every job runs on loopback only.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_run.h"

#ifndef DPL_MPIEXEC
#error "DPL_MPIEXEC must name mpiexec"
#endif

static char dir[] = "/tmp/dpl-mpi-XXXXXX";
static bool open_mpi;

static void setup(void)
{
	struct cli_res *r = malloc(sizeof *r);
	const char *const v[] = {"--version", NULL};

	cr_assert_not_null(mkdtemp(dir));
	/* Open MPI refuses root unless told; this suite may run as root. */
	setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
	setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
	cli_spawn(r, dir, DPL_MPIEXEC, v);
	open_mpi = r->code == 0 && (strstr(r->out, "Open MPI") != NULL ||
				    strstr(r->out, "OpenRTE") != NULL ||
				    strstr(r->out, "open-mpi.org") != NULL);
	free(r);
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(mpi, .init = setup, .fini = teardown, .timeout = 120);

/*
 * mpirun -np N (Open MPI, loopback only) followed by cmd. Open MPI keeps
 * memory until exit in components it has unloaded by then, which
 * LeakSanitizer cannot name or suppress: leak checking is off in the
 * ranks started here (in a sanitizer build; the same dpl code is
 * leak-checked by the --nprocs tests).
 */
static void mpirun(struct cli_res *r, const char *np,
		   const char *const *cmd)
{
	const char *a[64] = {
		"--oversubscribe", "--mca", "oob_tcp_if_include", "lo",
		"--mca", "btl", "self,vader", "--mca", "pml", "ob1",
		"-x", "UCX_NET_DEVICES=lo", "-x", "FI_TCP_IFACE=lo",
		"-x", "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1",
		"-np", np};
	size_t n = 18, i;

	if (!open_mpi)
		cr_skip_test("%s is not Open MPI's", DPL_MPIEXEC);
	for (i = 0; cmd[i] != NULL && n < 63; i++)
		a[n++] = cmd[i];
	a[n] = NULL;
	cli_spawn(r, dir, DPL_MPIEXEC, a);
}

/* The lines of r->out that start with "rank <k> ", k < n, in lines[k]. */
static void by_rank(const struct cli_res *r, char (*lines)[512], int n)
{
	const char *p = r->out;
	int k, seen = 0;

	for (k = 0; k < n; k++)
		lines[k][0] = '\0';
	while ((p = strstr(p, "rank ")) != NULL) {
		const char *e = strchr(p, '\n');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if (sscanf(p, "rank %d ", &k) == 1 && k >= 0 && k < n &&
		    len < 512) {
			cr_assert_eq(lines[k][0], '\0', "rank %d twice:\n%s",
				     k, r->out);
			memcpy(lines[k], p, len);
			lines[k][len] = '\0';
			seen++;
		}
		p += len;
	}
	cr_assert_eq(seen, n, "%d of %d ranks reported:\n%s\n%s", seen, n,
		     r->out, r->err);
}

Test(mpi, three_ranks_meet_at_one_root)
{
	struct cli_res *r = malloc(sizeof *r);
	const char *const cmd[] = {DPL_MPI_PROBE, "open", NULL};
	char lines[3][512], root[3][300], secret[3][17];
	unsigned rank, world;
	int k;

	mpirun(r, "3", cmd);
	cr_assert_eq(r->code, 0, "%s\n%s", r->out, r->err);
	by_rank(r, lines, 3);
	for (k = 0; k < 3; k++) {
		char gather[8];

		cr_assert_eq(sscanf(lines[k], "rank %u world %u root %299s "
				    "gather %7s secret %16s", &rank, &world,
				    root[k], gather, secret[k]),
			     5, "%s", lines[k]);
		/* Rank 0's secret reached every rank. */
		cr_expect_eq(strlen(secret[k]), 16u, "%s", lines[k]);
		cr_expect_str_eq(secret[k], secret[0]);
		cr_expect_eq(world, 3);
		cr_expect_str_eq(gather, "ok", "%s", lines[k]);
		/* One node: the root is on loopback. */
		cr_expect(strncmp(root[k], "127.0.0.1:", 10) == 0, "%s",
			  lines[k]);
		cr_expect_str_eq(root[k], root[0]);
	}
	free(r);
}

/* Rank 0 holds the root's port from the moment it chooses it: a socket
 * of its own cannot bind it, and the rendezvous at that root (an
 * explicit root, as a transport's `bootstrap` field gives it) still
 * meets on the held socket. */
Test(mpi, rank0_holds_the_root_port_until_it_meets_there)
{
	struct cli_res *r = malloc(sizeof *r);
	const char *const cmd[] = {DPL_MPI_PROBE, "held", NULL};
	char lines[2][512];

	mpirun(r, "2", cmd);
	cr_assert_eq(r->code, 0, "%s\n%s", r->out, r->err);
	by_rank(r, lines, 2);
	cr_expect(strstr(lines[0], "bind EADDRINUSE open ok") != NULL, "%s",
		  lines[0]);
	cr_expect(strstr(lines[1], "bind - open ok") != NULL, "%s",
		  lines[1]);
	free(r);
}

/* Run the probe in `mode` on 2 ranks; each must fail with `code` and a
 * message containing `what`. */
static void fails_on_every_rank(const char *mode, const char *code,
				const char *what)
{
	struct cli_res *r = malloc(sizeof *r);
	const char *const cmd[] = {DPL_MPI_PROBE, mode, NULL};
	char lines[2][512], rc[64];
	int k;

	snprintf(rc, sizeof rc, "rc %s ", code);
	mpirun(r, "2", cmd);
	by_rank(r, lines, 2);
	for (k = 0; k < 2; k++) {
		cr_expect(strstr(lines[k], rc) != NULL, "%s", lines[k]);
		cr_expect(strstr(lines[k], what) != NULL, "%s", lines[k]);
	}
	free(r);
}

Test(mpi, a_host_that_does_not_resolve_fails_on_every_rank)
{
	fails_on_every_rank("host=no-such-host.invalid", "DPL_EIO",
			    "cannot resolve root host 'no-such-host.invalid'");
}

Test(mpi, a_buffer_too_small_is_erange_naming_the_size)
{
	fails_on_every_rank("small", "DPL_ERANGE", "the buffer has 4");
}

#ifdef DPL_CLI_PATH
/* The "weights_digest" value of `dpl train --json` output, in d[17]. */
static void digest(const char *out, char *d)
{
	const char *p = strstr(out, "\"weights_digest\"");

	cr_assert_not_null(p, "no weights_digest in:\n%s", out);
	p = strchr(p + 16, '"');
	cr_assert_not_null(p);
	cr_assert_eq(sscanf(p + 1, "%16[0-9a-f]", d), 1, "%s", p);
}

static void train_matches_nprocs(const char *transport)
{
	struct cli_res *r = malloc(sizeof *r);
	const char *const mp[] = {DPL_CLI_PATH, "train", "--transport",
				  transport, "--check", "--json", NULL};
	const char *const np[] = {"train", "--nprocs", "4", "--transport",
				  transport, "--json", NULL};
	char a[17], b[17];
	const char *p;

	mpirun(r, "4", mp);
	cr_assert_eq(r->code, 0, "%s", r->err);
	digest(r->out, a);
	p = strstr(r->out, "\"max_rel_diff\"");
	cr_assert_not_null(p, "%s", r->out);
	p = strchr(p, ':');
	cr_expect_leq(strtod(p + 1, NULL), 1e-5, "%s", p);
	cli_run(r, dir, np);
	cr_assert_eq(r->code, 0, "%s", r->err);
	digest(r->out, b);
	cr_expect_str_eq(a, b, "mpirun %s, --nprocs %s", a, b);
	free(r);
}

Test(mpi, dpl_train_under_mpirun_over_shm)
{
	train_matches_nprocs("shm");
}

#ifdef DPL_HAVE_TRANSPORT_UCX
Test(mpi, dpl_train_under_mpirun_over_ucx)
{
	train_matches_nprocs("ucx");
}
#endif

#ifdef DPL_HAVE_TRANSPORT_OFI
Test(mpi, dpl_train_under_mpirun_over_ofi)
{
	train_matches_nprocs("ofi");
}
#endif
#endif /* DPL_CLI_PATH */
