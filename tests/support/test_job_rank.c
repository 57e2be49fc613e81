/*
 * test_job_rank.c - what rank code uses (see test_job.h): its end and
 * report, its memory and request storage, the host's part of opening a
 * transport, bounded waits, barriers and flags; and the life of a rank.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loopback_port.h"
#include "sanitizer.h"
#include "test_job_internal.h"

#ifdef DPL_TEST_ASAN
#include <sanitizer/lsan_interface.h>
#endif

static struct tj_slot *my_slot(const struct tj_rank *rk)
{
	return &rk->sh->slot[rk->rank];
}

/* ------------------------------------------------------------------ */
/* A rank's end and its report                                         */

static void free_all(struct tj_rank *rk)
{
	unsigned i;

	for (i = 0; i < rk->nmem; i++)
		free(rk->mem[i]);
	rk->nmem = 0;
}

static _Noreturn void rank_exit(struct tj_rank *rk, int code)
{
	if (rk->sh->mode == TJ_THREADS) {
		free_all(rk);
		pthread_exit(NULL);
	}
	fflush(NULL);
	_exit(code);
}

static _Noreturn void end_rank(struct tj_rank *rk, int state,
			       const char *file, int line, const char *fmt,
			       va_list ap)
{
	struct tj_slot *s = my_slot(rk);
	const char *base;

	s->where[0] = '\0';
	if (file != NULL) {
		base = strrchr(file, '/');
		snprintf(s->where, sizeof s->where, "%s:%d",
			 base != NULL ? base + 1 : file, line);
	}
	vsnprintf(s->msg, sizeof s->msg, fmt, ap);
	atomic_store(&s->state, state);
	atomic_store(&rk->sh->abort, 1);
	rank_exit(rk, 1);
}

void tj_vfail_at(struct tj_rank *rk, const char *file, int line,
		 const char *fmt, va_list ap)
{
	end_rank(rk, TJ_FAILED, file, line, fmt, ap);
}

void tj_fail_at(struct tj_rank *rk, const char *file, int line,
		const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	end_rank(rk, TJ_FAILED, file, line, fmt, ap);
}

void tj_give_up(struct tj_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	end_rank(rk, TJ_GAVE_UP, NULL, 0, fmt, ap);
}

void tj_step(struct tj_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(my_slot(rk)->step, sizeof my_slot(rk)->step, fmt, ap);
	va_end(ap);
}

const char *tj_step_now(const struct tj_rank *rk)
{
	return my_slot(rk)->step;
}

void tj_note(struct tj_rank *rk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(my_slot(rk)->note, sizeof my_slot(rk)->note, fmt, ap);
	va_end(ap);
}

bool tj_aborted(const struct tj_rank *rk)
{
	return atomic_load(&rk->sh->abort) != 0;
}

void *tj_user(const struct tj_rank *rk)
{
	if (rk->sh->user_size == 0)
		return NULL;
	return (unsigned char *)rk->sh + rk->sh->user_off;
}

/* ------------------------------------------------------------------ */
/* Memory of a rank                                                    */

void *tj_alloc(struct tj_rank *rk, size_t bytes)
{
	size_t n = tj__round_up(bytes, 64) + 64;
	void *p;

	if (rk->nmem == sizeof rk->mem / sizeof rk->mem[0])
		tj_fail_at(rk, NULL, 0, "test_job: more than %zu blocks of "
			   "tj_alloc at once",
			   sizeof rk->mem / sizeof rk->mem[0]);
	p = aligned_alloc(64, n);
	if (p == NULL)
		tj_fail_at(rk, NULL, 0, "out of memory allocating %zu bytes",
			   bytes);
	memset(p, 0, n);
	rk->mem[rk->nmem++] = p;
	return p;
}

void tj_free(struct tj_rank *rk, void *p)
{
	unsigned i;

	for (i = 0; p != NULL && i < rk->nmem; i++)
		if (rk->mem[i] == p) {
			free(p);
			rk->mem[i] = rk->mem[--rk->nmem];
			return;
		}
}

