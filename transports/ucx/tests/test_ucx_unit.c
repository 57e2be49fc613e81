/*
 * test_ucx_unit.c - the UCX module's parts that need no peer: the table,
 * the UCS status mapping, the options string, process identities and the
 * /proc liveness check, and init's argument checks.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dpl/transport.h>

#include "ucx_internal.h"

extern const struct dpl_transport_ops dpl_transport_ucx;

static const struct dpl_transport_ops *O = &dpl_transport_ucx;

Test(ucx_unit, table_is_versioned_and_complete)
{
	cr_assert_eq(O->abi_version, DPL_TRANSPORT_ABI_VERSION);
	cr_assert_eq(O->size, sizeof(struct dpl_transport_ops));
	cr_assert_str_eq(O->name, "ucx");
	cr_assert(O->caps & DPL_TRANSPORT_CAP_PEER_FAILURE);
	cr_assert_eq(O->caps & DPL_TRANSPORT_CAP_MEM_CUDA, 0);
	cr_assert_geq(O->req_size, 1);
	cr_assert_geq(O->ctx_size, 1);
	cr_assert(O->init && O->fini && O->isend && O->irecv && O->test &&
		  O->progress && O->cancel);
}

Test(ucx_unit, status_mapping_covers_every_ucs_value)
{
	static const struct {
		ucs_status_t st;
		int want;
	} map[] = {
		{UCS_OK, 0},
		{UCS_INPROGRESS, DPL_EAGAIN},
		{UCS_ERR_NO_RESOURCE, DPL_EAGAIN},
		{UCS_ERR_MESSAGE_TRUNCATED, DPL_ETRUNC},
		{UCS_ERR_CANCELED, DPL_ECANCELED},
		{UCS_ERR_UNREACHABLE, DPL_EPEER},
		{UCS_ERR_CONNECTION_RESET, DPL_EPEER},
		{UCS_ERR_NOT_CONNECTED, DPL_EPEER},
		{UCS_ERR_REJECTED, DPL_EPEER},
		{UCS_ERR_ENDPOINT_TIMEOUT, DPL_EPEER},
		{UCS_ERR_FIRST_LINK_FAILURE, DPL_EPEER},
		{UCS_ERR_LAST_ENDPOINT_FAILURE, DPL_EPEER},
		{UCS_ERR_NO_MEMORY, DPL_ENOMEM},
		{UCS_ERR_INVALID_PARAM, DPL_EINVAL},
		{UCS_ERR_UNSUPPORTED, DPL_ENOTSUP},
		{UCS_ERR_TIMED_OUT, DPL_ETIMEDOUT},
		{UCS_ERR_BUSY, DPL_EBUSY},
		{UCS_ERR_OUT_OF_RANGE, DPL_ERANGE},
		{UCS_ERR_IO_ERROR, DPL_EIO},
		{UCS_ERR_NO_DEVICE, DPL_EIO},
		{UCS_ERR_SHMEM_SEGMENT, DPL_EIO},
	};
	const char *name;
	size_t i;
	int v;

	for (i = 0; i < sizeof map / sizeof map[0]; i++)
		cr_expect_eq(dpl__ucx_status(map[i].st), map[i].want,
			     "%s -> %s, want %s", ucs_status_string(map[i].st),
			     dpl_err_name(dpl__ucx_status(map[i].st)),
			     dpl_err_name(map[i].want));
	/* Every value UCS can hold maps to a dpl code, never through. */
	for (v = -200; v <= 1; v++) {
		int rc = dpl__ucx_status((ucs_status_t)v);

		name = dpl_err_name(rc);
		cr_assert(rc == 0 || strcmp(name, "DPL_EUNKNOWN") != 0 ||
				  rc == DPL_EUNKNOWN,
			  "status %d gave %d, not a dpl code", v, rc);
		cr_assert(rc <= 0, "status %d gave positive %d", v, rc);
		cr_assert(v == 0 || rc != 0, "status %d mapped to success", v);
	}
	cr_assert_eq(dpl__ucx_status((ucs_status_t)-33), DPL_EUNKNOWN);
	cr_assert_eq(dpl__ucx_status((ucs_status_t)-150), DPL_EUNKNOWN);
}

Test(ucx_unit, options_parse_keys_lists_and_errors)
{
	struct dpl__ucx_options o;

	cr_assert_eq(dpl__ucx_options_parse(NULL, &o), 0);
	cr_assert_eq(o.err_mode, DPL__UCX_ERR_NONE);
	cr_assert_str_eq(o.tls, "");
	cr_assert_eq(dpl__ucx_options_parse("", &o), 0);
	cr_assert_eq(dpl__ucx_options_parse("tls=sm,tcp,err_mode=peer,"
					    "net_devices=lo", &o), 0);
	cr_assert_str_eq(o.tls, "sm,tcp");
	cr_assert_eq(o.err_mode, DPL__UCX_ERR_PEER);
	cr_assert_str_eq(o.net_devices, "lo");
	cr_assert_eq(dpl__ucx_options_parse("err_mode=none", &o), 0);
	cr_assert_eq(o.err_mode, DPL__UCX_ERR_NONE);

	cr_assert_eq(dpl__ucx_options_parse("colour=red", &o), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "colour") != NULL, "%s",
		  dpl_last_error());
	cr_assert_eq(dpl__ucx_options_parse("err_mode=maybe", &o),
		     DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "maybe") != NULL, "%s",
		  dpl_last_error());
	cr_assert_eq(dpl__ucx_options_parse("sm", &o), DPL_EINVAL);
	cr_assert_eq(dpl__ucx_options_parse("tls=", &o), DPL_EINVAL);
	cr_assert_eq(dpl__ucx_options_parse("=tcp", &o), DPL_EINVAL);
	cr_assert_eq(dpl__ucx_options_parse("tls=tcp,", &o), DPL_EINVAL);
	cr_assert_eq(dpl__ucx_options_parse("err_mode=peer,sm", &o),
		     DPL_EINVAL);
}

