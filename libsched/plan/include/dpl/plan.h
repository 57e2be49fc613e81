/*
 * dpl/plan.h - the planner: layer profiles, cluster descriptions, and
 * DAPPLE's search for a hybrid data/pipeline-parallel plan, with the
 * baselines it is compared against.
 *
 * A plan cuts a model's layers (in a topological order) into S stages,
 * gives stage s a set of R_s devices (replication may differ per stage),
 * and runs the global batch as M micro-batches of `microbatch_size`
 * samples under a schedule policy. Each micro-batch is split over the
 * replicas of a stage in contiguous sample ranges and the outputs are
 * concatenated on the next stage's devices (split-concat); each stage's
 * gradients are all-reduced over its replicas once per iteration.
 *
 * Units: times in milliseconds (the profiles' unit), sizes in bytes,
 * cluster bandwidths in bytes per second and latencies in seconds.
 *
 * The cost model (every planner function uses it; docs/planner.md has the
 * worked numbers):
 *
 *  - Compute. A layer profiled at batch `pbs` with forward time f takes
 *    f * n / pbs for n samples (linear scaling). Stage s's cost per
 *    micro-batch is that of its slowest replica, n = ceil(mb / R_s). A
 *    stage never has more replicas than samples per micro-batch.
 *
 *  - Transfer (split-concat). The bytes crossing the cut after stage s
 *    are the activations of every layer before the cut with an edge to a
 *    layer after it (a DAG edge that skips stages is carried across each
 *    cut it crosses), times mb / pbs. Sender replica k holds the sample
 *    range k of the micro-batch, receiver replica l range l; each pair
 *    moves its overlap. Inside a machine each device sends and receives
 *    at `intra_bandwidth`; between machines all of a machine's traffic
 *    shares its link at `inter_bandwidth` each way. The transfer takes the
 *    busiest device or machine link's bytes over its bandwidth, plus the
 *    latency of the slowest link used. The input gradient going back
 *    has the same size and takes the same time.
 *
 *  - Allreduce. Stage s's gradients (its parameter bytes P) are reduced
 *    over its R_s devices with a ring: 2 (R-1)/R * P / bw plus 2
 *    link latencies, where bw is `ar_inter_bandwidth` when the devices
 *    span machines and `ar_intra_bandwidth` (times floor(R/2) when
 *    `ar_intra_pairs` is set, the NVLink model of DAPPLE's released
 *    planner) inside one machine. It starts when the stage's last
 *    backward ends.
 *
 *  - Latency, analytic (DAPPLE's pivot model). Transfers are stages of
 *    their own (F = activation transfer, B = gradient transfer, no
 *    allreduce) between the compute stages; over this sequence
 *        L(Q) = sum_{s<=Q} F_s + (M-1)(F_Q + B_Q) + max_s(AR_s + K_s),
 *        K_s  = sum_{s'=s..Q} B_s'        for s <= Q,
 *        K_s  = -sum_{s'=Q+1..s-1} B_s'   for s > Q,
 *    and the pivot Q is the stage that maximises L(Q); L = L(Q). An
 *    allreduce thus only counts where it sticks out past the pivot's
 *    finish. dpl_plan_pivot() computes it.
 *
 *  - Latency, simulated. The plan's schedule (dpl_plan_schedule()) is
 *    replayed by dpl_sim_run(); this is the plan's predicted time, and
 *    the planner ranks its final candidates by it. The pivot model
 *    ignores the pivot's own warm-up bubbles and under-estimates uneven
 *    pipelines (DAPPLE.md §2.2), which the simulator does not.
 *
 *  - Memory, per device of stage s: parameters * (1 + optimizer_factor)
 *    + gradients (= parameters) + inflight_s * (stage activations for
 *    ceil(mb / R_s) samples), where the stage activations are the sum of
 *    its layers' activation sizes and inflight_s is the policy's bound:
 *    min(S-s, M) for 1f1b, min(2(S-s)-1, M) for 1f1b-comm, M for gpipe.
 *    A plan fits when every device's peak is at most `device_memory`.
 *
 * What the model leaves out: concurrent transfers and allreduces of
 * different stages do not slow each other down; efficiency does not drop
 * at small per-device batches; the optimizer step costs nothing.
 *
 * Threads: every function here is reentrant and thread-safe; profiles and
 * clusters are immutable once built and may be shared between threads.
 */
