/*
 * transport_ofi_probe_pingpong.c - the three ping-pongs of
 * bench_transport_ofi_probe (see transport_ofi_probe.c): through dpl's
 * checked transport layer, written directly against libfabric, and
 * libfabric's own fi_pingpong.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <dpl/bootstrap.h>

#include "transport_ofi_probe.h"

/* A loopback TCP port free a moment ago. */
int probe_free_port(void)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof sin;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
		port = ntohs(sin.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}


/* ---- dpl ------------------------------------------------------------ */

static int finish(dpl_transport *t, void *req)
{
	int rc;

	while ((rc = dpl_transport_test(t, req)) == DPL_EAGAIN)
		if ((rc = dpl_transport_progress(t)) < 0)
			return rc;
	return rc;
}

static int post(dpl_transport *t, void *req, bool send, uint32_t peer,
		uint64_t tag, void *buf, size_t len)
{
	int rc;

	do {
		rc = send ? dpl_transport_isend(t, req, peer, tag, buf, len,
						DPL_MEM_HOST)
			  : dpl_transport_irecv(t, req, peer, tag, buf, len,
						DPL_MEM_HOST);
		if (rc == DPL_EAGAIN)
			dpl_transport_progress(t);
	} while (rc == DPL_EAGAIN);
	return rc;
}

/* One series; rank 0 fills rtt[0..iters) in us. */
int probe_dpl_pingpong(dpl_transport *t, uint32_t rank, void *sq, void *rq,
		       char *sbuf, char *rbuf, size_t len, long iters,
		       double *rtt)
{
	uint64_t tag = 1000 + (uint64_t)len % 100000;
	long warm = iters / 10 < 100 ? iters / 10 : 100, i;
	double t0;
	int rc;

	for (i = -warm; i < iters; i++) {
		if (rank == 0) {
			t0 = now_us();
			if ((rc = post(t, rq, false, 1, tag, rbuf, len)) != 0 ||
			    (rc = post(t, sq, true, 1, tag, sbuf, len)) != 0 ||
			    (rc = finish(t, sq)) != 0 ||
			    (rc = finish(t, rq)) != 0)
				return rc;
			if (i >= 0)
				rtt[i] = now_us() - t0;
		} else {
			if ((rc = post(t, rq, false, 0, tag, rbuf, len)) != 0 ||
			    (rc = finish(t, rq)) != 0 ||
			    (rc = post(t, sq, true, 0, tag, sbuf, len)) != 0 ||
			    (rc = finish(t, sq)) != 0)
				return rc;
		}
	}
	return 0;
}

dpl_transport *probe_dpl_open(const struct opts *o, uint32_t rank,
			      const char *root)
{
	struct dpl_bootstrap_params bp;
	struct dpl_transport_params p;
	struct dpl_oob oob;
	dpl_bootstrap *b = NULL;
	dpl_transport *t = NULL;
	char opts[512];
	int rc;

	snprintf(opts, sizeof opts, "provider=%s%s%s", o->provider,
		 o->options ? "," : "", o->options ? o->options : "");
	memset(&bp, 0, sizeof bp);
	bp.rank = rank;
	bp.world_size = 2;
	bp.root = root;
	bp.timeout_ms = 30000;
	if ((rc = dpl_bootstrap_open(&bp, &b)) != 0) {
		fprintf(stderr, "rank %u: bootstrap: %s: %s\n", rank,
			dpl_err_name(rc), dpl_last_error());
		return NULL;
	}
	dpl_bootstrap_oob(b, &oob);
	memset(&p, 0, sizeof p);
	p.rank = rank;
	p.world_size = 2;
	p.oob = &oob;
	p.options = opts;
	p.timeout_ms = 30000;
	rc = dpl_transport_open(&dpl_transport_ofi, &p, &t);
	dpl_bootstrap_close(b);
	if (rc != 0) {
		fprintf(stderr, "rank %u: open: %s: %s\n", rank,
			dpl_err_name(rc), dpl_last_error());
		return NULL;
	}
	return t;
}

/* ---- raw libfabric -------------------------------------------------- */

