/*
 * harness_msg.c - message helpers of rank code: sets of requests that
 * complete in any order (with sends queued while a backend pushes back
 * before the receives exist) and the checked exchange of one message
 * each way, carrying test_job's data patterns.
 */
#define _GNU_SOURCE
#include <string.h>

#include "harness_internal.h"

/* ------------------------------------------------------------------ */
/* Request sets                                                        */

void conf_set_init(struct tj_rank *rk, struct conf_set *s, size_t cap)
{
	size_t i;

	memset(s, 0, sizeof *s);
	s->cap = cap;
	s->stride = tj_req_stride(rk);
	s->pool = tj_reqs(rk, cap);
	s->rc = tj_alloc(rk, cap * sizeof *s->rc);
	s->order = tj_alloc(rk, cap * sizeof *s->order);
	s->q = tj_alloc(rk, cap * sizeof *s->q);
	for (i = 0; i < cap; i++)
		s->rc[i] = DPL_EAGAIN;
}

void *conf_set_next(struct conf_set *s)
{
	/* conf_set_init sized the pool; callers never post more. */
	return (unsigned char *)s->pool + s->stride * s->n;
}

void conf_set_added(struct conf_set *s)
{
	s->n++;
	s->left++;
}

size_t conf_set_poll(struct tj_rank *rk, struct conf_set *s)
{
	size_t i, got = 0;
	int rc;

	for (i = 0; i < s->n && s->left > 0; i++) {
		if (s->rc[i] != DPL_EAGAIN)
			continue;
		rc = dpl_transport_test(rk->t, tj_req(rk, s->pool, i));
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

void conf_send_early(struct tj_rank *rk, struct conf_set *s, uint32_t peer,
		     uint64_t tag, const void *buf, size_t len)
{
	uint64_t since = 0;
	struct tj_idle id = {0, 0};
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
			TJ_FAIL(rk, "isend peer %u tag %#llx len %zu: %s (%s)",
				peer, (unsigned long long)tag, len,
				dpl_err_name(rc), dpl_last_error());
		if (since == 0)
			since = dpl_clock_ns();
		if (dpl_clock_ns() - since > 200000000ull)
			break;
		conf_set_poll(rk, s);
		tj_idle(rk, &id, "isend pushed back before the receives");
	}
	s->q[s->n].peer = peer;
	s->q[s->n].tag = tag;
	s->q[s->n].buf = buf;
	s->q[s->n].len = len;
	s->rc[s->n] = CONF_QUEUED;
	s->n++;
	s->queued++;
}

void conf_set_flush(struct tj_rank *rk, struct conf_set *s)
{
	size_t i;

	for (i = 0; i < s->n; i++) {
		if (s->rc[i] != CONF_QUEUED)
			continue;
		conf_send(rk, tj_req(rk, s->pool, i), s->q[i].peer,
			  s->q[i].tag, s->q[i].buf, s->q[i].len, s);
		s->rc[i] = DPL_EAGAIN;
		s->left++;
	}
	s->queued = 0;
}

void conf_set_wait(struct tj_rank *rk, struct conf_set *s,
		   const char *what)
{
	struct tj_idle id = {0, 0};

	if (s->queued != 0)
		TJ_FAIL(rk, "harness: %zu queued sends were never flushed",
			s->queued);
	while (s->left > 0) {
		if (conf_set_poll(rk, s) > 0)
			continue;
		tj_idle(rk, &id, what);
	}
}

/* ------------------------------------------------------------------ */
/* Exchanges                                                           */

void conf_exchange(struct tj_rank *rk, uint32_t peer, uint64_t tag,
		   size_t len, uint64_t seed)
{
	unsigned char *out = tj_alloc(rk, len), *in = tj_alloc(rk, len);
	void *rq = tj_reqs(rk, 2);
	long long bad;
	int rc;

	tj_fill(out, len, seed * 64 + rk->rank);
	conf_recv(rk, tj_req(rk, rq, 0), peer, tag, in, len, NULL);
	conf_send(rk, tj_req(rk, rq, 1), peer, tag, out, len, NULL);
	rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "an exchange's receive");
	TJ_CHECK(rk, rc == 0, "receive of %zu bytes from rank %u: %s (%s)",
		 len, peer, dpl_err_name(rc), dpl_last_error());
	rc = tj_wait(rk, tj_req(rk, rq, 1), 0, "an exchange's send");
	TJ_CHECK(rk, rc == 0, "send of %zu bytes to rank %u: %s (%s)", len,
		 peer, dpl_err_name(rc), dpl_last_error());
	bad = tj_verify(in, len, seed * 64 + peer);
	TJ_CHECK(rk, bad < 0, "%zu bytes from rank %u differ at offset %lld",
		 len, peer, bad);
	tj_free(rk, rq);
	tj_free(rk, in);
	tj_free(rk, out);
}
