/* Sharded executables (ipu_executable_stage, session_stages.c): stage table parsing and
 * validation; results of sequential and pipelined stages on 1-3 workers equal to the unsharded
 * computation; concurrency shown by the session's tick counters; a failing stage fails exactly
 * its batch's request; stop and destroy while batches are in flight complete every slot once.
 * tests/test_c_sanitizers.py runs this file under ASan and TSan. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipu/ipu.h"

#include "runtime_harness.h"

#define ROWS 64
#define COLS 64 /* 16 KiB tensors: instructions are split over a group's workers */

/* Stage 0 (IPU 0): H = X + X; copies: H → H1, X → X1; stage 1 (IPU 1): Z = H1 * X1. */
static m_model staged_model(int pipelined, uint32_t bps) {
    m_model m;
    memset(&m, 0, sizeof m);
    uint64_t nb = ROWS * COLS * 4;
    m.bps = bps;
    m.nsub = 1;
    m.load = 0;
    m.index_anchor = IPU_NO_INDEX;
    m.main[0] = 1;
    m.arena = 5 * nb;
    m.nt = 5;
    m.na = 2;
    m.np = 4;
    m.num_ipus = 2;
    for (uint32_t i = 0; i < 5; i++) m.t[i] = (m_tensor){F32, ARENA, i * nb, 2, {ROWS, COLS}};
    m.a[0] = (m_anchor){"X", IN, 0, IPU_NO_INDEX, 0};
    m.a[1] = (m_anchor){"Z", OUT, 4, IPU_NO_INDEX, 0};
    m.p[0] = (m_prog){0, 0, {{0}}};
    m.p[1] = (m_prog){1, 1, {{IPU_OP_ADD, 2, 1, {0, 0, 1}}}};
    m.p[2] = (m_prog){2, 1, {{IPU_OP_MUL, 2, 1, {2, 3, 4}}}};
    m.p[3] = (m_prog){3, 2, {{IPU_OP_COPY, 1, 1, {1, 2}}, {IPU_OP_COPY, 1, 1, {0, 3}}}};
    m.nst = 2;
    m.st_flags = pipelined ? IPU_STAGES_PIPELINED : 0;
    m.st[0][0] = 1;
    m.st[0][1] = 0;
    m.st[0][2] = 3;
    m.st[1][0] = 2;
    m.st[1][1] = 1;
    m.st[1][2] = IPU_NO_INDEX;
    return m;
}

static ipu_status try_build(const m_model *m) {
    ipu_container *c = NULL;
    ipu_executable *e = NULL;
    ipu_status st = build(m, &c, &e);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return st;
}

