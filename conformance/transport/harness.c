/*
 * harness.c - ranks, barriers, bounded waits and checks of the transport
 * conformance battery.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dpl/transport_load.h>

#include "harness.h"

/* Slot states. */
#define ST_RUNNING 0
#define ST_DONE 1
#define ST_FAILED 2
#define ST_GAVE_UP 3

/* How long ranks get to report after the supervisor gives up. */
#define GRACE_NS (3ull * 1000000000ull)

uint64_t conf_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void conf_sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void sleep_us(unsigned us)
{
	struct timespec ts = {0, (long)us * 1000L};

	nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------ */
/* Knobs from the environment                                          */

long conf_env_long(const char *name, long def, long min, long max)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (s == NULL || *s == '\0')
		return def;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		cr_assert_fail("%s='%s': expected an integer in [%ld, %ld]",
			       name, s, min, max);
	return v;
}

double conf_env_double(const char *name, double def)
{
	const char *s = getenv(name);
	char *end;
	double v;

	if (s == NULL || *s == '\0')
		return def;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || *end != '\0' || !(v >= 0))
		cr_assert_fail("%s='%s': expected a number >= 0", name, s);
	return v;
}

bool conf_threads(void)
{
	const char *s = getenv("DPL_CONF_RANKS");

	if (s == NULL || *s == '\0' || strcmp(s, "processes") == 0)
		return false;
	if (strcmp(s, "threads") == 0)
		return true;
	cr_assert_fail("DPL_CONF_RANKS='%s': expected processes or threads",
		       s);
	return false;
}

enum conf_boot conf_boot_kind(void)
{
	const char *s = getenv("DPL_CONF_BOOTSTRAP");

	if (s == NULL || *s == '\0' || strcmp(s, "tcp") == 0)
		return CONF_BOOT_TCP;
	if (strcmp(s, "name") == 0)
		return CONF_BOOT_NAME;
	cr_assert_fail("DPL_CONF_BOOTSTRAP='%s': expected tcp or name", s);
	return CONF_BOOT_TCP;
}

const char *conf_options(void)
{
	const char *s = getenv("DPL_CONF_OPTIONS");

	return s != NULL && *s != '\0' ? s : NULL;
}

uint32_t conf_timeout_ms(void)
{
	return (uint32_t)conf_env_long("DPL_CONF_TIMEOUT_MS", 10000, 100,
				       3600000);
}

/* ------------------------------------------------------------------ */
/* The table                                                           */

static const struct dpl_transport_ops *loaded;

const struct dpl_transport_ops *conf_ops(void)
{
	const char *path = getenv("DPL_CONF_TRANSPORT");
	const struct dpl_transport_ops *o;
	int rc;

	if (loaded != NULL)
		return loaded;
	if (path != NULL && *path != '\0') {
		rc = dpl_transport_load(path, &o);
		cr_assert_eq(rc, 0, "loading transport %s: %s: %s", path,
			     dpl_err_name(rc), dpl_last_error());
	} else {
		o = conf_linked_table();
		cr_assert_not_null(o, "no transport: pass --transport PATH.so "
				      "(or set DPL_CONF_TRANSPORT)");
	}
	loaded = o;
	return o;
}

bool conf_has(uint64_t cap)
{
	return (conf_ops()->caps & cap) == cap;
}

size_t conf_req_stride(const struct dpl_transport_ops *ops)
{
	size_t a = _Alignof(max_align_t);

	return (ops->req_size + a - 1) / a * a;
}

/* ------------------------------------------------------------------ */
/* Bootstrap strings                                                   */

static unsigned boot_counter;

/* A port that was free a moment ago on 127.0.0.1. */
static int free_port(void)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	int fd, port = -1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

int conf_make_root(char *buf, size_t size)
{
	int port = free_port();

	if (port <= 0)
		return -1;
	snprintf(buf, size, "127.0.0.1:%d", port);
	return 0;
}

static int make_boot(char *buf, size_t size)
{
	if (conf_boot_kind() == CONF_BOOT_NAME) {
		snprintf(buf, size, "dplconf-%d-%u-%llx", (int)getpid(),
			 ++boot_counter,
			 (unsigned long long)(conf_now_ns() & 0xffffffu));
		return 0;
	}
	return conf_make_root(buf, size);
}

