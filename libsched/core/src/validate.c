/*
 * validate.c - the schedule validator: static rules over the lists, then an
 * untimed replay that proves the lists cannot deadlock, with rendezvous
 * sends in lowered lists.
 */
#include <stdlib.h>
#include <string.h>

#include "validate.h"


#define report dpl__vreport

int dpl__vreport(struct dpl__vctx *v, int code, uint32_t rank, size_t pos,
		 struct dpl_action a, const char *fmt, ...)
{
	char where[96], why[150];
	struct dpl_schedule_issue tmp, *is = v->issue ? v->issue : &tmp;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	dpl__where(where, sizeof where, rank, pos, a);
	is->code = code;
	is->rank = rank;
	is->position = pos;
	is->action = a;
	snprintf(is->message, sizeof is->message, "%s: %s", where, why);
	return dpl__error(code, "%s", is->message);
}

static uint32_t bit_of(uint32_t kind)
{
	static const uint8_t bits[DPL_ACT__COUNT] = {
		[DPL_ACT_F] = ST_F,	      [DPL_ACT_B] = ST_B,
		[DPL_ACT_I] = ST_I,	      [DPL_ACT_W] = ST_W,
		[DPL_ACT_SEND_F] = ST_SEND_F, [DPL_ACT_RECV_F] = ST_RECV_F,
		[DPL_ACT_SEND_B] = ST_SEND_B, [DPL_ACT_RECV_B] = ST_RECV_B,
	};
	return bits[kind];
}

/* Does the input of compute action `a` come from another rank? */
static bool input_remote(const dpl_schedule *s, struct dpl_action a)
{
	uint32_t r = s->stage_rank[a.stage];

	if (a.kind == DPL_ACT_F)
		return a.stage > 0 && s->stage_rank[a.stage - 1] != r;
	if (a.kind == DPL_ACT_B || a.kind == DPL_ACT_I)
		return a.stage + 1 < s->stages &&
		       s->stage_rank[a.stage + 1] != r;
	return false;
}

/* Does compute action `a` produce something for another rank? */
static bool output_remote(const dpl_schedule *s, struct dpl_action a)
{
	uint32_t r = s->stage_rank[a.stage];

	if (a.kind == DPL_ACT_F)
		return a.stage + 1 < s->stages &&
		       s->stage_rank[a.stage + 1] != r;
	if (a.kind == DPL_ACT_B || a.kind == DPL_ACT_I)
		return a.stage > 0 && s->stage_rank[a.stage - 1] != r;
	return false;
}

