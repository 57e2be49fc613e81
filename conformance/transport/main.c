/*
 * main.c - the conformance runner's command line: Criterion's options plus
 *   --transport PATH.so|NAME  load the module through dpl_transport_load()
 *   --ranks processes|threads how the ranks of a job run
 *   --bootstrap tcp|name      how they meet: dpl's bootstrap on a loopback
 *                             root, its exchange in params.oob (tcp), or
 *                             a world name in params.world (name)
 *   --options STRING          the backend's options for every init
 * Each sets the DPL_CONF_* variable of the same meaning, so the tests
 * (which Criterion runs in fresh processes) see it. Without --ranks (or
 * DPL_CONF_RANKS) the runner asks init how the module's ranks run
 * (probe_ranks). --xml=FILE is written by report_xml.c, with the reasons
 * of skipped tests. A registration whose module needs a GPU sets
 * DPL_CONF_NEEDS_GPU=1: on a host where the CUDA runtime sees none, the
 * runner says so on one line ("conformance: transport ... needs a GPU")
 * and runs nothing, which CTest reports as skipped.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>

#include <criterion/criterion.h>
#include <criterion/output.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dpl/transport_load.h>

#include "harness_internal.h"

static const struct {
	const char *flag;
	const char *env;
} flags[] = {
	{"--transport", "DPL_CONF_TRANSPORT"},
	{"--ranks", "DPL_CONF_RANKS"},
	{"--bootstrap", "DPL_CONF_BOOTSTRAP"},
	{"--options", "DPL_CONF_OPTIONS"},
};

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [--transport PATH.so|NAME] [--ranks processes|"
		"threads]\n"
		"       [--bootstrap tcp|name] [--options K=V,...] "
		"[criterion options]\n"
		"Runs the dpl transport conformance battery; see "
		"conformance/README.md.\n"
		"Criterion's options follow (--help lists them); write "
		"reports to files\n"
		"(--xml=FILE) so the Synthesis line stays on stderr.\n",
		prog);
}

/* Take our flags out of argv; returns the new argc or -1 on error. */
static int take_flags(int argc, char **argv, int *help)
{
	int i, j, k, out = 1;
	size_t n;
	const char *val;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			*help = 1;
		for (k = 0; k < (int)(sizeof flags / sizeof flags[0]); k++) {
			n = strlen(flags[k].flag);
			if (strncmp(argv[i], flags[k].flag, n) != 0)
				continue;
			if (argv[i][n] == '=') {
				val = argv[i] + n + 1;
			} else if (argv[i][n] == '\0') {
				if (i + 1 >= argc) {
					fprintf(stderr, "%s needs a value\n",
						flags[k].flag);
					return -1;
				}
				val = argv[++i];
			} else {
				continue;
			}
			if (*val == '\0') {
				fprintf(stderr, "%s: empty value\n",
					flags[k].flag);
				return -1;
			}
			setenv(flags[k].env, val, 1);
			break;
		}
		if (k < (int)(sizeof flags / sizeof flags[0]))
			continue;
		argv[out++] = argv[i];
	}
	for (j = out; j < argc; j++)
		argv[j] = NULL;
	return out;
}

/*
 * When the registration does not say how the module's ranks run
 * (DPL_CONF_RANKS unset, as when the battery is run by hand), the table
 * says it: DPL_TRANSPORT_CAP_IN_PROCESS means threads of one process that
 * meet through params.world, else processes that need the host's
 * exchange. The answer goes into DPL_CONF_RANKS (and DPL_CONF_BOOTSTRAP,
 * when unset) for the test workers, once per run.
 */
