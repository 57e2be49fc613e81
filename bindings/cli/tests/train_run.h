/*
 * train_run.h - run `dpl train` jobs of one process per rank from a
 * Criterion test: start one with its flags and environment, wait for it
 * with a bound (a run still going then is killed and fails the test),
 * read the rank pids the launcher wrote, check that no rank process and
 * nothing of theirs in /dev/shm is left, and find each rank's own last
 * message. Scratch directories are removed by remove_scratch(), the
 * suite's fini. Needs DPL_CLI_PATH (dpl_test_uses_cli() in CMake).
 */
#ifndef DPL_TEST_TRAIN_RUN_H
#define DPL_TEST_TRAIN_RUN_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "procs.h"
#include "sanitizer.h"

/* The slack on top of the launcher's own bound (timeout + 1 s) before a
 * run counts as hung. */
#define HANG_S 30.0

/* Builds under ASan or TSan run each rank 2-5x slower, and CTest runs
 * two jobs of four ranks at once on a 2-core host: a 4-rank ofi start-up
 * (provider load, address exchange, warm-up) has taken more than 5 s
 * there. Their ranks get three times the timeout. */
#if defined(DPL_TEST_ASAN) || defined(DPL_TEST_TSAN)
#define TRAIN_TIMEOUT_SCALE 3
#else
#define TRAIN_TIMEOUT_SCALE 1
#endif

/* The per-wait timeout given to the ranks: short, but above the
 * transport's declared bound for noticing a dead peer (ofi: 2 s). No
 * test asserts a duration: a longer one only lengthens a run that waits
 * it out. */
static inline int timeout_for(const char *transport)
{
	return (strcmp(transport, "ofi") == 0 ? 5 : 3) * TRAIN_TIMEOUT_SCALE;
}

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct run {
	pid_t pid;
	char dir[64];      /* scratch: out, err, pids/ */
	char pids[96];
	int status;        /* exit code; -1 after a signal */
	char *out, *err;
};

/* Scratch directories of this test, removed by its fini even when an
 * assertion ended it early. */
static char scratch[16][64];
static unsigned nscratch;

static inline void remove_scratch(void)
{
	char cmd[160];
	unsigned i;

	for (i = 0; i < nscratch; i++) {
		snprintf(cmd, sizeof cmd, "rm -rf %s", scratch[i]);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", scratch[i]);
	}
	nscratch = 0;
}

static inline char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	size_t cap = 1 << 16, len = 0, n;
	char *s = malloc(cap);

	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	while ((n = fread(s + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (len + 1 == cap)
			s = realloc(s, cap *= 2);
	}
	s[len] = '\0';
	fclose(f);
	return s;
}

/*
 * Start `dpl <args>` (space-separated; "%P" becomes the scratch pid
 * directory) with the "KEY=VALUE" settings of env[] (NULL-terminated; a
 * value-less "KEY" unsets it), stdout and stderr to files.
 */
static inline void start(struct run *r, const char *args,
			 const char *const *env)
{
	char *copy, *tok, *save = NULL, *argv[64], path[128];
	int n = 0, fd;
	pid_t parent;

	memset(r, 0, sizeof *r);
	strcpy(r->dir, "/tmp/dpl-train-mp-XXXXXX");
	cr_assert_not_null(mkdtemp(r->dir));
	cr_assert_lt(nscratch, 16u);
	strcpy(scratch[nscratch++], r->dir);
	snprintf(r->pids, sizeof r->pids, "%s/pids", r->dir);
	cr_assert_eq(mkdir(r->pids, 0700), 0);
	copy = strdup(args);
	argv[n++] = (char *)DPL_CLI_PATH;
	for (tok = strtok_r(copy, " ", &save); tok && n < 62;
	     tok = strtok_r(NULL, " ", &save))
		argv[n++] = strcmp(tok, "%P") == 0 ? r->pids : tok;
	argv[n] = NULL;
	fflush(NULL);
	parent = getpid();
	r->pid = fork();
	cr_assert_geq(r->pid, 0);
	if (r->pid == 0) {
		/* A test process killed from outside takes its run along (the
		 * launcher's ranks die with the launcher): a run of a million
		 * iterations would otherwise go on alone. */
		if (!dies_with_parent(parent))
			_exit(127);
		for (; env && *env; env++) {
			const char *eq = strchr(*env, '=');

			if (eq == NULL) {
				unsetenv(*env);
			} else {
				char k[64];

				snprintf(k, sizeof k, "%.*s", (int)(eq - *env),
					 *env);
				setenv(k, eq + 1, 1);
			}
		}
		snprintf(path, sizeof path, "%s/out", r->dir);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 1);
		snprintf(path, sizeof path, "%s/err", r->dir);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 2);
		execv(DPL_CLI_PATH, argv);
		_exit(127);
	}
	free(copy);
}