/* ------------------------------------------------------------------ */
/* Rank reports                                                        */

static struct conf_slot *slot(struct conf_rank *rk)
{
	return &rk->w->slot[rk->rank];
}

static void free_all(struct conf_rank *rk)
{
	unsigned i;

	for (i = 0; i < rk->nmem; i++)
		free(rk->mem[i]);
	rk->nmem = 0;
}

static _Noreturn void rank_exit(struct conf_rank *rk, int code)
{
	if (conf_threads()) {
		free_all(rk);
		pthread_exit(NULL);
	}
	_exit(code);
}

static _Noreturn void fail_state(struct conf_rank *rk, int state,
				 const char *fmt, va_list ap)
{
	struct conf_slot *s = slot(rk);

	vsnprintf(s->msg, sizeof s->msg, fmt, ap);
	atomic_store(&s->state, state);
	atomic_store(&rk->w->abort, 1);
	rank_exit(rk, 1);
}

void conf_fail(struct conf_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fail_state(rk, ST_FAILED, fmt, ap);
}

static _Noreturn void give_up(struct conf_rank *rk, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static _Noreturn void give_up(struct conf_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fail_state(rk, ST_GAVE_UP, fmt, ap);
}

void conf_step(struct conf_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(slot(rk)->step, sizeof slot(rk)->step, fmt, ap);
	va_end(ap);
}

void conf_note(struct conf_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(slot(rk)->note, sizeof slot(rk)->note, fmt, ap);
	va_end(ap);
}

bool conf_aborted(struct conf_rank *rk)
{
	return atomic_load(&rk->w->abort) != 0;
}

/* ------------------------------------------------------------------ */
/* Checked calls                                                       */

static bool known_code(int rc)
{
	if (rc == 0 || rc == DPL_EUNKNOWN)
		return true;
	return rc < 0 && strcmp(dpl_err_name(rc), "DPL_EUNKNOWN") != 0;
}

int conf_check_code(struct conf_rank *rk, int rc, const char *what)
{
	if (!known_code(rc))
		conf_fail(rk, "%s returned %d, which is not a dpl error code "
			      "(backends map their errors to DPL_E*)",
			  what, rc);
	return rc;
}

int conf_progress(struct conf_rank *rk)
{
	int rc;

	if (rk->t == NULL)
		return 0;
	rc = rk->ops->progress(rk->ctx);
	if (rc < 0) {
		conf_check_code(rk, rc, "progress");
		conf_fail(rk, "progress failed: %s (%s)", dpl_err_name(rc),
			  dpl_last_error());
	}
	return rc;
}

void conf_progress_for(struct conf_rank *rk, unsigned ms)
{
	uint64_t until = conf_now_ns() + (uint64_t)ms * 1000000ull;
	unsigned n = 0;

	while (conf_now_ns() < until) {
		conf_progress(rk);
		if ((++n & 255) == 0)
			sched_yield();
	}
}

/* One idle turn of a waiting loop: give up on abort or deadline,
 * progress, and back off after a while. */
struct idle {
	uint64_t start;
	unsigned n;
};

static void idle_turn(struct conf_rank *rk, struct idle *id,
		      const char *what)
{
	uint64_t now;

	if (id->n == 0)
		id->start = conf_now_ns();
	id->n++;
	conf_progress(rk);
	/* On a machine with more runnable threads than cores a spinning
	 * rank must let its peer run. */
	if ((id->n & 15) == 0)
		sched_yield();
	if ((id->n & 63) != 0)
		return;
	if (conf_aborted(rk))
		give_up(rk, "gave up in '%s': another rank failed", what);
	now = conf_now_ns();
	if (now > rk->deadline_ns)
		conf_fail(rk, "deadline passed while %s (step: %s)", what,
			  slot(rk)->step);
	if (now - id->start < 2000000ull)
		return;
	if (rk->t != NULL && DPL_HAS_OP(rk->ops, wait) &&
	    (rk->ops->caps & DPL_TRANSPORT_CAP_WAIT)) {
		conf_check_code(rk, rk->ops->wait(rk->ctx, 200000ull),
				"wait");
		return;
	}
	if (now - id->start >= 50000000ull)
		sleep_us(50);
}

void *conf_alloc(struct conf_rank *rk, size_t bytes)
{
	void *p;

	if (rk->nmem == sizeof rk->mem / sizeof rk->mem[0])
		conf_fail(rk, "harness: more than %zu allocations",
			  sizeof rk->mem / sizeof rk->mem[0]);
	p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
	if (p == NULL)
		conf_fail(rk, "out of memory allocating %zu bytes", bytes);
	memset(p, 0, (bytes + 63) / 64 * 64 + 64);
	rk->mem[rk->nmem++] = p;
	return p;
}

void conf_free(struct conf_rank *rk, void *p)
{
	unsigned i;

	for (i = 0; i < rk->nmem; i++)
		if (rk->mem[i] == p) {
			free(p);
			rk->mem[i] = rk->mem[--rk->nmem];
			return;
		}
}

void *conf_reqs(struct conf_rank *rk, size_t n)
{
	return conf_alloc(rk, conf_req_stride(rk->ops) * (n ? n : 1));
}

void *conf_req(struct conf_rank *rk, void *pool, size_t i)
{
	return (unsigned char *)pool + conf_req_stride(rk->ops) * i;
}

static void post(struct conf_rank *rk, bool send, void *req, uint32_t peer,
		 uint64_t tag, void *buf, size_t len, struct conf_set *s)
{
	const char *what = send ? "isend" : "irecv";
	struct idle id = {0, 0};
	int rc;

	for (;;) {
		rc = send ? rk->ops->isend(rk->ctx, req, peer, tag, buf, len,
					   DPL_MEM_HOST)
			  : rk->ops->irecv(rk->ctx, req, peer, tag, buf, len,
					   DPL_MEM_HOST);
		conf_check_code(rk, rc, what);
		if (rc == 0)
			return;
		if (rc != DPL_EAGAIN)
			conf_fail(rk, "%s peer %u tag %#llx len %zu: %s (%s)",
				  what, peer, (unsigned long long)tag, len,
				  dpl_err_name(rc), dpl_last_error());
		if (s != NULL)
			conf_set_poll(rk, s);
		idle_turn(rk, &id, what);
	}
}

void conf_send(struct conf_rank *rk, void *req, uint32_t peer, uint64_t tag,
	       const void *buf, size_t len, struct conf_set *s)
{
	post(rk, true, req, peer, tag, (void *)buf, len, s);
}

void conf_recv(struct conf_rank *rk, void *req, uint32_t peer, uint64_t tag,
	       void *buf, size_t len, struct conf_set *s)
{
	post(rk, false, req, peer, tag, buf, len, s);
}

int conf_wait(struct conf_rank *rk, void *req, const char *what)
{
	struct idle id = {0, 0};
	int rc;

	for (;;) {
		rc = conf_check_code(rk, rk->ops->test(rk->ctx, req), "test");
		if (rc != DPL_EAGAIN)
			return rc;
		idle_turn(rk, &id, what);
	}
}

int conf_wait_ms(struct conf_rank *rk, void *req, unsigned ms)
{
	uint64_t end = conf_now_ns() + (uint64_t)ms * 1000000ull;
	struct idle id = {0, 0};
	int rc;

	for (;;) {
		rc = conf_check_code(rk, rk->ops->test(rk->ctx, req), "test");
		if (rc != DPL_EAGAIN || conf_now_ns() > end)
			return rc;
		idle_turn(rk, &id, "a bounded wait");
	}
}

/* ------------------------------------------------------------------ */
/* Request sets                                                        */

void conf_set_init(struct conf_rank *rk, struct conf_set *s, size_t cap)
{
	size_t i;

	memset(s, 0, sizeof *s);
	s->cap = cap;
	s->pool = conf_reqs(rk, cap);
	s->rc = conf_alloc(rk, cap * sizeof *s->rc);
	s->order = conf_alloc(rk, cap * sizeof *s->order);
	s->q = conf_alloc(rk, cap * sizeof *s->q);
	for (i = 0; i < cap; i++)
		s->rc[i] = DPL_EAGAIN;
}

void *conf_set_next(struct conf_set *s)
{
	/* conf_set_init sized the pool; callers never post more. */
	return (unsigned char *)s->pool +
	       conf_req_stride(conf_ops()) * s->n;
}

void conf_set_added(struct conf_set *s)
{
	s->n++;
	s->left++;
}

size_t conf_set_poll(struct conf_rank *rk, struct conf_set *s)
{
	size_t i, got = 0;
	int rc;

	for (i = 0; i < s->n && s->left > 0; i++) {
		if (s->rc[i] != DPL_EAGAIN)
			continue;
		rc = rk->ops->test(rk->ctx, conf_req(rk, s->pool, i));
		conf_check_code(rk, rc, "test");
		if (rc == DPL_EAGAIN)
			continue;
		s->rc[i] = rc;
		s->order[s->done++] = i;
		s->left--;
		got++;
	}
	return got;
}

void conf_send_early(struct conf_rank *rk, struct conf_set *s, uint32_t peer,
		     uint64_t tag, const void *buf, size_t len)
{
	uint64_t since = 0;
	struct idle id = {0, 0};
	void *req = conf_set_next(s);
	int rc;

	while (s->queued == 0) {
		rc = rk->ops->isend(rk->ctx, req, peer, tag, buf, len,
				    DPL_MEM_HOST);
		conf_check_code(rk, rc, "isend");
		if (rc == 0) {
			conf_set_added(s);
			return;
		}
		if (rc != DPL_EAGAIN)
			conf_fail(rk, "isend peer %u tag %#llx len %zu: %s (%s)",
				  peer, (unsigned long long)tag, len,
				  dpl_err_name(rc), dpl_last_error());
		if (since == 0)
			since = conf_now_ns();
		if (conf_now_ns() - since > 200000000ull)
			break;
		conf_set_poll(rk, s);
		idle_turn(rk, &id, "isend pushed back before the receives");
	}
	s->q[s->n].peer = peer;
	s->q[s->n].tag = tag;
	s->q[s->n].buf = buf;
	s->q[s->n].len = len;
	s->rc[s->n] = CONF_QUEUED;
	s->n++;
	s->queued++;
}

void conf_set_flush(struct conf_rank *rk, struct conf_set *s)
{
	size_t i;

	for (i = 0; i < s->n; i++) {
		if (s->rc[i] != CONF_QUEUED)
			continue;
		conf_send(rk, conf_req(rk, s->pool, i), s->q[i].peer,
			  s->q[i].tag, s->q[i].buf, s->q[i].len, s);
		s->rc[i] = DPL_EAGAIN;
		s->left++;
	}
	s->queued = 0;
}

void conf_set_wait(struct conf_rank *rk, struct conf_set *s,
		   const char *what)
{
	struct idle id = {0, 0};

	if (s->queued != 0)
		conf_fail(rk, "harness: %zu queued sends were never flushed",
			  s->queued);
	while (s->left > 0) {
		if (conf_set_poll(rk, s) > 0)
			continue;
		idle_turn(rk, &id, what);
	}
}

/* ------------------------------------------------------------------ */
/* Barriers and flags                                                  */

void conf_barrier_n(struct conf_rank *rk, uint32_t n)
{
	struct conf_world *w = rk->w;
	unsigned g = atomic_load(&w->gen);
	struct idle id = {0, 0};

	if (atomic_fetch_add(&w->arrived, 1) + 1 == n) {
		atomic_store(&w->arrived, 0);
		atomic_fetch_add(&w->gen, 1);
		return;
	}
	while (atomic_load(&w->gen) == g)
		idle_turn(rk, &id, "in a barrier");
}

void conf_barrier(struct conf_rank *rk)
{
	conf_barrier_n(rk, rk->size);
}

void conf_set_flag(struct conf_rank *rk, unsigned i, long v)
{
	atomic_store(&rk->w->flag[i], v);
}

long conf_get_flag(struct conf_rank *rk, unsigned i)
{
	return atomic_load(&rk->w->flag[i]);
}

void conf_wait_flag(struct conf_rank *rk, unsigned i, long v)
{
	struct idle id = {0, 0};

	while (atomic_load(&rk->w->flag[i]) < v)
		idle_turn(rk, &id, "waiting for a peer's signal");
}

/* ------------------------------------------------------------------ */
/* Opening and closing                                                 */

static uint32_t job_timeout_ms;

int conf_try_open(struct conf_rank *rk, const char *boot, uint32_t rank,
		  uint32_t size, uint32_t timeout_ms, dpl_transport **out)
{
	struct dpl_transport_params p;

	memset(&p, 0, sizeof p);
	p.rank = rank;
	p.world_size = size;
	p.bootstrap = boot;
	p.options = conf_options();
	p.timeout_ms = timeout_ms;
	return dpl_transport_open(rk->ops, &p, out);
}

void conf_open(struct conf_rank *rk)
{
	dpl_transport *t = NULL;
	int rc;

	conf_step(rk, "opening rank %u of %u at '%s'", rk->rank, rk->size,
		  rk->w->boot);
	rc = conf_try_open(rk, rk->w->boot, rk->rank, rk->size,
			   job_timeout_ms, &t);
	conf_check_code(rk, rc, "dpl_transport_open");
	if (rc != 0) {
		if (conf_aborted(rk))
			give_up(rk, "gave up opening: another rank failed "
				    "(%s: %s)", dpl_err_name(rc),
				dpl_last_error());
		conf_fail(rk, "open rank %u of %u (bootstrap '%s'): %s: %s",
			  rk->rank, rk->size, rk->w->boot, dpl_err_name(rc),
			  dpl_last_error());
	}
	rk->t = t;
	rk->ctx = dpl_transport_ctx(t);
}

void conf_close(struct conf_rank *rk)
{
	conf_step(rk, "closing rank %u", rk->rank);
	dpl_transport_close(rk->t);
	rk->t = NULL;
	rk->ctx = NULL;
}

void conf_new_boot(struct conf_rank *rk)
{
	conf_barrier(rk);
	if (rk->rank == 0 && make_boot(rk->w->boot, sizeof rk->w->boot) != 0)
		conf_fail(rk, "no free port on 127.0.0.1: %s",
			  strerror(errno));
	conf_barrier(rk);
}

/* ------------------------------------------------------------------ */
/* Running a job                                                       */

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
	if (rk.t != NULL) {
		/* Nobody closes while a peer may still need its progress. */
		n = __builtin_popcount(st->job->may_die & ((1u << rk.size) - 1));
		conf_step(&rk, "final barrier");
		conf_barrier_n(&rk, rk.size - n);
		conf_close(&rk);
	}
	free_all(&rk);
	atomic_store(&rk.w->slot[rk.rank].state, ST_DONE);
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
		if (conf_now_ns() > deadline && kill_at == 0) {
			*timed_out = true;
			atomic_store(&w->abort, 1);
			kill_at = conf_now_ns() + GRACE_NS;
		}
		if (atomic_load(&w->abort) && kill_at == 0)
			kill_at = conf_now_ns() + GRACE_NS;
		if (kill_at != 0 && conf_now_ns() > kill_at) {
			for (i = 0; i < job->size; i++)
				if (pid[i] > 0)
					kill(pid[i], SIGKILL);
			kill_at = UINT64_MAX;
		}
		sleep_us(2000);
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

	(void)ops;
	cr_assert(job->size >= 1 && job->size <= CONF_MAX_RANKS,
		  "harness: job of %u ranks", job->size);
	w = world_new(threads);
	w->size = job->size;
	if (job->boot != NULL)
		snprintf(w->boot, sizeof w->boot, "%s", job->boot);
	else
		cr_assert_eq(make_boot(w->boot, sizeof w->boot), 0,
			     "no free port on 127.0.0.1: %s",
			     strerror(errno));
	snprintf(job->boot_used, sizeof job->boot_used, "%s", w->boot);
	job_timeout_ms = job->timeout_ms ? job->timeout_ms : conf_timeout_ms();
	deadline = conf_now_ns() + (uint64_t)dl * 1000000000ull;
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
				       ST_RUNNING;
			if (fin == job->size)
				break;
			if (conf_now_ns() > deadline + GRACE_NS) {
				timed_out = true;
				break;
			}
			sleep_us(1000);
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
		if (s == ST_FAILED) {
			append(report, sizeof report, "\n  rank %u: %s", i,
			       sl->msg);
		}
	}
	for (i = 0; i < job->size && !threads; i++) {
		s = status[i];
		if (atomic_load(&w->slot[i].state) == ST_DONE ||
		    atomic_load(&w->slot[i].state) == ST_FAILED ||
		    atomic_load(&w->slot[i].state) == ST_GAVE_UP)
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
			if (atomic_load(&w->slot[i].state) == ST_RUNNING) {
				append(report, sizeof report,
				       "\n  rank %u: still running after the "
				       "job's deadline of %u s; last step: %s",
				       i, dl, w->slot[i].step);
			}
	for (i = 0; i < job->size; i++)
		if (atomic_load(&w->slot[i].state) == ST_GAVE_UP)
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

void conf_exchange(struct conf_rank *rk, uint32_t peer, uint64_t tag,
		   size_t len, uint64_t seed)
{
	unsigned char *out = conf_alloc(rk, len), *in = conf_alloc(rk, len);
	void *rq = conf_reqs(rk, 2);
	long long bad;
	int rc;

	conf_fill(out, len, seed * 64 + rk->rank);
	conf_recv(rk, conf_req(rk, rq, 0), peer, tag, in, len, NULL);
	conf_send(rk, conf_req(rk, rq, 1), peer, tag, out, len, NULL);
	rc = conf_wait(rk, conf_req(rk, rq, 0), "an exchange's receive");
	conf_expect(rk, rc == 0, "receive of %zu bytes from rank %u: %s (%s)",
		    len, peer, dpl_err_name(rc), dpl_last_error());
	rc = conf_wait(rk, conf_req(rk, rq, 1), "an exchange's send");
	conf_expect(rk, rc == 0, "send of %zu bytes to rank %u: %s (%s)", len,
		    peer, dpl_err_name(rc), dpl_last_error());
	bad = conf_verify(in, len, seed * 64 + peer);
	conf_expect(rk, bad < 0, "%zu bytes from rank %u differ at offset %lld",
		    len, peer, bad);
	conf_free(rk, rq);
	conf_free(rk, in);
	conf_free(rk, out);
}

/* ------------------------------------------------------------------ */
/* Patterns                                                            */

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t word_at(uint64_t seed, size_t w)
{
	return mix(seed * 0x100000001b3ull ^ (uint64_t)w);
}

void conf_fill(void *buf, size_t len, uint64_t seed)
{
	unsigned char *b = buf;
	size_t i, w;
	uint64_t v;

	for (w = 0; w * 8 < len; w++) {
		v = word_at(seed, w);
		for (i = 0; i < 8 && w * 8 + i < len; i++)
			b[w * 8 + i] = (unsigned char)(v >> (8 * i));
	}
}

long long conf_verify(const void *buf, size_t len, uint64_t seed)
{
	const unsigned char *b = buf;
	size_t i, w;
	uint64_t v;

	for (w = 0; w * 8 < len; w++) {
		v = word_at(seed, w);
		for (i = 0; i < 8 && w * 8 + i < len; i++)
			if (b[w * 8 + i] != (unsigned char)(v >> (8 * i)))
				return (long long)(w * 8 + i);
	}
	return -1;
}

/* ------------------------------------------------------------------ */
/* Process state                                                       */

static int count_dir(const char *path, const char *glob)
{
	struct dirent *e;
	DIR *d = opendir(path);
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 ||
		    strcmp(e->d_name, "..") == 0)
			continue;
		if (glob != NULL && fnmatch(glob, e->d_name, 0) != 0)
			continue;
		n++;
	}
	closedir(d);
	return n;
}

