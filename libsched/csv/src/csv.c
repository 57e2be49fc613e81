/*
 * csv.c - schedules in torch.distributed.pipelining's CSV form: one line
 * per rank, its actions in order, comma separated. PyTorch's csv.writer
 * ends lines with "\r\n" and writes bubbles (None) as empty fields; both
 * are read; dpl_schedule_write_csv writes neither (csv_layout.c does).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/csv.h>

#include "csv_internal.h"

/* Longest piece of a bad field quoted in a message. */
#define CSV_QUOTE_MAX 40

void dpl__csv_put_overlap(FILE *f, const struct dpl_action *a)
{
	char t[DPL_ACTION_TEXT_MAX];
	int n;

	fputc('(', f);
	n = dpl_action_format(a[1], t, sizeof t);
	fwrite(t, 1, (size_t)n, f);
	fputc(';', f);
	n = dpl_action_format(a[2], t, sizeof t);
	fwrite(t, 1, (size_t)n, f);
	fputs(")OVERLAP_F_B", f);
}

size_t dpl__csv_put_field(FILE *f, const struct dpl_action *l)
{
	char t[DPL_ACTION_TEXT_MAX];
	int n;

	if (l[0].kind == DPL_ACT_OVERLAP_F_B) {
		dpl__csv_put_overlap(f, l);
		return 3;
	}
	n = dpl_action_format(l[0], t, sizeof t);
	fwrite(t, 1, (size_t)n, f);
	return 1;
}

int dpl__csv_check(const dpl_schedule *s)
{
	char t[DPL_ACTION_TEXT_MAX];
	bool *used;
	uint32_t r, st;
	size_t i;
	int rc = 0;

	/* Refuse what a CSV file cannot hold before writing anything. */
	used = calloc(dpl_schedule_stages(s), sizeof *used);
	if (used == NULL)
		return dpl_set_error(DPL_ENOMEM, "out of memory for %u stages",
				  dpl_schedule_stages(s));
	for (r = 0; r < dpl_schedule_ranks(s) && rc == 0; r++) {
		size_t len;
		const struct dpl_action *l = dpl_schedule_actions(s, r, &len);

		if (len == 0)
			rc = dpl_set_error(DPL_EINVAL,
					"rank %u has no actions; a CSV line "
					"cannot be empty",
					r);
		for (i = 0; i < len && rc == 0; i++) {
			struct dpl_action a = l[i];

			if (a.stage >= CSV_INDEX_LIMIT ||
			    (a.microbatch != DPL_NO_MICROBATCH &&
			     a.microbatch >= CSV_INDEX_LIMIT))
				rc = dpl_set_error(DPL_ERANGE,
						"rank %u, position %zu: index "
						"too large for a CSV file "
						"(limit 2^31 - 1)",
						r, i);
			else if (dpl_action_format(a, t, sizeof t) < 0)
				rc = DPL_EINVAL;
			else if (a.kind == DPL_ACT_OVERLAP_F_B &&
				 (i + 2 >= len ||
				  l[i + 1].kind != DPL_ACT_F ||
				  (l[i + 2].kind != DPL_ACT_B &&
				   l[i + 2].kind != DPL_ACT_I)))
				rc = dpl_set_error(DPL_EINVAL,
						"rank %u, position %zu: "
						"OVERLAP_F_B without its F "
						"and B (or I) after it",
						r, i);
			else
				used[a.stage] = true;
		}
	}
	for (st = 0; st < dpl_schedule_stages(s) && rc == 0; st++)
		if (!used[st])
			rc = dpl_set_error(DPL_EINVAL,
					"stage %u has no actions; a CSV file "
					"places each stage by the line that "
					"holds it",
					st);
	free(used);
	return rc;
}

int dpl_schedule_write_csv(const dpl_schedule *s, FILE *f)
{
	uint32_t r;
	size_t i;
	int rc;

	if (s == NULL || f == NULL)
		return dpl_set_error(DPL_EINVAL, "schedule and file must not be NULL");
	if ((rc = dpl__csv_check(s)))
		return rc;

	for (r = 0; r < dpl_schedule_ranks(s); r++) {
		size_t len;
		const struct dpl_action *l = dpl_schedule_actions(s, r, &len);

		for (i = 0; i < len;) {
			if (i > 0)
				fputc(',', f);
			i += dpl__csv_put_field(f, l + i);
		}
		fputc('\n', f);
	}
	if (fflush(f) != 0 || ferror(f))
		return dpl_set_error(DPL_EIO, "writing the CSV schedule failed: %s",
				  strerror(errno));
	return 0;
}