#ifndef DPL_PLAN_H
#define DPL_PLAN_H

#include <stdint.h>

#include <dpl/common.h>
#include <dpl/schedule.h>
#include <dpl/sim.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Profiles                                                             */
/* ------------------------------------------------------------------ */

/* One layer (a profile node), measured at the profile batch size. */
struct dpl_layer {
	const char *id;          /* node id, "node7" (owned by the profile) */
	const char *name;        /* node description, "Conv2d_3_1" */
	double forward_ms;       /* forward time for the profile batch */
	double backward_ms;      /* backward time for the profile batch */
	double activation_bytes; /* output activation for the profile batch */
	double parameter_bytes;  /* weights */
};

typedef struct dpl_profile dpl_profile;

/*
 * dpl_profile_parse - read a profile in PipeDream's graph text format:
 * one line per node,
 *     nodeN -- Name -- forward_compute_time=F, backward_compute_time=B,
 *                      activation_size=A, parameter_size=P
 * (on one line; A may be a list "[a; b; c]", whose sum is taken), and one
 * line per edge, indented with blanks: "\tnodeX -- nodeY". The four keys
 * are required, each once; values are non-negative decimal numbers. Blank
 * lines are ignored, a trailing "\r" is dropped, a repeated edge counts
 * once. A file with nodes but no edge at all is a chain in file order.
 * The layers are put in a topological order that keeps the file's order
 * wherever the edges allow (the same order when the file is already
 * topological); dpl_profile_layer() and plans index layers in that order.
 *
 * `source` names the text in messages (a file name; NULL: "profile").
 * On success *out owns a new profile (dpl_profile_destroy()); it is
 * written only on success. Errors: DPL_EPARSE with "SOURCE:LINE: reason"
 * in dpl_last_error() for a malformed line, an unknown or repeated key, a
 * negative, non-finite or non-numeric value, a repeated node id, an edge
 * naming an undefined node (dangling edge), a cycle (naming the edge that
 * closes it and the path), or a text without nodes; DPL_EINVAL for a NULL
 * argument; DPL_ENOMEM. O(text + edges log nodes). Thread-safe.
 */
DPL_EXTERN int dpl_profile_parse(const char *text, size_t len,
				 const char *source, dpl_profile **out);

/*
 * dpl_profile_load - read the file at `path` and parse it with
 * dpl_profile_parse() (messages name the path). DPL_ENOENT or DPL_EIO
 * naming the path when it cannot be read; otherwise as the parser.
 * The JSON profile form is read by dpl_profile_read_json() (dpl/json.h).
 * Blocks on the file system.
 */
DPL_EXTERN int dpl_profile_load(const char *path, dpl_profile **out);

/*
 * dpl_profile_create - a profile from `n` layers (copied, strings too;
 * NULL id becomes "layerI", NULL name "") and `nedges` edges given as
 * index pairs edges[2k] -> edges[2k+1] into `layers`. nedges 0 with
 * n > 1 makes a chain. The layers are ordered as by dpl_profile_parse().
 * Errors: DPL_EINVAL naming the bad layer value or edge index (an edge
 * out of range, a negative or non-finite number, a repeated id), a
 * DPL_EPARSE naming the cycle, DPL_ENOMEM. Thread-safe.
 */
DPL_EXTERN int dpl_profile_create(const struct dpl_layer *layers, uint32_t n,
				  const uint32_t *edges, size_t nedges,
				  dpl_profile **out);

/* dpl_profile_destroy - free a profile; NULL is a no-op. */
DPL_EXTERN void dpl_profile_destroy(dpl_profile *p);

/* Number of layers (>= 1). */
DPL_EXTERN uint32_t dpl_profile_layers(const dpl_profile *p);

/*
 * dpl_profile_layer - layer `i` in the profile's topological order: a
 * pointer owned by the profile, valid until it is destroyed; NULL when
 * out of range.
 */
DPL_EXTERN const struct dpl_layer *dpl_profile_layer(const dpl_profile *p,
						     uint32_t i);

