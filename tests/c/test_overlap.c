/* Overlap I/O tests (ipu_session.h, session_overlap.c): the same results with the pipeline on
 * and off for multi-iteration steps, dynamic batching, a fused model and N-batch runtime
 * requests; stats.overlap_io; fallback for a partially overlapping memory plan; stop mid-pipeline
 * completes every slot exactly once. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ipu/ipu.h"

#include "runtime_harness.h"

typedef struct {
    atomic_int calls;
    ipu_status st;
} rec;
static void rec_done(ipu_status st, void *ud) {
    rec *r = ud;
    r->st = st;
    atomic_fetch_add(&r->calls, 1);
}

typedef struct {
    ipu_container *c;
    ipu_executable *e;
    ipu_session *s;
} sfix;

static ipu_status open_s(sfix *f, const m_model *m, int overlap, uint32_t bdim) {
    memset(f, 0, sizeof *f);
    ipu_session_config cfg = ipu_session_config_default();
    cfg.num_threads = 2;
    cfg.ring_capacity = 64;
    cfg.overlap_io = overlap;
    cfg.batching_dim = bdim;
    cfg.timeout_ns = 2000000;
    ipu_status st = build(m, &f->c, &f->e);
    if (st == IPU_OK) st = ipu_session_create(f->e, &cfg, &f->s);
    if (st == IPU_OK) st = ipu_session_run_load(f->s);
    return st;
}

static void close_s(sfix *f) {
    ipu_session_destroy(f->s);
    ipu_executable_destroy(f->e);
    ipu_container_destroy(f->c);
}

#define NIT 11
#define ROWS 4
#define COLS 8

/* Run NIT batches of add (bps 3; rows per slot from `rows`, 0 = whole batches) and check. */
static int run_add(int overlap, const uint32_t *rows, uint32_t nslots, int *used) {
    m_model m = add_model(ROWS, COLS, 3);
    m.io_tiles = 8;
    sfix f;
    REQUIRE_OK(open_s(&f, &m, overlap, rows ? 0 : IPU_NO_INDEX));
    static float x[NIT * ROWS * COLS], y[NIT * ROWS * COLS], z[NIT * ROWS * COLS];
    for (int i = 0; i < NIT * ROWS * COLS; i++) {
        x[i] = (float)i;
        y[i] = (float)(3 * i + 1);
        z[i] = -1;
    }
    rec r[3][NIT * ROWS];
    memset(r, 0, sizeof r);
    uint32_t n = rows ? nslots : NIT, off = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = rows ? rows[i] : ROWS;
        uint64_t nb = (uint64_t)k * COLS * 4;
        float *p[3] = {x + off * COLS, y + off * COLS, z + off * COLS};
        for (uint32_t a = 0; a < 3; a++) {
            ipu_slot sl = {p[a], nb, rows ? k : 0, rec_done, &r[a][i]};
            REQUIRE_OK(ipu_session_enqueue(f.s, a, &sl, 0));
        }
        off += k;
    }
    ipu_step_result res;
    uint32_t total = 0;
    while (total < off) {
        REQUIRE_OK(ipu_session_run_main(f.s, &res));
        REQUIRE(res.iterations > 0);
        total += res.iterations * ROWS;
    }
    for (uint32_t i = 0; i < off * COLS; i++) REQUIRE(z[i] == x[i] + y[i]);
    for (uint32_t i = 0; i < n; i++)
        for (int a = 0; a < 3; a++)
            REQUIRE(atomic_load(&r[a][i].calls) == 1 && r[a][i].st == IPU_OK);
    ipu_session_stats stats;
    ipu_session_get_stats(f.s, &stats);
    *used = stats.overlap_io;
    close_s(&f);
    return 0;
}

static int test_add_steps(void) {
    int on = -1, off = -1;
    REQUIRE(run_add(-1, NULL, 0, &on) == 0); /* num_io_tiles 8: on */
    REQUIRE(on == 1);
    REQUIRE(run_add(0, NULL, 0, &off) == 0);
    REQUIRE(off == 0);
    return 0;
}

