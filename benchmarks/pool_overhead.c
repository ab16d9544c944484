/* Per-instruction dispatch cost of the worker pool (docs/threading.md).
 *
 *   cc -O2 -D_GNU_SOURCE -Iruntime_c/src -Iruntime_c/include -Iruntime_c/include/ipu \
 *      benchmarks/pool_overhead.c runtime_c/src/runtime/threadpool.c \
 *      runtime_c/src/common/alloc.c runtime_c/src/common/status.c -lpthread -o /tmp/pool_overhead
 *   /tmp/pool_overhead [runs]
 *
 * For 1 and 2 workers: the time of an ipu__pool_run_range over 8 empty work items (what the
 * device loop pays per parallel instruction on top of the work: posting, claims, the barrier), and
 * of 8 items of ~0.7 µs of arithmetic each, split by claims and by the plain ipu__pool_run. */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/threadpool.h"

static volatile float sink[2 * 16];

static void nop(void *ctx, size_t b, size_t e, uint32_t ith) {
    (void)ctx, (void)b, (void)e, (void)ith;
}

static float spin(size_t n) {
    float s = 0;
    for (size_t i = 0; i < n; i++) s += (float)i * 1e-9f;
    return s;
}

static void work(void *ctx, size_t b, size_t e, uint32_t ith) {
    sink[ith * 16] = spin((e - b) * *(size_t *)ctx);
}

static void work_plain(void *ctx, uint32_t ith, uint32_t nth) {
    sink[ith * 16] = spin(8 * *(size_t *)ctx / nth);
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 100000;
    size_t per = 500;
    for (uint32_t nth = 1; nth <= 2; nth++) {
        ipu__pool *p;
        if (ipu__pool_create(nth, 4096, 0, &p) != IPU_OK) return 1;
        for (int rep = 0; rep < 3; rep++) {
            uint64_t t0 = ipu__now_ns();
            for (int i = 0; i < runs; i++) ipu__pool_run_range(p, 8, false, nop, NULL);
            uint64_t t1 = ipu__now_ns();
            for (int i = 0; i < runs / 10; i++) ipu__pool_run_range(p, 8, false, work, &per);
            uint64_t t2 = ipu__now_ns();
            for (int i = 0; i < runs / 10; i++) ipu__pool_run(p, work_plain, &per);
            uint64_t t3 = ipu__now_ns();
            printf(
                "%u worker(s): empty %.0f ns, 8 items by claims %.0f ns, by plain split %.0f ns\n",
                nth, (double)(t1 - t0) / runs, (double)(t2 - t1) / (runs / 10),
                (double)(t3 - t2) / (runs / 10));
        }
        ipu__pool_destroy(p);
    }
    return 0;
}
