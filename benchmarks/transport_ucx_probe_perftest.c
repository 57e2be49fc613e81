/*
 * transport_ucx_probe_perftest.c - ucx_perftest beside the UCX transport
 * probe: a server and a client process on loopback with the same UCX_TLS,
 * whose CSV output the probe compares with its own figures.
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dpl/common.h>

#include "transport_ucx_probe.h"

void probe_die(const char *what, int rc)
{
	fprintf(stderr, "transport_ucx_probe: %s: %s (%s)\n", what,
		dpl_err_name(rc), dpl_last_error());
	exit(1);
}

unsigned probe_pick_port(void)
{
	struct sockaddr_in a;
	socklen_t al = sizeof a;
	unsigned port;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		probe_die("socket", DPL_EIO);
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) != 0)
		probe_die("bind", DPL_EIO);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static pid_t spawn(char *const argv[], const char *tls, int out_fd)
{
	pid_t pid = fork();

	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(out_fd >= 0 ? out_fd : null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		if (tls != NULL)
			setenv("UCX_TLS", tls, 1);
		setenv("UCX_NET_DEVICES", "lo", 1);
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

int probe_perftest(const char *tls, const char *test, size_t len,
		   int iters, double v[8])
{
	char port[16], size[32], n[16], w[16], line[512];
	char *srv[] = {"ucx_perftest", "-p", port, NULL};
	char *cli[] = {"ucx_perftest", "127.0.0.1", "-p", port, "-t",
		       (char *)test, "-s", size, "-n", n, "-w", w, "-f",
		       "-v", NULL};
	int attempt, fds[2], status, got = -1;
	pid_t s, c;

	snprintf(port, sizeof port, "%u", probe_pick_port());
	snprintf(size, sizeof size, "%zu", len);
	snprintf(n, sizeof n, "%d", iters);
	snprintf(w, sizeof w, "%d", iters / 8 + 1);
	s = spawn(srv, tls, -1);
	for (attempt = 0; attempt < 50 && got != 0; attempt++) {
		FILE *f;

		nanosleep(&(struct timespec){0, 50000000}, NULL);
		if (pipe(fds) != 0)
			break;
		c = spawn(cli, tls, fds[1]);
		close(fds[1]);
		f = fdopen(fds[0], "r");
		while (f != NULL && fgets(line, sizeof line, f) != NULL)
			if (sscanf(line, "%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf",
				   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
				   &v[6], &v[7]) == 8)
				got = 0;
		if (f != NULL)
			fclose(f);
		waitpid(c, &status, 0);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
			break; /* not installed */
	}
	kill(s, SIGTERM);
	waitpid(s, &status, 0);
	return got;
}
