/* Session: overlap I/O (ipu_session.h). A step runs as a Load / Compute / Store pipeline: the
 * session's I/O thread runs ipu__iter_store of iteration i-1 and then ipu__iter_load of
 * iteration i+1 while the calling thread and the workers run ipu__iter_compute of iteration i.
 * Iteration i uses staging set i % 2: every arena tensor inside a streamed anchor's byte range
 * (the anchor, its views, intermediates planned inside it) is redirected into that set, so load
 * and store never touch the memory compute uses. While the load waits for input, the I/O thread
 * stores iteration i as soon as it is computed (the ipu__iter idle hook): a client that waits for
 * its outputs before sending more input is never held up by the pipeline.
 *
 * Hand-off: the device writes the job (io_store, io_load, io_load_it, io_early) and bumps job_seq
 * under io_mu; the I/O thread runs it and bumps done_seq under io_mu. Both sides spin briefly
 * (ipu__spin_expired) and then sleep on io_cv. The device sets compute_done (release) and wakes
 * the I/O thread (ipu__wake_device) once iteration i is computed. */
#include <string.h>

#include "session_internal.h"

static uint64_t round64(uint64_t n) { return (n + 63) & ~(uint64_t)63; }

static bool staged(const ipu_session *s, uint32_t a) {
    return s->pl_soff && s->pl_soff[a] != UINT64_MAX;
}

/* Map tensors onto staged anchors; false when a tensor partially overlaps one (or two). */
static bool plan_layout(ipu_session *s) {
    const ipu_executable *e = s->exe;
    uint64_t bytes = 0;
    for (uint32_t a = 0; a < s->num_anchors; a++) {
        const ipu_anchor_info *A = &s->anchors[a];
        s->pl_soff[a] = UINT64_MAX;
        if (A->has_tensor_data || A->desc.nbytes == 0 || e->tensors[A->tensor].loc != IPU_LOC_ARENA)
            continue;
        s->pl_soff[a] = bytes;
        bytes += round64(A->desc.nbytes);
    }
    s->pl_set_bytes = bytes;
    for (uint32_t t = 0; t < e->info.num_tensors; t++) {
        const ipu__tensor *T = &e->tensors[t];
        s->pl_anchor[t] = -1;
        if (T->loc != IPU_LOC_ARENA || T->desc.nbytes == 0) continue;
        uint64_t lo = T->offset, hi = lo + T->desc.nbytes;
        int hits = 0;
        for (uint32_t a = 0; a < s->num_anchors; a++) {
            if (!staged(s, a)) continue;
            uint64_t alo = e->tensors[s->anchors[a].tensor].offset;
            uint64_t ahi = alo + s->anchors[a].desc.nbytes;
            if (lo >= ahi || alo >= hi) continue;
            if (++hits > 1 || lo < alo || hi > ahi) return false;
            s->pl_anchor[t] = (int32_t)a;
        }
    }
    return true;
}

static void signal_io(ipu_session *s, atomic_uint *seq) {
    pthread_mutex_lock(&s->io_mu);
    atomic_fetch_add(seq, 1);
    pthread_cond_broadcast(&s->io_cv);
    pthread_mutex_unlock(&s->io_mu);
}

static void wait_seq(ipu_session *s, atomic_uint *seq, unsigned old) {
    uint64_t t0 = 0;
    for (unsigned i = 0; atomic_load_explicit(seq, memory_order_acquire) == old; i++) {
        if (!ipu__spin_expired(i, &t0)) continue;
        pthread_mutex_lock(&s->io_mu);
        while (atomic_load(seq) == old) pthread_cond_wait(&s->io_cv, &s->io_mu);
        pthread_mutex_unlock(&s->io_mu);
    }
}

/* Idle hook of a load: store the iteration being computed once it is computed. */
static bool io_idle(ipu_session *s) {
    if (s->io_early < 0 || s->io_early_done ||
        !atomic_load_explicit(&s->compute_done, memory_order_acquire))
        return false;
    s->io_early_done = 1;
    if (!ipu__iter_store(s, &s->iters[s->io_early])) s->io_closed = true;
    return true;
}

static void *io_main(void *arg) {
    ipu_session *s = arg;
    unsigned seen = 0;
    for (;;) {
        wait_seq(s, &s->job_seq, seen);
        seen = atomic_load_explicit(&s->job_seq, memory_order_acquire);
        if (s->io_quit) break;
        if (s->io_store >= 0 && !ipu__iter_store(s, &s->iters[s->io_store])) s->io_closed = true;
        if (s->io_load >= 0) ipu__iter_load(s, &s->iters[s->io_load], s->io_load_it);
        signal_io(s, &s->done_seq);
    }
    return NULL;
}

