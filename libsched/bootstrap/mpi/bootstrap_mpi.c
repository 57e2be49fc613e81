/*
 * bootstrap_mpi.c - the root of dpl's TCP rendezvous agreed over an MPI
 * communicator (dpl/bootstrap_mpi.h): rank 0 takes a port on the root
 * host and holds it for its rendezvous (dpl_bootstrap_hold_root), picks
 * a job secret, and broadcasts both, or the reason it could not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <dpl/bootstrap_mpi.h>

/* What rank 0 broadcasts: the root, or the error every rank returns. */
struct verdict {
	int32_t code;
	char root[DPL_BOOTSTRAP_MPI_ROOT_MAX];
	char msg[400];
	char secret[1025]; /* DPL_JOB_SECRET for every rank */
};

/* Rank 0: its DPL_JOB_SECRET, else 64 hex digits of getrandom(). */
static void pick_secret(struct verdict *v)
{
	const char *s = getenv("DPL_JOB_SECRET");
	unsigned char key[32];
	size_t got = 0, i;
	int tries;

	if (s != NULL && strlen(s) < sizeof v->secret) {
		memcpy(v->secret, s, strlen(s) + 1);
		return;
	}
	for (tries = 0; got < sizeof key && tries < 64; tries++) {
		ssize_t k = getrandom(key + got, sizeof key - got, 0);

		if (k > 0)
			got += (size_t)k;
		else if (k < 0 && errno != EINTR)
			break;
	}
	if (got < sizeof key) {
		v->code = DPL_EIO;
		snprintf(v->msg, sizeof v->msg, "bootstrap over MPI: no random "
			 "bytes for the job secret: %s", strerror(errno));
		return;
	}
	for (i = 0; i < sizeof key; i++)
		snprintf(v->secret + 2 * i, 3, "%02x", key[i]);
}

static int mpi_error(int mrc, const char *what)
{
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;

	if (MPI_Error_string(mrc, s, &n) != MPI_SUCCESS)
		snprintf(s, sizeof s, "MPI error %d", mrc);
	return dpl_set_error(DPL_EIO, "bootstrap over MPI: %s failed: %s",
			     what, s);
}

/* Whether every rank of comm shares rank 0's node; collective. */
static int one_node(MPI_Comm comm, int world, int *one)
{
	MPI_Comm node = MPI_COMM_NULL;
	int mrc, n = 0, here = 0, all = 0;

	mrc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0,
				  MPI_INFO_NULL, &node);
	if (mrc != MPI_SUCCESS)
		return mpi_error(mrc, "MPI_Comm_split_type");
	mrc = MPI_Comm_size(node, &n);
	MPI_Comm_free(&node);
	if (mrc != MPI_SUCCESS)
		return mpi_error(mrc, "MPI_Comm_size");
	here = n == world;
	/* Every rank sees the same answer (a rank on another node sees a
	 * smaller node communicator, and so may rank 0's node). */
	mrc = MPI_Allreduce(&here, &all, 1, MPI_INT, MPI_LAND, comm);
	if (mrc != MPI_SUCCESS)
		return mpi_error(mrc, "MPI_Allreduce");
	*one = all;
	return 0;
}

/* Rank 0: hold a port on host for its own rendezvous; fills v. */
static void pick(const char *host, struct verdict *v)
{
	const char *why;

	if (dpl_bootstrap_hold_root(host, v->root, sizeof v->root) != 0) {
		why = dpl_last_error();
		if (strncmp(why, "bootstrap: ", 11) == 0)
			why += 11;
		v->code = DPL_EIO;
		snprintf(v->msg, sizeof v->msg, "bootstrap over MPI: %s", why);
	}
}

