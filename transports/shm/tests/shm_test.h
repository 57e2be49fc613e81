/*
 * shm_test.h - what the shared-memory transport's own tests add to
 * test_job.h: jobs of ranks that open the shm transport over dpl's
 * bootstrap before their rank function and close it after, the sizes
 * that matter to its protocol, a wait that leaves the ring alone, and
 * the /dev/shm segments of a process. Ranks post through the checked
 * layer (dpl_transport_isend() and its siblings) on rk->t.
 */
#ifndef DPL_TEST_SHM_TEST_H
#define DPL_TEST_SHM_TEST_H

#include <stdint.h>
#include <sys/types.h>

#include <dpl/transport.h>
#include <dpl/transport_shm.h>

#include "test_job.h"

#define RING DPL_SHM_DEFAULT_RING
#define EAGER DPL_SHM_DEFAULT_EAGER
#define MiB (1024u * 1024u)
#define GUARD 64

extern const struct dpl_transport_ops *const O; /* &dpl_transport_shm */

/*
 * A job of n processes that meet through dpl's bootstrap, open shm with
 * `opts` (NULL: the defaults) before fn and close it after, all within
 * deadline_ms.
 */
struct tj_job shm_job(uint32_t n, tj_rank_fn fn, unsigned deadline_ms,
		      const char *opts);

/* Run the job and assert that every rank finished (the report names
 * those that did not). The test reads the slots, then frees the job. */
void shm_run(struct tj_job *job);

/* In a rank: wait until flag i is at least v without progressing rk->t,
 * so that messages stay in the ring meanwhile; fails at the deadline. */
void shm_flag_wait_quiet(struct tj_rank *rk, unsigned i, int64_t v);

/* Entries of /dev/shm that are segments of process pid (named
 * "dpl-...-p<pid>"). */
int shm_segments(pid_t pid);

#endif /* DPL_TEST_SHM_TEST_H */
