/*
 * bootstrap_coll.c - the collectives over an open rendezvous: allgather
 * (a gather at rank 0 and a broadcast of the result), barrier, the
 * liveness check, and the struct dpl_oob adapter.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/backend.h>

#include "bootstrap_internal.h"

/* Record a collective's failure on the handle and return it. */
static int broke(dpl_bootstrap *b, int code)
{
	b->broken = code;
	snprintf(b->broken_msg, sizeof b->broken_msg, "%s", dpl_last_error());
	return code;
}

/* Rank 0: tell the others that collective `seq` failed, and why. */
static void abort_all(dpl_bootstrap *b, int code, uint32_t seq)
{
	const char *msg = dpl_last_error();
	uint32_t len = (uint32_t)strnlen(msg, BS_MSG_MAX);
	uint64_t deadline = dpl__bs_now_ms() + 200;
	unsigned char out[4 + BS_MSG_MAX];
	uint32_t r;

	dpl_put_u32(out, b->dead);
	memcpy(out + 4, msg, len);
	for (r = 1; r < b->world; r++)
		if (b->fd[r] >= 0)
			dpl__bs_send_msg(b->fd[r], BS_ABORT, (uint32_t)-code,
					 seq, out, 4 + len, deadline);
}

static int root_gather(dpl_bootstrap *b, const void *mine, size_t len,
		       unsigned char *all, uint32_t seq, int local_rc)
{
	uint64_t deadline = dpl__bs_now_ms() + b->timeout_ms;
	struct pollfd *pfd = NULL;
	uint32_t *who = NULL;
	bool *have = NULL;
	char list[160];
	uint32_t r;
	int rc = 0;

	pfd = calloc(b->world, sizeof *pfd);
	who = calloc(b->world, sizeof *who);
	have = calloc(b->world, sizeof *have);
	if (pfd == NULL || who == NULL || have == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "bootstrap: out of memory");
		goto fail;
	}
	if (local_rc != 0) {
		rc = local_rc;
		goto fail;
	}
	if (len > 0)
		memcpy(all, mine, len);
	have[0] = true;
	while (dpl__bs_count_missing(b, have) > 0) {
		nfds_t n = 0, i;
		int k;

		for (r = 1; r < b->world; r++)
			if (!have[r]) {
				who[n] = r;
				pfd[n++] = (struct pollfd){b->fd[r], POLLIN, 0};
			}
		k = poll(pfd, n, dpl__bs_left_ms(deadline));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			rc = dpl_set_error(DPL_EIO, "bootstrap: poll: %s",
					strerror(errno));
			goto fail;
		}
		if (k == 0) {
			dpl__bs_list_missing(b, have, list, sizeof list);
			rc = dpl_set_error(DPL_ETIMEDOUT, "bootstrap: rank%s %s "
					"did not take part in collective %u "
					"within %u ms",
					dpl__bs_count_missing(b, have) > 1
						? "s"
						: "",
					list, seq, b->timeout_ms);
			goto fail;
		}
		for (i = 0; i < n; i++) {
			struct bs_hdr h;

			if (pfd[i].revents == 0)
				continue;
			r = who[i];
			rc = dpl__bs_recv_hdr(b->fd[r], &h, deadline);
			if (rc == 0 && (h.type != BS_DATA || h.a != seq))
				rc = DPL_EIO;
			if (rc == DPL_EPEER) {
				dpl__bs_close_fd(&b->fd[r]);
				b->dead = r;
				rc = dpl_set_error(rc, "bootstrap: rank %u died "
						"(closed its connection) in "
						"collective %u", r, seq);
				goto fail;
			}
			if (rc != 0) {
				rc = dpl_set_error(rc, "bootstrap: rank %u: "
						"protocol error in collective "
						"%u", r, seq);
				goto fail;
			}
			if (h.b != 0) {
				rc = dpl_set_error(dpl__bs_code(h.b),
						"bootstrap: rank %u failed in "
						"collective %u: %s", r, seq,
						dpl_strerror(dpl__bs_code(h.b)));
				goto fail;
			}
			if (h.len != len) {
				rc = dpl_set_error(DPL_EINVAL, "bootstrap: "
						"rank %u contributed %u bytes "
						"to collective %u, rank 0 %zu",
						r, h.len, seq, len);
				goto fail;
			}
			rc = dpl__bs_read_full(b->fd[r], all + (size_t)r * len,
					       len, deadline);
			if (rc != 0) {
				if (rc == DPL_EPEER)
					b->dead = r;
				rc = dpl_set_error(rc == DPL_EPEER ? rc : DPL_EIO,
						"bootstrap: rank %u %s in "
						"collective %u", r,
						rc == DPL_EPEER ? "died"
								: "stalled",
						seq);
				goto fail;
			}
			have[r] = true;
		}
	}
	for (r = 1; r < b->world; r++) {
		rc = dpl__bs_send_msg(b->fd[r], BS_RESULT, seq, 0, all,
				      (uint32_t)(len * b->world), deadline);
		if (rc != 0) {
			if (rc != DPL_ETIMEDOUT)
				b->dead = r;
			rc = dpl_set_error(rc == DPL_ETIMEDOUT ? rc : DPL_EPEER,
					"bootstrap: rank %u %s in collective "
					"%u", r, rc == DPL_ETIMEDOUT
					? "did not take the result"
					: "died", seq);
			goto fail;
		}
	}
	free(pfd);
	free(who);
	free(have);
	return 0;