/* Rules 1-5, one pass over each list in order. */
static int check_static(struct dpl__vctx *v)
{
	const dpl_schedule *s = v->s;
	uint32_t S = s->stages, M = s->microbatches, r;
	uint32_t *live = NULL;
	uint8_t *stage_flags = NULL; /* bit0 REDUCE_GRAD, bit1 STEP */
	int rc = 0;

	live = calloc(S, sizeof *live);
	stage_flags = calloc(S, 1);
	if (!live || !stage_flags) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	for (r = 0; r < s->ranks && rc == 0; r++) {
		const struct dpl__list *l = &s->lists[r];

		for (size_t i = 0; i < l->len; i++) {
			struct dpl_action a = l->a[i];
			uint16_t *st;
			uint32_t k = a.kind;

			/* Rule 1: where and what. */
			if (k >= DPL_ACT__COUNT || a.stage >= S) {
				rc = report(v, DPL_ESCHED, r, i, a,
					    "kind or stage out of range");
				goto out;
			}
			if (s->stage_rank[a.stage] != r) {
				rc = report(v, DPL_ESCHED, r, i, a,
					    "stage %u lives on rank %u", a.stage,
					    s->stage_rank[a.stage]);
				goto out;
			}
			if (k >= DPL_ACT_UNSHARD)
				continue; /* rule 7, dpl__validate_kinds() */
			if (k == DPL_ACT_REDUCE_GRAD || k == DPL_ACT_STEP) {
				uint8_t bit = k == DPL_ACT_STEP ? 2 : 1;

				if (a.microbatch != DPL_NO_MICROBATCH) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "%s carries no micro-batch",
						    dpl_action_kind_name(k));
					goto out;
				}
				if (!s->lowered) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "compute-only lists hold no "
						    "%s",
						    dpl_action_kind_name(k));
					goto out;
				}
				if (stage_flags[a.stage] & bit) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "second %s for stage %u",
						    dpl_action_kind_name(k),
						    a.stage);
					goto out;
				}
				if (k == DPL_ACT_REDUCE_GRAD &&
				    (stage_flags[a.stage] & 2)) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "after stage %u's STEP",
						    a.stage);
					goto out;
				}
				stage_flags[a.stage] |= bit;
				continue;
			}
			if (a.microbatch >= M) {
				rc = report(v, DPL_ESCHED, r, i, a,
					    "micro-batch %u out of range (0..%u)",
					    a.microbatch, M - 1);
				goto out;
			}
			st = &v->st[dpl__sm(s, a.stage, a.microbatch)];
			if (*st & bit_of(k)) {
				rc = report(v, DPL_ESCHED, r, i, a,
					    "runs twice");
				goto out;
			}
			if (stage_flags[a.stage] &&
			    (k == DPL_ACT_B || k == DPL_ACT_W || k == DPL_ACT_I ||
			     k == DPL_ACT_F)) {
				rc = report(v, DPL_ESCHED, r, i, a,
					    "after stage %u's %s", a.stage,
					    (stage_flags[a.stage] & 2)
						? "STEP"
						: "REDUCE_GRAD");
				goto out;
			}
			switch (k) {
			case DPL_ACT_F:
				if (a.stage > 0 && !input_remote(s, a) &&
				    !(v->st[dpl__sm(s, a.stage - 1, a.microbatch)] &
				      ST_F)) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "before F of stage %u on "
						    "the same rank",
						    a.stage - 1);
					goto out;
				}
				if (input_remote(s, a) && s->lowered &&
				    !(*st & ST_RECV_F)) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "needs its RECV_F before it");
					goto out;
				}
				if (++live[a.stage] > s->cap[a.stage] &&
				    s->cap[a.stage] != 0) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "stage %u keeps %u micro-"
						    "batches alive, over its cap "
						    "%u",
						    a.stage, live[a.stage],
						    s->cap[a.stage]);
					goto out;
				}
				break;
			case DPL_ACT_B:
			case DPL_ACT_I:
				if (!(*st & ST_F)) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "before its forward");
					goto out;
				}
				if (*st & (ST_B | ST_I)) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "mixes B with I/W for one "
						    "micro-batch");
					goto out;
				}
				if (a.stage + 1 < S && !input_remote(s, a) &&
				    !(v->st[dpl__sm(s, a.stage + 1, a.microbatch)] &
				      (ST_B | ST_I))) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "before the backward of "
						    "stage %u on the same rank",
						    a.stage + 1);
					goto out;
				}
				if (input_remote(s, a) && s->lowered &&
				    !(*st & ST_RECV_B)) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "needs its RECV_B before it");
					goto out;
				}
				if (k == DPL_ACT_B)
					live[a.stage]--;
				break;
			case DPL_ACT_W:
				if (!(*st & ST_I)) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "before its I");
					goto out;
				}
				live[a.stage]--;
				break;
			case DPL_ACT_SEND_F:
			case DPL_ACT_SEND_B: {
				struct dpl_action p = a;

				p.kind = k == DPL_ACT_SEND_F ? DPL_ACT_F : DPL_ACT_B;
				if (!output_remote(s, p)) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "no stage on another rank "
						    "receives it");
					goto out;
				}
				if (!(*st & (k == DPL_ACT_SEND_F
						 ? ST_F
						 : (ST_B | ST_I)))) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "before the action that "
						    "produces it");
					goto out;
				}
				break;
			}
			case DPL_ACT_RECV_F:
			case DPL_ACT_RECV_B: {
				struct dpl_action c = a;

				c.kind = k == DPL_ACT_RECV_F ? DPL_ACT_F : DPL_ACT_B;
				if (!input_remote(s, c)) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "no stage on another rank "
						    "sends it");
					goto out;
				}
				if (*st & (k == DPL_ACT_RECV_F ? ST_F
							       : (ST_B | ST_I))) {
					rc = report(v, DPL_ESCHED, r, i, a,
						    "after its consumer");
					goto out;
				}
				break;
			}
			}
			*st |= bit_of(k);
		}
	}
	if (rc)
		goto out;
	/* Rule 2 (completeness) and rule 5 (pairs), per (stage, mb). */
	for (uint32_t st = 0; st < S; st++) {
		uint32_t home = s->stage_rank[st];

		for (uint32_t j = 0; j < M; j++) {
			uint16_t b = v->st[dpl__sm(s, st, j)];
			struct dpl_action a = dpl__act(DPL_ACT_F, st, j);

			if (!(b & ST_F)) {
				rc = report(v, DPL_ESCHED, home,
					    s->lists[home].len, a, "never runs");
				goto out;
			}
			if (!(b & ST_B) && !((b & ST_I) && (b & ST_W))) {
				a.kind = (b & ST_I) ? DPL_ACT_W : DPL_ACT_B;
				rc = report(v, DPL_ESCHED, home,
					    s->lists[home].len, a, "never runs");
				goto out;
			}
			if (!s->lowered)
				continue;
			a.kind = DPL_ACT_F;
			if (output_remote(s, a) &&
			    !((b & ST_SEND_F) &&
			      (v->st[dpl__sm(s, st + 1, j)] & ST_RECV_F))) {
				a.kind = (b & ST_SEND_F) ? DPL_ACT_RECV_F
							 : DPL_ACT_SEND_F;
				if (a.kind == DPL_ACT_RECV_F)
					a.stage = st + 1;
				rc = report(v, DPL_ESCHED, s->stage_rank[a.stage],
					    s->lists[s->stage_rank[a.stage]].len,
					    a, "missing in a lowered schedule");
				goto out;
			}
			a.kind = (b & ST_B) ? DPL_ACT_B : DPL_ACT_I;
			if (output_remote(s, a) &&
			    !((b & ST_SEND_B) &&
			      (v->st[dpl__sm(s, st - 1, j)] & ST_RECV_B))) {
				a.kind = (b & ST_SEND_B) ? DPL_ACT_RECV_B
							 : DPL_ACT_SEND_B;
				if (a.kind == DPL_ACT_RECV_B)
					a.stage = st - 1;
				rc = report(v, DPL_ESCHED, s->stage_rank[a.stage],
					    s->lists[s->stage_rank[a.stage]].len,
					    a, "missing in a lowered schedule");
				goto out;
			}
		}
	}
