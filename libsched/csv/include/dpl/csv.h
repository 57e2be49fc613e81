/*
 * dpl/csv.h - schedules as CSV files in the format of PyTorch's
 * torch.distributed.pipelining, so schedules move between dpl and PyTorch
 * unchanged. Library dpl::csv (libdpl-csv); depends on the core only.
 * Threads: no shared state; one schedule per thread at a time.
 */
#ifndef DPL_CSV_H
#define DPL_CSV_H

#include <stddef.h>
#include <stdio.h>

#include <dpl/schedule.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * CSV in PyTorch's format: one line per rank, in rank order, its actions
 * in order, comma separated, nothing else on the line. PyTorch writes its
 * bubbles (None) as empty fields; they are skipped on reading and never
 * written. A file with SEND/RECV actions loads as lowered.
 *
 * dpl_schedule_write_csv writes to `f`; DPL_EIO when writing fails.
 * dpl_schedule_read_csv parses `len` bytes of `text`; ranks = lines,
 * stages and micro-batches are the largest indices + 1, and each stage
 * lives on the one rank whose line holds it (a stage on two lines, or on
 * none, is an error). DPL_EPARSE with "line L, field K: ..." in
 * dpl_last_error() for malformed input; *out is written only on success.
 */
DPL_EXTERN int dpl_schedule_write_csv(const dpl_schedule *s, FILE *f);
DPL_EXTERN int dpl_schedule_read_csv(const char *text, size_t len,
				     dpl_schedule **out);

#ifdef __cplusplus
}
#endif
#endif /* DPL_CSV_H */