fail:
	abort_all(b, rc, seq);
	free(pfd);
	free(who);
	free(have);
	return broke(b, rc);
}

/* How much longer a rank other than 0 waits for a collective's result
 * than rank 0 waits for the contributions: long enough for rank 0's
 * verdict (which ranks did not take part) to arrive. A quarter of the
 * timeout, at most 0.5 s. */
static uint32_t leaf_grace_ms(const dpl_bootstrap *b)
{
	return b->timeout_ms / 4 < 500 ? b->timeout_ms / 4 : 500;
}

static int leaf_gather(dpl_bootstrap *b, const void *mine, size_t len,
		       void *all, uint32_t seq, int local_rc)
{
	uint32_t waited = b->timeout_ms + leaf_grace_ms(b);
	uint64_t deadline = dpl__bs_now_ms() + waited;
	char msg[BS_MSG_MAX + 1];
	struct bs_hdr h;
	int rc;

	rc = dpl__bs_send_msg(b->fd[0], BS_DATA, seq, (uint32_t)-local_rc,
			      local_rc ? NULL : mine,
			      local_rc ? 0 : (uint32_t)len, deadline);
	if (local_rc != 0)
		return broke(b, local_rc);
	rc = dpl__bs_recv_verdict(b->fd[0], rc, &h, BS_ABORT, deadline);
	if (rc == DPL_ETIMEDOUT)
		return broke(b, dpl_set_error(rc, "bootstrap: rank 0 did not "
					   "complete collective %u within %u "
					   "ms (rank %u waited)", seq,
					   waited, b->rank));
	if (rc == DPL_EPEER) {
		b->dead = 0;
		return broke(b, dpl_set_error(rc, "bootstrap: rank 0 died "
					   "(closed its connection) in "
					   "collective %u", seq));
	}
	if (rc != 0)
		return broke(b, dpl_set_error(rc, "bootstrap: collective %u with "
					   "rank 0: %s", seq, strerror(errno)));
	if (h.type == BS_ABORT) {
		int code = dpl__bs_code(h.a);
		unsigned char dead[4];

		if (h.len < 4 ||
		    dpl__bs_read_full(b->fd[0], dead, sizeof dead,
				      deadline) != 0 ||
		    dpl__bs_recv_text(b->fd[0], h.len - 4, msg, sizeof msg,
				      deadline) != 0)
			snprintf(msg, sizeof msg, "(no reason given)");
		else if (code == DPL_EPEER && dpl_get_u32(dead) < b->world)
			b->dead = dpl_get_u32(dead);
		return broke(b, dpl_set_error(code < 0 ? code : DPL_EIO,
					   "%s (reported by rank 0)", msg));
	}
	if (h.type != BS_RESULT || h.a != seq ||
	    h.len != (uint64_t)len * b->world)
		return broke(b, dpl_set_error(DPL_EIO, "bootstrap: rank 0 answered"
					   " collective %u with message type "
					   "%u of %u bytes", seq, h.type,
					   h.len));
	rc = dpl__bs_read_full(b->fd[0], all, h.len, deadline);
	if (rc == DPL_EPEER)
		b->dead = 0;
	if (rc != 0)
		return broke(b, dpl_set_error(rc, "bootstrap: rank 0 %s in "
					   "collective %u",
					   rc == DPL_EPEER ? "died" : "stalled",
					   seq));
	return 0;
}

