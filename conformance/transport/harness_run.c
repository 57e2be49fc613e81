/*
 * harness_run.c - launching a job: its shared world, the ranks as forked
 * processes (watched by a supervisor that kills them at the deadline) or
 * as threads, and the report of what each rank did, turned into the
 * Criterion test's failure.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_internal.h"

struct start {
	struct conf_world *w;
	struct conf_job *job;
	uint32_t rank;
	uint64_t deadline_ns;
	pthread_t th;
};

static void rank_main(struct start *st)
{
	struct conf_rank rk;
	uint32_t n;

	memset(&rk, 0, sizeof rk);
	rk.w = st->w;
	rk.rank = st->rank;
	rk.size = st->job->size;
	rk.ops = conf_ops();
	rk.arg = st->job->arg;
	rk.deadline_ns = st->deadline_ns;
	if (!st->job->no_open)
		conf_open(&rk);
	conf_step(&rk, "running");
	st->job->fn(&rk);
	conf__oob_check(&rk);
	if (rk.t != NULL) {
		/* Nobody closes while a peer may still need its progress. */
		n = __builtin_popcount(st->job->may_die & ((1u << rk.size) - 1));
		conf_step(&rk, "final barrier");
		conf_barrier_n(&rk, rk.size - n);
		conf_close(&rk);
	}
	conf__free_all(&rk);
	atomic_store(&rk.w->slot[rk.rank].state, CONF_ST_DONE);
}

static void *rank_thread(void *arg)
{
	rank_main(arg);
	return NULL;
}

static struct conf_world *world_new(bool threads)
{
	struct conf_world *w;

	if (threads) {
		w = calloc(1, sizeof *w);
		cr_assert_not_null(w, "out of memory");
		return w;
	}
	w = mmap(NULL, sizeof *w, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(w, MAP_FAILED, "mmap of the shared world: %s",
		      strerror(errno));
	return w;
}

static void world_free(struct conf_world *w, bool threads)
{
	if (threads)
		free(w);
	else
		munmap(w, sizeof *w);
}

/* Supervise forked ranks; returns per-rank wait statuses in st[]. */
static void supervise(struct conf_world *w, const struct conf_job *job,
		      pid_t *pid, int *status, uint64_t deadline,
		      bool *timed_out)
{
	uint32_t i, left = job->size;
	uint64_t kill_at = 0;
	int s;

	*timed_out = false;
	while (left > 0) {
		for (i = 0; i < job->size; i++) {
			if (pid[i] <= 0)
				continue;
			if (waitpid(pid[i], &s, WNOHANG) != pid[i])
				continue;
			status[i] = s;
			pid[i] = 0;
			left--;
			if (WIFEXITED(s) && WEXITSTATUS(s) == 0)
				continue;
			if (WIFSIGNALED(s) && WTERMSIG(s) == SIGKILL &&
			    (job->may_die & (1u << i)))
				continue;
			atomic_store(&w->abort, 1);
		}
		if (left == 0)
			break;
		if (dpl_clock_ns() > deadline && kill_at == 0) {
			*timed_out = true;
			atomic_store(&w->abort, 1);
			kill_at = dpl_clock_ns() + CONF_GRACE_NS;
		}
		if (atomic_load(&w->abort) && kill_at == 0)
			kill_at = dpl_clock_ns() + CONF_GRACE_NS;
		if (kill_at != 0 && dpl_clock_ns() > kill_at) {
			for (i = 0; i < job->size; i++)
				if (pid[i] > 0)
					kill(pid[i], SIGKILL);
			kill_at = UINT64_MAX;
		}
		conf__sleep_us(2000);
	}
}

static void append(char *buf, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t size, const char *fmt, ...)
{
	size_t n = strlen(buf);
	va_list ap;

	if (n + 1 >= size)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + n, size - n, fmt, ap);
	va_end(ap);
}

