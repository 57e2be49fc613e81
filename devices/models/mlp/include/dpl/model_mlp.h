/*
 * dpl/model_mlp.h - the reference model: a multi-layer perceptron on CBLAS
 * (OpenBLAS), in double (the default) or single precision, split into
 * pipeline stages of contiguous layers. It runs on the CPU device
 * (dpl/device_cpu.h), whose sum adds its gradients across replicas.
 *
 * The model is what `dpl train` trains and what the runner's tests check
 * against one-device training. Layer l (of L) is dense: z = x W^T + b with
 * W of widths[l+1] x widths[l]; every layer but the last is followed by
 * ReLU or GELU; the last layer's output feeds softmax cross-entropy or
 * mean squared error. A stage holds a contiguous range of layers. The
 * optimizer is SGD with momentum or Adam. Initialisation and data depend
 * only on the seed, so every replica of a stage, and a one-device run,
 * start from the same bits. All arithmetic is in a fixed order, so a given
 * layout computes the same bits whatever the schedule.
 *
 * Precision (enum dpl_mlp_precision): in f64 every parameter, activation,
 * gradient and optimizer state is a double and the BLAS calls are the
 * d-variants; in f32 they are all floats and the calls the s-variants,
 * element-wise arithmetic included. The random numbers (initial weights,
 * inputs, targets) are drawn in double either way and rounded to float in
 * f32, so an f32 model starts from the rounded values of the f64 one.
 *
 * Data: a learnable synthetic task. Sample k has inputs drawn from a
 * normal distribution by a hash of (seed, k); its target comes from a
 * fixed random "teacher" map T of the inputs: the class argmax(T x) for
 * cross-entropy, tanh(T x) for mean squared error. Iteration i uses
 * samples (i * batch + j) mod dataset, j in [0, batch).
 *
 * Threads: a dpl_mlp is used by one thread at a time; different objects
 * may be used from different threads. dpl_mlp_create() sets OpenBLAS to
 * one thread per call, so that ranks running as threads do not share
 * BLAS worker threads.
 *
 * Errors: every function that fails returns a negative DPL_E* code and
 * leaves the message in dpl_last_error(); outputs are written only on
 * success.
 *
 * Library: dpl_model_mlp (dpl::model_mlp, pkg-config dpl-model-mlp).
 */
#ifndef DPL_MODEL_MLP_H
#define DPL_MODEL_MLP_H

#include <stddef.h>
#include <stdint.h>

#include <dpl/device_cpu.h>
#include <dpl/runner.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The activation after every layer but the last. */
enum dpl_mlp_activation {
	DPL_MLP_RELU = 0,
	DPL_MLP_GELU = 1 /* tanh approximation */
};

/* The loss on the last layer's output. */
enum dpl_mlp_loss {
	DPL_MLP_SOFTMAX_CE = 0, /* classes = the last width */
	DPL_MLP_MSE = 1         /* mean over the outputs of (y - t)^2 */
};

/* The update a step applies. */
enum dpl_mlp_optimizer {
	DPL_MLP_SGD = 0, /* v = momentum v + g; w -= lr v */
	DPL_MLP_ADAM = 1 /* with bias correction */
};

/* The element type of parameters, activations, gradients and optimizer
 * state. The zero value is f64. */
enum dpl_mlp_precision {
	DPL_MLP_F64 = 0, /* double; gradients handed out as DPL_DTYPE_F64 */
	DPL_MLP_F32 = 1  /* float; gradients handed out as DPL_DTYPE_F32 */
};

/* The model. Zero-initialise, then set; zeros take the defaults given. */
struct dpl_mlp_params {
	uint32_t layers;         /* L >= 1 */
	const uint32_t *widths;  /* L + 1 values in 1..2^20: input .. output */
	uint32_t activation;     /* enum dpl_mlp_activation */
	uint32_t loss;           /* enum dpl_mlp_loss */
	uint32_t optimizer;      /* enum dpl_mlp_optimizer */
	uint32_t precision;      /* enum dpl_mlp_precision; 0 = f64 */
	double lr;               /* 0: 0.05 (SGD), 0.001 (Adam) */
	double momentum;         /* SGD, in [0, 1); 0 = none */
	double beta1, beta2;     /* Adam, in [0, 1); 0: 0.9, 0.999 */
	double eps;              /* Adam; 0: 1e-8 */
	uint64_t seed;
	uint64_t dataset;        /* distinct samples; 0 = batch (the same
				    samples every iteration) */
};

