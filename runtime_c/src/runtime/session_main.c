/* Session: the Main step (ipu_session_run_main). One iteration:
 *   1. fused models: read the subgraph id from the index anchor (queue slot, callback or 0),
 *      validate it and store it in the index tensor;
 *   2. gather one batch: rows are taken, in lockstep, from the front slots of the subgraph's
 *      queue-bound inputs into the input tensors (with dynamic batching a slot may span batches;
 *      consumed[] remembers where its front slot stands). A partial batch runs zero-padded after
 *      the batch timeout, on flush, or when an output ring of the subgraph is full (no more rows
 *      can arrive before outputs are taken). A subgraph without queue-bound inputs takes its rows
 *      from the front output slots (no merging); one without queue-bound anchors just runs;
 *   3. EMPTY inputs are zeroed, CALLBACK inputs are called, the Main program runs, CALLBACK
 *      outputs are called;
 *   4. the batch's rows are scattered to the front output slots (padding rows are dropped);
 *   5. the done callbacks of the input slots taken in 2 run, with the iteration's status.
 * Waiting before anything was taken ends the step after timeout_ns once an iteration ran
 * (padding). See ipu_session.h for the contract and session_internal.h for the wake-up protocol.
 * The iteration is split into stages over an ipu__iter (load: 1-3 up to the inputs; compute: the
 * program; store: CALLBACK outputs, 4, 5) so that session_overlap.c can overlap them. */
#include <stdio.h>
#include <string.h>

#include "ipu/ipu_trace.h"
#include "session_internal.h"

enum {
    EV_READY = IPU__EV_READY,
    EV_END_STEP = IPU__EV_END_STEP,
    EV_CLOSED = IPU__EV_CLOSED,
    EV_INTERRUPT = IPU__EV_INTERRUPT
};

static bool is_queue(const ipu_session *s, uint32_t a, uint32_t sub, ipu_direction dir) {
    return s->anchors[a].direction == dir && ipu__in_subgraph(s, a, sub) &&
           s->binds[a].kind == IPU_BIND_QUEUE;
}

static uint64_t front_avail(ipu_session *s, uint32_t a) {
    const ipu_slot *f = ipu_ring_front(s->rings[a]);
    return f ? (uint64_t)f->rows - s->consumed[a] : 0;
}

/* Any queue-bound output of `sub` (IPU_NO_INDEX: of any subgraph) with a slot queued (full:
 * with a full ring). */
static bool outputs_queued(ipu_session *s, uint32_t sub, bool full) {
    for (uint32_t a = 0; a < s->num_anchors; a++) {
        if (sub == IPU_NO_INDEX
                ? s->anchors[a].direction != IPU_DIR_OUTPUT || s->binds[a].kind != IPU_BIND_QUEUE
                : !is_queue(s, a, sub, IPU_DIR_OUTPUT))
            continue;
        size_t n = ipu_ring_size(s->rings[a]);
        if (full ? n >= ipu_ring_capacity(s->rings[a]) : n > 0) return true;
    }
    return false;
}

/* Copy k rows between slot rows [r0, r0+k) and tensor rows [f, f+k) (see session_internal.h). */
static void copy_rows(const ipu__geom *g, uint8_t *tensor, uint8_t *slot, uint64_t slot_rows,
                      uint64_t r0, uint64_t f, uint64_t k, bool to_tensor) {
    size_t n = (size_t)(k * g->inner);
    for (uint64_t o = 0; o < g->outer; o++) {
        uint8_t *t = tensor + (size_t)((o * g->rows + f) * g->inner);
        uint8_t *p = slot + (size_t)((o * slot_rows + r0) * g->inner);
        if (to_tensor)
            memcpy(t, p, n);
        else
            memcpy(p, t, n);
    }
}

static void zero_rows(const ipu__geom *g, uint8_t *tensor, uint64_t f) {
    for (uint64_t o = 0; o < g->outer; o++)
        memset(tensor + (size_t)((o * g->rows + f) * g->inner), 0,
               (size_t)((g->rows - f) * g->inner));
}

static void *tensor_of(ipu_session *s, const ipu__iter *c, uint32_t a) {
    return c->ptr[s->anchors[a].tensor];
}

