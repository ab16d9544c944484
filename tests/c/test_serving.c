/* Runtime serving tests (ipu_runtime.h on top of the session): dynamic batching (request sizes
 * 1..3 x batch + remainder, rows merged across requests, remainder padded after the batch timeout,
 * the strided batching_dim = 1 case), flush_on_waiting_outputs, failure propagation (a failing
 * stream callback fails every enqueued request; auto_reset keeps serving; without it
 * IPU_ERR_NEEDS_RESET until ipu_runtime_reset), stats (latency percentiles, throughput, queue
 * depth) and a stress test: 8 threads x mixed sizes x random close -> exactly-once completion. */
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

/* Z = X + Y with `rows` rows along the batching dimension. */
static ipu_status submit_rows(ipu_runtime *rt, uint64_t rows, const float *x, const float *y,
                              float *z, ipu_request_done_fn done, void *ud, ipu_request **out) {
    const void *ins[3] = {x, y, NULL};
    void *outs[3] = {NULL, NULL, z};
    ipu_request_desc d = {.num_rows = rows,
                          .inputs = ins,
                          .outputs = outs,
                          .subgraph = IPU_NO_INDEX,
                          .done = done,
                          .user_data = ud};
    return ipu_runtime_submit(rt, &d, out);
}

static ipu_runtime_config batch_cfg(uint32_t dim, uint64_t batch_timeout_ns) {
    ipu_runtime_config c = ipu_runtime_config_default();
    c.num_threads = 2;
    c.batching_dim = dim;
    c.batch_timeout_ns = batch_timeout_ns;
    return c;
}

static int test_batching_sizes(void) {
    fixture f;
    m_model m = add_model(4, 3, 1); /* batch = 4 rows of 3 floats */
    ipu_runtime_config cfg = batch_cfg(0, 2000000);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    enum { MAXR = 3 * 4 + 3 };
    float x[MAXR * 3], y[MAXR * 3], z[MAXR * 3 + 1];
    ipu_request *r;
    REQUIRE(submit_rows(f.rt, 0, x, y, z, NULL, NULL, &r) == IPU_ERR_INVALID_ARGUMENT);
    for (uint64_t n = 1; n <= MAXR; n++) {
        for (uint64_t i = 0; i < n * 3; i++) {
            x[i] = (float)(n * 1000 + i);
            y[i] = (float)i * 0.5f;
            z[i] = -1;
        }
        z[n * 3] = -7;
        REQUIRE_OK(submit_rows(f.rt, n, x, y, z, NULL, NULL, &r));
        REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
        ipu_request_release(r);
        for (uint64_t i = 0; i < n * 3; i++) REQUIRE(z[i] == x[i] + y[i]);
        REQUIRE(z[n * 3] == -7); /* nothing written past the request */
    }
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.padded_rows > 0 && s.requests_completed == MAXR);
    fx_close(&f);

    /* Rows of 12 one-row requests merge into exactly 3 batches (generous batch timeout). */
    cfg = batch_cfg(0, 2000000000ull);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    enum { R = 12 };
    float xs[R][3], zs[R][3];
    ipu_request *rs[R];
    for (int i = 0; i < R; i++) {
        for (int k = 0; k < 3; k++) {
            xs[i][k] = (float)(10 * i + k);
            zs[i][k] = -1;
        }
        REQUIRE_OK(submit_rows(f.rt, 1, xs[i], xs[i], zs[i], NULL, NULL, &rs[i]));
    }
    for (int i = 0; i < R; i++) {
        REQUIRE_OK(ipu_request_wait(rs[i], UINT64_MAX));
        ipu_request_release(rs[i]);
        for (int k = 0; k < 3; k++) REQUIRE(zs[i][k] == 2 * xs[i][k]);
    }
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.iterations == 3 && s.padded_rows == 0);
    /* a remainder is padded after the batch timeout (here: flush_on_waiting_outputs irrelevant) */
    fx_close(&f);
    return 0;
}

