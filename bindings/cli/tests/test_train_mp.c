/*
 * test_train_mp.c - `dpl train` with one process per rank: the same
 * weights digest as the threaded run over shm, ucx and ofi on a pure
 * pipeline, DP x PP and an uneven layout, and in f32 over shm; a rank
 * that fails (--fail-at) or is killed with SIGKILL stops every other rank
 * with an error naming it, with no rank left running and nothing left in
 * /dev/shm; ranks
 * started by an outside launcher (torchrun's variables); bad flags and
 * worlds that do not match the layout. Every run is waited for with a
 * bound: a hang is a failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "train_run.h"
#include "loopback_port.h"

TestSuite(train_mp, .fini = remove_scratch);

static unsigned count(const char *s, const char *needle)
{
	unsigned n = 0;

	while ((s = strstr(s, needle)) != NULL) {
		n++;
		s += strlen(needle);
	}
	return n;
}

/*
 * Run to the end; return the digest of a successful --json run. With
 * `world` > 0 the run is launched with --pid-dir: after it, none of its
 * ranks is left, nor anything of theirs in /dev/shm.
 */
static void digest_of(const char *args, const char *transport, char *hex,
		      unsigned world)
{
	struct run r;
	cJSON *j, *d, *t, *m;
	pid_t pids[8];

	start(&r, args, NULL);
	finish(&r, 120);
	cr_assert_eq(r.status, 0, "dpl %s: exit %d:\n%s", args, r.status,
		     r.err);
	j = cJSON_Parse(r.out);
	cr_assert_not_null(j, "dpl %s: not JSON:\n%s", args, r.out);
	d = cJSON_GetObjectItemCaseSensitive(j, "weights_digest");
	t = cJSON_GetObjectItemCaseSensitive(j, "transport");
	m = cJSON_GetObjectItemCaseSensitive(j, "max_rel_diff");
	cr_assert(cJSON_IsString(d) && strlen(d->valuestring) == 16);
	cr_assert(cJSON_IsString(t));
	cr_assert_str_eq(t->valuestring, transport);
	cr_assert(cJSON_IsNumber(m) &&
		  m->valuedouble <= (strstr(args, "f32") ? 1e-4 : 1e-5),
		  "dpl %s: max_rel_diff above its limit", args);
	strcpy(hex, d->valuestring);
	/* Only rank 0 prints: one report. */
	cr_assert_eq(count(r.out, "\"weights_digest\""), 1,
		     "not one report:\n%s", r.out);
	if (world > 0) {
		cr_assert_eq(read_pids(&r, pids, world), world);
		assert_clean(pids, world);
	}
	cJSON_Delete(j);
	run_done(&r);
}

static const struct {
	const char *flags;
	unsigned world;
} layouts[] = {
	{"--stages 4", 4},                       /* pure pipeline */
	{"--stages 2 --replicas 2", 4},          /* DP x PP */
	{"--stages 3 --replicas 2,1,1", 4},      /* uneven replication */
};

static void same_digest(const char *transport)
{
	char args[256], want[24], got[24];
	size_t i;

	for (i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
		snprintf(args, sizeof args, "train %s --iterations 4 --check "
			 "--json --timeout 20", layouts[i].flags);
		digest_of(args, "inproc", want, 0);
		snprintf(args, sizeof args, "train %s --iterations 4 --check "
			 "--json --timeout 20 --nprocs %u --transport %s "
			 "--pid-dir %%P", layouts[i].flags, layouts[i].world,
			 transport);
		digest_of(args, transport, got, layouts[i].world);
		cr_assert_str_eq(got, want, "%s over %s: digest %s, "
				 "threads give %s", layouts[i].flags,
				 transport, got, want);
	}
}

Test(train_mp, digest_shm_equals_threads, .timeout = 300)
{
	same_digest("shm");
}

/* The f32 model over shm: its weights (floats, two to a double of the
 * report) reach rank 0 as the threads hold them. Odd widths leave a
 * half-filled last double. */
