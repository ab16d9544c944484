/* Session tests (ipu_session.h): bindings (QUEUE / EMPTY / CALLBACK / TENSOR_DATA, a weight fed
 * from a queue or a callback), Load, Main step results, timeout padding, flush from another
 * thread, stop unblocking run_main and enqueue, enqueue timeout, disconnect, fused index reads and
 * dynamic batching at the session level (slots spanning batches, the strided batching_dim = 1
 * case, padding after the batch timeout). Models come from runtime_models.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipu/ipu.h"

#include "runtime_harness.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct {
    ipu_container *c;
    ipu_executable *e;
    ipu_session *s;
} sfix;

static ipu_status sf_open(sfix *f, const m_model *m, const ipu_session_config *cfg) {
    memset(f, 0, sizeof *f);
    ipu_status st = build(m, &f->c, &f->e);
    if (st == IPU_OK) st = ipu_session_create(f->e, cfg, &f->s);
    return st;
}

static void sf_close(sfix *f) {
    ipu_session_destroy(f->s);
    ipu_executable_destroy(f->e);
    ipu_container_destroy(f->c);
}

static ipu_session_config scfg(uint32_t nth) {
    ipu_session_config c = ipu_session_config_default();
    c.num_threads = nth;
    return c;
}

/* Slot done recorder: counts calls and keeps the last status. */
typedef struct {
    atomic_int calls;
    ipu_status st;
} rec;
static void rec_done(ipu_status st, void *ud) {
    rec *r = ud;
    r->st = st;
    atomic_fetch_add(&r->calls, 1);
}

static ipu_slot slot(void *p, uint64_t nbytes, uint32_t rows, rec *r) {
    ipu_slot s = {p, nbytes, rows, r ? rec_done : NULL, r};
    return s;
}

static ipu_status fill_const(void *buf, size_t nbytes, const ipu_anchor_info *a, void *ud) {
    (void)a;
    for (size_t i = 0; i < nbytes / 4; i++) ((float *)buf)[i] = *(const float *)ud;
    return IPU_OK;
}

static ipu_status fail_cb(void *buf, size_t nbytes, const ipu_anchor_info *a, void *ud) {
    (void)buf, (void)nbytes, (void)a, (void)ud;
    return IPU_ERR_CALLBACK;
}

/* ---- tests -------------------------------------------------------------------------------- */

