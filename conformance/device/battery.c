/*
 * battery.c - the device conformance battery: Criterion tests written
 * only against dpl/device.h, compiled once per device table
 * (CONF_DEVICE_TABLE, the table's symbol, given by CMake:
 * dpl_add_device_conformance() in CMakeLists.txt). It drives the table
 * itself, as the core does: a zeroed context of ctx_size bytes, init,
 * the members, fini.
 *
 * What a device must do (each test says which rule it checks):
 *   - the table: ABI version and size, a name, every mandatory member,
 *     events all four or none (with event_size and DPL_DEVICE_CAP_ASYNC);
 *   - alloc/free: every size from 1 byte to 16 MiB, 64-byte aligned,
 *     the bytes kept; 0 bytes and a kind the device lacks refused with
 *     *out untouched; free(NULL) a no-op; out of memory as DPL_ENOMEM;
 *   - copy in every direction between host memory and the device's
 *     kind that the device does not refuse with DPL_ENOTSUP (its own
 *     kind to itself is required), byte for byte, 0 bytes a no-op;
 *   - sum of every dtype against dpl_host_sum (the same bits), counts
 *     0 to 4099, deterministic; a dtype refused at count 0 is refused
 *     at every count, nothing written;
 *   - events: record/query ordering (a later mark done means an earlier
 *     one is), a query on work done is 0 within a bound;
 *   - several contexts at once from several threads;
 *   - fini with events recorded and not queried.
 * A device init reports absent (DPL_ENOENT) skips every test that needs
 * a context, saying so.
 * Bound: every wait here is a bounded loop. Needs pthreads.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dpl/device.h>

#include "sanitizer.h"

#ifndef CONF_DEVICE_TABLE
#error "CONF_DEVICE_TABLE names the device table under test"
#endif

DPL_EXTERN extern const struct dpl_device_ops CONF_DEVICE_TABLE;

static const struct dpl_device_ops *ops = &CONF_DEVICE_TABLE;

/* A context of the device under test, set up as the core does (zeroed
 * ctx_size bytes, then init): 0 and *out, or init's error (DPL_ENOMEM
 * for the context itself) with nothing kept. Usable from any thread. */
static int dev_new(uint32_t index, void **out)
{
	struct dpl_device_params p = {index, NULL};
	size_t size = ops->ctx_size ? ops->ctx_size : 1;
	void *ctx = NULL;
	int rc;

	if (posix_memalign(&ctx, 64, (size + 63) / 64 * 64) != 0)
		return dpl_set_error(DPL_ENOMEM, "no memory for the context");
	memset(ctx, 0, size);
	if ((rc = ops->init(ctx, &p)) != 0) {
		free(ctx);
		return rc;
	}
	*out = ctx;
	return 0;
}

/*
 * A device this host does not have (init's DPL_ENOENT: no GPU, no
 * driver) skips the test, with a line CTest reads (CMakeLists.txt's
 * SKIP_REGULAR_EXPRESSION): the run is reported skipped, not passed.
 */
static void skip_if_absent(int rc)
{
	if (rc != DPL_ENOENT)
		return;
	fprintf(stderr, "conformance: device %s is absent on this host: %s\n",
		ops->name, dpl_last_error());
	cr_skip_test("device %s is absent on this host: %s", ops->name,
		     dpl_last_error());
}

/* dev_new() in a test: a failure fails it, an absent device skips it. */
static void *dev_open(uint32_t index)
{
	void *ctx = NULL;
	int rc = dev_new(index, &ctx);

	skip_if_absent(rc);
	cr_assert_eq(rc, 0, "%s: init of device %u: %d %s", ops->name, index,
		     rc, dpl_last_error());
	return ctx;
}

static void dev_close(void *ctx)
{
	ops->fini(ctx);
	free(ctx);
}

static bool has_events(void)
{
	return ops->event_create != NULL;
}

/* Copy host bytes into device memory and back (the device's own copy). */
static void to_dev(void *ctx, void *dst, const void *src, size_t n)
{
	int rc = ops->copy(ctx, dst, ops->mem, src, DPL_MEM_HOST, n);

	cr_assert_eq(rc, 0, "%s: copy host to %u, %zu bytes: %d %s", ops->name,
		     ops->mem, n, rc, dpl_last_error());
}

