/*
 * shm_segment.c - the shared-memory transport's segments: names, layout,
 * creation, mapping, and the removal of segments left by crashed jobs.
 *
 * A segment's name carries the job id, the owner's rank and the owner's
 * pid ("/dpl-shm-<jobid>-r<rank>-p<pid>"), so that a later job can tell
 * that its owner is gone and remove it without opening it. The ranks of
 * a running job unlink their segments as soon as every rank has mapped
 * every other one, so a file only lingers when a rank dies during init;
 * the next init on the host removes it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dpl/common.h>

#include "shm_internal.h"

#define SHM_DIR "/dev/shm"

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

static size_t ctl_area(uint32_t world)
{
	return round_up((size_t)(world - 1) * DPL__SHM_CTL_BYTES,
			DPL__SHM_PAGE);
}

size_t dpl__shm_seg_bytes(uint32_t world, uint64_t ring)
{
	return DPL__SHM_HDR_BYTES + ctl_area(world) +
	       (size_t)(world - 1) * (size_t)ring;
}

struct dpl__shm_ctl *dpl__shm_ctl(void *seg, uint32_t k)
{
	return (struct dpl__shm_ctl *)((unsigned char *)seg +
				       DPL__SHM_HDR_BYTES +
				       (size_t)k * DPL__SHM_CTL_BYTES);
}

unsigned char *dpl__shm_ring(void *seg, uint32_t world, uint64_t ring,
			     uint32_t k)
{
	return (unsigned char *)seg + DPL__SHM_HDR_BYTES + ctl_area(world) +
	       (size_t)k * (size_t)ring;
}

void dpl__shm_name(char *buf, uint64_t jobid, uint32_t rank, int pid)
{
	snprintf(buf, DPL__SHM_NAME_MAX, "/" DPL__SHM_PREFIX "%016" PRIx64
		 "-r%" PRIu32 "-p%d", jobid, rank, pid);
}

int dpl__shm_create(const char *name, size_t bytes, void **base)
{
	void *p;
	int fd, rc;

	fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return dpl_set_error(errno == EEXIST ? DPL_EBUSY : DPL_EIO,
				     "shm: cannot create segment %s: %s",
				     name, strerror(errno));
	/* Reserve the pages now: a full /dev/shm is an error here, not a
	 * SIGBUS in the middle of a send. */
	rc = posix_fallocate(fd, 0, (off_t)bytes);
	if (rc != 0) {
		close(fd);
		shm_unlink(name);
		return dpl_set_error(rc == ENOSPC ? DPL_ENOMEM : DPL_EIO,
				     "shm: cannot reserve %zu bytes for "
				     "segment %s in " SHM_DIR ": %s", bytes,
				     name, strerror(rc));
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	rc = errno;
	close(fd);
	if (p == MAP_FAILED) {
		shm_unlink(name);
		return dpl_set_error(DPL_ENOMEM, "shm: cannot map segment %s "
				     "(%zu bytes): %s", name, bytes,
				     strerror(rc));
	}
	*base = p;
	return 0;
}

int dpl__shm_map(const char *name, size_t bytes, void **base)
{
	struct stat st;
	void *p;
	int fd, err;

	fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return dpl_set_error(errno == ENOENT ? DPL_ENOENT : DPL_EIO,
				     "shm: cannot open segment %s: %s (all "
				     "ranks must share " SHM_DIR ")", name,
				     strerror(errno));
	if (fstat(fd, &st) != 0 || (size_t)st.st_size != bytes) {
		close(fd);
		return dpl_set_error(DPL_EIO, "shm: segment %s has %lld bytes,"
				     " expected %zu", name,
				     (long long)st.st_size, bytes);
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	err = errno;
	close(fd);
	if (p == MAP_FAILED)
		return dpl_set_error(DPL_ENOMEM, "shm: cannot map segment %s:"
				     " %s", name, strerror(err));
	*base = p;
	return 0;
}

int dpl__shm_pid_alive(int pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

/* The pid in "dpl-shm-<16 hex>-r<rank>-p<pid>", or -1. */
static int name_pid(const char *n)
{
	size_t pl = strlen(DPL__SHM_PREFIX), i;
	long pid = 0;
	const char *p;

	if (strncmp(n, DPL__SHM_PREFIX, pl) != 0)
		return -1;
	for (i = 0; i < 16; i++)
		if (!((n[pl + i] >= '0' && n[pl + i] <= '9') ||
		      (n[pl + i] >= 'a' && n[pl + i] <= 'f')))
			return -1;
	p = n + pl + 16;
	if (p[0] != '-' || p[1] != 'r')
		return -1;
	for (p += 2; *p >= '0' && *p <= '9'; p++)
		;
	if (p[0] != '-' || p[1] != 'p' || p[2] == '\0')
		return -1;
	for (p += 2; *p != '\0'; p++) {
		if (*p < '0' || *p > '9' || pid > 99999999)
			return -1;
		pid = pid * 10 + (*p - '0');
	}
	return pid > 0 ? (int)pid : -1;
}

int dpl__shm_sweep(void)
{
	char path[sizeof(((struct dirent *)0)->d_name) + 2];
	struct dirent *e;
	DIR *d;
	int n = 0;

	d = opendir(SHM_DIR);
	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		int pid = name_pid(e->d_name);

		if (pid < 0 || dpl__shm_pid_alive(pid))
			continue;
		path[0] = '/';
		memcpy(path + 1, e->d_name, strlen(e->d_name) + 1);
		n += shm_unlink(path) == 0;
	}
	closedir(d);
	return n;
}
