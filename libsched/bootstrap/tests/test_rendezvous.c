/*
 * test_rendezvous.c - who the rendezvous admits and whom it blames:
 * rogue clients against a real job on 127.0.0.1 (garbage, silence, a
 * duplicate rank, a wrong world size, a wrong secret, a HELLO then
 * silence), a rogue listener posing as rank 0, mismatched secrets, and
 * ranks killed before they connect, during their handshake or after they
 * were admitted, which every survivor must name.
 *
 * Rogues speak the wire protocol by hand with the library's own message
 * functions and proofs (bootstrap_internal.h, from the static test
 * build).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <dpl/bootstrap.h>

#include "../src/bootstrap_internal.h"
#include "test_job.h"

#define MAXR 6
#define SECRET "0123456789abcdef0123456789abcdef0123456789abcdef01234567"
#define FLAG_DONE 0 /* rank 0 finished: rogues may go */
#define FLAG_ROGUE_SENT 1 /* the rogue wrote all it writes */

struct out {
	int rc, rc2, bad;
	unsigned open_ms;
	char msg[512], log[2048];
};

struct job {
	struct out out[MAXR];
};

static struct out *out_of(struct tj_rank *rk)
{
	return &((struct job *)tj_user(rk))->out[rk->rank];
}

static unsigned port_of(const char *meet)
{
	const char *colon = strrchr(meet, ':');

	return colon != NULL ? (unsigned)atoi(colon + 1) : 0;
}

static struct job *run(struct tj_job *tj, uint32_t n, tj_rank_fn fn,
		       void *arg, uint32_t may_die)
{
	tj->size = n;
	tj->fn = fn;
	tj->arg = arg;
	tj->user_size = sizeof(struct job);
	tj->deadline_ms = 20000;
	tj->may_die = may_die;
	tj_job_run(tj);
	cr_assert_not_null(tj_job_user(tj), "%s", tj->report);
	return tj_job_user(tj);
}

/* Open as `rank` of `world` with `secret` (NULL: none); rc and message
 * into o, the time it took into o->open_ms. */
static dpl_bootstrap *open_as(struct tj_rank *rk, struct out *o,
			      uint32_t rank, uint32_t world, uint32_t tmo,
			      const char *secret)
{
	struct dpl_bootstrap_params p = {rank, world, tj_meet(rk), tmo};
	uint64_t t0 = dpl__bs_now_ms();
	dpl_bootstrap *b = NULL;

	if (secret != NULL)
		setenv("DPL_JOB_SECRET", secret, 1);
	else
		unsetenv("DPL_JOB_SECRET");
	o->rc = dpl_bootstrap_open(&p, &b);
	o->open_ms = (unsigned)(dpl__bs_now_ms() - t0);
	snprintf(o->msg, sizeof o->msg, "%s", o->rc ? dpl_last_error() : "");
	return b;
}

/* Rank 0's stderr goes to a file that the test reads back (log). */
static int log_begin(char *path)
{
	int fd;

	strcpy(path, "/tmp/dpl-rdv-log-XXXXXX");
	fd = mkstemp(path);
	if (fd >= 0) {
		dup2(fd, 2);
		close(fd);
	}
	return fd;
}

static void log_end(const char *path, struct out *o)
{
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f != NULL) {
		n = fread(o->log, 1, sizeof o->log - 1, f);
		fclose(f);
	}
	o->log[n] = '\0';
	unlink(path);
}

/* ---- a hand-made peer ------------------------------------------------ */

/* A blocking connection to the job's root, retried for up to 3 s. */
static int raw_connect(struct tj_rank *rk)
{
	struct sockaddr_in a = {0};
	int k;

	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port_of(tj_meet(rk)));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (k = 0; k < 300; k++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
			return fd;
		if (fd >= 0)
			close(fd);
		tj_sleep_ms(10);
	}
	return -1;
}

/* HELLO as rank/world, then rank 0's challenge into ns and proof;
 * 0 when the challenge came. */
