/*
 * transport_probe.c - ping-pong latency and streaming bandwidth of any
 * dpl transport module, measured through the public transport contract
 * only (the module is loaded with dpl_transport_load), so every module is
 * timed by the same loop; and, with --memcpy, the memcpy bandwidth of the
 * same sizes for scale.
 *
 *  - ping-pong: rank 0 sends, rank 1 answers with the same size; each
 *    rank posts its next receive as soon as the last one completed and
 *    before it sends (--repost before, as fi_pingpong does), or right
 *    after it posted its send (--repost after, the default, as
 *    ucx_perftest's tag_lat does: the post is then off the critical
 *    path); the
 *    one-way latency is half a round trip, reported as the median over
 *    the round trips (ucx_perftest's tag_lat "50.0%ile") and as the mean,
 *    and the ping-pong bandwidth is size / mean one-way time (what
 *    fi_pingpong reports, there in decimal MB/s);
 *  - streaming: rank 0 keeps --window sends in flight (fewer for large
 *    messages, at most 256 MiB of them), rank 1 keeps as many receives
 *    posted (ucx_perftest's tag_bw), then acknowledges the last one;
 *    bandwidth is bytes over the whole run. As in ucx_perftest, the sends
 *    share one buffer and the receives another (cache-warm); with
 *    --buffers distinct every request in flight has its own (cold).
 * With --pin rank r runs on the r-th CPU the process may use
 * (transport.sh pins the native tools' two sides the same way).
 * Bandwidths are MiB/s (2^20 bytes per second). Every figure is the
 * median of --reps runs. Two ranks run as forked processes meeting on
 * 127.0.0.1 (or as threads for an in-process module: --ranks threads).
 *
 * usage: transport_probe --transport NAME|PATH.so [--label TEXT]
 *          [--ranks processes|threads] [--options K=V,...]
 *          [--min BYTES] [--max BYTES | --sizes LIST] [--reps N]
 *          [--window N] [--buffers shared|distinct] [--pin]
 *          [--repost before|after] [--json FILE] [--tsv FILE]
 *        transport_probe --memcpy [--min] [--max] [--reps] [--json] [--tsv]
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

#include "loopback_port.h"
#include "transport_probe.h"

const size_t all_sizes[NALL] = {
	8,         64,        512,        4096,        16384,
	65536,     262144,    1u << 20,   4u << 20,    16u << 20,
	64u << 20};



struct opts O = {
	.label = NULL, .min = 8, .max = 64u << 20, .reps = 5, .window = 32};
const struct dpl_transport_ops *ops;
size_t sizes[MAX_SIZES];
size_t nsizes;
char boot[128];

double now_s(void)
{
	return (double)dpl_clock_ns() * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median of v[0..n); v is left as it was. */
double median(const double *v, int n)
{
	double *t = malloc((size_t)n * sizeof *t), m;

	if (t == NULL || n <= 0) {
		free(t);
		return 0;
	}
	memcpy(t, v, (size_t)n * sizeof *t);
	qsort(t, (size_t)n, sizeof t[0], cmp_double);
	m = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
	free(t);
	return m;
}

/* Round trips per run: 64 MiB of traffic, at least 200 (as many as
 * transport.sh gives fi_pingpong and ucx_perftest at 16 MiB). */
static unsigned pingpong_iters(size_t size)
{
	size_t n = (size_t)(64u << 20) / size;

	return (unsigned)(n < 200 ? 200 : n > 10000 ? 10000 : n);
}

unsigned stream_msgs(size_t size)
{
	size_t n = (size_t)(256u << 20) / size;

	return (unsigned)(n < 64 ? 64 : n > 20000 ? 20000 : n);
}

/* ------------------------------------------------------------------ */

struct rank {
	uint32_t me;
	dpl_transport *t;
	unsigned char *req;
	size_t stride;
	struct result *res;
};

static void *R(struct rank *r, size_t i)
{
	return r->req + r->stride * i;
}

static int fail(struct rank *r, const char *what, int rc)
{
	if (!r->res->failed) {
		snprintf(r->res->err, sizeof r->res->err,
			 "rank %u: %s: %s (%s)", r->me, what, dpl_err_name(rc),
			 dpl_last_error());
		r->res->failed = 1;
	}
	return rc;
}

/* A rank that has spun for a while lets others run now and then: the
 * machine may have more runnable threads than cores. Short waits (small
 * messages) never yield. */
static void spin_turn(unsigned *n)
{
	if (++*n > 256 && (*n & 15) == 0)
		sched_yield();
}

static int wait_req(struct rank *r, void *req, const char *what)
{
	unsigned n = 0;
	int rc;

	while ((rc = dpl_transport_test(r->t, req)) == DPL_EAGAIN) {
		rc = dpl_transport_progress(r->t);
		if (rc < 0)
			return fail(r, "progress", rc);
		if (r->res->failed)
			return DPL_ECANCELED;
		spin_turn(&n);
	}
	return rc ? fail(r, what, rc) : 0;
}

