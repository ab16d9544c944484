/* Runtime lifecycle on top of ipu_session: create (session, bindings, Load program), stream
 * callbacks, reset, close (stop the device, fail pending requests), destroy, stats.
 * The device thread is in device.c, requests and submission in request.c; the shared state and
 * the protocols are described in runtime_internal.h. */
#include <stdio.h>
#include <string.h>

#include "runtime_internal.h"

ipu_runtime_config ipu_runtime_config_default(void) {
    ipu_runtime_config c;
    memset(&c, 0, sizeof c);
    /* BEGIN GENERATED defaults: tools/gen_config.py from pyipu/_options.py */
    c.num_threads = 0u;
    c.ring_buffer_size_multiplier = 2u;
    c.timeout_ns = 10000000u;
    c.batch_timeout_ns = 0u;
    c.batching_dim = IPU_NO_INDEX;
    c.flush_on_waiting_outputs = 0;
    c.auto_reset = 0;
    c.check_package_hash = 1;
    c.validate_io_params = 1;
    c.thread_safe = 1;
    c.overlap_io = -1;
    c.pin_threads = 1;
    c.no_wait_when_alone = 0;
    /* END GENERATED defaults */
    return c;
}

/* May run on a caller's thread (ipu_runtime_execute): one iteration per step, one subgraph,
 * whole batches, the serial loop. The caller then does what the device thread would, without
 * the two hand-offs (~25 us per request on a VM) and, where the program allows, on the
 * caller's buffers (no copies). With more compute threads the caller is worker 0 of the pool.
 * *alone (more than one compute thread and a Main program with an instruction worth splitting
 * over workers): only for callers that have had ipu_runtime_execute to themselves for a while
 * and do not run on a pinned helper's CPU (request.c): concurrent callers keep the device
 * thread, which runs two requests at once. */
static bool inline_eligible(const ipu_runtime *rt, bool *alone) {
    const ipu_session *s = rt->s;
    const ipu_executable *e = s->exe;
    *alone = false;
    if (s->bps != 1 || s->num_subgraphs != 1 || s->index_anchor != IPU_NO_INDEX || s->batching ||
        s->pl_on || e->info.num_stages != 0)
        return false;
    if (s->nth == 1) return true;
    const ipu__program *prog = &e->programs[e->main_programs[0]];
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < prog->n_instr; i++) bytes += ipu__instr_bytes(e, &prog->instr[i]);
    *alone = bytes >= IPU__PAR_MIN_BYTES;
    return true;
}

/* ---- caller buffers in place (inline requests) ---------------------------------------------- */

static bool arena_overlap(const ipu_executable *e, uint32_t t, uint32_t u) {
    const ipu__tensor *a = &e->tensors[t], *b = &e->tensors[u];
    return a->loc == IPU_LOC_ARENA && b->loc == IPU_LOC_ARENA && a->desc.nbytes && b->desc.nbytes &&
           a->offset < b->offset + b->desc.nbytes && b->offset < a->offset + a->desc.nbytes;
}

/* Bytes [lo, hi) of the arena written by an instruction, clipped to an anchor's bytes. */
typedef struct ipu__span {
    uint64_t lo, hi;
} ipu__span;

/* Tensor X's bytes within [lo, hi). */
static ipu__span clipped(const ipu__tensor *X, uint64_t lo, uint64_t hi) {
    uint64_t end = X->offset + X->desc.nbytes;
    return (ipu__span){X->offset > lo ? X->offset : lo, end < hi ? end : hi};
}

/* Are bytes [a, b) covered by the union of spans w[0..n)? */
static bool covered(const ipu__span *w, size_t n, uint64_t a, uint64_t b) {
    for (bool moved = true; a < b && moved;) {
        moved = false;
        for (size_t i = 0; i < n; i++)
            if (w[i].lo <= a && a < w[i].hi) {
                a = w[i].hi;
                moved = true;
            }
    }
    return a >= b;
}

