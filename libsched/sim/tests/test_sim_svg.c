/*
 * test_sim_svg.c - the SVG picture of a simulation, read back by a small
 * checker written here: rects counted per kind against the schedule's own
 * lists, widths against the costs, the caption against the simulator's
 * numbers, every rank's row, balanced tags, files whole or absent.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>

#include "scratch.h"

#define WIDTH 960.0 /* the documented default */

static dpl_schedule *build(uint32_t S, uint32_t M, enum dpl_policy p,
			   uint32_t chunks)
{
	struct dpl_schedule_params prm = {.stages = S, .microbatches = M,
					  .policy = p, .chunks = chunks};
	dpl_schedule *s;

	cr_assert_eq(dpl_schedule_build(&prm, &s), 0, "%s", dpl_last_error());
	return s;
}

static dpl_sim *run(const dpl_schedule *s, const struct dpl_sim_params *p)
{
	dpl_sim *sim;

	cr_assert_eq(dpl_sim_run(s, p, &sim), 0, "%s", dpl_last_error());
	return sim;
}

static char *svg(const dpl_sim *sim, const dpl_schedule *s,
		 const struct dpl_sim_svg_params *p)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	cr_assert_eq(dpl_sim_write_svg(sim, s, f, p), 0, "%s",
		     dpl_last_error());
	fclose(f);
	return buf;
}

/* Occurrences of `needle` in `hay`. */
static size_t count(const char *hay, const char *needle)
{
	size_t n = 0, k = strlen(needle);

	for (const char *p = strstr(hay, needle); p; p = strstr(p + k, needle))
		n++;
	return n;
}

/* The numeric attribute `name` of the tag starting at `tag`. */
static double attr(const char *tag, const char *name)
{
	char key[64];
	const char *end = strchr(tag, '>'), *p;

	snprintf(key, sizeof key, " %s=\"", name);
	p = strstr(tag, key);
	cr_assert(p && end && p < end, "no %s in %.80s", name, tag);
	return strtod(p + strlen(key), NULL);
}

/* The text content of the <text> element right after the rect at `from`
 * (its label). */
static void next_text(const char *from, char *buf, size_t n)
{
	const char *t = strstr(from, "</rect>\n"), *a, *b;

	cr_assert_not_null(t);
	t += 8;
	cr_assert_eq(strncmp(t, "<text class=\"mb\" ", 17), 0,
		     "no label after %.60s", from);
	a = strchr(t, '>') + 1;
	b = strstr(a, "</text>");
	cr_assert(b && (size_t)(b - a) < n);
	memcpy(buf, a, (size_t)(b - a));
	buf[b - a] = '\0';
}

/* Actions of `kind` over every rank's list, as the schedule holds them. */
static size_t actions_of(const dpl_schedule *s, uint32_t kind)
{
	size_t n = 0, len;

	for (uint32_t r = 0; r < dpl_schedule_ranks(s); r++) {
		const struct dpl_action *a = dpl_schedule_actions(s, r, &len);

		for (size_t i = 0; i < len; i++)
			n += a[i].kind == kind;
	}
	return n;
}

/*
 * Well-formedness, as far as this picture needs it: every '<' opens a
 * tag that ends with '>', closing tags match the open one (a stack),
 * everything is closed at the end, no '&' outside an entity, no script.
 */