/* Take k rows from the front slot of input anchor a into batch rows [f, f+k). A fully taken
 * slot is popped; its done callback is deferred to the end of the iteration. */
static void take_rows(ipu_session *s, ipu__iter *c, uint32_t a, uint64_t f, uint64_t k,
                      uint32_t *index) {
    const ipu_slot *sl = ipu_ring_front(s->rings[a]);
    if (a == s->index_anchor)
        memcpy(index, sl->data, sizeof *index);
    else
        copy_rows(&s->geom[a], tensor_of(s, c, a), sl->data, sl->rows, s->consumed[a], f, k, true);
    s->consumed[a] += k;
    if (s->consumed[a] < sl->rows) return;
    ipu__pend *p = &c->pending[c->npending < s->pending_cap ? c->npending++ : s->pending_cap - 1];
    p->err = s->front_err[a];
    p->anchor = a;
    p->id = s->pops[a];
    s->front_err[a] = IPU_OK;
    ipu__session_pop(s, a, &p->sl);
}

/* Gather rows for one batch of subgraph `sub` (index_phase: only the index slot). committed:
 * slots were already taken in this iteration (no step timeout, no interrupt). *filled gets the
 * rows gathered (>= 1 on EV_READY). */
static int gather(ipu_session *s, ipu__iter *c, uint32_t sub, uint32_t it, bool index_phase,
                  bool committed, uint64_t *filled, uint32_t *index) {
    const uint64_t R = index_phase ? 1 : s->batch_rows;
    ipu_direction dir = IPU_DIR_INPUT;
    uint32_t nlead = 0;
    if (!index_phase) {
        for (uint32_t a = 0; a < s->num_anchors; a++) nlead += is_queue(s, a, sub, IPU_DIR_INPUT);
        if (nlead == 0) {
            dir = IPU_DIR_OUTPUT;
            for (uint32_t a = 0; a < s->num_anchors; a++)
                nlead += is_queue(s, a, sub, IPU_DIR_OUTPUT);
        }
        if (nlead == 0) {
            *filled = R;
            return EV_READY;
        }
    }
    const uint64_t step_to = s->cfg.timeout_ns;
    const uint64_t batch_to = s->cfg.batch_timeout_ns ? s->cfg.batch_timeout_ns : step_to;
    uint64_t got = 0, t_start = 0, t_partial = 0, t0 = 0;
    bool spinning = true;
    /* Idle at the start of a step: a caller may run a small request inline meanwhile. */
    const bool parkable = s->park_ok && !index_phase && !committed && it == 0 && !c->idle;
    bool parked = false;
#define UNPARK()            \
    do {                    \
        if (parked) {       \
            ipu__unpark(s); \
            parked = false; \
        }                   \
    } while (0)
    for (unsigned i = 0;; i++) {
        uint_fast64_t seq = atomic_load(&s->push_seq);
        uint64_t k = R - got;
        if (index_phase) {
            k = front_avail(s, s->index_anchor) ? 1 : 0;
        } else {
            for (uint32_t a = 0; a < s->num_anchors && k; a++)
                if (is_queue(s, a, sub, dir)) {
                    uint64_t av = front_avail(s, a);
                    if (av < k) k = av;
                }
        }
        if (k > 0) {
            UNPARK();
            /* a request: the helpers wake while its inputs are copied (ipu__pool_prewake) */
            if (got == 0 && it == 0 && s->prewake && !index_phase) ipu__pool_prewake(s->pool);
            if (dir == IPU_DIR_OUTPUT) { /* rows of the front output slots, not consumed here */
                *filled = k;
                return EV_READY;
            }
            for (uint32_t a = 0; a < s->num_anchors; a++)
                if (index_phase ? a == s->index_anchor : is_queue(s, a, sub, IPU_DIR_INPUT))
                    take_rows(s, c, a, got, k, index);
            got += k;
            if (got == R) break;
            if (t_partial == 0) t_partial = ipu__now_ns();
            continue;
        }
        if (ipu__stopped(s)) {
            UNPARK();
            return EV_CLOSED;
        }
        if (!committed && atomic_exchange(&s->flush_req, 0)) {
            if (got > 0) break;
            if (it > 0) return EV_END_STEP; /* not parkable: it > 0 */
            /* no step in progress: nothing to pad */
        }
        if (atomic_load(&s->interrupt_req)) {
            if (got > 0) break;
            if (!committed) {
                UNPARK();
                return EV_INTERRUPT;
            }
        }
        /* A failure is being handled: the rest of a request may never come. A step that has
         * not started waits for the recovery instead (run_serial returns before that). */
        if ((got > 0 || committed || it > 0) && ipu__aborted(s)) {
            if (got > 0 || committed) break;
            return EV_END_STEP;
        }
        if (got > 0 && outputs_queued(s, sub, true)) break;
        /* the rows of the only request pending: none but a new request's can come */
        if (got > 0 && s->alone_of && c->npending > 0 &&
            s->alone_of(&c->pending[c->npending - 1].sl))
            break;
        uint64_t deadline = 0;
        if (!s->cfg.flush_on_waiting_outputs ||
            outputs_queued(s, index_phase ? IPU_NO_INDEX : sub, false)) {
            /* Saturated: a timeout beyond the clock's range (UINT64_MAX: the batch-size timeout
             * "never") is never reached, where the wrapped sum would already have passed. */
            if (got > 0 && batch_to) {
                if (!ipu__add_u64(t_partial, batch_to, &deadline)) deadline = UINT64_MAX;
            } else if (got == 0 && !committed && it > 0 && step_to) {
                if (t_start == 0) t_start = ipu__now_ns();
                if (!ipu__add_u64(t_start, step_to, &deadline)) deadline = UINT64_MAX;
            }
        }
        if (deadline && ipu__now_ns() >= deadline) {
            if (got > 0) break;
            return EV_END_STEP;
        }
        if (c->idle && c->idle(s)) continue; /* overlap I/O: stored an iteration meanwhile */
        if (parkable && got == 0 && !parked) {
            ipu__park(s);
            parked = true;
        }
        if (spinning && !ipu__spin_expired(i, &t0)) continue;
        spinning = false;
        ipu__dev_sleep(s, seq, deadline);
    }
#undef UNPARK
    *filled = got;
    return EV_READY;
}

