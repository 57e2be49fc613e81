/*
 * cmd_train.c - `dpl train`: train the reference model (or time the
 * synthetic device) with one runner per rank, the ranks being threads
 * over the in-process transport or processes over a real transport
 * (shm, ucx, ofi: started here with --nprocs, or by a launcher that sets
 * the rank in the environment); report loss, throughput and activation
 * memory per stage, and optionally check the final weights against
 * training on one device. This file picks the mode; train.h lists the
 * pieces that do the work.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/dpl.h>

#include "cli.h"
#include "launch.h"
#include "train.h"

#if defined(DPL_HAVE_BUILTINS)
extern const struct dpl_transport_ops dpl_transport_inproc;
#endif
#if defined(DPL_HAVE_TRANSPORT_SHM)
extern const struct dpl_transport_ops dpl_transport_shm;
#endif
#if defined(DPL_HAVE_TRANSPORT_UCX)
extern const struct dpl_transport_ops dpl_transport_ucx;
#endif
#if defined(DPL_HAVE_TRANSPORT_OFI)
extern const struct dpl_transport_ops dpl_transport_ofi;
#endif
#if defined(DPL_HAVE_TRANSPORT_CUDAIPC)
#include <dpl/transport_cudaipc.h>
#endif
#if defined(DPL_HAVE_TRANSPORT_HOOK)
#include <dpl/transport_hook.h>
#endif
#if defined(DPL_HAVE_TRANSPORT_NCCL)
#include <dpl/transport_nccl.h>
#endif

#if defined(DPL_HAVE_BUILTINS)

/*
 * The transport named `name` for ranks that are processes (procs) or
 * threads, or a usage error. "hook" is the shim of dpl/transport_hook.h
 * and "nccl" that of dpl/transport_nccl.h, in the table of that mode; the
 * transports linked here are registered as their inner ones
 * (hook.inner=shm, nccl.inner=cudaipc), others load by name or path.
 */
static int find_transport(const char *name, bool procs,
			  const struct dpl_transport_ops **out)
{
	static const struct {
		const char *name;
		const struct dpl_transport_ops *ops;
	} t[] = {
		{"inproc", &dpl_transport_inproc},
#if defined(DPL_HAVE_TRANSPORT_SHM)
		{"shm", &dpl_transport_shm},
#else
		{"shm", NULL},
#endif
#if defined(DPL_HAVE_TRANSPORT_UCX)
		{"ucx", &dpl_transport_ucx},
#else
		{"ucx", NULL},
#endif
#if defined(DPL_HAVE_TRANSPORT_OFI)
		{"ofi", &dpl_transport_ofi},
#else
		{"ofi", NULL},
#endif
#if defined(DPL_HAVE_TRANSPORT_CUDAIPC)
		{"cudaipc", &dpl_transport_cudaipc},
#else
		{"cudaipc", NULL},
#endif
	};
	size_t i;

#if defined(DPL_HAVE_TRANSPORT_HOOK)
	if (strcmp(name, "hook") == 0) {
		for (i = 0; i < sizeof t / sizeof t[0]; i++)
			if (t[i].ops != NULL &&
			    dpl_transport_hook_register(t[i].ops) != 0)
				return cli_fail(CMD, "--transport hook: %s",
						dpl_last_error());
		*out = procs ? &dpl_transport_hook
			     : &dpl_transport_hook_threads;
		return 0;
	}
#endif
#if defined(DPL_HAVE_TRANSPORT_NCCL)
	if (strcmp(name, "nccl") == 0) {
		for (i = 0; i < sizeof t / sizeof t[0]; i++)
			if (t[i].ops != NULL &&
			    dpl_transport_nccl_register(t[i].ops) != 0)
				return cli_fail(CMD, "--transport nccl: %s",
						dpl_last_error());
		*out = procs ? &dpl_transport_nccl
			     : &dpl_transport_nccl_threads;
		return 0;
	}
#endif
	(void)procs;
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		if (strcmp(name, t[i].name) != 0)
			continue;
		if (t[i].ops == NULL)
			return cli_usage_error(CMD, "--transport %s: dpl was "
					       "built without that transport",
					       name);
		*out = t[i].ops;
		return 0;
	}
	return cli_usage_error(CMD, "--transport: '%s' is not inproc, shm, "
			       "ucx, ofi, cudaipc, hook or nccl", name);
}

/* This command line less --nprocs and --pid-dir, for the ranks. */
static char **rank_argv(int argc, char **argv, const char *transport)
{
	char **a = calloc((size_t)argc + 4, sizeof *a);
	const char *v;
	int i, n = 0, j;

	if (a == NULL)
		return NULL;
	a[n++] = (char *)"dpl";
	a[n++] = argv[0];
	for (i = 1; i < argc; i++) {
		j = i;
		if (cli_flag(argc, argv, &j, "--nprocs", &v) ||
		    cli_flag(argc, argv, &j, "--pid-dir", &v)) {
			i = j;
			continue;
		}
		a[n++] = argv[i];
	}
	if (transport) {
		a[n++] = (char *)"--transport";
		a[n++] = (char *)transport;
	}
	a[n] = NULL;
	return a;
}

