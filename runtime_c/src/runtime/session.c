/* Session: lifecycle, bindings, the Load program, enqueue, stop/flush/disconnect and stats.
 * Programs run in session_exec.c, the Main step in session_main.c; the shared state and the
 * wake-up protocol are described in session_internal.h. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "session_internal.h"

_Thread_local int ipu__tl_in_callback;

ipu_session_config ipu_session_config_default(void) {
    ipu_session_config c;
    memset(&c, 0, sizeof c);
    /* BEGIN GENERATED defaults: tools/gen_config.py from pyipu/_options.py */
    c.num_threads = 0u;
    c.ring_capacity = 0u;
    c.timeout_ns = 10000000u;
    c.batch_timeout_ns = 0u;
    c.batching_dim = IPU_NO_INDEX;
    c.flush_on_waiting_outputs = 0;
    c.check_package_hash = 1;
    c.overlap_io = -1;
    c.pin_threads = 1;
    /* END GENERATED defaults */
    return c;
}

static uint32_t default_threads(void) {
    long n = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    return n > (long)IPU_MAX_THREADS ? IPU_MAX_THREADS : (uint32_t)n;
}

static ipu_status init_sync(ipu_session *s) {
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return ipu__fail(IPU_ERR_INTERNAL, "session: pthread_condattr_init failed");
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int n = 0;
    if (pthread_mutex_init(&s->mu, NULL) == 0) n++;
    if (n == 1 && pthread_cond_init(&s->data_cv, &attr) == 0) n++;
    if (n == 2 && pthread_cond_init(&s->space_cv, &attr) == 0) n++;
    pthread_condattr_destroy(&attr);
    if (n == 3) {
        s->sync_ready = 1;
        return IPU_OK;
    }
    if (n > 1) pthread_cond_destroy(&s->data_cv);
    if (n > 0) pthread_mutex_destroy(&s->mu);
    return ipu__fail(IPU_ERR_INTERNAL, "session: cannot initialise mutexes/condition variables");
}

/* Rows geometry of anchor a (see session_internal.h). */
static ipu_status set_geometry(ipu_session *s, uint32_t a) {
    const ipu_anchor_info *A = &s->anchors[a];
    ipu__geom *g = &s->geom[a];
    *g = (ipu__geom){1, 1, A->desc.nbytes};
    if (a == s->index_anchor) g->inner = sizeof(uint32_t);
    if (!s->batching || a == s->index_anchor || A->has_tensor_data) return IPU_OK;
    uint32_t d = s->cfg.batching_dim;
    if (d >= A->desc.ndim || A->desc.dims[d] <= 0)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "session: batching_dim %u is not a non-empty "
                         "dimension of anchor '%s' (%u dims)",
                         d, A->name, A->desc.ndim);
    uint64_t R = (uint64_t)A->desc.dims[d], outer = 1;
    if (R > UINT32_MAX)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "session: anchor '%s' has too many rows",
                         A->name);
    for (uint32_t i = 0; i < d; i++) outer *= (uint64_t)A->desc.dims[i];
    if (s->batch_rows == 0) s->batch_rows = R;
    if (R != s->batch_rows)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "session: anchor '%s' has %llu rows along "
                         "batching_dim %u but other anchors have %llu",
                         A->name, (unsigned long long)R, d, (unsigned long long)s->batch_rows);
    g->rows = R;
    g->outer = outer;
    g->inner = outer && R ? A->desc.nbytes / (outer * R) : 0;
    return IPU_OK;
}

