/*
 * sim_svg.c - the timeline of a simulation as an SVG 1.1 picture, from
 * the public accessors of the result and its schedule only. Numbers go
 * through fmt_num(), integer arithmetic, so that a host program's
 * LC_NUMERIC cannot change a byte.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dpl/sim.h>

#define SVG_WIDTH 960u
#define SVG_WIDTH_MIN 200u
#define SVG_WIDTH_MAX 100000u
#define PAD 12.0    /* outer margin */
#define LEFT 72.0   /* room for "rank 4095" */
#define ROW_H 24.0  /* height of a rank's row */
#define ROW_GAP 6.0 /* between rows; reductions sit in it */
#define LINE_H 16.0 /* one line of legend or caption */
#define CHAR_W 6.6  /* width of one character at 11 px, a safe guess */

/* Kinds drawn, in legend order; index into styles[]. */
enum { K_F, K_B, K_I, K_W, K_STEP, K_REDUCE, K_TRANSFER, K_IDLE, K__N };

/* Class attribute, legend text, fill, and colour of text drawn on it. */
struct style {
	const char *cls, *name, *fill, *ink;
};

static const struct style styles[K__N] = {
	[K_F] = {"F", "F forward", "#4c78a8", "#ffffff"},
	[K_B] = {"B", "B backward", "#f58518", "#000000"},
	[K_I] = {"I", "I backward (input)", "#e45756", "#ffffff"},
	[K_W] = {"W", "W backward (weight)", "#54a24b", "#ffffff"},
	[K_STEP] = {"STEP", "optimizer step", "#9d755d", "#ffffff"},
	[K_REDUCE] = {"REDUCE_GRAD", "gradient reduction", "#b279a2", "#ffffff"},
	[K_TRANSFER] = {"transfer", "transfer", "#888888", "#000000"},
	[K_IDLE] = {"idle", "idle (bubble)", "url(#bubble)", "#000000"},
};

struct svg {
	FILE *f;
	const dpl_sim *sim;
	const dpl_schedule *s;
	const struct dpl_sim_svg_params *p;
	struct dpl_sim_summary sum;
	const struct dpl_sim_event *ev;
	size_t n;
	double w;     /* time axis width, pixels */
	double scale; /* pixels per time unit */
	bool multi;   /* ranks hold several stages: labels name the stage */
	bool bytes;   /* caption shows bytes */
	const char *title; /* first caption line */
	char deftitle[160];
	uint32_t *peak_mb; /* [ranks] */
	uint64_t *peak_b;  /* [ranks] */
};

/*
 * `v` with `dec` (0..4) decimals, rounded half away from zero; with
 * `trim`, trailing zeros and a trailing point removed. Locale-free.
 */
static const char *fmt_num(char *buf, size_t size, double v, int dec,
			   bool trim)
{
	static const uint64_t p10[] = {1, 10, 100, 1000, 10000};
	double sc = round(fabs(v) * (double)p10[dec]);
	uint64_t u, ip, fp;
	size_t len;

	if (!isfinite(v) || sc >= 9e15) {
		snprintf(buf, size, "%.0f", isfinite(v) ? v : 0.0);
		return buf;
	}
	u = (uint64_t)sc;
	ip = u / p10[dec];
	fp = u % p10[dec];
	snprintf(buf, size, "%s%llu", v < 0 && u ? "-" : "",
		 (unsigned long long)ip);
	if (dec == 0)
		return buf;
	len = strlen(buf);
	snprintf(buf + len, size - len, ".%0*llu", dec, (unsigned long long)fp);
	if (trim) {
		len = strlen(buf);
		while (buf[len - 1] == '0')
			buf[--len] = '\0';
		if (buf[len - 1] == '.')
			buf[--len] = '\0';
	}
	return buf;
}

/* Pixels, two decimals. */
#define PX(buf, v) fmt_num(buf, sizeof buf, (v), 2, true)

