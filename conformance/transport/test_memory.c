/*
 * test_memory.c - where buffers live: memory freed and allocated again at
 * the same address carries the new data (registration and mapping caches
 * are invalidated; case 32), and device memory for backends that declare
 * DPL_TRANSPORT_CAP_MEM_CUDA (case 39), reached through the CUDA runtime
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

Test(cuda, device_memory_message, .timeout = 80)
{
	struct conf_job job = {.size = 2, .fn = cuda_rank, .deadline_s = 60};
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
	conf_run(&job);
}