Test(train_mp, f32_digest_shm_equals_threads, .timeout = 120)
{
	static const char *flags = "train --stages 3 --replicas 2,1,1 "
				   "--widths 5,7,9,3,3 --iterations 4 --check "
				   "--json --timeout 20 --dtype f32";
	char args[256], want[24], got[24], f64[24];

	digest_of(flags, "inproc", want, 0);
	snprintf(args, sizeof args, "%s --nprocs 4 --transport shm "
		 "--pid-dir %%P", flags);
	digest_of(args, "shm", got, 4);
	cr_assert_str_eq(got, want, "f32 over shm: digest %s, threads give %s",
			 got, want);
	snprintf(args, sizeof args, "train --stages 3 --replicas 2,1,1 "
		 "--widths 5,7,9,3,3 --iterations 4 --check --json "
		 "--timeout 20");
	digest_of(args, "inproc", f64, 0);
	cr_assert_str_neq(f64, want);
}

Test(train_mp, digest_ucx_equals_threads, .timeout = 300)
{
#if !defined(DPL_TEST_HAVE_UCX)
	cr_skip_test("dpl was built without the UCX transport");
#endif
	same_digest("ucx");
}

Test(train_mp, digest_ofi_equals_threads, .timeout = 300)
{
#if !defined(DPL_TEST_HAVE_OFI)
	cr_skip_test("dpl was built without the libfabric transport");
#endif
	same_digest("ofi");
}

static void fail_at(const char *transport)
{
	char args[256], line[1024];
	struct run r;
	pid_t pids[4];
	unsigned q;

	snprintf(args, sizeof args, "train --nprocs 4 --transport %s "
		 "--fail-at 2:3 --iterations 10 --timeout %d --pid-dir %%P",
		 transport, timeout_for(transport));
	start(&r, args, NULL);
	finish(&r, timeout_for(transport) + 1 + HANG_S);
	cr_assert_eq(r.status, 1, "exit %d:\n%s", r.status, r.err);
	cr_assert_eq(read_pids(&r, pids, 4), 4);
	/* Rank 2 failed itself; every other rank names rank 2. */
	cr_assert_not_null(rank_line(r.err, 2, line, sizeof line), "%s",
			   r.err);
	cr_assert_not_null(strstr(line, "injected failure"), "%s", line);
	for (q = 0; q < 4; q++) {
		if (q == 2)
			continue;
		cr_assert_not_null(rank_line(r.err, q, line, sizeof line),
				   "no message of rank %u:\n%s", q, r.err);
		cr_assert_not_null(strstr(line, "rank 2 failed"), "%s", line);
	}
	/* The launcher names rank 2, saw all four fail, killed none. */
	snprintf(line, sizeof line, "rank 2 (pid %ld) failed (exit status 1); "
		 "4 of 4 ranks exited with an error", (long)pids[2]);
	cr_assert_not_null(strstr(r.err, line), "%s", r.err);
	cr_assert_null(strstr(r.err, "did not exit in time"), "%s", r.err);
	cr_assert_eq(r.out[0], '\0', "stdout: %s", r.out);
	assert_clean(pids, 4);
	run_done(&r);
}

Test(train_mp, fail_at_shm_stops_every_rank, .timeout = 120)
{
	fail_at("shm");
}

Test(train_mp, fail_at_ucx_stops_every_rank, .timeout = 120)
{
#if !defined(DPL_TEST_HAVE_UCX)
	cr_skip_test("dpl was built without the UCX transport");
#endif
	fail_at("ucx");
}

Test(train_mp, fail_at_ofi_stops_every_rank, .timeout = 120)
{
#if !defined(DPL_TEST_HAVE_OFI)
	cr_skip_test("dpl was built without the libfabric transport");
#endif
	fail_at("ofi");
}

