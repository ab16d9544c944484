/* Tracepoints (ipu_trace.h): argument checks, one load/compute/store event per iteration on the
 * serial loop and with overlap I/O, the bounded buffer keeping the most recent events, reads
 * into a short array, set_trace only before the first submit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipu/ipu.h"

#include "runtime_harness.h"

#define ROWS 2
#define COLS 3

typedef struct {
    ipu_container *c;
    ipu_executable *e;
    ipu_runtime *rt;
} fix;

static ipu_status open_rt(fix *f, uint32_t bps, uint32_t io_tiles, int overlap) {
    memset(f, 0, sizeof *f);
    m_model m = add_model(ROWS, COLS, bps);
    m.io_tiles = io_tiles;
    ipu_runtime_config cfg = ipu_runtime_config_default();
    cfg.num_threads = 2;
    cfg.timeout_ns = 0; /* no padding: exactly one iteration per batch */
    cfg.overlap_io = overlap;
    ipu_status st = build(&m, &f->c, &f->e);
    if (st == IPU_OK) st = ipu_runtime_create(f->e, &cfg, &f->rt);
    return st;
}

static void close_rt(fix *f) {
    ipu_runtime_destroy(f->rt);
    ipu_executable_destroy(f->e);
    ipu_container_destroy(f->c);
}

/* n requests of one batch each, waited for. */
static int run_requests(ipu_runtime *rt, int n) {
    static float x[ROWS * COLS], y[ROWS * COLS], z[ROWS * COLS];
    for (int i = 0; i < n; i++) {
        const void *ins[3] = {x, y, NULL};
        void *outs[3] = {NULL, NULL, z};
        ipu_request_desc d = {.num_batches = 1,
                              .inputs = ins,
                              .outputs = outs,
                              .subgraph = IPU_NO_INDEX};
        ipu_request *r;
        REQUIRE_OK(ipu_runtime_submit(rt, &d, &r));
        REQUIRE_OK(ipu_request_wait(r, UINT64_MAX));
        ipu_request_release(r);
    }
    return 0;
}

