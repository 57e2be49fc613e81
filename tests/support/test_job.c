/*
 * test_job.c - running a job (see test_job.h): its shared memory, the
 * ranks as forked processes or threads, supervising them against the
 * deadline, the watch, the report, and what the test process reads and
 * does while and after the ranks run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "procs.h"
#include "test_job_internal.h"

/* How a rank is started. */
struct tj_start {
	struct tj_job *job;
	struct tj_shared *sh;
	uint32_t rank;
	uint64_t deadline_ns;
	pthread_t th;
	bool started;
};

/* The test process's side of a run. */
struct tj_run {
	struct tj_shared *sh;
	bool threads;
	bool leaked;            /* threads left running keep the memory */
	pthread_mutex_t lock;   /* pid[] against tj_job_signal() */
	pid_t pid[TJ_MAX_RANKS]; /* 0 once reaped */
	atomic_bool ended[TJ_MAX_RANKS];
	struct tj_start start[TJ_MAX_RANKS];
	uint64_t deadline_ms;
	uint64_t grace_ms;
	pthread_t watch;
	bool watching;
};

static void *rank_thread(void *arg)
{
	struct tj_start *st = arg;

	tj__rank_main(st->job, st->sh, st->rank, st->deadline_ns);
	return NULL;
}

static struct tj_shared *shared_new(bool threads, size_t bytes)
{
	void *p;

