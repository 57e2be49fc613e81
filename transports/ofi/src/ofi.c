/*
 * ofi.c - dpl_transport_ofi: the libfabric transport's table, and how a
 * context joins and leaves its job.
 *
 * init: parse the options; meet the other ranks through the bootstrap
 * (dpl/bootstrap.h); exchange who runs where, so that dpl picks shm when
 * every rank shares this host and tcp;ofi_rxm otherwise (FI_PROVIDER or
 * the provider option override it); remove the shm files of dead
 * processes; open the endpoint; exchange fabric addresses (a rank that
 * failed to open says why, so every rank reports it); start the liveness
 * thread; and send one small message each way to every peer, so the
 * first real message does not pay for rxm's lazy connection set-up.
 *
 * fini: stop the liveness thread (peers get a goodbye and see this rank
 * as failed), close the endpoint (which drops every pending operation:
 * their requests end with DPL_ECANCELED), the fabric objects, and this
 * endpoint's shm file.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <dpl/bootstrap.h>

#include "ofi_internal.h"

#define IDENT_MAGIC 0x64706c49u /* "dplI" */
#define ADDR_MAGIC 0x64706c41u  /* "dplA" */
#define DEFAULT_TIMEOUT_MS 60000u
#define DEFAULT_LIVENESS_MS 1500u

/* Phase one: where each rank runs. */
struct ident {
	uint32_t magic;
	uint32_t rank;
	int32_t pid;
	uint32_t reserved;
	uint64_t nonce;
	uint64_t ns[4]; /* pid, net, mnt, ipc namespace inodes */
	char boot_id[40];
};

/* Phase two: the fabric address, or why this rank has none. */
struct addrblob {
	uint32_t magic;
	uint32_t rank;
	int32_t status;
	uint32_t namelen;
	uint32_t udp_ip;
	uint16_t udp_port;
	uint16_t reserved;
	char prov[64];
	char err[160];
	uint8_t name[OFI_NAME_MAX];
};

static void ident_fill(struct ident *id, uint32_t rank)
{
	static const char *ns[4] = {"/proc/self/ns/pid", "/proc/self/ns/net",
				    "/proc/self/ns/mnt", "/proc/self/ns/ipc"};
	struct stat st;
	ssize_t k;
	int fd, i;

	memset(id, 0, sizeof *id);
	id->magic = IDENT_MAGIC;
	id->rank = rank;
	id->pid = (int32_t)getpid();
	for (i = 0; i < 4; i++)
		id->ns[i] = stat(ns[i], &st) == 0 ? (uint64_t)st.st_ino : 0;
	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		k = read(fd, id->boot_id, sizeof id->boot_id - 1);
		if (k < 0)
			id->boot_id[0] = '\0';
		close(fd);
	}
	if (getrandom(&id->nonce, sizeof id->nonce, GRND_NONBLOCK) !=
	    (ssize_t)sizeof id->nonce)
		id->nonce = dpl__ofi_now() ^ ((uint64_t)getpid() << 32);
}

static bool same_host(const struct ident *a, const struct ident *b)
{
	return strcmp(a->boot_id, b->boot_id) == 0 && a->ns[0] == b->ns[0];
}

/* Same host, network, mounts and IPC: loopback and shm reach each other. */
static bool same_box(const struct ident *a, const struct ident *b)
{
	return same_host(a, b) && memcmp(a->ns, b->ns, sizeof a->ns) == 0;
}

static const char *root_of(const struct dpl_transport_params *p)
{
	const char *s;

	if (p->bootstrap != NULL)
		return p->bootstrap;
	if ((s = getenv("DPL_ROOT")) != NULL && *s != '\0')
		return s;
	return getenv("MASTER_ADDR");
}

/* The local IPv4 address of the route towards the root's host. */
static int route_to_root(const char *root, char *out, size_t size)
{
	struct addrinfo hints, *res = NULL;
	struct sockaddr_in sin;
	socklen_t len = sizeof sin;
	char host[256];
	const char *colon;
	size_t k;
	int fd, rc;

	if (root == NULL)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: ranks run on several hosts and "
				     "no root address is known: give "
				     "node=<local ip> or iface=<name>");
	colon = strrchr(root, ':');
	k = colon != NULL && strchr(root, ':') == colon ? (size_t)(colon - root)
						       : strlen(root);
	if (k >= sizeof host)
		k = sizeof host - 1;
	memcpy(host, root, k);
	host[k] = '\0';
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_DGRAM;
	if ((rc = getaddrinfo(host, "9", &hints, &res)) != 0)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: root host '%s': %s (give "
				     "node=<local ip>)", host,
				     gai_strerror(rc));
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	rc = fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0 ||
	     getsockname(fd, (struct sockaddr *)&sin, &len) != 0;
	if (fd >= 0)
		close(fd);
	freeaddrinfo(res);
	if (rc)
		return dpl_set_error(DPL_EIO,
				     "ofi: no route to root host '%s' "
				     "(give node=<local ip>)", host);
	if ((ntohl(sin.sin_addr.s_addr) >> 24) == 127)
		snprintf(out, size, "127.0.0.1");
	else
		inet_ntop(AF_INET, &sin.sin_addr, out, (socklen_t)size);
	return 0;
}

