/*
 * shm_threads.c - ranks as threads of one process: the bootstrap with four
 * threads, and two shm contexts driven from two threads at once (the
 * contract lets different contexts run on different threads), each
 * opened over its own thread's bootstrap handle. Shared by
 * the Criterion test and the plain driver that ThreadSanitizer builds run
 * (Criterion cannot start under TSan).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dpl/backend.h>
#include <dpl/bootstrap.h>
#include <dpl/transport.h>
#include <dpl/transport_shm.h>

#include "loopback_port.h"
#include "shm_threads.h"

#define BIG (3u << 20)

struct arg {
	int rank;
	int world;
	char root[64];
	const char *opts;
	int failures;
	char msg[256];
};

static void fail(struct arg *a, const char *what, int rc)
{
	if (a->failures++ == 0)
		snprintf(a->msg, sizeof a->msg, "rank %d: %s: %s (%s)",
			 a->rank, what, dpl_err_name(rc), dpl_last_error());
}

static void *bootstrap_thread(void *p)
{
	struct arg *a = p;
	struct dpl_bootstrap_params bp = {(uint32_t)a->rank,
					  (uint32_t)a->world, a->root, 10000};
	dpl_bootstrap *b = NULL;
	uint32_t mine, all[4];
	int k, r, rc;

	rc = dpl_bootstrap_open(&bp, &b);
	if (rc != 0) {
		fail(a, "bootstrap open", rc);
		return NULL;
	}
	for (k = 0; k < 50; k++) {
		mine = (uint32_t)(a->rank * 1000 + k);
		rc = dpl_bootstrap_allgather(b, &mine, sizeof mine, all);
		if (rc != 0) {
			fail(a, "allgather", rc);
			break;
		}
		for (r = 0; r < a->world; r++)
			if (all[r] != (uint32_t)(r * 1000 + k))
				fail(a, "allgather result", DPL_EIO);
	}
	dpl_bootstrap_close(b);
	return NULL;
}

static int wait_req(dpl_transport *t, void *req)
{
	uint64_t end = dpl_clock_ns() + UINT64_C(20000000000);
	int st;

	while ((st = dpl_transport_test(t, req)) == DPL_EAGAIN) {
		dpl_transport_progress(t);
		dpl_transport_wait(t, 1000000);
		if (dpl_clock_ns() > end)
			return DPL_ETIMEDOUT;
	}
	return st;
}

/* Meet the other thread on a->root and open the transport over it. */
static int open_over_bootstrap(struct arg *a, dpl_transport **t)
{
	struct dpl_bootstrap_params bp = {(uint32_t)a->rank, 2, a->root,
					  10000};
	struct dpl_transport_params tp = {(uint32_t)a->rank, 2, NULL, NULL,
					  a->opts, 10000, 0};
	struct dpl_oob oob;
	dpl_bootstrap *b = NULL;
	int rc;

	rc = dpl_bootstrap_open(&bp, &b);
	if (rc != 0)
		return rc;
	dpl_bootstrap_oob(b, &oob);
	tp.oob = &oob;
	rc = dpl_transport_open(&dpl_transport_shm, &tp, t);
	dpl_bootstrap_close(b);
	return rc;
}

static void *shm_thread(void *p)
{
	static const size_t sizes[] = {0, 8, 5000, 70000, BIG};
	const struct dpl_transport_ops *o = &dpl_transport_shm;
	struct arg *a = p;
	uint32_t peer = (uint32_t)(1 - a->rank);
	unsigned char *sb = malloc(BIG), *rb = malloc(BIG);
	void *sr = calloc(1, o->req_size), *rr = calloc(1, o->req_size);
	dpl_transport *t = NULL;
	size_t k, i;
	int rc, round;

	if (sb == NULL || rb == NULL || sr == NULL || rr == NULL) {
		fail(a, "allocation", DPL_ENOMEM);
		goto out;
	}
	rc = open_over_bootstrap(a, &t);
	if (rc != 0) {
		fail(a, "init", rc);
		goto out;
	}
	for (round = 0; round < 3; round++)
		for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
			size_t n = sizes[k];

			for (i = 0; i < n; i++)
				sb[i] = (unsigned char)(i * 7 + k +
							(size_t)a->rank);
			memset(rb, 0, n ? n : 1);
			if ((rc = dpl_transport_irecv(t, rr, peer, k, rb, n,
						      DPL_MEM_HOST)) != 0 ||
			    (rc = dpl_transport_isend(t, sr, peer, k, sb, n,
						      DPL_MEM_HOST)) != 0) {
				fail(a, "post", rc);
				goto fini;
			}
			if ((rc = wait_req(t, rr)) != 0 ||
			    (rc = wait_req(t, sr)) != 0) {
				fail(a, "exchange", rc);
				goto fini;
			}
			for (i = 0; i < n; i++)
				if (rb[i] != (unsigned char)(i * 7 + k +
							     (size_t)peer)) {
					fail(a, "data", DPL_EIO);
					break;
				}
		}
	/* Both sides must be done before either leaves. */
	if ((rc = dpl_transport_irecv(t, rr, peer, 99, rb, 1,
				      DPL_MEM_HOST)) != 0 ||
	    (rc = dpl_transport_isend(t, sr, peer, 99, sb, 1,
				      DPL_MEM_HOST)) != 0 ||
	    (rc = wait_req(t, rr)) != 0 || (rc = wait_req(t, sr)))
		fail(a, "final exchange", rc);
fini:
	dpl_transport_close(t);
out:
	free(sb);
	free(rb);
	free(sr);
	free(rr);
	return NULL;
}

static int run_threads(void *(*fn)(void *), int n, const char *opts,
		       char *msg, size_t size)
{
	struct arg a[4];
	pthread_t t[4];
	int i, port = dpl_test_loopback_port(), failures = 0;

	if (port < 0) {
		snprintf(msg, size, "no free port");
		return 1;
	}
	memset(a, 0, sizeof a);
	for (i = 0; i < n; i++) {
		a[i].rank = i;
		a[i].world = n;
		a[i].opts = opts;
		snprintf(a[i].root, sizeof a[i].root, "127.0.0.1:%d", port);
		if (pthread_create(&t[i], NULL, fn, &a[i]) != 0) {
			snprintf(msg, size, "pthread_create");
			return 1;
		}
	}
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < n; i++)
		if (a[i].failures > 0 && failures++ == 0)
			snprintf(msg, size, "%s", a[i].msg);
	return failures;
}

int dpl_test_shm_threads(char *msg, size_t size)
{
	msg[0] = '\0';
	if (run_threads(bootstrap_thread, 4, NULL, msg, size) != 0)
		return 1;
	if (run_threads(shm_thread, 2, NULL, msg, size) != 0)
		return 1;
	return run_threads(shm_thread, 2, "cma=0,ring=64k,eager=1k", msg,
			   size) != 0;
}