/* Training: rank 1 has used MID_RUN_TICKS of CPU (user + system). Its
 * start-up (loading the CUDA, cuBLAS and NCCL libraries the command
 * links, and a transport's own, slow under ASan) takes up to about a
 * second of CPU before the rendezvous; the run is a million iterations,
 * so 1.5 s is well inside it. */
#define MID_RUN_TICKS 150
#define MID_RUN_WITHIN_S 40

static void sigkill(const char *transport, const char *const *env)
{
	char args[256], line[1024];
	struct timespec tick = {0, 20000000};
	double end;
	struct run r;
	pid_t pids[4];
	unsigned q;

	snprintf(args, sizeof args, "train --nprocs 4 --transport %s "
		 "--iterations 1000000 --timeout %d --pid-dir %%P", transport,
		 timeout_for(transport));
	start(&r, args, env);
	/* Mid-training: every rank started and rank 1 has computed. */
	end = now_s() + MID_RUN_WITHIN_S;
	while ((read_pids(&r, pids, 4) < 4 ||
		proc_cpu_ticks(pids[1]) < MID_RUN_TICKS) &&
	       now_s() < end)
		nanosleep(&tick, NULL);
	cr_assert_eq(read_pids(&r, pids, 4), 4, "ranks did not start");
	if (proc_cpu_ticks(pids[1]) < MID_RUN_TICKS) {
		char path[128], *err;

		snprintf(path, sizeof path, "%s/err", r.dir);
		err = slurp(path);
		cr_assert_fail("rank 1 did not start training within %d s:"
			       "\n%s", MID_RUN_WITHIN_S, err ? err : "");
	}
	cr_assert_eq(kill(pids[1], SIGKILL), 0);
	finish(&r, timeout_for(transport) + 1 + HANG_S);
	cr_assert_eq(r.status, 1, "exit %d:\n%s", r.status, r.err);
	snprintf(line, sizeof line, "rank 1 (pid %ld) was killed by signal "
		 "9", (long)pids[1]);
	cr_assert_not_null(strstr(r.err, line), "%s", r.err);
	cr_assert_not_null(strstr(r.err, "4 of 4 ranks exited with an "
				  "error"), "%s", r.err);
	cr_assert_null(strstr(r.err, "did not exit in time"), "%s", r.err);
	/* Every survivor names the dead rank: it lost it, or heard from the
	 * rank that did. */
	for (q = 0; q < 4; q++) {
		if (q == 1)
			continue;
		cr_assert_not_null(rank_line(r.err, q, line, sizeof line),
				   "no message of rank %u:\n%s", q, r.err);
		cr_assert(strstr(line, "with rank 1:") ||
				  strstr(line, "lost rank 1 "),
			  "rank %u does not name rank 1: %s", q, line);
	}
	assert_clean(pids, 4);
	run_done(&r);
}

Test(train_mp, sigkill_shm_stops_every_rank, .timeout = 120)
{
	sigkill("shm", NULL);
}

Test(train_mp, sigkill_ucx_stops_every_rank, .timeout = 120)
{
#if !defined(DPL_TEST_HAVE_UCX)
	cr_skip_test("dpl was built without the UCX transport");
#endif
	sigkill("ucx", NULL);
}

Test(train_mp, sigkill_ofi_stops_every_rank, .timeout = 120)
{
#if !defined(DPL_TEST_HAVE_OFI)
	cr_skip_test("dpl was built without the libfabric transport");
#endif
	/* Over tcp;ofi_rxm. libfabric 1.17's shm provider guards each
	 * receiver's queue with a process-shared spin lock that every
	 * sender takes: a SIGKILL that lands while the victim holds a
	 * peer's lock (about one kill in 50 here) leaves that peer and
	 * everyone sending to it spinning inside the provider, beyond what
	 * dpl can bound (transports/ofi/README.md). */
	static const char *const env[] = {"FI_PROVIDER=tcp;ofi_rxm", NULL};

	sigkill("ofi", env);
}

