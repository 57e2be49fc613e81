/*
 * test_memory.c - where buffers live: memory freed and allocated again at
 * the same address carries the new data (registration and mapping caches
 * are invalidated; case 32), and device memory for backends that declare
 * DPL_TRANSPORT_CAP_MEM_CUDA (case 39: two ranks, and a ring of four
 * mixing device and host memory over more allocations than a backend
 * keeps mapped), reached through the CUDA runtime
 * loaded at run time so that the battery needs no CUDA to build.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define REUSE_LEN (4u << 20)
#define REUSE_ROUNDS 8

/* Round r's buffer: malloc/free in the first half of the rounds (after
 * the first free the allocator hands the same block out again),
 * mmap/munmap at the previous mapping's address in the second half. */
static void reuse_rank(struct tj_rank *rk)
{
	void *rq = tj_reqs(rk, 1);
	unsigned char *buf, *last = NULL;
	unsigned r, same = 0;
	int rc;

	for (r = 0; r < REUSE_ROUNDS; r++) {
		bool mapped = r >= REUSE_ROUNDS / 2;

		if (r == REUSE_ROUNDS / 2)
			last = NULL;

		if (mapped) {
			/* the page the previous buffer started in */
			void *hint = (void *)((uintptr_t)last &
					      ~(uintptr_t)(sysconf(_SC_PAGESIZE) -
							   1));

			buf = mmap(hint, REUSE_LEN, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			TJ_CHECK(rk, buf != MAP_FAILED, "mmap of 4 MiB: %s",
				 strerror(errno));
		} else {
			buf = malloc(REUSE_LEN);
			TJ_CHECK(rk, buf != NULL, "out of memory");
		}
		same += last != NULL && ((uintptr_t)buf ^ (uintptr_t)last) <
						(uintptr_t)sysconf(_SC_PAGESIZE);
		last = buf;
		tj_step(rk, "round %u: %s buffer at %p", r,
			mapped ? "mmap" : "malloc", (void *)buf);
		if (rk->rank == 0) {
			tj_fill(buf, REUSE_LEN, 900 + r);
			conf_send(rk, rq, 1, 33, buf, REUSE_LEN, NULL);
		} else {
			memset(buf, 0, REUSE_LEN);
			conf_recv(rk, rq, 0, 33, buf, REUSE_LEN, NULL);
		}
		rc = tj_wait(rk, rq, 0, "a message in a reused buffer");
		TJ_CHECK(rk, rc == 0, "round %u: %s", r, dpl_err_name(rc));
		if (rk->rank == 1)
			TJ_CHECK(rk, tj_verify(buf, REUSE_LEN, 900 + r) <
					     0,
				 "round %u: a 4 MiB message into memory "
				 "reused at the same address differs (a "
				 "stale registration?)",
				 r);
		tj_barrier(rk);
		if (mapped)
			munmap(buf, REUSE_LEN);
		else
			free(buf);
	}
	tj_note(rk, "%u of %d rounds reused the previous buffer's page",
		same, REUSE_ROUNDS - 2);
}

Test(memory, buffer_reuse_after_free, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = reuse_rank, .deadline_s = 60};

	conf_run(&job);
}

/* ---------------------------------------------------------------- */

/* The few CUDA runtime calls the test needs, by name. */
struct cudart {
	void *lib;
	int (*get_device_count)(int *);
	int (*set_device)(int);
	int (*malloc_)(void **, size_t);
	int (*free_)(void *);
	int (*memcpy_)(void *, const void *, size_t, int);
	const char *(*error_string)(int);
};

#define CUDA_H2D 1
#define CUDA_D2H 2

static bool cudart_load(struct cudart *c, char *why, size_t size)
{
	static const char *const names[] = {"libcudart.so", "libcudart.so.13",
					    "libcudart.so.12"};
	void *sym[6];
	static const char *const syms[6] = {
		"cudaGetDeviceCount", "cudaSetDevice", "cudaMalloc",
		"cudaFree",           "cudaMemcpy",    "cudaGetErrorString"};
	size_t i;

	memset(c, 0, sizeof *c);
	for (i = 0; i < 3 && c->lib == NULL; i++)
		c->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (c->lib == NULL) {
		snprintf(why, size, "no CUDA runtime: %s", dlerror());
		return false;
	}
	for (i = 0; i < 6; i++) {
		sym[i] = dlsym(c->lib, syms[i]);
		if (sym[i] == NULL) {
			snprintf(why, size, "CUDA runtime lacks %s", syms[i]);
			return false;
		}
	}
	memcpy(&c->get_device_count, &sym[0], sizeof(void *));
	memcpy(&c->set_device, &sym[1], sizeof(void *));
	memcpy(&c->malloc_, &sym[2], sizeof(void *));
	memcpy(&c->free_, &sym[3], sizeof(void *));
	memcpy(&c->memcpy_, &sym[4], sizeof(void *));
	memcpy(&c->error_string, &sym[5], sizeof(void *));
	return true;
}