	if (threads) {
		p = aligned_alloc(64, tj__round_up(bytes, 64));
		if (p != NULL)
			memset(p, 0, tj__round_up(bytes, 64));
		return p;
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void shared_free(struct tj_shared *sh, bool threads)
{
	if (sh == NULL)
		return;
	if (threads)
		free(sh);
	else
		munmap(sh, sh->bytes);
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

/* A line of the report ('\n' before every line but the first). */
static void report(struct tj_job *job, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void report(struct tj_job *job, const char *fmt, ...)
{
	size_t n = strlen(job->report);
	va_list ap;

	if (n > 0)
		append(job->report, sizeof job->report, "\n");
	n = strlen(job->report);
	if (n + 1 >= sizeof job->report)
		return;
	va_start(ap, fmt);
	vsnprintf(job->report + n, sizeof job->report - n, fmt, ap);
	va_end(ap);
}

static bool may_die(const struct tj_job *job, uint32_t r)
{
	return r < 32 && (job->may_die & (1u << r)) != 0;
}

/* Whether rank r ended as it should (valid once it ended). */
static bool ended_well(const struct tj_job *job, uint32_t r)
{
	const struct tj_slot *s = &job->run->sh->slot[r];
	int state = atomic_load(&s->state);

	if (state == TJ_FAILED || state == TJ_GAVE_UP)
		return false;
	if (job->run->threads)
		return state == TJ_DONE;
	if (s->signal == 0 && s->exit_code == 0 && state == TJ_DONE)
		return true;
	return may_die(job, r);
}

/* Rank r's process ended with wait status `ws`. */
static void reaped(struct tj_job *job, uint32_t r, int ws, bool known)
{
	struct tj_run *run = job->run;
	struct tj_slot *s = &run->sh->slot[r];

	pthread_mutex_lock(&run->lock);
	run->pid[r] = 0;
	if (known && WIFSIGNALED(ws)) {
		s->signal = WTERMSIG(ws);
	} else if (known && WIFEXITED(ws)) {
		s->exit_code = WEXITSTATUS(ws);
	} else {
		s->exit_code = -1;
	}
	atomic_store(&run->ended[r], true);
	pthread_mutex_unlock(&run->lock);
	if (!ended_well(job, r))
		atomic_store(&run->sh->abort, 1);
}

static void kill_all(struct tj_job *job, int cut)
{
	struct tj_run *run = job->run;
	uint32_t i;

	pthread_mutex_lock(&run->lock);
	for (i = 0; i < job->size; i++)
		if (run->pid[i] > 0) {
			run->sh->slot[i].cut = cut;
			kill(run->pid[i], SIGKILL);
		}
	pthread_mutex_unlock(&run->lock);
}

static uint32_t ended_count(const struct tj_job *job)
{
	uint32_t i, n = 0;

	for (i = 0; i < job->size; i++)
		n += atomic_load(&job->run->ended[i]);
	return n;
}

/* Processes: reap them, killing what is left at the deadline or
 * grace_ms after a rank failed. */
static void supervise_processes(struct tj_job *job, uint64_t deadline)
{
	struct tj_run *run = job->run;
	uint64_t now, kill_at = 0, reap_until = 0;
	bool killed = false;
	uint32_t i;
	pid_t w;
	int ws;

	while (ended_count(job) < job->size) {
		for (i = 0; i < job->size; i++) {
			if (atomic_load(&run->ended[i]) || run->pid[i] <= 0)
				continue;
			w = waitpid(run->pid[i], &ws, WNOHANG);
			if (w == run->pid[i])
				reaped(job, i, ws, true);
			else if (w < 0 && errno == ECHILD)
				reaped(job, i, 0, false);
		}
		if (ended_count(job) == job->size)
			break;
		now = dpl_clock_ns();
		if (atomic_load(&run->sh->abort) && kill_at == 0)
			kill_at = now + run->grace_ms * TJ_MS;
		if (!killed && now >= deadline) {
			job->timed_out = true;
			atomic_store(&run->sh->abort, 1);
			kill_all(job, TJ_CUT_DEADLINE);
			killed = true;
		} else if (!killed && kill_at != 0 && now >= kill_at) {
			kill_all(job, TJ_CUT_GRACE);
			killed = true;
		}
		if (killed && reap_until == 0)
			reap_until = now + 10000 * TJ_MS;
		if (reap_until != 0 && now > reap_until)
			break; /* not reaped 10 s after SIGKILL */
		tj__sleep_us(1000);
	}
}

/* Threads: wait for them until the deadline, or grace_ms after a rank
 * failed; those still running then are left running. */
static void supervise_threads(struct tj_job *job, uint64_t deadline)
{
	struct tj_run *run = job->run;
	uint64_t now, kill_at = 0;
	uint32_t i;
	int cut = TJ_CUT_NONE;

	for (;;) {
		for (i = 0; i < job->size; i++)
			if (atomic_load(&run->sh->slot[i].state) != TJ_RUNNING ||
			    !run->start[i].started)
				atomic_store(&run->ended[i], true);
		if (ended_count(job) == job->size)
			break;
		now = dpl_clock_ns();
		if (atomic_load(&run->sh->abort) && kill_at == 0)
			kill_at = now + run->grace_ms * TJ_MS;
		if (now >= deadline) {
			job->timed_out = true;
			cut = TJ_CUT_DEADLINE;
			break;
		}
		if (kill_at != 0 && now >= kill_at) {
			cut = TJ_CUT_GRACE;
			break;
		}
		tj__sleep_us(1000);
	}
	atomic_store(&run->sh->abort, 1);
	for (i = 0; i < job->size; i++) {
		struct tj_slot *s = &run->sh->slot[i];

		if (!run->start[i].started)
			continue;
		if (atomic_load(&run->ended[i])) {
			pthread_join(run->start[i].th, NULL);
			s->exit_code = atomic_load(&s->state) == TJ_DONE ? 0 : 1;
			continue;
		}
		s->cut = cut;
		pthread_detach(run->start[i].th);
		run->leaked = true;
	}
}

static const char *cut_words(const struct tj_job *job, int cut, char *buf,
			     size_t size)
{
	switch (cut) {
	case TJ_CUT_WATCH:
		return ", sent by the watch";
	case TJ_CUT_DEADLINE:
		snprintf(buf, size, " at the job's deadline of %llu ms",
			 (unsigned long long)job->run->deadline_ms);
		return buf;
	case TJ_CUT_GRACE:
		snprintf(buf, size, ", %llu ms after another rank failed",
			 (unsigned long long)job->run->grace_ms);
		return buf;
	default:
		return "";
	}
}

static void build_report(struct tj_job *job)
{
	struct tj_run *run = job->run;
	char when[96];
	uint32_t i;

	for (i = 0; i < job->size; i++) {
		const struct tj_slot *s = &run->sh->slot[i];
		int state = atomic_load(&s->state);

		if (state == TJ_FAILED) {
			report(job, "rank %u: %s%s%s", i, s->where,
			       s->where[0] != '\0' ? ": " : "", s->msg);
			continue;
		}
		if (state == TJ_GAVE_UP)
			continue;
		if (!atomic_load(&run->ended[i])) {
			if (run->threads)
				report(job, "rank %u: still running%s (a "
				       "thread cannot be killed); last step: "
				       "%s",
				       i, cut_words(job, s->cut, when,
						    sizeof when),
				       s->step);
			else
				report(job, "rank %u: not reaped 10 s after "
				       "SIGKILL; last step: %s",
				       i, s->step);
			continue;
		}
		if (ended_well(job, i))
			continue;
		if (s->signal != 0)
			report(job, "rank %u: killed by signal %d (%s)%s; "
			       "last step: %s",
			       i, s->signal, strsignal(s->signal),
			       cut_words(job, s->cut, when, sizeof when),
			       s->step);
		else if (s->exit_code < 0)
			report(job, "rank %u: reaped by someone else; last "
			       "step: %s",
			       i, s->step);
		else
			report(job, "rank %u: exited with %d %s it finished; "
			       "last step: %s",
			       i, s->exit_code,
			       state == TJ_DONE ? "after" : "before", s->step);
	}
	for (i = 0; i < job->size; i++) {
		const struct tj_slot *s = &run->sh->slot[i];

		if (atomic_load(&s->state) == TJ_GAVE_UP)
			report(job, "(rank %u %s; last step: %s)", i, s->msg,
			       s->step);
	}
}

static void *watch_thread(void *arg)
{
	struct tj_job *job = arg;

	job->watch(job);
	return NULL;
}

/* Rank r could not be started: its slot says why. */
static void not_started(struct tj_job *job, uint32_t r, const char *what)
{
	struct tj_slot *s = &job->run->sh->slot[r];

	snprintf(s->msg, sizeof s->msg, "could not be started: %s: %s", what,
		 strerror(errno));
	atomic_store(&s->state, TJ_FAILED);
	atomic_store(&job->run->sh->abort, 1);
	atomic_store(&job->run->ended[r], true);
}

/* DPL_JOB_SECRET := 64 random hex digits, for this process and the ranks
 * it starts; false when no random bytes could be had. */
static bool job_secret_set(void)
{
	unsigned char b[32];
	char hex[65];

	if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
		return false;
	for (size_t i = 0; i < sizeof b; i++)
		snprintf(hex + 2 * i, 3, "%02x", b[i]);
	return setenv("DPL_JOB_SECRET", hex, 0) == 0;
}

int tj_job_run(struct tj_job *job)
{
	struct tj_shared *sh;
	struct tj_run *run;
	uint64_t start, deadline, margin;
	size_t off;
	bool failed_start = false;
	pid_t parent = getpid(), pid;
	uint32_t i;

	tj_job_free(job);
	job->report[0] = '\0';
	job->meet_used[0] = '\0';
	job->timed_out = false;
	if (job->size < 1 || job->size > TJ_MAX_RANKS || job->fn == NULL) {
		report(job, "test_job: a job of %u ranks (1..%d) and %s rank "
		       "function",
		       job->size, TJ_MAX_RANKS, job->fn ? "a" : "no");
		return DPL_EINVAL;
	}
	run = calloc(1, sizeof *run);
	off = tj__round_up(sizeof *sh, 64);
	sh = shared_new(job->mode == TJ_THREADS, off + job->user_size);
	if (run == NULL || sh == NULL) {
		report(job, "test_job: out of memory for a job with %zu bytes "
		       "of user memory",
		       job->user_size);
		free(run);
		shared_free(sh, job->mode == TJ_THREADS);
		return DPL_ENOMEM;
	}
	run->sh = sh;
	run->threads = job->mode == TJ_THREADS;
	run->deadline_ms = job->deadline_ms ? job->deadline_ms : 60000;
	run->grace_ms = job->grace_ms ? job->grace_ms : 3000;
	pthread_mutex_init(&run->lock, NULL);
	job->run = run;
	sh->size = job->size;
	sh->mode = job->mode;
	sh->kind = job->meet_kind != TJ_MEET_DEFAULT ? job->meet_kind
		   : run->threads			 ? TJ_MEET_NAME
							 : TJ_MEET_BOOTSTRAP;
	sh->bytes = off + job->user_size;
	sh->user_size = job->user_size;
	sh->user_off = off;
	if (job->meet != NULL) {
		snprintf(sh->meet, sizeof sh->meet, "%s", job->meet);
	} else if (tj_meet_make(sh->kind, sh->meet, sizeof sh->meet) != 0) {
		report(job, "test_job: no free port on 127.0.0.1: %s",
		       strerror(errno));
		return DPL_EIO;
	}
	snprintf(job->meet_used, sizeof job->meet_used, "%s", sh->meet);
	/* The job's host gives its ranks a secret, as a launcher does,
	 * unless the test chose one (or chose none) itself. */
	if (getenv("DPL_JOB_SECRET") == NULL && !job_secret_set()) {
		report(job, "test_job: no random bytes for the job secret: %s",
		       strerror(errno));
		return DPL_EIO;
	}

	/* Ranks give up a little before the job's deadline kills them. */
	margin = run->deadline_ms / 4 < 1000 ? run->deadline_ms / 4 : 1000;
	start = dpl_clock_ns();
	deadline = start + run->deadline_ms * TJ_MS;
	fflush(NULL);
	for (i = 0; i < job->size; i++) {
		struct tj_start *st = &run->start[i];

		st->job = job;
		st->sh = sh;
		st->rank = i;
		st->deadline_ns = deadline - margin * TJ_MS;
		if (failed_start) {
			not_started(job, i, "an earlier rank failed to start");
			continue;
		}
		if (run->threads) {
			errno = pthread_create(&st->th, NULL, rank_thread, st);
			st->started = errno == 0;
			if (!st->started) {
				not_started(job, i, "pthread_create");
				failed_start = true;
			}
			continue;
		}
		pid = fork();
		if (pid < 0) {
			not_started(job, i, "fork");
			failed_start = true;
			continue;
		}
		if (pid == 0) {
			if (!dies_with_parent(parent))
				_exit(3);
			tj__rank_main(job, sh, i, st->deadline_ns);
			fflush(NULL);
			_exit(0);
		}
		st->started = true;
		sh->slot[i].pid = pid;
		pthread_mutex_lock(&run->lock);
		run->pid[i] = pid;
		pthread_mutex_unlock(&run->lock);
	}
	if (job->watch != NULL)
		run->watching =
			pthread_create(&run->watch, NULL, watch_thread, job) == 0;
	if (run->threads)
		supervise_threads(job, deadline);
	else
		supervise_processes(job, deadline);
	atomic_store(&sh->over, 1);
	if (run->watching)
		pthread_join(run->watch, NULL);
	if (job->watch != NULL && !run->watching)
		report(job, "test_job: the watch could not be started");
	build_report(job);
	if (failed_start)
		return DPL_EIO;
	return job->report[0] != '\0' ? 1 : 0;
}

void tj_job_free(struct tj_job *job)
{
	struct tj_run *run = job->run;

	if (run == NULL)
		return;
	job->run = NULL;
	if (run->leaked)
		return; /* threads still running use it */
	pthread_mutex_destroy(&run->lock);
	shared_free(run->sh, run->threads);
	free(run);
}

const struct tj_slot *tj_job_slot(const struct tj_job *job, uint32_t r)
{
	if (job->run == NULL || r >= job->size)
		return NULL;
	return &job->run->sh->slot[r];
}

int tj_job_exit(const struct tj_job *job, uint32_t r)
{
	const struct tj_slot *s = tj_job_slot(job, r);

	if (s == NULL || !atomic_load(&job->run->ended[r]))
		return INT_MIN;
	if (job->run->threads)
		return atomic_load(&s->state) == TJ_DONE ? 0 : 1;
	return s->signal != 0 ? -s->signal : s->exit_code;
}

void *tj_job_user(const struct tj_job *job)
{
	if (job->run == NULL || job->run->sh->user_size == 0)
		return NULL;
	return (unsigned char *)job->run->sh + job->run->sh->user_off;
}

int64_t tj_job_flag(const struct tj_job *job, unsigned i)
{
	if (job->run == NULL)
		return 0;
	return atomic_load(&job->run->sh->flag[i % TJ_FLAGS]);
}

void tj_job_flag_set(struct tj_job *job, unsigned i, int64_t v)
{
	if (job->run != NULL)
		atomic_store(&job->run->sh->flag[i % TJ_FLAGS], v);
}

bool tj_job_flag_wait(struct tj_job *job, unsigned i, int64_t v,
		      unsigned ms)
{
	uint64_t end = dpl_clock_ns() + ms * TJ_MS;

	if (job->run == NULL)
		return false;
	for (;;) {
		if (atomic_load(&job->run->sh->flag[i % TJ_FLAGS]) >= v)
			return true;
		if (atomic_load(&job->run->sh->over) ||
		    ended_count(job) == job->size || dpl_clock_ns() > end)
			return false;
		tj__sleep_us(200);
	}
}

pid_t tj_job_pid(const struct tj_job *job, uint32_t r)
{
	pid_t pid;

	if (job->run == NULL || r >= job->size || job->run->threads)
		return 0;
	pthread_mutex_lock(&job->run->lock);
	pid = job->run->pid[r];
	pthread_mutex_unlock(&job->run->lock);
	return pid;
}

int tj_job_signal(struct tj_job *job, uint32_t r, int sig)
{
	struct tj_run *run = job->run;
	int rc = 0;

	if (run == NULL || r >= job->size)
		return DPL_EINVAL;
	if (run->threads)
		return DPL_ENOTSUP;
	pthread_mutex_lock(&run->lock);
	if (run->pid[r] <= 0) {
		rc = DPL_EINVAL;
	} else {
		if (sig != 0 && sig != SIGSTOP && sig != SIGCONT)
			run->sh->slot[r].cut = TJ_CUT_WATCH;
		if (kill(run->pid[r], sig) != 0)
			rc = DPL_EINVAL;
	}
	pthread_mutex_unlock(&run->lock);
	return rc;
}

bool tj_job_ended(struct tj_job *job, uint32_t r, unsigned ms)
{
	uint64_t end = dpl_clock_ns() + ms * TJ_MS;

	if (job->run == NULL || r >= job->size)
		return false;
	while (!atomic_load(&job->run->ended[r])) {
		if (atomic_load(&job->run->sh->over) || dpl_clock_ns() > end)
			return false;
		tj__sleep_us(200);
	}
	return true;
}
