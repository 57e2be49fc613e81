/*
 * transport_ofi_probe.h - what the two files of bench_transport_ofi_probe
 * share: its options, the raw libfabric endpoint, and the three
 * ping-pongs (transport_ofi_probe_pingpong.c) that the driver
 * (transport_ofi_probe.c) runs and reports.
 */
#ifndef DPL_TRANSPORT_OFI_PROBE_H
#define DPL_TRANSPORT_OFI_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <dpl/backend.h>
#include <dpl/transport_ofi.h>

struct opts {
	const char *provider;
	const char *sizes;      /* comma-separated list, or NULL */
	const char *options;
	uint64_t min, max;
	long iters;
	uint64_t budget;
	int rounds;
	bool fi;
	const char *json;
};

/* A raw libfabric endpoint (the reference ping-pong). */
struct raw {
	struct fi_info *fi;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	fi_addr_t peer;
	struct fi_context2 sc, rc;
	char name[256];
	size_t namelen;
};

static inline double now_us(void)
{
	return (double)dpl_clock_ns() / 1e3;
}

static inline size_t round_page(size_t n)
{
	return (n + 4095) / 4096 * 4096;
}

static inline bool is_shm(const char *prov)
{
	return strncmp(prov, "shm", 3) == 0;
}

static inline int xread(int fd, void *buf, size_t n)
{
	return read(fd, buf, n) == (ssize_t)n ? 0 : -1;
}

static inline int xwrite(int fd, const void *buf, size_t n)
{
	return write(fd, buf, n) == (ssize_t)n ? 0 : -1;
}

/* A loopback TCP port free a moment ago (rank 0's bootstrap root). */
int probe_free_port(void);

/* dpl: the ping-pong through the checked layer; rank 0 fills
 * rtt[0..iters) with round trips in us (rank 1 passes NULL). */
int probe_dpl_pingpong(dpl_transport *t, uint32_t rank, void *sq, void *rq,
		       char *sbuf, char *rbuf, size_t len, long iters,
		       double *rtt);
dpl_transport *probe_dpl_open(const struct opts *o, uint32_t rank,
			      const char *root);

/* Raw libfabric: both ranks open an endpoint and swap names over the
 * pipes in and out; then the same ping-pong as dpl's. */
int probe_raw_setup(struct raw *r, const char *prov, int in, int out);
int probe_raw_pingpong(struct raw *r, uint32_t rank, char *sbuf, char *rbuf,
		       size_t len, long iters, double *rtt);
void probe_raw_close(struct raw *r);

/* fi_pingpong with the same provider, size and iterations: its average
 * one-way us and MB/s. 0, or -1 when it did not run. */
int probe_fi_pingpong(const struct opts *o, uint64_t size, long iters,
		      double *us, double *mbs);

#endif /* DPL_TRANSPORT_OFI_PROBE_H */