static int test_bindings(void) {
    sfix f;
    m_model m = add_model(2, 3, 1);
    ipu_session_config c = scfg(1);
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE(ipu_session_binding(f.s, 0) == IPU_BIND_QUEUE &&
            ipu_session_binding(f.s, 2) == IPU_BIND_QUEUE);
    float v = 100;
    REQUIRE(ipu_session_bind(f.s, 0, IPU_BIND_TENSOR_DATA, NULL, NULL) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(ipu_session_bind(f.s, 0, IPU_BIND_CALLBACK, NULL, NULL) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(ipu_session_bind(f.s, 9, IPU_BIND_QUEUE, NULL, NULL) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ipu_session_bind(f.s, 0, IPU_BIND_CALLBACK, fill_const, &v));
    REQUIRE(ipu_session_binding(f.s, 0) == IPU_BIND_CALLBACK);
    float y[6] = {1, 2, 3, 4, 5, 6}, z[6] = {0};
    rec ry = {0}, rz = {0};
    ipu_slot sy = slot(y, sizeof y, 0, &ry), sz = slot(z, sizeof z, 0, &rz);
    REQUIRE(ipu_session_enqueue(f.s, 0, &sy, 0) == IPU_ERR_INVALID_STATE); /* callback-bound */
    ipu_slot bad = slot(y, 8, 0, NULL);
    REQUIRE(ipu_session_enqueue(f.s, 1, &bad, 0) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(ipu_session_run_main(f.s, NULL) == IPU_ERR_INVALID_STATE); /* Load first */
    REQUIRE_OK(ipu_session_enqueue(f.s, 1, &sy, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 2, &sz, 0));
    REQUIRE(ipu_session_queue_depth(f.s, 1) == 1 && ipu_session_queue_depth(f.s, 2) == 1);
    REQUIRE_OK(ipu_session_run_load(f.s));
    REQUIRE(ipu_session_bind(f.s, 0, IPU_BIND_EMPTY, NULL, NULL) == IPU_ERR_INVALID_STATE);
    ipu_step_result r;
    REQUIRE_OK(ipu_session_run_main(f.s, &r));
    REQUIRE(r.iterations == 1 && r.padded_iterations == 0);
    for (int i = 0; i < 6; i++) REQUIRE(z[i] == y[i] + 100);
    REQUIRE(atomic_load(&ry.calls) == 1 && ry.st == IPU_OK);
    REQUIRE(atomic_load(&rz.calls) == 1 && rz.st == IPU_OK);
    REQUIRE(ipu_session_queue_depth(f.s, 1) == 0);
    ipu_session_stats st;
    ipu_session_get_stats(f.s, &st);
    REQUIRE(st.steps == 1 && st.iterations == 1 && st.num_threads == 1);
    sf_close(&f);

    /* EMPTY input (zeros) and EMPTY output (discarded). */
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE_OK(ipu_session_bind(f.s, 0, IPU_BIND_EMPTY, NULL, NULL));
    REQUIRE_OK(ipu_session_run_load(f.s));
    REQUIRE_OK(ipu_session_enqueue(f.s, 1, &sy, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 2, &sz, 0));
    REQUIRE_OK(ipu_session_run_main(f.s, &r));
    for (int i = 0; i < 6; i++) REQUIRE(z[i] == y[i]);
    sf_close(&f);
    REQUIRE(ipu_session_create(NULL, NULL, &f.s) == IPU_ERR_INVALID_ARGUMENT);
    ipu_session_destroy(NULL);
    return 0;
}

/* Z = X + W, W a TENSOR_DATA weight: by default bound zero-copy, or fed from a queue / callback. */
static m_model weight_model(void) {
    static _Alignas(64) float w[16] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
    m_model m = add_model(2, 3, 1);
    m.t[1] = (m_tensor){F32, TDATA, 0, 2, {2, 3}};
    m.t[2].offset = 64;
    m.arena = 128;
    m.a[1] = (m_anchor){"W", IN, 1, IPU_NO_INDEX, IPU_ANCHOR_TENSOR_DATA};
    m.p[0] = (m_prog){0, 1, {{IPU_OP_BIND, 0, 1, {1}}}};
    m.tdata = w;
    m.tdsize = sizeof w;
    return m;
}

static int run_one_add(ipu_session *s, const float *x, float *z) {
    ipu_slot sx = slot((void *)(uintptr_t)x, 24, 0, NULL), sz = slot(z, 24, 0, NULL);
    REQUIRE_OK(ipu_session_enqueue(s, 0, &sx, 0));
    REQUIRE_OK(ipu_session_enqueue(s, 2, &sz, 0));
    ipu_step_result r;
    REQUIRE_OK(ipu_session_run_main(s, &r));
    REQUIRE(r.iterations == 1);
    return 0;
}

static int test_weight_sources(void) {
    m_model m = weight_model();
    ipu_session_config c = scfg(1);
    float x[6] = {1, 2, 3, 4, 5, 6}, z[6];
    sfix f;
    /* TENSOR_DATA (default) */
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE(ipu_session_binding(f.s, 1) == IPU_BIND_TENSOR_DATA);
    REQUIRE_OK(ipu_session_run_load(f.s));
    REQUIRE(run_one_add(f.s, x, z) == 0);
    for (int i = 0; i < 6; i++) REQUIRE(z[i] == x[i] + 0.5f + (float)i);
    sf_close(&f);
    /* QUEUE: the Load program takes the first slot instead of the container's bytes */
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE_OK(ipu_session_bind(f.s, 1, IPU_BIND_QUEUE, NULL, NULL));
    float w2[6] = {10, 20, 30, 40, 50, 60};
    rec rw = {0};
    ipu_slot sw = slot(w2, sizeof w2, 0, &rw);
    REQUIRE_OK(ipu_session_enqueue(f.s, 1, &sw, 0));
    REQUIRE_OK(ipu_session_run_load(f.s));
    REQUIRE(atomic_load(&rw.calls) == 1 && rw.st == IPU_OK);
    w2[0] = -1000; /* the device has its own copy */
    REQUIRE(run_one_add(f.s, x, z) == 0);
    for (int i = 0; i < 6; i++) REQUIRE(z[i] == x[i] + 10.0f * (float)(i + 1));
    sf_close(&f);
    /* CALLBACK */
    REQUIRE_OK(sf_open(&f, &m, &c));
    float v = 7;
    REQUIRE_OK(ipu_session_bind(f.s, 1, IPU_BIND_CALLBACK, fill_const, &v));
    REQUIRE_OK(ipu_session_run_load(f.s));
    REQUIRE(run_one_add(f.s, x, z) == 0);
    for (int i = 0; i < 6; i++) REQUIRE(z[i] == x[i] + 7);
    sf_close(&f);
    /* a failing weight callback fails Load */
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE_OK(ipu_session_bind(f.s, 1, IPU_BIND_CALLBACK, fail_cb, NULL));
    REQUIRE(ipu_session_run_load(f.s) == IPU_ERR_CALLBACK);
    REQUIRE(strstr(ipu_last_error_message(), "'W'"));
    sf_close(&f);
    return 0;
}

typedef struct {
    ipu_session *s;
    ipu_status st;
    ipu_step_result r;
} main_arg;
static void *main_thread(void *p) {
    main_arg *a = p;
    a->st = ipu_session_run_main(a->s, &a->r);
    return NULL;
}

static int test_step_padding_and_flush(void) {
    m_model m = add_model(2, 3, 4);
    ipu_session_config c = scfg(1);
    c.timeout_ns = 20000000; /* 20 ms */
    sfix f;
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE_OK(ipu_session_run_load(f.s));
    float x[12], z[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    for (int b = 0; b < 2; b++) {
        ipu_slot sx = slot(x + 6 * b, 24, 0, NULL), sy = slot(x + 6 * b, 24, 0, NULL);
        ipu_slot sz = slot(z + 6 * b, 24, 0, NULL);
        REQUIRE_OK(ipu_session_enqueue(f.s, 0, &sx, 0));
        REQUIRE_OK(ipu_session_enqueue(f.s, 1, &sy, 0));
        REQUIRE_OK(ipu_session_enqueue(f.s, 2, &sz, 0));
    }
    uint64_t t0 = now_ns();
    ipu_step_result r;
    REQUIRE_OK(ipu_session_run_main(f.s, &r));
    REQUIRE(r.iterations == 2 && r.padded_iterations == 2);
    REQUIRE(now_ns() - t0 >= 15000000);
    for (int i = 0; i < 12; i++) REQUIRE(z[i] == 2 * x[i]);
    sf_close(&f);

    /* timeout 0: only a flush from another thread ends the step */
    c.timeout_ns = 0;
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE_OK(ipu_session_run_load(f.s));
    ipu_session_flush(f.s); /* no step in progress: nothing to pad */
    rec rz = {0};
    ipu_slot sx = slot(x, 24, 0, NULL), sz = slot(z, 24, 0, &rz);
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &sx, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 1, &sx, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 2, &sz, 0));
    main_arg a = {f.s, IPU_ERR_INTERNAL, {0, 0}};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, main_thread, &a) == 0);
    while (atomic_load(&rz.calls) == 0) sleep_ms(1);
    sleep_ms(30);
    ipu_session_flush(f.s);
    pthread_join(th, NULL);
    REQUIRE(a.st == IPU_OK && a.r.iterations == 1 && a.r.padded_iterations == 3);
    ipu_session_stats st;
    ipu_session_get_stats(f.s, &st);
    REQUIRE(st.steps == 1 && st.padded_iterations == 3);
    sf_close(&f);
    return 0;
}

