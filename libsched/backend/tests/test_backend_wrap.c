/*
 * test_backend_wrap.c - the pieces a wrapping transport takes from
 * dpl::backend: its options split from the inner's, the registry of
 * inner tables, and the refusals of dpl_wrap_open (an unknown inner, one
 * whose requests do not fit, one that does not detect peer failure, one
 * whose ranks are of the other kind). Opening a fitting inner is tested
 * through the hook and nccl shims (test_hook, test_nccl).
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <dpl/backend.h>

static void split(const char *text, const char *want_mine,
		  const char *want_theirs)
{
	char mine[128], theirs[128];

	memset(mine, 'x', sizeof mine);
	memset(theirs, 'x', sizeof theirs);
	dpl_wrap_split_options(text, "hook.", mine, theirs);
	cr_assert_str_eq(mine, want_mine, "'%s': mine '%s'",
			 text ? text : "(null)", mine);
	cr_assert_str_eq(theirs, want_theirs, "'%s': theirs '%s'",
			 text ? text : "(null)", theirs);
}

Test(wrap, options_split_by_prefix_keeping_order_and_lists)
{
	split(NULL, "", "");
	split("", "", "");
	split("hook.inner=shm", "hook.inner=shm", "");
	split("eager=0", "", "eager=0");
	split("hook.a=1,x=2,hook.b=3,y=4", "hook.a=1,hook.b=3", "x=2,y=4");
	/* a list's parts follow their key, on either side */
	split("tls=sm,tcp,hook.l=a,b,c,z=1", "hook.l=a,b,c", "tls=sm,tcp,z=1");
	/* empty parts are dropped; a key that only starts like the prefix
	 * ("hookx", "hook") is the inner's */
	split(",hook.a=1,,hook.=2,hookx=3,", "hook.a=1,hook.=2", "hookx=3");
	split("hook=1,hook.a=1", "hook.a=1", "hook=1");
}

/* A table with only what dpl_wrap_open reads before opening. */
static struct dpl_transport_ops fake(const char *name, uint64_t caps,
				     size_t req_size)
{
	struct dpl_transport_ops o;

	memset(&o, 0, sizeof o);
	o.name = name;
	o.caps = caps;
	o.req_size = req_size;
	return o;
}

static int open_inner(const struct dpl_wrap_names *names, const char *inner,
		      bool threads, dpl_transport **t)
{
	struct dpl_transport_params p;

	memset(&p, 0, sizeof p);
	p.world_size = 1;
	*t = (dpl_transport *)&p; /* must come back NULL on failure */
	return dpl_wrap_open(names, "shim", inner, 256, "SHIM_INNER_REQ_MAX",
			     threads, &p, NULL, t);
}

static void refused(const struct dpl_wrap_names *names, const char *inner,
		    bool threads, const char *want)
{
	dpl_transport *t;
	int rc = open_inner(names, inner, threads, &t);

	cr_assert_eq(rc, DPL_EINVAL, "%s: %d", inner, rc);
	cr_assert_null(t, "%s: *out set on failure", inner);
	cr_assert(strstr(dpl_last_error(), want) != NULL, "%s: '%s' lacks '%s'",
		  inner, dpl_last_error(), want);
}

Test(wrap, open_refuses_unknown_and_unfit_inners_naming_why)
{
	static struct dpl_wrap_names names;
	static struct dpl_transport_ops big, deaf, procs, threads;
	const uint64_t pf = DPL_TRANSPORT_CAP_PEER_FAILURE;

	big = fake("big", pf | DPL_TRANSPORT_CAP_IN_PROCESS, 257);
	deaf = fake("deaf", DPL_TRANSPORT_CAP_IN_PROCESS, 8);
	procs = fake("procs", pf, 8);
	threads = fake("threads", pf | DPL_TRANSPORT_CAP_IN_PROCESS, 8);
	cr_assert_eq(dpl_wrap_register(&names, "shim", &big), 0);
	cr_assert_eq(dpl_wrap_register(&names, "shim", &deaf), 0);
	cr_assert_eq(dpl_wrap_register(&names, "shim", &procs), 0);
	cr_assert_eq(dpl_wrap_register(&names, "shim", &threads), 0);

	refused(&names, "nosuch_wrapped", true,
		"shim: inner transport 'nosuch_wrapped' is neither registered "
		"nor loadable");
	refused(NULL, "big", true, "'big' is neither registered");
	refused(&names, "big", true, "shim: cannot wrap 'big': its requests "
		"are larger than SHIM_INNER_REQ_MAX");
	refused(&names, "deaf", true, "cannot wrap 'deaf': it does not detect "
		"peer failure");
	refused(&names, "procs", true, "cannot wrap 'procs': its ranks are "
		"processes (use dpl_transport_shim)");
	refused(&names, "threads", false, "cannot wrap 'threads': its ranks "
		"are threads (use dpl_transport_shim_threads)");
}

Test(wrap, register_replaces_a_name_and_stops_at_the_limit)
{
	static struct dpl_wrap_names names;
	static struct dpl_transport_ops t[DPL_WRAP_NAMES_MAX + 1], again;
	static char name[DPL_WRAP_NAMES_MAX + 1][16];
	dpl_transport *out;

	cr_assert_eq(dpl_wrap_register(&names, "shim", NULL), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "shim: register") != NULL, "%s",
		  dpl_last_error());
	t[0] = fake(NULL, 0, 8);
	cr_assert_eq(dpl_wrap_register(&names, "shim", &t[0]), DPL_EINVAL);
	for (int i = 0; i <= DPL_WRAP_NAMES_MAX; i++) {
		snprintf(name[i], sizeof name[i], "t%d", i);
		t[i] = fake(name[i], DPL_TRANSPORT_CAP_PEER_FAILURE, 8);
	}
	for (int i = 0; i < DPL_WRAP_NAMES_MAX; i++)
		cr_assert_eq(dpl_wrap_register(&names, "shim", &t[i]), 0,
			     "name %d", i);
	cr_assert_eq(names.n, DPL_WRAP_NAMES_MAX);
	cr_assert_eq(dpl_wrap_register(&names, "shim",
				       &t[DPL_WRAP_NAMES_MAX]), DPL_ENOMEM);
	cr_assert(strstr(dpl_last_error(), "more than 32 registered") != NULL,
		  "%s", dpl_last_error());
	/* the same name again replaces the table, past the limit too */
	again = fake("t5", DPL_TRANSPORT_CAP_PEER_FAILURE, 9999);
	cr_assert_eq(dpl_wrap_register(&names, "shim", &again), 0);
	cr_assert_eq(names.n, DPL_WRAP_NAMES_MAX);
	cr_assert_eq(open_inner(&names, "t5", false, &out), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "its requests are larger") != NULL,
		  "the replaced table was used: %s", dpl_last_error());
}
