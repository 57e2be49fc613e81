/*
 * cluster_json.c - cluster files as JSON (dpl-cluster, see dpl/json.h),
 * and the cluster object that plan files embed.
 */
#include <stdio.h>

#include <cjson/cJSON.h>

#include <dpl/json.h>
#include <dpl/plan.h>

#include "json_util.h"

enum {
	CK_FORMAT,
	CK_VERSION,
	CK_NAME,
	CK_MACHINES,
	CK_DPM,
	CK_MEM,
	CK_IBW,
	CK_ILAT,
	CK_XBW,
	CK_XLAT,
	CK_ARI,
	CK_ARP,
	CK_ARX,
	CK__N
};
static const char *const ckeys[CK__N] = {
    "format",
    "version",
    "name",
    "machines",
    "devices_per_machine",
    "device_memory_bytes",
    "intra_bandwidth_bytes_per_s",
    "intra_latency_s",
    "inter_bandwidth_bytes_per_s",
    "inter_latency_s",
    "allreduce_intra_bandwidth_bytes_per_s",
    "allreduce_intra_pairs",
    "allreduce_inter_bandwidth_bytes_per_s",
};

int dpl__json_read_cluster(const cJSON *obj, const char *path,
			   struct dpl_cluster *out)
{
	const cJSON *v[CK__N];
	struct dpl_cluster c = {0};
	char p[96], why[512];
	const char *name = NULL;
	int rc;

#define CPATH(k) (snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", \
			   ckeys[k]),                                     \
		  p)
	if ((rc = dpl__json_collect(obj, path, "dpl-cluster", ckeys, CK__N,
				    (1u << CK_MACHINES) | (1u << CK_DPM) |
					(1u << CK_MEM),
				    v)))
		return rc;
	if (v[CK_NAME]) {
		if ((rc = dpl__json_get_str(v[CK_NAME], CPATH(CK_NAME),
					    &name)))
			return rc;
		snprintf(c.name, sizeof c.name, "%s", name);
	}
	if ((rc = dpl__json_get_uint(v[CK_MACHINES], CPATH(CK_MACHINES), 1,
				     DPL_PLAN_MAX_DEVICES, &c.machines)) ||
	    (rc = dpl__json_get_uint(v[CK_DPM], CPATH(CK_DPM), 1,
				     DPL_PLAN_MAX_DEVICES,
				     &c.devices_per_machine)) ||
	    (rc = dpl__json_get_num(v[CK_MEM], CPATH(CK_MEM), 0,
				    &c.device_memory)))
		return rc;
	if (v[CK_IBW] && (rc = dpl__json_get_num(v[CK_IBW], CPATH(CK_IBW), 0,
						 &c.intra_bandwidth)))
		return rc;
	if (v[CK_ILAT] &&
	    (rc = dpl__json_get_num(v[CK_ILAT], CPATH(CK_ILAT), 0,
				    &c.intra_latency)))
		return rc;
	if (v[CK_XBW] && (rc = dpl__json_get_num(v[CK_XBW], CPATH(CK_XBW), 0,
						 &c.inter_bandwidth)))
		return rc;
	if (v[CK_XLAT] &&
	    (rc = dpl__json_get_num(v[CK_XLAT], CPATH(CK_XLAT), 0,
				    &c.inter_latency)))
		return rc;
	c.ar_intra_bandwidth = c.intra_bandwidth;
	c.ar_inter_bandwidth = c.inter_bandwidth;
	if (v[CK_ARI] && (rc = dpl__json_get_num(v[CK_ARI], CPATH(CK_ARI), 0,
						 &c.ar_intra_bandwidth)))
		return rc;
	if (v[CK_ARP] && (rc = dpl__json_get_bool(v[CK_ARP], CPATH(CK_ARP),
						  &c.ar_intra_pairs)))
		return rc;
	if (v[CK_ARX] && (rc = dpl__json_get_num(v[CK_ARX], CPATH(CK_ARX), 0,
						 &c.ar_inter_bandwidth)))
		return rc;
#undef CPATH
	if ((rc = dpl_cluster_check(&c))) {
		snprintf(why, sizeof why, "%s", dpl_last_error());
		return dpl_set_error(DPL_EPARSE, "%s", why);
	}
	*out = c;
	return 0;
}

int dpl_cluster_read_json(const char *text, size_t len,
			  struct dpl_cluster *out)
{
	cJSON *root;
	int rc;

	if (out == NULL)
		return dpl_set_error(DPL_EINVAL, "out must not be NULL");
	if ((rc = dpl__json_parse_text(text, len, "a JSON cluster", &root)))
		return rc;
	rc = dpl__json_read_cluster(root, "", out);
	cJSON_Delete(root);
	return rc;
}

void dpl__json_put_cluster(FILE *f, const struct dpl_cluster *c,
			   const char *indent, int with_format)
{
	fprintf(f, "{\n");
	if (with_format)
		fprintf(f, "%s  \"format\": \"dpl-cluster\",\n%s  \"version\": 1,\n",
			indent, indent);
	fprintf(f, "%s  \"name\": ", indent);
	dpl__json_put_str(f, c->name);
	fprintf(f,
		",\n%s  \"machines\": %u,\n%s  \"devices_per_machine\": %u,\n"
		"%s  \"device_memory_bytes\": %.17g,\n"
		"%s  \"intra_bandwidth_bytes_per_s\": %.17g,\n"
		"%s  \"intra_latency_s\": %.17g,\n"
		"%s  \"inter_bandwidth_bytes_per_s\": %.17g,\n"
		"%s  \"inter_latency_s\": %.17g,\n"
		"%s  \"allreduce_intra_bandwidth_bytes_per_s\": %.17g,\n"
		"%s  \"allreduce_intra_pairs\": %s,\n"
		"%s  \"allreduce_inter_bandwidth_bytes_per_s\": %.17g\n%s}",
		indent, c->machines, indent, c->devices_per_machine, indent,
		c->device_memory, indent, c->intra_bandwidth, indent,
		c->intra_latency, indent, c->inter_bandwidth, indent,
		c->inter_latency, indent, c->ar_intra_bandwidth, indent,
		c->ar_intra_pairs ? "true" : "false", indent,
		c->ar_inter_bandwidth, indent);
}

int dpl_cluster_write_json(const struct dpl_cluster *c, FILE *f)
{
	if (c == NULL || f == NULL)
		return dpl_set_error(DPL_EINVAL, "cluster and file must not be NULL");
	dpl__json_put_cluster(f, c, "", 1);
	fputc('\n', f);
	return dpl__json_finish(f, "cluster");
}
