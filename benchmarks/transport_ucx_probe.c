/*
 * transport_ucx_probe.c - what the UCX transport costs over UCX itself.
 *
 * Two local processes (ranks 0 and 1) open the transport over loopback
 * and measure, through the dpl transport API only:
 *  - ping-pong latency, half the round trip like ucx_perftest's tag_lat,
 *    median and mean over LAT_ITERS iterations, for 8 B, 4 KiB, 64 KiB;
 *  - streaming bandwidth from 8 B to 64 MiB: rank 0 keeps WINDOW sends in
 *    flight, rank 1 keeps WINDOW receives posted, and the clock stops at
 *    rank 1's acknowledgement of the last message (MiB/s, 2^20 bytes, as
 *    ucx_perftest's tag_bw reports).
 * A driver process commands both ranks through pipes; between two
 * measurements the ranks sleep in a blocking read. With --perftest the
 * driver runs ucx_perftest (tag_lat, tag_bw, same UCX_TLS, same size)
 * right after each dpl measurement, so both see the same machine, and
 * prints the medians over --runs repetitions and their ratios. Writes
 * JSON.
 *
 *   bench_transport_ucx_probe [--tls LIST] [--runs N] [--perftest]
 *                             [--max-size BYTES] [--json FILE]
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dpl/transport.h>

extern const struct dpl_transport_ops dpl_transport_ucx;

static const struct dpl_transport_ops *O = &dpl_transport_ucx;

#define MAX_SIZE_LIMIT ((size_t)64 << 20)
#define NSIZES_MAX 32
#define RUNS_MAX 15
#define WINDOW 16
#define LAT_ITERS 20000
#define LAT_WARMUP 2000
#define TAG_PING 1
#define TAG_DATA 2
#define TAG_SYNC 3

static const size_t lat_sizes[] = {8, 4096, 65536};
#define NLAT ((int)(sizeof lat_sizes / sizeof lat_sizes[0]))

enum cmd_kind { CMD_QUIT, CMD_LAT, CMD_BW };

struct cmd {
	enum cmd_kind kind;
	size_t len;
};

/* What rank 0 reports for one command. */
struct answer {
	double a; /* latency p50 (us) or bandwidth (MiB/s) */
	double b; /* latency mean (us) */
};

struct opts {
	const char *tls;
	const char *json;
	size_t max_size;
	int runs;
	bool perftest;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "transport_ucx_probe: %s: %s (%s)\n", what,
		dpl_err_name(rc), dpl_last_error());
	exit(1);
}

static unsigned pick_port(void)
{
	struct sockaddr_in a;
	socklen_t al = sizeof a;
	unsigned port;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket", DPL_EIO);
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) != 0)
		die("bind", DPL_EIO);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int bw_iters(size_t len)
{
	size_t n = ((size_t)256 << 20) / (len ? len : 1);

	if (n < 8)
		n = 8;
	if (n > 100000)
		n = 100000;
	return (int)n;
}

/* ---- the ranks --------------------------------------------------------- */

struct rank {
	uint32_t me;
	void *ctx;
	unsigned char *req[WINDOW + 2];
	unsigned char *sbuf, *rbuf; /* separate, as ucx_perftest's */
};

static int wait_req(struct rank *r, void *req)
{
	int rc;

	while ((rc = O->test(r->ctx, req)) == DPL_EAGAIN)
		if (O->progress(r->ctx) < 0)
			die("progress", DPL_EIO);
	return rc;
}

/* An 8-byte exchange that lines both ranks up. */
static void sync_ranks(struct rank *r)
{
	uint64_t v = 0;
	void *q = r->req[WINDOW];
	int rc = r->me == 0 ? O->isend(r->ctx, q, 1, TAG_SYNC, &v, sizeof v,
				       DPL_MEM_HOST)
			    : O->irecv(r->ctx, q, 0, TAG_SYNC, &v, sizeof v,
				       DPL_MEM_HOST);

	if (rc != 0 || (rc = wait_req(r, q)) != 0)
		die("sync", rc);
	rc = r->me == 1 ? O->isend(r->ctx, q, 0, TAG_SYNC, &v, sizeof v,
				   DPL_MEM_HOST)
			: O->irecv(r->ctx, q, 1, TAG_SYNC, &v, sizeof v,
				   DPL_MEM_HOST);
	if (rc != 0 || (rc = wait_req(r, q)) != 0)
		die("sync", rc);
}

