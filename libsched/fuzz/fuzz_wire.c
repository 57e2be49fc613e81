/*
 * fuzz_wire.c - libFuzzer target on the rendezvous' wire protocol
 * (libsched/bootstrap): the input is what the other end of one
 * connection sends, written into a socketpair whose far end is then shut
 * for writing, so every read ends at once. The first byte picks the side:
 *
 *   0  rank 0's handshake of a new connection (dpl__bs_conn_step()),
 *   1  a joining rank's handshake (dpl__bs_join_handshake()),
 *   2  a collective at a rank other than 0 (rank 0's RESULT or ABORT),
 *   3  a collective at rank 0 (a rank's DATA).
 *
 * The bootstrap sources are built here with DPL_BOOTSTRAP_FUZZ_NONCE
 * (zero nonces), so that with bit 0x10 of the first byte set the target
 * itself writes a valid proof where one is due (sides 0 and 1) and the
 * fuzzer gets past it. Oracle, besides the sanitizers: a handshake
 * succeeds exactly when the target wrote the valid proof.
 *
 *   build-fuzz/libsched/fuzz/fuzz_wire -max_total_time=300 \
 *         -dict=libsched/fuzz/wire.dict /tmp/wire-corpus
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dpl/backend.h>

#include "../bootstrap/src/bootstrap_internal.h"

#define KEY "fuzz-job-secret-0123456789abcdef"

static void fail(const char *why)
{
	fprintf(stderr, "fuzz_wire: %s (%s)\n", why, dpl_last_error());
	abort();
}

/* A handle of `world` ranks as `rank`, its one connection on fd. */
static dpl_bootstrap *handle(uint32_t rank, uint32_t world, int fd)
{
	dpl_bootstrap *b = calloc(1, sizeof *b);
	uint32_t r;

	if (b == NULL || (b->fd = malloc(world * sizeof *b->fd)) == NULL)
		abort();
	for (r = 0; r < world; r++)
		b->fd[r] = -1;
	b->fd[rank == 0 ? 1 : 0] = fd;
	b->rank = rank;
	b->world = world;
	b->timeout_ms = 50;
	b->dead = BS_NONE;
	snprintf(b->host, sizeof b->host, "127.0.0.1");
	b->port = 1;
	b->keylen = strlen(KEY);
	memcpy(b->key, KEY, b->keylen);
	return b;
}

static void put(int fd, const void *p, size_t n)
{
	if (n > 0 && send(fd, p, n, MSG_NOSIGNAL) != (ssize_t)n)
		fail(strerror(errno)); /* the buffer holds far more */
}

/* A message's 20-byte header. */
static void put_hdr(int fd, uint32_t type, uint32_t a, uint32_t b,
		    uint32_t len)
{
	unsigned char h[BS_HDR];

	dpl_put_u32(h, BS_MAGIC);
	dpl_put_u32(h + 4, type);
	dpl_put_u32(h + 8, a);
	dpl_put_u32(h + 12, b);
	dpl_put_u32(h + 16, len);
	put(fd, h, sizeof h);
}

static void root_side(const uint8_t *d, size_t n, int fix, int me,
		      int peer)
{
	static const unsigned char zero[BS_NONCE];
	dpl_bootstrap *b = handle(0, 4, -1);
	unsigned char mac[BS_MAC];
	struct bs_conn c;
	char why[BS_MSG_MAX];
	size_t k, head = n < BS_HDR + BS_NONCE ? n : BS_HDR + BS_NONCE;
	int st = BS_STEP_MORE;

	/* The HELLO part first; the proof (the target's, with fix), then
	 * the rest. */
	put(peer, d, fix ? head : n);
	if (!fix)
		shutdown(peer, SHUT_WR);
	dpl__bs_conn_start(&c, me, dpl__bs_now_ms() + 50);
	for (k = 0; k < n + 8 && st == BS_STEP_MORE; k++) {
		if (fix == 1 && c.state == BS_C_PROOF) {
			dpl__bs_proof(b, false, zero, zero, c.rank, c.world,
				      mac);
			put_hdr(peer, BS_PROOF, 0, 0, BS_MAC);
			put(peer, mac, BS_MAC);
			put(peer, d + head, n - head);
			shutdown(peer, SHUT_WR);
			fix = 2;
		} else if (fix == 1 && k > head + 2) {
			shutdown(peer, SHUT_WR); /* the HELLO never came */
			fix = 3;
		}
		st = dpl__bs_conn_step(b, &c, why, sizeof why);
	}
	if (st == BS_STEP_DONE && fix != 2)
		fail("a connection proved the secret without the key");
	if (st == BS_STEP_REFUSE && why[0] == '\0')
		fail("refused without a reason");
	c.fd = -1; /* me is closed by the caller */
	dpl_bootstrap_close(b);
}

static void join_side(const uint8_t *d, size_t n, int fix, int me,
		      int peer, uint32_t rank)
{
	static const unsigned char zero[BS_NONCE];
	dpl_bootstrap *b = handle(rank, 4, me);
	unsigned char mac[BS_MAC];
	int rc;

	if (fix) {
		dpl__bs_proof(b, true, zero, zero, rank, 4, mac);
		put_hdr(peer, BS_CHALLENGE, 0, 0, BS_NONCE + BS_MAC);
		put(peer, zero, BS_NONCE);
		put(peer, mac, BS_MAC);
	}
	put(peer, d, n);
	shutdown(peer, SHUT_WR);
	rc = dpl__bs_join_handshake(b, me, dpl__bs_now_ms() + 20);
	if (rc == 0 && !fix)
		fail("welcomed by a root that did not prove the secret");
	if (rc < 0 && dpl_last_error()[0] == '\0')
		fail("failed without a message");
	b->fd[0] = -1;
	dpl_bootstrap_close(b);
}

static void coll_side(const uint8_t *d, size_t n, int me, int peer,
		      uint32_t rank, uint32_t world, size_t len)
{
	unsigned char mine[64] = {1, 2, 3}, all[4 * 64];
	dpl_bootstrap *b = handle(rank, world, me);
	uint32_t dead = 0;
	int rc;

	put(peer, d, n);
	shutdown(peer, SHUT_WR);
	rc = dpl_bootstrap_allgather(b, mine, len, all);
	if (rc != 0 && dpl_bootstrap_allgather(b, mine, len, all) != rc)
		fail("a failed channel did not stay failed");
	rc = dpl_bootstrap_check(b, &dead);
	if (rc == DPL_EPEER && dead != BS_NONE && dead >= world)
		fail("a dead rank outside the world");
	b->fd[rank == 0 ? 1 : 0] = -1;
	dpl_bootstrap_close(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int sv[2];
	uint8_t mode;

	if (size < 2)
		return 0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		abort();
	mode = data[0];
	switch (mode & 3) {
	case 0:
		root_side(data + 1, size - 1, (mode & 0x10) != 0, sv[0],
			  sv[1]);
		break;
	case 1:
		join_side(data + 1, size - 1, (mode & 0x10) != 0, sv[0],
			  sv[1], 1u + (data[1] % 3u));
		break;
	case 2:
		coll_side(data + 2, size - 2, sv[0], sv[1], 1,
			  2u + (data[1] & 1u), (size_t)(data[1] >> 2));
		break;
	default:
		coll_side(data + 2, size - 2, sv[0], sv[1], 0, 2,
			  (size_t)(data[1] >> 2));
		break;
	}
	close(sv[0]);
	close(sv[1]);
	return 0;
}