ipu_status ipu_session_create(const ipu_executable *exe, const ipu_session_config *cfg,
                              ipu_session **out) {
    if (!exe || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_session_create: NULL argument");
    ipu_status st = IPU_OK;
    ipu_session *s = ipu__aligned_zalloc(_Alignof(ipu_session), sizeof *s);
    if (!s) return ipu__fail(IPU_ERR_NOMEM, "session: cannot allocate the session");
    s->cfg = cfg ? *cfg : ipu_session_config_default();
    s->exe = exe;
    s->index_anchor = IPU_NO_INDEX;
    atomic_init(&s->stopped, false);
    atomic_init(&s->park, IPU__PARK_RUNNING);
    atomic_init(&s->poll_cut, 0);
    const ipu_executable_info *info = &exe->info;
    if (s->cfg.check_package_hash) {
        uint64_t have = ipu_container_compiler_hash(exe->container), want = ipu_compiler_hash();
        if (have != want) {
            st = ipu__fail(IPU_ERR_HASH_MISMATCH,
                           "session: package hash 0x%016llx of the "
                           "container differs from runtime hash 0x%016llx (%s); recompile the "
                           "model with this version or set check_package_hash=0",
                           (unsigned long long)have, (unsigned long long)want, IPU_VERSION_STRING);
            goto fail;
        }
    }
    s->nth = s->cfg.num_threads ? s->cfg.num_threads : default_threads();
    if (s->nth > IPU_MAX_THREADS) {
        st = ipu__fail(IPU_ERR_INVALID_ARGUMENT, "session: num_threads %u exceeds %u", s->nth,
                       IPU_MAX_THREADS);
        goto fail;
    }
    s->bps = info->batches_per_step ? info->batches_per_step : 1;
    s->num_anchors = info->num_anchors;
    s->num_subgraphs = info->num_subgraphs ? info->num_subgraphs : 1;
    if (info->index_anchor != IPU_NO_INDEX && info->index_anchor < info->num_anchors)
        s->index_anchor = info->index_anchor;
    s->batching = s->cfg.batching_dim != IPU_NO_INDEX;
    if (s->batching && (s->index_anchor != IPU_NO_INDEX || s->num_subgraphs > 1)) {
        st = ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                       "session: dynamic batching (batching_dim %u) "
                       "is not supported for fused models",
                       s->cfg.batching_dim);
        goto fail;
    }
    uint64_t cap = s->cfg.ring_capacity ? s->cfg.ring_capacity : 2 * (uint64_t)s->bps;
    if (cap > ((uint64_t)1 << 24)) {
        st = ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                       "session: ring capacity %llu is too large "
                       "(max 2^24 slots)",
                       (unsigned long long)cap);
        goto fail;
    }
    if (info->arena_size > SIZE_MAX - 64) {
        st = ipu__fail(IPU_ERR_NOMEM, "session: arena of %llu bytes is too large",
                       (unsigned long long)info->arena_size);
        goto fail;
    }
    uint32_t na = info->num_anchors;
    s->arena = ipu__big_alloc((size_t)info->arena_size);
    s->tensor_ptr = ipu__calloc(info->num_tensors, sizeof *s->tensor_ptr);
    s->override = ipu__calloc(info->num_tensors ? info->num_tensors : 1, 1);
    s->anchors = ipu__calloc(na, sizeof *s->anchors);
    s->binds = ipu__calloc(na, sizeof *s->binds);
    s->geom = ipu__calloc(na, sizeof *s->geom);
    s->rings = ipu__calloc(na, sizeof *s->rings);
    s->consumed = ipu__calloc(na, sizeof *s->consumed);
    s->front_err = ipu__calloc(na, sizeof *s->front_err);
    s->wstore = ipu__calloc(na, sizeof *s->wstore);
    s->wstatus = ipu__calloc(s->nth, sizeof *s->wstatus);
    s->wmsg = ipu__calloc(s->nth, sizeof *s->wmsg);
    if (!s->arena || !s->tensor_ptr || !s->override ||
        (na && (!s->anchors || !s->binds || !s->geom || !s->rings || !s->consumed ||
                !s->front_err || !s->wstore)) ||
        !s->wstatus || !s->wmsg) {
        st = ipu__fail(IPU_ERR_NOMEM,
                       "session: cannot allocate the device arena (%llu bytes) "
                       "and tables",
                       (unsigned long long)info->arena_size);
        goto fail;
    }
    memset(s->arena, 0, (size_t)info->arena_size);
    for (uint32_t t = 0; t < info->num_tensors; t++)
        if (exe->tensors[t].loc == IPU_LOC_ARENA)
            s->tensor_ptr[t] = s->arena + exe->tensors[t].offset;
    s->frame.exe = exe;
    s->frame.ptr = s->tensor_ptr;

    uint32_t n_in = 1;
    for (uint32_t a = 0; a < na; a++) {
        st = ipu_executable_anchor(exe, a, &s->anchors[a]);
        if (st != IPU_OK) goto fail;
        const ipu_anchor_info *A = &s->anchors[a];
        bool weight = A->has_tensor_data && A->direction == IPU_DIR_INPUT;
        s->anchors[a].has_tensor_data = weight;
        s->binds[a].kind = weight ? IPU_BIND_TENSOR_DATA : IPU_BIND_QUEUE;
        if (!weight && a != s->index_anchor && exe->tensors[A->tensor].loc != IPU_LOC_ARENA) {
            st = ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                           "session: streamed anchor '%s' is not "
                           "backed by device memory",
                           A->name);
            goto fail;
        }
        st = set_geometry(s, a);
        if (st == IPU_OK) st = ipu_ring_create((size_t)cap, sizeof(ipu_slot), &s->rings[a]);
        if (st != IPU_OK) goto fail;
        n_in += A->direction == IPU_DIR_INPUT;
    }
    if (s->batch_rows == 0) s->batch_rows = 1;
    /* One iteration takes at most R slots per input anchor (each has >= 1 row), plus the index. */
    s->pending_cap = (size_t)n_in * ((size_t)s->batch_rows + 1);
    s->pops = ipu__calloc(na ? na : 1, sizeof *s->pops);
    s->n_iters = info->pipelined && info->num_stages > 2 ? info->num_stages : 2;
    s->iters = ipu__calloc(s->n_iters, sizeof *s->iters);
    if (!s->iters) {
        st = ipu__fail(IPU_ERR_NOMEM, "session: cannot allocate the iteration tables");
        goto fail;
    }
    for (uint32_t k = 0; k < s->n_iters; k++) {
        s->iters[k].pending = ipu__calloc(s->pending_cap, sizeof *s->iters[k].pending);
        s->iters[k].part = ipu__calloc(na ? na : 1, sizeof *s->iters[k].part);
        s->iters[k].cut = ipu__calloc(s->pending_cap + na, sizeof *s->iters[k].cut);
        s->iters[k].ptr = s->tensor_ptr;
    }
    bool ok = s->pops != NULL;
    for (uint32_t k = 0; k < s->n_iters; k++)
        ok = ok && s->iters[k].pending && s->iters[k].part && s->iters[k].cut;
    if (!ok) {
        st = ipu__fail(IPU_ERR_NOMEM, "session: cannot allocate the slot tables");
        goto fail;
    }
    st = init_sync(s);
    if (st != IPU_OK) goto fail;
    st = ipu__pool_create(s->nth, IPU__WORKER_SCRATCH_BYTES, s->cfg.pin_threads, &s->pool);
    if (st != IPU_OK) goto fail;
    st = ipu__pipeline_create(s);
    if (st == IPU_OK) st = ipu__stages_create(s);
    if (st != IPU_OK) goto fail;
    /* a second arena would fork the variables' state */
    s->par_ok = s->nth >= 2 && info->num_stages == 0 && s->index_anchor == IPU_NO_INDEX &&
                s->num_subgraphs == 1 && !s->batching && info->num_variables == 0;
    s->prewake = ipu__main_splits(s);
    *out = s;
    return IPU_OK;
