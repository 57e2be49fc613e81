/*
 * transport_probe_mem.c - the probe's buffers: page-aligned host memory,
 * or CUDA device memory (--mem cuda) through the CUDA runtime loaded at
 * run time, so that the probe builds and runs on hosts without CUDA and
 * only --mem cuda needs it. Each rank is a process (or thread) that
 * allocates after the fork, on GPU 0 (all ranks share it: cudaipc's
 * several-processes-on-one-GPU case) or on CUDA_VISIBLE_DEVICES' first.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport_probe.h"

struct cudart {
	int (*set_device)(int);
	int (*malloc_)(void **, size_t);
	int (*free_)(void *);
	int (*memset_)(void *, int, size_t);
	int (*sync)(void);
	const char *(*err)(int);
};

static struct cudart C;

static int cudart_load(char *why, size_t size)
{
	static const char *const libs[] = {"libcudart.so", "libcudart.so.13",
					   "libcudart.so.12"};
	void *h = NULL;
	size_t i;

	for (i = 0; h == NULL && i < sizeof libs / sizeof libs[0]; i++)
		h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(why, size, "--mem cuda: no CUDA runtime (%s)",
			 dlerror());
		return -1;
	}
	*(void **)&C.set_device = dlsym(h, "cudaSetDevice");
	*(void **)&C.malloc_ = dlsym(h, "cudaMalloc");
	*(void **)&C.free_ = dlsym(h, "cudaFree");
	*(void **)&C.memset_ = dlsym(h, "cudaMemset");
	*(void **)&C.sync = dlsym(h, "cudaDeviceSynchronize");
	*(void **)&C.err = dlsym(h, "cudaGetErrorString");
	if (!C.set_device || !C.malloc_ || !C.free_ || !C.memset_ ||
	    !C.sync || !C.err) {
		snprintf(why, size, "--mem cuda: the CUDA runtime lacks a "
			 "function the probe calls");
		return -1;
	}
	return 0;
}

void *probe_alloc(size_t bytes, int fill, char *why, size_t size)
{
	size_t n = (bytes + 4095) / 4096 * 4096;
	void *p = NULL;
	int rc;

	if (n == 0)
		n = 4096;
	if (O.mem != DPL_MEM_CUDA) {
		if ((p = aligned_alloc(4096, n)) == NULL)
			snprintf(why, size, "out of memory (%zu bytes)", n);
		else
			memset(p, fill, n);
		return p;
	}
	if (C.malloc_ == NULL && cudart_load(why, size) != 0)
		return NULL;
	if ((rc = C.set_device(0)) != 0 || (rc = C.malloc_(&p, n)) != 0 ||
	    (rc = C.memset_(p, fill, n)) != 0 || (rc = C.sync()) != 0) {
		snprintf(why, size, "--mem cuda: %s", C.err(rc));
		return NULL;
	}
	return p;
}

void probe_free(void *p)
{
	if (p == NULL)
		return;
	if (O.mem == DPL_MEM_CUDA)
		C.free_(p);
	else
		free(p);
}