/* May the Main program use the caller's buffer of anchor tensor t instead of t's arena bytes?
 * Only if it reaches those bytes through t alone while they hold the anchor's data. An input:
 * t is never written, and every byte of t that another tensor reads has been written before
 * (storage reused after t's last use, including by views such as an in-place Concat's output
 * whose parts were written; not a view of t such as a reshape). An output: t's first use
 * writes it and from then on no other tensor touches its bytes (no view of t, nothing else
 * stored there). BIND repoints tensors at run time: an anchor it touches stays in the arena.
 * `spans` is scratch for every output of the program. */
static bool in_place_ok(const ipu_executable *e, const ipu__program *prog, uint32_t t, bool input,
                        ipu__span *spans) {
    const ipu__tensor *T = &e->tensors[t];
    if (T->loc != IPU_LOC_ARENA || T->desc.nbytes == 0) return false;
    uint64_t lo = T->offset, hi = T->offset + T->desc.nbytes;
    size_t n = 0;
    bool seen = false; /* output: t's first use has been passed */
    for (uint32_t i = 0; i < prog->n_instr; i++) {
        const ipu__instr *ins = &prog->instr[i];
        for (uint32_t k = 0; k < ins->n_in + ins->n_out; k++) {
            bool out = k >= ins->n_in;
            uint32_t x = out ? ins->out[k - ins->n_in] : ins->in[k];
            if (!arena_overlap(e, t, x)) continue;
            if (ins->op == IPU_OP_BIND) return false;
            ipu__span r = clipped(&e->tensors[x], lo, hi);
            if (input ? (x == t ? out : !out && !covered(spans, n, r.lo, r.hi))
                      : (x == t ? !seen && !out : seen))
                return false;
            if (!input && x == t) seen = true;
        }
        for (uint32_t k = 0; input && k < ins->n_out; k++)
            if (arena_overlap(e, t, ins->out[k]))
                spans[n++] = clipped(&e->tensors[ins->out[k]], lo, hi);
    }
    return input || seen;
}

/* rt->in_place[a]: the arena pointer of anchor a's tensor when inline requests may run on the
 * caller's buffer instead (NULL: copied). */
static ipu_status plan_in_place(ipu_runtime *rt) {
    const ipu_session *s = rt->s;
    const ipu_executable *e = s->exe;
    const ipu__program *prog = &e->programs[e->main_programs[0]];
    size_t outs = 1;
    for (uint32_t i = 0; i < prog->n_instr; i++) outs += prog->instr[i].n_out;
    rt->in_place = ipu__calloc(rt->num_anchors ? rt->num_anchors : 1, sizeof *rt->in_place);
    ipu__span *spans = ipu__calloc(outs, sizeof *spans);
    if (!rt->in_place || !spans) {
        ipu__free(spans);
        return ipu__fail(IPU_ERR_NOMEM, "runtime: cannot allocate the in-place anchor table");
    }
    for (uint32_t a = 0; a < rt->num_anchors; a++) {
        const ipu_anchor_info *A = &s->anchors[a];
        if (A->has_tensor_data || a == rt->index_anchor || !ipu__in_subgraph(s, a, 0)) continue;
        if (in_place_ok(e, prog, A->tensor, A->direction == IPU_DIR_INPUT, spans))
            rt->in_place[a] = s->tensor_ptr[A->tensor];
    }
    ipu__free(spans);
    return IPU_OK;
}