int conf_count_fds(void)
{
	int n = count_dir("/proc/self/fd", NULL);

	return n < 0 ? n : n - 1; /* the directory's own descriptor */
}

int conf_count_threads(void)
{
	return count_dir("/proc/self/task", NULL);
}

int conf_count_shm(void)
{
	const char *g = getenv("DPL_CONF_SHM_GLOB");

	return count_dir("/dev/shm", g != NULL && *g != '\0' ? g : "*");
}

char *conf_shm_snapshot(void)
{
	const char *g = getenv("DPL_CONF_SHM_GLOB");
	size_t cap = 4096, len = 0, n;
	struct dirent *e;
	char *list, *grown;
	DIR *d;

	if (g == NULL || *g == '\0')
		g = "*";
	d = opendir("/dev/shm");
	if (d == NULL)
		return NULL;
	list = malloc(cap);
	while (list != NULL && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 ||
		    strcmp(e->d_name, "..") == 0 ||
		    fnmatch(g, e->d_name, 0) != 0)
			continue;
		n = strlen(e->d_name) + 1;
		if (len + n + 1 > cap) {
			grown = realloc(list, cap * 2 + n);
			if (grown == NULL) {
				free(list);
				list = NULL;
				break;
			}
			list = grown;
			cap = cap * 2 + n;
		}
		memcpy(list + len, e->d_name, n);
		len += n;
	}
	closedir(d);
	if (list != NULL)
		list[len] = '\0';
	return list;
}

