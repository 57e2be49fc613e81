/*
 * dpl/model_mlp.h - the reference model: a multi-layer perceptron on CBLAS
 * (OpenBLAS), in double precision, split into pipeline stages of
 * contiguous layers. It runs on the CPU device (dpl/device_cpu.h), whose
 * sum adds its gradients across replicas.
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

/* The model. Zero-initialise, then set; zeros take the defaults given. */
struct dpl_mlp_params {
	uint32_t layers;         /* L >= 1 */
	const uint32_t *widths;  /* L + 1 values in 1..2^20: input .. output */
	uint32_t activation;     /* enum dpl_mlp_activation */
	uint32_t loss;           /* enum dpl_mlp_loss */
	uint32_t optimizer;      /* enum dpl_mlp_optimizer */
	uint32_t reserved0;
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
 * index); biases start at 0. On success *out owns the object
 * (dpl_mlp_destroy). Errors: DPL_EINVAL naming the bad value (no layers,
 * a width of 0, bounds out of order or a stage without layers, unknown
 * activation/loss/optimizer, a negative or non-finite rate), DPL_ENOMEM.
 * Does not block. Thread-safe.
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
 * are doubles, the previous stage's width per sample); the first stage
 * generates its own inputs and the last its targets, from the iteration
 * and sample range. backward is backward_input then backward_weight, so
 * split and whole schedules compute the same bits. Weight gradients
 * accumulate over micro-batches in the order backwards run; the loss
 * gradient is scaled by 1 / batch, so the runner's sum over replicas is
 * the full-batch gradient. grads hands out one F64 host buffer per stage
 * (all its parameters). step applies the optimizer, clears the gradients
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
 * 8 * widths[bounds[s + 1]], for each of `stages` stages (the last
 * stage's value is its output width, unused by the runner), into out[s].
 * Does not check its arguments. Thread-safe.
 */
DPL_EXTERN void dpl_mlp_activation_bytes(const struct dpl_mlp_params *p,
					 const uint32_t *bounds,
					 uint32_t stages, uint64_t *out);

/*
 * dpl_mlp_loss - the loss this object computed during the last completed
 * iteration (its last step): the sum over its samples of the per-sample
 * loss, divided by batch; summed over the last stage's replicas it is
 * the batch mean. DPL_EINVAL when the object does not hold the last
 * layer or no step ran yet.
 */
DPL_EXTERN int dpl_mlp_loss(const dpl_mlp *m, double *out);

/*
 * dpl_mlp_layer - the weights (out x in, row-major) and biases (out) of
 * layer `layer`, owned by the object (valid until dpl_mlp_destroy; a
 * tool may write through them between iterations), with the counts in
 * *nw and *nb. DPL_EINVAL when the object does not hold that layer.
 */
DPL_EXTERN int dpl_mlp_layer(const dpl_mlp *m, uint32_t layer,
			     const double **w, size_t *nw, const double **b,
			     size_t *nb);

/*
 * dpl_mlp_layer_grad - the accumulated (not yet applied) gradients of a
 * layer, as dpl_mlp_layer. For tests and tools.
 */
DPL_EXTERN int dpl_mlp_layer_grad(const dpl_mlp *m, uint32_t layer,
				  const double **w, size_t *nw,
				  const double **b, size_t *nb);

/*
 * dpl_mlp_stage_bytes - the activation memory stage `stage` keeps for
 * each micro-batch alive (its slot: pre- and post-activations and their
 * gradients, and the generated inputs on the first stage), for
 * max_samples samples, in *out. DPL_EINVAL when the stage is not held.
 */
DPL_EXTERN int dpl_mlp_stage_bytes(const dpl_mlp *m, uint32_t stage,
				   uint64_t *out);

/*
 * dpl_mlp_sample - the inputs (widths[0] values, into x) and target of
 * global sample `k`: for cross-entropy *cls is the class and t is unused,
 * for MSE t receives the last width's targets and cls is unused. Does not
 * check p. Thread-safe.
 */
DPL_EXTERN void dpl_mlp_sample(const struct dpl_mlp_params *p, uint64_t k,
			       double *x, uint32_t *cls, double *t);

#ifdef __cplusplus
}
#endif
#endif /* DPL_MODEL_MLP_H */
