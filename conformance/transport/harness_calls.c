/*
 * harness_calls.c - the checked calls of rank code: every code a call
 * returns must be 0, DPL_EAGAIN or a dpl error, and progress must not
 * fail (conf_check_code, also the check of test_job's waits in a
 * battery job); posts retry DPL_EAGAIN with test_job's idle turns (and
 * a set's tests) until the rank's deadline. Everything goes through the
 * checked layer of dpl/transport.h, never the table.
 */
#define _GNU_SOURCE
#include <string.h>

#include "harness_internal.h"

static bool known_code(int rc)
{
	if (rc == 0 || rc == DPL_EUNKNOWN)
		return true;
	return rc < 0 && strcmp(dpl_err_name(rc), "DPL_EUNKNOWN") != 0;
}

int conf_check_code(struct tj_rank *rk, int rc, const char *what)
{
	/* progress returns how many requests it completed */
	bool progress = strcmp(what, "progress") == 0;

	if (!known_code(rc) && !(progress && rc > 0))
		TJ_FAIL(rk, "%s returned %d, which is not a dpl error code "
			    "(backends map their errors to DPL_E*)",
			what, rc);
	if (progress && rc < 0)
		TJ_FAIL(rk, "progress failed: %s (%s)", dpl_err_name(rc),
			dpl_last_error());
	return rc;
}

static void post(struct tj_rank *rk, bool send, void *req, uint32_t peer,
		 uint64_t tag, void *buf, size_t len, struct conf_set *s)
{
	const char *what = send ? "isend" : "irecv";
	struct tj_idle id = {0, 0};
	int rc;

	for (;;) {
		rc = send ? dpl_transport_isend(rk->t, req, peer, tag, buf,
						len, DPL_MEM_HOST)
			  : dpl_transport_irecv(rk->t, req, peer, tag, buf,
						len, DPL_MEM_HOST);
		conf_check_code(rk, rc, what);
		if (rc == 0)
			return;
		if (rc != DPL_EAGAIN)
			TJ_FAIL(rk, "%s peer %u tag %#llx len %zu: %s (%s)",
				what, peer, (unsigned long long)tag, len,
				dpl_err_name(rc), dpl_last_error());
		if (s != NULL)
			conf_set_poll(rk, s);
		tj_idle(rk, &id, what);
	}
}

void conf_send(struct tj_rank *rk, void *req, uint32_t peer, uint64_t tag,
	       const void *buf, size_t len, struct conf_set *s)
{
	post(rk, true, req, peer, tag, (void *)buf, len, s);
}

void conf_recv(struct tj_rank *rk, void *req, uint32_t peer, uint64_t tag,
	       void *buf, size_t len, struct conf_set *s)
{
	post(rk, false, req, peer, tag, buf, len, s);
}
