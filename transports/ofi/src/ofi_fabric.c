/*
 * ofi_fabric.c - choosing a libfabric provider and opening the fabric,
 * domain, completion queue, address vector and endpoint of a context.
 *
 * What dpl asks of a provider: FI_EP_RDM with FI_TAGGED and
 * FI_DIRECTED_RECV, send-after-send ordering, send vectors of two
 * entries, and an inject size that holds a control message. IP
 * providers are pinned to one source address (node with FI_SOURCE, and
 * the interface as domain name), so that nothing binds an interface the
 * job did not ask for. The sockets provider is refused.
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "ofi_internal.h"

bool dpl__ofi_is_sockets(const char *prov)
{
	const char *p = prov;
	size_t k;

	while (p != NULL && *p != '\0') {
		k = strcspn(p, ";");
		if (k == 7 && strncmp(p, "sockets", 7) == 0)
			return true;
		p += k;
		if (*p == ';')
			p++;
	}
	return false;
}

bool dpl__ofi_err_is_peer(int e)
{
	switch (e) {
	case FI_ECONNRESET:
	case FI_ECONNREFUSED:
	case FI_ECONNABORTED:
	case FI_ENOTCONN:
	case FI_EHOSTUNREACH:
	case FI_ENETUNREACH:
	case ENETDOWN:
	case EPIPE:
	case ESHUTDOWN:
	case FI_ETIMEDOUT:
		return true;
	default:
		return false;
	}
}

/* One translation point from libfabric's (positive) codes to dpl's. */
int dpl__ofi_err(int e)
{
	if (e < 0)
		e = -e; /* shm 1.17 reports some codes negated */
	if (dpl__ofi_err_is_peer(e))
		return DPL_EPEER;
	switch (e) {
	case 0:
		return 0;
	case FI_ECANCELED:
		return DPL_ECANCELED;
	case FI_ETRUNC:
	case FI_ETOOSMALL:
	case FI_EMSGSIZE:
		return DPL_ETRUNC;
	case FI_EAGAIN:
		return DPL_EAGAIN;
	case FI_ENOMEM:
		return DPL_ENOMEM;
	case FI_EINVAL:
		return DPL_EINVAL;
	case FI_ENOSYS:
	case FI_EOPNOTSUPP:
		return DPL_ENOTSUP;
	default:
		return DPL_EIO;
	}
}

static bool is_loopback(const char *node)
{
	return strncmp(node, "127.", 4) == 0 || strcmp(node, "localhost") == 0;
}

static bool is_shm(const char *prov)
{
	return strncmp(prov, "shm", 3) == 0 && (prov[3] == '\0' ||
						prov[3] == ';');
}

static int fi_fail(const char *what, int rc)
{
	return dpl_set_error(DPL_EIO, "ofi: %s: %s", what,
			     fi_strerror(-rc));
}

static void describe_local(struct ofi_ctx *c)
{
	uint32_t fmt = c->info->addr_format;

	if (fmt == FI_SOCKADDR_IN && c->namelen >= sizeof(struct sockaddr_in)) {
		struct sockaddr_in sin;
		char ip[INET_ADDRSTRLEN];

		memcpy(&sin, c->name, sizeof sin);
		inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof ip);
		snprintf(c->local, sizeof c->local, "%s:%u", ip,
			 (unsigned)ntohs(sin.sin_port));
	} else if (fmt == FI_SOCKADDR_IN6 &&
		   c->namelen >= sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 sin6;
		char ip[INET6_ADDRSTRLEN];

		memcpy(&sin6, c->name, sizeof sin6);
		inet_ntop(AF_INET6, &sin6.sin6_addr, ip, sizeof ip);
		snprintf(c->local, sizeof c->local, "[%s]:%u", ip,
			 (unsigned)ntohs(sin6.sin6_port));
	} else if (fmt == FI_ADDR_STR) {
		size_t k = strnlen((const char *)c->name, c->namelen);
		const char *s = (const char *)c->name, *sep;

		snprintf(c->local, sizeof c->local, "%.*s", (int)k, s);
		sep = strstr(c->local, "://");
		if (is_shm(c->prov) && sep != NULL)
			snprintf(c->shm_name, sizeof c->shm_name, "%s",
				 sep + 3);
	} else {
		snprintf(c->local, sizeof c->local,
			 "address format %u, %zu bytes", fmt, c->namelen);
	}
}

static struct fi_info *hints(const char *prov, const char *iface, bool shm)
{
	struct fi_info *h = fi_allocinfo();

