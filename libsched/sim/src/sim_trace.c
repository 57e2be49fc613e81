/*
 * sim_trace.c - views of a simulation built from its public accessors
 * only: the Chrome trace-event JSON (Perfetto, chrome://tracing) and the
 * ASCII timeline for terminals.
 *
 * Trace tracks (all in pid 0):
 *   tid r                       rank r: compute actions and STEPs
 *   tid T + R * R + r           rank r's communication stream
 *                               (gradient reductions)
 *   tid T + sender * R + receiver   the link sender -> receiver
 * with T = 1000 (or R when there are more than 1000 ranks), so no two
 * tracks share an id. A flow arrow joins the compute action that
 * produced each transfer to the one that consumed it; both ends sit in
 * the middle of their slice so that viewers bind them to it even when
 * slices touch.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/sim.h>


/* The ASCII timeline refuses to draw more cells than this. */
#define ASCII_MAX_COLUMNS 1000000u
#define ASCII_MAX_CELLS ((size_t)1 << 26)

static int write_done(FILE *f, const char *what)
{
	if (fflush(f) != 0 || ferror(f))
		return dpl_set_error(DPL_EIO, "writing the %s failed: %s", what,
				  strerror(errno));
	return 0;
}

/* Events sorted for lookup of compute actions by (stage, mb, kind). */
static int cmp_compute(const void *pa, const void *pb)
{
	const struct dpl_sim_event *a = *(const struct dpl_sim_event *const *)pa;
	const struct dpl_sim_event *b = *(const struct dpl_sim_event *const *)pb;

	if (a->action.stage != b->action.stage)
		return a->action.stage < b->action.stage ? -1 : 1;
	if (a->action.microbatch != b->action.microbatch)
		return a->action.microbatch < b->action.microbatch ? -1 : 1;
	if (a->action.kind != b->action.kind)
		return a->action.kind < b->action.kind ? -1 : 1;
	return 0;
}

static const struct dpl_sim_event *
find_compute(const struct dpl_sim_event *const *idx, size_t n,
	     uint32_t kind, uint32_t stage, uint32_t mb)
{
	struct dpl_sim_event key;
	const struct dpl_sim_event *k = &key, *const *hit;

	memset(&key, 0, sizeof key);
	key.action = ((struct dpl_action){kind, stage, mb});
	hit = bsearch(&k, idx, n, sizeof *idx, cmp_compute);
	return hit ? *hit : NULL;
}

/* The compute action that consumes transfer `t`, or NULL. */
static const struct dpl_sim_event *
consumer_of(const struct dpl_sim_event *const *idx, size_t n,
	    const struct dpl_sim_event *t)
{
	const struct dpl_sim_event *c;
	struct dpl_action a = t->action;

	if (a.kind == DPL_ACT_F)
		return find_compute(idx, n, DPL_ACT_F, a.stage + 1,
				    a.microbatch);
	if (a.stage == 0)
		return NULL;
	c = find_compute(idx, n, DPL_ACT_B, a.stage - 1, a.microbatch);
	return c ? c : find_compute(idx, n, DPL_ACT_I, a.stage - 1,
				    a.microbatch);
}

static double mid(const struct dpl_sim_event *e)
{
	return (e->start + e->end) / 2;
}

static int cmp_u64(const void *pa, const void *pb)
{
	uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

	return a < b ? -1 : a > b;
}

static void meta(FILE *f, uint64_t tid, const char *name, uint64_t sort)
{
	fprintf(f,
		",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,"
		"\"tid\":%llu,\"args\":{\"name\":\"%s\"}},"
		"\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":0,"
		"\"tid\":%llu,\"args\":{\"sort_index\":%llu}}",
		(unsigned long long)tid, name, (unsigned long long)tid,
		(unsigned long long)sort);
}