/* Ping-pong: rank 0 posts its receive, sends, waits for both; rank 1
 * waits for the ping, then answers. */
static struct answer pingpong(struct rank *r, size_t len)
{
	static double sample[LAT_ITERS];
	void *rq = r->req[WINDOW], *sq = r->req[WINDOW + 1];
	uint32_t peer = 1 - r->me;
	struct answer ans = {0, 0};
	uint64_t t0 = 0, t;
	double sum = 0;
	int i, rc;

	sync_ranks(r);
	for (i = -LAT_WARMUP; i < LAT_ITERS; i++) {
		rc = O->irecv(r->ctx, rq, peer, TAG_PING, r->rbuf, len,
			      DPL_MEM_HOST);
		if (rc != 0)
			die("irecv", rc);
		if (r->me == 1 && (rc = wait_req(r, rq)) != 0)
			die("ping", rc);
		rc = O->isend(r->ctx, sq, peer, TAG_PING, r->sbuf, len,
			      DPL_MEM_HOST);
		if (rc != 0)
			die("isend", rc);
		if ((rc = wait_req(r, sq)) != 0)
			die("send", rc);
		if (r->me == 1)
			continue;
		if ((rc = wait_req(r, rq)) != 0)
			die("pong", rc);
		t = now_ns();
		if (i >= 0) {
			sample[i] = (double)(t - t0) / 2e3;
			sum += sample[i];
		}
		t0 = t;
	}
	if (r->me == 0) {
		ans.b = sum / LAT_ITERS;
		ans.a = median(sample, LAT_ITERS);
	}
	return ans;
}

/* Streaming: WINDOW sends in flight at rank 0, WINDOW receives posted
 * at rank 1; rank 0's clock stops at rank 1's acknowledgement. */
static double stream(struct rank *r, size_t len, int iters)
{
	unsigned char *buf = r->me == 0 ? r->sbuf : r->rbuf;
	int posted = 0, done = 0, rc;
	uint64_t t0;

	sync_ranks(r);
	t0 = now_ns();
	while (done < iters) {
		while (posted < iters && posted - done < WINDOW) {
			void *q = r->req[posted % WINDOW];

			rc = r->me == 0 ? O->isend(r->ctx, q, 1, TAG_DATA, buf,
						   len, DPL_MEM_HOST)
					: O->irecv(r->ctx, q, 0, TAG_DATA, buf,
						   len, DPL_MEM_HOST);
			if (rc != 0)
				die("stream post", rc);
			posted++;
		}
		rc = O->test(r->ctx, r->req[done % WINDOW]);
		if (rc == DPL_EAGAIN) {
			O->progress(r->ctx);
			continue;
		}
		if (rc != 0)
			die("stream", rc);
		done++;
	}
	sync_ranks(r); /* rank 1 has everything */
	return (double)len * iters / ((double)(now_ns() - t0) / 1e9) /
	       (1 << 20);
}

