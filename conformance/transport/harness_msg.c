/*
 * harness_msg.c - message helpers of rank code: sets of requests that
 * complete in any order (with sends queued while a backend pushes back
 * before the receives exist), the checked exchange of one message each
 * way, and the data patterns every message carries.
 */
#define _GNU_SOURCE
#include <string.h>

#include "harness_internal.h"

/* ------------------------------------------------------------------ */
/* Request sets                                                        */

void conf_set_init(struct conf_rank *rk, struct conf_set *s, size_t cap)
{
	size_t i;

	memset(s, 0, sizeof *s);
	s->cap = cap;
	s->pool = conf_reqs(rk, cap);
	s->rc = conf_alloc(rk, cap * sizeof *s->rc);
	s->order = conf_alloc(rk, cap * sizeof *s->order);
	s->q = conf_alloc(rk, cap * sizeof *s->q);
	for (i = 0; i < cap; i++)
		s->rc[i] = DPL_EAGAIN;
}

void *conf_set_next(struct conf_set *s)
{
	/* conf_set_init sized the pool; callers never post more. */
	return (unsigned char *)s->pool +
	       conf_req_stride(conf_ops()) * s->n;
}

void conf_set_added(struct conf_set *s)
{
	s->n++;
	s->left++;
}

size_t conf_set_poll(struct conf_rank *rk, struct conf_set *s)
{
	size_t i, got = 0;
	int rc;

	for (i = 0; i < s->n && s->left > 0; i++) {
		if (s->rc[i] != DPL_EAGAIN)
			continue;
		rc = dpl_transport_test(rk->t, conf_req(rk, s->pool, i));
		conf_check_code(rk, rc, "test");
		if (rc == DPL_EAGAIN)
			continue;
		s->rc[i] = rc;
		s->order[s->done++] = i;
		s->left--;
		got++;
	}
	return got;
}

void conf_send_early(struct conf_rank *rk, struct conf_set *s, uint32_t peer,
		     uint64_t tag, const void *buf, size_t len)
{
	uint64_t since = 0;
	struct conf_idle id = {0, 0};
	void *req = conf_set_next(s);
	int rc;

	while (s->queued == 0) {
		rc = dpl_transport_isend(rk->t, req, peer, tag, buf, len,
					 DPL_MEM_HOST);
		conf_check_code(rk, rc, "isend");
		if (rc == 0) {
			conf_set_added(s);
			return;
		}
		if (rc != DPL_EAGAIN)
			conf_fail(rk, "isend peer %u tag %#llx len %zu: %s (%s)",
				  peer, (unsigned long long)tag, len,
				  dpl_err_name(rc), dpl_last_error());
		if (since == 0)
			since = dpl_clock_ns();
		if (dpl_clock_ns() - since > 200000000ull)
			break;
		conf_set_poll(rk, s);
		conf__idle_turn(rk, &id,
				"isend pushed back before the receives");
	}
	s->q[s->n].peer = peer;
	s->q[s->n].tag = tag;
	s->q[s->n].buf = buf;
	s->q[s->n].len = len;
	s->rc[s->n] = CONF_QUEUED;
	s->n++;
	s->queued++;
}

void conf_set_flush(struct conf_rank *rk, struct conf_set *s)
{
	size_t i;

	for (i = 0; i < s->n; i++) {
		if (s->rc[i] != CONF_QUEUED)
			continue;
		conf_send(rk, conf_req(rk, s->pool, i), s->q[i].peer,
			  s->q[i].tag, s->q[i].buf, s->q[i].len, s);
		s->rc[i] = DPL_EAGAIN;
		s->left++;
	}
	s->queued = 0;
}

void conf_set_wait(struct conf_rank *rk, struct conf_set *s,
		   const char *what)
{
	struct conf_idle id = {0, 0};

	if (s->queued != 0)
		conf_fail(rk, "harness: %zu queued sends were never flushed",
			  s->queued);
	while (s->left > 0) {
		if (conf_set_poll(rk, s) > 0)
			continue;
		conf__idle_turn(rk, &id, what);
	}
}

/* ------------------------------------------------------------------ */
/* Exchanges                                                           */

void conf_exchange(struct conf_rank *rk, uint32_t peer, uint64_t tag,
		   size_t len, uint64_t seed)
{
	unsigned char *out = conf_alloc(rk, len), *in = conf_alloc(rk, len);
	void *rq = conf_reqs(rk, 2);
	long long bad;
	int rc;

	conf_fill(out, len, seed * 64 + rk->rank);
	conf_recv(rk, conf_req(rk, rq, 0), peer, tag, in, len, NULL);
	conf_send(rk, conf_req(rk, rq, 1), peer, tag, out, len, NULL);
	rc = conf_wait(rk, conf_req(rk, rq, 0), "an exchange's receive");
	conf_expect(rk, rc == 0, "receive of %zu bytes from rank %u: %s (%s)",
		    len, peer, dpl_err_name(rc), dpl_last_error());
	rc = conf_wait(rk, conf_req(rk, rq, 1), "an exchange's send");
	conf_expect(rk, rc == 0, "send of %zu bytes to rank %u: %s (%s)", len,
		    peer, dpl_err_name(rc), dpl_last_error());
	bad = conf_verify(in, len, seed * 64 + peer);
	conf_expect(rk, bad < 0, "%zu bytes from rank %u differ at offset %lld",
		    len, peer, bad);
	conf_free(rk, rq);
	conf_free(rk, in);
	conf_free(rk, out);
}

/* ------------------------------------------------------------------ */
/* Patterns                                                            */

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t word_at(uint64_t seed, size_t w)
{
	return mix(seed * 0x100000001b3ull ^ (uint64_t)w);
}

void conf_fill(void *buf, size_t len, uint64_t seed)
{
	unsigned char *b = buf;
	size_t i, w;
	uint64_t v;

	for (w = 0; w * 8 < len; w++) {
		v = word_at(seed, w);
		for (i = 0; i < 8 && w * 8 + i < len; i++)
			b[w * 8 + i] = (unsigned char)(v >> (8 * i));
	}
}

long long conf_verify(const void *buf, size_t len, uint64_t seed)
{
	const unsigned char *b = buf;
	size_t i, w;
	uint64_t v;

	for (w = 0; w * 8 < len; w++) {
		v = word_at(seed, w);
		for (i = 0; i < 8 && w * 8 + i < len; i++)
			if (b[w * 8 + i] != (unsigned char)(v >> (8 * i)))
				return (long long)(w * 8 + i);
	}
	return -1;
}
