/*
 * profile.c - layer profiles built in memory (dpl_profile_create()), and
 * the accessors of every profile. The text format is read in
 * profile_text.c; the layer order and cuts are found in profile_build.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

static int check_layer_value(uint32_t i, const char *what, double v)
{
	if (!isfinite(v) || v < 0)
		return dpl_set_error(DPL_EINVAL,
				  "layer %u: %s must be finite and >= 0 (got %g)",
				  i, what, v);
	return 0;
}

int dpl_profile_create(const struct dpl_layer *layers, uint32_t n,
		       const uint32_t *edges, size_t nedges,
		       dpl_profile **out)
{
	struct builder bl = {.source = "profile"};
	struct idmap ids = {0};
	int rc = 0;

	if (layers == NULL || out == NULL || (edges == NULL && nedges > 0))
		return dpl_set_error(DPL_EINVAL,
				  "layers, edges and out must not be NULL");
	if (n == 0)
		return dpl_set_error(DPL_EINVAL, "layers must be >= 1 (got 0)");
	if ((rc = dpl__idmap_init(&ids, n)))
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		const struct dpl_layer *l = &layers[i];
		struct raw_node nd = {0};
		char tmp[32];

		if ((rc = check_layer_value(i, "forward_ms", l->forward_ms)) ||
		    (rc = check_layer_value(i, "backward_ms", l->backward_ms)) ||
		    (rc = check_layer_value(i, "activation_bytes",
					    l->activation_bytes)) ||
		    (rc = check_layer_value(i, "parameter_bytes",
					    l->parameter_bytes)))
			goto out;
		snprintf(tmp, sizeof tmp, "layer%u", i);
		nd.id = l->id ? dpl__dup_range(l->id, strlen(l->id))
			      : dpl__dup_range(tmp, strlen(tmp));
		nd.name = l->name ? dpl__dup_range(l->name, strlen(l->name))
				  : dpl__dup_range("", 0);
		if (!nd.id || !nd.name) {
			free(nd.id);
			free(nd.name);
			rc = dpl_set_error(DPL_ENOMEM, "out of memory");
			goto out;
		}
		if (dpl__idmap_find(&ids, &bl, nd.id, strlen(nd.id)) !=
		    UINT32_MAX) {
			rc = dpl_set_error(DPL_EINVAL, "layer %u: id '%s' repeated",
					i, nd.id);
			free(nd.id);
			free(nd.name);
			goto out;
		}
		nd.f = l->forward_ms;
		nd.b = l->backward_ms;
		nd.act = l->activation_bytes;
		nd.par = l->parameter_bytes;
		if ((rc = dpl__add_node(&bl, &nd))) {
			free(nd.id);
			free(nd.name);
			goto out;
		}
		dpl__idmap_put(&ids, nd.id, i);
	}
	for (size_t k = 0; k < nedges; k++) {
		if (edges[2 * k] >= n || edges[2 * k + 1] >= n) {
			rc = dpl_set_error(DPL_EINVAL,
					"edge %zu: layer index %u out of range "
					"(layers: %u)",
					k,
					edges[2 * k] >= n ? edges[2 * k]
							  : edges[2 * k + 1],
					n);
			goto out;
		}
		if ((rc = dpl__add_edge(&bl, edges[2 * k], edges[2 * k + 1],
					  0)))
			goto out;
	}
	rc = dpl__profile_finalize(&bl, out);
out:
	free(ids.slot);
	dpl__builder_free(&bl);
	return rc;
}

void dpl_profile_destroy(dpl_profile *p)
{
	if (p == NULL)
		return;
	if (p->strings)
		for (size_t i = 0; i < 2 * (size_t)p->n; i++)
			free(p->strings[i]);
	free(p->strings);
	free(p->layer);
	free(p->line);
	free(p->edge);
	free(p->cut);
	free(p);
}

uint32_t dpl_profile_layers(const dpl_profile *p)
{
	return p ? p->n : 0;
}

const struct dpl_layer *dpl_profile_layer(const dpl_profile *p, uint32_t i)
{
	return p && i < p->n ? &p->layer[i] : NULL;
}

uint32_t dpl_profile_source_line(const dpl_profile *p, uint32_t i)
{
	return p && i < p->n ? p->line[i] : 0;
}

size_t dpl_profile_edges(const dpl_profile *p)
{
	return p ? p->nedges : 0;
}

int dpl_profile_edge(const dpl_profile *p, size_t k, uint32_t *from,
		     uint32_t *to)
{
	if (p == NULL || k >= p->nedges)
		return dpl_set_error(DPL_EINVAL, "edge %zu out of range (edges: %zu)",
				  k, p ? p->nedges : 0);
	if (from)
		*from = p->edge[2 * k];
	if (to)
		*to = p->edge[2 * k + 1];
	return 0;
}

double dpl_profile_cut_bytes(const dpl_profile *p, uint32_t cut)
{
	if (p == NULL || cut == 0 || cut >= p->n)
		return 0;
	return p->cut[cut];
}
