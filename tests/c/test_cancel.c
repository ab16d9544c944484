/* Cancelling requests: ipu_request_cancel before, during and after a request's iterations, and
 * the inline path's poll hook (ipu_runtime_set_poll). Every request completes exactly once. */
#include <stdatomic.h>
#include <unistd.h>

#include "runtime_harness.h"

/* ipu_request_cancel: Y is served by a stream callback that can hold the device (a gate) and
 * cancel a request from inside its iteration. Every request completes exactly once. */
typedef struct {
    atomic_int gate; /* 1: the callback waits until it is 0 */
    atomic_int calls;
    int cancel_at; /* call number at which it cancels `victim` (-1: never) */
    ipu_request *victim;
} cancel_ctx;

static ipu_status cancel_stream(void *buf, size_t nbytes, const ipu_anchor_info *a, void *ud) {
    (void)a;
    cancel_ctx *c = ud;
    int k = atomic_fetch_add(&c->calls, 1);
    while (atomic_load(&c->gate)) sleep_ms(1);
    if (k == c->cancel_at) ipu_request_cancel(c->victim);
    float *y = buf;
    for (size_t i = 0; i < nbytes / 4; i++) y[i] = 1.0f;
    return IPU_OK;
}

static void cancel_done(ipu_request *req, ipu_status st, void *ud) {
    (void)req;
    atomic_fetch_add((atomic_int *)ud, st == IPU_OK ? 1 : st == IPU_ERR_CANCELLED ? 100 : 10000);
}

static ipu_status submit_x(ipu_runtime *rt, uint32_t N, const float *x, float *z, atomic_int *ud,
                           ipu_request **out) {
    const void *ins[3] = {x, NULL, NULL};
    void *outs[3] = {NULL, NULL, z};
    ipu_request_desc d = {.num_batches = N,
                          .inputs = ins,
                          .outputs = outs,
                          .subgraph = IPU_NO_INDEX,
                          .done = cancel_done,
                          .user_data = ud};
    return ipu_runtime_submit(rt, &d, out);
}

