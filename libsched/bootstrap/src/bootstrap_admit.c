/*
 * bootstrap_admit.c - rank 0's side of a connection's handshake, one
 * non-blocking step at a time (HELLO in, CHALLENGE out, PROOF in; see
 * bootstrap_auth.c), so that the rendezvous loop (bootstrap_open.c)
 * never waits on one peer; the log line of a refused connection; and
 * the error naming the ranks that never arrived.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <dpl/backend.h>

#include "bootstrap_internal.h"

void dpl__bs_peer_name(int fd, char *out)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char host[INET6_ADDRSTRLEN] = "?";

	snprintf(out, BS_PEER_MAX, "(unknown peer)");
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
		return;
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
		snprintf(out, BS_PEER_MAX, "%s:%u", host, ntohs(a->sin_port));
	} else if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
		snprintf(out, BS_PEER_MAX, "[%s]:%u", host,
			 ntohs(a->sin6_port));
	} else if (ss.ss_family == AF_UNIX) {
		snprintf(out, BS_PEER_MAX, "(local socket)");
	}
}

void dpl__bs_conn_start(struct bs_conn *c, int fd, uint64_t deadline)
{
	memset(c, 0, sizeof *c);
	c->fd = fd;
	c->state = BS_C_HELLO;
	c->deadline = deadline;
	c->rank = BS_NONE;
	dpl__bs_peer_name(fd, c->peer);
}

void dpl__bs_refused(dpl_bootstrap *b, const struct bs_conn *c,
		     const char *why)
{
	if (b->note != NULL && c->state == BS_C_PROOF && c->rank > 0 &&
	    c->rank < b->world && c->note != BS_NOTE_NONE)
		b->note[c->rank] = (unsigned char)c->note;
	if (b->logged < BS_LOG_MAX)
		fprintf(stderr, "dpl bootstrap: rank 0 refused %s: %s\n",
			c->peer, why);
	else if (b->logged == BS_LOG_MAX)
		fprintf(stderr, "dpl bootstrap: rank 0 refused %u connections;"
			" later refusals are not logged\n", BS_LOG_MAX);
	b->logged++;
}

/* What the message now due must be: its type and payload length. */
static void due(const struct bs_conn *c, uint32_t *type, uint32_t *len)
{
	*type = c->state == BS_C_HELLO ? BS_HELLO : BS_PROOF;
	*len = c->state == BS_C_HELLO ? BS_NONCE : BS_MAC;
}

/* The header in c->buf is complete: is it the one due? */
static int check_hdr(const struct bs_conn *c, char *why, size_t size)
{
	uint32_t type, len, magic = dpl_get_u32(c->buf);
	uint32_t t = dpl_get_u32(c->buf + 4), l = dpl_get_u32(c->buf + 16);

	due(c, &type, &len);
	if (magic != BS_MAGIC) {
		snprintf(why, size, "not dpl's rendezvous (magic 0x%08x)",
			 magic);
		return BS_STEP_REFUSE;
	}
	if (t != type || l != len) {
		snprintf(why, size, "sent message type %u of %u bytes where "
			 "%s was due", t, l,
			 c->state == BS_C_HELLO ? "HELLO" : "PROOF");
		return BS_STEP_REFUSE;
	}
	return BS_STEP_MORE;
}

/* The HELLO is in: note the claim, send the challenge. */
static int on_hello(dpl_bootstrap *b, struct bs_conn *c, char *why,
		    size_t size)
{
	unsigned char out[BS_NONCE + BS_MAC];
	int rc;

	c->rank = dpl_get_u32(c->buf + 8);
	c->world = dpl_get_u32(c->buf + 12);
	memcpy(c->nc, c->buf + BS_HDR, BS_NONCE);
	if (dpl__bs_random(c->ns, BS_NONCE) != 0) {
		snprintf(why, size, "%s", dpl_last_error());
		return BS_STEP_REFUSE;
	}
	memcpy(out, c->ns, BS_NONCE);
	dpl__bs_proof(b, true, c->nc, c->ns, c->rank, c->world,
		      out + BS_NONCE);
	c->state = BS_C_PROOF;
	c->got = 0;
	/* 84 bytes into a fresh socket: never waits in practice, and
	 * never past the handshake's own deadline. */
	rc = dpl__bs_send_msg(c->fd, BS_CHALLENGE, 0, 0, out, sizeof out,
			      c->deadline);
	if (rc != 0) {
		c->note = BS_NOTE_CLOSED;
		snprintf(why, size, "claimed rank %u, then did not take the "
			 "challenge (%s)", c->rank,
			 rc == DPL_EPEER ? "closed" : "stalled");
		return BS_STEP_REFUSE;
	}
	return BS_STEP_MORE;
}

