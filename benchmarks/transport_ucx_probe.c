/*
 * transport_ucx_probe.c - what the UCX transport costs over UCX itself.
 *
 * Two local processes (ranks 0 and 1) meet through dpl's TCP rendezvous
 * (dpl/bootstrap.h), open the transport over loopback with it as the
 * out-of-band exchange, and measure, through the dpl transport API only:
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
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dpl/backend.h>
#include <dpl/bootstrap.h>
#include <dpl/transport.h>
#include <dpl/transport_ucx.h>

#include "transport_ucx_probe.h"

static const struct dpl_transport_ops *O = &dpl_transport_ucx;

#define TAG_PING 1
#define TAG_DATA 2
#define TAG_SYNC 3

const size_t probe_lat_sizes[NLAT] = {8, 4096, 65536};

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
	dpl_transport *t;
	unsigned char *req[WINDOW + 2];
	unsigned char *sbuf, *rbuf; /* separate, as ucx_perftest's */
};

static int wait_req(struct rank *r, void *req)
{
	int rc;

	while ((rc = dpl_transport_test(r->t, req)) == DPL_EAGAIN)
		if (dpl_transport_progress(r->t) < 0)
			probe_die("progress", DPL_EIO);
	return rc;
}

/* An 8-byte exchange that lines both ranks up. */
static void sync_ranks(struct rank *r)
{
	uint64_t v = 0;
	void *q = r->req[WINDOW];
	int rc = r->me == 0 ? dpl_transport_isend(r->t, q, 1, TAG_SYNC, &v,
						  sizeof v, DPL_MEM_HOST)
			    : dpl_transport_irecv(r->t, q, 0, TAG_SYNC, &v,
						  sizeof v, DPL_MEM_HOST);

	if (rc != 0 || (rc = wait_req(r, q)) != 0)
		probe_die("sync", rc);
	rc = r->me == 1 ? dpl_transport_isend(r->t, q, 0, TAG_SYNC, &v,
					      sizeof v, DPL_MEM_HOST)
			: dpl_transport_irecv(r->t, q, 1, TAG_SYNC, &v,
					      sizeof v, DPL_MEM_HOST);
	if (rc != 0 || (rc = wait_req(r, q)) != 0)
		probe_die("sync", rc);
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
		rc = dpl_transport_irecv(r->t, rq, peer, TAG_PING, r->rbuf,
					 len, DPL_MEM_HOST);
		if (rc != 0)
			probe_die("irecv", rc);
		if (r->me == 1 && (rc = wait_req(r, rq)) != 0)
			probe_die("ping", rc);
		rc = dpl_transport_isend(r->t, sq, peer, TAG_PING, r->sbuf,
					 len, DPL_MEM_HOST);
		if (rc != 0)
			probe_die("isend", rc);
		if ((rc = wait_req(r, sq)) != 0)
			probe_die("send", rc);
		if (r->me == 1)
			continue;
		if ((rc = wait_req(r, rq)) != 0)
			probe_die("pong", rc);
		t = dpl_clock_ns();
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
	t0 = dpl_clock_ns();
	while (done < iters) {
		while (posted < iters && posted - done < WINDOW) {
			void *q = r->req[posted % WINDOW];

			rc = r->me == 0
				     ? dpl_transport_isend(r->t, q, 1, TAG_DATA,
							   buf, len,
							   DPL_MEM_HOST)
				     : dpl_transport_irecv(r->t, q, 0, TAG_DATA,
							   buf, len,
							   DPL_MEM_HOST);
			if (rc != 0)
				probe_die("stream post", rc);
			posted++;
		}
		rc = dpl_transport_test(r->t, r->req[done % WINDOW]);
		if (rc == DPL_EAGAIN) {
			dpl_transport_progress(r->t);
			continue;
		}
		if (rc != 0)
			probe_die("stream", rc);
		done++;
	}
	sync_ranks(r); /* rank 1 has everything */
	return (double)len * iters / ((double)(dpl_clock_ns() - t0) / 1e9) /
	       (1 << 20);
}