static int test_arguments(void) {
    ipu_trace *t = NULL;
    REQUIRE(ipu_trace_create(0, &t) == IPU_ERR_INVALID_ARGUMENT && t == NULL);
    REQUIRE(ipu_trace_create(4, NULL) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(ipu_trace_create(SIZE_MAX, &t) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ipu_trace_create(4, &t));
    REQUIRE(ipu_trace_capacity(t) == 4 && ipu_trace_capacity(NULL) == 0);
    size_t n = 99;
    uint64_t dropped = 99;
    REQUIRE(ipu_trace_read(NULL, NULL, 0, &n, NULL) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(ipu_trace_read(t, NULL, 4, &n, NULL) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(ipu_trace_read(t, NULL, 0, NULL, NULL) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ipu_trace_read(t, NULL, 0, &n, &dropped));
    REQUIRE(n == 0 && dropped == 0);
    REQUIRE(ipu_runtime_set_trace(NULL, t) == IPU_ERR_INVALID_ARGUMENT);
    ipu_trace_clear(NULL);
    ipu_trace_destroy(t);
    ipu_trace_destroy(NULL);
    return 0;
}

/* Every iteration leaves one event of each kind, in load <= compute <= store order. */
static int check_iterations(ipu_trace *t, uint64_t iterations) {
    ipu_trace_event ev[256];
    size_t n;
    uint64_t dropped;
    REQUIRE_OK(ipu_trace_read(t, ev, 256, &n, &dropped));
    REQUIRE(dropped == 0 && n == 3 * iterations);
    uint64_t count[4] = {0};
    uint64_t load_start = 0, compute_start = 0, store_start = 0;
    for (size_t i = 0; i < n; i++) {
        REQUIRE(ev[i].seq == i);
        REQUIRE(ev[i].start_ns > 0 && ev[i].start_ns <= ev[i].end_ns);
        REQUIRE(ev[i].kind >= IPU_TRACE_LOAD && ev[i].kind <= IPU_TRACE_STORE);
        REQUIRE(ev[i].subgraph == 0);
        count[ev[i].kind]++;
        /* the k-th compute starts after the k-th load ended, the k-th store after compute */
        if (ev[i].kind == IPU_TRACE_LOAD) load_start = ev[i].end_ns;
        if (ev[i].kind == IPU_TRACE_COMPUTE) {
            REQUIRE(ev[i].start_ns >= load_start);
            compute_start = ev[i].end_ns;
        }
        if (ev[i].kind == IPU_TRACE_STORE) {
            REQUIRE(ev[i].start_ns >= compute_start || compute_start == 0);
            store_start = ev[i].start_ns;
        }
    }
    (void)store_start;
    REQUIRE(count[IPU_TRACE_LOAD] == iterations && count[IPU_TRACE_COMPUTE] == iterations &&
            count[IPU_TRACE_STORE] == iterations);
    return 0;
}

static int run_traced(uint32_t bps, uint32_t io_tiles, int overlap, int requests) {
    fix f;
    ipu_trace *t;
    REQUIRE_OK(open_rt(&f, bps, io_tiles, overlap));
    REQUIRE_OK(ipu_trace_create(1000, &t));
    REQUIRE_OK(ipu_runtime_set_trace(f.rt, t));
    REQUIRE(run_requests(f.rt, requests) == 0);
    REQUIRE_OK(ipu_runtime_close(f.rt)); /* every stage has ended: the trace is final */
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.iterations == (uint64_t)requests);
    REQUIRE(check_iterations(t, s.iterations) == 0);
    close_rt(&f);
    ipu_trace_destroy(t);
    return 0;
}

static int test_serial(void) { return run_traced(1, 0, 0, 7); }

static int test_overlap_io(void) {
    fix f;
    REQUIRE_OK(open_rt(&f, 3, 8, 1));
    ipu_trace *t;
    REQUIRE_OK(ipu_trace_create(1000, &t));
    REQUIRE_OK(ipu_runtime_set_trace(f.rt, t));
    /* a step of 3 iterations needs 3 queued batches: submit them all before waiting */
    static float x[ROWS * COLS], y[ROWS * COLS], z[9][ROWS * COLS];
    ipu_request *r[9];
    for (int i = 0; i < 9; i++) {
        const void *ins[3] = {x, y, NULL};
        void *outs[3] = {NULL, NULL, z[i]};
        ipu_request_desc d = {.num_batches = 1,
                              .inputs = ins,
                              .outputs = outs,
                              .subgraph = IPU_NO_INDEX};
        REQUIRE_OK(ipu_runtime_submit(f.rt, &d, &r[i]));
    }
    for (int i = 0; i < 9; i++) {
        REQUIRE_OK(ipu_request_wait(r[i], UINT64_MAX));
        ipu_request_release(r[i]);
    }
    REQUIRE_OK(ipu_runtime_close(f.rt));
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.iterations == 9);
    ipu_trace_event ev[64];
    size_t n;
    REQUIRE_OK(ipu_trace_read(t, ev, 64, &n, NULL));
    uint64_t count[4] = {0};
    for (size_t i = 0; i < n; i++) count[ev[i].kind]++;
    REQUIRE(count[IPU_TRACE_LOAD] == 9 && count[IPU_TRACE_COMPUTE] == 9 &&
            count[IPU_TRACE_STORE] == 9);
    close_rt(&f);
    ipu_trace_destroy(t);
    return 0;
}

static int test_bounded(void) {
    fix f;
    ipu_trace *t;
    REQUIRE_OK(open_rt(&f, 1, 0, 0));
    REQUIRE_OK(ipu_trace_create(4, &t));
    REQUIRE_OK(ipu_runtime_set_trace(f.rt, t));
    REQUIRE(run_requests(f.rt, 5) == 0);
    REQUIRE_OK(ipu_runtime_close(f.rt));
    ipu_trace_event ev[8];
    size_t n;
    uint64_t dropped;
    REQUIRE_OK(ipu_trace_read(t, ev, 8, &n, &dropped));
    REQUIRE(n == 4 && dropped == 15 - 4);
    for (size_t i = 0; i < n; i++) REQUIRE(ev[i].seq == 11 + i); /* the most recent, in order */
    REQUIRE_OK(ipu_trace_read(t, ev, 2, &n, &dropped));          /* a short array: the newest two */
    REQUIRE(n == 2 && ev[0].seq == 13 && ev[1].seq == 14);
    ipu_trace_clear(t);
    REQUIRE_OK(ipu_trace_read(t, ev, 8, &n, &dropped));
    REQUIRE(n == 0 && dropped == 0);
    close_rt(&f);
    ipu_trace_destroy(t);
    return 0;
}

static int test_set_after_submit(void) {
    fix f;
    ipu_trace *t;
    REQUIRE_OK(open_rt(&f, 1, 0, 0));
    REQUIRE_OK(ipu_trace_create(8, &t));
    REQUIRE(run_requests(f.rt, 1) == 0);
    REQUIRE(ipu_runtime_set_trace(f.rt, t) == IPU_ERR_INVALID_STATE);
    REQUIRE_OK(ipu_runtime_close(f.rt));
    REQUIRE(ipu_runtime_set_trace(f.rt, t) == IPU_ERR_CLOSED);
    size_t n;
    REQUIRE_OK(ipu_trace_read(t, NULL, 0, &n, NULL));
    REQUIRE(n == 0);
    close_rt(&f);
    ipu_trace_destroy(t);
    return 0;
}

int main(void) {
    RUN(test_arguments);
    RUN(test_serial);
    RUN(test_overlap_io);
    RUN(test_bounded);
    RUN(test_set_after_submit);
    return check_summary();
}
