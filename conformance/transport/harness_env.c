/*
 * harness_env.c - the job's description from the environment: the
 * registration's knobs (DPL_CONF_*), the table under test, and the
 * meeting points of jobs (loopback roots of dpl's bootstrap, or world
 * names of an in-process transport).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <dpl/transport_load.h>

#include "harness_internal.h"

void conf_sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void conf__sleep_us(unsigned us)
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

static uint32_t job_timeout_ms;

void conf__set_job_timeout_ms(uint32_t ms)
{
	job_timeout_ms = ms;
}

uint32_t conf__job_timeout_ms(void)
{
	return job_timeout_ms ? job_timeout_ms : conf_timeout_ms();
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
/* Meeting points                                                      */

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

int conf__make_boot(char *buf, size_t size)
{
	if (conf_boot_kind() == CONF_BOOT_NAME) {
		snprintf(buf, size, "dplconf-%d-%u-%llx", (int)getpid(),
			 ++boot_counter,
			 (unsigned long long)(dpl_clock_ns() & 0xffffffu));
		return 0;
	}
	return conf_make_root(buf, size);
}
