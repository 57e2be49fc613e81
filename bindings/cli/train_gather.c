/*
 * train_gather.c - the results of a multi-process `dpl train` on their
 * way to rank 0, which prints them.
 *
 * After training, every rank sends rank 0 its results through the
 * transport, on tags the runner leaves to applications
 * (DPL_RUNNER_APP_TAG, dpl/runner.h): the length of its report, then the
 * report, an array of doubles:
 *   loss[iterations] (NAN where this rank has none),
 *   n, then n x {stage, peak in flight, peak buffer bytes}   (replica 0),
 *   n, then n x {layer, nw, nb, w[nw], b[nb]}                 (replica 0),
 * where w and b are the model's values byte for byte: nw doubles, or with
 * --dtype f32 nw floats packed two to a double (and a last half of zero
 * bytes when nw is odd); likewise b.
 * Rank 0 answers every rank when it has them all (an ack of two 32-bit
 * words: 0 and DPL__NONE); then all close. When a rank's results do not
 * come, rank 0's ack carries its verdict instead (the code and the rank
 * it failed with), and the other ranks, which wait for the ack a grace
 * period longer than rank 0 waits for results, name that rank too.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dpl/backend.h>
#include <dpl/dpl.h>
#include <dpl/transport.h>
#if defined(DPL_HAVE_DEVICE_CPU)
#include <dpl/model_mlp.h>
#endif

#include "cli.h"
#include "train.h"

#define TAG_LEN DPL_RUNNER_APP_TAG(1)
#define TAG_BODY DPL_RUNNER_APP_TAG(2)
#define TAG_ACK DPL_RUNNER_APP_TAG(3)

/* The ack's rank word when the job ended well. */
#define ACK_NONE UINT32_MAX

/* How much longer the ranks wait for the ack than rank 0 for results:
 * a quarter of the timeout, at most 0.5 s. */
static uint64_t grace_ns(const struct train_job *J)
{
	double s = J->o.timeout_s / 4;

	return (uint64_t)((s < 0.5 ? s : 0.5) * 1e9);
}

/* The doubles that n values of e bytes take in a report. */
static size_t words(size_t n, size_t e)
{
	return (n * e + sizeof(double) - 1) / sizeof(double);
}

#if defined(DPL_HAVE_DEVICE_CPU)
/* n values of e bytes from src into the report at out (words(n, e)
 * doubles, the padding zero). */
static void pack(double *out, const void *src, size_t n, size_t e)
{
	memset(out, 0, words(n, e) * sizeof *out);
	memcpy(out, src, n * e);
}
#endif

size_t train_report_build(struct train_rank *k, double *out)
{
	struct train_job *J = k->J;
	size_t n = 0, at;
#if defined(DPL_HAVE_DEVICE_CPU)
	size_t e = train_value_bytes(&J->o);
#endif
	uint32_t s, l;

	for (l = 0; l < J->o.iterations; l++, n++)
		if (out)
			out[n] = J->loss[(size_t)l * J->world + k->rank];
	at = n++;
	if (out)
		out[at] = 0;
	for (s = 0; k->replica == 0 && s < J->nstages; s++) {
		struct dpl_runner_stage_stats ss;

		if (dpl_runner_stage_stats(k->r, s, &ss) != 0)
			continue;
		if (out) {
			out[at]++;
			out[n] = s;
			out[n + 1] = ss.peak_inflight;
			out[n + 2] = (double)ss.peak_buffer_bytes;
		}
		n += 3;
	}
	at = n++;
	if (out)
		out[at] = 0;
#if defined(DPL_HAVE_DEVICE_CPU)
	for (l = 0; !J->o.synthetic && k->replica == 0 && l < J->layers;
	     l++) {
		struct dpl_mlp_view v;

		if (dpl_schedule_stage_rank(J->sched,
					    train_layer_stage(J, l)) !=
			    k->prank ||
		    train_layer_view(k, l, &v) != 0)
			continue;
		if (out) {
			out[at]++;
			out[n] = l;
			out[n + 1] = (double)v.nw;
			out[n + 2] = (double)v.nb;
			pack(out + n + 3, v.w, v.nw, e);
			pack(out + n + 3 + words(v.nw, e), v.b, v.nb, e);
		}
		n += 3 + words(v.nw, e) + words(v.nb, e);
	}
#endif
	return n;
}

