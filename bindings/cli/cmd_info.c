/*
 * cmd_info.c - `dpl info`, like ucx_info and fi_info: the transports and
 * devices this `dpl` was built with (their tables: ABI version, size,
 * capabilities), the transport modules the loader finds, the versions of
 * UCX, libfabric, CUDA and NCCL seen at build time (CMake) and at run time
 * (each library's version call, reached with dlopen so that nothing is
 * linked for it), and what each transport would choose on this host.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <dpl/device.h>
#include <dpl/dpl.h>
#include <dpl/transport.h>
#include <dpl/transport_load.h>

#ifdef DPL_HAVE_BUILTINS
#include <dpl/device_synthetic.h>
#include <dpl/transport_inproc.h>
#endif
#ifdef DPL_HAVE_DEVICE_CPU
#include <dpl/device_cpu.h>
#endif
#ifdef DPL_HAVE_DEVICE_CUDA
#include <dpl/device_cuda.h>
#endif
#ifdef DPL_HAVE_TRANSPORT_SHM
#include <dpl/transport_shm.h>
#endif
#ifdef DPL_HAVE_TRANSPORT_UCX
#include <dpl/transport_ucx.h>
#endif
#ifdef DPL_HAVE_TRANSPORT_OFI
#include <dpl/transport_ofi.h>
#endif
#ifdef DPL_HAVE_TRANSPORT_CUDAIPC
#include <dpl/transport_cudaipc.h>
#endif
#ifdef DPL_HAVE_TRANSPORT_NCCL
#include <dpl/transport_nccl.h>
#endif

#include "cli.h"

#define CMD "info"

/* Versions CMake found (bindings/cli/CMakeLists.txt); "" when not. */
#ifndef DPL_INFO_UCX_BUILD
#define DPL_INFO_UCX_BUILD ""
#endif
#ifndef DPL_INFO_OFI_BUILD
#define DPL_INFO_OFI_BUILD ""
#endif
#ifndef DPL_INFO_CUDA_BUILD
#define DPL_INFO_CUDA_BUILD ""
#endif
#ifndef DPL_INFO_NCCL_BUILD
#define DPL_INFO_NCCL_BUILD ""
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"usage: dpl info [--json]\n\n"
		"Prints what this dpl was built with and what it finds here: the\n"
		"transports and devices linked in (ABI version, table size,\n"
		"capabilities; for a device, whether its device 0 opens here, and\n"
		"why not: a GPU device on a host without one), the transport modules dpl_transport_load() finds\n"
		"(libdpl-transport-NAME.so on the loader's path), the versions of\n"
		"UCX, libfabric, CUDA and NCCL found at build time and loaded at run\n"
		"time (dlopen of libucp.so.0, libfabric.so.1, libcuda.so.1,\n"
		"libnccl.so.2), and what each transport would choose on this host\n"
		"from its defaults and the environment (the transports expose no\n"
		"query of their choice, so this is what their documented rules give).\n"
		"  --json    one JSON object instead of text\n\n"
		"Exit status: 0 printed; 1 the output could not be written; 2 bad flags.\n");
}

struct tinfo {
	const char *name;
	const struct dpl_transport_ops *ops;
};

static const struct tinfo linked_transports[] = {
#ifdef DPL_HAVE_BUILTINS
    {"inproc", &dpl_transport_inproc},
#endif
#ifdef DPL_HAVE_TRANSPORT_SHM
    {"shm", &dpl_transport_shm},
#endif
#ifdef DPL_HAVE_TRANSPORT_UCX
    {"ucx", &dpl_transport_ucx},
#endif
#ifdef DPL_HAVE_TRANSPORT_OFI
    {"ofi", &dpl_transport_ofi},
#endif
#ifdef DPL_HAVE_TRANSPORT_CUDAIPC
    {"cudaipc", &dpl_transport_cudaipc},
#endif
#ifdef DPL_HAVE_TRANSPORT_NCCL
    {"nccl", &dpl_transport_nccl},
#endif
    {NULL, NULL},
};

