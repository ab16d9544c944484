/* Tracepoints (ipu_trace.h): a ring of ipu_trace_event under a mutex, allocated once. */
#include <pthread.h>
#include <string.h>

#include "../common/ipu_internal.h"
#include "ipu/ipu_trace.h"
#include "runtime_internal.h"

struct ipu_trace {
    pthread_mutex_t mu;
    size_t cap;
    uint64_t next; /* seq of the next event; events [next - min(next, cap), next) are kept */
    ipu_trace_event *ev;
};

ipu_status ipu_trace_create(size_t capacity, ipu_trace **out) {
    if (!out) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "trace_create: out is NULL");
    if (capacity < 1 || capacity > SIZE_MAX / sizeof(ipu_trace_event))
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "trace_create: capacity %zu is not in 1..%zu",
                         capacity, SIZE_MAX / sizeof(ipu_trace_event));
    ipu_trace *t = ipu__calloc(1, sizeof *t);
    ipu_trace_event *ev = t ? ipu__malloc(capacity * sizeof *ev) : NULL;
    if (!t || !ev) {
        ipu__free(t);
        return ipu__fail(IPU_ERR_NOMEM, "trace_create: %zu events", capacity);
    }
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        ipu__free(ev);
        ipu__free(t);
        return ipu__fail(IPU_ERR_INTERNAL, "trace_create: pthread_mutex_init failed");
    }
    t->cap = capacity;
    t->ev = ev;
    *out = t;
    return IPU_OK;
}

void ipu_trace_destroy(ipu_trace *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    ipu__free(t->ev);
    ipu__free(t);
}

size_t ipu_trace_capacity(const ipu_trace *t) { return t ? t->cap : 0; }

void ipu__trace_record(ipu_trace *t, uint32_t kind, uint32_t subgraph, uint64_t start_ns) {
    uint64_t end = ipu__now_ns();
    pthread_mutex_lock(&t->mu);
    ipu_trace_event *e = &t->ev[t->next % t->cap];
    e->start_ns = start_ns;
    e->end_ns = end;
    e->kind = kind;
    e->subgraph = subgraph;
    e->seq = t->next++;
    pthread_mutex_unlock(&t->mu);
}

ipu_status ipu_trace_read(ipu_trace *t, ipu_trace_event *out, size_t cap, size_t *count,
                          uint64_t *dropped) {
    if (!t || !count || (cap && !out))
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "trace_read: t, count (and out) are required");
    pthread_mutex_lock(&t->mu);
    uint64_t kept = t->next < t->cap ? t->next : t->cap;
    uint64_t n = kept < cap ? kept : cap;
    for (uint64_t i = 0; i < n; i++) out[i] = t->ev[(t->next - n + i) % t->cap];
    if (dropped) *dropped = t->next - kept;
    pthread_mutex_unlock(&t->mu);
    *count = (size_t)n;
    return IPU_OK;
}

void ipu_trace_clear(ipu_trace *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->next = 0;
    pthread_mutex_unlock(&t->mu);
}

ipu_status ipu_runtime_set_trace(ipu_runtime *rt, ipu_trace *t) {
    if (!rt) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "set_trace: rt is NULL");
    ipu_status st = IPU_OK;
    pthread_mutex_lock(&rt->submit_mu);
    if (ipu__closed(rt))
        st = ipu__fail(IPU_ERR_CLOSED, "set_trace: the runtime is closed");
    else if (rt->submitted)
        st = ipu__fail(IPU_ERR_INVALID_STATE, "set_trace: must be called before the first submit");
    else /* the device thread has not started: no stage reads s->trace yet */
        rt->s->trace = t;
    pthread_mutex_unlock(&rt->submit_mu);
    return st;
}
