/*
 * transport_probe_main.c - the transport probe's command line, its tables
 * and JSON/TSV output, and the memcpy reference (the measuring loops are
 * in transport_probe.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dpl/bootstrap.h>
#include <dpl/transport.h>
#include <dpl/transport_load.h>

#include "transport_probe.h"

static void run_memcpy(struct result *res)
{
	size_t s, big = sizes[nsizes - 1];
	unsigned char *a = aligned_alloc(4096, big), *b = aligned_alloc(4096, big);
	unsigned n, i;
	int rep;
	double t;

	if (a == NULL || b == NULL) {
		snprintf(res->err, sizeof res->err, "out of memory");
		res->failed = 1;
		free(a);
		free(b);
		return;
	}
	memset(a, 1, big);
	memset(b, 2, big);
	for (s = 0; s < nsizes; s++) {
		n = stream_msgs(sizes[s]);
		for (rep = 0; rep < O.reps; rep++) {
			t = now_s();
			for (i = 0; i < n; i++) {
				memcpy(b, a, sizes[s]);
				/* keep the copy from being elided */
				__asm__ __volatile__("" : : "r"(b) : "memory");
			}
			res->stream[s][rep] =
				(double)sizes[s] * n / (now_s() - t) / MiB;
		}
	}
	free(a);
	free(b);
}

/* ------------------------------------------------------------------ */

static void report(const struct result *res)
{
	const char *name = O.memcpy_only ? "memcpy" : ops->name;
	FILE *j = NULL, *t = NULL;
	size_t s;

	if (O.json && (j = fopen(O.json, "w")) == NULL)
		fprintf(stderr, "%s: %s\n", O.json, strerror(errno));
	if (O.tsv && (t = fopen(O.tsv, "w")) == NULL)
		fprintf(stderr, "%s: %s\n", O.tsv, strerror(errno));
	printf("%s%s%s: median of %d runs\n", name, O.label ? " " : "",
	       O.label ? O.label : "", O.reps);
	if (O.memcpy_only)
		printf("%10s %14s\n", "bytes", "MiB/s");
	else
		printf("%10s %14s %14s %14s %14s\n", "bytes", "1-way p50 us",
		       "1-way avg us", "pingpong MiB/s", "stream MiB/s");
	if (j)
		fprintf(j, "{\n  \"transport\": \"%s\",\n  \"label\": \"%s\",\n"
			   "  \"reps\": %d,\n  \"window\": %d,\n  \"sizes\": [",
			name, O.label ? O.label : "", O.reps, O.window);
	for (s = 0; s < nsizes; s++) {
		double p50 = median(res->p50_us[s], O.reps);
		double avg = median(res->avg_us[s], O.reps);
		double bw = median(res->stream[s], O.reps);
		double pp = avg > 0 ? (double)sizes[s] / (avg * 1e-6) / MiB : 0;

		if (O.memcpy_only) {
			printf("%10zu %14.1f\n", sizes[s], bw);
			if (t)
				fprintf(t, "memcpy\t%zu\t%.3f\n", sizes[s], bw);
			if (j)
				fprintf(j, "%s\n    {\"bytes\": %zu, \"mib_s\": "
					   "%.1f}",
					s ? "," : "", sizes[s], bw);
			continue;
		}
		printf("%10zu %14.3f %14.3f %14.1f %14.1f\n", sizes[s], p50,
		       avg, pp, bw);
		if (t) {
			fprintf(t, "pingpong\t%zu\t%.4f\t%.4f\t%.3f\n",
				sizes[s], p50, avg, pp);
			fprintf(t, "stream\t%zu\t%.3f\n", sizes[s], bw);
		}
		if (j)
			fprintf(j,
				"%s\n    {\"bytes\": %zu, \"one_way_p50_us\": "
				"%.4f, \"one_way_avg_us\": %.4f, "
				"\"pingpong_mib_s\": %.1f, \"stream_mib_s\": "
				"%.1f}",
				s ? "," : "", sizes[s], p50, avg, pp, bw);
	}
	if (j) {
		fprintf(j, "\n  ]\n}\n");
		fclose(j);
	}
	if (t)
		fclose(t);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: transport_probe --transport NAME|PATH.so [--label TEXT]"
		"\n         [--ranks processes|threads] [--options K=V,...]\n"
		"         [--min BYTES] [--max BYTES | --sizes A,B,...] [--reps N]\n"
		"         [--window N] [--buffers shared|distinct] [--pin]\n"
		"         [--repost before|after] [--mem host|cuda]\n"
		"         [--json FILE] [--tsv FILE]\n"
		"       transport_probe --memcpy [--min BYTES] [--max BYTES] "
		"[--reps N]\n"
		"         [--json FILE] [--tsv FILE]\n");
}

static int parse_size(const char *flag, const char *s, size_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == 0 && end != s) {
		if (*end == 'K' || *end == 'k')
			v <<= 10, end++;
		else if (*end == 'M' || *end == 'm')
			v <<= 20, end++;
	}
	if (errno != 0 || end == s || *end != '\0' || v == 0 ||
	    v > (1ull << 30)) {
		fprintf(stderr, "%s: '%s' is not a size in 1..1G (K and M "
				"suffixes allowed)\n", flag, s);
		return -1;
	}
	*out = (size_t)v;
	return 0;
}