/* Is v a whole number in [0, max]? (NAN is not.) */
static bool whole(double v, double max)
{
	return v >= 0 && v <= max && v == floor(v);
}

/* Read rank q's report of n doubles into J and R; views point into it. */
static int report_read(struct train_job *J, struct train_result *R, uint32_t q,
		       const double *d, size_t n, struct train_layer *v)
{
	size_t at = J->o.iterations, i, cnt, e = train_value_bytes(&J->o);
	/* Values a double of the report holds. */
	double per = (double)(sizeof(double) / e);

	if (n < at + 2)
		goto bad;
	for (i = 0; i < J->o.iterations; i++)
		J->loss[i * J->world + q] = d[i];
	if (!whole(d[at], J->nstages))
		goto bad;
	cnt = (size_t)d[at++];
	if (n - at < cnt * 3 + 1)
		goto bad;
	for (i = 0; i < cnt; i++, at += 3) {
		if (!whole(d[at], J->nstages - 1) ||
		    !whole(d[at + 1], UINT32_MAX) ||
		    !whole(d[at + 2], 0x1p53))
			goto bad;
		R->peak[(uint32_t)d[at]] = (uint32_t)d[at + 1];
		R->peak_bytes[(uint32_t)d[at]] = (uint64_t)d[at + 2];
	}
	if (!whole(d[at], J->layers))
		goto bad;
	cnt = (size_t)d[at++];
	for (i = 0; i < cnt; i++) {
		size_t nw, nb, ww, wb;
		uint32_t l;

		if (n - at < 3 || !whole(d[at], J->layers - 1) ||
		    !whole(d[at + 1], (double)(n - at) * per) ||
		    !whole(d[at + 2], (double)(n - at) * per))
			goto bad;
		l = (uint32_t)d[at];
		nw = (size_t)d[at + 1];
		nb = (size_t)d[at + 2];
		at += 3;
		ww = words(nw, e);
		wb = words(nb, e);
		if (ww > n - at || wb > n - at - ww)
			goto bad;
		v[l].w = d + at;
		v[l].nw = nw;
		v[l].b = d + at + ww;
		v[l].nb = nb;
		at += ww + wb;
	}
	if (at != n)
		goto bad;
	return 0;
bad:
	return cli_fail(CMD, "rank %u sent a malformed report (%zu values)",
			q, n);
}

struct xreq {
	void *req;
	uint32_t peer;
	bool live;
};


/*
 * Progress until every live request in x[0..n) but x[early] completed,
 * or x[early] did (early < n; n: none), or the deadline. On an error, k->msg
 * says what (`what` and the peer), *who is the peer, and the code is
 * returned; requests still live then stay with the transport until it
 * is closed.
 */