fail:
    ipu_session_destroy(s);
    return st;
}

void ipu_session_destroy(ipu_session *s) {
    if (!s) return;
    if (s->sync_ready) {
        ipu_session_stop(s);
        ipu__session_disconnect_msg(s, IPU_ERR_CLOSED,
                                    "session destroyed before the slot was "
                                    "served");
    }
    ipu__pipeline_destroy(s);
    ipu__stages_destroy(s);
    ipu__pool_destroy(s->pool);
    if (s->sync_ready) {
        pthread_cond_destroy(&s->space_cv);
        pthread_cond_destroy(&s->data_cv);
        pthread_mutex_destroy(&s->mu);
    }
    for (uint32_t a = 0; a < s->num_anchors; a++) {
        if (s->rings) ipu_ring_destroy(s->rings[a]);
        if (s->wstore) ipu__aligned_free(s->wstore[a]);
    }
    for (uint32_t k = 0; s->iters && k < s->n_iters; k++) {
        ipu__free(s->iters[k].pending);
        ipu__free(s->iters[k].part);
        ipu__free(s->iters[k].cut);
    }
    ipu__free(s->iters);
    ipu__free(s->pops);
    ipu__free(s->rings);
    ipu__free(s->wstore);
    ipu__free(s->front_err);
    ipu__free(s->consumed);
    ipu__free(s->geom);
    ipu__free(s->binds);
    ipu__free(s->anchors);
    ipu__free(s->override);
    ipu__free(s->tensor_ptr);
    ipu__free(s->wstatus);
    ipu__free(s->wmsg);
    ipu__aligned_free(s->par_arena);
    ipu__free(s->par_ptr);
    ipu__aligned_free(s->arena);
    ipu__aligned_free(s);
}

