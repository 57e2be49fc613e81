/*
 * dpl/json.h - JSON forms of dpl objects, in the separate library
 * dpl_json (target dpl::json, libdpl-json), so that the core keeps no
 * dependency. Link dpl::json to use these functions.
 *
 * Schedule file, version 1: one object with exactly these keys
 *
 *   {
 *     "format": "dpl-schedule",
 *     "version": 1,
 *     "policy": "1f1b",            (a dpl_policy_name(); "custom" too)
 *     "ranks": 4,
 *     "stages": 4,
 *     "microbatches": 8,
 *     "lowered": false,            (true iff a list holds a SEND, RECV,
 *                                   REDUCE_GRAD or STEP action)
 *     "stage_to_rank": [0, 1, 2, 3],
 *     "caps": [2, 2, 2, 2],        (optional; 0 = no cap on that stage)
 *     "actions": [["0F0", "0F1", ...], ...]   (one list per rank)
 *   }
 *
 * Counts and indices are integers in [0, 2^31). Unlike the CSV form it
 * keeps the policy, the caps, the stage mapping of stages without
 * actions and ranks with empty lists.
 *
 * Threads: both calls are safe to run concurrently on different
 * schedules; a schedule being written must not be changed meanwhile.
 */
#ifndef DPL_JSON_H
#define DPL_JSON_H

#include <stdio.h>

