/*
 * launch.c - local multi-process launch for `dpl train --nprocs N`: pick a
 * free loopback port for the rendezvous, fork and exec one process per
 * rank with a fresh job secret, wait for them with a bound once one
 * failed, and say which rank failed first.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <dirent.h>

#include <dpl/backend.h>
#ifdef DPL_HAVE_MPI
#include <dpl/bootstrap_mpi.h>
#endif

#include "cli.h"
#include "launch.h"

/* A signal that asks the launcher to stop, forwarded to the ranks. */
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
	stop_signal = sig;
}

/* Seconds of the monotonic clock. */
static double now_s(void)
{
	return (double)dpl_clock_ns() / 1e9;
}

/* A port on 127.0.0.1 nobody listens on right now. */
static int free_port(unsigned *port)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	close(fd);
	return 0;
}

static int env_u32(const char *cmd, const char *name, uint32_t min,
		   uint32_t *out)
{
	const char *v = getenv(name);
	char *end;
	unsigned long x;

	errno = 0;
	x = v ? strtoul(v, &end, 10) : 0;
	if (v == NULL || v[0] < '0' || v[0] > '9' || *end != '\0' ||
	    errno != 0 || x > UINT32_MAX || x < min) {
		fprintf(stderr, "dpl %s: %s='%s' is not a number >= %u\n", cmd,
			name, v ? v : "", min);
		return CLI_USAGE;
	}
	*out = (uint32_t)x;
	return 0;
}

/* The variable that says an MPI launcher started us, or NULL. */
static const char *mpi_launcher(void)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE",
					   "PMIX_RANK", "PMI_SIZE"};
	size_t i;

	for (i = 0; i < sizeof vars / sizeof vars[0]; i++)
		if (getenv(vars[i]) != NULL)
			return vars[i];
	return NULL;
}

/* Under an MPI launcher: agree on the root over MPI, then leave MPI and
 * put the rank, world size and root into the environment. */
static int mpi_join(const char *cmd, const char *var)
{
#ifdef DPL_HAVE_MPI
	char root[DPL_BOOTSTRAP_MPI_ROOT_MAX], v[32];
	uint32_t rank = 0, world = 0;
	int rc;

	if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
		fprintf(stderr, "dpl %s: started by an MPI launcher (%s is "
			"set) but MPI_Init failed\n", cmd, var);
		return CLI_FAIL;
	}
	rc = dpl_bootstrap_mpi_root(MPI_COMM_WORLD, NULL, root, sizeof root,
				    &rank, &world);
	if (rc != 0)
		fprintf(stderr, "dpl %s: %s\n", cmd, dpl_last_error());
	/* MPI's part is over: the command's bootstrap meets at the root. */
	MPI_Finalize();
	if (rc != 0)
		return CLI_FAIL;
	snprintf(v, sizeof v, "%u", rank);
	setenv("DPL_RANK", v, 1);
	snprintf(v, sizeof v, "%u", world);
	setenv("DPL_WORLD_SIZE", v, 1);
	setenv("DPL_ROOT", root, 1);
	return 0;
#else
	fprintf(stderr, "dpl %s: started by an MPI launcher (%s is set), "
		"but this dpl is built without MPI: rebuild with "
		"-DDPL_WITH_MPI=ON (Open MPI: libopenmpi-dev), or give each "
		"rank DPL_RANK, DPL_WORLD_SIZE and DPL_ROOT\n", cmd, var);
	return CLI_FAIL;
#endif
}

int cli_launch_env(const char *cmd, bool *found, uint32_t *rank,
		   uint32_t *world)
{
	const char *r = "DPL_RANK", *w = "DPL_WORLD_SIZE", *mpi;
	int rc;

	*found = false;
	if (getenv(r) == NULL && getenv(w) == NULL) {
		r = "RANK";
		w = "WORLD_SIZE";
	}
	if (getenv(r) == NULL && getenv(w) == NULL) {
		if ((mpi = mpi_launcher()) == NULL)
			return CLI_OK;
		if ((rc = mpi_join(cmd, mpi)) != 0)
			return rc;
		r = "DPL_RANK";
		w = "DPL_WORLD_SIZE";
	}
	if ((rc = env_u32(cmd, r, 0, rank)) != 0 ||
	    (rc = env_u32(cmd, w, 1, world)) != 0)
		return rc;
	if (*rank >= *world) {
		fprintf(stderr, "dpl %s: %s=%u is outside a world of %s=%u\n",
			cmd, r, *rank, w, *world);
		return CLI_USAGE;
	}
	*found = true;
	return CLI_OK;
}

/* 32 random bytes as 64 hex digits into hex (65 bytes): the job secret
 * that the ranks prove to each other (DPL_JOB_SECRET, dpl/bootstrap.h). */
