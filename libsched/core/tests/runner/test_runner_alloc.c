/*
 * test_runner_alloc.c - dpl_runner_step() does not allocate. The test
 * binary is linked with --wrap for malloc, calloc, realloc,
 * posix_memalign and aligned_alloc, so every allocation made by the
 * statically linked core, transport and callbacks passes through a
 * counter that counts only on threads inside dpl_runner_step().
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "toy_world.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);

static _Thread_local int counting;
static _Thread_local uint64_t counted;

void *__wrap_malloc(size_t n)
{
	counted += counting;
	return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t m)
{
	counted += counting;
	return __real_calloc(n, m);
}

void *__wrap_realloc(void *p, size_t n)
{
	counted += counting;
	return __real_realloc(p, n);
}

int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
	counted += counting;
	return __real_posix_memalign(p, a, n);
}

void *__wrap_aligned_alloc(size_t a, size_t n)
{
	counted += counting;
	return __real_aligned_alloc(a, n);
}

static void enter(void)
{
	counted = 0;
	counting = 1;
}

static uint64_t leave(void)
{
	counting = 0;
	return counted;
}

Test(runner_alloc, the_counter_sees_allocations_of_the_core)
{
	struct dpl_schedule_params sp = {0};
	dpl_schedule *s = NULL, *c = NULL;

	sp.stages = 2;
	sp.microbatches = 4;
	sp.policy = DPL_POLICY_1F1B;
	cr_assert_eq(dpl_schedule_build(&sp, &s), 0);
	enter();
	cr_assert_eq(dpl_schedule_clone(s, &c), 0);
	cr_assert_gt(leave(), 0, "the wrapped allocator counted nothing");
	dpl_schedule_destroy(c);
	dpl_schedule_destroy(s);
}

static void run(enum dpl_policy pol, uint32_t stages, const uint32_t *reps,
		uint32_t mb, uint64_t batch)
{
	struct toy_world *w = calloc(1, sizeof *w);
	uint32_t i;

	w->cfg.world = dpl_policy_name(pol);
	w->cfg.policy = pol;
	w->cfg.stages = stages;
	w->cfg.microbatches = mb;
	w->cfg.iterations = 3;
	w->cfg.batch = batch;
	w->cfg.chunks = pol == DPL_POLICY_INTERLEAVED ? 2 : 0;
	w->cfg.cap = pol == DPL_POLICY_BOUNDED ? 2 : 0;
	w->cfg.fail_rank = w->cfg.silent_rank = w->cfg.leave_rank = -1;
	w->cfg.passes = 1; /* a forward-only pass before each step, counted */
	for (i = 0; i < stages; i++)
		w->cfg.replicas[i] = reps[i];
	toy_step_enter = enter;
	toy_step_leave = leave;
	cr_assert_eq(toy_run(w), 0, "%s", dpl_last_error());
	for (i = 0; i < w->world; i++) {
		cr_assert_eq(w->res[i].steps_ok, 3, "%s: rank %u: %s",
			     dpl_policy_name(pol), i, w->res[i].msg);
		cr_assert_eq(w->res[i].passes_ok, 3, "%s: rank %u: %s",
			     dpl_policy_name(pol), i, w->res[i].msg);
		cr_assert_eq(w->res[i].errors, 0);
		cr_assert_eq(w->res[i].allocs_in_step, 0,
			     "%s: rank %u allocated %llu times while stepping",
			     dpl_policy_name(pol), i,
			     (unsigned long long)w->res[i].allocs_in_step);
	}
	toy_free(w);
	free(w);
}

Test(runner_alloc, stepping_and_forward_only_passes_do_not_allocate)
{
	static const uint32_t reps[3] = {2, 3, 1};
	enum dpl_policy pol;

	for (pol = DPL_POLICY_GPIPE; pol <= DPL_POLICY_ZB_H1; pol++)
		run(pol, 3, reps, pol == DPL_POLICY_INTERLEAVED ? 6 : 5, 11);
}
