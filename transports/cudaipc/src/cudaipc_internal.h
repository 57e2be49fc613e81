/*
 * cudaipc_internal.h - the CUDA IPC transport's seam to the CUDA runtime
 * and the init it shares with test tables. Not installed.
 *
 * Every CUDA runtime call of the module sits in cudaipc_cuda.c behind
 * struct dpl__cudaipc_seam, so that tests can put a fake in its place.
 */
#ifndef DPL_CUDAIPC_INTERNAL_H
#define DPL_CUDAIPC_INTERNAL_H

#include <dpl/transport.h>

struct dpl__cudaipc_seam {
	/* Whether this process has a CUDA device: 0, or DPL_ENOENT /
	 * DPL_EIO with a message naming the CUDA call and its error. */
	int (*probe)(void);
};

/* The CUDA runtime's seam (cudaipc_cuda.c). */
extern const struct dpl__cudaipc_seam dpl__cudaipc_cuda;

/* init through `seam`: the probe, then shm's init. */
int dpl__cudaipc_init_with(const struct dpl__cudaipc_seam *seam, void *vctx,
			   const struct dpl_transport_params *p);

#endif /* DPL_CUDAIPC_INTERNAL_H */
