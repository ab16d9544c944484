/* The assertions of the C unit tests (test-only):
 * - CHECK(cond[, fmt, ...]) counts a pass or a failure, printing the failure's place, condition
 *   and message, and goes on;
 * - REQUIRE(cond) / REQUIRE_OK(expr), in a test function returning int, print the failure with
 *   the library's last error message and return 1; RUN(fn) runs such a function and counts it;
 * - check_summary() prints the counts: main's exit status (0: nothing failed). */
#ifndef IPU_TEST_CHECK_H
#define IPU_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>

#include "ipu/ipu.h"

static int passed, failed;

__attribute__((format(printf, 4, 5), unused)) static void check_failed(const char *file, int line,
                                                                       const char *cond,
                                                                       const char *fmt, ...) {
    failed++;
    printf("%s:%d: FAILED: %s:", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* The message is optional: " " starts the format either way. */
#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (cond)                                                     \
            passed++;                                                 \
        else                                                          \
            check_failed(__FILE__, __LINE__, #cond, " " __VA_ARGS__); \
    } while (0)

#define REQUIRE(cond)                                                                            \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            printf("  %s:%d: REQUIRE failed: %s\n  last error: %s\n", __FILE__, __LINE__, #cond, \
                   ipu_last_error_message());                                                    \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)
#define REQUIRE_OK(expr) REQUIRE((expr) == IPU_OK)

#define RUN(fn)                       \
    do {                              \
        if (fn()) {                   \
            failed++;                 \
            printf("FAIL %s\n", #fn); \
        } else {                      \
            passed++;                 \
            printf("ok   %s\n", #fn); \
        }                             \
        fflush(stdout);               \
    } while (0)

__attribute__((unused)) static int check_summary(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