out:
	free(live);
	free(stage_flags);
	return rc;
}

/* Rule 6: untimed replay; sends complete only once the receive is posted. */
static int check_progress(struct dpl__vctx *v)
{
	const dpl_schedule *s = v->s;
	uint32_t R = s->ranks, r;
	size_t *pc = NULL, total = 0, done = 0;
	uint32_t *queue = NULL, qh = 0, qt = 0;
	uint8_t *queued = NULL;
	int rc = 0;

	memset(v->st, 0, (size_t)s->stages * s->microbatches * sizeof *v->st);
	pc = calloc(R, sizeof *pc);
	queue = malloc((size_t)R * sizeof *queue);
	queued = calloc(R, 1);
	if (!pc || !queue || !queued) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	for (r = 0; r < R; r++) {
		total += s->lists[r].len;
		queue[qt++ % R] = r;
		queued[r] = 1;
	}
	/* A ring of ranks to look at; a rank is in it at most once. */
	while (qh != qt) {
		r = queue[qh++ % R];
		queued[r] = 0;
		const struct dpl__list *l = &s->lists[r];

		while (pc[r] < l->len) {
			struct dpl_action a = l->a[pc[r]];
			uint16_t *st = NULL, need = 0, *peer = NULL;
			uint32_t wake = UINT32_MAX;

			if (a.microbatch != DPL_NO_MICROBATCH)
				st = &v->st[dpl__sm(s, a.stage, a.microbatch)];
			switch (a.kind) {
			case DPL_ACT_F:
				if (a.stage > 0) {
					peer = &v->st[dpl__sm(s, a.stage - 1,
							      a.microbatch)];
					need = input_remote(s, a) && s->lowered
						   ? ST_SEND_F
						   : ST_F;
				}
				break;
			case DPL_ACT_B:
			case DPL_ACT_I:
				if (a.stage + 1 < s->stages) {
					peer = &v->st[dpl__sm(s, a.stage + 1,
							      a.microbatch)];
					need = input_remote(s, a) && s->lowered
						   ? ST_SEND_B
						   : (ST_B | ST_I);
				}
				break;
			case DPL_ACT_SEND_F:
				peer = &v->st[dpl__sm(s, a.stage + 1,
						      a.microbatch)];
				need = ST_RECV_F;
				break;
			case DPL_ACT_SEND_B:
				peer = &v->st[dpl__sm(s, a.stage - 1,
						      a.microbatch)];
				need = ST_RECV_B;
				break;
			default:
				break;
			}
			if (peer && !(*peer & need))
				break; /* blocked; a wake-up re-queues us */
			if (st)
				*st |= bit_of(a.kind);
			/* Wake the ranks this action may unblock. */
			switch (a.kind) {
			case DPL_ACT_F:
			case DPL_ACT_SEND_F:
				if (a.stage + 1 < s->stages)
					wake = s->stage_rank[a.stage + 1];
				break;
			case DPL_ACT_B:
			case DPL_ACT_I:
			case DPL_ACT_SEND_B:
				if (a.stage > 0)
					wake = s->stage_rank[a.stage - 1];
				break;
			case DPL_ACT_RECV_F:
				wake = s->stage_rank[a.stage - 1];
				break;
			case DPL_ACT_RECV_B:
				wake = s->stage_rank[a.stage + 1];
				break;
			default:
				break;
			}
			if (wake != UINT32_MAX && wake != r && !queued[wake]) {
				queued[wake] = 1;
				queue[qt++ % R] = wake;
			}
			pc[r]++;
			done++;
		}
	}
	if (done != total) {
		for (r = 0; r < R; r++) {
			const struct dpl__list *l = &s->lists[r];

			if (pc[r] < l->len) {
				struct dpl_action a = l->a[pc[r]];
				const char *why;

				switch (a.kind) {
				case DPL_ACT_SEND_F:
				case DPL_ACT_SEND_B:
					why = "blocked: its receive is never "
					      "posted first (rendezvous)";
					break;
				default:
					why = "blocked: its input never arrives";
				}
				rc = report(v, DPL_EDEADLOCK, r, pc[r], a,
					    "%s (%zu of %zu actions ran)", why,
					    done, total);
				break;
			}
		}
	}
out:
	free(pc);
	free(queue);
	free(queued);
	return rc;
}

