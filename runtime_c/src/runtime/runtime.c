/* Runtime lifecycle: create (hash check, arena, Load program, rings, threads), stream
 * callbacks, close (stop the device, fail pending requests), destroy, stats.
 * The device loop is in device.c, requests and submission in request.c; the shared state and
 * the wake-up protocol are described in runtime_internal.h. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime_internal.h"

#define IPU__MAX_THREADS 256u

ipu_runtime_config ipu_runtime_config_default(void) {
    ipu_runtime_config c;
    memset(&c, 0, sizeof c);
    c.num_threads = 0;
    c.ring_buffer_size_multiplier = 2;
    c.timeout_ns = 10000000u;
    c.check_package_hash = 1;
    c.validate_io_params = 1;
    c.thread_safe = 1;
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
    return n > (long)IPU__MAX_THREADS ? IPU__MAX_THREADS : (uint32_t)n;
}

static ipu_status init_sync(ipu_runtime *rt) {
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return ipu__fail(IPU_ERR_INTERNAL, "runtime: pthread_condattr_init failed");
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int n = 0;
    if (pthread_mutex_init(&rt->submit_mu, NULL) == 0) n++;
    if (n == 1 && pthread_mutex_init(&rt->close_mu, NULL) == 0) n++;
    if (n == 2 && pthread_mutex_init(&rt->mu, NULL) == 0) n++;
    if (n == 3 && pthread_cond_init(&rt->data_cv, &attr) == 0) n++;
    if (n == 4 && pthread_cond_init(&rt->space_cv, NULL) == 0) n++;
    pthread_condattr_destroy(&attr);
    if (n == 5) {
        rt->sync_ready = 1;
        return IPU_OK;
    }
    if (n > 3) pthread_cond_destroy(&rt->data_cv);
    if (n > 2) pthread_mutex_destroy(&rt->mu);
    if (n > 1) pthread_mutex_destroy(&rt->close_mu);
    if (n > 0) pthread_mutex_destroy(&rt->submit_mu);
    return ipu__fail(IPU_ERR_INTERNAL, "runtime: cannot initialise mutexes/condition variables");
}

static ipu_status start_device(ipu_runtime *rt) {
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

ipu_status ipu_runtime_create(const ipu_executable *exe, const ipu_runtime_config *cfg,
                              ipu_runtime **out) {
    if (!exe || !out)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_runtime_create: NULL argument");
    ipu_status st = IPU_OK;
    ipu_runtime *rt = ipu__calloc(1, sizeof *rt);
    if (!rt) return ipu__fail(IPU_ERR_NOMEM, "runtime: cannot allocate the runtime");
    rt->cfg = cfg ? *cfg : ipu_runtime_config_default();
    rt->exe = exe;
    rt->index_anchor = IPU_NO_INDEX;
    atomic_init(&rt->closed, false);
    if (rt->cfg.check_package_hash) {
        uint64_t have = ipu_container_compiler_hash(exe->container), want = ipu_compiler_hash();
        if (have != want) {
            st = ipu__fail(IPU_ERR_HASH_MISMATCH, "runtime: package hash 0x%016llx of the "
                           "container differs from runtime hash 0x%016llx (%s); recompile the "
                           "model with this version or set check_package_hash=0",
                           (unsigned long long)have, (unsigned long long)want,
                           IPU_VERSION_STRING);
            goto fail;
        }
    }
    const ipu_executable_info *info = &exe->info;
    rt->nth = rt->cfg.num_threads ? rt->cfg.num_threads : default_threads();
    if (rt->nth > IPU__MAX_THREADS) {
        st = ipu__fail(IPU_ERR_INVALID_ARGUMENT, "runtime: num_threads %u exceeds %u",
                       rt->nth, IPU__MAX_THREADS);
        goto fail;
    }
    rt->bps = info->batches_per_step ? info->batches_per_step : 1;
    rt->num_anchors = info->num_anchors;
    rt->num_subgraphs = info->num_subgraphs ? info->num_subgraphs : 1;
    if (info->index_anchor != IPU_NO_INDEX && info->index_anchor < info->num_anchors)
        rt->index_anchor = info->index_anchor;
    uint64_t cap64;
    uint32_t mult = rt->cfg.ring_buffer_size_multiplier ? rt->cfg.ring_buffer_size_multiplier : 1;
    if (!ipu__mul_u64(mult, rt->bps, &cap64) || cap64 > ((uint64_t)1 << 24)) {
        st = ipu__fail(IPU_ERR_INVALID_ARGUMENT, "runtime: ring capacity %u x %u batches is too "
                       "large (max 2^24 slots)", mult, rt->bps);
        goto fail;
    }
    rt->ring_capacity = cap64 < 2 ? 2 : (size_t)cap64;

    /* Device memory and the execution frame. */
    if (info->arena_size > SIZE_MAX - 64) {
        st = ipu__fail(IPU_ERR_NOMEM, "runtime: arena of %llu bytes is too large",
                       (unsigned long long)info->arena_size);
        goto fail;
    }
    rt->arena = ipu__aligned_alloc(64, (size_t)info->arena_size);
    rt->tensor_ptr = ipu__calloc(info->num_tensors, sizeof *rt->tensor_ptr);
    rt->anchors = ipu__calloc(info->num_anchors, sizeof *rt->anchors);
    rt->streams = ipu__calloc(info->num_anchors, sizeof *rt->streams);
    rt->rings = ipu__calloc(info->num_anchors, sizeof *rt->rings);
    rt->wstatus = ipu__calloc(rt->nth, sizeof *rt->wstatus);
    rt->wmsg = ipu__calloc(rt->nth, sizeof *rt->wmsg);
    if (!rt->arena || !rt->tensor_ptr || !rt->anchors || !rt->streams || !rt->rings ||
        !rt->wstatus || !rt->wmsg) {
        st = ipu__fail(IPU_ERR_NOMEM, "runtime: cannot allocate the device arena (%llu bytes) "
                       "and tables", (unsigned long long)info->arena_size);
        goto fail;
    }
    memset(rt->arena, 0, (size_t)info->arena_size);
    for (uint32_t t = 0; t < info->num_tensors; t++)
        if (exe->tensors[t].loc == IPU_LOC_ARENA) rt->tensor_ptr[t] = rt->arena + exe->tensors[t].offset;
    rt->frame.exe = exe;
    rt->frame.ptr = rt->tensor_ptr;

    /* Anchors and their rings. */
    for (uint32_t a = 0; a < info->num_anchors; a++) {
        st = ipu_executable_anchor(exe, a, &rt->anchors[a]);
        if (st != IPU_OK) goto fail;
        const ipu_anchor_info *A = &rt->anchors[a];
        bool streamed = A->direction == IPU_DIR_OUTPUT ||
                        (A->direction == IPU_DIR_INPUT && !A->has_tensor_data &&
                         a != rt->index_anchor);
        if (streamed && exe->tensors[A->tensor].loc != IPU_LOC_ARENA) {
            st = ipu__fail(IPU_ERR_INVALID_ARGUMENT, "runtime: streamed anchor '%s' is not "
                           "backed by device memory", A->name);
            goto fail;
        }
        if (streamed) {
            st = ipu_ring_create(rt->ring_capacity, sizeof(ipu__slot), &rt->rings[a]);
            if (st != IPU_OK) goto fail;
        }
    }
    st = ipu_ring_create(rt->ring_capacity, sizeof(ipu__slot), &rt->ctrl);
    if (st != IPU_OK) goto fail;

    st = init_sync(rt);
    if (st != IPU_OK) goto fail;
    st = ipu__pool_create(rt->nth, IPU__SCRATCH_BYTES, &rt->pool);
    if (st != IPU_OK) goto fail;

    /* Load program on this thread (worker 0): BIND instructions bind weights zero-copy. */
    st = ipu__run_program(rt, exe->load_program);
    if (st != IPU_OK) {
        char m[IPU__MSG_BYTES];
        snprintf(m, sizeof m, "%s", ipu_last_error_message());
        st = ipu__fail(st, "runtime: Load program failed: %s", m);
        goto fail;
    }
    st = start_device(rt);
    if (st != IPU_OK) goto fail;
    *out = rt;
    return IPU_OK;
