/*
 * test_cudaipc_dev.c - device memory through cudaipc with the fake seam
 * (fake_seam.h): two processes of this host; device to device, device to
 * host, host to device, host to host; sizes 0, 1, the eager limit,
 * larger than the ring; several in flight of one tag, matched in order;
 * DPL_ETRUNC both ways with nothing copied; each allocation opened once;
 * fini leaving no handle open; a killed peer giving DPL_EPEER with its
 * handles closed; a platform that refuses IPC failing init on every rank
 * with one message; an open refused later failing both sides with
 * DPL_EIO and a message that says what was refused; no segment left in
 * /dev/shm.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <dpl/transport_shm.h>

#include "fake_seam.h"
#include "test_job.h"

#define RING DPL_SHM_DEFAULT_RING
#define EAGER DPL_SHM_DEFAULT_EAGER
#define REPS 3 /* messages of each size, one tag */

static const size_t sizes[] = {0, 1, EAGER, EAGER + 1, RING + 1};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define NMSG (NSIZES * REPS)

/* Where each side's buffers are: bit 0 the sender's, bit 1 the
 * receiver's (set: fake device memory). */
struct kinds {
	unsigned v;
};

/* Run fn on two processes over the fake table (rank may_die's bit set:
 * it may die) and assert that every rank passed. */
static void run_pair(tj_rank_fn fn, void *arg, uint32_t may_die)
{
	struct tj_job job = {0};

	job.size = 2;
	job.mode = TJ_PROCESSES;
	job.meet_kind = TJ_MEET_BOOTSTRAP;
	job.fn = fn;
	job.arg = arg;
	job.deadline_ms = 30000;
	job.ops = &fake_cudaipc;
	job.may_die = may_die;
	cr_assert_eq(tj_job_run(&job), 0, "%s", job.report);
	tj_job_free(&job);
}

static int segments_of_me(void)
{
	char glob[64];

	snprintf(glob, sizeof glob, "dpl-*-p%d", (int)getpid());
	return tj_count_shm(glob);
}

/* Offsets of message k in one buffer holding them all. */
static size_t offset_of(size_t k)
{
	size_t off = 0, i;

	for (i = 0; i < k; i++)
		off += (sizes[i / REPS] + 63) / 64 * 64;
	return off;
}

static void transfer_rank(struct tj_rank *rk)
{
	unsigned v = ((const struct kinds *)rk->arg)->v;
	bool sender = rk->rank == 0;
	bool dev = sender ? (v & 1) : (v & 2);
	size_t total = offset_of(NMSG), k;
	unsigned char *buf;
	void *rq = tj_reqs(rk, NMSG);
	int st[NMSG], rc;
	int opens = fake_total_opens(); /* init's probe opened one */
	int handles = fake_handles();   /* and asked for one */

	TJ_CHECK(rk, segments_of_me() == 0, "a segment left after init");
	buf = dev ? fake_dev_alloc(total) : tj_alloc(rk, total);
	TJ_CHECK(rk, buf != NULL, "alloc");
	for (k = 0; k < NMSG; k++) {
		unsigned char *b = buf + offset_of(k);
		size_t n = sizes[k / REPS];
		uint32_t mem = dev ? DPL_MEM_CUDA : DPL_MEM_HOST;

		if (sender) {
			tj_fill(b, n, k);
			do {
				rc = dpl_transport_isend(rk->t,
							 tj_req(rk, rq, k), 1,
							 k / REPS, b, n, mem);
				if (rc == DPL_EAGAIN)
					tj_progress(rk);
			} while (rc == DPL_EAGAIN);
		} else {
			rc = dpl_transport_irecv(rk->t, tj_req(rk, rq, k), 0,
						 k / REPS, b, n, mem);
		}
		TJ_CHECK(rk, rc == 0, "post %zu: %d %s", k, rc,
			 dpl_last_error());
	}
	rc = tj_wait_all(rk, rq, NMSG, st, 20000, "transfer");
	TJ_CHECK(rk, rc == 0, "wait: %d", rc);
	if (!sender)
		for (k = 0; k < NMSG; k++) {
			long long at = tj_verify(buf + offset_of(k),
						 sizes[k / REPS], k);

			TJ_CHECK(rk, at < 0, "message %zu (size %zu) differs "
				 "at %lld", k, sizes[k / REPS], at);
		}
	/* The sender asked for its allocation's handle once, for all of
	 * its device messages. */
	if (sender)
		TJ_CHECK(rk, fake_handles() - handles == ((v & 1) ? 1 : 0),
			 "%d handles asked for one allocation",
			 fake_handles() - handles);
	if (!sender)
		TJ_CHECK(rk, fake_total_opens() - opens == ((v & 1) ? 1 : 0),
			 "%d opens of one allocation",
			 fake_total_opens() - opens);
	tj_barrier(rk);
	tj_close(rk);
	TJ_CHECK(rk, fake_live_opens() == 0, "%d handles open after fini",
		 fake_live_opens());
	if (dev)
		fake_dev_free(buf);
}