static ipu_status init_sync(ipu_runtime *rt) {
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return ipu__fail(IPU_ERR_INTERNAL, "runtime: pthread_condattr_init failed");
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int n = 0;
    if (pthread_mutex_init(&rt->submit_mu, NULL) == 0) n++;
    if (n == 1 && pthread_mutex_init(&rt->close_mu, NULL) == 0) n++;
    if (n == 2 && pthread_mutex_init(&rt->state_mu, NULL) == 0) n++;
    if (n == 3 && pthread_cond_init(&rt->state_cv, &attr) == 0) n++;
    pthread_condattr_destroy(&attr);
    if (n == 4) {
        rt->sync_ready = 1;
        return IPU_OK;
    }
    if (n > 2) pthread_mutex_destroy(&rt->state_mu);
    if (n > 1) pthread_mutex_destroy(&rt->close_mu);
    if (n > 0) pthread_mutex_destroy(&rt->submit_mu);
    return ipu__fail(IPU_ERR_INTERNAL, "runtime: cannot initialise mutexes/condition variables");
}

ipu_status ipu_runtime_create(const ipu_executable *exe, const ipu_runtime_config *cfg,
                              ipu_runtime **out) {
    if (!exe || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_runtime_create: NULL argument");
    ipu_status st = IPU_OK;
    ipu_runtime *rt = ipu__aligned_zalloc(_Alignof(ipu_runtime), sizeof *rt);
    if (!rt) return ipu__fail(IPU_ERR_NOMEM, "runtime: cannot allocate the runtime");
    rt->cfg = cfg ? *cfg : ipu_runtime_config_default();
    rt->exe = exe;
    rt->t_created = ipu__now_ns();
    atomic_init(&rt->closed, false);
    atomic_init(&rt->health, IPU__HEALTH_OK);
    atomic_init(&rt->executing, 0u);
    atomic_init(&rt->crowded_ns, 0u);
    const ipu_executable_info *info = &exe->info;
    uint64_t cap;
    uint32_t mult = rt->cfg.ring_buffer_size_multiplier ? rt->cfg.ring_buffer_size_multiplier : 1;
    uint32_t bps = info->batches_per_step ? info->batches_per_step : 1;
    if (!ipu__mul_u64(mult, bps, &cap) || cap > ((uint64_t)1 << 24)) {
        st = ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                       "runtime: ring capacity %u x %u batches is too "
                       "large (max 2^24 slots)",
                       mult, bps);
        goto fail;
    }
    /* With dynamic batching a slot may hold a single row: scale the rings by the rows per batch
     * so a batch can be merged from one-row requests (a full output ring runs a partial batch). */
    for (uint32_t a = 0; rt->cfg.batching_dim != IPU_NO_INDEX && a < info->num_anchors; a++) {
        ipu_anchor_info A;
        if (ipu_executable_anchor(exe, a, &A) != IPU_OK || A.has_tensor_data ||
            a == info->index_anchor || rt->cfg.batching_dim >= A.desc.ndim)
            continue;
        uint64_t rows = A.desc.dims[rt->cfg.batching_dim] > 0
                            ? (uint64_t)A.desc.dims[rt->cfg.batching_dim]
                            : 1;
        if (!ipu__mul_u64(cap < 2 ? 2 : cap, rows, &cap) || cap > ((uint64_t)1 << 24))
            cap = (uint64_t)1 << 24;
        break;
    }
    ipu_session_config sc = ipu_session_config_default();
    /* BEGIN GENERATED session: tools/gen_config.py from pyipu/_options.py */
    sc.num_threads = rt->cfg.num_threads;
    sc.timeout_ns = rt->cfg.timeout_ns;
    sc.batch_timeout_ns = rt->cfg.batch_timeout_ns;
    sc.batching_dim = rt->cfg.batching_dim;
    sc.flush_on_waiting_outputs = rt->cfg.flush_on_waiting_outputs;
    sc.check_package_hash = rt->cfg.check_package_hash;
    sc.overlap_io = rt->cfg.overlap_io;
    sc.pin_threads = rt->cfg.pin_threads;
    /* END GENERATED session */
    sc.ring_capacity = (uint32_t)(cap < 2 ? 2 : cap);
    st = ipu_session_create(exe, &sc, &rt->s);
    if (st != IPU_OK) {
        char m[IPU__MSG_BYTES];
        snprintf(m, sizeof m, "%s", ipu_last_error_message());
        st = ipu__fail(st, "runtime: %s", m);
        goto fail;
    }
    rt->num_anchors = rt->s->num_anchors;
    rt->num_subgraphs = rt->s->num_subgraphs;
    rt->index_anchor = rt->s->index_anchor;
    rt->inline_ok = inline_eligible(rt, &rt->inline_alone);
    if (rt->inline_ok && (st = plan_in_place(rt)) != IPU_OK) goto fail;
    rt->s->park_ok = rt->inline_ok;
    rt->s->par_steps = true; /* the device thread runs step after step: two may overlap */
    rt->s->cancel_of = ipu__request_cancel_flag;
    if (rt->cfg.no_wait_when_alone) rt->s->alone_of = ipu__request_alone;
    rt->s->abort = &rt->health;
    rt->s->abort_status = &rt->fail_status;
    rt->s->abort_msg = rt->fail_msg;
    st = init_sync(rt);
    if (st != IPU_OK) goto fail;
    /* Default bindings (weights TENSOR_DATA, the rest QUEUE); Load on this thread. */
    st = ipu_session_run_load(rt->s);
    if (st != IPU_OK) {
        char m[IPU__MSG_BYTES];
        snprintf(m, sizeof m, "%s", ipu_last_error_message());
        st = ipu__fail(st, "runtime: %s", m);
        goto fail;
    }
    ipu__log(IPU_LOG_INFO,
             "runtime %p: created: %u anchors, %u compute threads, %u batches per "
             "step, ring capacity %u, arena %llu bytes",
             (void *)rt, rt->num_anchors, rt->s->nth, rt->s->bps, sc.ring_capacity,
             (unsigned long long)info->arena_size);
    *out = rt;
    return IPU_OK;
fail:
    ipu_runtime_destroy(rt);
    return st;
}

