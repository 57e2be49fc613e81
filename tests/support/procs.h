/*
 * procs.h - for tests that start processes: a child that dies with the
 * test, and a process's state and the CPU it has used.
 */
#ifndef DPL_TEST_PROCS_H
#define DPL_TEST_PROCS_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

/*
 * Called in a child right after fork(), with the parent's getpid() taken
 * before it: the child gets SIGKILL when the forking thread exits, so a
 * test killed from outside takes its children along. False when the
 * parent was already gone (the child must exit at once: no signal will
 * come).
 */
static inline bool dies_with_parent(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	return getppid() == parent;
}

/*
 * /proc/PID/stat of `pid` into buf (len bytes), returning where field 3
 * (the state) starts, after "(comm) "; NULL when it cannot be read (the
 * process is gone).
 */
static inline char *proc_stat(pid_t pid, char *buf, size_t len)
{
	char path[64], *p;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	if ((f = fopen(path, "r")) == NULL)
		return NULL;
	buf[fread(buf, 1, len - 1, f)] = '\0';
	fclose(f);
	if ((p = strrchr(buf, ')')) == NULL || p[1] != ' ')
		return NULL;
	return p + 2;
}

/* The state letter of `pid` (field 3: 'R', 'S', 'T', 'Z' ...); -1 when
 * it cannot be read. */
static inline int proc_state(pid_t pid)
{
	char buf[1024], *p = proc_stat(pid, buf, sizeof buf);

	return p ? *p : -1;
}

/*
 * User plus system CPU of `pid` in clock ticks (fields 14 and 15 of
 * /proc/PID/stat); -1 when they cannot be read (the process is gone).
 */
static inline long proc_cpu_ticks(pid_t pid)
{
	char buf[1024], *p = proc_stat(pid, buf, sizeof buf);
	unsigned long ut, st;
	int i;

	/* from field 3, eleven spaces on to field 14 */
	for (i = 0; i < 11 && p; i++)
		if ((p = strchr(p, ' ')) != NULL)
			p++;
	if (p == NULL || sscanf(p, "%lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

#endif /* DPL_TEST_PROCS_H */