ipu_status ipu__pipeline_create(ipu_session *s) {
    const ipu_executable *e = s->exe;
    int want = s->cfg.overlap_io < 0 ? e->info.num_io_tiles > 0 : s->cfg.overlap_io != 0;
    if (!want || e->info.pipelined) return IPU_OK; /* the stage pipeline does its own I/O */
    uint32_t nt = e->info.num_tensors ? e->info.num_tensors : 1;
    s->pl_anchor = ipu__calloc(nt, sizeof *s->pl_anchor);
    s->pl_soff = ipu__calloc(s->num_anchors ? s->num_anchors : 1, sizeof *s->pl_soff);
    if (!s->pl_anchor || !s->pl_soff)
        return ipu__fail(IPU_ERR_NOMEM, "session: cannot allocate the overlap I/O tables");
    if (!plan_layout(s)) return IPU_OK; /* serial: a tensor straddles a streamed anchor */
    if (s->pl_set_bytes > SIZE_MAX - 64)
        return ipu__fail(IPU_ERR_NOMEM, "session: overlap I/O staging is too large");
    for (int k = 0; k < 2; k++) {
        size_t n = s->pl_set_bytes ? (size_t)s->pl_set_bytes : 64;
        s->pl_set[k] = ipu__aligned_alloc(64, n);
        s->pl_ptr[k] = ipu__calloc(nt, sizeof *s->pl_ptr[k]);
        if (!s->pl_set[k] || !s->pl_ptr[k])
            return ipu__fail(IPU_ERR_NOMEM,
                             "session: cannot allocate 2 x %llu bytes of overlap "
                             "I/O staging",
                             (unsigned long long)s->pl_set_bytes);
        memset(s->pl_set[k], 0, n);
    }
    if (pthread_mutex_init(&s->io_mu, NULL) != 0)
        return ipu__fail(IPU_ERR_INTERNAL, "session: cannot initialise the I/O mutex");
    if (pthread_cond_init(&s->io_cv, NULL) != 0) {
        pthread_mutex_destroy(&s->io_mu);
        return ipu__fail(IPU_ERR_INTERNAL, "session: cannot initialise the I/O condition");
    }
    s->io_sync = true;
    if (pthread_create(&s->io_thread, NULL, io_main, s) != 0)
        return ipu__fail(IPU_ERR_INTERNAL, "session: cannot start the I/O thread");
    s->io_started = true;
    s->pl_on = true;
    atomic_store(&s->st_overlap, 1);
    return IPU_OK;
}

void ipu__pipeline_destroy(ipu_session *s) {
    if (s->io_started) {
        pthread_mutex_lock(&s->io_mu);
        s->io_quit = true;
        atomic_fetch_add(&s->job_seq, 1);
        pthread_cond_broadcast(&s->io_cv);
        pthread_mutex_unlock(&s->io_mu);
        pthread_join(s->io_thread, NULL);
        s->io_started = false;
    }
    if (s->io_sync) {
        pthread_cond_destroy(&s->io_cv);
        pthread_mutex_destroy(&s->io_mu);
        s->io_sync = false;
    }
    for (int k = 0; k < 2; k++) {
        ipu__aligned_free(s->pl_set[k]);
        ipu__free(s->pl_ptr[k]);
    }
    ipu__free(s->pl_anchor);
    ipu__free(s->pl_soff);
}

void ipu__pipeline_after_load(ipu_session *s) {
    if (!s->pl_on) return;
    for (uint32_t a = 0; a < s->num_anchors; a++)
        if (staged(s, a))
            for (int k = 0; k < 2; k++)
                memcpy(s->pl_set[k] + s->pl_soff[a],
                       s->arena + s->exe->tensors[s->anchors[a].tensor].offset,
                       (size_t)s->anchors[a].desc.nbytes);
}

static bool queue_dir(const ipu_session *s, uint32_t a, uint32_t sub, ipu_direction d) {
    return s->anchors[a].direction == d && ipu__in_subgraph(s, a, sub) &&
           s->binds[a].kind == IPU_BIND_QUEUE;
}

