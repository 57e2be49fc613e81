/*
 * runner_fail.c - how a runner fails: its first error message, the
 * failure notices ranks send each other on the control tag, and the
 * clean-up of a failed step, so that every rank stops with the cause.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner_internal.h"

const char *dpl__act_text(struct dpl_action a, char *buf, size_t n)
{
	if (dpl_action_format(a, buf, n) < 0)
		snprintf(buf, n, "?");
	return buf;
}

/* Record the first failure message of this runner; returns code. */
int dpl__fail(dpl_runner *r, int code, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (r->errmsg[0] != '\0')
		return code;
	n = snprintf(r->errmsg, sizeof r->errmsg, "rank %u (stage rank %u, "
		     "replica %u): ", r->rank, r->prank, r->replica);
	if (n < 0 || (size_t)n >= sizeof r->errmsg)
		return code;
	va_start(ap, fmt);
	vsnprintf(r->errmsg + n, sizeof r->errmsg - (size_t)n, fmt, ap);
	va_end(ap);
	return code;
}

/* A request-level failure of the current action with `peer`. */
int dpl__fail_peer(dpl_runner *r, int code, uint32_t peer)
{
	char t[DPL_ACTION_TEXT_MAX];

	if (r->errmsg[0] == '\0')
		r->err_peer = peer;
	return dpl__fail(r, code, "%s with rank %u: %s (%s)",
		    dpl__act_text(r->cur, t, sizeof t), peer, dpl_strerror(code),
		    dpl_err_name(code));
}

int dpl__fail_post(dpl_runner *r, int code, uint32_t peer)
{
	char t[DPL_ACTION_TEXT_MAX], why[256];
	const char *msg = dpl_last_error();

	if (msg[0] == '\0')
		return dpl__fail_peer(r, code, peer);
	snprintf(why, sizeof why, "%s", msg);
	if (r->errmsg[0] == '\0')
		r->err_peer = peer;
	return dpl__fail(r, code, "%s with rank %u: %s (%s): %s",
			 dpl__act_text(r->cur, t, sizeof t), peer,
			 dpl_strerror(code), dpl_err_name(code), why);
}

static void relay(dpl_runner *r, const unsigned char *m);

/* A failure notice from another rank: adopt it as this rank's error. */
static int notice(dpl_runner *r, const unsigned char *m)
{
	int32_t code = (int32_t)dpl_get_u32(m);
	uint32_t origin = dpl_get_u32(m + 4), lost = dpl_get_u32(m + 8);
	struct dpl_action a = {dpl_get_u32(m + 12), dpl_get_u32(m + 16), dpl_get_u32(m + 20)};
	uint32_t iter = dpl_get_u32(m + 24);
	char t[DPL_ACTION_TEXT_MAX], here[DPL_ACTION_TEXT_MAX];
	struct dpl__blame b;

	r->errmsg[0] = '\0';
	r->by_notice = true;
	dpl__act_text(r->cur, here, sizeof here);
	dpl__act_text(a, t, sizeof t);
	if (code == DPL_ETIMEDOUT && lost < r->world) {
		uint32_t w = r->wait_peer;
		char mine[32] = "";

		dpl__join_chain(r, m);
		/* This rank stops too, and says whom it waits for (or, when
		 * it waits for none, whom that rank waited for), so that a
		 * chain through it goes on. Then follow the chain. */
		if (w != DPL__NONE)
			snprintf(mine, sizeof mine, " waiting for rank %u", w);
		else if (lost != r->rank)
			w = lost;
		if (w != DPL__NONE)
			dpl__post_notices(r, DPL_ETIMEDOUT, w);
		if (lost != r->rank) {
			dpl__blame_chain(r, lost, &b);
			r->err_peer = r->cause = b.culprit;
			return dpl__fail(r, DPL_EPEER,
				    "stopped in %s%s: rank %u timed out in %s "
				    "at iteration %u waiting for rank %u%s",
				    here, mine, origin, t, iter, lost, b.text);
		}
		if (w == DPL__NONE) {
			r->err_peer = r->cause = r->rank;
			return dpl__fail(r, DPL_EPEER,
				    "stopped in %s: rank %u timed out in %s "
				    "at iteration %u waiting for this rank",
				    here, origin, t, iter);
		}
		dpl__blame_chain(r, w, &b);
		r->err_peer = r->cause = b.culprit;
		return dpl__fail(r, DPL_EPEER,
			    "stopped in %s waiting for rank %u: rank %u "
			    "timed out in %s at iteration %u waiting for this "
			    "rank%s",
			    here, w, origin, t, iter, b.text);
	}
	relay(r, m);
	r->cause = code == DPL_EPEER && lost < r->world ? lost : origin;
	if (code == DPL_EPEER && lost != DPL__NONE)
		return dpl__fail(r, DPL_EPEER,
			    "stopped in %s: rank %u lost rank %u in %s at "
			    "iteration %u: peer failed (DPL_EPEER)",
			    here, origin, lost, t, iter);
	return dpl__fail(r, DPL_EPEER,
		    "stopped in %s: rank %u failed in %s at iteration %u: "
		    "%s (%s)",
		    here, origin, t, iter, dpl_strerror(code),
		    dpl_err_name(code));
}

/* The code a notice carries. */
static int notice_code(const unsigned char *m)
{
	return (int32_t)dpl_get_u32(m);
}

