/*
 * procs.h - for tests that start processes: a child that dies with the
 * test, and the CPU a process has used.
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
 * User plus system CPU of `pid` in clock ticks (fields 14 and 15 of
 * /proc/PID/stat, counted after "(comm)"); -1 when they cannot be read
 * (the process is gone).
 */
static inline long proc_cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut, st;
	FILE *f;
	int i;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
	fclose(f);
	if ((p = strrchr(buf, ')')) == NULL)
		return -1;
	/* the twelfth space after ')' is the one before field 14 */
	for (i = 0; i < 12 && p; i++)
		p = strchr(p + 1, ' ');
	if (p == NULL || sscanf(p, " %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

#endif /* DPL_TEST_PROCS_H */