static void from_dev(void *ctx, void *dst, const void *src, size_t n)
{
	int rc = ops->copy(ctx, dst, DPL_MEM_HOST, src, ops->mem, n);

	cr_assert_eq(rc, 0, "%s: copy %u to host, %zu bytes: %d %s", ops->name,
		     ops->mem, n, rc, dpl_last_error());
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (unsigned char)rng_next(&s);
}

TestSuite(device);

Test(device, the_table_is_well_formed)
{
	bool any = ops->event_create || ops->event_destroy ||
		   ops->event_record || ops->event_query;
	bool all = ops->event_create && ops->event_destroy &&
		   ops->event_record && ops->event_query;

	cr_assert_eq(ops->abi_version, DPL_DEVICE_ABI_VERSION);
	cr_assert_geq(ops->size, sizeof(struct dpl_device_ops));
	cr_assert(ops->name != NULL && ops->name[0] != '\0');
	cr_assert_lt(ops->mem, DPL_MEM__COUNT, "mem %u", ops->mem);
	cr_assert_eq(ops->reserved0, 0);
	cr_assert(ops->init && ops->fini && ops->alloc && ops->free &&
		  ops->copy && ops->sum, "%s: a mandatory member is NULL",
		  ops->name);
	cr_assert_eq(any, all, "%s: events are all four or none", ops->name);
	cr_assert_eq(all, ops->event_size > 0,
		     "%s: event_size %zu with%s events", ops->name,
		     ops->event_size, all ? "" : "out");
	cr_assert_eq(all, (ops->caps & DPL_DEVICE_CAP_ASYNC) != 0,
		     "%s: DPL_DEVICE_CAP_ASYNC and events go together",
		     ops->name);
}

Test(device, alloc_keeps_every_size_aligned)
{
	static const size_t sizes[] = {1, 3, 63, 64, 65, 4096, 65537,
				       16u << 20};
	void *ctx = dev_open(0);
	size_t i;

	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		size_t n = sizes[i];
		unsigned char *a = malloc(n), *b = malloc(n);
		void *d = NULL;
		int rc = ops->alloc(ctx, ops->mem, n, &d);

		cr_assert_eq(rc, 0, "%s: alloc of %zu bytes: %d %s", ops->name,
			     n, rc, dpl_last_error());
		cr_assert_not_null(d);
		cr_assert_eq((uintptr_t)d % 64, 0, "%s: %zu bytes at %p",
			     ops->name, n, d);
		fill(a, n, n);
		memset(b, 0, n);
		to_dev(ctx, d, a, n);
		from_dev(ctx, b, d, n);
		cr_assert_eq(memcmp(a, b, n), 0, "%s: %zu bytes changed",
			     ops->name, n);
		ops->free(ctx, ops->mem, d);
		free(a);
		free(b);
	}
	ops->free(ctx, ops->mem, NULL);
	dev_close(ctx);
}

Test(device, zero_bytes_and_a_missing_kind_are_refused)
{
	void *ctx = dev_open(0), *keep = (void *)&ctx, *out = keep;
	int rc;

	rc = ops->alloc(ctx, ops->mem, 0, &out);
	cr_assert_eq(rc, DPL_EINVAL, "%s: alloc of 0 bytes: %d", ops->name,
		     rc);
	cr_assert_eq(out, keep, "%s: *out written on failure", ops->name);
	rc = ops->alloc(ctx, DPL_MEM__COUNT, 64, &out);
	cr_assert_eq(rc, DPL_ENOTSUP, "%s: alloc of kind %u: %d", ops->name,
		     DPL_MEM__COUNT, rc);
	cr_assert_eq(out, keep);
	cr_assert_neq(dpl_last_error()[0], '\0', "%s: no message", ops->name);
	dev_close(ctx);
}