/* batching_dim = 1 on float32[2, 4]: a request of n rows is [2, n]. */
static int test_batching_dim1(void) {
    fixture f;
    m_model m = add_model(2, 4, 1);
    ipu_runtime_config cfg = batch_cfg(1, 3000000);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    static const uint32_t sizes[] = {3, 5, 1, 4, 7, 2};
    enum { NS = 6 };
    float *x[NS], *z[NS];
    ipu_request *r[NS];
    for (int i = 0; i < NS; i++) {
        x[i] = malloc(2 * sizes[i] * 4);
        z[i] = malloc(2 * sizes[i] * 4);
        REQUIRE(x[i] && z[i]);
        for (uint32_t k = 0; k < 2 * sizes[i]; k++) {
            x[i][k] = (float)(100 * i + k);
            z[i][k] = -1;
        }
        REQUIRE_OK(submit_rows(f.rt, sizes[i], x[i], x[i], z[i], NULL, NULL, &r[i]));
    }
    for (int i = 0; i < NS; i++) {
        REQUIRE_OK(ipu_request_wait(r[i], UINT64_MAX));
        ipu_request_release(r[i]);
        for (uint32_t k = 0; k < 2 * sizes[i]; k++) REQUIRE(z[i][k] == 2 * x[i][k]);
        free(x[i]);
        free(z[i]);
    }
    fx_close(&f);
    /* fused model + batching is refused at create */
    m_model fm = fused_model();
    REQUIRE(fx_open(&f, &fm, &cfg) == IPU_ERR_INVALID_ARGUMENT);
    f.rt = NULL;
    fx_close(&f);
    return 0;
}

static int test_flush_on_waiting_outputs(void) {
    fixture f;
    m_model m = add_model(2, 3, 4);
    ipu_runtime_config cfg = cfg_threads(1);
    cfg.timeout_ns = 10000000;
    cfg.flush_on_waiting_outputs = 1;
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    float x[6] = {1, 2, 3, 4, 5, 6}, z[6];
    ipu_request *r;
    REQUIRE_OK(submit_add(f.rt, 1, x, x, z, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    ipu_request_release(r);
    sleep_ms(60);
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    /* nobody waits for outputs: the started step is not padded */
    REQUIRE(s.iterations == 1 && s.padded_iterations == 0 && s.steps == 0);
    fx_close(&f);

    /* with batching, a request waiting for its outputs still gets its partial batch padded */
    m = add_model(4, 3, 1);
    cfg = batch_cfg(0, 5000000);
    cfg.flush_on_waiting_outputs = 1;
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    float x3[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, z3[9];
    REQUIRE_OK(submit_rows(f.rt, 3, x3, x3, z3, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    ipu_request_release(r);
    for (int i = 0; i < 9; i++) REQUIRE(z3[i] == 2 * x3[i]);
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.padded_rows == 1);
    fx_close(&f);
    return 0;
}

static atomic_int g_block, g_calls, g_fail_at;
static ipu_status blocking_y(void *buf, size_t nbytes, const ipu_anchor_info *a, void *ud) {
    (void)a, (void)ud;
    int call = atomic_fetch_add(&g_calls, 1) + 1;
    while (atomic_load(&g_block)) sleep_ms(1);
    if (call == atomic_load(&g_fail_at)) return IPU_ERR_CALLBACK;
    for (size_t i = 0; i < nbytes / 4; i++) ((float *)buf)[i] = 1;
    return IPU_OK;
}

typedef struct {
    atomic_int calls;
    ipu_status st;
    ipu_status close_st;
    ipu_runtime *rt;
} dctx;
static void fail_done(ipu_request *req, ipu_status st, void *ud) {
    (void)req;
    dctx *d = ud;
    d->st = st;
    d->close_st = ipu_runtime_close(d->rt); /* refused inside a callback */
    atomic_fetch_add(&d->calls, 1);
}

static int failure_round(int auto_reset) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    ipu_runtime_config cfg = cfg_threads(1);
    cfg.auto_reset = auto_reset;
    cfg.ring_buffer_size_multiplier = 8; /* all R requests fit while the device is blocked */
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    REQUIRE_OK(ipu_runtime_set_stream_callback(f.rt, 1, blocking_y, NULL));
    atomic_store(&g_calls, 0);
    atomic_store(&g_fail_at, 1);
    atomic_store(&g_block, 1);
    enum { R = 5 };
    static dctx d[R];
    float x[R][6], z[R][6];
    ipu_request *r[R];
    for (int i = 0; i < R; i++) {
        memset(x[i], 0, sizeof x[i]);
        d[i] = (dctx){0, IPU_OK, IPU_OK, f.rt};
        REQUIRE_OK(submit_add(f.rt, 1, x[i], NULL, z[i], fail_done, &d[i], &r[i]));
    }
    while (atomic_load(&g_calls) == 0) sleep_ms(1);
    size_t dx = ipu_runtime_queue_depth(f.rt, 0), dz = ipu_runtime_queue_depth(f.rt, 2);
    atomic_store(&g_block, 0);
    REQUIRE(dx == R - 1 && dz == R); /* the running request's X slot has been taken */
    for (int i = 0; i < R; i++) {
        REQUIRE(ipu_request_wait(r[i], UINT64_MAX) == IPU_ERR_CALLBACK);
        REQUIRE(strstr(ipu_last_error_message(), "stream callback of input anchor 'Y'"));
        REQUIRE(atomic_load(&d[i].calls) == 1 && d[i].st == IPU_ERR_CALLBACK);
        REQUIRE(d[i].close_st == IPU_ERR_INVALID_STATE);
        ipu_request_release(r[i]);
    }
    REQUIRE(atomic_load(&g_calls) == 1); /* the other requests never ran */
    ipu_request *r2;
    if (!auto_reset) {
        REQUIRE(submit_add(f.rt, 1, x[0], NULL, z[0], NULL, NULL, &r2) == IPU_ERR_NEEDS_RESET);
        REQUIRE(strstr(ipu_last_error_message(), "stream callback of input anchor 'Y'"));
        REQUIRE(strstr(ipu_last_error_message(), "ERR_CALLBACK"));
        REQUIRE_OK(ipu_runtime_reset(f.rt));
    }
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 6; k++) x[0][k] = (float)k;
        REQUIRE_OK(submit_add(f.rt, 1, x[0], NULL, z[0], NULL, NULL, &r2));
        REQUIRE_OK(ipu_request_wait(r2, UINT64_MAX));
        ipu_request_release(r2);
        for (int k = 0; k < 6; k++) REQUIRE(z[0][k] == (float)k + 1);
    }
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.requests_failed == R && s.requests_completed == 3);
    REQUIRE_OK(ipu_runtime_reset(f.rt)); /* also fine while healthy */
    REQUIRE_OK(ipu_runtime_close(f.rt));
    REQUIRE(ipu_runtime_reset(f.rt) == IPU_ERR_CLOSED);
    fx_close(&f);
    return 0;
}

