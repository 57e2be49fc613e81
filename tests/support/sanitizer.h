/*
 * sanitizer.h - which sanitizers this translation unit is built with,
 * as GCC (__SANITIZE_ADDRESS__, __SANITIZE_THREAD__) and Clang
 * (__has_feature) each say it: DPL_TEST_ASAN and DPL_TEST_TSAN are
 * defined to 1 when on, undefined otherwise.
 */
#ifndef DPL_TEST_SANITIZER_H
#define DPL_TEST_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define DPL_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DPL_TEST_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define DPL_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DPL_TEST_TSAN 1
#endif
#endif

#endif /* DPL_TEST_SANITIZER_H */
