/*
 * test_train_hook.c - the runner's and the launcher's error paths with
 * one process per rank, over every transport the command links (shm,
 * ucx, ofi over tcp), through the hook shim (dpl/transport_hook.h,
 * `dpl train --transport hook --transport-options hook.inner=T,...`):
 *   - without a fault the shim is transparent: --check holds and the
 *     weights digest is the inner transport's own;
 *   - a post that fails on one rank stops every rank naming that rank
 *     and the error, and the launcher's last line names it;
 *   - a peer that one rank takes for dead (a one-sided drop, like a
 *     partition) is named by that rank, and every other rank, the
 *     dropped one included, stops with that rank's notice; every rank
 *     exits 3, and the launcher names the rank they name;
 *   - a rank whose results rank 0 cannot gather after training is named
 *     by rank 0 and, through rank 0's verdict, by the other ranks, and
 *     by the launcher.
 * No rank process and nothing of theirs in /dev/shm is left. Every run
 * is waited for with a bound: a hang is a failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <cjson/cJSON.h>

#include "train_run.h"

TestSuite(train_hook, .fini = remove_scratch);

/* The inner transports, as `dpl train --transport` names them, with the
 * environment each runs under. */
enum { INNER_SHM, INNER_UCX, INNER_OFI };

struct inner {
	const char *name;
	const char *env[2];
	bool built;
};

/* In the order of INNER_SHM, INNER_UCX, INNER_OFI. */
static const struct inner inners[] = {
	{"shm", {NULL}, true},
#if defined(DPL_TEST_HAVE_UCX)
	{"ucx", {NULL}, true},
#else
	{"ucx", {NULL}, false},
#endif
	/* Over tcp;ofi_rxm: libfabric's shm provider can wedge on a dead
	 * peer (transports/ofi/README.md), which is not what is tested. */
#if defined(DPL_TEST_HAVE_OFI)
	{"ofi", {"FI_PROVIDER=tcp;ofi_rxm", NULL}, true},
#else
	{"ofi", {"FI_PROVIDER=tcp;ofi_rxm", NULL}, false},
#endif
};

static void need(const struct inner *in)
{
	if (!in->built)
		cr_skip_test("dpl was built without the %s transport",
			     in->name);
}

/* Run `dpl train --nprocs 4 --transport hook` over `in` with the hook
 * options `faults` and the extra flags; bounded. */
static void hook_run(struct run *r, const struct inner *in,
		     const char *faults, const char *flags)
{
	char args[512];

	snprintf(args, sizeof args, "train --nprocs 4 --transport hook "
		 "--transport-options hook.inner=%s%s%s --timeout %d "
		 "--pid-dir %%P %s", in->name, faults[0] ? "," : "", faults,
		 timeout_for(in->name), flags);
	start(r, args, in->env);
	finish(r, timeout_for(in->name) + 1 + HANG_S);
}

/* Every rank's own line names `cause`; that of `rank` also says `own`. */
static void every_rank_says(const struct run *r, const char *cause,
			    unsigned rank, const char *own)
{
	char line[1024];
	unsigned q;

	for (q = 0; q < 4; q++) {
		cr_assert_not_null(rank_line(r->err, q, line, sizeof line),
				   "no message of rank %u:\n%s", q, r->err);
		if (q == rank)
			cr_assert_not_null(strstr(line, own), "rank %u: %s",
					   q, line);
		else
			cr_assert_not_null(strstr(line, cause), "rank %u: %s",
					   q, line);
	}
}

static void assert_no_leftovers(const struct run *r)
{
	pid_t pids[4];

	cr_assert_eq(read_pids(r, pids, 4), 4);
	assert_clean(pids, 4);
	cr_assert_null(strstr(r->err, "did not exit in time"), "%s", r->err);
}

static char *digest(const char *out)
{
	cJSON *j = cJSON_Parse(out), *d;
	char *hex;

	cr_assert_not_null(j, "not JSON:\n%s", out);
	d = cJSON_GetObjectItemCaseSensitive(j, "weights_digest");
	cr_assert(cJSON_IsString(d), "%s", out);
	hex = strdup(d->valuestring);
	cJSON_Delete(j);
	return hex;
}

/* With no fault the shim changes nothing: --check holds (every weight
 * as on one device) and the digest is that of the inner transport run
 * without the shim; the trace shows rank 1's posts, and only its. */