static int test_failure_propagation(void) {
    if (failure_round(0)) return 1;
    return failure_round(1);
}

typedef struct {
    ipu_runtime *rt;
    atomic_int stop;
    int errors;
} busy_arg;
static void *busy_thread(void *p) {
    busy_arg *a = p;
    float x[6] = {1, 2, 3, 4, 5, 6}, z[6];
    while (!atomic_load(&a->stop)) {
        ipu_request *r;
        if (submit_add(a->rt, 1, x, x, z, NULL, NULL, &r) != IPU_OK) {
            a->errors++;
            break;
        }
        if (ipu_request_wait(r, UINT64_MAX) != IPU_OK) a->errors++;
        ipu_request_release(r);
    }
    return NULL;
}

static int test_stats(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    ipu_runtime_config cfg = cfg_threads(1);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.latency_p50_ns == 0 && s.throughput_rps == 0);
    busy_arg a = {f.rt, 0, 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, busy_thread, &a) == 0);
    sleep_ms(250);
    ipu_runtime_get_stats(f.rt, &s);
    atomic_store(&a.stop, 1);
    pthread_join(th, NULL);
    REQUIRE(a.errors == 0);
    printf("     (stats: %llu requests, p50 %llu ns, p99 %llu ns, %.0f req/s)\n",
           (unsigned long long)s.requests_completed, (unsigned long long)s.latency_p50_ns,
           (unsigned long long)s.latency_p99_ns, s.throughput_rps);
    REQUIRE(s.requests_completed > 0 && s.throughput_rps > 0);
    REQUIRE(s.latency_p50_ns > 0 && s.latency_p50_ns <= s.latency_p99_ns);
    REQUIRE(ipu_runtime_queue_depth(f.rt, 0) == 0 && ipu_runtime_queue_depth(f.rt, 99) == 0);
    REQUIRE(ipu_runtime_queue_depth(NULL, 0) == 0);
    fx_close(&f);
    return 0;
}

/* ---- stress: 8 threads x mixed sizes x random close --------------------------------------- */

enum { ST_THREADS = 8, ST_MAX = 512, ST_ELEMS = 4 * 3 };

