/*
 * toy_world.h - a world of ranks as threads running the runner over the
 * in-process transport with "toy" stage callbacks that check every value
 * they receive: activations and gradients carry (iteration, sample,
 * element, stage) encoded as exact doubles, and weight gradients are sums
 * of known integers, so a wrong split, concat, order or reduction shows
 * up as a counted error. Shared by the runner tests.
 */
#ifndef TOY_WORLD_H
#define TOY_WORLD_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/dpl.h>
#include <dpl/transport_inproc.h>

#define TOY_MAX_RANKS 16
#define TOY_MAX_STAGES 16
#define TOY_K 3   /* doubles per sample in activations */
#define TOY_G 5   /* gradient elements per stage */
#define TOY_ITERS_MAX 8

struct toy_cfg {
	const char *world;       /* transport world name */
	enum dpl_policy policy;
	uint32_t stages;         /* S (ranks for interleaved) */
	uint32_t microbatches;
	uint32_t chunks;
	uint32_t cap;
	uint32_t replicas[TOY_MAX_RANKS]; /* per pipeline rank; 0 = 1 */
	uint64_t batch;
	uint32_t iterations;
	uint32_t timeout_ms;
	int fail_rank;           /* forward fails there at fail_iter */
	uint32_t fail_iter;
	int silent_rank;         /* never steps */
	int leave_rank;          /* leaves (closes its transport) at once */
	size_t trace_capacity;
	const struct dpl_transport_ops *ops; /* NULL: dpl_transport_inproc */
	const char *options;     /* the transport's, or NULL */
	bool overlap;            /* stage callbacks with an overlap member */
	uint32_t passes;         /* dpl_runner_forward() calls before each
				    step; their activations carry a 0.25
				    mark, and any other callback in them
				    counts as an error */
	bool fail_in_pass;       /* fail_rank fails in the pass, not the
				    step, of iteration fail_iter */
	bool pytorch_comms;      /* run the lowered schedule as written by
				    dpl_schedule_write_csv_comms (no STEP,
				    WAIT_SEND_* and WAIT_REDUCE_GRAD) and
				    read back */
};

struct toy_rank {
	uint32_t rank;
	int create_rc;
	int rc[TOY_ITERS_MAX];
	uint32_t steps_ok;
	uint32_t passes_ok;
	int pass_rc;             /* of the first pass that failed, else 0 */
	char msg[600];
	uint32_t cause;          /* dpl_runner_cause() after the run */
	int errors;
	char first_error[200];
	uint32_t peak[TOY_MAX_STAGES];
	uint32_t bound[TOY_MAX_STAGES];
	bool holds[TOY_MAX_STAGES];
	struct dpl_runner_stats st;
	uint64_t allocs_in_step; /* set by the allocation test */
	uint32_t overlaps;       /* overlap callbacks run */
	uint32_t steps_called;   /* step callbacks run, all stages */
	dpl_runner *runner;      /* kept when trace_capacity > 0 */
};

struct toy_world {
	struct toy_cfg cfg;
	dpl_schedule *sched;
	uint32_t world;
	uint32_t nstages;
	pthread_barrier_t bar;
	struct toy_rank res[TOY_MAX_RANKS];
	atomic_ullong samples_f[TOY_MAX_STAGES];
	atomic_ullong samples_b[TOY_MAX_STAGES];
	atomic_ullong samples_p[TOY_MAX_STAGES]; /* forwarded in passes */
};

/* Hooks for the allocation test: called around each dpl_runner_step. */
extern void (*toy_step_enter)(void);
extern uint64_t (*toy_step_leave)(void);

/* Run the world; 0, or the schedule error. */
int toy_run(struct toy_world *w);
void toy_free(struct toy_world *w);

#endif