/* Write `s` with &, <, >, " and ' escaped. */
static void put_text(FILE *f, const char *s)
{
	static const char set[] = "&<>\"'";
	static const char *const esc[] = {"&amp;", "&lt;", "&gt;", "&quot;",
					  "&apos;"};
	const char *hit;

	for (; *s; s++)
		if ((hit = strchr(set, *s)) != NULL)
			fputs(esc[hit - set], f);
		else
			fputc(*s, f);
}

/* One <text> element at (x, y), `anchor` start/middle/end. */
static void text_at(FILE *f, double x, double y, const char *anchor,
		    const char *cls, const char *fill, const char *s)
{
	char a[32], b[32];

	fprintf(f, "<text class=\"%s\" x=\"%s\" y=\"%s\" text-anchor=\"%s\""
		   " fill=\"%s\">",
		cls, PX(a, x), PX(b, y), anchor, fill);
	put_text(f, s);
	fputs("</text>\n", f);
}

static void rect(FILE *f, const char *cls, double x, double y, double w,
		 double h, const char *fill)
{
	char a[32], b[32], c[32], d[32];

	fprintf(f, "<rect class=\"%s\" x=\"%s\" y=\"%s\" width=\"%s\" "
		   "height=\"%s\" fill=\"%s\"",
		cls, PX(a, x), PX(b, y), PX(c, w), PX(d, h), fill);
}

static void put_line(FILE *f, const char *cls, double x1, double y1, double x2,
		 double y2, const char *stroke)
{
	char a[32], b[32], c[32], d[32];

	fprintf(f, "<line class=\"%s\" x1=\"%s\" y1=\"%s\" x2=\"%s\" "
		   "y2=\"%s\" stroke=\"%s\" stroke-width=\"0.7\"/>\n",
		cls, PX(a, x1), PX(b, y1), PX(c, x2), PX(d, y2), stroke);
}

static double row_y(uint32_t r)
{
	return PAD + r * (ROW_H + ROW_GAP);
}

static double time_x(const struct svg *g, double t)
{
	return PAD + LEFT + t * g->scale;
}

static int kind_of(const struct dpl_sim_event *e)
{
	if (e->kind == DPL_SIM_TRANSFER)
		return K_TRANSFER;
	if (e->kind == DPL_SIM_REDUCE)
		return K_REDUCE;
	if (e->kind == DPL_SIM_STEP)
		return K_STEP;
	/* K_F..K_W are DPL_ACT_F..DPL_ACT_W. */
	return e->action.kind <= DPL_ACT_W ? (int)e->action.kind : -1;
}

/* "1.5 MiB": bytes with a binary unit, one decimal above 1 KiB. */
static void fmt_bytes(char *buf, size_t size, uint64_t b)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)b;
	char n[32];
	int u = -1;

	if (b < 1024) {
		snprintf(buf, size, "%llu B", (unsigned long long)b);
		return;
	}
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, size, "%s %s", fmt_num(n, sizeof n, v, 1, true), unit[u]);
}

/*
 * Peak micro-batches (and bytes) alive per rank over all its stages, in
 * the order the rank runs its list: +1 at F, -1 at B or W, as the
 * simulator counts per stage. One micro-batch's bytes on stage s are that
 * stage's peak bytes over its peak count.
 */
