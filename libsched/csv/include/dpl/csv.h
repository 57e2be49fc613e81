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
 * bubbles (None) as empty fields; they are skipped on reading, and
 * dpl_schedule_write_csv writes none (dpl_schedule_write_csv_layout puts
 * them back). A file with SEND/RECV actions loads as lowered. Every
 * action PyTorch writes loads, its comms kinds (UNSHARD, RESHARD,
 * WAIT_REDUCE_GRAD, WAIT_SEND_F, WAIT_SEND_B) included; PyTorch's
 * compound field "(0F7;7B3)OVERLAP_F_B" loads as the OVERLAP_F_B marker
 * and its two parts (it must pair an F with a B or I) and is written
 * back in that form, so a file without bubbles read and written again is
 * unchanged (line ends aside; with its layout, unchanged in every byte).
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

/*
 * A CSV file's layout: what the file holds beside its actions, so that a
 * schedule read from it is written back byte for byte. It records where
 * the file's empty fields are (PyTorch's bubbles), each line's end ("\n"
 * or "\r\n"), a UTF-8 byte order mark, what follows the last line, and
 * the text of each field (an action written with leading zeros, say).
 * Opaque; owned by the caller of dpl_schedule_read_csv_layout, freed
 * with dpl_csv_layout_destroy; read-only once made, so one layout may be
 * used by several threads at once.
 *
 * dpl_schedule_read_csv_layout - dpl_schedule_read_csv, and the layout
 * of `text` in *layout. Same errors, DPL_ENOMEM too; *out and *layout are
 * written only on success (both, then, the caller's).
 *
 * dpl_schedule_write_csv_layout - write `s` in `layout`: rank r's fields
 * fill line r's non-empty fields in order, empty fields, line ends, the
 * mark and the tail stay as they were, and a field whose action (or
 * OVERLAP_F_B pair) is the one read there keeps its text; any other is
 * written as dpl_schedule_write_csv writes it. So the schedule read with
 * a layout comes back as the file it was read from, and a changed one
 * keeps the file's shape. Errors, all before anything is written:
 * dpl_schedule_write_csv's, and DPL_EINVAL when `s` has another number of
 * ranks than the layout has lines, or a rank writes another number of
 * fields than its line holds (the message names the rank and both
 * counts); DPL_EIO when writing fails. Blocking only on `f`.
 *
 * dpl_csv_layout_destroy - free `layout`; NULL is a no-op.
 */
typedef struct dpl_csv_layout dpl_csv_layout;

DPL_EXTERN int dpl_schedule_read_csv_layout(const char *text, size_t len,
					    dpl_schedule **out,
					    dpl_csv_layout **layout);
DPL_EXTERN int dpl_schedule_write_csv_layout(const dpl_schedule *s,
					     const dpl_csv_layout *layout,
					     FILE *f);
DPL_EXTERN void dpl_csv_layout_destroy(dpl_csv_layout *layout);

/*
 * dpl_schedule_write_csv_comms - write lowered schedule `s` to `f` in the
 * form PyTorch's _PipelineScheduleRuntime._load_csv(path,
 * format="compute_comms") runs as it is: every action but STEP (PyTorch
 * steps outside the schedule), a WAIT_REDUCE_GRAD right after each
 * REDUCE_GRAD, and one wait per send: WAIT_SEND_F(s, j) right after the
 * rank's backward (B or I, or the OVERLAP_F_B pair holding it) of (s, j),
 * which proves the peer took the activation, and the waits of the other
 * sends at the end of the line, in the order sent -- PyTorch's own rule
 * (_add_wait_send). Waits the schedule already holds stay as they are
 * and are not doubled, so a file read from PyTorch's comms CSV comes
 * back unchanged. The schedule is validated first. Errors: DPL_EINVAL
 * (NULL, not lowered), the validator's DPL_ESCHED / DPL_EDEADLOCK,
 * DPL_ERANGE, DPL_ENOMEM (nothing written for these), DPL_EIO when
 * writing fails. Blocking only on `f`; thread-safe for distinct files.
 */
DPL_EXTERN int dpl_schedule_write_csv_comms(const dpl_schedule *s, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* DPL_CSV_H */
