/*
 * runner_blame.c - whom a timeout is about. A rank that times out
 * waiting for rank Q tells every rank so (a timeout notice: "I wait for
 * Q"), then follows the chain: Q's own notice says whom Q waits for, and
 * so on, until a rank that lost a peer, failed by itself, or sent no word
 * within the grace period -- a rank stopped, stuck or cut off. That rank
 * is the cause every survivor names, not the neighbour each one waited
 * for. The chain has one deadline, set by the first rank that timed out
 * and passed on in every notice (what is left of it), so that the ranks
 * that learn of the timeout later do not wait longer.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runner_internal.h"

uint64_t dpl__grace_ns(const dpl_runner *r)
{
	uint64_t q = r->timeout_ns / 4;

	return q < DPL__GRACE_MAX_NS ? q : DPL__GRACE_MAX_NS;
}

void dpl__ctrl_poll(dpl_runner *r)
{
	const struct dpl_transport_ops *o = r->t->ops;
	uint32_t q;
	int rc;

	for (q = 0; q < r->world; q++) {
		struct dpl__rreq *c = &r->ctrl_r[q];

		if (!c->live)
			continue;
		rc = o->test(r->t->ctx, c->req);
		if (rc == DPL_EAGAIN)
			continue;
		c->live = false;
		/* A peer that left normally completes it with an error; only
		 * a delivered notice means failure. */
		if (rc == 0)
			r->ctrl_got[q] = true;
	}
}

/* Append to the chain's text; it stays NUL-terminated when full. */
static void add(struct dpl__blame *b, const char *fmt, ...)
	DPL__PRINTF(2, 3);

static void add(struct dpl__blame *b, const char *fmt, ...)
{
	size_t n = strlen(b->text);
	va_list ap;

	if (n + 1 >= sizeof b->text)
		return;
	va_start(ap, fmt);
	vsnprintf(b->text + n, sizeof b->text - n, fmt, ap);
	va_end(ap);
}

/* Wait a little for the next notice: progress, look, nap. */
static void breathe(dpl_runner *r)
{
	struct timespec nap = {0, 200000};

	if (dpl__tp_progress(r->t) < 0)
		return;
	dpl__ctrl_poll(r);
	nanosleep(&nap, NULL);
}

void dpl__blame_chain(dpl_runner *r, uint32_t q, struct dpl__blame *b)
{
	uint64_t end = r->chain_end;
	uint32_t hops = 0, cur = q;
	char t[DPL_ACTION_TEXT_MAX];

	b->text[0] = '\0';
	b->culprit = q;
	while (r->t != NULL && r->world > 1) {
		const unsigned char *m = r->ctrl_in + (size_t)cur * DPL__CTRL_BYTES;
		int32_t code;
		uint32_t next;

		if (cur == r->rank) {
			add(b, " (this rank): the ranks wait for each other "
			       "in a cycle");
			b->culprit = q;
			return;
		}
		if (!r->ctrl_got[cur]) {
			if (dpl__now_ns() < end) {
				breathe(r);
				continue;
			}
			add(b, "; rank %u sent no word within %llu ms: it is "
			       "stopped, stuck or cut off",
			    cur,
			    (unsigned long long)(dpl__grace_ns(r) / 1000000u));
			b->culprit = cur;
			return;
		}
		code = (int32_t)dpl_get_u32(m);
		next = dpl_get_u32(m + 8);
		if (code == DPL_ETIMEDOUT && next != DPL__NONE &&
		    next < r->world) {
			if (++hops > r->world) {
				add(b, ": the ranks wait for each other in a "
				       "cycle");
				b->culprit = q;
				return;
			}
			add(b, hops == 1 ? "; rank %u waits for rank %u"
					 : ", rank %u for rank %u",
			    cur, next);
			cur = next;
			b->culprit = cur;
			continue;
		}
		{
			struct dpl_action a = {dpl_get_u32(m + 12),
					       dpl_get_u32(m + 16),
					       dpl_get_u32(m + 20)};

			dpl__act_text(a, t, sizeof t);
		}
		if (code == DPL_EPEER && next != DPL__NONE && next < r->world) {
			add(b, "; rank %u lost rank %u in %s: peer failed "
			       "(DPL_EPEER)",
			    cur, next, t);
			b->culprit = next;
		} else {
			add(b, "; rank %u failed in %s: %s (%s)", cur, t,
			    dpl_strerror(code), dpl_err_name(code));
			b->culprit = cur;
		}
		return;
	}
}

int dpl__timed_out(dpl_runner *r, uint32_t peer)
{
	char t[DPL_ACTION_TEXT_MAX];
	struct dpl__blame b;

	if (r->errmsg[0] != '\0')
		return DPL_ETIMEDOUT;
	if (r->world > 1 && r->t != NULL) {
		r->chain_end = dpl__now_ns() + dpl__grace_ns(r);
		dpl__post_notices(r, DPL_ETIMEDOUT, peer);
		dpl__blame_chain(r, peer, &b);
	} else {
		b.text[0] = '\0';
		b.culprit = peer;
	}
	dpl__fail(r, DPL_ETIMEDOUT, "timed out after %llu ms in %s waiting "
		  "for rank %u%s",
		  (unsigned long long)(r->timeout_ns / 1000000u),
		  dpl__act_text(r->cur, t, sizeof t), peer, b.text);
	r->err_peer = b.culprit;
	return DPL_ETIMEDOUT;
}

void dpl__join_chain(dpl_runner *r, const unsigned char *m)
{
	uint64_t left = (uint64_t)dpl_get_u32(m + 28) * 1000u;
	uint64_t least = dpl__grace_ns(r) / 8;

	r->chain_end = dpl__now_ns() + (left > least ? left : least);
}

void dpl__stay(dpl_runner *r)
{
	struct timespec nap = {0, 200000};
	uint64_t end;

	if (r->notice_ns == 0 || r->t == NULL)
		return;
	/* A rank that passed another's notice on stays a quarter of the
	 * grace (the chain's end, when later): the notice is not new, and a
	 * full grace after a late one would add to the time to exit. */
	end = r->notice_ns + dpl__grace_ns(r) / (r->by_notice ? 4 : 1);
	if (r->by_notice && r->chain_end > end)
		end = r->chain_end;
	while (dpl__now_ns() < end && dpl__tp_progress(r->t) >= 0)
		nanosleep(&nap, NULL);
}
