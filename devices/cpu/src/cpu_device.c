/* cpu_device.c - host memory with CBLAS sums: the reference model's device.
 * BF16 and F16 go through the core's dpl_host_sum. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include <dpl/device_cpu.h>

static int cpu_init(void *ctx, const struct dpl_device_params *p)
{
	if (p->index != 0)
		return dpl_set_error(DPL_EINVAL,
					 "device cpu: index %u (only 0)",
					 p->index);
	if (p->options != NULL && p->options[0] != '\0')
		return dpl_set_error(DPL_EINVAL,
					 "device cpu: unknown options '%s'",
					 p->options);
	openblas_set_num_threads(1);
	return 0;
}

static void cpu_fini(void *ctx)
{
}

static int cpu_alloc(void *ctx, uint32_t mem, size_t bytes, void **out)
{
	void *p = NULL;

	if (mem != DPL_MEM_HOST)
		return dpl_set_error(DPL_ENOTSUP,
					 "device cpu: memory kind %u", mem);
	if (bytes == 0 || posix_memalign(&p, 64, bytes) != 0)
		return dpl_set_error(bytes ? DPL_ENOMEM : DPL_EINVAL,
					 "device cpu: alloc of %zu bytes",
					 bytes);
	*out = p;
	return 0;
}

static void cpu_free(void *ctx, uint32_t mem, void *ptr)
{
	free(ptr);
}

static int cpu_copy(void *ctx, void *dst, uint32_t dmem, const void *src,
		    uint32_t smem, size_t bytes)
{
	if (dmem != DPL_MEM_HOST || smem != DPL_MEM_HOST)
		return dpl_set_error(DPL_ENOTSUP,
					 "device cpu: copy between kinds %u "
					 "and %u", dmem, smem);
	if (bytes > 0)
		memcpy(dst, src, bytes);
	return 0;
}

static int cpu_sum(void *ctx, void *dst, const void *src, size_t count,
		   uint32_t dtype)
{
	size_t done = 0, n;

	/* BLAS has no 16-bit floats: the core's sum rounds them. */
	if (dtype == DPL_DTYPE_BF16 || dtype == DPL_DTYPE_F16)
		return dpl_host_sum(dst, src, count, dtype);
	if (dtype != DPL_DTYPE_F64 && dtype != DPL_DTYPE_F32)
		return dpl_set_error(DPL_ENOTSUP, "device cpu: dtype %u",
				     dtype);
	/* CBLAS counts are int: go in pieces. */
	while (done < count) {
		n = count - done < (size_t)1 << 30 ? count - done
						    : (size_t)1 << 30;
		if (dtype == DPL_DTYPE_F64)
			cblas_daxpy((int)n, 1.0, (const double *)src + done, 1,
				    (double *)dst + done, 1);
		else
			cblas_saxpy((int)n, 1.0f, (const float *)src + done, 1,
				    (float *)dst + done, 1);
		done += n;
	}
	return 0;
}

DPL_EXTERN const struct dpl_device_ops dpl_device_cpu = {
	.abi_version = DPL_DEVICE_ABI_VERSION,
	.size = sizeof(struct dpl_device_ops),
	.name = "cpu",
	.caps = DPL_DEVICE_CAP_HOST_ACCESS,
	.mem = DPL_MEM_HOST,
	.ctx_size = 0,
	.init = cpu_init,
	.fini = cpu_fini,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.copy = cpu_copy,
	.sum = cpu_sum,
};
