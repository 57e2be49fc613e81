/*
 * bootstrap_auth.c - the job secret and its proofs: DPL_JOB_SECRET, the
 * keyed hashes (OpenSSL's HMAC-SHA256, compared in constant time) and a
 * joining rank's side of the handshake.
 *
 * The handshake (rank r joining rank 0, K the job secret):
 *   r -> 0  HELLO      rank r, world w, nonce Nr
 *   0 -> r  CHALLENGE  nonce N0, HMAC(K, "root" || Nr || N0 || r || w)
 *   r -> 0  PROOF      HMAC(K, "rank" || N0 || Nr || r || w)
 *   0 -> r  WELCOME (once every rank is there) or REJECT (why)
 * Each side checks the other's hash before it trusts anything else: a
 * process without K can neither join the job nor pose as its rank 0. The
 * secret never crosses the wire; fresh nonces on both sides make a
 * recorded handshake useless in another connection.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <dpl/backend.h>

#include "bootstrap_internal.h"

/* The protocol label: a proof of this protocol is no proof of another. */
#define BS_LABEL "dpl-bootstrap-1 "

int dpl__bs_load_secret(dpl_bootstrap *b)
{
	const char *v = getenv("DPL_JOB_SECRET");
	size_t n;

	b->keylen = 0;
	if (v == NULL)
		return 0;
	n = strlen(v);
	if (n < BS_SECRET_MIN || n > BS_SECRET_MAX)
		return dpl_set_error(DPL_EINVAL, "bootstrap: DPL_JOB_SECRET has "
				  "%zu bytes, not %u..%u (dpl train --nprocs "
				  "and python -m dpl.run make 64 hex digits)",
				  n, BS_SECRET_MIN, BS_SECRET_MAX);
	memcpy(b->key, v, n);
	b->keylen = n;
	return 0;
}

int dpl__bs_random(void *buf, size_t n)
{
	unsigned char *p = buf;
	int tries;

#ifdef DPL_BOOTSTRAP_FUZZ_NONCE
	/* Only in the wire fuzzer's build (libsched/fuzz/fuzz_wire.c): zero
	 * nonces, so that the fuzzer can answer with valid proofs. */
	memset(buf, 0, n);
	return 0;
#endif
	for (tries = 0; n > 0 && tries < 64; tries++) {
		ssize_t k = getrandom(p, n, 0);

		if (k > 0) {
			p += k;
			n -= (size_t)k;
		} else if (k < 0 && errno != EINTR) {
			return dpl_set_error(DPL_EIO, "bootstrap: getrandom: %s",
					  strerror(errno));
		}
	}
	if (n > 0)
		return dpl_set_error(DPL_EIO, "bootstrap: getrandom gave too "
				  "few bytes");
	return 0;
}

void dpl__bs_proof(const dpl_bootstrap *b, bool root,
		   const unsigned char *first, const unsigned char *second,
		   uint32_t rank, uint32_t world, unsigned char *out)
{
	unsigned char msg[sizeof BS_LABEL - 1 + 4 + 2 * BS_NONCE + 8];
	unsigned char *p = msg;
	unsigned int olen = BS_MAC;
	static const unsigned char none = 0;

	memcpy(p, BS_LABEL, sizeof BS_LABEL - 1);
	p += sizeof BS_LABEL - 1;
	memcpy(p, root ? "root" : "rank", 4);
	p += 4;
	memcpy(p, first, BS_NONCE);
	p += BS_NONCE;
	memcpy(p, second, BS_NONCE);
	p += BS_NONCE;
	dpl_put_u32(p, rank);
	dpl_put_u32(p + 4, world);
	/* An empty key is a valid HMAC key (no secret: see bootstrap.h). */
	if (HMAC(EVP_sha256(), b->keylen ? b->key : &none, (int)b->keylen,
		 msg, sizeof msg, out, &olen) == NULL)
		memset(out, 0, BS_MAC); /* matches no real proof */
}

bool dpl__bs_proof_ok(const unsigned char *a, const unsigned char *b)
{
	return CRYPTO_memcmp(a, b, BS_MAC) == 0;
}

/* ---- the joining rank's side ----------------------------------------- */

static const char *secret_hint(const dpl_bootstrap *b)
{
	return b->keylen ? "this rank's DPL_JOB_SECRET is not rank 0's"
			 : "this rank has no DPL_JOB_SECRET; rank 0 may have "
			   "one";
}

/* Read a REJECT's text and return its code with the message set. */
static int rejected(dpl_bootstrap *b, int fd, const struct bs_hdr *h,
		    uint64_t deadline)
{
	char msg[BS_MSG_MAX + 1];
	int code = dpl__bs_code(h->a);

	(void)b;
	if (dpl__bs_recv_text(fd, h->len, msg, sizeof msg, deadline) != 0)
		snprintf(msg, sizeof msg, "(no reason given)");
	return dpl_set_error(code < 0 ? code : DPL_EIO, "%s (reported by "
			  "rank 0)", msg);
}