/*
 * Look for a failure notice; DPL_EPEER when one arrived (adopted as this
 * rank's error), else 0. With `first_hand`, only notices of a rank's own
 * failure (not of a peer it lost, nor of a timeout) are adopted; the
 * others are kept for a later look.
 */
int dpl__check_ctrl(dpl_runner *r, bool first_hand)
{
	const unsigned char *m;
	uint32_t q;

	dpl__ctrl_poll(r);
	for (q = 0; q < r->world; q++) {
		if (!r->ctrl_got[q])
			continue;
		m = r->ctrl_in + (size_t)q * DPL__CTRL_BYTES;
		if (first_hand && (notice_code(m) == DPL_EPEER ||
				   notice_code(m) == DPL_ETIMEDOUT))
			continue;
		return notice(r, m);
	}
	return 0;
}

int dpl__pump_failed(dpl_runner *r, int n)
{
	char t[DPL_ACTION_TEXT_MAX];

	return dpl__fail(r, n, "transport %s failed in %s: %s (%s)",
		    r->t->ops->name, dpl__act_text(r->cur, t, sizeof t),
		    dpl_strerror(n), dpl_err_name(n));
}

int dpl__ring_failed(dpl_runner *r, struct dpl__lstage *ls, int rc)
{
	if (r->errmsg[0] == '\0')
		r->err_peer = ls->ring.error_peer;
	return dpl__fail(r, rc, "%uREDUCE_GRAD with rank %u: %s (%s)", ls->stage,
		    ls->ring.error_peer, dpl_strerror(rc), dpl_err_name(rc));
}

/* Send ctrl_out to every other rank, once per runner: the sends may
 * read it until they complete. */
static void post_out(dpl_runner *r)
{
	uint64_t tag = dpl__tag(DPL__TAG_CTRL, 0, 0, 0);
	uint32_t q;

	r->notice_ns = dpl__now_ns();
	for (q = 0; q < r->world; q++) {
		if (q == r->rank || r->ctrl_s[q].live)
			continue;
		if (dpl__tp_isend(r->t, r->ctrl_s[q].req, q, tag, r->ctrl_out,
			     DPL__CTRL_BYTES, DPL_MEM_HOST) == 0)
			r->ctrl_s[q].live = true;
	}
}

void dpl__post_notices(dpl_runner *r, int code, uint32_t peer)
{
	if (r->notice_ns != 0)
		return;
	dpl_put_u32(r->ctrl_out, (uint32_t)code);
	dpl_put_u32(r->ctrl_out + 4, r->rank);
	dpl_put_u32(r->ctrl_out + 8, peer);
	dpl_put_u32(r->ctrl_out + 12, r->cur.kind);
	dpl_put_u32(r->ctrl_out + 16, r->cur.stage);
	dpl_put_u32(r->ctrl_out + 20, r->cur.microbatch);
	dpl_put_u32(r->ctrl_out + 24, (uint32_t)r->iter);
	dpl_put_u32(r->ctrl_out + 28, 0);
	if (code == DPL_ETIMEDOUT && r->chain_end > dpl__now_ns())
		dpl_put_u32(r->ctrl_out + 28,
			    (uint32_t)((r->chain_end - dpl__now_ns()) / 1000u));
	post_out(r);
}

/* Pass another rank's notice on as it is: a rank that sees this one
 * leave then reads the cause, not this rank's departure. */
static void relay(dpl_runner *r, const unsigned char *m)
{
	if (r->notice_ns != 0)
		return;
	memcpy(r->ctrl_out, m, DPL__CTRL_BYTES);
	post_out(r);
}

/* Tell every other rank that this one failed (best effort); the sends
 * leave while dpl__stay progresses. */
static void broadcast(dpl_runner *r, int code)
{
	dpl__post_notices(r, code,
			  code == DPL_EPEER ? r->err_peer : DPL__NONE);
}

int dpl__step_failed(dpl_runner *r, int rc)
{
	r->failed = true;
	if (r->errmsg[0] == '\0')
		dpl__fail(r, rc, "%s (%s)", dpl_strerror(rc), dpl_err_name(rc));
	if (r->world > 1 && !r->by_notice) {
		/* A lost peer or a timeout may be the echo of another rank's
		 * own failure: name that rank if its notice is here. */
		if (rc == DPL_EPEER || rc == DPL_ETIMEDOUT) {
			dpl__tp_progress(r->t);
			if (dpl__check_ctrl(r, true) != 0)
				rc = DPL_EPEER;
		}
		/* A peer lost after its notice came (it timed out, or lost
		 * a peer itself): name the cause the notice gives. */
		if (rc == DPL_EPEER && !r->by_notice &&
		    r->err_peer < r->world && r->ctrl_got[r->err_peer])
			rc = notice(r, r->ctrl_in + (size_t)r->err_peer *
							DPL__CTRL_BYTES);
		if (!r->by_notice && rc != DPL_ETIMEDOUT)
			broadcast(r, rc);
	}
	/* Failed by itself, or with a peer it lost or timed out on (the
	 * end of the chain): the cause. An adopted notice set its own. */
	if (!r->by_notice)
		r->cause = (rc == DPL_EPEER || rc == DPL_ETIMEDOUT) &&
				   r->err_peer < r->world
			   ? r->err_peer
			   : r->rank;
	dpl__stay(r);
	dpl__runner_cancel_all(r);
	dpl__error(rc, "%s", r->errmsg);
	return rc;
}
