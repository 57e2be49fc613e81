/*
 * harness_proc.c - the state of this process that the leak and isolation
 * checks count: open descriptors, threads, /dev/shm entries (counted and
 * named), and the local addresses of its TCP/UDP sockets.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness_internal.h"

static int count_dir(const char *path, const char *glob)
{
	struct dirent *e;
	DIR *d = opendir(path);
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 ||
		    strcmp(e->d_name, "..") == 0)
			continue;
		if (glob != NULL && fnmatch(glob, e->d_name, 0) != 0)
			continue;
		n++;
	}
	closedir(d);
	return n;
}

int conf_count_fds(void)
{
	int n = count_dir("/proc/self/fd", NULL);

	return n < 0 ? n : n - 1; /* the directory's own descriptor */
}

int conf_count_threads(void)
{
	return count_dir("/proc/self/task", NULL);
}

int conf_count_shm(void)
{
	const char *g = getenv("DPL_CONF_SHM_GLOB");

	return count_dir("/dev/shm", g != NULL && *g != '\0' ? g : "*");
}

char *conf_shm_snapshot(void)
{
	const char *g = getenv("DPL_CONF_SHM_GLOB");
	size_t cap = 4096, len = 0, n;
	struct dirent *e;
	char *list, *grown;
	DIR *d;

	if (g == NULL || *g == '\0')
		g = "*";
	d = opendir("/dev/shm");
	if (d == NULL)
		return NULL;
	list = malloc(cap);
	while (list != NULL && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 ||
		    strcmp(e->d_name, "..") == 0 ||
		    fnmatch(g, e->d_name, 0) != 0)
			continue;
		n = strlen(e->d_name) + 1;
		if (len + n + 1 > cap) {
			grown = realloc(list, cap * 2 + n);
			if (grown == NULL) {
				free(list);
				list = NULL;
				break;
			}
			list = grown;
			cap = cap * 2 + n;
		}
		memcpy(list + len, e->d_name, n);
		len += n;
	}
	closedir(d);
	if (list != NULL)
		list[len] = '\0';
	return list;
}

static bool in_list(const char *list, const char *name)
{
	for (; list != NULL && *list != '\0'; list += strlen(list) + 1)
		if (strcmp(list, name) == 0)
			return true;
	return false;
}

int conf_shm_new(const char *before, const char *now, char *buf,
		 size_t size)
{
	int n = 0;

	if (size > 0)
		buf[0] = '\0';
	for (; now != NULL && *now != '\0'; now += strlen(now) + 1) {
		if (in_list(before, now))
			continue;
		n++;
		if (strlen(buf) + strlen(now) + 3 < size)
			snprintf(buf + strlen(buf), size - strlen(buf), "%s%s",
				 n > 1 ? ", " : "", now);
	}
	return n;
}

/* Inodes of this process's sockets. */
static size_t socket_inodes(unsigned long *ino, size_t max)
{
	char path[300], link[64];
	struct dirent *e;
	DIR *d = opendir("/proc/self/fd");
	size_t n = 0;
	ssize_t len;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL && n < max) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof link - 1);
		if (len <= 0)
			continue;
		link[len] = '\0';
		if (sscanf(link, "socket:[%lu]", &ino[n]) == 1)
			n++;
	}
	closedir(d);
	return n;
}

static bool ipv4_ok(const char *hex, char *addr, size_t size)
{
	unsigned int v = 0, port = 0;
	unsigned char b[4];

	if (sscanf(hex, "%8X:%X", &v, &port) != 2)
		return true;
	memcpy(b, &v, 4);
	snprintf(addr, size, "%u.%u.%u.%u:%u", b[0], b[1], b[2], b[3], port);
	if (v == 0 && port == 0)
		return true; /* not bound */
	return b[0] == 127;
}

static bool ipv6_ok(const char *hex, char *addr, size_t size)
{
	unsigned int wd[4] = {0, 0, 0, 0}, port = 0;
	unsigned char b[16];
	char txt[64];

	if (sscanf(hex, "%8X%8X%8X%8X:%X", &wd[0], &wd[1], &wd[2], &wd[3],
		   &port) != 5)
		return true;
	memcpy(b, wd, 16);
	if (inet_ntop(AF_INET6, b, txt, sizeof txt) == NULL)
		snprintf(txt, sizeof txt, "?");
	snprintf(addr, size, "[%s]:%u", txt, port);
	if (wd[0] == 0 && wd[1] == 0 && wd[2] == 0 && wd[3] == 0)
		return port == 0;
	if (IN6_IS_ADDR_LOOPBACK((struct in6_addr *)b))
		return true;
	return IN6_IS_ADDR_V4MAPPED((struct in6_addr *)b) && b[12] == 127;
}

bool conf_sockets_loopback(char *why, size_t size, int *nsockets)
{
	static const char *const tables[] = {"tcp", "udp", "tcp6", "udp6"};
	unsigned long ino[512], inode;
	char path[64], line[512], local[128], addr[160];
	size_t n = socket_inodes(ino, 512), i, t;
	int found = 0;
	bool ok;
	FILE *f;

	for (t = 0; t < 4; t++) {
		snprintf(path, sizeof path, "/proc/self/net/%s", tables[t]);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		while (fgets(line, sizeof line, f) != NULL) {
			if (sscanf(line,
				   " %*s %127s %*s %*s %*s %*s %*s %*s %*s "
				   "%lu",
				   local, &inode) != 2)
				continue;
			for (i = 0; i < n; i++)
				if (ino[i] == inode)
					break;
			if (i == n)
				continue;
			found++;
			ok = t < 2 ? ipv4_ok(local, addr, sizeof addr)
				   : ipv6_ok(local, addr, sizeof addr);
			if (!ok) {
				snprintf(why, size, "%s socket bound to %s",
					 tables[t], addr);
				fclose(f);
				*nsockets = found;
				return false;
			}
		}
		fclose(f);
	}
	*nsockets = found;
	return true;
}