/* Record the first failure of an iteration: status and "what: <last error message>". */
static void note_failure(ipu__iter *c, ipu_status e, const char *what) {
    if (c->st != IPU_OK) return;
    char detail[IPU__MSG_BYTES];
    snprintf(detail, sizeof detail, "%s", ipu_last_error_message());
    c->st = e;
    snprintf(c->msg, sizeof c->msg, "%.200s: %.300s", what, detail);
}

static void call_stream(ipu_session *s, ipu__iter *c, uint32_t a) {
    const ipu_anchor_info *A = &s->anchors[a];
    ipu__tl_in_callback++;
    ipu_status cs = s->binds[a].fn(tensor_of(s, c, a), (size_t)A->desc.nbytes, A,
                                   s->binds[a].user_data);
    ipu__tl_in_callback--;
    if (cs != IPU_OK) {
        char what[IPU__MSG_BYTES];
        snprintf(what, sizeof what, "stream callback of %s anchor '%s' failed",
                 A->direction == IPU_DIR_INPUT ? "input" : "output", A->name);
        note_failure(c, cs, what);
    }
}

/* Scatter the iteration's rows to the front slots of every queue-bound output of its subgraph
 * (with a failed iteration: consume them, marking the slots failed). An output slot missing
 * while the producers are aborted may never come (its request was refused it and failed): the
 * rows meant for it are dropped and the iteration fails. false: stopped. */