static int raw_hello(int fd, uint32_t rank, uint32_t world,
		     unsigned char *nc, unsigned char *ns, unsigned char *proof)
{
	uint64_t dl = dpl__bs_now_ms() + 3000;
	unsigned char in[BS_NONCE + BS_MAC];
	struct bs_hdr h;

	dpl__bs_random(nc, BS_NONCE);
	if (dpl__bs_send_msg(fd, BS_HELLO, rank, world, nc, BS_NONCE, dl))
		return -1;
	if (dpl__bs_recv_hdr(fd, &h, dl) != 0 || h.type != BS_CHALLENGE ||
	    h.len != sizeof in || dpl__bs_read_full(fd, in, sizeof in, dl))
		return -1;
	memcpy(ns, in, BS_NONCE);
	memcpy(proof, in + BS_NONCE, BS_MAC);
	return 0;
}

/* A key holder for dpl__bs_proof(). */
static void keyed(dpl_bootstrap *kb, const char *secret)
{
	memset(kb, 0, sizeof *kb);
	kb->keylen = strlen(secret);
	memcpy(kb->key, secret, kb->keylen);
}

/* Whether anything but EOF comes within ms (a WELCOME would be a leak). */
static int welcomed(int fd, unsigned ms)
{
	struct bs_hdr h;

	return dpl__bs_recv_hdr(fd, &h, dpl__bs_now_ms() + ms) == 0 &&
	       h.type == BS_WELCOME;
}

/* ---- rogues while a job opens ---------------------------------------- */

enum rogue {
	R_GARBAGE, R_SILENT, R_DUPLICATE, R_WORLD, R_SECRET, R_HELLO_ONLY,
	R_COUNT
};

/* What rank 0's log must say of each rogue. */
static const char *const rogue_log[R_COUNT] = {
	"not dpl's rendezvous (magic",
	"the rendezvous completed before its handshake",
	"claimed rank 1 of 3, then failed the proof of the job secret",
	"claimed rank 2 of 9, then failed the proof of the job secret",
	"claimed rank 2 of 3, then failed the proof of the job secret",
	"the rendezvous completed before its handshake",
};

static void rogue(struct tj_rank *rk, struct out *o, int kind)
{
	unsigned char nc[BS_NONCE], ns[BS_NONCE], proof[BS_MAC];
	unsigned char mac[BS_MAC], want[BS_MAC];
	static const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789";
	uint32_t rank = kind == R_DUPLICATE ? 1 : 2;
	uint32_t world = kind == R_WORLD ? 9 : 3;
	dpl_bootstrap kb;
	int fd;

	tj_sleep_ms(kind == R_DUPLICATE ? 200 : 30);
	fd = raw_connect(rk);
	o->rc = fd < 0;
	if (fd < 0)
		return;
	if (kind == R_GARBAGE) {
		o->bad += write(fd, junk, sizeof junk) != (ssize_t)sizeof junk;
	} else if (kind != R_SILENT) {
		o->bad += raw_hello(fd, rank, world, nc, ns, proof) != 0;
		keyed(&kb, "not-the-job-secret-at-all");
		/* Mutual proof: a wrong key cannot accept rank 0's proof. */
		dpl__bs_proof(&kb, true, nc, ns, rank, world, want);
		o->bad += dpl__bs_proof_ok(want, proof);
		if (kind != R_HELLO_ONLY) {
			dpl__bs_proof(&kb, false, ns, nc, rank, world, mac);
			if (kind != R_SECRET)
				dpl__bs_random(mac, sizeof mac);
			dpl__bs_send_msg(fd, BS_PROOF, 0, 0, mac, BS_MAC,
					 dpl__bs_now_ms() + 1000);
		}
	}
	tj_flag_set(rk, FLAG_ROGUE_SENT, 1);
	/* Stay (silent) until rank 0 is done; no welcome may come. */
	tj_flag_wait(rk, FLAG_DONE, 1, 5000);
	o->bad += welcomed(fd, 200);
	close(fd);
}