static int wait_all(struct train_rank *k, struct xreq *x, size_t n,
		    size_t early, uint64_t deadline, const char *what,
		    uint32_t *who)
{
	bool can_wait = DPL_HAS_OP(dpl_transport_ops(k->t), wait);
	struct timespec nap = {0, 20000};
	size_t i, live;
	int rc;

	for (;;) {
		if ((rc = dpl_transport_progress(k->t)) < 0) {
			snprintf(k->msg, sizeof k->msg, "rank %u: %s: %s",
				 k->rank, what, dpl_last_error());
			return rc;
		}
		for (i = 0, live = 0; i < n; i++) {
			if (!x[i].live)
				continue;
			rc = dpl_transport_test(k->t, x[i].req);
			if (rc == DPL_EAGAIN) {
				live += i != early;
				continue;
			}
			x[i].live = false;
			if (rc != 0) {
				*who = x[i].peer;
				snprintf(k->msg, sizeof k->msg,
					 "rank %u: %s rank %u: %s (%s)",
					 k->rank, what, x[i].peer,
					 dpl_strerror(rc), dpl_err_name(rc));
				return rc;
			}
		}
		if (live == 0 || (early < n && !x[early].live))
			return 0;
		if (dpl_clock_ns() > deadline) {
			for (i = 0; i < n && !x[i].live; i++)
				;
			*who = x[i].peer;
			snprintf(k->msg, sizeof k->msg,
				 "rank %u: %s rank %u: no answer within %g s "
				 "(DPL_ETIMEDOUT)", k->rank, what, x[i].peer,
				 k->J->o.timeout_s);
			return DPL_ETIMEDOUT;
		}
		if (can_wait)
			dpl_transport_wait(k->t, 1000000);
		else
			nanosleep(&nap, NULL);
	}
}

/* Whether a request of x[0..n) is still live. */
static bool any_live(const struct xreq *x, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (x[i].live)
			return true;
	return false;
}

/* A post with peer q was refused with rc: say so in k->msg; q. */
static uint32_t refused(struct train_rank *k, uint32_t q, const char *what,
			int rc)
{
	snprintf(k->msg, sizeof k->msg, "rank %u: %s rank %u: %s (%s)",
		 k->rank, what, q, dpl_last_error(), dpl_err_name(rc));
	return q;
}

/*
 * Rank 0 could not gather: tell every other rank (but `blamed`) why, in
 * the ack it waits for (posted before its results), and progress for
 * the grace period so that the acks leave.
 */
static void tell_verdict(struct train_rank *k, int code, uint32_t blamed,
			 size_t rsz)
{
	struct train_job *J = k->J;
	uint32_t verdict[2] = {(uint32_t)code, blamed}, q;
	unsigned char *reqs = calloc(J->world, rsz);
	struct xreq *v = calloc(J->world, sizeof *v);
	uint64_t end = dpl_clock_ns() + grace_ns(J);
	struct timespec nap = {0, 100000};

	if (reqs != NULL && v != NULL) {
		for (q = 1; q < J->world; q++) {
			v[q].req = reqs + (size_t)q * rsz;
			v[q].peer = q;
			v[q].live = q != blamed &&
				    dpl_transport_isend(k->t, v[q].req, q,
							TAG_ACK, verdict,
							sizeof verdict,
							DPL_MEM_HOST) == 0;
		}
		/* Each ack for itself: a rank that is gone or stopped does
		 * not hold up the others. Progressed for the whole grace
		 * period: a send complete here may still be on its way. */
		while (dpl_clock_ns() < end &&
		       dpl_transport_progress(k->t) >= 0) {
			for (q = 1; q < J->world; q++)
				if (v[q].live &&
				    dpl_transport_test(k->t, v[q].req) !=
					    DPL_EAGAIN)
					v[q].live = false;
			nanosleep(&nap, NULL);
		}
		for (q = 1; q < J->world; q++)
			if (v[q].live) { /* the transport holds it */
				dpl_transport_close(k->t);
				k->t = NULL;
				break;
			}
	}
	free(reqs);
	free(v);
}

/*
 * A rank but 0: send rank 0 the length of the report and the report,
 * then wait for the ack, a grace period longer than rank 0 waits. The
 * ack is posted first: a verdict rank 0 sends while this rank's results
 * are still on their way (rank 0 gave up on another rank) ends the
 * sends' wait, and is read even when rank 0 is gone by the time a send
 * fails. x[0] is the ack, x[1] the send; len and ack are the buffers
 * (the caller's: a request still live when this returns stays with the
 * transport until the caller closes it). 0 or the code, k->msg set.
 */
