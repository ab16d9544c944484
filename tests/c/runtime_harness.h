/* Shared harness of the runtime, session, serving and overlap C tests: CHECK/RUN macros that
 * count passes and failures, a sleep helper, and the in-memory model builders. Test-only. */
#ifndef IPU_TEST_RUNTIME_HARNESS_H
#define IPU_TEST_RUNTIME_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ipu/ipu.h"

static int g_pass, g_fail;

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "  %s:%d: CHECK failed: %s\n  last error: %s\n", __FILE__, __LINE__, \
                    #cond, ipu_last_error_message());                                            \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)
#define CHECK_OK(expr) CHECK((expr) == IPU_OK)
#define RUN(fn)                       \
    do {                              \
        int r_ = fn();                \
        if (r_) {                     \
            g_fail++;                 \
            printf("FAIL %s\n", #fn); \
        } else {                      \
            g_pass++;                 \
            printf("ok   %s\n", #fn); \
        }                             \
        fflush(stdout);               \
    } while (0)

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#include "runtime_models.h"

#endif