size_t tj_req_stride(const struct tj_rank *rk)
{
	size_t n = 0;

	if (rk->t != NULL)
		n = dpl_transport_req_size(rk->t);
	else if (rk->ops != NULL)
		n = rk->ops->req_size;
	return n == 0 ? 0 : tj__round_up(n, _Alignof(max_align_t));
}

void *tj_reqs(struct tj_rank *rk, size_t n)
{
	size_t stride = tj_req_stride(rk);

	if (stride == 0)
		tj_fail_at(rk, NULL, 0, "test_job: request storage before the "
			   "rank has a transport (rk->t or rk->ops)");
	return tj_alloc(rk, stride * (n ? n : 1));
}

void *tj_req(const struct tj_rank *rk, void *pool, size_t i)
{
	return (unsigned char *)pool + tj_req_stride(rk) * i;
}

/* ------------------------------------------------------------------ */
/* Opening a transport (the host's part)                               */

const char *tj_meet(const struct tj_rank *rk)
{
	return rk->sh->meet;
}

int tj_meet_make(enum tj_meet kind, char *buf, size_t size)
{
	static atomic_uint counter;
	int port;

	if (kind == TJ_MEET_NAME) {
		snprintf(buf, size, "dpltj-%d-%u-%llx", (int)getpid(),
			 atomic_fetch_add(&counter, 1) + 1,
			 (unsigned long long)(dpl_clock_ns() & 0xffffffu));
		return 0;
	}
	port = dpl_test_loopback_port();
	if (port <= 0)
		return -1;
	snprintf(buf, size, "127.0.0.1:%d", port);
	return 0;
}

void tj_meet_renew(struct tj_rank *rk)
{
	tj_barrier(rk);
	if (rk->rank == 0 &&
	    tj_meet_make(rk->sh->kind, rk->sh->meet, sizeof rk->sh->meet) != 0)
		tj_fail_at(rk, NULL, 0, "no free port on 127.0.0.1: %s",
			   strerror(errno));
	tj_barrier(rk);
}

int tj_host_join(struct tj_rank *rk, const char *meet, uint32_t timeout_ms,
		 struct dpl_transport_params *p, struct tj_host *h)
{
	struct dpl_bootstrap_params bp;
	int rc;

	memset(h, 0, sizeof *h);
	if (meet == NULL)
		meet = rk->sh->meet;
	if (rk->sh->kind == TJ_MEET_NAME) {
		p->world = meet;
		p->oob = NULL;
		return 0;
	}
	memset(&bp, 0, sizeof bp);
	bp.rank = p->rank;
	bp.world_size = p->world_size;
	bp.root = meet;
	bp.timeout_ms = timeout_ms ? timeout_ms : 10000;
	rc = dpl_bootstrap_open(&bp, &h->b);
	if (rc != 0) {
		h->b = NULL;
		return rc;
	}
	dpl_bootstrap_oob(h->b, &h->oob);
	p->oob = &h->oob;
	p->world = NULL;
	return 0;
}

void tj_host_leave(struct tj_host *h)
{
	dpl_bootstrap_close(h->b);
	h->b = NULL;
}

int tj_open(struct tj_rank *rk, const struct dpl_transport_ops *ops,
	    const char *options, uint32_t timeout_ms)
{
	return tj_open_boot(rk, ops, options, timeout_ms, timeout_ms);
}

int tj_open_boot(struct tj_rank *rk, const struct dpl_transport_ops *ops,
		 const char *options, uint32_t timeout_ms, uint32_t boot_ms)
{
	struct dpl_transport_params p;
	dpl_transport *t = NULL;
	struct tj_host h;
	char why[512];
	int rc;

	memset(&p, 0, sizeof p);
	p.rank = rk->rank;
	p.world_size = rk->size;
	p.options = options;
	p.timeout_ms = timeout_ms ? timeout_ms : 10000;
	rk->ops = ops;
	rc = tj_host_join(rk, NULL, boot_ms ? boot_ms : 10000, &p, &h);
	if (rc != 0)
		return rc;
	rc = dpl_transport_open(ops, &p, &t);
	snprintf(why, sizeof why, "%s", rc != 0 ? dpl_last_error() : "");
	/* The transport keeps no pointer to the host's exchange. */
	tj_host_leave(&h);
	if (rc != 0)
		return dpl_set_error(rc, "%s", why);
	rk->t = t;
	return 0;
}

