/*
 * transport_ofi_probe.c - ping-pong latency and bandwidth of the libfabric
 * transport through the dpl transport API, side by side with libfabric
 * itself on the same provider.
 *
 * The program forks rank 1 and runs rank 0 itself, both on loopback, each
 * with separate page-aligned send and receive buffers; they meet through
 * dpl's bootstrap, whose exchange the transport's init uses. For
 * each size and round it runs, one after the other:
 *  - dpl: the ping-pong through dpl_transport_ofi and the checked layer
 *    every caller uses (dpl_transport_isend() ...; rank 0 posts its
 *    receive, then its send; rank 1 echoes);
 *  - raw: the same ping-pong written directly against libfabric
 *    (fi_trecv/fi_tsend and fi_cq_read, as fi_pingpong does), on a second
 *    endpoint of the same provider, timed per iteration like dpl's;
 *  - fi_pingpong (with --fi-pingpong): libfabric's own tool, same
 *    provider, size and iteration count (it reports averages only).
 * Odd rounds run raw before dpl: whichever runs second finds the pages
 * and caches of the shared buffers as the first left them (at 16 MiB on
 * shm a fixed order made dpl look 15% slower than raw).
 * While one runs the others are idle: the ranks wait in read(2) on pipes
 * between the steps, so nothing competes for the cores but the machine's
 * other load. Rounds repeat the sweep; the table shows medians over
 * rounds. On a busy machine averages swing with preemption; per-iteration
 * medians (p50) do not, which is why dpl and raw are compared on p50.
 *
 * Units follow fi_pingpong: one-way time per transfer (half the round
 * trip) in microseconds, bandwidth in decimal MB/s (size / one-way time).
 * Ratios: bw_x = dpl MB/s / reference MB/s (target >= 0.9 at >= 64 KiB),
 * lat_x = dpl us / reference us (target <= 1.2 at 8 B), against raw p50
 * and against fi_pingpong's average.
 *
 *   bench_transport_ofi_probe [--provider P] [--options S] [--min B]
 *       [--max B] [--sizes B,B,...] [--iters N] [--rounds R]
 *       [--fi-pingpong] [--json FILE]
 *
 * This file drives the rounds and prints the table;
 * transport_ofi_probe_pingpong.c holds the three ping-pongs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fi_errno.h>

#include "transport_ofi_probe.h"

static const struct dpl_transport_ops *O = &dpl_transport_ofi;

#define MAXSZ 32
#define MAXROUNDS 15

enum { M_DPL = 1, M_RAW = 2, M_QUIT = 3 };

struct cmd {
	uint64_t size;
	long iters;
	int mode;
};

struct cell {
	double dpl_avg, dpl_p50; /* one-way us */
	double raw_avg, raw_p50;
	double fi_us, fi_mbs;    /* < 0 when absent */
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void summarise(const double *rtt, long n, double *avg, double *p50)
{
	double *v = malloc(sizeof *v * (size_t)n), sum = 0;
	long i;

	for (i = 0; i < n; i++)
		sum += rtt[i];
	*avg = sum / (double)n / 2;
	if (v == NULL) {
		*p50 = *avg;
		return;
	}
	memcpy(v, rtt, sizeof *v * (size_t)n);
	*p50 = median(v, (int)n) / 2;
	free(v);
}

/* A send buffer and, one page-rounded size further, a receive buffer:
 * separate buffers, as fi_pingpong and the runner use them (sending from
 * and receiving into the same pages slows shm's single copy down). */
static char *page_buffers(size_t max)
{
	return aligned_alloc(4096, 2 * round_page(max));
}

/* ---- rank 1 --------------------------------------------------------- */