/*
 * dpl_profile_source_line - the line of the text the layer came from
 * (0 for profiles not read from text or out of range).
 */
DPL_EXTERN uint32_t dpl_profile_source_line(const dpl_profile *p,
					    uint32_t i);

/* Number of distinct edges. */
DPL_EXTERN size_t dpl_profile_edges(const dpl_profile *p);

/*
 * dpl_profile_edge - edge `k`: *from and *to are layer indices in the
 * topological order (*from < *to). DPL_EINVAL when k is out of range.
 */
DPL_EXTERN int dpl_profile_edge(const dpl_profile *p, size_t k,
				uint32_t *from, uint32_t *to);

/*
 * dpl_profile_cut_bytes - bytes that cross the cut before layer `cut`
 * (0 < cut < layers) for the profile batch: the activation of every layer
 * before the cut that has an edge to a layer at or after it, each counted
 * once. 0 for cut 0, cut >= layers, or a NULL profile.
 */
DPL_EXTERN double dpl_profile_cut_bytes(const dpl_profile *p, uint32_t cut);

/* ------------------------------------------------------------------ */
/* Clusters                                                             */
/* ------------------------------------------------------------------ */

/* Most devices a cluster may have (device sets are 64-bit masks). */
#define DPL_PLAN_MAX_DEVICES 64

/*
 * A cluster of `machines` identical machines with `devices_per_machine`
 * devices each; device d lives on machine d / devices_per_machine. See
 * the cost model above for how each number is used. Bandwidths of links
 * a cluster does not have (intra with one device per machine, inter with
 * one machine) may be 0.
 */
struct dpl_cluster {
	char name[32];                /* "paper-a", or the file's name */
	uint32_t machines;            /* >= 1 */
	uint32_t devices_per_machine; /* >= 1; machines * this <= 64 */
	double device_memory;         /* bytes per device, > 0 */
	double intra_bandwidth;       /* bytes/s, device to device */
	double intra_latency;         /* s */
	double inter_bandwidth;       /* bytes/s, a machine's network link */
	double inter_latency;         /* s */
	double ar_intra_bandwidth;    /* bytes/s, ring allreduce in a machine */
	int ar_intra_pairs;           /* nonzero: ar_intra_bandwidth grows
					 with floor(R/2) */
	double ar_inter_bandwidth;    /* bytes/s, ring allreduce over machines */
};

/*
 * dpl_cluster_preset - the paper's hardware, 16 V100 16 GB each time:
 *
 *   paper-a  2 machines x 8 devices, NVLink inside, 25 Gbit/s Ethernet
 *            between. intra 25e9 B/s and allreduce 25e9 B/s x floor(R/2)
 *            (DAPPLE's released planner: NVLink P2P 25 GB/s, NVLink
 *            allreduce 25 GB/s per pair, 100 GB/s for 8); inter and
 *            inter allreduce 3.0e9 B/s (released planner: "Ethernet
 *            NCCL" 3 GB/s, 96% of the 3.125 GB/s line rate); latency
 *            5 us inside a machine, 25 us between machines (assumed:
 *            typical NVLink and TCP small-message latencies).
 *   paper-b  16 machines x 1 device, 25 Gbit/s: 3.0e9 B/s, 25 us.
 *   paper-c  16 machines x 1 device, 10 Gbit/s: 1.2e9 B/s (the same 96%
 *            of the 1.25 GB/s line rate; DAPPLE's analysis script gives
 *            1.25 GB/s for p3.2xlarge), 25 us.
 *
 * device_memory is 16e9 bytes for all three (the released planner's
 * V100 constant, 16 GB with GIGABYTE = 1e9: a 16 GiB V100 less what the
 * framework keeps for itself). Returns 0 and fills *out, or DPL_EINVAL
 * naming the unknown preset and listing the known ones. Thread-safe.
 */
DPL_EXTERN int dpl_cluster_preset(const char *name, struct dpl_cluster *out);

/*
 * dpl_cluster_check - 0 when every field is usable, else DPL_EINVAL
 * naming the first bad field and its value (a count of 0, more than 64
 * devices, a non-positive memory, a negative or non-finite bandwidth or
 * latency, a zero bandwidth for a link the cluster has).
 */