static int post(struct rank *r, bool send, void *req, uint64_t tag,
		void *buf, size_t len)
{
	unsigned n = 0;
	int rc;

	for (;;) {
		rc = send ? dpl_transport_isend(r->t, req, 1 - r->me, tag, buf, len,
				       O.mem)
			  : dpl_transport_irecv(r->t, req, 1 - r->me, tag, buf, len,
				       O.mem);
		if (rc != DPL_EAGAIN)
			return rc ? fail(r, send ? "isend" : "irecv", rc) : 0;
		if ((rc = dpl_transport_progress(r->t)) < 0)
			return fail(r, "progress", rc);
		spin_turn(&n);
	}
}

/* Receives land in buf, sends leave from buf + size. With --repost
 * before, each rank posts its next receive as soon as the last one
 * completed, before its send (every receive is posted before its message
 * leaves); with --repost after, right after posting its send (rank 0's
 * receive for the pong may then come second). Receives alternate between
 * requests 0 and 2; request 1 is the send. */
static int pingpong(struct rank *r, size_t size, unsigned n,
		    unsigned char *buf, double *rt)
{
	unsigned i;
	double t;

	if (n > 0 && (O.repost_first || r->me == 1) &&
	    post(r, false, R(r, 0), 1, buf, size))
		return -1;
	for (i = 0; i < n; i++) {
		void *cur = R(r, i % 2 ? 2 : 0), *next = R(r, i % 2 ? 0 : 2);

		t = now_s();
		if (r->me == 1) {
			if (wait_req(r, cur, "ping"))
				return -1;
			if (O.repost_first && i + 1 < n &&
			    post(r, false, next, 1, buf, size))
				return -1;
		}
		if (post(r, true, R(r, 1), 1, buf + size, size))
			return -1;
		if (r->me == 1 && !O.repost_first && i + 1 < n &&
		    post(r, false, next, 1, buf, size))
			return -1;
		if (r->me == 0) {
			if (!O.repost_first &&
			    post(r, false, cur, 1, buf, size))
				return -1;
			if (wait_req(r, cur, "pong"))
				return -1;
			if (O.repost_first && i + 1 < n &&
			    post(r, false, next, 1, buf, size))
				return -1;
		}
		if (wait_req(r, R(r, 1), "send"))
			return -1;
		if (rt != NULL)
			rt[i] = now_s() - t;
	}
	return 0;
}

/* Requests in flight while streaming `size`-byte messages: --window,
 * fewer for large messages so that the buffers stay within 256 MiB. */
static unsigned window_for(size_t size)
{
	size_t w = (size_t)(256u << 20) / size;

	if (w < 2)
		w = 2;
	return (unsigned)(w < (size_t)O.window ? w : (size_t)O.window);
}

/* Buffer of in-flight slot k: one for all sends and one for all
 * receives, or one per slot with --buffers distinct. */
static unsigned char *slot_buf(unsigned char *buf, size_t size, unsigned k)
{
	return O.distinct ? buf + (size_t)k * size : buf;
}

static int stream(struct rank *r, size_t size, unsigned m, unsigned w,
		  unsigned char *buf, double *secs)
{
	unsigned i, k;
	uint64_t ack = 0;
	double t = now_s();

	if (r->me == 1) {
		for (k = 0; k < w && k < m; k++)
			if (post(r, false, R(r, k), 2, slot_buf(buf, size, k),
				 size))
				return -1;
		for (i = 0; i < m; i++) {
			k = i % w;
			if (wait_req(r, R(r, k), "stream receive"))
				return -1;
			if (i + w < m &&
			    post(r, false, R(r, k), 2, slot_buf(buf, size, k),
				 size))
				return -1;
		}
		if (post(r, true, R(r, w), 3, &ack, 8) ||
		    wait_req(r, R(r, w), "ack"))
			return -1;
		return 0;
	}
	if (post(r, false, R(r, w), 3, &ack, 8))
		return -1;
	for (i = 0; i < m; i++) {
		k = i % w;
		if (i >= w && wait_req(r, R(r, k), "stream send"))
			return -1;
		if (post(r, true, R(r, k), 2, slot_buf(buf, size, k), size))
			return -1;
	}
	for (i = m > w ? m - w : 0; i < m; i++)
		if (wait_req(r, R(r, i % w), "stream send"))
			return -1;
	if (wait_req(r, R(r, w), "ack"))
		return -1;
	*secs = now_s() - t;
	return 0;
}

static int barrier(struct rank *r)
{
	uint64_t in = 0, out = 0;

	if (post(r, false, R(r, 0), 4, &in, 8) ||
	    post(r, true, R(r, 1), 4, &out, 8))
		return -1;
	return wait_req(r, R(r, 0), "barrier") || wait_req(r, R(r, 1), "barrier")
		       ? -1
		       : 0;
}

/* --pin: this rank (process or thread) on CPU `me` of the CPUs it may
 * use, so that where the scheduler puts the two ranks does not decide a
 * run (cache sharing moves large copies by up to 2x). */