ipu_status ipu_runtime_set_poll(ipu_runtime *rt, ipu_poll_fn fn, void *user_data) {
    if (!rt) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_runtime_set_poll: rt is NULL");
    ipu_status st = IPU_OK;
    pthread_mutex_lock(&rt->submit_mu);
    if (ipu__closed(rt))
        st = ipu__fail(IPU_ERR_CLOSED, "ipu_runtime_set_poll: the runtime is closed");
    else if (rt->submitted)
        st = ipu__fail(IPU_ERR_INVALID_STATE, "ipu_runtime_set_poll: set it before the first "
                                              "submit or execute");
    else
        rt->poll = fn, rt->poll_ud = user_data;
    pthread_mutex_unlock(&rt->submit_mu);
    return st;
}

ipu_status ipu_runtime_set_stream_callback(ipu_runtime *rt, uint32_t anchor, ipu_stream_fn fn,
                                           void *user_data) {
    if (!rt) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "set_stream_callback: rt is NULL");
    if (anchor >= rt->num_anchors)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "set_stream_callback: anchor %u out of range "
                         "(model has %u anchors)",
                         anchor, rt->num_anchors);
    if (!ipu__streamed(rt, anchor))
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "set_stream_callback: anchor '%s' is not "
                         "streamed (%s)",
                         rt->s->anchors[anchor].name,
                         anchor == rt->index_anchor ? "it is the subgraph index"
                                                    : "its data is in the container");
    ipu_status st = IPU_OK;
    pthread_mutex_lock(&rt->submit_mu);
    if (ipu__closed(rt))
        st = ipu__fail(IPU_ERR_CLOSED, "set_stream_callback: the runtime is closed");
    else if (rt->submitted)
        st = ipu__fail(IPU_ERR_INVALID_STATE,
                       "set_stream_callback: anchor '%s': stream "
                       "callbacks must be set before the first submit",
                       rt->s->anchors[anchor].name);
    else /* the device thread has not started: nobody is inside run_main */
        st = ipu__session_rebind(rt->s, anchor, fn ? IPU_BIND_CALLBACK : IPU_BIND_QUEUE, fn,
                                 user_data);
    pthread_mutex_unlock(&rt->submit_mu);
    return st;
}