/* A rank: meet the other at `root`, open the transport with that
 * rendezvous as its out-of-band exchange, then run the driver's commands
 * until CMD_QUIT. */
static void rank_main(uint32_t me, const char *root, size_t maxlen,
		      int cmd_fd, int ans_fd)
{
	struct dpl_bootstrap_params bp = {0};
	struct dpl_transport_params p = {0};
	struct dpl_oob oob;
	dpl_bootstrap *b;
	dpl_transport *t;
	struct rank r;
	struct cmd c;
	int i, rc;

	p.rank = me;
	p.world_size = 2;
	/* The ranks sleep while ucx_perftest runs: a long liveness
	 * timeout keeps that from looking like a failure. */
	p.timeout_ms = 600000;
	bp.rank = me;
	bp.world_size = 2;
	bp.root = root;
	bp.timeout_ms = p.timeout_ms;
	if ((rc = dpl_bootstrap_open(&bp, &b)) != 0)
		probe_die("rendezvous", rc);
	dpl_bootstrap_oob(b, &oob);
	p.oob = &oob;
	rc = dpl_transport_open(O, &p, &t);
	dpl_bootstrap_close(b);
	if (rc != 0)
		probe_die("open", rc);
	memset(&r, 0, sizeof r);
	r.me = me;
	r.t = t;
	for (i = 0; i < WINDOW + 2; i++) {
		r.req[i] = aligned_alloc(64, (O->req_size + 63) / 64 * 64);
		if (r.req[i] == NULL)
			probe_die("request storage", DPL_ENOMEM);
	}
	r.sbuf = aligned_alloc(4096, maxlen);
	r.rbuf = aligned_alloc(4096, maxlen);
	if (r.sbuf == NULL || r.rbuf == NULL)
		probe_die("buffers", DPL_ENOMEM);
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
			probe_die("answer", DPL_EIO);
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

	snprintf(root, sizeof root, "127.0.0.1:%u", probe_pick_port());
	if (pipe(afd) != 0)
		probe_die("pipe", DPL_EIO);
	fflush(NULL);
	for (me = 0; me < 2; me++) {
		if (pipe(cfd[me]) != 0)
			probe_die("pipe", DPL_EIO);
		pr->pid[me] = fork();
		if (pr->pid[me] < 0)
			probe_die("fork", DPL_EIO);
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
			probe_die("command", DPL_EIO);
	if (read(pr->ans, &ans, sizeof ans) != (ssize_t)sizeof ans)
		probe_die("rank 0 gave no answer", DPL_EIO);
	return ans;
}

static void pair_stop(struct pair *pr)
{
	int me, status;

	for (me = 0; me < 2; me++) {
		struct cmd c = {CMD_QUIT, 0};

		if (write(pr->cmd[me], &c, sizeof c) != (ssize_t)sizeof c)
			probe_die("command", DPL_EIO);
		close(pr->cmd[me]);
	}
	for (me = 0; me < 2; me++)
		if (waitpid(pr->pid[me], &status, 0) != pr->pid[me] ||
		    !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			probe_die("a rank failed", DPL_EIO);
	close(pr->ans);
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
		if (probe_perftest(o->tls, lat ? "tag_lat" : "tag_bw", len,
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

int main(int argc, char **argv)
{
	static struct row rows[NLAT + NSIZES_MAX];
	struct pair pr;
	struct opts o;
	int i, nrows = 0;
	size_t len;

	parse(argc, argv, &o);
	if (o.tls != NULL)
		setenv("UCX_TLS", o.tls, 1);
	signal(SIGPIPE, SIG_IGN);
	pair_start(&pr, o.max_size < 65536 ? 65536 : o.max_size);
	for (i = 0; i < NLAT; i++)
		measure(&pr, &o, true, probe_lat_sizes[i], &rows[nrows++]);
	for (len = 8; len <= o.max_size; len *= 2)
		measure(&pr, &o, false, len, &rows[nrows++]);
	pair_stop(&pr);
	return probe_report(&o, rows, nrows);
}
