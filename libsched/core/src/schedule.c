/* schedule.c - the schedule object: storage, accessors, building. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *dpl__where(char *buf, size_t n, uint32_t rank, size_t pos,
		       struct dpl_action a)
{
	char t[DPL_ACTION_TEXT_MAX];

	if (dpl_action_format(a, t, sizeof t) < 0)
		snprintf(t, sizeof t, "?");
	snprintf(buf, n, "rank %u, position %zu (%s)", rank, pos, t);
	return buf;
}

int dpl__list_reserve(struct dpl__list *l, size_t n)
{
	size_t want, cap;
	struct dpl_action *a;

	if (n > DPL__MAX_ACTIONS - l->len)
		return dpl__error(DPL_ERANGE, "more than 2^31 actions");
	want = l->len + n;
	if (want <= l->cap)
		return 0;
	cap = l->cap ? l->cap : 16;
	while (cap < want)
		cap *= 2;
	a = realloc(l->a, cap * sizeof *a);
	if (a == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory for %zu actions",
				  cap);
	l->a = a;
	l->cap = cap;
	return 0;
}

int dpl__list_push(struct dpl__list *l, struct dpl_action a)
{
	int rc;

	if (l->len == l->cap && (rc = dpl__list_reserve(l, 1)) != 0)
		return rc;
	l->a[l->len++] = a;
	return 0;
}

int dpl__schedule_alloc(uint32_t ranks, uint32_t stages, uint32_t mb,
			dpl_schedule **out)
{
	dpl_schedule *s;
	uint32_t i;

	if (ranks < 1)
		return dpl__error(DPL_EINVAL, "ranks must be >= 1 (got %u)",
				  ranks);
	if (stages < ranks)
		return dpl__error(DPL_EINVAL,
				  "stages must be >= ranks (got %u < %u)",
				  stages, ranks);
	if (mb < 1)
		return dpl__error(DPL_EINVAL,
				  "microbatches must be >= 1 (got %u)", mb);
	if (mb == UINT32_MAX || stages == UINT32_MAX)
		return dpl__error(DPL_ERANGE, "count too large");
	s = calloc(1, sizeof *s);
	if (s == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	s->ranks = ranks;
	s->stages = stages;
	s->microbatches = mb;
	s->chunks = stages / ranks;
	s->policy = DPL_POLICY_CUSTOM;
	s->stage_rank = malloc(stages * sizeof *s->stage_rank);
	s->cap = calloc(stages, sizeof *s->cap);
	s->lists = calloc(ranks, sizeof *s->lists);
	if (!s->stage_rank || !s->cap || !s->lists) {
		dpl_schedule_destroy(s);
		return dpl__error(DPL_ENOMEM, "out of memory");
	}
	for (i = 0; i < stages; i++)
		s->stage_rank[i] = i % ranks;
	*out = s;
	return 0;
}

int dpl_schedule_create(uint32_t ranks, uint32_t stages,
			uint32_t microbatches, dpl_schedule **out)
{
	if (out == NULL)
		return dpl__error(DPL_EINVAL, "out must not be NULL");
	return dpl__schedule_alloc(ranks, stages, microbatches, out);
}

int dpl_schedule_map_stage(dpl_schedule *s, uint32_t stage, uint32_t rank)
{
	uint32_t r;
	size_t i;

	if (stage >= s->stages)
		return dpl__error(DPL_EINVAL, "stage %u out of range (0..%u)",
				  stage, s->stages - 1);
	if (rank >= s->ranks)
		return dpl__error(DPL_EINVAL, "rank %u out of range (0..%u)",
				  rank, s->ranks - 1);
	for (r = 0; r < s->ranks; r++)
		for (i = 0; i < s->lists[r].len; i++)
			if (s->lists[r].a[i].stage == stage)
				return dpl__error(
				    DPL_EINVAL,
				    "stage %u already has actions on rank %u",
				    stage, r);
	s->stage_rank[stage] = rank;
	return 0;
}

int dpl_schedule_append(dpl_schedule *s, uint32_t rank, struct dpl_action a)
{
	char t[DPL_ACTION_TEXT_MAX];

	if (rank >= s->ranks)
		return dpl__error(DPL_EINVAL, "rank %u out of range (0..%u)",
				  rank, s->ranks - 1);
	if (dpl_action_format(a, t, sizeof t) < 0)
		return DPL_EINVAL;
	if (a.stage >= s->stages)
		return dpl__error(DPL_EINVAL, "%s: stage %u out of range (0..%u)",
				  t, a.stage, s->stages - 1);
	if (a.microbatch != DPL_NO_MICROBATCH && a.microbatch >= s->microbatches)
		return dpl__error(DPL_EINVAL,
				  "%s: micro-batch %u out of range (0..%u)", t,
				  a.microbatch, s->microbatches - 1);
	if (s->stage_rank[a.stage] != rank)
		return dpl__error(DPL_EINVAL,
				  "%s: stage %u lives on rank %u, not rank %u",
				  t, a.stage, s->stage_rank[a.stage], rank);
	if (!dpl_action_is_compute(a.kind) && a.kind != DPL_ACT_OVERLAP_F_B)
		s->lowered = true;
	return dpl__list_push(&s->lists[rank], a);
}

void dpl_schedule_destroy(dpl_schedule *s)
{
	uint32_t r;

	if (s == NULL)
		return;
	if (s->lists)
		for (r = 0; r < s->ranks; r++)
			free(s->lists[r].a);
	free(s->lists);
	free(s->stage_rank);
	free(s->cap);
	free(s);
}

int dpl_schedule_clone(const dpl_schedule *s, dpl_schedule **out)
{
	dpl_schedule *c;
	uint32_t r;
	int rc;

	rc = dpl__schedule_alloc(s->ranks, s->stages, s->microbatches, &c);
	if (rc)
		return rc;
	c->chunks = s->chunks;
	c->policy = s->policy;
	c->lowered = s->lowered;
	memcpy(c->stage_rank, s->stage_rank, s->stages * sizeof *s->stage_rank);
	memcpy(c->cap, s->cap, s->stages * sizeof *s->cap);
	for (r = 0; r < s->ranks; r++) {
		if ((rc = dpl__list_reserve(&c->lists[r], s->lists[r].len))) {
			dpl_schedule_destroy(c);
			return rc;
		}
		if (s->lists[r].len)
			memcpy(c->lists[r].a, s->lists[r].a,
			       s->lists[r].len * sizeof *s->lists[r].a);
		c->lists[r].len = s->lists[r].len;
	}
	*out = c;
	return 0;
}

uint32_t dpl_schedule_ranks(const dpl_schedule *s) { return s->ranks; }
uint32_t dpl_schedule_stages(const dpl_schedule *s) { return s->stages; }
uint32_t dpl_schedule_microbatches(const dpl_schedule *s)
{
	return s->microbatches;
}
enum dpl_policy dpl_schedule_policy(const dpl_schedule *s)
{
	return s->policy;
}
int dpl_schedule_is_lowered(const dpl_schedule *s) { return s->lowered; }

uint32_t dpl_schedule_stage_rank(const dpl_schedule *s, uint32_t stage)
{
	return stage < s->stages ? s->stage_rank[stage] : UINT32_MAX;
}

const struct dpl_action *dpl_schedule_actions(const dpl_schedule *s,
					      uint32_t rank, size_t *len)
{
	if (rank >= s->ranks) {
		*len = 0;
		return NULL;
	}
	*len = s->lists[rank].len;
	return s->lists[rank].a;
}

size_t dpl_schedule_action_count(const dpl_schedule *s)
{
	size_t n = 0;
	uint32_t r;

	for (r = 0; r < s->ranks; r++)
		n += s->lists[r].len;
	return n;
}

uint32_t dpl_schedule_bound(const dpl_schedule *s, uint32_t stage)
{
	const struct dpl__list *l;
	uint32_t live = 0, peak = 0;
	size_t i;

	if (stage >= s->stages)
		return 0;
	l = &s->lists[s->stage_rank[stage]];
	for (i = 0; i < l->len; i++) {
		const struct dpl_action *a = &l->a[i];

		if (a->stage != stage)
			continue;
		if (a->kind == DPL_ACT_F) {
			if (++live > peak)
				peak = live;
		} else if ((a->kind == DPL_ACT_B || a->kind == DPL_ACT_W) &&
			   live > 0) {
			live--;
		}
	}
	return peak;
}

int dpl_schedule_set_cap(dpl_schedule *s, uint32_t stage, uint32_t cap)
{
	if (stage >= s->stages)
		return dpl__error(DPL_EINVAL, "stage %u out of range (0..%u)",
				  stage, s->stages - 1);
	s->cap[stage] = cap;
	return 0;
}

uint32_t dpl_schedule_cap(const dpl_schedule *s, uint32_t stage)
{
	return stage < s->stages ? s->cap[stage] : 0;
}

struct dpl_stage_cost dpl_stage_cost_resolve(struct dpl_stage_cost c)
{
	if (c.f == 0 && c.b == 0 && c.i == 0 && c.w == 0) {
		c.f = 1;
		c.b = 2;
	}
	if (c.i == 0)
		c.i = c.b / 2;
	if (c.w == 0)
		c.w = c.b / 2;
	return c;
}

int dpl_schedule_set_policy(dpl_schedule *s, enum dpl_policy policy)
{
	if ((unsigned)policy >= DPL_POLICY__COUNT)
		return dpl__error(DPL_EINVAL, "policy %u out of range (0..%u)",
				  (unsigned)policy, DPL_POLICY__COUNT - 1);
	s->policy = policy;
	return 0;
}