/* Run `t` on the device thread between steps (or here, while it has not started) and wait. */
static ipu_status device_task(ipu_runtime *rt, ipu__task t, const char *fn) {
    if (!rt) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
    if (ipu__tl_in_callback)
        return ipu__fail(IPU_ERR_INVALID_STATE, "%s called from a stream or done callback", fn);
    pthread_mutex_lock(&rt->state_mu);
    while (rt->task_busy && !ipu__closed(rt)) pthread_cond_wait(&rt->state_cv, &rt->state_mu);
    bool closed = ipu__closed(rt);
    if (!closed) rt->task_busy = true;
    pthread_mutex_unlock(&rt->state_mu);
    if (closed) return ipu__fail(IPU_ERR_CLOSED, "%s: the runtime is closed", fn);
    ipu_status st;
    char m[IPU__MSG_BYTES] = "";
    pthread_mutex_lock(&rt->submit_mu);
    if (ipu__closed(rt)) {
        pthread_mutex_unlock(&rt->submit_mu);
        st = IPU_ERR_CLOSED;
        snprintf(m, sizeof m, "the runtime is closed");
    } else if (!rt->device_started) {
        /* No device thread: the task runs here (submit_mu keeps it from starting meanwhile). */
        st = ipu__run_task(rt, &t);
        if (st != IPU_OK) snprintf(m, sizeof m, "%s", ipu_last_error_message());
        pthread_mutex_unlock(&rt->submit_mu);
    } else {
        pthread_mutex_unlock(&rt->submit_mu);
        pthread_mutex_lock(&rt->state_mu);
        rt->task = t;
        uint64_t gen = ++rt->task_req_gen;
        atomic_store(&rt->task_pending, 1);
        pthread_mutex_unlock(&rt->state_mu);
        ipu__session_interrupt(rt->s);
        pthread_mutex_lock(&rt->state_mu);
        /* closed: the device takes no more tasks, but one it took may still use t.buf */
        while (rt->task_done_gen < gen && !(ipu__closed(rt) && rt->task_taken_gen < gen))
            pthread_cond_wait(&rt->state_cv, &rt->state_mu);
        st = rt->task_done_gen >= gen ? rt->task_status : IPU_ERR_CLOSED;
        snprintf(m, sizeof m, "%s", st == IPU_ERR_CLOSED ? "the runtime closed" : rt->task_msg);
        pthread_mutex_unlock(&rt->state_mu);
    }
    pthread_mutex_lock(&rt->state_mu);
    rt->task_busy = false;
    pthread_cond_broadcast(&rt->state_cv);
    pthread_mutex_unlock(&rt->state_mu);
    if (st != IPU_OK) return ipu__fail(st, "%s: %s", fn, m);
    return IPU_OK;
}

ipu_status ipu_runtime_reset(ipu_runtime *rt) {
    return device_task(rt, (ipu__task){IPU__TASK_RESET, 0, NULL, 0}, "ipu_runtime_reset");
}

ipu_status ipu_runtime_read_variable(ipu_runtime *rt, uint32_t anchor, void *dst, size_t nbytes) {
    return device_task(rt, (ipu__task){IPU__TASK_READ, anchor, dst, nbytes},
                       "ipu_runtime_read_variable");
}

ipu_status ipu_runtime_write_variable(ipu_runtime *rt, uint32_t anchor, const void *src,
                                      size_t nbytes) {
    /* the task only reads *src; ipu__task holds one pointer for both directions */
    return device_task(rt, (ipu__task){IPU__TASK_WRITE, anchor, (void *)(uintptr_t)src, nbytes},
                       "ipu_runtime_write_variable");
}

