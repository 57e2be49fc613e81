/*
 * nccl_seam.h - the NCCL and CUDA calls the shim makes, as a table, so
 * that the CPU-side logic runs under a fake in the unit tests.
 * Every member returns 0 or a DPL_E* code with dpl_set_error() naming
 * the call and its error string.
 */
#ifndef DPL_NCCL_SEAM_H
#define DPL_NCCL_SEAM_H

#include <stddef.h>
#include <stdint.h>

#define NCCL_SEAM_ID_BYTES 128 /* sizeof(ncclUniqueId) */

struct nccl_seam {
	int (*stream_create)(void **stream);
	void (*stream_destroy)(void *stream);
	int (*event_create)(void **event);
	void (*event_destroy)(void *event);
	int (*event_record)(void *event, void *stream);
	/* 0: done; DPL_EAGAIN: pending; else the error. */
	int (*event_query)(void *event);
	int (*get_unique_id)(unsigned char id[NCCL_SEAM_ID_BYTES]);
	int (*comm_init_rank)(void **comm, int nranks,
			      const unsigned char id[NCCL_SEAM_ID_BYTES],
			      int rank);
	int (*allreduce_sum)(void *buf, size_t count, uint32_t dtype,
			     void *comm, void *stream);
	/* 0, or DPL_EPEER with the asynchronous error named. */
	int (*async_error)(void *comm);
	void (*comm_abort)(void *comm);
	void (*comm_destroy)(void *comm);
};

/* The real table (nccl_cuda.c). */
extern const struct nccl_seam dpl__nccl_cuda_seam;

/* Tests replace the table; NULL restores the real one. Not thread-safe. */
void dpl__nccl_set_seam(const struct nccl_seam *s);

#endif /* DPL_NCCL_SEAM_H */