/*
 * Which part of the model one object holds: stage s has layers
 * [bounds[s], bounds[s+1]) with bounds[0] = 0 and bounds[stages] = L, in
 * increasing order (each stage at least one layer). `local` flags the
 * stages this object holds (NULL: all). For each held stage it keeps
 * slots[s] micro-batches of state (dpl_schedule_bound; NULL or 0: 1) of
 * at most max_samples samples.
 */
struct dpl_mlp_layout {
	uint32_t stages;
	const uint32_t *bounds;   /* stages + 1 */
	const uint8_t *local;     /* stages flags, or NULL */
	const uint32_t *slots;    /* stages counts, or NULL */
	uint64_t max_samples;     /* per micro-batch on this replica,
				     1..2^24 */
	uint64_t batch;           /* samples per iteration, >= 1 */
};

/* One model object: the held stages' weights, gradients, optimizer state
 * and per-slot activations. */
typedef struct dpl_mlp dpl_mlp;

/*
 * dpl_mlp_create - allocate and initialise the held stages; the caller
 * keeps p and l (they are copied). Weights are drawn uniformly in
 * [-sqrt(3 / fan_in), sqrt(3 / fan_in)] from a hash of (seed, layer,
 * index), in double, and rounded to float in f32; biases start at 0. On
 * success *out owns the object (dpl_mlp_destroy). Errors: DPL_EINVAL
 * naming the bad value (no layers, a width of 0, bounds out of order or
 * a stage without layers, unknown activation/loss/optimizer/precision, a
 * negative or non-finite rate), DPL_ENOMEM. Does not block. Thread-safe.
 */
DPL_EXTERN int dpl_mlp_create(const struct dpl_mlp_params *p,
			      const struct dpl_mlp_layout *l,
			      dpl_mlp **out);

/* dpl_mlp_destroy - free the object and everything it owns (the pointers
 * dpl_mlp_layer handed out included); NULL is a no-op. */
DPL_EXTERN void dpl_mlp_destroy(dpl_mlp *m);

/*
 * The stage callbacks of the model (name "mlp"), with `user` = the
 * dpl_mlp. forward and backward take the runner's buffers (activations
 * are of the model's precision, doubles or floats, the previous stage's
 * width per sample: dpl_mlp_activation_bytes); the first stage
 * generates its own inputs and the last its targets, from the iteration
 * and sample range. backward is backward_input then backward_weight, so
 * split and whole schedules compute the same bits. Weight gradients
 * accumulate over micro-batches in the order backwards run; the loss
 * gradient is scaled by 1 / batch, so the runner's sum over replicas is
 * the full-batch gradient. grads hands out one host buffer per stage (all
 * its parameters), of dtype DPL_DTYPE_F64 or DPL_DTYPE_F32 as the
 * precision. step applies the optimizer, clears the gradients
 * and, on the last stage, publishes the iteration's loss
 * (dpl_mlp_loss). They return DPL_EINVAL for a stage this object does not
 * hold, a slot out of range or buffers of the wrong size. They never
 * block; the runner's thread calls them.
 */
DPL_EXTERN extern const struct dpl_stage_ops dpl_mlp_stage_ops;

/*
 * dpl_mlp_bounds - split L layers into `stages` contiguous stages as
 * evenly as possible (dpl_split), writing stages + 1 bounds.
 * DPL_EINVAL when stages is 0 or exceeds the layers. Thread-safe.
 */
DPL_EXTERN int dpl_mlp_bounds(uint32_t layers, uint32_t stages,
			      uint32_t *bounds);

/*
 * dpl_mlp_activation_bytes - bytes per sample that stage s sends forward:
 * E * widths[bounds[s + 1]] with E = 8 in f64 and 4 in f32
 * (p->precision), for each of `stages` stages (the last stage's value is
 * its output width, unused by the runner), into out[s]. Does not check
 * its arguments. Thread-safe.
 */
