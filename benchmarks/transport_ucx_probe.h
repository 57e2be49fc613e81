/*
 * transport_ucx_probe.h - what the parts of bench_transport_ucx_probe
 * share: the driver's settings and results (transport_ucx_probe.c), the
 * ucx_perftest runs beside them (transport_ucx_probe_perftest.c) and the
 * table and JSON they end in (transport_ucx_probe_report.c).
 */
#ifndef DPL_BENCH_TRANSPORT_UCX_PROBE_H
#define DPL_BENCH_TRANSPORT_UCX_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#define MAX_SIZE_LIMIT ((size_t)64 << 20)
#define NSIZES_MAX 32
#define RUNS_MAX 15
#define WINDOW 16
#define LAT_ITERS 20000
#define LAT_WARMUP 2000

/* The latency sizes: the first NLAT rows of a report. */
#define NLAT 3
extern const size_t probe_lat_sizes[NLAT];

struct opts {
	const char *tls;
	const char *json;
	size_t max_size;
	int runs;
	bool perftest;
};

/* One row: medians over the runs of dpl and of ucx_perftest. */
struct row {
	bool lat;
	size_t len;
	double dpl_a, dpl_b, pt_a, pt_b; /* pt_* < 0: not measured */
};

/* Print "transport_ucx_probe: what: NAME (last error)" and exit(1). */
void probe_die(const char *what, int rc) __attribute__((noreturn));

/* A free TCP port on 127.0.0.1 (dies when none can be bound). */
unsigned probe_pick_port(void);

/*
 * probe_perftest - one ucx_perftest client run (test "tag_lat" or
 * "tag_bw", `len` bytes, `iters` iterations, UCX_TLS=tls, loopback)
 * against a fresh server; its CSV line "iterations,p50_lat,avg_lat,
 * overall_lat,avg_bw,overall_bw,..." goes to v[0..8). Returns 0, or -1
 * when the tool is missing or failed. Blocks for the run (bounded by
 * 50 attempts at 50 ms to reach the server).
 */
int probe_perftest(const char *tls, const char *test, size_t len,
		   int iters, double v[8]);

/*
 * probe_report - print rows[0..nrows) (NLAT latency rows, then the
 * bandwidth rows) as a table with the ratios and write them as JSON to
 * o->json. Returns 0, or 1 when the JSON file cannot be written.
 */
int probe_report(const struct opts *o, const struct row *rows, int nrows);

#endif /* DPL_BENCH_TRANSPORT_UCX_PROBE_H */
