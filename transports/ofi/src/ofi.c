/*
 * ofi.c - dpl_transport_ofi: the libfabric transport's table, and how a
 * context joins and leaves its job.
 *
 * init: parse the options; exchange, through the host's out-of-band
 * exchange (params.oob), who runs where, so that dpl picks shm when
 * every rank shares this host and tcp;ofi_rxm otherwise (FI_PROVIDER or
 * the provider option override it), and which IPv4 addresses each rank
 * has, so that IP providers bind the address on a subnet shared with
 * rank 0; remove the shm files of dead processes; open the endpoint;
 * exchange fabric addresses (a rank that failed to open says why, so
 * every rank reports it); start the liveness thread; and send one small
 * message each way to every peer (warm-up), so the first real message
 * does not pay for rxm's lazy connection set-up.
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
#include <ifaddrs.h>
#include <net/if.h>
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
#include <rdma/fi_tagged.h>

#include "ofi_internal.h"

#define IDENT_MAGIC 0x64706c49u /* "dplI" */
#define ADDR_MAGIC 0x64706c41u  /* "dplA" */
#define DEFAULT_TIMEOUT_MS 60000u
#define DEFAULT_LIVENESS_MS 1500u
#define OFI_IPS 8 /* IPv4 addresses a rank tells the others */

/* Phase one: where each rank runs. */
struct ident {
	uint32_t magic;
	uint32_t rank;
	int32_t pid;
	uint32_t nip; /* entries of ip */
	uint64_t nonce;
	uint64_t ns[4]; /* pid, net, mnt, ipc namespace inodes */
	uint32_t ip[OFI_IPS][2]; /* address and netmask (network order) of
				    each interface up, loopback excluded */
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

_Static_assert(sizeof(struct ident) <= DPL_OOB_BLOB_MAX &&
		       sizeof(struct addrblob) <= DPL_OOB_BLOB_MAX,
	       "one allgather of the out-of-band exchange each");

static void ident_addrs(struct ident *id)
{
	struct ifaddrs *all, *i;
	struct sockaddr_in a, m;

	if (getifaddrs(&all) != 0)
		return;
	for (i = all; i != NULL && id->nip < OFI_IPS; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_netmask == NULL ||
		    i->ifa_addr->sa_family != AF_INET ||
		    !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
			continue;
		memcpy(&a, i->ifa_addr, sizeof a);
		memcpy(&m, i->ifa_netmask, sizeof m);
		id->ip[id->nip][0] = a.sin_addr.s_addr;
		id->ip[id->nip][1] = m.sin_addr.s_addr;
		id->nip++;
	}
	freeifaddrs(all);
}

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
		id->nonce = dpl_clock_ns() ^ ((uint64_t)getpid() << 32);
	ident_addrs(id);
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

/* The local IPv4 address of the route towards ip (network order). */
static int route_to(uint32_t ip, char *out, size_t size)
{
	struct sockaddr_in to, sin;
	socklen_t len = sizeof sin;
	int fd, rc;

	memset(&to, 0, sizeof to);
	to.sin_family = AF_INET;
	to.sin_port = htons(9);
	to.sin_addr.s_addr = ip;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	rc = fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof to) != 0 ||
	     getsockname(fd, (struct sockaddr *)&sin, &len) != 0;
	if (fd >= 0)
		close(fd);
	if (rc)
		return DPL_EIO;
	if ((ntohl(sin.sin_addr.s_addr) >> 24) == 127)
		snprintf(out, size, "127.0.0.1");
	else
		inet_ntop(AF_INET, &sin.sin_addr, out, (socklen_t)size);
	return 0;
}

/*
 * The source address of IP providers when ranks run on several hosts:
 * this rank's address on a subnet that rank 0 (for rank 0: rank 1) has
 * an address on, as NCCL matches the root's subnet; else the local end
 * of the route to that rank's first address it can reach.
 */
static int pick_node(const struct ident *ids, uint32_t rank, char *out,
		     size_t size)
{
	const struct ident *me = &ids[rank], *ref = &ids[rank == 0 ? 1 : 0];
	struct in_addr in;
	uint32_t i, k;

	for (i = 0; i < me->nip; i++)
		for (k = 0; k < ref->nip; k++)
			if (((me->ip[i][0] ^ ref->ip[k][0]) & me->ip[i][1]) ==
			    0) {
				in.s_addr = me->ip[i][0];
				inet_ntop(AF_INET, &in, out, (socklen_t)size);
				return 0;
			}
	for (k = 0; k < ref->nip; k++)
		if (route_to(ref->ip[k][0], out, size) == 0)
			return 0;
	return dpl_set_error(DPL_EIO,
			     "ofi: ranks run on several hosts and rank %u "
			     "has no IPv4 address this rank can reach (it "
			     "told %u): give node=<local ip> or "
			     "iface=<name>", rank == 0 ? 1u : 0u, ref->nip);
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
	return dpl__ofi_provider_check(src, prov);
}

