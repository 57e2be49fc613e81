/*
 * dpl/model_mlp_cuda.h - the reference MLP of dpl/model_mlp.h on a CUDA
 * device (dpl/device_cuda.h): the same layers, loss, optimizers,
 * initial weights and samples, with the GEMMs in cuBLAS and the
 * element-wise work in the model's own kernels, in f64 or f32.
 *
 * The parameters, gradients, optimizer state and activations live in
 * device memory of the device the model was created on. The stage
 * callbacks (dpl_mlp_cuda_stage_ops) check their arguments on the host,
 * queue their work on the device's stream (dpl_device_cuda_stream) and
 * return without waiting: the runner records an event after each
 * callback (DPL_DEVICE_CAP_ASYNC) and waits for it before the output is
 * sent. The inputs, outputs and gradients the runner hands them are
 * device memory (DPL_MEM_CUDA), and so are the gradient buffers
 * (grads), which the runner reduces with the device's sum kernels.
 * The inspection functions copy to the host and wait for the stream.
 *
 * The samples of the synthetic task are drawn on the host from the seed
 * by dpl_mlp_sample() when the model is created (all `dataset` of them)
 * and copied to the device once; the initial weights are the CPU
 * model's, drawn on the host and copied. Both models thus start from the
 * same bits and see the same data; they differ only by the summation
 * order inside the GEMMs (cuBLAS against OpenBLAS) and by the last place
 * of CUDA's tanh/exp/log/sqrt against libm's (devices/models/mlp/
 * README.md).
 *
 * One model object is used by one thread at a time (the runner's);
 * several objects may run on several threads.
 */
#ifndef DPL_MODEL_MLP_CUDA_H
#define DPL_MODEL_MLP_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <dpl/device.h>
#include <dpl/model_mlp.h>
#include <dpl/runner.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One model object on one CUDA device context. */
typedef struct dpl_mlp_cuda dpl_mlp_cuda;

/*
 * dpl_mlp_cuda_create - the model of dpl_mlp_create() on `dev`, a device
 * opened on dpl_device_cuda (the caller keeps it open until
 * dpl_mlp_cuda_destroy). p and l are copied. The parameters are checked
 * first, exactly as dpl_mlp_create() checks them, before any CUDA call;
 * then the weights and the data set are drawn on the host and copied
 * (the call blocks until the copies completed). On success *out owns the
 * object. Errors: DPL_EINVAL naming the bad value (as dpl_mlp_create, a
 * NULL `dev` or one not opened on dpl_device_cuda, a data set over 2^24
 * samples), DPL_ENOMEM, DPL_EIO naming the CUDA or cuBLAS call and its
 * error (cudaErrorInsufficientDriver, cudaErrorNoDevice, ...).
 * Thread-safe.
 */
DPL_EXTERN int dpl_mlp_cuda_create(const struct dpl_mlp_params *p,
				   const struct dpl_mlp_layout *l,
				   dpl_device *dev, dpl_mlp_cuda **out);

/* dpl_mlp_cuda_destroy - wait for the stream, then free the model's
 * device and host memory and its cuBLAS handle. NULL is a no-op. */
DPL_EXTERN void dpl_mlp_cuda_destroy(dpl_mlp_cuda *m);

/*
 * The runner's callbacks; `user` is the dpl_mlp_cuda. forward,
 * backward, backward_input, backward_weight and step queue their work on
 * the stream and return 0, or DPL_EINVAL naming a stage not held here or
 * a wrong size, slot or sample count (before queuing anything), or
 * DPL_EIO naming a failed kernel launch or cuBLAS call. grads hands out
 * one DPL_MEM_CUDA buffer per stage (the gradients, owned by the model).
 * step applies the optimizer, clears the gradients and, on the last
 * stage, moves the iteration's loss (kept on the device) to the value
 * dpl_mlp_cuda_loss reads.
 */
DPL_EXTERN extern const struct dpl_stage_ops dpl_mlp_cuda_stage_ops;

/* dpl_mlp_cuda_dtype - DPL_DTYPE_F64 or DPL_DTYPE_F32, the element type
 * of the weights and gradients. Does not block. */
DPL_EXTERN enum dpl_dtype dpl_mlp_cuda_dtype(const dpl_mlp_cuda *m);

/*
 * dpl_mlp_cuda_loss - the last completed step's training loss, copied
 * from the device (synchronises the stream). Errors: DPL_EINVAL when the
 * last layer is not held here or no step ran yet, DPL_EIO naming the
 * CUDA error.
 */
DPL_EXTERN int dpl_mlp_cuda_loss(dpl_mlp_cuda *m, double *out);

/*
 * dpl_mlp_cuda_layer - copy layer `layer`'s weights (out x in, row-major,
 * as dpl_mlp_layer) into w[0..*nw) and its biases into b[0..*nb), in the
 * model's element type (8 or 4 bytes a value). The caller owns w and b,
 * of at least cap_w and cap_b values; *nw and *nb say how many the layer
 * has. Synchronises the stream. `grad` nonzero copies the gradients
 * instead. Errors: DPL_EINVAL for a layer not held here or buffers too
 * small (the sizes named), DPL_EIO naming the CUDA error.
 */
DPL_EXTERN int dpl_mlp_cuda_layer(dpl_mlp_cuda *m, uint32_t layer, int grad,
				  void *w, size_t cap_w, size_t *nw, void *b,
				  size_t cap_b, size_t *nb);

#ifdef __cplusplus
}
#endif
#endif /* DPL_MODEL_MLP_CUDA_H */
