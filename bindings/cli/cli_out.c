/*
 * cli_out.c - output files of `dpl`: regular files appear whole or not at
 * all, FIFOs and character devices are written through, symlinks are
 * followed, and temporary files do not outlive SIGINT, SIGTERM, SIGHUP or
 * SIGXFSZ (the rules are in cli.h).
 */
#define _GNU_SOURCE /* fopencookie */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/*
 * Temporary files the signal handler removes: a fixed table read by the
 * handler with async-signal-safe calls only (unlink, sigaction, raise).
 * The handler may run on any thread (libraries start their own, and a
 * signal sent to the process goes to any thread that does not block it),
 * so a file being created is guarded by `creating`: a signal that comes
 * then is left in `pending` for the creating thread, which removes the
 * file and ends the process itself once the name is known. Lock-free
 * atomics, so both sides are async-signal-safe.
 */
#define TMP_SLOTS 4
static char tmp_paths[TMP_SLOTS][PATH_MAX + 32];
static atomic_int tmp_armed[TMP_SLOTS];
static atomic_int creating, pending;
static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};
#define NSIGNALS (sizeof cleanup_signals / sizeof cleanup_signals[0])
static bool handlers_installed;

/* Remove every armed file and end with `sig`'s default action. */
static void die_of(int sig)
{
	struct sigaction dfl;
	sigset_t set;
	int k;

	for (k = 0; k < TMP_SLOTS; k++)
		if (atomic_load(&tmp_armed[k]))
			unlink(tmp_paths[k]);
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	raise(sig);
	/* Blocked here (the handler's mask, or the creator's): let it in. */
	sigemptyset(&set);
	sigaddset(&set, sig);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

static void on_signal(int sig)
{
	int e = errno;

	atomic_store(&pending, sig);
	if (atomic_load(&creating)) {
		errno = e;
		return; /* the creating thread finishes the job */
	}
	die_of(sig);
	errno = e;
}

/* Install the handler for every cleanup signal not ignored at start. */
static void install_handlers(void)
{
	size_t k;

	if (handlers_installed)
		return;
	handlers_installed = true;
	for (k = 0; k < NSIGNALS; k++) {
		struct sigaction old, sa;

		if (sigaction(cleanup_signals[k], NULL, &old) != 0 ||
		    old.sa_handler == SIG_IGN)
			continue;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_signal;
		sigemptyset(&sa.sa_mask);
		for (size_t j = 0; j < NSIGNALS; j++)
			sigaddset(&sa.sa_mask, cleanup_signals[j]);
		sigaction(cleanup_signals[k], &sa, NULL);
	}
}

static void block_signals(sigset_t *old)
{
	sigset_t set;
	size_t k;

	sigemptyset(&set);
	for (k = 0; k < NSIGNALS; k++)
		sigaddset(&set, cleanup_signals[k]);
	pthread_sigmask(SIG_BLOCK, &set, old);
}

static void disarm(struct cli_out *o)
{
	if (o->slot >= 0)
		atomic_store(&tmp_armed[o->slot], 0);
	o->slot = -1;
}

/* The stream's writes go straight to o->fd; the first failure's errno is
 * kept so that the message can name it with the path. */
static ssize_t cookie_write(void *c, const char *buf, size_t n)
{
	struct cli_out *o = c;
	size_t off = 0;

	while (off < n) {
		ssize_t w = write(o->fd, buf + off, n - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (o->err == 0)
				o->err = w < 0 ? errno : EIO;
			return 0;
		}
		off += (size_t)w;
	}
	return (ssize_t)n;
}

static int cookie_close(void *c)
{
	(void)c; /* the fd is closed by commit or abort */
	return 0;
}

static int refuse(struct cli_out *o, int code, const char *why)
{
	if (code == CLI_USAGE)
		cli_usage_error(o->cmd, "%s %s: %s", o->label, o->given, why);
	else
		cli_fail(o->cmd, "%s %s: %s", o->label, o->given, why);
	o->reported = true;
	cli_out_abort(o);
	return code;
}

/* Create the temporary file beside o->path, with `mode`, registered for
 * the signal handler before any signal can see it. */
static int make_tmp(struct cli_out *o, mode_t mode)
{
	sigset_t old;
	int k, e;

	if (strlen(o->path) + 16 > sizeof tmp_paths[0])
		return refuse(o, CLI_USAGE, strerror(ENAMETOOLONG));
	if ((o->tmp = malloc(strlen(o->path) + 16)) == NULL)
		return refuse(o, CLI_FAIL, "out of memory");
	sprintf(o->tmp, "%s.tmp.XXXXXX", o->path);
	install_handlers();
	block_signals(&old);
	atomic_store(&creating, 1);
	for (k = 0; k < TMP_SLOTS && atomic_load(&tmp_armed[k]); k++)
		;
	o->fd = k < TMP_SLOTS ? mkostemp(o->tmp, O_CLOEXEC) : -1;
	e = k < TMP_SLOTS ? errno : EMFILE;
	if (o->fd >= 0) {
		strcpy(tmp_paths[k], o->tmp);
		atomic_store(&tmp_armed[k], 1);
		o->slot = k;
	}
	atomic_store(&creating, 0);
	if (atomic_load(&pending))
		die_of(atomic_load(&pending));
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (o->fd < 0) {
		free(o->tmp);
		o->tmp = NULL;
		return refuse(o, CLI_USAGE, strerror(e));
	}
	if (fchmod(o->fd, mode) != 0)
		return refuse(o, CLI_FAIL, strerror(errno));
	return CLI_OK;
}

static const char *not_writable(mode_t m)
{
	if (S_ISDIR(m))
		return "is a directory";
	if (S_ISBLK(m))
		return "is a block device (dpl writes regular files, FIFOs "
		       "and character devices only)";
	if (S_ISSOCK(m))
		return "is a socket (dpl writes regular files, FIFOs and "
		       "character devices only)";
	return "is not a regular file, FIFO or character device";
}

/* Set up `o` for `path` and find what is there (st->st_mode 0: nothing
 * yet), following a symlink; refuse what cannot be written. 1 for
 * stdout, CLI_OK, or the refusal's code after its message. */
static int resolve(const char *cmd, const char *path, struct cli_out *o,
		   struct stat *st)
{
	memset(o, 0, sizeof *o);
	o->fd = -1;
	o->slot = -1;
	o->cmd = cmd;
	o->given = path;
	o->label = cli_flag_of(path) ? cli_flag_of(path) : "output";
	if (strcmp(path, "-") == 0)
		return 1;
	if (lstat(path, st) != 0) {
		if (errno != ENOENT)
			return refuse(o, CLI_USAGE, strerror(errno));
		st->st_mode = 0; /* a new file */
	} else if (S_ISLNK(st->st_mode)) {
		char *real = realpath(path, NULL);

		if (real == NULL) {
			char why[128];

			snprintf(why, sizeof why, "symlink whose target "
				 "cannot be resolved: %s", strerror(errno));
			return refuse(o, CLI_USAGE, why);
		}
		o->path = real;
		if (stat(real, st) != 0)
			return refuse(o, CLI_USAGE, strerror(errno));
	}
	if (o->path == NULL && (o->path = strdup(path)) == NULL)
		return refuse(o, CLI_FAIL, "out of memory");
	if (st->st_mode != 0 && !S_ISREG(st->st_mode) &&
	    !S_ISFIFO(st->st_mode) && !S_ISCHR(st->st_mode))
		return refuse(o, CLI_USAGE, not_writable(st->st_mode));
	return CLI_OK;
}

int cli_out_check(const char *cmd, const char *path)
{
	struct cli_out o;
	struct stat st;
	int rc = resolve(cmd, path, &o, &st);

	if (rc == 0) {
		/* The folder the temporary file (or the file) goes in. */
		char *slash = strrchr(o.path, '/');
		int ok;

		if (slash == o.path) {
			ok = access("/", W_OK | X_OK);
		} else if (slash) {
			*slash = '\0';
			ok = access(o.path, W_OK | X_OK);
			*slash = '/';
		} else {
			ok = access(".", W_OK | X_OK);
		}
		if (ok != 0 && !(st.st_mode && !S_ISREG(st.st_mode)))
			return refuse(&o, CLI_USAGE, strerror(errno));
		cli_out_abort(&o);
	}
	return rc == 1 ? CLI_OK : rc;
}

int cli_out_open(const char *cmd, const char *path, struct cli_out *o)
{
	static const cookie_io_functions_t io = {
	    .write = cookie_write, .close = cookie_close};
	struct stat st;
	mode_t mask;
	int rc = resolve(cmd, path, o, &st);

	if (rc == 1) {
		o->f = stdout;
		return CLI_OK;
	}
	if (rc)
		return rc;
	if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
		do {
			o->fd = open(o->path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
		} while (o->fd < 0 && errno == EINTR);
		if (o->fd < 0)
			return refuse(o, CLI_USAGE, strerror(errno));
	} else {
		mask = umask(0);
		umask(mask);
		if ((rc = make_tmp(o, S_ISREG(st.st_mode) ? st.st_mode & 07777
							  : 0666 & ~mask)))
			return rc;
	}
	o->f = fopencookie(o, "w", io);
	if (o->f == NULL)
		return refuse(o, CLI_FAIL, strerror(errno));
	setvbuf(o->f, NULL, _IOFBF, 1 << 16);
	return CLI_OK;
}

int cli_out_commit(const char *cmd, struct cli_out *o)
{
	int e = 0;

	o->cmd = cmd;
	if (o->f == stdout) {
		if (fflush(stdout) != 0)
			return cli_fail(cmd, "stdout: %s", strerror(errno));
		return CLI_OK;
	}
	if (fflush(o->f) != 0 || ferror(o->f))
		e = o->err ? o->err : EIO;
	fclose(o->f);
	o->f = NULL;
	if (e == 0 && o->tmp && fsync(o->fd) != 0)
		e = errno;
	if (close(o->fd) != 0 && e == 0 && errno != EINTR)
		e = errno;
	o->fd = -1;
	if (e == 0 && o->tmp && rename(o->tmp, o->path) != 0)
		e = errno;
	if (e) {
		o->err = 0;
		return refuse(o, CLI_FAIL, strerror(e));
	}
	disarm(o); /* after the rename: the handler's unlink then misses */
	free(o->tmp);
	free(o->path);
	o->tmp = o->path = NULL;
	return CLI_OK;
}

void cli_out_abort(struct cli_out *o)
{
	if (o->err && !o->reported && o->cmd) {
		cli_fail(o->cmd, "%s %s: %s", o->label, o->given,
			 strerror(o->err));
		o->reported = true;
	}
	if (o->f && o->f != stdout)
		fclose(o->f);
	if (o->fd >= 0)
		close(o->fd);
	if (o->tmp)
		unlink(o->tmp);
	disarm(o);
	free(o->tmp);
	free(o->path);
	o->f = NULL;
	o->fd = -1;
	o->tmp = o->path = NULL;
}

int cli_out_fail(struct cli_out *o, const char *why)
{
	if (!o->reported && o->cmd) {
		cli_fail(o->cmd, "%s %s: %s", o->label, o->given,
			 o->err ? strerror(o->err) : why);
		o->reported = true;
	}
	cli_out_abort(o);
	return CLI_FAIL;
}