/* ---- bindings ----------------------------------------------------------------------------- */

static ipu_status check_anchor(const ipu_session *s, uint32_t a, const char *fn) {
    if (!s) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "%s: session is NULL", fn);
    if (a >= s->num_anchors)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "%s: anchor %u out of range (model has %u "
                         "anchors)",
                         fn, a, s->num_anchors);
    return IPU_OK;
}

ipu_status ipu_session_bind(ipu_session *s, uint32_t a, ipu_binding b, ipu_stream_fn fn,
                            void *user_data) {
    ipu_status st = check_anchor(s, a, "ipu_session_bind");
    if (st != IPU_OK) return st;
    const ipu_anchor_info *A = &s->anchors[a];
    if (s->loaded)
        return ipu__fail(IPU_ERR_INVALID_STATE,
                         "ipu_session_bind: anchor '%s': bindings are "
                         "fixed once the Load program has run",
                         A->name);
    if (b != IPU_BIND_QUEUE && b != IPU_BIND_EMPTY && b != IPU_BIND_CALLBACK &&
        b != IPU_BIND_TENSOR_DATA)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_session_bind: unknown binding %d", (int)b);
    if (b == IPU_BIND_TENSOR_DATA && !A->has_tensor_data)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "ipu_session_bind: anchor '%s' has no tensor "
                         "data in the container",
                         A->name);
    if (b == IPU_BIND_CALLBACK && !fn)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "ipu_session_bind: anchor '%s': CALLBACK "
                         "needs a stream callback",
                         A->name);
    if (A->has_tensor_data && b != IPU_BIND_TENSOR_DATA && !s->wstore[a] &&
        s->exe->tensors[A->tensor].loc != IPU_LOC_ARENA) {
        s->wstore[a] = ipu__aligned_alloc(64, A->desc.nbytes ? (size_t)A->desc.nbytes : 1);
        if (!s->wstore[a])
            return ipu__fail(IPU_ERR_NOMEM,
                             "ipu_session_bind: cannot allocate %llu bytes for "
                             "weight '%s'",
                             (unsigned long long)A->desc.nbytes, A->name);
    }
    s->binds[a] = (ipu__bind){b, b == IPU_BIND_CALLBACK ? fn : NULL,
                              b == IPU_BIND_CALLBACK ? user_data : NULL};
    return IPU_OK;
}