Test(ucx_unit, option_values_longer_than_the_limit_are_refused)
{
	char s[DPL__UCX_OPT_VALUE_MAX + 16];
	struct dpl__ucx_options o;

	strcpy(s, "tls=");
	memset(s + 4, 'x', DPL__UCX_OPT_VALUE_MAX);
	s[4 + DPL__UCX_OPT_VALUE_MAX] = '\0';
	cr_assert_eq(dpl__ucx_options_parse(s, &o), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "longer") != NULL, "%s",
		  dpl_last_error());
}

Test(ucx_unit, identity_round_trips_and_names_this_process)
{
	struct dpl__ucx_ident a, b;
	unsigned char wire[DPL__UCX_IDENT_WIRE];

	cr_assert_eq(dpl__ucx_ident_self(&a), 0, "%s", dpl_last_error());
	cr_assert_eq(a.pid, (uint32_t)getpid());
	cr_assert_eq(strlen(a.boot_id), 36, "boot id '%s'", a.boot_id);
	cr_assert_gt(a.start, 0);
	dpl__ucx_ident_pack(&a, wire);
	memset(&b, 0x5a, sizeof b);
	dpl__ucx_ident_unpack(wire, &b);
	cr_assert_str_eq(b.boot_id, a.boot_id);
	cr_assert_eq(b.pid, a.pid);
	cr_assert_eq(b.start, a.start);
	cr_assert_eq(b.pidns_ino, a.pidns_ino);
	cr_assert_eq(b.pidns_dev, a.pidns_dev);
	cr_assert(dpl__ucx_same_pids(&a, &b));
	b.boot_id[0] = a.boot_id[0] == 'f' ? '0' : 'f';
	cr_assert_not(dpl__ucx_same_pids(&a, &b));
	b = a;
	b.pidns_ino++;
	cr_assert_not(dpl__ucx_same_pids(&a, &b));
	cr_assert_eq(dpl__ucx_proc_state(&a), 1);
}

Test(ucx_unit, proc_state_sees_live_zombie_reaped_and_reused_pids)
{
	unsigned char wire[DPL__UCX_IDENT_WIRE];
	struct dpl__ucx_ident child, reused;
	int fds[2], status, i, state = 1;
	pid_t pid;

	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct dpl__ucx_ident me;

		/* The child announces itself, as a rank does at init. */
		if (dpl__ucx_ident_self(&me) != 0)
			_exit(1);
		dpl__ucx_ident_pack(&me, wire);
		if (write(fds[1], wire, sizeof wire) != (ssize_t)sizeof wire)
			_exit(1);
		pause();
		_exit(0);
	}
	close(fds[1]);
	cr_assert_eq(read(fds[0], wire, sizeof wire), (ssize_t)sizeof wire);
	close(fds[0]);
	dpl__ucx_ident_unpack(wire, &child);
	cr_assert_eq(child.pid, (uint32_t)pid);
	cr_assert_eq(dpl__ucx_proc_state(&child), 1);
	reused = child;
	reused.start++;
	cr_assert_eq(dpl__ucx_proc_state(&reused), 0,
		     "another start time must read as a reused pid");
	kill(pid, SIGKILL);
	/* Killed but not reaped: a zombie, which is dead. */
	for (i = 0; i < 400 && state != 0; i++) {
		state = dpl__ucx_proc_state(&child);
		if (state != 0)
			nanosleep(&(struct timespec){0, 5000000}, NULL);
	}
	cr_assert_eq(state, 0, "a killed, unreaped child reads as alive");
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status));
	cr_assert_eq(dpl__ucx_proc_state(&child), 0);
}

Test(ucx_unit, open_refuses_bad_options_and_reserved_fields)
{
	struct dpl_transport_params p = {0};
	dpl_transport *t = NULL;

	p.rank = 0;
	p.world_size = 2;
	p.bootstrap = "127.0.0.1:1";
	p.options = "err_mode=sometimes";
	cr_assert_eq(dpl_transport_open(O, &p, &t), DPL_EINVAL);
	cr_assert_null(t);
	cr_assert(strstr(dpl_last_error(), "sometimes") != NULL, "%s",
		  dpl_last_error());
	p.options = NULL;
	p.reserved0 = 7;
	cr_assert_eq(dpl_transport_open(O, &p, &t), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "reserved0") != NULL, "%s",
		  dpl_last_error());
}

Test(ucx_unit, world_of_one_opens_and_refuses_posts_to_itself)
{
	struct dpl_transport_params p = {0};
	_Alignas(max_align_t) unsigned char req[256];
	dpl_transport *t = NULL;
	char buf[8] = {0};

	cr_assert_leq(O->req_size, sizeof req);
	p.rank = 0;
	p.world_size = 1;
	cr_assert_eq(dpl_transport_open(O, &p, &t), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(O->isend(dpl_transport_ctx(t), req, 0, 1, buf, 8,
			      DPL_MEM_HOST), DPL_EINVAL);
	cr_assert_eq(O->irecv(dpl_transport_ctx(t), req, 1, 1, buf, 8,
			      DPL_MEM_HOST), DPL_EINVAL);
	cr_assert_geq(O->progress(dpl_transport_ctx(t)), 0);
	dpl_transport_close(t);
}
