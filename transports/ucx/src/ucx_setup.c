/*
 * ucx_setup.c - the UCX transport's init and fini: the UCP context and
 * one worker per peer, the address exchange (ucx_xchg.c) over the host's
 * out-of-band exchange, the hello round, and the goodbyes and teardown.
 *
 * Error mode. The default keeps UCP_ERR_HANDLING_MODE_NONE, because the
 * PEER mode drops UCX's shared-memory lanes (posix and sysv have no peer
 * failure handler unless UCX_{POSIX,SYSV}_ERROR_HANDLING=y, and cma never
 * has one) and slows TCP rendezvous; detection in ucx_ctrl.c does not
 * need it. "err_mode=peer" asks for it, and then the shared-memory error
 * handling (MM_ERROR_HANDLING, which posix and sysv inherit) and a short
 * keepalive are switched on unless the user set them.
 *
 * Loopback. Unless the user set UCX_NET_DEVICES (or the net_devices
 * option), the context's configuration gets NET_DEVICES=lo through
 * ucp_config_modify, which leaves the process environment alone.
 *
 * Closing. Over shared memory a receive of a rendezvous message fetches
 * the data with cross-memory-attach copies queued on the endpoint; they
 * run on after a cancel, write into the receive buffer, and UCX 1.13
 * aborts when a worker is destroyed while they are queued. So fini
 * cancels, then progresses until UCX completed each request (settle)
 * before the buffer goes back or the worker is destroyed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucx_internal.h"

/* ---- setup and teardown ----------------------------------------------- */

/* Progress every worker until done() holds or `ns` passed. */
static bool drain(struct ctx *c, bool (*done)(struct ctx *), uint64_t ns)
{
	uint64_t end = dpl_clock_ns() + ns;

	for (;;) {
		uint32_t j;

		if (done(c))
			return true;
		if (dpl_clock_ns() > end)
			return false;
		for (j = 0; j < c->world; j++)
			if (c->peers[j].w != NULL)
				ucp_worker_progress(c->peers[j].w);
	}
}

static bool flushed(struct ctx *c)
{
	uint32_t j;

	for (j = 0; j < c->world; j++) {
		dpl__ucx_ctrl_reap(&c->peers[j].bye_req);
		dpl__ucx_ctrl_reap(&c->peers[j].flush_req);
		if (c->peers[j].bye_req != NULL ||
		    c->peers[j].flush_req != NULL)
			return false;
	}
	return true;
}

/*
 * Tell live peers goodbye and push out what was sent to them: a goodbye
 * follows this rank's messages on the same path, and the flush makes
 * sure they have all left before the worker closes, so a peer receives
 * everything this rank sent before it declares it gone. Bounded: a peer
 * that does not progress does not hold fini up for long.
 */
static void say_goodbye(struct ctx *c)
{
	ucp_request_param_t prm;
	uint32_t j;

	memset(&prm, 0, sizeof prm);
	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];
		void *fp;

		if (p->ep == NULL || p->dead || p->failed != UCS_OK)
			continue;
		dpl__ucx_ctrl_send(c, p, CTRL_BYE, &p->bye_buf, &p->bye_req);
		fp = ucp_worker_flush_nbx(p->w, &prm);
		p->flush_req = UCS_PTR_IS_PTR(fp) ? fp : NULL;
	}
	drain(c, flushed, FINI_DRAIN_NS);
}

/*
 * Everything init built, in reverse; `bye` tells live peers first.
 * Pending receives are cancelled and their requests kept until UCX has
 * finished with them (settle), within FINI_DRAIN_NS for all peers
 * together, so that nothing writes into a caller's buffer after fini and
 * no worker is destroyed with copies still queued.
 */
