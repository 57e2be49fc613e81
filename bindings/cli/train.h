/*
 * train.h - the pieces of `dpl train` and what they share: the options
 * (train_opts.c), the resolved job (train_plan.c), one rank's model and
 * runner (train_model.c), the final weights (train_weights.c), the
 * output (train_report.c), the ranks as threads (train_threads.c), one
 * rank of a multi-process job (train_procs.c) and its results' way to
 * rank 0 (train_gather.c). cmd_train.c ties them into the command.
 *
 * Every function that returns an int returns a CLI exit code (cli.h)
 * unless it says otherwise; a rank's functions leave a failure in
 * struct train_rank's rc and msg instead of printing it.
 */
#ifndef DPL_CLI_TRAIN_H
#define DPL_CLI_TRAIN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <dpl/dpl.h>
#include <dpl/transport.h>

#include "sched_opts.h"

/* The command, as messages name it ("dpl train: ..."). */
#define CMD "train"
#define TRAIN_MAX_LAYERS 256
#define TRAIN_MAX_RANKS 256
#define TRAIN_MAX_STAGES 1024
/* --check fails above this largest relative weight difference: in f64,
 * and in f32, where summing in another order (replicas' shares, BLAS
 * kernels chosen by shape and processor) leaves float rounding that the
 * optimizer carries from step to step. */
#define TRAIN_CHECK_LIMIT_F64 1e-5
#define TRAIN_CHECK_LIMIT_F32 1e-4

/* The command line, as given. */
struct train_opts {
	uint32_t stages;
	bool stages_set;
	uint32_t replicas[TRAIN_MAX_STAGES];
	size_t nreplicas;
	uint32_t microbatches;
	bool mb_set;
	enum dpl_policy policy;
	bool policy_set;
	uint32_t chunks;
	uint32_t cap;
	struct sched_bytes bytes; /* --cap-bytes, --cap-act-bytes (freed by
				     train_opts_free) */
	const char *schedule_path; /* --schedule FILE */
	uint32_t iterations;
	uint64_t batch;
	bool batch_set;
	uint32_t widths[TRAIN_MAX_LAYERS + 1];
	size_t nwidths;
	bool widths_set;
	uint64_t seed;
	bool synthetic;
	bool cuda;             /* --device cuda: the MLP on a GPU */
	const char *plan_path;
	double timeout_s;
	const char *trace_path;
	bool json;
	bool check;
	bool fail;
	uint32_t fail_rank;
	uint32_t fail_iter;
	uint32_t activation;
	uint32_t loss;
	uint32_t optimizer;
	bool optimizer_set;
	uint32_t precision;    /* --dtype: enum dpl_mlp_precision, 0 = f64 */
	bool precision_set;
	double lr;
	double momentum;
	bool momentum_set;
	double fwd_ms, bwd_ms;
	uint64_t act_bytes;
	const char *transport; /* NULL: by mode */
	const char *transport_options; /* --transport-options, or NULL */
	uint32_t nprocs;       /* 0: not launching */
	const char *pid_dir;
};

/* The resolved job: layout, schedule, and what the ranks share. */
struct train_job {
	struct train_opts o;
	dpl_schedule *sched;
	uint32_t ranks;      /* pipeline ranks */
	uint32_t nstages;    /* S (S * V for interleaved) */
	uint32_t layers;
	uint32_t bounds[TRAIN_MAX_STAGES + 1];
	uint32_t reps[TRAIN_MAX_STAGES]; /* per pipeline rank */
	uint32_t world;
	uint64_t act[TRAIN_MAX_STAGES];
	bool have_cap_bytes;  /* the runner's byte caps: --cap-bytes */
	uint64_t cap_bytes[TRAIN_MAX_STAGES];
	char world_name[64]; /* the in-process transport's world */
	const struct dpl_transport_ops *tops;
	bool procs;          /* ranks are processes (this one runs one) */
	/* results */
	double *loss;        /* [iterations][world], NAN where not last */
	atomic_uint progress;  /* steps done, all ranks */
	atomic_uint finished;  /* rank threads done */
	atomic_int setup_failed;
	pthread_barrier_t bar;
};

/* The final weights and biases of one layer, wherever they live, in the
 * job's precision: doubles, or floats with --dtype f32
 * (train_value_bytes). */
struct train_layer {
	const void *w, *b;
	size_t nw, nb;
};

/* One rank: its transport, device, model and runner. */
struct train_rank {
	struct train_job *J;
	uint32_t rank, prank, replica;
	dpl_transport *t;
	dpl_device *dev;
	dpl_runner *r;
	void *model;          /* dpl_mlp or dpl_synthetic */
	int rc;               /* DPL_E* of the first failure, or 0 */
	char msg[700];        /* what failed, "" when already reported */
	uint32_t cause;       /* the rank the failure names (the runner's
				 dpl_runner_cause(), the gather's), or
				 DPL_RUNNER_NO_RANK */
	uint32_t steps;
	uint64_t t0, t1;      /* dpl_clock_ns() around the iterations */
	/* the model's callbacks, under the --fail-at wrapper */
	const struct dpl_stage_ops *inner;
	/* --device cuda: host copies of the layers' weights (W then b),
	 * filled by train_layer_view, freed by train_model_destroy */
	void *host[TRAIN_MAX_LAYERS];
};

/* What the command prints. */
struct train_result {
	double *loss;          /* [iterations] */
	double samples_per_s;
	double seconds;
	uint32_t peak[TRAIN_MAX_STAGES];
	uint32_t bound[TRAIN_MAX_STAGES];
	uint64_t peak_bytes[TRAIN_MAX_STAGES];
	bool have_digest;
	uint64_t digest;
	bool have_check;
	double max_rel;
};

