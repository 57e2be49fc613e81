/*
 * train_procs.c - one rank of a `dpl train` job of one process per rank
 * (started by --nprocs or by a launcher): meet the other ranks, train,
 * and bring the results to rank 0.
 *
 * The command is the host of the transport, so it owns the rendezvous:
 * one dpl_bootstrap per job, at the root the launcher put into the
 * environment (DPL_ROOT, or torchrun's MASTER_ADDR and MASTER_PORT;
 * under mpirun the root the ranks agreed on over MPI, launch.c), whose
 * out-of-band exchange the transport uses during its init. It is closed
 * as soon as the transport is open: nothing else uses it, and a rank
 * whose setup failed leaves it at once, so that peers still inside
 * theirs hear of it.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/backend.h>
#include <dpl/bootstrap.h>
#include <dpl/dpl.h>

#include "cli.h"
#include "launch.h"
#include "train.h"

/* Meet the other ranks, then open the transport over that exchange and
 * the rest of rank k; 0 or k->rc. */
static int setup(struct train_rank *k)
{
	struct train_job *J = k->J;
	struct dpl_bootstrap_params bp = {0};
	struct dpl_oob oob;
	dpl_bootstrap *b = NULL;
	int rc;

	bp.rank = k->rank;
	bp.world_size = J->world;
	bp.root = NULL; /* the launcher's, from the environment */
	bp.timeout_ms = (uint32_t)(J->o.timeout_s * 1000.0 + 0.5);
	if ((rc = dpl_bootstrap_open(&bp, &b)) != 0) {
		snprintf(k->msg, sizeof k->msg, "rank %u: setup: %s", k->rank,
			 dpl_last_error());
		k->rc = rc;
		return rc;
	}
	dpl_bootstrap_oob(b, &oob);
	rc = train_rank_setup(k, &oob);
	dpl_bootstrap_close(b);
	return rc;
}

int train_process(struct train_job *J, struct train_result *R,
		  uint32_t rank)
{
	struct train_rank k;
	double *mine = NULL;
	size_t n = 0;
	int rc;

	if ((rc = train_cuda_transport(J, J->tops->name, J->tops->caps)) !=
	    CLI_OK)
		return rc;
	memset(&k, 0, sizeof k);
	k.J = J;
	k.rank = rank;
	k.cause = DPL_RUNNER_NO_RANK;
	dpl_runner_position(J->sched, J->reps, rank, &k.prank, &k.replica);
	if (setup(&k) == 0)
		train_rank_loop(&k);
	if (k.rc == 0) {
		n = train_report_build(&k, NULL);
		mine = malloc(n * sizeof *mine + 1);
		if (mine == NULL) {
			k.rc = DPL_ENOMEM;
			snprintf(k.msg, sizeof k.msg, "rank %u: out of memory",
				 rank);
		} else {
			train_report_build(&k, mine);
		}
	}
	dpl_runner_destroy(k.r);
	k.r = NULL;
	/* A runner that failed has kept its transport up long enough for
	 * its notices to be read (dpl/runner.h): close it at once. */
	if (k.rc == 0)
		k.rc = train_gather(&k, R, mine, n);
	dpl_transport_close(k.t);
	train_model_destroy(&k);
	dpl_device_close(k.dev);
	free(mine);
	rc = k.rc;
	if (rc == 0)
		return CLI_OK;
	if (k.msg[0] != '\0')
		fprintf(stderr, "dpl train: %s\n", k.msg);
	cli_launch_tell_cause(rank, k.cause);
	return rc == DPL_EPEER ? CLI_PEER_FAILED : CLI_FAIL;
}
