/*
 * test_transport_load.c - dpl_transport_load(): a module found by path
 * and by name works; every way a module can be wrong is an error that
 * names the path and the reason, and leaves *out untouched.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <string.h>

#include <dpl/transport_load.h>

/* Set by CMake: the inproc plugin, its directory, the fixtures. */
#ifndef PLUGIN_INPROC
#error "PLUGIN_INPROC must name the inproc plugin module"
#endif

static const struct dpl_transport_ops sentinel = {.name = "sentinel"};

static void expect_fail(const char *arg, int want, const char *needle)
{
	const struct dpl_transport_ops *out = &sentinel;
	int rc = dpl_transport_load(arg, &out);

	cr_assert_eq(rc, want, "load('%s'): %s, expected %s (%s)",
		     arg ? arg : "(null)", dpl_err_name(rc),
		     dpl_err_name(want), dpl_last_error());
	cr_assert_eq(out, &sentinel, "load('%s') failed but wrote *out",
		     arg ? arg : "(null)");
	cr_assert(strstr(dpl_last_error(), needle) != NULL,
		  "load('%s'): message '%s' does not mention '%s'",
		  arg ? arg : "(null)", dpl_last_error(), needle);
}

Test(load, by_path_gives_a_working_table)
{
	const struct dpl_transport_ops *o = NULL;
	struct dpl_transport_params p;
	dpl_transport *t = NULL;
	int rc;

	rc = dpl_transport_load(PLUGIN_INPROC, &o);
	cr_assert_eq(rc, 0, "load(%s): %s", PLUGIN_INPROC, dpl_last_error());
	cr_assert_str_eq(o->name, "inproc");
	memset(&p, 0, sizeof p);
	p.world_size = 1;
	p.world = "load-test";
	rc = dpl_transport_open(o, &p, &t);
	cr_assert_eq(rc, 0, "open of the loaded table: %s", dpl_last_error());
	cr_assert_eq(dpl_transport_ops(t), o);
	dpl_transport_close(t);
}

Test(load, by_name_searches_the_library_path)
{
	const struct dpl_transport_ops *o = NULL;
	int rc;

	/* libdpl-transport-inproc_plugin.so does not exist; the second
	 * spelling, libdpl_transport_inproc_plugin.so, is found through
	 * LD_LIBRARY_PATH, which the test's registration sets. */
	rc = dpl_transport_load("inproc_plugin", &o);
	cr_assert_eq(rc, 0, "load('inproc_plugin'): %s", dpl_last_error());
	cr_assert_str_eq(o->name, "inproc");
}

Test(load, bad_arguments_are_einval)
{
	const struct dpl_transport_ops *o = &sentinel;

	expect_fail(NULL, DPL_EINVAL, "NULL");
	expect_fail("", DPL_EINVAL, "empty");
	expect_fail("Bad Name", DPL_EINVAL, "Bad Name");
	expect_fail("ucx.so", DPL_EINVAL, "ucx.so");
	cr_assert_eq(dpl_transport_load(PLUGIN_INPROC, NULL), DPL_EINVAL);
	cr_assert_eq(o, &sentinel);
}

Test(load, missing_library_names_the_path)
{
	expect_fail("/nonexistent/libdpl-transport-x.so", DPL_ENOENT,
		    "/nonexistent/libdpl-transport-x.so");
	expect_fail("no_such_module", DPL_ENOENT,
		    "libdpl_transport_no_such_module.so");
}

Test(load, library_without_entry_point)
{
	expect_fail(FIXTURE_NO_SYMBOL, DPL_ENOENT, "dpl_transport_plugin_v1");
	expect_fail(FIXTURE_NO_SYMBOL, DPL_ENOENT, FIXTURE_NO_SYMBOL);
}

Test(load, entry_point_returning_null)
{
	expect_fail(FIXTURE_NULL, DPL_EINVAL, "returned no table");
}

Test(load, table_of_another_abi)
{
	expect_fail(FIXTURE_BAD_ABI, DPL_EABI, "abi_version 99");
}

Test(load, table_shorter_than_mandatory_members)
{
	expect_fail(FIXTURE_SHORT, DPL_EABI, "16 bytes");
}

/* SHARED_MODULES: "name=path," for each module built as a shared library
 * (set by CMake); each exports its own entry point. */
#ifndef SHARED_MODULES
#define SHARED_MODULES ""
#endif

Test(load, each_shared_module_exports_its_entry_point)
{
	char list[] = SHARED_MODULES, *save = NULL, *item;
	int n = 0;

	for (item = strtok_r(list, ",", &save); item != NULL;
	     item = strtok_r(NULL, ",", &save)) {
		const struct dpl_transport_ops *o = NULL;
		char *path = strchr(item, '=');
		int rc;

		cr_assert_not_null(path, "bad entry '%s'", item);
		*path++ = '\0';
		rc = dpl_transport_load(path, &o);
		cr_assert_eq(rc, 0, "load(%s): %s", path, dpl_last_error());
		cr_assert_str_eq(o->name, item, "%s holds table '%s'", path,
				 o->name);
		n++;
	}
	/* inproc is always built; in a static build there is nothing to
	 * load and the list is empty. */
	if (strstr(SHARED_MODULES, "inproc=") == NULL)
		cr_skip_test("no module is built as a shared library");
	cr_assert_geq(n, 1);
}
