/*
 * test_matching.c - which receive a message lands in: exact tags with no
 * cross-talk, matching by source among three peers, the order of one
 * sender's messages on one tag (also large before small), and callers
 * that take completions in any order (cases 12, 14, 15, 16 and 40).
 * Masks and wildcards (case 13) are outside dpl's contract: tags match
 * exactly, which the first test checks with tags one bit apart.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NTAGS 10
#define ROUNDS 4
#define MLEN 256

static const uint64_t tags[NTAGS] = {
	0,
	1,
	2,
	UINT64_C(1) << 59,
	(UINT64_C(1) << 59) | 1,
	DPL_TAG_MAX,
	DPL_TAG_MAX - 1,
	UINT64_C(0x0555555555555555),
	UINT64_C(0x0aaaaaaaaaaaaaaa),
	UINT64_C(1) << 32,
};

static uint64_t tseed(unsigned t, unsigned r)
{
	return 100 + t * 10 + r;
}

/* Rank 0 sends ROUNDS rounds over all tags, same length; rank 1 posts
 * per tag in a scrambled tag order, half before and half after the
 * sends, so a wrong match shows as wrong data. */
static void tags_rank(struct tj_rank *rk)
{
	static const unsigned perm[NTAGS] = {5, 2, 7, 0, 9, 3, 6, 1, 8, 4};
	unsigned char *buf = tj_alloc(rk, NTAGS * ROUNDS * MLEN);
	struct conf_set s;
	unsigned t, r, i;
	long long bad;

	conf_set_init(rk, &s, NTAGS * ROUNDS);
	if (rk->rank == 0) {
		tj_barrier(rk);
		tj_step(rk, "sending %d rounds over %d tags", ROUNDS,
			NTAGS);
		for (r = 0; r < ROUNDS; r++)
			for (t = 0; t < NTAGS; t++) {
				unsigned char *p = buf + (r * NTAGS + t) * MLEN;

				tj_fill(p, MLEN, tseed(t, r));
				conf_send_early(rk, &s, 1, tags[t], p, MLEN);
			}
		tj_barrier(rk);
		conf_set_flush(rk, &s);
		conf_set_wait(rk, &s, "sends over many tags");
		for (i = 0; i < s.n; i++)
			TJ_CHECK(rk, s.rc[i] == 0, "send %u: %s", i,
				 dpl_err_name(s.rc[i]));
		return;
	}
	/* slot i = (perm index, round) */
	tj_step(rk, "posting the first half of the receives");
	for (i = 0; i < NTAGS / 2; i++)
		for (r = 0; r < ROUNDS; r++) {
			t = perm[i];
			conf_recv(rk, conf_set_next(&s), 0, tags[t],
				  buf + (r * NTAGS + t) * MLEN, MLEN, &s);
			conf_set_added(&s);
		}
	tj_barrier(rk);
	tj_barrier(rk);
	tj_step(rk, "posting the second half of the receives");
	for (i = NTAGS / 2; i < NTAGS; i++)
		for (r = 0; r < ROUNDS; r++) {
			t = perm[i];
			conf_recv(rk, conf_set_next(&s), 0, tags[t],
				  buf + (r * NTAGS + t) * MLEN, MLEN, &s);
			conf_set_added(&s);
		}
	conf_set_wait(rk, &s, "receives over many tags");
	for (i = 0; i < s.n; i++)
		TJ_CHECK(rk, s.rc[i] == 0, "receive %u: %s", i,
			 dpl_err_name(s.rc[i]));
	for (r = 0; r < ROUNDS; r++)
		for (t = 0; t < NTAGS; t++) {
			bad = tj_verify(buf + (r * NTAGS + t) * MLEN, MLEN,
					tseed(t, r));
			TJ_CHECK(rk, bad < 0,
				 "round %u of tag %#llx holds other data "
				 "(byte %lld): a message matched the wrong "
				 "receive",
				 r, (unsigned long long)tags[t], bad);
		}
}