static int send_results(struct train_rank *k, struct xreq *x,
			const double *mine, uint64_t nmine, uint64_t *len,
			uint32_t ack[2], uint64_t deadline)
{
	uint32_t who = ACK_NONE;
	int rc;

	*len = nmine;
	rc = dpl_transport_irecv(k->t, x[0].req, 0, TAG_ACK, ack,
				 2 * sizeof *ack, DPL_MEM_HOST);
	x[0].live = rc == 0;
	if (rc == 0) {
		rc = dpl_transport_isend(k->t, x[1].req, 0, TAG_LEN, len,
					 sizeof *len, DPL_MEM_HOST);
		x[1].live = rc == 0;
	}
	if (rc == 0)
		rc = wait_all(k, x, 2, 0, deadline, "sending results to",
			      &who);
	if (rc == 0 && x[0].live) {
		rc = dpl_transport_isend(k->t, x[1].req, 0, TAG_BODY, mine,
					 nmine * sizeof *mine, DPL_MEM_HOST);
		x[1].live = rc == 0;
		if (rc == 0)
			rc = wait_all(k, x, 2, 0, deadline,
				      "sending results to", &who);
	}
	if (rc == 0 && x[0].live)
		rc = wait_all(k, x, 1, 1, deadline + grace_ns(k->J),
			      "waiting for the end from", &who);
	if (rc != 0 && x[0].live && dpl_transport_progress(k->t) >= 0 &&
	    dpl_transport_test(k->t, x[0].req) == 0) {
		/* The verdict came before rank 0 went. */
		x[0].live = false;
		rc = 0;
	}
	if (rc != 0 && k->msg[0] == '\0')
		snprintf(k->msg, sizeof k->msg, "rank %u: posting results for "
			 "rank 0: %s", k->rank, dpl_last_error());
	if (rc != 0)
		k->cause = who;
	if (rc == 0 && !x[0].live && (int32_t)ack[0] != 0) {
		rc = DPL_EPEER;
		k->cause = ack[1];
		if (ack[1] == ACK_NONE)
			snprintf(k->msg, sizeof k->msg, "rank %u: rank 0 could "
				 "not gather the results: %s (%s)", k->rank,
				 dpl_strerror((int)ack[0]),
				 dpl_err_name((int)ack[0]));
		else
			snprintf(k->msg, sizeof k->msg, "rank %u: rank 0 could "
				 "not gather the results: rank %u: %s (%s)",
				 k->rank, ack[1], dpl_strerror((int)ack[0]),
				 dpl_err_name((int)ack[0]));
	} else if (rc == 0) {
		k->msg[0] = '\0';
	}
	return rc;
}