ipu_status ipu__session_rebind(ipu_session *s, uint32_t a, ipu_binding b, ipu_stream_fn fn,
                               void *user_data) {
    if (s->anchors[a].has_tensor_data || a == s->index_anchor ||
        (b != IPU_BIND_QUEUE && b != IPU_BIND_CALLBACK) || (b == IPU_BIND_CALLBACK && !fn))
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "session: anchor '%s' cannot be rebound",
                         s->anchors[a].name);
    s->binds[a] = (ipu__bind){b, fn, user_data};
    return IPU_OK;
}

ipu_binding ipu_session_binding(const ipu_session *s, uint32_t a) {
    if (!s || a >= s->num_anchors) return (ipu_binding)0;
    return s->binds[a].kind;
}

/* ---- waiting, slots ----------------------------------------------------------------------- */

void ipu__dev_sleep(ipu_session *s, uint_fast64_t seq, uint64_t deadline_ns) {
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->dev_waiting, 1); /* seq_cst: pairs with ipu__wake_device */
    while (atomic_load(&s->push_seq) == seq && !ipu__stopped(s)) {
        if (deadline_ns) {
            struct timespec ts = ipu__timespec_ns(deadline_ns);
            if (pthread_cond_timedwait(&s->data_cv, &s->mu, &ts) == ETIMEDOUT) break;
        } else {
            pthread_cond_wait(&s->data_cv, &s->mu);
        }
    }
    atomic_store(&s->dev_waiting, 0);
    pthread_mutex_unlock(&s->mu);
}

void ipu__park(ipu_session *s) {
    atomic_store_explicit(&s->park, IPU__PARK_PARKED, memory_order_release);
}

void ipu__unpark(ipu_session *s) {
    uint64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        int expected = IPU__PARK_PARKED;
        if (atomic_compare_exchange_weak_explicit(&s->park, &expected, IPU__PARK_RUNNING,
                                                  memory_order_acquire, memory_order_relaxed) ||
            expected == IPU__PARK_RUNNING)
            return;
        /* INLINE: a caller runs a request itself (a whole inference of a large model at one
         * thread): poll briefly, then sleep until ipu__release_device. */
        if (!ipu__spin_expired(i, &t0)) continue;
        pthread_mutex_lock(&s->mu);
        atomic_store(&s->dev_waiting, 2); /* seq_cst: pairs with ipu__release_device */
        while (atomic_load(&s->park) == IPU__PARK_INLINE) pthread_cond_wait(&s->data_cv, &s->mu);
        atomic_store(&s->dev_waiting, 0);
        pthread_mutex_unlock(&s->mu);
    }
}

bool ipu__claim_device(ipu_session *s) {
    int expected = IPU__PARK_PARKED;
    return atomic_compare_exchange_strong_explicit(&s->park, &expected, IPU__PARK_INLINE,
                                                   memory_order_acquire, memory_order_relaxed);
}

void ipu__release_device(ipu_session *s) {
    atomic_store(&s->park, IPU__PARK_PARKED); /* seq_cst: before the load of dev_waiting */
    if (atomic_load(&s->dev_waiting) == 2) {  /* asleep in ipu__unpark, not parked idle */
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->data_cv);
        pthread_mutex_unlock(&s->mu);
    }
}

int ipu__wait_front(ipu_session *s, uint32_t a, bool abortable) {
    uint64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        uint_fast64_t seq = atomic_load(&s->push_seq);
        if (ipu_ring_front(s->rings[a])) return IPU__FRONT_READY;
        if (ipu__stopped(s)) return IPU__FRONT_STOPPED;
        if (abortable && ipu__aborted(s)) return IPU__FRONT_ABORTED;
        if (ipu__spin_expired(i, &t0)) ipu__dev_sleep(s, seq, 0);
    }
}

void ipu__session_pop(ipu_session *s, uint32_t a, ipu_slot *out) {
    if (!ipu_ring_try_pop(s->rings[a], out)) memset(out, 0, sizeof *out); /* cannot happen */
    s->consumed[a] = 0;
    s->pops[a]++;
    ipu__wake_producers(s);
}

