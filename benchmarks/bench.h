/*
 * bench.h - clock and median helpers shared by the benchmark programs.
 * Include after defining _POSIX_C_SOURCE (clock_gettime).
 */
#ifndef DPL_BENCH_H
#define DPL_BENCH_H

#include <stdlib.h>
#include <time.h>

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

#endif
