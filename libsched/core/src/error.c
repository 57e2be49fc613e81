/* error.c - the error table's translations and the per-thread message. */
#include <stdio.h>

#include "internal.h"

static _Thread_local char last_error[512];

const char *dpl_strerror(int err)
{
	switch (err) {
	case DPL_OK:
		return "success";
#define DPL__ERR_MSG(name, value, msg)                                        \
	case DPL_##name:                                                      \
		return msg;
		DPL_ERR_MAP(DPL__ERR_MSG)
#undef DPL__ERR_MSG
	default:
		return "unknown error";
	}
}

const char *dpl_err_name(int err)
{
	switch (err) {
	case DPL_OK:
		return "DPL_OK";
#define DPL__ERR_NAME(name, value, msg)                                       \
	case DPL_##name:                                                      \
		return "DPL_" #name;
		DPL_ERR_MAP(DPL__ERR_NAME)
#undef DPL__ERR_NAME
	default:
		return "DPL_EUNKNOWN";
	}
}

const char *dpl_last_error(void)
{
	return last_error;
}

const char *dpl_version(void)
{
	return DPL_VERSION_STRING;
}

void dpl__clear_error(void)
{
	last_error[0] = '\0';
}

int dpl__verror(int code, const char *fmt, va_list ap)
{
	vsnprintf(last_error, sizeof last_error, fmt, ap);
	return code;
}

int dpl_set_error(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	dpl__verror(code, fmt, ap);
	va_end(ap);
	return code;
}
