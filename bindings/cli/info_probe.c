/*
 * info_probe.c - UCX's effective settings for `dpl info`, read through
 * dlopen: the CLI does not link UCX for this (libfabric it asks through
 * the ofi transport's own probe).
 */
#define _GNU_SOURCE /* open_memstream */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "info_probe.h"

#ifdef DPL_HAVE_TRANSPORT_UCX
#include <ucp/api/ucp.h>
#endif

/* dlsym's result as a function pointer (POSIX allows the round trip). */
static void sym(void *h, const char *name, void *fn, size_t size)
{
	void *p = h ? dlsym(h, name) : NULL;

	memset(fn, 0, size);
	if (p)
		memcpy(fn, &p, size);
}

char *info_probe_ucx(const char *name)
{
#ifdef DPL_HAVE_TRANSPORT_UCX
	ucs_status_t (*readcfg)(const char *, const char *, ucp_config_t **);
	void (*printcfg)(const ucp_config_t *, FILE *, const char *,
			 ucs_config_print_flags_t);
	void (*release)(ucp_config_t *);
	void *lib = dlopen("libucp.so.0", RTLD_LAZY | RTLD_LOCAL);
	ucp_config_t *cfg = NULL;
	char *text = NULL, *line, *out = NULL, key[64];
	size_t len = 0;
	FILE *f;

	sym(lib, "ucp_config_read", &readcfg, sizeof readcfg);
	sym(lib, "ucp_config_print", &printcfg, sizeof printcfg);
	sym(lib, "ucp_config_release", &release, sizeof release);
	if (!readcfg || !printcfg || !release ||
	    readcfg(NULL, NULL, &cfg) != UCS_OK) {
		if (lib)
			dlclose(lib);
		return NULL;
	}
	if ((f = open_memstream(&text, &len)) != NULL) {
		printcfg(cfg, f, NULL, UCS_CONFIG_PRINT_CONFIG);
		fclose(f);
	}
	release(cfg);
	snprintf(key, sizeof key, "UCX_%s=", name);
	for (line = text; line && *line; line = strchr(line, '\n')) {
		if (*line == '\n')
			line++;
		if (strncmp(line, key, strlen(key)) == 0) {
			size_t n = strcspn(line + strlen(key), "\n");

			out = strndup(line + strlen(key), n);
			break;
		}
	}
	free(text);
	dlclose(lib);
	return out;
#else
	(void)name;
	return NULL;
#endif
}