ipu_status ipu_runtime_close(ipu_runtime *rt) {
    if (!rt) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_runtime_close: rt is NULL");
    if (!rt->sync_ready) return IPU_OK; /* half-built: no thread ever ran */
    if (ipu__tl_in_callback)
        return ipu__fail(IPU_ERR_INVALID_STATE, "ipu_runtime_close called from a stream or done "
                                                "callback");
    pthread_mutex_lock(&rt->close_mu);
    if (!rt->close_done) {
        /* 1. Stop: flag (+ broadcast for reset waiters), then the session wakes its waiters. */
        pthread_mutex_lock(&rt->state_mu);
        atomic_store(&rt->closed, true);
        pthread_cond_broadcast(&rt->state_cv);
        pthread_mutex_unlock(&rt->state_mu);
        ipu_session_stop(rt->s);
        /* 2. Wait out a submitter that is still pushing (it sees the stop and gives up); later
         * submitters see `closed` under submit_mu and queue nothing. */
        pthread_mutex_lock(&rt->submit_mu);
        int started = rt->device_started;
        ipu_request *orphan = rt->orphan;
        rt->orphan = NULL;
        pthread_mutex_unlock(&rt->submit_mu);
        /* 3. The device leaves run_main (abandoning a half-served iteration) and exits. */
        if (started) pthread_join(rt->device, NULL);
        /* 4. This thread is now the only consumer: fail everything still queued. */
        ipu__session_disconnect_msg(rt->s, IPU_ERR_CLOSED,
                                    "runtime closed before the request completed");
        if (orphan) {
            ipu__request_complete(rt, orphan, IPU_ERR_CLOSED,
                                  "runtime closed while the request was being submitted");
            ipu__request_unref(orphan);
        }
        rt->close_done = 1;
        if (ipu__log_enabled(IPU_LOG_INFO)) {
            ipu_runtime_stats stats;
            ipu_runtime_get_stats(rt, &stats);
            ipu__log(IPU_LOG_INFO,
                     "runtime %p: closed: %llu requests completed, %llu failed, "
                     "%llu iterations",
                     (void *)rt, (unsigned long long)stats.requests_completed,
                     (unsigned long long)stats.requests_failed,
                     (unsigned long long)stats.iterations);
        }
    }
    pthread_mutex_unlock(&rt->close_mu);
    return IPU_OK;
}

void ipu_runtime_destroy(ipu_runtime *rt) {
    if (!rt) return;
    if (rt->sync_ready) {
        /* A failing close (called from a callback) leaves everything in place: leaking is the
         * only safe option there. */
        if (ipu_runtime_close(rt) != IPU_OK) return;
        pthread_cond_destroy(&rt->state_cv);
        pthread_mutex_destroy(&rt->state_mu);
        pthread_mutex_destroy(&rt->close_mu);
        pthread_mutex_destroy(&rt->submit_mu);
    }
    ipu_session_destroy(rt->s);
    ipu__free(rt->in_place);
    ipu__aligned_free(rt);
}

/* ---- stats -------------------------------------------------------------------------------- */

static uint32_t lat_bucket(uint64_t v) {
    if (v < IPU__LAT_SUB) return (uint32_t)v;
    uint32_t e = 63u - (uint32_t)__builtin_clzll(v); /* >= 4 */
    uint32_t sub = (uint32_t)(v >> (e - 4)) & (IPU__LAT_SUB - 1);
    return (e - 3) * IPU__LAT_SUB + sub;
}

/* Middle of bucket b. */
static uint64_t lat_value(uint32_t b) {
    if (b < IPU__LAT_SUB) return b;
    uint32_t e = b / IPU__LAT_SUB + 3, sub = b % IPU__LAT_SUB;
    uint64_t lo = ((uint64_t)(IPU__LAT_SUB + sub)) << (e - 4);
    return lo + (((uint64_t)1 << (e - 4)) >> 1);
}

