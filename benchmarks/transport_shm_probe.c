/*
 * transport_shm_probe.c - how fast is the shared-memory transport on this
 * host? Two forked ranks meet on 127.0.0.1 and measure, through the
 * public transport API only:
 *
 *  - ping-pong: one-way latency (half the round trip, as ucx_perftest's
 *    tag_lat prints it): the median over round trips (ucx_perftest's
 *    "50.0%ile"; up to 4 KiB over batches of 64 round trips, so that the
 *    clock is not in it) and the mean, and the bandwidth the median
 *    gives;
 *  - streaming: a window of sends in flight, as ucx_perftest's tag_bw,
 *    in MiB/s (2^20 bytes): overall (bytes over the whole run, as
 *    tag_bw's "overall") and from the median window;
 *  - memcpy of the same sizes in one process, for scale.
 *
 * Every figure is the median of --reps runs. Prints a table and writes
 * JSON (--json FILE, default transport_shm_probe.json).
 *
 * usage: bench_transport_shm_probe [--reps N] [--opts "ring=...,..."]
 *                                  [--json FILE] [--quick]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dpl/bootstrap.h>
#include <dpl/transport.h>
#include <dpl/transport_shm.h>

#include "bench.h"

#define MAX_SIZES 16
#define MAX_REPS 15
#define WINDOW 32
#define MiB (1024.0 * 1024.0)

static const size_t lat_sizes[] = {8, 64, 4096, 65536, 1 << 20};
static const size_t bw_sizes[] = {8192, 65536, 1 << 20, 16 << 20};
#define NLAT (sizeof lat_sizes / sizeof lat_sizes[0])
#define NBW (sizeof bw_sizes / sizeof bw_sizes[0])

struct shared {
	double lat_us[MAX_SIZES][MAX_REPS];  /* half round trip, median */
	double lat_avg[MAX_SIZES][MAX_REPS]; /* half round trip, mean */
	double bw_mib[MAX_SIZES][MAX_REPS];  /* streaming, overall */
	double bw_p50[MAX_SIZES][MAX_REPS];  /* streaming, median window */
	int rc;
	char msg[256];
};

static int reps = 5;
static bool quick;
static const char *opts;
static char root[64];
static struct shared *S;

static double now_s(void)
{
	return bench_seconds(CLOCK_MONOTONIC);
}

/* Median of v[0..n), left as it is. */
static double median(const double *v, int n)
{
	double t[MAX_REPS];

	memcpy(t, v, (size_t)n * sizeof *v);
	return bench_median(t, (size_t)n);
}

static int pick_port(void)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0)
		return -1;
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/* Busy-poll one request to completion (the probe measures the path). */
static int finish(dpl_transport *t, void *req)
{
	int st;

	while ((st = dpl_transport_test(t, req)) == DPL_EAGAIN)
		if (dpl_transport_progress(t) < 0)
			return dpl_transport_test(t, req);
	return st;
}

static size_t iters_for(size_t bytes)
{
	size_t n = bytes <= 4096 ? 20000 : bytes <= 65536 ? 5000
		   : bytes <= (1 << 20) ? 500 : 40;

	return quick ? n / 10 + 1 : n;
}

static int pingpong(dpl_transport *t, int rank, void *req,
		    unsigned char *buf, size_t n, double *rtt, double *us,
		    double *avg)
{
	/* Small messages are timed in batches of round trips, so that
	 * reading the clock does not count. */
	size_t batch = n <= 4096 ? 64 : 1;
	size_t it, warm = iters_for(n) / 10 + 1, total = iters_for(n) + warm;
	size_t samples = 0;
	uint32_t peer = (uint32_t)(1 - rank);
	double t0 = 0, tb = 0;
	int rc;

	total = warm + (total - warm) / batch * batch;
	for (it = 0; it < total; it++) {
		if (it == warm)
			t0 = tb = now_s();
		if (it > warm && (it - warm) % batch == 0) {
			double x = now_s();

			rtt[samples++] = (x - tb) / (double)batch;
			tb = x;
		}
		if (rank == 0) {
			if ((rc = dpl_transport_isend(t, req, peer, 1, buf, n,
						      0)) ||
			    (rc = finish(t, req)) ||
			    (rc = dpl_transport_irecv(t, req, peer, 2, buf, n,
						      0)) ||
			    (rc = finish(t, req)))
				return rc;
		} else {
			if ((rc = dpl_transport_irecv(t, req, peer, 1, buf, n,
						      0)) ||
			    (rc = finish(t, req)) ||
			    (rc = dpl_transport_isend(t, req, peer, 2, buf, n,
						      0)) ||
			    (rc = finish(t, req)))
				return rc;
		}
	}
	rtt[samples++] = (now_s() - tb) / (double)batch;
	*avg = (now_s() - t0) / (double)(total - warm) / 2 * 1e6;
	*us = bench_median(rtt, samples) / 2 * 1e6;
	return 0;
}