static void cuda_rank(struct tj_rank *rk)
{
	const size_t len = 8u << 20;
	struct cudart c;
	unsigned char *host = tj_alloc(rk, len);
	void *dev = NULL, *rq = tj_reqs(rk, 1);
	char why[256];
	int rc, n = 0;

	TJ_CHECK(rk, cudart_load(&c, why, sizeof why), "%s", why);
	TJ_CHECK(rk, c.get_device_count(&n) == 0 && n > 0,
		 "no CUDA device in the rank");
	TJ_CHECK(rk, c.set_device(rk->rank % n) == 0, "cudaSetDevice");
	rc = c.malloc_(&dev, len);
	TJ_CHECK(rk, rc == 0, "cudaMalloc: %s", c.error_string(rc));
	if (rk->rank == 0) {
		tj_fill(host, len, 39);
		TJ_CHECK(rk, c.memcpy_(dev, host, len, CUDA_H2D) == 0,
			 "cudaMemcpy to the device");
		rc = dpl_transport_isend(rk->t, rq, 1, 39, dev, len,
					 DPL_MEM_CUDA);
	} else {
		rc = dpl_transport_irecv(rk->t, rq, 0, 39, dev, len,
					 DPL_MEM_CUDA);
	}
	conf_check_code(rk, rc, "post of DPL_MEM_CUDA memory");
	TJ_CHECK(rk, rc == 0, "post of 8 MiB of device memory: %s (%s)",
		 dpl_err_name(rc), dpl_last_error());
	rc = tj_wait(rk, rq, 0, "a device-memory message");
	TJ_CHECK(rk, rc == 0, "device-memory message: %s",
		 dpl_err_name(rc));
	if (rk->rank == 1) {
		TJ_CHECK(rk, c.memcpy_(host, dev, len, CUDA_D2H) == 0,
			 "cudaMemcpy from the device");
		TJ_CHECK(rk, tj_verify(host, len, 39) < 0,
			 "8 MiB of device memory arrived different");
	}
	tj_barrier(rk);
	c.free_(dev);
}

/* Ask the CUDA runtime for devices in a child process, so that neither
 * the test process nor the ranks it forks inherit an initialised CUDA.
 * Returns the device count, or -(cudaGetDeviceCount's error). */
