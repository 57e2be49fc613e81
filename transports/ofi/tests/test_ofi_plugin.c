/*
 * test_ofi_plugin.c - the shared libfabric module loaded at run time
 * through dpl_transport_load(), by path and by name, as
 * `dpl-conformance --transport libdpl-transport-ofi.so` loads it; the
 * table it hands out opens a one-rank context with a host's exchange
 * (dpl's bootstrap).
 */
#include <criterion/criterion.h>
#include <string.h>

#include <dpl/bootstrap.h>
#include <dpl/transport_load.h>

Test(ofi_plugin, loads_by_path)
{
	const struct dpl_transport_ops *ops = NULL;
	int rc = dpl_transport_load(OFI_PLUGIN, &ops);

	cr_assert_eq(rc, 0, "load %s: %s (%s)", OFI_PLUGIN, dpl_err_name(rc),
		     dpl_last_error());
	cr_assert_not_null(ops);
	cr_assert_str_eq(ops->name, "ofi");
	cr_assert_eq(ops->abi_version, DPL_TRANSPORT_ABI_VERSION);
	cr_assert(ops->caps & DPL_TRANSPORT_CAP_PEER_FAILURE);
}

Test(ofi_plugin, loads_by_name_from_the_search_path)
{
	const struct dpl_transport_ops *a = NULL, *b = NULL;
	int rc = dpl_transport_load("ofi", &a);

	cr_assert_eq(rc, 0, "load ofi (LD_LIBRARY_PATH has %s): %s (%s)",
		     OFI_PLUGIN_DIR, dpl_err_name(rc), dpl_last_error());
	cr_assert_str_eq(a->name, "ofi");
	/* The same module again gives the same table. */
	rc = dpl_transport_load(OFI_PLUGIN, &b);
	cr_assert_eq(rc, 0, "%s", dpl_last_error());
	cr_assert_eq(a, b, "two tables for one module");
}

Test(ofi_plugin, loaded_table_opens_a_context, .timeout = 60)
{
	const struct dpl_transport_ops *ops = NULL;
	struct dpl_bootstrap_params bp;
	struct dpl_transport_params p;
	struct dpl_oob oob;
	dpl_bootstrap *b = NULL;
	dpl_transport *t = NULL;
	int rc;

	cr_assert_eq(dpl_transport_load(OFI_PLUGIN, &ops), 0, "%s",
		     dpl_last_error());
	memset(&bp, 0, sizeof bp);
	bp.world_size = 1;
	bp.root = "127.0.0.1:0";
	bp.timeout_ms = 10000;
	rc = dpl_bootstrap_open(&bp, &b);
	cr_assert_eq(rc, 0, "bootstrap: %s (%s)", dpl_err_name(rc),
		     dpl_last_error());
	dpl_bootstrap_oob(b, &oob);
	memset(&p, 0, sizeof p);
	p.rank = 0;
	p.world_size = 1;
	p.oob = &oob;
	p.options = "provider=shm";
	rc = dpl_transport_open(ops, &p, &t);
	dpl_bootstrap_close(b);
	cr_assert_eq(rc, 0, "open: %s (%s)", dpl_err_name(rc),
		     dpl_last_error());
	cr_assert_eq(dpl_transport_ops(t), ops);
	cr_assert_geq(ops->progress(dpl_transport_ctx(t)), 0);
	dpl_transport_close(t);
}