static int test_stage_table(void) {
    m_model m = staged_model(1, 2);
    ipu_container *c;
    ipu_executable *e;
    REQUIRE_OK(build(&m, &c, &e));
    ipu_executable_info info;
    ipu_executable_get_info(e, &info);
    REQUIRE(info.num_stages == 2 && info.pipelined == 1);
    ipu_stage_info si;
    REQUIRE_OK(ipu_executable_stage(e, 0, &si));
    REQUIRE(si.program == 1 && si.ipu == 0 && si.copy_program == 3);
    REQUIRE_OK(ipu_executable_stage(e, 1, &si));
    REQUIRE(si.program == 2 && si.ipu == 1 && si.copy_program == IPU_NO_INDEX);
    REQUIRE(ipu_executable_stage(e, 2, &si) == IPU_ERR_NOT_FOUND);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);

    m_model bad = staged_model(1, 2);
    bad.st[1][1] = 2; /* IPU 2 of 2 */
    REQUIRE(try_build(&bad) == IPU_ERR_CORRUPT);
    REQUIRE(strstr(ipu_last_error_message(), "num_ipus") != NULL);
    bad = staged_model(1, 2);
    bad.st[0][2] = 2; /* the MUL program as a copy program */
    REQUIRE(try_build(&bad) == IPU_ERR_BAD_PROGRAM);
    REQUIRE(strstr(ipu_last_error_message(), "not a COPY") != NULL);
    bad = staged_model(1, 2);
    bad.st[1][0] = 9; /* no such program */
    REQUIRE(try_build(&bad) == IPU_ERR_CORRUPT);
    bad = staged_model(1, 2);
    bad.st[1][0] = 0; /* the Load program */
    REQUIRE(try_build(&bad) == IPU_ERR_CORRUPT);
    bad = staged_model(1, 2);
    bad.st_flags = 2;
    REQUIRE(try_build(&bad) == IPU_ERR_CORRUPT);
    bad = staged_model(1, 2);
    bad.st[0][0] = 2; /* stage 0 is not the Main program */
    REQUIRE(try_build(&bad) == IPU_ERR_CORRUPT);
    /* pipelined stages run concurrently: no arena byte one writes may be used by another */
    static const char want[] = "pipelined stages 0 and 1 run concurrently but both use arena "
                               "byte 16384, which stage 0's program 1 writes";
    bad = staged_model(1, 2);
    bad.p[2].ins[0].ops[2] = 1; /* stage 1 writes H, which stage 0 writes */
    REQUIRE(try_build(&bad) == IPU_ERR_BAD_PROGRAM && strstr(ipu_last_error_message(), want));
    bad = staged_model(1, 2);
    bad.p[2].ins[0].ops[0] = 1; /* stage 1 reads H while stage 0 writes it */
    REQUIRE(try_build(&bad) == IPU_ERR_BAD_PROGRAM && strstr(ipu_last_error_message(), want));
    m = staged_model(0, 2);
    m.p[2].ins[0].ops[0] = 1; /* sequential stages: one after the other, allowed */
    REQUIRE(try_build(&m) == IPU_OK);
    /* the streamed anchors hold the batch of stage 0 (inputs) and of the last stage (outputs) */
    static const char in_x[] = "pipelined stage 1: program 2 instruction 0 (mul) reads bytes of "
                               "input anchor 'X', which only stage 0 may use";
    bad = staged_model(1, 2);
    bad.p[2].ins[0].ops[1] = 0; /* stage 1 reads X: batch T's rows while it computes T - 1 */
    REQUIRE(try_build(&bad) == IPU_ERR_BAD_PROGRAM && strstr(ipu_last_error_message(), in_x));
    bad = staged_model(1, 2);
    bad.st[1][0] = 1; /* both stages run program 1, which reads X */
    REQUIRE(try_build(&bad) == IPU_ERR_BAD_PROGRAM &&
            strstr(ipu_last_error_message(), "reads bytes of input anchor 'X'"));
    bad = staged_model(1, 2);
    bad.p[1].ins[0].ops[2] = 4; /* stage 0 writes Z, which the store takes from stage 1 */
    REQUIRE(try_build(&bad) == IPU_ERR_BAD_PROGRAM &&
            strstr(ipu_last_error_message(),
                   "pipelined stage 0: program 1 instruction 0 (add) "
                   "writes bytes of output anchor 'Z', which only stage 1 may use"));
    return 0;
}

/* NB batches through the runtime; Z must equal (X + X) * X exactly. */
static int run_staged(int pipelined, uint32_t nth, uint32_t bps, uint32_t nb_batches,
                      ipu_runtime_stats *stats) {
    m_model m = staged_model(pipelined, bps);
    fixture f;
    ipu_runtime_config cfg = cfg_threads(nth);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    size_t n = (size_t)nb_batches * ROWS * COLS;
    float *x = malloc(n * sizeof *x), *z = calloc(n, sizeof *z);
    REQUIRE(x && z);
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % 1000) / 37.0f - 13.0f;
    enum { REQ = 3 };
    ipu_request *rq[REQ];
    size_t per = n / REQ; /* nb_batches is a multiple of REQ */
    for (int q = 0; q < REQ; q++) {
        const void *ins[2] = {x + q * per, NULL};
        void *outs[2] = {NULL, z + q * per};
        ipu_request_desc d = {.num_batches = nb_batches / REQ,
                              .inputs = ins,
                              .outputs = outs,
                              .subgraph = IPU_NO_INDEX};
        REQUIRE_OK(ipu_runtime_submit(f.rt, &d, &rq[q]));
    }
    for (int q = 0; q < REQ; q++) {
        REQUIRE_OK(ipu_request_wait(rq[q], UINT64_MAX));
        ipu_request_release(rq[q]);
    }
    for (size_t i = 0; i < n; i++) {
        float h = x[i] + x[i];
        REQUIRE(z[i] == h * x[i]);
    }
    ipu_runtime_get_stats(f.rt, stats);
    free(x);
    free(z);
    fx_close(&f);
    return 0;
}

static int test_results(void) {
    for (int pipelined = 0; pipelined < 2; pipelined++)
        for (uint32_t nth = 1; nth <= 3; nth++)
            for (uint32_t bps = 2; bps <= 4; bps += 2) {
                ipu_runtime_stats st;
                REQUIRE(run_staged(pipelined, nth, bps, 9, &st) == 0);
                REQUIRE(st.iterations == 9);
                if (!pipelined) {
                    REQUIRE(st.pipeline_ticks == 0);
                } else {
                    REQUIRE(st.pipeline_ticks >= 10); /* 9 batches + at least one drain tick */
                    /* With >= 2 workers both stages compute at once while the pipeline is full. */
                    REQUIRE((st.concurrent_ticks > 0) == (nth > 1));
                }
            }
    return 0;
}

