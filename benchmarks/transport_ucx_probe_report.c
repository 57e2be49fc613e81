/*
 * transport_ucx_probe_report.c - the end of the UCX transport probe: the
 * table of dpl's figures beside ucx_perftest's with their ratios, the
 * bandwidth summary, and the same as JSON.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "transport_ucx_probe.h"

/* The bandwidth ratios at >= 64 KiB in one figure. */
struct summary {
	int n;
	double geo, low;
};

static void summarise(const struct row *rows, int nrows, struct summary *s)
{
	double logsum = 0;
	int i;

	s->n = 0;
	s->low = 0;
	for (i = NLAT; i < nrows; i++) {
		double r;

		if (rows[i].len < 65536 || rows[i].pt_a <= 0)
			continue;
		r = rows[i].dpl_a / rows[i].pt_a;
		logsum += log(r);
		if (s->n == 0 || r < s->low)
			s->low = r;
		s->n++;
	}
	s->geo = s->n ? exp(logsum / s->n) : 0;
}

/* The first three fields of /proc/loadavg, or "?". */
static void load_average(char *buf, size_t size)
{
	FILE *f = fopen("/proc/loadavg", "r");
	double a, b, c;

	if (f != NULL && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
		snprintf(buf, size, "%.2f %.2f %.2f", a, b, c);
	else
		snprintf(buf, size, "?");
	if (f != NULL)
		fclose(f);
}

int probe_report(const struct opts *o, const struct row *rows, int nrows)
{
	struct summary sum;
	char load[64];
	FILE *js;
	int i;

	load_average(load, sizeof load);
	printf("UCX transport probe: UCX_TLS=%s UCX_NET_DEVICES=lo, medians "
	       "of %d runs%s\n\n", o->tls ? o->tls : "(default)", o->runs,
	       o->perftest ? ", each beside a ucx_perftest run" : "");
	printf("%-10s %11s %11s %11s %11s %7s\n", "latency", "dpl p50 us",
	       "dpl avg us", "perf p50", "perf avg", "ratio");
	for (i = 0; i < NLAT; i++) {
		const struct row *w = &rows[i];

		printf("%-10zu %11.3f %11.3f", w->len, w->dpl_a, w->dpl_b);
		if (w->pt_a > 0)
			printf(" %11.3f %11.3f %7.2f", w->pt_a, w->pt_b,
			       w->dpl_a / w->pt_a);
		printf("\n");
	}
	printf("\n%-10s %11s %11s %7s\n", "bandwidth", "dpl MiB/s",
	       "perf MiB/s", "ratio");
	for (i = NLAT; i < nrows; i++) {
		const struct row *w = &rows[i];

		printf("%-10zu %11.1f", w->len, w->dpl_a);
		if (w->pt_a > 0)
			printf(" %11.1f %7.2f", w->pt_a, w->dpl_a / w->pt_a);
		printf("\n");
	}
	if (o->perftest && rows[0].pt_a < 0)
		printf("\n(ucx_perftest did not run: install ucx-utils)\n");
	summarise(rows, nrows, &sum);
	if (sum.n > 0)
		printf("\nbandwidth >= 64 KiB over %d sizes: geometric mean "
		       "ratio %.2f, lowest %.2f\n", sum.n, sum.geo, sum.low);
	if (rows[0].pt_a > 0)
		printf("latency 8 B: ratio %.2f\n",
		       rows[0].dpl_a / rows[0].pt_a);
	printf("load average at the end: %s\n", load);

	js = fopen(o->json, "w");
	if (js == NULL) {
		fprintf(stderr, "transport_ucx_probe: cannot write %s: %s\n",
			o->json, strerror(errno));
		return 1;
	}
	fprintf(js, "{\n  \"benchmark\": \"transport_ucx_probe\",\n"
		"  \"ucx_tls\": \"%s\",\n  \"runs\": %d,\n  \"window\": %d,\n"
		"  \"load_average\": \"%s\",\n", o->tls ? o->tls : "", o->runs,
		WINDOW, load);
	if (sum.n > 0)
		fprintf(js, "  \"bw_ratio_geomean_64k_up\": %.4f,\n"
			"  \"bw_ratio_min_64k_up\": %.4f,\n", sum.geo, sum.low);
	fprintf(js, "  \"latency_us\": [\n");
	for (i = 0; i < NLAT; i++) {
		const struct row *w = &rows[i];

		fprintf(js, "    {\"size\": %zu, \"dpl_p50\": %.4f, "
			"\"dpl_avg\": %.4f", w->len, w->dpl_a, w->dpl_b);
		if (w->pt_a > 0)
			fprintf(js, ", \"perftest_p50\": %.4f, "
				"\"perftest_avg\": %.4f, \"ratio_p50\": %.4f",
				w->pt_a, w->pt_b, w->dpl_a / w->pt_a);
		fprintf(js, "}%s\n", i + 1 < NLAT ? "," : "");
	}
	fprintf(js, "  ],\n  \"bandwidth_mib_s\": [\n");
	for (i = NLAT; i < nrows; i++) {
		const struct row *w = &rows[i];

		fprintf(js, "    {\"size\": %zu, \"dpl\": %.2f", w->len,
			w->dpl_a);
		if (w->pt_a > 0)
			fprintf(js, ", \"perftest\": %.2f, \"ratio\": %.4f",
				w->pt_a, w->dpl_a / w->pt_a);
		fprintf(js, "}%s\n", i + 1 < nrows ? "," : "");
	}
	fprintf(js, "  ]\n}\n");
	fclose(js);
	printf("\nwrote %s\n", o->json);
	return 0;
}