static bool scatter(ipu_session *s, ipu__iter *c) {
    const uint64_t filled = c->filled;
    for (uint32_t a = 0; a < s->num_anchors; a++) {
        if (!is_queue(s, a, c->sub, IPU_DIR_OUTPUT)) continue;
        for (uint64_t f = 0; f < filled;) {
            int w = ipu__wait_front(s, a, true);
            if (w == IPU__FRONT_STOPPED) return false;
            if (w == IPU__FRONT_ABORTED) {
                /* the failure's own status and message, like the request refused the slot */
                ipu_status fst = s->abort_status ? *s->abort_status : IPU_ERR_ABORTED;
                ipu__fail(fst, "%.400s", s->abort_msg ? s->abort_msg : "");
                note_failure(c, fst, "failed by an earlier iteration failure");
                break;
            }
            const ipu_slot *fr = ipu_ring_front(s->rings[a]);
            uint64_t k = fr->rows - s->consumed[a];
            if (k > filled - f) k = filled - f;
            if (c->st == IPU_OK)
                copy_rows(&s->geom[a], tensor_of(s, c, a), fr->data, fr->rows, s->consumed[a], f, k,
                          false);
            else if (s->front_err[a] == IPU_OK)
                s->front_err[a] = c->st;
            s->consumed[a] += k;
            f += k;
            if (s->consumed[a] == fr->rows) {
                ipu_status err = s->front_err[a];
                s->front_err[a] = IPU_OK;
                ipu_slot sl;
                ipu__session_pop(s, a, &sl);
                ipu__slot_done(s, &sl, err, c->msg);
            }
        }
    }
    return true;
}

/* Mark the input slot `id` of anchor a failed with st: the front slot (front_err) or, when a
 * later iteration has taken its remaining rows already, its entry in that iteration's list. */
static void mark_failed(ipu_session *s, uint32_t a, uint64_t id, ipu_status st) {
    if (s->pops[a] == id) {
        if (s->front_err[a] == IPU_OK) s->front_err[a] = st;
        return;
    }
    for (uint32_t k = 0; k < s->n_iters; k++)
        for (size_t i = 0; i < s->iters[k].npending; i++) {
            ipu__pend *p = &s->iters[k].pending[i];
            if (p->anchor == a && p->id == id && p->err == IPU_OK) p->err = st;
        }
}

/* Complete the deferred input slots; after a failure mark partially taken slots failed. */
static void finish_inputs(ipu_session *s, ipu__iter *c, ipu_status st) {
    for (size_t i = 0; i < c->npending; i++) {
        ipu__pend *p = &c->pending[i];
        ipu__slot_done(s, &p->sl, p->err != IPU_OK ? p->err : st, c->msg);
    }
    c->npending = 0;
    for (uint32_t a = 0; a < s->num_anchors; a++) {
        if (c->part[a] && st != IPU_OK && st != IPU_ERR_CLOSED)
            mark_failed(s, a, c->part[a] - 1, st);
        c->part[a] = 0;
    }
}

/* The cancel flags of the requests whose rows c carries: its taken slots and the partially
 * taken front slots (still at the front: the next load has not started). */
static void add_cancel(ipu_session *s, ipu__iter *c, const ipu_slot *sl) {
    const atomic_int *flag = s->cancel_of(sl);
    if (c->ncut == 0 || c->cut[c->ncut - 1] != flag) c->cut[c->ncut++] = flag;
}

static void collect_cancel(ipu_session *s, ipu__iter *c) {
    c->ncut = 0;
    if (!s->cancel_of) return;
    for (size_t i = 0; i < c->npending; i++) add_cancel(s, c, &c->pending[i].sl);
    for (uint32_t a = 0; a < s->num_anchors; a++)
        if (c->part[a] && ipu_ring_front(s->rings[a]))
            add_cancel(s, c, ipu_ring_front(s->rings[a]));
}

