/*
 * fake_seam.c - the test seam of fake_seam.h.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <dpl/backend.h>

#include "fake_seam.h"

#define NALLOC 16
#define QUERIES 3 /* queries before an event reports done */

struct alloc {
	unsigned char *base;
	size_t size;
	int fd;
	uint64_t id;
};

struct handle {
	int32_t pid, fd;
	uint64_t size, id;
};

/* A queued copy: done only when an event after it reports done or the
 * stream is synchronised, so that a transport that completes a receive
 * before its copy's event shows wrong bytes. */
struct copy {
	void *dst;
	const void *src;
	size_t len;
};

#define NQUEUE 256

struct event {
	int left;    /* queries before it reports done; -1: not recorded */
	size_t upto; /* copies queued before it was recorded (in all) */
};

static struct alloc allocs[NALLOC];
static uint64_t next_id = 1;
static int live, total, refuse, handles;
static struct event events[DPL__CUDAIPC_EVENTS];
static struct copy queue[NQUEUE];
static size_t queued, done; /* copies queued and carried out, in all */
static int stream; /* the fake stream's storage */

/* Carry out the queued copies up to number `upto` (in all). */
static void run_until(size_t upto)
{
	while (done < upto && done < queued) {
		struct copy *q = &queue[done % NQUEUE];

		memcpy(q->dst, q->src, q->len);
		done++;
	}
}

static size_t mapped(size_t bytes)
{
	return bytes ? bytes : 1;
}

void *fake_dev_alloc(size_t bytes)
{
	unsigned i;

	for (i = 0; i < NALLOC; i++) {
		struct alloc *a = &allocs[i];
		void *m;

		if (a->base != NULL)
			continue;
		a->fd = memfd_create("fake-dev", MFD_CLOEXEC);
		if (a->fd < 0)
			return NULL;
		if (ftruncate(a->fd, (off_t)mapped(bytes)) != 0) {
			close(a->fd);
			return NULL;
		}
		m = mmap(NULL, mapped(bytes), PROT_READ | PROT_WRITE,
			 MAP_SHARED, a->fd, 0);
		if (m == MAP_FAILED) {
			close(a->fd);
			return NULL;
		}
		a->base = m;
		a->size = bytes;
		a->id = next_id++;
		return m;
	}
	return NULL;
}

void fake_dev_free(void *p)
{
	unsigned i;

	for (i = 0; i < NALLOC; i++)
		if (allocs[i].base != NULL && allocs[i].base == p) {
			munmap(p, mapped(allocs[i].size));
			close(allocs[i].fd);
			allocs[i].base = NULL;
		}
}

int fake_live_opens(void)
{
	return live;
}

int fake_total_opens(void)
{
	return total;
}

static int f_probe(void)
{
	return 0;
}

static int f_setup(void **s, void **ev, unsigned n)
{
	unsigned i;

	for (i = 0; i < n && i < DPL__CUDAIPC_EVENTS; i++) {
		events[i].left = -1;
		ev[i] = &events[i];
	}
	*s = &stream;
	return 0;
}

static void f_teardown(void *s, void **ev, unsigned n)
{
	(void)s;
	(void)ev;
	(void)n;
}

static int f_locate(const void *ptr, struct dpl__cudaipc_export *out)
{
	const unsigned char *b = ptr;
	unsigned i;

	for (i = 0; i < NALLOC; i++) {
		struct alloc *a = &allocs[i];

		if (a->base == NULL || b < a->base ||
		    b > a->base + a->size)
			continue;
		out->offset = (uint64_t)(b - a->base);
		out->size = a->size;
		out->id = a->id;
		return 0;
	}
	return dpl_set_error(DPL_EINVAL, "fake seam: not fake device memory");
}

static int f_handle(const void *base, struct dpl__cudaipc_export *out)
{
	struct handle h;
	unsigned i;

	for (i = 0; i < NALLOC; i++) {
		struct alloc *a = &allocs[i];

		if (a->base == NULL || a->base != base)
			continue;
		h.pid = (int32_t)getpid();
		h.fd = a->fd;
		h.size = a->size;
		h.id = a->id;
		memcpy(out->handle, &h, sizeof h);
		handles++;
		return 0;
	}
	return dpl_set_error(DPL_EINVAL, "fake seam: no allocation at %p",
			     base);
}

int fake_handles(void)
{
	return handles;
}

void fake_refuse_opens(int on)
{
	refuse = on;
}

static int f_open(const struct dpl__cudaipc_export *x, void **base)
{
	struct handle h;
	char path[64];
	void *m;
	int fd;

	if (refuse)
		return dpl_set_error(DPL_EIO, "fake seam: open refused");
	memcpy(&h, x->handle, sizeof h);
	snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return dpl_set_error(DPL_EIO, "fake seam: open %s", path);
	m = mmap(NULL, mapped(h.size), PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return dpl_set_error(DPL_EIO, "fake seam: mmap %s", path);
	*base = m;
	live++;
	total++;
	return 0;
}

static void f_close(void *base, uint64_t size)
{
	munmap(base, mapped(size));
	live--;
}

static int f_copy_async(void *s, void *dst, const void *src, size_t len,
			enum dpl__cudaipc_copy kind)
{
	struct copy *q;

	(void)s;
	(void)kind;
	if (queued - done == NQUEUE) /* full: the oldest runs first */
		run_until(done + 1);
	q = &queue[queued % NQUEUE];
	q->dst = dst;
	q->src = src;
	q->len = len;
	queued++;
	return 0;
}

static int f_event_record(void *s, void *ev)
{
	struct event *e = ev;

	(void)s;
	e->left = QUERIES;
	e->upto = queued;
	return 0;
}

static int f_event_query(void *ev)
{
	struct event *e = ev;

	if (e->left > 0) {
		e->left--;
		return 0;
	}
	run_until(e->upto);
	return 1;
}

static int f_stream_sync(void *s)
{
	unsigned i;

	(void)s;
	run_until(queued);
	for (i = 0; i < DPL__CUDAIPC_EVENTS; i++)
		if (events[i].left > 0)
			events[i].left = 0;
	return 0;
}

static int f_probe_alloc(size_t bytes, void **buf)
{
	*buf = fake_dev_alloc(bytes);
	return *buf ? 0 : dpl_set_error(DPL_ENOMEM, "fake seam: full");
}

const struct dpl__cudaipc_seam fake_seam = {
	.probe = f_probe,
	.setup = f_setup,
	.teardown = f_teardown,
	.locate = f_locate,
	.handle = f_handle,
	.open = f_open,
	.close = f_close,
	.copy_async = f_copy_async,
	.event_record = f_event_record,
	.event_query = f_event_query,
	.stream_sync = f_stream_sync,
	.probe_alloc = f_probe_alloc,
	.probe_free = fake_dev_free,
};

static int fake_init(void *vctx, const struct dpl_transport_params *p)
{
	return dpl__cudaipc_init_with(&fake_seam, vctx, p);
}

const struct dpl_transport_ops fake_cudaipc = {
	DPL__CUDAIPC_TABLE("cudaipc-fake", fake_init),
};
