/*
 * fuzz_profile.c - libFuzzer target: the PipeDream graph text reader.
 * Every input must either be rejected with a message or load into a
 * profile whose invariants hold (layers in a topological order, finite
 * non-negative values and crossing bytes); a loaded profile must survive
 * the round trip through its JSON form unchanged.
 *
 *   cmake --build build-fuzz --target fuzz_profile
 *   mkdir -p /tmp/profile-corpus
 *   (copy the .txt files of libsched/tests/data/plan and of
 *    ../shared/profiles into /tmp/profile-corpus as seeds)
 *   build-fuzz/libsched/fuzz/fuzz_profile -max_total_time=60 \
 *      /tmp/profile-corpus
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/dpl.h>
#include <dpl/json.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why)
{
	fprintf(stderr, "fuzz_profile: %s (%s)\n", why, dpl_last_error());
	abort();
}

static void check(const dpl_profile *p)
{
	uint32_t n = dpl_profile_layers(p), a, b;

	if (n < 1)
		fail("a loaded profile has no layer");
	for (uint32_t i = 0; i < n; i++) {
		const struct dpl_layer *l = dpl_profile_layer(p, i);

		if (l == NULL || l->id == NULL || l->name == NULL)
			fail("layer missing");
		if (!isfinite(l->forward_ms) || l->forward_ms < 0 ||
		    !isfinite(l->backward_ms) || l->backward_ms < 0 ||
		    !isfinite(l->activation_bytes) || l->activation_bytes < 0 ||
		    !isfinite(l->parameter_bytes) || l->parameter_bytes < 0)
			fail("a value is negative or not finite");
		if (!(dpl_profile_cut_bytes(p, i) >= 0) ||
		    !isfinite(dpl_profile_cut_bytes(p, i)))
			fail("crossing bytes negative or not finite");
	}
	for (size_t k = 0; k < dpl_profile_edges(p); k++) {
		if (dpl_profile_edge(p, k, &a, &b) != 0)
			fail("edge out of range");
		if (!(a < b && b < n))
			fail("an edge goes against the layer order");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dpl_profile *p = NULL, *q = NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	if (dpl_profile_parse((const char *)data, size, "fuzz", &p) != 0) {
		if (p != NULL)
			fail("output written on failure");
		if (dpl_last_error()[0] == '\0')
			fail("rejected without a message");
		return 0;
	}
	check(p);
	f = open_memstream(&buf, &len);
	if (f == NULL)
		abort();
	if (dpl_profile_write_json(p, f) != 0)
		fail("writing the JSON form failed");
	fclose(f);
	if (dpl_profile_read_json(buf, len, &q) != 0)
		fail("the JSON form does not read back");
	if (dpl_profile_layers(q) != dpl_profile_layers(p) ||
	    dpl_profile_edges(q) != dpl_profile_edges(p))
		fail("shape differs after the round trip");
	for (uint32_t i = 0; i < dpl_profile_layers(p); i++) {
		const struct dpl_layer *x = dpl_profile_layer(p, i);
		const struct dpl_layer *y = dpl_profile_layer(q, i);

		if (strcmp(x->id, y->id) != 0 || strcmp(x->name, y->name) != 0 ||
		    x->forward_ms != y->forward_ms ||
		    x->backward_ms != y->backward_ms ||
		    x->activation_bytes != y->activation_bytes ||
		    x->parameter_bytes != y->parameter_bytes ||
		    dpl_profile_cut_bytes(p, i) != dpl_profile_cut_bytes(q, i))
			fail("a layer differs after the round trip");
	}
	free(buf);
	dpl_profile_destroy(p);
	dpl_profile_destroy(q);
	return 0;
}