static void stage_load(ipu_session *s, ipu__iter *c, uint32_t it) {
    c->st = IPU_OK;
    c->ncut = 0;
    c->sub = 0;
    c->filled = 0;
    c->ev = EV_READY;
    snprintf(c->msg, sizeof c->msg, "session stopped before the slot was served");
    uint32_t index = 0;
    bool committed = false;
    const uint32_t ia = s->index_anchor;
    if (ia != IPU_NO_INDEX) {
        const ipu__bind *b = &s->binds[ia];
        if (b->kind == IPU_BIND_QUEUE) {
            c->ev = gather(s, c, 0, it, true, false, &c->filled, &index);
            c->filled = 0;
            if (c->ev != EV_READY) {
                finish_inputs(s, c, IPU_ERR_CLOSED);
                return;
            }
            committed = true;
        } else if (b->kind == IPU_BIND_CALLBACK) {
            ipu__tl_in_callback++;
            ipu_status cs = b->fn(&index, sizeof index, &s->anchors[ia], b->user_data);
            ipu__tl_in_callback--;
            if (cs != IPU_OK) note_failure(c, cs, "stream callback of the index anchor failed");
        }
        if (c->st == IPU_OK && index >= s->num_subgraphs) {
            ipu__fail(IPU_ERR_INVALID_ARGUMENT, "index %u >= %u subgraphs", index,
                      s->num_subgraphs);
            note_failure(c, IPU_ERR_INVALID_ARGUMENT, "invalid subgraph index");
        }
        if (c->st != IPU_OK) return; /* the store stage completes the taken slots */
        c->sub = index;
        void *p = tensor_of(s, c, ia);
        if (p) ipu__store_index(p, &s->anchors[ia].desc, index);
    }
    const uint32_t sub = c->sub;
    c->ev = gather(s, c, sub, it, false, committed, &c->filled, NULL);
    if (c->ev != EV_READY) {
        finish_inputs(s, c, IPU_ERR_CLOSED);
        return;
    }
    if (c->filled < s->batch_rows) {
        for (uint32_t a = 0; a < s->num_anchors; a++)
            if (is_queue(s, a, sub, IPU_DIR_INPUT))
                zero_rows(&s->geom[a], tensor_of(s, c, a), c->filled);
        atomic_fetch_add_explicit(&s->st_padded_rows, s->batch_rows - c->filled,
                                  memory_order_relaxed);
    }
    for (uint32_t a = 0; a < s->num_anchors; a++) {
        if (is_queue(s, a, sub, IPU_DIR_INPUT) && s->consumed[a] > 0) c->part[a] = s->pops[a] + 1;
        if (c->st != IPU_OK || s->anchors[a].direction != IPU_DIR_INPUT ||
            !ipu__in_subgraph(s, a, sub))
            continue;
        if (s->binds[a].kind == IPU_BIND_EMPTY)
            memset(tensor_of(s, c, a), 0, (size_t)s->anchors[a].desc.nbytes);
        else if (s->binds[a].kind == IPU_BIND_CALLBACK)
            call_stream(s, c, a);
    }
    collect_cancel(s, c);
}

static void stage_compute(ipu_session *s, ipu__iter *c) {
    if (c->st != IPU_OK) return;
    const ipu__frame f = {s->exe, c->ptr, c->cut, c->ncut, ipu__frame_stop, s};
    ipu_status ps = s->exe->info.num_stages
                        ? ipu__run_stages(s, &f)
                        : ipu__run_program_on(s, &f, s->exe->main_programs[c->sub], c->alone);
    if (ps != IPU_OK) {
        char what[64];
        snprintf(what, sizeof what, "Main program of subgraph %u failed", c->sub);
        note_failure(c, ps, what);
    }
}

static bool stage_store(ipu_session *s, ipu__iter *c) {
    for (uint32_t a = 0; a < s->num_anchors && c->st == IPU_OK; a++)
        if (s->anchors[a].direction == IPU_DIR_OUTPUT && ipu__in_subgraph(s, a, c->sub) &&
            s->binds[a].kind == IPU_BIND_CALLBACK)
            call_stream(s, c, a);
    if (c->st == IPU_OK) atomic_fetch_add_explicit(&s->st_iterations, 1, memory_order_relaxed);
    if (!scatter(s, c)) {
        snprintf(c->msg, sizeof c->msg, "session stopped during the iteration");
        finish_inputs(s, c, IPU_ERR_CLOSED);
        return false;
    }
    finish_inputs(s, c, c->st);
    return true;
}

/* The stages, timed into the session's trace when one is attached (ipu_trace.h). */
void ipu__iter_load(ipu_session *s, ipu__iter *c, uint32_t it) {
    uint64_t t0 = ipu__trace_start(s);
    stage_load(s, c, it);
    /* only loads that produced an iteration: a wait that ended the step loaded nothing */
    if (s->trace && c->ev == EV_READY) ipu__trace_record(s->trace, IPU_TRACE_LOAD, c->sub, t0);
}

void ipu__iter_compute(ipu_session *s, ipu__iter *c) {
    uint64_t t0 = ipu__trace_start(s);
    stage_compute(s, c);
    if (s->trace) ipu__trace_record(s->trace, IPU_TRACE_COMPUTE, c->sub, t0);
}