static void clean(const struct inner *in)
{
	char args[256], *want, *got;
	struct run a, b;

	need(in);
	snprintf(args, sizeof args, "train --nprocs 4 --transport %s "
		 "--iterations 3 --check --json --timeout %d", in->name,
		 timeout_for(in->name));
	start(&a, args, in->env);
	finish(&a, 120);
	cr_assert_eq(a.status, 0, "%s: exit %d:\n%s", in->name, a.status,
		     a.err);
	hook_run(&b, in, "hook.trace=1,hook.rank=1", "--iterations 3 --check "
		 "--json");
	cr_assert_eq(b.status, 0, "hook over %s: exit %d:\n%s", in->name,
		     b.status, b.err);
	want = digest(a.out);
	got = digest(b.out);
	cr_assert_str_eq(got, want, "hook over %s: digest %s, without the "
			 "shim %s", in->name, got, want);
	cr_assert_not_null(strstr(b.err, "hook rank 1: isend peer 2 tag "),
			   "%s", b.err);
	assert_no_leftovers(&b);
	free(want);
	free(got);
	run_done(&a);
	run_done(&b);
}

/* Rank 2's 40th post fails with DPL_EIO: it says so, every other rank
 * names rank 2 and the error, the launcher's last line names rank 2. */
static void failing_post(const struct inner *in)
{
	char want[160];
	struct run r;
	pid_t pids[4];

	need(in);
	hook_run(&r, in, "hook.rank=2,hook.fail_after=40,hook.fail_code=eio",
		 "--iterations 20");
	cr_assert_eq(r.status, 1, "exit %d:\n%s", r.status, r.err);
	every_rank_says(&r, "rank 2 failed in", 2,
			"failed as asked (hook.fail_after=40)");
	every_rank_says(&r, "(DPL_EIO)", 2, "(DPL_EIO)");
	cr_assert_eq(read_pids(&r, pids, 4), 4);
	snprintf(want, sizeof want, "dpl train: rank 2 (pid %ld) failed (exit "
		 "status 1); 4 of 4 ranks exited with an error",
		 (long)pids[2]);
	cr_assert_not_null(strstr(r.err, want), "%s", r.err);
	cr_assert_eq(r.out[0], '\0', "stdout: %s", r.out);
	assert_no_leftovers(&r);
	run_done(&r);
}

/* Rank 1 takes rank 2 for dead after its 100th post. Rank 1 names rank
 * 2; ranks 0 and 3 learn it from rank 1's notice, and so does rank 2,
 * which nobody took for dead but itself runs into rank 1's silence. */
static void dropped_peer(const struct inner *in)
{
	char want[200];
	struct run r;
	pid_t pids[4];

	need(in);
	hook_run(&r, in, "hook.rank=1,hook.drop_peer=2,hook.drop_after=100",
		 "--iterations 20");
	cr_assert_eq(r.status, 1, "exit %d:\n%s", r.status, r.err);
	every_rank_says(&r, "rank 1 lost rank 2", 1,
			"with rank 2: peer failed (DPL_EPEER): hook: rank 2 "
			"is dropped");
	/* Every rank exits 3 (another rank's cause): the launcher names the
	 * rank they name (their causes, DPL_LAUNCH_FD). */
	cr_assert_eq(read_pids(&r, pids, 4), 4);
	snprintf(want, sizeof want, "dpl train: rank 2 (pid %ld) is named as "
		 "the cause by ranks 0, 1, 3 and by itself; 4 of 4 ranks "
		 "exited with an error", (long)pids[2]);
	cr_assert_not_null(strstr(r.err, want), "%s", r.err);
	assert_no_leftovers(&r);
	run_done(&r);
}

/* The number of posts rank 0 makes before its first gather post (a
 * receive on DPL_RUNNER_APP_TAG(1)), read off the shim's trace of a
 * clean run with the same flags. */
static unsigned long posts_before_gather(const struct inner *in,
					 const char *flags)
{
	static const char first[] = "hook rank 0: irecv peer 1 tag "
				    "0xe00000000000001 ";
	const char *p, *end;
	unsigned long n = 0;
	struct run r;

	hook_run(&r, in, "hook.trace=1", flags);
	cr_assert_eq(r.status, 0, "clean run over %s: exit %d:\n%s", in->name,
		     r.status, r.err);
	end = strstr(r.err, first);
	cr_assert_not_null(end, "no gather post in the trace:\n%s", r.err);
	for (p = r.err; (p = strstr(p, "hook rank 0: i")) != NULL && p < end;
	     p++)
		if (strncmp(p, "hook rank 0: isend", 18) == 0 ||
		    strncmp(p, "hook rank 0: irecv", 18) == 0)
			n++;
	cr_assert_gt(n, 0ul);
	run_done(&r);
	return n;
}

