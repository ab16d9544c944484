/* ipu_runtime_execute: small one-batch requests run inline on the calling thread (out == NULL)
 * while the device is idle, everything else is submitted; results, order and stats are those
 * of the queued path, also with another thread submitting at the same time. */
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "runtime_harness.h"

static ipu_status execute_add(ipu_runtime *rt, uint32_t N, const float *x, const float *y, float *z,
                              ipu_request **out) {
    const void *ins[3] = {x, y, NULL};
    void *outs[3] = {NULL, NULL, z};
    ipu_request_desc d = {.num_batches = N,
                          .inputs = ins,
                          .outputs = outs,
                          .subgraph = IPU_NO_INDEX};
    return ipu_runtime_execute(rt, &d, out);
}

/* Run it to completion; *inlined: it ran on this thread. */
static ipu_status run_add(ipu_runtime *rt, uint32_t N, const float *x, const float *y, float *z,
                          int *inlined) {
    ipu_request *r = NULL;
    ipu_status st = execute_add(rt, N, x, y, z, &r);
    *inlined = r == NULL;
    if (st != IPU_OK || !r) return st;
    st = ipu_request_wait(r, UINT64_MAX);
    ipu_request_release(r);
    return st;
}

static int test_small_request_runs_inline(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    ipu_runtime_config cfg = cfg_threads(2);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {10, 20, 30, 40, 50, 60}, z[6] = {0};
    int inlined = 0;
    for (int k = 0; k < 3; k++) {
        REQUIRE_OK(run_add(f.rt, 1, x, y, z, &inlined));
        REQUIRE(inlined);
        for (int i = 0; i < 6; i++) REQUIRE(z[i] == x[i] + y[i]);
    }
    /* Two batches: submitted. Then, with the device thread started and parked, inline again. */
    float x2[12], z2[12];
    for (int i = 0; i < 12; i++) x2[i] = (float)i;
    REQUIRE_OK(run_add(f.rt, 2, x2, x2, z2, &inlined));
    REQUIRE(!inlined);
    for (int i = 0; i < 12; i++) REQUIRE(z2[i] == 2.0f * (float)i);
    sleep_ms(5);
    REQUIRE_OK(run_add(f.rt, 1, x, y, z, &inlined));
    REQUIRE(inlined);
    ipu_runtime_stats s;
    /* The device counts a step after its requests completed: allow it a moment. */
    for (int i = 0; i < 2000; i++) {
        ipu_runtime_get_stats(f.rt, &s);
        if (s.steps == 6) break;
        sleep_ms(1);
    }
    REQUIRE(s.requests_submitted == 5 && s.requests_completed == 5 && s.requests_failed == 0);
    REQUIRE(s.steps == 6 && s.iterations == 6);
    /* Validation errors are the submit's. */
    const void *ins[3] = {x, NULL, NULL};
    void *outs[3] = {NULL, NULL, z};
    ipu_request_desc d = {.num_batches = 1,
                          .inputs = ins,
                          .outputs = outs,
                          .subgraph = IPU_NO_INDEX};
    ipu_request *r = NULL;
    REQUIRE(ipu_runtime_execute(f.rt, &d, &r) == IPU_ERR_INVALID_ARGUMENT && r == NULL);
    REQUIRE(strstr(ipu_last_error_message(), "missing input anchor 'Y'") != NULL);
    REQUIRE_OK(ipu_runtime_close(f.rt));
    REQUIRE(run_add(f.rt, 1, x, y, z, &inlined) == IPU_ERR_CLOSED);
    fx_close(&f);
    return 0;
}

static int test_not_inline(void) {
    /* bps 2 (a step spans requests): submitted. */
    float x[6] = {1, 2, 3, 4, 5, 6}, z[6];
    int inlined = 1;
    fixture f;
    m_model m = add_model(2, 3, 2);
    ipu_runtime_config cfg = cfg_threads(1);
    cfg.timeout_ns = 1000000;
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    REQUIRE_OK(run_add(f.rt, 1, x, x, z, &inlined));
    REQUIRE(!inlined && z[5] == 12.0f);
    fx_close(&f);
    return 0;
}

typedef struct {
    ipu_runtime *rt;
    int n, bad;
    size_t len; /* floats per request: 6 (add_model(2, 3)) unless set */
    int closed; /* requests refused or failed with IPU_ERR_CLOSED (counted, not bad) */
} producer_ctx;