DPL_EXTERN int dpl_cluster_check(const struct dpl_cluster *c);

/* Total devices: machines * devices_per_machine. */
DPL_EXTERN uint32_t dpl_cluster_devices(const struct dpl_cluster *c);

/* DAPPLE's device-assignment policies (DAPPLE.md §2.4). */
enum dpl_placement {
	DPL_PLACE_FRESH_FIRST = 0,   /* from machines with no device taken */
	DPL_PLACE_APPEND_FIRST = 1,  /* from partly used machines */
	DPL_PLACE_SCATTER_FIRST = 2, /* round-robin over machines */
	DPL_PLACE__COUNT = 3
};

/* "fresh-first", "append-first", "scatter-first"; NULL if unknown. */
DPL_EXTERN const char *dpl_placement_name(enum dpl_placement p);

/*
 * dpl_cluster_place - the `want` devices a policy gives a new stage when
 * the devices in `taken` (bit d = device d) are in use, as DAPPLE's
 * released planner picks them:
 *   fresh-first   walks the machines with no device taken, in order:
 *                 takes the first `want` devices of the first one with
 *                 enough, else the whole machine and goes on;
 *   append-first  the same walk over machines with some but not all
 *                 devices taken (their lowest free devices);
 *   scatter-first one device at a time, round-robin over the machines
 *                 with free devices, each time the lowest free one.
 * Example: 2 x 8, devices 0-2 taken, 4 wanted: fresh-first {8,9,10,11},
 * append-first {3,4,5,6}, scatter-first {3,4,8,9}.
 * Returns 0 and *out, DPL_ENOENT when the policy cannot supply `want`
 * devices (no *out), DPL_EINVAL for want 0, a bad policy or a bad
 * cluster.
 */
DPL_EXTERN int dpl_cluster_place(const struct dpl_cluster *c, uint64_t taken,
				 uint32_t want, enum dpl_placement policy,
				 uint64_t *out);

/* ------------------------------------------------------------------ */
/* Plans                                                                */
/* ------------------------------------------------------------------ */

/* Most stages in a plan. */
#define DPL_PLAN_MAX_STAGES 64

/* One stage of a plan. */
struct dpl_plan_stage {
	uint32_t first_layer; /* inclusive, in the profile's layer order */
	uint32_t last_layer;  /* inclusive */
	uint64_t devices;     /* bit d = device d; replica k = k-th lowest */

	/* Filled by dpl_plan_evaluate(). */
	uint32_t replicas;       /* number of devices */
	double forward_ms;       /* per micro-batch, slowest replica */
	double backward_ms;      /* per micro-batch, slowest replica */
	double send_ms;          /* transfer to the next stage per micro-batch
				    (the gradient back takes as long); 0 for
				    the last stage */
	double allreduce_ms;     /* gradient allreduce per iteration */
	uint32_t inflight;       /* micro-batches alive at peak */
	uint64_t memory_bytes;   /* peak per device */
	double parameter_bytes;  /* weights of the stage */
	uint64_t activation_bytes; /* activations one micro-batch keeps
				      alive on one device of the stage (its
				      layers' activations for ceil(mb / R)
				      samples): the --act-bytes figure of
				      `bounded` and `zb-auto` byte caps */
};

/*
 * A plan: stages, micro-batching, policy and, once evaluated, its costs.
 * Plain data: copy it by assignment.
 */
struct dpl_plan {
	uint32_t stages;
	struct dpl_plan_stage stage[DPL_PLAN_MAX_STAGES];
	uint32_t microbatch_size; /* samples per micro-batch, >= 1 */
	uint32_t microbatches;    /* M >= 1 */
	enum dpl_policy policy;   /* gpipe, 1f1b or 1f1b-comm */

	/* Filled by dpl_plan_evaluate(). */
	double predicted_ms;        /* iteration time (see dpl_plan_params) */
	double pivot_ms;            /* DAPPLE's analytic latency L */
	uint32_t pivot_stage;       /* the pivot's compute stage ... */
	int pivot_is_transfer;      /* ... or that stage's outgoing transfer */
	uint64_t peak_memory_bytes; /* largest device peak */
	int fits;                   /* every device within memory */
	uint32_t worst_stage;       /* stage with the largest peak */
	uint32_t devices_used;
};