#include <dpl/common.h>
#include <dpl/schedule.h>
#include <dpl/plan.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * dpl_schedule_write_json - write `s` as a version 1 schedule file to `f`
 * (indented, one line per rank's list, a final newline). Caps are
 * written only when some stage has one. The schedule is not changed.
 * Returns 0, DPL_EINVAL for a NULL argument or DPL_EIO when writing or
 * flushing `f` fails (the stream may then hold part of the text).
 * Blocks only as `f` does.
 */
DPL_EXTERN int dpl_schedule_write_json(const dpl_schedule *s, FILE *f);

/*
 * dpl_schedule_read_json - parse `len` bytes of `text` (no terminating
 * NUL needed) as a version 1 schedule file. On success *out owns a new
 * schedule (free with dpl_schedule_destroy) with the file's policy,
 * shape, mapping, caps and lists; *out is written only on success.
 * Errors: DPL_EPARSE with a message naming the JSON path of the fault,
 * e.g. "actions[2][5]: 'xx' is not an action ..." or "ranks: 1.5 is not
 * an integer", or the line and column of a syntax error; every key is
 * required except "caps", and unknown or repeated keys are rejected;
 * DPL_ENOMEM. The lists are not validated (dpl_schedule_validate()
 * does that). Thread-safe.
 */
DPL_EXTERN int dpl_schedule_read_json(const char *text, size_t len,
				      dpl_schedule **out);


/*
 * Planner forms (dpl/plan.h). Numbers are written with 17 significant
 * digits so that they read back exactly.
 *
 * Profile, version 1 (the JSON form of PipeDream's graph text):
 *
 *   {
 *     "format": "dpl-profile", "version": 1,       (both optional)
 *     "layers": [{"id": "node1", "name": "Input",  (id, name optional)
 *                 "forward_ms": 3.4, "backward_ms": 0,
 *                 "activation_bytes": 19000000, "parameter_bytes": 0},
 *                ...],
 *     "edges": [[0, 1], [1, 2], ...]   (indices into "layers"; optional,
 *                                       absent or empty: a chain)
 *   }
 *
 * Cluster, version 1 (sizes in bytes, bandwidths in bytes per second,
 * latencies in seconds; see struct dpl_cluster):
 *
 *   {
 *     "format": "dpl-cluster", "version": 1,       (both optional)
 *     "name": "two-boxes",                           (optional)
 *     "machines": 2, "devices_per_machine": 8,
 *     "device_memory_bytes": 16e9,
 *     "intra_bandwidth_bytes_per_s": 25e9,   "intra_latency_s": 5e-6,
 *     "inter_bandwidth_bytes_per_s": 3e9,    "inter_latency_s": 25e-6,
 *     "allreduce_intra_bandwidth_bytes_per_s": 25e9,
 *     "allreduce_intra_pairs": true,
 *     "allreduce_inter_bandwidth_bytes_per_s": 3e9
 *   }
 *
 * machines, devices_per_machine and device_memory_bytes are required;
 * latencies default to 0, allreduce bandwidths to the point-to-point
 * ones, allreduce_intra_pairs to false. The bandwidth of a link the
 * cluster has (intra with more than one device per machine, inter with
 * more than one machine) must be given and > 0.
 *
 * Plan, version 1 (what `dpl plan` writes):
 *
 *   {
 *     "format": "dpl-plan", "version": 1,
 *     "layers": 26, "cluster": {...}, "profile_batch": 32,
 *     "global_batch": 512, "optimizer_factor": 2,
 *     "stages": [{"first_layer": 0, "last_layer": 20,
 *                 "first_name": "Input", "last_name": "Conv2d_5_3",
 *                 "devices": [0, 1, ...], "replicas": 15,
 *                 "forward_ms": ..., "backward_ms": ..., "send_ms": ...,
 *                 "allreduce_ms": ..., "inflight": 2,
 *                 "memory_bytes": ..., "parameter_bytes": ...}, ...],
 *     "microbatch_size": 32, "microbatches": 16, "policy": "1f1b",
 *     "predicted_ms": ..., "pivot_ms": ..., "pivot_stage": 0,
 *     "pivot_is_transfer": false, "peak_memory_bytes": ...,
 *     "fits": true, "devices_used": 16,
 *     "single_device_ms": ..., "speedup": ...,
 *     "baselines": {"data_parallel": {"found": true, "speedup": ...,
 *                                     "stages": [...], ...,
 *                                     "predicted_ms": ..., "fits": true},
 *                   "pipedream": {...}, "gpipe": {...}},
 *     "search": {"chosen": "dapple", "dp_runs": 10, "dp_states": ...,
 *                "simulated": 40, "exact": true}
 *   }
 *
 * Layer indices are in the profile's topological order (dpl/plan.h),
 * device ids in [0, machines * devices_per_machine). A baseline without
 * a plan is {"found": false, "fits": false, "predicted_ms": null}; the
 * "speedup" of a baseline is its time over the plan's.
 */

/*
 * dpl_profile_read_json - parse `len` bytes as a version 1 JSON profile.
 * On success *out owns a new profile (dpl_profile_destroy()); written
 * only on success. Errors: DPL_EPARSE naming the JSON path of the fault
 * ("layers[3].forward_ms: -1 is below 0", "edges[2][1]: 9 is out of
 * range [0, 7]", an unknown or repeated key, a cycle), or the line and
 * column of a syntax error; DPL_ENOMEM. Thread-safe.
 */
DPL_EXTERN int dpl_profile_read_json(const char *text, size_t len,
				     dpl_profile **out);

/*
 * dpl_profile_write_json - write `p` as a version 1 JSON profile (its
 * layers in topological order). DPL_EINVAL for NULL, DPL_EIO when
 * writing fails. Blocks only as `f` does.
 */
DPL_EXTERN int dpl_profile_write_json(const dpl_profile *p, FILE *f);

/*
 * dpl_cluster_read_json - parse `len` bytes as a version 1 cluster file
 * into *out (written only on success). Errors: DPL_EPARSE naming the key
 * and the fault (wrong type, negative, unknown or repeated key, missing
 * required key, or a value dpl_cluster_check() rejects), or the line and
 * column of a syntax error. Thread-safe.
 */
DPL_EXTERN int dpl_cluster_read_json(const char *text, size_t len,
				     struct dpl_cluster *out);

/*
 * dpl_cluster_write_json - write `c` as a version 1 cluster file.
 * DPL_EINVAL for NULL, DPL_EIO when writing fails.
 */
DPL_EXTERN int dpl_cluster_write_json(const struct dpl_cluster *c, FILE *f);

/*
 * dpl_plan_write_json - write a planner report (the chosen plan, its
 * baselines and search figures) as a version 1 plan file. `prof` (layer
 * names and count), `c` and `p` (the inputs) may be NULL; what they give
 * is then left out. Returns 0, DPL_EINVAL for a NULL report or file or a
 * report without a plan, DPL_EIO when writing fails (the stream may then
 * hold part of the text). Blocks only as `f` does.
 */
DPL_EXTERN int dpl_plan_write_json(const struct dpl_plan_report *r,
				   const dpl_profile *prof,
				   const struct dpl_cluster *c,
				   const struct dpl_plan_params *p, FILE *f);

/*
 * dpl_plan_read_json - parse a version 1 plan file into *out: its
 * stages (layers, devices and the per-stage costs forward_ms,
 * backward_ms, send_ms, allreduce_ms, all required), micro-batching,
 * policy and the figures present; enough for dpl_plan_schedule() to
 * rebuild and simulate it without the profile. The "cluster" object is
 * checked as a cluster file; "baselines" and "search" must be objects
 * and are otherwise not read. Errors: DPL_EPARSE naming the JSON path
 * (stages that do not cover the layers in order, a device listed twice,
 * "replicas" that disagree with "devices", a policy other than gpipe,
 * 1f1b or 1f1b-comm, ...), DPL_ENOMEM. *out is written only on success.
 * Thread-safe.
 */
DPL_EXTERN int dpl_plan_read_json(const char *text, size_t len,
				  struct dpl_plan *out);

#ifdef __cplusplus
}
#endif
#endif /* DPL_JSON_H */