Test(device, out_of_memory_is_enomem)
{
#if defined(DPL_TEST_ASAN)
	cr_skip_test("AddressSanitizer aborts on a request this large, "
		     "before the device sees a failure");
#else
	void *ctx = dev_open(0), *keep = (void *)&ctx, *out = keep;
	int rc = ops->alloc(ctx, ops->mem, SIZE_MAX / 4, &out);

	cr_assert_eq(rc, DPL_ENOMEM, "%s: alloc of %zu bytes: %d", ops->name,
		     SIZE_MAX / 4, rc);
	cr_assert_eq(out, keep, "%s: *out written on failure", ops->name);
	dev_close(ctx);
#endif
}

/* Memory of kind k for n bytes: the device's, or host memory. */
static void *mem_of(void *ctx, uint32_t k, size_t n, bool *own)
{
	void *p = NULL;

	*own = k == ops->mem;
	if (*own)
		cr_assert_eq(ops->alloc(ctx, k, n, &p), 0);
	else
		cr_assert_eq(posix_memalign(&p, 64, n), 0);
	return p;
}

static void mem_free(void *ctx, uint32_t k, void *p, bool own)
{
	if (own)
		ops->free(ctx, k, p);
	else
		free(p);
}

Test(device, copy_in_every_direction_it_takes)
{
	static const uint32_t kinds[] = {DPL_MEM_HOST, DPL_MEM_CUDA};
	const size_t n = 3 * 4096 + 5;
	unsigned char *a = malloc(n), *b = malloc(n);
	void *ctx = dev_open(0);
	unsigned done = 0;
	size_t i, j;

	for (i = 0; i < 2; i++)
		for (j = 0; j < 2; j++) {
			uint32_t dk = kinds[i], sk = kinds[j];
			bool down, sown;
			void *d, *s;
			int rc;

			if ((dk != DPL_MEM_HOST && dk != ops->mem) ||
			    (sk != DPL_MEM_HOST && sk != ops->mem))
				continue; /* a kind the device lacks */
			d = mem_of(ctx, dk, n, &down);
			s = mem_of(ctx, sk, n, &sown);
			fill(a, n, 7 + i * 2 + j);
			if (sown)
				to_dev(ctx, s, a, n);
			else
				memcpy(s, a, n);
			rc = ops->copy(ctx, d, dk, s, sk, n);
			if (rc == DPL_ENOTSUP && !(dk == ops->mem &&
						   sk == ops->mem)) {
				mem_free(ctx, dk, d, down);
				mem_free(ctx, sk, s, sown);
				continue;
			}
			cr_assert_eq(rc, 0, "%s: copy %u to %u: %d %s",
				     ops->name, sk, dk, rc, dpl_last_error());
			cr_assert_eq(ops->copy(ctx, d, dk, s, sk, 0), 0,
				     "%s: a copy of 0 bytes", ops->name);
			if (down)
				from_dev(ctx, b, d, n);
			else
				memcpy(b, d, n);
			cr_assert_eq(memcmp(a, b, n), 0, "%s: copy %u to %u "
				     "changed the bytes", ops->name, sk, dk);
			mem_free(ctx, dk, d, down);
			mem_free(ctx, sk, s, sown);
			done++;
		}
	cr_assert_geq(done, 1u);
	free(a);
	free(b);
	dev_close(ctx);
}

/* count elements of dtype t with values a sum can take (finite, within
 * a few binades), from seed. */
static void fill_dtype(void *p, size_t count, uint32_t t, uint64_t seed)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 3;
	size_t i;

	for (i = 0; i < count; i++) {
		double v = ((double)(rng_next(&s) % 2000001) - 1e6) / 1e5;

		if (t == DPL_DTYPE_F32)
			((float *)p)[i] = (float)v;
		else if (t == DPL_DTYPE_F64)
			((double *)p)[i] = v;
		else if (t == DPL_DTYPE_BF16)
			((uint16_t *)p)[i] = dpl_f32_to_bf16((float)v);
		else
			((uint16_t *)p)[i] = dpl_f32_to_f16((float)v);
	}
}