static const struct dpl_device_ops *const linked_devices[] = {
    &dpl_device_host,
#ifdef DPL_HAVE_BUILTINS
    &dpl_device_synthetic,
#endif
#ifdef DPL_HAVE_DEVICE_CPU
    &dpl_device_cpu,
#endif
#ifdef DPL_HAVE_DEVICE_CUDA
    &dpl_device_cuda,
#endif
    NULL,
};

/* Module names dpl_transport_load() is asked for. */
static const char *const module_names[] = {"inproc", "shm", "ucx", "ofi",
					   "cudaipc", "hook", "nccl"};
#define NMODULES (sizeof module_names / sizeof module_names[0])

static cJSON *caps_transport(uint64_t caps)
{
	cJSON *a = cJSON_CreateArray();

	if (caps & DPL_TRANSPORT_CAP_PEER_FAILURE)
		cJSON_AddItemToArray(a, cJSON_CreateString("peer-failure"));
	if (caps & DPL_TRANSPORT_CAP_MEM_CUDA)
		cJSON_AddItemToArray(a, cJSON_CreateString("mem-cuda"));
	if (caps & DPL_TRANSPORT_CAP_IN_PROCESS)
		cJSON_AddItemToArray(a, cJSON_CreateString("in-process"));
	return a;
}

static cJSON *caps_device(uint64_t caps)
{
	cJSON *a = cJSON_CreateArray();

	if (caps & DPL_DEVICE_CAP_HOST_ACCESS)
		cJSON_AddItemToArray(a, cJSON_CreateString("host-access"));
	if (caps & DPL_DEVICE_CAP_ASYNC)
		cJSON_AddItemToArray(a, cJSON_CreateString("async"));
	return a;
}

/* Whether device 0 of the table opens here ("present"), and why not
 * ("absent": init's message, a GPU table on a host without one). */
static void device_present(cJSON *o, const struct dpl_device_ops *d)
{
	dpl_device *dev = NULL;
	int rc = dpl_device_open(d, NULL, &dev);

	cJSON_AddBoolToObject(o, "present", rc == 0);
	if (rc != 0)
		cJSON_AddStringToObject(o, "absent", dpl_last_error());
	dpl_device_close(dev);
}

static cJSON *transport_json(const struct dpl_transport_ops *t)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "name", t->name);
	cJSON_AddNumberToObject(o, "abi_version", t->abi_version);
	cJSON_AddNumberToObject(o, "size", t->size);
	cJSON_AddItemToObject(o, "caps", caps_transport(t->caps));
	cJSON_AddNumberToObject(o, "ctx_size", (double)t->ctx_size);
	cJSON_AddNumberToObject(o, "req_size", (double)t->req_size);
	return o;
}

/* dlsym's result as a function pointer (POSIX guarantees the round
 * trip; ISO C has no cast for it). */
static void sym(void *h, const char *name, void *fn, size_t size)
{
	void *p = dlsym(h, name);

	if (p)
		memcpy(fn, &p, size);
}

/* The run-time version of one library, or NULL when it is not there. */
static char *runtime_version(const char *lib)
{
	char buf[64] = "";
	void *h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);

	if (h == NULL)
		return NULL;
	if (strcmp(lib, "libucp.so.0") == 0) {
		const char *(*f)(void) = NULL;

		sym(h, "ucp_get_version_string", &f, sizeof f);
		if (f)
			snprintf(buf, sizeof buf, "%s", f());
	} else if (strcmp(lib, "libfabric.so.1") == 0) {
		uint32_t (*f)(void) = NULL;

		sym(h, "fi_version", &f, sizeof f);
		if (f) {
			uint32_t v = f();

			snprintf(buf, sizeof buf, "%u.%u", v >> 16, v & 0xffff);
		}
	} else {
		bool cuda = strcmp(lib, "libcuda.so.1") == 0;
		int (*f)(int *) = NULL;
		int v = 0;

		sym(h, cuda ? "cuDriverGetVersion" : "ncclGetVersion", &f,
		    sizeof f);
		/* CUDA: 1000 * major + 10 * minor; NCCL >= 2.9: 10000 *
		 * major + 100 * minor + patch. */
		if (cuda && f && f(&v) == 0)
			snprintf(buf, sizeof buf, "%d.%d (driver)", v / 1000,
				 (v % 1000) / 10);
		else if (!cuda && f && f(&v) == 0 && v > 0)
			snprintf(buf, sizeof buf, "%d.%d.%d", v / 10000,
				 (v % 10000) / 100, v % 100);
	}
	dlclose(h);
	return strdup(buf[0] ? buf : "loaded, version unknown");
}