/* What the first pass learns about the file. */
struct csv_scan {
	const char *text;
	size_t end;            /* content ends here (trailing newlines cut) */
	size_t bound;          /* actions the text can hold, at most */
	uint32_t *line_of;     /* [bound]: 1-based line of each stage, 0 none */
	struct dpl_action *a;  /* [bound]: actions in file order */
	size_t n;              /* actions stored */
	size_t *per_line;      /* [max_lines]: actions on each line */
	size_t max_lines;      /* lines that can hold actions, at most */
	size_t lines;
	uint32_t max_stage;
	size_t max_stage_line, max_stage_field;
	uint32_t max_mb;       /* DPL_NO_MICROBATCH while none seen */
	struct dpl_csv_layout *lay; /* NULL, or where the fields go */
};

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Parse one action [p, p + len) of field `field` of line `line`. */
static int parse_one(const char *p, size_t len, size_t line, size_t field,
		     struct dpl_action *a)
{
	char why[512];

	if (dpl_action_parse(p, len, a) != 0) {
		snprintf(why, sizeof why, "%s", dpl_last_error());
		return dpl_set_error(DPL_EPARSE, "line %zu, field %zu: %s", line,
				  field, why);
	}
	if (a->kind == DPL_ACT_OVERLAP_F_B)
		return dpl_set_error(DPL_EPARSE,
				  "line %zu, field %zu: OVERLAP_F_B is written "
				  "with its parts, as (0F1;3B0)OVERLAP_F_B",
				  line, field);
	return 0;
}

static int store(struct csv_scan *cs, struct dpl_action a, size_t line,
		 size_t field);

/*
 * PyTorch's compound field "(<F>;<B or I>)OVERLAP_F_B" [p, p + len):
 * the marker and its two parts.
 */
static int scan_overlap(struct csv_scan *cs, const char *p, size_t len,
			size_t line, size_t field)
{
	static const char tail[] = ")OVERLAP_F_B";
	size_t tl = sizeof tail - 1;
	const char *semi;
	struct dpl_action f, b;
	int q = (int)(len > CSV_QUOTE_MAX ? CSV_QUOTE_MAX : len), rc;

	if (len < tl + 2 || memcmp(p + len - tl, tail, tl) != 0)
		return dpl_set_error(DPL_EPARSE,
				  "line %zu, field %zu: '%.*s' is not an "
				  "action (a compound action is written "
				  "(0F1;3B0)OVERLAP_F_B)",
				  line, field, q, p);
	semi = memchr(p + 1, ';', len - tl - 1);
	if (semi == NULL ||
	    memchr(semi + 1, ';', (size_t)(p + len - tl - semi - 1)) != NULL)
		return dpl_set_error(DPL_EPARSE,
				  "line %zu, field %zu: '%.*s': OVERLAP_F_B "
				  "holds exactly two actions, a forward and "
				  "a backward",
				  line, field, q, p);
	if ((rc = parse_one(p + 1, (size_t)(semi - p - 1), line, field, &f)) ||
	    (rc = parse_one(semi + 1, (size_t)(p + len - tl - semi - 1), line,
			    field, &b)))
		return rc;
	if (f.kind != DPL_ACT_F ||
	    (b.kind != DPL_ACT_B && b.kind != DPL_ACT_I))
		return dpl_set_error(DPL_EPARSE,
				  "line %zu, field %zu: '%.*s': OVERLAP_F_B "
				  "pairs an F with a B or I, in that order",
				  line, field, q, p);
	if ((rc = store(cs, dpl__csv_act(DPL_ACT_OVERLAP_F_B, f.stage,
					 DPL_NO_MICROBATCH),
			line, field)) ||
	    (rc = store(cs, f, line, field)))
		return rc;
	return store(cs, b, line, field);
}

/* Parse field `field` of line `line`, text [p, p + len); len > 0. */
static int scan_field(struct csv_scan *cs, const char *p, size_t len,
		      size_t line, size_t field)
{
	struct dpl_action a;
	int q = (int)(len > CSV_QUOTE_MAX ? CSV_QUOTE_MAX : len), rc;

	if (is_blank(p[0]) || is_blank(p[len - 1]))
		return dpl_set_error(DPL_EPARSE,
				  "line %zu, field %zu: '%.*s' has blanks "
				  "around the action (a field holds the "
				  "action and nothing else)",
				  line, field, q, p);
	if (p[0] == '(')
		return scan_overlap(cs, p, len, line, field);
	if ((rc = parse_one(p, len, line, field, &a)) != 0)
		return rc;
	return store(cs, a, line, field);
}

