/*
 * cudaipc_internal.h - the CUDA IPC transport's seam to the CUDA runtime,
 * its device hook on shm's data path, and the init it shares with test
 * tables. Not installed.
 *
 * Every CUDA runtime call of the module sits in cudaipc_cuda.c behind
 * struct dpl__cudaipc_seam, so that tests can put a fake in its place.
 * The hook (cudaipc_dev.c) is shm's struct dpl__shm_dev: it exports a
 * send's device buffer into its RTS frame, and on the receiving side
 * opens the sender's handle (once per peer and allocation, in a bounded
 * cache), queues the copy on its own stream and watches a pooled event.
 */
#ifndef DPL_CUDAIPC_INTERNAL_H
#define DPL_CUDAIPC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dpl/transport.h>

#include "../../shm/src/shm_internal.h"

#define DPL__CUDAIPC_HANDLE 64u /* bytes of an IPC handle */
#define DPL__CUDAIPC_CACHE 32u  /* opened handles kept per context */
#define DPL__CUDAIPC_EVENTS 64u /* events in the pool */

/* The directions of copy_async. */
enum dpl__cudaipc_copy { DPL__CUDAIPC_D2D, DPL__CUDAIPC_D2H,
			 DPL__CUDAIPC_H2D };

/* A device buffer as a peer sees it: the payload of a K_DRTS frame. */
struct dpl__cudaipc_export {
	unsigned char handle[DPL__CUDAIPC_HANDLE]; /* of the allocation */
	uint64_t offset; /* of the buffer in its allocation */
	uint64_t size;   /* bytes of the allocation */
	uint64_t id;     /* the allocation's id: a reused address differs */
	uint64_t pad[5];
};

_Static_assert(sizeof(struct dpl__cudaipc_export) == DPL__SHM_DEV_BLOCK,
	       "an export fills a K_DRTS payload");

struct dpl__cudaipc_seam {
	/* Whether this process has a CUDA device: 0, or DPL_ENOENT /
	 * DPL_EIO with a message naming the CUDA call and its error. */
	int (*probe)(void);
	/* Create the transport's non-blocking stream (*s) and `n` events
	 * (ev[0..n)); on failure nothing is left created. */
	int (*setup)(void **s, void **ev, unsigned n);
	/* Destroy what setup created (after a stream_sync). */
	void (*teardown)(void *s, void **ev, unsigned n);
	/* Find the device allocation holding ptr: out's offset (of ptr in
	 * it), size and id (unique to the allocation in this process, so a
	 * reused address has another); cheap, called on every send. */
	int (*locate)(const void *ptr, struct dpl__cudaipc_export *out);
	/* The IPC handle of the allocation starting at base, into
	 * out->handle; dearer: the hook keeps what it returned. */
	int (*handle)(const void *base, struct dpl__cudaipc_export *out);
	/* Open a peer's handle (x->handle, of x->size bytes): *base is
	 * where its allocation is mapped here. */
	int (*open)(const struct dpl__cudaipc_export *x, void **base);
	/* Close what open returned (size as given to open). */
	void (*close)(void *base, uint64_t size);
	/* Queue a copy of len bytes on stream s; does not wait for it. */
	int (*copy_async)(void *s, void *dst, const void *src, size_t len,
			  enum dpl__cudaipc_copy kind);
	/* Record event ev on stream s (after the copies queued so far). */
	int (*event_record)(void *s, void *ev);
	/* 1 when what ev follows is done, 0 when not yet, or an error. */
	int (*event_query)(void *ev);
	/* Wait until everything queued on s is done. */
	int (*stream_sync)(void *s);
	/* Allocate / free `bytes` of device memory for init's probe
	 * (cudaMalloc on the current device: it makes its context). */
	int (*probe_alloc)(size_t bytes, void **buf);
	void (*probe_free)(void *buf);
};

/* The CUDA runtime's seam (cudaipc_cuda.c). */
extern const struct dpl__cudaipc_seam dpl__cudaipc_cuda;

