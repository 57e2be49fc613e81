/*
 * ofi_shm.c - the shared-memory files of libfabric's shm provider.
 *
 * The shm provider (1.17) names each endpoint's region after its process
 * and user, "<pid>:<uid>:<index>", and creates /dev/shm/<that name>. A
 * process that exits without closing its endpoint (a crash, SIGKILL,
 * _exit) leaves the file behind, 16 MiB each. dpl removes the files of
 * its own user whose process is gone before it opens an shm endpoint,
 * and its own file when it closes one.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "ofi_internal.h"

/* Parse "<pid>:<uid>:<index>" (decimal fields, nothing else). */
static bool parse_name(const char *s, unsigned long f[3])
{
	int i;

	for (i = 0; i < 3; i++) {
		if (*s < '0' || *s > '9')
			return false;
		f[i] = 0;
		while (*s >= '0' && *s <= '9') {
			if (f[i] > 0xffffffffUL / 10)
				return false;
			f[i] = f[i] * 10 + (unsigned long)(*s++ - '0');
		}
		if (i < 2 && *s++ != ':')
			return false;
	}
	return *s == '\0';
}

int dpl__ofi_shm_sweep(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	struct stat st;
	unsigned long f[3];
	uid_t uid = getuid();
	int removed = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		if (!parse_name(e->d_name, f) || f[1] != (unsigned long)uid)
			continue;
		if (f[0] == 0 || f[0] > 0x7fffffffUL ||
		    (pid_t)f[0] == getpid())
			continue;
		if (kill((pid_t)f[0], 0) == 0 || errno != ESRCH)
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(st.st_mode) || st.st_uid != uid)
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) == 0)
			removed++;
	}
	closedir(d);
	return removed;
}

void dpl__ofi_shm_unlink(const char *name)
{
	char path[300];
	unsigned long f[3];

	if (name == NULL || !parse_name(name, f))
		return;
	snprintf(path, sizeof path, "/dev/shm/%s", name);
	(void)unlink(path);
}
