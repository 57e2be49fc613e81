/*
 * An embedder of an installed dpl: builds, lowers, validates and
 * simulates a schedule (dpl::dpl, dpl::sim), then moves one message
 * between two ranks (threads) over the in-process transport through the
 * checked data path (dpl::transport_inproc). Exits 0 only when the
 * makespan is the known one (1F1B, S = 4, M = 8, F = 1, B = 2: 33) and
 * the message arrived intact.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <dpl/dpl.h>
#include <dpl/sim.h>
#include <dpl/transport_inproc.h>

struct rank {
	uint32_t id;
	int rc;
	char buf[16];
};

/* Post one message (retrying while the transport says DPL_EAGAIN) and
 * wait for it, progressing, for at most 10 s. */
static int transfer(dpl_transport *t, void *req, bool send, uint32_t peer,
		    uint64_t tag, void *buf, size_t len)
{
	uint64_t deadline = dpl_clock_ns() + UINT64_C(10000000000);
	int rc;

	do {
		rc = send ? dpl_transport_isend(t, req, peer, tag, buf, len,
						DPL_MEM_HOST)
			  : dpl_transport_irecv(t, req, peer, tag, buf, len,
						DPL_MEM_HOST);
		if (rc == DPL_EAGAIN && dpl_transport_progress(t) < 0)
			return DPL_EIO;
	} while (rc == DPL_EAGAIN && dpl_clock_ns() < deadline);
	if (rc != 0)
		return rc;
	while ((rc = dpl_transport_test(t, req)) == DPL_EAGAIN) {
		if (dpl_clock_ns() > deadline)
			return DPL_ETIMEDOUT;
		if (dpl_transport_progress(t) < 0)
			return DPL_EIO;
	}
	return rc;
}

static void *run(void *arg)
{
	struct rank *k = arg;
	struct dpl_transport_params p = {.rank = k->id, .world_size = 2,
					 .world = "consumer",
					 .timeout_ms = 10000};
	_Alignas(max_align_t) unsigned char req[1024];
	char hello[] = "hello, dpl", ack = 0;
	dpl_transport *t;

	if ((k->rc = dpl_transport_open(&dpl_transport_inproc, &p, &t))) {
		fprintf(stderr, "consumer: rank %u: %s\n", k->id,
			dpl_last_error());
		return NULL;
	}
	if (dpl_transport_req_size(t) > sizeof req) {
		k->rc = DPL_ENOMEM;
	} else if (k->id == 0) {
		/* Send, then wait for the answer before leaving the job. */
		k->rc = transfer(t, req, true, 1, 7, hello, sizeof hello);
		if (k->rc == 0)
			k->rc = transfer(t, req, false, 1, 8, &ack, 1);
	} else {
		k->rc = transfer(t, req, false, 0, 7, k->buf, sizeof hello);
		if (k->rc == 0)
			k->rc = transfer(t, req, true, 0, 8, &ack, 1);
	}
	dpl_transport_close(t);
	return NULL;
}

int main(void)
{
	struct dpl_schedule_params p = {.stages = 4, .microbatches = 8,
					.policy = DPL_POLICY_1F1B};
	struct rank k[2] = {{.id = 0}, {.id = 1}};
	struct dpl_sim_summary sum;
	pthread_t th[2];
	dpl_schedule *s;
	dpl_sim *sim;

	if (dpl_schedule_build(&p, &s) || dpl_schedule_lower(s) ||
	    dpl_schedule_validate(s, NULL) || dpl_sim_run(s, NULL, &sim)) {
		fprintf(stderr, "consumer: %s\n", dpl_last_error());
		return 1;
	}
	dpl_sim_summary(sim, &sum);
	dpl_sim_destroy(sim);
	dpl_schedule_destroy(s);
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, run, &k[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	printf("dpl %s: makespan %g, message \"%s\" (%s, %s)\n", dpl_version(),
	       sum.makespan, k[1].buf, dpl_err_name(k[0].rc),
	       dpl_err_name(k[1].rc));
	return sum.makespan == 33.0 && k[0].rc == 0 && k[1].rc == 0 &&
			       strcmp(k[1].buf, "hello, dpl") == 0
		       ? 0
		       : 1;
}
