/*
 * mpi_probe.c - one rank of the MPI rendezvous tests (test_mpi.c starts
 * it under mpirun). Prints one line per rank:
 *   open:      dpl_bootstrap_open_mpi, then an allgather of rank * 7:
 *              "rank R world W root ROOT gather ok|bad secret S"
 *              (S: the first 16 bytes of DPL_JOB_SECRET)
 *   host=H:    dpl_bootstrap_mpi_root with host H:
 *              "rank R rc NAME msg MESSAGE"
 *   small:     dpl_bootstrap_mpi_root into a 4-byte buffer, same form.
 *   held:      dpl_bootstrap_mpi_root, then rank 0 tries to bind the
 *              root's port with a socket of its own, then every rank
 *              opens at the root it was given (dpl_bootstrap_open):
 *              "rank R bind E open ok|NAME" (E: the bind's errno name,
 *              or "ok" when the bind succeeded; "-" on other ranks)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* Bind 127.0.0.1:port with SO_REUSEADDR; "ok" or the errno's name. */
static const char *try_bind(const char *root)
{
	struct sockaddr_in a;
	unsigned port = 0;
	int fd, one = 1, err = 0;

	if (sscanf(root, "127.0.0.1:%u", &port) != 1)
		return "not-loopback";
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return "no-socket";
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0)
		err = errno;
	close(fd);
	return err == 0 ? "ok" : err == EADDRINUSE ? "EADDRINUSE" : "other";
}

static int held(int me)
{
	struct dpl_bootstrap_params p;
	char root[DPL_BOOTSTRAP_MPI_ROOT_MAX];
	const char *bound = "-";
	dpl_bootstrap *b = NULL;
	int rc;

	memset(&p, 0, sizeof p);
	rc = dpl_bootstrap_mpi_root(MPI_COMM_WORLD, NULL, root, sizeof root,
				    &p.rank, &p.world_size);
	if (rc == 0 && me == 0)
		bound = try_bind(root);
	if (rc == 0) {
		p.root = root;
		p.timeout_ms = 20000;
		rc = dpl_bootstrap_open(&p, &b);
	}
	printf("rank %d bind %s open %s\n", me, bound,
	       rc == 0 ? "ok" : dpl_err_name(rc));
	if (rc != 0)
		printf("rank %d says %s\n", me, dpl_last_error());
	dpl_bootstrap_close(b);
	return rc != 0;
}

int main(int argc, char **argv)
{
	int me = 0, rc;

	if (argc != 2) {
		fprintf(stderr, "usage: mpi_probe open|held|host=H|small\n");
		return 2;
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	if (strcmp(argv[1], "open") == 0)
		rc = open_and_gather(me);
	else if (strcmp(argv[1], "held") == 0)
		rc = held(me);
	else if (strncmp(argv[1], "host=", 5) == 0)
		rc = root_only(me, argv[1] + 5, DPL_BOOTSTRAP_MPI_ROOT_MAX);
	else
		rc = root_only(me, NULL, 4);
	fflush(stdout);
	MPI_Finalize();
	return rc;
}
