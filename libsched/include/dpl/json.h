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

#ifdef __cplusplus
}
#endif
#endif /* DPL_JSON_H */
