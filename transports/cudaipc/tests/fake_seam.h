/*
 * fake_seam.h - a CUDA seam for tests without a GPU. "Device memory" is
 * host memory in a memfd mapping (fake_dev_alloc); an export names
 * (pid, fd, size, id) and open maps /proc/<pid>/fd/<fd> (same user);
 * copies are memcpy, carried out only when an event recorded after them
 * reports done (after a few queries) or the stream is synchronised.
 * The counters are this process's.
 */
#ifndef DPL_TEST_FAKE_SEAM_H
#define DPL_TEST_FAKE_SEAM_H

#include <stddef.h>

#include "../src/cudaipc_internal.h"

/* The fake seam, and a cudaipc table whose init uses it. */
extern const struct dpl__cudaipc_seam fake_seam;
extern const struct dpl_transport_ops fake_cudaipc;

/* `bytes` of fake device memory (zeroed), or NULL; at most 16 live. */
void *fake_dev_alloc(size_t bytes);
/* Free what fake_dev_alloc returned. */
void fake_dev_free(void *p);

/* From now on (on != 0) every open fails with DPL_EIO, as where the
 * platform refuses CUDA IPC; 0 allows them again. */
void fake_refuse_opens(int on);

/* Handles this process was asked for (its own allocations'), in all. */
int fake_handles(void);

/* Handles open now; handles opened in all. */
int fake_live_opens(void);
int fake_total_opens(void);

#endif /* DPL_TEST_FAKE_SEAM_H */