static int rank_peaks(struct svg *g)
{
	uint32_t R = g->sum.ranks, S = g->sum.stages, live;
	uint64_t *per = calloc(S ? S : 1, sizeof *per), live_b;
	size_t len;

	g->peak_mb = calloc(R ? R : 1, sizeof *g->peak_mb);
	g->peak_b = calloc(R ? R : 1, sizeof *g->peak_b);
	if (!per || !g->peak_mb || !g->peak_b) {
		free(per);
		return dpl_set_error(DPL_ENOMEM, "out of memory for %u ranks",
				  R);
	}
	for (uint32_t s = 0; s < S; s++) {
		struct dpl_sim_stage_stats st;

		if (dpl_sim_stage(g->sim, s, &st) == 0 && st.peak_inflight > 0)
			per[s] = st.peak_activation_bytes / st.peak_inflight;
		g->bytes |= per[s] > 0 && !g->p->hide_bytes;
	}
	for (uint32_t r = 0; r < R; r++) {
		const struct dpl_action *a = dpl_schedule_actions(g->s, r, &len);

		live = 0;
		live_b = 0;
		for (size_t i = 0; i < len; i++) {
			uint32_t k = a[i].kind, st = a[i].stage;

			if (k == DPL_ACT_F) {
				live++;
				live_b += per[st];
			} else if ((k == DPL_ACT_B || k == DPL_ACT_W) && live) {
				live--;
				live_b -= live_b >= per[st] ? per[st] : live_b;
			}
			g->peak_mb[r] = live > g->peak_mb[r] ? live : g->peak_mb[r];
			g->peak_b[r] = live_b > g->peak_b[r] ? live_b : g->peak_b[r];
		}
	}
	free(per);
	return 0;
}

/* The hatch that marks idle time, and a white ground. */
static void put_head(struct svg *g, double width, double height)
{
	char a[32], b[32];

	fprintf(g->f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" "
		"width=\"%s\" height=\"%s\" viewBox=\"0 0 %s %s\" "
		"font-family=\"sans-serif\" font-size=\"11\">\n",
		PX(a, width), PX(b, height), a, b);
	fputs("<title>", g->f);
	put_text(g->f, g->title);
	fputs("</title>\n<defs><pattern id=\"bubble\" width=\"6\" "
	      "height=\"6\" patternUnits=\"userSpaceOnUse\">"
	      "<rect width=\"6\" height=\"6\" fill=\"#f0f0f0\"/>"
	      "<path d=\"M0,6 L6,0\" stroke=\"#bbbbbb\" stroke-width=\"1\"/>"
	      "</pattern></defs>\n",
	      g->f);
	fputs("<rect class=\"ground\" x=\"0\" y=\"0\" width=\"100%\" "
	      "height=\"100%\" fill=\"#ffffff\"/>\n",
	      g->f);
}

static void put_idle(struct svg *g, uint32_t r, double t0, double t1)
{
	if (t1 - t0 <= 1e-12 * (g->sum.makespan > 1 ? g->sum.makespan : 1))
		return;
	rect(g->f, styles[K_IDLE].cls, time_x(g, t0), row_y(r),
	     (t1 - t0) * g->scale, ROW_H, styles[K_IDLE].fill);
	fputs("/>\n", g->f);
}

/* An action's rect, its tooltip and, where it fits, its label. */
static void put_action(struct svg *g, const struct dpl_sim_event *e, int k)
{
	const struct style *st = &styles[k];
	char name[DPL_ACTION_TEXT_MAX], lb[48], t0[32], t1[32];
	double x = time_x(g, e->start), w = (e->end - e->start) * g->scale;
	double y = row_y(e->rank), h = ROW_H;

	if (k == K_REDUCE) {
		y += ROW_H + 1;
		h = ROW_GAP - 2;
	}
	rect(g->f, st->cls, x, y, w, h, st->fill);
	if (g->multi && (e->action.stage / g->sum.ranks) % 2 == 1)
		fputs(" fill-opacity=\"0.6\"", g->f); /* odd chunks lighter */
	fputs(" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>", g->f);
	if (dpl_action_format(e->action, name, sizeof name) < 0)
		snprintf(name, sizeof name, "?");
	put_text(g->f, name);
	fprintf(g->f, " %s to %s</title></rect>\n",
		fmt_num(t0, sizeof t0, e->start, 4, true),
		fmt_num(t1, sizeof t1, e->end, 4, true));
	if (k > K_W)
		return;
	snprintf(lb, sizeof lb, "s%u:%u", e->action.stage,
		 e->action.microbatch);
	/* The micro-batch alone when the stage is implied or does not fit. */
	if (!g->multi || (double)strlen(lb) * CHAR_W + 2 > w)
		snprintf(lb, sizeof lb, "%u", e->action.microbatch);
	if ((double)strlen(lb) * CHAR_W + 2 <= w)
		text_at(g->f, x + w / 2, y + h / 2 + 4, "middle", "mb", st->ink,
			lb);
}

