/*
 * test_cli_info.c - `dpl info`: it runs, lists the in-process transport
 * and the host device with their ABI versions and capabilities, whether
 * each device is present here (the CUDA device, when built, names the
 * CUDA error of its absence), what the ucx and ofi transports' own probes
 * say of this host, and its --json output parses with every field it
 * documents.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "cli_run.h"
#include "scratch.h"

static char dir[] = "/tmp/dpl-cli-info-XXXXXX";

static void setup(void)
{
	scratch_make(dir);
}

static void teardown(void)
{
	scratch_remove(dir);
}

TestSuite(cli_info, .init = setup, .fini = teardown, .timeout = 60);

Test(cli_info, text_lists_inproc_and_the_libraries)
{
	struct cli_res r;

	RUN(&r, "info");
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_assert(strstr(r.out, "transports linked in:"), "%s", r.out);
	cr_assert(strstr(r.out, "  inproc   abi 2"), "%s", r.out);
	cr_assert(strstr(r.out, "  host     abi 1"), "%s", r.out);
	cr_assert(strstr(r.out, "caps peer-failure"), "%s", r.out);
	for (const char *const *l = (const char *const[]){"ucx", "libfabric",
							  "cuda", "nccl",
							  NULL};
	     *l; l++)
		cr_assert(strstr(r.out, *l), "no line for %s: %s", *l, r.out);
	cr_assert(strstr(r.out, "would choose"), "%s", r.out);
}

#if defined(DPL_HAVE_TRANSPORT_UCX) || defined(DPL_HAVE_TRANSPORT_OFI)
/* The "would choose" line of transport t in `dpl info`, run with the
 * variable var set to value (NULL: unset). */
static const char *choice(const char *t, const char *var, const char *value)
{
	static struct cli_res r;
	static char line[2048];
	const char *p;
	char key[32];

	cr_assert_eq(value ? setenv(var, value, 1) : unsetenv(var), 0);
	RUN(&r, "info");
	cr_assert_eq(r.code, 0, "%s", r.err);
	p = strstr(r.out, "would choose here");
	cr_assert(p, "%s", r.out);
	snprintf(key, sizeof key, "\n  %-8s ", t);
	p = strstr(p, key);
	cr_assert(p, "no %s line: %s", t, r.out);
	p += strlen(key);
	snprintf(line, sizeof line, "%.*s", (int)strcspn(p, "\n"), p);
	return line;
}
#endif

#ifdef DPL_HAVE_TRANSPORT_UCX
/* The ucx line reports the transport's probe: the context init would
 * open (loopback by dpl's default), and why none opens. */
Test(cli_info, ucx_line_reports_the_transports_probe)
{
	const char *l;

	cr_assert_eq(unsetenv("UCX_NET_DEVICES"), 0);
	l = choice("ucx", "UCX_TLS", NULL);
	cr_assert(strncmp(l, "UCP tag matching; here: yes (UCX_TLS=", 37) ==
			  0 &&
		      strstr(l, ", UCX_NET_DEVICES=lo); UCX_TLS unset (UCX's "
				"default), UCX_NET_DEVICES unset (dpl's "
				"default)"),
		  "%s", l);
	l = choice("ucx", "UCX_TLS", "nosuchtransport");
	cr_assert(strstr(l, "here: no: ucx: ucp_init with UCX_TLS="
			    "nosuchtransport UCX_NET_DEVICES=lo: ") &&
		      strstr(l, "; UCX_TLS set, "),
		  "%s", l);
}
#endif

#ifdef DPL_HAVE_TRANSPORT_OFI
/* The ofi line reports the transport's probe: shm usable here, and not
 * once FI_PROVIDER hides it, with libfabric's reason. */
Test(cli_info, ofi_line_reports_the_transports_probe)
{
	const char *l = choice("ofi", "FI_PROVIDER", NULL);

	cr_assert(strstr(l, "here: shm yes (provider shm, fabric "), "%s", l);
	l = choice("ofi", "FI_PROVIDER", "tcp;ofi_rxm");
	cr_assert(strstr(l, "provider tcp;ofi_rxm (FI_PROVIDER); here: shm "
			    "no: ofi: no provider 'shm' ") &&
		      strstr(l, "FI_PROVIDER=tcp;ofi_rxm)") &&
		      strstr(l, "tcp;ofi_rxm yes (provider tcp;ofi_rxm, "),
		  "%s", l);
}
#endif

static const cJSON *named(const cJSON *arr, const char *key,
			  const char *name)
{
	const cJSON *it;

	cr_assert(cJSON_IsArray(arr));
	cJSON_ArrayForEach(it, arr)
	{
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, key);

		if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
			return it;
	}
	return NULL;
}

