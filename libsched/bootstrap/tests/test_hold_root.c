/*
 * test_hold_root.c - roots held for a later rendezvous
 * (dpl_bootstrap_hold_root, dpl/bootstrap.h): the port is bound and
 * listening from the moment it is chosen, so no other socket can take
 * it; rank 0's open at that root (given or from DPL_ROOT) listens on the
 * held socket and closes it at the end; an open at another root leaves
 * it held; release closes it; errors are named and hold nothing.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <dpl/bootstrap.h>

/* The port of "127.0.0.1:P". */
static unsigned port_of(const char *root)
{
	unsigned port = 0;

	cr_assert_eq(sscanf(root, "127.0.0.1:%u", &port), 1, "%s", root);
	cr_assert_gt(port, 0u, "%s", root);
	return port;
}

/* Whether a fresh socket (SO_REUSEADDR, as dpl's own listener sets it)
 * can bind 127.0.0.1:port; 0 or the errno of the bind. */
static int bind_error(unsigned port)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1, err = 0;

	cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0)
		err = errno;
	close(fd);
	return err;
}

/* Open descriptors of this process. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	cr_assert_not_null(d);
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n;
}

static dpl_bootstrap *open_at(const char *root, uint32_t rank,
			      uint32_t world)
{
	struct dpl_bootstrap_params p = {0};
	dpl_bootstrap *b = NULL;

	p.rank = rank;
	p.world_size = world;
	p.root = root;
	p.timeout_ms = 5000;
	cr_assert_eq(dpl_bootstrap_open(&p, &b), 0, "rank %u at %s: %s", rank,
		     root, dpl_last_error());
	return b;
}

static void reported_root(dpl_bootstrap *b, const char *want)
{
	char root[64];

	cr_assert(dpl_bootstrap_root(b, root, sizeof root) > 0);
	cr_expect_str_eq(root, want);
}

Test(hold_root, the_port_is_held_until_rank0_meets_there, .timeout = 20)
{
	char root[64];
	uint32_t v = 7, all[2] = {0, 0};
	dpl_bootstrap *b;
	int st = -1;
	pid_t pid;

	unsetenv("DPL_JOB_SECRET");
	cr_assert_eq(dpl_bootstrap_hold_root(NULL, root, sizeof root), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(bind_error(port_of(root)), EADDRINUSE,
		     "another socket could take %s", root);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		uint32_t w = 8, got[2] = {0, 0};
		struct dpl_bootstrap_params p = {1, 2, root, 5000};
		dpl_bootstrap *c = NULL;
		int ok;

		if (dpl_bootstrap_open(&p, &c) != 0)
			_exit(2);
		ok = dpl_bootstrap_allgather(c, &w, sizeof w, got) == 0 &&
		     got[0] == 7 && got[1] == 8;
		dpl_bootstrap_close(c);
		_exit(ok ? 0 : 3);
	}
	/* Binding the port itself would fail: the held socket has it. */
	b = open_at(root, 0, 2);
	reported_root(b, root);
	cr_expect_eq(dpl_bootstrap_allgather(b, &v, sizeof v, all), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(all[1], 8u);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank 1: status %d",
		  st);
	dpl_bootstrap_close(b);
	/* The rendezvous took the socket and closed it: nothing is held. */
	cr_expect_eq(bind_error(port_of(root)), 0, "%s still bound", root);
	cr_expect_eq(dpl_bootstrap_release_root(root), DPL_ENOENT);
}

Test(hold_root, rank0_takes_it_at_the_root_from_DPL_ROOT, .timeout = 10)
{
	char root[64];
	dpl_bootstrap *b = NULL;

	cr_assert_eq(dpl_bootstrap_hold_root("127.0.0.1", root, sizeof root),
		     0, "%s", dpl_last_error());
	unsetenv("DPL_ROOT_FD");
	unsetenv("DPL_JOB_SECRET");
	setenv("DPL_RANK", "0", 1);
	setenv("DPL_WORLD_SIZE", "1", 1);
	setenv("DPL_ROOT", root, 1);
	cr_assert_eq(dpl_bootstrap_open_env(1000, &b), 0, "%s",
		     dpl_last_error());
	reported_root(b, root);
	dpl_bootstrap_close(b);
	cr_expect_eq(dpl_bootstrap_release_root(root), DPL_ENOENT);
}