/* ---- train_opts.c ---- */

/* Print the command's help to f. */
void train_usage(FILE *f);
/* Fill o with the defaults of every flag. */
void train_opts_init(struct train_opts *o);
/* Parse argv[1..argc) into o; CLI_USAGE after a one-line message. */
int train_opts_parse(int argc, char **argv, struct train_opts *o);
/* Free what parsing allocated in o (the byte budget). */
void train_opts_free(struct train_opts *o);

/* ---- train_plan.c ---- */

/*
 * train_resolve - take J->o (and the plan or schedule file it names) to
 * a layout: check every combination of flags, build (or load) the
 * schedule, lower and validate it, place the layers on the stages.
 * Nothing runs yet. CLI_USAGE (bad flags or file) or CLI_FAIL (a
 * schedule file that does not validate) after a one-line message.
 */
int train_resolve(struct train_job *J);

/* ---- train_model.c ---- */

/*
 * train_rank_setup - open rank k's transport (over `oob` for a transport
 * of one process per rank, in the world J->world_name otherwise), its
 * device, model and runner. Returns 0, or the DPL_E* code also left in
 * k->rc with k->msg saying what failed. Blocks as dpl_transport_open().
 */
int train_rank_setup(struct train_rank *k, const struct dpl_oob *oob);
/* Run rank k's iterations until done, J->setup_failed or the first
 * failure (k->rc, k->msg); sets k->t0 and k->t1. */
void train_rank_loop(struct train_rank *k);
/* Free rank k's model (the runner must be gone). */
void train_model_destroy(struct train_rank *k);

#if defined(DPL_HAVE_DEVICE_CPU)
struct dpl_mlp_params;
struct dpl_mlp_view;
/* The model the options describe. */
void train_mlp_params(const struct train_opts *o, struct dpl_mlp_params *p);
/* Layer `layer`'s weights in rank k's model (its stage held there): a
 * view of the CPU model's memory, or with --device cuda a copy in
 * k->host[layer] (waits for the device). 0, or the model's DPL_E*. */
int train_layer_view(struct train_rank *k, uint32_t layer,
		     struct dpl_mlp_view *v);
#endif

/*
 * train_cuda_transport - with --device cuda and more than one rank, the
 * transport `name` (caps: its DPL_TRANSPORT_CAP_* bits, or ~0 when not
 * known yet) must take CUDA device memory; CLI_USAGE naming it and what
 * to use instead when it does not, else CLI_OK. Without --device cuda,
 * CLI_OK (train_plan.c).
 */
int train_cuda_transport(const struct train_job *J, const char *name,
			 uint64_t caps);

/* ---- train_weights.c ---- */

/* Bytes a value of the model --dtype gives: 8 (f64) or 4 (f32). */
size_t train_value_bytes(const struct train_opts *o);
/* The name of the model's precision: "f64" or "f32". */
const char *train_dtype_name(const struct train_opts *o);
/* --check's limit for the model's precision (TRAIN_CHECK_LIMIT_F64/F32). */
double train_check_limit(const struct train_opts *o);

/* The stage that holds layer `layer`. */
uint32_t train_layer_stage(const struct train_job *J, uint32_t layer);
/* The weights digest and the --check comparison over the final weights
 * v[0..J->layers) into R. CLI_FAIL when one-device training fails. */
int train_weights_results(const struct train_job *J,
			  const struct train_layer *v,
			  struct train_result *R);

/* ---- train_report.c ---- */

/* Sum the loss over the ranks of each iteration; the bound per stage. */
void train_finish_results(const struct train_job *J, struct train_result *R);
/* Print R on stdout as text (the default) or as one JSON object
 * (--json); the JSON one returns CLI_FAIL when out of memory. */
void train_print_text(const struct train_job *J,
		      const struct train_result *R);
int train_print_json(const struct train_job *J,
		     const struct train_result *R);

/* ---- train_threads.c ---- */

/* Run every rank as a thread of this process over the in-process
 * transport; fill R and write the --trace file. */
int train_threads(struct train_job *J, struct train_result *R);

/* ---- train_procs.c ---- */

/*
 * train_process - run rank `rank` of a job of one process per rank: meet
 * the other ranks (the host's rendezvous, dpl/bootstrap.h, with the root
 * from the environment), train, and send the results to rank 0, which
 * fills R. Returns CLI_OK, CLI_FAIL, or CLI_PEER_FAILED (launch.h) when
 * this rank stopped because another one failed.
 */
int train_process(struct train_job *J, struct train_result *R,
		  uint32_t rank);

/* ---- train_gather.c ---- */

/*
 * train_report_build - rank k's results as an array of doubles into out
 * (NULL: only count); returns the count. See train_gather.c for the
 * layout.
 */
size_t train_report_build(struct train_rank *k, double *out);
/*
 * train_gather - send rank 0 this rank's report mine[0..nmine), or on
 * rank 0, receive every rank's and fill R (weights digest and --check
 * included). Uses the tags DPL_RUNNER_APP_TAG(1..3) of k->t, which the
 * runner leaves to applications; each wait is bounded by --timeout.
 * Returns 0 or a DPL_E* code with k->msg saying what failed ("" when
 * already printed). May close k->t (k->t is NULL then) when requests are
 * still pending.
 */
int train_gather(struct train_rank *k, struct train_result *R,
		 const double *mine, uint64_t nmine);

#endif /* DPL_CLI_TRAIN_H */