static int test_batching(void) {
    static const uint32_t rows[] = {1, 3, 2, 2, 4, 1, 1, 1, 1, 3, 5, 2, 6, 4, 4, 4};
    uint32_t n = sizeof rows / sizeof rows[0];
    int on = -1, off = -1;
    REQUIRE(run_add(1, rows, n, &on) == 0);
    REQUIRE(on == 1);
    REQUIRE(run_add(0, rows, n, &off) == 0);
    return 0;
}

static int run_fused(int overlap, float *z0, float *z1) {
    m_model m = fused_model();
    m.bps = 2;
    sfix f;
    REQUIRE_OK(open_s(&f, &m, overlap, IPU_NO_INDEX));
    enum { N = 9 };
    static uint32_t idx[N];
    static float x[N][6], y[N][6];
    rec r[N][4];
    memset(r, 0, sizeof r);
    for (int i = 0; i < N; i++) {
        idx[i] = (uint32_t)(i * 7 % 3 == 1);
        for (int j = 0; j < 6; j++) {
            x[i][j] = (float)(i + j);
            y[i][j] = (float)(2 * i - j);
        }
        uint32_t s = idx[i];
        ipu_slot si = {&idx[i], 4, 0, rec_done, &r[i][0]};
        ipu_slot sx = {x[i], 24, 0, rec_done, &r[i][1]};
        ipu_slot sy = {y[i], 24, 0, rec_done, &r[i][2]};
        ipu_slot sz = {s ? z1 + 6 * i : z0 + 6 * i, 24, 0, rec_done, &r[i][3]};
        REQUIRE_OK(ipu_session_enqueue(f.s, 0, &si, 0));
        REQUIRE_OK(ipu_session_enqueue(f.s, s ? 2 : 1, &sx, 0));
        REQUIRE_OK(ipu_session_enqueue(f.s, 3, &sy, 0));
        REQUIRE_OK(ipu_session_enqueue(f.s, s ? 5 : 4, &sz, 0));
    }
    ipu_step_result res;
    for (uint32_t done = 0; done < N; done += res.iterations)
        REQUIRE_OK(ipu_session_run_main(f.s, &res));
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < 4; k++)
            REQUIRE(atomic_load(&r[i][k].calls) == 1 && r[i][k].st == IPU_OK);
        for (int j = 0; j < 6; j++) {
            float want = idx[i] ? x[i][j] * y[i][j] : x[i][j] + y[i][j];
            REQUIRE((idx[i] ? z1 : z0)[6 * i + j] == want);
        }
    }
    ipu_session_stats st;
    ipu_session_get_stats(f.s, &st);
    REQUIRE(st.overlap_io == (overlap == 1));
    close_s(&f);
    return 0;
}

static int test_fused(void) {
    static float a0[54], a1[54], b0[54], b1[54];
    REQUIRE(run_fused(1, a0, a1) == 0);
    REQUIRE(run_fused(0, b0, b1) == 0);
    REQUIRE(memcmp(a0, b0, sizeof a0) == 0 && memcmp(a1, b1, sizeof a1) == 0);
    return 0;
}

/* A tensor over the second half of Y and the first half of Z: overlap I/O is impossible;
 * serial fallback. */
static int test_partial_overlap_falls_back(void) {
    m_model m = add_model(2, 16, 2); /* 128-byte tensors at 0, 128, 256 */
    m.t[3] = (m_tensor){F32, ARENA, 128 + 64, 2, {2, 16}};
    m.nt = 4;
    sfix f;
    REQUIRE_OK(open_s(&f, &m, 1, IPU_NO_INDEX));
    ipu_session_stats st;
    ipu_session_get_stats(f.s, &st);
    REQUIRE(st.overlap_io == 0);
    static float x[32], y[32], z[32];
    for (int i = 0; i < 32; i++) {
        x[i] = (float)i;
        y[i] = 1;
    }
    ipu_slot sx = {x, 128, 0, NULL, NULL}, sy = {y, 128, 0, NULL, NULL},
             sz = {z, 128, 0, NULL, NULL};
    REQUIRE_OK(ipu_session_enqueue(f.s, 0, &sx, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 1, &sy, 0));
    REQUIRE_OK(ipu_session_enqueue(f.s, 2, &sz, 0));
    ipu_step_result res;
    REQUIRE_OK(ipu_session_run_main(f.s, &res));
    REQUIRE(res.iterations == 1);
    ipu_session_get_stats(f.s, &st);
    REQUIRE(st.overlap_io == 0);
    close_s(&f);
    return 0;
}

