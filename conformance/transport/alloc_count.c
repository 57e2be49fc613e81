/*
 * alloc_count.c - counting allocator hooks of the battery (harness.h,
 * conf_alloc_*): the battery's executable defines malloc, calloc,
 * realloc, free, posix_memalign, aligned_alloc and memalign, which
 * forward to glibc's own (__libc_malloc and its siblings) and, while a
 * rank has armed the count, count every call made in the process, by
 * the transport and whatever it calls. Defined in the executable, they
 * replace the allocator of every library it loads, a module loaded with
 * dpl_transport_load() included.
 *
 * Not built under AddressSanitizer or ThreadSanitizer, which replace the
 * allocator themselves, nor off glibc: conf_alloc_hooked() is then
 * false and the test that needs the count skips.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sanitizer.h"

#if defined(DPL_TEST_ASAN) || defined(DPL_TEST_TSAN) || !defined(__GLIBC__)
#define CONF_NO_HOOKS 1
#endif

static atomic_int armed;
static atomic_ullong calls;
static atomic_int first_kind; /* 1 + index in kinds[], 0: none yet */
static atomic_size_t first_size;
static _Atomic(uintptr_t) first_caller;

/* The code of the libraries DPL_CONF_ALLOC_ALLOW names, whose own calls
 * are counted apart (conf_alloc_reset() finds them). */
#define ALLOW_MAX 64
static uintptr_t allow_lo[ALLOW_MAX], allow_hi[ALLOW_MAX];
static atomic_int nallow;
static atomic_ullong allowed_calls;

__attribute__((unused)) static bool allowed(void *caller)
{
	int i, n = atomic_load_explicit(&nallow, memory_order_acquire);

	for (i = 0; i < n; i++)
		if ((uintptr_t)caller >= allow_lo[i] &&
		    (uintptr_t)caller < allow_hi[i])
			return true;
	return false;
}

/* Does the file name `path` contain one of the comma-separated `list`? */
static bool listed(const char *path, const char *list)
{
	const char *p = list, *base = strrchr(path, '/');
	size_t k;

	base = base != NULL ? base + 1 : path;
	while (*p != '\0') {
		k = strcspn(p, ",");
		if (k > 0 && memmem(base, strlen(base), p, k) != NULL)
			return true;
		p += k + (p[k] == ',');
	}
	return false;
}

static int scan_one(struct dl_phdr_info *info, size_t size, void *arg)
{
	int *n = arg, i;

	(void)size;
	if (info->dlpi_name == NULL || !listed(info->dlpi_name,
					       getenv("DPL_CONF_ALLOC_ALLOW")))
		return 0;
	for (i = 0; i < info->dlpi_phnum && *n < ALLOW_MAX; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD || (ph->p_flags & PF_X) == 0)
			continue;
		allow_lo[*n] = info->dlpi_addr + ph->p_vaddr;
		allow_hi[*n] = allow_lo[*n] + ph->p_memsz;
		(*n)++;
	}
	return 0;
}

static const char *const kinds[] = {"malloc", "calloc", "realloc", "free",
				    "posix_memalign", "aligned_alloc",
				    "memalign"};

#ifndef CONF_NO_HOOKS
#include <malloc.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t align, size_t n);

/* Count a call from `caller` (the return address in the code that
 * called the allocator). */
static void count(int kind, size_t n, void *caller)
{
	int none = 0;

	if (atomic_load_explicit(&armed, memory_order_relaxed) == 0)
		return;
	if (allowed(caller)) {
		atomic_fetch_add(&allowed_calls, 1);
		return;
	}
	if (atomic_fetch_add(&calls, 1) == 0 &&
	    atomic_compare_exchange_strong(&first_kind, &none, kind + 1)) {
		atomic_store(&first_size, n);
		atomic_store(&first_caller, (uintptr_t)caller);
	}
}

#define CALLER __builtin_extract_return_addr(__builtin_return_address(0))

#define CONF_HOOK __attribute__((visibility("default")))

CONF_HOOK void *malloc(size_t n)
{
	count(0, n, CALLER);
	return __libc_malloc(n);
}

CONF_HOOK void *calloc(size_t n, size_t size)
{
	count(1, n * size, CALLER);
	return __libc_calloc(n, size);
}

CONF_HOOK void *realloc(void *p, size_t n)
{
	count(2, n, CALLER);
	return __libc_realloc(p, n);
}

CONF_HOOK void free(void *p)
{
	if (p != NULL)
		count(3, 0, CALLER);
	__libc_free(p);
}

CONF_HOOK int posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	if (align < sizeof(void *) || (align & (align - 1)) != 0)
		return EINVAL;
	count(4, n, CALLER);
	p = __libc_memalign(align, n);
	if (p == NULL)
		return ENOMEM;
	*out = p;
	return 0;
}

CONF_HOOK void *aligned_alloc(size_t align, size_t n)
{
	count(5, n, CALLER);
	return __libc_memalign(align, n);
}

CONF_HOOK void *memalign(size_t align, size_t n)
{
	count(6, n, CALLER);
	return __libc_memalign(align, n);
}
#endif

bool conf_alloc_hooked(void)
{
#ifdef CONF_NO_HOOKS
	return false;
#else
	/* strdup allocates inside libc: seen only when the hooks replace
	 * the allocator of the libraries too. */
	char *volatile p;
	unsigned long long before = atomic_load(&calls);

	atomic_fetch_add(&armed, 1);
	p = strdup("dpl");
	atomic_fetch_sub(&armed, 1);
	free(p);
	if (atomic_load(&calls) == before)
		return false;
	conf_alloc_reset();
	return true;
#endif
}

void conf_alloc_reset(void)
{
	const char *allow = getenv("DPL_CONF_ALLOC_ALLOW");
	int n = 0;

	if (allow != NULL && *allow != '\0')
		dl_iterate_phdr(scan_one, &n);
	atomic_store_explicit(&nallow, n, memory_order_release);
	atomic_store(&allowed_calls, 0);
	atomic_store(&first_caller, 0);
	atomic_store(&calls, 0);
	atomic_store(&first_kind, 0);
	atomic_store(&first_size, 0);
}

void conf_alloc_arm(bool on)
{
	if (on)
		atomic_fetch_add(&armed, 1);
	else
		atomic_fetch_sub(&armed, 1);
}

unsigned long long conf_alloc_calls(char *first, size_t size)
{
	int k = atomic_load(&first_kind);
	void *caller = (void *)atomic_load(&first_caller);
	const char *lib = "?", *slash;
	Dl_info info;

	memset(&info, 0, sizeof info);
	if (caller != NULL && dladdr(caller, &info) != 0 &&
	    info.dli_fname != NULL) {
		slash = strrchr(info.dli_fname, '/');
		lib = slash != NULL ? slash + 1 : info.dli_fname;
	}
	if (first != NULL && size > 0) {
		if (k > 0)
			snprintf(first, size, "%s(%zu) from %s%s%s",
				 kinds[k - 1], (size_t)atomic_load(&first_size),
				 *lib ? lib : "the executable",
				 info.dli_sname && caller ? ", in " : "",
				 caller && info.dli_sname ? info.dli_sname : "");
		else
			snprintf(first, size, "none");
	}
	return atomic_load(&calls);
}

unsigned long long conf_alloc_allowed(void)
{
	return atomic_load(&allowed_calls);
}
