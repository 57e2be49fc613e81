/* csv_internal.h - what the CSV writers share. */
#ifndef DPL_CSV_INTERNAL_H
#define DPL_CSV_INTERNAL_H

#include <stdio.h>

#include <dpl/schedule.h>

/* Stage and micro-batch indices in a file stay below 2^31. */
#define CSV_INDEX_LIMIT ((uint32_t)1 << 31)

static inline struct dpl_action dpl__csv_act(uint32_t kind, uint32_t stage,
					     uint32_t mb)
{
	struct dpl_action a = {kind, stage, mb};

	return a;
}

/* Write the OVERLAP_F_B marker a[0] with its parts a[1], a[2] as one
 * field, "(0F7;7B3)OVERLAP_F_B" (checked by the caller). */
void dpl__csv_put_overlap(FILE *f, const struct dpl_action *a);

/* Write the field starting at l[0] (an action, or an OVERLAP_F_B marker
 * and its parts); returns the actions it took, 1 or 3. */
size_t dpl__csv_put_field(FILE *f, const struct dpl_action *l);

/* What dpl_schedule_write_csv refuses before writing anything: a rank
 * with no actions, a stage on no rank, an index of 2^31 or more, an
 * OVERLAP_F_B marker without its parts. 0 or the error, set. */
int dpl__csv_check(const dpl_schedule *s);

/* One field of a file read with its layout. */
struct csv_field {
	size_t off;    /* its text: layout->text[off, off + len) */
	size_t len;
	size_t act;    /* its actions: layout->a[act, act + nact) */
	uint32_t nact; /* 0 (empty field), 1, or 3 (OVERLAP_F_B) */
};

/* What a CSV file holds beside its actions (dpl/csv.h). */
struct dpl_csv_layout {
	char *text;                /* a copy of the file */
	size_t len;
	size_t start;              /* 3 after a byte order mark, else 0 */
	size_t end;                /* text[end, len): what follows the last line */
	size_t lines;
	size_t *line_field;        /* [lines + 1]: each line's first field */
	unsigned char *crlf;       /* [lines]: the line ended in "\r\n" */
	struct csv_field *fields;  /* [line_field[lines]] */
	size_t nfields;            /* fields stored */
	struct dpl_action *a;      /* the actions, in file order */
	size_t n;
};

#endif
