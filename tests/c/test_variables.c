/* Variables (ipu_executable_variable): a weight the Load program copies into the arena is state
 * that Main programs update and that persists between steps; read and written between steps
 * through the session (on its thread) and the runtime (a device task), restored by Load.
 * The model: Z = X + V; V = Z, with V starting from the weight W. */
#include <pthread.h>

#include "runtime_harness.h"

enum { NV = 6, NB = NV * 4 };

static m_model variable_model(void) {
    static _Alignas(64) float w[16] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
    m_model m = add_model(2, 3, 1);
    m.nt = 4;
    m.t[1] = (m_tensor){F32, TDATA, 0, 2, {2, 3}};
    m.t[2] = (m_tensor){F32, ARENA, 64, 2, {2, 3}};
    m.t[3] = (m_tensor){F32, ARENA, 128, 2, {2, 3}};
    m.arena = 192;
    m.a[1] = (m_anchor){"W", IN, 1, IPU_NO_INDEX, IPU_ANCHOR_TENSOR_DATA};
    m.a[2] = (m_anchor){"Z", OUT, 3, IPU_NO_INDEX, 0};
    m.p[0] = (m_prog){0, 2, {{IPU_OP_BIND, 0, 1, {1}}, {IPU_OP_COPY, 1, 1, {1, 2}}}};
    m.p[1] = (m_prog){1, 2, {{IPU_OP_ADD, 2, 1, {0, 2, 3}}, {IPU_OP_COPY, 1, 1, {3, 2}}}};
    m.tdata = w;
    m.tdsize = sizeof w;
    return m;
}

static int test_executable_reports_variables(void) {
    m_model m = variable_model();
    ipu_container *c;
    ipu_executable *e;
    REQUIRE_OK(build(&m, &c, &e));
    ipu_executable_info info;
    ipu_executable_get_info(e, &info);
    REQUIRE(info.num_variables == 1);
    uint32_t t = 0;
    REQUIRE_OK(ipu_executable_variable(e, 1, &t));
    REQUIRE(t == 2);
    REQUIRE(ipu_executable_variable(e, 0, &t) == IPU_ERR_NOT_FOUND);
    REQUIRE(ipu_executable_variable(e, 9, &t) == IPU_ERR_NOT_FOUND);
    REQUIRE(ipu_executable_variable(e, 1, NULL) == IPU_ERR_INVALID_ARGUMENT);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    /* a variable that is also a streamed anchor's tensor is refused */
    m.p[0].ins[1].ops[1] = 0;
    REQUIRE(build(&m, &c, &e) == IPU_ERR_BAD_PROGRAM);
    REQUIRE(strstr(ipu_last_error_message(), "'X'"));
    /* without the copy there is no variable */
    m = variable_model();
    m.p[0].n = 1;
    m.p[1].ins[0].ops[1] = 1;
    m.p[1].n = 1;
    REQUIRE_OK(build(&m, &c, &e));
    ipu_executable_get_info(e, &info);
    REQUIRE(info.num_variables == 0);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return 0;
}

static int session_step(ipu_session *s, const float *x, float *z) {
    ipu_slot sx = {(void *)(uintptr_t)x, NB, 0, NULL, NULL};
    ipu_slot sz = {z, NB, 0, NULL, NULL};
    REQUIRE_OK(ipu_session_enqueue(s, 0, &sx, 0));
    REQUIRE_OK(ipu_session_enqueue(s, 2, &sz, 0));
    ipu_step_result r;
    REQUIRE_OK(ipu_session_run_main(s, &r));
    REQUIRE(r.iterations == 1);
    return 0;
}

