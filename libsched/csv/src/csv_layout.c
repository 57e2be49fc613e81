/*
 * csv_layout.c - writing a schedule back in the layout of the CSV file it
 * was read from: the file's empty fields (PyTorch's bubbles), line ends,
 * byte order mark and what follows its last line, and each field's text
 * as it was while the action there is the one read.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/csv.h>

#include "csv_internal.h"

void dpl_csv_layout_destroy(dpl_csv_layout *layout)
{
	if (layout == NULL)
		return;
	free(layout->text);
	free(layout->line_field);
	free(layout->crlf);
	free(layout->fields);
	free(layout->a);
	free(layout);
}

/* Fields rank `r`'s list `l` of `len` actions writes. */
static size_t fields_of(const struct dpl_action *l, size_t len)
{
	size_t i = 0, n = 0;

	while (i < len) {
		i += l[i].kind == DPL_ACT_OVERLAP_F_B ? 3 : 1;
		n++;
	}
	return n;
}

/* Action fields (not empty ones) on line `r` of the layout. */
static size_t slots_of(const dpl_csv_layout *L, size_t r)
{
	size_t j, n = 0;

	for (j = L->line_field[r]; j < L->line_field[r + 1]; j++)
		n += L->fields[j].nact > 0;
	return n;
}

static bool same(const struct dpl_action *a, const struct dpl_action *b,
		 size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (a[i].kind != b[i].kind || a[i].stage != b[i].stage ||
		    a[i].microbatch != b[i].microbatch)
			return false;
	return true;
}

/* Line `r`: the rank's fields in the layout's action slots. */
static void put_line(const dpl_csv_layout *L, size_t r,
		     const struct dpl_action *l, FILE *f)
{
	size_t j, i = 0;

	for (j = L->line_field[r]; j < L->line_field[r + 1]; j++) {
		const struct csv_field *fd = &L->fields[j];
		size_t k;

		if (j > L->line_field[r])
			fputc(',', f);
		if (fd->nact == 0)
			continue;
		k = l[i].kind == DPL_ACT_OVERLAP_F_B ? 3 : 1;
		if (fd->nact == k && same(l + i, L->a + fd->act, k))
			fwrite(L->text + fd->off, 1, fd->len, f);
		else
			dpl__csv_put_field(f, l + i);
		i += k;
	}
}

int dpl_schedule_write_csv_layout(const dpl_schedule *s,
				  const dpl_csv_layout *layout, FILE *f)
{
	const dpl_csv_layout *L = layout;
	uint32_t r, ranks;
	int rc;

	if (s == NULL || L == NULL || f == NULL)
		return dpl_set_error(DPL_EINVAL, "schedule, layout and file "
				  "must not be NULL");
	if ((rc = dpl__csv_check(s)))
		return rc;
	ranks = dpl_schedule_ranks(s);
	if (ranks != L->lines)
		return dpl_set_error(DPL_EINVAL,
				  "the schedule has %u ranks; the layout is "
				  "that of a file of %zu lines",
				  ranks, L->lines);
	for (r = 0; r < ranks; r++) {
		size_t len, have, want;
		const struct dpl_action *l = dpl_schedule_actions(s, r, &len);

		have = fields_of(l, len);
		want = slots_of(L, r);
		if (have != want)
			return dpl_set_error(DPL_EINVAL,
					  "rank %u writes %zu fields, but line "
					  "%u of the layout's file held %zu "
					  "actions (a layout fits a schedule "
					  "with as many fields on each rank)",
					  r, have, r + 1, want);
	}
	fwrite(L->text, 1, L->start, f);
	for (r = 0; r < ranks; r++) {
		size_t len;
		const struct dpl_action *l = dpl_schedule_actions(s, r, &len);

		put_line(L, r, l, f);
		if (r + 1 < ranks)
			fputs(L->crlf[r] ? "\r\n" : "\n", f);
	}
	fwrite(L->text + L->end, 1, L->len - L->end, f);
	if (fflush(f) != 0 || ferror(f))
		return dpl_set_error(DPL_EIO, "writing the CSV schedule failed: %s",
				  strerror(errno));
	return 0;
}
