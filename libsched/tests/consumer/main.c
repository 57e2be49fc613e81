/* Builds, lowers, validates and simulates a schedule through the installed
 * headers and library; exits 0 only when the results are the known ones. */
#include <stdio.h>

#include <dpl/dpl.h>

int main(void)
{
	struct dpl_schedule_params p = {.stages = 4, .microbatches = 8,
					.policy = DPL_POLICY_1F1B};
	struct dpl_sim_summary sum;
	dpl_schedule *s;
	dpl_sim *sim;

	if (dpl_schedule_build(&p, &s) || dpl_schedule_lower(s) ||
	    dpl_schedule_validate(s, NULL) || dpl_sim_run(s, NULL, &sim)) {
		fprintf(stderr, "consumer: %s\n", dpl_last_error());
		return 1;
	}
	dpl_sim_summary(sim, &sum);
	printf("dpl %s: makespan %g\n", dpl_version(), sum.makespan);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
	return sum.makespan == 33.0 ? 0 : 1;
}