/* How dpl_plan_evaluate() and dpl_plan_search() rank plans. */
enum dpl_plan_rank {
	DPL_PLAN_RANK_SIM = 0,  /* simulator (default) */
	DPL_PLAN_RANK_PIVOT = 1 /* DAPPLE's pivot formula only */
};

/*
 * Planner inputs besides the profile and the cluster. Zero-initialise
 * and set profile_batch and global_batch.
 */
struct dpl_plan_params {
	uint32_t profile_batch;   /* batch the profile was measured at, >= 1 */
	uint32_t global_batch;    /* samples per iteration, >= 1 */
	double optimizer_factor;  /* optimizer state bytes per weight byte:
				     0 plain SGD, 1 momentum, 2 Adam */
	uint32_t max_stages;      /* 0: no limit beyond the device count */
	uint32_t microbatch_size; /* 0: the planner chooses */
	uint32_t rank;            /* enum dpl_plan_rank */
	uint32_t front_cap;       /* partial plans kept per search state;
				     0: 48 */
	uint32_t candidates;      /* DP plans re-tuned and re-timed by the
				     simulator; 0: 16 */
};

/*
 * dpl_plan_pivot - DAPPLE's latency L over a sequence of n stages (compute
 * and transfer stages alike) with per-micro-batch costs f[], b[],
 * allreduce times ar[] (NULL: none) and m micro-batches, as in the
 * formula above. Writes the pivot index to *q when q is non-NULL.
 * Returns L; 0 for n == 0 or m == 0. O(n^2). Thread-safe.
 */
DPL_EXTERN double dpl_plan_pivot(const double *f, const double *b,
				 const double *ar, uint32_t n, uint32_t m,
				 uint32_t *q);

/*
 * dpl_plan_evaluate - fill the derived fields of `plan` (its stages'
 * costs, memory and fit, pivot latency, predicted time) from its stages,
 * devices, micro-batching and policy. predicted_ms is the simulator's
 * makespan, or the pivot latency when p->rank is DPL_PLAN_RANK_PIVOT.
 * p->global_batch is not used (the plan carries its micro-batching).
 * Errors: DPL_EINVAL naming the fault for stages that do not cover the
 * layers in order, an empty or out-of-range or shared device set, more
 * replicas than samples per micro-batch, a policy other than gpipe /
 * 1f1b / 1f1b-comm, bad params or cluster; errors of dpl_sim_run(). The
 * plan is changed only on success. Thread-safe.
 */
DPL_EXTERN int dpl_plan_evaluate(const dpl_profile *prof,
				 const struct dpl_cluster *c,
				 const struct dpl_plan_params *p,
				 struct dpl_plan *plan);

/*
 * dpl_plan_tune - choose the micro-batching for the plan's stages and
 * devices, and the policy: a plan whose policy is gpipe stays gpipe (note
 * that gpipe is 0, the policy of a zeroed plan); any other gets the
 * faster of 1f1b and 1f1b-comm. Every micro-batch count M in
 * [1, global_batch] whose size ceil(global_batch / M) is new and at least
 * the largest replica count (or only p->microbatch_size when set) is
 * scored by the pivot formula; the two best that fit under each policy
 * are simulated (p->rank SIM; under PIVOT the best by the formula wins)
 * and the fastest is kept, ties going to fewer micro-batches. When none
 * fits, the plan gets the choice with the smallest memory overflow and
 * fits = 0. The plan is left evaluated as by dpl_plan_evaluate().
 * Errors as dpl_plan_evaluate() (micro-batching aside), and DPL_EINVAL
 * when no micro-batch size is possible (global_batch below the replica
 * count).
 */
DPL_EXTERN int dpl_plan_tune(const dpl_profile *prof,
			     const struct dpl_cluster *c,
			     const struct dpl_plan_params *p,
			     struct dpl_plan *plan);

/* The baselines printed beside every plan. */
enum dpl_plan_baseline {
	DPL_BASELINE_DATA_PARALLEL = 0, /* one stage on every device */
	DPL_BASELINE_PIPEDREAM = 1,     /* PipeDream's planner, run synchronously */
	DPL_BASELINE_GPIPE = 2,         /* straight pipeline, equal layer counts */
	DPL_BASELINE__COUNT = 3
};

