/*
 * launch_report.c - the launcher's verdict on a failed job: which rank
 * explains the failure (what the launcher saw of each rank: stopped,
 * killed, hung, failed itself, stopped because of another; and the
 * cause each rank names through the cause pipe), and the lines that say
 * so. Also the rank side of the pipe.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "launch_internal.h"

#define NONE UINT32_MAX

bool cli__failed(const struct proc *c)
{
	return c->done && !(WIFEXITED(c->status) && WEXITSTATUS(c->status) ==
							    CLI_OK);
}

/*
 * How much a failed rank explains the job's failure: stopped and never
 * continued (4), killed by a signal the launcher did not send (3), still
 * running when the launcher gave up on it (2: no progress), failed itself
 * (1), stopped because another rank failed (0). Ranks that exit after a
 * timeout or a notice are consequences of a stopped or dead rank.
 */
static int weight(const struct proc *c)
{
	if (c->killed)
		return c->stopped ? 4 : 2;
	if (WIFSIGNALED(c->status))
		return 3;
	return WEXITSTATUS(c->status) == CLI_PEER_FAILED ? 0 : 1;
}

static void describe(const struct proc *c, char *buf, size_t size)
{
	if (c->killed && c->stopped && c->stop_sig != 0)
		snprintf(buf, size, "stopped responding (stopped by signal %d "
			 "(%s) and never continued; killed)", c->stop_sig,
			 strsignal(c->stop_sig));
	else if (c->killed && c->stopped)
		snprintf(buf, size, "stopped responding (stopped by a signal "
			 "and never continued; killed)");
	else if (c->killed)
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

/* The rank that explains the failure: the highest weight, the first seen
 * among equals. */
static uint32_t cause_of(const struct proc *c, uint32_t n)
{
	uint32_t i, best = UINT32_MAX;

	for (i = 0; i < n; i++) {
		if (!cli__failed(&c[i]))
			continue;
		if (best == UINT32_MAX || weight(&c[i]) > weight(&c[best]) ||
		    (weight(&c[i]) == weight(&c[best]) &&
		     c[i].seq < c[best].seq))
			best = i;
	}
	return best;
}


/* Append ", i" (or "i" first) to the list in buf; a full list stays. */
static void add_rank(char *buf, size_t size, size_t *len, uint32_t *count,
		     uint32_t i)
{
	int k = snprintf(buf + *len, size - *len, "%s%u", *count ? ", " : "",
			 i);

	if (k < 0 || (size_t)k >= size - *len) {
		buf[*len] = '\0';
		return;
	}
	*len += (size_t)k;
	(*count)++;
}

/* One line for every failed rank but `except`. */
static void print_failed_but(const char *cmd, const struct proc *c,
			     uint32_t n, uint32_t except)
{
	char why[160];
	uint32_t i;

	for (i = 0; i < n; i++)
		if (cli__failed(&c[i]) && i != except) {
			describe(&c[i], why, sizeof why);
			fprintf(stderr, "dpl %s: rank %u (pid %ld) %s\n", cmd,
				i, (long)c[i].pid, why);
		}
}

/* The rank most failed ranks name as the cause (the lowest among
 * equals), or NONE when none named one. */
static uint32_t most_named(const struct proc *c, uint32_t n)
{
	uint32_t q, i, votes, best = NONE, most = 0;

	for (q = 0; q < n; q++) {
		for (i = 0, votes = 0; i < n; i++)
			votes += cli__failed(&c[i]) && c[i].named == q;
		if (votes > most) {
			most = votes;
			best = q;
		}
	}
	return best;
}

/*
 * Every failed rank stopped because of another, as its exit status says
 * (a lost peer, a notice, a timeout): the launcher saw nothing of its
 * own, so the ranks' own verdict names the cause, q.
 */
static int report_named(const char *cmd, const struct cli_launch *p,
			const struct proc *c, const struct watch *w,
			uint32_t q)
{
	const char *ranks;
	char by[256];
	uint32_t i, nby = 0;
	size_t len = 0;

	by[0] = '\0';
	print_failed_but(cmd, c, p->nprocs, q);
	for (i = 0; i < p->nprocs; i++)
		if (cli__failed(&c[i]) && c[i].named == q && i != q)
			add_rank(by, sizeof by, &len, &nby, i);
	ranks = nby == 0 ? "" : nby > 1 ? "ranks " : "rank ";
	return cli_fail(cmd, "rank %u (pid %ld) is named as the cause by "
			"%s%s%s%s; %u of %u ranks exited with an error", q,
			(long)c[q].pid, ranks, by,
			nby && c[q].named == q ? " and " : "",
			c[q].named == q ? "by itself" : "", w->nfail,
			p->nprocs);
}

/* Name every failed rank, the cause last. */
int cli__report(const char *cmd, const struct cli_launch *p,
		const struct proc *c, const struct watch *w)
{
	char why[160], others[256];
	uint32_t i, first = cause_of(c, p->nprocs), nothers = 0, named;
	size_t len = 0;

	if (weight(&c[first]) == 0 &&
	    (named = most_named(c, p->nprocs)) != NONE)
		return report_named(cmd, p, c, w, named);

	print_failed_but(cmd, c, p->nprocs, first);
	describe(&c[first], why, sizeof why);
	others[0] = '\0';
	/* A stopped or hung rank: the others gave up waiting for it. */
	for (i = 0; c[first].killed && i < p->nprocs; i++)
		if (i != first && cli__failed(&c[i]) && !c[i].killed)
			add_rank(others, sizeof others, &len, &nothers, i);
	if (nothers > 0)
		return cli_fail(cmd, "rank %u (pid %ld) %s; rank%s %s gave up "
				"waiting for it; %u of %u ranks exited with an "
				"error", first, (long)c[first].pid, why,
				nothers > 1 ? "s" : "", others, w->nfail,
				p->nprocs);
	return cli_fail(cmd, "rank %u (pid %ld) %s; %u of %u ranks exited "
			"with an error", first, (long)c[first].pid, why,
			w->nfail, p->nprocs);
}


/* One line "cause R Q" (no newline). */
static void take_line(const char *line, struct proc *c, uint32_t n)
{
	unsigned r, q;
	char end;

	if (sscanf(line, "cause %u %u%c", &r, &q, &end) == 2 && r < n &&
	    q < n) {
		c[r].named = q;
		c[r].told = true;
	}
}

void cli__poll_causes(struct watch *w, struct proc *c, uint32_t n)
{
	ssize_t got;
	char *nl;

	if (w->cause_fd < 0)
		return;
	for (;;) {
		got = read(w->cause_fd, w->cbuf + w->clen,
			   sizeof w->cbuf - 1 - w->clen);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return;
		w->clen += (size_t)got;
		w->cbuf[w->clen] = '\0';
		while ((nl = strchr(w->cbuf, '\n')) != NULL) {
			*nl = '\0';
			take_line(w->cbuf, c, n);
			w->clen -= (size_t)(nl + 1 - w->cbuf);
			memmove(w->cbuf, nl + 1, w->clen + 1);
		}
		/* A line that does not fit is nobody's: drop it. */
		if (w->clen == sizeof w->cbuf - 1)
			w->clen = 0;
	}
}

void cli_launch_tell_cause(uint32_t rank, uint32_t cause)
{
	const char *v = getenv(CLI_LAUNCH_FD_ENV);
	char line[64], *end;
	long fd;
	int k;

	if (v == NULL || cause == NONE)
		return;
	errno = 0;
	fd = strtol(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || fd < 0 || fd > 1 << 20)
		return;
	k = snprintf(line, sizeof line, "cause %u %u\n", rank, cause);
	/* One write of less than PIPE_BUF bytes: never mixed with another
	 * rank's line. Best effort: the launcher may be gone. */
	if (write((int)fd, line, (size_t)k) < 0)
		return;
}
