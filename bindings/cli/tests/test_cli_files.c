/*
 * test_cli_files.c - `dpl` output files and flags like a careful Unix
 * tool: /dev/null and FIFOs written through, symlinks followed, a
 * directory or dangling link refused naming the flag and path, no
 * temporary file left after SIGTERM, SIGINT or SIGXFSZ, "File too large"
 * naming the file, a repeated flag refused on every command, a schedule
 * too large for memory refused at once with the estimate, and the exit
 * codes in every command's help.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cli_run.h"
#include "sanitizer.h"
#include "scratch.h"

static char dir[] = "/tmp/dpl-cli-files-XXXXXX";

static void setup(void)
{
	scratch_make(dir);
}

static void teardown(void)
{
	scratch_remove(dir);
}

TestSuite(cli_files, .init = setup, .fini = teardown, .timeout = 120);

static void path_in(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", dir, name);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* How the child is started: a file size limit (0: none), an address
 * space limit (0: none), SIGXFSZ ignored. */
struct spawn_opts {
	rlim_t fsize, as;
	bool ignore_xfsz;
};

/* Start `dpl` with args (NULL-terminated), stdout and stderr to files in
 * the scratch dir; returns its pid. */
static pid_t start(const struct spawn_opts *so, const char *const *args)
{
	char *argv[64], out[512], err[512];
	pid_t pid;
	int n = 0;

	argv[n++] = (char *)DPL_CLI_PATH;
	while (args[n - 1] && n < 63) {
		argv[n] = (char *)args[n - 1];
		n++;
	}
	argv[n] = NULL;
	path_in(out, sizeof out, "stdout");
	path_in(err, sizeof err, "stderr");
	pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		struct rlimit rl;

		if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
			_exit(126);
		if (so && so->fsize) {
			rl.rlim_cur = rl.rlim_max = so->fsize;
			setrlimit(RLIMIT_FSIZE, &rl);
		}
		if (so && so->as) {
			rl.rlim_cur = rl.rlim_max = so->as;
			setrlimit(RLIMIT_AS, &rl);
		}
		signal(SIGXFSZ, so && so->ignore_xfsz ? SIG_IGN : SIG_DFL);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Wait at most `limit` seconds; the raw wait status. */
static int finish(pid_t pid, double limit)
{
	double end = now_s() + limit;
	int st;

	for (;;) {
		pid_t got = waitpid(pid, &st, WNOHANG);

		if (got == pid)
			return st;
		cr_assert_eq(got, 0, "waitpid: %s", strerror(errno));
		if (now_s() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			cr_assert_fail("dpl still running after %.0f s", limit);
		}
		usleep(2000);
	}
}

static void run_with(struct cli_res *r, const struct spawn_opts *so,
		     const char *const *args)
{
	char p[512];
	int st = finish(start(so, args), 100);

	cr_assert(WIFEXITED(st), "dpl died of signal %d", WTERMSIG(st));
	r->code = WEXITSTATUS(st);
	path_in(p, sizeof p, "stdout");
	cli_slurp(p, r->out, sizeof r->out);
	path_in(p, sizeof p, "stderr");
	cli_slurp(p, r->err, sizeof r->err);
}

#define RUNX(r, so, ...)                                                      \
	do {                                                                  \
		const char *const a_[] = {__VA_ARGS__, NULL};                 \
		run_with((r), (so), a_);                                      \
	} while (0)

/* The names in `d` starting with `prefix`, space-separated (the last
 * call's; for messages). */
static char found[1024];

/* Count the entries of `d` whose name starts with `prefix`. */
static int count_prefix(const char *d, const char *prefix)
{
	DIR *dp = opendir(d);
	struct dirent *e;
	size_t used = 0;
	int n = 0;

	cr_assert_not_null(dp, "opendir %s", d);
	found[0] = '\0';
	while ((e = readdir(dp)) != NULL)
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
			n++;
			used += (size_t)snprintf(found + used,
						 used < sizeof found
						     ? sizeof found - used
						     : 0,
						 " %s", e->d_name);
			if (used >= sizeof found)
				used = sizeof found - 1;
		}
	closedir(dp);
	return n;
}

static const char *const csv_22 = "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n";

static void read_all(const char *path, char *buf, size_t n)
{
	cli_slurp(path, buf, n);
}