/* Stage 0: H = X + X; copies H → H1, I → I1; stage 1: Y = Gather(H1, I1) along dim 0. */
static m_model gather_model(void) {
    m_model m;
    memset(&m, 0, sizeof m);
    uint64_t nb = ROWS * COLS * 4;
    m.bps = 4;
    m.nsub = 1;
    m.load = 0;
    m.index_anchor = IPU_NO_INDEX;
    m.main[0] = 1;
    m.nt = 6;
    m.na = 3;
    m.np = 4;
    m.num_ipus = 2;
    m.t[0] = (m_tensor){F32, ARENA, 0, 2, {ROWS, COLS}};           /* X */
    m.t[1] = (m_tensor){I32, ARENA, nb, 1, {2}};                   /* I */
    m.t[2] = (m_tensor){F32, ARENA, nb + 64, 2, {ROWS, COLS}};     /* H */
    m.t[3] = (m_tensor){F32, ARENA, 2 * nb + 64, 2, {ROWS, COLS}}; /* H1 */
    m.t[4] = (m_tensor){I32, ARENA, 3 * nb + 64, 1, {2}};          /* I1 */
    m.t[5] = (m_tensor){F32, ARENA, 3 * nb + 128, 2, {2, COLS}};   /* Y */
    m.arena = 3 * nb + 128 + 2 * COLS * 4;
    m.a[0] = (m_anchor){"X", IN, 0, IPU_NO_INDEX, 0};
    m.a[1] = (m_anchor){"I", IN, 1, IPU_NO_INDEX, 0};
    m.a[2] = (m_anchor){"Y", OUT, 5, IPU_NO_INDEX, 0};
    m.p[0] = (m_prog){0, 0, {{0}}};
    m.p[1] = (m_prog){1, 1, {{IPU_OP_ADD, 2, 1, {0, 0, 2}}}};
    m.p[2] = (m_prog){2, 1, {{IPU_OP_GATHER, 2, 1, {3, 4, 5}}}};
    m.nattr[2][0] = 3;
    m.attr[2][0][0] = 1;
    m.attr[2][0][1] = ROWS;
    m.attr[2][0][2] = COLS;
    m.p[3] = (m_prog){3, 2, {{IPU_OP_COPY, 1, 1, {2, 3}}, {IPU_OP_COPY, 1, 1, {1, 4}}}};
    m.nst = 2;
    m.st_flags = IPU_STAGES_PIPELINED;
    m.st[0][0] = 1;
    m.st[0][1] = 0;
    m.st[0][2] = 3;
    m.st[1][0] = 2;
    m.st[1][1] = 1;
    m.st[1][2] = IPU_NO_INDEX;
    return m;
}

static int test_failing_stage(void) {
    m_model m = gather_model();
    fixture f;
    ipu_runtime_config cfg = cfg_threads(2);
    cfg.auto_reset = 1; /* later submissions are accepted after the failure */
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    enum { REQ = 10 };
    static float x[ROWS * COLS], y[REQ][2 * COLS];
    static int32_t idx[REQ][2];
    for (int i = 0; i < ROWS * COLS; i++) x[i] = (float)i;
    ipu_request *rq[REQ];
    for (int q = 0; q < REQ; q++) {
        idx[q][0] = q % 4 == 1 ? ROWS + 5 : q; /* requests 1, 5, 9 have a bad index */
        idx[q][1] = 2;
        const void *ins[3] = {x, idx[q], NULL};
        void *outs[3] = {NULL, NULL, y[q]};
        ipu_request_desc d = {.num_batches = 1,
                              .inputs = ins,
                              .outputs = outs,
                              .subgraph = IPU_NO_INDEX};
        REQUIRE_OK(ipu_runtime_submit(f.rt, &d, &rq[q]));
    }
    /* The failing batch's request gets the kernel's error; the runtime then fails every queued
     * request (its failure semantics, device.c) and reloads (auto_reset); batches already in
     * the pipeline finish. */
    int ok = 0;
    for (int q = 0; q < REQ; q++) {
        ipu_status st = ipu_request_wait(rq[q], UINT64_MAX);
        ipu_request_release(rq[q]);
        if (q == 0 || q == 2) REQUIRE(st == IPU_OK); /* before, and in flight with, request 1 */
        if (q == 1) REQUIRE(st == IPU_ERR_INVALID_ARGUMENT);
        if (st != IPU_OK) {
            REQUIRE(st == IPU_ERR_INVALID_ARGUMENT);
            continue;
        }
        ok++;
        for (int c = 0; c < COLS; c++) {
            REQUIRE(y[q][c] == x[q * COLS + c] + x[q * COLS + c]);
            REQUIRE(y[q][COLS + c] == x[2 * COLS + c] + x[2 * COLS + c]);
        }
    }
    ipu_runtime_stats st;
    ipu_runtime_get_stats(f.rt, &st);
    REQUIRE(ok >= 2 && ok <= REQ - 3 && st.requests_failed >= (uint64_t)(REQ - ok));
    fx_close(&f);
    return 0;
}