static bool is_loopback(const char *node)
{
	return strncmp(node, "127.", 4) == 0 || strcmp(node, "localhost") == 0;
}

static void teardown(struct ofi_ctx *c)
{
	uint32_t r;

	/* The goodbye tells each peer how many messages we completed to
	 * it, so it can still match those. */
	if (c->sent != NULL && c->peer != NULL)
		for (r = 0; r < c->n; r++)
			c->sent[r] = c->peer[r].sent;
	/* Peers holding an offer of ours should not send on it. */
	if (c->op != NULL && c->peer != NULL && c->ep != NULL)
		dpl__ofi_data_retract(c);
	dpl__ofi_live_close(c->live, c->sent);
	c->live = NULL;
	dpl__ofi_fabric_close(c);
	dpl__ofi_data_fini(c);
	free(c->peer);
	free(c->sent);
	c->peer = NULL;
	c->sent = NULL;
}

static int boot_open(const struct dpl_transport_params *p, uint32_t tmo,
		     dpl_bootstrap **b)
{
	struct dpl_bootstrap_params bp;
	int rc;

	if (p->bootstrap != NULL) {
		memset(&bp, 0, sizeof bp);
		bp.rank = p->rank;
		bp.world_size = p->world_size;
		bp.root = p->bootstrap;
		bp.timeout_ms = tmo;
		return dpl_bootstrap_open(&bp, b);
	}
	if ((rc = dpl_bootstrap_open_env(tmo, b)) != 0)
		return rc;
	if (dpl_bootstrap_rank(*b) != p->rank ||
	    dpl_bootstrap_world_size(*b) != p->world_size) {
		uint32_t r = dpl_bootstrap_rank(*b);
		uint32_t n = dpl_bootstrap_world_size(*b);

		dpl_bootstrap_close(*b);
		*b = NULL;
		return dpl_set_error(DPL_EINVAL,
				     "ofi: the environment says rank %u of "
				     "%u, the parameters rank %u of %u", r,
				     n, p->rank, p->world_size);
	}
	return 0;
}

/* Pick the provider name: the option, FI_PROVIDER, or dpl's choice. */
static int choose_provider(const struct ofi_ctx *c, bool local,
			   char *prov, size_t size)
{
	const char *env = getenv("FI_PROVIDER");
	const char *src = "option provider";

	if (c->o.provider[0] != '\0')
		snprintf(prov, size, "%s", c->o.provider);
	else if (env != NULL && *env != '\0') {
		snprintf(prov, size, "%s", env);
		src = "FI_PROVIDER";
	} else
		snprintf(prov, size, "%s", local ? "shm" : "tcp;ofi_rxm");
	if (strpbrk(prov, ",^") != NULL)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: %s='%s': dpl takes one provider "
				     "such as tcp;ofi_rxm or shm, not a "
				     "list", src, prov);
	if (dpl__ofi_is_sockets(prov))
		return dpl_set_error(DPL_ENOTSUP,
				     "ofi: %s='%s' refused: the sockets "
				     "provider is deprecated and unusable "
				     "here (use tcp;ofi_rxm or shm)", src,
				     prov);
	return 0;
}

static int open_local(struct ofi_ctx *c, const struct dpl_transport_params *p,
		      bool local, uint32_t *udp_ip)
{
	char prov[64], node[64];
	const char *iface = c->o.iface[0] ? c->o.iface : NULL;
	struct in_addr in;
	int rc;

	if ((rc = choose_provider(c, local, prov, sizeof prov)) != 0)
		return rc;
	if (c->o.node[0] != '\0')
		snprintf(node, sizeof node, "%s", c->o.node);
	else if (local || c->n == 1)
		snprintf(node, sizeof node, "127.0.0.1");
	else if ((rc = route_to_root(root_of(p), node, sizeof node)) != 0)
		return rc;
	if (iface == NULL && is_loopback(node))
		iface = "lo";
	if (strncmp(prov, "shm", 3) == 0)
		dpl__ofi_shm_sweep("/dev/shm");
	if ((rc = dpl__ofi_fabric_open(c, prov, node, iface)) != 0)
		return rc;
	if ((rc = dpl__ofi_data_init(c)) != 0)
		return rc;
	/* Heartbeats go where the fabric goes. */
	*udp_ip = htonl(INADDR_LOOPBACK);
	if (c->info->addr_format == FI_SOCKADDR_IN &&
	    c->namelen >= sizeof(struct sockaddr_in)) {
		struct sockaddr_in sin;

		memcpy(&sin, c->name, sizeof sin);
		*udp_ip = sin.sin_addr.s_addr;
	} else if (!local && inet_pton(AF_INET, node, &in) == 1) {
		*udp_ip = in.s_addr;
	}
	return 0;
}

