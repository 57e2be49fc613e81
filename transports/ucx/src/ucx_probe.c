/*
 * ucx_probe.c - dpl_transport_ucx_probe(): the UCP context init would
 * open, from the same options, configuration and parameters, opened and
 * closed again, and the transports and devices it was given.
 */
#define _GNU_SOURCE /* open_memstream */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucx_internal.h"

/* The value of UCX_<name>= in UCX's printout `text`, or "?". */
static void setting(const char *text, const char *name, char *out,
		    size_t size)
{
	char key[32];
	const char *line = text;
	size_t k;

	k = (size_t)snprintf(key, sizeof key, "UCX_%s=", name);
	snprintf(out, size, "?");
	while (line != NULL && *line != '\0') {
		if (strncmp(line, key, k) == 0) {
			snprintf(out, size, "%.*s",
				 (int)strcspn(line + k, "\n"), line + k);
			return;
		}
		line = strchr(line, '\n');
		if (line != NULL)
			line++;
	}
}

/* Fail with rc, the message set, and a copy of it in buf. */
static int answer_error(int rc, char *buf, size_t len)
{
	snprintf(buf, len, "%s", dpl_last_error());
	return rc;
}

int dpl_transport_ucx_probe(const char *options, char *buf, size_t len)
{
	char tls[DPL__UCX_OPT_VALUE_MAX], dev[DPL__UCX_OPT_VALUE_MAX];
	struct dpl__ucx_options o;
	char *text = NULL;
	size_t tlen = 0;
	ucp_config_t *cfg;
	ucp_params_t prm;
	ucp_context_h uc;
	ucs_status_t st;
	FILE *f;
	int rc;

	if (buf == NULL || len == 0)
		return dpl_set_error(DPL_EINVAL, "ucx: probe: buf is NULL or "
				     "len is 0");
	buf[0] = '\0';
	if ((rc = dpl__ucx_options_parse(options, &o)) != 0 ||
	    (rc = dpl__ucx_config(&o, &cfg)) != 0)
		return answer_error(rc, buf, len);
	if ((f = open_memstream(&text, &tlen)) == NULL) {
		ucp_config_release(cfg);
		return answer_error(dpl_set_error(DPL_ENOMEM, "ucx: out of "
						  "memory"), buf, len);
	}
	ucp_config_print(cfg, f, NULL, UCS_CONFIG_PRINT_CONFIG);
	fclose(f);
	setting(text, "TLS", tls, sizeof tls);
	setting(text, "NET_DEVICES", dev, sizeof dev);
	free(text);
	dpl__ucx_params(&prm);
	st = ucp_init(&prm, cfg, &uc);
	ucp_config_release(cfg);
	if (st != UCS_OK) {
		rc = dpl__ucx_status(st) == DPL_ENOMEM ? DPL_ENOMEM : DPL_EIO;
		return answer_error(dpl_set_error(rc, "ucx: ucp_init with "
						  "UCX_TLS=%s UCX_NET_DEVICES"
						  "=%s: %s", tls, dev,
						  ucs_status_string(st)),
				    buf, len);
	}
	ucp_cleanup(uc);
	snprintf(buf, len, "UCX_TLS=%s, UCX_NET_DEVICES=%s", tls, dev);
	return 0;
}
