/*
 * ofi_harness.c - test_job ranks that open the libfabric transport (see
 * ofi_harness.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "loopback_port.h"
#include "ofi_harness.h"
#include "ofi_internal.h"

static void enter_netns(struct tj_rank *r, const char *name)
{
	char path[128];
	int fd;

	snprintf(path, sizeof path, "/var/run/netns/%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) != 0)
		TJ_FAIL(r, "enter %s: %s", path, strerror(errno));
	close(fd);
}

/* What every rank of an ofi job runs: the host's part, then the job's
 * rank function. */
static void rank_main(struct tj_rank *r)
{
	/* A process's copy of the test's job, at the same address. */
	const struct ofi_job *j =
		(const struct ofi_job *)((const char *)r->job -
					 offsetof(struct ofi_job, tj));
	char opts[512];
	int rc;

	if (j->netns[r->rank] != NULL)
		enter_netns(r, j->netns[r->rank]);
	unsetenv("FI_PROVIDER");
	if (j->env[r->rank] != NULL)
		putenv((char *)j->env[r->rank]);
	snprintf(opts, sizeof opts, "%s%s%s%s",
		 j->provider ? "provider=" : "", j->provider ? j->provider : "",
		 j->provider && j->options ? "," : "",
		 j->options ? j->options : "");
	tj_step(r, "opening rank %u of %u at %s with '%s'", r->rank, r->size,
		tj_meet(r), opts);
	rc = tj_open(r, &dpl_transport_ofi, opts,
		     j->timeout_ms ? j->timeout_ms : 20000);
	if (rc != 0)
		TJ_FAIL(r, "open: %s: %s", dpl_err_name(rc), dpl_last_error());
	r->ext = dpl_transport_ctx(r->t);
	tj_step(r, "running");
	j->fn(r);
	tj_step(r, "closing");
	tj_close(r);
}

void ofi_job_init(struct ofi_job *j, const char *prov, uint32_t n,
		  tj_rank_fn fn)
{
	memset(j, 0, sizeof *j);
	j->provider = prov;
	j->tj.size = n;
	j->fn = fn;
}

int ofi_job_run(struct ofi_job *j)
{
	char meet[96];
	int rc;

	j->tj.fn = rank_main;
	j->tj.leak_check = true;
	if (j->root_host != NULL) {
		snprintf(meet, sizeof meet, "%s:%d", j->root_host,
			 dpl_test_loopback_port());
		j->tj.meet = meet;
	}
	rc = tj_job_run(&j->tj);
	j->tj.meet = NULL;
	if (!j->keep_files)
		dpl__ofi_shm_sweep("/dev/shm");
	return rc;
}

const char *ofi_run(const char *prov, uint32_t n, tj_rank_fn fn, void *arg,
		    const char *opts, char *buf, size_t size)
{
	struct ofi_job j;
	const char *msg = NULL;

	ofi_job_init(&j, prov, n, fn);
	j.tj.arg = arg;
	j.options = opts;
	if (ofi_job_run(&j) != 0) {
		snprintf(buf, size, "%s", j.tj.report);
		msg = buf;
	}
	tj_job_free(&j.tj);
	return msg;
}

const char *ofi_job_killed_one(const struct ofi_job *j, uint32_t victim,
			       char *buf, size_t size)
{
	int code = tj_job_exit(&j->tj, victim);

	if (code != -SIGKILL) {
		snprintf(buf, size, "rank %u: exit %d, not %d (SIGKILL); %s",
			 victim, code, -SIGKILL, j->tj.report);
		return buf;
	}
	if (j->tj.report[0] != '\0') {
		snprintf(buf, size, "%s", j->tj.report);
		return buf;
	}
	return NULL;
}

const char *ofi_run_killing(const char *prov, uint32_t n, tj_rank_fn fn,
			    tj_watch_fn watch, uint32_t victim, char *buf,
			    size_t size)
{
	struct ofi_job j;
	const char *msg;

	ofi_job_init(&j, prov, n, fn);
	j.tj.watch = watch;
	j.tj.may_die = 1u << victim;
	ofi_job_run(&j);
	msg = ofi_job_killed_one(&j, victim, buf, size);
	tj_job_free(&j.tj);
	return msg;
}
