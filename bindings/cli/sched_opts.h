/*
 * sched_opts.h - the flags `dpl schedule` and `dpl simulate` share to
 * build a schedule: --stages, --microbatches, --policy, --chunks, --cap,
 * --cap-bytes with --act-bytes, --costs; the byte budget (struct
 * sched_bytes), which `dpl train` shares too; loading a schedule file.
 */
#ifndef DPL_CLI_SCHED_OPTS_H
#define DPL_CLI_SCHED_OPTS_H

#include <dpl/dpl.h>

#include "cli.h"

/* Largest stage and micro-batch counts the CLI accepts. */
#define CLI_MAX_STAGES 4096u
#define CLI_MAX_MICROBATCHES (1u << 20)

/*
 * A byte budget as given: --cap-bytes B | B0,B1,... (bytes of activations
 * each stage may keep) with the bytes of one micro-batch's activations of
 * every stage (one value or one per stage). `dpl schedule` and `dpl
 * simulate` take those sizes as --act-bytes; `dpl train`, whose
 * --act-bytes is the synthetic device's bytes per sample, as
 * --cap-act-bytes. Values are >= 1. The text pointers are argv's.
 */
struct sched_bytes {
	uint64_t *cap; /* NULL: --cap-bytes not given */
	size_t ncap;
	const char *cap_text;
	uint64_t *act; /* NULL: no sizes given */
	size_t nact;
	const char *act_text;
};

struct sched_opts {
	uint32_t stages, microbatches, chunks;
	bool have_stages, have_microbatches, have_policy;
	enum dpl_policy policy;
	uint32_t *cap;  /* one per stage, or NULL */
	size_t ncap;
	uint32_t cap_all;
	bool have_costs;
	struct dpl_stage_cost costs; /* --costs F,B[,I,W] */
	struct sched_bytes bytes;    /* --cap-bytes, --act-bytes */
	double transfer;             /* --transfer T (zb-auto), 0 = free */
	unsigned uses;               /* SCHED_USE_*: what the caller does
					with the built schedule (the size
					estimate of sched_opts_build) */
};

/* What a command does with a schedule after building it, for its size
 * estimate: lower it (sends, receives, REDUCE_GRAD, STEP), simulate it. */
#define SCHED_USE_LOWER 1u
#define SCHED_USE_SIM 2u
/* `uses` is exact; without it the estimate assumes lowering and a
 * simulation both (the most a command does). */
#define SCHED_USE_KNOWN 4u

/*
 * Bytes of memory per compute action (F, B, I, W) of a schedule: its
 * 12-byte action with the lists' growth, what lowering adds (the sends,
 * receives and their bookkeeping), and what a simulation keeps per action
 * (times, events, the timeline). Measured on dpl_schedule_build,
 * dpl_schedule_lower and dpl_sim_run (peak resident size over compute
 * actions, 1f1b, zb-h1 and interleaved, 2 to 4 million actions).
 */
#define SCHED_EST_BUILD_BYTES 16u
#define SCHED_EST_LOWER_BYTES 48u
#define SCHED_EST_SIM_BYTES 128u

/*
 * sched_estimate - refuse a schedule too large to build before building
 * it. The compute actions are F and B (and W where the policy splits B)
 * for every stage chunk and micro-batch: k * S * V * M with k = 2 or 3 and
 * V the model chunks per rank; the estimate is actions x the bytes above
 * for `uses` (SCHED_USE_*; without SCHED_USE_KNOWN, lowered and
 * simulated). The limit is the smallest of physical memory
 * (sysconf(_SC_PHYS_PAGES) x page size), RLIMIT_AS and RLIMIT_DATA.
 * CLI_OK when the estimate is under the limit; otherwise CLI_USAGE after
 * "dpl <cmd>: --stages S x --microbatches M (policy P) is too large:
 * about N GB for A actions (...), more than the L GB of <limit>". Pure apart from the message.
 */
int sched_estimate(const char *cmd, uint32_t stages, uint32_t microbatches,
		   enum dpl_policy policy, uint32_t chunks, unsigned uses);

/*
 * Consume argv[*i] when it is one of the shared flags: returns 1 when it
 * was (advancing *i), 0 when not, CLI_USAGE (negated: -CLI_USAGE) on a bad
 * value after printing the message.
 */
int sched_opts_take(const char *cmd, struct sched_opts *o, int argc,
		    char **argv, int *i);

/* Check the combination, the size estimate for o->uses (sched_estimate)
 * and build the compute-only schedule. CLI_OK, CLI_USAGE (bad
 * combination or too large, message printed) or CLI_FAIL. */
int sched_opts_build(const char *cmd, const struct sched_opts *o,
		     dpl_schedule **out);

void sched_opts_free(struct sched_opts *o);

/*
 * Consume argv[*i] when it is --cap-bytes or `act_flag` (the flag of the
 * per-micro-batch sizes: "--act-bytes" or "--cap-act-bytes"), into b:
 * returns 1 when it was (advancing *i), 0 when not, -CLI_USAGE after the
 * message for a bad value (empty item, not an integer, 0), -CLI_FAIL
 * when out of memory. A flag given twice is refused (cli_flag).
 */
int sched_bytes_take(const char *cmd, const char *act_flag,
		     struct sched_bytes *b, int argc, char **argv, int *i);

/*
 * Check a byte budget against the schedule it is for and expand it into
 * cap[0..stages) and act[0..stages) (the caller's arrays): CLI_OK with
 * *have true; CLI_OK with *have false when no --cap-bytes was given (and
 * no sizes either). CLI_USAGE after a one-line message naming the flag
 * and its value for: sizes without --cap-bytes, --cap-bytes for a policy
 * other than bounded and zb-auto, with --cap as well (`have_cap`), without
 * the sizes, or either list with neither one nor `stages` values.
 */
int sched_bytes_resolve(const char *cmd, const char *act_flag,
			const struct sched_bytes *b, enum dpl_policy policy,
			bool have_cap, uint32_t stages, uint64_t *cap,
			uint64_t *act, bool *have);

/* Free what sched_bytes_take() allocated; b stays reusable. */
void sched_bytes_free(struct sched_bytes *b);

/* Usage lines for the shared flags. */
void sched_opts_usage(FILE *f);

/*
 * Load a schedule file: JSON (dpl's) when its first character after white
 * space is '{', CSV (PyTorch's compute-only format or dpl's lowered one)
 * otherwise. CLI_USAGE after "dpl <cmd>: <path>: <reason>" when it cannot
 * be read or parsed (the reason names the line, or the JSON path).
 */
int sched_load_file(const char *cmd, const char *path, dpl_schedule **out);

#endif