static void add_lib(cJSON *libs, const char *name, const char *build,
		    const char *so)
{
	cJSON *o = cJSON_CreateObject();
	char *rt = runtime_version(so);

	cJSON_AddStringToObject(o, "name", name);
	if (build[0])
		cJSON_AddStringToObject(o, "build", build);
	else
		cJSON_AddNullToObject(o, "build");
	cJSON_AddStringToObject(o, "library", so);
	if (rt)
		cJSON_AddStringToObject(o, "runtime", rt);
	else
		cJSON_AddNullToObject(o, "runtime");
	free(rt);
	cJSON_AddItemToArray(libs, o);
}

#if defined(DPL_HAVE_TRANSPORT_UCX) || defined(DPL_HAVE_TRANSPORT_OFI)
/* A transport probe's result rc and answer as "yes (answer)" or
 * "no: answer". */
static void verdict(int rc, const char *answer, char *out, size_t size)
{
	snprintf(out, size, "%s%s%s", rc == 0 ? "yes (" : "no: ", answer,
		 rc == 0 ? ")" : "");
}
#endif

#ifdef DPL_HAVE_TRANSPORT_OFI
/* The ofi transport's own verdict on provider prov, any source address. */
static void ofi_here(const char *prov, char *out, size_t size)
{
	char buf[256];

	verdict(dpl_transport_ofi_probe(prov, NULL, buf, sizeof buf), buf,
		out, size);
}
#endif

