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

#endif
