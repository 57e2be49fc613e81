/*
 * cli.h - shared pieces of the `dpl` command: the command table entry,
 * strict flag parsing (every bad value is exit code 2 with a one-line
 * message naming the flag), file reading, and output files that appear
 * whole or not at all.
 */
#ifndef DPL_CLI_H
#define DPL_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes. */
#define CLI_OK 0
#define CLI_FAIL 1  /* the work failed (invalid schedule, training error,
		       an output that could not be written) */
#define CLI_USAGE 2 /* bad flags, values or input files; an output path
		       refused or that cannot be opened (a directory, a
		       missing folder, no permission) */

/* Most arguments one command takes (main() refuses more). */
#define CLI_MAX_ARGS 512

struct dpl_cli_cmd {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv); /* argv[0] is the command name */
	void (*usage)(FILE *f);
};

/* Print "dpl <cmd>: <message>" to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Print "dpl <cmd>: <message>" to stderr; returns CLI_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Flag iteration: `cli_flag(argc, argv, &i, "--stages", &val)` is true when
 * argv[i] is that flag, given as "--stages N" or "--stages=N"; *val is the
 * value, or NULL when it is missing (the caller reports it with
 * cli_missing()). Advances i past the value. `name` must be a string that
 * lives as long as the process (a literal).
 *
 * No flag may be given twice: cli_flag() and cli_switch() remember, per
 * argument vector, the index each flag was taken at, and are false for a
 * second occurrence at another index, which the caller's loop then hands
 * to cli_unknown(): that prints "<flag>: given twice (arguments I and J)"
 * instead of "unknown argument". Taking the same index again (a second
 * scan of the same argv) is no repeat. Not thread-safe: flags are parsed
 * on the main thread before any other starts.
 */
bool cli_flag(int argc, char **argv, int *i, const char *name,
	      const char **val);
bool cli_switch(char **argv, int i, const char *name);
int cli_missing(const char *cmd, const char *flag);
int cli_unknown(const char *cmd, const char *arg);

/* The flag whose value is the pointer `val` (into the argv last parsed),
 * or NULL: how output errors name "--out PATH". */
const char *cli_flag_of(const char *val);

/* Strict numbers: the whole text, decimal, in [min, max]; CLI_USAGE with a
 * message naming the flag and the text otherwise. */
int cli_u32(const char *cmd, const char *flag, const char *text,
	    uint32_t min, uint32_t max, uint32_t *out);
int cli_u64(const char *cmd, const char *flag, const char *text,
	    uint64_t min, uint64_t max, uint64_t *out);
int cli_double(const char *cmd, const char *flag, const char *text,
	       double min, double max, double *out);
/* Comma-separated list of u32 / doubles, at most `cap` items. */
int cli_u32_list(const char *cmd, const char *flag, const char *text,
		 uint32_t min, uint32_t max, uint32_t *out, size_t cap,
		 size_t *n);
int cli_double_list(const char *cmd, const char *flag, const char *text,
		    double min, double max, double *out, size_t cap,
		    size_t *n);

/* Read a whole file (NUL-terminated, length in *len); CLI_USAGE with
 * "dpl <cmd>: <path>: <reason>" on failure. Caller frees *buf. */
int cli_read_file(const char *cmd, const char *path, char **buf,
		  size_t *len);

/*
 * Output files (cli_out.c), written like a careful Unix tool:
 *  - "-" is stdout.
 *  - A regular file, or a path that does not exist yet, is written to a
 *    temporary file beside it (PATH.tmp.XXXXXX, same directory, the mode
 *    of the file it replaces or 0666 less the umask) that
 *    cli_out_commit() flushes, fsyncs and renames over PATH: readers see
 *    the old file or the whole new one, never half of it.
 *  - A symlink is followed: the temporary file goes beside the link's
 *    final target (realpath) and is renamed over that target, so the link
 *    stays a link and the file it names is replaced. A link whose target
 *    cannot be resolved (dangling, a loop) is refused with the reason.
 *  - A FIFO or a character device (/dev/null, a terminal) is written
 *    through directly: no temporary file. Opening a FIFO waits for its
 *    reader, as any writer of a FIFO does; SIGINT or SIGTERM end the wait.
 *  - A directory, a block device or a socket is refused (CLI_USAGE) with
 *    the reason.
 *  - While a temporary file exists, SIGINT, SIGTERM, SIGHUP and SIGXFSZ
 *    remove it and then end the process with the signal's default action.
 *    A signal that was ignored when dpl started (nohup, a shell's
 *    background job) stays ignored: a write past RLIMIT_FSIZE then fails
 *    with "File too large", reported with the path.
 * Every message names the flag and the path ("--out PATH: reason"; the
 * flag found with cli_flag_of(), "output PATH" when none gave it).
 * `o` must stay at its address from open to commit or abort (the stream
 * writes through it). One thread at a time per cli_out.
 */
struct cli_out {
	FILE *f;
	char *path;  /* what is replaced: the symlink's target, or the path */
	char *tmp;   /* the temporary file, or NULL (stdout, written through) */
	const char *cmd;
	const char *label; /* the flag, or "output" */
	const char *given; /* the path as given */
	int fd;
	int err;      /* errno of the first failed write, or 0 */
	int slot;     /* signal cleanup slot of tmp, or -1 */
	bool reported; /* the failure was printed */
};

/* Open `path` for writing as above. CLI_OK; CLI_USAGE (a refused path, or
 * one that cannot be opened or created), CLI_FAIL (out of memory) after a
 * message naming the flag and path. Does not block, except that opening a
 * FIFO waits for its reader. */
int cli_out_open(const char *cmd, const char *path, struct cli_out *o);
/* Check `path` as cli_out_open() would, before the work that produces
 * the output: CLI_OK, or CLI_USAGE after the same message for a path that
 * would be refused or whose folder is missing or not writable. Creates
 * nothing and opens nothing (a FIFO is not opened: no reader is needed). */
int cli_out_check(const char *cmd, const char *path);
/* Flush, fsync (regular files) and rename into place; on failure the
 * temporary file is removed and CLI_FAIL returned after the message. */
int cli_out_commit(const char *cmd, struct cli_out *o);
/* Drop the output: close it and remove the temporary file. When a write
 * had failed (o->err), prints "<flag> PATH: <reason>" once. */
void cli_out_abort(struct cli_out *o);
/* A writer failed: print "<flag> PATH: <reason>" (the failed write's
 * errno, else `why`, e.g. dpl_last_error()), abort, return CLI_FAIL. */
int cli_out_fail(struct cli_out *o, const char *why);

/* `dpl info`'s command (cmd_info.c). */
extern const struct dpl_cli_cmd dpl_cli_cmd_info;

/* The commands. */
extern const struct dpl_cli_cmd dpl_cli_cmd_schedule;
extern const struct dpl_cli_cmd dpl_cli_cmd_simulate;
extern const struct dpl_cli_cmd dpl_cli_cmd_plan;
extern const struct dpl_cli_cmd dpl_cli_cmd_train;

#endif /* DPL_CLI_H */
