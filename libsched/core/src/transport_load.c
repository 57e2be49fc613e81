/* transport_load.c - load a transport module from a shared library. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <dpl/transport_load.h>

#include "internal.h"

/* Offset just past the last mandatory member of the table. */
#define MANDATORY_END                                                        \
	(offsetof(struct dpl_transport_ops, cancel) +                        \
	 sizeof(((struct dpl_transport_ops *)0)->cancel))

static int name_is_valid(const char *s)
{
	for (; *s != '\0'; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
		      *s == '_'))
			return 0;
	return 1;
}

/* Open `path`, or report why not in `why`. */
static void *open_lib(const char *path, char *why, size_t size)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	const char *e;

	if (h == NULL) {
		e = dlerror();
		snprintf(why, size, "%s", e ? e : "dlopen failed");
	}
	return h;
}

static int check_table(const char *path, const struct dpl_transport_ops *o)
{
	const char *name;

	if (o == NULL)
		return dpl__error(DPL_EINVAL,
				  "transport module %s: %s() returned no "
				  "table", path, DPL_TRANSPORT_PLUGIN_SYMBOL);
	name = o->name ? o->name : "(unnamed)";
	if (o->abi_version != DPL_TRANSPORT_ABI_VERSION)
		return dpl__error(DPL_EABI,
				  "transport module %s: table '%s' has "
				  "abi_version %u, this dpl expects %u",
				  path, name, o->abi_version,
				  DPL_TRANSPORT_ABI_VERSION);
	if (o->size < MANDATORY_END)
		return dpl__error(DPL_EABI,
				  "transport module %s: table '%s' is %u "
				  "bytes, shorter than its %zu bytes of "
				  "mandatory members",
				  path, name, o->size, (size_t)MANDATORY_END);
	return 0;
}

int dpl_transport_load(const char *name_or_path,
		       const struct dpl_transport_ops **out)
{
	char path[2][512], why[2][512];
	const struct dpl_transport_ops *ops;
	dpl_transport_plugin_fn fn;
	const char *used;
	void *h = NULL, *sym;
	int rc, tries, i;

	if (name_or_path == NULL || name_or_path[0] == '\0')
		return dpl__error(DPL_EINVAL,
				  "transport module: name or path is %s",
				  name_or_path ? "empty" : "NULL");
	if (out == NULL)
		return dpl__error(DPL_EINVAL,
				  "transport module %s: out is NULL",
				  name_or_path);
	if (strchr(name_or_path, '/') != NULL) {
		snprintf(path[0], sizeof path[0], "%s", name_or_path);
		tries = 1;
	} else {
		if (!name_is_valid(name_or_path) ||
		    strlen(name_or_path) > 64)
			return dpl__error(DPL_EINVAL,
					  "transport module name '%s': use "
					  "lower-case letters, digits and '_' "
					  "(at most 64), or a path with a '/'",
					  name_or_path);
		snprintf(path[0], sizeof path[0], "libdpl-transport-%s.so",
			 name_or_path);
		snprintf(path[1], sizeof path[1], "libdpl_transport_%s.so",
			 name_or_path);
		tries = 2;
	}
	used = path[0];
	for (i = 0; i < tries && h == NULL; i++) {
		h = open_lib(path[i], why[i], sizeof why[i]);
		used = path[i];
	}
	if (h == NULL) {
		if (tries == 1)
			return dpl__error(DPL_ENOENT,
					  "transport module %s: cannot load: "
					  "%s", path[0], why[0]);
		return dpl__error(DPL_ENOENT,
				  "transport module '%s': cannot load %s (%s) "
				  "nor %s (%s)",
				  name_or_path, path[0], why[0], path[1],
				  why[1]);
	}
	dlerror();
	sym = dlsym(h, DPL_TRANSPORT_PLUGIN_SYMBOL);
	if (sym == NULL) {
		const char *e = dlerror();

		rc = dpl__error(DPL_ENOENT,
				"transport module %s: no %s entry point (%s)",
				used, DPL_TRANSPORT_PLUGIN_SYMBOL,
				e ? e : "symbol is NULL");
		dlclose(h);
		return rc;
	}
	/* ISO C has no conversion from an object pointer to a function
	 * pointer; POSIX guarantees the representations agree. */
	memcpy(&fn, &sym, sizeof fn);
	ops = fn();
	rc = check_table(used, ops);
	if (rc != 0) {
		dlclose(h);
		return rc;
	}
	*out = ops;
	return 0;
}