static void teardown(struct ctx *c, bool bye)
{
	uint64_t end;
	uint32_t j;

	for (j = 0; c->peers != NULL && j < c->world; j++) {
		struct peer *p = &c->peers[j];
		struct ureq *r;

		for (r = p->head; r != NULL; r = r->next)
			if (r->recv &&
			    ucp_request_check_status(r->ucp) == UCS_INPROGRESS)
				ucp_request_cancel(p->w, r->ucp);
		if (p->crreq != NULL)
			ucp_request_cancel(p->w, p->crreq);
	}
	if (c->peers != NULL && bye)
		say_goodbye(c);
	end = dpl_clock_ns() + FINI_DRAIN_NS;
	for (j = 0; c->peers != NULL && j < c->world; j++) {
		struct peer *p = &c->peers[j];
		struct ureq *r, *next;

		if (p->w != NULL)
			dpl__ucx_settle_recvs(p, end);
		for (r = p->head; r != NULL; r = next) {
			next = r->next;
			dpl__ucx_release_ucp(p, r->ucp, r->recv);
			r->ucp = NULL;
			r->status = DPL_ECANCELED;
			dpl__ucx_unlink_req(p, r);
		}
		dpl__ucx_release_ucp(p, p->crreq, true);
		dpl__ucx_release_ucp(p, p->beat_req, false);
		dpl__ucx_release_ucp(p, p->bye_req, false);
		dpl__ucx_release_ucp(p, p->flush_req, false);
		p->crreq = p->beat_req = p->bye_req = p->flush_req = NULL;
		if (p->w != NULL)
			ucp_worker_destroy(p->w); /* closes p->ep */
		p->w = NULL;
		p->ep = NULL;
	}
	if (c->uc != NULL)
		ucp_cleanup(c->uc);
	c->uc = NULL;
	free(c->peers);
	c->peers = NULL;
	free(c->pfd);
	c->pfd = NULL;
}

void dpl__ucx_fini(void *vctx)
{
	teardown(vctx, true);
}

static int config_set(ucp_config_t *cfg, const char *name, const char *value)
{
	ucs_status_t st = ucp_config_modify(cfg, name, value);

	if (st != UCS_OK)
		return dpl_set_error(DPL_EINVAL, "ucx: UCX_%s=%s: %s", name,
				     value, ucs_status_string(st));
	return 0;
}

/* Whether a UCX_TLS list ("a,b", "^a,b", items maybe with ":aux") may
 * select the posix or sysv transports. */
static bool tls_has_shm(const char *tls)
{
	bool negate, posix = false, sysv = false;
	const char *s;

	if (tls == NULL || *tls == '\0')
		return true; /* UCX's default is all */
	negate = *tls == '^';
	for (s = tls + negate; *s != '\0';) {
		size_t item = strcspn(s, ","), n = strcspn(s, ",:");

		if (n > item)
			n = item;
		if ((n == 3 && strncmp(s, "all", 3) == 0) ||
		    (n == 2 && strncmp(s, "sm", 2) == 0) ||
		    (n == 3 && strncmp(s, "shm", 3) == 0) ||
		    (n == 2 && strncmp(s, "mm", 2) == 0))
			posix = sysv = true;
		else if (n == 5 && strncmp(s, "posix", 5) == 0)
			posix = true;
		else if (n == 4 && strncmp(s, "sysv", 4) == 0)
			sysv = true;
		s += item;
		if (*s == ',')
			s++;
	}
	return negate ? !(posix && sysv) : (posix || sysv);
}

void dpl__ucx_params(ucp_params_t *prm)
{
	memset(prm, 0, sizeof *prm);
	prm->field_mask = UCP_PARAM_FIELD_FEATURES |
			  UCP_PARAM_FIELD_REQUEST_SIZE |
			  UCP_PARAM_FIELD_MT_WORKERS_SHARED |
			  UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
	prm->features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
	prm->request_size = sizeof(struct recv_note);
	prm->mt_workers_shared = 0;
	prm->estimated_num_eps = 1;
}