typedef struct {
    ipu_session *s;
    atomic_int ret;
} dev_arg;
static void *dev_loop(void *p) {
    dev_arg *d = p;
    ipu_step_result r;
    ipu_status st;
    while ((st = ipu_session_run_main(d->s, &r)) == IPU_OK) {}
    atomic_store(&d->ret, (int)st);
    return NULL;
}

/* Stop (then destroy) while the pipeline runs: every slot completes exactly once. */
static int stop_once(int destroy_only, int delay_us) {
    m_model m = add_model(64, 64, 4);
    sfix f;
    REQUIRE_OK(open_s(&f, &m, 1, IPU_NO_INDEX));
    enum { N = 40 };
    uint64_t nb = 64 * 64 * 4;
    float *buf = calloc(3 * N, (size_t)nb);
    REQUIRE(buf);
    static rec r[N][3];
    memset(r, 0, sizeof r);
    dev_arg d = {f.s, 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, dev_loop, &d) == 0);
    uint32_t queued[N][3];
    memset(queued, 0, sizeof queued);
    for (int i = 0; i < N; i++)
        for (uint32_t a = 0; a < 3; a++) {
            ipu_slot sl = {(char *)buf + ((size_t)i * 3 + a) * nb, nb, 0, rec_done, &r[i][a]};
            queued[i][a] = ipu_session_enqueue(f.s, a, &sl, 1000000000u) == IPU_OK;
            if (i == N / 2 && a == 2) {
                struct timespec ts = {0, delay_us * 1000L};
                nanosleep(&ts, NULL);
                if (!destroy_only) ipu_session_stop(f.s);
            }
        }
    if (destroy_only) ipu_session_stop(f.s);
    pthread_join(th, NULL);
    REQUIRE(atomic_load(&d.ret) == IPU_ERR_CLOSED);
    ipu_session_destroy(f.s);
    f.s = NULL;
    for (int i = 0; i < N; i++)
        for (int a = 0; a < 3; a++) REQUIRE(atomic_load(&r[i][a].calls) == (int)queued[i][a]);
    free(buf);
    close_s(&f);
    return 0;
}

static int test_stop_mid_pipeline(void) {
    for (int rep = 0; rep < 6; rep++) {
        REQUIRE(stop_once(0, rep * 300) == 0);
        REQUIRE(stop_once(1, rep * 300) == 0);
    }
    return 0;
}

/* N-batch requests through the runtime with overlap on and off. */
static int run_rt(int overlap, float *z) {
    m_model m = add_model(2, 8, 3);
    fixture f;
    ipu_runtime_config cfg = cfg_threads(2);
    cfg.overlap_io = overlap;
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    enum { NB = 7, REQ = 5 };
    static float x[REQ][NB * 16], y[REQ][NB * 16];
    ipu_request *rq[REQ];
    for (int q = 0; q < REQ; q++) {
        for (int i = 0; i < NB * 16; i++) {
            x[q][i] = (float)(q * 100 + i);
            y[q][i] = (float)i / 2;
        }
        REQUIRE_OK(submit_add(f.rt, NB, x[q], y[q], z + q * NB * 16, NULL, NULL, &rq[q]));
    }
    for (int q = 0; q < REQ; q++) {
        REQUIRE_OK(ipu_request_wait(rq[q], UINT64_MAX));
        ipu_request_release(rq[q]);
        for (int i = 0; i < NB * 16; i++) REQUIRE(z[q * NB * 16 + i] == x[q][i] + y[q][i]);
    }
    fx_close(&f);
    return 0;
}

static int test_runtime_requests(void) {
    static float a[5 * 7 * 16], b[5 * 7 * 16];
    REQUIRE(run_rt(1, a) == 0);
    REQUIRE(run_rt(0, b) == 0);
    REQUIRE(memcmp(a, b, sizeof a) == 0);
    return 0;
}

int main(void) {
    RUN(test_add_steps);
    RUN(test_batching);
    RUN(test_fused);
    RUN(test_partial_overlap_falls_back);
    RUN(test_runtime_requests);
    RUN(test_stop_mid_pipeline);
    return check_summary();
}
