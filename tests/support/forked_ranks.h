/*
 * forked_ranks.h - tests whose ranks are forked processes: a free
 * loopback port for a rendezvous, memory the ranks share with the test,
 * fork one process per rank, and reap them with a bound (stragglers are
 * killed). Header-only, for Criterion tests.
 */
#ifndef DPL_TEST_FORKED_RANKS_H
#define DPL_TEST_FORKED_RANKS_H

#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "loopback_port.h"

static inline void fr_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* A port on 127.0.0.1 nobody listens on right now. */
static inline unsigned fr_pick_port(void)
{
	int port = dpl_test_loopback_port();

	cr_assert(port > 0, "no free port on 127.0.0.1");
	return (unsigned)port;
}

/* `size` zeroed bytes that the ranks forked later share with the test. */
static inline void *fr_shared(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	cr_assert(p != MAP_FAILED);
	memset(p, 0, size);
	return p;
}

/* Fork n processes; process i runs fn(i, arg) and exits 0. */
static inline void fr_spawn(pid_t *pid, int n, void (*fn)(int, void *),
			    void *arg)
{
	int i;

	for (i = 0; i < n; i++) {
		pid[i] = fork();
		cr_assert(pid[i] >= 0);
		if (pid[i] == 0) {
			fn(i, arg);
			_exit(0);
		}
	}
}

/* Wait for the n processes, killing those left after timeout_ms.
 * Returns how many exited with status 0. */
static inline int fr_reap(pid_t *pid, int n, int timeout_ms)
{
	int i, ok = 0, left = 0, waited = 0, st;

	for (i = 0; i < n; i++)
		left += pid[i] > 0;
	while (left > 0 && waited < timeout_ms) {
		for (i = 0; i < n; i++)
			if (pid[i] > 0 &&
			    waitpid(pid[i], &st, WNOHANG) == pid[i]) {
				ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
				pid[i] = 0;
				left--;
			}
		if (left > 0) {
			fr_sleep_ms(2);
			waited += 2;
		}
	}
	for (i = 0; i < n; i++)
		if (pid[i] > 0) {
			kill(pid[i], SIGKILL);
			waitpid(pid[i], &st, 0);
		}
	return ok;
}

#endif /* DPL_TEST_FORKED_RANKS_H */
