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
};

/* What the watch loop knows. */
struct watch {
	double deadline;   /* 0: none yet */
	bool by_stop;      /* the deadline comes from a stopped rank alone */
	bool forwarded;
	uint32_t left, nfail, nstopped;
	unsigned seq;
};

/* Did the rank exit otherwise than with CLI_OK (or was it killed)? */
bool cli__failed(const struct proc *c);

/*
 * cli__read_causes - read the ranks' lines ("cause R Q\n") from the read
 * end of the cause pipe, every writer gone, into c[R].named; lines that
 * do not parse or name ranks outside [0, n) are ignored. Does not block
 * (the descriptor is made non-blocking) and closes fd.
 */
void cli__read_causes(int fd, struct proc *c, uint32_t n);

/*
 * cli__report - print one line for every rank that failed, the cause
 * last (launch.h says which rank that is), and return CLI_FAIL.
 */
int cli__report(const char *cmd, const struct cli_launch *p,
		const struct proc *c, const struct watch *w);

#endif /* DPL_CLI_LAUNCH_INTERNAL_H */