/* ---- stop / destroy while batches are in the pipeline --------------------------------------- */

typedef struct {
    atomic_int calls;
} rec;
static void rec_done(ipu_status st, void *ud) {
    (void)st;
    atomic_fetch_add(&((rec *)ud)->calls, 1);
}
static void req_done(ipu_request *rq, ipu_status st, void *ud) {
    (void)rq;
    rec_done(st, ud);
}

typedef struct {
    ipu_session *s;
    atomic_int ret;
} dev_t_;
static void *dev_loop(void *p) {
    dev_t_ *d = p;
    ipu_status st;
    while ((st = ipu_session_run_main(d->s, NULL)) == IPU_OK) {}
    atomic_store(&d->ret, (int)st);
    return NULL;
}

static int stop_once(uint32_t nth, int delay_us) {
    m_model m = staged_model(1, 4);
    ipu_container *c;
    ipu_executable *e;
    REQUIRE_OK(build(&m, &c, &e));
    ipu_session_config cfg = ipu_session_config_default();
    cfg.num_threads = nth;
    cfg.ring_capacity = 64;
    cfg.timeout_ns = 0; /* a step waits for its batches: stop finds batches in flight */
    ipu_session *s;
    REQUIRE_OK(ipu_session_create(e, &cfg, &s));
    REQUIRE_OK(ipu_session_run_load(s));
    enum { N = 22 };
    size_t nb = ROWS * COLS * 4;
    float *buf = calloc(2 * N, nb);
    REQUIRE(buf);
    static rec r[N][2];
    memset(r, 0, sizeof r);
    int queued[N][2];
    dev_t_ d = {s, 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, dev_loop, &d) == 0);
    for (int i = 0; i < N; i++)
        for (uint32_t a = 0; a < 2; a++) {
            ipu_slot sl = {(char *)buf + ((size_t)i * 2 + a) * nb, nb, 0, rec_done, &r[i][a]};
            queued[i][a] = ipu_session_enqueue(s, a, &sl, 1000000000u) == IPU_OK;
        }
    struct timespec ts = {0, delay_us * 1000L};
    nanosleep(&ts, NULL);
    ipu_session_stop(s);
    pthread_join(th, NULL);
    REQUIRE(atomic_load(&d.ret) == IPU_ERR_CLOSED);
    ipu_session_destroy(s);
    for (int i = 0; i < N; i++)
        for (int a = 0; a < 2; a++) REQUIRE(atomic_load(&r[i][a].calls) == queued[i][a]);
    free(buf);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return 0;
}

static int test_stop_in_flight(void) {
    for (int rep = 0; rep < 4; rep++)
        for (uint32_t nth = 1; nth <= 3; nth++) REQUIRE(stop_once(nth, rep * 400) == 0);
    return 0;
}

/* Destroying a runtime with requests still queued completes each of them once. */
static int test_destroy_with_requests(void) {
    m_model m = staged_model(1, 4);
    fixture f;
    ipu_runtime_config cfg = cfg_threads(2);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    enum { REQ = 12 };
    size_t n = ROWS * COLS;
    float *x = calloc(n, sizeof *x), *z = calloc((size_t)REQ * n, sizeof *z);
    REQUIRE(x && z);
    static rec r[REQ];
    memset(r, 0, sizeof r);
    ipu_request *rq[REQ];
    for (int q = 0; q < REQ; q++) {
        const void *ins[2] = {x, NULL};
        void *outs[2] = {NULL, z + (size_t)q * n};
        ipu_request_desc d = {.num_batches = 1,
                              .inputs = ins,
                              .outputs = outs,
                              .subgraph = IPU_NO_INDEX,
                              .done = req_done,
                              .user_data = &r[q]};
        REQUIRE_OK(ipu_runtime_submit(f.rt, &d, &rq[q]));
    }
    fx_close(&f);
    for (int q = 0; q < REQ; q++) {
        REQUIRE(ipu_request_is_done(rq[q]));
        REQUIRE(atomic_load(&r[q].calls) == 1);
        ipu_request_release(rq[q]);
    }
    free(x);
    free(z);
    return 0;
}

int main(void) {
    RUN(test_stage_table);
    RUN(test_results);
    RUN(test_failing_stage);
    RUN(test_stop_in_flight);
    RUN(test_destroy_with_requests);
    return check_summary();
}