static int join(struct ofi_ctx *c, const struct dpl_transport_params *p,
		dpl_bootstrap *b)
{
	struct ident me, *ids = NULL;
	struct addrblob mine, *all = NULL;
	struct ofi_live_peer *lp = NULL;
	uint32_t r, udp_ip = 0;
	uint16_t port = 0;
	bool local = true;
	int rc, st;

	ident_fill(&me, c->rank);
	ids = calloc(c->n, sizeof *ids);
	all = calloc(c->n, sizeof *all);
	lp = calloc(c->n, sizeof *lp);
	c->peer = calloc(c->n, sizeof *c->peer);
	c->sent = calloc(c->n, sizeof *c->sent);
	if (!ids || !all || !lp || !c->peer || !c->sent) {
		rc = dpl_set_error(DPL_ENOMEM, "ofi: out of memory");
		goto out;
	}
	if (b != NULL) {
		if ((rc = dpl_bootstrap_allgather(b, &me, sizeof me, ids)) != 0)
			goto out;
	} else {
		ids[0] = me;
	}
	for (r = 0; r < c->n; r++)
		if (ids[r].magic != IDENT_MAGIC || ids[r].rank != r) {
			rc = dpl_set_error(DPL_EIO,
					   "ofi: rank %u sent a malformed "
					   "identity", r);
			goto out;
		} else if (!same_box(&ids[r], &me)) {
			local = false;
		}

	/* Open our endpoint; on failure still take part in the exchange so
	 * that every rank learns why. */
	st = open_local(c, p, local, &udp_ip);
	if (st == 0)
		st = dpl__ofi_live_open(udp_ip, &c->live, &port);
	memset(&mine, 0, sizeof mine);
	mine.magic = ADDR_MAGIC;
	mine.rank = c->rank;
	mine.status = st;
	if (st == 0) {
		mine.namelen = (uint32_t)c->namelen;
		memcpy(mine.name, c->name, c->namelen);
		snprintf(mine.prov, sizeof mine.prov, "%s", c->prov);
		mine.udp_ip = udp_ip;
		mine.udp_port = port;
	} else {
		snprintf(mine.err, sizeof mine.err, "%s", dpl_last_error());
	}
	if (b != NULL) {
		rc = dpl_bootstrap_allgather(b, &mine, sizeof mine, all);
		if (rc != 0)
			goto out;
	} else {
		all[0] = mine;
	}
	if (st != 0) {
		rc = dpl_set_error(st, "%s", mine.err);
		goto out;
	}
	for (r = 0; r < c->n; r++) {
		if (all[r].magic != ADDR_MAGIC || all[r].rank != r ||
		    all[r].namelen > OFI_NAME_MAX) {
			rc = dpl_set_error(DPL_EIO,
					   "ofi: rank %u sent a malformed "
					   "address", r);
			goto out;
		}
		if (all[r].status != 0) {
			all[r].err[sizeof all[r].err - 1] = '\0';
			rc = dpl_set_error(all[r].status,
					   "ofi: rank %u failed to open "
					   "its endpoint: %s", r,
					   all[r].err);
			goto out;
		}
		all[r].prov[sizeof all[r].prov - 1] = '\0';
		if (strcmp(all[r].prov, c->prov) != 0) {
			rc = dpl_set_error(DPL_EINVAL,
					   "ofi: rank %u uses provider "
					   "'%s', rank %u uses '%s'", r,
					   all[r].prov, c->rank, c->prov);
			goto out;
		}
	}
	for (r = 0; r < c->n; r++) {
		fi_addr_t a = FI_ADDR_NOTAVAIL;

		rc = fi_av_insert(c->av, all[r].name, 1, &a, 0, NULL);
		if (rc != 1) {
			rc = dpl_set_error(DPL_EIO,
					   "ofi: fi_av_insert of rank %u's "
					   "address: %s", r,
					   fi_strerror(rc < 0 ? -rc
					   : FI_EINVAL));
			goto out;
		}
		c->peer[r].addr = a;
		lp[r].ip = all[r].udp_ip;
		lp[r].port = all[r].udp_port;
		lp[r].pid = same_host(&ids[r], &me) ? ids[r].pid : 0;
	}
	if ((rc = dpl__ofi_data_start(c)) != 0)
		goto out;
	rc = dpl__ofi_live_start(c->live, c->rank, c->n, lp, ids[0].nonce,
				 c->liveness_ms);
out:
	free(ids);
	free(all);
	free(lp);
	return rc;
}