void ipu__slot_done(ipu_session *s, const ipu_slot *sl, ipu_status st, const char *msg) {
    (void)s;
    if (!sl->done) return;
    if (st != IPU_OK) ipu__fail(st, "%s", msg);
    ipu__tl_in_callback++;
    sl->done(st, sl->user_data);
    ipu__tl_in_callback--;
}

ipu_status ipu__session_enqueue(ipu_session *s, uint32_t a, const ipu_slot *slot,
                                uint64_t timeout_ns, const atomic_int *abort) {
    ipu_status st = check_anchor(s, a, "ipu_session_enqueue");
    if (st != IPU_OK) return st;
    const ipu_anchor_info *A = &s->anchors[a];
    if (!slot) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_session_enqueue: slot is NULL");
    if (s->binds[a].kind != IPU_BIND_QUEUE)
        return ipu__fail(IPU_ERR_INVALID_STATE,
                         "ipu_session_enqueue: anchor '%s' is not bound "
                         "to a queue",
                         A->name);
    ipu_slot sl = *slot;
    const ipu__geom *g = &s->geom[a];
    bool batched = s->batching && a != s->index_anchor && !A->has_tensor_data;
    sl.rows = batched ? (slot->rows ? slot->rows : (uint32_t)g->rows) : 1;
    uint64_t want;
    if (!ipu__mul_u64(g->outer * g->inner, sl.rows, &want)) want = UINT64_MAX;
    if (sl.nbytes != want)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "ipu_session_enqueue: anchor '%s': slot has "
                         "%llu bytes, expected %llu (%u rows)",
                         A->name, (unsigned long long)sl.nbytes, (unsigned long long)want, sl.rows);
    if (!sl.data && sl.nbytes)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_session_enqueue: slot data is NULL");
    uint64_t deadline = 0;
    if (timeout_ns != UINT64_MAX) {
        uint64_t now = ipu__now_ns();
        deadline = timeout_ns < UINT64_MAX - now ? now + timeout_ns : UINT64_MAX - 1;
    }
    uint64_t t0 = 0;
    bool spinning = true;
    for (unsigned i = 0;; i++) {
        uint_fast64_t seq = atomic_load(&s->pop_seq);
        if (ipu__stopped(s)) return ipu__fail(IPU_ERR_CLOSED, "session stopped");
        if (abort && atomic_load(abort)) return ipu__fail(IPU_ERR_ABORTED, "enqueue aborted");
        if (ipu_ring_try_push(s->rings[a], &sl)) {
            ipu__wake_device(s);
            return IPU_OK;
        }
        if (deadline && ipu__now_ns() >= deadline)
            return ipu__fail(IPU_ERR_TIMEOUT,
                             "ipu_session_enqueue: the queue of anchor '%s' "
                             "stayed full for %llu ns",
                             A->name, (unsigned long long)timeout_ns);
        if (spinning && !ipu__spin_expired(i, &t0)) continue;
        spinning = false;
        pthread_mutex_lock(&s->mu);
        atomic_fetch_add(&s->sub_waiting, 1); /* seq_cst: pairs with ipu__wake_producers */
        while (atomic_load(&s->pop_seq) == seq && !ipu__stopped(s)) {
            if (deadline) {
                struct timespec ts = ipu__timespec_ns(deadline);
                if (pthread_cond_timedwait(&s->space_cv, &s->mu, &ts) == ETIMEDOUT) break;
            } else {
                pthread_cond_wait(&s->space_cv, &s->mu);
            }
        }
        atomic_fetch_sub(&s->sub_waiting, 1);
        pthread_mutex_unlock(&s->mu);
    }
}

ipu_status ipu_session_enqueue(ipu_session *s, uint32_t a, const ipu_slot *slot,
                               uint64_t timeout_ns) {
    return ipu__session_enqueue(s, a, slot, timeout_ns, NULL);
}

