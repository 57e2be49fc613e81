/*
 * test_plan_cluster.c - the cluster model: the presets' numbers, the
 * field checks, DAPPLE's three placement policies (the worked example of
 * DAPPLE.md §2.4 / §6 claim 8 and the edge cases of the released code),
 * and cluster files with a corpus of malformed ones.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/plan.h>

#include "sched_util.h"
#include <dpl/json.h>

static uint64_t set(const int *ids, size_t n)
{
	uint64_t m = 0;

	for (size_t k = 0; k < n; k++)
		m |= 1ULL << ids[k];
	return m;
}

#define SET(...)                                                              \
	set((const int[]){__VA_ARGS__},                                       \
	    sizeof((const int[]){__VA_ARGS__}) / sizeof(int))


static bool same_cluster(const struct dpl_cluster *a,
			 const struct dpl_cluster *b)
{
	return strcmp(a->name, b->name) == 0 && a->machines == b->machines &&
	       a->devices_per_machine == b->devices_per_machine &&
	       a->device_memory == b->device_memory &&
	       a->intra_bandwidth == b->intra_bandwidth &&
	       a->intra_latency == b->intra_latency &&
	       a->inter_bandwidth == b->inter_bandwidth &&
	       a->inter_latency == b->inter_latency &&
	       a->ar_intra_bandwidth == b->ar_intra_bandwidth &&
	       a->ar_intra_pairs == b->ar_intra_pairs &&
	       a->ar_inter_bandwidth == b->ar_inter_bandwidth;
}

Test(plan_cluster, placement_example_of_dapple)
{
	struct dpl_cluster c;
	uint64_t taken = SET(0, 1, 2), g;

	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	cr_assert_eq(dpl_cluster_place(&c, taken, 4, DPL_PLACE_FRESH_FIRST, &g),
		     0);
	cr_expect_eq(g, SET(8, 9, 10, 11), "fresh-first %#llx",
		     (unsigned long long)g);
	cr_assert_eq(
	    dpl_cluster_place(&c, taken, 4, DPL_PLACE_APPEND_FIRST, &g), 0);
	cr_expect_eq(g, SET(3, 4, 5, 6), "append-first %#llx",
		     (unsigned long long)g);
	cr_assert_eq(
	    dpl_cluster_place(&c, taken, 4, DPL_PLACE_SCATTER_FIRST, &g), 0);
	cr_expect_eq(g, SET(3, 4, 8, 9), "scatter-first %#llx",
		     (unsigned long long)g);
}

Test(plan_cluster, placement_edge_cases)
{
	struct dpl_cluster c;
	uint64_t g = 0;

	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	/* empty cluster: append-first has no partly used machine */
	cr_expect_eq(dpl_cluster_place(&c, 0, 2, DPL_PLACE_APPEND_FIRST, &g),
		     DPL_ENOENT);
	cr_expect(strstr(dpl_last_error(), "append-first cannot supply 2") !=
		  NULL, "%s", dpl_last_error());
	/* fresh-first spills over whole machines */
	cr_assert_eq(dpl_cluster_place(&c, 0, 12, DPL_PLACE_FRESH_FIRST, &g),
		     0);
	cr_expect_eq(g, 0xFFFULL);
	/* scatter-first on an empty cluster alternates machines */
	cr_assert_eq(dpl_cluster_place(&c, 0, 3, DPL_PLACE_SCATTER_FIRST, &g),
		     0);
	cr_expect_eq(g, SET(0, 1, 8));
	/* no fresh machine left */
	cr_expect_eq(dpl_cluster_place(&c, SET(0, 8), 1, DPL_PLACE_FRESH_FIRST,
				       &g),
		     DPL_ENOENT);
	/* append-first may span partly used machines */
	cr_assert_eq(dpl_cluster_place(&c, 0x7FULL | 0x7F00ULL, 2,
				       DPL_PLACE_APPEND_FIRST, &g),
		     0);
	cr_expect_eq(g, SET(7, 15));
	/* more than free */
	cr_expect_eq(dpl_cluster_place(&c, 0xFFFEULL, 2,
				       DPL_PLACE_SCATTER_FIRST, &g),
		     DPL_ENOENT);
	cr_expect_eq(dpl_cluster_place(&c, 0, 0, DPL_PLACE_FRESH_FIRST, &g),
		     DPL_EINVAL);
	cr_expect_eq(dpl_cluster_place(&c, 1ULL << 16, 1,
				       DPL_PLACE_FRESH_FIRST, &g),
		     DPL_EINVAL);
	cr_expect_eq(dpl_cluster_place(&c, 0, 1, (enum dpl_placement)7, &g),
		     DPL_EINVAL);
	cr_expect_str_eq(dpl_placement_name(DPL_PLACE_SCATTER_FIRST),
			 "scatter-first");
	cr_expect_null(dpl_placement_name(DPL_PLACE__COUNT));
}

