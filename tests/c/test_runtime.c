/* Runtime tests: builds small containers in memory (runtime_models.h encodes METADATA + PROGRAM per
 * ipu_executable.h and docs/bytecode.md), then exercises requests, batching, threads, fused
 * models, validation, padding, stream callbacks, weights and outputs overlapping inputs
 * (lifecycle: test_lifecycle.c; cancelling: test_cancel.c).
 *
 * `test_runtime --write-add PATH` writes the Z = X + Y float32[2,3] model to PATH and exits
 * (used to make a PopEF file for examples/embed.c). */
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

/* ---- tests -------------------------------------------------------------------------------- */

static int test_single_request(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    ipu_runtime_config cfg = cfg_threads(2);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {10, 20, 30, 40, 50, 60}, z[6] = {0};
    ipu_request *r;
    REQUIRE_OK(submit_add(f.rt, 1, x, y, z, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    REQUIRE(ipu_request_is_done(r));
    REQUIRE_OK(ipu_request_status(r));
    for (int i = 0; i < 6; i++) REQUIRE(z[i] == x[i] + y[i]);
    ipu_request_release(r);
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.requests_submitted == 1 && s.requests_completed == 1 && s.requests_failed == 0);
    REQUIRE(s.iterations == 1 && s.num_threads == 2);
    fx_close(&f);
    return 0;
}

static atomic_int g_done_calls;
static void count_done(ipu_request *req, ipu_status st, void *ud) {
    (void)req;
    atomic_fetch_add(&g_done_calls, 1);
    if (ud) *(ipu_status *)ud = st;
}

static int test_batches(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    REQUIRE_OK(fx_open(&f, &m, NULL));
    enum { N = 7 };
    float x[N * 6], y[N * 6], z[N * 6];
    for (int i = 0; i < N * 6; i++) {
        x[i] = (float)i;
        y[i] = (float)(1000 - 3 * i);
        z[i] = -1;
    }
    ipu_status seen = IPU_ERR_INTERNAL;
    atomic_store(&g_done_calls, 0);
    ipu_request *r;
    REQUIRE_OK(submit_add(f.rt, N, x, y, z, count_done, &seen, &r));
    REQUIRE_OK(ipu_request_wait(r, 5000000000ull));
    REQUIRE(atomic_load(&g_done_calls) == 1 && seen == IPU_OK);
    for (int i = 0; i < N * 6; i++) REQUIRE(z[i] == x[i] + y[i]);
    ipu_request_release(r);
    /* Release before completion: the request stays alive for the runtime. */
    REQUIRE_OK(submit_add(f.rt, N, x, y, z, count_done, NULL, &r));
    ipu_request_release(r);
    REQUIRE_OK(ipu_runtime_close(f.rt));
    REQUIRE(atomic_load(&g_done_calls) == 2);
    fx_close(&f);
    return 0;
}

static int test_large_parallel(void) {
    /* 256 x 1024 floats: the ADD has 16 work items and runs on the pool. */
    for (uint32_t nth = 1; nth <= 3; nth++) {
        fixture f;
        m_model m = add_model(256, 1024, 1);
        ipu_runtime_config cfg = cfg_threads(nth);
        REQUIRE_OK(fx_open(&f, &m, &cfg));
        size_t n = 2 * 256 * 1024;
        float *x = malloc(n * 4), *y = malloc(n * 4), *z = malloc(n * 4);
        REQUIRE(x && y && z);
        for (size_t i = 0; i < n; i++) {
            x[i] = (float)(i % 977);
            y[i] = (float)(i % 13);
            z[i] = 0;
        }
        ipu_request *r;
        REQUIRE_OK(submit_add(f.rt, 2, x, y, z, NULL, NULL, &r));
        REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
        for (size_t i = 0; i < n; i++) REQUIRE(z[i] == x[i] + y[i]);
        ipu_request_release(r);
        free(x);
        free(y);
        free(z);
        fx_close(&f);
    }
    return 0;
}

typedef struct {
    ipu_runtime *rt;
    uint32_t seed;
    int errors;
    atomic_int *done_count; /* per request */
} stress_arg;

static void stress_done(ipu_request *req, ipu_status st, void *ud) {
    (void)req;
    if (st == IPU_OK)
        atomic_fetch_add((atomic_int *)ud, 1);
    else
        atomic_fetch_add((atomic_int *)ud, 1000);
}

static void *stress_thread(void *p) {
    stress_arg *a = p;
    enum { R = 200, MAXN = 8 };
    for (int i = 0; i < R; i++) {
        uint32_t N = 1 + rng_next(&a->seed) % MAXN;
        float x[MAXN * 6], y[MAXN * 6], z[MAXN * 6];
        for (uint32_t k = 0; k < N * 6; k++) {
            x[k] = (float)(rng_next(&a->seed) % 1000);
            y[k] = (float)(rng_next(&a->seed) % 1000);
            z[k] = -1;
        }
        ipu_request *r;
        if (submit_add(a->rt, N, x, y, z, stress_done, &a->done_count[i], &r) != IPU_OK) {
            a->errors++;
            continue;
        }
        if (ipu_request_wait(r, UINT64_MAX) != IPU_OK) a->errors++;
        /* the done callback ran before wait returned */
        if (atomic_load(&a->done_count[i]) != 1) a->errors++;
        for (uint32_t k = 0; k < N * 6; k++)
            if (z[k] != x[k] + y[k]) {
                a->errors++;
                break;
            }
        ipu_request_release(r);
        if (rng_next(&a->seed) % 16 == 0) sched_yield();
    }
    return NULL;
}

static int test_threads(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    ipu_runtime_config cfg = cfg_threads(2);
    cfg.ring_buffer_size_multiplier = 2; /* small rings: submitters block often */
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    enum { T = 3 };
    static atomic_int counts[T][200];
    pthread_t th[T];
    stress_arg args[T];
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < 200; i++) atomic_store(&counts[t][i], 0);
        args[t] = (stress_arg){f.rt, 0x9e3779b9u * (uint32_t)(t + 1), 0, counts[t]};
        REQUIRE(pthread_create(&th[t], NULL, stress_thread, &args[t]) == 0);
    }
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < T; t++) {
        REQUIRE(args[t].errors == 0);
        for (int i = 0; i < 200; i++) REQUIRE(atomic_load(&counts[t][i]) == 1);
    }
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.requests_submitted == T * 200 && s.requests_completed == T * 200);
    REQUIRE(s.requests_failed == 0);
    fx_close(&f);
    return 0;
}

