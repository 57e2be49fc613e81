/*
 * dpl/common.h - version, export macro and error vocabulary of dpl.
 *
 * Every dpl call returns an int: 0 on success or a negative DPL_E* code.
 * Codes that have an errno counterpart use its negated value (as libuv
 * does), the others live above 4000. One X-macro, DPL_ERR_MAP, generates
 * the enum, dpl_err_name() and dpl_strerror(), so the three never drift.
 *
 * A failing call also leaves a one-line message for the calling thread in
 * dpl_last_error(); a bad argument names itself there, e.g.
 * "stages must be >= 1 (got 0)".
 */
#ifndef DPL_COMMON_H
#define DPL_COMMON_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DPL_STATIC_DEFINE)
#define DPL_EXTERN
#elif defined(__GNUC__)
#define DPL_EXTERN __attribute__((visibility("default")))
#else
#define DPL_EXTERN
#endif

#define DPL_VERSION_MAJOR 0
#define DPL_VERSION_MINOR 1
#define DPL_VERSION_PATCH 0
#define DPL_VERSION_STRING "0.1.0"

/*
 * X(name, value, message). Values are negative; errno-backed ones reuse
 * the platform errno so that callers can compare with -errno.
 */
#define DPL_ERR_MAP(X)                                                        \
	X(EINVAL, -EINVAL, "invalid argument")                                \
	X(ENOMEM, -ENOMEM, "out of memory")                                   \
	X(ERANGE, -ERANGE, "value out of range")                              \
	X(EIO, -EIO, "input/output error")                                    \
	X(ENOENT, -ENOENT, "no such file or entry")                           \
	X(EAGAIN, -EAGAIN, "resource temporarily unavailable")                \
	X(ETIMEDOUT, -ETIMEDOUT, "operation timed out")                       \
	X(ECANCELED, -ECANCELED, "operation canceled")                        \
	X(ENOTSUP, -ENOTSUP, "operation not supported")                       \
	X(EBUSY, -EBUSY, "resource busy")                                     \
	X(EPARSE, -4001, "malformed input")                                   \
	X(ESCHED, -4002, "invalid schedule")                                  \
	X(EDEADLOCK, -4003, "schedule deadlocks")                             \
	X(ETRUNC, -4004, "message truncated")                                 \
	X(EPEER, -4005, "peer failed")                                        \
	X(ECALLBACK, -4006, "callback failed")                                \
	X(ENOFIT, -4007, "does not fit in device memory")                     \
	X(EABI, -4008, "incompatible ABI version")                            \
	X(EUNKNOWN, -4999, "unknown error")

/* The error codes. DPL_OK is 0; every other code is negative. */
enum dpl_err {
	DPL_OK = 0,
#define DPL__ERR_ENUM(name, value, msg) DPL_##name = (value),
	DPL_ERR_MAP(DPL__ERR_ENUM)
#undef DPL__ERR_ENUM
};

/*
 * dpl_strerror - the human message for an error code ("invalid schedule").
 * Returns a static string; never NULL. Unknown codes give "unknown error".
 * Thread-safe.
 */
DPL_EXTERN const char *dpl_strerror(int err);

/*
 * dpl_err_name - the symbolic name of an error code ("DPL_ESCHED").
 * Returns a static string; never NULL. Unknown codes give "DPL_EUNKNOWN".
 * Thread-safe.
 */
DPL_EXTERN const char *dpl_err_name(int err);

/*
 * dpl_last_error - the detailed message of the last failing dpl call made
 * by the calling thread, e.g. "stages must be >= 1 (got 0)".
 * Returns a thread-local string owned by dpl, valid until the thread's
 * next failing dpl call; "" when no call has failed on this thread.
 */
DPL_EXTERN const char *dpl_last_error(void);

/*
 * dpl_set_error - record a printf-style message as the calling thread's
 * dpl_last_error() and return `code` unchanged, so that a backend or a
 * sibling library writes `return dpl_set_error(DPL_EINVAL, "tag %llu
 * out of range", t);`. Never fails; long messages are truncated.
 */
DPL_EXTERN int dpl_set_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 2, 3)))
#endif
	;

/*
 * dpl_version - the library's version string ("0.1.0"); it may differ from
 * DPL_VERSION_STRING when a program runs against a newer shared library.
 */
DPL_EXTERN const char *dpl_version(void);

/*
 * dpl_clock_ns - nanoseconds of CLOCK_MONOTONIC: for deadlines and
 * timeouts, never for wall time. The one clock of dpl and its modules.
 * Does not block; thread-safe.
 */
DPL_EXTERN uint64_t dpl_clock_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* DPL_COMMON_H */
