/*
 * synthetic_device.c - the synthetic device: host memory that counts the
 * bytes it hands out, for the synthetic model's timing runs.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/device_synthetic.h>

static atomic_ullong allocated;

struct hdr {
	uint64_t bytes;
	uint64_t pad[7]; /* keeps the payload 64-byte aligned */
};

static int syn_init(void *ctx, const struct dpl_device_params *p)
{
	if (p->index != 0)
		return dpl_set_error(DPL_EINVAL,
				     "device synthetic: index %u (only 0)",
				     p->index);
	return 0;
}

static void syn_fini(void *ctx)
{
}

static int syn_alloc(void *ctx, uint32_t mem, size_t bytes, void **out)
{
	struct hdr *h = NULL;

	if (mem != DPL_MEM_HOST)
		return dpl_set_error(DPL_ENOTSUP,
				     "device synthetic: memory kind %u", mem);
	if (bytes == 0 || bytes > SIZE_MAX - sizeof *h ||
	    posix_memalign((void **)&h, 64, sizeof *h + bytes) != 0)
		return dpl_set_error(bytes ? DPL_ENOMEM : DPL_EINVAL,
				     "device synthetic: alloc of %zu bytes",
				     bytes);
	h->bytes = bytes;
	atomic_fetch_add(&allocated, bytes);
	*out = h + 1;
	return 0;
}

static void syn_free(void *ctx, uint32_t mem, void *ptr)
{
	struct hdr *h;

	if (ptr == NULL)
		return;
	h = (struct hdr *)ptr - 1;
	atomic_fetch_sub(&allocated, h->bytes);
	free(h);
}

static int syn_copy(void *ctx, void *dst, uint32_t dmem, const void *src,
		    uint32_t smem, size_t bytes)
{
	if (dmem != DPL_MEM_HOST || smem != DPL_MEM_HOST)
		return dpl_set_error(DPL_ENOTSUP,
				     "device synthetic: copy between kinds");
	if (bytes)
		memcpy(dst, src, bytes);
	return 0;
}

static int syn_sum(void *ctx, void *dst, const void *src, size_t count,
		   uint32_t dtype)
{
	return dpl_host_sum(dst, src, count, dtype);
}

DPL_EXTERN const struct dpl_device_ops dpl_device_synthetic = {
	.abi_version = DPL_DEVICE_ABI_VERSION,
	.size = sizeof(struct dpl_device_ops),
	.name = "synthetic",
	.caps = DPL_DEVICE_CAP_HOST_ACCESS,
	.mem = DPL_MEM_HOST,
	.init = syn_init,
	.fini = syn_fini,
	.alloc = syn_alloc,
	.free = syn_free,
	.copy = syn_copy,
	.sum = syn_sum,
};

uint64_t dpl_device_synthetic_allocated(void)
{
	return atomic_load(&allocated);
}