int dpl__ucx_config(const struct dpl__ucx_options *o, ucp_config_t **out)
{
	ucp_config_t *cfg;
	ucs_status_t st;
	int rc = 0;

	*out = NULL;
	st = ucp_config_read(NULL, NULL, &cfg);
	if (st != UCS_OK)
		return dpl_set_error(DPL_EINVAL, "ucx: reading the UCX_* "
				     "environment: %s",
				     ucs_status_string(st));
	if (o->tls[0] != '\0')
		rc = config_set(cfg, "TLS", o->tls);
	if (rc == 0 && o->net_devices[0] != '\0')
		rc = config_set(cfg, "NET_DEVICES", o->net_devices);
	else if (rc == 0 && getenv("UCX_NET_DEVICES") == NULL)
		rc = config_set(cfg, "NET_DEVICES", "lo");
	if (rc != 0) {
		ucp_config_release(cfg);
		return rc;
	}
	*out = cfg;
	return 0;
}

/* The UCP context: dpl__ucx_config, plus the error mode's settings. */
static int open_context(struct ctx *c)
{
	ucp_params_t prm;
	ucp_config_t *cfg;
	ucs_status_t st;
	char ka[32];
	int rc;

	if ((rc = dpl__ucx_config(&c->opt, &cfg)) != 0)
		return rc;
	if (c->opt.err_mode == DPL__UCX_ERR_PEER) {
		/* posix and sysv inherit MM_ERROR_HANDLING; naming it only
		 * when they may be selected keeps UCX from warning about an
		 * unused setting. */
		if (tls_has_shm(c->opt.tls[0] ? c->opt.tls
					      : getenv("UCX_TLS")) &&
		    getenv("UCX_MM_ERROR_HANDLING") == NULL &&
		    getenv("UCX_POSIX_ERROR_HANDLING") == NULL &&
		    getenv("UCX_SYSV_ERROR_HANDLING") == NULL)
			rc = config_set(cfg, "MM_ERROR_HANDLING", "y");
		snprintf(ka, sizeof ka, "%llums",
			 (unsigned long long)(c->beat_every_ns / MS));
		if (rc == 0 && getenv("UCX_KEEPALIVE_INTERVAL") == NULL)
			rc = config_set(cfg, "KEEPALIVE_INTERVAL", ka);
	}
	if (rc != 0) {
		ucp_config_release(cfg);
		return rc;
	}
	dpl__ucx_params(&prm);
	st = ucp_init(&prm, cfg, &c->uc);
	ucp_config_release(cfg);
	if (st != UCS_OK) {
		c->uc = NULL;
		rc = dpl__ucx_status(st) == DPL_ENOMEM ? DPL_ENOMEM : DPL_EIO;
		return dpl_set_error(rc, "ucx: ucp_init: %s",
				     ucs_status_string(st));
	}
	return 0;
}

static bool hellos_in(struct ctx *c)
{
	uint64_t now = dpl_clock_ns();
	uint32_t j;
	bool all = true;

	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];

		if (j == c->rank)
			continue;
		dpl__ucx_ctrl_poll(c, p, now);
		dpl__ucx_ctrl_reap(&p->beat_req);
		if (p->dead || p->failed != UCS_OK)
			return true; /* reported by the caller */
		all &= p->hello && p->beat_req == NULL;
	}
	return all;
}

/* Say hello to every peer and wait for all of theirs: connects every
 * lane now, so the first message is fast and a dead end shows here. */
static int greet(struct ctx *c)
{
	uint64_t now = dpl_clock_ns();
	uint32_t j;

	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];

		if (j == c->rank)
			continue;
		p->heard_ns = p->beat_ns = now;
		dpl__ucx_ctrl_post_recv(c, p);
		dpl__ucx_ctrl_send(c, p, CTRL_HELLO, &p->beat_buf,
				   &p->beat_req);
	}
	drain(c, hellos_in, (uint64_t)c->timeout_ms * MS);
	for (j = 0; j < c->world; j++) {
		struct peer *p = &c->peers[j];

		if (j == c->rank)
			continue;
		if (p->dead)
			return dpl_set_error(DPL_EIO, "ucx: rank %u failed "
					     "while connecting: %s", j, p->why);
		if (p->failed != UCS_OK)
			return dpl_set_error(DPL_EIO, "ucx: rank %u failed "
					     "while connecting: %s", j,
					     ucs_status_string(p->failed));
		if (!p->hello)
			return dpl_set_error(DPL_ETIMEDOUT, "ucx: no hello "
					     "from rank %u within %u ms",
					     j, c->timeout_ms);
	}
	return 0;
}