void ipu_session_stop(ipu_session *s) {
    if (!s || !s->sync_ready) return;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->stopped, true);
    pthread_cond_broadcast(&s->data_cv);
    pthread_cond_broadcast(&s->space_cv);
    pthread_mutex_unlock(&s->mu);
}

int ipu_session_stopped(const ipu_session *s) { return s ? ipu__stopped(s) : 1; }

void ipu_session_flush(ipu_session *s) {
    if (!s || !s->sync_ready) return;
    atomic_store(&s->flush_req, 1);
    ipu__wake_device(s);
}

void ipu__session_interrupt(ipu_session *s) {
    atomic_store(&s->interrupt_req, 1);
    ipu__wake_device(s);
}

void ipu__session_disconnect_msg(ipu_session *s, ipu_status st, const char *msg) {
    snprintf(s->dev_msg, sizeof s->dev_msg, "%s", msg);
    for (uint32_t a = 0; a < s->num_anchors; a++) {
        if (!s->rings || !s->rings[a]) continue;
        while (ipu_ring_front(s->rings[a])) {
            ipu_slot sl;
            ipu__session_pop(s, a, &sl);
            s->front_err[a] = IPU_OK;
            ipu__slot_done(s, &sl, st, s->dev_msg);
        }
    }
}

void ipu_session_disconnect(ipu_session *s, ipu_status st) {
    if (!s) return;
    char m[96];
    snprintf(m, sizeof m, "slot disconnected (%s)", ipu_status_str(st));
    ipu__session_disconnect_msg(s, st, m);
}

size_t ipu_session_queue_depth(const ipu_session *s, uint32_t a) {
    if (!s || a >= s->num_anchors || !s->rings[a]) return 0;
    return ipu_ring_size(s->rings[a]);
}

void ipu_session_get_stats(const ipu_session *s, ipu_session_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!s) return;
    out->steps = atomic_load_explicit(&s->st_steps, memory_order_relaxed);
    out->iterations = atomic_load_explicit(&s->st_iterations, memory_order_relaxed);
    out->padded_iterations = atomic_load_explicit(&s->st_padded, memory_order_relaxed);
    out->padded_rows = atomic_load_explicit(&s->st_padded_rows, memory_order_relaxed);
    out->num_threads = s->nth;
    out->overlap_io = atomic_load_explicit(&s->st_overlap, memory_order_relaxed);
    out->pipeline_ticks = atomic_load_explicit(&s->st_ticks, memory_order_relaxed);
    out->concurrent_ticks = atomic_load_explicit(&s->st_concurrent_ticks, memory_order_relaxed);
    out->concurrent_iterations = atomic_load_explicit(&s->st_concurrent_iters,
                                                      memory_order_relaxed);
}

/* ---- Variables ---------------------------------------------------------------------------- */

/* The arena bytes of variable `anchor`, checked against the caller's buffer size. */
static ipu_status variable_bytes(ipu_session *s, uint32_t anchor, size_t nbytes, const char *fn,
                                 uint8_t **out) {
    if (!s) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "%s: session is NULL", fn);
    if (ipu__tl_in_callback)
        return ipu__fail(IPU_ERR_INVALID_STATE, "%s called from a stream or done callback", fn);
    if (anchor >= s->num_anchors)
        return ipu__fail(IPU_ERR_NOT_FOUND, "%s: anchor %u out of range (%u anchors)", fn, anchor,
                         s->num_anchors);
    uint32_t t;
    ipu_status st = ipu_executable_variable(s->exe, anchor, &t);
    if (st != IPU_OK) return st;
    if (!s->loaded) return ipu__fail(IPU_ERR_INVALID_STATE, "%s: run the Load program first", fn);
    if (nbytes != (size_t)s->anchors[anchor].desc.nbytes)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "%s: variable '%s' has %llu bytes, not %zu", fn,
                         s->anchors[anchor].name,
                         (unsigned long long)s->anchors[anchor].desc.nbytes, nbytes);
    *out = s->tensor_ptr[t];
    return IPU_OK;
}

