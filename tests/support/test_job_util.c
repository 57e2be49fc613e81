/*
 * test_job_util.c - the parts of test_job that need no job (see
 * test_job.h): sleeping, data patterns, and the counts of this
 * process's state (descriptors, threads, /dev/shm entries, sockets).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "test_job_internal.h"

void tj__sleep_us(unsigned us)
{
	struct timespec ts = {(time_t)(us / 1000000),
			      (long)(us % 1000000) * 1000L};

	nanosleep(&ts, NULL);
}

void tj_sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ------------------------------------------------------------------ */
/* Data patterns                                                       */

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t word_at(uint64_t seed, size_t w)
{
	return mix(seed * 0x100000001b3ull ^ (uint64_t)w);
}

void tj_fill(void *buf, size_t len, uint64_t seed)
{
	unsigned char *b = buf;
	size_t i, w;
	uint64_t v;

	for (w = 0; w * 8 < len; w++) {
		v = word_at(seed, w);
		for (i = 0; i < 8 && w * 8 + i < len; i++)
			b[w * 8 + i] = (unsigned char)(v >> (8 * i));
	}
}

long long tj_verify(const void *buf, size_t len, uint64_t seed)
{
	const unsigned char *b = buf;
	size_t i, w;
	uint64_t v;

	for (w = 0; w * 8 < len; w++) {
		v = word_at(seed, w);
		for (i = 0; i < 8 && w * 8 + i < len; i++)
			if (b[w * 8 + i] != (unsigned char)(v >> (8 * i)))
				return (long long)(w * 8 + i);
	}
	return -1;
}

/* ------------------------------------------------------------------ */
/* Process state                                                       */

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

int tj_count_fds(void)
{
	int n = count_dir("/proc/self/fd", NULL);

	return n < 0 ? n : n - 1; /* the directory's own descriptor */
}

int tj_count_threads(void)
{
	return count_dir("/proc/self/task", NULL);
}

int tj_count_shm(const char *glob)
{
	return count_dir("/dev/shm", glob);
}

char *tj_shm_snapshot(const char *glob)
{
	size_t cap = 4096, len = 0, n;
	struct dirent *e;
	char *list, *grown;
	DIR *d;

	d = opendir("/dev/shm");
	if (d == NULL)
		return NULL;
	list = malloc(cap);
	while (list != NULL && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 ||
		    strcmp(e->d_name, "..") == 0 ||
		    (glob != NULL && fnmatch(glob, e->d_name, 0) != 0))
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

int tj_shm_new(const char *before, const char *now, char *buf, size_t size)
{
	int n = 0;

	if (size > 0)
		buf[0] = '\0';
	for (; now != NULL && *now != '\0'; now += strlen(now) + 1) {
		if (in_list(before, now))
			continue;
		n++;
		if (size > 0 && strlen(buf) + strlen(now) + 3 < size)
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

bool tj_sockets_loopback(char *why, size_t size, int *nsockets)
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