int dpl_bootstrap_mpi_root(MPI_Comm comm, const char *host, char *root,
			   size_t size, uint32_t *rank, uint32_t *world_size)
{
	struct verdict *v;
	char name[256];
	int up = 0, down = 0, me = 0, n = 0, one = 0, mrc, rc;

	if (comm == MPI_COMM_NULL || root == NULL || rank == NULL ||
	    world_size == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap over MPI: %s is "
				     "NULL", comm == MPI_COMM_NULL ? "comm"
				     : root == NULL ? "root"
				     : rank == NULL ? "rank" : "world_size");
	if (MPI_Initialized(&up) != MPI_SUCCESS || !up ||
	    MPI_Finalized(&down) != MPI_SUCCESS || down)
		return dpl_set_error(DPL_EINVAL, "bootstrap over MPI: MPI is "
				     "%s", down ? "finalized" : "not "
				     "initialized (call MPI_Init first)");
	if ((mrc = MPI_Comm_rank(comm, &me)) != MPI_SUCCESS)
		return mpi_error(mrc, "MPI_Comm_rank");
	if ((mrc = MPI_Comm_size(comm, &n)) != MPI_SUCCESS)
		return mpi_error(mrc, "MPI_Comm_size");
	if (host == NULL && (rc = one_node(comm, n, &one)) != 0)
		return rc;
	v = calloc(1, sizeof *v);
	if (v == NULL)
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	if (me == 0) {
		if (host == NULL && one)
			host = "127.0.0.1";
		if (host == NULL)
			host = getenv("DPL_MPI_ROOT_HOST");
		if (host == NULL || host[0] == '\0') {
			if (gethostname(name, sizeof name) != 0)
				snprintf(name, sizeof name, "localhost");
			name[sizeof name - 1] = '\0';
			host = name;
		}
		pick(host, v);
		if (v->code == 0)
			pick_secret(v);
		if (v->code != 0 && v->root[0] != '\0') {
			dpl_bootstrap_release_root(v->root);
			v->root[0] = '\0';
		}
	}
	mrc = MPI_Bcast(v, (int)sizeof *v, MPI_BYTE, 0, comm);
	if (mrc != MPI_SUCCESS) {
		if (me == 0 && v->root[0] != '\0')
			dpl_bootstrap_release_root(v->root);
		memset(v->secret, 0, sizeof v->secret);
		free(v);
		return mpi_error(mrc, "MPI_Bcast");
	}
	v->msg[sizeof v->msg - 1] = '\0';
	v->root[sizeof v->root - 1] = '\0';
	if (v->code != 0)
		rc = dpl_set_error(v->code, "%s", v->msg);
	else if (strlen(v->root) >= size)
		rc = dpl_set_error(DPL_ERANGE, "bootstrap over MPI: root "
				   "'%s' needs %zu bytes, the buffer has %zu",
				   v->root, strlen(v->root) + 1, size);
	else
		rc = 0;
	v->secret[sizeof v->secret - 1] = '\0';
	if (rc == 0 && setenv("DPL_JOB_SECRET", v->secret, 1) != 0)
		rc = dpl_set_error(DPL_ENOMEM, "bootstrap over MPI: cannot set "
				   "DPL_JOB_SECRET: %s", strerror(errno));
	if (rc == 0) {
		memcpy(root, v->root, strlen(v->root) + 1);
		*rank = (uint32_t)me;
		*world_size = (uint32_t)n;
	}
	/* Rank 0 holds the root's socket for its dpl_bootstrap_open(),
	 * unless this call fails there. */
	if (rc != 0 && me == 0 && v->root[0] != '\0')
		dpl_bootstrap_release_root(v->root);
	memset(v->secret, 0, sizeof v->secret);
	free(v);
	return rc;
}

int dpl_bootstrap_open_mpi(MPI_Comm comm, uint32_t timeout_ms,
			   dpl_bootstrap **out)
{
	struct dpl_bootstrap_params p;
	char root[DPL_BOOTSTRAP_MPI_ROOT_MAX];
	int rc;

	if (out == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap over MPI: out is "
				     "NULL");
	memset(&p, 0, sizeof p);
	rc = dpl_bootstrap_mpi_root(comm, NULL, root, sizeof root, &p.rank,
				    &p.world_size);
	if (rc != 0)
		return rc;
	p.root = root;
	p.timeout_ms = timeout_ms;
	rc = dpl_bootstrap_open(&p, out);
	if (rc != 0 && p.rank == 0) {
		/* An open that failed before it listened leaves the root
		 * held: release it, keeping the open's error. */
		char msg[512];

		snprintf(msg, sizeof msg, "%s", dpl_last_error());
		(void)dpl_bootstrap_release_root(root);
		dpl_set_error(rc, "%s", msg);
	}
	return rc;
}
