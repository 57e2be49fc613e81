/*
 * test_ucx_unit.c - the UCX module's parts that need no peer: the table,
 * the UCS status mapping, the options string, process identities and the
 * /proc liveness check, the address exchange's pieces over the host's
 * out-of-band exchange, and init's argument checks.
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
#include <dpl/transport_ucx.h>

#include "ucx_internal.h"

static const struct dpl_transport_ops *O = &dpl_transport_ucx;

/* The out-of-band exchange of a world of one: it counts its calls. */
static int solo_calls;

static int solo_allgather(void *user, const void *mine, size_t len,
			  void *all)
{
	solo_calls++;
	memcpy(all, mine, len);
	return 0;
}

static int solo_barrier(void *user)
{
	solo_calls++;
	return 0;
}

static const struct dpl_oob solo_oob = {solo_allgather, solo_barrier, NULL};

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
	/* optional members are found by DPL_HAS_OP, not by caps bits */
	cr_assert(DPL_HAS_OP(O, wait));
	cr_assert_not(DPL_HAS_OP(O, iallreduce));
	cr_assert_eq(O->caps & ~(uint64_t)(DPL_TRANSPORT_CAP_PEER_FAILURE |
					   DPL_TRANSPORT_CAP_MEM_CUDA), 0,
		     "caps %#llx holds bits no ABI defines",
		     (unsigned long long)O->caps);
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
	p.oob = &solo_oob; /* never reached: the checks come first */
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
	cr_assert_eq(solo_calls, 0, "a refused open used the exchange");
}

Test(ucx_unit, open_without_the_hosts_exchange_is_einval)
{
	struct dpl_transport_params p = {0};
	dpl_transport *t = NULL;
	uint32_t n;

	for (n = 1; n <= 2; n++) {
		p.rank = 0;
		p.world_size = n;
		p.oob = NULL;
		cr_assert_eq(dpl_transport_open(O, &p, &t), DPL_EINVAL,
			     "world of %u", n);
		cr_assert_null(t);
		cr_assert(strstr(dpl_last_error(), "ucx") != NULL, "%s",
			  dpl_last_error());
		cr_assert(strstr(dpl_last_error(), "params.oob") != NULL,
			  "%s", dpl_last_error());
	}
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
	p.oob = &solo_oob;
	solo_calls = 0;
	cr_assert_eq(dpl_transport_open(O, &p, &t), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(solo_calls, 0, "a world of one used the exchange");
	/* through the checked layer, which refuses them for every backend */
	cr_assert_eq(dpl_transport_isend(t, req, 0, 1, buf, 8, DPL_MEM_HOST),
		     DPL_EINVAL);
	cr_assert_eq(dpl_transport_irecv(t, req, 1, 1, buf, 8, DPL_MEM_HOST),
		     DPL_EINVAL);
	cr_assert_geq(dpl_transport_progress(t), 0);
	cr_assert_eq(dpl_transport_wait(t, 1000000), 0);
	dpl_transport_close(t);
}

/*
 * A fake exchange for rank `me` of FAKE_WORLD: its allgather returns
 * what every other rank would have sent at the same offset of the same
 * round (a pattern of rank and offset), checks the length limit and
 * counts the calls.
 */
#define FAKE_WORLD 3u

struct fake_oob {
	uint32_t me;
	size_t off; /* bytes of the round gathered so far */
	int calls;
	bool too_long;
};

static unsigned char fake_byte(uint32_t rank, size_t at)
{
	return (unsigned char)(rank * 61u + at * 7u + (at >> 8));
}

static int fake_allgather(void *user, const void *mine, size_t len,
			  void *all)
{
	const unsigned char *in = mine;
	struct fake_oob *f = user;
	unsigned char *out = all;
	uint32_t r;
	size_t i;

	f->calls++;
	if (len == 0 || len > DPL_OOB_BLOB_MAX)
		f->too_long = true;
	for (r = 0; r < FAKE_WORLD; r++)
		for (i = 0; i < len; i++)
			out[r * len + i] =
				r == f->me ? in[i] : fake_byte(r, f->off + i);
	f->off += len;
	return 0;
}

static int fake_barrier(void *user)
{
	return 0;
}

Test(ucx_unit, oob_gather_splits_long_slots_and_keeps_one_rank)
{
	static const size_t lens[] = {4, 100, DPL_OOB_BLOB_MAX,
				      DPL_OOB_BLOB_MAX + 1,
				      2 * DPL_OOB_BLOB_MAX + 1808};
	unsigned char *mine, *got, *tmp;
	struct fake_oob f;
	struct dpl_oob oob = {fake_allgather, fake_barrier, &f};
	size_t k, i, len;

	tmp = malloc(FAKE_WORLD * DPL_OOB_BLOB_MAX);
	cr_assert_not_null(tmp);
	for (k = 0; k < sizeof lens / sizeof lens[0]; k++) {
		len = lens[k];
		mine = malloc(len);
		got = malloc(len);
		cr_assert(mine != NULL && got != NULL);
		for (i = 0; i < len; i++)
			mine[i] = fake_byte(1, i);
		memset(&f, 0, sizeof f);
		f.me = 1;
		memset(got, 0, len);
		cr_assert_eq(dpl__ucx_oob_gather(&oob, mine, len, 2, got, tmp),
			     0);
		cr_assert_not(f.too_long, "%zu bytes: a piece beyond %d",
			      len, DPL_OOB_BLOB_MAX);
		cr_assert_eq(f.calls,
			     (int)((len + DPL_OOB_BLOB_MAX - 1) /
				   DPL_OOB_BLOB_MAX),
			     "%zu bytes in %d allgathers", len, f.calls);
		for (i = 0; i < len; i++)
			cr_assert_eq(got[i], fake_byte(2, i),
				     "%zu bytes: byte %zu is not rank 2's",
				     len, i);
		/* its own contribution comes back as it went */
		memset(&f, 0, sizeof f);
		f.me = 1;
		cr_assert_eq(dpl__ucx_oob_gather(&oob, mine, len, 1, got, tmp),
			     0);
		cr_assert_eq(memcmp(got, mine, len), 0);
		free(mine);
		free(got);
	}
	free(tmp);
}
