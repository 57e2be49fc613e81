/*
 * test_ucx_plugin.c - the shared build of the UCX module is a loadable
 * transport: dpl_transport_load() finds it by path and by name, and the
 * table it returns is the module's own and opens a context.
 */
#include <criterion/criterion.h>
#include <string.h>

#include <dpl/transport_load.h>

#ifndef PLUGIN_UCX
#error "PLUGIN_UCX must name the shared UCX module"
#endif

/* The out-of-band exchange of a world of one (init never calls it). */
static int solo_allgather(void *user, const void *mine, size_t len,
			  void *all)
{
	memcpy(all, mine, len);
	return 0;
}

static int solo_barrier(void *user)
{
	return 0;
}

static void check_table(const struct dpl_transport_ops *o)
{
	cr_assert_not_null(o);
	cr_assert_str_eq(o->name, "ucx");
	cr_assert_eq(o->abi_version, DPL_TRANSPORT_ABI_VERSION);
	cr_assert_eq(o->size, sizeof(struct dpl_transport_ops));
	cr_assert(o->caps & DPL_TRANSPORT_CAP_PEER_FAILURE);
}

Test(ucx_plugin, loads_by_path_and_opens)
{
	const struct dpl_transport_ops *o = NULL, *again = NULL;
	const struct dpl_oob oob = {solo_allgather, solo_barrier, NULL};
	struct dpl_transport_params p;
	dpl_transport *t = NULL;
	int rc;

	rc = dpl_transport_load(PLUGIN_UCX, &o);
	cr_assert_eq(rc, 0, "load(%s): %s", PLUGIN_UCX, dpl_last_error());
	check_table(o);
	rc = dpl_transport_load(PLUGIN_UCX, &again);
	cr_assert_eq(rc, 0, "second load: %s", dpl_last_error());
	cr_assert_eq(again, o, "a second load gave another table");
	/* a job of one rank needs no peer, only the host's exchange */
	memset(&p, 0, sizeof p);
	p.world_size = 1;
	p.oob = &oob;
	rc = dpl_transport_open(o, &p, &t);
	cr_assert_eq(rc, 0, "open of the loaded table: %s", dpl_last_error());
	cr_assert_eq(dpl_transport_ops(t), o);
	cr_assert_eq(dpl_transport_world_size(t), 1);
	dpl_transport_close(t);
}

Test(ucx_plugin, loads_by_module_name)
{
	const struct dpl_transport_ops *o = NULL;
	int rc;

	/* libdpl-transport-ucx.so, through LD_LIBRARY_PATH, which the
	 * test's registration points at the build directory */
	rc = dpl_transport_load("ucx", &o);
	cr_assert_eq(rc, 0, "load('ucx'): %s", dpl_last_error());
	check_table(o);
}
