/*
 * launch.h - start the ranks of a job as local processes (`dpl train
 * --nprocs N`) and wait for them with a bound.
 */
#ifndef DPL_CLI_LAUNCH_H
#define DPL_CLI_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>

/* Exit status of a rank process that stopped because another rank failed
 * (the runner's DPL_EPEER); 1 means the rank failed itself. */
#define CLI_PEER_FAILED 3

struct cli_launch {
	uint32_t nprocs;    /* ranks to start, >= 1 */
	double grace_s;     /* once a rank failed, how long the others have
			       to exit before they are killed */
	const char *pid_dir; /* NULL, or a directory that receives
				rank-<r>.pid for every rank started */
	char **argv;        /* the rank's command line, NULL-terminated;
			       argv[0] is only the name: this program's
			       file (/proc/self/exe) runs */
};

/*
 * cli_launch_run - run p->nprocs copies of this program, rank r with
 * DPL_RANK=r, DPL_WORLD_SIZE=nprocs, DPL_ROOT=127.0.0.1:<port>, rank 0
 * also DPL_ROOT_FD=<a socket listening on that port, bound by the
 * launcher before any rank starts, so that the port cannot be taken in
 * between (dpl/bootstrap.h)>, and DPL_JOB_SECRET=<64 hex digits of
 * getrandom(), fresh for each call, replacing any inherited one> in its
 * environment, plus UCX_NET_DEVICES=lo, FI_TCP_IFACE=lo and
 * UCX_LOG_FILE=stderr when they are not set. Each child dies with the
 * parent (PR_SET_PDEATHSIG).
 * Blocks until every child exited: without a failure, for as long as they
 * run; once one failed (non-zero exit or a signal), at most grace_s more,
 * after which the rest are killed and named; a rank that has told its
 * cause (cli_launch_tell_cause) by then is on its way out and gets
 * CLI_LAUNCH_EXIT_S (15 s) more to exit before it is killed too. A child stopped by a signal
 * (SIGSTOP, SIGTSTP: waitpid's WUNTRACED) bounds the wait the same way
 * from the moment it stopped, the first failure after it restarting the
 * bound; continued (WCONTINUED) before anything failed, the bound is
 * lifted. A child still stopped once every other one exited with a
 * failure, or when the bound is up, is killed (SIGKILL, no SIGCONT), so
 * none is left behind. SIGINT, SIGTERM and SIGHUP are passed on to the
 * ranks and end the wait the same way (the handlers are restored on
 * return). Removes what a rank killed by a signal left in /dev/shm
 * (dpl-*-p<pid> segments, libfabric shm's <pid>:* files).
 * Prints on stderr one line for every rank that failed, the cause last:
 * the rank that explains the failure, in this order: one stopped and
 * never continued ("rank 2 (pid P) stopped responding (stopped by signal
 * 19 (...) and never continued; killed); ranks 0, 1, 3 gave up waiting
 * for it; ..."), one killed by a signal the launcher did not send ("was
 * killed by signal 9 (Killed)"), one still running when the bound was up
 * (no progress: "did not exit in time and was killed", followed by the
 * ranks that gave up waiting for it), one that failed itself ("failed
 * (exit status 1)"), and when every failed rank stopped because of
 * another, the rank most of them name (cli_launch_tell_cause), else the
 * first seen; the first seen among equals. The ranks that exit after a
 * timeout are consequences of a stopped or hung rank, never named as its
 * cause. Each rank gets the write end of the cause pipe as DPL_LAUNCH_FD.
 * Returns the CLI exit code: CLI_OK when every rank exited 0, else
 * CLI_FAIL.
 */
int cli_launch_run(const char *cmd, const struct cli_launch *p);

/*
 * cli_launch_tell_cause - a rank started by cli_launch_run() tells the
 * launcher which rank its failure names as the cause (the runner's
 * dpl_runner_cause(), or the rank the results gather failed with): one
 * line on the pipe DPL_LAUNCH_FD names. The launcher uses these when
 * every failed rank stopped because of another (exit status
 * CLI_PEER_FAILED) and it saw no rank stop, die or hang itself: its last
 * line then names the rank most of them name ("rank 2 (pid P) is named as
 * the cause by ranks 0, 1, 3 and by itself; ..."). A no-op
 * without DPL_LAUNCH_FD (another launcher) or with cause UINT32_MAX;
 * best effort, never blocks for long (one short write to a pipe).
 */
void cli_launch_tell_cause(uint32_t rank, uint32_t cause);

/*
 * cli_launch_env - the rank and world size this process was given by a
 * launcher: DPL_RANK and DPL_WORLD_SIZE, else torchrun's RANK and
 * WORLD_SIZE, else an MPI launcher's (mpirun, srun: OMPI_COMM_WORLD_SIZE,
 * PMIX_RANK or PMI_SIZE in the environment). Under MPI, when dpl is built
 * with it, the ranks agree on a root over MPI_COMM_WORLD
 * (dpl_bootstrap_mpi_root), then finalise MPI, and this process's
 * environment gets DPL_RANK, DPL_WORLD_SIZE and DPL_ROOT, so that the
 * command's one rendezvous (dpl_bootstrap, train_procs.c) meets there as
 * under any other launcher. *found says whether the
 * environment names a rank. Returns CLI_OK, CLI_USAGE after printing
 * which variable is malformed, or CLI_FAIL after printing why the ranks
 * could not agree (or that this dpl has no MPI).
 */
int cli_launch_env(const char *cmd, bool *found, uint32_t *rank,
		   uint32_t *world);

#endif /* DPL_CLI_LAUNCH_H */