static int cuda_probe(void)
{
	struct cudart c;
	char why[256];
	int fd[2], n = 0, rc;
	pid_t pid;

	if (pipe(fd) != 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		close(fd[0]);
		rc = cudart_load(&c, why, sizeof why) ? c.get_device_count(&n)
						       : -1;
		n = rc == 0 ? n : -rc;
		if (write(fd[1], &n, sizeof n) != (ssize_t)sizeof n)
			_exit(1);
		_exit(0);
	}
	close(fd[1]);
	if (pid < 0 || read(fd[0], &n, sizeof n) != (ssize_t)sizeof n)
		n = -1;
	close(fd[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return n;
}

/* isend of memory kind `mem`, retried with progress while the backend
 * pushes back (DPL_EAGAIN), up to the job's deadline; 0 or the error. */
static int post_send(struct tj_rank *rk, void *req, uint32_t peer,
		     uint64_t tag, const void *buf, size_t len, uint32_t mem)
{
	struct tj_idle id = {0, 0};
	int rc;

	while ((rc = dpl_transport_isend(rk->t, req, peer, tag, buf, len,
					 mem)) == DPL_EAGAIN)
		tj_idle(rk, &id, "isend pushed back");
	return conf_check_code(rk, rc, "isend");
}

/*
 * Four ranks in a ring, each sending to the next and receiving from the
 * one before, RING_ROUNDS rounds: round k sends from allocation k of
 * RING_ALLOCS (more than a transport would keep mapped, so that mappings
 * are dropped and made again), at an offset in it, 8 bytes, 64 KiB or
 * 1 MiB; into device memory on even rounds and host memory on odd ones;
 * every fifth round the send is from host memory into a device receive.
 */
#define RING_ALLOCS 40
#define RING_ROUNDS 48
#define RING_ALLOC_LEN (1u << 21)
#define RING_OFFSET 4096u

static size_t ring_len(unsigned k)
{
	static const size_t lens[3] = {8, 64u << 10, 1u << 20};

	return lens[k % 3];
}

static void cuda_ring_rank(struct tj_rank *rk)
{
	struct cudart c;
	unsigned char *host = tj_alloc(rk, RING_ALLOC_LEN);
	unsigned char *hrecv = tj_alloc(rk, RING_ALLOC_LEN);
	void *dev[RING_ALLOCS] = {0}, *drecv = NULL, *rq = tj_reqs(rk, 2);
	uint32_t next = (rk->rank + 1) % rk->size;
	uint32_t prev = (rk->rank + rk->size - 1) % rk->size;
	char why[256];
	unsigned k;
	int rc, n = 0;

	TJ_CHECK(rk, cudart_load(&c, why, sizeof why), "%s", why);
	TJ_CHECK(rk, c.get_device_count(&n) == 0 && n > 0,
		 "no CUDA device in the rank");
	TJ_CHECK(rk, c.set_device((int)rk->rank % n) == 0, "cudaSetDevice");
	for (k = 0; k < RING_ALLOCS; k++) {
		rc = c.malloc_(&dev[k], RING_ALLOC_LEN);
		TJ_CHECK(rk, rc == 0, "cudaMalloc %u: %s", k,
			 c.error_string(rc));
	}
	rc = c.malloc_(&drecv, RING_ALLOC_LEN);
	TJ_CHECK(rk, rc == 0, "cudaMalloc: %s", c.error_string(rc));
	for (k = 0; k < RING_ROUNDS; k++) {
		size_t len = ring_len(k);
		bool host_send = k % 5 == 4, dev_recv = k % 2 == 0 || host_send;
		unsigned char *src = (unsigned char *)dev[k % RING_ALLOCS] +
				     RING_OFFSET;
		void *dst = dev_recv ? drecv : hrecv;
		uint32_t seed = 4000 + 64 * k + rk->rank;

		tj_step(rk, "round %u: %zu bytes, %s to %s", k, len,
			host_send ? "host" : "device",
			dev_recv ? "device" : "host");
		tj_fill(host, len, seed);
		if (!host_send)
			TJ_CHECK(rk, c.memcpy_(src, host, len, CUDA_H2D) == 0,
				 "cudaMemcpy to the device");
		rc = dpl_transport_irecv(rk->t, tj_req(rk, rq, 0), prev, k,
					 dst, len, dev_recv ? DPL_MEM_CUDA
							    : DPL_MEM_HOST);
		TJ_CHECK(rk, rc == 0, "round %u: irecv: %s (%s)", k,
			 dpl_err_name(rc), dpl_last_error());
		rc = post_send(rk, tj_req(rk, rq, 1), next, k,
				    host_send ? (void *)host : (void *)src,
				    len, host_send ? DPL_MEM_HOST
						   : DPL_MEM_CUDA);
		TJ_CHECK(rk, rc == 0, "round %u: isend: %s (%s)", k,
			 dpl_err_name(rc), dpl_last_error());
		rc = tj_wait(rk, tj_req(rk, rq, 0), 0, "a ring receive");
		TJ_CHECK(rk, rc == 0, "round %u: receive: %s", k,
			 dpl_err_name(rc));
		rc = tj_wait(rk, tj_req(rk, rq, 1), 0, "a ring send");
		TJ_CHECK(rk, rc == 0, "round %u: send: %s", k,
			 dpl_err_name(rc));
		if (dev_recv)
			TJ_CHECK(rk, c.memcpy_(hrecv, drecv, len, CUDA_D2H) ==
					     0,
				 "cudaMemcpy from the device");
		TJ_CHECK(rk, tj_verify(hrecv, len, 4000 + 64 * k + prev) < 0,
			 "round %u: %zu bytes from rank %u (%s to %s) "
			 "arrived different", k, len, prev,
			 host_send ? "host" : "device",
			 dev_recv ? "device" : "host");
	}
	tj_barrier(rk);
	for (k = 0; k < RING_ALLOCS; k++)
		c.free_(dev[k]);
	c.free_(drecv);
}

/* Skip unless the backend takes device memory and a GPU is there. */
static void require_cuda(void)
{
	struct cudart c;
	char why[256];
	int n;

	CONF_REQUIRE_CAP(DPL_TRANSPORT_CAP_MEM_CUDA,
			 "device memory is not accepted");
	if (!cudart_load(&c, why, sizeof why))
		cr_skip_test("%s", why);
	n = cuda_probe();
	/* 35: no driver; 100: no device */
	if (n <= 0)
		cr_skip_test("no CUDA device (cudaGetDeviceCount: %d %s)", -n,
			     n < 0 ? c.error_string(-n) : "0 devices");
}

Test(cuda, device_memory_message, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = cuda_rank, .deadline_s = 60};

	require_cuda();
	conf_run(&job);
}

Test(cuda, device_memory_ring_of_four, .timeout = 120)
{
	struct conf_job job = {.size = 4, .fn = cuda_ring_rank,
			       .deadline_s = 100};

	require_cuda();
	conf_run(&job);
}