/* A port p on 127.0.0.1 with p + 1 free too (dpl listens on
 * MASTER_PORT + 1 under torchrun's variables). */
static unsigned free_port_pair(void)
{
	int p = dpl_test_loopback_ports(2);

	cr_assert_gt(p, 0, "no two free ports on 127.0.0.1");
	return (unsigned)p;
}

Test(train_mp, joins_as_the_rank_a_launcher_gives, .timeout = 120)
{
	char want[24], port[32], rank[2][16];
	const char *env[2][8];
	struct run r[2];
	cJSON *j, *d;
	int q;

	digest_of("train --stages 2 --iterations 4 --json --check", "inproc",
		  want, 0);
	snprintf(port, sizeof port, "MASTER_PORT=%u", free_port_pair());
	for (q = 0; q < 2; q++) {
		snprintf(rank[q], sizeof rank[q], "RANK=%d", q);
		env[q][0] = rank[q];
		env[q][1] = "WORLD_SIZE=2";
		env[q][2] = "MASTER_ADDR=127.0.0.1";
		env[q][3] = port;
		env[q][4] = "DPL_RANK";
		env[q][5] = "DPL_WORLD_SIZE";
		env[q][6] = "DPL_ROOT"; /* torchrun's variables alone */
		env[q][7] = NULL;
	}
	for (q = 0; q < 2; q++)
		start(&r[q], "train --stages 2 --iterations 4 --json --check "
		      "--transport shm --timeout 20", env[q]);
	for (q = 0; q < 2; q++)
		finish(&r[q], 60);
	cr_assert_eq(r[0].status, 0, "%s", r[0].err);
	cr_assert_eq(r[1].status, 0, "%s", r[1].err);
	j = cJSON_Parse(r[0].out);
	cr_assert_not_null(j, "%s", r[0].out);
	d = cJSON_GetObjectItemCaseSensitive(j, "weights_digest");
	cr_assert(cJSON_IsString(d));
	cr_assert_str_eq(d->valuestring, want);
	cJSON_Delete(j);
	/* Only rank 0 reports. */
	cr_assert_eq(r[1].out[0], '\0', "rank 1 printed: %s", r[1].out);
	run_done(&r[0]);
	run_done(&r[1]);
}

/*
 * A process that keeps taking ports the way every other program on the
 * host does (bind port 0, listen), holding up to 8,000 of them and
 * replacing the oldest without pause, until it is killed or its parent
 * dies (at most 300 s).
 */
static pid_t start_port_churn(void)
{
	pid_t parent = getpid(), pid;

	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		static int pool[8000];
		struct sockaddr_in a;
		struct rlimit rl;
		unsigned n = 0, cap = 8000, i = 0;
		time_t end = time(NULL) + 300;

		if (!dies_with_parent(parent))
			_exit(0);
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
			getrlimit(RLIMIT_NOFILE, &rl);
			if (rl.rlim_cur < cap + 64)
				cap = rl.rlim_cur > 128 ? (unsigned)rl.rlim_cur - 64
							: 64;
		}
		memset(&a, 0, sizeof a);
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		while (time(NULL) < end) {
			int fd = socket(AF_INET, SOCK_STREAM, 0);

			if (fd < 0)
				_exit(1);
			if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
			    listen(fd, 1) != 0) {
				close(fd);
				continue;
			}
			if (n == cap)
				close(pool[i]);
			else
				n++;
			pool[i] = fd;
			i = (i + 1) % cap;
		}
		_exit(0);
	}
	return pid;
}

/* While other processes take loopback ports as fast as they can, every
 * --nprocs job still meets: the launcher holds the rendezvous port from
 * before it starts the ranks (rank 0 inherits the socket), so none can
 * take it in between. Binding a port found free and released a moment
 * earlier failed here in most runs with "rank 0 cannot listen on
 * 127.0.0.1:P: Address already in use". */
