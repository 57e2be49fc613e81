/* runner_layout.c - world ranks of a layout and sample ranges. */
#include "runner_internal.h"

int dpl_split(uint64_t total, uint64_t parts, uint64_t index,
	      uint64_t *begin, uint64_t *end)
{
	uint64_t q, rem;

	if (parts == 0)
		return dpl__error(DPL_EINVAL, "split into 0 parts");
	if (index >= parts)
		return dpl__error(DPL_EINVAL,
				  "split: part %llu of %llu out of range",
				  (unsigned long long)index,
				  (unsigned long long)parts);
	q = total / parts;
	rem = total % parts;
	*begin = index * q + (index < rem ? index : rem);
	*end = *begin + q + (index < rem ? 1 : 0);
	return 0;
}

int dpl_runner_world_size(const dpl_schedule *s, const uint32_t *replicas,
			  uint32_t *out)
{
	uint64_t sum = 0;
	uint32_t p, n;

	if (s == NULL)
		return dpl__error(DPL_EINVAL, "schedule is NULL");
	n = dpl_schedule_ranks(s);
	for (p = 0; p < n; p++) {
		uint32_t rp = replicas ? replicas[p] : 1;

		if (rp == 0)
			return dpl__error(DPL_EINVAL,
					  "replicas of pipeline rank %u must "
					  "be >= 1 (got 0)",
					  p);
		sum += rp;
	}
	if (sum > (UINT32_C(1) << 31))
		return dpl__error(DPL_ERANGE,
				  "world size %llu exceeds 2^31 ranks",
				  (unsigned long long)sum);
	*out = (uint32_t)sum;
	return 0;
}

int dpl_runner_position(const dpl_schedule *s, const uint32_t *replicas,
			uint32_t rank, uint32_t *pipeline_rank,
			uint32_t *replica)
{
	uint32_t world, p, n, base = 0;
	int rc;

	if ((rc = dpl_runner_world_size(s, replicas, &world)) != 0)
		return rc;
	if (rank >= world)
		return dpl__error(DPL_EINVAL,
				  "rank %u out of range for world size %u",
				  rank, world);
	n = dpl_schedule_ranks(s);
	for (p = 0; p < n; p++) {
		uint32_t rp = replicas ? replicas[p] : 1;

		if (rank < base + rp) {
			*pipeline_rank = p;
			*replica = rank - base;
			return 0;
		}
		base += rp;
	}
	return dpl__error(DPL_EINVAL, "rank %u out of range", rank);
}