static int job_secret(char *hex)
{
	unsigned char key[32];
	size_t got = 0;
	int tries;

	for (tries = 0; got < sizeof key && tries < 64; tries++) {
		ssize_t k = getrandom(key + got, sizeof key - got, 0);

		if (k > 0)
			got += (size_t)k;
		else if (k < 0 && errno != EINTR)
			return -1;
	}
	if (got < sizeof key)
		return -1;
	for (got = 0; got < sizeof key; got++)
		snprintf(hex + 2 * got, 3, "%02x", key[got]);
	return 0;
}

static void child(const struct cli_launch *p, const char *exe,
		  uint32_t rank, unsigned port, pid_t parent,
		  const char *secret)
{
	char v[64];

	/* Die with the launcher: no rank outlives it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(CLI_FAIL);
	snprintf(v, sizeof v, "%u", rank);
	setenv("DPL_RANK", v, 1);
	snprintf(v, sizeof v, "%u", p->nprocs);
	setenv("DPL_WORLD_SIZE", v, 1);
	snprintf(v, sizeof v, "127.0.0.1:%u", port);
	setenv("DPL_ROOT", v, 1);
	/* A fresh secret per job: only its own ranks join its rendezvous. */
	setenv("DPL_JOB_SECRET", secret, 1);
	/* Loopback only, unless the user chose otherwise. */
	setenv("UCX_NET_DEVICES", "lo", 0);
	setenv("FI_TCP_IFACE", "lo", 0);
	/* stdout carries rank 0's report; UCX logs there by default. */
	setenv("UCX_LOG_FILE", "stderr", 0);
	execv(exe, p->argv);
	fprintf(stderr, "dpl: rank %u: cannot run %s: %s\n", rank, exe,
		strerror(errno));
	_exit(CLI_FAIL);
}

static int write_pid(const char *cmd, const char *dir, uint32_t rank,
		     pid_t pid)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/rank-%u.pid", dir, rank);
	f = fopen(path, "w");
	if (f != NULL) {
		bool bad = fprintf(f, "%ld\n", (long)pid) < 0;

		/* fclose always releases the stream, also when it fails. */
		if (fclose(f) != 0 || bad)
			f = NULL;
	}
	if (f == NULL)
		return cli_fail(cmd, "--pid-dir %s: %s: %s", dir, path,
				strerror(errno));
	return 0;
}

struct proc {
	pid_t pid;
	int status; /* waitpid status, valid when done */
	bool done;
	bool killed; /* by the launcher, past the grace period */
};

static bool failed(const struct proc *c)
{
	return c->done && !(WIFEXITED(c->status) && WEXITSTATUS(c->status) ==
							    CLI_OK);
}

static void describe(const struct proc *c, char *buf, size_t size)
{
	if (c->killed)
		snprintf(buf, size, "did not exit in time and was killed");
	else if (WIFSIGNALED(c->status))
		snprintf(buf, size, "was killed by signal %d (%s)",
			 WTERMSIG(c->status), strsignal(WTERMSIG(c->status)));
	else if (WEXITSTATUS(c->status) == CLI_PEER_FAILED)
		snprintf(buf, size, "stopped because another rank failed");
	else
		snprintf(buf, size, "failed (exit status %d)",
			 WEXITSTATUS(c->status));
}

/*
 * Remove what a killed rank left in /dev/shm: dpl's shared-memory
 * segments (dpl-*-p<pid>) and libfabric shm's "<pid>:<uid>:<n>" files.
 * Only names that carry the pid of our own reaped child.
 */
static void sweep_shm(pid_t pid)
{
	char a[32], b[32];
	size_t la, lb, len;
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	int fd;

	if (d == NULL)
		return;
	fd = dirfd(d);
	la = (size_t)snprintf(a, sizeof a, "%ld:", (long)pid);
	lb = (size_t)snprintf(b, sizeof b, "-p%ld", (long)pid);
	while ((e = readdir(d)) != NULL) {
		len = strlen(e->d_name);
		if (strncmp(e->d_name, a, la) == 0 ||
		    (strncmp(e->d_name, "dpl-", 4) == 0 && len > lb &&
		     strcmp(e->d_name + len - lb, b) == 0))
			unlinkat(fd, e->d_name, 0);
	}
	closedir(d);
}

