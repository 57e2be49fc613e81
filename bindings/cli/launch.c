/*
 * launch.c - local multi-process launch for `dpl train --nprocs N`: listen
 * on a loopback port for the rendezvous (rank 0 inherits the socket),
 * fork and exec one process per rank with a fresh job secret and the
 * cause pipe, and wait for them with a bound once one failed or stopped;
 * launch_report.c names the rank that caused the failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
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
#include "launch_internal.h"

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

/*
 * The rendezvous's listener: a TCP socket on 127.0.0.1, port chosen by
 * the kernel, listening with room for every rank, close-on-exec. Rank 0
 * inherits it (DPL_ROOT_FD, dpl/bootstrap.h), so that the port is held
 * from here on and no other process can take it before rank 0 listens.
 */
static int root_listener(uint32_t nprocs, int *fd, unsigned *port)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (s < 0)
		return -1;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 ||
	    listen(s, (int)(nprocs < 1024 ? nprocs : 1024)) != 0 ||
	    getsockname(s, (struct sockaddr *)&a, &len) != 0) {
		int err = errno;

		close(s);
		errno = err;
		return -1;
	}
	*port = ntohs(a.sin_port);
	*fd = s;
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
		  uint32_t rank, int root_fd, unsigned port, pid_t parent,
		  const char *secret, int cause_fd)
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
	/* Rank 0 listens on the socket bound above, kept across exec. */
	if (rank == 0 && fcntl(root_fd, F_SETFD, 0) == 0) {
		snprintf(v, sizeof v, "%d", root_fd);
		setenv("DPL_ROOT_FD", v, 1);
	} else {
		unsetenv("DPL_ROOT_FD");
	}
	/* A fresh secret per job: only its own ranks join its rendezvous. */
	setenv("DPL_JOB_SECRET", secret, 1);
	/* The cause pipe's write end, kept across exec. */
	if (cause_fd >= 0 && fcntl(cause_fd, F_SETFD, 0) == 0) {
		snprintf(v, sizeof v, "%d", cause_fd);
		setenv(CLI_LAUNCH_FD_ENV, v, 1);
	} else {
		unsetenv(CLI_LAUNCH_FD_ENV);
	}
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

/* Is the process stopped right now (state T or t in /proc/PID/stat)? */
static bool stopped_now(pid_t pid)
{
	char path[64], buf[512], *p;
	size_t n;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The state follows "(comm) ", and comm may hold a ')'. Only 'T'
	 * (stopped by a signal): 't' is a tracing stop, which is also how
	 * a sanitizer's leak check holds the threads of an exiting rank. */
	p = strrchr(buf, ')');
	return p != NULL && p[1] == ' ' && p[2] == 'T';
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

/* Start every rank; CLI_OK, or CLI_FAIL after stopping what started. */
static int start_all(const char *cmd, const struct cli_launch *p,
		     struct proc *c, const char *exe, int root_fd,
		     unsigned port, const char *secret, int cause_fd)
{
	pid_t self = getpid();
	uint32_t i;
	int rc = CLI_OK;

	fflush(NULL);
	for (i = 0; i < p->nprocs; i++) {
		c[i].pid = fork();
		if (c[i].pid == 0)
			child(p, exe, i, root_fd, port, self, secret,
			      cause_fd);
		if (c[i].pid < 0) {
			rc = cli_fail(cmd, "cannot start rank %u: %s", i,
				      strerror(errno));
			break;
		}
		if (p->pid_dir && rc == CLI_OK)
			rc = write_pid(cmd, p->pid_dir, i, c[i].pid);
	}
	if (rc == CLI_OK)
		return rc;
	/* Nothing ran to completion: stop what started. */
	for (i = 0; i < p->nprocs; i++)
		if (c[i].pid > 0)
			kill(c[i].pid, SIGKILL);
	for (i = 0; i < p->nprocs; i++)
		if (c[i].pid > 0)
			waitpid(c[i].pid, NULL, 0);
	return rc;
}

/* Kill child c (stopped or not) and reap it. */
static void put_down(struct proc *c)
{
	c->stopped = c->stopped || stopped_now(c->pid);
	kill(c->pid, SIGKILL);
	while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR)
		;
	c->done = c->killed = true;
}


/* Look at child c once: exited, stopped or continued. */
static void poll_one(const struct cli_launch *p, struct proc *c,
		     struct watch *w)
{
	int st = 0;
	pid_t got = waitpid(c->pid, &st, WNOHANG | WUNTRACED | WCONTINUED);

	if (got == 0 || (got < 0 && errno == EINTR))
		return;
	if (got > 0 && WIFSTOPPED(st)) {
		/* A rank that does not run holds up the others: wait for it
		 * as for a failure, then kill it. */
		if (!c->stopped)
			w->nstopped++;
		c->stopped = true;
		c->stop_sig = WSTOPSIG(st);
		if (w->deadline == 0) {
			w->deadline = now_s() + p->grace_s;
			w->by_stop = true;
		}
		return;
	}
	if (got > 0 && WIFCONTINUED(st)) {
		if (c->stopped)
			w->nstopped--;
		c->stopped = false;
		return;
	}
	if (got > 0)
		c->status = st;
	if (c->stopped)
		w->nstopped--;
	c->stopped = false;
	c->done = true;
	c->seq = w->seq++;
	w->left--;
	if (!cli__failed(c))
		return;
	w->nfail++;
	/* A bound set by a stop alone starts again: the others get the
	 * whole grace period after the first failure. */
	if (w->deadline == 0 || w->by_stop) {
		w->deadline = now_s() + p->grace_s;
		w->by_stop = false;
	}
}