static int open_local(struct ofi_ctx *c, const struct ident *ids,
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
	else if ((rc = pick_node(ids, c->rank, node, sizeof node)) != 0)
		return rc;
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

static int join(struct ofi_ctx *c, const struct dpl_oob *oob)
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
	if ((rc = oob->allgather(oob->user, &me, sizeof me, ids)) != 0)
		goto out;
	for (r = 0; r < c->n; r++)
		if (ids[r].magic != IDENT_MAGIC || ids[r].rank != r ||
		    ids[r].nip > OFI_IPS) {
			rc = dpl_set_error(DPL_EIO,
					   "ofi: rank %u sent a malformed "
					   "identity", r);
			goto out;
		} else if (!same_box(&ids[r], &me)) {
			local = false;
		}

	/* Open our endpoint; on failure still take part in the exchange so
	 * that every rank learns why. */
	st = open_local(c, ids, local, &udp_ip);
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
	if ((rc = oob->allgather(oob->user, &mine, sizeof mine, all)) != 0)
		goto out;
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

int dpl__ofi_init(void *ctx, const struct dpl_transport_params *p)
{
	struct ofi_ctx *c = ctx;
	uint32_t tmo = p->timeout_ms ? p->timeout_ms : DEFAULT_TIMEOUT_MS;
	uint64_t deadline = dpl_clock_ns() + (uint64_t)tmo * 1000000u;
	int rc;

	memset(c, 0, sizeof *c);
	if (p->world_size == 0 || p->rank >= p->world_size)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: rank %u of world size %u",
				     p->rank, p->world_size);
	if (p->oob == NULL || p->oob->allgather == NULL)
		return dpl_set_error(DPL_EINVAL,
				     "ofi: init needs the host's out-of-band "
				     "exchange (params.oob)");
	if ((rc = dpl__ofi_opts_parse(p->options, &c->o)) != 0)
		return rc;
	c->rank = p->rank;
	c->n = p->world_size;
	c->nop = c->o.slots;
	c->liveness_ms = c->o.liveness_ms ? c->o.liveness_ms
			 : p->timeout_ms  ? p->timeout_ms
					  : DEFAULT_LIVENESS_MS;
	rc = join(c, p->oob);
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

void dpl__ofi_fini(void *ctx)
{
	teardown(ctx);
}

/* ---- warm-up -------------------------------------------------------- */

static void nap(void)
{
	struct timespec ts = {0, 50000};

	nanosleep(&ts, NULL);
}

int dpl__ofi_warmup(struct ofi_ctx *c, uint64_t deadline)
{
	uint64_t me = c->rank;
	uint8_t *sent;
	uint32_t p, left;
	char miss[160];
	size_t k;
	int rc;

	sent = calloc(c->n, 1);
	if (sent == NULL)
		return dpl_set_error(DPL_ENOMEM, "ofi: out of memory");
	c->warm_left = 0;
	for (p = 0; p < c->n; p++) {
		if (p == c->rank)
			continue;
		c->warm[p] = UINT64_MAX - 1;
		for (;;) {
			rc = (int)fi_trecv(c->ep, &c->warm[p],
					   sizeof c->warm[p],
					   static_desc(c->warm_mr),
					   c->peer[p].addr, OFI_TAG_WARM, 0,
					   &c->warm_fc[p]);
			if (rc != -FI_EAGAIN || dpl_clock_ns() > deadline)
				break;
			(void)dpl__ofi_cq_drain(c);
		}
		if (rc != 0) {
			free(sent);
			return dpl__ofi_post_error(c, p, "warm-up receive", rc);
		}
		c->warm_left++;
	}
	for (;;) {
		left = 0;
		for (p = 0; p < c->n; p++) {
			if (p == c->rank || sent[p])
				continue;
			rc = (int)fi_tinject(c->ep, &me, sizeof me,
					     c->peer[p].addr, OFI_TAG_WARM);
			if (rc == 0)
				sent[p] = 1;
			else if (rc != -FI_EAGAIN) {
				free(sent);
				return dpl__ofi_post_error(c, p,
							   "warm-up send", rc);
			}
			else
				left++;
		}
		if ((rc = dpl__ofi_cq_drain(c)) != 0) {
			free(sent);
			return rc;
		}
		dpl__ofi_check_live(c);
		if (c->ndying != 0 || c->nclosing != 0)
			dpl__ofi_deadlines(c);
		/* A peer may finish and leave as soon as its own warm-up is
		 * done: only one that never got its message through failed. */
		for (p = 0; p < c->n; p++) {
			if (p == c->rank)
				continue;
			if (c->warm[p] == UINT64_MAX ||
			    (c->peer[p].dead && c->warm[p] == UINT64_MAX - 1)) {
				free(sent);
				return dpl_set_error(DPL_EPEER,
						     "ofi: rank %u failed "
						     "during warm-up", p);
			}
			if ((c->peer[p].dead || c->peer[p].closing) &&
			    !sent[p]) {
				sent[p] = 1;
				left--;
			}
		}
		if (left == 0 && c->warm_left == 0)
			break;
		if (dpl_clock_ns() > deadline) {
			k = 0;
			miss[0] = '\0';
			for (p = 0; p < c->n && k + 12 < sizeof miss; p++)
				if (p != c->rank &&
				    (!sent[p] || c->warm[p] == UINT64_MAX - 1))
					k += (size_t)snprintf(miss + k,
							      sizeof miss - k,
							      "%s%u", k ? ", "
									: "",
							      p);
			free(sent);
			return dpl_set_error(DPL_ETIMEDOUT,
					     "ofi: warm-up with ranks %s "
					     "did not finish in time", miss);
		}
		if (left != 0 || c->warm_left != 0)
			nap();
	}
	free(sent);
	for (p = 0; p < c->n; p++)
		if (p != c->rank && c->warm[p] != p)
			return dpl_set_error(DPL_EIO,
					     "ofi: warm-up message from rank "
					     "%u carried %llu", p,
					     (unsigned long long)c->warm[p]);
	return 0;
}
