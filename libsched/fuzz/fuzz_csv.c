/*
 * fuzz_csv.c - libFuzzer target: the CSV schedule reader and writer, and
 * the writer for PyTorch's runtime: a file that loads and validates is
 * lowered (when it is not), written with dpl_schedule_write_csv_comms,
 * and must load and validate again; a file read with its layout must be
 * written back in every byte, and load exactly when it loads without.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void comms_round_trip(const uint8_t *data, size_t size)
{
	dpl_schedule *s = NULL, *t = NULL;
	char *text;
	size_t len;

	if (dpl_schedule_read_csv((const char *)data, size, &s) != 0)
		return;
	if (dpl_schedule_validate(s, NULL) == 0 &&
	    (dpl_schedule_is_lowered(s) || dpl_schedule_lower(s) == 0)) {
		text = fuzz_write(s, dpl_schedule_write_csv_comms, &len);
		if (dpl_schedule_read_csv(text, len, &t) != 0)
			fuzz_fail("the comms file does not load");
		if (dpl_schedule_validate(t, NULL) != 0)
			fuzz_fail("the comms file does not validate");
		dpl_schedule_destroy(t);
		free(text);
	}
	dpl_schedule_destroy(s);
}

static int write_in(const dpl_schedule *s, FILE *f);
static const dpl_csv_layout *layout_now;

static int write_in(const dpl_schedule *s, FILE *f)
{
	return dpl_schedule_write_csv_layout(s, layout_now, f);
}

static void layout_round_trip(const uint8_t *data, size_t size)
{
	dpl_schedule *s = NULL, *plain = NULL;
	dpl_csv_layout *l = NULL;
	int a, b;
	char *text;
	size_t len;

	a = dpl_schedule_read_csv((const char *)data, size, &plain);
	b = dpl_schedule_read_csv_layout((const char *)data, size, &s, &l);
	if (a != b)
		fuzz_fail("the layout reader and the plain reader disagree");
	if (b != 0) {
		if (s != NULL || l != NULL)
			fuzz_fail("layout reader wrote its outputs on failure");
		return;
	}
	fuzz_expect_same(s, plain, 1, 1);
	layout_now = l;
	text = fuzz_write(s, write_in, &len);
	if (len != size || memcmp(text, data, size) != 0)
		fuzz_fail("the file read with its layout comes back changed");
	free(text);
	dpl_csv_layout_destroy(l);
	dpl_schedule_destroy(plain);
	dpl_schedule_destroy(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_round_trip(data, size, dpl_schedule_read_csv,
			dpl_schedule_write_csv, 0);
	comms_round_trip(data, size);
	layout_round_trip(data, size);
	return 0;
}
