/*
 * ofi_harness.c - forked multi-rank jobs for the libfabric transport's
 * tests (see ofi_harness.h).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dpl/bootstrap.h>

#include "loopback_port.h"
#include "ofi_harness.h"
#include "ofi_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

static int self_allgather(void *user, const void *mine, size_t len,
			  void *all)
{
	memcpy(all, mine, len);
	return 0;
}

static int self_barrier(void *user)
{
	return 0;
}

const struct dpl_oob *h_self_oob(void)
{
	static const struct dpl_oob oob = {self_allgather, self_barrier, NULL};

	return &oob;
}

static void nap_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};

	nanosleep(&ts, NULL);
}

void h_fail(struct h_rank *r, int line, const char *cond, const char *fmt,
	    ...)
{
	char detail[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof detail, fmt, ap);
	va_end(ap);
	snprintf(r->sh->msg[r->rank], H_MSG, "rank %u line %d: %s: %s",
		 r->rank, line, cond, detail);
}

void *h_req(struct h_rank *r)
{
	size_t sz = (r->o->req_size + 63) / 64 * 64;
	void *p = aligned_alloc(64, sz);

	if (p != NULL)
		memset(p, 0xa5, sz);
	return p;
}

int h_wait(struct h_rank *r, void *req, uint32_t ms)
{
	uint64_t end = dpl_clock_ns() + (uint64_t)ms * 1000000u;
	int rc;

	for (;;) {
		rc = r->o->test(r->ctx, req);
		if (rc != DPL_EAGAIN)
			return rc;
		if (r->o->progress(r->ctx) < 0) {
			rc = r->o->test(r->ctx, req);
			return rc == DPL_EAGAIN ? DPL_EIO : rc;
		}
		if (dpl_clock_ns() > end)
			return DPL_ETIMEDOUT;
	}
}

int h_wait_all(struct h_rank *r, void **req, uint32_t n, uint32_t ms)
{
	uint64_t end = dpl_clock_ns() + (uint64_t)ms * 1000000u;
	uint32_t i, left;
	int first = 0, rc;
	char *done = calloc(n ? n : 1, 1);

	for (;;) {
		left = 0;
		for (i = 0; i < n; i++) {
			if (done[i])
				continue;
			rc = r->o->test(r->ctx, req[i]);
			if (rc == DPL_EAGAIN) {
				left++;
				continue;
			}
			done[i] = 1;
			if (rc != 0 && first == 0)
				first = rc;
		}
		if (left == 0)
			break;
		r->o->progress(r->ctx);
		if (dpl_clock_ns() > end) {
			first = DPL_ETIMEDOUT;
			break;
		}
	}
	free(done);
	return first;
}

int h_send(struct h_rank *r, uint32_t peer, uint64_t tag, const void *buf,
	   size_t len)
{
	void *q = h_req(r);
	int rc;

	while ((rc = r->o->isend(r->ctx, q, peer, tag, buf, len,
				 DPL_MEM_HOST)) == DPL_EAGAIN)
		r->o->progress(r->ctx);
	if (rc == 0)
		rc = h_wait(r, q, 20000);
	free(q);
	return rc;
}

int h_recv(struct h_rank *r, uint32_t peer, uint64_t tag, void *buf,
	   size_t len)
{
	void *q = h_req(r);
	int rc;

	while ((rc = r->o->irecv(r->ctx, q, peer, tag, buf, len,
				 DPL_MEM_HOST)) == DPL_EAGAIN)
		r->o->progress(r->ctx);
	if (rc == 0)
		rc = h_wait(r, q, 20000);
	free(q);
	return rc;
}

void h_spin(struct h_rank *r, uint32_t ms)
{
	uint64_t end = dpl_clock_ns() + (uint64_t)ms * 1000000u;

	while (dpl_clock_ns() < end) {
		r->o->progress(r->ctx);
		nap_us(100);
	}
}

static uint8_t pat(size_t i, uint32_t seed)
{
	uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u;

	return (uint8_t)(x >> 13);
}

void h_fill(void *buf, size_t len, uint32_t seed)
{
	uint8_t *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = pat(i, seed);
}

size_t h_check(const void *buf, size_t len, uint32_t seed)
{
	const uint8_t *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != pat(i, seed))
			return i;
	return SIZE_MAX;
}

bool h_wait_flag(struct h_shared *sh, int i, int v, uint32_t ms)
{
	uint64_t end = dpl_clock_ns() + (uint64_t)ms * 1000000u;

	while (atomic_load(&sh->flag[i]) < v) {
		if (dpl_clock_ns() > end)
			return false;
		nap_us(200);
	}
	return true;
}

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int h_count_fds(void)
{
	return count_dir("/proc/self/fd");
}

int h_count_threads(void)
{
	return count_dir("/proc/self/task");
}

bool h_shm_has_pid(pid_t pid)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	char pre[32];
	size_t k;
	bool found = false;

	if (d == NULL)
		return false;
	k = (size_t)snprintf(pre, sizeof pre, "%d:", (int)pid);
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, pre, k) == 0)
			found = true;
	closedir(d);
	return found;
}

static int run_rank(struct h_job *j, uint32_t rank, const char *root)
{
	struct dpl_bootstrap_params bp;
	struct dpl_transport_params p;
	struct dpl_oob oob;
	dpl_bootstrap *b = NULL;
	struct h_rank r;
	char opts[512];
	int rc;

	memset(&r, 0, sizeof r);
	r.rank = rank;
	r.n = j->n;
	r.sh = j->sh;
	r.arg = j->arg;
	r.o = &dpl_transport_ofi;
	snprintf(opts, sizeof opts, "%s%s%s%s",
		 j->provider ? "provider=" : "", j->provider ? j->provider : "",
		 j->provider && j->options ? "," : "",
		 j->options ? j->options : "");
	if (j->netns[rank] != NULL) {
		char path[128];
		int fd;

		snprintf(path, sizeof path, "/var/run/netns/%s", j->netns[rank]);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
			snprintf(j->sh->msg[rank], H_MSG, "rank %u: enter %s: %s",
				 rank, path, strerror(errno));
			return 101;
		}
		close(fd);
	}
	unsetenv("FI_PROVIDER");
	if (j->env[rank] != NULL)
		putenv((char *)j->env[rank]);
	memset(&p, 0, sizeof p);
	p.rank = rank;
	p.world_size = j->n;
	p.options = opts;
	p.timeout_ms = j->timeout_ms ? j->timeout_ms : 20000;
	/* The host's part: meet the other ranks, lend the exchange to init,
	 * close it once the transport is open. */
	memset(&bp, 0, sizeof bp);
	bp.rank = rank;
	bp.world_size = j->n;
	bp.root = root;
	bp.timeout_ms = p.timeout_ms;
	rc = dpl_bootstrap_open(&bp, &b);
	if (rc != 0) {
		snprintf(j->sh->msg[rank], H_MSG, "rank %u: bootstrap: %s: %s",
			 rank, dpl_err_name(rc), dpl_last_error());
		return 102;
	}
	dpl_bootstrap_oob(b, &oob);
	p.oob = &oob;
	rc = dpl_transport_open(r.o, &p, &r.t);
	dpl_bootstrap_close(b);
	if (rc != 0) {
		snprintf(j->sh->msg[rank], H_MSG, "rank %u: open: %s: %s",
			 rank, dpl_err_name(rc), dpl_last_error());
		return 100;
	}
	r.ctx = dpl_transport_ctx(r.t);
	rc = j->fn(&r);
	dpl_transport_close(r.t);
	return rc;
}