static int child(const struct opts *o, const char *root, int in, int out)
{
	dpl_transport *t = probe_dpl_open(o, 1, root);
	struct raw raw;
	void *sq, *rq;
	char *buf = page_buffers(o->max), ack = 1;
	struct cmd c;
	int rc = 0;

	if (t == NULL || buf == NULL ||
	    probe_raw_setup(&raw, o->provider, in, out))
		return 1;
	memset(buf, 2, 2 * round_page(o->max));
	sq = aligned_alloc(64, (O->req_size + 63) / 64 * 64);
	rq = aligned_alloc(64, (O->req_size + 63) / 64 * 64);
	while (xread(in, &c, sizeof c) == 0 && c.mode != M_QUIT) {
		if (c.mode == M_DPL)
			rc = probe_dpl_pingpong(t, 1, sq, rq, buf,
						buf + round_page(o->max),
						(size_t)c.size, c.iters, NULL);
		else
			rc = probe_raw_pingpong(&raw, 1, buf,
						buf + round_page(o->max),
						(size_t)c.size, c.iters, NULL);
		if (rc != 0) {
			fprintf(stderr, "rank 1 (%s): %d: %s\n",
				c.mode == M_DPL ? "dpl" : "raw", rc,
				c.mode == M_DPL ? dpl_last_error()
						: fi_strerror(-rc));
			break;
		}
		if (xwrite(out, &ack, 1) != 0)
			break;
	}
	probe_raw_close(&raw);
	dpl_transport_close(t);
	free(sq);
	free(rq);
	free(buf);
	return rc != 0;
}

/* ---- main ----------------------------------------------------------- */

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *s == '-')
		return -1;
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	if (*end != '\0')
		return -1;
	*out = v;
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: bench_transport_ofi_probe [--provider tcp;ofi_rxm|shm] "
		"[--options S]\n  [--min B] [--max B] [--sizes B,B,...] "
		"[--iters N] [--rounds R]\n  [--fi-pingpong] [--json FILE]\n"
		"Sizes take K and M suffixes; default 8 B, then powers of 4 "
		"from 64 B to --max.\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
	char *end;
	int i;

	o->provider = "tcp;ofi_rxm";
	o->min = 8;
	o->max = 64u << 20;
	o->iters = 10000;
	o->budget = 256u << 20;
	o->rounds = 3;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--fi-pingpong") == 0) {
			o->fi = true;
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage();
			return 2;
		}
		if (v == NULL) {
			fprintf(stderr, "%s needs a value\n", a);
			return 2;
		}
		i++;
		if (strcmp(a, "--provider") == 0) {
			o->provider = v;
		} else if (strcmp(a, "--options") == 0) {
			o->options = v;
		} else if (strcmp(a, "--json") == 0) {
			o->json = v;
		} else if (strcmp(a, "--sizes") == 0) {
			o->sizes = v;
		} else if (strcmp(a, "--min") == 0 || strcmp(a, "--max") == 0) {
			uint64_t x;

			if (parse_size(v, &x) != 0 || x == 0 ||
			    x > (UINT64_C(1) << 30)) {
				fprintf(stderr, "%s: bad size '%s' (1 .. 1G, "
					"K and M suffixes)\n", a, v);
				return 2;
			}
			*(strcmp(a, "--min") == 0 ? &o->min : &o->max) = x;
		} else if (strcmp(a, "--iters") == 0) {
			o->iters = strtol(v, &end, 10);
			if (*end != '\0' || o->iters < 10 || o->iters > 10000000) {
				fprintf(stderr, "--iters: '%s' not in [10, "
					"10000000]\n", v);
				return 2;
			}
		} else if (strcmp(a, "--rounds") == 0) {
			o->rounds = (int)strtol(v, &end, 10);
			if (*end != '\0' || o->rounds < 1 ||
			    o->rounds > MAXROUNDS) {
				fprintf(stderr, "--rounds: '%s' not in [1, %d]\n",
					v, MAXROUNDS);
				return 2;
			}
		} else {
			fprintf(stderr, "unknown argument '%s'\n", a);
			usage();
			return 2;
		}
	}
	if (o->min > o->max) {
		fprintf(stderr, "--min %llu is above --max %llu\n",
			(unsigned long long)o->min, (unsigned long long)o->max);
		return 2;
	}
	return 0;
}

static double med_of(struct cell (*cell)[MAXSZ], int rounds, int k,
		     size_t field)
{
	double v[MAXROUNDS];
	int r, n = 0;

	for (r = 0; r < rounds; r++) {
		double x = *(const double *)((const char *)&cell[r][k] + field);

		if (x > 0)
			v[n++] = x;
	}
	return n > 0 ? median(v, n) : -1;
}