static void rogue_job(struct tj_rank *rk)
{
	static const unsigned delay[3] = {0, 100, 300};
	struct out *o = out_of(rk);
	dpl_bootstrap *b;
	char path[64];

	if (rk->rank == 3) {
		rogue(rk, o, *(const int *)rk->arg);
		return;
	}
	if (rk->rank == 0)
		log_begin(path);
	tj_sleep_ms(delay[rk->rank]);
	/* The last rank, whose arrival completes the rendezvous, comes once
	 * a rogue that speaks has said all it says (a slow machine may take
	 * longer than the delays for it), so that rank 0 judges what it
	 * said; a silent rogue, or one that stops after its hello, is there
	 * to be left behind by the completed rendezvous. */
	if (rk->rank == 2 && *(const int *)rk->arg != R_SILENT &&
	    *(const int *)rk->arg != R_HELLO_ONLY)
		tj_flag_wait(rk, FLAG_ROGUE_SENT, 1, 5000);
	b = open_as(rk, o, rk->rank, 3, 5000, SECRET);
	if (o->rc == 0)
		o->rc2 = dpl_bootstrap_barrier(b);
	dpl_bootstrap_close(b);
	if (rk->rank == 0) {
		fflush(stderr);
		log_end(path, o);
		tj_flag_set(rk, FLAG_DONE, 1);
	}
}

ParameterizedTestParameters(rendezvous, rogue_is_refused_and_job_opens)
{
	static int kinds[R_COUNT];
	int i;

	for (i = 0; i < R_COUNT; i++)
		kinds[i] = i;
	return cr_make_param_array(int, kinds, R_COUNT);
}

ParameterizedTest(int *kind, rendezvous, rogue_is_refused_and_job_opens,
		  .timeout = 30)
{
	struct tj_job tj = {0};
	struct job *j = run(&tj, 4, rogue_job, kind, 0);
	int i;

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	for (i = 0; i < 3; i++) {
		cr_expect_eq(j->out[i].rc, 0, "rogue %d: rank %d: %s", *kind, i,
			     j->out[i].msg);
		cr_expect_eq(j->out[i].rc2, 0, "rogue %d: rank %d barrier",
			     *kind, i);
	}
	/* Rank 2 comes at 300 ms: rank 0 never waited on the rogue (a
	 * handshake may take BS_HANDSHAKE_MS). */
	cr_expect_lt(j->out[0].open_ms, 1000u, "rogue %d: rank 0 took %u ms",
		     *kind, j->out[0].open_ms);
	cr_expect_eq(j->out[3].rc, 0, "rogue %d could not connect", *kind);
	cr_expect_eq(j->out[3].bad, 0, "rogue %d was welcomed or proved a "
		     "wrong key", *kind);
	cr_expect(strstr(j->out[0].log, "rank 0 refused 127.0.0.1:") != NULL,
		  "rogue %d: log '%s'", *kind, j->out[0].log);
	cr_expect(strstr(j->out[0].log, rogue_log[*kind]) != NULL,
		  "rogue %d: log '%s' lacks '%s'", *kind, j->out[0].log,
		  rogue_log[*kind]);
	tj_job_free(&tj);
}

/* ---- a rogue listener, and secrets that differ ---------------------- */

static void fake_root(struct tj_rank *rk)
{
	struct sockaddr_in a = {0};
	unsigned char nc[BS_NONCE], out[BS_NONCE + BS_MAC];
	struct out *o = out_of(rk);
	int one = 1, lfd, fd;
	struct bs_hdr h;
	uint64_t dl = dpl__bs_now_ms() + 3000;

	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port_of(tj_meet(rk)));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	o->rc = bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
		listen(lfd, 4) != 0;
	fd = o->rc ? -1 : accept(lfd, NULL, NULL);
	o->rc += fd < 0;
	if (fd >= 0 && dpl__bs_recv_hdr(fd, &h, dl) == 0 &&
	    h.type == BS_HELLO && h.len == BS_NONCE &&
	    dpl__bs_read_full(fd, nc, BS_NONCE, dl) == 0) {
		dpl__bs_random(out, sizeof out);
		dpl__bs_send_msg(fd, BS_CHALLENGE, 0, 0, out, sizeof out, dl);
		/* The rank must not answer a listener that did not prove
		 * the secret. */
		o->bad += dpl__bs_recv_hdr(fd, &h, dpl__bs_now_ms() + 500) == 0;
	} else {
		o->bad++;
	}
	if (fd >= 0)
		close(fd);
	close(lfd);
}

