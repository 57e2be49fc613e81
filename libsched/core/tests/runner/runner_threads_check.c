/*
 * runner_threads_check.c - the threaded runner cases without Criterion, for
 * ThreadSanitizer builds (Criterion cannot start under TSan: its
 * inheritable arena fails, Snaipe/Criterion#274). Runs every policy on
 * every layout, a failing callback and a silent rank, and the in-process
 * transport alone under a flood of mixed sizes; exits non-zero on any
 * wrong value, step error or bound mismatch.
 */
#include "toy_world.h"

static int failures;

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, __VA_ARGS__);                         \
			fputc('\n', stderr);                                  \
			failures++;                                           \
		}                                                             \
	} while (0)

static void one(enum dpl_policy pol, uint32_t stages, const uint32_t *reps,
		uint32_t mb, uint64_t batch, int fail, int silent)
{
	struct toy_world *w = calloc(1, sizeof *w);
	char name[96];
	uint32_t i, s;
	int rc;

	snprintf(name, sizeof name, "%s-%u-%u-%d-%d", dpl_policy_name(pol),
		 stages, mb, fail, silent);
	w->cfg.world = name;
	w->cfg.policy = pol;
	w->cfg.stages = stages;
	w->cfg.microbatches = mb;
	w->cfg.iterations = 2;
	w->cfg.batch = batch;
	w->cfg.fail_rank = fail;
	w->cfg.fail_iter = 1;
	w->cfg.silent_rank = silent;
	w->cfg.leave_rank = -1;
	w->cfg.timeout_ms = silent >= 0 ? 300 : 20000;
	w->cfg.cap = pol == DPL_POLICY_BOUNDED ? 2 : 0;
	w->cfg.chunks = pol == DPL_POLICY_INTERLEAVED ? 2 : 0;
	/* Healthy worlds run a forward-only pass before each step too. */
	w->cfg.passes = fail < 0 && silent < 0 ? 1 : 0;
	for (i = 0; i < stages; i++)
		w->cfg.replicas[i] = reps[i];
	rc = toy_run(w);
	CHECK(rc == 0, "%s: %s", name, dpl_last_error());
	for (i = 0; rc == 0 && i < w->world; i++) {
		struct toy_rank *r = &w->res[i];

		CHECK(r->errors == 0, "%s: %s", name, r->first_error);
		if (fail < 0 && silent < 0) {
			CHECK(r->steps_ok == 2 && r->passes_ok == 2,
			      "%s: rank %u: %s", name, i, r->msg);
			for (s = 0; s < w->nstages; s++)
				CHECK(!r->holds[s] || r->peak[s] == r->bound[s],
				      "%s: rank %u stage %u peak %u bound %u",
				      name, i, s, r->peak[s], r->bound[s]);
		} else if ((int)i != silent) {
			CHECK(r->steps_ok < 2 && r->rc[r->steps_ok] != 0,
			      "%s: rank %u did not fail", name, i);
		}
	}
	toy_free(w);
	free(w);
}

/*
 * The transport alone: FLOOD_N ranks in a ring, each posting bursts of
 * sends to the next (ring-sized, list-sized and past the ring's room)
 * before receiving the previous rank's, so the rings fill, the lists
 * take over and ranks sleep in wait; every message checked in order.
 */
#define FLOOD_N 4
#define FLOOD_MSGS 3000
#define FLOOD_BURST 48

struct flood {
	uint32_t rank;
	int bad;
	dpl_transport *t;
};

static size_t flood_len(int i)
{
	static const size_t lens[3] = {8, 104, 200};

	return lens[i % 3];
}

static int flood_finish(dpl_transport *t, void *req)
{
	int rc, k;

	for (k = 0; k < 1000000; k++) {
		if ((rc = dpl_transport_test(t, req)) != DPL_EAGAIN)
			return rc;
		dpl_transport_progress(t);
		dpl_transport_wait(t, 1000000);
	}
	return DPL_ETIMEDOUT;
}

