/*
 * sched_opts.h - the flags `dpl schedule`, `dpl simulate` and `dpl train`
 * share to build a schedule: --stages, --microbatches, --policy, --chunks,
 * --cap, --costs.
 */
#ifndef DPL_CLI_SCHED_OPTS_H
#define DPL_CLI_SCHED_OPTS_H

#include <dpl/dpl.h>

#include "cli.h"

/* Largest stage and micro-batch counts the CLI accepts. */
#define CLI_MAX_STAGES 4096u
#define CLI_MAX_MICROBATCHES (1u << 20)

struct sched_opts {
	uint32_t stages, microbatches, chunks;
	bool have_stages, have_microbatches, have_policy;
	enum dpl_policy policy;
	uint32_t *cap;  /* one per stage, or NULL */
	size_t ncap;
	uint32_t cap_all;
	bool have_costs;
	struct dpl_stage_cost costs; /* --costs F,B[,I,W] */
};

/*
 * Consume argv[*i] when it is one of the shared flags: returns 1 when it
 * was (advancing *i), 0 when not, CLI_USAGE (negated: -CLI_USAGE) on a bad
 * value after printing the message.
 */
int sched_opts_take(const char *cmd, struct sched_opts *o, int argc,
		    char **argv, int *i);

/* Check the combination and build the compute-only schedule. CLI_OK,
 * CLI_USAGE (bad combination, message printed) or CLI_FAIL. */
int sched_opts_build(const char *cmd, const struct sched_opts *o,
		     dpl_schedule **out);

void sched_opts_free(struct sched_opts *o);

/* Usage lines for the shared flags. */
void sched_opts_usage(FILE *f);

/* Load a schedule file: CSV (PyTorch format) or JSON (by content). */
int sched_load_file(const char *cmd, const char *path, dpl_schedule **out);

#endif
