/*
 * test_perf.c - the two checks with a clock (cases 37 and 38): the time
 * from init to the first 1 MiB round trip, logged and held only to a
 * generous budget, and a 1 MiB ping-pong bandwidth floor taken as the
 * median of five runs. Both floors come from the registration
 * (DPL_CONF_STARTUP_BUDGET_MS, DPL_CONF_BW_FLOOR_GIBS): they catch a
 * backend that fell onto a slow path, not a few per cent. Measurements
 * belong in benchmarks/transport.sh.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The 1-minute load average, logged next to every measurement. */
static double load(void)
{
	double l[1] = {-1};

	return getloadavg(l, 1) == 1 ? l[0] : -1;
}

static void startup_rank(struct tj_rank *rk)
{
	uint64_t t0 = dpl_clock_ns(), t1, t2;

	conf_open(rk);
	t1 = dpl_clock_ns();
	tj_step(rk, "first 1 MiB round trip");
	conf_exchange(rk, 1 - rk->rank, 1, 1u << 20, 1);
	t2 = dpl_clock_ns();
	rk->val[0] = (double)(t1 - t0) / 1e6;
	rk->val[1] = (double)(t2 - t0) / 1e6;
	tj_note(rk, "init %.1f ms, init + first 1 MiB exchange %.1f ms",
		rk->val[0], rk->val[1]);
	tj_barrier(rk);
	conf_close(rk);
}

Test(perf, startup_within_budget, .timeout = 80)
{
	double budget = (double)conf_env_long("DPL_CONF_STARTUP_BUDGET_MS",
					      10000, 1, 3600000);
	struct conf_job job = {.size = 2, .fn = startup_rank,
			       .no_open = true, .deadline_s = 60};
	uint32_t r;

	conf_run(&job);
	cr_log_info("load average %.2f", load());
	for (r = 0; r < 2; r++)
		cr_expect_leq(job.val[r][1], budget,
			      "rank %u: init + first 1 MiB exchange took %.1f "
			      "ms, budget %.0f ms (DPL_CONF_STARTUP_BUDGET_MS)",
			      r, job.val[r][1], budget);
}

/* ---------------------------------------------------------------- */

#define PP_LEN (1u << 20)
#define PP_WARM 10
#define PP_RUNS 5

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void pingpong_rank(struct tj_rank *rk)
{
	unsigned iters = *(unsigned *)rk->arg;
	uint32_t peer = 1 - rk->rank;
	unsigned char *out = tj_alloc(rk, PP_LEN), *in = tj_alloc(rk, PP_LEN);
	void *rq = tj_reqs(rk, 2);
	double gibs[PP_RUNS];
	unsigned run, i, n;
	uint64_t t0 = 0;
	int rc;

	tj_fill(out, PP_LEN, rk->rank);
	for (run = 0; run <= PP_RUNS; run++) {
		/* run 0 is the warm-up */
		n = run == 0 ? PP_WARM : iters;
		tj_barrier(rk);
		t0 = dpl_clock_ns();
		for (i = 0; i < n; i++) {
			conf_recv(rk, tj_req(rk, rq, 0), peer, 2, in, PP_LEN,
				  NULL);
			if (rk->rank == 1) {
				rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "ping");
				TJ_CHECK(rk, rc == 0, "ping: %s",
					 dpl_err_name(rc));
			}
			conf_send(rk, tj_req(rk, rq, 1), peer, 2, out,
				  PP_LEN, NULL);
			if (rk->rank == 0) {
				rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "pong");
				TJ_CHECK(rk, rc == 0, "pong: %s",
					 dpl_err_name(rc));
			}
			rc = tj_wait(rk, tj_req(rk, rq, 1), 0, "a send");
			TJ_CHECK(rk, rc == 0, "send: %s", dpl_err_name(rc));
		}
		if (run > 0)
			gibs[run - 1] = (double)PP_LEN * 2 * n /
					((double)(dpl_clock_ns() - t0) / 1e9) /
					(1u << 30);
	}
	TJ_CHECK(rk, tj_verify(in, PP_LEN, peer) < 0,
		 "ping-pong data differs");
	qsort(gibs, PP_RUNS, sizeof gibs[0], cmp_double);
	rk->val[0] = gibs[PP_RUNS / 2];
	tj_note(rk, "1 MiB ping-pong, %u round trips x %d runs: median "
		    "%.2f GiB/s (min %.2f, max %.2f)",
		iters, PP_RUNS, gibs[PP_RUNS / 2], gibs[0],
		gibs[PP_RUNS - 1]);
}

Test(perf, bandwidth_floor_1MiB, .timeout = 140)
{
	double floor = conf_env_double("DPL_CONF_BW_FLOOR_GIBS", 0.25);
	unsigned iters = (unsigned)conf_env_long("DPL_CONF_BW_ITERS", 50, 1,
						 100000);
	struct conf_job job = {.size = 2, .fn = pingpong_rank, .arg = &iters,
			       .deadline_s = 120};

	double best = 0;
	int attempt;

	/* A shared 2-core machine has bad moments: up to three jobs, the
	 * best median counts. */
	for (attempt = 1; attempt <= 3 && best < floor; attempt++) {
		conf_run(&job);
		cr_log_info("attempt %d: median of %d runs %.2f GiB/s, floor "
			    "%.2f GiB/s (DPL_CONF_BW_FLOOR_GIBS); load "
			    "average %.2f",
			    attempt, PP_RUNS, job.val[0][0], floor, load());
		if (job.val[0][0] > best)
			best = job.val[0][0];
	}
	cr_expect_geq(best, floor,
		      "1 MiB ping-pong: the best median of three attempts, "
		      "%.2f GiB/s, is below the floor of %.2f GiB/s "
		      "(DPL_CONF_BW_FLOOR_GIBS)",
		      best, floor);
}