int h_job_run(struct h_job *j)
{
	char root[64];
	uint64_t end;
	uint32_t i, left;
	int port, st, bad = 0;
	pid_t w;

	j->sh = mmap(NULL, sizeof *j->sh, PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (j->sh == MAP_FAILED) {
		j->sh = NULL;
		return -1;
	}
	memset(j->sh, 0, sizeof *j->sh);
	port = dpl_test_loopback_port();
	snprintf(root, sizeof root, "%s:%d",
		 j->root_host ? j->root_host : "127.0.0.1", port);
	fflush(NULL);
	for (i = 0; i < j->n; i++) {
		j->status[i] = -1;
		j->pid[i] = fork();
		if (j->pid[i] == 0) {
			int rc = run_rank(j, i, root);

#if defined(__SANITIZE_ADDRESS__)
			/* Ranks leave through _exit: check for leaks here. */
			if (rc == 0 && __lsan_do_recoverable_leak_check() != 0) {
				snprintf(j->sh->msg[i], H_MSG,
					 "rank %u leaked memory (see stderr)", i);
				rc = 99;
			}
#endif
			_exit(rc);
		}
		atomic_store(&j->sh->pid[i], j->pid[i]);
	}
	if (j->ctl != NULL)
		j->ctl(j->sh, j->pid, j->n, j->arg);
	end = dpl_clock_ns() + (uint64_t)(j->deadline_ms ? j->deadline_ms
						      : 60000) * 1000000u;
	for (;;) {
		left = 0;
		for (i = 0; i < j->n; i++) {
			if (j->status[i] != -1)
				continue;
			w = waitpid(j->pid[i], &st, WNOHANG);
			if (w == j->pid[i])
				j->status[i] = st;
			else if (w < 0 && errno == ECHILD)
				j->status[i] = 0; /* the ctl reaped it */
			else
				left++;
		}
		if (left == 0)
			break;
		if (dpl_clock_ns() > end) {
			j->timed_out = true;
			for (i = 0; i < j->n; i++)
				if (j->status[i] == -1)
					kill(j->pid[i], SIGKILL);
			for (i = 0; i < j->n; i++)
				if (j->status[i] == -1)
					waitpid(j->pid[i], &j->status[i], 0);
			break;
		}
		nap_us(1000);
	}
	for (i = 0; i < j->n; i++)
		if (h_exit_code(j, i) != 0)
			bad++;
	/* A killed rank leaves its shm file: remove it, as the next job
	 * would, so the suite leaves /dev/shm as it found it. */
	if (!j->keep_files)
		dpl__ofi_shm_sweep("/dev/shm");
	return bad || j->timed_out ? 1 : 0;
}

int h_exit_code(const struct h_job *j, uint32_t r)
{
	int st = j->status[r];

	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return -WTERMSIG(st);
	return -1000;
}

const char *h_job_killed_one(const struct h_job *j, uint32_t victim,
			     char *buf, size_t size)
{
	uint32_t i;
	int want;

	for (i = 0; i < j->n; i++) {
		want = i == victim ? -SIGKILL : 0;
		if (h_exit_code(j, i) != want) {
			int k = snprintf(buf, size, "rank %u: exit %d, not %d; ",
					 i, h_exit_code(j, i), want);

			if (k > 0 && (size_t)k < size)
				h_job_report(j, buf + k, size - (size_t)k);
			return buf;
		}
	}
	return NULL;
}

static void job_init(struct h_job *j, const char *prov, uint32_t n,
		     h_rank_fn fn)
{
	memset(j, 0, sizeof *j);
	j->provider = prov;
	j->n = n;
	j->fn = fn;
}

const char *h_run(const char *prov, uint32_t n, h_rank_fn fn,
		  const void *arg, const char *opts, char *buf, size_t size)
{
	struct h_job j;
	const char *msg = NULL;

	job_init(&j, prov, n, fn);
	j.arg = arg;
	j.options = opts;
	if (h_job_run(&j) != 0)
		msg = h_job_report(&j, buf, size);
	h_job_free(&j);
	return msg;
}

const char *h_run_killing(const char *prov, uint32_t n, h_rank_fn fn,
			  h_ctl_fn ctl, uint32_t victim, char *buf,
			  size_t size)
{
	struct h_job j;
	const char *msg;

	job_init(&j, prov, n, fn);
	j.ctl = ctl;
	h_job_run(&j);
	msg = h_job_killed_one(&j, victim, buf, size);
	h_job_free(&j);
	return msg;
}

const char *h_job_report(const struct h_job *j, char *buf, size_t size)
{
	size_t k = 0;
	uint32_t i;

	buf[0] = '\0';
	if (j->timed_out)
		k += (size_t)snprintf(buf + k, size - k, "job timed out; ");
	for (i = 0; i < j->n && k < size; i++) {
		int c = h_exit_code(j, i);

		if (c == 0)
			continue;
		k += (size_t)snprintf(buf + k, size - k, "[rank %u exit %d: %s] ",
				      i, c, j->sh ? j->sh->msg[i] : "");
	}
	return buf;
}

void h_job_free(struct h_job *j)
{
	if (j->sh != NULL)
		munmap(j->sh, sizeof *j->sh);
	j->sh = NULL;
}
