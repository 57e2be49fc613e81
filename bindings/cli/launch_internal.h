/*
 * launch_internal.h - what launch.c (start and watch the ranks) and
 * launch_report.c (the ranks' causes and the final lines) share.
 */
#ifndef DPL_CLI_LAUNCH_INTERNAL_H
#define DPL_CLI_LAUNCH_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "launch.h"

/* The environment variable that gives a rank the launcher's cause pipe
 * (a file descriptor number). */
#define CLI_LAUNCH_FD_ENV "DPL_LAUNCH_FD"

/* One rank process, as the launcher sees it. */
struct proc {
	pid_t pid;
	int status;   /* waitpid status, valid when done */
	bool done;
	bool killed;  /* by the launcher: past the grace period, or stopped
			 while every other rank had exited */
	bool stopped; /* stopped by a signal and not continued since */
	int stop_sig; /* the signal that stopped it, 0 when only /proc said */
	unsigned seq; /* order in which the launcher saw it end */
	uint32_t named; /* the rank it names as the cause (its pipe line),
			   UINT32_MAX when it said none */
	bool told;    /* its pipe line came: it is on its way out */
};

/* What the watch loop knows. */
struct watch {
	double deadline;   /* 0: none yet */
	bool by_stop;      /* the deadline comes from a stopped rank alone */
	bool forwarded;
	uint32_t left, nfail, nstopped;
	unsigned seq;
	int cause_fd;      /* read end of the cause pipe, -1: none */
	size_t clen;       /* bytes of an unfinished line in cbuf */
	char cbuf[256];
};

/* How long past the bound a rank that has told its cause (and so is
 * exiting: flushing, freeing, a sanitizer's leak check) may take before
 * it is killed all the same. */
#define CLI_LAUNCH_EXIT_S 15.0

/* Did the rank exit otherwise than with CLI_OK (or was it killed)? */
bool cli__failed(const struct proc *c);

/*
 * cli__poll_causes - read what the ranks wrote on the cause pipe so far
 * (lines "cause R Q\n", each one write) into c[R].named and c[R].told;
 * lines that do not parse or name ranks outside [0, n) are ignored, and
 * so is a line longer than w->cbuf. Never blocks (w->cause_fd is made
 * non-blocking by the caller); does nothing when w->cause_fd is -1.
 */
void cli__poll_causes(struct watch *w, struct proc *c, uint32_t n);

/*
 * cli__report - print one line for every rank that failed, the cause
 * last (launch.h says which rank that is), and return CLI_FAIL.
 */
int cli__report(const char *cmd, const struct cli_launch *p,
		const struct proc *c, const struct watch *w);

#endif /* DPL_CLI_LAUNCH_INTERNAL_H */
