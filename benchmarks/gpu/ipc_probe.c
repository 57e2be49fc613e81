/*
 * ipc_probe.c - does this platform allow CUDA IPC between two processes
 * on one GPU? The parent allocates 1 MiB on GPU 0, fills it and exports
 * it (cudaIpcGetMemHandle); a child forked before any CUDA call opens it
 * (cudaIpcOpenMemHandle) and reads it back. Prints one line:
 *   cuda ipc: allowed
 *   cuda ipc: refused: <call>: <CUDA error>
 * and exits 0 (allowed), 1 (refused) or 2 (no GPU or the probe failed).
 * Every wait is bounded (30 s alarm).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define BYTES (1u << 20)
#define FILL 0x5a

static int child(int rd, int wr)
{
	cudaIpcMemHandle_t h;
	unsigned char got[16];
	void *p = NULL;
	char line[200];
	cudaError_t e;
	size_t i;

	if (read(rd, &h, sizeof h) != (ssize_t)sizeof h)
		return 2;
	if ((e = cudaSetDevice(0)) != cudaSuccess)
		snprintf(line, sizeof line, "refused: cudaSetDevice: %s",
			 cudaGetErrorString(e));
	else if ((e = cudaIpcOpenMemHandle(&p, h,
					   cudaIpcMemLazyEnablePeerAccess)) !=
		 cudaSuccess)
		snprintf(line, sizeof line, "refused: cudaIpcOpenMemHandle: %s",
			 cudaGetErrorString(e));
	else if ((e = cudaMemcpy(got, p, sizeof got,
				 cudaMemcpyDeviceToHost)) != cudaSuccess)
		snprintf(line, sizeof line, "refused: cudaMemcpy from the "
			 "opened memory: %s", cudaGetErrorString(e));
	else {
		for (i = 0; i < sizeof got && got[i] == FILL; i++)
			;
		snprintf(line, sizeof line, i == sizeof got ? "allowed"
			 : "refused: the opened memory does not hold the "
			   "exported bytes");
	}
	if (p != NULL)
		cudaIpcCloseMemHandle(p);
	if (write(wr, line, strlen(line) + 1) < 0)
		return 2;
	return strcmp(line, "allowed") == 0 ? 0 : 1;
}

int main(void)
{
	int down[2], up[2], st;
	cudaIpcMemHandle_t h;
	char line[200] = "";
	void *p = NULL;
	cudaError_t e;
	ssize_t n;
	pid_t pid;

	alarm(30);
	if (pipe(down) != 0 || pipe(up) != 0)
		return 2;
	/* Fork before the parent touches CUDA: a child of a CUDA process
	 * cannot use CUDA. */
	if ((pid = fork()) < 0)
		return 2;
	if (pid == 0) {
		alarm(30);
		_exit(child(down[0], up[1]));
	}
	if ((e = cudaSetDevice(0)) != cudaSuccess ||
	    (e = cudaMalloc(&p, BYTES)) != cudaSuccess ||
	    (e = cudaMemset(p, FILL, BYTES)) != cudaSuccess ||
	    (e = cudaDeviceSynchronize()) != cudaSuccess) {
		printf("cuda ipc: no GPU to probe: %s\n", cudaGetErrorString(e));
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		return 2;
	}
	if ((e = cudaIpcGetMemHandle(&h, p)) != cudaSuccess) {
		printf("cuda ipc: refused: cudaIpcGetMemHandle: %s\n",
		       cudaGetErrorString(e));
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		return 1;
	}
	if (write(down[1], &h, sizeof h) != (ssize_t)sizeof h)
		return 2;
	n = read(up[0], line, sizeof line - 1);
	waitpid(pid, &st, 0);
	cudaFree(p);
	if (n <= 0) {
		printf("cuda ipc: the probe's child died (status %d)\n", st);
		return 2;
	}
	line[n] = '\0';
	printf("cuda ipc: %s\n", line);
	return strcmp(line, "allowed") == 0 ? 0 : 1;
}