int dpl_sim_write_trace(const dpl_sim *sim, FILE *f, double us_per_unit)
{
	struct dpl_sim_summary sum;
	const struct dpl_sim_event *ev, **idx = NULL;
	uint64_t R, T, *links = NULL, flow = 0;
	char name[DPL_ACTION_TEXT_MAX], tname[64];
	size_t n, i, ni = 0, nl = 0;
	bool *comm = NULL;
	double us = us_per_unit;
	int rc = 0;

	if (sim == NULL || f == NULL)
		return dpl_set_error(DPL_EINVAL, "sim and file must not be NULL");
	if (isnan(us) || isinf(us))
		return dpl_set_error(DPL_EINVAL,
				  "us_per_unit must be finite (got %g)", us);
	if (us <= 0)
		us = 1000;
	dpl_sim_summary(sim, &sum);
	ev = dpl_sim_events(sim, &n);
	R = sum.ranks;
	T = R > 1000 ? R : 1000;
	idx = malloc((n ? n : 1) * sizeof *idx);
	links = malloc((n ? n : 1) * sizeof *links);
	comm = calloc(R ? R : 1, sizeof *comm);
	if (!idx || !links || !comm) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory for %zu events", n);
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (ev[i].kind == DPL_SIM_COMPUTE)
			idx[ni++] = &ev[i];
		else if (ev[i].kind == DPL_SIM_TRANSFER)
			links[nl++] = ev[i].rank * R + ev[i].peer;
		else if (ev[i].kind == DPL_SIM_REDUCE && ev[i].rank < R)
			comm[ev[i].rank] = true;
	}
	qsort(idx, ni, sizeof *idx, cmp_compute);
	qsort(links, nl, sizeof *links, cmp_u64);

	/* Track names, ranks first, then streams, then links. */
	fputs("{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\","
	      "\"pid\":0,\"args\":{\"name\":\"dpl simulation\"}}",
	      f);
	for (i = 0; i < R; i++) {
		snprintf(tname, sizeof tname, "rank %zu", i);
		meta(f, i, tname, i);
	}
	for (i = 0; i < R; i++)
		if (comm[i]) {
			snprintf(tname, sizeof tname, "rank %zu comm", i);
			meta(f, T + R * R + i, tname, R + i);
		}
	for (i = 0; i < nl; i++) {
		if (i > 0 && links[i] == links[i - 1])
			continue;
		snprintf(tname, sizeof tname, "link %llu->%llu",
			 (unsigned long long)(links[i] / R),
			 (unsigned long long)(links[i] % R));
		meta(f, T + links[i], tname, 2 * R + links[i]);
	}

	for (i = 0; i < n; i++) {
		const struct dpl_sim_event *e = &ev[i];
		struct dpl_action a = e->action;
		const char *cat = dpl_action_kind_name(a.kind);
		uint64_t tid = e->rank;

		if (e->kind == DPL_SIM_TRANSFER) {
			a.kind = a.kind == DPL_ACT_F ? DPL_ACT_SEND_F
						     : DPL_ACT_SEND_B;
			cat = "transfer";
			tid = T + (uint64_t)e->rank * R + e->peer;
		} else if (e->kind == DPL_SIM_REDUCE) {
			tid = T + R * R + e->rank;
		}
		if (dpl_action_format(a, name, sizeof name) < 0)
			snprintf(name, sizeof name, "?");
		fprintf(f,
			",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\","
			"\"pid\":0,\"tid\":%llu,\"ts\":%.3f,\"dur\":%.3f,"
			"\"args\":{\"stage\":%u",
			name, cat ? cat : "?", (unsigned long long)tid,
			e->start * us, (e->end - e->start) * us, a.stage);
		if (a.microbatch != DPL_NO_MICROBATCH)
			fprintf(f, ",\"microbatch\":%u", a.microbatch);
		if (e->kind == DPL_SIM_TRANSFER)
			fprintf(f, ",\"from\":%u,\"to\":%u", e->rank, e->peer);
		fputs("}}", f);
	}

	/* Flows: producer compute -> consumer compute, one per transfer. */
	for (i = 0; i < n; i++) {
		const struct dpl_sim_event *e = &ev[i], *src, *dst;
		struct dpl_action a = e->action;

		if (e->kind != DPL_SIM_TRANSFER)
			continue;
		src = find_compute(idx, ni, a.kind, a.stage, a.microbatch);
		dst = consumer_of(idx, ni, e);
		if (src == NULL || dst == NULL)
			continue;
		a.kind = a.kind == DPL_ACT_F ? DPL_ACT_SEND_F : DPL_ACT_SEND_B;
		if (dpl_action_format(a, name, sizeof name) < 0)
			snprintf(name, sizeof name, "?");
		flow++;
		fprintf(f,
			",\n{\"name\":\"%s\",\"cat\":\"flow\",\"ph\":\"s\","
			"\"id\":%llu,\"pid\":0,\"tid\":%u,\"ts\":%.3f}"
			",\n{\"name\":\"%s\",\"cat\":\"flow\",\"ph\":\"f\","
			"\"bp\":\"e\",\"id\":%llu,\"pid\":0,\"tid\":%u,"
			"\"ts\":%.3f}",
			name, (unsigned long long)flow, src->rank,
			mid(src) * us, name, (unsigned long long)flow,
			dst->rank, mid(dst) * us);
	}
	fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
	rc = write_done(f, "trace");
