/*
 * shm_threads_check.c - the threaded cases of shm_threads.c as a plain
 * program, for ThreadSanitizer builds, where Criterion cannot start
 * (Snaipe/Criterion#274). Exit status 0 on success.
 */
#include <stdio.h>

#include "shm_threads.h"

int main(void)
{
	char msg[4096];

	if (dpl_test_shm_threads(msg, sizeof msg) != 0) {
		fprintf(stderr, "shm_threads_check: %s\n", msg);
		return 1;
	}
	printf("shm_threads_check: ok\n");
	return 0;
}