/* Tell rank 0 this rank gives up (the message is dpl_last_error()). */
static void leave(int fd, int code)
{
	const char *msg = dpl_last_error();

	dpl__bs_send_msg(fd, BS_LEAVE, (uint32_t)-code, 0, msg,
			 (uint32_t)strnlen(msg, BS_MSG_MAX),
			 dpl__bs_now_ms() + 100);
}

/* The challenge: rank 0's nonce and proof; 0 when rank 0 proved K. */
static int take_challenge(dpl_bootstrap *b, int fd, const unsigned char *nc,
			  unsigned char *ns, uint64_t deadline)
{
	unsigned char in[BS_NONCE + BS_MAC], want[BS_MAC];
	struct bs_hdr h;
	int rc;

	rc = dpl__bs_recv_hdr(fd, &h, deadline);
	if (rc == DPL_EPEER)
		return 1; /* closed before its challenge: connect again */
	if (rc == DPL_ETIMEDOUT)
		return dpl_set_error(rc, "bootstrap: the root %s%s%s:%u took "
				  "rank %u's connection but sent no challenge "
				  "within %u ms", b->v6 ? "[" : "", b->host,
				  b->v6 ? "]" : "", b->port, b->rank,
				  b->timeout_ms);
	if (rc != 0)
		return dpl_set_error(rc, "bootstrap: the root %s%s%s:%u does not "
				  "speak dpl's rendezvous (%s)",
				  b->v6 ? "[" : "", b->host, b->v6 ? "]" : "",
				  b->port, strerror(errno));
	if (h.type == BS_REJECT)
		return rejected(b, fd, &h, deadline);
	if (h.type != BS_CHALLENGE || h.len != sizeof in)
		return dpl_set_error(DPL_EIO, "bootstrap: the root %s%s%s:%u "
				  "answered HELLO with message type %u of %u "
				  "bytes, not a challenge", b->v6 ? "[" : "",
				  b->host, b->v6 ? "]" : "", b->port, h.type,
				  h.len);
	rc = dpl__bs_read_full(fd, in, sizeof in, deadline);
	if (rc != 0)
		return dpl_set_error(rc, "bootstrap: the root %s%s%s:%u cut its "
				  "challenge short", b->v6 ? "[" : "", b->host,
				  b->v6 ? "]" : "", b->port);
	memcpy(ns, in, BS_NONCE);
	dpl__bs_proof(b, true, nc, ns, b->rank, b->world, want);
	if (!dpl__bs_proof_ok(want, in + BS_NONCE))
		return dpl_set_error(DPL_EINVAL, "bootstrap: the process at "
				  "%s%s%s:%u did not prove the job secret to "
				  "rank %u (%s, or it is not this job's rank "
				  "0)", b->v6 ? "[" : "", b->host,
				  b->v6 ? "]" : "", b->port, b->rank,
				  secret_hint(b));
	return 0;
}

int dpl__bs_join_handshake(dpl_bootstrap *b, int fd, uint64_t deadline)
{
	unsigned char nc[BS_NONCE], ns[BS_NONCE], mac[BS_MAC];
	uint64_t verdict = deadline + BS_GRACE_MS;
	struct bs_hdr h;
	int rc;

	rc = dpl__bs_random(nc, sizeof nc);
	if (rc != 0)
		return rc;
	rc = dpl__bs_send_msg(fd, BS_HELLO, b->rank, b->world, nc, BS_NONCE,
			      deadline);
	if (rc == DPL_EPEER)
		return 1;
	if (rc != 0)
		return dpl_set_error(rc, "bootstrap: rank %u cannot send its "
				  "HELLO to rank 0: %s", b->rank,
				  rc == DPL_ETIMEDOUT ? "timed out"
						      : strerror(errno));
	rc = take_challenge(b, fd, nc, ns, deadline);
	if (rc != 0)
		return rc;
	dpl__bs_proof(b, false, ns, nc, b->rank, b->world, mac);
	rc = dpl__bs_send_msg(fd, BS_PROOF, 0, 0, mac, BS_MAC, deadline);
	/* Rank 0 owns the verdict: wait for it a little past the timeout,
	 * so that a rank missing elsewhere is named here too. */
	rc = dpl__bs_recv_verdict(fd, rc, &h, BS_REJECT, verdict);
	if (rc == DPL_ETIMEDOUT) {
		rc = dpl_set_error(rc, "bootstrap: rank 0 did not complete the "
				"rendezvous within %u ms and gave no cause "
				"(rank %u waited)", b->timeout_ms, b->rank);
		leave(fd, rc);
		return rc;
	}
	if (rc == DPL_EPEER)
		return dpl_set_error(rc, "bootstrap: rank 0 closed the "
				  "connection during the rendezvous without "
				  "a cause (rank 0 died, or %s)",
				  secret_hint(b));
	if (rc != 0)
		return dpl_set_error(rc, "bootstrap: rendezvous with rank 0: %s",
				  strerror(errno));
	if (h.type == BS_REJECT)
		return rejected(b, fd, &h, verdict);
	if (h.type != BS_WELCOME || h.a != b->world || h.len != 0)
		return dpl_set_error(DPL_EIO, "bootstrap: rank 0 answered with "
				  "message type %u, not the welcome", h.type);
	return 0;
}