ParameterizedTestParameters(cudaipc_dev, transfer)
{
	static struct kinds k[] = {{0}, {1}, {2}, {3}};

	return cr_make_param_array(struct kinds, k, 4);
}

ParameterizedTest(struct kinds *k, cudaipc_dev, transfer)
{
	run_pair(transfer_rank, k, 0);
}

/* Truncation both ways, nothing copied: sends of 100 bytes (device
 * and host) into receives of 50 and 200 bytes (device and host). */
static void trunc_rank(struct tj_rank *rk)
{
	const size_t rl[4] = {50, 200, 50, 200};
	unsigned char *d = fake_dev_alloc(256), *h = tj_alloc(rk, 256);
	void *rq = tj_reqs(rk, 4);
	int st[4], rc;
	unsigned k;
	size_t i;

	TJ_CHECK(rk, d != NULL, "alloc");
	for (k = 0; k < 4; k++) {
		if (rk->rank == 0) {
			/* Odd k: a host send (into a device receive for
			 * k = 1, a host one for k = 3). */
			tj_fill(d, 100, 7);
			tj_fill(h, 100, 7);
			rc = dpl_transport_isend(rk->t, tj_req(rk, rq, k), 1,
						 k, k & 1 ? h : d, 100, k & 1 ?
						 DPL_MEM_HOST : DPL_MEM_CUDA);
		} else {
			unsigned char *b = k < 2 ? d : h;

			memset(b, 0xA5, 256);
			rc = dpl_transport_irecv(rk->t, tj_req(rk, rq, k), 0,
						 k, b, rl[k], k < 2 ?
						 DPL_MEM_CUDA : DPL_MEM_HOST);
			rc = rc ? rc : tj_wait(rk, tj_req(rk, rq, k), 0,
					       "trunc");
			TJ_CHECK(rk, rc == DPL_ETRUNC, "receive %u: %d", k,
				 rc);
			for (i = 0; i < 256; i++)
				TJ_CHECK(rk, b[i] == 0xA5, "receive %u wrote "
					 "byte %zu", k, i);
			continue;
		}
		TJ_CHECK(rk, rc == 0, "isend %u: %d", k, rc);
		rc = tj_wait(rk, tj_req(rk, rq, k), 0, "trunc");
		TJ_CHECK(rk, rc == DPL_ETRUNC, "send %u: %d", k, rc);
	}
	(void)st;
	tj_barrier(rk);
	tj_close(rk);
	TJ_CHECK(rk, fake_live_opens() == 0, "%d open", fake_live_opens());
	fake_dev_free(d);
}

Test(cudaipc_dev, truncation_both_ways)
{
	run_pair(trunc_rank, NULL, 0);
}

/* Rank 0 sends one device message, then dies; rank 1 had opened its
 * handle and sees DPL_EPEER with the handle closed. */