Test(plan_cluster, presets_carry_the_documented_numbers)
{
	struct dpl_cluster a, b, c;

	cr_assert_eq(dpl_cluster_preset("paper-a", &a), 0);
	cr_assert_eq(dpl_cluster_preset("paper-b", &b), 0);
	cr_assert_eq(dpl_cluster_preset("paper-c", &c), 0);
	cr_expect_eq(dpl_cluster_devices(&a), 16);
	cr_expect_eq(dpl_cluster_devices(&b), 16);
	cr_expect_eq(a.machines, 2);
	cr_expect_eq(a.devices_per_machine, 8);
	cr_expect_eq(b.machines, 16);
	cr_expect_eq(a.device_memory, 16e9);
	cr_expect_eq(a.intra_bandwidth, 25e9);
	cr_expect_eq(a.ar_intra_bandwidth, 25e9);
	cr_expect(a.ar_intra_pairs);
	cr_expect_eq(a.inter_bandwidth, 3.0e9);
	cr_expect_eq(b.inter_bandwidth, 3.0e9);
	cr_expect_eq(c.inter_bandwidth, 1.2e9);
	cr_expect_eq(c.ar_inter_bandwidth, 1.2e9);
	cr_expect_eq(dpl_cluster_check(&a), 0);
	cr_expect_eq(dpl_cluster_check(&b), 0);
	cr_expect_eq(dpl_cluster_check(&c), 0);
	cr_expect_eq(dpl_cluster_preset("paper-d", &a), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "paper-d") != NULL &&
		      strstr(dpl_last_error(), "paper-a, paper-b, paper-c"),
		  "%s", dpl_last_error());
}

Test(plan_cluster, check_names_the_bad_field)
{
	struct dpl_cluster c;

	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	c.inter_bandwidth = 0;
	cr_expect_eq(dpl_cluster_check(&c), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "inter_bandwidth must be > 0") !=
		  NULL, "%s", dpl_last_error());
	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	c.intra_latency = -1;
	cr_expect_eq(dpl_cluster_check(&c), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "intra_latency") != NULL);
	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	c.machines = 9;
	cr_expect_eq(dpl_cluster_check(&c), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "more than 64 devices") != NULL);
	cr_assert_eq(dpl_cluster_preset("paper-b", &c), 0);
	c.device_memory = 0;
	cr_expect_eq(dpl_cluster_check(&c), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "device_memory") != NULL);
	/* one machine needs no network */
	cr_assert_eq(dpl_cluster_preset("paper-a", &c), 0);
	c.machines = 1;
	c.inter_bandwidth = 0;
	c.ar_inter_bandwidth = 0;
	cr_expect_eq(dpl_cluster_check(&c), 0);
	cr_expect_eq(dpl_cluster_check(NULL), DPL_EINVAL);
}

Test(plan_cluster, cluster_file_reads_with_defaults)
{
	struct dpl_cluster c;
	size_t len;
	char *text = slurp("plan/good_cluster.json", &len);

	cr_assert_eq(dpl_cluster_read_json(text, len, &c), 0, "%s",
		     dpl_last_error());
	cr_expect_str_eq(c.name, "four-by-two");
	cr_expect_eq(c.machines, 4);
	cr_expect_eq(c.devices_per_machine, 2);
	cr_expect_eq(c.device_memory, 32e9);
	cr_expect_eq(c.intra_bandwidth, 50e9);
	cr_expect_eq(c.inter_latency, 1e-5);
	/* allreduce bandwidths default to the point-to-point ones */
	cr_expect_eq(c.ar_intra_bandwidth, 50e9);
	cr_expect_eq(c.ar_inter_bandwidth, 12.5e9);
	cr_expect_eq(c.ar_intra_pairs, 0);
	free(text);
}

Test(plan_cluster, cluster_file_round_trips)
{
	struct dpl_cluster a, b;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	cr_assert_eq(dpl_cluster_preset("paper-a", &a), 0);
	f = open_memstream(&buf, &len);
	cr_assert_eq(dpl_cluster_write_json(&a, f), 0);
	fclose(f);
	cr_assert_eq(dpl_cluster_read_json(buf, len, &b), 0, "%s",
		     dpl_last_error());
	cr_expect(same_cluster(&a, &b));
	free(buf);
}

Test(plan_cluster, malformed_cluster_files)
{
	static const struct {
		const char *file, *want;
	} bad[] = {
	    {"bad_cluster_syntax.json", "JSON syntax error at line 2"},
	    {"bad_cluster_unknown_key.json", "unknown key 'gpus'"},
	    {"bad_cluster_missing.json", "missing key 'device_memory_bytes'"},
	    {"bad_cluster_type.json",
	     "machines: expected an integer, got a string"},
	    {"bad_cluster_negative.json",
	     "inter_bandwidth_bytes_per_s: -1 is below 0"},
	    {"bad_cluster_no_inter.json",
	     "inter_bandwidth must be > 0 for this cluster"},
	    {"bad_cluster_too_many.json", "16 machines x 8 devices is more "
					  "than 64 devices"},
	    {"bad_cluster_fraction.json",
	     "devices_per_machine: 1.5 is not an integer"},
	    {"bad_cluster_format.json",
	     "format: 'dpl-plan' is not a dpl-cluster file"},
	    {"bad_cluster_dup.json", "key 'machines' appears twice"},
	    {"bad_cluster_memory.json", "device_memory must be > 0"},
	    {"bad_cluster_bool.json",
	     "allreduce_intra_pairs: expected a boolean, got a number"},
	    {"bad_cluster_array.json", "top level: expected an object"},
	};
	struct dpl_cluster c;

	memset(&c, 0, sizeof c);
	snprintf(c.name, sizeof c.name, "untouched");
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		size_t len;
		char name[256], *text;

		snprintf(name, sizeof name, "plan/%s", bad[k].file);
		text = slurp(name, &len);
		struct dpl_cluster before = c;

		cr_expect_eq(dpl_cluster_read_json(text, len, &c), DPL_EPARSE,
			     "%s", bad[k].file);
		cr_expect(strstr(dpl_last_error(), bad[k].want) != NULL,
			  "%s: '%s' lacks '%s'", bad[k].file, dpl_last_error(),
			  bad[k].want);
		cr_expect(same_cluster(&before, &c),
			  "%s: output written on failure", bad[k].file);
		free(text);
	}
}