int main(int argc, char **argv)
{
	struct opts o;
	uint64_t sizes[MAXSZ], s;
	long iters[MAXSZ];
	static struct cell cell[MAXROUNDS][MAXSZ];
	int nsz = 0, r, k, rc, to[2], from[2], st, mode, step;
	char root[64], ack, *buf;
	double *rtt, t0, t_init;
	void *sq, *rq;
	dpl_transport *t;
	struct raw raw;
	pid_t pid;
	FILE *js = NULL;

	memset(&o, 0, sizeof o);
	if ((rc = parse(argc, argv, &o)) != 0)
		return rc;
	if (o.sizes != NULL) {
		/* An explicit list; --max grows to its largest entry. */
		char list[512], *tok, *save = NULL;

		snprintf(list, sizeof list, "%s", o.sizes);
		o.max = 1;
		for (tok = strtok_r(list, ",", &save); tok != NULL && nsz < MAXSZ;
		     tok = strtok_r(NULL, ",", &save)) {
			if (parse_size(tok, &s) != 0 || s > (UINT64_C(1) << 30)) {
				fprintf(stderr, "--sizes: bad size '%s'\n", tok);
				return 2;
			}
			sizes[nsz++] = s;
			if (s > o.max)
				o.max = s;
		}
	} else {
		/* 8 B, then powers of 4 from 64 B, within [min, max]. */
		for (s = 8; s <= o.max && nsz < MAXSZ; s = s == 8 ? 64 : s * 4)
			if (s >= o.min)
				sizes[nsz++] = s;
	}
	for (k = 0; k < nsz; k++) {
		iters[k] = sizes[k] ? (long)(o.budget / sizes[k]) : o.iters;
		if (iters[k] > o.iters)
			iters[k] = o.iters;
		if (iters[k] < 10)
			iters[k] = 10;
	}
	if (nsz == 0) {
		fprintf(stderr, "no size in [--min, --max]\n");
		return 2;
	}
	if (o.json != NULL && (js = fopen(o.json, "w")) == NULL) {
		fprintf(stderr, "cannot write %s: %s\n", o.json,
			strerror(errno));
		return 1;
	}
	snprintf(root, sizeof root, "127.0.0.1:%d", probe_free_port());
	if (pipe(to) != 0 || pipe(from) != 0)
		return 1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(to[1]);
		close(from[0]);
		_exit(child(&o, root, to[0], from[1]));
	}
	close(to[0]);
	close(from[1]);
	t0 = now_us();
	t = probe_dpl_open(&o, 0, root);
	t_init = now_us() - t0;
	buf = page_buffers(o.max);
	rtt = malloc(sizeof *rtt * (size_t)o.iters);
	sq = aligned_alloc(64, (O->req_size + 63) / 64 * 64);
	rq = aligned_alloc(64, (O->req_size + 63) / 64 * 64);
	if (t == NULL || buf == NULL || rtt == NULL || sq == NULL ||
	    rq == NULL ||
	    probe_raw_setup(&raw, o.provider, from[0], to[1]) != 0)
		return 1;
	memset(buf, 1, 2 * round_page(o.max));
	for (r = 0; r < o.rounds; r++)
		for (k = 0; k < nsz; k++) {
			struct cell *e = &cell[r][k];

			/* Odd rounds run raw first: neither side always
			 * finds the caches as the other left them. */
			for (step = 0; step < 2; step++) {
				char *rbuf = buf + round_page(o.max);
				struct cmd c;

				mode = (step == 0) == (r % 2 == 0) ? M_DPL
								   : M_RAW;

				memset(&c, 0, sizeof c);
				c.size = sizes[k];
				c.iters = iters[k];
				c.mode = mode;

				if (xwrite(to[1], &c, sizeof c) != 0)
					return 1;
				if (mode == M_DPL)
					rc = probe_dpl_pingpong(t, 0, sq, rq,
								buf, rbuf,
								sizes[k],
								iters[k], rtt);
				else
					rc = probe_raw_pingpong(&raw, 0, buf,
								rbuf, sizes[k],
								iters[k], rtt);
				if (rc != 0 || xread(from[0], &ack, 1) != 0) {
					fprintf(stderr, "rank 0 (%s), %llu bytes: "
						"%d %s\n",
						mode == M_DPL ? "dpl" : "raw",
						(unsigned long long)sizes[k], rc,
						mode == M_DPL ? dpl_last_error()
							      : fi_strerror(-rc));
					return 1;
				}
				if (mode == M_DPL)
					summarise(rtt, iters[k], &e->dpl_avg,
						  &e->dpl_p50);
				else
					summarise(rtt, iters[k], &e->raw_avg,
						  &e->raw_p50);
			}
			e->fi_us = e->fi_mbs = -1;
			if (o.fi && probe_fi_pingpong(&o, sizes[k], iters[k],
						      &e->fi_us,
						      &e->fi_mbs) != 0)
				fprintf(stderr, "fi_pingpong failed at %llu "
					"bytes\n", (unsigned long long)sizes[k]);
		}
	{
		struct cmd c;

		memset(&c, 0, sizeof c);
		c.mode = M_QUIT;
		(void)xwrite(to[1], &c, sizeof c);
	}
	waitpid(pid, &st, 0);
	probe_raw_close(&raw);
	dpl_transport_close(t);

	printf("dpl ofi ping-pong, provider %s, %d round(s), medians over "
	       "rounds; one-way us, decimal MB/s\n", o.provider, o.rounds);
	printf("init of rank 0 (bootstrap, endpoint, warm-up): %.1f ms\n",
	       t_init / 1e3);
	printf("%9s %6s | %8s %8s %8s | %8s %8s | %8s %8s | %6s %6s | %6s "
	       "%6s\n", "bytes", "iters", "dpl_avg", "dpl_p50", "dpl_MB/s",
	       "raw_avg", "raw_p50", "fi_avg", "fi_MB/s", "bw_raw", "lat_raw",
	       "bw_fi", "lat_fi");
	if (js != NULL)
		fprintf(js, "{\n  \"benchmark\": \"transport_ofi_probe\",\n"
			    "  \"provider\": \"%s\",\n  \"rounds\": %d,\n"
			    "  \"init_ms\": %.1f,\n"
			    "  \"units\": {\"us\": \"one-way microseconds\", "
			    "\"mb_s\": \"decimal MB/s\"},\n"
			    "  \"ratios\": \"bw = dpl MB/s / reference MB/s, lat "
			    "= dpl us / reference us; raw on p50, fi_pingpong "
			    "on averages\",\n  \"sizes\": [\n",
			o.provider, o.rounds, t_init / 1e3);
	for (k = 0; k < nsz; k++) {
		double da = med_of(cell, o.rounds, k,
				   offsetof(struct cell, dpl_avg));
		double dp = med_of(cell, o.rounds, k,
				   offsetof(struct cell, dpl_p50));
		double ra = med_of(cell, o.rounds, k,
				   offsetof(struct cell, raw_avg));
		double rp = med_of(cell, o.rounds, k,
				   offsetof(struct cell, raw_p50));
		double fu = med_of(cell, o.rounds, k,
				   offsetof(struct cell, fi_us));
		double fm = med_of(cell, o.rounds, k,
				   offsetof(struct cell, fi_mbs));
		double sz = (double)sizes[k];

		printf("%9llu %6ld | %8.2f %8.2f %8.1f | %8.2f %8.2f |",
		       (unsigned long long)sizes[k], iters[k], da, dp, sz / dp,
		       ra, rp);
		if (fu > 0)
			printf(" %8.2f %8.1f | %6.2f %6.2f | %6.2f %6.2f\n", fu,
			       fm, rp / dp, dp / rp, (sz / da) / fm, da / fu);
		else
			printf(" %8s %8s | %6.2f %6.2f | %6s %6s\n", "-", "-",
			       rp / dp, dp / rp, "-", "-");
		if (js != NULL) {
			fprintf(js, "    {\"bytes\": %llu, \"iters\": %ld, "
				    "\"dpl_us\": %.3f, \"dpl_us_p50\": %.3f, "
				    "\"raw_us\": %.3f, \"raw_us_p50\": %.3f, "
				    "\"bw_ratio_raw_p50\": %.3f, "
				    "\"lat_ratio_raw_p50\": %.3f",
				(unsigned long long)sizes[k], iters[k], da, dp,
				ra, rp, rp / dp, dp / rp);
			if (fu > 0)
				fprintf(js, ", \"fi_pingpong_us\": %.3f, "
					    "\"fi_pingpong_mb_s\": %.1f, "
					    "\"bw_ratio_fi\": %.3f, "
					    "\"lat_ratio_fi\": %.3f",
					fu, fm, (sz / da) / fm, da / fu);
			fprintf(js, "}%s\n", k + 1 < nsz ? "," : "");
		}
	}
	if (js != NULL) {
		fprintf(js, "  ]\n}\n");
		fclose(js);
	}
	free(buf);
	free(rtt);
	free(sq);
	free(rq);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