/* Submits n requests one after the other, checking every result. */
static void *producer(void *arg) {
    producer_ctx *p = arg;
    size_t len = p->len ? p->len : 6;
    float *x = malloc(len * 4), *z = malloc(len * 4);
    for (int k = 0; x && z && k < p->n; k++) {
        for (size_t i = 0; i < len; i++) x[i] = (float)(k + (int)(i % 64));
        ipu_request *r;
        ipu_status st = submit_add(p->rt, 1, x, x, z, NULL, NULL, &r);
        if (st == IPU_OK) {
            st = ipu_request_wait(r, UINT64_MAX);
            ipu_request_release(r);
        }
        if (st == IPU_ERR_CLOSED) {
            p->closed++;
            continue;
        }
        p->bad += st != IPU_OK;
        for (size_t i = 0; st == IPU_OK && i < len; i++) p->bad += z[i] != 2.0f * x[i];
    }
    p->bad += !x || !z;
    free(x);
    free(z);
    return NULL;
}

static int test_inline_with_a_concurrent_submitter(void) {
    fixture f;
    m_model m = add_model(2, 3, 1);
    ipu_runtime_config cfg = cfg_threads(2);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    producer_ctx p = {.rt = f.rt, .n = 3000};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, producer, &p) == 0);
    int bad = 0, inline_runs = 0;
    const int n = 3000;
    for (int k = 0; k < n; k++) {
        float x[6], y[6], z[6];
        for (int i = 0; i < 6; i++) {
            x[i] = (float)k;
            y[i] = (float)i;
        }
        int inlined;
        if (run_add(f.rt, 1, x, y, z, &inlined) != IPU_OK) bad++;
        inline_runs += inlined;
        for (int i = 0; i < 6; i++) bad += z[i] != x[i] + y[i];
    }
    pthread_join(th, NULL);
    REQUIRE(bad == 0 && p.bad == 0);
    printf("     (%d of %d ran inline)\n", inline_runs, n);
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.requests_completed == 6000 && s.iterations == 6000 && s.requests_failed == 0);
    fx_close(&f);
    return 0;
}

/* n requests of len floats from this thread while another thread submits n of its own, every
 * result checked (wrong ones and failures counted into *bad); a 2 ms pause every `pause`
 * requests (0: none) lets idle threads fall asleep. Returns how many of this thread's ran
 * inline. */
static int beside_a_submitter(ipu_runtime *rt, float *x, float *z, size_t len, int n, int pause,
                              int *bad) {
    producer_ctx p = {.rt = rt, .n = n, .len = len};
    pthread_t th;
    if (pthread_create(&th, NULL, producer, &p) != 0) {
        ++*bad;
        return 0;
    }
    int inline_runs = 0;
    for (int k = 0; k < n; k++) {
        for (size_t i = 0; i < len; i++) x[i] = (float)(k - (int)(i % 32));
        int inlined = 0;
        if (run_add(rt, 1, x, x, z, &inlined) != IPU_OK) ++*bad;
        inline_runs += inlined;
        for (size_t i = 0; i < len; i++) *bad += z[i] != 2.0f * x[i];
        if (pause && k % pause == 0) sleep_ms(2);
    }
    pthread_join(th, NULL);
    *bad += p.bad + p.closed;
    return inline_runs;
}

static void *close_later(void *arg) {
    sleep_ms(30);
    return (void *)(intptr_t)ipu_runtime_close(arg);
}