static void *flood_main(void *arg)
{
	struct flood *x = arg;
	struct dpl_transport_params p = {0};
	uint32_t next = (x->rank + 1) % FLOOD_N,
		 prev = (x->rank + FLOOD_N - 1) % FLOOD_N;
	unsigned char *req = calloc(2 * FLOOD_BURST, 256);
	unsigned char (*out)[200] = calloc(FLOOD_BURST, 200);
	unsigned char in[200];
	int i, j, rc;

	p.rank = x->rank;
	p.world_size = FLOOD_N;
	p.world = "flood";
	if (req == NULL || out == NULL ||
	    dpl_transport_open(&dpl_transport_inproc, &p, &x->t) != 0) {
		x->bad = -1;
		free(req);
		free(out);
		return NULL;
	}
	for (i = 0; i < FLOOD_MSGS; i += FLOOD_BURST) {
		for (j = 0; j < FLOOD_BURST; j++) {
			memset(out[j], (x->rank * 31 + i + j) & 0xff, 200);
			rc = dpl_transport_isend(x->t, req + j * 256, next,
						 (uint64_t)((i + j) % 5),
						 out[j], flood_len(i + j),
						 DPL_MEM_HOST);
			x->bad += rc != 0;
		}
		for (j = 0; j < FLOOD_BURST; j++) {
			void *r = req + (FLOOD_BURST + j) * 256;
			size_t n = flood_len(i + j), k;

			rc = dpl_transport_irecv(x->t, r, prev,
						 (uint64_t)((i + j) % 5), in,
						 n, DPL_MEM_HOST);
			if (rc == 0)
				rc = flood_finish(x->t, r);
			for (k = 0; rc == 0 && k < n; k++)
				rc = in[k] == ((prev * 31 + i + j) & 0xff)
					     ? 0 : -1;
			x->bad += rc != 0;
		}
		for (j = 0; j < FLOOD_BURST; j++)
			x->bad += flood_finish(x->t, req + j * 256) != 0;
	}
	free(req);
	free(out);
	return NULL;
}

static void flood_check(void)
{
	struct flood x[FLOOD_N];
	pthread_t th[FLOOD_N];
	uint32_t i;

	for (i = 0; i < FLOOD_N; i++) {
		x[i].rank = i;
		x[i].bad = 0;
		x[i].t = NULL;
		pthread_create(&th[i], NULL, flood_main, &x[i]);
	}
	for (i = 0; i < FLOOD_N; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < FLOOD_N; i++) {
		CHECK(x[i].bad == 0, "flood: rank %u: %d bad", i, x[i].bad);
		dpl_transport_close(x[i].t);
	}
}

int main(void)
{
	static const uint32_t pipe[4] = {1, 1, 1, 1}, dp[1] = {3},
			      pxd[2] = {2, 2}, uneven[2] = {3, 1},
			      err[3] = {1, 2, 1};
	enum dpl_policy pol;

	for (pol = DPL_POLICY_GPIPE; pol <= DPL_POLICY_ZB_H1; pol++) {
		uint32_t m = pol == DPL_POLICY_INTERLEAVED ? 8 : 5;

		one(pol, 4, pipe, m, m + 3, -1, -1);
		one(pol, 2, pxd, pol == DPL_POLICY_INTERLEAVED ? 4 : 5, 7, -1,
		    -1);
		one(pol, 2, uneven, pol == DPL_POLICY_INTERLEAVED ? 4 : 5, 7,
		    -1, -1);
		if (pol != DPL_POLICY_INTERLEAVED)
			one(pol, 1, dp, 5, 7, -1, -1);
	}
	one(DPL_POLICY_1F1B, 3, err, 4, 8, 2, -1);
	one(DPL_POLICY_1F1B, 3, err, 4, 8, -1, 3);
	flood_check();
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	else
		printf("runner_threads_check: all cases passed\n");
	return failures ? 1 : 0;
}