DPL_EXTERN void dpl_mlp_activation_bytes(const struct dpl_mlp_params *p,
					 const uint32_t *bounds,
					 uint32_t stages, uint64_t *out);

/*
 * dpl_mlp_loss - the loss this object computed during the last completed
 * iteration (its last step): the sum over its samples of the per-sample
 * loss, divided by batch; summed over the last stage's replicas it is
 * the batch mean. In f32 the loss is computed in float and widened to
 * double (exactly). DPL_EINVAL when the object does not hold the last
 * layer or no step ran yet. Does not block; the model's thread.
 */
DPL_EXTERN int dpl_mlp_loss(const dpl_mlp *m, double *out);

/*
 * dpl_mlp_dtype - the element type of the object's parameters,
 * activations and gradients: DPL_DTYPE_F64 or DPL_DTYPE_F32. Does not
 * block; any thread.
 */
DPL_EXTERN enum dpl_dtype dpl_mlp_dtype(const dpl_mlp *m);

/*
 * dpl_mlp_layer - the weights (out x in, row-major) and biases (out) of
 * layer `layer` of an f64 object, owned by the object (valid until
 * dpl_mlp_destroy; a tool may write through them between iterations),
 * with the counts in *nw and *nb. DPL_EINVAL when the object does not
 * hold that layer, or when it is f32 (its values are floats: see
 * dpl_mlp_layer_view). Does not block; the model's thread.
 */
DPL_EXTERN int dpl_mlp_layer(const dpl_mlp *m, uint32_t layer,
			     const double **w, size_t *nw, const double **b,
			     size_t *nb);

/*
 * dpl_mlp_layer_grad - the accumulated (not yet applied) gradients of a
 * layer, as dpl_mlp_layer (f64 only). For tests and tools.
 */
DPL_EXTERN int dpl_mlp_layer_grad(const dpl_mlp *m, uint32_t layer,
				  const double **w, size_t *nw,
				  const double **b, size_t *nb);

/* A layer's values in the model's own element type. */
struct dpl_mlp_view {
	const void *w;          /* nw = out x in values, row-major */
	const void *b;          /* nb = out values */
	size_t nw, nb;
	enum dpl_dtype dtype;   /* DPL_DTYPE_F64 (doubles) or DPL_DTYPE_F32
				   (floats) */
};

/*
 * dpl_mlp_layer_view - the weights and biases of layer `layer` in *out,
 * whatever the precision: the pointers are the object's own (valid
 * until dpl_mlp_destroy; a tool may write through them between
 * iterations), dtype says how to read them. DPL_EINVAL when the object
 * does not hold that layer; *out is then untouched. Does not block; the
 * model's thread.
 */
DPL_EXTERN int dpl_mlp_layer_view(const dpl_mlp *m, uint32_t layer,
				  struct dpl_mlp_view *out);

/*
 * dpl_mlp_layer_grad_view - the accumulated (not yet applied) gradients
 * of a layer, as dpl_mlp_layer_view.
 */
DPL_EXTERN int dpl_mlp_layer_grad_view(const dpl_mlp *m, uint32_t layer,
				       struct dpl_mlp_view *out);

/*
 * dpl_mlp_stage_bytes - the activation memory stage `stage` keeps for
 * each micro-batch alive (its slot: pre- and post-activations and their
 * gradients, and the generated inputs on the first stage), for
 * max_samples samples, in *out: 8 bytes a value in f64, 4 in f32.
 * DPL_EINVAL when the stage is not held.
 */
DPL_EXTERN int dpl_mlp_stage_bytes(const dpl_mlp *m, uint32_t stage,
				   uint64_t *out);

/*
 * dpl_mlp_sample - the inputs (widths[0] values, into x) and target of
 * global sample `k`: for cross-entropy *cls is the class and t is unused,
 * for MSE t receives the last width's targets and cls is unused. Drawn in
 * double whatever p->precision (an f32 model rounds them). Does not check
 * p. Thread-safe.
 */
DPL_EXTERN void dpl_mlp_sample(const struct dpl_mlp_params *p, uint64_t k,
			       double *x, uint32_t *cls, double *t);

#ifdef __cplusplus
}
#endif
#endif /* DPL_MODEL_MLP_H */
