/*
 * bench.h - clock, median and thread helpers shared by the benchmark
 * programs. Include after defining _POSIX_C_SOURCE (clock_gettime).
 */
#ifndef DPL_BENCH_H
#define DPL_BENCH_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <dpl/runner.h>

#define BENCH_MAX_RANKS 64

/* What each rank thread of bench_run_ranks() is given. */
struct bench_rank {
	void *world;
	uint32_t rank;
};

/*
 * Run fn on n threads, one per rank, each given its struct bench_rank,
 * and join them. A thread that cannot start ends the program: the others
 * would wait for it at their barriers.
 */
static inline void bench_run_ranks(uint32_t n, void *(*fn)(void *),
				   void *world)
{
	struct bench_rank a[BENCH_MAX_RANKS];
	pthread_t th[BENCH_MAX_RANKS];
	uint32_t i;

	if (n > BENCH_MAX_RANKS) {
		fprintf(stderr, "bench: %u ranks, at most %d\n", n,
			BENCH_MAX_RANKS);
		exit(1);
	}
	for (i = 0; i < n; i++) {
		a[i].world = world;
		a[i].rank = i;
		if (pthread_create(&th[i], NULL, fn, &a[i]) != 0) {
			perror("bench: pthread_create");
			exit(1);
		}
	}
	for (i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

/* From the earliest t0[i] to the latest t1[i], i < n. */
static inline double bench_span(const double *t0, const double *t1,
				uint32_t n)
{
	double lo = t0[0], hi = t1[0];
	uint32_t i;

	for (i = 1; i < n; i++) {
		lo = t0[i] < lo ? t0[i] : lo;
		hi = t1[i] > hi ? t1[i] : hi;
	}
	return hi - lo;
}

/* Seconds on clock `id` (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID...). */
static inline double bench_seconds(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* qsort comparison of doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median of v[0..n), n >= 1; sorts v in place. */
static inline double bench_median(double *v, size_t n)
{
	qsort(v, n, sizeof *v, bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * On a rank thread: create the runner of rp unless *rc already says a
 * rank failed, then run reps + 1 steps (the first warms up and is
 * overwritten), each between two waits at bar, storing the monotonic
 * time in seconds before and after step k at t0[k * stride] and
 * t1[k * stride]. A failure prints dpl's message and sets *rc = -1.
 * Returns the runner (NULL when it was not created); the caller meets
 * the other ranks at bar before destroying it.
 */
static inline dpl_runner *bench_steps(const struct dpl_runner_params *rp,
				      pthread_barrier_t *bar, uint32_t reps,
				      double *t0, double *t1, size_t stride,
				      int *rc)
{
	dpl_runner *r = NULL;
	uint32_t i;
	size_t k;

	if (*rc == 0 && dpl_runner_create(rp, &r) != 0) {
		fprintf(stderr, "%s\n", dpl_last_error());
		*rc = -1;
	}
	pthread_barrier_wait(bar);
	for (i = 0; *rc == 0 && i <= reps; i++) {
		pthread_barrier_wait(bar);
		k = (i ? i - 1 : 0) * stride;
		t0[k] = bench_seconds(CLOCK_MONOTONIC);
		if (dpl_runner_step(r) != 0) {
			fprintf(stderr, "%s\n", dpl_last_error());
			*rc = -1;
		}
		t1[k] = bench_seconds(CLOCK_MONOTONIC);
		pthread_barrier_wait(bar);
	}
	return r;
}

#endif