static int raw_open(struct raw *r, const char *prov)
{
	struct fi_info *h = fi_allocinfo();
	struct fi_cq_attr cqa;
	struct fi_av_attr ava;
	bool shm = is_shm(prov);
	int rc;

	memset(r, 0, sizeof *r);
	if (h == NULL)
		return -FI_ENOMEM;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_TAGGED;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				  FI_MR_PROV_KEY;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->fabric_attr->prov_name = strdup(prov);
	if (!shm) {
		h->addr_format = FI_SOCKADDR_IN;
		h->domain_attr->name = strdup("lo");
	}
	rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION),
			shm ? NULL : "127.0.0.1", NULL, shm ? 0 : FI_SOURCE, h,
			&r->fi);
	fi_freeinfo(h);
	if (rc != 0)
		return rc;
	memset(&cqa, 0, sizeof cqa);
	cqa.format = FI_CQ_FORMAT_TAGGED;
	cqa.wait_obj = FI_WAIT_NONE;
	cqa.size = 64;
	memset(&ava, 0, sizeof ava);
	ava.type = FI_AV_TABLE;
	ava.count = 2;
	r->namelen = sizeof r->name;
	if ((rc = fi_fabric(r->fi->fabric_attr, &r->fabric, NULL)) != 0 ||
	    (rc = fi_domain(r->fabric, r->fi, &r->domain, NULL)) != 0 ||
	    (rc = fi_cq_open(r->domain, &cqa, &r->cq, NULL)) != 0 ||
	    (rc = fi_av_open(r->domain, &ava, &r->av, NULL)) != 0 ||
	    (rc = fi_endpoint(r->domain, r->fi, &r->ep, NULL)) != 0 ||
	    (rc = fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
	    (rc = fi_ep_bind(r->ep, &r->av->fid, 0)) != 0 ||
	    (rc = fi_enable(r->ep)) != 0 ||
	    (rc = fi_getname(&r->ep->fid, r->name, &r->namelen)) != 0)
		return rc;
	return 0;
}

static int raw_connect(struct raw *r, const void *name)
{
	return fi_av_insert(r->av, name, 1, &r->peer, 0, NULL) == 1
		       ? 0
		       : -FI_EINVAL;
}

void probe_raw_close(struct raw *r)
{
	if (r->ep)
		fi_close(&r->ep->fid);
	if (r->av)
		fi_close(&r->av->fid);
	if (r->cq)
		fi_close(&r->cq->fid);
	if (r->domain)
		fi_close(&r->domain->fid);
	if (r->fabric)
		fi_close(&r->fabric->fid);
	if (r->fi)
		fi_freeinfo(r->fi);
}

/* Read completions until n arrived; an error entry fails. */
static int raw_wait(struct raw *r, int n)
{
	struct fi_cq_tagged_entry e[4];
	struct fi_cq_err_entry ee;
	ssize_t k;

	while (n > 0) {
		k = fi_cq_read(r->cq, e, 4);
		if (k > 0) {
			n -= (int)k;
		} else if (k == -FI_EAVAIL) {
			memset(&ee, 0, sizeof ee);
			fi_cq_readerr(r->cq, &ee, 0);
			return -abs(ee.err ? ee.err : FI_EIO);
		} else if (k != -FI_EAGAIN) {
			return (int)k;
		}
	}
	return 0;
}

static int raw_post(struct raw *r, bool send, char *buf, size_t len,
		    uint64_t tag)
{
	ssize_t rc;

	for (;;) {
		rc = send ? fi_tsend(r->ep, buf, len, NULL, r->peer, tag, &r->sc)
			  : fi_trecv(r->ep, buf, len, NULL, r->peer, tag, 0,
				     &r->rc);
		if (rc != -FI_EAGAIN)
			return (int)rc;
		fi_cq_read(r->cq, NULL, 0);
	}
}