int train_gather(struct train_rank *k, struct train_result *R,
		 const double *mine, uint64_t nmine)
{
	struct train_job *J = k->J;
	size_t rsz = (dpl_transport_req_size(k->t) + 63) / 64 * 64;
	uint64_t deadline = dpl_clock_ns() + (uint64_t)(J->o.timeout_s * 1e9);
	uint64_t *lens = calloc(J->world, sizeof *lens);
	double **bodies = calloc(J->world, sizeof *bodies);
	struct train_layer *v = calloc(J->layers + 1, sizeof *v);
	struct xreq *x = calloc(J->world, sizeof *x);
	unsigned char *reqs = calloc(J->world, rsz);
	uint32_t ack[2] = {0, ACK_NONE}, who = ACK_NONE;
	uint32_t q;
	int rc = 0;

	if (!lens || !bodies || !v || !x || !reqs) {
		snprintf(k->msg, sizeof k->msg, "rank %u: out of memory",
			 k->rank);
		rc = DPL_ENOMEM;
		goto out;
	}
	for (q = 0; q < J->world; q++) {
		x[q].req = reqs + (size_t)q * rsz;
		x[q].peer = k->rank == 0 ? q : 0;
	}
	if (k->rank != 0) {
		rc = send_results(k, x, mine, nmine, &lens[0], ack,
				  deadline);
		goto out;
	}
	for (q = 1; q < J->world && rc == 0; q++) {
		rc = dpl_transport_irecv(k->t, x[q].req, q, TAG_LEN,
					 &lens[q], sizeof lens[q],
					 DPL_MEM_HOST);
		x[q].live = rc == 0;
		if (rc != 0)
			who = refused(k, q, "results from", rc);
	}
	if (rc == 0)
		rc = wait_all(k, x, J->world, J->world, deadline,
			      "results from", &who);
	for (q = 1; q < J->world && rc == 0; q++) {
		if (lens[q] > ((uint64_t)1 << 32)) {
			snprintf(k->msg, sizeof k->msg, "rank %u: rank %u "
				 "announced a report of %llu values", k->rank,
				 q, (unsigned long long)lens[q]);
			rc = DPL_EINVAL;
			who = q;
			break;
		}
		bodies[q] = malloc((size_t)lens[q] * sizeof **bodies + 1);
		if (bodies[q] == NULL) {
			rc = DPL_ENOMEM;
			snprintf(k->msg, sizeof k->msg, "rank %u: out of "
				 "memory", k->rank);
			who = k->rank;
			break;
		}
		rc = dpl_transport_irecv(k->t, x[q].req, q, TAG_BODY,
					 bodies[q],
					 (size_t)lens[q] * sizeof **bodies,
					 DPL_MEM_HOST);
		x[q].live = rc == 0;
		if (rc != 0)
			who = refused(k, q, "results from", rc);
	}
	if (rc == 0)
		rc = wait_all(k, x, J->world, J->world, deadline,
			      "results from", &who);
	for (q = 1; q < J->world && rc == 0; q++) {
		rc = dpl_transport_isend(k->t, x[q].req, q, TAG_ACK, ack,
					 sizeof ack, DPL_MEM_HOST);
		x[q].live = rc == 0;
		if (rc != 0)
			who = refused(k, q, "ending with", rc);
	}
	if (rc == 0) {
		/* Every result is in. A rank that got its ACK may close before
		 * this side sees the send complete: that is the end, not a
		 * failure, and the other acks are still waited for (closing
		 * now would cancel those not read yet). */
		do
			rc = wait_all(k, x, J->world, J->world, deadline,
				      "ending with", &who);
		while (rc == DPL_EPEER && any_live(x, J->world));
		if (rc == DPL_EPEER) {
			rc = 0;
			k->msg[0] = '\0';
		}
	}
	if (rc != 0) {
		if (k->msg[0] == '\0')
			snprintf(k->msg, sizeof k->msg, "rank %u: gathering "
				 "results: %s", k->rank, dpl_last_error());
		k->cause = who;
		tell_verdict(k, rc, who, rsz);
		goto out;
	}
	if (report_read(J, R, 0, mine, nmine, v) != 0) {
		rc = DPL_EINVAL;
		goto done;
	}
	for (q = 1; q < J->world; q++)
		if (report_read(J, R, q, bodies[q], lens[q], v) != 0) {
			rc = DPL_EINVAL;
			goto done;
		}
	R->seconds = (double)(k->t1 - k->t0) / 1e9;
	R->samples_per_s = (double)J->o.batch * J->o.iterations / R->seconds;
	train_finish_results(J, R);
	rc = train_weights_results(J, v, R) == CLI_OK ? 0 : DPL_EINVAL;
done:
	/* Reported already: no rank message. */
	if (rc != 0)
		k->msg[0] = '\0';
out:
	/* Requests still pending belong to the transport: close it before
	 * their buffers go. */
	for (q = 0; q < J->world; q++)
		if (x && x[q].live) {
			dpl_transport_close(k->t);
			k->t = NULL;
			break;
		}
	for (q = 0; bodies && q < J->world; q++)
		free(bodies[q]);
	free(bodies);
	free(lens);
	free(v);
	free(x);
	free(reqs);
	return rc;
}