static bool in_list(const char *list, const char *name)
{
	for (; list != NULL && *list != '\0'; list += strlen(list) + 1)
		if (strcmp(list, name) == 0)
			return true;
	return false;
}

int conf_shm_new(const char *before, const char *now, char *buf,
		 size_t size)
{
	int n = 0;

	if (size > 0)
		buf[0] = '\0';
	for (; now != NULL && *now != '\0'; now += strlen(now) + 1) {
		if (in_list(before, now))
			continue;
		n++;
		if (strlen(buf) + strlen(now) + 3 < size)
			snprintf(buf + strlen(buf), size - strlen(buf), "%s%s",
				 n > 1 ? ", " : "", now);
	}
	return n;
}

/* Inodes of this process's sockets. */
static size_t socket_inodes(unsigned long *ino, size_t max)
{
	char path[300], link[64];
	struct dirent *e;
	DIR *d = opendir("/proc/self/fd");
	size_t n = 0;
	ssize_t len;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL && n < max) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof link - 1);
		if (len <= 0)
			continue;
		link[len] = '\0';
		if (sscanf(link, "socket:[%lu]", &ino[n]) == 1)
			n++;
	}
	closedir(d);
	return n;
}

static bool ipv4_ok(const char *hex, char *addr, size_t size)
{
	unsigned int v = 0, port = 0;
	unsigned char b[4];

	if (sscanf(hex, "%8X:%X", &v, &port) != 2)
		return true;
	memcpy(b, &v, 4);
	snprintf(addr, size, "%u.%u.%u.%u:%u", b[0], b[1], b[2], b[3], port);
	if (v == 0 && port == 0)
		return true; /* not bound */
	return b[0] == 127;
}