static int parse_int(const char *flag, const char *s, int lo, int hi,
		     int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "%s: '%s' is not an integer in %d..%d\n", flag,
			s, lo, hi);
		return -1;
	}
	*out = (int)v;
	return 0;
}

int main(int argc, char **argv)
{
	struct result *res;
	int i, rc;
	size_t k;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(a, "--memcpy") == 0) {
			O.memcpy_only = true;
			continue;
		}
		if (strcmp(a, "--pin") == 0) {
			O.pin = true;
			continue;
		}
		if (v == NULL) {
			fprintf(stderr, "%s: missing value or unknown option\n",
				a);
			usage(stderr);
			return 2;
		}
		i++;
		if (strcmp(a, "--transport") == 0)
			O.transport = v;
		else if (strcmp(a, "--label") == 0)
			O.label = v;
		else if (strcmp(a, "--options") == 0)
			O.options = v;
		else if (strcmp(a, "--json") == 0)
			O.json = v;
		else if (strcmp(a, "--tsv") == 0)
			O.tsv = v;
		else if (strcmp(a, "--ranks") == 0) {
			if (strcmp(v, "threads") && strcmp(v, "processes")) {
				fprintf(stderr, "--ranks: '%s' is not "
						"processes or threads\n", v);
				return 2;
			}
			O.threads = strcmp(v, "threads") == 0;
		} else if (strcmp(a, "--buffers") == 0) {
			if (strcmp(v, "shared") && strcmp(v, "distinct")) {
				fprintf(stderr, "--buffers: '%s' is not shared "
						"or distinct\n", v);
				return 2;
			}
			O.distinct = strcmp(v, "distinct") == 0;
		} else if (strcmp(a, "--mem") == 0) {
			if (strcmp(v, "host") != 0 && strcmp(v, "cuda") != 0) {
				fprintf(stderr, "--mem: '%s' is not host or "
					"cuda\n", v);
				return 2;
			}
			O.mem = strcmp(v, "cuda") == 0 ? DPL_MEM_CUDA
						       : DPL_MEM_HOST;
		} else if (strcmp(a, "--repost") == 0) {
			if (strcmp(v, "before") && strcmp(v, "after")) {
				fprintf(stderr, "--repost: '%s' is not before "
						"or after\n", v);
				return 2;
			}
			O.repost_first = strcmp(v, "before") == 0;
		} else if (strcmp(a, "--sizes") == 0) {
			O.list = v;
		} else if (strcmp(a, "--min") == 0) {
			if (parse_size(a, v, &O.min))
				return 2;
		} else if (strcmp(a, "--max") == 0) {
			if (parse_size(a, v, &O.max))
				return 2;
		} else if (strcmp(a, "--reps") == 0) {
			if (parse_int(a, v, 1, MAX_REPS, &O.reps))
				return 2;
		} else if (strcmp(a, "--window") == 0) {
			if (parse_int(a, v, 1, 1024, &O.window))
				return 2;
		} else {
			fprintf(stderr, "unknown option %s\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (!O.memcpy_only && O.transport == NULL) {
		fprintf(stderr, "--transport or --memcpy is required\n");
		usage(stderr);
		return 2;
	}
	if (O.min > O.max) {
		fprintf(stderr, "--min %zu is above --max %zu\n", O.min, O.max);
		return 2;
	}
	if (O.list != NULL) {
		char item[32];
		const char *p = O.list, *comma;

		while (*p != '\0') {
			comma = strchr(p, ',');
			k = comma ? (size_t)(comma - p) : strlen(p);
			if (k == 0 || k >= sizeof item || nsizes == MAX_SIZES) {
				fprintf(stderr, "--sizes: '%s' is not a list "
						"of at most %d sizes\n",
					O.list, MAX_SIZES);
				return 2;
			}
			memcpy(item, p, k);
			item[k] = '\0';
			if (parse_size("--sizes", item, &sizes[nsizes]))
				return 2;
			if (nsizes > 0 && sizes[nsizes] <= sizes[nsizes - 1]) {
				fprintf(stderr, "--sizes: '%s' is not "
						"increasing\n", O.list);
				return 2;
			}
			nsizes++;
			p += k + (comma != NULL);
		}
	}
	for (k = 0; O.list == NULL && k < NALL && nsizes < MAX_SIZES; k++)
		if (all_sizes[k] >= O.min && all_sizes[k] <= O.max)
			sizes[nsizes++] = all_sizes[k];
	if (nsizes == 0) {
		fprintf(stderr, "no probe size lies in [%zu, %zu]\n", O.min,
			O.max);
		return 2;
	}
	res = mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (res == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memset(res, 0, sizeof *res);
	if (O.memcpy_only) {
		run_memcpy(res);
	} else {
		rc = dpl_transport_load(O.transport, &ops);
		if (rc) {
			fprintf(stderr, "%s\n", dpl_last_error());
			return 1;
		}
		if (run_transport(res) != 0) {
			fprintf(stderr, "%s%s: %s\n", ops->name,
				O.label ? O.label : "",
				res->err[0] ? res->err : "a rank failed");
			return 1;
		}
	}
	if (res->failed) {
		fprintf(stderr, "%s\n", res->err);
		return 1;
	}
	report(res);
	return 0;
}
