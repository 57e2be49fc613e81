/*
 * inproc_test.h - helpers of the in-process transport's tests: opening
 * ranks of a named world, request storage, and bounded waits for a
 * request. Every post goes through the checked dpl_transport_* layer.
 */
#ifndef INPROC_TEST_H
#define INPROC_TEST_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/transport_inproc.h>

static const struct dpl_transport_ops *const O = &dpl_transport_inproc;

static inline dpl_transport *open_opt(const char *world, uint32_t rank,
				      uint32_t size, const char *options)
{
	struct dpl_transport_params p = {0};
	dpl_transport *t = NULL;

	p.rank = rank;
	p.world_size = size;
	p.world = world;
	p.options = options;
	cr_assert_eq(dpl_transport_open(O, &p, &t), 0, "open rank %u: %s",
		     rank, dpl_last_error());
	return t;
}

static inline dpl_transport *open_rank(const char *world, uint32_t rank,
				       uint32_t size)
{
	return open_opt(world, rank, size, NULL);
}

/* Every send waits for its receive. */
static inline dpl_transport *open_strict(const char *world, uint32_t rank,
					 uint32_t size)
{
	return open_opt(world, rank, size, "eager=0");
}

/* Request storage for single-threaded tests: a static pool (one per
 * test file; each Criterion test runs in a process of its own). */
static _Alignas(max_align_t) unsigned char req_pool[32][256];
static int req_next;

static inline void *req_new(void)
{
	cr_assert_leq(O->req_size, sizeof req_pool[0]);
	cr_assert_lt(req_next, 32);
	return req_pool[req_next++];
}

/* For threads, which must not use Criterion's asserts. */
static inline dpl_transport *open_quiet(const char *world, uint32_t rank,
					uint32_t size)
{
	struct dpl_transport_params p = {0};
	dpl_transport *t = NULL;

	p.rank = rank;
	p.world_size = size;
	p.world = world;
	if (dpl_transport_open(O, &p, &t) != 0)
		return NULL;
	return t;
}

static inline void *req_quiet(void)
{
	return aligned_alloc(_Alignof(max_align_t),
			     (O->req_size + 15) / 16 * 16);
}

/* Test until done, progressing, at most `rounds` times; the status, or
 * DPL_ETIMEDOUT. */
static inline int finish_within(dpl_transport *t, void *req, long rounds)
{
	long i;
	int rc;

	for (i = 0; i < rounds; i++) {
		rc = dpl_transport_test(t, req);
		if (rc != DPL_EAGAIN)
			return rc;
		dpl_transport_progress(t);
	}
	return DPL_ETIMEDOUT;
}

static inline int finish(dpl_transport *t, void *req)
{
	return finish_within(t, req, 1000000);
}

/* Like finish_within, sleeping in wait (up to 1 ms) between rounds: for
 * threads whose peer may be off the core. */
static inline int finish_waiting(dpl_transport *t, void *req, long rounds)
{
	long i;
	int rc;

	for (i = 0; i < rounds; i++) {
		rc = dpl_transport_test(t, req);
		if (rc != DPL_EAGAIN)
			return rc;
		dpl_transport_wait(t, 1000000);
		dpl_transport_progress(t);
	}
	return DPL_ETIMEDOUT;
}

static inline void fill(unsigned char *b, size_t n, unsigned seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 9));
}

#endif /* INPROC_TEST_H */