void tj_close(struct tj_rank *rk)
{
	dpl_transport_close(rk->t);
	rk->t = NULL;
}

static int solo_allgather(void *user, const void *mine, size_t len,
			  void *all)
{
	(void)user;
	memmove(all, mine, len);
	return 0;
}

static int solo_barrier(void *user)
{
	(void)user;
	return 0;
}

const struct dpl_oob *tj_solo_oob(void)
{
	static const struct dpl_oob solo = {solo_allgather, solo_barrier,
					    NULL};

	return &solo;
}

/* ------------------------------------------------------------------ */
/* Bounded waits of a rank                                             */

static int checked(struct tj_rank *rk, int rc, const char *what)
{
	return rk->job->check != NULL ? rk->job->check(rk, rc, what) : rc;
}

int tj_progress(struct tj_rank *rk)
{
	if (rk->t == NULL)
		return 0;
	return checked(rk, dpl_transport_progress(rk->t), "progress");
}

int tj_progress_for(struct tj_rank *rk, unsigned ms)
{
	uint64_t until = dpl_clock_ns() + ms * TJ_MS;
	unsigned n = 0;
	int rc, first = 0;

	while (dpl_clock_ns() < until) {
		rc = tj_progress(rk);
		if (rc < 0 && first == 0)
			first = rc;
		if ((++n & 255) == 0)
			sched_yield();
	}
	return first;
}

int tj_idle(struct tj_rank *rk, struct tj_idle *id, const char *what)
{
	uint64_t now;
	int rc, w;

	if (what == NULL)
		what = "waiting";
	if (id->n == 0)
		id->start = dpl_clock_ns();
	id->n++;
	rc = tj_progress(rk);
	if (rc > 0)
		rc = 0;
	/* On a machine with more runnable threads than cores a spinning
	 * rank must let its peer run. */
	if ((id->n & 15) == 0)
		sched_yield();
	if ((id->n & 63) != 0)
		return rc;
	if (tj_aborted(rk))
		tj_give_up(rk, "gave up while %s: another rank failed", what);
	now = dpl_clock_ns();
	if (now > rk->deadline_ns)
		tj_fail_at(rk, NULL, 0, "deadline passed while %s (step: %s)",
			   what, tj_step_now(rk));
	if (now - id->start < 2 * TJ_MS)
		return rc;
	if (rk->t != NULL && DPL_HAS_OP(dpl_transport_ops(rk->t), wait)) {
		w = checked(rk, dpl_transport_wait(rk->t, 200000ull), "wait");
		return rc < 0 ? rc : w < 0 ? w : 0;
	}
	if (now - id->start >= 50 * TJ_MS)
		tj__sleep_us(50);
	return rc;
}

static int post(struct tj_rank *rk, bool send, void *req, uint32_t peer,
		uint64_t tag, void *buf, size_t len)
{
	const char *what = send ? "isend" : "irecv";
	struct tj_idle id = {0, 0};
	int rc;

	for (;;) {
		rc = send ? dpl_transport_isend(rk->t, req, peer, tag, buf,
						len, DPL_MEM_HOST)
			  : dpl_transport_irecv(rk->t, req, peer, tag, buf,
						len, DPL_MEM_HOST);
		rc = checked(rk, rc, what);
		if (rc != DPL_EAGAIN)
			return rc;
		tj_idle(rk, &id, send ? "posting a send (DPL_EAGAIN)"
				      : "posting a receive (DPL_EAGAIN)");
	}
}

int tj_isend(struct tj_rank *rk, void *req, uint32_t peer, uint64_t tag,
	     const void *buf, size_t len)
{
	return post(rk, true, req, peer, tag, (void *)buf, len);
}

int tj_irecv(struct tj_rank *rk, void *req, uint32_t peer, uint64_t tag,
	     void *buf, size_t len)
{
	return post(rk, false, req, peer, tag, buf, len);
}