/* Rank rows: label, idle time, then every interval on the rank. */
static void put_rows(struct svg *g)
{
	size_t i = 0, j, k;
	char lb[32];

	for (uint32_t r = 0; r < g->sum.ranks; r++) {
		double t = 0;

		snprintf(lb, sizeof lb, "rank %u", r);
		text_at(g->f, PAD + LEFT - 6, row_y(r) + ROW_H / 2 + 4, "end",
			"rank", "#000000", lb);
		for (j = i; j < g->n && g->ev[j].rank == r; j++)
			if (g->ev[j].kind == DPL_SIM_COMPUTE) {
				put_idle(g, r, t, g->ev[j].start);
				if (g->ev[j].end > t)
					t = g->ev[j].end;
			}
		put_idle(g, r, t, g->sum.makespan);
		for (k = i; k < j; k++) {
			int kind = kind_of(&g->ev[k]);

			if (kind < 0 || kind == K_TRANSFER)
				continue;
			if (kind >= K_STEP && g->ev[k].end <= g->ev[k].start)
				continue;
			put_action(g, &g->ev[k], kind);
		}
		i = j;
	}
}

/* Transfers: a thin line from the sender's row to the receiver's. */
static void put_transfers(struct svg *g)
{
	for (size_t i = 0; i < g->n; i++) {
		const struct dpl_sim_event *e = &g->ev[i];
		bool down = e->peer > e->rank;
		double y1 = row_y(e->rank) + (down ? ROW_H : 0);
		double y2 = row_y(e->peer) + (down ? 0 : ROW_H);

		if (e->kind != DPL_SIM_TRANSFER || e->peer >= g->sum.ranks)
			continue;
		put_line(g->f, "transfer", time_x(g, e->start), y1,
		     time_x(g, e->end), y2, styles[K_TRANSFER].fill);
	}
}

/* The time axis: ticks every 1, 2 or 5 times a power of ten, >= 60 px. */
static void put_axis(struct svg *g, double y)
{
	double step = 1, raw, span = g->sum.makespan;
	char lb[32];
	long k, nt;

	put_line(g->f, "axis", time_x(g, 0), y, time_x(g, span), y, "#000000");
	text_at(g->f, PAD + LEFT - 12, y + 14, "end", "axis", "#000000",
		"time");
	if (!(span > 0))
		return;
	raw = span * 60 / g->w;
	step = pow(10, floor(log10(raw)));
	step *= step * 2 >= raw ? 2 : step * 5 >= raw ? 5 : 10;
	if (step < 1e-4) /* the labels have four decimals */
		step = 1e-4;
	nt = (long)floor(span / step + 1e-9);
	for (k = 0; k <= nt; k++) {
		double x = time_x(g, (double)k * step);

		put_line(g->f, "tick", x, y, x, y + 4, "#000000");
		text_at(g->f, x, y + 14, "middle", "axis", "#000000",
			fmt_num(lb, sizeof lb, (double)k * step, 4, true));
	}
}

/* Swatch and name of every kind drawn, and of idle time. */
static void put_legend(struct svg *g, double y)
{
	bool seen[K__N] = {false};
	double x = PAD + LEFT;

	for (size_t i = 0; i < g->n; i++) {
		int k = kind_of(&g->ev[i]);

		if (k >= 0 && (k <= K_W || g->ev[i].end > g->ev[i].start))
			seen[k] = true;
	}
	seen[K_TRANSFER] = seen[K_TRANSFER] && g->p->transfers;
	seen[K_IDLE] = true;
	for (int k = 0; k < K__N; k++) {
		char cls[32];

		if (!seen[k])
			continue;
		snprintf(cls, sizeof cls, "key %s", styles[k].cls);
		rect(g->f, cls, x, y - 9, 10, 10, styles[k].fill);
		fputs(" stroke=\"#666666\" stroke-width=\"0.5\"/>\n", g->f);
		text_at(g->f, x + 14, y, "start", "key", "#000000",
			styles[k].name);
		x += 14 + (double)strlen(styles[k].name) * CHAR_W + 12;
	}
}