static void listener_job(struct tj_rank *rk)
{
	struct out *o = out_of(rk);

	if (rk->rank == 0) {
		fake_root(rk);
		return;
	}
	dpl_bootstrap_close(open_as(rk, o, 1, 2, 3000, SECRET));
}

Test(rendezvous, rank_refuses_a_listener_without_the_secret, .timeout = 20)
{
	struct tj_job tj = {0};
	struct job *j = run(&tj, 2, listener_job, NULL, 0);

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	cr_expect_eq(j->out[0].rc, 0, "the fake root could not listen");
	cr_expect_eq(j->out[0].bad, 0, "rank 1 answered a rogue listener");
	cr_expect_eq(j->out[1].rc, DPL_EINVAL, "%s", j->out[1].msg);
	cr_expect(strstr(j->out[1].msg, "did not prove the job secret to "
			 "rank 1") != NULL, "%s", j->out[1].msg);
	tj_job_free(&tj);
}

/* arg: the secrets of rank 0 and rank 1 ("" for none). */
static void mismatch_job(struct tj_rank *rk)
{
	const char *const *sec = rk->arg;
	struct out *o = out_of(rk);
	const char *s = sec[rk->rank];

	if (rk->rank == 1)
		tj_sleep_ms(50);
	dpl_bootstrap_close(open_as(rk, o, rk->rank, 2, 800,
				    s[0] ? s : NULL));
}

static void check_mismatch(const char *s0, const char *s1, const char *why)
{
	const char *sec[2] = {s0, s1};
	struct tj_job tj = {0};
	struct job *j = run(&tj, 2, mismatch_job, sec, 0);

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	cr_expect_eq(j->out[1].rc, DPL_EINVAL, "%s", j->out[1].msg);
	cr_expect(strstr(j->out[1].msg, why) != NULL, "rank 1: %s",
		  j->out[1].msg);
	cr_expect_eq(j->out[0].rc, DPL_ETIMEDOUT, "%s", j->out[0].msg);
	cr_expect(strstr(j->out[0].msg, "rank 1 never arrived") != NULL &&
		  strstr(j->out[0].msg, "claiming rank 1 closed during the "
			 "handshake") != NULL, "rank 0: %s", j->out[0].msg);
	tj_job_free(&tj);
}

Test(rendezvous, different_secrets_fail_with_the_cause, .timeout = 20)
{
	check_mismatch(SECRET, "another-secret-0123456789",
		       "this rank's DPL_JOB_SECRET is not rank 0's");
}

Test(rendezvous, secret_on_one_side_only_fails_with_the_cause,
     .timeout = 20)
{
	check_mismatch(SECRET, "", "this rank has no DPL_JOB_SECRET");
}

Test(rendezvous, malformed_secret_is_named, .timeout = 10)
{
	struct dpl_bootstrap_params p = {0, 1, "127.0.0.1:0", 500};
	dpl_bootstrap *b = NULL;

	setenv("DPL_JOB_SECRET", "short", 1);
	cr_expect_eq(dpl_bootstrap_open(&p, &b), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "DPL_JOB_SECRET has 5 bytes") !=
			  NULL, "%s", dpl_last_error());
	cr_expect(strstr(dpl_last_error(), "short") == NULL,
		  "the value is printed: %s", dpl_last_error());
	cr_expect_null(b);
	setenv("DPL_JOB_SECRET", SECRET, 1);
	cr_assert_eq(dpl_bootstrap_open(&p, &b), 0, "%s", dpl_last_error());
	dpl_bootstrap_close(b);
	unsetenv("DPL_JOB_SECRET");
}

/* ---- blame: the rank that died is the one named ---------------------- */

enum death { D_BEFORE, D_HANDSHAKE, D_ADMITTED };

/* Rank 2 of 4 dies as `how` says; rank 0 starts 300 ms late, so that
 * the others' timeouts pass before rank 0's. D_ADMITTED: a world of 5
 * whose rank 4 never comes, so that rank 2 dies admitted and before the
 * rendezvous completes. */