Test(train_mp, rendezvous_port_is_held_under_port_churn, .timeout = 200)
{
	pid_t churn = start_port_churn();
	struct timespec warm = {0, 300000000};
	int k;

	nanosleep(&warm, NULL);
	for (k = 0; k < 6; k++) {
		struct run r;

		/* The churn takes a CPU of its own: in a full test run on 2
		 * cores a rank's handshake has outlasted a 5 s timeout. The
		 * bound only ends a run that would not meet. */
		start(&r, "train --nprocs 4 --transport shm --iterations 2 "
		      "--timeout 15", NULL);
		finish(&r, 60);
		cr_expect_null(strstr(r.err, "cannot listen"), "run %d:\n%s",
			       k, r.err);
		cr_expect_eq(r.status, 0, "run %d: exit %d\n%s", k, r.status,
			     r.err);
		run_done(&r);
	}
	kill(churn, SIGKILL);
	waitpid(churn, NULL, 0);
}

static void usage_error(const char *args, const char *const *env,
			const char *needle)
{
	struct run r;

	start(&r, args, env);
	finish(&r, 30);
	cr_assert_eq(r.status, 2, "dpl %s: exit %d", args, r.status);
	cr_assert_not_null(strstr(r.err, needle), "dpl %s:\n%s", args, r.err);
	cr_assert_eq(r.out[0], '\0');
	run_done(&r);
}

Test(train_mp, world_must_match_the_layout, .timeout = 60)
{
	static const char *const env3[] = {"DPL_RANK=0", "DPL_WORLD_SIZE=3",
					   "DPL_ROOT=127.0.0.1:1", NULL};
	static const char *const bad[] = {"DPL_RANK=x", "DPL_WORLD_SIZE=2",
					  NULL};
	static const char *const out[] = {"DPL_RANK=2", "DPL_WORLD_SIZE=2",
					  NULL};

	usage_error("train --stages 3 --replicas 2,1,1 --nprocs 3 "
		    "--transport shm", NULL,
		    "--nprocs starts 3 ranks, but the layout has 4 (the sum "
		    "of the replicas 2,1,1)");
	usage_error("train --stages 4 --transport shm", env3,
		    "the environment's world has 3 ranks, but the layout "
		    "has 4");
	usage_error("train --stages 2", bad, "DPL_RANK='x'");
	usage_error("train --stages 2", out, "DPL_RANK=2 is outside");
}

Test(train_mp, bad_flags, .timeout = 60)
{
	usage_error("train --stages 2 --nprocs 2 --transport inproc", NULL,
		    "--transport inproc runs the ranks as threads");
	usage_error("train --stages 2 --nprocs 2 --transport tcp", NULL,
		    "--transport: 'tcp' is not inproc, shm, ucx, ofi, "
		    "cudaipc, hook or nccl");
	usage_error("train --stages 2 --transport shm", NULL,
		    "give --nprocs 2");
	usage_error("train --stages 2 --pid-dir /tmp", NULL,
		    "--pid-dir applies to --nprocs only");
	usage_error("train --stages 2 --nprocs 2 --trace /tmp/x.json", NULL,
		    "--trace needs all ranks in one process");
	usage_error("train --stages 2 --nprocs 0", NULL, "--nprocs");
}

/* A --pid-dir that cannot hold the files is named, with the file. */
Test(train_mp, a_missing_pid_dir_is_named, .timeout = 60)
{
	struct run r;

	start(&r, "train --stages 2 --nprocs 2 --transport shm --iterations 1 "
		  "--pid-dir /nonexistent-dpl-dir", NULL);
	finish(&r, 30);
	cr_assert_neq(r.status, 0, "exit %d", r.status);
	cr_assert_not_null(strstr(r.err, "--pid-dir /nonexistent-dpl-dir: "
					 "/nonexistent-dpl-dir/rank-0.pid: "
					 "No such file or directory"),
			   "%s", r.err);
	cr_assert_null(strstr(r.err, "--pid-file"), "%s", r.err);
	run_done(&r);
}