static void killed_rank(struct tj_rank *rk)
{
	unsigned char *d = fake_dev_alloc(4096);
	void *rq = tj_reqs(rk, 2);
	int rc;

	TJ_CHECK(rk, d != NULL, "alloc");
	if (rk->rank == 0) {
		tj_fill(d, 4096, 3);
		rc = dpl_transport_isend(rk->t, tj_req(rk, rq, 0), 1, 0, d,
					 4096, DPL_MEM_CUDA);
		TJ_CHECK(rk, rc == 0, "isend: %d", rc);
		rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "send");
		TJ_CHECK(rk, rc == 0, "send: %d", rc);
		tj_flag_wait(rk, 0, 1, 0);
		raise(SIGKILL);
	}
	rc = dpl_transport_irecv(rk->t, tj_req(rk, rq, 0), 0, 0, d, 4096,
				 DPL_MEM_CUDA);
	rc = rc ? rc : tj_wait(rk, tj_req(rk, rq, 0), 0, "recv");
	TJ_CHECK(rk, rc == 0 && tj_verify(d, 4096, 3) < 0, "recv: %d", rc);
	TJ_CHECK(rk, fake_live_opens() == 1, "%d open", fake_live_opens());
	rc = dpl_transport_irecv(rk->t, tj_req(rk, rq, 1), 0, 1, d, 4096,
				 DPL_MEM_CUDA);
	tj_flag_set(rk, 0, 1);
	rc = rc ? rc : tj_wait(rk, tj_req(rk, rq, 1), 0, "recv after death");
	TJ_CHECK(rk, rc == DPL_EPEER, "after the peer died: %d", rc);
	TJ_CHECK(rk, fake_live_opens() == 0, "%d open after the death",
		 fake_live_opens());
	tj_close(rk);
	TJ_CHECK(rk, fake_live_opens() == 0, "%d open", fake_live_opens());
	fake_dev_free(d);
}

Test(cudaipc_dev, killed_peer_closes_handles)
{
	run_pair(killed_rank, NULL, 1u);
}

/* The receiver cannot open the sender's handle (a platform that refuses
 * CUDA IPC): both requests end with DPL_EIO, the receiver's message says
 * which rank's buffer it could not map and why that may be; nothing
 * hangs, nothing stays open, and the next message still goes through. */
static void refused_rank(struct tj_rank *rk)
{
	unsigned char *d = fake_dev_alloc(4096);
	void *rq = tj_reqs(rk, 2);
	int rc;

	TJ_CHECK(rk, d != NULL, "alloc");
	if (rk->rank == 0) {
		tj_fill(d, 4096, 5);
		rc = dpl_transport_isend(rk->t, tj_req(rk, rq, 0), 1, 0, d,
					 4096, DPL_MEM_CUDA);
		rc = rc ? rc : tj_wait(rk, tj_req(rk, rq, 0), 0, "send");
		TJ_CHECK(rk, rc == DPL_EIO, "send, open refused: %d", rc);
		rc = dpl_transport_isend(rk->t, tj_req(rk, rq, 1), 1, 1, d,
					 4096, DPL_MEM_CUDA);
		rc = rc ? rc : tj_wait(rk, tj_req(rk, rq, 1), 0, "send");
		TJ_CHECK(rk, rc == 0, "send after: %d", rc);
	} else {
		fake_refuse_opens(1);
		rc = dpl_transport_irecv(rk->t, tj_req(rk, rq, 0), 0, 0, d,
					 4096, DPL_MEM_CUDA);
		rc = rc ? rc : tj_wait(rk, tj_req(rk, rq, 0), 0, "recv");
		TJ_CHECK(rk, rc == DPL_EIO, "receive, open refused: %d", rc);
		TJ_CHECK(rk, strstr(dpl_last_error(), "cannot map rank 0's "
				    "device buffer (fake seam: open refused)"
				    ": is CUDA IPC refused") != NULL,
			 "message: %s", dpl_last_error());
		TJ_CHECK(rk, fake_live_opens() == 0, "%d open",
			 fake_live_opens());
		fake_refuse_opens(0);
		rc = dpl_transport_irecv(rk->t, tj_req(rk, rq, 1), 0, 1, d,
					 4096, DPL_MEM_CUDA);
		rc = rc ? rc : tj_wait(rk, tj_req(rk, rq, 1), 0, "recv");
		TJ_CHECK(rk, rc == 0 && tj_verify(d, 4096, 5) < 0,
			 "receive after: %d", rc);
	}
	tj_barrier(rk);
	tj_close(rk);
	TJ_CHECK(rk, fake_live_opens() == 0, "%d open", fake_live_opens());
	fake_dev_free(d);
}

