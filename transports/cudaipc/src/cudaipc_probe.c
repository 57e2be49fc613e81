/*
 * cudaipc_probe.c - does the platform allow CUDA IPC between the ranks?
 * Asked once at init, collectively, over the host's out-of-band exchange
 * (some containers refuse it: a private IPC or PID namespace). Every rank
 * exports a small device buffer, opens the export of the next rank and
 * closes it again; the results are gathered, and a refusal anywhere fails
 * init on every rank with the same message naming the rank and the CUDA
 * error. Only neighbours are tried: a pair of GPUs without peer access
 * elsewhere fails later, at its first message, saying so too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/backend.h>

#include "cudaipc_internal.h"

#define PROBE_BYTES 4096u

/* What a rank tells the others first: its export, or why there is none. */
struct blob {
	int32_t rc;
	uint32_t pad;
	struct dpl__cudaipc_export x;
};

/* What it tells them next: whether it could map its neighbour's. */
struct verdict {
	int32_t rc;
	char why[252];
};

/* This rank's verdict on next's export (v holds our own failure, if
 * any, already). */
static void try_open(const struct dpl__cudaipc_seam *seam, uint32_t next,
		     const struct blob *theirs, struct verdict *v)
{
	void *base = NULL;

	if (v->rc != 0 || theirs->rc != 0)
		return; /* rank next says why itself */
	v->rc = seam->open(&theirs->x, &base);
	if (v->rc != 0) {
		snprintf(v->why, sizeof v->why, "cannot map rank %u's device "
			 "buffer (%s)", next, dpl_last_error());
		return;
	}
	seam->close(base, theirs->x.size);
}

int dpl__cudaipc_probe_ipc(const struct dpl__cudaipc_seam *seam,
			   const struct dpl_transport_params *p)
{
	const struct dpl_oob *oob = p->oob;
	uint32_t n = p->world_size, next = (p->rank + 1) % n, q;
	struct blob mine, *all = NULL;
	struct verdict v, *verdicts = NULL;
	void *buf = NULL;
	int rc;

	if (n < 2)
		return 0;
	all = calloc(n, sizeof *all);
	verdicts = calloc(n, sizeof *verdicts);
	if (all == NULL || verdicts == NULL) {
		free(all);
		free(verdicts);
		return dpl_set_error(DPL_ENOMEM, "transport cudaipc: out of "
				     "memory");
	}
	/* A failure of our own still takes part in both exchanges, so that
	 * nobody waits for us; it is what we report in the second. */
	memset(&mine, 0, sizeof mine);
	if ((mine.rc = seam->probe_alloc(PROBE_BYTES, &buf)) == 0)
		mine.rc = dpl__cudaipc_export_of(seam, buf, &mine.x);
	memset(&v, 0, sizeof v);
	if (mine.rc != 0) {
		v.rc = mine.rc;
		snprintf(v.why, sizeof v.why, "cannot export a device buffer "
			 "(%s)", dpl_last_error());
	}
	rc = oob->allgather(oob->user, &mine, sizeof mine, all);
	if (rc == 0) {
		try_open(seam, next, &all[next], &v);
		rc = oob->allgather(oob->user, &v, sizeof v, verdicts);
	}
	/* Every neighbour closed its mapping (or never made one). */
	if (buf != NULL)
		seam->probe_free(buf);
	for (q = 0; rc == 0 && q < n; q++)
		if (verdicts[q].rc != 0)
			rc = dpl_set_error(verdicts[q].rc, "transport "
					   "cudaipc: CUDA IPC is refused "
					   "here: rank %u %.200s; in a "
					   "container it needs the host's "
					   "IPC and PID namespaces", q,
					   verdicts[q].why);
	free(all);
	free(verdicts);
	return rc;
}