/* What each linked transport would choose here, from its own rules. */
static cJSON *choices(void)
{
	cJSON *a = cJSON_CreateArray(), *o;
	char text[768];
	size_t k;

	for (k = 0; linked_transports[k].name; k++) {
		const char *n = linked_transports[k].name;
		bool probed = false; /* by the transport's own probe */

		if (strcmp(n, "inproc") == 0)
			snprintf(text, sizeof text, "threads of one process "
				 "(eager copies up to %u bytes)",
				 DPL_INPROC_EAGER_MAX);
#ifdef DPL_HAVE_TRANSPORT_SHM
		else if (strcmp(n, "shm") == 0)
			snprintf(text, sizeof text, "POSIX shared memory in "
				 "/dev/shm: rings of %u bytes, eager up to %u "
				 "bytes, spinning %u us before sleeping",
				 DPL_SHM_DEFAULT_RING, DPL_SHM_DEFAULT_EAGER,
				 DPL_SHM_DEFAULT_SPIN_US);
#endif
#ifdef DPL_HAVE_TRANSPORT_UCX
		else if (strcmp(n, "ucx") == 0) {
			const char *tls = getenv("UCX_TLS");
			const char *dev = getenv("UCX_NET_DEVICES");
			char buf[320], here[340];

			verdict(dpl_transport_ucx_probe(NULL, buf, sizeof buf),
				buf, here, sizeof here);
			snprintf(text, sizeof text, "UCP tag matching; here: "
				 "%s; UCX_TLS %s, UCX_NET_DEVICES %s", here,
				 tls ? "set" : "unset (UCX's default)",
				 dev ? "set" : "unset (dpl's default)");
			probed = true;
		}
#endif
#ifdef DPL_HAVE_TRANSPORT_OFI
		else if (strcmp(n, "ofi") == 0) {
			const char *fp = getenv("FI_PROVIDER");
			bool set = fp != NULL && *fp != '\0';
			char shm[320], tcp[320];

			ofi_here("shm", shm, sizeof shm);
			ofi_here("tcp;ofi_rxm", tcp, sizeof tcp);
			snprintf(text, sizeof text, "provider %s%s; here: "
				 "shm %s, tcp;ofi_rxm %s",
				 set ? fp : "shm when every rank is on this "
					    "host, tcp;ofi_rxm otherwise",
				 set ? " (FI_PROVIDER)" : " (dpl's default)",
				 shm, tcp);
			probed = true;
		}
#endif
		else if (strcmp(n, "cudaipc") == 0)
			snprintf(text, sizeof text, "shm's rings and matching; "
				 "device memory by CUDA IPC handles");
		else if (strcmp(n, "nccl") == 0)
			snprintf(text, sizeof text, "messages by nccl.inner; "
				 "device-memory gradients by ncclAllReduce "
				 "(host memory: the runner's ring)");
		else
			snprintf(text, sizeof text, "not known");
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "transport", n);
		cJSON_AddStringToObject(o, "choice", text);
		cJSON_AddStringToObject(o, "source", probed
					? "the environment and the transport's "
					  "own probe (dpl_transport_*_probe)"
					: "documented defaults and the "
					  "environment; the transport exposes "
					  "no query of its choice");
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

static cJSON *collect(void)
{
	cJSON *root = cJSON_CreateObject(), *a, *o;
	size_t k;

	cJSON_AddStringToObject(root, "version", dpl_version());
	cJSON_AddNumberToObject(root, "transport_abi",
				DPL_TRANSPORT_ABI_VERSION);
	cJSON_AddNumberToObject(root, "device_abi", DPL_DEVICE_ABI_VERSION);
	a = cJSON_AddArrayToObject(root, "transports");
	for (k = 0; linked_transports[k].name; k++)
		cJSON_AddItemToArray(a, transport_json(linked_transports[k].ops));
	a = cJSON_AddArrayToObject(root, "devices");
	for (k = 0; linked_devices[k]; k++) {
		const struct dpl_device_ops *d = linked_devices[k];

		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", d->name);
		cJSON_AddNumberToObject(o, "abi_version", d->abi_version);
		cJSON_AddNumberToObject(o, "size", d->size);
		cJSON_AddItemToObject(o, "caps", caps_device(d->caps));
		cJSON_AddStringToObject(o, "memory",
					d->mem == DPL_MEM_HOST ? "host"
							       : "device");
		device_present(o, d);
		cJSON_AddItemToArray(a, o);
	}
	a = cJSON_AddArrayToObject(root, "modules");
	for (k = 0; k < NMODULES; k++) {
		const struct dpl_transport_ops *t = NULL;
		int rc = dpl_transport_load(module_names[k], &t);

		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", module_names[k]);
		cJSON_AddBoolToObject(o, "found", rc == 0);
		if (rc == 0)
			cJSON_AddItemToObject(o, "table", transport_json(t));
		else
			cJSON_AddStringToObject(o, "reason", dpl_last_error());
		cJSON_AddItemToArray(a, o);
	}
	a = cJSON_AddArrayToObject(root, "libraries");
	add_lib(a, "ucx", DPL_INFO_UCX_BUILD, "libucp.so.0");
	add_lib(a, "libfabric", DPL_INFO_OFI_BUILD, "libfabric.so.1");
	add_lib(a, "cuda", DPL_INFO_CUDA_BUILD, "libcuda.so.1");
	add_lib(a, "nccl", DPL_INFO_NCCL_BUILD, "libnccl.so.2");
	cJSON_AddItemToObject(root, "choices", choices());
	return root;
}

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(it) ? it->valuestring : "-";
}

static void caps_text(const cJSON *caps, char *buf, size_t n)
{
	const cJSON *c;
	size_t used = 0;

	buf[0] = '\0';
	cJSON_ArrayForEach(c, caps)
	{
		int w = snprintf(buf + used, n - used, "%s%s", used ? "," : "",
				 c->valuestring);

		if (w < 0 || (size_t)w >= n - used)
			break;
		used += (size_t)w;
	}
	if (used == 0)
		snprintf(buf, n, "-");
}

