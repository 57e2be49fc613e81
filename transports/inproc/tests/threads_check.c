/*
 * threads_check.c - the threaded runner cases without Criterion, for
 * ThreadSanitizer builds (Criterion cannot start under TSan: its
 * inheritable arena fails, Snaipe/Criterion#274). Runs every policy on
 * every layout, a failing callback and a silent rank; exits non-zero on
 * any wrong value, step error or bound mismatch.
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
	for (i = 0; i < stages; i++)
		w->cfg.replicas[i] = reps[i];
	rc = toy_run(w);
	CHECK(rc == 0, "%s: %s", name, dpl_last_error());
	for (i = 0; rc == 0 && i < w->world; i++) {
		struct toy_rank *r = &w->res[i];

		CHECK(r->errors == 0, "%s: %s", name, r->first_error);
		if (fail < 0 && silent < 0) {
			CHECK(r->steps_ok == 2, "%s: rank %u: %s", name, i,
			      r->msg);
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
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	else
		printf("threads_check: all cases passed\n");
	return failures ? 1 : 0;
}