/*
 * Rule 2 counted before anything the size of S x M is allocated: every
 * (stage, micro-batch) needs an F and a B (or I and W), so lists with
 * fewer than 2 S M compute actions cannot be complete. When S x M is also
 * far larger than the lists (a loaded file with one huge micro-batch
 * index: M = index + 1), the schedule is refused here, naming that
 * action, instead of allocating per-micro-batch state for all of M.
 */
static int check_count(struct dpl__vctx *v)
{
	const dpl_schedule *s = v->s;
	uint64_t need = 2 * (uint64_t)s->stages * s->microbatches, have = 0;
	struct dpl_action big = {0, 0, 0};
	uint32_t r, big_rank = 0;
	size_t big_pos = 0;

	/* Small S x M: the state is cheap and the passes below say more. */
	if (need / 2 <= 64 * 1024)
		return 0;
	for (r = 0; r < s->ranks; r++)
		for (size_t i = 0; i < s->lists[r].len; i++) {
			struct dpl_action a = s->lists[r].a[i];

			if (!dpl_action_is_compute(a.kind))
				continue;
			have++;
			if (a.microbatch >= big.microbatch) {
				big = a;
				big_rank = r;
				big_pos = i;
			}
		}
	/* Where the state stays within a constant factor of the lists,
	 * the passes below name the exact (stage, micro-batch) missing. */
	if (have >= need || need / 2 <= 64 * (have + 1024))
		return 0;
	return report(v, DPL_ESCHED, big_rank, big_pos, big,
		      "%u stages and %u micro-batches need at least %llu "
		      "compute actions (an F and a B, or an I and a W, for "
		      "each), the lists hold %llu",
		      s->stages, s->microbatches, (unsigned long long)need,
		      (unsigned long long)have);
}

int dpl_schedule_validate(const dpl_schedule *s,
			  struct dpl_schedule_issue *issue)
{
	struct dpl__vctx v = {s, issue, NULL};
	int rc;

	if (s == NULL)
		return dpl__error(DPL_EINVAL, "schedule must not be NULL");
	if ((rc = check_count(&v)) != 0)
		return rc;
	v.st = calloc((size_t)s->stages * s->microbatches, sizeof *v.st);
	if (v.st == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	rc = check_static(&v);
	if (rc == 0)
		rc = dpl__validate_kinds(&v);
	if (rc == 0)
		rc = check_progress(&v);
	free(v.st);
	return rc;
}