bool ipu__iter_store(ipu_session *s, ipu__iter *c) {
    uint64_t t0 = ipu__trace_start(s);
    bool ok = stage_store(s, c);
    if (s->trace) ipu__trace_record(s->trace, IPU_TRACE_STORE, c->sub, t0);
    return ok;
}

/* Concurrent iterations (see session_internal.h): true when the next iteration can start now
 * without waiting: every queue-bound input has a slot, nothing asks the device to stop, and it
 * belongs to this step (or starts the next one, with batches_per_step 1 on the runtime's
 * device). Makes the second arena on first use. */
static bool second_ready(ipu_session *s, uint32_t it) {
    if (!s->par_ok || ipu__stopped(s) || atomic_load(&s->interrupt_req) ||
        atomic_load(&s->flush_req))
        return false;
    if (it + 1 >= s->bps && !(s->bps == 1 && s->par_steps)) return false;
    uint32_t nq = 0;
    for (uint32_t a = 0; a < s->num_anchors; a++) {
        ipu_binding k = s->binds[a].kind;
        if (s->anchors[a].has_tensor_data) continue; /* a weight: Load's business */
        if (k == IPU_BIND_CALLBACK) return false;    /* user code runs in iteration order */
        if (k != IPU_BIND_QUEUE || s->anchors[a].direction != IPU_DIR_INPUT) continue;
        if (!ipu_ring_front(s->rings[a])) return false;
        nq++;
    }
    if (nq == 0) return false;
    if (!s->par_arena) {
        const ipu_executable *e = s->exe;
        size_t n = (size_t)e->info.arena_size;
        if (!s->par_ptr) s->par_ptr = ipu__calloc(e->info.num_tensors, sizeof *s->par_ptr);
        s->par_arena = s->par_ptr ? ipu__aligned_alloc(64, n ? n : 1) : NULL;
        if (!s->par_arena) { /* no memory for it: run one at a time */
            if (!s->par_warned)
                ipu__log(IPU_LOG_WARNING,
                         "session %p: no memory for a second arena (%zu "
                         "bytes): iterations run one at a time",
                         (void *)s, n);
            s->par_warned = true;
            return false;
        }
        memcpy(s->par_arena, s->arena, n); /* what Load computed into the arena */
        for (uint32_t t = 0; t < e->info.num_tensors; t++)
            s->par_ptr[t] = e->tensors[t].loc == IPU_LOC_ARENA
                                ? (void *)(s->par_arena + e->tensors[t].offset)
                                : s->tensor_ptr[t];
    }
    return true;
}

/* Items 0 and 1 are the two iterations: a worker claims one and computes it alone; a worker
 * slow to wake leaves both to the device thread, one after the other. */
static void compute_pair(void *ctx, size_t begin, size_t end, uint32_t ith) {
    ipu_session *s = ctx;
    for (size_t k = begin; k < end; k++) {
        s->iters[k].alone = ith + 1;
        ipu__iter_compute(s, &s->iters[k]);
        s->iters[k].alone = 0;
    }
}

/* One iteration over the arena, or two at once (*done = 2). Returns an EV_* code; *failed is
 * the failed iteration (NULL: none). */
