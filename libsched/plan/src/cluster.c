/*
 * cluster.c - the cluster model: presets for the paper's hardware, the
 * field checks, and DAPPLE's three device-assignment policies.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

/* Numbers and sources: see dpl_cluster_preset() in plan.h. */
static const struct dpl_cluster presets[] = {
    {
	.name = "paper-a",
	.machines = 2,
	.devices_per_machine = 8,
	.device_memory = 16e9,
	.intra_bandwidth = 25e9,
	.intra_latency = 5e-6,
	.inter_bandwidth = 3.0e9,
	.inter_latency = 25e-6,
	.ar_intra_bandwidth = 25e9,
	.ar_intra_pairs = 1,
	.ar_inter_bandwidth = 3.0e9,
    },
    {
	.name = "paper-b",
	.machines = 16,
	.devices_per_machine = 1,
	.device_memory = 16e9,
	.inter_bandwidth = 3.0e9,
	.inter_latency = 25e-6,
	.ar_inter_bandwidth = 3.0e9,
    },
    {
	.name = "paper-c",
	.machines = 16,
	.devices_per_machine = 1,
	.device_memory = 16e9,
	.inter_bandwidth = 1.2e9,
	.inter_latency = 25e-6,
	.ar_inter_bandwidth = 1.2e9,
    },
};

int dpl_cluster_preset(const char *name, struct dpl_cluster *out)
{
	if (name == NULL || out == NULL)
		return dpl_set_error(DPL_EINVAL, "name and out must not be NULL");
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
		if (strcmp(presets[i].name, name) == 0) {
			*out = presets[i];
			return 0;
		}
	return dpl_set_error(DPL_EINVAL,
			  "unknown cluster preset '%.64s' (known: paper-a, "
			  "paper-b, paper-c)",
			  name);
}

uint32_t dpl_cluster_devices(const struct dpl_cluster *c)
{
	return c ? c->machines * c->devices_per_machine : 0;
}

static int check_rate(const char *field, double v, int needed)
{
	if (!isfinite(v) || v < 0)
		return dpl_set_error(DPL_EINVAL,
				  "cluster: %s must be finite and >= 0 (got %g)",
				  field, v);
	if (needed && v <= 0)
		return dpl_set_error(DPL_EINVAL,
				  "cluster: %s must be > 0 for this cluster "
				  "(got %g)",
				  field, v);
	return 0;
}

int dpl_cluster_check(const struct dpl_cluster *c)
{
	int intra, inter, rc;

	if (c == NULL)
		return dpl_set_error(DPL_EINVAL, "cluster must not be NULL");
	if (c->machines < 1)
		return dpl_set_error(DPL_EINVAL,
				  "cluster: machines must be >= 1 (got %u)",
				  c->machines);
	if (c->devices_per_machine < 1)
		return dpl_set_error(DPL_EINVAL,
				  "cluster: devices_per_machine must be >= 1 "
				  "(got %u)",
				  c->devices_per_machine);
	if ((uint64_t)c->machines * c->devices_per_machine >
	    DPL_PLAN_MAX_DEVICES)
		return dpl_set_error(DPL_EINVAL,
				  "cluster: %u machines x %u devices is more "
				  "than %d devices",
				  c->machines, c->devices_per_machine,
				  DPL_PLAN_MAX_DEVICES);
	if (!isfinite(c->device_memory) || c->device_memory <= 0)
		return dpl_set_error(DPL_EINVAL,
				  "cluster: device_memory must be > 0 (got %g)",
				  c->device_memory);
	intra = c->devices_per_machine > 1;
	inter = c->machines > 1;
	if ((rc = check_rate("intra_bandwidth", c->intra_bandwidth, intra)) ||
	    (rc = check_rate("intra_latency", c->intra_latency, 0)) ||
	    (rc = check_rate("inter_bandwidth", c->inter_bandwidth, inter)) ||
	    (rc = check_rate("inter_latency", c->inter_latency, 0)) ||
	    (rc = check_rate("allreduce intra_bandwidth",
			     c->ar_intra_bandwidth, intra)) ||
	    (rc = check_rate("allreduce inter_bandwidth",
			     c->ar_inter_bandwidth, inter)))
		return rc;
	return 0;
}

