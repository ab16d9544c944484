/* Runtime lifecycle tests: close with requests in flight from several threads, a request
 * submitted from a completion callback, idle workers using no CPU, the default thread count, and
 * timeouts near UINT64_MAX. Built from the in-memory models of runtime_models.h. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipu/ipu.h"

#include "runtime_harness.h"

typedef struct {
    ipu_runtime *rt;
    uint32_t seed;
    int tid, n, errors;
    ipu_request *reqs[4096];
    float *bufs[4096];
    uint32_t ns[4096];
    atomic_int done[4096];
    ipu_status status[4096];
} close_arg;

typedef struct {
    close_arg *a;
    int i;
} close_ref;

static void close_done2(ipu_request *req, ipu_status st, void *ud) {
    (void)req;
    close_arg *a = ((close_ref *)ud)->a;
    int i = ((close_ref *)ud)->i;
    a->status[i] = st;
    atomic_fetch_add(&a->done[i], 1);
}

static close_ref g_refs[3][4096];

enum { CLOSE_ELEMS = 64 * 64 };

static void *close_thread(void *p) {
    close_arg *a = p;
    close_ref *refs = g_refs[a->tid];
    for (int i = 0; i < 4096; i++) {
        uint32_t N = 1 + rng_next(&a->seed) % 16;
        float *b = malloc((size_t)N * CLOSE_ELEMS * 4 * 3);
        if (!b) {
            a->errors++;
            break;
        }
        for (size_t k = 0; k < (size_t)N * CLOSE_ELEMS; k++) {
            b[k] = (float)(k % 101);
            b[(size_t)N * CLOSE_ELEMS + k] = 2;
            b[(size_t)2 * N * CLOSE_ELEMS + k] = -1;
        }
        refs[i] = (close_ref){a, i};
        ipu_request *r = NULL;
        ipu_status st = submit_add(a->rt, N, b, b + (size_t)N * CLOSE_ELEMS,
                                   b + (size_t)2 * N * CLOSE_ELEMS, close_done2, &refs[i], &r);
        if (st == IPU_ERR_CLOSED) {
            free(b);
            break;
        }
        if (st != IPU_OK) {
            a->errors++;
            free(b);
            break;
        }
        a->reqs[i] = r;
        a->bufs[i] = b;
        a->ns[i] = N;
        a->n = i + 1;
    }
    return NULL;
}

static int test_close_in_flight(void) {
    static close_arg args[3];
    uint64_t total_ok = 0, total_closed = 0;
    for (int round = 0; round < 12; round++) {
        fixture f;
        m_model m = add_model(64, 64, 1 + (uint32_t)round % 3);
        ipu_runtime_config cfg = cfg_threads(1 + (uint32_t)round % 2);
        cfg.ring_buffer_size_multiplier = 1;
        cfg.timeout_ns = round % 4 == 0 ? 0 : 100000;
        REQUIRE_OK(fx_open(&f, &m, &cfg));
        pthread_t th[3];
        for (int t = 0; t < 3; t++) {
            memset(&args[t], 0, sizeof args[t]);
            args[t].rt = f.rt;
            args[t].seed = (uint32_t)(t + 3 * (round + 1));
            args[t].tid = t;
            REQUIRE(pthread_create(&th[t], NULL, close_thread, &args[t]) == 0);
        }
        sleep_ms(round % 3 == 0 ? 0 : 2 * round);
        REQUIRE_OK(ipu_runtime_close(f.rt));
        for (int t = 0; t < 3; t++) pthread_join(th[t], NULL);
        REQUIRE_OK(ipu_runtime_close(f.rt)); /* idempotent */
        for (int t = 0; t < 3; t++) {
            close_arg *a = &args[t];
            REQUIRE(a->errors == 0);
            for (int i = 0; i < a->n; i++) {
                ipu_status st = ipu_request_wait(a->reqs[i], UINT64_MAX);
                REQUIRE(atomic_load(&a->done[i]) == 1);
                REQUIRE(st == a->status[i]);
                REQUIRE(st == IPU_OK || st == IPU_ERR_CLOSED);
                if (st == IPU_OK) {
                    size_t n = (size_t)a->ns[i] * CLOSE_ELEMS;
                    for (size_t k = 0; k < n; k++)
                        REQUIRE(a->bufs[i][2 * n + k] == a->bufs[i][k] + 2);
                    total_ok++;
                } else {
                    total_closed++;
                }
                ipu_request_release(a->reqs[i]);
                free(a->bufs[i]);
            }
        }
        ipu_runtime_stats s;
        ipu_runtime_get_stats(f.rt, &s);
        REQUIRE(s.requests_submitted == s.requests_completed + s.requests_failed);
        fx_close(&f);
    }
    printf("     (close test: %llu requests OK, %llu closed)\n", (unsigned long long)total_ok,
           (unsigned long long)total_closed);
    return 0;
}