static int test_session_state_persists(void) {
    m_model m = variable_model();
    ipu_container *c;
    ipu_executable *e;
    ipu_session *s;
    REQUIRE_OK(build(&m, &c, &e));
    ipu_session_config cfg = ipu_session_config_default();
    cfg.num_threads = 2; /* concurrent iterations must stay off: they would fork the state */
    REQUIRE_OK(ipu_session_create(e, &cfg, &s));
    float v[NV], x[NV] = {1, 2, 3, 4, 5, 6}, z[NV];
    REQUIRE(ipu_session_read_variable(s, 1, v, NB) == IPU_ERR_INVALID_STATE);
    REQUIRE_OK(ipu_session_run_load(s));
    REQUIRE_OK(ipu_session_read_variable(s, 1, v, NB));
    for (int i = 0; i < NV; i++) REQUIRE(v[i] == 0.5f + (float)i);
    for (int step = 1; step <= 3; step++) {
        REQUIRE(session_step(s, x, z) == 0);
        for (int i = 0; i < NV; i++) REQUIRE(z[i] == 0.5f + (float)i + (float)step * x[i]);
    }
    REQUIRE_OK(ipu_session_read_variable(s, 1, v, NB));
    for (int i = 0; i < NV; i++) REQUIRE(v[i] == z[i]);
    float w2[NV] = {100, 200, 300, 400, 500, 600};
    REQUIRE_OK(ipu_session_write_variable(s, 1, w2, NB));
    REQUIRE(session_step(s, x, z) == 0);
    for (int i = 0; i < NV; i++) REQUIRE(z[i] == w2[i] + x[i]);
    /* errors: size, not a variable, NULL */
    REQUIRE(ipu_session_read_variable(s, 1, v, NB - 4) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(strstr(ipu_last_error_message(), "'W'"));
    REQUIRE(ipu_session_read_variable(s, 0, v, NB) == IPU_ERR_NOT_FOUND);
    REQUIRE(ipu_session_read_variable(s, 7, v, NB) == IPU_ERR_NOT_FOUND);
    REQUIRE(ipu_session_write_variable(s, 1, NULL, NB) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(ipu_session_read_variable(NULL, 1, v, NB) == IPU_ERR_INVALID_ARGUMENT);
    /* Load restores the weight's value */
    REQUIRE_OK(ipu_session_run_load(s));
    REQUIRE_OK(ipu_session_read_variable(s, 1, v, NB));
    for (int i = 0; i < NV; i++) REQUIRE(v[i] == 0.5f + (float)i);
    ipu_session_stats st;
    ipu_session_get_stats(s, &st);
    REQUIRE(st.concurrent_iterations == 0);
    ipu_session_destroy(s);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return 0;
}

static ipu_status rt_step(ipu_runtime *rt, const float *x, float *z) {
    const void *ins[3] = {x, NULL, NULL};
    void *outs[3] = {NULL, NULL, z};
    ipu_request_desc d = {.num_batches = 1,
                          .inputs = ins,
                          .outputs = outs,
                          .subgraph = IPU_NO_INDEX};
    ipu_request *r = NULL;
    ipu_status st = ipu_runtime_execute(rt, &d, &r);
    if (st != IPU_OK || !r) return st;
    st = ipu_request_wait(r, UINT64_MAX);
    ipu_request_release(r);
    return st;
}

typedef struct {
    ipu_runtime *rt;
    int steps;
    ipu_status st;
} stepper;

static void *step_thread(void *p) {
    stepper *a = p;
    float x[NV] = {1, 1, 1, 1, 1, 1}, z[NV];
    for (int i = 0; i < a->steps && a->st == IPU_OK; i++) a->st = rt_step(a->rt, x, z);
    return NULL;
}

static int test_runtime_variables(void) {
    m_model m = variable_model();
    ipu_container *c;
    ipu_executable *e;
    ipu_runtime *rt;
    REQUIRE_OK(build(&m, &c, &e));
    ipu_runtime_config cfg = ipu_runtime_config_default();
    cfg.num_threads = 2;
    REQUIRE_OK(ipu_runtime_create(e, &cfg, &rt));
    float v[NV], x[NV] = {1, 2, 3, 4, 5, 6}, z[NV];
    /* before any request: the task runs on this thread */
    REQUIRE_OK(ipu_runtime_read_variable(rt, 1, v, NB));
    REQUIRE(v[0] == 0.5f);
    for (int step = 1; step <= 4; step++) REQUIRE_OK(rt_step(rt, x, z));
    REQUIRE_OK(ipu_runtime_read_variable(rt, 1, v, NB));
    for (int i = 0; i < NV; i++) REQUIRE(v[i] == 0.5f + (float)i + 4 * x[i]);
    float zero[NV] = {0};
    REQUIRE_OK(ipu_runtime_write_variable(rt, 1, zero, NB));
    REQUIRE_OK(rt_step(rt, x, z));
    for (int i = 0; i < NV; i++) REQUIRE(z[i] == x[i]);
    /* steps from another thread while this one reads: every read sees a whole number of steps
     * (each adds 1 to every element), never a step half applied */
    REQUIRE_OK(ipu_runtime_write_variable(rt, 1, zero, NB));
    stepper a = {rt, 300, IPU_OK};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, step_thread, &a) == 0);
    float last = 0;
    for (int k = 0; k < 50; k++) {
        REQUIRE_OK(ipu_runtime_read_variable(rt, 1, v, NB));
        for (int i = 1; i < NV; i++) REQUIRE(v[i] == v[0]);
        REQUIRE(v[0] >= last);
        last = v[0];
    }
    pthread_join(th, NULL);
    REQUIRE_OK(a.st);
    REQUIRE_OK(ipu_runtime_read_variable(rt, 1, v, NB));
    REQUIRE(v[0] == 300.0f);
    REQUIRE(ipu_runtime_read_variable(rt, 0, v, NB) == IPU_ERR_NOT_FOUND);
    REQUIRE(ipu_runtime_write_variable(rt, 1, v, 3) == IPU_ERR_INVALID_ARGUMENT);
    REQUIRE(strstr(ipu_last_error_message(), "ipu_runtime_write_variable"));
    /* reset reloads: the weight's value again */
    REQUIRE_OK(ipu_runtime_reset(rt));
    REQUIRE_OK(ipu_runtime_read_variable(rt, 1, v, NB));
    REQUIRE(v[5] == 5.5f);
    REQUIRE_OK(ipu_runtime_close(rt));
    REQUIRE(ipu_runtime_read_variable(rt, 1, v, NB) == IPU_ERR_CLOSED);
    REQUIRE(ipu_runtime_read_variable(NULL, 1, v, NB) == IPU_ERR_INVALID_ARGUMENT);
    ipu_runtime_destroy(rt);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return 0;
}