/* Keep one parsed action of field `field` of line `line`. */
static int store(struct csv_scan *cs, struct dpl_action a, size_t line,
		 size_t field)
{
	if (a.stage >= CSV_INDEX_LIMIT)
		return dpl_set_error(DPL_EPARSE,
				  "line %zu, field %zu: stage %u is too "
				  "large (at most %u)",
				  line, field, a.stage, CSV_INDEX_LIMIT - 1);
	if (a.microbatch != DPL_NO_MICROBATCH &&
	    a.microbatch >= CSV_INDEX_LIMIT)
		return dpl_set_error(DPL_EPARSE,
				  "line %zu, field %zu: micro-batch %u is too "
				  "large (at most %u)",
				  line, field, a.microbatch,
				  CSV_INDEX_LIMIT - 1);
	if (cs->n == cs->bound) /* only with fields shorter than "0F0" */
		return dpl_set_error(DPL_EPARSE,
				  "line %zu, field %zu: too many actions for "
				  "the size of the text",
				  line, field);
	/* A stage index >= bound cannot have every stage below it on some
	 * line (there are not enough actions); the gap check reports it. */
	if (a.stage < cs->bound) {
		uint32_t prev = cs->line_of[a.stage];

		if (prev == 0)
			cs->line_of[a.stage] = (uint32_t)line;
		else if (prev != line)
			return dpl_set_error(DPL_EPARSE,
					  "line %zu, field %zu: stage %u "
					  "appears on lines %u and %zu (a "
					  "stage lives on one rank)",
					  line, field, a.stage, prev, line);
	}
	if (cs->n == 0 || a.stage > cs->max_stage) {
		cs->max_stage = a.stage;
		cs->max_stage_line = line;
		cs->max_stage_field = field;
	}
	if (a.microbatch != DPL_NO_MICROBATCH &&
	    (cs->max_mb == DPL_NO_MICROBATCH || a.microbatch > cs->max_mb))
		cs->max_mb = a.microbatch;
	cs->a[cs->n++] = a;
	return 0;
}

/* Record a field in the layout; room for it was made by the caller. */
static void keep_field(struct dpl_csv_layout *l, size_t off, size_t len,
		       size_t act, size_t nact)
{
	struct csv_field *f = &l->fields[l->nfields++];

	f->off = off;
	f->len = len;
	f->act = act;
	f->nact = (uint32_t)nact;
}

static int scan_line(struct csv_scan *cs, const char *p, size_t len,
		     size_t line)
{
	size_t field = 1, before = cs->n, i, start = 0, at;
	bool crlf = len > 0 && p[len - 1] == '\r';
	int rc;

	if (crlf)
		len--;
	if (line > cs->max_lines) /* only after lines shorter than "0F0" */
		return dpl_set_error(DPL_EPARSE, "line %zu: too many lines for "
				  "the size of the text", line);
	if (cs->lay) {
		cs->lay->line_field[line - 1] = cs->lay->nfields;
		cs->lay->crlf[line - 1] = crlf;
	}
	if (len == 0)
		return dpl_set_error(DPL_EPARSE,
				  "line %zu: empty line (each line holds one "
				  "rank's actions)",
				  line);
	for (i = 0; i <= len; i++) {
		if (i < len && p[i] != ',')
			continue;
		at = cs->n;
		if (i > start &&
		    (rc = scan_field(cs, p + start, i - start, line, field)))
			return rc;
		if (cs->lay)
			keep_field(cs->lay, (size_t)(p - cs->text) + start,
				   i - start, at, cs->n - at);
		field++;
		start = i + 1;
	}
	if (cs->n == before)
		return dpl_set_error(DPL_EPARSE,
				  "line %zu: no actions, only empty fields "
				  "(each line holds one rank's actions)",
				  line);
	cs->per_line[line - 1] = cs->n - before;
	return 0;
}

static int scan(struct csv_scan *cs, size_t start)
{
	const char *t = cs->text;
	size_t p = start, line = 1, i;
	int rc;

	while (p <= cs->end) {
		const char *nl = memchr(t + p, '\n', cs->end - p);
		size_t q = nl ? (size_t)(nl - t) : cs->end;

		if ((rc = scan_line(cs, t + p, q - p, line)))
			return rc;
		line++;
		p = q + 1;
	}
	cs->lines = line - 1;
	/* Every stage below the largest must live on some line. */
	for (i = 0; i <= cs->max_stage && i < cs->bound; i++)
		if (cs->line_of[i] == 0)
			return dpl_set_error(DPL_EPARSE,
					  "stage %zu appears on no line, "
					  "though stage %u does (line %zu, "
					  "field %zu); stages must run 0..%u "
					  "without gaps",
					  i, cs->max_stage, cs->max_stage_line,
					  cs->max_stage_field, cs->max_stage);
	return 0;
}

