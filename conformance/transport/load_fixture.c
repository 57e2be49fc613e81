/*
 * load_fixture.c - broken loadable modules for test_transport_load.c,
 * one per FIXTURE_* definition: a table of another ABI version, a table
 * shorter than its mandatory members, an entry point that returns NULL,
 * and a library without the entry point.
 */
#include <dpl/transport_load.h>

#if defined(FIXTURE_NO_SYMBOL)
DPL_EXTERN int dpl_transport_fixture_without_plugin(void);

int dpl_transport_fixture_without_plugin(void)
{
	return 0;
}
#else
DPL_EXTERN const struct dpl_transport_ops *dpl_transport_plugin_v1(void);

#if defined(FIXTURE_BAD_ABI)
static const struct dpl_transport_ops table = {
	.abi_version = 99, /* no ABI dpl had or will have soon */
	.size = sizeof(struct dpl_transport_ops),
	.name = "fixture_bad_abi",
};
#elif defined(FIXTURE_SHORT)
static const struct dpl_transport_ops table = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = 16,
	.name = "fixture_short",
};
#endif

const struct dpl_transport_ops *dpl_transport_plugin_v1(void)
{
#if defined(FIXTURE_NULL)
	return 0;
#else
	return &table;
#endif
}
#endif