void ipu__stats_record(ipu_runtime *rt, ipu_status st, uint64_t t_submit) {
    atomic_fetch_add_explicit(st == IPU_OK ? &rt->st_completed : &rt->st_failed, 1,
                              memory_order_relaxed);
    if (st != IPU_OK) return;
    uint64_t now = ipu__now_ns();
    atomic_fetch_add_explicit(&rt->lat[lat_bucket(now > t_submit ? now - t_submit : 0)], 1,
                              memory_order_relaxed);
    uint64_t ep = now / IPU__TP_BUCKET_NS;
    ipu__tp_bucket *b = &rt->tp[ep % IPU__TP_BUCKETS];
    uint_fast64_t old = atomic_load_explicit(&b->epoch, memory_order_relaxed);
    if (old != ep && atomic_compare_exchange_strong(&b->epoch, &old, ep))
        atomic_store_explicit(&b->count, 0, memory_order_relaxed); /* approximate under races */
    atomic_fetch_add_explicit(&b->count, 1, memory_order_relaxed);
}

static uint64_t percentile(const uint64_t *h, uint64_t total, double q) {
    uint64_t want = (uint64_t)(q * (double)total + 0.999999), acc = 0;
    if (want == 0) want = 1;
    for (uint32_t b = 0; b < IPU__LAT_BUCKETS; b++) {
        acc += h[b];
        if (acc >= want) return lat_value(b);
    }
    return 0;
}

void ipu_runtime_get_stats(const ipu_runtime *rt, ipu_runtime_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!rt) return;
    ipu_session_stats ss;
    ipu_session_get_stats(rt->s, &ss);
    out->requests_submitted = atomic_load_explicit(&rt->st_submitted, memory_order_relaxed);
    out->requests_completed = atomic_load_explicit(&rt->st_completed, memory_order_relaxed);
    out->requests_failed = atomic_load_explicit(&rt->st_failed, memory_order_relaxed);
    out->steps = ss.steps;
    out->iterations = ss.iterations;
    out->padded_iterations = ss.padded_iterations;
    out->padded_rows = ss.padded_rows;
    out->num_threads = ss.num_threads;
    out->pipeline_ticks = ss.pipeline_ticks;
    out->concurrent_ticks = ss.concurrent_ticks;
    out->concurrent_iterations = ss.concurrent_iterations;
    out->in_place_buffers = atomic_load_explicit(&rt->st_in_place, memory_order_relaxed);
    uint64_t h[IPU__LAT_BUCKETS];
    uint64_t total = 0;
    for (uint32_t b = 0; b < IPU__LAT_BUCKETS; b++) {
        h[b] = atomic_load_explicit(&rt->lat[b], memory_order_relaxed);
        total += h[b];
    }
    if (total) {
        out->latency_p50_ns = percentile(h, total, 0.50);
        out->latency_p99_ns = percentile(h, total, 0.99);
    }
    uint64_t now = ipu__now_ns(), ep = now / IPU__TP_BUCKET_NS, count = 0;
    for (uint32_t i = 0; i < IPU__TP_BUCKETS; i++) {
        uint64_t e = atomic_load_explicit(&rt->tp[i].epoch, memory_order_relaxed);
        if (e + IPU__TP_BUCKETS > ep && e <= ep)
            count += atomic_load_explicit(&rt->tp[i].count, memory_order_relaxed);
    }
    /* Window: the 19 previous buckets and the elapsed part of the current one. */
    uint64_t window = (IPU__TP_BUCKETS - 1) * IPU__TP_BUCKET_NS + now % IPU__TP_BUCKET_NS;
    if (now - rt->t_created < window) window = now - rt->t_created;
    if (window < 1000000) window = 1000000;
    out->throughput_rps = (double)count * 1e9 / (double)window;
}

size_t ipu_runtime_queue_depth(const ipu_runtime *rt, uint32_t anchor) {
    return rt ? ipu_session_queue_depth(rt->s, anchor) : 0;
}