Test(cli_files, dev_null_is_written_through)
{
	struct cli_res r;
	struct stat st;

	RUN(&r, "schedule", "--stages", "2", "--microbatches", "2", "--policy",
	    "1f1b", "--format", "csv", "--out", "/dev/null");
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_assert_eq(stat("/dev/null", &st), 0);
	cr_assert(S_ISCHR(st.st_mode), "/dev/null is no longer a device");
	RUN(&r, "simulate", "--stages", "2", "--microbatches", "2",
	    "--policy", "1f1b", "--trace", "/dev/null", "--svg", "/dev/null");
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_assert_eq(stat("/dev/null", &st), 0);
	cr_assert(S_ISCHR(st.st_mode));
}

Test(cli_files, fifo_is_written_through_and_read_back)
{
	char fifo[512], got[4096];
	const char *args[] = {"schedule", "--stages", "2", "--microbatches",
			      "2", "--policy", "1f1b", "--format", "csv",
			      "--out", fifo, NULL};
	struct stat st;
	size_t n = 0;
	ssize_t k;
	pid_t pid;
	int fd, status;

	path_in(fifo, sizeof fifo, "pipe");
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	pid = start(NULL, args);
	fd = open(fifo, O_RDONLY);
	cr_assert_geq(fd, 0, "open %s: %s", fifo, strerror(errno));
	while (n < sizeof got - 1 &&
	       (k = read(fd, got + n, sizeof got - 1 - n)) > 0)
		n += (size_t)k;
	got[n] = '\0';
	close(fd);
	status = finish(pid, 60);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "status %#x", status);
	cr_assert_str_eq(got, csv_22);
	cr_assert_eq(lstat(fifo, &st), 0);
	cr_assert(S_ISFIFO(st.st_mode), "the FIFO became a regular file");
	cr_assert_eq(count_prefix(dir, "pipe.tmp."), 0);
}

Test(cli_files, symlink_is_followed_and_kept)
{
	char sub[512], target[600], link[512], got[4096];
	struct cli_res r;
	struct stat st;
	FILE *f;

	path_in(sub, sizeof sub, "sub");
	cr_assert_eq(mkdir(sub, 0700), 0);
	snprintf(target, sizeof target, "%s/target.csv", sub);
	path_in(link, sizeof link, "link.csv");
	f = fopen(target, "w");
	cr_assert_not_null(f);
	fputs("old\n", f);
	fclose(f);
	cr_assert_eq(chmod(target, 0640), 0);
	cr_assert_eq(symlink("sub/target.csv", link), 0);
	RUN(&r, "schedule", "--stages", "2", "--microbatches", "2", "--policy",
	    "1f1b", "--format", "csv", "--out", link);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_assert_eq(lstat(link, &st), 0);
	cr_assert(S_ISLNK(st.st_mode), "the symlink was replaced");
	cr_assert_eq(stat(target, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0640, "mode %o not kept",
		     st.st_mode & 0777);
	read_all(target, got, sizeof got);
	cr_assert_str_eq(got, csv_22);
	cr_assert_eq(count_prefix(sub, "target.csv.tmp."), 0);
	cr_assert_eq(count_prefix(dir, "link.csv.tmp."), 0);
}

Test(cli_files, dangling_symlink_is_refused)
{
	char link[512];
	struct cli_res r;

	path_in(link, sizeof link, "dangling.json");
	cr_assert_eq(symlink("nowhere/at/all", link), 0);
	RUN(&r, "schedule", "--stages", "2", "--microbatches", "2", "--policy",
	    "1f1b", "--format", "json", "--out", link);
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, "--out ") && strstr(r.err, link) &&
		      strstr(r.err, "symlink"),
		  "%s", r.err);
	cr_assert_eq(count_prefix(dir, "dangling.json.tmp."), 0);
}

Test(cli_files, directory_is_refused_naming_flag_and_path)
{
	char d[512], want[600];
	struct cli_res r;

	path_in(d, sizeof d, "adir");
	cr_assert_eq(mkdir(d, 0700), 0);
	snprintf(want, sizeof want, "--out %s: is a directory", d);
	RUN(&r, "schedule", "--stages", "2", "--microbatches", "2", "--policy",
	    "1f1b", "--out", d);
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, want), "'%s' lacks '%s'", r.err, want);
	snprintf(want, sizeof want, "--trace %s: is a directory", d);
	RUN(&r, "simulate", "--stages", "2", "--microbatches", "2",
	    "--policy", "1f1b", "--trace", d);
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, want), "'%s' lacks '%s'", r.err, want);
	snprintf(want, sizeof want, "--svg %s: is a directory", d);
	RUN(&r, "simulate", "--stages", "2", "--microbatches", "2",
	    "--policy", "1f1b", "--svg", d);
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, want), "'%s' lacks '%s'", r.err, want);
	/* Refused before the work: a million iterations would take hours. */
	snprintf(want, sizeof want, "--trace %s: is a directory", d);
	RUN(&r, "train", "--iterations", "1000000", "--trace", d);
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, want), "'%s' lacks '%s'", r.err, want);
	cr_assert_eq(count_prefix(dir, "adir.tmp."), 0);
}