const char *dpl_placement_name(enum dpl_placement p)
{
	switch (p) {
	case DPL_PLACE_FRESH_FIRST:
		return "fresh-first";
	case DPL_PLACE_APPEND_FIRST:
		return "append-first";
	case DPL_PLACE_SCATTER_FIRST:
		return "scatter-first";
	default:
		return NULL;
	}
}

static uint64_t machine_mask(const struct dpl_cluster *c, uint32_t m)
{
	uint32_t d = c->devices_per_machine;
	uint64_t all = d >= 64 ? ~0ULL : ((1ULL << d) - 1);

	return all << (m * d);
}

/* Lowest `want` free devices of machine m (want <= free count). */
static uint64_t take_lowest(const struct dpl_cluster *c, uint64_t taken,
			    uint32_t m, uint32_t want)
{
	uint64_t free = machine_mask(c, m) & ~taken, got = 0;

	while (want-- > 0 && free) {
		uint64_t bit = free & (~free + 1);

		got |= bit;
		free &= ~bit;
	}
	return got;
}

int dpl__place(const struct dpl_cluster *c, uint64_t taken, uint32_t want,
	       enum dpl_placement policy, uint64_t *out)
{
	uint32_t d = c->devices_per_machine, need = want;
	uint64_t got = 0;

	switch (policy) {
	case DPL_PLACE_FRESH_FIRST:
	case DPL_PLACE_APPEND_FIRST:
		for (uint32_t m = 0; m < c->machines && need > 0; m++) {
			uint64_t mm = machine_mask(c, m);
			uint32_t used = (uint32_t)__builtin_popcountll(taken & mm);
			uint32_t avail = d - used, k;

			if (policy == DPL_PLACE_FRESH_FIRST ? used != 0
							    : (used == 0 ||
							       avail == 0))
				continue;
			k = avail < need ? avail : need;
			got |= take_lowest(c, taken, m, k);
			need -= k;
		}
		break;
	case DPL_PLACE_SCATTER_FIRST:
		while (need > 0) {
			int progress = 0;

			for (uint32_t m = 0; m < c->machines && need > 0; m++) {
				uint64_t bit = take_lowest(c, taken | got, m, 1);

				if (bit) {
					got |= bit;
					need--;
					progress = 1;
				}
			}
			if (!progress)
				break;
		}
		break;
	default:
		return DPL_EINVAL;
	}
	if (need > 0)
		return DPL_ENOENT;
	*out = got;
	return 0;
}

int dpl_cluster_place(const struct dpl_cluster *c, uint64_t taken,
		      uint32_t want, enum dpl_placement policy, uint64_t *out)
{
	uint32_t n;
	int rc;

	if ((rc = dpl_cluster_check(c)))
		return rc;
	if (out == NULL)
		return dpl_set_error(DPL_EINVAL, "out must not be NULL");
	n = dpl_cluster_devices(c);
	if (want == 0)
		return dpl_set_error(DPL_EINVAL, "want must be >= 1 (got 0)");
	if (dpl_placement_name(policy) == NULL)
		return dpl_set_error(DPL_EINVAL, "unknown placement policy %d",
				  (int)policy);
	if (n < 64 && (taken >> n) != 0)
		return dpl_set_error(DPL_EINVAL,
				  "taken names a device >= %u (mask %#llx)", n,
				  (unsigned long long)taken);
	rc = dpl__place(c, taken, want, policy, out);
	if (rc == DPL_ENOENT)
		return dpl_set_error(DPL_ENOENT,
				  "%s cannot supply %u devices (%u free)",
				  dpl_placement_name(policy), want,
				  n - (uint32_t)__builtin_popcountll(taken));
	return rc;
}