Test(device, sum_of_every_dtype_matches_the_host_reference)
{
	static const size_t counts[] = {0, 1, 2, 17, 4099};
	void *ctx = dev_open(0);
	uint32_t t;
	size_t i;

	for (t = 0; t < DPL_DTYPE__COUNT; t++) {
		size_t es = dpl_dtype_size(t);
		int refused = ops->sum(ctx, NULL, NULL, 0, t);

		cr_assert(refused == 0 || refused == DPL_ENOTSUP,
			  "%s: sum of dtype %u, count 0: %d", ops->name, t,
			  refused);
		for (i = 0; i < sizeof counts / sizeof counts[0]; i++) {
			size_t n = counts[i] ? counts[i] : 1, bytes = n * es;
			unsigned char *x = malloc(bytes), *y = malloc(bytes);
			unsigned char *want = malloc(bytes), *got = malloc(bytes);
			unsigned char *again = malloc(bytes);
			void *dx = NULL, *dy = NULL;
			int rc;

			cr_assert_eq(ops->alloc(ctx, ops->mem, bytes, &dx), 0);
			cr_assert_eq(ops->alloc(ctx, ops->mem, bytes, &dy), 0);
			fill_dtype(x, n, t, 11 + i);
			fill_dtype(y, n, t, 29 + i);
			memcpy(want, x, bytes);
			cr_assert_eq(dpl_host_sum(want, y, counts[i], t), 0);
			to_dev(ctx, dx, x, bytes);
			to_dev(ctx, dy, y, bytes);
			rc = ops->sum(ctx, dx, dy, counts[i], t);
			from_dev(ctx, got, dx, bytes);
			if (refused) {
				cr_assert_eq(rc, DPL_ENOTSUP, "%s: dtype %u "
					     "refused at count 0, not at %zu",
					     ops->name, t, counts[i]);
				cr_assert_eq(memcmp(got, x, bytes), 0, "%s: a "
					     "refused sum wrote", ops->name);
			} else {
				cr_assert_eq(rc, 0, "%s: sum dtype %u count "
					     "%zu: %d %s", ops->name, t,
					     counts[i], rc, dpl_last_error());
				cr_assert_eq(memcmp(got, want, bytes), 0,
					     "%s: sum of dtype %u, %zu "
					     "elements, differs from "
					     "dpl_host_sum", ops->name, t,
					     counts[i]);
				/* The same inputs, the same bits. */
				to_dev(ctx, dx, x, bytes);
				cr_assert_eq(ops->sum(ctx, dx, dy, counts[i],
						      t), 0);
				from_dev(ctx, again, dx, bytes);
				cr_assert_eq(memcmp(again, got, bytes), 0);
			}
			ops->free(ctx, ops->mem, dx);
			ops->free(ctx, ops->mem, dy);
			free(x);
			free(y);
			free(want);
			free(got);
			free(again);
		}
	}
	cr_assert_eq(ops->sum(ctx, NULL, NULL, 0, DPL_DTYPE__COUNT),
		     DPL_ENOTSUP, "%s: an unknown dtype", ops->name);
	dev_close(ctx);
}

/* Query ev until done, at most 10 s; its last answer. */
static int query_done(void *ctx, void *ev)
{
	struct timespec nap = {0, 100000};
	int rc = DPL_EAGAIN, k;

	for (k = 0; k < 100000 && rc == DPL_EAGAIN; k++) {
		rc = ops->event_query(ctx, ev);
		if (rc == DPL_EAGAIN)
			nanosleep(&nap, NULL);
	}
	return rc;
}