out:
	free(idx);
	free(links);
	free(comm);
	return rc;
}

/*
 * "F12": kind letter and micro-batch of a compute action; "2F12" with its
 * stage when ranks hold several stages (interleaved), where the letter
 * alone would not say which chunk ran.
 */
static int label(struct dpl_action a, bool with_stage, char *buf, size_t size)
{
	const char *k = dpl_action_kind_name(a.kind);

	if (with_stage)
		return snprintf(buf, size, "%u%s%u", a.stage, k ? k : "?",
				a.microbatch);
	return snprintf(buf, size, "%s%u", k ? k : "?", a.microbatch);
}

/* Write cells [c0, c1) of a row, trailing blanks trimmed. */
static void put_cells(FILE *f, const char *row, size_t cw, size_t c0,
		      size_t c1)
{
	size_t from = c0 * cw, to = c1 * cw;

	while (to > from && row[to - 1] == ' ')
		to--;
	fwrite(row + from, 1, to - from, f);
	fputc('\n', f);
}

/*
 * The time scale over columns [c0, c1): the start time of every k-th
 * column; the last label may run past the end.
 */
static void put_ruler(FILE *f, char *buf, size_t cw, size_t k, double unit,
		      size_t c0, size_t c1)
{
	char lb[32];
	size_t c, pos, free_at = 0, end = 0;
	int w;

	for (c = c0; c < c1; c++) {
		if (c % k != 0)
			continue;
		pos = (c - c0) * cw;
		w = snprintf(lb, sizeof lb, "%g", (double)c * unit);
		if (pos < free_at || w < 0)
			continue;
		if (pos > end)
			memset(buf + end, ' ', pos - end);
		memcpy(buf + pos, lb, (size_t)w);
		end = pos + (size_t)w;
		free_at = end + 1;
	}
	fwrite(buf, 1, end, f);
	fputc('\n', f);
}

