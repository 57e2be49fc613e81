/*
 * train_threads.c - `dpl train` with every rank a thread of this process
 * over the in-process transport: start them, show progress on a
 * terminal, collect the results from the ranks' runners and models, and
 * write the --trace file.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <dpl/dpl.h>
#if defined(DPL_HAVE_DEVICE_CPU)
#include <dpl/model_mlp.h>
#endif

#include "cli.h"
#include "train.h"

/* One rank's thread: set up, wait for the others, train. */
static void *rank_main(void *arg)
{
	struct train_rank *k = arg;
	struct train_job *J = k->J;

	if (train_rank_setup(k, NULL) != 0)
		atomic_store(&J->setup_failed, 1);
	pthread_barrier_wait(&J->bar);
	train_rank_loop(k);
	atomic_fetch_add(&J->finished, 1);
	return NULL;
}

#if defined(DPL_HAVE_DEVICE_CPU)
/* The model of layer l's stage on replica 0 of its pipeline rank. */
static struct train_rank *owner(const struct train_job *J,
				struct train_rank *ranks, uint32_t layer)
{
	uint32_t s, p, base = 0;

	p = dpl_schedule_stage_rank(J->sched, train_layer_stage(J, layer));
	for (s = 0; s < p; s++)
		base += J->reps[s];
	return &ranks[base];
}
#endif

/* On a terminal: a bar of the steps done, until every rank is done. */
static void progress_bar(struct train_job *J)
{
	unsigned total = J->o.iterations * J->world, done;
	struct timespec ts = {0, 100000000};
	int w = 30, n;

	for (;;) {
		done = atomic_load(&J->progress);
		n = (int)((uint64_t)done * (unsigned)w / total);
		fprintf(stderr, "\r  training [%.*s%*s] %u/%u", n,
			"##############################", w - n, "",
			done / J->world, J->o.iterations);
		if (done >= total || atomic_load(&J->finished) == J->world)
			break;
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "\r%*s\r", w + 30, "");
}

/* The Chrome trace of every rank's last iteration into --trace. */
static int write_trace(const struct train_job *J, struct train_rank *ranks)
{
	const dpl_runner **rs = calloc(J->world, sizeof *rs);
	struct cli_out out;
	uint32_t i;
	int rc;

	if (rs == NULL)
		return cli_fail(CMD, "out of memory");
	for (i = 0; i < J->world; i++)
		rs[i] = ranks[i].r;
	if ((rc = cli_out_open(CMD, J->o.trace_path, &out)) != 0) {
		free(rs);
		return rc;
	}
	if (dpl_runner_write_traces(rs, J->world, out.f) != 0) {
		free(rs);
		return cli_out_fail(&out, dpl_last_error());
	}
	free(rs);
	return cli_out_commit(CMD, &out);
}

int train_threads(struct train_job *J, struct train_result *R)
{
	struct train_rank *ranks = calloc(J->world, sizeof *ranks);
	pthread_t *th = calloc(J->world, sizeof *th);
	struct train_layer *v = calloc(J->layers + 1, sizeof *v);
	uint64_t t0 = UINT64_MAX, t1 = 0;
	uint32_t i, p, s, failed = 0;
	int rc = train_cuda_transport(J, J->tops->name, J->tops->caps);

	if (rc != CLI_OK || ranks == NULL || th == NULL || v == NULL) {
		free(ranks);
		free(th);
		free(v);
		return rc != CLI_OK ? rc : cli_fail(CMD, "out of memory");
	}
	snprintf(J->world_name, sizeof J->world_name, "dpl-train-%ld",
		 (long)getpid());
	pthread_barrier_init(&J->bar, NULL, J->world);
	for (i = 0, p = 0; p < J->ranks; p++)
		for (s = 0; s < J->reps[p]; s++, i++) {
			ranks[i].J = J;
			ranks[i].rank = i;
			ranks[i].prank = p;
			ranks[i].replica = s;
		}
	for (i = 0; i < J->world; i++)
		if (pthread_create(&th[i], NULL, rank_main, &ranks[i]) != 0) {
			fprintf(stderr, "dpl train: cannot start thread %u\n",
				i);
			exit(CLI_FAIL);
		}
	if (isatty(STDERR_FILENO) && !J->o.json)
		progress_bar(J);
	for (i = 0; i < J->world; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&J->bar);
	for (i = 0; i < J->world; i++) {
		if (ranks[i].rc != 0) {
			fprintf(stderr, "dpl train: %s\n", ranks[i].msg);
			failed++;
		}
		t0 = ranks[i].t0 < t0 ? ranks[i].t0 : t0;
		t1 = ranks[i].t1 > t1 ? ranks[i].t1 : t1;
	}
	if (failed) {
		rc = cli_fail(CMD, "%u of %u ranks failed", failed,
			      J->world);
		goto out;
	}
	R->seconds = (double)(t1 - t0) / 1e9;
	R->samples_per_s = (double)J->o.batch * J->o.iterations / R->seconds;
	train_finish_results(J, R);
	for (s = 0; s < J->nstages; s++) {
		struct dpl_runner_stage_stats ss;
		uint32_t base = 0;

		p = dpl_schedule_stage_rank(J->sched, s);
		for (i = 0; i < p; i++)
			base += J->reps[i];
		if (dpl_runner_stage_stats(ranks[base].r, s, &ss) == 0) {
			R->peak[s] = ss.peak_inflight;
			R->peak_bytes[s] = ss.peak_buffer_bytes;
		}
	}
#if defined(DPL_HAVE_DEVICE_CPU)
	for (i = 0; !J->o.synthetic && i < J->layers; i++) {
		struct dpl_mlp_view mv;

		if (train_layer_view(owner(J, ranks, i), i, &mv) == 0) {
			v[i].w = mv.w;
			v[i].nw = mv.nw;
			v[i].b = mv.b;
			v[i].nb = mv.nb;
		}
	}
#endif
	if ((rc = train_weights_results(J, v, R)) != CLI_OK)
		goto out;
	if (J->o.trace_path)
		rc = write_trace(J, ranks);
out:
	/* Runners first, then the transports: leaving is a failure to the
	 * ranks still there. */
	for (i = 0; i < J->world; i++)
		dpl_runner_destroy(ranks[i].r);
	for (i = 0; i < J->world; i++) {
		dpl_transport_close(ranks[i].t);
		train_model_destroy(&ranks[i]);
		dpl_device_close(ranks[i].dev);
	}
	free(ranks);
	free(th);
	free(v);
	return rc;
}
