/* host_device.c - host memory as a device, built into the core. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "runner_internal.h"

static int host_init(void *ctx, const struct dpl_device_params *p)
{
	if (p->index != 0)
		return dpl__error(DPL_EINVAL, "device host: index %u (only 0)",
				  p->index);
	return 0;
}

static void host_fini(void *ctx)
{
}

static int host_alloc(void *ctx, uint32_t mem, size_t bytes, void **out)
{
	void *p = NULL;

	if (mem != DPL_MEM_HOST)
		return dpl__error(DPL_ENOTSUP, "device host: memory kind %u",
				  mem);
	if (bytes == 0)
		return dpl__error(DPL_EINVAL, "device host: alloc of 0 bytes");
	if (posix_memalign(&p, 64, bytes) != 0)
		return dpl__error(DPL_ENOMEM, "device host: %zu bytes", bytes);
	*out = p;
	return 0;
}

static void host_free(void *ctx, uint32_t mem, void *ptr)
{
	free(ptr);
}

static int host_copy(void *ctx, void *dst, uint32_t dmem, const void *src,
		     uint32_t smem, size_t bytes)
{
	if (dmem != DPL_MEM_HOST || smem != DPL_MEM_HOST)
		return dpl__error(DPL_ENOTSUP,
				  "device host: copy between kinds %u and %u",
				  dmem, smem);
	if (bytes > 0)
		memcpy(dst, src, bytes);
	return 0;
}

static int host_sum(void *ctx, void *dst, const void *src, size_t count,
		    uint32_t dtype)
{
	return dpl_host_sum(dst, src, count, dtype);
}

DPL_EXTERN const struct dpl_device_ops dpl_device_host = {
	.abi_version = DPL_DEVICE_ABI_VERSION,
	.size = sizeof(struct dpl_device_ops),
	.name = "host",
	.caps = DPL_DEVICE_CAP_HOST_ACCESS,
	.mem = DPL_MEM_HOST,
	.ctx_size = 0,
	.init = host_init,
	.fini = host_fini,
	.alloc = host_alloc,
	.free = host_free,
	.copy = host_copy,
	.sum = host_sum,
};