bool ipu__pipeline_usable(ipu_session *s) {
    bool ok = s->pl_on;
    for (uint32_t sub = 0; ok && sub < s->num_subgraphs; sub++) {
        bool in = false, out = false;
        for (uint32_t a = 0; a < s->num_anchors; a++) {
            in = in || queue_dir(s, a, sub, IPU_DIR_INPUT);
            out = out || queue_dir(s, a, sub, IPU_DIR_OUTPUT);
        }
        ok = in || !out; /* rows taken from output slots: the serial loop handles that */
    }
    atomic_store_explicit(&s->st_overlap, ok ? 1 : 0, memory_order_relaxed);
    return ok;
}

static unsigned post(ipu_session *s, int store, int load, uint32_t it, int early) {
    s->io_store = store;
    s->io_load = load;
    s->io_load_it = it;
    s->io_early = early;
    s->io_early_done = 0;
    unsigned d = atomic_load(&s->done_seq);
    signal_io(s, &s->job_seq);
    return d;
}

/* A failure ends the step; a cancelled iteration failed its own requests only. */
static void note(ipu__iter *c, ipu_status *fail, char *msg) {
    if (c->st == IPU_OK || c->st == IPU_ERR_CANCELLED || *fail != IPU_OK) return;
    *fail = c->st;
    memcpy(msg, c->msg, IPU__MSG_BYTES);
}

ipu_status ipu__pipeline_run_main(ipu_session *s, ipu_step_result *r) {
    const ipu_executable *e = s->exe;
    for (int k = 0; k < 2; k++) {
        for (uint32_t t = 0; t < e->info.num_tensors; t++) {
            int32_t a = s->pl_anchor[t];
            s->pl_ptr[k][t] = a < 0 ? s->tensor_ptr[t]
                                    : s->pl_set[k] + s->pl_soff[a] +
                                          (e->tensors[t].offset -
                                           e->tensors[s->anchors[a].tensor].offset);
        }
        s->iters[k].ptr = s->pl_ptr[k];
        s->iters[k].idle = io_idle;
    }
    if (ipu__stopped(s)) return IPU_ERR_CLOSED;
    if (atomic_exchange(&s->interrupt_req, 0)) return IPU_OK;
    s->io_closed = false;
    ipu_status fail = IPU_OK;
    char msg[IPU__MSG_BYTES] = "";
    bool closed = false;
    int L = 0, unstored = -1;
    wait_seq(s, &s->done_seq, post(s, -1, 0, 0, -1));
    for (;;) {
        ipu__iter *c = &s->iters[L];
        if (c->ev != IPU__EV_READY) { /* nothing loaded: the step ends */
            if (c->ev == IPU__EV_CLOSED) {
                closed = true;
            } else if (c->ev == IPU__EV_INTERRUPT) {
                atomic_store(&s->interrupt_req, 0);
                if (r->iterations > 0) r->padded_iterations = s->bps - r->iterations;
            } else {
                r->padded_iterations = s->bps - r->iterations;
            }
            break;
        }
        bool more = c->st == IPU_OK && fail == IPU_OK && r->iterations + 1 < s->bps,
             interrupted = false;
        if (more && atomic_exchange(&s->interrupt_req, 0)) more = !(interrupted = true);
        atomic_store(&s->compute_done, 0);
        unsigned d = post(s, unstored, more ? L ^ 1 : -1, r->iterations + 1, L);
        ipu__iter_compute(s, c);
        note(c, &fail, msg);
        atomic_store_explicit(&s->compute_done, 1, memory_order_release);
        ipu__wake_device(s); /* the I/O thread may sleep in its load */
        wait_seq(s, &s->done_seq, d);
        if (unstored >= 0) note(&s->iters[unstored], &fail, msg);
        unstored = s->io_early_done ? -1 : L;
        if (s->io_early_done) note(c, &fail, msg);
        r->iterations++;
        if (!more) {
            if (interrupted) r->padded_iterations = s->bps - r->iterations;
            break;
        }
        L ^= 1;
    }
    if (unstored >= 0) {
        wait_seq(s, &s->done_seq, post(s, unstored, -1, 0, -1));
        note(&s->iters[unstored], &fail, msg);
    }
    closed = closed || s->io_closed;
    if (closed) return IPU_ERR_CLOSED;
    if (fail != IPU_OK) {
        r->iterations = 0;
        r->padded_iterations = 0;
        return ipu__fail(fail, "%s", msg);
    }
    return IPU_OK;
}