static int stream(dpl_transport *t, int rank, unsigned char *reqs,
		  size_t stride, unsigned char *buf, size_t n, double *win,
		  double *mib, double *p50)
{
	size_t it, w, iters = iters_for(n) / WINDOW + 2;
	uint32_t peer = (uint32_t)(1 - rank);
	double t0 = now_s(), tw = t0;
	char ack = 0;
	int rc;

	for (it = 0; it < iters; it++) {
		double x = now_s();

		if (it > 0)
			win[it - 1] = x - tw;
		tw = x;
		for (w = 0; w < WINDOW; w++) {
			void *r = reqs + w * stride;

			do {
				rc = rank == 0
					     ? dpl_transport_isend(t, r, peer,
								   3, buf, n,
								   0)
					     : dpl_transport_irecv(t, r, peer,
								   3, buf, n,
								   0);
				if (rc == DPL_EAGAIN)
					dpl_transport_progress(t);
			} while (rc == DPL_EAGAIN);
			if (rc != 0)
				return rc;
		}
		for (w = 0; w < WINDOW; w++)
			if ((rc = finish(t, reqs + w * stride)) != 0)
				return rc;
	}
	/* The receiver's acknowledgement closes the clock. */
	if (rank == 0)
		rc = dpl_transport_irecv(t, reqs, peer, 4, &ack, 1, 0);
	else
		rc = dpl_transport_isend(t, reqs, peer, 4, &ack, 1, 0);
	if (rc == 0)
		rc = finish(t, reqs);
	*mib = (double)(iters * WINDOW) * (double)n / (now_s() - t0) / MiB;
	*p50 = (double)WINDOW * (double)n /
	       bench_median(win, iters - 1) / MiB;
	return rc;
}

static void rank_main(int rank)
{
	const struct dpl_transport_ops *o = &dpl_transport_shm;
	struct dpl_bootstrap_params bp = {(uint32_t)rank, 2, root, 30000};
	struct dpl_transport_params p = {(uint32_t)rank, 2, NULL, NULL, opts,
					 30000, 0};
	size_t stride = (o->req_size + 63) / 64 * 64, k;
	unsigned char *reqs = calloc(WINDOW, stride);
	unsigned char *buf = malloc(16 << 20);
	double *times = malloc(40000 * sizeof *times);
	dpl_bootstrap *b = NULL;
	dpl_transport *t = NULL;
	struct dpl_oob oob;
	int rc, r;

	if (reqs == NULL || buf == NULL || times == NULL) {
		S->rc = DPL_ENOMEM;
		return;
	}
	memset(buf, rank + 1, 16 << 20);
	rc = dpl_bootstrap_open(&bp, &b);
	if (rc == 0) {
		dpl_bootstrap_oob(b, &oob);
		p.oob = &oob;
		rc = dpl_transport_open(o, &p, &t);
		dpl_bootstrap_close(b);
	}
	if (rc != 0) {
		S->rc = rc;
		snprintf(S->msg, sizeof S->msg, "rank %d: %s", rank,
			 dpl_last_error());
		return;
	}
	for (r = 0; r < reps && rc == 0; r++) {
		for (k = 0; k < NLAT && rc == 0; k++) {
			double us = 0, avg = 0;

			rc = pingpong(t, rank, reqs, buf, lat_sizes[k], times,
				      &us, &avg);
			if (rank == 0) {
				S->lat_us[k][r] = us;
				S->lat_avg[k][r] = avg;
			}
		}
		for (k = 0; k < NBW && rc == 0; k++) {
			double mib = 0, p50 = 0;

			rc = stream(t, rank, reqs, stride, buf, bw_sizes[k],
				    times, &mib, &p50);
			if (rank == 0) {
				S->bw_mib[k][r] = mib;
				S->bw_p50[k][r] = p50;
			}
		}
	}
	if (rc != 0) {
		S->rc = rc;
		snprintf(S->msg, sizeof S->msg, "rank %d: %s (%s)", rank,
			 dpl_strerror(rc), dpl_last_error());
	}
	dpl_transport_close(t);
	free(reqs);
	free(buf);
	free(times);
}

