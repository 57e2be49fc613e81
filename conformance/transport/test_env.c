/*
 * test_env.c - the backend and its environment (case 36, and the host's
 * rendezvous from the environment): with the variables the registration
 * set (UCX_TLS, FI_PROVIDER, ...) it works and binds only loopback
 * addresses, and a job whose host finds its peers through
 * DPL_RANK/DPL_WORLD_SIZE/DPL_ROOT or torchrun's variables
 * (dpl_bootstrap_open_env) opens and exchanges over that exchange. The
 * transport itself reads none of these variables: the host does.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/bootstrap.h>

#include "harness.h"

static void loopback_rank(struct tj_rank *rk)
{
	char why[256];
	int n = 0;

	conf_exchange(rk, 1 - rk->rank, 3, 64u << 10, 1);
	conf_exchange(rk, 1 - rk->rank, 4, 8, 2);
	tj_step(rk, "checking this process's sockets");
	TJ_CHECK(rk, tj_sockets_loopback(why, sizeof why, &n),
		 "%s: in test mode every address must be loopback "
		 "(127.0.0.0/8, ::1)",
		 why);
	tj_note(rk, "%d TCP/UDP sockets, all on loopback", n);
	tj_barrier(rk);
}

Test(env, binds_loopback_only, .timeout = 80)
{
	static const char *const vars[] = {"UCX_TLS", "UCX_NET_DEVICES",
					   "FI_PROVIDER", "FI_TCP_IFACE",
					   "DPL_CONF_OPTIONS"};
	struct conf_job job = {.size = 2, .fn = loopback_rank,
			       .deadline_s = 60};
	size_t i;

	for (i = 0; i < sizeof vars / sizeof vars[0]; i++)
		if (getenv(vars[i]) != NULL)
			cr_log_info("%s=%s", vars[i], getenv(vars[i]));
	conf_run(&job);
}

/* ---------------------------------------------------------------- */

struct envboot {
	bool torchrun;
};

static void env_rank(struct tj_rank *rk)
{
	const struct envboot *a = rk->arg;
	char num[16], host[64];
	const char *colon = strrchr(tj_meet(rk), ':');
	dpl_bootstrap *b = NULL;
	struct dpl_oob oob;
	dpl_transport *t = NULL;
	int rc;

	static const char *const all[] = {"DPL_RANK", "DPL_WORLD_SIZE",
					  "DPL_ROOT", "RANK", "WORLD_SIZE",
					  "MASTER_ADDR", "MASTER_PORT"};
	size_t i;

	for (i = 0; i < sizeof all / sizeof all[0]; i++)
		unsetenv(all[i]);
	snprintf(host, sizeof host, "%.*s", (int)(colon - tj_meet(rk)),
		 tj_meet(rk));
	snprintf(num, sizeof num, "%u", rk->rank);
	if (a->torchrun) {
		/* torchrun's agent holds MASTER_PORT; dpl listens on the
		 * next port (dpl/bootstrap.h), the free one we picked. */
		char port[24];

		snprintf(port, sizeof port, "%ld", strtol(colon + 1, NULL, 10) - 1);
		setenv("RANK", num, 1);
		setenv("WORLD_SIZE", "2", 1);
		setenv("MASTER_ADDR", host, 1);
		setenv("MASTER_PORT", port, 1);
	} else {
		setenv("DPL_RANK", num, 1);
		setenv("DPL_WORLD_SIZE", "2", 1);
		setenv("DPL_ROOT", tj_meet(rk), 1);
	}
	tj_step(rk, "the host's bootstrap from the %s variables",
		a->torchrun ? "torchrun's" : "DPL_*");
	rc = dpl_bootstrap_open_env(conf_timeout_ms(), &b);
	conf_check_code(rk, rc, "dpl_bootstrap_open_env");
	TJ_CHECK(rk, rc == 0,
		 "the host's bootstrap from %s=%s: %s (%s)",
		 a->torchrun ? "MASTER_ADDR:(MASTER_PORT + 1)" : "DPL_ROOT",
		 tj_meet(rk), dpl_err_name(rc), dpl_last_error());
	TJ_CHECK(rk, dpl_bootstrap_rank(b) == rk->rank &&
			     dpl_bootstrap_world_size(b) == 2,
		 "the bootstrap from the environment is rank %u of %u, "
		 "expected %u of 2",
		 dpl_bootstrap_rank(b), dpl_bootstrap_world_size(b),
		 rk->rank);
	dpl_bootstrap_oob(b, &oob);
	tj_step(rk, "init over the exchange of that bootstrap");
	rc = conf_open_with(rk, &oob, NULL, dpl_bootstrap_rank(b),
			    dpl_bootstrap_world_size(b), conf_timeout_ms(),
			    &t);
	dpl_bootstrap_close(b);
	conf_check_code(rk, rc, "dpl_transport_open");
	TJ_CHECK(rk, rc == 0,
		 "init over a bootstrap from %s=%s: %s (%s)",
		 a->torchrun ? "MASTER_ADDR:(MASTER_PORT + 1)" : "DPL_ROOT",
		 tj_meet(rk), dpl_err_name(rc), dpl_last_error());
	rk->t = t;
	conf_exchange(rk, 1 - rk->rank, 5, 4096, 1);
	/* rank_main's final barrier and close follow */
}

static void env_job(bool torchrun)
{
	struct envboot a = {.torchrun = torchrun};
	char root[64];
	struct conf_job job = {.size = 2, .fn = env_rank, .arg = &a,
			       .no_open = true, .deadline_s = 60};

	cr_assert_eq(tj_meet_make(TJ_MEET_BOOTSTRAP, root, sizeof root), 0,
		     "no free port");
	job.boot = root;
	conf_run(&job);
}

Test(env, init_from_dpl_variables, .timeout = 80)
{
	CONF_REQUIRE_PROCESSES("the environment is per process");
	env_job(false);
}

Test(env, init_from_torchrun_variables, .timeout = 80)
{
	CONF_REQUIRE_PROCESSES("the environment is per process");
	env_job(true);
}