Test(cli_files, missing_folder_names_the_path)
{
	char p[512], want[600];
	struct cli_res r;

	path_in(p, sizeof p, "no/such/folder/out.json");
	snprintf(want, sizeof want, "--out %s: No such file or directory", p);
	RUN(&r, "schedule", "--stages", "2", "--microbatches", "2", "--policy",
	    "1f1b", "--format", "json", "--out", p);
	cr_assert_eq(r.code, 2, "%s", r.err);
	cr_assert(strstr(r.err, want), "'%s' lacks '%s'", r.err, want);
}

Test(cli_files, file_too_large_names_the_file)
{
	struct spawn_opts so = {.fsize = 4096, .ignore_xfsz = true};
	char p[512], want[600];
	struct cli_res r;

	path_in(p, sizeof p, "big.json");
	snprintf(want, sizeof want, "--out %s: File too large", p);
	RUNX(&r, &so, "schedule", "--stages", "16", "--microbatches", "64",
	     "--policy", "1f1b", "--format", "json", "--out", p);
	cr_assert_eq(r.code, 1, "%s", r.err);
	cr_assert(strstr(r.err, want), "'%s' lacks '%s'", r.err, want);
	cr_assert_eq(count_prefix(dir, "big.json"), 0, "a file is left");
	path_in(p, sizeof p, "big.trace");
	snprintf(want, sizeof want, "--trace %s: File too large", p);
	RUNX(&r, &so, "simulate", "--stages", "16", "--microbatches", "64",
	     "--policy", "1f1b", "--trace", p);
	cr_assert_eq(r.code, 1, "%s", r.err);
	cr_assert(strstr(r.err, want), "'%s' lacks '%s'", r.err, want);
	cr_assert_eq(count_prefix(dir, "big.trace"), 0, "a file is left");
}

Test(cli_files, sigxfsz_removes_the_temporary_file)
{
	struct spawn_opts so = {.fsize = 4096};
	const char *args[] = {"schedule", "--stages", "16", "--microbatches",
			      "64", "--policy", "1f1b", "--format", "json",
			      "--out", NULL, NULL};
	char p[512];
	int st;

	path_in(p, sizeof p, "big.json");
	args[10] = p;
	st = finish(start(&so, args), 60);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGXFSZ,
		  "status %#x: not ended by SIGXFSZ", st);
	cr_assert_eq(count_prefix(dir, "big.json"), 0,
		     "the temporary file is left");
}

/* Start a large write, signal dpl once its temporary file appears
 * (inotify), and check that it died of the signal and left nothing. */
static void signal_during_write(int sig)
{
	const char *args[] = {"schedule", "--stages", "256",
			      "--microbatches", "8192", "--policy", "1f1b",
			      "--format", "json", "--out", NULL, NULL};
	char p[512], buf[4096];
	bool seen = false;
	double end;
	pid_t pid;
	int fd, wd, st;

	path_in(p, sizeof p, "huge.json");
	args[10] = p;
	fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	cr_assert_geq(fd, 0);
	wd = inotify_add_watch(fd, dir, IN_CREATE);
	cr_assert_geq(wd, 0);
	pid = start(NULL, args);
	end = now_s() + 60;
	while (!seen && now_s() < end) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t n;

		if (poll(&pf, 1, 100) <= 0)
			continue;
		n = read(fd, buf, sizeof buf);
		for (char *q = buf; n > 0 && q < buf + n;) {
			struct inotify_event *e = (struct inotify_event *)q;

			if (e->len && strncmp(e->name, "huge.json.tmp.", 14) == 0)
				seen = true;
			q += sizeof *e + e->len;
		}
	}
	if (seen)
		kill(pid, sig);
	st = finish(pid, 60);
	close(fd);
	cr_assert(seen, "no temporary file appeared");
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == sig,
		  "status %#x: the write ended before signal %d arrived", st,
		  sig);
	cr_assert_eq(count_prefix(dir, "huge.json"), 0,
		     "left after signal %d:%s", sig, found);
}

Test(cli_files, sigterm_removes_the_temporary_file)
{
	signal_during_write(SIGTERM);
}

Test(cli_files, sigint_removes_the_temporary_file)
{
	signal_during_write(SIGINT);
}