ipu_status ipu_session_read_variable(ipu_session *s, uint32_t anchor, void *dst, size_t nbytes) {
    uint8_t *p = NULL;
    ipu_status st = variable_bytes(s, anchor, nbytes, "ipu_session_read_variable", &p);
    if (st != IPU_OK) return st;
    if (!dst && nbytes)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_session_read_variable: dst is NULL");
    if (nbytes) memcpy(dst, p, nbytes);
    return IPU_OK;
}

ipu_status ipu_session_write_variable(ipu_session *s, uint32_t anchor, const void *src,
                                      size_t nbytes) {
    uint8_t *p = NULL;
    ipu_status st = variable_bytes(s, anchor, nbytes, "ipu_session_write_variable", &p);
    if (st != IPU_OK) return st;
    if (!src && nbytes)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_session_write_variable: src is NULL");
    if (nbytes) memcpy(p, src, nbytes);
    return IPU_OK;
}

/* ---- Load --------------------------------------------------------------------------------- */

/* Fill weight anchor a (not bound to TENSOR_DATA) into `dst`. */
static ipu_status fill_weight(ipu_session *s, uint32_t a, void *dst) {
    const ipu_anchor_info *A = &s->anchors[a];
    size_t n = (size_t)A->desc.nbytes;
    const ipu__bind *b = &s->binds[a];
    if (b->kind == IPU_BIND_EMPTY) {
        memset(dst, 0, n);
        return IPU_OK;
    }
    if (b->kind == IPU_BIND_CALLBACK) {
        ipu__tl_in_callback++;
        ipu_status st = b->fn(dst, n, A, b->user_data);
        ipu__tl_in_callback--;
        if (st != IPU_OK)
            return ipu__fail(st, "stream callback of weight '%s' failed: %s", A->name,
                             ipu_last_error_message());
        return IPU_OK;
    }
    /* not abortable: Load runs again (auto_reset) while the producers are still aborted */
    if (ipu__wait_front(s, a, false) != IPU__FRONT_READY)
        return ipu__fail(IPU_ERR_CLOSED,
                         "session stopped while the Load program waited for "
                         "weight '%s'",
                         A->name);
    ipu_slot sl;
    ipu__session_pop(s, a, &sl);
    memcpy(dst, sl.data, n);
    ipu__slot_done(s, &sl, IPU_OK, "");
    return IPU_OK;
}

ipu_status ipu_session_run_load(ipu_session *s) {
    if (!s) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_session_run_load: session is NULL");
    if (ipu__stopped(s)) return ipu__fail(IPU_ERR_CLOSED, "session stopped");
    s->loaded = true;
    const ipu_executable *e = s->exe;
    ipu__aligned_free(s->par_arena); /* its copy of what Load computes is stale now */
    s->par_arena = NULL;
    memset(s->arena, 0, (size_t)e->info.arena_size);
    for (uint32_t a = 0; a < s->num_anchors; a++) {
        const ipu_anchor_info *A = &s->anchors[a];
        if (!A->has_tensor_data) continue;
        uint32_t t = A->tensor;
        if (s->binds[a].kind == IPU_BIND_TENSOR_DATA) {
            s->override[t] = 0;
            continue;
        }
        s->override[t] = 1;
        if (e->tensors[t].loc != IPU_LOC_ARENA) s->tensor_ptr[t] = s->wstore[a];
        ipu_status st = fill_weight(s, a, s->tensor_ptr[t]);
        if (st != IPU_OK) return st;
    }
    ipu_status st = ipu__run_program(s, &s->frame, e->load_program);
    if (st != IPU_OK) {
        char m[IPU__MSG_BYTES];
        snprintf(m, sizeof m, "%s", ipu_last_error_message());
        return ipu__fail(st, "Load program failed: %s", m);
    }
    ipu__pipeline_after_load(s);
    return IPU_OK;
}