static void dying_job(struct tj_rank *rk)
{
	unsigned char nc[BS_NONCE], ns[BS_NONCE], proof[BS_MAC], mac[BS_MAC];
	int how = *(const int *)rk->arg;
	struct out *o = out_of(rk);
	uint32_t world = how == D_ADMITTED ? 5 : 4;
	dpl_bootstrap kb;
	int fd;

	if (rk->rank == 2) {
		if (how == D_BEFORE)
			raise(SIGKILL);
		fd = raw_connect(rk);
		if (fd >= 0 && raw_hello(fd, 2, world, nc, ns, proof) == 0 &&
		    how == D_ADMITTED) {
			keyed(&kb, SECRET);
			dpl__bs_proof(&kb, false, ns, nc, 2, world, mac);
			dpl__bs_send_msg(fd, BS_PROOF, 0, 0, mac, BS_MAC,
					 dpl__bs_now_ms() + 1000);
			tj_sleep_ms(300); /* admitted; the others arrive */
		}
		raise(SIGKILL);
	}
	if (rk->rank == 0)
		tj_sleep_ms(300);
	dpl_bootstrap_close(open_as(rk, o, rk->rank, world,
				    how == D_ADMITTED ? 5000 : 1500, SECRET));
}

static void check_blame(int how, const char *want)
{
	struct tj_job tj = {0};
	struct job *j = run(&tj, 4, dying_job, &how, 1u << 2);
	static const int live[3] = {0, 1, 3};
	int i;

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	for (i = 0; i < 3; i++) {
		const struct out *o = &j->out[live[i]];

		cr_expect_neq(o->rc, 0, "rank %d opened", live[i]);
		cr_expect(strstr(o->msg, want) != NULL, "rank %d: '%s' lacks "
			  "'%s'", live[i], o->msg, want);
		cr_expect(strstr(o->msg, "rank 1 died") == NULL &&
			  strstr(o->msg, "rank 3 died") == NULL &&
			  strstr(o->msg, "no reason given") == NULL,
			  "rank %d blames a live rank: %s", live[i], o->msg);
	}
	tj_job_free(&tj);
}

Test(rendezvous, rank_killed_before_connecting_is_named_by_all,
     .timeout = 30)
{
	check_blame(D_BEFORE, "rank 2 never arrived");
}

Test(rendezvous, rank_killed_in_its_handshake_is_named_by_all,
     .timeout = 30)
{
	/* "rank 2 never arrived at ... ms; a connection claiming rank 2
	 * closed during the handshake" */
	check_blame(D_HANDSHAKE, "; a connection claiming rank 2 closed "
		    "during the handshake");
}

Test(rendezvous, rank_killed_after_admission_is_named_by_all,
     .timeout = 30)
{
	check_blame(D_ADMITTED, "rank 2 died during the rendezvous");
}

/* Rank 1's timeout is shorter: it gives up first and says so; rank 0
 * names rank 2 (never started), not rank 1. */
static void impatient_job(struct tj_rank *rk)
{
	struct out *o = out_of(rk);

	if (rk->rank == 2)
		raise(SIGKILL);
	dpl_bootstrap_close(open_as(rk, o, rk->rank, 3,
				    rk->rank == 1 ? 300 : 4000, SECRET));
}

Test(rendezvous, rank_that_gives_up_is_not_taken_for_dead, .timeout = 30)
{
	struct tj_job tj = {0};
	struct job *j = run(&tj, 3, impatient_job, NULL, 1u << 2);

	cr_assert(tj.report[0] == '\0', "%s", tj.report);
	cr_expect_eq(j->out[0].rc, DPL_ETIMEDOUT, "%s", j->out[0].msg);
	cr_expect(strstr(j->out[0].msg, "rank 2 never arrived") != NULL &&
		  strstr(j->out[0].msg, "rank 1 stopped waiting first") !=
			  NULL, "rank 0: %s", j->out[0].msg);
	cr_expect(strstr(j->out[0].msg, "rank 1 died") == NULL, "%s",
		  j->out[0].msg);
	/* Rank 0 saw it long before its own 4 s timeout. */
	cr_expect_lt(j->out[0].open_ms, 3000u);
	cr_expect_eq(j->out[1].rc, DPL_ETIMEDOUT, "%s", j->out[1].msg);
	tj_job_free(&tj);
}