int dpl_sim_write_ascii(const dpl_sim *sim, FILE *f, double unit,
			unsigned width)
{
	struct dpl_sim_summary sum;
	const struct dpl_sim_event *ev;
	char lb[32], *rows = NULL, *ruler = NULL;
	size_t n, i, cw = 2, ncol, c, c0, c1, pw, b, bw, tick, lw = 1;
	double cols;
	uint32_t r;
	bool multi;
	int rc;

	if (sim == NULL || f == NULL)
		return dpl_set_error(DPL_EINVAL, "sim and file must not be NULL");
	if (isnan(unit) || isinf(unit))
		return dpl_set_error(DPL_EINVAL, "unit must be finite (got %g)",
				  unit);
	dpl_sim_summary(sim, &sum);
	multi = sum.stages > sum.ranks;
	ev = dpl_sim_events(sim, &n);
	if (unit <= 0) {
		unit = 0;
		for (i = 0; i < n; i++) {
			double d = ev[i].end - ev[i].start;

			if (ev[i].kind == DPL_SIM_COMPUTE && d > 0 &&
			    (unit == 0 || d < unit))
				unit = d;
		}
		if (unit == 0)
			unit = 1;
	}
	for (i = 0; i < n; i++)
		if (ev[i].kind == DPL_SIM_COMPUTE) {
			size_t w = (size_t)label(ev[i].action, multi, lb, sizeof lb);

			if (w + 1 > cw)
				cw = w + 1;
		}
	cols = ceil(sum.makespan / unit - 1e-9);
	if (!(cols <= ASCII_MAX_COLUMNS))
		return dpl_set_error(DPL_ERANGE,
				  "unit %g makes %.0f columns (at most %u)",
				  unit, cols, ASCII_MAX_COLUMNS);
	ncol = cols > 0 ? (size_t)cols : 0;
	if (sum.ranks > 0 && ncol * cw > ASCII_MAX_CELLS / sum.ranks)
		return dpl_set_error(DPL_ERANGE,
				  "%u ranks x %zu columns: timeline too "
				  "large",
				  sum.ranks, ncol);

	bw = width ? width : (ncol ? ncol : 1);
	/* Paint every rank's row: idle, then each action over its cells. */
	rows = malloc((size_t)sum.ranks * ncol * cw + 1);
	ruler = malloc((ncol < bw ? ncol : bw) * cw + sizeof lb);
	if (!rows || !ruler) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory for the timeline");
		goto out;
	}
	for (i = 0; i < (size_t)sum.ranks * ncol; i++) {
		memset(rows + i * cw, '.', cw - 1);
		rows[i * cw + cw - 1] = ' ';
	}
	for (i = 0; i < n; i++) {
		const struct dpl_sim_event *e = &ev[i];
		char *row;
		double x;
		int w;

		if (e->kind != DPL_SIM_COMPUTE || e->rank >= sum.ranks)
			continue;
		row = rows + (size_t)e->rank * ncol * cw;
		x = round(e->start / unit);
		c0 = x > 0 ? (size_t)x : 0;
		x = round(e->end / unit);
		c1 = x > 0 ? (size_t)x : 0;
		if (c1 <= c0)
			c1 = c0 + 1;
		if (c1 > ncol)
			c1 = ncol;
		for (c = c0; c < c1; c++) {
			memset(row + c * cw, '-', cw - 1);
			row[c * cw + cw - 1] = ' ';
		}
		if (c0 < ncol) {
			w = label(e->action, multi, lb, sizeof lb);
			memset(row + c0 * cw, ' ', cw);
			memcpy(row + c0 * cw, lb, (size_t)w);
		}
	}
	/* Label every tick-th column, ticks far enough apart for labels. */
	for (c = 0; c < ncol; c++) {
		int w = snprintf(lb, sizeof lb, "%g", (double)c * unit);

		if (w > 0 && (size_t)w > lw)
			lw = (size_t)w;
	}
	tick = (lw + cw) / cw;
	/* Rows "rank R |", with R padded so that the bars line up. */
	pw = (size_t)snprintf(lb, sizeof lb, "%u",
			      sum.ranks ? sum.ranks - 1 : 0);
	for (b = 0; b == 0 || b * bw < ncol; b++) {
		c0 = b * bw;
		c1 = c0 + bw < ncol ? c0 + bw : ncol;
		if (b > 0)
			fputc('\n', f);
		fprintf(f, "%-*s |", (int)(pw + 5), "time");
		put_ruler(f, ruler, cw, tick, unit, c0, c1);
		for (r = 0; r < sum.ranks; r++) {
			fprintf(f, "rank %*u |", (int)pw, r);
			put_cells(f, rows + (size_t)r * ncol * cw, cw, c0, c1);
		}
	}
	rc = write_done(f, "timeline");
out:
	free(rows);
	free(ruler);
	return rc;
}