/* A rank: open, then run the driver's commands until CMD_QUIT. */
static void rank_main(uint32_t me, const char *root, size_t maxlen,
		      int cmd_fd, int ans_fd)
{
	struct dpl_transport_params p = {0};
	dpl_transport *t;
	struct rank r;
	struct cmd c;
	int i, rc;

	p.rank = me;
	p.world_size = 2;
	p.bootstrap = root;
	/* The ranks sleep while ucx_perftest runs: a long liveness
	 * timeout keeps that from looking like a failure. */
	p.timeout_ms = 600000;
	if ((rc = dpl_transport_open(O, &p, &t)) != 0)
		die("open", rc);
	memset(&r, 0, sizeof r);
	r.me = me;
	r.ctx = dpl_transport_ctx(t);
	for (i = 0; i < WINDOW + 2; i++) {
		r.req[i] = aligned_alloc(64, (O->req_size + 63) / 64 * 64);
		if (r.req[i] == NULL)
			die("request storage", DPL_ENOMEM);
	}
	r.sbuf = aligned_alloc(4096, maxlen);
	r.rbuf = aligned_alloc(4096, maxlen);
	if (r.sbuf == NULL || r.rbuf == NULL)
		die("buffers", DPL_ENOMEM);
	memset(r.sbuf, 0x2a, maxlen);
	memset(r.rbuf, 0x15, maxlen);
	while (read(cmd_fd, &c, sizeof c) == (ssize_t)sizeof c &&
	       c.kind != CMD_QUIT) {
		struct answer ans = {0, 0};

		if (c.kind == CMD_LAT) {
			ans = pingpong(&r, c.len);
		} else {
			stream(&r, c.len, bw_iters(c.len) / 8 + 1); /* warm */
			ans.a = stream(&r, c.len, bw_iters(c.len));
		}
		if (me == 0 && write(ans_fd, &ans, sizeof ans) !=
				       (ssize_t)sizeof ans)
			die("answer", DPL_EIO);
	}
	dpl_transport_close(t);
	for (i = 0; i < WINDOW + 2; i++)
		free(r.req[i]);
	free(r.sbuf);
	free(r.rbuf);
}

struct pair {
	pid_t pid[2];
	int cmd[2]; /* driver's ends */
	int ans;
};

static void pair_start(struct pair *pr, size_t maxlen)
{
	int cfd[2][2], afd[2];
	char root[32];
	uint32_t me;

	snprintf(root, sizeof root, "127.0.0.1:%u", pick_port());
	if (pipe(afd) != 0)
		die("pipe", DPL_EIO);
	fflush(NULL);
	for (me = 0; me < 2; me++) {
		if (pipe(cfd[me]) != 0)
			die("pipe", DPL_EIO);
		pr->pid[me] = fork();
		if (pr->pid[me] < 0)
			die("fork", DPL_EIO);
		if (pr->pid[me] == 0) {
			close(cfd[me][1]);
			close(afd[0]);
			rank_main(me, root, maxlen, cfd[me][0], afd[1]);
			_exit(0);
		}
		close(cfd[me][0]);
		pr->cmd[me] = cfd[me][1];
	}
	close(afd[1]);
	pr->ans = afd[0];
}

static struct answer pair_run(struct pair *pr, enum cmd_kind kind,
			      size_t len)
{
	struct cmd c = {kind, len};
	struct answer ans;
	int me;

	for (me = 0; me < 2; me++)
		if (write(pr->cmd[me], &c, sizeof c) != (ssize_t)sizeof c)
			die("command", DPL_EIO);
	if (read(pr->ans, &ans, sizeof ans) != (ssize_t)sizeof ans)
		die("rank 0 gave no answer", DPL_EIO);
	return ans;
}