typedef struct {
    ipu_runtime *rt;
    int batching, tid, n, errors;
    uint32_t seed;
    ipu_request *reqs[ST_MAX];
    float *bufs[ST_MAX];
    uint32_t sizes[ST_MAX];
    atomic_int done[ST_MAX];
    ipu_status status[ST_MAX];
} st_arg;
typedef struct {
    st_arg *a;
    int i;
} st_ref;
static st_ref g_st_refs[ST_THREADS][ST_MAX];

static void st_done(ipu_request *req, ipu_status st, void *ud) {
    (void)req;
    st_ref *r = ud;
    r->a->status[r->i] = st;
    atomic_fetch_add(&r->a->done[r->i], 1);
}

static void *st_thread(void *p) {
    st_arg *a = p;
    for (int i = 0; i < ST_MAX; i++) {
        uint32_t n = 1 + rng_next(&a->seed) % (a->batching ? 10 : 4);
        size_t elems = a->batching ? (size_t)n * 3 : (size_t)n * ST_ELEMS;
        float *b = malloc(elems * 4 * 2);
        if (!b) {
            a->errors++;
            break;
        }
        for (size_t k = 0; k < elems; k++) {
            b[k] = (float)(k % 97 + a->tid);
            b[elems + k] = -1;
        }
        g_st_refs[a->tid][i] = (st_ref){a, i};
        ipu_request *r = NULL;
        ipu_status st = a->batching ? submit_rows(a->rt, n, b, b, b + elems, st_done,
                                                  &g_st_refs[a->tid][i], &r)
                                    : submit_add(a->rt, n, b, b, b + elems, st_done,
                                                 &g_st_refs[a->tid][i], &r);
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
        a->sizes[i] = (uint32_t)elems;
        a->n = i + 1;
        if (rng_next(&a->seed) % 4 == 0) (void)ipu_request_wait(r, UINT64_MAX);
    }
    return NULL;
}

static int test_stress_close(void) {
    static st_arg args[ST_THREADS];
    uint64_t ok = 0, closed = 0;
    for (int round = 0; round < 8; round++) {
        fixture f;
        int batching = round % 2;
        m_model m = add_model(4, 3, 1 + (uint32_t)round % 3);
        ipu_runtime_config cfg = batching ? batch_cfg(0, 200000) : cfg_threads(2);
        cfg.ring_buffer_size_multiplier = 1 + (uint32_t)round % 2;
        cfg.timeout_ns = round % 4 == 1 ? 0 : 100000;
        REQUIRE_OK(fx_open(&f, &m, &cfg));
        pthread_t th[ST_THREADS];
        for (int t = 0; t < ST_THREADS; t++) {
            memset(&args[t], 0, sizeof args[t]);
            args[t].rt = f.rt;
            args[t].batching = batching;
            args[t].tid = t;
            args[t].seed = (uint32_t)(7 + t + 31 * round);
            REQUIRE(pthread_create(&th[t], NULL, st_thread, &args[t]) == 0);
        }
        uint32_t seed = (uint32_t)round + 99;
        sleep_ms((int)(rng_next(&seed) % 40));
        REQUIRE_OK(ipu_runtime_close(f.rt));
        for (int t = 0; t < ST_THREADS; t++) pthread_join(th[t], NULL);
        for (int t = 0; t < ST_THREADS; t++) {
            st_arg *a = &args[t];
            REQUIRE(a->errors == 0);
            for (int i = 0; i < a->n; i++) {
                ipu_status st = ipu_request_wait(a->reqs[i], UINT64_MAX);
                REQUIRE(atomic_load(&a->done[i]) == 1 && st == a->status[i]);
                REQUIRE(st == IPU_OK || st == IPU_ERR_CLOSED);
                if (st == IPU_OK) {
                    for (uint32_t k = 0; k < a->sizes[i]; k++)
                        REQUIRE(a->bufs[i][a->sizes[i] + k] == 2 * a->bufs[i][k]);
                    ok++;
                } else {
                    closed++;
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
    printf("     (stress: %llu requests OK, %llu closed)\n", (unsigned long long)ok,
           (unsigned long long)closed);
    return 0;
}

int main(void) {
    alarm(240); /* watchdog: a hang is a failure */
    RUN(test_batching_sizes);
    RUN(test_batching_dim1);
    RUN(test_flush_on_waiting_outputs);
    RUN(test_failure_propagation);
    RUN(test_stats);
    RUN(test_stress_close);
    return check_summary();
}
