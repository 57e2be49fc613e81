/*
 * test_root_fd.c - rank 0's listener inherited from its launcher
 * (DPL_ROOT_FD, dpl/bootstrap.h): rank 0 listens on the descriptor it is
 * given instead of binding the port (which the given socket holds, so a
 * bind of its own would fail), owns and closes it, takes it only once per
 * process, and refuses a value that is not a listening TCP socket on the
 * root's port with an error naming it, leaving the descriptor alone.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <dpl/bootstrap.h>

/* A TCP (or UDP) socket bound to 127.0.0.1:0, listening when asked; its
 * port into *port. */
static int bound_socket(int type, int listening, unsigned *port)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, type, 0);

	cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "bind: %s",
		     strerror(errno));
	if (listening)
		cr_assert_eq(listen(fd, 8), 0, "listen: %s", strerror(errno));
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* The environment of rank `rank` of `world` at 127.0.0.1:port, with
 * DPL_ROOT_FD=fd_value (unset when NULL). */
static void set_env(unsigned rank, unsigned world, unsigned port,
		    const char *fd_value)
{
	char v[64];

	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	unsetenv("MASTER_ADDR");
	unsetenv("MASTER_PORT");
	unsetenv("DPL_JOB_SECRET");
	snprintf(v, sizeof v, "%u", rank);
	setenv("DPL_RANK", v, 1);
	snprintf(v, sizeof v, "%u", world);
	setenv("DPL_WORLD_SIZE", v, 1);
	snprintf(v, sizeof v, "127.0.0.1:%u", port);
	setenv("DPL_ROOT", v, 1);
	if (fd_value != NULL)
		setenv("DPL_ROOT_FD", fd_value, 1);
	else
		unsetenv("DPL_ROOT_FD");
}

static void set_fd_env(int fd)
{
	char v[16];

	snprintf(v, sizeof v, "%d", fd);
	setenv("DPL_ROOT_FD", v, 1);
}

/* Rank 1 in a child process: joins 127.0.0.1:port, gathers one word;
 * exits 0 when it saw rank 0's word (7) and its own (8). */
static pid_t start_rank1(unsigned port)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct dpl_bootstrap_params p = {0};
		char root[64];
		uint32_t v = 8, all[2] = {0, 0};
		dpl_bootstrap *b = NULL;
		int ok;

		snprintf(root, sizeof root, "127.0.0.1:%u", port);
		p.rank = 1;
		p.world_size = 2;
		p.root = root;
		p.timeout_ms = 5000;
		if (dpl_bootstrap_open(&p, &b) != 0)
			_exit(2);
		ok = dpl_bootstrap_allgather(b, &v, sizeof v, all) == 0 &&
		     all[0] == 7 && all[1] == 8;
		dpl_bootstrap_close(b);
		_exit(ok ? 0 : 3);
	}
	return pid;
}

Test(root_fd, rank0_listens_on_the_inherited_socket, .timeout = 20)
{
	unsigned port;
	int fd = bound_socket(SOCK_STREAM, 1, &port), st = -1;
	uint32_t v = 7, all[2] = {0, 0};
	dpl_bootstrap *b = NULL;
	char root[64], want[64];
	pid_t pid;

	set_env(0, 2, port, NULL);
	set_fd_env(fd);
	pid = start_rank1(port);
	/* The socket holds the port (no SO_REUSEADDR): a rank 0 that bound
	 * the root itself would fail here. */
	cr_assert_eq(dpl_bootstrap_open_env(5000, &b), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(dpl_bootstrap_allgather(b, &v, sizeof v, all), 0, "%s",
		     dpl_last_error());
	cr_expect_eq(all[1], 8u);
	snprintf(want, sizeof want, "127.0.0.1:%u", port);
	cr_assert(dpl_bootstrap_root(b, root, sizeof root) > 0);
	cr_expect_str_eq(root, want);
	/* The rendezvous owns the listener and has closed it. */
	errno = 0;
	cr_expect_eq(fcntl(fd, F_GETFD), -1);
	cr_expect_eq(errno, EBADF);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank 1: status %d",
		  st);
	dpl_bootstrap_close(b);
}

Test(root_fd, port_zero_root_reports_the_inherited_port, .timeout = 10)
{
	unsigned port;
	int fd = bound_socket(SOCK_STREAM, 1, &port);
	dpl_bootstrap *b = NULL;
	char root[64], want[64];

	set_env(0, 1, 0, NULL);
	set_fd_env(fd);
	cr_assert_eq(dpl_bootstrap_open_env(1000, &b), 0, "%s",
		     dpl_last_error());
	snprintf(want, sizeof want, "127.0.0.1:%u", port);
	cr_assert(dpl_bootstrap_root(b, root, sizeof root) > 0);
	cr_expect_str_eq(root, want);
	dpl_bootstrap_close(b);
}

