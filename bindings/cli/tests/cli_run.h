/*
 * cli_run.h - run the `dpl` binary from a Criterion test: arguments as a
 * NULL-terminated list, stdout and stderr captured through files in the
 * test's scratch directory, exit status returned. cli_run() and RUN need
 * DPL_CLI_PATH (dpl_test_uses_cli() in CMake); cli_spawn() runs any
 * program the same way. cli_need_profile() finds one of the paper's
 * profiles or skips the test.
 */
#ifndef DPL_TEST_CLI_RUN_H
#define DPL_TEST_CLI_RUN_H

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

extern char **environ;

struct cli_res {
	int code;
	char out[1 << 18];
	char err[4096];
};

/* Read at most n - 1 bytes of `path` into buf (NUL-terminated). */
static inline void cli_slurp(const char *path, char *buf, size_t n)
{
	FILE *f = fopen(path, "r");
	size_t got = f ? fread(buf, 1, n - 1, f) : 0;

	buf[got] = '\0';
	if (f)
		fclose(f);
}

/* Run `prog` with args (NULL-terminated, after argv[0]) and wait. */
static inline void cli_spawn(struct cli_res *r, const char *dir,
			     const char *prog, const char *const *args)
{
	char *argv[64], out[512], err[512];
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int st, n = 0;

	argv[n++] = (char *)prog;
	while (args[n - 1] && n < 63) {
		argv[n] = (char *)args[n - 1];
		n++;
	}
	argv[n] = NULL;
	snprintf(out, sizeof out, "%s/stdout", dir);
	snprintf(err, sizeof err, "%s/stderr", dir);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, out,
					 O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_addopen(&fa, 2, err,
					 O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_eq(posix_spawn(&pid, prog, &fa, NULL, argv, environ), 0,
		     "cannot run %s", prog);
	posix_spawn_file_actions_destroy(&fa);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "%s died", prog);
	r->code = WEXITSTATUS(st);
	cli_slurp(out, r->out, sizeof r->out);
	cli_slurp(err, r->err, sizeof r->err);
}

#ifdef DPL_CLI_PATH
static inline void cli_run(struct cli_res *r, const char *dir,
			   const char *const *args)
{
	cli_spawn(r, dir, DPL_CLI_PATH, args);
}
#endif

#ifdef DPL_PROFILES_DIR
/* The path of profile `name` in DPL_PROFILES (when set and not empty)
 * or the configured DPL_PROFILES_DIR, the directories `dpl plan` looks
 * in; skips the test naming the path when it cannot be read. */
static inline void cli_need_profile(char *path, size_t n, const char *name)
{
	const char *dir = getenv("DPL_PROFILES");

	snprintf(path, n, "%s/%s", dir && *dir ? dir : DPL_PROFILES_DIR, name);
	if (access(path, R_OK) != 0)
		cr_skip_test("profile %s not found (set DPL_PROFILES or "
			     "configure DPL_PROFILES_DIR)", path);
}
#endif

/* RUN(&res, "schedule", "--stages", "4", ...) in the scratch dir `dir`. */
#define RUN(r, ...)                                                           \
	do {                                                                  \
		const char *const a_[] = {__VA_ARGS__, NULL};                 \
		cli_run((r), dir, a_);                                        \
	} while (0)

#endif