static int test_stop_and_enqueue_timeout(void) {
    m_model m = add_model(2, 3, 1);
    ipu_session_config c = scfg(1);
    c.ring_capacity = 2;
    c.timeout_ns = 0;
    sfix f;
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE_OK(ipu_session_run_load(f.s));
    float x[6] = {0};
    ipu_slot sx = slot(x, 24, 0, NULL);
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &sx, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &sx, 0));
    uint64_t t0 = now_ns();
    REQUIRE(ipu_session_enqueue(f.s, 0, &sx, 20000000) == IPU_ERR_TIMEOUT);
    REQUIRE(now_ns() - t0 >= 19000000);
    REQUIRE(ipu_session_enqueue(f.s, 0, &sx, 0) == IPU_ERR_TIMEOUT);
    /* run_main blocks (Y has no slot), stop() unblocks it */
    main_arg a = {f.s, IPU_OK, {0, 0}};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, main_thread, &a) == 0);
    sleep_ms(20);
    ipu_session_stop(f.s);
    pthread_join(th, NULL);
    REQUIRE(a.st == IPU_ERR_CLOSED && ipu_session_stopped(f.s));
    REQUIRE(ipu_session_enqueue(f.s, 0, &sx, UINT64_MAX) == IPU_ERR_CLOSED);
    REQUIRE(ipu_session_run_main(f.s, NULL) == IPU_ERR_CLOSED);
    ipu_session_stop(f.s); /* idempotent */
    sf_close(&f);
    return 0;
}