static int run(int argc, char **argv)
{
	struct train_job *J = calloc(1, sizeof *J);
	struct train_result R;
	uint32_t env_rank = 0, env_world = 0, i;
	bool env = false, threads;
	int rc;

	if (J == NULL)
		return cli_fail(CMD, "out of memory");
	memset(&R, 0, sizeof R);
	train_opts_init(&J->o);
	if ((rc = train_opts_parse(argc, argv, &J->o)) != 0 ||
	    (rc = train_resolve(J)) != 0)
		goto out;
	if (J->o.nprocs == 0 &&
	    (rc = cli_launch_env(CMD, &env, &env_rank, &env_world)) != 0)
		goto out;
	J->procs = J->o.nprocs > 0 || env;
	if ((rc = find_transport(J->o.transport ? J->o.transport
				 : J->procs	? "shm"
						: "inproc",
				 J->procs, &J->tops)) != 0)
		goto out;
	threads = (J->tops->caps & DPL_TRANSPORT_CAP_IN_PROCESS) != 0;
	if (J->procs && threads) {
		rc = cli_usage_error(CMD, "--transport inproc runs the ranks "
				     "as threads of one process; %s needs "
				     "shm, ucx or ofi",
				     J->o.nprocs ? "--nprocs"
						 : "a rank from the "
						   "environment");
		goto out;
	}
	if (J->o.pid_dir && J->o.nprocs == 0) {
		rc = cli_usage_error(CMD, "--pid-dir applies to --nprocs only");
		goto out;
	}
	if (!J->procs && !threads) {
		rc = cli_usage_error(CMD, "--transport %s runs one process per "
				     "rank: give --nprocs %u, or start the "
				     "ranks with DPL_RANK, DPL_WORLD_SIZE and "
				     "DPL_ROOT set", J->tops->name, J->world);
		goto out;
	}
	if (J->procs && J->o.trace_path) {
		rc = cli_usage_error(CMD, "--trace needs all ranks in one "
				     "process (--transport inproc)");
		goto out;
	}
	if (J->procs && (J->o.nprocs ? J->o.nprocs : env_world) != J->world) {
		char reps[256] = "";
		size_t len = 0;

		for (i = 0; i < J->ranks && len + 12 < sizeof reps; i++)
			len += (size_t)snprintf(reps + len, sizeof reps - len,
						"%s%u", i ? "," : "",
						J->reps[i]);
		rc = cli_usage_error(CMD, "%s %u ranks, but the layout has %u "
				     "(the sum of the replicas %s)",
				     J->o.nprocs ? "--nprocs starts"
						 : "the environment's world "
						   "has",
				     J->o.nprocs ? J->o.nprocs : env_world,
				     J->world, reps);
		goto out;
	}
	if (J->o.nprocs > 0) {
		struct cli_launch lp = {0};
		char **a = rank_argv(argc, argv,
				     J->o.transport ? NULL : "shm");

		if (a == NULL) {
			rc = cli_fail(CMD, "out of memory");
			goto out;
		}
		lp.nprocs = J->o.nprocs;
		lp.grace_s = J->o.timeout_s + 1;
		lp.pid_dir = J->o.pid_dir;
		lp.argv = a;
		rc = cli_launch_run(CMD, &lp);
		free(a);
		goto out;
	}
	R.loss = calloc(J->o.iterations, sizeof *R.loss);
	J->loss = malloc((size_t)J->o.iterations * J->world * sizeof *J->loss);
	if (R.loss == NULL || J->loss == NULL) {
		rc = cli_fail(CMD, "out of memory");
		goto out;
	}
	for (i = 0; i < J->o.iterations * J->world; i++)
		J->loss[i] = NAN;
	if (J->procs) {
		if ((rc = train_process(J, &R, env_rank)) != 0 ||
		    env_rank != 0)
			goto out;
	} else if ((rc = train_threads(J, &R)) != 0) {
		goto out;
	}
	rc = J->o.json ? train_print_json(J, &R) : (train_print_text(J, &R), 0);
	if (rc == 0 && R.have_check &&
	    !(R.max_rel <= train_check_limit(&J->o)))
		rc = cli_fail(CMD, "--check: largest relative weight "
			      "difference %.3g is above %g (%s)", R.max_rel,
			      train_check_limit(&J->o),
			      train_dtype_name(&J->o));
out:
	free(R.loss);
	free(J->loss);
	dpl_schedule_destroy(J->sched);
	train_opts_free(&J->o);
	free(J);
	return rc;
}

#else /* !DPL_HAVE_BUILTINS */

static int run(int argc, char **argv)
{
	struct train_opts o;
	int rc;

	train_opts_init(&o);
	rc = train_opts_parse(argc, argv, &o);
	train_opts_free(&o);
	if (rc != 0)
		return rc;
	return cli_usage_error(CMD, "dpl was built without the in-process "
			       "transport and the devices (transports/, "
			       "devices/)");
}

#endif /* DPL_HAVE_BUILTINS */

const struct dpl_cli_cmd dpl_cli_cmd_train = {
	.name = "train",
	.summary = "train a model with one runner per rank (threads or "
		   "processes)",
	.run = run,
	.usage = train_usage,
};