static void pair_stop(struct pair *pr)
{
	int me, status;

	for (me = 0; me < 2; me++) {
		struct cmd c = {CMD_QUIT, 0};

		if (write(pr->cmd[me], &c, sizeof c) != (ssize_t)sizeof c)
			die("command", DPL_EIO);
		close(pr->cmd[me]);
	}
	for (me = 0; me < 2; me++)
		if (waitpid(pr->pid[me], &status, 0) != pr->pid[me] ||
		    !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			die("a rank failed", DPL_EIO);
	close(pr->ans);
}

/* ---- ucx_perftest ------------------------------------------------------ */

static pid_t spawn(char *const argv[], const char *tls, int out_fd)
{
	pid_t pid = fork();

	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(out_fd >= 0 ? out_fd : null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		if (tls != NULL)
			setenv("UCX_TLS", tls, 1);
		setenv("UCX_NET_DEVICES", "lo", 1);
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/*
 * One ucx_perftest client run against a fresh server; its CSV line
 * "iterations,p50_lat,avg_lat,overall_lat,avg_bw,overall_bw,..." goes to
 * v[0..8). Returns 0, or -1 when the tool is missing or failed.
 */
static int perftest(const char *tls, const char *test, size_t len,
		    int iters, double v[8])
{
	char port[16], size[32], n[16], w[16], line[512];
	char *srv[] = {"ucx_perftest", "-p", port, NULL};
	char *cli[] = {"ucx_perftest", "127.0.0.1", "-p", port, "-t",
		       (char *)test, "-s", size, "-n", n, "-w", w, "-f",
		       "-v", NULL};
	int attempt, fds[2], status, got = -1;
	pid_t s, c;

	snprintf(port, sizeof port, "%u", pick_port());
	snprintf(size, sizeof size, "%zu", len);
	snprintf(n, sizeof n, "%d", iters);
	snprintf(w, sizeof w, "%d", iters / 8 + 1);
	s = spawn(srv, tls, -1);
	for (attempt = 0; attempt < 50 && got != 0; attempt++) {
		FILE *f;

		nanosleep(&(struct timespec){0, 50000000}, NULL);
		if (pipe(fds) != 0)
			break;
		c = spawn(cli, tls, fds[1]);
		close(fds[1]);
		f = fdopen(fds[0], "r");
		while (f != NULL && fgets(line, sizeof line, f) != NULL)
			if (sscanf(line, "%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf",
				   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
				   &v[6], &v[7]) == 8)
				got = 0;
		if (f != NULL)
			fclose(f);
		waitpid(c, &status, 0);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
			break; /* not installed */
	}
	kill(s, SIGTERM);
	waitpid(s, &status, 0);
	return got;
}

/* ---- driver ------------------------------------------------------------ */

static void usage(void)
{
	fprintf(stderr, "usage: bench_transport_ucx_probe [--tls LIST] "
		"[--runs N] [--perftest] [--max-size BYTES] [--json FILE]\n");
	exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
	int i;

	o->tls = getenv("UCX_TLS");
	o->json = "transport_ucx_probe.json";
	o->max_size = MAX_SIZE_LIMIT;
	o->runs = 3;
	o->perftest = false;
	for (i = 1; i < argc; i++) {
		char *end;

		if (strcmp(argv[i], "--perftest") == 0) {
			o->perftest = true;
		} else if (i + 1 >= argc) {
			usage();
		} else if (strcmp(argv[i], "--tls") == 0) {
			o->tls = argv[++i];
		} else if (strcmp(argv[i], "--json") == 0) {
			o->json = argv[++i];
		} else if (strcmp(argv[i], "--runs") == 0) {
			long v = strtol(argv[++i], &end, 10);

			if (*end != '\0' || v < 1 || v > RUNS_MAX) {
				fprintf(stderr, "--runs: '%s' is not 1..%d\n",
					argv[i], RUNS_MAX);
				exit(2);
			}
			o->runs = (int)v;
		} else if (strcmp(argv[i], "--max-size") == 0) {
			unsigned long long v = strtoull(argv[++i], &end, 10);

			if (*end != '\0' || v < 8 || v > MAX_SIZE_LIMIT) {
				fprintf(stderr, "--max-size: '%s' is not "
					"8..%zu\n", argv[i], MAX_SIZE_LIMIT);
				exit(2);
			}
			o->max_size = (size_t)v;
		} else {
			usage();
		}
	}
}

/* One row: medians over the runs of dpl and of ucx_perftest. */
struct row {
	bool lat;
	size_t len;
	double dpl_a, dpl_b, pt_a, pt_b; /* pt_* < 0: not measured */
};

static void measure(struct pair *pr, const struct opts *o, bool lat,
		    size_t len, struct row *row)
{
	double da[RUNS_MAX], db[RUNS_MAX], pa[RUNS_MAX], pb[RUNS_MAX], v[8];
	int k, np = 0;

	for (k = 0; k < o->runs; k++) {
		struct answer a = pair_run(pr, lat ? CMD_LAT : CMD_BW, len);

		da[k] = a.a;
		db[k] = a.b;
		if (!o->perftest)
			continue;
		if (perftest(o->tls, lat ? "tag_lat" : "tag_bw", len,
			     lat ? LAT_ITERS : bw_iters(len), v) == 0) {
			pa[np] = lat ? v[1] : v[5];
			pb[np] = v[2];
			np++;
		}
	}
	row->lat = lat;
	row->len = len;
	row->dpl_a = median(da, o->runs);
	row->dpl_b = median(db, o->runs);
	row->pt_a = np ? median(pa, np) : -1;
	row->pt_b = np ? median(pb, np) : -1;
}

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

int main(int argc, char **argv)
{
	static struct row rows[NLAT + NSIZES_MAX];
	struct summary sum;
	char load[64];
	struct pair pr;
	struct opts o;
	int i, nrows = 0;
	size_t len;
	FILE *js;

	parse(argc, argv, &o);
	if (o.tls != NULL)
		setenv("UCX_TLS", o.tls, 1);
	signal(SIGPIPE, SIG_IGN);
	pair_start(&pr, o.max_size < 65536 ? 65536 : o.max_size);
	for (i = 0; i < NLAT; i++)
		measure(&pr, &o, true, lat_sizes[i], &rows[nrows++]);
	for (len = 8; len <= o.max_size; len *= 2)
		measure(&pr, &o, false, len, &rows[nrows++]);
	pair_stop(&pr);
	load_average(load, sizeof load);

	printf("UCX transport probe: UCX_TLS=%s UCX_NET_DEVICES=lo, medians "
	       "of %d runs%s\n\n", o.tls ? o.tls : "(default)", o.runs,
	       o.perftest ? ", each beside a ucx_perftest run" : "");
	printf("%-10s %11s %11s %11s %11s %7s\n", "latency", "dpl p50 us",
	       "dpl avg us", "perf p50", "perf avg", "ratio");
	for (i = 0; i < NLAT; i++) {
		struct row *w = &rows[i];

		printf("%-10zu %11.3f %11.3f", w->len, w->dpl_a, w->dpl_b);
		if (w->pt_a > 0)
			printf(" %11.3f %11.3f %7.2f", w->pt_a, w->pt_b,
			       w->dpl_a / w->pt_a);
		printf("\n");
	}
	printf("\n%-10s %11s %11s %7s\n", "bandwidth", "dpl MiB/s",
	       "perf MiB/s", "ratio");
	for (i = NLAT; i < nrows; i++) {
		struct row *w = &rows[i];

		printf("%-10zu %11.1f", w->len, w->dpl_a);
		if (w->pt_a > 0)
			printf(" %11.1f %7.2f", w->pt_a, w->dpl_a / w->pt_a);
		printf("\n");
	}
	if (o.perftest && rows[0].pt_a < 0)
		printf("\n(ucx_perftest did not run: install ucx-utils)\n");
	summarise(rows, nrows, &sum);
	if (sum.n > 0)
		printf("\nbandwidth >= 64 KiB over %d sizes: geometric mean "
		       "ratio %.2f, lowest %.2f\n", sum.n, sum.geo, sum.low);
	if (rows[0].pt_a > 0)
		printf("latency 8 B: ratio %.2f\n", rows[0].dpl_a / rows[0].pt_a);
	printf("load average at the end: %s\n", load);

	js = fopen(o.json, "w");
	if (js == NULL) {
		fprintf(stderr, "transport_ucx_probe: cannot write %s: %s\n",
			o.json, strerror(errno));
		return 1;
	}
	fprintf(js, "{\n  \"benchmark\": \"transport_ucx_probe\",\n"
		"  \"ucx_tls\": \"%s\",\n  \"runs\": %d,\n  \"window\": %d,\n"
		"  \"load_average\": \"%s\",\n", o.tls ? o.tls : "", o.runs,
		WINDOW, load);
	if (sum.n > 0)
		fprintf(js, "  \"bw_ratio_geomean_64k_up\": %.4f,\n"
			"  \"bw_ratio_min_64k_up\": %.4f,\n", sum.geo, sum.low);
	fprintf(js, "  \"latency_us\": [\n");
	for (i = 0; i < NLAT; i++) {
		struct row *w = &rows[i];

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
		struct row *w = &rows[i];

		fprintf(js, "    {\"size\": %zu, \"dpl\": %.2f", w->len,
			w->dpl_a);
		if (w->pt_a > 0)
			fprintf(js, ", \"perftest\": %.2f, \"ratio\": %.4f",
				w->pt_a, w->dpl_a / w->pt_a);
		fprintf(js, "}%s\n", i + 1 < nrows ? "," : "");
	}
	fprintf(js, "  ]\n}\n");
	fclose(js);
	printf("\nwrote %s\n", o.json);
	return 0;
}