static void probe_ranks(void)
{
	const struct dpl_transport_ops *o = conf_linked_table();
	const char *path = getenv("DPL_CONF_TRANSPORT");
	bool threads;

	if (getenv("DPL_CONF_RANKS") != NULL && *getenv("DPL_CONF_RANKS"))
		return;
	if (path != NULL && *path != '\0' && dpl_transport_load(path, &o) != 0)
		return; /* every test reports the load's error */
	if (o == NULL)
		return;
	threads = (o->caps & DPL_TRANSPORT_CAP_IN_PROCESS) != 0;
	setenv("DPL_CONF_RANKS", threads ? "threads" : "processes", 1);
	if (getenv("DPL_CONF_BOOTSTRAP") == NULL || !*getenv("DPL_CONF_BOOTSTRAP"))
		setenv("DPL_CONF_BOOTSTRAP", threads ? "name" : "tcp", 1);
	fprintf(stderr,
		"dpl-conformance: DPL_CONF_RANKS unset: %s's table %s "
		"DPL_TRANSPORT_CAP_IN_PROCESS, so its ranks run as %s "
		"(DPL_CONF_RANKS=%s, DPL_CONF_BOOTSTRAP=%s)\n",
		o->name, threads ? "sets" : "does not set",
		threads ? "threads" : "processes", getenv("DPL_CONF_RANKS"),
		getenv("DPL_CONF_BOOTSTRAP"));
}

/* With DPL_CONF_NEEDS_GPU=1: true when the CUDA runtime (loaded by name,
 * so the battery needs no CUDA to build) sees no device, the reason in
 * why. */
static bool gpu_absent(char *why, size_t size)
{
	static const char *const libs[] = {"libcudart.so", "libcudart.so.13",
					   "libcudart.so.12"};
	const char *e = getenv("DPL_CONF_NEEDS_GPU");
	int (*count)(int *);
	const char *(*name)(int);
	void *h = NULL, *sym;
	int n = 0, rc;
	size_t i;

	if (e == NULL || strcmp(e, "1") != 0)
		return false;
	for (i = 0; h == NULL && i < sizeof libs / sizeof libs[0]; i++)
		h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(why, size, "no CUDA runtime (%s)", dlerror());
		return true;
	}
	sym = dlsym(h, "cudaGetDeviceCount");
	memcpy(&count, &sym, sizeof sym);
	sym = dlsym(h, "cudaGetErrorName");
	memcpy(&name, &sym, sizeof sym);
	if (count == NULL || name == NULL) {
		snprintf(why, size, "the CUDA runtime lacks cudaGetDeviceCount");
		return true;
	}
	rc = count(&n);
	if (rc != 0 || n == 0)
		snprintf(why, size, "cudaGetDeviceCount: %s",
			 rc ? name(rc) : "no device");
	/* the runtime stays loaded: unloading it is not supported */
	return rc != 0 || n == 0;
}

/* Criterion's sandbox finds the program's main through the symbol table
 * when it starts a test worker, so main keeps default visibility. */
__attribute__((visibility("default"))) int main(int argc, char *argv[]);

int main(int argc, char *argv[])
{
	struct criterion_test_set *tests;
	const char *t;
	int help = 0, result = 0;

	argc = take_flags(argc, argv, &help);
	if (argc < 0) {
		usage(stderr, argv[0]);
		return 2;
	}
	if (help)
		usage(stdout, argv[0]);
	t = getenv("DPL_CONF_TRANSPORT");
	if (!help && conf_linked_table() == NULL && (t == NULL || *t == '\0')) {
		fprintf(stderr, "%s: no transport linked in: pass --transport "
				"PATH.so (or a module name)\n", argv[0]);
		usage(stderr, argv[0]);
		return 2;
	}
	if (!help) {
		char why[256];

		if (gpu_absent(why, sizeof why)) {
			fprintf(stderr, "conformance: transport %s needs a GPU "
				"and this host has none: %s; nothing run\n",
				t && *t ? t : conf_linked_table()->name, why);
			return 0;
		}
		probe_ranks();
	}
	tests = criterion_initialize();
	/* after criterion_initialize(), which registers Criterion's own */
	criterion_register_output_provider("xml", conf__report_xml);
	if (criterion_handle_args(argc, argv, true))
		result = !criterion_run_all_tests(tests);
	criterion_finalize(tests);
	return result;
}