/* "data_parallel", "pipedream", "gpipe"; NULL if unknown. */
DPL_EXTERN const char *dpl_plan_baseline_name(enum dpl_plan_baseline b);

/*
 * dpl_plan_baseline - build and tune a baseline's plan:
 *
 *  data_parallel  one stage of all layers on every device, 1f1b (plain
 *                 gradient accumulation over M micro-batches).
 *  pipedream      PipeDream's hierarchical optimizer
 *                 (optimizer_graph_hierarchical.py) on the same profile:
 *                 per level (devices of a machine at intra_bandwidth, then
 *                 machines at inter_bandwidth) the DP A[i][j][m] over
 *                 layer ranges and device counts that minimises the
 *                 slowest stage, a replicated stage costing
 *                 (compute + 4 (m-1) P / (bw m)) / m (divided further by
 *                 the devices per machine for whole-range replication at
 *                 the upper level, as PipeDream does), a cut
 *                 2 A / (bw m'), and its memory check
 *                 ceil((N - m) / m) (activations + P) <= device_memory;
 *                 times in seconds at the profile batch, "Input" sources
 *                 zeroed, all devices used; on profiles of more than 128
 *                 layers it runs on 128 layer ranges of equal compute
 *                 (its DP is cubic in them). Its stages keep PipeDream's
 *                 order of devices (stage after stage, machine by
 *                 machine); the plan is then tuned and timed
 *                 synchronously under dpl's cost model (1f1b).
 *  gpipe          min(devices, layers) stages of equal layer counts
 *                 (differing by at most one), one device each in order,
 *                 gpipe policy (M micro-batches in flight).
 *
 * On success *out is the tuned plan; out->fits tells whether it fits
 * memory. DPL_ENOENT when the baseline has no plan at all (PipeDream's
 * memory check rejects every partition, or fewer samples than devices
 * for data_parallel); other errors as dpl_plan_tune(). Thread-safe.
 */
DPL_EXTERN int dpl_plan_baseline(const dpl_profile *prof,
				 const struct dpl_cluster *c,
				 const struct dpl_plan_params *p,
				 enum dpl_plan_baseline which,
				 struct dpl_plan *out);

/* What dpl_plan_search() returns. */
struct dpl_plan_report {
	struct dpl_plan best;          /* the chosen plan (fits) */
	double single_device_ms;       /* the global batch on one device,
					  compute only, memory ignored */
	struct dpl_plan baseline[DPL_BASELINE__COUNT];
	int baseline_found[DPL_BASELINE__COUNT]; /* 0: no plan at all */
	int exact;          /* no search state dropped a partial plan for
			       lack of room (front_cap) and no DP run hit
			       the work limit: the DP's result is the
			       pivot-optimal plan of its search space */
	uint32_t dp_runs;   /* micro-batch sizes searched by the DP */
	uint64_t dp_states; /* partial plans kept over all runs */
	uint32_t simulated; /* simulator runs while ranking */
	int from_baseline;  /* -1: the DP's plan; else the baseline whose
			       plan was faster than every DP candidate */
};