Test(device, events_complete_in_order)
{
	const size_t n = 1 << 20;
	void *ctx, *ev[2], *d = NULL;
	unsigned char *a;
	int k, r0, r1;

	if (!has_events())
		cr_skip_test("device %s has no events (synchronous: copy and "
			     "sum are done on return)", ops->name);
	ctx = dev_open(0);
	a = malloc(n);
	fill(a, n, 5);
	cr_assert_eq(ops->alloc(ctx, ops->mem, n, &d), 0);
	for (k = 0; k < 2; k++) {
		ev[k] = calloc(1, ops->event_size);
		cr_assert_eq(ops->event_create(ctx, ev[k]), 0);
	}
	for (k = 0; k < 50; k++) {
		to_dev(ctx, d, a, n);
		cr_assert_eq(ops->event_record(ctx, ev[0]), 0);
		cr_assert_eq(ops->sum(ctx, d, d, n / 4, DPL_DTYPE_F32), 0);
		cr_assert_eq(ops->event_record(ctx, ev[1]), 0);
		/* A later mark done means the earlier one is. */
		r1 = ops->event_query(ctx, ev[1]);
		r0 = ops->event_query(ctx, ev[0]);
		cr_assert(r1 == 0 || r1 == DPL_EAGAIN, "%d", r1);
		cr_assert(r1 != 0 || r0 == 0, "%s: the later mark is done, "
			  "the earlier not (%d)", ops->name, r0);
		cr_assert_eq(query_done(ctx, ev[1]), 0);
		cr_assert_eq(query_done(ctx, ev[0]), 0);
	}
	for (k = 0; k < 2; k++) {
		ops->event_destroy(ctx, ev[k]);
		free(ev[k]);
	}
	ops->free(ctx, ops->mem, d);
	free(a);
	dev_close(ctx);
}

Test(device, fini_with_events_recorded)
{
	void *ctx, *ev;

	if (!has_events())
		cr_skip_test("device %s has no events", ops->name);
	ctx = dev_open(0);
	ev = calloc(1, ops->event_size);
	cr_assert_eq(ops->event_create(ctx, ev), 0);
	cr_assert_eq(ops->event_record(ctx, ev), 0);
	ops->event_destroy(ctx, ev);
	free(ev);
	dev_close(ctx);
}

#define THREADS 4

struct worker {
	int bad;
	char why[160];
};

/* One context of its own: alloc, copy and sum rounds, checked. */
static void *work(void *arg)
{
	struct worker *w = arg;
	const size_t n = 4096;
	float x[4096], y[4096], got[4096];
	void *ctx = NULL, *dx = NULL, *dy = NULL;
	size_t i;
	int k;

	if (dev_new(0, &ctx) != 0) {
		snprintf(w->why, sizeof w->why, "init: %s", dpl_last_error());
		w->bad++;
		return NULL;
	}
	if (ops->alloc(ctx, ops->mem, sizeof x, &dx) != 0 ||
	    ops->alloc(ctx, ops->mem, sizeof y, &dy) != 0) {
		snprintf(w->why, sizeof w->why, "alloc: %s", dpl_last_error());
		w->bad++;
	}
	for (k = 0; k < 200 && w->bad == 0; k++) {
		for (i = 0; i < n; i++) {
			x[i] = (float)(i + (size_t)k);
			y[i] = (float)k;
		}
		if (ops->copy(ctx, dx, ops->mem, x, DPL_MEM_HOST, sizeof x) ||
		    ops->copy(ctx, dy, ops->mem, y, DPL_MEM_HOST, sizeof y) ||
		    ops->sum(ctx, dx, dy, n, DPL_DTYPE_F32) ||
		    ops->copy(ctx, got, DPL_MEM_HOST, dx, ops->mem,
			      sizeof got)) {
			snprintf(w->why, sizeof w->why, "round %d: %s", k,
				 dpl_last_error());
			w->bad++;
			break;
		}
		for (i = 0; i < n; i++)
			if (got[i] != (float)(i + 2 * (size_t)k)) {
				snprintf(w->why, sizeof w->why, "round %d, "
					 "element %zu: %g", k, i, got[i]);
				w->bad++;
				break;
			}
	}
	ops->free(ctx, ops->mem, dx);
	ops->free(ctx, ops->mem, dy);
	dev_close(ctx);
	return NULL;
}

Test(device, several_contexts_at_once, .timeout = 120)
{
	struct worker w[THREADS];
	pthread_t th[THREADS];
	int i;

	memset(w, 0, sizeof w);
	dev_close(dev_open(0)); /* an absent device skips */
	for (i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
	for (i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < THREADS; i++)
		cr_assert_eq(w[i].bad, 0, "%s: context %d: %s", ops->name, i,
			     w[i].why);
}