void conf_run(struct conf_job *job)
{
	const struct dpl_transport_ops *ops = conf_ops();
	bool threads = conf_threads();
	struct start st[CONF_MAX_RANKS];
	pid_t pid[CONF_MAX_RANKS];
	int status[CONF_MAX_RANKS];
	struct conf_world *w;
	char report[4096] = "";
	uint64_t deadline;
	unsigned dl = job->deadline_s ? job->deadline_s : 60;
	bool timed_out = false;
	uint32_t i;
	int s;

	cr_assert(job->size >= 1 && job->size <= CONF_MAX_RANKS,
		  "harness: job of %u ranks", job->size);
	w = world_new(threads);
	w->size = job->size;
	if (job->boot != NULL)
		snprintf(w->boot, sizeof w->boot, "%s", job->boot);
	else
		cr_assert_eq(conf__make_boot(w->boot, sizeof w->boot), 0,
			     "no free port on 127.0.0.1: %s",
			     strerror(errno));
	snprintf(job->boot_used, sizeof job->boot_used, "%s", w->boot);
	conf__set_job_timeout_ms(job->timeout_ms ? job->timeout_ms
						 : conf_timeout_ms());
	deadline = dpl_clock_ns() + (uint64_t)dl * 1000000000ull;
	for (i = 0; i < job->size; i++) {
		st[i].w = w;
		st[i].job = job;
		st[i].rank = i;
		/* Ranks give up a little before the supervisor does. */
		st[i].deadline_ns = deadline - 1000000000ull;
		status[i] = 0;
		pid[i] = 0;
	}
	fflush(NULL);
	if (threads) {
		for (i = 0; i < job->size; i++)
			cr_assert_eq(pthread_create(&st[i].th, NULL,
						    rank_thread, &st[i]),
				     0, "pthread_create");
		for (;;) {
			uint32_t fin = 0;

			for (i = 0; i < job->size; i++)
				fin += atomic_load(&w->slot[i].state) !=
				       CONF_ST_RUNNING;
			if (fin == job->size)
				break;
			if (dpl_clock_ns() > deadline + CONF_GRACE_NS) {
				timed_out = true;
				break;
			}
			conf__sleep_us(1000);
		}
		if (!timed_out)
			for (i = 0; i < job->size; i++)
				pthread_join(st[i].th, NULL);
	} else {
		pid_t parent = getpid();

		for (i = 0; i < job->size; i++) {
			pid[i] = fork();
			cr_assert_geq(pid[i], 0, "fork: %s", strerror(errno));
			if (pid[i] == 0) {
				prctl(PR_SET_PDEATHSIG, SIGKILL);
				if (getppid() != parent)
					_exit(3);
				rank_main(&st[i]);
				_exit(0);
			}
		}
		supervise(w, job, pid, status, deadline, &timed_out);
	}

	for (i = 0; i < job->size; i++) {
		struct conf_slot *sl = &w->slot[i];

		memcpy(job->val[i], sl->val, sizeof job->val[i]);
		if (sl->note[0] != '\0')
			cr_log_info("%s rank %u: %s", ops->name, i, sl->note);
		s = atomic_load(&sl->state);
		if (s == CONF_ST_FAILED) {
			append(report, sizeof report, "\n  rank %u: %s", i,
			       sl->msg);
		}
	}
	for (i = 0; i < job->size && !threads; i++) {
		s = status[i];
		if (atomic_load(&w->slot[i].state) == CONF_ST_DONE ||
		    atomic_load(&w->slot[i].state) == CONF_ST_FAILED ||
		    atomic_load(&w->slot[i].state) == CONF_ST_GAVE_UP)
			continue;
		if (WIFSIGNALED(s) && WTERMSIG(s) == SIGKILL &&
		    (job->may_die & (1u << i)))
			continue;
		if (WIFSIGNALED(s))
			append(report, sizeof report,
			       "\n  rank %u: killed by signal %d (%s)%s; last "
			       "step: %s",
			       i, WTERMSIG(s), strsignal(WTERMSIG(s)),
			       timed_out ? " after the job's deadline" : "",
			       w->slot[i].step);
		else
			append(report, sizeof report,
			       "\n  rank %u: exited with %d; last step: %s", i,
			       WEXITSTATUS(s), w->slot[i].step);
	}
	if (threads && timed_out)
		for (i = 0; i < job->size; i++)
			if (atomic_load(&w->slot[i].state) == CONF_ST_RUNNING) {
				append(report, sizeof report,
				       "\n  rank %u: still running after the "
				       "job's deadline of %u s; last step: %s",
				       i, dl, w->slot[i].step);
			}
	for (i = 0; i < job->size; i++)
		if (atomic_load(&w->slot[i].state) == CONF_ST_GAVE_UP)
			append(report, sizeof report,
			       "\n  (rank %u %s; last step: %s)", i,
			       w->slot[i].msg, w->slot[i].step);
	if (report[0] != '\0') {
		if (!threads || !timed_out)
			world_free(w, threads);
		cr_assert_fail("%s (bootstrap '%s'):%s", ops->name,
			       job->boot_used, report);
	}
	world_free(w, threads);
}