/*
 * dpl_plan_search - DAPPLE's planner.
 *
 * 1. The three baselines are built and tuned (dpl_plan_baseline()); the
 *    fastest that fits bounds the search.
 * 2. For each micro-batch size (every distinct size ceil(gbs / M) when
 *    global_batch <= 64; else the powers of two up to it and the global
 *    batch itself; or only p->microbatch_size), a dynamic programme builds
 *    pipelines from the last stage back. A state is (first planned layer,
 *    devices used). A new stage takes layers [i, j) on R devices chosen by
 *    each of the three placement policies (dpl_cluster_place()), must fit
 *    memory with the warm-up depth the stages after it give it, and
 *    updates the pivot latency incrementally (the suffix is summarised by
 *    three numbers; see plan_dp.c). Each state keeps the partial plans no
 *    other dominates (in those numbers and the stage count, among partial
 *    plans whose first stage costs the same to send to), at most
 *    p->front_cap of them; partial plans whose lower bound cannot come
 *    within 15% of the best complete plan (0% under DPL_PLAN_RANK_PIVOT)
 *    are cut. Inside a run of layers with zero time and no weights only
 *    the cut with the fewest crossing bytes is tried; when more than 64
 *    cut positions remain, 64 are kept, one at the end of each of 64
 *    equal shares of the compute (deeper profiles than the paper's).
 *    The DP tries at most about 2.5e7 transitions in all, shared evenly
 *    by the micro-batch sizes; a run that uses its share stops expanding
 *    (clusters larger than the paper's 16 devices). Building from the
 *    back places the last stage first; machines are interchangeable, so
 *    this only changes which machine gets which number.
 * 3. The p->candidates best complete plans by pivot latency are tuned
 *    (dpl_plan_tune(): every micro-batch size, 1f1b or 1f1b-comm) and
 *    ranked with the baselines by the simulator (or by the pivot latency
 *    under DPL_PLAN_RANK_PIVOT); the fastest one that fits is out->best,
 *    so the plan is never slower than a baseline that fits.
 *
 * Under DPL_PLAN_RANK_PIVOT with no front capped (out->exact), out->best
 * has the least pivot latency of every plan in the search space (all
 * cuts, device counts, placement policy sequences and micro-batch sizes
 * searched), which the tests check by enumeration.
 *
 * Errors: DPL_EINVAL naming a bad parameter or cluster value; DPL_ENOFIT
 * when no plan fits, with the closest attempt's worst stage, its layers,
 * its peak and the overflow in dpl_last_error(); DPL_ENOMEM. *out is
 * written only on success. CPU-bound, single-threaded: under half a
 * second for the paper's models on 16 devices, one to two seconds on 64
 * (docs/planner.md).
 * Thread-safe.
 */
DPL_EXTERN int dpl_plan_search(const dpl_profile *prof,
			       const struct dpl_cluster *c,
			       const struct dpl_plan_params *p,
			       struct dpl_plan_report *out);

/*
 * Schedule inputs for a plan: sim.params points into the arrays here, so
 * the struct must stay where dpl_plan_schedule() filled it while
 * sim.params is used.
 *
 * sim.h has one link bandwidth and one allreduce bandwidth; the plan's
 * per-stage transfer and allreduce times are passed through them:
 * link_bandwidth = ar_bandwidth = 1e6 "bytes" per millisecond, latencies
 * 0, activation_bytes[s] = round(send_ms[s] * 1e6) (one byte = one
 * nanosecond), grad_bytes[s] = activation_bytes[s - 1], and
 * param_bytes[s] = round(allreduce_ms[s] * 1e6 * R / (2 (R - 1))) so that
 * the simulator's ring formula gives back allreduce_ms. Activation byte
 * figures in the simulator's stats are therefore nanoseconds, not bytes.
 */
struct dpl_plan_sim {
	struct dpl_sim_params params;
	struct dpl_stage_cost costs[DPL_PLAN_MAX_STAGES];
	uint64_t activation_bytes[DPL_PLAN_MAX_STAGES];
	uint64_t grad_bytes[DPL_PLAN_MAX_STAGES];
	uint64_t param_bytes[DPL_PLAN_MAX_STAGES];
	uint32_t replicas[DPL_PLAN_MAX_STAGES];
};

/*
 * dpl_plan_schedule - the schedule of an evaluated plan (its policy, S
 * stages, M micro-batches, compute-only lists) in *out, and the
 * simulator parameters that time it in *sim (see struct dpl_plan_sim).
 * Only the plan's own fields are read, so a plan loaded from a file
 * (dpl_plan_read_json()) can be simulated without its profile. On
 * success *out owns a new schedule (dpl_schedule_destroy()); written only
 * on success. Errors: DPL_EINVAL for a plan with no stage, more than
 * DPL_PLAN_MAX_STAGES, M 0, a policy other than gpipe / 1f1b /
 * 1f1b-comm, or a negative or non-finite cost; errors of
 * dpl_schedule_build(). Thread-safe.
 */
DPL_EXTERN int dpl_plan_schedule(const struct dpl_plan *plan,
				 dpl_schedule **out, struct dpl_plan_sim *sim);

#ifdef __cplusplus
}
#endif
#endif /* DPL_PLAN_H */