	if (h == NULL)
		return NULL;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_TAGGED | FI_DIRECTED_RECV;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				  FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				  FI_MR_ENDPOINT;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->resource_mgmt = FI_RM_ENABLED;
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
	h->fabric_attr->prov_name = strdup(prov);
	if (!shm) {
		h->addr_format = FI_SOCKADDR_IN;
		if (iface != NULL && *iface != '\0')
			h->domain_attr->name = strdup(iface);
	}
	return h;
}

/* An entry dpl can use: not sockets, vectors and inject large enough. */
static bool usable(const struct fi_info *fi)
{
	if (fi->fabric_attr == NULL || fi->fabric_attr->prov_name == NULL ||
	    dpl__ofi_is_sockets(fi->fabric_attr->prov_name))
		return false;
	if (fi->tx_attr->inject_size < sizeof(struct ofi_ctrl) ||
	    fi->tx_attr->inject_size < sizeof(struct ofi_rts))
		return false;
	if (fi->tx_attr->iov_limit < 2 || fi->rx_attr->iov_limit < 1)
		return false;
	return (fi->caps & (FI_TAGGED | FI_DIRECTED_RECV)) ==
	       (FI_TAGGED | FI_DIRECTED_RECV);
}

int dpl__ofi_provider_check(const char *src, const char *prov)
{
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

/*
 * The entry of libfabric's list dpl uses for prov (node and iface as for
 * dpl__ofi_fabric_open; node NULL: any source address; a loopback node
 * pins the domain to lo unless iface names one), a copy the caller frees
 * with fi_freeinfo(); or an error naming why there is none.
 */
static int pick(const char *prov, const char *node, const char *iface,
		struct fi_info **out)
{
	struct fi_info *h, *list = NULL, *fi;
	bool shm = is_shm(prov);
	bool pin = !shm && node != NULL;
	const char *env = getenv("FI_PROVIDER");
	int rc;

	*out = NULL;
	if (iface == NULL && node != NULL && is_loopback(node))
		iface = "lo";
	h = hints(prov, iface, shm);
	if (h == NULL || h->fabric_attr->prov_name == NULL) {
		fi_freeinfo(h);
		return dpl_set_error(DPL_ENOMEM, "ofi: out of memory");
	}
	rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION),
			pin ? node : NULL, NULL, pin ? FI_SOURCE : 0, h, &list);
	fi_freeinfo(h);
	if (rc != 0)
		return dpl_set_error(DPL_ENOTSUP,
				     "ofi: no provider '%s' with RDM "
				     "tagged messages%s%s%s%s (FI_PROVIDER="
				     "%s): %s", prov,
				     pin ? " on " : "", pin ? node : "",
				     iface && *iface ? " domain " : "",
				     iface && *iface ? iface : "",
				     env ? env : "unset", fi_strerror(-rc));
	for (fi = list; fi != NULL; fi = fi->next)
		if (usable(fi))
			break;
	if (fi == NULL) {
		fi_freeinfo(list);
		return dpl_set_error(DPL_ENOTSUP,
				     "ofi: provider '%s' offers no endpoint "
				     "with directed receive, 2-entry send "
				     "vectors and inject >= %zu bytes",
				     prov, sizeof(struct ofi_ctrl));
	}
	*out = fi_dupinfo(fi);
	fi_freeinfo(list);
	if (*out == NULL)
		return dpl_set_error(DPL_ENOMEM, "ofi: out of memory");
	return 0;
}

int dpl_transport_ofi_probe(const char *provider, const char *node,
			    char *buf, size_t len)
{
	struct fi_info *fi;
	int rc;

	if (buf == NULL || len == 0)
		return dpl_set_error(DPL_EINVAL, "ofi: probe: buf is NULL or "
				     "len is 0");
	buf[0] = '\0';
	if (provider == NULL || *provider == '\0')
		rc = dpl_set_error(DPL_EINVAL, "ofi: probe: no provider "
				   "named (NULL or empty)");
	else if ((rc = dpl__ofi_provider_check("provider", provider)) == 0)
		rc = pick(provider, node, NULL, &fi);
	if (rc != 0) {
		snprintf(buf, len, "%s", dpl_last_error());
		return rc;
	}
	snprintf(buf, len, "provider %s, fabric %s, domain %s",
		 fi->fabric_attr->prov_name,
		 fi->fabric_attr->name ? fi->fabric_attr->name : "?",
		 fi->domain_attr && fi->domain_attr->name
		     ? fi->domain_attr->name
		     : "?");
	fi_freeinfo(fi);
	return 0;
}