typedef struct {
    ipu_session *s;
    ipu_slot sl;
    ipu_status st;
} enq_arg;
static void *enq_thread(void *p) {
    enq_arg *a = p;
    a->st = ipu_session_enqueue(a->s, 0, &a->sl, UINT64_MAX);
    return NULL;
}

static int test_disconnect_and_blocked_enqueue(void) {
    m_model m = add_model(2, 3, 1);
    ipu_session_config c = scfg(1);
    c.ring_capacity = 1;
    sfix f;
    REQUIRE_OK(sf_open(&f, &m, &c));
    float x[6] = {0};
    rec r1 = {0}, r2 = {0};
    ipu_slot s1 = slot(x, 24, 0, &r1);
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &s1, 0));
    enq_arg a = {f.s, slot(x, 24, 0, &r2), IPU_ERR_INTERNAL};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, enq_thread, &a) == 0);
    sleep_ms(20);
    REQUIRE(ipu_session_queue_depth(f.s, 0) == 1);
    ipu_session_disconnect(f.s, IPU_ERR_ABORTED); /* frees space: the blocked enqueue proceeds */
    pthread_join(th, NULL);
    REQUIRE(a.st == IPU_OK);
    REQUIRE(atomic_load(&r1.calls) == 1 && r1.st == IPU_ERR_ABORTED);
    ipu_session_disconnect(f.s, IPU_ERR_ABORTED);
    REQUIRE(atomic_load(&r2.calls) == 1 && r2.st == IPU_ERR_ABORTED);
    REQUIRE(ipu_session_queue_depth(f.s, 0) == 0);
    /* blocked enqueue unblocked by stop; slots left queued complete with CLOSED on destroy */
    rec r3 = {0};
    ipu_slot s3 = slot(x, 24, 0, &r3);
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &s3, 0));
    a = (enq_arg){f.s, slot(x, 24, 0, NULL), IPU_ERR_INTERNAL};
    REQUIRE(pthread_create(&th, NULL, enq_thread, &a) == 0);
    sleep_ms(20);
    ipu_session_stop(f.s);
    pthread_join(th, NULL);
    REQUIRE(a.st == IPU_ERR_CLOSED);
    sf_close(&f);
    REQUIRE(atomic_load(&r3.calls) == 1 && r3.st == IPU_ERR_CLOSED);
    return 0;
}

static ipu_status index_cb(void *buf, size_t nbytes, const ipu_anchor_info *a, void *ud) {
    (void)a;
    if (nbytes != 4) return IPU_ERR_INTERNAL;
    memcpy(buf, ud, 4);
    return IPU_OK;
}

