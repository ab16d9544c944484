/* Shared harness of the runtime, session, serving and overlap C tests: the assertions
 * (check.h: REQUIRE/RUN), a sleep helper, and the in-memory model builders. Test-only. */
#ifndef IPU_TEST_RUNTIME_HARNESS_H
#define IPU_TEST_RUNTIME_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "ipu/ipu.h"

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#include "runtime_models.h"

#endif