static int iteration(ipu_session *s, uint32_t it, uint32_t *done, ipu__iter **failed) {
    ipu__iter *c = &s->iters[0], *c2 = NULL;
    c->ptr = s->tensor_ptr;
    c->idle = NULL;
    c->alone = 0;
    *failed = NULL;
    *done = 1;
    ipu__iter_load(s, c, it);
    if (c->ev != EV_READY) return c->ev;
    int ev2 = EV_READY;
    if (second_ready(s, it)) {
        c2 = &s->iters[1];
        c2->ptr = s->par_ptr;
        c2->idle = NULL;
        ipu__iter_load(s, c2, it + 1); /* its inputs are queued: does not wait */
        if (c2->ev != EV_READY) {
            ev2 = c2->ev;
            c2 = NULL;
        }
    }
    if (c2) {
        ipu__pool_run_range(s->pool, 2, false, compute_pair, s);
        atomic_fetch_add_explicit(&s->st_concurrent_iters, 2, memory_order_relaxed);
    } else {
        ipu__iter_compute(s, c);
    }
    if (!ipu__iter_store(s, c)) {
        if (c2) { /* stopped: the second's taken inputs complete as CLOSED too */
            snprintf(c2->msg, sizeof c2->msg, "session stopped during the iteration");
            finish_inputs(s, c2, IPU_ERR_CLOSED);
        }
        return EV_CLOSED;
    }
    if (c->st != IPU_OK && c->st != IPU_ERR_CANCELLED) *failed = c; /* cancelled: its own */
    if (c2) {
        if (c->st != IPU_OK && c->st != IPU_ERR_CANCELLED && c2->st == IPU_OK) {
            /* fails with the first, as if queued */
            c2->st = c->st;
            snprintf(c2->msg, sizeof c2->msg, "%s", c->msg);
        }
        if (!ipu__iter_store(s, c2)) return EV_CLOSED;
        if (!*failed && c2->st != IPU_OK && c2->st != IPU_ERR_CANCELLED) *failed = c2;
        if (it + 1 < s->bps)
            *done = 2;
        else
            s->par_extra_steps++;
    }
    return ev2 == EV_CLOSED ? EV_CLOSED : EV_READY;
}

static ipu_status run_serial(ipu_session *s, ipu_step_result *r) {
    while (r->iterations < s->bps) {
        if (ipu__stopped(s)) return IPU_ERR_CLOSED;
        if (atomic_exchange(&s->interrupt_req, 0)) {
            if (r->iterations > 0) r->padded_iterations = s->bps - r->iterations;
            break;
        }
        uint32_t done;
        ipu__iter *failed;
        int ev = iteration(s, r->iterations, &done, &failed);
        if (ev == EV_CLOSED) return IPU_ERR_CLOSED;
        if (ev == EV_INTERRUPT) {
            atomic_store(&s->interrupt_req, 0);
            if (r->iterations > 0) r->padded_iterations = s->bps - r->iterations;
            break;
        }
        if (ev == EV_END_STEP) {
            r->padded_iterations = s->bps - r->iterations;
            break;
        }
        if (failed) return ipu__fail(failed->st, "%s", failed->msg);
        r->iterations += done;
    }
    return IPU_OK;
}

/* The step-end program (ipu_executable_info.step_end_program): alone, over the whole pool. */
static ipu_status run_step_end(ipu_session *s) {
    ipu_status st = ipu__run_program(s, &s->frame, s->exe->step_end);
    if (st == IPU_OK) return IPU_OK;
    char m[IPU__MSG_BYTES];
    snprintf(m, sizeof m, "%s", ipu_last_error_message());
    return ipu__fail(st, "step-end program failed: %s", m);
}

ipu_status ipu_session_run_main(ipu_session *s, ipu_step_result *out) {
    if (!s) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ipu_session_run_main: session is NULL");
    if (!s->loaded)
        return ipu__fail(IPU_ERR_INVALID_STATE, "ipu_session_run_main: run the Load program "
                                                "first");
    ipu_step_result r = {0, 0};
    atomic_store(&s->flush_req, 0); /* a flush pads the step in progress: none before this */
    ipu_status ret = ipu__stages_pipelined(s)  ? ipu__stages_run_main(s, &r)
                     : ipu__pipeline_usable(s) ? ipu__pipeline_run_main(s, &r)
                                               : run_serial(s, &r);
    if (ret == IPU_OK && r.iterations > 0 && s->exe->step_end != IPU_NO_INDEX)
        ret = run_step_end(s);
    if (r.padded_iterations)
        atomic_fetch_add_explicit(&s->st_padded, r.padded_iterations, memory_order_relaxed);
    if (r.iterations + r.padded_iterations == s->bps)
        atomic_fetch_add_explicit(&s->st_steps, 1, memory_order_relaxed);
    if (s->par_extra_steps) { /* steps of batches_per_step 1 run alongside this one */
        atomic_fetch_add_explicit(&s->st_steps, s->par_extra_steps, memory_order_relaxed);
        s->par_extra_steps = 0;
    }
    if (ret == IPU_ERR_CLOSED) return ipu__fail(IPU_ERR_CLOSED, "session stopped");
    if (ret == IPU_OK && out) *out = r;
    return ret;
}