static int test_fused_index(void) {
    m_model m = fused_model();
    ipu_session_config c = scfg(1);
    sfix f;
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE_OK(ipu_session_run_load(f.s));
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {2, 2, 2, 2, 2, 2}, z[6];
    uint32_t idx = 1;
    ipu_slot si = slot(&idx, 4, 0, NULL), sx = slot(x, 24, 0, NULL), sy = slot(y, 24, 0, NULL);
    ipu_slot sz = slot(z, 24, 0, NULL);
    ipu_slot bad = slot(&idx, 8, 0, NULL);
    REQUIRE(ipu_session_enqueue(f.s, 0, &bad, 0) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &si, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 2, &sx, 0)); /* X1 */
    REQUIRE_OK(ipu_session_enqueue(f.s, 3, &sy, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 5, &sz, 0)); /* Z1 */
    REQUIRE_OK(ipu_session_run_main(f.s, NULL));
    for (int i = 0; i < 6; i++) REQUIRE(z[i] == x[i] * 2);
    /* an out-of-range index fails the iteration; the index slot gets the error */
    uint32_t idx5 = 5;
    rec ri = {0};
    ipu_slot s5 = slot(&idx5, 4, 0, &ri);
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &s5, 0));
    REQUIRE(ipu_session_run_main(f.s, NULL) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(atomic_load(&ri.calls) == 1 && ri.st == IPU_ERR_INVALID_ARGUMENT);
    sf_close(&f);
    /* index from a callback */
    REQUIRE(build(&m, &f.c, &f.e) == IPU_OK);
    REQUIRE(ipu_session_create(f.e, &c, &f.s) == IPU_OK);
    uint32_t zero = 0;
    REQUIRE_OK(ipu_session_bind(f.s, 0, IPU_BIND_CALLBACK, index_cb, &zero));
    REQUIRE_OK(ipu_session_run_load(f.s));
    REQUIRE_OK(ipu_session_enqueue(f.s, 1, &sx, 0)); /* X0 */
    REQUIRE_OK(ipu_session_enqueue(f.s, 3, &sy, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 4, &sz, 0)); /* Z0 */
    REQUIRE_OK(ipu_session_run_main(f.s, NULL));
    for (int i = 0; i < 6; i++) REQUIRE(z[i] == x[i] + 2);
    sf_close(&f);
    /* fused models cannot batch */
    c.batching_dim = 0;
    REQUIRE(build(&m, &f.c, &f.e) == IPU_OK);
    REQUIRE(ipu_session_create(f.e, &c, &f.s) == IPU_ERR_INVALID_ARGUMENT);
    f.s = NULL;
    sf_close(&f);
    return 0;
}

/* Batching along dim 1 of float32[2, 4] (strided: outer 2, 4 rows per batch, 4 bytes per row).
 * Slots of 3 and 2 rows: batch 1 = 3 + 1 rows, batch 2 = 1 row + 3 rows of padding. */
