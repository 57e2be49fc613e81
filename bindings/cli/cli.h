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
#define CLI_FAIL 1  /* the work failed (invalid schedule, training error) */
#define CLI_USAGE 2 /* bad flags, values or input files */

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
 * cli_missing()). Advances i past the value.
 */
bool cli_flag(int argc, char **argv, int *i, const char *name,
	      const char **val);
bool cli_switch(char **argv, int i, const char *name);
int cli_missing(const char *cmd, const char *flag);
int cli_unknown(const char *cmd, const char *arg);

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
 * Output files that are never left half-written: cli_out_open() writes
 * to a temporary file beside `path` ("-" is stdout); cli_out_commit()
 * flushes, fsyncs and renames it into place; cli_out_abort() removes it.
 */
struct cli_out {
	FILE *f;
	char *path;
	char *tmp;
};
int cli_out_open(const char *cmd, const char *path, struct cli_out *o);
int cli_out_commit(const char *cmd, struct cli_out *o);
void cli_out_abort(struct cli_out *o);

/* The commands. */
extern const struct dpl_cli_cmd dpl_cli_cmd_schedule;
extern const struct dpl_cli_cmd dpl_cli_cmd_simulate;
extern const struct dpl_cli_cmd dpl_cli_cmd_plan;
extern const struct dpl_cli_cmd dpl_cli_cmd_train;

#endif /* DPL_CLI_H */