/* tj_wait, and whether the request completed (its storage is free). */
static int wait_one(struct tj_rank *rk, void *req, unsigned ms,
		    const char *what, bool *done)
{
	uint64_t end = dpl_clock_ns() + ms * TJ_MS;
	struct tj_idle id = {0, 0};
	int rc, prc;

	*done = false;
	if (what == NULL)
		what = "waiting for a request";
	for (;;) {
		rc = checked(rk, dpl_transport_test(rk->t, req), "test");
		if (rc != DPL_EAGAIN)
			break;
		if (ms != 0 && dpl_clock_ns() > end)
			return DPL_EAGAIN;
		prc = tj_idle(rk, &id, what);
		if (prc < 0) {
			rc = checked(rk, dpl_transport_test(rk->t, req),
				     "test");
			if (rc == DPL_EAGAIN)
				return prc;
			break;
		}
	}
	*done = true;
	return rc;
}

int tj_wait(struct tj_rank *rk, void *req, unsigned ms, const char *what)
{
	bool done;

	return wait_one(rk, req, ms, what, &done);
}

/* Test every pending request of the pool once; returns how many are
 * still pending. */
static size_t poll_all(struct tj_rank *rk, void *pool, size_t n, int *st)
{
	size_t i, left = 0;

	for (i = 0; i < n; i++) {
		if (st[i] == DPL_EAGAIN)
			st[i] = checked(rk,
					dpl_transport_test(rk->t,
							   tj_req(rk, pool, i)),
					"test");
		left += st[i] == DPL_EAGAIN;
	}
	return left;
}

int tj_wait_all(struct tj_rank *rk, void *pool, size_t n, int *rc,
		unsigned ms, const char *what)
{
	uint64_t end = dpl_clock_ns() + ms * TJ_MS;
	struct tj_idle id = {0, 0};
	int *st = rc != NULL ? rc : tj_alloc(rk, (n ? n : 1) * sizeof *st);
	int res = 0, prc;
	size_t i, left;

	if (what == NULL)
		what = "waiting for requests";
	for (i = 0; i < n; i++)
		st[i] = DPL_EAGAIN;
	for (;;) {
		left = poll_all(rk, pool, n, st);
		if (left == 0)
			break;
		if (ms != 0 && dpl_clock_ns() > end) {
			res = DPL_EAGAIN;
			break;
		}
		prc = tj_idle(rk, &id, what);
		if (prc < 0 && poll_all(rk, pool, n, st) > 0) {
			res = prc;
			break;
		}
	}
	for (i = 0; i < n && res == 0; i++)
		res = st[i];
	if (rc == NULL)
		tj_free(rk, st);
	return res;
}

/* Post one message and wait for it with storage of its own. */
static int blocking(struct tj_rank *rk, bool send, uint32_t peer,
		    uint64_t tag, void *buf, size_t len, unsigned ms)
{
	void *req = tj_reqs(rk, 1);
	bool done;
	int rc;

	rc = post(rk, send, req, peer, tag, buf, len);
	if (rc != 0) {
		tj_free(rk, req);
		return rc;
	}
	rc = wait_one(rk, req, ms, send ? "waiting for a send"
					: "waiting for a receive",
		      &done);
	if (rc == DPL_EAGAIN) {
		dpl_transport_cancel(rk->t, req);
		rc = wait_one(rk, req, 1000, "cancelling a request", &done);
		if (rc != 0)
			rc = DPL_ETIMEDOUT;
	}
	if (done)
		tj_free(rk, req);
	return rc;
}

int tj_send(struct tj_rank *rk, uint32_t peer, uint64_t tag,
	    const void *buf, size_t len, unsigned ms)
{
	return blocking(rk, true, peer, tag, (void *)buf, len, ms);
}

int tj_recv(struct tj_rank *rk, uint32_t peer, uint64_t tag, void *buf,
	    size_t len, unsigned ms)
{
	return blocking(rk, false, peer, tag, buf, len, ms);
}

/* ------------------------------------------------------------------ */
/* Barriers and flags of a rank                                        */

