/*
 * hook.c - the shim transport (dpl/transport_hook.h): every operation
 * goes to an inner transport opened in init; the options add a trace,
 * delays, one injected failure and a peer that looks dead.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dpl/backend.h>
#include <dpl/transport_hook.h>

#define HOOK_NONE UINT32_MAX

enum { OP_POST, OP_ISEND, OP_IRECV, OP_TEST };

/* A request: what the shim keeps, then the inner transport's storage. */
struct hreq {
	uint32_t peer;      /* HOOK_NONE for an allreduce */
	uint32_t cancelled; /* cancelled here for a dropped peer */
	alignas(max_align_t) unsigned char inner[DPL_HOOK_INNER_REQ_MAX];
};

struct hctx {
	dpl_transport *inner;
	uint32_t rank;
	bool trace;
	uint32_t delay_us;
	uint64_t fail_after, counted; /* counted: operations of fail_op */
	uint32_t fail_op, fail_code;
	uint32_t drop_peer;
	uint64_t drop_after, posts;
	bool armed; /* the faults apply to this rank (hook.rank) */
};

static struct dpl_wrap_names names;

int dpl_transport_hook_register(const struct dpl_transport_ops *inner)
{
	return dpl_wrap_register(&names, "hook", inner);
}

static const char *const ops_names[] = {"post", "isend", "irecv", "test",
					NULL};
static const char *const code_names[] = {"eio", "epeer", "enomem",
					 "etimedout", NULL};
static const int codes[] = {DPL_EIO, DPL_EPEER, DPL_ENOMEM, DPL_ETIMEDOUT};

static int init_common(void *vctx, const struct dpl_transport_params *p,
		       bool threads)
{
	struct hctx *c = vctx;
	size_t n = p->options ? strlen(p->options) + 1 : 1;
	char *mine = malloc(n), *theirs = malloc(n), inner[4096] = "";
	bool have_inner = false;
	uint32_t code = 0, op = OP_POST, only = HOOK_NONE;
	int rc;

	memset(c, 0, sizeof *c);
	c->rank = p->rank;
	c->drop_peer = HOOK_NONE;
	if (mine == NULL || theirs == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "hook: out of memory");
		goto out;
	}
	dpl_wrap_split_options(p->options, "hook.", mine, theirs);
	{
		struct dpl_option t[] = {
		    {"hook.inner", DPL_OPT_TEXT, inner, 0, 0, sizeof inner,
		     NULL, &have_inner},
		    {"hook.trace", DPL_OPT_BOOL, &c->trace, 0, 0, 0, NULL, NULL},
		    {"hook.delay_us", DPL_OPT_U32, &c->delay_us, 0, 10000000, 0,
		     NULL, NULL},
		    {"hook.fail_after", DPL_OPT_U64, &c->fail_after, 0,
		     UINT64_MAX, 0, NULL, NULL},
		    {"hook.fail_op", DPL_OPT_ENUM, &op, 0, 0, 0, ops_names,
		     NULL},
		    {"hook.fail_code", DPL_OPT_ENUM, &code, 0, 0, 0, code_names,
		     NULL},
		    {"hook.drop_peer", DPL_OPT_U32, &c->drop_peer, 0,
		     HOOK_NONE - 1, 0, NULL, NULL},
		    {"hook.drop_after", DPL_OPT_U64, &c->drop_after, 0,
		     UINT64_MAX, 0, NULL, NULL},
		    {"hook.rank", DPL_OPT_U32, &only, 0, HOOK_NONE - 1, 0, NULL,
		     NULL},
		};

		if ((rc = dpl_options_parse("hook", mine, t,
					    sizeof t / sizeof t[0])) != 0)
			goto out;
	}
	c->fail_op = op;
	c->armed = only == HOOK_NONE || only == p->rank;
	c->fail_code = (uint32_t)codes[code];
	if (!have_inner) {
		rc = dpl_set_error(DPL_EINVAL, "hook: option hook.inner=NAME "
				   "(the transport to wrap) is required");
		goto out;
	}
	rc = dpl_wrap_open(&names, "hook", inner, DPL_HOOK_INNER_REQ_MAX,
			   "DPL_HOOK_INNER_REQ_MAX", threads, p, theirs,
			   &c->inner);
out:
	free(mine);
	free(theirs);
	return rc;
}

static int init_procs(void *ctx, const struct dpl_transport_params *p)
{
	return init_common(ctx, p, false);
}

static int init_threads(void *ctx, const struct dpl_transport_params *p)
{
	return init_common(ctx, p, true);
}

static void fini(void *vctx)
{
	struct hctx *c = vctx;

	dpl_transport_close(c->inner);
	c->inner = NULL;
}

static bool dropped(const struct hctx *c, uint32_t peer)
{
	return c->armed && peer == c->drop_peer && c->posts >= c->drop_after;
}