fail:
    ipu_runtime_destroy(rt);
    return st;
}

ipu_status ipu_runtime_set_stream_callback(ipu_runtime *rt, uint32_t anchor, ipu_stream_fn fn,
                                           void *user_data) {
    if (!rt) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "set_stream_callback: rt is NULL");
    if (anchor >= rt->num_anchors)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "set_stream_callback: anchor %u out of range "
                         "(model has %u anchors)", anchor, rt->num_anchors);
    if (!rt->rings[anchor])
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "set_stream_callback: anchor '%s' is not "
                         "streamed (%s)", rt->anchors[anchor].name,
                         anchor == rt->index_anchor ? "it is the subgraph index"
                                                    : "its data is in the container");
    ipu_status st = IPU_OK;
    pthread_mutex_lock(&rt->submit_mu);
    if (ipu__closed(rt))
        st = ipu__fail(IPU_ERR_CLOSED, "set_stream_callback: the runtime is closed");
    else if (rt->submitted)
        st = ipu__fail(IPU_ERR_INVALID_STATE, "set_stream_callback: anchor '%s': stream "
                       "callbacks must be set before the first submit", rt->anchors[anchor].name);
    else
        rt->streams[anchor] = (ipu__stream){fn, user_data};
    pthread_mutex_unlock(&rt->submit_mu);
    return st;
}