static int test_large_model_inline_at_one_thread(void) {
    /* One compute thread: a large model runs inline as well (no hand-off to the device thread),
     * while another thread submits; then close() from a third while this one executes, so the
     * device thread waits for claimed devices (ipu__unpark) and for close: every result right,
     * every call OK until IPU_ERR_CLOSED, nothing hangs. */
    fixture f;
    m_model m = add_model(256, 1024, 1); /* 3 MiB moved by the Main program */
    ipu_runtime_config cfg = cfg_threads(1);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    const size_t len = 256 * 1024;
    float *x = malloc(len * 4), *z = malloc(len * 4);
    REQUIRE(x && z);
    int inlined = 0;
    for (size_t i = 0; i < len; i++) x[i] = (float)(i % 32);
    REQUIRE_OK(run_add(f.rt, 1, x, x, z, &inlined)); /* no device thread yet: inline */
    REQUIRE(inlined && z[31] == 62.0f);
    int bad = 0, inline_runs = beside_a_submitter(f.rt, x, z, len, 100, 0, &bad);
    REQUIRE(bad == 0);
    printf("     (%d of 100 ran inline beside the submitter)\n", inline_runs);
    /* The device thread parks once idle: inline again (how soon depends on the machine). */
    for (int i = 0; i < 2000; i++) {
        REQUIRE_OK(run_add(f.rt, 1, x, x, z, &inlined));
        if (inlined) break;
        sleep_ms(1);
    }
    REQUIRE(inlined);
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.requests_completed == s.requests_submitted && s.requests_completed >= 202 &&
            s.requests_failed == 0);

    pthread_t closer;
    REQUIRE(pthread_create(&closer, NULL, close_later, f.rt) == 0);
    ipu_status st = IPU_OK;
    int after_close = 0;
    for (int k = 0; k < 100000 && after_close < 3; k++) {
        ipu_status now = run_add(f.rt, 1, x, x, z, &inlined);
        REQUIRE(now == IPU_OK || now == IPU_ERR_CLOSED);
        REQUIRE(!(st == IPU_ERR_CLOSED && now == IPU_OK)); /* closed stays closed */
        after_close += now == IPU_ERR_CLOSED;
        st = now;
    }
    void *closed_st;
    pthread_join(closer, &closed_st);
    REQUIRE((ipu_status)(intptr_t)closed_st == IPU_OK && st == IPU_ERR_CLOSED);
    free(x);
    free(z);
    fx_close(&f);
    return 0;
}

static uint64_t in_place_count(ipu_runtime *rt) {
    ipu_runtime_stats s;
    ipu_runtime_get_stats(rt, &s);
    return s.in_place_buffers;
}

typedef struct {
    ipu_runtime *rt;
    int n, bad, inline_runs;
} executor_ctx;

/* n executes of a 64 x 1024 ADD, every result checked. */
static void *executor(void *arg) {
    executor_ctx *c = arg;
    const size_t len = 64 * 1024;
    float *x = malloc(len * 4), *z = malloc(len * 4);
    for (int k = 0; x && z && k < c->n; k++) {
        for (size_t i = 0; i < len; i++) x[i] = (float)(k * 3 + (int)(i % 16));
        int inlined = 0;
        c->bad += run_add(c->rt, 1, x, x, z, &inlined) != IPU_OK;
        c->inline_runs += inlined;
        for (size_t i = 0; i < len; i++) c->bad += z[i] != 2.0f * x[i];
    }
    c->bad += !x || !z;
    free(x);
    free(z);
    return NULL;
}

static int test_large_model_two_threads(void) {
    /* Two compute threads, a model whose ADD is split over the pool. A caller alone inside
     * execute runs its request inline, as worker 0 of the pool, on its own buffers; beside a
     * thread that submits (queued), and with two executing threads at once (then a request runs
     * inline only while its caller is the only one inside execute; the others go to the device
     * thread, which pre-wakes the helper for each one): every result right, every request
     * completed once (run under TSan by tests/test_c_sanitizers.py). */
    fixture f;
    m_model m = add_model(64, 1024, 1); /* 768 KiB moved by the Main program */
    ipu_runtime_config cfg = cfg_threads(2);
    cfg.pin_threads = 0; /* else not inline on the helper's CPU: test_inline_off_helper_cpus */
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    const size_t len = 64 * 1024;
    float *x = calloc(len, 4), *z = calloc(len, 4);
    REQUIRE(x && z);
    x[7] = 3;
    int inlined = 0;
    REQUIRE_OK(run_add(f.rt, 1, x, x, z, &inlined));
    REQUIRE(inlined && z[7] == 6.0f && in_place_count(f.rt) == 3);
    int bad = 0, inline_runs = beside_a_submitter(f.rt, x, z, len, 60, 20, &bad);
    REQUIRE(bad == 0);
    executor_ctx c[2] = {{.rt = f.rt, .n = 60}, {.rt = f.rt, .n = 60}};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, executor, &c[1]) == 0);
    executor(&c[0]);
    pthread_join(th, NULL);
    REQUIRE(c[0].bad == 0 && c[1].bad == 0);
    printf("     (%d of 60 inline beside a submitter; %d and %d of 60 with two executors)\n",
           inline_runs, c[0].inline_runs, c[1].inline_runs);
    ipu_runtime_stats s;
    ipu_runtime_get_stats(f.rt, &s);
    REQUIRE(s.requests_completed == s.requests_submitted && s.requests_completed == 241 &&
            s.requests_failed == 0);
    free(x);
    free(z);
    fx_close(&f);
    return 0;
}