typedef struct {
    ipu_runtime *rt;
    int ok, closed, other;
} reader;

static void *read_until_closed(void *p) {
    reader *a = p;
    for (;;) {
        float v[NV];
        ipu_status st = ipu_runtime_read_variable(a->rt, 1, v, NB);
        if (st == IPU_OK)
            a->ok++;
        else if (st == IPU_ERR_CLOSED) {
            a->closed++;
            return NULL;
        } else {
            a->other++;
            return NULL;
        }
    }
}

/* Reads racing a close: each returns OK or IPU_ERR_CLOSED, none hangs, and none returns while
 * the device thread may still write its buffer (checked by the sanitizer builds). */
static int test_reads_racing_close(void) {
    m_model m = variable_model();
    ipu_container *c;
    ipu_executable *e;
    REQUIRE_OK(build(&m, &c, &e));
    for (int round = 0; round < 20; round++) {
        ipu_runtime *rt;
        REQUIRE_OK(ipu_runtime_create(e, NULL, &rt));
        float x[NV] = {1, 1, 1, 1, 1, 1}, z[NV];
        REQUIRE_OK(rt_step(rt, x, z)); /* the device thread is running */
        reader a = {rt, 0, 0, 0};
        pthread_t th;
        REQUIRE(pthread_create(&th, NULL, read_until_closed, &a) == 0);
        sleep_ms(round % 3);
        REQUIRE_OK(ipu_runtime_close(rt));
        pthread_join(th, NULL);
        REQUIRE(a.closed == 1 && a.other == 0);
        ipu_runtime_destroy(rt);
    }
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return 0;
}

int main(void) {
    RUN(test_executable_reports_variables);
    RUN(test_session_state_persists);
    RUN(test_runtime_variables);
    RUN(test_reads_racing_close);
    return 0;
}
