/*
 * mpi_probe.c - one rank of the MPI rendezvous tests (test_mpi.c starts
 * it under mpirun). Prints one line per rank:
 *   open:      dpl_bootstrap_open_mpi, then an allgather of rank * 7:
 *              "rank R world W root ROOT gather ok|bad secret S"
 *              (S: the first 16 bytes of DPL_JOB_SECRET)
 *   host=H:    dpl_bootstrap_mpi_root with host H:
 *              "rank R rc NAME msg MESSAGE"
 *   small:     dpl_bootstrap_mpi_root into a 4-byte buffer, same form.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/bootstrap_mpi.h>

static int open_and_gather(int me)
{
	dpl_bootstrap *b = NULL;
	char root[DPL_BOOTSTRAP_MPI_ROOT_MAX];
	uint32_t mine, all[64], i, n;
	int rc, bad = 0;

	rc = dpl_bootstrap_open_mpi(MPI_COMM_WORLD, 20000, &b);
	if (rc != 0) {
		printf("rank %d rc %s msg %s\n", me, dpl_err_name(rc),
		       dpl_last_error());
		return 1;
	}
	n = dpl_bootstrap_world_size(b);
	mine = dpl_bootstrap_rank(b) * 7;
	rc = n <= 64 ? dpl_bootstrap_allgather(b, &mine, sizeof mine, all)
		     : DPL_ERANGE;
	for (i = 0; rc == 0 && i < n; i++)
		bad += all[i] != i * 7;
	if (dpl_bootstrap_root(b, root, sizeof root) < 0)
		snprintf(root, sizeof root, "?");
	printf("rank %u world %u root %s gather %s secret %.16s\n",
	       dpl_bootstrap_rank(b), n, root,
	       rc == 0 && bad == 0 ? "ok" : "bad",
	       getenv("DPL_JOB_SECRET") ? getenv("DPL_JOB_SECRET") : "-");
	dpl_bootstrap_close(b);
	return rc != 0 || bad != 0;
}

static int root_only(int me, const char *host, size_t size)
{
	char root[DPL_BOOTSTRAP_MPI_ROOT_MAX];
	uint32_t rank = 0, world = 0;
	int rc;

	rc = dpl_bootstrap_mpi_root(MPI_COMM_WORLD, host, root, size, &rank,
				    &world);
	printf("rank %d rc %s msg %s\n", me, rc ? dpl_err_name(rc) : "0",
	       rc ? dpl_last_error() : root);
	return 0;
}

int main(int argc, char **argv)
{
	int me = 0, rc;

	if (argc != 2) {
		fprintf(stderr, "usage: mpi_probe open|host=H|small\n");
		return 2;
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	if (strcmp(argv[1], "open") == 0)
		rc = open_and_gather(me);
	else if (strncmp(argv[1], "host=", 5) == 0)
		rc = root_only(me, argv[1] + 5, DPL_BOOTSTRAP_MPI_ROOT_MAX);
	else
		rc = root_only(me, NULL, 4);
	fflush(stdout);
	MPI_Finalize();
	return rc;
}