static int test_cancel(void) {
    for (uint32_t nth = 1; nth <= 2; nth++) {
        enum { N = 40, R = 64, C = 256, B = R * C };
        fixture f;
        m_model m = add_model(R, C, 1);
        ipu_runtime_config cfg = cfg_threads(nth);
        cfg.ring_buffer_size_multiplier = 2 * N; /* N batches queue while the gate holds */
        REQUIRE_OK(fx_open(&f, &m, &cfg));
        cancel_ctx cx = {.cancel_at = -1};
        atomic_init(&cx.gate, 1);
        atomic_init(&cx.calls, 0);
        REQUIRE_OK(ipu_runtime_set_stream_callback(f.rt, 1, cancel_stream, &cx));
        float *x = malloc((size_t)N * B * 4), *z = malloc((size_t)N * B * 4);
        REQUIRE(x && z);
        for (size_t i = 0; i < (size_t)N * B; i++) x[i] = (float)(i % 101);
        atomic_int da, db, dc, dd;
        atomic_init(&da, 0);
        atomic_init(&db, 0);
        atomic_init(&dc, 0);
        atomic_init(&dd, 0);
        ipu_request *a, *b, *c, *d;
        /* before start: a holds the device (gate), b is queued behind it and cancelled */
        REQUIRE_OK(submit_x(f.rt, 1, x, z, &da, &a));
        REQUIRE_OK(submit_x(f.rt, 1, x, z + B, &db, &b));
        while (atomic_load(&cx.calls) == 0) sleep_ms(1);
        ipu_request_cancel(b);
        REQUIRE(ipu_request_is_done(b) == 0);
        atomic_store(&cx.gate, 0);
        REQUIRE(ipu_request_wait(a, UINT64_MAX) == IPU_OK);
        REQUIRE(ipu_request_wait(b, UINT64_MAX) == IPU_ERR_CANCELLED);
        REQUIRE(ipu_request_status(b) == IPU_ERR_CANCELLED);
        for (size_t i = 0; i < B; i++) REQUIRE(z[i] == x[i] + 1.0f);
        /* during: the 4th iteration of c cancels c; its later iterations stop too */
        atomic_store(&cx.gate, 1);
        atomic_store(&cx.calls, 0);
        cx.cancel_at = 3;
        REQUIRE_OK(submit_x(f.rt, N, x, z, &dc, &c));
        cx.victim = c; /* published by the gate's store, read after the callback's load */
        atomic_store(&cx.gate, 0);
        REQUIRE(ipu_request_wait(c, UINT64_MAX) == IPU_ERR_CANCELLED);
        REQUIRE(atomic_load(&cx.calls) == N); /* every iteration ran (and stopped) */
        /* after completion: nothing changes */
        cx.cancel_at = -1;
        REQUIRE_OK(submit_x(f.rt, 2, x, z, &dd, &d));
        REQUIRE(ipu_request_wait(d, UINT64_MAX) == IPU_OK);
        ipu_request_cancel(d);
        ipu_request_cancel(b);
        REQUIRE(ipu_request_status(d) == IPU_OK);
        REQUIRE(ipu_request_status(b) == IPU_ERR_CANCELLED);
        for (size_t i = 0; i < 2 * (size_t)B; i++) REQUIRE(z[i] == x[i] + 1.0f);
        ipu_request_cancel(NULL);
        ipu_runtime_stats st;
        ipu_runtime_get_stats(f.rt, &st);
        REQUIRE(st.requests_submitted == 4 && st.requests_completed == 2 &&
                st.requests_failed == 2);
        ipu_request_release(a);
        ipu_request_release(b);
        ipu_request_release(c);
        ipu_request_release(d);
        fx_close(&f);
        /* exactly once each, with the right status */
        REQUIRE(atomic_load(&da) == 1 && atomic_load(&db) == 100);
        REQUIRE(atomic_load(&dc) == 100 && atomic_load(&dd) == 1);
        free(x);
        free(z);
    }
    return 0;
}

/* The poll hook: set before the first request only; not called for a program shorter than
 * IPU_POLL_INTERVAL_NS (tests/test_interrupt.py cancels long inline requests through it). */
static atomic_int g_polls;
static int poll_cancel(void *ud) {
    (void)ud;
    atomic_fetch_add(&g_polls, 1);
    return 1;
}

static int test_poll_cancel(void) {
    fixture f;
    m_model m = add_model(4, 4, 1);
    ipu_runtime_config cfg = cfg_threads(1);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    REQUIRE(ipu_runtime_set_poll(NULL, poll_cancel, NULL) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ipu_runtime_set_poll(f.rt, poll_cancel, NULL));
    float x[16], y[16], z[16];
    for (int i = 0; i < 16; i++) x[i] = (float)i, y[i] = 2.0f, z[i] = 0;
    const void *ins[3] = {x, y, NULL};
    void *outs[3] = {NULL, NULL, z};
    ipu_request_desc d = {.num_batches = 1,
                          .inputs = ins,
                          .outputs = outs,
                          .subgraph = IPU_NO_INDEX};
    ipu_request *r = NULL;
    /* a one-instruction program finishes before the first poll is due */
    REQUIRE_OK(ipu_runtime_execute(f.rt, &d, &r));
    REQUIRE(r == NULL && atomic_load(&g_polls) == 0 && z[5] == 7.0f);
    REQUIRE(ipu_runtime_set_poll(f.rt, NULL, NULL) == IPU_ERR_INVALID_STATE);
    ipu_runtime_stats st;
    ipu_runtime_get_stats(f.rt, &st);
    REQUIRE(st.requests_completed == 1 && st.requests_failed == 0);
    fx_close(&f);
    return 0;
}

int main(void) {
    alarm(240); /* watchdog: a hang is a failure */
    RUN(test_cancel);
    RUN(test_poll_cancel);
    return check_summary();
}