static void print_text(const cJSON *root, FILE *f)
{
	const cJSON *it;
	char caps[128];

	fprintf(f, "dpl %s (transport ABI %d, device ABI %d)\n",
		str(root, "version"),
		cJSON_GetObjectItem(root, "transport_abi")->valueint,
		cJSON_GetObjectItem(root, "device_abi")->valueint);
	fprintf(f, "\ntransports linked in:\n");
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "transports"))
	{
		caps_text(cJSON_GetObjectItem(it, "caps"), caps, sizeof caps);
		fprintf(f, "  %-8s abi %d  size %d  caps %s\n", str(it, "name"),
			cJSON_GetObjectItem(it, "abi_version")->valueint,
			cJSON_GetObjectItem(it, "size")->valueint, caps);
	}
	fprintf(f, "\ndevices linked in:\n");
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "devices"))
	{
		caps_text(cJSON_GetObjectItem(it, "caps"), caps, sizeof caps);
		fprintf(f, "  %-8s abi %d  size %d  memory %s  caps %s%s%s\n",
			str(it, "name"),
			cJSON_GetObjectItem(it, "abi_version")->valueint,
			cJSON_GetObjectItem(it, "size")->valueint,
			str(it, "memory"), caps,
			cJSON_HasObjectItem(it, "absent") ? "\n    absent: "
							  : "",
			cJSON_HasObjectItem(it, "absent") ? str(it, "absent")
							  : "");
	}
	fprintf(f, "\ntransport modules (dpl_transport_load):\n");
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "modules"))
	{
		if (cJSON_IsTrue(cJSON_GetObjectItem(it, "found")))
			fprintf(f, "  %-8s found\n", str(it, "name"));
		else
			fprintf(f, "  %-8s not found on the loader's path "
				"(--json gives the reason)\n",
				str(it, "name"));
	}
	fprintf(f, "\nlibraries (build time / run time):\n");
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "libraries"))
	{
		const char *b = str(it, "build"), *r = str(it, "runtime");

		fprintf(f, "  %-10s %s / %s\n", str(it, "name"),
			strcmp(b, "-") ? b : "not found",
			strcmp(r, "-") ? r : "not loadable");
	}
	fprintf(f, "\nwhat each transport would choose here (from its "
		   "documented defaults and\nthe environment; ucx and ofi "
		   "from their own probes):\n");
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "choices"))
		fprintf(f, "  %-8s %s\n", str(it, "transport"),
			str(it, "choice"));
}

/*
 * collect() with descriptor 1 on stderr: what the libraries print while
 * they are asked (UCX logs to stdout by default, a failing ucp_init
 * among others) goes with the diagnostics, and stdout holds the report
 * alone. Without a spare descriptor it collects unredirected.
 */
static cJSON *collect_aside(void)
{
	int saved, i;
	cJSON *root;

	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	if (saved >= 0 && dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
		close(saved);
		saved = -1;
	}
	root = collect();
	fflush(stdout);
	if (saved >= 0) {
		for (i = 0; i < 8 && dup2(saved, STDOUT_FILENO) < 0 &&
			    errno == EINTR; i++)
			;
		close(saved);
	}
	return root;
}

static int run(int argc, char **argv)
{
	bool json = false;
	cJSON *root;
	int i, rc = CLI_OK;

	for (i = 1; i < argc; i++) {
		if (cli_switch(argv, i, "--json"))
			json = true;
		else
			return cli_unknown(CMD, argv[i]);
	}
	if ((root = collect_aside()) == NULL)
		return cli_fail(CMD, "out of memory");
	if (json) {
		char *text = cJSON_PrintUnformatted(root);

		if (text == NULL) {
			cJSON_Delete(root);
			return cli_fail(CMD, "out of memory");
		}
		puts(text);
		free(text);
	} else {
		print_text(root, stdout);
	}
	cJSON_Delete(root);
	if (fflush(stdout) != 0 || ferror(stdout))
		rc = cli_fail(CMD, "stdout: write error");
	return rc;
}

const struct dpl_cli_cmd dpl_cli_cmd_info = {
	.name = "info",
	.summary = "transports, devices, library versions and choices here",
	.run = run,
	.usage = usage,
};