/* Wait at most limit_s for the run; a run still going then is killed
 * and fails the test. */
static inline void finish(struct run *r, double limit_s)
{
	double end = now_s() + limit_s;
	struct timespec tick = {0, 10000000};
	char path[128];
	pid_t w;
	int st;

	while ((w = waitpid(r->pid, &st, WNOHANG)) == 0 && now_s() < end)
		nanosleep(&tick, NULL);
	if (w == 0) {
		kill(r->pid, SIGKILL);
		waitpid(r->pid, &st, 0);
		cr_assert_fail("dpl did not exit within %.0f s", limit_s);
	}
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	snprintf(path, sizeof path, "%s/out", r->dir);
	r->out = slurp(path);
	snprintf(path, sizeof path, "%s/err", r->dir);
	r->err = slurp(path);
}

static inline void run_done(struct run *r)
{
	free(r->out);
	free(r->err);
}

/* The pids the launcher wrote, in rank order. */
static inline unsigned read_pids(const struct run *r, pid_t *pids,
				 unsigned n)
{
	char path[160];
	unsigned i, got = 0;

	for (i = 0; i < n; i++) {
		FILE *f;
		long v;

		snprintf(path, sizeof path, "%s/pids/rank-%u.pid", r->dir, i);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		if (fscanf(f, "%ld", &v) == 1) {
			pids[i] = (pid_t)v;
			got++;
		}
		fclose(f);
	}
	return got;
}

/* No rank process left, and nothing of theirs in /dev/shm. */
static inline void assert_clean(const pid_t *pids, unsigned n)
{
	struct dirent *e;
	unsigned i;
	DIR *d;

	for (i = 0; i < n; i++)
		cr_assert(kill(pids[i], 0) != 0 && errno == ESRCH,
			  "rank %u (pid %ld) is still there", i,
			  (long)pids[i]);
	d = opendir("/dev/shm");
	cr_assert_not_null(d);
	while ((e = readdir(d)) != NULL)
		for (i = 0; i < n; i++) {
			char a[32], b[32];
			size_t len = strlen(e->d_name), lb;

			snprintf(a, sizeof a, "%ld:", (long)pids[i]);
			lb = (size_t)snprintf(b, sizeof b, "-p%ld",
					      (long)pids[i]);
			bool mine = strncmp(e->d_name, a, strlen(a)) == 0 ||
				    (strncmp(e->d_name, "dpl-", 4) == 0 &&
				     len > lb &&
				     strcmp(e->d_name + len - lb, b) == 0);

			cr_assert(!mine, "/dev/shm/%s left by rank %u",
				  e->d_name, i);
		}
	closedir(d);
}

/* The line rank `rank` printed about its own end ("dpl train: rank R
 * (stage rank ..."), or NULL. */
static inline char *rank_line(const char *err, unsigned rank, char *buf,
			      size_t size)
{
	char key[64];
	const char *p, *nl;

	snprintf(key, sizeof key, "dpl train: rank %u (stage rank", rank);
	if ((p = strstr(err, key)) == NULL)
		return NULL;
	nl = strchr(p, '\n');
	snprintf(buf, size, "%.*s", (int)(nl ? nl - p : (long)strlen(p)), p);
	return buf;
}


#endif /* DPL_TEST_TRAIN_RUN_H */