static double memcpy_mib(size_t n)
{
	unsigned char *a = malloc(n), *b = malloc(n);
	double v[MAX_REPS], t0;
	size_t it, iters = iters_for(n);
	int r;

	if (a == NULL || b == NULL)
		exit(1);
	memset(a, 1, n);
	memset(b, 2, n);
	for (r = 0; r < reps; r++) {
		t0 = now_s();
		for (it = 0; it < iters; it++) {
			memcpy(b, a, n);
			/* The copy must happen: b escapes. */
			__asm__ __volatile__("" : : "r"(b) : "memory");
		}
		v[r] = (double)n * (double)iters / (now_s() - t0) / MiB;
	}
	free(a);
	free(b);
	return median(v, reps);
}

static void usage(const char *me)
{
	fprintf(stderr, "usage: %s [--reps N] [--opts \"ring=..,eager=..\"] "
		"[--json FILE] [--quick]\n", me);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *json = "transport_shm_probe.json";
	pid_t pid[2];
	FILE *f;
	size_t k;
	int i, st, port;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
			char *end;
			long v = strtol(argv[++i], &end, 10);

			if (*end != '\0' || v < 1 || v > MAX_REPS) {
				fprintf(stderr, "--reps: '%s' is not 1..%d\n",
					argv[i], MAX_REPS);
				return 2;
			}
			reps = (int)v;
		} else if (strcmp(argv[i], "--opts") == 0 && i + 1 < argc) {
			opts = argv[++i];
		} else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
			json = argv[++i];
		} else if (strcmp(argv[i], "--quick") == 0) {
			quick = true;
		} else {
			usage(argv[0]);
		}
	}
	S = mmap(NULL, sizeof *S, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	port = pick_port();
	if (S == MAP_FAILED || port < 0) {
		perror("setup");
		return 1;
	}
	memset(S, 0, sizeof *S);
	snprintf(root, sizeof root, "127.0.0.1:%d", port);
	for (i = 0; i < 2; i++) {
		pid[i] = fork();
		if (pid[i] == 0) {
			rank_main(i);
			_exit(S->rc != 0);
		}
	}
	for (i = 0; i < 2; i++)
		waitpid(pid[i], &st, 0);
	if (S->rc != 0) {
		fprintf(stderr, "transport_shm_probe: %s\n", S->msg);
		return 1;
	}

	printf("shm transport, 2 ranks on one host, options \"%s\", median "
	       "of %d\n\n", opts ? opts : "", reps);
	printf("%-10s %14s %14s %16s\n", "ping-pong", "one-way p50 us",
	       "one-way avg us", "p50 MiB/s");
	for (k = 0; k < NLAT; k++) {
		double us = median(S->lat_us[k], reps);

		printf("%-10zu %14.2f %14.2f %16.0f\n", lat_sizes[k], us,
		       median(S->lat_avg[k], reps),
		       (double)lat_sizes[k] / (us * 1e-6) / MiB);
	}
	printf("\n%-10s %14s %14s %14s %8s\n", "streaming", "overall MiB/s",
	       "p50 MiB/s", "memcpy MiB/s", "p50/memcpy");
	f = fopen(json, "w");
	if (f == NULL) {
		perror(json);
		return 1;
	}
	fprintf(f, "{\n  \"transport\": \"shm\",\n  \"options\": \"%s\",\n"
		"  \"reps\": %d,\n  \"window\": %d,\n  \"pingpong\": [",
		opts ? opts : "", reps, WINDOW);
	for (k = 0; k < NLAT; k++) {
		double us = median(S->lat_us[k], reps);

		fprintf(f, "%s\n    {\"bytes\": %zu, \"one_way_p50_us\": %.3f, "
			"\"one_way_avg_us\": %.3f, \"p50_mib_s\": %.1f}",
			k ? "," : "", lat_sizes[k], us,
			median(S->lat_avg[k], reps),
			(double)lat_sizes[k] / (us * 1e-6) / MiB);
	}
	fprintf(f, "\n  ],\n  \"streaming\": [");
	for (k = 0; k < NBW; k++) {
		double bw = median(S->bw_mib[k], reps);
		double p50 = median(S->bw_p50[k], reps);
		double mc = memcpy_mib(bw_sizes[k]);

		printf("%-10zu %14.0f %14.0f %14.0f %8.2f\n", bw_sizes[k], bw,
		       p50, mc, p50 / mc);
		fprintf(f, "%s\n    {\"bytes\": %zu, \"overall_mib_s\": %.1f,"
			" \"p50_mib_s\": %.1f, \"memcpy_mib_s\": %.1f}",
			k ? "," : "", bw_sizes[k], bw, p50, mc);
	}
	fprintf(f, "\n  ]\n}\n");
	fclose(f);
	printf("\nwrote %s\n", json);
	return 0;
}