static void given_twice(const struct cli_res *r, const char *flag)
{
	char want[128];

	snprintf(want, sizeof want, "%s: given twice", flag);
	cr_assert_eq(r->code, 2, "exit %d: %s", r->code, r->err);
	cr_assert(strstr(r->err, want), "'%s' lacks '%s'", r->err, want);
	cr_assert_eq(strchr(r->err, '\n'), r->err + strlen(r->err) - 1,
		     "not one line: %s", r->err);
}

Test(cli_files, a_repeated_flag_is_an_error_on_every_command)
{
	struct cli_res r;

	RUN(&r, "schedule", "--stages", "2", "--microbatches", "2",
	    "--stages", "3", "--policy", "1f1b");
	given_twice(&r, "--stages");
	RUN(&r, "schedule", "--stages", "2", "--microbatches=2",
	    "--microbatches=4", "--policy", "1f1b");
	given_twice(&r, "--microbatches");
	RUN(&r, "schedule", "--lower", "--stages", "2", "--microbatches", "2",
	    "--policy", "1f1b", "--lower");
	given_twice(&r, "--lower");
	RUN(&r, "simulate", "--stages", "2", "--microbatches", "2",
	    "--policy", "1f1b", "--trace", "a.json", "--trace", "b.json");
	given_twice(&r, "--trace");
	RUN(&r, "simulate", "--json", "--stages", "2", "--microbatches", "2",
	    "--policy", "1f1b", "--json");
	given_twice(&r, "--json");
	RUN(&r, "plan", "--pbs", "1", "--gbs", "8", "--pbs", "2");
	given_twice(&r, "--pbs");
	RUN(&r, "train", "--iterations", "1", "--iterations", "2");
	given_twice(&r, "--iterations");
	RUN(&r, "train", "--cap-bytes", "10", "--cap-bytes", "20");
	given_twice(&r, "--cap-bytes");
	RUN(&r, "info", "--json", "--json");
	given_twice(&r, "--json");
}

Test(cli_files, a_schedule_too_large_is_refused_at_once)
{
	struct spawn_opts so = {.as = (rlim_t)4 << 30};
	struct cli_res r;
	double t0 = now_s();

	RUN(&r, "schedule", "--stages", "4096", "--microbatches", "100000",
	    "--policy", "1f1b");
	cr_assert_eq(r.code, 2, "exit %d: %s", r.code, r.err);
	cr_assert(strstr(r.err, "--stages 4096 x --microbatches 100000 "
			       "(policy 1f1b) is too large: about") &&
		      strstr(r.err, "819200000 actions") &&
		      strstr(r.err, " GB"),
		  "%s", r.err);
	RUN(&r, "simulate", "--stages", "4096", "--microbatches", "100000",
	    "--policy", "1f1b");
	cr_assert_eq(r.code, 2, "exit %d: %s", r.code, r.err);
	cr_assert(strstr(r.err, "about 118.0 GB for 819200000 actions"),
		  "%s", r.err);
	RUN(&r, "train", "--stages", "1024", "--microbatches", "1000000");
	cr_assert_eq(r.code, 2, "exit %d: %s", r.code, r.err);
	cr_assert(strstr(r.err, "2048000000 actions"), "%s", r.err);
	cr_assert_lt(now_s() - t0, 20, "the refusals took %.1f s",
		     now_s() - t0);
	/* Under RLIMIT_AS the limit is named: 64 x 262144 x 2 actions of
	 * 144 bytes (built and simulated) are 4.8 GB, over 4 GiB. (Not in
	 * an ASan build: its shadow memory does not start under 4 GiB.) */
#ifndef DPL_TEST_ASAN
	RUNX(&r, &so, "simulate", "--stages", "64", "--microbatches",
	     "262144", "--policy", "1f1b");
	cr_assert_eq(r.code, 2, "exit %d: %s", r.code, r.err);
	cr_assert(strstr(r.err, "RLIMIT_AS"), "%s", r.err);
#else
	(void)so;
#endif
}

Test(cli_files, every_command_documents_its_exit_codes)
{
	static const char *const cmds[] = {"simulate", "plan", "train",
					   "info"};
	struct cli_res r;

	for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++) {
		RUN(&r, cmds[k], "--help");
		cr_assert_eq(r.code, 0);
		cr_assert(strstr(r.out, "Exit status: 0"),
			  "dpl %s --help has no exit status", cmds[k]);
	}
	RUN(&r, "help");
	cr_assert(strstr(r.out, "Exit status: 0"), "%s", r.out);
}