/* The caption's per-rank peaks in lines of at most `cols` characters,
 * from y on (written only with `emit`); returns the number of lines. */
static unsigned put_peaks(struct svg *g, size_t cols, double y, bool emit)
{
	char line[1024], item[96], b[40];
	size_t len = (size_t)snprintf(line, sizeof line,
				      "peak activations per rank:");
	unsigned lines = 0;

	for (uint32_t r = 0; r <= g->sum.ranks; r++) {
		size_t il = 0;

		if (r < g->sum.ranks) {
			b[0] = '\0';
			if (g->bytes) {
				fmt_bytes(b + 2, sizeof b - 3, g->peak_b[r]);
				memcpy(b, " (", 2);
				strcat(b, ")");
			}
			il = (size_t)snprintf(item, sizeof item,
					      " rank %u: %u mb%s%s", r,
					      g->peak_mb[r], b,
					      r + 1 < g->sum.ranks ? "," : "");
		}
		if (r == g->sum.ranks || len + il > cols ||
		    len + il >= sizeof line) {
			if (emit)
				text_at(g->f, PAD, y + lines * LINE_H, "start",
					"caption", "#000000", line);
			lines++;
			len = (size_t)snprintf(line, sizeof line, " ");
		}
		if (il)
			memcpy(line + len, item, il + 1);
		len += il;
	}
	return lines;
}

static void put_caption(struct svg *g, double y, size_t cols)
{
	char line[256], m[32], bub[32], busy[32];
	const char *unit = g->p->time_unit;

	fprintf(g->f, "<text class=\"caption title\" x=\"%s\" y=\"%s\" "
		      "font-weight=\"bold\">",
		PX(m, PAD), PX(bub, y));
	put_text(g->f, g->title);
	fputs("</text>\n", g->f);
	snprintf(line, sizeof line, "makespan %s%s%s, bubble %s%%, busy %s",
		 fmt_num(m, sizeof m, g->sum.makespan, 4, true),
		 unit ? " " : "", unit ? unit : "",
		 fmt_num(bub, sizeof bub, 100 * g->sum.bubble_fraction, 2, false),
		 fmt_num(busy, sizeof busy, g->sum.total_busy, 4, true));
	text_at(g->f, PAD, y + LINE_H, "start", "caption", "#000000", line);
	put_peaks(g, cols, y + 2 * LINE_H, true);
}

static int check(const dpl_sim *sim, const dpl_schedule *s,
		 const struct dpl_sim_svg_params *p)
{
	struct dpl_sim_summary sum;

	if (sim == NULL || s == NULL)
		return dpl_set_error(DPL_EINVAL,
				  "sim and schedule must not be NULL");
	if (p && p->width && (p->width < SVG_WIDTH_MIN ||
			      p->width > SVG_WIDTH_MAX))
		return dpl_set_error(DPL_EINVAL,
				  "svg width must be %u..%u pixels (got %u)",
				  SVG_WIDTH_MIN, SVG_WIDTH_MAX, p->width);
	dpl_sim_summary(sim, &sum);
	if (sum.ranks != dpl_schedule_ranks(s) ||
	    sum.stages != dpl_schedule_stages(s))
		return dpl_set_error(DPL_EINVAL,
				  "the schedule (%u ranks, %u stages) is not "
				  "the one simulated (%u ranks, %u stages)",
				  dpl_schedule_ranks(s), dpl_schedule_stages(s),
				  sum.ranks, sum.stages);
	return 0;
}