static void pin(uint32_t me)
{
	cpu_set_t set, one;
	uint32_t k = 0;
	int c;

	if (!O.pin || sched_getaffinity(0, sizeof set, &set) != 0)
		return;
	for (c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &set))
			continue;
		if (k++ == me % (uint32_t)CPU_COUNT(&set)) {
			CPU_ZERO(&one);
			CPU_SET(c, &one);
			sched_setaffinity(0, sizeof one, &one);
			return;
		}
	}
}

static void run_rank(uint32_t me, struct result *res)
{
	struct dpl_transport_params p;
	dpl_bootstrap *bs = NULL;
	struct dpl_oob oob;
	struct rank r;
	unsigned char *buf = NULL;
	char why[200];
	double *rt, secs = 0;
	size_t s, bytes = 0;
	int rep, rc;
	unsigned n;

	pin(me);
	memset(&r, 0, sizeof r);
	r.me = me;
	r.res = res;
	memset(&p, 0, sizeof p);
	p.rank = me;
	p.world_size = 2;
	p.options = O.options;
	if (O.threads) {
		p.world = boot;
	} else {
		/* The probe is the host: it runs the rendezvous and hands the
		 * transport its out-of-band exchange. */
		struct dpl_bootstrap_params bp = {.rank = me, .world_size = 2,
						  .root = boot,
						  .timeout_ms = 60000};

		if ((rc = dpl_bootstrap_open(&bp, &bs)) != 0) {
			fail(&r, "bootstrap", rc);
			return;
		}
		dpl_bootstrap_oob(bs, &oob);
		p.oob = &oob;
	}
	rc = dpl_transport_open(ops, &p, &r.t);
	dpl_bootstrap_close(bs);
	if (rc) {
		fail(&r, "open", rc);
		return;
	}
	r.stride = (ops->req_size + 63) / 64 * 64;
	/* The stream's window and its ack; the ping-pong uses three. */
	r.req = aligned_alloc(64, r.stride * (size_t)(O.window < 2 ? 3
								   : O.window + 1));
	for (s = 0; s < nsizes; s++) {
		size_t need = sizes[s] * (O.distinct ? window_for(sizes[s]) : 2);

		if (need > bytes)
			bytes = need;
	}
	rt = malloc(10000 * sizeof *rt);
	if (r.req == NULL || rt == NULL) {
		fail(&r, "out of memory", DPL_ENOMEM);
		goto out;
	}
	if ((buf = probe_alloc(bytes, (int)me + 1, why, sizeof why)) == NULL) {
		fail(&r, why, DPL_ENOMEM);
		goto out;
	}
	for (s = 0; s < nsizes && !res->failed; s++) {
		n = pingpong_iters(sizes[s]);
		if (pingpong(&r, sizes[s], n / 10 + 1, buf, NULL))
			goto out;
		for (rep = 0; rep < O.reps; rep++) {
			if (barrier(&r) || pingpong(&r, sizes[s], n, buf, rt))
				goto out;
			if (me == 0) {
				double sum = 0;
				unsigned i;

				for (i = 0; i < n; i++)
					sum += rt[i];
				res->avg_us[s][rep] = sum / n / 2 * 1e6;
				res->p50_us[s][rep] =
					median(rt, (int)n) / 2 * 1e6;
			}
		}
		n = stream_msgs(sizes[s]);
		for (rep = 0; rep <= O.reps; rep++) {
			/* rep 0 warms up */
			if (barrier(&r) ||
			    stream(&r, sizes[s], n, window_for(sizes[s]), buf,
				   &secs))
				goto out;
			if (me == 0 && rep > 0)
				res->stream[s][rep - 1] =
					(double)sizes[s] * n / secs / MiB;
		}
	}
	barrier(&r);
out:
	free(rt);
	probe_free(buf);
	dpl_transport_close(r.t);
	free(r.req);
}

struct thread_arg {
	uint32_t me;
	struct result *res;
};

static void *thread_main(void *arg)
{
	struct thread_arg *a = arg;

	run_rank(a->me, a->res);
	return NULL;
}

int run_transport(struct result *res)
{
	pid_t pid[2];
	int st, i, bad = 0;

	if (O.threads) {
		pthread_t th[2];
		struct thread_arg arg[2] = {{0, res}, {1, res}};

		snprintf(boot, sizeof boot, "probe-%d", (int)getpid());
		for (i = 0; i < 2; i++)
			if (pthread_create(&th[i], NULL, thread_main, &arg[i]))
				return -1;
		for (i = 0; i < 2; i++)
			pthread_join(th[i], NULL);
		return res->failed ? -1 : 0;
	}
	i = dpl_test_loopback_port();
	if (i <= 0) {
		fprintf(stderr, "no free port on 127.0.0.1\n");
		return -1;
	}
	snprintf(boot, sizeof boot, "127.0.0.1:%d", i);
	fflush(NULL);
	for (i = 0; i < 2; i++) {
		pid[i] = fork();
		if (pid[i] < 0)
			return -1;
		if (pid[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			run_rank((uint32_t)i, res);
			_exit(res->failed ? 1 : 0);
		}
	}
	for (i = 0; i < 2; i++) {
		if (waitpid(pid[i], &st, 0) != pid[i] || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0)
			bad = 1;
	}
	return bad || res->failed ? -1 : 0;
}