/*
 * Join the job: options, a UCP context and a worker per peer, the
 * address exchange and the hello round, then a barrier so that no rank
 * returns before every rank can be reached. p->oob is used only here.
 */
int dpl__ucx_init(void *vctx, const struct dpl_transport_params *p)
{
	struct ctx *c = vctx;
	ucp_worker_params_t wp;
	uint64_t now;
	uint32_t j;
	int rc;

	memset(c, 0, sizeof *c);
	if (p->reserved0 != 0)
		return dpl_set_error(DPL_EINVAL, "ucx: reserved0 is %u "
				     "(must be 0)", p->reserved0);
	if (p->oob == NULL || p->oob->allgather == NULL ||
	    p->oob->barrier == NULL)
		return dpl_set_error(DPL_EINVAL, "ucx: init needs the host's "
				     "out-of-band exchange (params.oob)");
	if ((rc = dpl__ucx_options_parse(p->options, &c->opt)) != 0)
		return rc;
	c->rank = p->rank;
	c->world = p->world_size;
	c->timeout_ms = p->timeout_ms ? p->timeout_ms : DEFAULT_TIMEOUT_MS;
	c->liveness_ns = (uint64_t)c->timeout_ms * MS;
	c->beat_every_ns = c->liveness_ns / 8;
	if (c->beat_every_ns < BEAT_MIN_NS)
		c->beat_every_ns = BEAT_MIN_NS;
	if (c->beat_every_ns > BEAT_MAX_NS)
		c->beat_every_ns = BEAT_MAX_NS;
	c->peers = calloc(c->world, sizeof *c->peers);
	c->pfd = calloc(c->world, sizeof *c->pfd);
	if (c->peers == NULL || c->pfd == NULL)
		return dpl_set_error(DPL_ENOMEM, "ucx: out of memory for "
				     "%u peers", c->world);
	for (j = 0; j < c->world; j++) {
		c->peers[j].c = c;
		c->peers[j].rank = j;
	}
	if (c->world == 1)
		return 0; /* nobody to talk to */
	c->self_ok = dpl__ucx_ident_self(&c->self) == 0;
	if ((rc = open_context(c)) != 0)
		goto fail;
	memset(&wp, 0, sizeof wp);
	/* One thread at a time, not always the same one (the contract). */
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
	for (j = 0; j < c->world; j++) {
		ucs_status_t st;

		if (j == c->rank)
			continue;
		st = ucp_worker_create(c->uc, &wp, &c->peers[j].w);
		if (st != UCS_OK) {
			c->peers[j].w = NULL;
			rc = dpl_set_error(DPL_EIO, "ucx: worker for rank "
					   "%u: %s", j,
					   ucs_status_string(st));
			goto fail;
		}
		st = ucp_worker_get_efd(c->peers[j].w, &c->peers[j].efd);
		if (st != UCS_OK) {
			rc = dpl_set_error(DPL_EIO, "ucx: wake-up descriptor "
					   "of the worker for rank %u: %s", j,
					   ucs_status_string(st));
			goto fail;
		}
	}
	if ((rc = dpl__ucx_exchange(c, p->oob)) != 0)
		goto fail;
	for (j = 0; j < c->world; j++)
		c->peers[j].pid_check =
			j != c->rank && c->self_ok &&
			dpl__ucx_same_pids(&c->self, &c->peers[j].id) &&
			dpl__ucx_proc_state(&c->peers[j].id) == 1;
	if ((rc = greet(c)) != 0)
		goto fail;
	if ((rc = p->oob->barrier(p->oob->user)) != 0)
		goto fail;
	now = dpl_clock_ns();
	c->last_progress_ns = now;
	c->next_sweep_ns = now;
	c->ncomp = 0;
	return 0;
fail:
	teardown(c, false);
	return rc;
}