int dpl__ofi_fabric_open(struct ofi_ctx *c, const char *prov,
			 const char *node, const char *iface)
{
	struct fi_cq_attr cqa;
	struct fi_av_attr ava;
	bool shm = is_shm(prov);
	uint64_t mr_mode;
	size_t len;
	int rc;

	if ((rc = pick(prov, node, iface, &c->info)) != 0)
		return rc;
	snprintf(c->prov, sizeof c->prov, "%s", c->info->fabric_attr->prov_name);
	mr_mode = (uint64_t)c->info->domain_attr->mr_mode;
	c->mr_local = (mr_mode & FI_MR_LOCAL) != 0 ||
		      (c->info->mode & FI_LOCAL_MR) != 0 || c->o.mr_always;
	c->mr_ep = (mr_mode & FI_MR_ENDPOINT) != 0;
	c->inject = c->info->tx_attr->inject_size;
	c->rx_size = c->info->rx_attr->size;
	/*
	 * shm 1.17 completes the sends that need the receiver (everything
	 * above inject) strictly in order: one such send to a peer that died
	 * before reading it holds back the completions of all later ones, to
	 * every peer. So on shm, larger messages ask first, and their payload
	 * only leaves once the receiver has posted for it. The eager limit
	 * leaves room for dpl's header within the inject size.
	 */
	if (shm && !c->o.inline_set && c->o.inline_max + 16 > c->inject)
		c->o.inline_max = c->inject > 16 ? c->inject - 16 : 0;

	if ((rc = fi_fabric(c->info->fabric_attr, &c->fabric, NULL)) != 0)
		return fi_fail("fi_fabric", rc);
	if ((rc = fi_domain(c->fabric, c->info, &c->domain, NULL)) != 0)
		return fi_fail("fi_domain", rc);
	memset(&cqa, 0, sizeof cqa);
	cqa.format = FI_CQ_FORMAT_TAGGED;
	cqa.wait_obj = FI_WAIT_NONE;
	cqa.size = (size_t)c->nop + OFI_NCTRL + c->n + 64;
	if ((rc = fi_cq_open(c->domain, &cqa, &c->cq, NULL)) != 0)
		return fi_fail("fi_cq_open", rc);
	memset(&ava, 0, sizeof ava);
	ava.type = FI_AV_TABLE;
	ava.count = c->n;
	if ((rc = fi_av_open(c->domain, &ava, &c->av, NULL)) != 0)
		return fi_fail("fi_av_open", rc);
	if ((rc = fi_endpoint(c->domain, c->info, &c->ep, NULL)) != 0)
		return fi_fail("fi_endpoint", rc);
	if ((rc = fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV)) != 0)
		return fi_fail("fi_ep_bind(cq)", rc);
	if ((rc = fi_ep_bind(c->ep, &c->av->fid, 0)) != 0)
		return fi_fail("fi_ep_bind(av)", rc);
	if ((rc = fi_enable(c->ep)) != 0)
		return fi_fail("fi_enable", rc);
	len = sizeof c->name;
	if ((rc = fi_getname(&c->ep->fid, c->name, &len)) != 0)
		return fi_fail("fi_getname", rc);
	if (len > sizeof c->name)
		return dpl_set_error(DPL_ENOTSUP,
				     "ofi: address of %zu bytes (at most "
				     "%d)", len, OFI_NAME_MAX);
	c->namelen = len;
	describe_local(c);
	return 0;
}

void dpl__ofi_fabric_close(struct ofi_ctx *c)
{
	if (c->ep != NULL)
		fi_close(&c->ep->fid);
	c->ep = NULL;
	/* Registrations go after the endpoint and before the domain. */
	dpl__ofi_mr_clear(c);
	if (c->av != NULL)
		fi_close(&c->av->fid);
	if (c->cq != NULL)
		fi_close(&c->cq->fid);
	if (c->domain != NULL)
		fi_close(&c->domain->fid);
	if (c->fabric != NULL)
		fi_close(&c->fabric->fid);
	c->av = NULL;
	c->cq = NULL;
	c->domain = NULL;
	c->fabric = NULL;
	if (c->info != NULL)
		fi_freeinfo(c->info);
	c->info = NULL;
	if (c->shm_name[0] != '\0')
		dpl__ofi_shm_unlink(c->shm_name);
	c->shm_name[0] = '\0';
}