void tj_barrier_n(struct tj_rank *rk, uint32_t n)
{
	struct tj_shared *sh = rk->sh;
	unsigned g = atomic_load(&sh->gen);
	struct tj_idle id = {0, 0};
	char what[160] = "in a barrier";
	unsigned turn = 0;

	atomic_store(&sh->slot[rk->rank].in_barrier, g + 1);
	if (atomic_fetch_add(&sh->arrived, 1) + 1 == n) {
		atomic_store(&sh->arrived, 0);
		atomic_fetch_add(&sh->gen, 1);
		return;
	}
	while (atomic_load(&sh->gen) == g) {
		/* Now and then, say which ranks have not come: a barrier
		 * that times out then names them, not the ones waiting. */
		if ((turn++ & 63) == 0) {
			size_t o = (size_t)snprintf(what, sizeof what,
						    "in a barrier, waiting "
						    "for rank");
			for (uint32_t q = 0; q < n && q < TJ_MAX_RANKS &&
					     o < sizeof what - 12;
			     q++)
				if (atomic_load(&sh->slot[q].in_barrier) != g + 1)
					o += (size_t)snprintf(what + o,
							      sizeof what - o,
							      " %u", q);
		}
		tj_idle(rk, &id, what);
	}
}

void tj_barrier(struct tj_rank *rk)
{
	tj_barrier_n(rk, rk->size);
}

void tj_flag_set(struct tj_rank *rk, unsigned i, int64_t v)
{
	atomic_store(&rk->sh->flag[i % TJ_FLAGS], v);
}

int64_t tj_flag_get(const struct tj_rank *rk, unsigned i)
{
	return atomic_load(&rk->sh->flag[i % TJ_FLAGS]);
}

int tj_flag_wait(struct tj_rank *rk, unsigned i, int64_t v, unsigned ms)
{
	uint64_t end = dpl_clock_ns() + ms * TJ_MS;
	struct tj_idle id = {0, 0};
	char what[80];

	snprintf(what, sizeof what, "waiting for flag %u to reach %lld", i,
		 (long long)v);
	while (atomic_load(&rk->sh->flag[i % TJ_FLAGS]) < v) {
		if (ms != 0 && dpl_clock_ns() > end)
			return DPL_ETIMEDOUT;
		tj_idle(rk, &id, what);
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* The life of a rank                                                  */

void tj__rank_main(const struct tj_job *job, struct tj_shared *sh,
		   uint32_t rank, uint64_t deadline_ns)
{
	struct tj_rank rk;
	int rc;

	memset(&rk, 0, sizeof rk);
	rk.job = job;
	rk.sh = sh;
	rk.rank = rank;
	rk.size = job->size;
	rk.arg = job->arg;
	rk.ops = job->ops;
	rk.deadline_ns = deadline_ns;
	rk.val = sh->slot[rank].val;
	if (job->ops != NULL) {
		tj_step(&rk, "opening rank %u of %u at '%s'", rk.rank,
			rk.size, tj_meet(&rk));
		rc = tj_open(&rk, job->ops, job->options, job->timeout_ms);
		if (rc != 0 && tj_aborted(&rk))
			tj_give_up(&rk, "gave up opening: another rank failed "
				   "(%s: %s)",
				   dpl_err_name(rc), dpl_last_error());
		if (rc != 0)
			tj_fail_at(&rk, NULL, 0, "open rank %u of %u at '%s': "
				   "%s: %s",
				   rk.rank, rk.size, tj_meet(&rk),
				   dpl_err_name(rc), dpl_last_error());
	}
	tj_step(&rk, "running");
	job->fn(&rk);
	if (job->ops != NULL && rk.t != NULL) {
		tj_step(&rk, "closing rank %u", rk.rank);
		tj_close(&rk);
	}
	free_all(&rk);
#ifdef DPL_TEST_ASAN
	if (job->leak_check && job->mode == TJ_PROCESSES &&
	    __lsan_do_recoverable_leak_check() != 0)
		tj_fail_at(&rk, NULL, 0, "rank %u leaked memory (see its "
			   "LeakSanitizer report on stderr)",
			   rk.rank);
#endif
	atomic_store(&rk.sh->slot[rk.rank].state, TJ_DONE);
}