static int ofi_init(void *ctx, const struct dpl_transport_params *p)
{
	struct ofi_ctx *c = ctx;
	dpl_bootstrap *b = NULL;
	uint32_t tmo = p->timeout_ms ? p->timeout_ms : DEFAULT_TIMEOUT_MS;
	uint64_t deadline = dpl__ofi_now() + (uint64_t)tmo * 1000000u;
	int rc;

	memset(c, 0, sizeof *c);
	if (p->world_size == 0 || p->rank >= p->world_size)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: rank %u of world size %u",
				     p->rank, p->world_size);
	if ((rc = dpl__ofi_opts_parse(p->options, &c->o)) != 0)
		return rc;
	c->rank = p->rank;
	c->n = p->world_size;
	c->nop = c->o.slots;
	c->liveness_ms = c->o.liveness_ms ? c->o.liveness_ms
			 : p->timeout_ms  ? p->timeout_ms
					  : DEFAULT_LIVENESS_MS;
	if (c->n > 1 && (rc = boot_open(p, tmo, &b)) != 0)
		return rc;
	rc = join(c, p, b);
	dpl_bootstrap_close(b);
	if (rc == 0 && c->o.warmup && c->n > 1)
		rc = dpl__ofi_warmup(c, deadline);
	if (rc != 0) {
		char msg[512];

		/* Teardown may overwrite the message: keep it. */
		snprintf(msg, sizeof msg, "%s", dpl_last_error());
		teardown(c);
		return dpl_set_error(rc, "%s", msg);
	}
	return 0;
}

static void ofi_fini(void *ctx)
{
	teardown(ctx);
}

static int check_post(struct ofi_ctx *c, uint32_t peer, uint64_t tag,
		      const void *buf, size_t len, uint32_t mem)
{
	if (peer >= c->n || peer == c->rank)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: peer %u of rank %u in a world "
				     "of %u", peer, c->rank, c->n);
	if (tag > DPL_TAG_MAX)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: tag %#llx beyond %d bits",
				     (unsigned long long)tag, DPL_TAG_BITS);
	if (mem != DPL_MEM_HOST)
		return dpl_set_error(DPL_ENOTSUP,
				     "ofi: memory kind %u (host only)",
				     mem);
	if (buf == NULL && len != 0)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: NULL buffer of %zu bytes", len);
	if (c->broken)
		return dpl_set_error(DPL_EIO,
				     "ofi: the completion queue failed "
				     "earlier");
	return 0;
}

static int ofi_isend(void *ctx, void *req, uint32_t peer, uint64_t tag,
		     const void *buf, size_t len, uint32_t mem)
{
	int rc = check_post(ctx, peer, tag, buf, len, mem);

	return rc != 0 ? rc : dpl__ofi_isend(ctx, req, peer, tag, buf, len);
}

static int ofi_irecv(void *ctx, void *req, uint32_t peer, uint64_t tag,
		     void *buf, size_t len, uint32_t mem)
{
	int rc = check_post(ctx, peer, tag, buf, len, mem);

	return rc != 0 ? rc : dpl__ofi_irecv(ctx, req, peer, tag, buf, len);
}

static int ofi_test(void *ctx, void *req)
{
	return ((const struct ofi_req *)req)->status;
}

static int ofi_progress(void *ctx)
{
	return dpl__ofi_progress(ctx);
}

static int ofi_cancel(void *ctx, void *req)
{
	return dpl__ofi_cancel(ctx, req);
}

const char *dpl__ofi_local_address(void *ctx)
{
	return ((struct ofi_ctx *)ctx)->local;
}

const char *dpl__ofi_provider(void *ctx)
{
	return ((struct ofi_ctx *)ctx)->prov;
}

void dpl__ofi_offer_counts(void *ctx, uint64_t *posted, uint64_t *used,
			   uint64_t *single, uint64_t *held)
{
	*posted = ((struct ofi_ctx *)ctx)->offers_posted;
	*used = ((struct ofi_ctx *)ctx)->offers_used;
	*single = ((struct ofi_ctx *)ctx)->offers_single;
	*held = ((struct ofi_ctx *)ctx)->offers_held;
}

DPL_EXTERN const struct dpl_transport_ops dpl_transport_ofi = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "ofi",
	.caps = DPL_TRANSPORT_CAP_PEER_FAILURE,
	.ctx_size = sizeof(struct ofi_ctx),
	.req_size = sizeof(struct ofi_req),
	.init = ofi_init,
	.fini = ofi_fini,
	.isend = ofi_isend,
	.irecv = ofi_irecv,
	.test = ofi_test,
	.progress = ofi_progress,
	.cancel = ofi_cancel,
};