static int build(const struct csv_scan *cs, dpl_schedule **out)
{
	dpl_schedule *s;
	uint32_t stages = cs->max_stage + 1, r;
	uint32_t mb = cs->max_mb == DPL_NO_MICROBATCH ? 1 : cs->max_mb + 1;
	size_t k = 0, i;
	int rc;

	if ((rc = dpl_schedule_create((uint32_t)cs->lines, stages, mb, &s)))
		return rc;
	for (i = 0; i < stages; i++)
		if ((rc = dpl_schedule_map_stage(s, (uint32_t)i,
						 cs->line_of[i] - 1)))
			goto fail;
	for (r = 0; r < (uint32_t)cs->lines; r++) {
		size_t n = cs->per_line[r];

		for (i = 0; i < n; i++)
			if ((rc = dpl_schedule_append(s, r, cs->a[k++])))
				goto fail;
	}
	*out = s;
	return 0;
fail:
	dpl_schedule_destroy(s);
	return rc;
}

/*
 * Read `len` bytes of `text` into *out; when `lay` is not NULL, record
 * the fields in it too (its text is set by the caller).
 */
static int read_csv(const char *text, size_t len, dpl_schedule **out,
		    struct dpl_csv_layout *lay)
{
	struct csv_scan cs;
	size_t start = 0, i, lines = 1, most, fields;
	int rc;

	memset(&cs, 0, sizeof cs);
	cs.text = text;
	cs.max_mb = DPL_NO_MICROBATCH;
	/* A spreadsheet may save a UTF-8 byte order mark. */
	if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
		start = 3;
	/* Blank trailing lines and the last line ending are not ranks. */
	cs.end = len;
	while (cs.end > start &&
	       (text[cs.end - 1] == '\n' || text[cs.end - 1] == '\r'))
		cs.end--;
	if (cs.end == start)
		return dpl_set_error(DPL_EPARSE,
				  "empty input: a CSV schedule needs one line "
				  "of actions per rank");
	fields = 1; /* one more than the ',' and '\n' */
	cs.bound = 0;
	for (i = start; i < cs.end; i++) {
		if (text[i] == ',') {
			fields++;
		} else if (text[i] == '\n') {
			fields++;
			lines++;
		} else if (text[i] == '(') {
			cs.bound += 2; /* an OVERLAP_F_B field holds three */
		}
	}
	cs.bound += fields;
	if (lines >= CSV_INDEX_LIMIT)
		return dpl_set_error(DPL_EPARSE, "%zu lines: too many ranks",
				  lines);
	/* An action takes 3 bytes at least ("0F0") and a separator, so
	 * the text bounds the actions, and the valid lines, more tightly
	 * than its commas do. */
	most = (cs.end - start + 1) / 4 + 1;
	if (cs.bound > most)
		cs.bound = most;
	if (lines > most)
		lines = most;
	cs.max_lines = lines;
	cs.line_of = calloc(cs.bound, sizeof *cs.line_of);
	cs.a = malloc(cs.bound * sizeof *cs.a);
	cs.per_line = calloc(lines, sizeof *cs.per_line);
	if (lay) {
		lay->line_field = malloc((lines + 1) * sizeof *lay->line_field);
		lay->crlf = malloc(lines);
		lay->fields = malloc(fields * sizeof *lay->fields);
		cs.lay = lay;
	}
	if (!cs.line_of || !cs.a || !cs.per_line ||
	    (lay && (!lay->line_field || !lay->crlf || !lay->fields))) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory for %zu fields",
				cs.bound);
		goto done;
	}
	rc = scan(&cs, start);
	if (rc == 0)
		rc = build(&cs, out);
	if (rc == 0 && lay) {
		lay->start = start;
		lay->end = cs.end;
		lay->lines = cs.lines;
		lay->line_field[cs.lines] = lay->nfields;
		lay->a = cs.a;
		lay->n = cs.n;
		cs.a = NULL;
	}
done:
	free(cs.line_of);
	free(cs.a);
	free(cs.per_line);
	return rc;
}

int dpl_schedule_read_csv(const char *text, size_t len, dpl_schedule **out)
{
	if (out == NULL || (text == NULL && len > 0))
		return dpl_set_error(DPL_EINVAL, "text and out must not be NULL");
	return read_csv(text, len, out, NULL);
}

int dpl_schedule_read_csv_layout(const char *text, size_t len,
				 dpl_schedule **out, dpl_csv_layout **layout)
{
	struct dpl_csv_layout *l;
	dpl_schedule *s = NULL;
	int rc;

	if (out == NULL || layout == NULL || (text == NULL && len > 0))
		return dpl_set_error(DPL_EINVAL,
				  "text, out and layout must not be NULL");
	l = calloc(1, sizeof *l);
	if (l == NULL || (l->text = malloc(len ? len : 1)) == NULL) {
		free(l);
		return dpl_set_error(DPL_ENOMEM, "out of memory for a copy of "
				  "%zu bytes", len);
	}
	if (len)
		memcpy(l->text, text, len);
	l->len = len;
	if ((rc = read_csv(text, len, &s, l)) != 0) {
		dpl_csv_layout_destroy(l);
		return rc;
	}
	*out = s;
	*layout = l;
	return 0;
}