int dpl_bootstrap_allgather(dpl_bootstrap *b, const void *mine, size_t len,
			    void *all)
{
	int local_rc = 0;
	uint32_t seq;

	if (b == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: handle is NULL");
	if (b->broken != 0)
		return dpl_set_error(b->broken, "%s (an earlier collective "
				  "failed)", b->broken_msg);
	if (len > DPL_BOOTSTRAP_BLOB_MAX)
		local_rc = dpl_set_error(DPL_EINVAL, "bootstrap: rank %u "
				      "contributes %zu bytes, more than %d",
				      b->rank, len, DPL_BOOTSTRAP_BLOB_MAX);
	else if (len > 0 && (mine == NULL || all == NULL))
		local_rc = dpl_set_error(DPL_EINVAL, "bootstrap: rank %u passed "
				      "%s NULL for %zu bytes", b->rank,
				      mine == NULL ? "mine" : "all", len);
	seq = ++b->seq;
	if (b->world == 1) {
		if (local_rc != 0)
			return local_rc;
		if (len > 0)
			memmove(all, mine, len);
		return 0;
	}
	if (b->rank == 0)
		return root_gather(b, mine, len, all, seq, local_rc);
	return leaf_gather(b, mine, len, all, seq, local_rc);
}

int dpl_bootstrap_barrier(dpl_bootstrap *b)
{
	return dpl_bootstrap_allgather(b, NULL, 0, NULL);
}

int dpl_bootstrap_check(dpl_bootstrap *b, uint32_t *dead_rank)
{
	uint32_t r;

	if (dead_rank != NULL)
		*dead_rank = DPL_BOOTSTRAP_NO_RANK;
	if (b == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: handle is NULL");
	if (b->broken == DPL_EPEER) {
		if (dead_rank != NULL && b->dead != BS_NONE)
			*dead_rank = b->dead;
		return dpl_set_error(DPL_EPEER, "%s", b->broken_msg);
	}
	for (r = 0; r < b->world; r++) {
		if (r == b->rank || (b->rank != 0 && r != 0))
			continue;
		if (b->fd[r] < 0 || dpl__bs_peer_gone(b->fd[r])) {
			if (dead_rank != NULL)
				*dead_rank = r;
			return dpl_set_error(DPL_EPEER, "bootstrap: rank %u "
					  "closed its connection (died or "
					  "left)", r);
		}
	}
	return 0;
}

static int oob_allgather(void *user, const void *mine, size_t len, void *all)
{
	return dpl_bootstrap_allgather(user, mine, len, all);
}

static int oob_barrier(void *user)
{
	return dpl_bootstrap_barrier(user);
}

void dpl_bootstrap_oob(dpl_bootstrap *b, struct dpl_oob *out)
{
	out->allgather = oob_allgather;
	out->barrier = oob_barrier;
	out->user = b;
}
