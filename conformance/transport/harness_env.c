/*
 * harness_env.c - the battery's description from the environment: the
 * registration's knobs (DPL_CONF_*) and the table under test.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/transport_load.h>

#include "harness.h"

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

const char *conf_shm_glob(void)
{
	const char *g = getenv("DPL_CONF_SHM_GLOB");

	return g != NULL && *g != '\0' ? g : NULL;
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