/* One opened handle of the cache. */
struct dpl__cudaipc_open {
	uint64_t id;     /* the sender's allocation id */
	uint64_t size;
	uint64_t used;   /* when last used (the cache's clock) */
	void *base;      /* NULL: the entry is free */
	uint32_t peer;
	unsigned char handle[DPL__CUDAIPC_HANDLE];
};

/* One of this rank's own allocations whose handle was asked for. */
struct dpl__cudaipc_mine {
	uint64_t id, size; /* 0: the entry is free */
	uint64_t used;
	uintptr_t base;
	unsigned char handle[DPL__CUDAIPC_HANDLE];
};

/* The hook's state: shm's hook first, then the CUDA objects. */
struct dpl__cudaipc_dev {
	struct dpl__shm_dev hook;
	const struct dpl__cudaipc_seam *seam;
	bool made; /* stream and events exist (made at the first copy) */
	void *stream;
	void *ev[DPL__CUDAIPC_EVENTS];
	uint32_t free_ev[DPL__CUDAIPC_EVENTS]; /* stack of free events */
	uint32_t nfree;
	uint64_t clock;
	struct dpl__cudaipc_open cache[DPL__CUDAIPC_CACHE];
	struct dpl__cudaipc_mine mine[DPL__CUDAIPC_CACHE];
};

/* The export of device buffer ptr (locate, then handle) without the
 * cache, for init's probe; 0 or the seam's error. */
int dpl__cudaipc_export_of(const struct dpl__cudaipc_seam *seam,
			   const void *ptr, struct dpl__cudaipc_export *out);

/* A cudaipc context: shm's, then the hook. */
struct dpl__cudaipc_ctx {
	struct ctx shm;
	struct dpl__cudaipc_dev dev;
};

/* Set up the hook of d with `seam` (nothing of CUDA yet: the stream and
 * events come at the first copy); returns 0. */
int dpl__cudaipc_dev_init(struct dpl__cudaipc_dev *d,
			  const struct dpl__cudaipc_seam *seam);

/* Close every handle, destroy the stream and events. */
void dpl__cudaipc_dev_fini(struct dpl__cudaipc_dev *d);

/* init through `seam`: the device probe, shm's init, the IPC probe,
 * then the hook. */
int dpl__cudaipc_init_with(const struct dpl__cudaipc_seam *seam, void *vctx,
			   const struct dpl_transport_params *p);

/*
 * dpl__cudaipc_probe_ipc - init's collective check that CUDA IPC works
 * between the ranks (cudaipc_probe.c): each exports a probe buffer and
 * opens the next rank's. 0, or on every rank the same error naming the
 * first rank that could not, and why. A world of one returns 0 at once.
 */
int dpl__cudaipc_probe_ipc(const struct dpl__cudaipc_seam *seam,
			   const struct dpl_transport_params *p);

/* The fini member: shm's fini, then the hook's. */
void dpl__cudaipc_fini(void *vctx);

/* The caps of the cudaipc tables. */
#define DPL__CUDAIPC_CAPS                                                    \
	(DPL_TRANSPORT_CAP_PEER_FAILURE | DPL_TRANSPORT_CAP_MEM_CUDA)

/* The members of a cudaipc table whose init is `initfn` (a test's table
 * puts an init with a fake seam there). */
#define DPL__CUDAIPC_TABLE(tname, initfn)                                    \
	.abi_version = DPL_TRANSPORT_ABI_VERSION,                            \
	.size = sizeof(struct dpl_transport_ops), .name = (tname),           \
	.caps = DPL__CUDAIPC_CAPS,                                           \
	.ctx_size = sizeof(struct dpl__cudaipc_ctx),                         \
	.req_size = sizeof(struct req), .init = (initfn),                    \
	.fini = dpl__cudaipc_fini, .isend = dpl__shm_isend,                  \
	.irecv = dpl__shm_irecv, .test = dpl__shm_test,                      \
	.progress = dpl__shm_progress, .cancel = dpl__shm_cancel,            \
	.wait = dpl__shm_wait

#endif /* DPL_CUDAIPC_INTERNAL_H */