static bool ipv6_ok(const char *hex, char *addr, size_t size)
{
	unsigned int wd[4] = {0, 0, 0, 0}, port = 0;
	unsigned char b[16];
	char txt[64];

	if (sscanf(hex, "%8X%8X%8X%8X:%X", &wd[0], &wd[1], &wd[2], &wd[3],
		   &port) != 5)
		return true;
	memcpy(b, wd, 16);
	if (inet_ntop(AF_INET6, b, txt, sizeof txt) == NULL)
		snprintf(txt, sizeof txt, "?");
	snprintf(addr, size, "[%s]:%u", txt, port);
	if (wd[0] == 0 && wd[1] == 0 && wd[2] == 0 && wd[3] == 0)
		return port == 0;
	if (IN6_IS_ADDR_LOOPBACK((struct in6_addr *)b))
		return true;
	return IN6_IS_ADDR_V4MAPPED((struct in6_addr *)b) && b[12] == 127;
}

bool conf_sockets_loopback(char *why, size_t size, int *nsockets)
{
	static const char *const tables[] = {"tcp", "udp", "tcp6", "udp6"};
	unsigned long ino[512], inode;
	char path[64], line[512], local[128], addr[160];
	size_t n = socket_inodes(ino, 512), i, t;
	int found = 0;
	bool ok;
	FILE *f;

	for (t = 0; t < 4; t++) {
		snprintf(path, sizeof path, "/proc/self/net/%s", tables[t]);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		while (fgets(line, sizeof line, f) != NULL) {
			if (sscanf(line,
				   " %*s %127s %*s %*s %*s %*s %*s %*s %*s "
				   "%lu",
				   local, &inode) != 2)
				continue;
			for (i = 0; i < n; i++)
				if (ino[i] == inode)
					break;
			if (i == n)
				continue;
			found++;
			ok = t < 2 ? ipv4_ok(local, addr, sizeof addr)
				   : ipv6_ok(local, addr, sizeof addr);
			if (!ok) {
				snprintf(why, size, "%s socket bound to %s",
					 tables[t], addr);
				fclose(f);
				*nsockets = found;
				return false;
			}
		}
		fclose(f);
	}
	*nsockets = found;
	return true;
}