static int test_inline_off_helper_cpus(void) {
    /* Pinned workers (the default): a caller on the CPU of the pinned helper hands its request
     * to the device thread (as worker 0 it would share that CPU with the helper); on any other
     * CPU it runs inline. The calling thread visits each CPU of its affinity set in turn. */
    cpu_set_t old, one;
    REQUIRE(sched_getaffinity(0, sizeof old, &old) == 0);
    int ncpu = CPU_COUNT(&old);
    fixture f;
    m_model m = add_model(64, 1024, 1);
    ipu_runtime_config cfg = cfg_threads(2);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    const size_t len = 64 * 1024;
    float *x = calloc(len, 4), *z = calloc(len, 4);
    REQUIRE(x && z);
    int inline_cpus = 0, bad = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &old)) continue;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
        x[5] = (float)c;
        int inlined = 0;
        bad += run_add(f.rt, 1, x, x, z, &inlined) != IPU_OK || z[5] != 2.0f * (float)c;
        inline_cpus += inlined;
    }
    REQUIRE(sched_setaffinity(0, sizeof old, &old) == 0);
    REQUIRE(bad == 0);
    /* one helper, pinned when there are at least 2 CPUs (threadpool.h) */
    REQUIRE(inline_cpus == (ncpu >= 2 ? ncpu - 1 : ncpu));
    free(x);
    free(z);
    fx_close(&f);
    return 0;
}

static int test_close_while_executing(void) {
    /* close() from another thread while this one executes in a loop: every call returns OK
     * or IPU_ERR_CLOSED, nothing hangs. */
    fixture f;
    m_model m = add_model(2, 3, 1);
    ipu_runtime_config cfg = cfg_threads(2);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    producer_ctx p = {.rt = f.rt, .n = 200};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, producer, &p) == 0); /* starts the device thread */
    float x[6] = {0}, z[6];
    int inlined;
    for (int k = 0; k < 2000; k++) {
        if (k == 1000) REQUIRE_OK(ipu_runtime_close(f.rt));
        ipu_status st = run_add(f.rt, 1, x, x, z, &inlined);
        REQUIRE(st == (k < 1000 ? IPU_OK : IPU_ERR_CLOSED));
    }
    pthread_join(th, NULL);
    fx_close(&f);
    return 0;
}

static int test_in_place_buffers(void) {
    /* Inline requests run on the caller's buffers where the program allows it and the buffers
     * do (aligned, an output sharing no byte with another buffer); the rest are copied; the
     * results are the same either way. */
    fixture f;
    m_model m = add_model(2, 3, 1);
    ipu_runtime_config cfg = cfg_threads(1);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {10, 20, 30, 40, 50, 60}, z[6] = {0};
    int inlined = 0;
    REQUIRE_OK(run_add(f.rt, 1, x, y, z, &inlined));
    REQUIRE(inlined && in_place_count(f.rt) == 3);
    for (int i = 0; i < 6; i++) REQUIRE(z[i] == x[i] + y[i]);
    /* Z over X: Z is copied out after the program read X. */
    float xz[6] = {1, 2, 3, 4, 5, 6};
    REQUIRE_OK(run_add(f.rt, 1, xz, y, xz, &inlined));
    REQUIRE(in_place_count(f.rt) == 5);
    for (int i = 0; i < 6; i++) REQUIRE(xz[i] == (float)(i + 1) + y[i]);
    /* Z one float into Y's buffer. */
    float yz[7] = {10, 20, 30, 40, 50, 60, 0};
    REQUIRE_OK(run_add(f.rt, 1, x, yz, yz + 1, &inlined));
    REQUIRE(in_place_count(f.rt) == 7);
    for (int i = 0; i < 6; i++) REQUIRE(yz[i + 1] == x[i] + 10.0f * (float)(i + 1));
    /* Misaligned buffers are copied. */
    _Alignas(16) unsigned char raw[2 * 6 * 4 + 8];
    float *mx = (float *)(void *)(raw + 1), *mz = (float *)(void *)(raw + 6 * 4 + 3);
    memcpy(mx, x, sizeof x);
    REQUIRE_OK(run_add(f.rt, 1, mx, y, mz, &inlined));
    REQUIRE(in_place_count(f.rt) == 8);
    float got[6];
    memcpy(got, mz, sizeof got);
    for (int i = 0; i < 6; i++) REQUIRE(got[i] == x[i] + y[i]);
    fx_close(&f);

    /* Views: the program reads X through tensor 3 and writes Z through tensor 4 (same bytes as
     * tensors 0 and 2): both are copied; Y is not. */
    m.nt = 5;
    m.t[3] = m.t[0];
    m.t[4] = m.t[2];
    m.p[1] = (m_prog){1, 1, {{IPU_OP_ADD, 2, 1, {3, 1, 4}}}};
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    memset(z, 0, sizeof z);
    REQUIRE_OK(run_add(f.rt, 1, x, y, z, &inlined));
    REQUIRE(inlined && in_place_count(f.rt) == 1);
    for (int i = 0; i < 6; i++) REQUIRE(z[i] == x[i] + y[i]);
    fx_close(&f);
    return 0;
}

