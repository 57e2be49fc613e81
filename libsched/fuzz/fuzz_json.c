/* fuzz_json.c - libFuzzer target: the JSON schedule reader and writer. */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>

#include <dpl/json.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_round_trip(data, size, dpl_schedule_read_json,
			       dpl_schedule_write_json, 1);
}