int dpl__bs_conn_step(dpl_bootstrap *b, struct bs_conn *c, char *why,
		      size_t size)
{
	uint32_t type, len;
	size_t need;
	ssize_t k;
	unsigned char want[BS_MAC];

	due(c, &type, &len);
	need = c->got < BS_HDR ? BS_HDR : BS_HDR + len;
	k = recv(c->fd, c->buf + c->got, need - c->got, MSG_DONTWAIT);
	if (k == 0 || (k < 0 && (errno == ECONNRESET || errno == EPIPE))) {
		c->note = BS_NOTE_CLOSED;
		if (c->state == BS_C_HELLO)
			snprintf(why, size, "closed the connection before "
				 "its HELLO (%zu bytes in)", c->got);
		else
			snprintf(why, size, "claimed rank %u, then closed "
				 "the connection during the handshake",
				 c->rank);
		return BS_STEP_REFUSE;
	}
	if (k < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return BS_STEP_MORE;
		snprintf(why, size, "recv: %s", strerror(errno));
		return BS_STEP_REFUSE;
	}
	c->got += (size_t)k;
	if (c->got == BS_HDR && check_hdr(c, why, size) != BS_STEP_MORE)
		return BS_STEP_REFUSE;
	if (c->got < BS_HDR + len)
		return BS_STEP_MORE;
	if (c->state == BS_C_HELLO)
		return on_hello(b, c, why, size);
	dpl__bs_proof(b, false, c->ns, c->nc, c->rank, c->world, want);
	if (!dpl__bs_proof_ok(want, c->buf + BS_HDR)) {
		c->note = BS_NOTE_SECRET;
		snprintf(why, size, "claimed rank %u of %u, then failed the "
			 "proof of the job secret", c->rank, c->world);
		return BS_STEP_REFUSE;
	}
	return BS_STEP_DONE;
}

/* ---- ranks that are missing ----------------------------------------- */

/* "ranks 2, 3, 7 never arrived" style list of ranks without a mark. */
void dpl__bs_list_missing(const dpl_bootstrap *b, const bool *have,
			  char *out, size_t size)
{
	size_t used = 0;
	uint32_t r, n = 0;

	out[0] = '\0';
	for (r = 1; r < b->world; r++) {
		int k;

		if (have[r])
			continue;
		if (n == 16) {
			snprintf(out + used, size - used, ", ...");
			break;
		}
		k = snprintf(out + used, size - used, "%s%u", n ? ", " : "",
			     r);
		if (k < 0 || (size_t)k >= size - used)
			break;
		used += (size_t)k;
		n++;
	}
}

uint32_t dpl__bs_count_missing(const dpl_bootstrap *b, const bool *have)
{
	uint32_t r, n = 0;

	for (r = 1; r < b->world; r++)
		n += !have[r];
	return n;
}

/*
 * The error naming the ranks without a mark in `have` (code, usually
 * DPL_ETIMEDOUT), with what rank 0 knows of them (connections that
 * claimed them and were refused) and `tail`.
 */
int dpl__bs_missing_error(dpl_bootstrap *b, const bool *have, int code,
			 const char *tail)
{
	static const char *const what[] = {
		"", "closed during the handshake",
		"failed the proof of the job secret",
		"did not finish the handshake in time",
	};
	char list[160], notes[240] = "";
	size_t used = 0;
	uint32_t r, n = 0;

	dpl__bs_list_missing(b, have, list, sizeof list);
	for (r = 1; r < b->world && n < 3; r++) {
		int k;

		if (have[r] || b->note == NULL || b->note[r] == BS_NOTE_NONE ||
		    b->note[r] > BS_NOTE_SILENT)
			continue;
		k = snprintf(notes + used, sizeof notes - used, "; a "
			     "connection claiming rank %u %s", r,
			     what[b->note[r]]);
		if (k < 0 || (size_t)k >= sizeof notes - used)
			break;
		used += (size_t)k;
		n++;
	}
	return dpl_set_error(code, "bootstrap: rank%s %s never arrived at "
			  "%s%s%s:%u within %u ms%s%s",
			  dpl__bs_count_missing(b, have) > 1 ? "s" : "", list,
			  b->v6 ? "[" : "", b->host, b->v6 ? "]" : "",
			  b->port, b->timeout_ms, notes, tail);
}