static int test_in_place_reused_storage(void) {
    /* X's arena bytes are reused after its last use by two row tensors, then read as one view
     * (an in-place Concat's output): X runs in place when the two writes cover the view, and
     * is copied when they do not (the view's second row is then X's data). Y is read through
     * row views, never written: copied. Rows of 16 floats (tensor offsets are 64-aligned). */
    enum { C = 16, N = 2 * C };
    m_model m = add_model(2, C, 1);
    m.nt = 8;
    m.t[3] = (m_tensor){F32, ARENA, 0, 2, {1, C}};        /* X's row 0 */
    m.t[4] = (m_tensor){F32, ARENA, 64, 2, {1, C}};       /* X's row 1 */
    m.t[5] = m.t[0];                                      /* X's bytes, read as one tensor */
    m.t[6] = (m_tensor){F32, ARENA, 128, 2, {1, C}};      /* Y's row 0 */
    m.t[7] = (m_tensor){F32, ARENA, 128 + 64, 2, {1, C}}; /* Y's row 1 */
    ipu_runtime_config cfg = cfg_threads(1);
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)(i + 1), y[i] = (float)(10 * i + 10);
    for (int covered = 1; covered >= 0; covered--) {
        m.p[1] = (m_prog){1, 0, {{0}}};
        m_instr *ins = m.p[1].ins;
        ins[m.p[1].n++] = (m_instr){IPU_OP_ADD, 2, 1, {0, 1, 2}}; /* Z = X + Y: X's last use */
        ins[m.p[1].n++] = (m_instr){IPU_OP_ADD, 2, 1, {6, 6, 3}}; /* row 0 = 2 Y0 */
        if (covered) ins[m.p[1].n++] = (m_instr){IPU_OP_ADD, 2, 1, {7, 7, 4}}; /* row 1 */
        ins[m.p[1].n++] = (m_instr){IPU_OP_ADD, 2, 1, {5, 1, 2}};              /* Z = view + Y */
        fixture f;
        REQUIRE_OK(fx_open(&f, &m, &cfg));
        float xc[N], z[N] = {0};
        memcpy(xc, x, sizeof xc);
        int inlined = 0;
        for (int k = 0; k < 2; k++) {
            REQUIRE_OK(run_add(f.rt, 1, xc, y, z, &inlined));
            REQUIRE(inlined && in_place_count(f.rt) == (uint64_t)(k + 1) * (covered ? 2 : 1));
            for (int i = 0; i < N; i++) {
                REQUIRE(xc[i] == x[i]); /* the caller's X is never written */
                REQUIRE(z[i] == (i < C || covered ? 3 * y[i] : x[i] + y[i]));
            }
        }
        fx_close(&f);
    }
    return 0;
}

int main(void) {
    alarm(240); /* watchdog: a hang is a failure */
    RUN(test_small_request_runs_inline);
    RUN(test_not_inline);
    RUN(test_in_place_buffers);
    RUN(test_in_place_reused_storage);
    RUN(test_inline_with_a_concurrent_submitter);
    RUN(test_large_model_inline_at_one_thread);
    RUN(test_large_model_two_threads);
    RUN(test_inline_off_helper_cpus);
    RUN(test_close_while_executing);
    return check_summary();
}
