/* The runtime's device thread: ipu_session_run_main in a loop, failure handling (fail every
 * enqueued request, then reload with auto_reset or wait for ipu_runtime_reset) and the device
 * tasks asked for between steps (ipu_runtime_reset, variable access). See runtime_internal.h for the protocol. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "runtime_internal.h"

void ipu__mark_failed(ipu_runtime *rt, ipu_status st, const char *msg) {
    pthread_mutex_lock(&rt->state_mu);
    if (atomic_load(&rt->health) == IPU__HEALTH_OK) {
        rt->fail_status = st;
        snprintf(rt->fail_msg, sizeof rt->fail_msg, "%s", msg ? msg : "");
        atomic_store(&rt->health, IPU__HEALTH_FAILING); /* seq_cst: before the wake below */
    }
    pthread_mutex_unlock(&rt->state_mu);
    ipu__wake_producers(rt->s);
    ipu__wake_device(rt->s); /* an iteration in flight may wait for a slot never to come */
}

/* After a failure, nothing queued any more, on the thread that owns the device: reload with
 * auto_reset (health OK), else health NEEDS_RESET; wakes the submitters waiting on it. */
void ipu__recover(ipu_runtime *rt) {
    ipu_status ls = IPU_OK;
    char lmsg[IPU__MSG_BYTES] = "";
    if (rt->cfg.auto_reset && !ipu__closed(rt)) {
        ls = ipu_session_run_load(rt->s);
        if (ls != IPU_OK) snprintf(lmsg, sizeof lmsg, "%s", ipu_last_error_message());
    }
    pthread_mutex_lock(&rt->state_mu);
    if (rt->cfg.auto_reset && ls == IPU_OK) {
        atomic_store(&rt->health, IPU__HEALTH_OK);
        ipu__log(IPU_LOG_WARNING, "runtime %p: reloaded after a failure (auto_reset)", (void *)rt);
    } else {
        ipu__log(IPU_LOG_WARNING, "runtime %p: %s", (void *)rt,
                 ls != IPU_OK ? "automatic reset failed: refusing requests until "
                                "ipu_runtime_reset"
                              : "refusing requests until ipu_runtime_reset");
        if (ls != IPU_OK) {
            rt->fail_status = ls;
            snprintf(rt->fail_msg, sizeof rt->fail_msg, "automatic reset failed: %.400s", lmsg);
        }
        atomic_store(&rt->health, IPU__HEALTH_NEEDS_RESET);
    }
    pthread_cond_broadcast(&rt->state_cv);
    pthread_mutex_unlock(&rt->state_mu);
}

/* Device thread, after run_main failed with st. */
static void handle_failure(ipu_runtime *rt, ipu_status st) {
    char msg[IPU__MSG_BYTES];
    snprintf(msg, sizeof msg, "%s", ipu_last_error_message());
    ipu__log(IPU_LOG_ERROR,
             "runtime %p: iteration failed (%s): %s; the enqueued requests fail "
             "with it",
             (void *)rt, ipu_status_name(st), msg);
    ipu__mark_failed(rt, st, msg);
    /* Producers see health != OK and stop pushing; after this barrier no ring has a producer
     * until health is OK again (submit checks it under submit_mu). */
    pthread_mutex_lock(&rt->submit_mu);
    pthread_mutex_unlock(&rt->submit_mu);
    pthread_mutex_lock(&rt->state_mu);
    ipu_status fst = rt->fail_status;
    char fmsg[IPU__MSG_BYTES + 64];
    snprintf(fmsg, sizeof fmsg, "failed by an earlier iteration failure: %s", rt->fail_msg);
    pthread_mutex_unlock(&rt->state_mu);
    ipu__session_disconnect_msg(rt->s, fst, fmsg);
    ipu__recover(rt);
}

ipu_status ipu__run_task(ipu_runtime *rt, const ipu__task *t) {
    if (t->kind == IPU__TASK_READ)
        return ipu_session_read_variable(rt->s, t->anchor, t->buf, t->nbytes);
    if (t->kind == IPU__TASK_WRITE)
        return ipu_session_write_variable(rt->s, t->anchor, t->buf, t->nbytes);
    ipu_status ls = ipu_session_run_load(rt->s);
    char lmsg[IPU__MSG_BYTES] = "";
    if (ls != IPU_OK) snprintf(lmsg, sizeof lmsg, "%s", ipu_last_error_message());
    pthread_mutex_lock(&rt->state_mu);
    if (ls == IPU_OK) {
        atomic_store(&rt->health, IPU__HEALTH_OK);
    } else {
        rt->fail_status = ls;
        snprintf(rt->fail_msg, sizeof rt->fail_msg, "reset failed: %.400s", lmsg);
        atomic_store(&rt->health, IPU__HEALTH_NEEDS_RESET);
    }
    pthread_mutex_unlock(&rt->state_mu);
    if (ls != IPU_OK) ipu__fail(ls, "%s", rt->fail_msg);
    return ls;
}

/* Device thread: run the pending task for the caller waiting in device_task (runtime.c). */
static void do_task(ipu_runtime *rt) {
    pthread_mutex_lock(&rt->state_mu);
    uint64_t gen = rt->task_req_gen;
    ipu__task t = rt->task;
    bool closed = ipu__closed(rt);
    if (!closed) rt->task_taken_gen = gen;
    pthread_mutex_unlock(&rt->state_mu);
    ipu_status st = closed ? ipu__fail(IPU_ERR_CLOSED, "the runtime closed")
                           : ipu__run_task(rt, &t);
    pthread_mutex_lock(&rt->state_mu);
    rt->task_done_gen = gen;
    rt->task_status = st;
    snprintf(rt->task_msg, sizeof rt->task_msg, "%s", st != IPU_OK ? ipu_last_error_message() : "");
    atomic_store(&rt->task_pending, 0);
    pthread_cond_broadcast(&rt->state_cv);
    pthread_mutex_unlock(&rt->state_mu);
}

void *ipu__device_main(void *arg) {
    ipu_runtime *rt = arg;
    if (rt->cfg.pin_threads) ipu__pool_pin_self(rt->s->pool);
    for (;;) {
        if (ipu__closed(rt) || ipu_session_stopped(rt->s)) break;
        if (atomic_load(&rt->task_pending)) {
            do_task(rt);
            continue;
        }
        ipu_status st = ipu_session_run_main(rt->s, NULL);
        if (st == IPU_OK) continue;
        if (st == IPU_ERR_CLOSED && ipu_session_stopped(rt->s)) break;
        handle_failure(rt, st);
    }
    return NULL;
}

ipu_status ipu__start_device(ipu_runtime *rt) {
    /* The device thread blocks every signal (they belong to the application's threads). */
    sigset_t all, old;
    sigfillset(&all);
    int masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    int rc = pthread_create(&rt->device, NULL, ipu__device_main, rt);
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return ipu__fail(rc == EAGAIN ? IPU_ERR_NOMEM : IPU_ERR_INTERNAL,
                         "runtime: cannot start the device thread (error %d)", rc);
    rt->device_started = 1;
    return IPU_OK;
}