Test(match, exact_tags_no_crosstalk, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = tags_rank, .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

static const size_t src_len[3] = {1024, 1024, 256 * 1024};

static void source_rank(struct tj_rank *rk)
{
	static const uint32_t order[3] = {3, 1, 2};
	unsigned char *buf[3][3];
	struct conf_set s;
	uint32_t k, i, p;
	long long bad;

	conf_set_init(rk, &s, 9);
	if (rk->rank != 0) {
		tj_barrier(rk);
		tj_step(rk, "sending 3 messages to rank 0 on tag 42");
		for (k = 0; k < 3; k++) {
			buf[0][k] = tj_alloc(rk, src_len[k]);
			tj_fill(buf[0][k], src_len[k], rk->rank * 100 + k);
			conf_send_early(rk, &s, 0, 42, buf[0][k], src_len[k]);
		}
		tj_barrier(rk);
		conf_set_flush(rk, &s);
		conf_set_wait(rk, &s, "sends to rank 0");
		for (k = 0; k < 3; k++)
			TJ_CHECK(rk, s.rc[k] == 0, "send %u: %s", k,
				 dpl_err_name(s.rc[k]));
		return;
	}
	for (p = 0; p < 3; p++)
		for (k = 0; k < 3; k++)
			buf[p][k] = tj_alloc(rk, src_len[k]);
	tj_step(rk, "receives of message 0 from ranks 3, 1, 2");
	for (i = 0; i < 3; i++) {
		p = order[i];
		conf_recv(rk, conf_set_next(&s), p, 42, buf[p - 1][0],
			  src_len[0], &s);
		conf_set_added(&s);
	}
	tj_barrier(rk);
	tj_progress_for(rk, 50);
	tj_barrier(rk);
	tj_step(rk, "receives of messages 1 and 2 from ranks 3, 1, 2");
	for (k = 1; k < 3; k++)
		for (i = 0; i < 3; i++) {
			p = order[i];
			conf_recv(rk, conf_set_next(&s), p, 42, buf[p - 1][k],
				  src_len[k], &s);
			conf_set_added(&s);
		}
	conf_set_wait(rk, &s, "receives from three peers");
	for (i = 0; i < s.n; i++)
		TJ_CHECK(rk, s.rc[i] == 0, "receive %u: %s", i,
			 dpl_err_name(s.rc[i]));
	for (p = 1; p <= 3; p++)
		for (k = 0; k < 3; k++) {
			bad = tj_verify(buf[p - 1][k], src_len[k],
					p * 100 + k);
			TJ_CHECK(rk, bad < 0,
				 "message %u received from rank %u is not "
				 "what rank %u sent (byte %lld)",
				 k, p, p, bad);
		}
}

Test(match, source_matching_three_peers, .timeout = 80)
{
	struct conf_job job = {.size = 4, .fn = source_rank,
			       .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

struct seq {
	size_t n;
	bool varied; /* sizes vary per message */
};

static size_t seq_len(const struct seq *a, size_t i)
{
	return a->varied ? 8 + (i * 37) % 8185 : 64;
}

static void seq_rank(struct tj_rank *rk)
{
	const struct seq *a = rk->arg;
	unsigned char **buf = tj_alloc(rk, a->n * sizeof *buf);
	struct conf_set s;
	size_t i, half = a->n / 2;
	uint64_t got;

	conf_set_init(rk, &s, a->n);
	for (i = 0; i < a->n; i++) {
		buf[i] = malloc(seq_len(a, i));
		TJ_CHECK(rk, buf[i] != NULL, "out of memory");
		memset(buf[i], 0, seq_len(a, i));
	}
	if (rk->rank == 0) {
		tj_barrier(rk);
		tj_step(rk, "sending %zu messages on tag 9", a->n);
		for (i = 0; i < a->n; i++) {
			tj_fill(buf[i] + 8, seq_len(a, i) - 8, 7000 + i);
			memcpy(buf[i], &(uint64_t){i}, 8);
			conf_send(rk, conf_set_next(&s), 1, 9, buf[i],
				  seq_len(a, i), &s);
			conf_set_added(&s);
		}
	} else {
		tj_step(rk, "posting %zu receives, then the sends", half);
		for (i = 0; i < half; i++) {
			conf_recv(rk, conf_set_next(&s), 0, 9, buf[i],
				  seq_len(a, i), &s);
			conf_set_added(&s);
		}
		tj_barrier(rk);
		tj_step(rk, "posting the other %zu receives", a->n - half);
		for (i = half; i < a->n; i++) {
			conf_recv(rk, conf_set_next(&s), 0, 9, buf[i],
				  seq_len(a, i), &s);
			conf_set_added(&s);
		}
	}
	conf_set_wait(rk, &s, "an ordered stream");
	for (i = 0; i < a->n; i++) {
		TJ_CHECK(rk, s.rc[i] == 0, "%s %zu of %zu: %s%s",
			 rk->rank ? "receive" : "send", i, a->n,
			 dpl_err_name(s.rc[i]),
			 s.rc[i] == DPL_ETRUNC && rk->rank
				 ? " (a message overtook another)"
				 : "");
		if (rk->rank == 0)
			continue;
		memcpy(&got, buf[i], 8);
		TJ_CHECK(rk, got == i,
			 "receive %zu got message %llu: messages of one "
			 "sender on one tag must match in order",
			 i, (unsigned long long)got);
		TJ_CHECK(rk, tj_verify(buf[i] + 8, seq_len(a, i) - 8,
				       7000 + i) < 0,
			 "message %zu's payload differs", i);
	}
	for (i = 0; i < a->n; i++)
		free(buf[i]);
}

Test(order, same_tag_1000_messages, .timeout = 80)
{
	struct seq a = {.n = 1000, .varied = false};
	struct conf_job job = {.size = 2, .fn = seq_rank, .arg = &a,
			       .deadline_s = 60};

	conf_run(&job);
}

Test(order, same_tag_1000_messages_of_varied_sizes, .timeout = 80)
{
	struct seq a = {.n = 1000, .varied = true};
	struct conf_job job = {.size = 2, .fn = seq_rank, .arg = &a,
			       .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

/* On one tag: L S L S S L (L = 4 MiB, rendezvous everywhere; S = 8 B,
 * eager everywhere). Receives are exact-size, so a small message that
 * overtook a large one completes a receive with DPL_ETRUNC. */
static void mixed_rank(struct tj_rank *rk)
{
	static const size_t lens[6] = {4u << 20, 8, 4u << 20, 8, 8, 4u << 20};
	bool unexpected = *(bool *)rk->arg;
	unsigned char *buf[6];
	struct conf_set s;
	unsigned k;
	long long bad;

	conf_set_init(rk, &s, 6);
	for (k = 0; k < 6; k++) {
		buf[k] = tj_alloc(rk, lens[k]);
		if (rk->rank == 0)
			tj_fill(buf[k], lens[k], 300 + k);
	}
	if (rk->rank == 1 && !unexpected) {
		for (k = 0; k < 6; k++) {
			conf_recv(rk, conf_set_next(&s), 0, 5, buf[k],
				  lens[k], &s);
			conf_set_added(&s);
		}
	}
	if (rk->rank == 0 && unexpected) {
		for (k = 0; k < 6; k++)
			conf_send_early(rk, &s, 1, 5, buf[k], lens[k]);
		tj_progress_for(rk, 50);
	}
	tj_barrier(rk);
	conf_set_flush(rk, &s);
	for (k = 0; k < 6 && s.n < 6; k++) {
		if (rk->rank == 0)
			conf_send(rk, conf_set_next(&s), 1, 5, buf[k], lens[k],
				  &s);
		else
			conf_recv(rk, conf_set_next(&s), 0, 5, buf[k],
				  lens[k], &s);
		conf_set_added(&s);
	}
	conf_set_wait(rk, &s, "large and small messages on one tag");
	for (k = 0; k < 6; k++) {
		TJ_CHECK(rk, s.rc[k] == 0,
			 "%s %u (%zu bytes, %s): %s (a receive of this "
			 "size got another message: messages of one sender on "
			 "one tag must match in order)",
			 rk->rank ? "receive" : "send", k, lens[k],
			 unexpected ? "unexpected" : "expected",
			 dpl_err_name(s.rc[k]));
		if (rk->rank == 1) {
			bad = tj_verify(buf[k], lens[k], 300 + k);
			TJ_CHECK(rk, bad < 0,
				 "message %u (%zu bytes) differs at byte "
				 "%lld: messages of one sender on one tag "
				 "must match in order",
				 k, lens[k], bad);
		}
	}
}

Test(order, large_then_small_expected, .timeout = 80)
{
	bool unexpected = false;
	struct conf_job job = {.size = 2, .fn = mixed_rank,
			       .arg = &unexpected, .deadline_s = 60};

	conf_run(&job);
}

Test(order, large_then_small_unexpected, .timeout = 80)
{
	bool unexpected = true;
	struct conf_job job = {.size = 2, .fn = mixed_rank,
			       .arg = &unexpected, .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

static void any_order_rank(struct tj_rank *rk)
{
	static const size_t lens[8] = {4u << 20, 8, 1u << 20, 64,
				       256u << 10, 0, 16u << 10, 1};
	unsigned char *buf[8];
	char order[64] = "";
	struct conf_set s;
	unsigned k;
	long long bad;

	conf_set_init(rk, &s, 8);
	for (k = 0; k < 8; k++) {
		buf[k] = tj_alloc(rk, lens[k] + 1);
		if (rk->rank == 1)
			tj_fill(buf[k], lens[k], 400 + k);
	}
	if (rk->rank == 0) {
		for (k = 0; k < 8; k++) {
			conf_recv(rk, conf_set_next(&s), 1, 60 + k, buf[k],
				  lens[k], &s);
			conf_set_added(&s);
		}
		tj_barrier(rk);
	} else {
		tj_barrier(rk);
		for (k = 8; k-- > 0;) {
			conf_send(rk, conf_set_next(&s), 0, 60 + k, buf[k],
				  lens[k], &s);
			conf_set_added(&s);
		}
	}
	conf_set_wait(rk, &s, "requests completing in any order");
	for (k = 0; k < 8; k++)
		snprintf(order + strlen(order), sizeof order - strlen(order),
			 "%s%zu", k ? " " : "", s.order[k]);
	if (rk->rank == 0)
		tj_note(rk, "receives (posted 0..7) completed as: %s", order);
	for (k = 0; k < 8; k++) {
		TJ_CHECK(rk, s.rc[k] == 0, "request %u: %s", k,
			 dpl_err_name(s.rc[k]));
		if (rk->rank == 0) {
			bad = tj_verify(buf[k], lens[k], 400 + k);
			TJ_CHECK(rk, bad < 0,
				 "message of tag %u differs at byte %lld",
				 60 + k, bad);
		}
	}
}

Test(order, completion_order_not_assumed, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = any_order_rank,
			       .deadline_s = 60};

	conf_run(&job);
}