Test(hold_root, an_open_at_another_root_leaves_it_held, .timeout = 10)
{
	char a[64], c[64], got[64];
	dpl_bootstrap *b;

	unsetenv("DPL_JOB_SECRET");
	cr_assert_eq(dpl_bootstrap_hold_root(NULL, a, sizeof a), 0);
	cr_assert_eq(dpl_bootstrap_hold_root(NULL, c, sizeof c), 0);
	cr_assert_str_neq(a, c);
	/* Port 0: rank 0 binds a port of its own. */
	b = open_at("127.0.0.1:0", 0, 1);
	cr_assert(dpl_bootstrap_root(b, got, sizeof got) > 0);
	cr_expect_str_neq(got, a);
	cr_expect_str_neq(got, c);
	dpl_bootstrap_close(b);
	/* Each held root goes to the open at it, not to another. */
	b = open_at(c, 0, 1);
	reported_root(b, c);
	dpl_bootstrap_close(b);
	cr_expect_eq(bind_error(port_of(a)), EADDRINUSE, "%s was let go", a);
	cr_expect_eq(dpl_bootstrap_release_root(a), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(bind_error(port_of(a)), 0, "%s still bound", a);
}

Test(hold_root, release_closes_it_once, .timeout = 10)
{
	char root[64];
	int before = open_fds();

	cr_assert_eq(dpl_bootstrap_hold_root(NULL, root, sizeof root), 0);
	cr_expect_eq(open_fds(), before + 1);
	cr_expect_eq(dpl_bootstrap_release_root(root), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(open_fds(), before);
	cr_expect_eq(dpl_bootstrap_release_root(root), DPL_ENOENT);
	cr_expect(strstr(dpl_last_error(), root) != NULL, "%s",
		  dpl_last_error());
}

Test(hold_root, errors_are_named_and_hold_nothing, .timeout = 10)
{
	char root[64], many[64][64];
	int before = open_fds(), i;

	cr_expect_eq(dpl_bootstrap_hold_root(NULL, NULL, 64), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "root is NULL") != NULL, "%s",
		  dpl_last_error());
	cr_expect_eq(dpl_bootstrap_hold_root("no-such-host.invalid", root,
					     sizeof root), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "cannot resolve root host "
			 "'no-such-host.invalid'") != NULL, "%s",
		  dpl_last_error());
	cr_expect_eq(dpl_bootstrap_hold_root(NULL, root, 4), DPL_ERANGE);
	cr_expect(strstr(dpl_last_error(), "the buffer has 4") != NULL, "%s",
		  dpl_last_error());
	cr_expect_eq(open_fds(), before, "a failed hold kept a socket");
	cr_expect_eq(dpl_bootstrap_release_root(NULL), DPL_EINVAL);
	cr_expect_eq(dpl_bootstrap_release_root("no port"), DPL_EINVAL);
	for (i = 0; i < 64; i++)
		cr_assert_eq(dpl_bootstrap_hold_root(NULL, many[i], 64), 0,
			     "hold %d: %s", i, dpl_last_error());
	cr_expect_eq(dpl_bootstrap_hold_root(NULL, root, sizeof root),
		     DPL_EBUSY);
	cr_expect(strstr(dpl_last_error(), "64 roots") != NULL, "%s",
		  dpl_last_error());
	cr_expect_eq(open_fds(), before + 64);
	for (i = 0; i < 64; i++)
		cr_expect_eq(dpl_bootstrap_release_root(many[i]), 0);
	cr_expect_eq(open_fds(), before);
}
