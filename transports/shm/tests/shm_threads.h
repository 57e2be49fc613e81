/* shm_threads.h - ranks as threads of one process (shm_threads.c). */
#ifndef DPL_TEST_SHM_THREADS_H
#define DPL_TEST_SHM_THREADS_H

#include <stddef.h>

/*
 * Run the bootstrap with four threads, then two shm contexts on two
 * threads (cross-memory attach, then streaming), as jobs of test_job.
 * Returns 0, or nonzero with the job's report in msg.
 */
int dpl_test_shm_threads(char *msg, size_t size);

#endif