/* Training ends well, then rank 0 takes rank 3 for dead as the gather
 * begins: rank 0 names rank 3, and ranks 1 and 2, which sent their
 * results, hear rank 0's verdict and name rank 3 too (not rank 0). */
static void lost_in_the_gather(const struct inner *in)
{
	char faults[128], line[1024];
	unsigned long n;
	struct run r;
	pid_t pids[4];
	unsigned q;

	need(in);
	n = posts_before_gather(in, "--iterations 3");
	snprintf(faults, sizeof faults, "hook.rank=0,hook.drop_peer=3,"
		 "hook.drop_after=%lu", n);
	hook_run(&r, in, faults, "--iterations 3");
	cr_assert_eq(r.status, 1, "exit %d:\n%s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "dpl train: rank 0: results from "
				  "rank 3: hook: rank 3 is dropped "
				  "(DPL_EPEER)"), "%s", r.err);
	for (q = 1; q < 3; q++) {
		char key[96];
		const char *p;

		snprintf(key, sizeof key, "dpl train: rank %u: rank 0 could "
			 "not gather the results: rank 3: ", q);
		p = strstr(r.err, key);
		cr_assert_not_null(p, "rank %u does not name rank 3:\n%s", q,
				   r.err);
		snprintf(line, sizeof line, "%.*s",
			 (int)strcspn(p, "\n"), p);
		cr_assert_not_null(strstr(line, "(DPL_EPEER)"), "%s", line);
	}
	/* Rank 3, which got no verdict, names rank 0; the others outvote
	 * it. */
	cr_assert_eq(read_pids(&r, pids, 4), 4);
	snprintf(line, sizeof line, "dpl train: rank 3 (pid %ld) is named as "
		 "the cause by ranks 0, 1, 2; 4 of 4 ranks exited with an "
		 "error", (long)pids[3]);
	cr_assert_not_null(strstr(r.err, line), "%s", r.err);
	cr_assert_eq(r.out[0], '\0', "stdout: %s", r.out);
	assert_no_leftovers(&r);
	run_done(&r);
}

/* Each case over each inner transport. */
#define OVER_EACH(name, secs)                                                 \
	Test(train_hook, name##_over_shm, .timeout = secs)                    \
	{                                                                     \
		name(&inners[INNER_SHM]);                                     \
	}                                                                     \
	Test(train_hook, name##_over_ucx, .timeout = secs)                    \
	{                                                                     \
		name(&inners[INNER_UCX]);                                     \
	}                                                                     \
	Test(train_hook, name##_over_ofi_tcp, .timeout = secs)                \
	{                                                                     \
		name(&inners[INNER_OFI]);                                     \
	}

OVER_EACH(clean, 240)
OVER_EACH(failing_post, 120)
OVER_EACH(dropped_peer, 120)
OVER_EACH(lost_in_the_gather, 240)

/* Options a transport does not take are named by every rank, which
 * exits 1 at setup; nothing is left. */
Test(train_hook, bad_options_are_named, .timeout = 120)
{
	static const struct {
		const char *args, *says;
	} bad[] = {
		{"train --nprocs 2 --stages 2 --transport hook --iterations 1 "
		 "--timeout 3 --pid-dir %P",
		 "setup: hook: option hook.inner=NAME (the transport to wrap) "
		 "is required"},
		{"train --nprocs 2 --stages 2 --transport hook "
		 "--transport-options hook.inner=shm,hook.fail_code=sometimes "
		 "--iterations 1 --timeout 3 --pid-dir %P", "hook.fail_code"},
		{"train --nprocs 2 --stages 2 --transport shm "
		 "--transport-options bogus=1 --iterations 1 --timeout 3 "
		 "--pid-dir %P", "setup: shm: unknown option 'bogus'"},
	};
	char key[64];
	size_t i;
	unsigned q;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct run r;
		pid_t pids[2];

		start(&r, bad[i].args, NULL);
		finish(&r, 60);
		cr_assert_eq(r.status, 1, "%s: exit %d:\n%s", bad[i].args,
			     r.status, r.err);
		for (q = 0; q < 2; q++) {
			snprintf(key, sizeof key, "dpl train: rank %u: ", q);
			cr_assert_not_null(strstr(r.err, key), "%s", r.err);
		}
		cr_assert_not_null(strstr(r.err, bad[i].says), "%s:\n%s",
				   bad[i].args, r.err);
		cr_assert_eq(read_pids(&r, pids, 2), 2);
		assert_clean(pids, 2);
		run_done(&r);
	}
}