Test(cli_info, json_parses_with_its_fields)
{
	const cJSON *t, *d, *caps, *libs, *mods, *ch;
	struct cli_res r;
	cJSON *root;

	RUN(&r, "info", "--json");
	cr_assert_eq(r.code, 0, "%s", r.err);
	root = cJSON_Parse(r.out);
	cr_assert_not_null(root, "not JSON: %s", r.out);
	cr_assert(cJSON_IsString(cJSON_GetObjectItem(root, "version")));
	cr_assert_eq(cJSON_GetObjectItem(root, "transport_abi")->valueint, 2);
	cr_assert_eq(cJSON_GetObjectItem(root, "device_abi")->valueint, 1);
	t = named(cJSON_GetObjectItem(root, "transports"), "name", "inproc");
	cr_assert_not_null(t, "no inproc in %s", r.out);
	cr_assert_eq(cJSON_GetObjectItem(t, "abi_version")->valueint, 2);
	cr_assert_gt(cJSON_GetObjectItem(t, "size")->valueint, 0);
	caps = cJSON_GetObjectItem(t, "caps");
	cr_assert(cJSON_IsArray(caps) &&
		      strcmp(cJSON_GetArrayItem(caps, 0)->valuestring,
			     "peer-failure") == 0,
		  "inproc caps: %s", r.out);
	d = named(cJSON_GetObjectItem(root, "devices"), "name", "host");
	cr_assert_not_null(d, "no host device in %s", r.out);
	cr_assert_str_eq(cJSON_GetObjectItem(d, "memory")->valuestring, "host");
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(d, "present")),
		  "host device not present: %s", r.out);
	cr_assert(!cJSON_HasObjectItem(d, "absent"));
#ifdef DPL_HAVE_DEVICE_CUDA
	/* Linked in, whether or not this host has a GPU; absent says why. */
	d = named(cJSON_GetObjectItem(root, "devices"), "name", "cuda");
	cr_assert_not_null(d, "no cuda device in %s", r.out);
	cr_assert_str_eq(cJSON_GetObjectItem(d, "memory")->valuestring,
			 "device");
	caps = cJSON_GetObjectItem(d, "caps");
	cr_assert(cJSON_GetArraySize(caps) == 1 &&
			  strcmp(cJSON_GetArrayItem(caps, 0)->valuestring,
				 "async") == 0,
		  "cuda caps: %s", r.out);
	if (!cJSON_IsTrue(cJSON_GetObjectItem(d, "present")))
		cr_assert(strstr(cJSON_GetObjectItem(d, "absent")->valuestring,
				 "cudaError") != NULL,
			  "cuda absent without the CUDA error: %s", r.out);
	else
		cr_assert(!cJSON_HasObjectItem(d, "absent"));
#endif
	libs = cJSON_GetObjectItem(root, "libraries");
	cr_assert_eq(cJSON_GetArraySize(libs), 4);
	for (const char *const *l = (const char *const[]){"ucx", "libfabric",
							  "cuda", "nccl",
							  NULL};
	     *l; l++) {
		const cJSON *o = named(libs, "name", *l);

		cr_assert_not_null(o, "no library %s", *l);
		cr_assert(cJSON_HasObjectItem(o, "build") &&
			      cJSON_HasObjectItem(o, "runtime") &&
			      cJSON_HasObjectItem(o, "library"),
			  "library %s lacks a field", *l);
	}
	mods = cJSON_GetObjectItem(root, "modules");
	cr_assert(cJSON_IsArray(mods) && cJSON_GetArraySize(mods) > 0);
	cr_assert(cJSON_IsBool(cJSON_GetObjectItem(
	    cJSON_GetArrayItem(mods, 0), "found")));
	ch = named(cJSON_GetObjectItem(root, "choices"), "transport",
		   "inproc");
	cr_assert_not_null(ch, "no choice for inproc");
	cr_assert(cJSON_IsString(cJSON_GetObjectItem(ch, "choice")));
	cJSON_Delete(root);
}

Test(cli_info, bad_flag_is_a_usage_error)
{
	struct cli_res r;

	RUN(&r, "info", "--verbose");
	cr_assert_eq(r.code, 2);
	cr_assert(strstr(r.err, "unknown argument '--verbose'"), "%s", r.err);
}

#ifdef DPL_HAVE_TRANSPORT_UCX
/* UCX logs a failing ucp_init to stdout: --json stays one JSON document
 * on stdout all the same, and the ucx choice says why. */
Test(cli_info, json_stays_clean_when_ucx_complains)
{
	struct cli_res r;
	const cJSON *c;
	cJSON *root;

	cr_assert_eq(setenv("UCX_TLS", "nosuchtransport", 1), 0);
	RUN(&r, "info", "--json");
	cr_assert_eq(r.code, 0, "%s", r.err);
	root = cJSON_Parse(r.out);
	cr_assert_not_null(root, "stdout is not one JSON document: %s", r.out);
	c = named(cJSON_GetObjectItemCaseSensitive(root, "choices"),
		  "transport", "ucx");
	cr_assert_not_null(c);
	cr_assert(strstr(cJSON_GetObjectItem(c, "choice")->valuestring,
			 "here: no: ucx: ucp_init with UCX_TLS=nosuchtransport"),
		  "%s", r.out);
	cJSON_Delete(root);
	unsetenv("UCX_TLS");
}
#endif