Test(cudaipc_dev, refused_open_fails_both_sides)
{
	run_pair(refused_rank, NULL, 0);
}

/* The platform refuses CUDA IPC from the start: init fails on both ranks
 * (only rank 1 is refused) with DPL_EIO and one message naming rank 1,
 * what it could not map and the CUDA error; nothing stays open, no
 * segment is left, and a later init that is allowed succeeds. */
static void refused_init_rank(struct tj_rank *rk)
{
	int rc;

	if (rk->rank == 1)
		fake_refuse_opens(1);
	rc = tj_open(rk, &fake_cudaipc, NULL, 0);
	TJ_CHECK(rk, rc == DPL_EIO && rk->t == NULL, "init: %d", rc);
	TJ_CHECK(rk, strstr(dpl_last_error(), "transport cudaipc: CUDA IPC "
			    "is refused here: rank 1 cannot map rank 0's "
			    "device buffer (fake seam: open refused)") !=
			     NULL,
		 "message: %s", dpl_last_error());
	TJ_CHECK(rk, fake_live_opens() == 0, "%d open", fake_live_opens());
	TJ_CHECK(rk, segments_of_me() == 0, "a segment left");
	fake_refuse_opens(0);
	tj_barrier(rk);
	rc = tj_open(rk, &fake_cudaipc, NULL, 0);
	TJ_CHECK(rk, rc == 0, "init allowed: %d %s", rc, dpl_last_error());
	tj_close(rk);
}

Test(cudaipc_dev, refused_ipc_fails_init_everywhere)
{
	struct tj_job job = {0};

	job.size = 2;
	job.mode = TJ_PROCESSES;
	job.meet_kind = TJ_MEET_BOOTSTRAP;
	job.fn = refused_init_rank;
	job.deadline_ms = 30000;
	cr_assert_eq(tj_job_run(&job), 0, "%s", job.report);
	tj_job_free(&job);
}

/* The sender frees its device buffer and allocates another, most often
 * at the same address: the new allocation's bytes arrive, not the old
 * one's, because both sides know it by its id (the sender asks for its
 * handle again, the receiver opens that). */
static void reuse_rank(struct tj_rank *rk)
{
	unsigned char *d = fake_dev_alloc(8192), *old = d;
	void *rq = tj_reqs(rk, 1);
	int handles = fake_handles(), opens = fake_total_opens(), rc;
	unsigned round;

	for (round = 0; round < 2; round++) {
		TJ_CHECK(rk, d != NULL, "alloc");
		if (rk->rank == 0) {
			tj_fill(d, 8192, 70 + round);
			rc = dpl_transport_isend(rk->t, rq, 1, round, d, 8192,
						 DPL_MEM_CUDA);
		} else {
			rc = dpl_transport_irecv(rk->t, rq, 0, round, d, 8192,
						 DPL_MEM_CUDA);
		}
		rc = rc ? rc : tj_wait(rk, rq, 0, "reuse");
		TJ_CHECK(rk, rc == 0, "round %u: %d", round, rc);
		if (rk->rank == 1)
			TJ_CHECK(rk, tj_verify(d, 8192, 70 + round) < 0,
				 "round %u: the old allocation's bytes",
				 round);
		tj_barrier(rk);
		if (round == 0 && rk->rank == 0) {
			fake_dev_free(d);
			d = fake_dev_alloc(8192);
			tj_note(rk, "the new allocation is %s the old address",
				d == old ? "at" : "not at");
		}
	}
	if (rk->rank == 0)
		TJ_CHECK(rk, fake_handles() - handles == 2, "%d handles",
			 fake_handles() - handles);
	else
		TJ_CHECK(rk, fake_total_opens() - opens == 2, "%d opens",
			 fake_total_opens() - opens);
	tj_barrier(rk);
	tj_close(rk);
	fake_dev_free(d);
}

Test(cudaipc_dev, reallocated_buffer_is_a_new_allocation)
{
	run_pair(reuse_rank, NULL, 0);
}