int cli_launch_run(const char *cmd, const struct cli_launch *p)
{
	struct proc *c = calloc(p->nprocs, sizeof *c);
	struct timespec tick = {0, 5000000};
	double deadline = 0;
	uint32_t i, left = p->nprocs, first = UINT32_MAX, nfail = 0;
	unsigned port;
	int rc = CLI_OK;
	static const int stops[3] = {SIGINT, SIGTERM, SIGHUP};
	struct sigaction sa, old[3];
	bool forwarded = false;
	char why[128], exe[4096], secret[65];
	pid_t self = getpid();
	ssize_t n;

	if (c == NULL)
		return cli_fail(cmd, "out of memory");
	/* This program's own file (resolved here, so that tools that run it
	 * under their control, such as valgrind, see the real one). */
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0) {
		free(c);
		return cli_fail(cmd, "/proc/self/exe: %s", strerror(errno));
	}
	exe[n] = '\0';
	if (job_secret(secret) != 0) {
		free(c);
		return cli_fail(cmd, "no random bytes for the job secret: %s",
				strerror(errno));
	}
	if (free_port(&port) != 0) {
		free(c);
		return cli_fail(cmd, "no free port on 127.0.0.1: %s",
				strerror(errno));
	}
	fflush(NULL);
	for (i = 0; i < p->nprocs; i++) {
		c[i].pid = fork();
		if (c[i].pid == 0)
			child(p, exe, i, port, self, secret);
		if (c[i].pid < 0) {
			rc = cli_fail(cmd, "cannot start rank %u: %s", i,
				      strerror(errno));
			break;
		}
		if (p->pid_dir && rc == CLI_OK)
			rc = write_pid(cmd, p->pid_dir, i, c[i].pid);
	}
	if (rc != CLI_OK) {
		/* Nothing ran to completion: stop what started. */
		for (i = 0; i < p->nprocs; i++)
			if (c[i].pid > 0)
				kill(c[i].pid, SIGKILL);
		for (i = 0; i < p->nprocs; i++)
			if (c[i].pid > 0)
				waitpid(c[i].pid, NULL, 0);
		free(c);
		return rc;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < 3; i++)
		sigaction(stops[i], &sa, &old[i]);
	while (left > 0) {
		bool progress = false;

		if (stop_signal != 0 && !forwarded) {
			/* Interrupted: pass it on, then wait as for a
			 * failure. */
			for (i = 0; i < p->nprocs; i++)
				if (!c[i].done)
					kill(c[i].pid, stop_signal);
			forwarded = true;
			if (deadline == 0)
				deadline = now_s() + p->grace_s;
		}
		for (i = 0; i < p->nprocs; i++) {
			pid_t w;

			if (c[i].done)
				continue;
			w = waitpid(c[i].pid, &c[i].status, WNOHANG);
			if (w == 0 || (w < 0 && errno == EINTR))
				continue;
			c[i].done = true;
			left--;
			progress = true;
			if (!failed(&c[i]))
				continue;
			nfail++;
			/* The first rank that failed itself (not as the echo
			 * of another's failure) is the one to name. */
			if (first == UINT32_MAX ||
			    (WIFEXITED(c[first].status) &&
			     WEXITSTATUS(c[first].status) == CLI_PEER_FAILED &&
			     !(WIFEXITED(c[i].status) &&
			       WEXITSTATUS(c[i].status) == CLI_PEER_FAILED)))
				first = i;
			if (deadline == 0)
				deadline = now_s() + p->grace_s;
		}
		if (left > 0 && deadline != 0 && now_s() > deadline) {
			for (i = 0; i < p->nprocs; i++)
				if (!c[i].done) {
					kill(c[i].pid, SIGKILL);
					waitpid(c[i].pid, &c[i].status, 0);
					c[i].done = c[i].killed = true;
					nfail++;
					left--;
				}
		}
		if (left > 0 && !progress)
			nanosleep(&tick, NULL);
	}
	for (i = 0; i < 3; i++)
		sigaction(stops[i], &old[i], NULL);
	for (i = 0; i < p->nprocs; i++)
		if (WIFSIGNALED(c[i].status) || c[i].killed)
			sweep_shm(c[i].pid);
	if (forwarded)
		fprintf(stderr, "dpl %s: stopped by signal %d (%s), passed on "
			"to every rank\n", cmd, (int)stop_signal,
			strsignal(stop_signal));
	if (nfail > 0) {
		for (i = 0; i < p->nprocs; i++)
			if (failed(&c[i]) && i != first) {
				describe(&c[i], why, sizeof why);
				fprintf(stderr,
					"dpl %s: rank %u (pid %ld) %s\n", cmd,
					i, (long)c[i].pid, why);
			}
		describe(&c[first], why, sizeof why);
		rc = cli_fail(cmd, "rank %u (pid %ld) %s; %u of %u ranks "
			      "exited with an error", first,
			      (long)c[first].pid, why, nfail, p->nprocs);
	}
	free(c);
	return rc;
}