/* Complete every request that still has slots queued with IPU_ERR_CLOSED, dropping the slot
 * references. The device thread has been joined, so this thread is the only consumer. */
static void drain(ipu_runtime *rt, ipu_ring *r) {
    ipu__slot sl;
    while (ipu_ring_try_pop(r, &sl)) {
        ipu__request_complete(rt, sl.req, IPU_ERR_CLOSED,
                              "runtime closed before the request completed");
        ipu__request_unref(sl.req);
    }
}

ipu_status ipu_runtime_close(ipu_runtime *rt) {
    if (!rt) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_runtime_close: rt is NULL");
    if (!rt->sync_ready) return IPU_OK; /* half-built: no thread ever ran */
    if (rt->device_started && pthread_equal(pthread_self(), rt->device))
        return ipu__fail(IPU_ERR_INVALID_STATE, "ipu_runtime_close called from a stream or done "
                         "callback (the device thread)");
    pthread_mutex_lock(&rt->close_mu);
    if (!rt->close_done) {
        /* 1. Stop: flag + broadcast under mu, so no waiter can miss it. */
        pthread_mutex_lock(&rt->mu);
        atomic_store(&rt->closed, true);
        pthread_cond_broadcast(&rt->data_cv);
        pthread_cond_broadcast(&rt->space_cv);
        pthread_mutex_unlock(&rt->mu);
        /* 2. The device finishes its iteration (or abandons it if a slot is missing) and exits. */
        if (rt->device_started) pthread_join(rt->device, NULL);
        /* 3. Wait out a submitter that is still pushing (it sees `closed` and stops); any later
         * submitter sees `closed` under submit_mu and queues nothing, so after this barrier
         * the rings have no producer. Then fail every request with queued slots, and the
         * orphan (see request.c), outside submit_mu: done callbacks run outside runtime locks. */
        pthread_mutex_lock(&rt->submit_mu);
        ipu_request *orphan = rt->orphan;
        rt->orphan = NULL;
        pthread_mutex_unlock(&rt->submit_mu);
        drain(rt, rt->ctrl);
        for (uint32_t a = 0; a < rt->num_anchors; a++)
            if (rt->rings[a]) drain(rt, rt->rings[a]);
        if (orphan) {
            ipu__request_complete(rt, orphan, IPU_ERR_CLOSED,
                                  "runtime closed while the request was being submitted");
            ipu__request_unref(orphan);
        }
        /* 4. Join the compute helpers. */
        ipu__pool_destroy(rt->pool);
        rt->pool = NULL;
        rt->close_done = 1;
    }
    pthread_mutex_unlock(&rt->close_mu);
    return IPU_OK;
}

void ipu_runtime_destroy(ipu_runtime *rt) {
    if (!rt) return;
    if (rt->sync_ready) {
        /* A failing close (called on the device thread) leaves everything in place: leaking is
         * the only safe option there. */
        if (ipu_runtime_close(rt) != IPU_OK) return;
        pthread_cond_destroy(&rt->space_cv);
        pthread_cond_destroy(&rt->data_cv);
        pthread_mutex_destroy(&rt->mu);
        pthread_mutex_destroy(&rt->close_mu);
        pthread_mutex_destroy(&rt->submit_mu);
    }
    ipu__pool_destroy(rt->pool);
    if (rt->rings)
        for (uint32_t a = 0; a < rt->num_anchors; a++) ipu_ring_destroy(rt->rings[a]);
    ipu_ring_destroy(rt->ctrl);
    ipu__free(rt->rings);
    ipu__free(rt->streams);
    ipu__free(rt->anchors);
    ipu__free(rt->tensor_ptr);
    ipu__free(rt->wstatus);
    ipu__free(rt->wmsg);
    ipu__aligned_free(rt->arena);
    ipu__free(rt);
}

void ipu_runtime_get_stats(const ipu_runtime *rt, ipu_runtime_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!rt) return;
    out->requests_submitted = atomic_load_explicit(&rt->st_submitted, memory_order_relaxed);
    out->requests_completed = atomic_load_explicit(&rt->st_completed, memory_order_relaxed);
    out->requests_failed = atomic_load_explicit(&rt->st_failed, memory_order_relaxed);
    out->steps = atomic_load_explicit(&rt->st_steps, memory_order_relaxed);
    out->iterations = atomic_load_explicit(&rt->st_iterations, memory_order_relaxed);
    out->padded_iterations = atomic_load_explicit(&rt->st_padded, memory_order_relaxed);
    out->num_threads = rt->nth;
}