static int test_batching_strided(void) {
    m_model m = add_model(2, 4, 2);
    ipu_session_config c = scfg(1);
    c.batching_dim = 1;
    c.timeout_ns = 0;
    c.batch_timeout_ns = 20000000;
    sfix f;
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE_OK(ipu_session_run_load(f.s));
    float xa[2 * 3], xb[2 * 2], za[2 * 3], zb[2 * 2];
    for (int i = 0; i < 6; i++) {
        xa[i] = (float)(i + 1);
        za[i] = -1;
    }
    for (int i = 0; i < 4; i++) {
        xb[i] = (float)(100 + i);
        zb[i] = -1;
    }
    rec rza = {0}, rzb = {0};
    ipu_slot bad = slot(xa, 4 * 6, 2, NULL);
    REQUIRE(ipu_session_enqueue(f.s, 0, &bad, 0) == IPU_ERR_INVALID_ARGUMENT); /* 2 rows = 16 B */
    ipu_slot s;
    s = slot(xa, sizeof xa, 3, NULL);
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &s, 0));
    s = slot(xa, sizeof xa, 3, NULL);
    REQUIRE_OK(ipu_session_enqueue(f.s, 1, &s, 0));
    s = slot(za, sizeof za, 3, &rza);
    REQUIRE_OK(ipu_session_enqueue(f.s, 2, &s, 0));
    s = slot(xb, sizeof xb, 2, NULL);
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &s, 0));
    s = slot(xb, sizeof xb, 2, NULL);
    REQUIRE_OK(ipu_session_enqueue(f.s, 1, &s, 0));
    s = slot(zb, sizeof zb, 2, &rzb);
    REQUIRE_OK(ipu_session_enqueue(f.s, 2, &s, 0));
    uint64_t t0 = now_ns();
    ipu_step_result r;
    REQUIRE_OK(ipu_session_run_main(f.s, &r));
    REQUIRE(r.iterations == 2 && r.padded_iterations == 0);
    REQUIRE(now_ns() - t0 >= 15000000); /* the second batch waited for the batch timeout */
    for (int i = 0; i < 6; i++) REQUIRE(za[i] == 2 * xa[i]);
    for (int i = 0; i < 4; i++) REQUIRE(zb[i] == 2 * xb[i]);
    REQUIRE(atomic_load(&rza.calls) == 1 && atomic_load(&rzb.calls) == 1 && rzb.st == IPU_OK);
    ipu_session_stats st;
    ipu_session_get_stats(f.s, &st);
    REQUIRE(st.padded_rows == 3);
    /* rows == 0: one whole batch */
    float xw[8], zw[8];
    for (int i = 0; i < 8; i++) xw[i] = (float)i;
    s = slot(xw, sizeof xw, 0, NULL);
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &s, 0));
    s = slot(xw, sizeof xw, 0, NULL);
    REQUIRE_OK(ipu_session_enqueue(f.s, 1, &s, 0));
    s = slot(zw, sizeof zw, 0, NULL);
    REQUIRE_OK(ipu_session_enqueue(f.s, 2, &s, 0));
    ipu_session_flush(f.s); /* nothing in progress yet: ignored */
    main_arg a = {f.s, IPU_ERR_INTERNAL, {0, 0}};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, main_thread, &a) == 0);
    sleep_ms(10);
    ipu_session_flush(f.s); /* ends the step after its first iteration */
    pthread_join(th, NULL);
    REQUIRE(a.st == IPU_OK && a.r.iterations == 1 && a.r.padded_iterations == 1);
    for (int i = 0; i < 8; i++) REQUIRE(zw[i] == 2 * xw[i]);
    sf_close(&f);
    /* batching_dim must exist on every streamed anchor */
    c.batching_dim = 2;
    REQUIRE(build(&m, &f.c, &f.e) == IPU_OK);
    REQUIRE(ipu_session_create(f.e, &c, &f.s) == IPU_ERR_INVALID_ARGUMENT);
    f.s = NULL;
    sf_close(&f);
    return 0;
}

/* A failing input callback fails the iteration: its slots get the error, the session goes on. */
static int test_iteration_failure(void) {
    m_model m = add_model(2, 3, 1);
    ipu_session_config c = scfg(1);
    sfix f;
    REQUIRE_OK(sf_open(&f, &m, &c));
    REQUIRE_OK(ipu_session_bind(f.s, 1, IPU_BIND_CALLBACK, fail_cb, NULL));
    REQUIRE_OK(ipu_session_run_load(f.s));
    float x[6] = {0}, z[6];
    rec rx = {0}, rz = {0};
    ipu_slot sx = slot(x, 24, 0, &rx), sz = slot(z, 24, 0, &rz);
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &sx, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 2, &sz, 0));
    REQUIRE(ipu_session_run_main(f.s, NULL) == IPU_ERR_CALLBACK);
    REQUIRE(strstr(ipu_last_error_message(), "'Y'"));
    REQUIRE(atomic_load(&rx.calls) == 1 && rx.st == IPU_ERR_CALLBACK);
    REQUIRE(atomic_load(&rz.calls) == 1 && rz.st == IPU_ERR_CALLBACK);
    REQUIRE(ipu_session_queue_depth(f.s, 0) == 0 && ipu_session_queue_depth(f.s, 2) == 0);
    sf_close(&f);
    return 0;
}

int main(void) {
    alarm(120); /* watchdog: a hang is a failure */
    RUN(test_bindings);
    RUN(test_weight_sources);
    RUN(test_step_padding_and_flush);
    RUN(test_stop_and_enqueue_timeout);
    RUN(test_disconnect_and_blocked_enqueue);
    RUN(test_fused_index);
    RUN(test_batching_strided);
    RUN(test_iteration_failure);
    return check_summary();
}
