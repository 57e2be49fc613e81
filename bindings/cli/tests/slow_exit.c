/*
 * slow_exit.c - preloaded into `dpl train --nprocs` by test_launch_blame:
 * a rank process (DPL_RANK set) takes DPL_TEST_SLOW_EXIT_MS milliseconds
 * to exit, held in a tracing stop for that long the way a sanitizer's leak
 * check holds an exiting process (its tracer thread ptrace-attaches to
 * every thread). Where ptrace is refused it sleeps instead. The launcher
 * and every process without DPL_RANK exit as usual.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap_ms(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&t, &t) != 0)
		;
}

__attribute__((destructor)) static void slow_exit(void)
{
	const char *v = getenv("DPL_TEST_SLOW_EXIT_MS");
	pid_t self = getpid(), k;
	long ms;

	if (v == NULL || getenv("DPL_RANK") == NULL ||
	    (ms = strtol(v, NULL, 10)) <= 0 || ms > 60000)
		return;
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	if ((k = fork()) < 0) {
		nap_ms(ms);
		return;
	}
	if (k == 0) {
		/* The tracer: stop the rank's main thread, hold it, let go. */
		if (ptrace(PTRACE_SEIZE, self, 0, 0) == 0 &&
		    ptrace(PTRACE_INTERRUPT, self, 0, 0) == 0) {
			waitpid(self, NULL, __WALL);
			nap_ms(ms);
			ptrace(PTRACE_DETACH, self, 0, 0);
		} else {
			nap_ms(ms);
		}
		_exit(0);
	}
	while (waitpid(k, NULL, 0) < 0 && errno == EINTR)
		;
}
