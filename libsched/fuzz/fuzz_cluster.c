/*
 * fuzz_cluster.c - libFuzzer target: the JSON cluster reader. A file that
 * loads is written back; the text must load again and write the same.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/json.h>
#include <dpl/plan.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *text_of(const struct dpl_cluster *c, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (f == NULL)
		fuzz_fail("open_memstream");
	if (dpl_cluster_write_json(c, f) != 0)
		fuzz_fail("a loaded cluster does not write");
	fclose(f);
	return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dpl_cluster a, b;
	char *t1, *t2;
	size_t n1, n2;

	memset(&a, 0x5a, sizeof a);
	if (dpl_cluster_read_json((const char *)data, size, &a) != 0) {
		if (dpl_last_error()[0] == '\0')
			fuzz_fail("failure without a message");
		return 0;
	}
	if (dpl_cluster_check(&a) != 0)
		fuzz_fail("a loaded cluster fails dpl_cluster_check");
	t1 = text_of(&a, &n1);
	if (dpl_cluster_read_json(t1, n1, &b) != 0)
		fuzz_fail("the written cluster does not load");
	t2 = text_of(&b, &n2);
	if (n1 != n2 || memcmp(t1, t2, n1) != 0)
		fuzz_fail("writing is not stable");
	free(t1);
	free(t2);
	return 0;
}
