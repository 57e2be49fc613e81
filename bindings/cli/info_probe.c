/*
 * info_probe.c - libfabric and UCX asked at run time for `dpl info`,
 * reached through dlopen: the CLI links neither library for this.
 */
#define _GNU_SOURCE /* open_memstream */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "info_probe.h"

#ifdef DPL_HAVE_TRANSPORT_OFI
#include <rdma/fabric.h>
#endif
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

char *info_probe_ofi(const char *prov)
{
#ifdef DPL_HAVE_TRANSPORT_OFI
	int (*getinfo)(uint32_t, const char *, const char *, uint64_t,
		       const struct fi_info *, struct fi_info **);
	void (*freeinfo)(struct fi_info *);
	struct fi_info *(*dupinfo)(const struct fi_info *);
	const char *(*strerr)(int);
	struct fi_info *h, *list = NULL;
	void *lib = dlopen("libfabric.so.1", RTLD_LAZY | RTLD_LOCAL);
	char buf[256];
	int rc;

	sym(lib, "fi_getinfo", &getinfo, sizeof getinfo);
	sym(lib, "fi_freeinfo", &freeinfo, sizeof freeinfo);
	sym(lib, "fi_dupinfo", &dupinfo, sizeof dupinfo);
	sym(lib, "fi_strerror", &strerr, sizeof strerr);
	if (!getinfo || !freeinfo || !dupinfo || !strerr) {
		if (lib)
			dlclose(lib);
		return strdup("libfabric not loadable");
	}
	if ((h = dupinfo(NULL)) == NULL) {
		dlclose(lib);
		return NULL;
	}
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_TAGGED | FI_DIRECTED_RECV;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				  FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				  FI_MR_ENDPOINT;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
	h->fabric_attr->prov_name = strdup(prov);
	rc = getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL,
		     NULL, 0, h, &list);
	if (rc == 0 && list)
		snprintf(buf, sizeof buf, "yes (fabric %s, domain %s)",
			 list->fabric_attr && list->fabric_attr->name
			     ? list->fabric_attr->name
			     : "?",
			 list->domain_attr && list->domain_attr->name
			     ? list->domain_attr->name
			     : "?");
	else
		snprintf(buf, sizeof buf, "no: %s", strerr(-rc));
	freeinfo(list);
	freeinfo(h);
	dlclose(lib);
	return strdup(buf);
#else
	(void)prov;
	return strdup("dpl was built without the ofi transport");
#endif
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