int dpl_sim_write_svg(const dpl_sim *sim, const dpl_schedule *s, FILE *f,
		      const struct dpl_sim_svg_params *p)
{
	static const struct dpl_sim_svg_params defaults;
	struct svg g = {0};
	const char *pol;
	double width, y, axis_y;
	size_t cols;
	unsigned peak_lines;
	int rc;

	if ((rc = check(sim, s, p)))
		return rc;
	if (f == NULL)
		return dpl_set_error(DPL_EINVAL, "file must not be NULL");
	g.f = f;
	g.sim = sim;
	g.s = s;
	g.p = p ? p : &defaults;
	g.w = g.p->width ? g.p->width : SVG_WIDTH;
	dpl_sim_summary(sim, &g.sum);
	g.ev = dpl_sim_events(sim, &g.n);
	g.scale = g.sum.makespan > 0 ? g.w / g.sum.makespan : 0;
	g.multi = g.sum.stages > g.sum.ranks;
	pol = dpl_policy_name(dpl_schedule_policy(s));
	snprintf(g.deftitle, sizeof g.deftitle,
		 "%s: %u stages on %u ranks, %u micro-batches%s",
		 pol ? pol : "custom", g.sum.stages, g.sum.ranks,
		 dpl_schedule_microbatches(s),
		 dpl_schedule_is_lowered(s) ? " (lowered)" : "");
	g.title = g.p->title ? g.p->title : g.deftitle;
	if ((rc = rank_peaks(&g)))
		goto out;
	width = PAD + LEFT + g.w + PAD;
	cols = (size_t)((width - 2 * PAD) / CHAR_W);
	peak_lines = put_peaks(&g, cols, 0, false);
	axis_y = row_y(g.sum.ranks) + 2;
	y = axis_y + 20 + LINE_H; /* legend baseline */
	put_head(&g, width,
		 y + LINE_H * (1.5 + 2 + peak_lines) + PAD);
	put_rows(&g);
	if (g.p->transfers)
		put_transfers(&g);
	put_axis(&g, axis_y);
	put_legend(&g, y);
	put_caption(&g, y + 1.5 * LINE_H, cols);
	fputs("</svg>\n", f);
	if (fflush(f) != 0 || ferror(f))
		rc = dpl_set_error(DPL_EIO, "writing the picture failed: %s",
				   strerror(errno));
out:
	free(g.peak_mb);
	free(g.peak_b);
	return rc;
}

int dpl_sim_save_svg(const dpl_sim *sim, const dpl_schedule *s,
		     const char *path, const struct dpl_sim_svg_params *p)
{
	size_t size = path ? strlen(path) + 64 : 0;
	char *tmp, msg[256];
	FILE *f = NULL;
	int fd = -1, rc, e = 0, tries;

	if ((rc = check(sim, s, p)))
		return rc;
	if (path == NULL || path[0] == '\0')
		return dpl_set_error(DPL_EINVAL, "path must not be empty");
	if ((tmp = malloc(size)) == NULL)
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	/* open() rather than mkstemp(): the mode follows the umask without
	 * changing it under other threads. */
	for (tries = 0; fd < 0 && tries < 100; tries++) {
		snprintf(tmp, size, "%s.tmp.%ld.%llu", path, (long)getpid(),
			 (unsigned long long)dpl_clock_ns());
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0 || (f = fdopen(fd, "w")) == NULL) {
		e = errno;
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
		free(tmp);
		return dpl_set_error(DPL_EIO, "%s: %s", path, strerror(e));
	}
	rc = dpl_sim_write_svg(sim, s, f, p);
	if (rc == 0 && fsync(fd) != 0)
		e = errno;
	if (fclose(f) != 0 && e == 0)
		e = errno;
	if (rc == 0 && e == 0 && rename(tmp, path) != 0)
		e = errno;
	if (rc == 0 && e != 0)
		rc = dpl_set_error(DPL_EIO, "%s: %s", path, strerror(e));
	if (rc != 0 && e == 0) {
		snprintf(msg, sizeof msg, "%s", dpl_last_error());
		rc = dpl_set_error(rc, "%s: %s", path, msg);
	}
	if (rc)
		unlink(tmp);
	free(tmp);
	return rc;
}