/* Wait for every child: the whole run, then at most grace_s once one
 * failed or stopped. */
static void watch_all(const struct cli_launch *p, struct proc *c,
		      struct watch *w)
{
	struct timespec tick = {0, 5000000};
	uint32_t i;

	while (w->left > 0) {
		unsigned seq = w->seq;

		if (stop_signal != 0 && !w->forwarded) {
			/* Interrupted: pass it on, then wait as for a
			 * failure. */
			for (i = 0; i < p->nprocs; i++)
				if (!c[i].done)
					kill(c[i].pid, stop_signal);
			w->forwarded = true;
			if (w->deadline == 0)
				w->deadline = now_s() + p->grace_s;
			w->by_stop = false;
		}
		for (i = 0; i < p->nprocs; i++)
			if (!c[i].done)
				poll_one(p, &c[i], w);
		/* Continued before anything failed: no bound any more. */
		if (w->by_stop && w->nstopped == 0) {
			w->deadline = 0;
			w->by_stop = false;
		}
		cli__poll_causes(w, c, p->nprocs);
		/* Past the bound, or only stopped ranks left after a
		 * failure: nobody is going to wake them. A rank that told
		 * its cause is exiting: it gets CLI_LAUNCH_EXIT_S more. */
		if (w->left > 0 && w->deadline != 0) {
			double t = now_s();
			bool all = w->nfail > 0 && w->nstopped == w->left;
			bool past = t > w->deadline;

			for (i = 0; i < p->nprocs; i++)
				if (!c[i].done &&
				    (all || (past && (c[i].stopped ||
						      !c[i].told ||
						      t > w->deadline +
							      CLI_LAUNCH_EXIT_S)))) {
					if (c[i].stopped)
						w->nstopped--;
					put_down(&c[i]);
					c[i].seq = w->seq++;
					w->nfail++;
					w->left--;
				}
		}
		if (w->left > 0 && seq == w->seq)
			nanosleep(&tick, NULL);
	}
}

int cli_launch_run(const char *cmd, const struct cli_launch *p)
{
	struct proc *c = calloc(p->nprocs, sizeof *c);
	static const int stops[3] = {SIGINT, SIGTERM, SIGHUP};
	struct sigaction sa, old[3];
	struct watch w = {0};
	char exe[4096], secret[65];
	unsigned port;
	uint32_t i;
	int rc, pipefd[2] = {-1, -1}, root_fd = -1;
	ssize_t n;

	if (c == NULL)
		return cli_fail(cmd, "out of memory");
	/* This program's own file (resolved here, so that tools that run it
	 * under their control, such as valgrind, see the real one). */
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[n > 0 ? n : 0] = '\0';
	if (n <= 0)
		rc = cli_fail(cmd, "/proc/self/exe: %s", strerror(errno));
	else if (job_secret(secret) != 0)
		rc = cli_fail(cmd, "no random bytes for the job secret: %s",
			      strerror(errno));
	else if (root_listener(p->nprocs, &root_fd, &port) != 0)
		rc = cli_fail(cmd, "cannot listen on 127.0.0.1 for the "
			      "rendezvous: %s", strerror(errno));
	else {
		/* Each rank that fails writes the cause it names here; a
		 * launcher without the pipe judges by what it sees alone. */
		if (pipe(pipefd) != 0 ||
		    fcntl(pipefd[0], F_SETFD, FD_CLOEXEC) != 0 ||
		    fcntl(pipefd[1], F_SETFD, FD_CLOEXEC) != 0) {
			if (pipefd[0] >= 0) {
				close(pipefd[0]);
				close(pipefd[1]);
			}
			pipefd[0] = pipefd[1] = -1;
		}
		rc = start_all(cmd, p, c, exe, root_fd, port, secret,
			       pipefd[1]);
		if (pipefd[1] >= 0)
			close(pipefd[1]);
		/* Rank 0 holds it now: once it closes it, a rank that
		 * connects late is refused, not queued here. */
		close(root_fd);
	}
	if (rc != CLI_OK) {
		if (pipefd[0] >= 0)
			close(pipefd[0]);
		free(c);
		return rc;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < 3; i++)
		sigaction(stops[i], &sa, &old[i]);
	w.left = p->nprocs;
	w.cause_fd = pipefd[0];
	for (i = 0; i < p->nprocs; i++)
		c[i].named = UINT32_MAX;
	if (w.cause_fd >= 0)
		fcntl(w.cause_fd, F_SETFL,
		      fcntl(w.cause_fd, F_GETFL) | O_NONBLOCK);
	watch_all(p, c, &w);
	for (i = 0; i < 3; i++)
		sigaction(stops[i], &old[i], NULL);
	for (i = 0; i < p->nprocs; i++)
		if (WIFSIGNALED(c[i].status) || c[i].killed)
			sweep_shm(c[i].pid);
	if (w.forwarded)
		fprintf(stderr, "dpl %s: stopped by signal %d (%s), passed on "
			"to every rank\n", cmd, (int)stop_signal,
			strsignal(stop_signal));
	/* Every writer is gone: the rest of the lines. */
	cli__poll_causes(&w, c, p->nprocs);
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	if (w.nfail > 0)
		rc = cli__report(cmd, p, c, &w);
	free(c);
	return rc;
}
