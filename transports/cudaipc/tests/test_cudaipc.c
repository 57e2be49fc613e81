/*
 * test_cudaipc.c - the CUDA IPC transport's init: without a CUDA device
 * it fails with DPL_ENOENT naming the runtime's error and leaves
 * nothing behind; the table has shm's members and takes device memory.
 */
#include <string.h>

#include <criterion/criterion.h>
#include <cuda_runtime_api.h>

#include <dpl/transport_cudaipc.h>

Test(cudaipc, table)
{
	const struct dpl_transport_ops *o = &dpl_transport_cudaipc;

	cr_assert_str_eq(o->name, "cudaipc");
	cr_assert_neq(o->caps & DPL_TRANSPORT_CAP_MEM_CUDA, 0u);
	cr_assert(o->init && o->fini && o->isend && o->irecv && o->test &&
		  o->progress && o->cancel && o->wait);
}

Test(cudaipc, init_without_gpu_is_enoent)
{
	int n = 0;
	dpl_transport *t = NULL;
	int rc;

	if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0)
		cr_skip_test("a CUDA device is present");
	struct dpl_transport_params p = {
		.rank = 0, .world_size = 1, .oob = NULL,
	};

	rc = dpl_transport_open(&dpl_transport_cudaipc, &p, &t);
	cr_assert_eq(rc, DPL_ENOENT, "rc %d: %s", rc, dpl_last_error());
	cr_assert_null(t);
	cr_assert(strstr(dpl_last_error(), "cudaErrorNoDevice") ||
		  strstr(dpl_last_error(), "cudaErrorInsufficientDriver"),
		  "%s", dpl_last_error());
}
