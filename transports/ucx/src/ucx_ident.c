/*
 * ucx_ident.c - process identities and liveness checks through /proc.
 *
 * Two ranks on one host learn each other's pid, start time, boot id and
 * pid namespace at init. A rank whose pid has vanished, turned into a
 * zombie or been taken by a younger process is dead, whatever UCX's lanes
 * (shared memory has no failure reports of its own) say. This is how a
 * SIGKILLed peer is found within one liveness sweep.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dpl/common.h>

#include "ucx_internal.h"

/* Read a small /proc file into buf (NUL-terminated). Returns the length
 * or -errno. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
	ssize_t n, got = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while ((size_t)got < size - 1) {
		n = read(fd, buf + got, size - 1 - (size_t)got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			n = -errno;
			close(fd);
			return n;
		}
		if (n == 0)
			break;
		got += n;
	}
	close(fd);
	buf[got] = '\0';
	return got;
}

/*
 * Parse the state letter and the start time (field 22) out of a
 * /proc/PID/stat line. The command name (field 2) sits in parentheses and
 * may itself hold spaces and parentheses, so fields are counted after the
 * last ')'. Returns 0 or -1 for a line that does not parse.
 */
static int parse_stat(const char *line, char *state, uint64_t *start)
{
	const char *p = strrchr(line, ')');
	int field;

	if (p == NULL || p[1] != ' ' || p[2] == '\0')
		return -1;
	*state = p[2];
	p += 3; /* now at " ppid ..." (field 4) */
	for (field = 4; field <= 22; field++) {
		char *end;
		unsigned long long v;

		while (*p == ' ')
			p++;
		if (*p == '\0')
			return -1;
		errno = 0;
		v = strtoull(p, &end, 10);
		if (end == p)
			return -1;
		if (field == 22) {
			if (errno != 0)
				return -1;
			*start = v;
			return 0;
		}
		p = end;
		/* Fields 4..21 may be negative (e.g. priority); skip the
		 * rest of the token whatever it holds. */
		while (*p != ' ' && *p != '\0')
			p++;
	}
	return -1;
}

int dpl__ucx_ident_self(struct dpl__ucx_ident *id)
{
	char line[1024];
	struct stat st;
	char state;
	ssize_t n;

	memset(id, 0, sizeof *id);
	id->pid = (uint32_t)getpid();
	n = read_small("/proc/sys/kernel/random/boot_id", id->boot_id,
		       sizeof id->boot_id);
	if (n <= 0) {
		int err = n < 0 ? (int)-n : EIO;

		id->boot_id[0] = '\0';
		return dpl_set_error(DPL_EIO, "ucx: cannot read the boot id "
				     "(%s)", strerror(err));
	}
	while (n > 0 && (id->boot_id[n - 1] == '\n' ||
			 id->boot_id[n - 1] == ' '))
		id->boot_id[--n] = '\0';
	if (stat("/proc/self/ns/pid", &st) != 0) {
		id->boot_id[0] = '\0';
		return dpl_set_error(DPL_EIO, "ucx: cannot stat "
				     "/proc/self/ns/pid (%s)",
				     strerror(errno));
	}
	id->pidns_dev = (uint64_t)st.st_dev;
	id->pidns_ino = (uint64_t)st.st_ino;
	n = read_small("/proc/self/stat", line, sizeof line);
	if (n <= 0 || parse_stat(line, &state, &id->start) != 0) {
		id->boot_id[0] = '\0';
		return dpl_set_error(DPL_EIO, "ucx: cannot parse "
				     "/proc/self/stat");
	}
	return 0;
}

void dpl__ucx_ident_pack(const struct dpl__ucx_ident *id, unsigned char *out)
{
	memcpy(out, id->boot_id, DPL__UCX_BOOT_ID_LEN);
	out += DPL__UCX_BOOT_ID_LEN;
	dpl_put_u64(out, id->pidns_dev);
	dpl_put_u64(out + 8, id->pidns_ino);
	dpl_put_u64(out + 16, id->start);
	dpl_put_u64(out + 24, id->pid);
}

void dpl__ucx_ident_unpack(const unsigned char *in, struct dpl__ucx_ident *id)
{
	memcpy(id->boot_id, in, DPL__UCX_BOOT_ID_LEN);
	id->boot_id[DPL__UCX_BOOT_ID_LEN - 1] = '\0';
	in += DPL__UCX_BOOT_ID_LEN;
	id->pidns_dev = dpl_get_u64(in);
	id->pidns_ino = dpl_get_u64(in + 8);
	id->start = dpl_get_u64(in + 16);
	id->pid = (uint32_t)dpl_get_u64(in + 24);
}

bool dpl__ucx_same_pids(const struct dpl__ucx_ident *a,
			const struct dpl__ucx_ident *b)
{
	return a->boot_id[0] != '\0' && b->boot_id[0] != '\0' &&
	       strcmp(a->boot_id, b->boot_id) == 0 &&
	       a->pidns_dev == b->pidns_dev && a->pidns_ino == b->pidns_ino &&
	       b->pid != 0;
}

int dpl__ucx_proc_state(const struct dpl__ucx_ident *id)
{
	char path[40], line[1024];
	uint64_t start;
	char state;
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%u/stat", id->pid);
	n = read_small(path, line, sizeof line);
	if (n == -ENOENT || n == -ESRCH)
		return 0;
	if (n <= 0 || parse_stat(line, &state, &start) != 0)
		return -1;
	if (state == 'Z' || state == 'X' || state == 'x' || start != id->start)
		return 0;
	return 1;
}