typedef struct {
    ipu_runtime *rt;
    ipu_status st;
} resubmit_ctx;
static void resubmit_done(ipu_request *req, ipu_status st, void *ud) {
    (void)req;
    (void)st;
    resubmit_ctx *c = ud;
    static float b[6];
    ipu_request *r2 = NULL;
    c->st = submit_add(c->rt, 1, b, b, b, NULL, NULL, &r2);
    ipu_request_release(r2);
}

static int test_submit_from_callback(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    REQUIRE_OK(fx_open(&f, &m, NULL));
    float x[6] = {0}, z[6];
    resubmit_ctx c = {f.rt, IPU_OK};
    ipu_request *r;
    REQUIRE_OK(submit_add(f.rt, 1, x, x, z, resubmit_done, &c, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    ipu_request_release(r);
    REQUIRE(c.st == IPU_ERR_INVALID_STATE);
    fx_close(&f);
    return 0;
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int test_idle_cpu(void) {
    /* After a request (helpers and device spun briefly, then slept) an idle runtime with a
     * started, unpadded step (timeout 0) must not burn CPU. */
    fixture f;
    m_model m = add_model(256, 1024, 1);
    ipu_runtime_config cfg = cfg_threads(3);
    cfg.timeout_ns = 0;
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    size_t n = 256 * 1024;
    float *x = calloc(n, 4), *z = calloc(n, 4);
    REQUIRE(x && z);
    ipu_request *r;
    REQUIRE_OK(submit_add(f.rt, 1, x, x, z, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    ipu_request_release(r);
    sleep_ms(20);
    double t0 = cpu_seconds();
    sleep_ms(300);
    double used = cpu_seconds() - t0;
    printf("     (idle: %.1f ms CPU in 300 ms)\n", used * 1e3);
    REQUIRE(used < 0.015);
    free(x);
    free(z);
    fx_close(&f);
    return 0;
}

static int test_default_threads(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    REQUIRE_OK(fx_open(&f, &m, NULL));
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.num_threads >= 1);
    fx_close(&f);
    REQUIRE(ipu_runtime_create(NULL, NULL, &f.rt) == IPU_ERR_INVALID_ARGUMENT);
    return 0;
}

/* Z = X + Y with Z sharing bytes with X (or Y) at several shifts, over several batches and
 * with dynamic batching: every result is the out-of-place one (request.c copies the inputs
 * an output overlaps when the request spans several iterations). */
static int test_huge_timeouts(void) {
    for (int which = 0; which < 2; which++) {
        fixture f;
        m_model m = add_model(2, 3, 1);
        ipu_runtime_config cfg = cfg_threads(1);
        cfg.batching_dim = 0;
        cfg.timeout_ns = which ? UINT64_MAX - 1 : 0;
        cfg.batch_timeout_ns = which ? 0 : UINT64_MAX;
        REQUIRE_OK(fx_open(&f, &m, &cfg));
        float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {1, 1, 1, 1, 1, 1}, z[6] = {0};
        const void *ins[3] = {x, y, NULL};
        void *outs[3] = {NULL, NULL, z};
        ipu_request_desc d = {.num_rows = 1,
                              .inputs = ins,
                              .outputs = outs,
                              .subgraph = IPU_NO_INDEX};
        ipu_request *r1, *r2;
        REQUIRE_OK(ipu_runtime_submit(f.rt, &d, &r1));
        REQUIRE(ipu_request_wait(r1, 200000000u) == IPU_ERR_TIMEOUT); /* 1 of 2 rows: waits */
        const void *ins2[3] = {x + 3, y + 3, NULL};
        void *outs2[3] = {NULL, NULL, z + 3};
        d.inputs = ins2;
        d.outputs = outs2;
        REQUIRE_OK(ipu_runtime_submit(f.rt, &d, &r2));
        REQUIRE_OK(ipu_request_wait(r1, 5000000000u));
        REQUIRE_OK(ipu_request_wait(r2, 5000000000u));
        for (int i = 0; i < 6; i++) REQUIRE(z[i] == x[i] + y[i]);
        ipu_runtime_stats s;
        ipu_runtime_get_stats(f.rt, &s);
        REQUIRE(s.padded_rows == 0);
        ipu_request_release(r1);
        ipu_request_release(r2);
        fx_close(&f);
    }
    return 0;
}

int main(void) {
    alarm(240); /* watchdog: a hang is a failure */
    RUN(test_close_in_flight);
    RUN(test_submit_from_callback);
    RUN(test_idle_cpu);
    RUN(test_default_threads);
    RUN(test_huge_timeouts);
    return check_summary();
}
