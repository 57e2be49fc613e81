/*
 * wrap.c - what a transport that wraps another one shares (hook, nccl):
 * the registry of linked inner tables, the split of its own options from
 * the inner's, and opening the inner transport (dpl/backend.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <dpl/backend.h>
#include <dpl/transport_load.h>

/* Registering is rare (start-up) and lookups happen once per init: one
 * lock for every wrapper's names is enough. */
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;

int dpl_wrap_register(struct dpl_wrap_names *names, const char *shim,
		      const struct dpl_transport_ops *inner)
{
	size_t i;
	int rc = 0;

	if (names == NULL || inner == NULL || inner->name == NULL)
		return dpl_set_error(DPL_EINVAL,
				     "%s: register needs a table with a name",
				     shim);
	pthread_mutex_lock(&names_lock);
	for (i = 0; i < names->n && strcmp(names->ops[i]->name,
					   inner->name) != 0; i++)
		;
	if (i < names->n)
		names->ops[i] = inner;
	else if (names->n < DPL_WRAP_NAMES_MAX)
		names->ops[names->n++] = inner;
	else
		rc = dpl_set_error(DPL_ENOMEM, "%s: more than %d registered "
				   "transports", shim, DPL_WRAP_NAMES_MAX);
	pthread_mutex_unlock(&names_lock);
	return rc;
}

static const struct dpl_transport_ops *
registered(const struct dpl_wrap_names *names, const char *name)
{
	const struct dpl_transport_ops *o = NULL;
	size_t i;

	if (names == NULL)
		return NULL;
	pthread_mutex_lock(&names_lock);
	for (i = 0; i < names->n && o == NULL; i++)
		if (strcmp(names->ops[i]->name, name) == 0)
			o = names->ops[i];
	pthread_mutex_unlock(&names_lock);
	return o;
}

void dpl_wrap_split_options(const char *text, const char *prefix,
			    char *mine, char *theirs)
{
	size_t np = strlen(prefix);
	bool to_mine = false;

	mine[0] = theirs[0] = '\0';
	while (text != NULL && *text != '\0') {
		size_t k = strcspn(text, ",");
		char *dst;

		if (memchr(text, '=', k) != NULL)
			to_mine = k > np && strncmp(text, prefix, np) == 0;
		dst = to_mine ? mine : theirs;
		if (k > 0) {
			if (dst[0] != '\0')
				strcat(dst, ",");
			strncat(dst, text, k);
		}
		text += k + (text[k] == ',');
	}
}

/* Why `io` cannot serve the wrapper, or NULL when it can. */
static const char *unfit(const struct dpl_transport_ops *io, size_t req_max,
			 const char *req_max_name, bool threads,
			 const char *shim, char *buf, size_t len)
{
	if (io->req_size > req_max) {
		snprintf(buf, len, "its requests are larger than %s",
			 req_max_name);
		return buf;
	}
	if (!(io->caps & DPL_TRANSPORT_CAP_PEER_FAILURE))
		return "it does not detect peer failure";
	if (((io->caps & DPL_TRANSPORT_CAP_IN_PROCESS) != 0) == threads)
		return NULL;
	snprintf(buf, len, "its ranks are %s (use dpl_transport_%s%s)",
		 threads ? "processes" : "threads", shim,
		 threads ? "" : "_threads");
	return buf;
}

int dpl_wrap_open(const struct dpl_wrap_names *names, const char *shim,
		  const char *inner, size_t req_max, const char *req_max_name,
		  bool threads, const struct dpl_transport_params *p,
		  const char *options, dpl_transport **out)
{
	const struct dpl_transport_ops *io;
	struct dpl_transport_params ip = *p;
	char buf[160], why[512];
	const char *no;
	int rc;

	*out = NULL;
	if ((io = registered(names, inner)) == NULL &&
	    dpl_transport_load(inner, &io) != 0)
		return dpl_set_error(DPL_EINVAL, "%s: inner transport '%s' is "
				     "neither registered nor loadable: %s",
				     shim, inner, dpl_last_error());
	no = unfit(io, req_max, req_max_name, threads, shim, buf, sizeof buf);
	if (no != NULL)
		return dpl_set_error(DPL_EINVAL, "%s: cannot wrap '%s': %s",
				     shim, inner, no);
	ip.options = options != NULL && options[0] != '\0' ? options : NULL;
	if ((rc = dpl_transport_open(io, &ip, out)) != 0) {
		*out = NULL;
		snprintf(why, sizeof why, "%s", dpl_last_error());
		return dpl_set_error(rc, "%s over %s: %s", shim, io->name, why);
	}
	return 0;
}