Test(root_fd, taken_once_per_process, .timeout = 10)
{
	unsigned port, other;
	int fd = bound_socket(SOCK_STREAM, 1, &port), decoy;
	dpl_bootstrap *b = NULL;
	char root[64], want[64];

	set_env(0, 1, 0, NULL);
	set_fd_env(fd);
	cr_assert_eq(dpl_bootstrap_open_env(1000, &b), 0, "%s",
		     dpl_last_error());
	dpl_bootstrap_close(b);
	/* The number now names another listening socket: the second open
	 * must bind a port of its own, not take this one. */
	decoy = bound_socket(SOCK_STREAM, 1, &other);
	if (decoy != fd) {
		cr_assert_eq(dup2(decoy, fd), fd);
		close(decoy);
	}
	b = NULL;
	cr_assert_eq(dpl_bootstrap_open_env(1000, &b), 0, "%s",
		     dpl_last_error());
	snprintf(want, sizeof want, "127.0.0.1:%u", other);
	cr_assert(dpl_bootstrap_root(b, root, sizeof root) > 0);
	cr_expect_str_neq(root, want);
	cr_expect_neq(fcntl(fd, F_GETFD), -1, "the second open closed it");
	dpl_bootstrap_close(b);
	close(fd);
}

Test(root_fd, other_ranks_ignore_it, .timeout = 10)
{
	unsigned port;
	int fd = bound_socket(SOCK_STREAM, 0, &port);
	dpl_bootstrap *b = NULL;

	/* Nobody listens on the port: rank 1 times out, and never looks at
	 * the (bad) value. */
	set_env(1, 2, port, "not-a-number");
	cr_expect_eq(dpl_bootstrap_open_env(200, &b), DPL_ETIMEDOUT, "%s",
		     dpl_last_error());
	cr_expect_null(strstr(dpl_last_error(), "DPL_ROOT_FD"), "%s",
		       dpl_last_error());
	cr_expect_null(b);
	close(fd);
}

struct bad_case {
	char value[32];
	char named[96];
	int fd; /* must still be open afterwards, or -1 */
};

Test(root_fd, bad_values_are_named_and_left_alone, .timeout = 10)
{
	struct bad_case c[8];
	unsigned port, other, n = 0, i;
	int lis = bound_socket(SOCK_STREAM, 1, &port);
	int quiet = bound_socket(SOCK_STREAM, 0, &other);
	int udp = bound_socket(SOCK_DGRAM, 0, &other);
	int elsewhere = bound_socket(SOCK_STREAM, 1, &other);
	int pfd[2], gone;

	cr_assert_eq(pipe(pfd), 0);
	gone = dup(pfd[0]);
	cr_assert_geq(gone, 0);
	close(gone);
	c[n++] = (struct bad_case){"abc", "DPL_ROOT_FD='abc' is not a file "
				   "descriptor", -1};
	c[n++] = (struct bad_case){"-1", "DPL_ROOT_FD='-1'", -1};
	c[n++] = (struct bad_case){"", "DPL_ROOT_FD=''", -1};
	c[n++] = (struct bad_case){"99999999999", "DPL_ROOT_FD='99999999999'",
				   -1};
	snprintf(c[n].value, sizeof c[n].value, "%d", gone);
	snprintf(c[n].named, sizeof c[n].named, "DPL_ROOT_FD=%d is not an "
		 "open file descriptor", gone);
	c[n++].fd = -1;
	snprintf(c[n].value, sizeof c[n].value, "%d", pfd[0]);
	snprintf(c[n].named, sizeof c[n].named, "DPL_ROOT_FD=%d is not a TCP "
		 "socket", pfd[0]);
	c[n++].fd = pfd[0];
	snprintf(c[n].value, sizeof c[n].value, "%d", udp);
	snprintf(c[n].named, sizeof c[n].named, "DPL_ROOT_FD=%d is not a TCP "
		 "socket", udp);
	c[n++].fd = udp;
	snprintf(c[n].value, sizeof c[n].value, "%d", quiet);
	snprintf(c[n].named, sizeof c[n].named, "DPL_ROOT_FD=%d is a TCP "
		 "socket that does not listen", quiet);
	c[n++].fd = quiet;
	for (i = 0; i < n; i++) {
		dpl_bootstrap *b = NULL;

		set_env(0, 2, port, c[i].value);
		cr_expect_eq(dpl_bootstrap_open_env(500, &b), DPL_EINVAL,
			     "case %u (%s): %s", i, c[i].value,
			     dpl_last_error());
		cr_expect_neq(strstr(dpl_last_error(), c[i].named), NULL,
			      "case %u: '%s' does not say '%s'", i,
			      dpl_last_error(), c[i].named);
		cr_expect_null(b, "case %u", i);
		if (c[i].fd >= 0)
			cr_expect_neq(fcntl(c[i].fd, F_GETFD), -1,
				      "case %u: the descriptor was closed", i);
	}
	/* A listening socket on another port than DPL_ROOT's. */
	{
		dpl_bootstrap *b = NULL;
		char v[16], named[96];

		snprintf(v, sizeof v, "%d", elsewhere);
		snprintf(named, sizeof named, "DPL_ROOT_FD=%d listens on port "
			 "%u, not on the root's port %u", elsewhere, other, port);
		set_env(0, 2, port, v);
		cr_expect_eq(dpl_bootstrap_open_env(500, &b), DPL_EINVAL, "%s",
			     dpl_last_error());
		cr_expect_neq(strstr(dpl_last_error(), named), NULL,
			      "'%s' does not say '%s'", dpl_last_error(), named);
		cr_expect_neq(fcntl(elsewhere, F_GETFD), -1);
	}
	close(lis);
	close(quiet);
	close(udp);
	close(elsewhere);
	close(pfd[0]);
	close(pfd[1]);
}