/* Count one operation of kind `op`; true when it is the one to fail. */
static bool fails(struct hctx *c, int op)
{
	bool match = c->fail_op == (uint32_t)op ||
		     (c->fail_op == OP_POST && (op == OP_ISEND || op == OP_IRECV));

	return c->armed && match && c->fail_after != 0 &&
	       ++c->counted == c->fail_after;
}

static int traced(const struct hctx *c, const char *what, uint32_t peer,
		  uint64_t tag, size_t len, int rc)
{
	if (c->trace)
		fprintf(stderr, "hook rank %u: %s peer %u tag %#llx %zu B: %d\n",
			c->rank, what, peer, (unsigned long long)tag, len, rc);
	return rc;
}

static int post(struct hctx *c, struct hreq *q, bool send, uint32_t peer,
		uint64_t tag, void *buf, size_t len, uint32_t mem)
{
	const char *what = send ? "isend" : "irecv";
	int rc;

	if (c->delay_us > 0) {
		struct timespec ts = {c->delay_us / 1000000,
				      (long)(c->delay_us % 1000000) * 1000};

		nanosleep(&ts, NULL);
	}
	if (dropped(c, peer))
		return traced(c, what, peer, tag, len,
			      dpl_set_error(DPL_EPEER, "hook: rank %u is "
					    "dropped", peer));
	if (fails(c, send ? OP_ISEND : OP_IRECV))
		return traced(c, what, peer, tag, len,
			      dpl_set_error((int)c->fail_code, "hook: %s to "
					    "rank %u failed as asked "
					    "(hook.fail_after=%llu)",
					    what, peer,
					    (unsigned long long)c->fail_after));
	q->peer = peer;
	q->cancelled = 0;
	rc = send ? dpl_transport_isend(c->inner, q->inner, peer, tag, buf,
					len, mem)
		  : dpl_transport_irecv(c->inner, q->inner, peer, tag, buf,
					len, mem);
	if (rc == 0)
		c->posts++;
	return traced(c, what, peer, tag, len, rc);
}

static int isend(void *ctx, void *req, uint32_t peer, uint64_t tag,
		 const void *buf, size_t len, uint32_t mem)
{
	return post(ctx, req, true, peer, tag, (void *)buf, len, mem);
}

static int irecv(void *ctx, void *req, uint32_t peer, uint64_t tag,
		 void *buf, size_t len, uint32_t mem)
{
	return post(ctx, req, false, peer, tag, buf, len, mem);
}

static int test(void *vctx, void *req)
{
	struct hctx *c = vctx;
	struct hreq *q = req;
	int rc = dpl_transport_test(c->inner, q->inner);

	if (rc == DPL_EAGAIN) {
		/* A request with a dropped peer ends as if the peer died. */
		if (q->peer != HOOK_NONE && dropped(c, q->peer) &&
		    !q->cancelled) {
			q->cancelled = 1;
			dpl_transport_cancel(c->inner, q->inner);
		}
		return rc;
	}
	if (q->peer != HOOK_NONE && dropped(c, q->peer))
		rc = dpl_set_error(DPL_EPEER, "hook: rank %u is dropped",
				   q->peer);
	else if (fails(c, OP_TEST))
		rc = dpl_set_error((int)c->fail_code, "hook: a completion "
				   "from rank %u failed as asked "
				   "(hook.fail_after=%llu)",
				   q->peer, (unsigned long long)c->fail_after);
	return traced(c, "test", q->peer, 0, 0, rc);
}

static int progress(void *vctx)
{
	return dpl_transport_progress(((struct hctx *)vctx)->inner);
}

static int cancel(void *vctx, void *req)
{
	struct hctx *c = vctx;
	struct hreq *q = req;

	return traced(c, "cancel", q->peer, 0, 0,
		      dpl_transport_cancel(c->inner, q->inner));
}

static int wait_for(void *vctx, uint64_t timeout_ns)
{
	return dpl_transport_wait(((struct hctx *)vctx)->inner, timeout_ns);
}

#define HOOK_TABLE(init_fn, extra_caps)                                      \
	{                                                                    \
		.abi_version = DPL_TRANSPORT_ABI_VERSION,                    \
		.size = sizeof(struct dpl_transport_ops), .name = "hook",    \
		.caps = DPL_TRANSPORT_CAP_PEER_FAILURE | (extra_caps),       \
		.ctx_size = sizeof(struct hctx),                             \
		.req_size = sizeof(struct hreq), .init = init_fn,            \
		.fini = fini, .isend = isend, .irecv = irecv, .test = test,  \
		.progress = progress, .cancel = cancel, .wait = wait_for,    \
	}

DPL_EXTERN const struct dpl_transport_ops dpl_transport_hook =
	HOOK_TABLE(init_procs, 0);
DPL_EXTERN const struct dpl_transport_ops dpl_transport_hook_threads =
	HOOK_TABLE(init_threads, DPL_TRANSPORT_CAP_IN_PROCESS);

DPL_TRANSPORT_PLUGIN(dpl_transport_hook);