static int test_padding(void) {
    fixture f;
    m_model m = add_model(2, 3, 4);
    ipu_runtime_config cfg = cfg_threads(1);
    cfg.timeout_ns = 20000000; /* 20 ms */
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    float x[5 * 6], y[5 * 6], z[5 * 6];
    for (int i = 0; i < 30; i++) {
        x[i] = (float)i;
        y[i] = 1;
    }
    ipu_request *r;
    REQUIRE_OK(submit_add(f.rt, 1, x, y, z, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX)); /* outputs do not wait for the step to fill */
    ipu_request_release(r);
    sleep_ms(100);
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.iterations == 1 && s.padded_iterations == 3 && s.steps == 1);
    REQUIRE_OK(submit_add(f.rt, 5, x, y, z, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    for (int i = 0; i < 30; i++) REQUIRE(z[i] == x[i] + 1);
    ipu_request_release(r);
    sleep_ms(100);
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.iterations == 6 && s.padded_iterations == 6 && s.steps == 3);
    fx_close(&f);

    /* timeout_ns == 0: a started step waits forever, nothing is padded. */
    cfg.timeout_ns = 0;
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    REQUIRE_OK(submit_add(f.rt, 1, x, y, z, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    ipu_request_release(r);
    sleep_ms(30);
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.iterations == 1 && s.padded_iterations == 0 && s.steps == 0);
    fx_close(&f); /* close wakes the device although it waits without a deadline */
    return 0;
}

static ipu_status submit_fused(ipu_runtime *rt, const void *const ins[6], void *const outs[6],
                               uint32_t sub, ipu_request **r) {
    ipu_request_desc d = {.num_batches = 1, .inputs = ins, .outputs = outs, .subgraph = sub};
    return ipu_runtime_submit(rt, &d, r);
}

static int test_fused(void) {
    fixture f;
    m_model m = fused_model();
    ipu_runtime_config cfg = cfg_threads(2);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    float x0[6] = {1, 2, 3, 4, 5, 6}, x1[6] = {2, 2, 2, 3, 3, 3}, y[6] = {10, 20, 30, 40, 50, 60};
    float z0[6], z1[6];
    ipu_request *r;
    /* subgraph inferred from X0 / Z0 */
    {
        const void *ins[6] = {NULL, x0, NULL, y, NULL, NULL};
        void *outs[6] = {NULL, NULL, NULL, NULL, z0, NULL};
        REQUIRE_OK(submit_fused(f.rt, ins, outs, IPU_NO_INDEX, &r));
        REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
        ipu_request_release(r);
        for (int i = 0; i < 6; i++) REQUIRE(z0[i] == x0[i] + y[i]);
    }
    /* subgraph 1 selected by the index anchor */
    {
        uint32_t idx = 1;
        const void *ins[6] = {&idx, NULL, x1, y, NULL, NULL};
        void *outs[6] = {NULL, NULL, NULL, NULL, NULL, z1};
        REQUIRE_OK(submit_fused(f.rt, ins, outs, IPU_NO_INDEX, &r));
        REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
        ipu_request_release(r);
        for (int i = 0; i < 6; i++) REQUIRE(z1[i] == x1[i] * y[i]);
        /* index 1 and desc.subgraph 0 disagree */
        REQUIRE(submit_fused(f.rt, ins, outs, 0, &r) == IPU_ERR_INVALID_ARGUMENT);
        REQUIRE(strstr(ipu_last_error_message(), "index"));
    }
    /* mixed anchors of subgraphs 0 and 1 */
    {
        const void *ins[6] = {NULL, x0, x1, y, NULL, NULL};
        void *outs[6] = {NULL, NULL, NULL, NULL, z0, z1};
        REQUIRE(submit_fused(f.rt, ins, outs, IPU_NO_INDEX, &r) == IPU_ERR_INVALID_ARGUMENT);
        REQUIRE(strstr(ipu_last_error_message(), "'X0'") &&
                strstr(ipu_last_error_message(), "'X1'"));
        /* explicit subgraph + validate_io_params: the other subgraph's anchors are an error */
        REQUIRE(submit_fused(f.rt, ins, outs, 0, &r) == IPU_ERR_INVALID_ARGUMENT);
        REQUIRE(strstr(ipu_last_error_message(), "does not belong"));
    }
    /* no anchor identifies a subgraph */
    {
        const void *ins[6] = {NULL, NULL, NULL, y, NULL, NULL};
        void *outs[6] = {NULL};
        REQUIRE(submit_fused(f.rt, ins, outs, IPU_NO_INDEX, &r) == IPU_ERR_INVALID_ARGUMENT);
        REQUIRE(strstr(ipu_last_error_message(), "cannot infer"));
        REQUIRE(submit_fused(f.rt, ins, outs, 2, &r) == IPU_ERR_INVALID_ARGUMENT);
    }
    /* many requests alternating subgraphs, asynchronously */
    {
        enum { R = 40 };
        static float zs[R][6];
        ipu_request *rs[R];
        for (int i = 0; i < R; i++) {
            const void *ins[6] = {NULL, x0, x1, y, NULL, NULL};
            void *outs[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
            if (i % 2)
                ins[1] = NULL, outs[5] = zs[i];
            else
                ins[2] = NULL, outs[4] = zs[i];
            REQUIRE_OK(submit_fused(f.rt, ins, outs, IPU_NO_INDEX, &rs[i]));
        }
        for (int i = 0; i < R; i++) {
            REQUIRE_OK(ipu_request_wait(rs[i], UINT64_MAX));
            ipu_request_release(rs[i]);
            for (int k = 0; k < 6; k++) REQUIRE(zs[i][k] == (i % 2 ? x1[k] * y[k] : x0[k] + y[k]));
        }
    }
    fx_close(&f);
    /* validate_io_params = 0: anchors of other subgraphs are ignored */
    cfg.validate_io_params = 0;
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    {
        const void *ins[6] = {NULL, x0, x1, y, NULL, NULL};
        void *outs[6] = {NULL, NULL, NULL, NULL, z0, z1};
        memset(z1, 0, sizeof z1);
        REQUIRE_OK(submit_fused(f.rt, ins, outs, 0, &r));
        REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
        ipu_request_release(r);
        for (int i = 0; i < 6; i++) REQUIRE(z0[i] == x0[i] + y[i] && z1[i] == 0);
    }
    fx_close(&f);
    return 0;
}

static int test_validation(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    REQUIRE_OK(fx_open(&f, &m, NULL));
    float x[6] = {0}, y[6] = {0}, z[6];
    ipu_request *r = NULL;
    REQUIRE(submit_add(f.rt, 1, x, NULL, z, NULL, NULL, &r) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(strstr(ipu_last_error_message(), "'Y'") && strstr(ipu_last_error_message(), "missing"));
    REQUIRE(submit_add(f.rt, 1, x, y, NULL, NULL, NULL, &r) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(strstr(ipu_last_error_message(), "'Z'"));
    REQUIRE(submit_add(f.rt, 0, x, y, z, NULL, NULL, &r) == IPU_ERR_INVALID_ARGUMENT);
    {
        const void *ins[3] = {x, y, z}; /* output given as an input */
        void *outs[3] = {NULL, NULL, z};
        ipu_request_desc d = {.num_batches = 1,
                              .inputs = ins,
                              .outputs = outs,
                              .subgraph = IPU_NO_INDEX};
        REQUIRE(ipu_runtime_submit(f.rt, &d, &r) == IPU_ERR_INVALID_ARGUMENT);
        d.inputs = NULL;
        REQUIRE(ipu_runtime_submit(f.rt, &d, &r) == IPU_ERR_INVALID_ARGUMENT);
        ins[2] = NULL;
        d.inputs = ins;
        d.subgraph = 1;
        REQUIRE(ipu_runtime_submit(f.rt, &d, &r) == IPU_ERR_INVALID_ARGUMENT);
    }
    REQUIRE(r == NULL);
    REQUIRE(ipu_runtime_submit(f.rt, NULL, &r) == IPU_ERR_INVALID_ARGUMENT);
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.requests_submitted == 0);
    fx_close(&f);
    return 0;
}

static int test_hash_mismatch(void) {
    m_model m = add_model(2, 3, 1);
    m.set_hash = 1;
    m.hash = 0x1234;
    ipu_container *c;
    ipu_executable *e;
    ipu_runtime *rt = NULL;
    REQUIRE_OK(build(&m, &c, &e));
    REQUIRE(ipu_runtime_create(e, NULL, &rt) == IPU_ERR_HASH_MISMATCH);
    REQUIRE(rt == NULL);
    REQUIRE(strstr(ipu_last_error_message(), "0x0000000000001234"));
    char want[32];
    snprintf(want, sizeof want, "0x%016llx", (unsigned long long)ipu_compiler_hash());
    REQUIRE(strstr(ipu_last_error_message(), want));
    ipu_runtime_config cfg = ipu_runtime_config_default();
    cfg.check_package_hash = 0;
    REQUIRE_OK(ipu_runtime_create(e, &cfg, &rt));
    ipu_runtime_destroy(rt);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return 0;
}

static int test_submit_after_close(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    REQUIRE_OK(fx_open(&f, &m, NULL));
    REQUIRE_OK(ipu_runtime_close(f.rt));
    REQUIRE_OK(ipu_runtime_close(f.rt));
    float x[6] = {0}, y[6] = {0}, z[6];
    ipu_request *r = NULL;
    atomic_store(&g_done_calls, 0);
    REQUIRE(submit_add(f.rt, 1, x, y, z, count_done, NULL, &r) == IPU_ERR_CLOSED);
    REQUIRE(r == NULL && atomic_load(&g_done_calls) == 0);
    REQUIRE(ipu_runtime_set_stream_callback(f.rt, 1, NULL, NULL) == IPU_ERR_CLOSED);
    fx_close(&f);
    ipu_runtime_destroy(NULL);
    ipu_request_release(NULL);
    return 0;
}

static atomic_int g_cb_calls;
static atomic_int g_cb_fail_at; /* fail on this call number (1-based), 0 = never */
static atomic_int g_cb_block;   /* while set, the callback spins */

static ipu_status fill_y(void *buf, size_t nbytes, const ipu_anchor_info *a, void *ud) {
    (void)a;
    int call = atomic_fetch_add(&g_cb_calls, 1) + 1;
    while (atomic_load(&g_cb_block)) sleep_ms(1);
    if (call == atomic_load(&g_cb_fail_at)) return IPU_ERR_CALLBACK;
    float v = *(const float *)ud;
    for (size_t i = 0; i < nbytes / 4; i++) ((float *)buf)[i] = v;
    return IPU_OK;
}

static float g_captured[6];
static ipu_status capture_z(void *buf, size_t nbytes, const ipu_anchor_info *a, void *ud) {
    (void)ud;
    if (strcmp(a->name, "Z") != 0 || nbytes != sizeof g_captured) return IPU_ERR_INTERNAL;
    memcpy(g_captured, buf, nbytes);
    return IPU_OK;
}

static int test_stream_callback(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    REQUIRE_OK(fx_open(&f, &m, NULL));
    float v = 100;
    atomic_store(&g_cb_calls, 0);
    atomic_store(&g_cb_fail_at, 0);
    REQUIRE(ipu_runtime_set_stream_callback(f.rt, 7, fill_y, &v) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ipu_runtime_set_stream_callback(f.rt, 1, fill_y, &v));
    float x[3 * 6], y[6] = {0}, z[3 * 6];
    for (int i = 0; i < 18; i++) x[i] = (float)i;
    ipu_request *r;
    REQUIRE(submit_add(f.rt, 1, x, y, z, NULL, NULL, &r) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(strstr(ipu_last_error_message(), "stream callback"));
    REQUIRE_OK(submit_add(f.rt, 3, x, NULL, z, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    ipu_request_release(r);
    for (int i = 0; i < 18; i++) REQUIRE(z[i] == x[i] + 100);
    REQUIRE(atomic_load(&g_cb_calls) == 3);
    REQUIRE(ipu_runtime_set_stream_callback(f.rt, 1, NULL, NULL) == IPU_ERR_INVALID_STATE);

    /* A failing callback fails its request once; the rest of it is disconnected; without
     * auto_reset the runtime then refuses requests until ipu_runtime_reset. */
    atomic_store(&g_cb_calls, 0);
    atomic_store(&g_cb_fail_at, 2);
    ipu_status seen = IPU_OK;
    atomic_store(&g_done_calls, 0);
    REQUIRE_OK(submit_add(f.rt, 3, x, NULL, z, count_done, &seen, &r));
    REQUIRE(ipu_request_wait(r, UINT64_MAX) == IPU_ERR_CALLBACK);
    REQUIRE(strstr(ipu_last_error_message(), "stream callback of input anchor 'Y'"));
    REQUIRE(ipu_request_status(r) == IPU_ERR_CALLBACK);
    REQUIRE(seen == IPU_ERR_CALLBACK && atomic_load(&g_done_calls) == 1);
    ipu_request_release(r);
    v = 7;
    REQUIRE(submit_add(f.rt, 2, x + 6, NULL, z, NULL, NULL, &r) == IPU_ERR_NEEDS_RESET);
    REQUIRE(strstr(ipu_last_error_message(), "stream callback of input anchor 'Y'"));
    REQUIRE_OK(ipu_runtime_reset(f.rt));
    REQUIRE_OK(submit_add(f.rt, 2, x + 6, NULL, z, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    ipu_request_release(r);
    for (int i = 0; i < 12; i++) REQUIRE(z[i] == x[6 + i] + 7);
    REQUIRE(atomic_load(&g_cb_calls) == 4); /* 2 of the failed request (3rd skipped) + 2 */

    /* ipu_request_wait timeout: the callback blocks the device. */
    atomic_store(&g_cb_block, 1);
    REQUIRE_OK(submit_add(f.rt, 1, x, NULL, z, NULL, NULL, &r));
    REQUIRE(ipu_request_wait(r, 2000000) == IPU_ERR_TIMEOUT);
    REQUIRE(ipu_request_wait(r, 0) == IPU_ERR_TIMEOUT);
    REQUIRE(!ipu_request_is_done(r) && ipu_request_status(r) == IPU_ERR_INVALID_STATE);
    atomic_store(&g_cb_block, 0);
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    ipu_request_release(r);
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.requests_completed == 3 && s.requests_failed == 1);
    fx_close(&f);

    /* Output callback. */
    REQUIRE_OK(fx_open(&f, &m, NULL));
    REQUIRE_OK(ipu_runtime_set_stream_callback(f.rt, 2, capture_z, NULL));
    float y2[6] = {1, 1, 1, 1, 1, 1};
    REQUIRE_OK(submit_add(f.rt, 1, x, y2, NULL, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    ipu_request_release(r);
    for (int i = 0; i < 6; i++) REQUIRE(g_captured[i] == x[i] + 1);
    fx_close(&f);
    return 0;
}

/* Z = X + W with W a weight (TENSOR_DATA anchor) bound zero-copy by BIND in the Load program. */
static int test_weights(void) {
    static _Alignas(64) float w[16] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
    m_model m = add_model(2, 3, 1);
    m.t[1] = (m_tensor){F32, TDATA, 0, 2, {2, 3}};
    m.t[2].offset = 64;
    m.arena = 128;
    m.a[1] = (m_anchor){"W", IN, 1, IPU_NO_INDEX, IPU_ANCHOR_TENSOR_DATA};
    m.p[0] = (m_prog){0, 1, {{IPU_OP_BIND, 0, 1, {1}}}};
    m.tdata = w;
    m.tdsize = sizeof w;
    fixture f;
    REQUIRE_OK(fx_open(&f, &m, NULL));
    float x[12], z[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    ipu_request *r;
    REQUIRE(submit_add(f.rt, 2, x, x, z, NULL, NULL, &r) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(strstr(ipu_last_error_message(), "weight"));
    REQUIRE(ipu_runtime_set_stream_callback(f.rt, 1, fill_y, NULL) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(submit_add(f.rt, 2, x, NULL, z, NULL, NULL, &r));
    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
    ipu_request_release(r);
    for (int i = 0; i < 12; i++) REQUIRE(z[i] == x[i] + w[i % 6]);
    fx_close(&f);
    return 0;
}

static int test_overlapping_buffers(void) {
    enum { MAXB = 5, PAD = 16, N = MAXB * 6 };
    static const int shifts[] = {-13, -12, -1, 0, 1, 6, 12, 13};
    for (int batching = 0; batching < 2; batching++) {
        fixture f;
        m_model m = add_model(2, 3, 1);
        ipu_runtime_config cfg = cfg_threads(2);
        cfg.timeout_ns = 0;
        if (batching) cfg.batching_dim = 0;
        REQUIRE_OK(fx_open(&f, &m, &cfg));
        for (uint32_t nb = 1; nb <= MAXB; nb++) {
            for (size_t k = 0; k < sizeof shifts / sizeof *shifts; k++) {
                for (int target = 0; target < 2; target++) {
                    float buf[2 * PAD + 2 * N], want[N];
                    for (int i = 0; i < 2 * PAD + 2 * N; i++) buf[i] = (float)(i * 7 % 23);
                    float *x = buf + PAD, *y = buf + PAD + N;
                    for (uint32_t i = 0; i < nb * 6; i++) want[i] = x[i] + y[i];
                    float *z = (target ? y : x) + shifts[k];
                    const void *ins[3] = {x, y, NULL};
                    void *outs[3] = {NULL, NULL, z};
                    ipu_request_desc d = {.num_batches = batching ? 1 : nb,
                                          .num_rows = batching ? 2 * nb : 0,
                                          .inputs = ins,
                                          .outputs = outs,
                                          .subgraph = IPU_NO_INDEX};
                    ipu_request *r;
                    REQUIRE_OK(ipu_runtime_submit(f.rt, &d, &r));
                    REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
                    ipu_request_release(r);
                    for (uint32_t i = 0; i < nb * 6; i++) REQUIRE(z[i] == want[i]);
                }
            }
        }
        fx_close(&f);
    }
    return 0;
}

/* A batch timeout of UINT64_MAX ("never") and a step timeout near it: the deadline saturates
 * instead of wrapping to the past, so a partial batch waits for its other rows. */
static int write_add(const char *path) {
    m_model m = add_model(2, 3, 1);
    ipu_container_writer *w;
    if (model_writer(&m, &w) != IPU_OK) return 1;
    ipu_status st = ipu_container_writer_write_file(w, path);
    ipu_container_writer_destroy(w);
    if (st != IPU_OK) fprintf(stderr, "%s\n", ipu_last_error_message());
    return st != IPU_OK;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-add") == 0) return write_add(argv[2]);
    alarm(240); /* watchdog: a hang is a failure */
    RUN(test_single_request);
    RUN(test_batches);
    RUN(test_large_parallel);
    RUN(test_threads);
    RUN(test_padding);
    RUN(test_fused);
    RUN(test_validation);
    RUN(test_hash_mismatch);
    RUN(test_submit_after_close);
    RUN(test_stream_callback);
    RUN(test_weights);
    RUN(test_overlapping_buffers);
    return check_summary();
}