int probe_raw_pingpong(struct raw *r, uint32_t rank, char *sbuf, char *rbuf,
		       size_t len, long iters, double *rtt)
{
	uint64_t tag = 7 + (uint64_t)len % 100000;
	long warm = iters / 10 < 100 ? iters / 10 : 100, i;
	double t0;
	int rc;

	for (i = -warm - 1; i < iters; i++) {
		if (rank == 0) {
			t0 = now_us();
			if ((rc = raw_post(r, false, rbuf, len, tag)) != 0 ||
			    (rc = raw_post(r, true, sbuf, len, tag)) != 0 ||
			    (rc = raw_wait(r, 2)) != 0)
				return rc;
			if (i >= 0)
				rtt[i] = now_us() - t0;
		} else {
			if ((rc = raw_post(r, false, rbuf, len, tag)) != 0 ||
			    (rc = raw_wait(r, 1)) != 0 ||
			    (rc = raw_post(r, true, sbuf, len, tag)) != 0 ||
			    (rc = raw_wait(r, 1)) != 0)
				return rc;
		}
	}
	return 0;
}

/* Both ranks open a raw endpoint and swap names over the pipes. */
int probe_raw_setup(struct raw *r, const char *prov, int in, int out)
{
	char peer[256];
	size_t n;
	int rc;

	if ((rc = raw_open(r, prov)) != 0) {
		fprintf(stderr, "raw %s: %s\n", prov, fi_strerror(-rc));
		return -1;
	}
	if (xwrite(out, &r->namelen, sizeof r->namelen) != 0 ||
	    xwrite(out, r->name, r->namelen) != 0 ||
	    xread(in, &n, sizeof n) != 0 || n > sizeof peer ||
	    xread(in, peer, n) != 0)
		return -1;
	return raw_connect(r, peer);
}

/* ---- fi_pingpong ---------------------------------------------------- */

static pid_t spawn(const struct opts *o, bool server, const char *port,
		   const char *it, const char *sz, int outfd)
{
	const char *argv[24];
	int k = 0;
	pid_t pid;

	argv[k++] = "fi_pingpong";
	argv[k++] = server ? "-B" : "-P";
	argv[k++] = port;
	argv[k++] = "-p";
	argv[k++] = o->provider;
	argv[k++] = "-e";
	argv[k++] = "rdm";
	argv[k++] = "-m";
	argv[k++] = "tagged";
	argv[k++] = "-I";
	argv[k++] = it;
	argv[k++] = "-S";
	argv[k++] = sz;
	if (!is_shm(o->provider)) {
		argv[k++] = "-d";
		argv[k++] = "lo";
	}
	if (!server)
		argv[k++] = "127.0.0.1";
	argv[k] = NULL;
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(outfd >= 0 ? outfd : null, 1);
		dup2(null, 2);
		execvp("fi_pingpong", (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* The client's last line: bytes #sent #ack total time MB/sec usec/xfer. */
int probe_fi_pingpong(const struct opts *o, uint64_t size, long iters,
		      double *us, double *mbs)
{
	char port[16], sz[32], it[32], line[512], last[512];
	int pfd[2], st, tries;
	pid_t srv, cli;
	FILE *f;

	snprintf(sz, sizeof sz, "%llu", (unsigned long long)size);
	snprintf(it, sizeof it, "%ld", iters);
	for (tries = 0; tries < 3; tries++) {
		snprintf(port, sizeof port, "%d", probe_free_port());
		last[0] = '\0';
		srv = spawn(o, true, port, it, sz, -1);
		usleep(200000);
		if (pipe(pfd) != 0)
			return -1;
		cli = spawn(o, false, port, it, sz, pfd[1]);
		close(pfd[1]);
		f = fdopen(pfd[0], "r");
		while (f != NULL && fgets(line, sizeof line, f) != NULL)
			if (line[0] >= '0' && line[0] <= '9')
				snprintf(last, sizeof last, "%s", line);
		if (f != NULL)
			fclose(f);
		waitpid(cli, &st, 0);
		kill(srv, SIGTERM);
		waitpid(srv, NULL, 0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
		    sscanf(last, "%*s %*s %*s %*s %*s %lf %lf", mbs, us) == 2)
			return 0;
	}
	return -1;
}