static void check_well_formed(const char *x)
{
	char stack[64][32];
	int depth = 0, roots = 0;
	const char *p = x;

	cr_assert_eq(strncmp(x, "<?xml ", 6), 0);
	p = strstr(x, "?>") + 2;
	cr_assert_null(strstr(x, "<script"));
	cr_assert_null(strstr(x, "@import"));
	while ((p = strpbrk(p, "<&")) != NULL) {
		const char *end, *name;
		size_t nl;

		if (*p == '&') {
			cr_assert(!strncmp(p, "&amp;", 5) ||
				      !strncmp(p, "&lt;", 4) ||
				      !strncmp(p, "&gt;", 4) ||
				      !strncmp(p, "&quot;", 6) ||
				      !strncmp(p, "&apos;", 6),
				  "bare '&' at %.20s", p);
			p++;
			continue;
		}
		end = strchr(p, '>');
		cr_assert_not_null(end, "unterminated tag at %.40s", p);
		cr_assert_null(memchr(p + 1, '<', (size_t)(end - p - 1)),
			       "'<' inside a tag at %.40s", p);
		name = p[1] == '/' ? p + 2 : p + 1;
		nl = strcspn(name, " />");
		cr_assert(nl > 0 && nl < 32, "bad tag at %.40s", p);
		if (p[1] == '/') {
			cr_assert_gt(depth, 0, "stray %.40s", p);
			depth--;
			cr_assert(strlen(stack[depth]) == nl &&
				      !strncmp(stack[depth], name, nl),
				  "</%.*s> closes <%s>", (int)nl, name,
				  stack[depth]);
		} else if (end[-1] != '/') {
			cr_assert_lt(depth, 64);
			if (depth == 0)
				roots++;
			memcpy(stack[depth], name, nl);
			stack[depth++][nl] = '\0';
		} else if (depth == 0) {
			roots++;
		}
		p = end + 1;
	}
	cr_assert_eq(depth, 0, "<%s> never closed", depth ? stack[depth - 1] : "");
	cr_assert_eq(roots, 1, "%d root elements", roots);
	cr_assert(strstr(x, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
}

/* Sum of the widths of every <rect class="cls" (exactly that class). */
static double width_sum(const char *x, const char *cls, size_t *n)
{
	char key[64];
	double sum = 0;

	snprintf(key, sizeof key, "<rect class=\"%s\"", cls);
	*n = 0;
	for (const char *p = strstr(x, key); p; p = strstr(p + 1, key)) {
		sum += attr(p, "width");
		(*n)++;
	}
	return sum;
}

/* One rect per compute action, per kind, for policies with B and with
 * I/W, compute-only and lowered, one stage or several per rank. */
Test(svg, rects_per_kind_match_the_lists)
{
	static const struct {
		enum dpl_policy p;
		uint32_t chunks;
	} cases[] = {{DPL_POLICY_GPIPE, 0},       {DPL_POLICY_1F1B, 0},
		     {DPL_POLICY_ZB_H1, 0},       {DPL_POLICY_INTERLEAVED, 2},
		     {DPL_POLICY_ZBV, 0},         {DPL_POLICY_INTERLEAVED_ZB, 2}};
	static const char *const cls[] = {"F", "B", "I", "W"};

	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int lower = 0; lower < 2; lower++) {
			dpl_schedule *s = build(4, 8, cases[c].p, cases[c].chunks);
			dpl_sim *sim;
			char *x, key[64];

			if (lower)
				cr_assert_eq(dpl_schedule_lower(s), 0);
			sim = run(s, NULL);
			x = svg(sim, s, NULL);
			check_well_formed(x);
			for (uint32_t k = 0; k < 4; k++) {
				snprintf(key, sizeof key, "<rect class=\"%s\"",
					 cls[k]);
				cr_expect_eq(count(x, key), actions_of(s, k),
					     "%s lower=%d: %zu %s rects for %zu "
					     "actions",
					     dpl_policy_name(cases[c].p), lower,
					     count(x, key), cls[k],
					     actions_of(s, k));
				/* A legend swatch for each kind drawn. */
				snprintf(key, sizeof key, "class=\"key %s\"",
					 cls[k]);
				cr_expect_eq(count(x, key),
					     actions_of(s, k) ? 1u : 0u);
			}
			free(x);
			dpl_sim_destroy(sim);
			dpl_schedule_destroy(s);
		}
}

/* F of cost 1 and B of cost 2: every B twice as wide as every F (two
 * decimals of rounding), and the idle rects add up to the bubble. */
Test(svg, widths_follow_the_costs)
{
	dpl_schedule *s = build(4, 8, DPL_POLICY_1F1B, 0);
	struct dpl_sim_params p = {.uniform = {1, 2, 0, 0}};
	dpl_sim *sim = run(s, &p);
	struct dpl_sim_summary sum;
	char *x = svg(sim, s, NULL);
	double wf = -1, idle;
	size_t nf, nb, ni;

	for (const char *q = strstr(x, "<rect class=\"F\""); q;
	     q = strstr(q + 1, "<rect class=\"F\"")) {
		if (wf < 0)
			wf = attr(q, "width");
		cr_assert_float_eq(attr(q, "width"), wf, 0.011);
	}
	cr_assert_gt(wf, 1);
	for (const char *q = strstr(x, "<rect class=\"B\""); q;
	     q = strstr(q + 1, "<rect class=\"B\""))
		cr_assert_float_eq(attr(q, "width") / wf, 2.0, 0.03 / wf,
				   "B %g vs F %g", attr(q, "width"), wf);
	/* F + B over every rank: the busy time, 3 * 4 * 8 = 96 units out of
	 * R * makespan = 4 * 33, spread over 4 rows of WIDTH pixels. */
	dpl_sim_summary(sim, &sum);
	cr_assert_float_eq(width_sum(x, "F", &nf) + width_sum(x, "B", &nb),
			   96.0 / 33 * WIDTH, 0.005 * 64 + 1e-9);
	idle = width_sum(x, "idle", &ni);
	cr_assert_gt(ni, 0);
	cr_assert_float_eq(idle, sum.bubble_fraction * 4 * WIDTH,
			   0.005 * (double)ni + 1e-9);
	free(x);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

/* The caption's makespan is the simulator's, printed as "%.4f" less its
 * trailing zeros; the bubble as "%.2f%%". */
Test(svg, caption_has_the_simulated_makespan)
{
	static const double costs[][2] = {{1, 2}, {0.7, 1.3}, {1.23456, 2.5}};

	for (size_t c = 0; c < 3; c++) {
		dpl_schedule *s = build(3, 5, DPL_POLICY_1F1B, 0);
		struct dpl_sim_params p = {.uniform = {costs[c][0], costs[c][1],
						       0, 0}};
		dpl_sim *sim = run(s, &p);
		struct dpl_sim_summary sum;
		char *x = svg(sim, s, NULL), want[64], got[64];
		const char *m;
		size_t n;

		dpl_sim_summary(sim, &sum);
		snprintf(want, sizeof want, "%.4f", sum.makespan);
		n = strlen(want);
		while (want[n - 1] == '0')
			want[--n] = '\0';
		if (want[n - 1] == '.')
			want[--n] = '\0';
		m = strstr(x, ">makespan ");
		cr_assert_not_null(m);
		sscanf(m + 10, "%63[^,]", got);
		cr_expect_str_eq(got, want);
		snprintf(want, sizeof want, ", bubble %.2f%%,",
			 100 * sum.bubble_fraction);
		cr_expect(strstr(x, want), "no '%s'", want);
		free(x);
		dpl_sim_destroy(sim);
		dpl_schedule_destroy(s);
	}
}

/* Every rank has its row label once, also with one rank and with more
 * ranks than fit one caption line. */
Test(svg, every_rank_row_present)
{
	static const uint32_t sizes[] = {1, 4, 16};

	for (size_t c = 0; c < 3; c++) {
		uint32_t R = sizes[c];
		dpl_schedule *s = build(R, 2 * R, DPL_POLICY_1F1B, 0);
		dpl_sim *sim = run(s, NULL);
		char *x = svg(sim, s, NULL), key[64];

		check_well_formed(x);
		cr_expect_eq(count(x, "<text class=\"rank\""), R);
		for (uint32_t r = 0; r < R; r++) {
			snprintf(key, sizeof key, "\">rank %u</text>", r);
			cr_expect_eq(count(x, key), 1, "rank %u row", r);
			/* And in the caption's peaks, with the bound the
			 * schedule itself computes (one stage per rank). */
			snprintf(key, sizeof key, " rank %u: %u mb", r,
				 dpl_schedule_bound(s, r));
			cr_expect(strstr(x, key), "no '%s'", key);
		}
		free(x);
		dpl_sim_destroy(sim);
		dpl_schedule_destroy(s);
	}
}

/* Micro-batch numbers inside the rects; "s<stage>:<mb>" when a rank
 * holds several stages. The tooltip names the action. */
Test(svg, labels_name_microbatch_and_stage)
{
	dpl_schedule *s = build(4, 8, DPL_POLICY_1F1B, 0);
	dpl_sim *sim = run(s, NULL);
	struct dpl_sim_svg_params wide = {.width = 4000};
	char *x = svg(sim, s, NULL), want[32], got[32];
	size_t seen = 0;
	unsigned st, mb;

	for (const char *q = strstr(x, "<rect class=\"F\""); q;
	     q = strstr(q + 1, "<rect class=\"F\"")) {
		cr_assert_eq(sscanf(strstr(q, "<title>") + 7, "%uF%u", &st, &mb),
			     2);
		next_text(q, got, sizeof got);
		snprintf(want, sizeof want, "%u", mb);
		cr_expect_str_eq(got, want);
		seen++;
	}
	cr_assert_eq(seen, 32);
	free(x);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);

	/* W of one unit out of 51 needs more than 960 pixels for "s4:5". */
	s = build(4, 8, DPL_POLICY_ZBV, 0);
	sim = run(s, NULL);
	x = svg(sim, s, &wide);
	seen = 0;
	for (const char *q = strstr(x, "<rect class=\"W\""); q;
	     q = strstr(q + 1, "<rect class=\"W\"")) {
		cr_assert_eq(sscanf(strstr(q, "<title>") + 7, "%uW%u", &st, &mb),
			     2);
		next_text(q, got, sizeof got);
		snprintf(want, sizeof want, "s%u:%u", st, mb);
		cr_expect_str_eq(got, want);
		cr_expect_eq(dpl_schedule_stage_rank(s, st),
			     (unsigned)((attr(q, "y") - 12) / 30 + 0.5),
			     "%s drawn on another rank's row", want);
		seen++;
	}
	cr_assert_eq(seen, 64);
	free(x);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

/* Bytes per rank when activation sizes are known, in binary units;
 * none when hidden or unknown. */
Test(svg, peak_bytes_per_rank)
{
	static const uint64_t act[4] = {100, 100, 100, 100};
	static const uint64_t mib[4] = {1 << 20, 1 << 20, 1 << 20, 1 << 20};
	dpl_schedule *s = build(4, 8, DPL_POLICY_1F1B, 0);
	struct dpl_sim_params p = {.activation_bytes = act};
	struct dpl_sim_svg_params sp = {.hide_bytes = 1};
	dpl_sim *sim = run(s, &p);
	char *x = svg(sim, s, NULL);

	cr_expect(strstr(x, " rank 0: 4 mb (400 B), rank 1: 3 mb (300 B), "
			    "rank 2: 2 mb (200 B), rank 3: 1 mb (100 B)<"),
		  "%s", strstr(x, "peak"));
	free(x);
	x = svg(sim, s, &sp);
	cr_expect(strstr(x, " rank 0: 4 mb, rank 1: 3 mb,"));
	cr_expect_null(strstr(x, " B)"));
	free(x);
	dpl_sim_destroy(sim);
	p.activation_bytes = mib;
	sim = run(s, &p);
	x = svg(sim, s, NULL);
	cr_expect(strstr(x, " rank 0: 4 mb (4 MiB), rank 1: 3 mb (3 MiB),"));
	free(x);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

/* Transfers: one line per activation and per gradient crossing ranks. */
Test(svg, transfers_are_lines)
{
	dpl_schedule *s = build(4, 8, DPL_POLICY_1F1B, 0);
	struct dpl_sim_params p = {.link_latency = 0.25};
	struct dpl_sim_svg_params sp = {.transfers = 1};
	dpl_sim *sim = run(s, &p);
	char *x = svg(sim, s, &sp);

	check_well_formed(x);
	cr_expect_eq(count(x, "<line class=\"transfer\""), 2 * 3 * 8);
	cr_expect_eq(count(x, "class=\"key transfer\""), 1);
	free(x);
	x = svg(sim, s, NULL);
	cr_expect_eq(count(x, "class=\"transfer\""), 0);
	free(x);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

/* Lowered lists with a step cost and replicated stages: one STEP rect and
 * one REDUCE_GRAD strip per stage besides the compute rects, and the idle
 * rects still add up to the bubble. */
Test(svg, steps_and_reductions)
{
	static const uint32_t rep[4] = {2, 2, 2, 2};
	static const uint64_t par[4] = {1000, 1000, 1000, 1000};
	dpl_schedule *s = build(4, 8, DPL_POLICY_1F1B, 0);
	struct dpl_sim_params p = {.step_cost = 0.5, .replicas = rep,
				   .param_bytes = par, .ar_bandwidth = 1000};
	struct dpl_sim_summary sum;
	dpl_sim *sim;
	double idle;
	size_t n, ni;
	char *x;

	cr_assert_eq(dpl_schedule_lower(s), 0);
	sim = run(s, &p);
	x = svg(sim, s, NULL);
	check_well_formed(x);
	dpl_sim_summary(sim, &sum);
	cr_expect_eq(count(x, "<rect class=\"STEP\""), actions_of(s, DPL_ACT_STEP));
	cr_expect_eq(count(x, "<rect class=\"REDUCE_GRAD\""),
		     actions_of(s, DPL_ACT_REDUCE_GRAD));
	cr_expect_eq(count(x, "<rect class=\"F\""), 32);
	/* Each STEP lasts 0.5 of the makespan's WIDTH pixels. */
	cr_expect_float_eq(width_sum(x, "STEP", &n) / (double)n,
			   0.5 / sum.makespan * WIDTH, 0.006);
	cr_expect_eq(count(x, "class=\"key STEP\""), 1);
	cr_expect_eq(count(x, "class=\"key REDUCE_GRAD\""), 1);
	idle = width_sum(x, "idle", &ni);
	cr_expect_float_eq(idle, sum.bubble_fraction * 4 * WIDTH,
			   0.005 * (double)ni + 1e-9);
	free(x);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

/* Text from the caller is escaped; the unit follows the makespan. */
Test(svg, title_is_escaped)
{
	dpl_schedule *s = build(2, 2, DPL_POLICY_GPIPE, 0);
	dpl_sim *sim = run(s, NULL);
	struct dpl_sim_svg_params sp = {.title = "a<b & \"c\" 'd'>",
					.time_unit = "ms"};
	char *x = svg(sim, s, &sp);

	check_well_formed(x);
	cr_expect_eq(count(x, "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"),
		     2);
	/* gpipe, S = M = 2, F = 1, B = 2: F0 F1, then B1 B0 on rank 1 from
	 * 3, rank 0's from 5: 9. */
	cr_expect(strstr(x, ">makespan 9 ms, "), "%s", strstr(x, "makespan"));
	free(x);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

/* Same input, same bytes, whatever LC_NUMERIC says. */
Test(svg, deterministic_and_locale_free)
{
	static const char *const comma[] = {"de_DE.UTF-8", "de_DE.utf8",
					    "fr_FR.UTF-8", "ru_RU.UTF-8"};
	dpl_schedule *s = build(4, 8, DPL_POLICY_INTERLEAVED, 2);
	struct dpl_sim_params p = {.uniform = {0.7, 1.3, 0, 0}};
	dpl_sim *sim = run(s, &p);
	char *a = svg(sim, s, NULL), *b = svg(sim, s, NULL);
	size_t k;

	cr_assert_str_eq(a, b);
	free(b);
	for (k = 0; k < 4 && !setlocale(LC_NUMERIC, comma[k]); k++)
		;
	if (k < 4) {
		b = svg(sim, s, NULL);
		setlocale(LC_NUMERIC, "C");
		cr_expect_str_eq(a, b, "output changes under %s", comma[k]);
		free(b);
	} else {
		cr_log_info("no decimal-comma locale installed; locale part "
			    "skipped");
	}
	free(a);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}

static char dir[] = "/tmp/dpl-svg-XXXXXX";

static void mkdir_scratch(void)
{
	scratch_make(dir);
}

static void rm_scratch(void)
{
	scratch_remove(dir);
}

static size_t entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	size_t n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* A file appears whole, the same bytes as the stream; a bad path or a
 * bad parameter names itself and leaves nothing behind. */
Test(svg, save_whole_or_not_at_all, .init = mkdir_scratch,
     .fini = rm_scratch)
{
	dpl_schedule *s = build(4, 8, DPL_POLICY_1F1B, 0), *other;
	dpl_sim *sim = run(s, NULL);
	struct dpl_sim_svg_params bad = {.width = 100};
	char path[256], *want = svg(sim, s, NULL), *got;
	struct stat sb;
	FILE *f;

	snprintf(path, sizeof path, "%s/x.svg", dir);
	cr_assert_eq(dpl_sim_save_svg(sim, s, path, NULL), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq((size_t)sb.st_size, strlen(want));
	got = calloc(1, (size_t)sb.st_size + 1);
	f = fopen(path, "r");
	cr_assert_eq(fread(got, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
	fclose(f);
	cr_expect_str_eq(got, want);
	free(got);
	cr_expect_eq(entries(dir), 1, "temporary file left behind");
	unlink(path);

	cr_expect_eq(dpl_sim_save_svg(sim, s, "/nonexistent/dir/x.svg", NULL),
		     DPL_EIO);
	cr_expect(strstr(dpl_last_error(), "/nonexistent/dir/x.svg"), "%s",
		  dpl_last_error());
	cr_expect_eq(dpl_sim_save_svg(sim, s, path, &bad), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "width"), "%s", dpl_last_error());
	other = build(2, 8, DPL_POLICY_1F1B, 0);
	cr_expect_eq(dpl_sim_save_svg(sim, other, path, NULL), DPL_EINVAL);
	cr_expect_eq(dpl_sim_save_svg(sim, s, "", NULL), DPL_EINVAL);
	cr_expect_eq(entries(dir), 0, "file created on failure");
	cr_expect_neq(stat(path, &sb), 0);
	/* A directory in the way: the rename fails, nothing is left. */
	cr_assert_eq(mkdir(path, 0755), 0);
	cr_expect_eq(dpl_sim_save_svg(sim, s, path, NULL), DPL_EIO);
	cr_expect(strstr(dpl_last_error(), path), "%s", dpl_last_error());
	cr_expect_eq(entries(dir), 1);
	free(want);
	dpl_schedule_destroy(other);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
}
