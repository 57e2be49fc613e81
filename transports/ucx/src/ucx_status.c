/*
 * ucx_status.c - the one place where UCS statuses become dpl codes.
 */
#include <dpl/common.h>

#include "ucx_internal.h"

int dpl__ucx_status(ucs_status_t st)
{
	if (st <= UCS_ERR_FIRST_LINK_FAILURE && st > UCS_ERR_LAST)
		return DPL_EPEER; /* link and endpoint failures */
	switch (st) {
	case UCS_OK:
		return 0;
	case UCS_INPROGRESS:
	case UCS_ERR_NO_RESOURCE:
		return DPL_EAGAIN;
	case UCS_ERR_MESSAGE_TRUNCATED:
	case UCS_ERR_BUFFER_TOO_SMALL:
		return DPL_ETRUNC;
	case UCS_ERR_CANCELED:
		return DPL_ECANCELED;
	case UCS_ERR_UNREACHABLE:
	case UCS_ERR_CONNECTION_RESET:
	case UCS_ERR_NOT_CONNECTED:
	case UCS_ERR_REJECTED:
	case UCS_ERR_SOME_CONNECTS_FAILED:
		return DPL_EPEER;
	case UCS_ERR_NO_MEMORY:
		return DPL_ENOMEM;
	case UCS_ERR_INVALID_PARAM:
	case UCS_ERR_INVALID_ADDR:
		return DPL_EINVAL;
	case UCS_ERR_NOT_IMPLEMENTED:
	case UCS_ERR_UNSUPPORTED:
		return DPL_ENOTSUP;
	case UCS_ERR_TIMED_OUT:
		return DPL_ETIMEDOUT;
	case UCS_ERR_BUSY:
	case UCS_ERR_ALREADY_EXISTS:
		return DPL_EBUSY;
	case UCS_ERR_OUT_OF_RANGE:
	case UCS_ERR_EXCEEDS_LIMIT:
		return DPL_ERANGE;
	case UCS_ERR_NO_ELEM:
	case UCS_ERR_NO_MESSAGE:
		return DPL_ENOENT;
	case UCS_ERR_IO_ERROR:
	case UCS_ERR_NO_PROGRESS:
	case UCS_ERR_NO_DEVICE:
	case UCS_ERR_SHMEM_SEGMENT:
		return DPL_EIO;
	default:
		return DPL_EUNKNOWN;
	}
}
