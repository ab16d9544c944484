/* The device thread: pops control slots, streams batches in and out of the arena and runs the
 * Main program of the selected subgraph over the worker pool. See runtime_internal.h for the
 * queue and wake-up protocol and ipu_runtime.h for the contract. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "runtime_internal.h"

/* ---- program execution ------------------------------------------------------------------- */

typedef struct ipu__job {
    ipu_runtime *rt;
    const ipu__instr *ins;
    size_t work;
} ipu__job;

static void job_fn(void *ctx, uint32_t ith, uint32_t nth) {
    const ipu__job *j = ctx;
    size_t q = j->work / nth, r = j->work % nth;
    size_t begin = q * ith + (ith < r ? ith : r);
    size_t end = begin + q + (ith < r ? 1 : 0);
    if (begin >= end) return;
    ipu_status st = ipu__instr_run(&j->rt->frame, j->ins, begin, end,
                                   ipu__pool_scratch(j->rt->pool, ith));
    if (st != IPU_OK) {
        j->rt->wstatus[ith] = st;
        snprintf(j->rt->wmsg[ith], IPU__MSG_BYTES, "%s", ipu_last_error_message());
    }
}

static uint64_t instr_bytes(const ipu_executable *e, const ipu__instr *ins) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < ins->n_in; i++) total += e->tensors[ins->in[i]].desc.nbytes;
    for (uint32_t i = 0; i < ins->n_out; i++) total += e->tensors[ins->out[i]].desc.nbytes;
    return total;
}

ipu_status ipu__run_program(ipu_runtime *rt, uint32_t index) {
    const ipu_executable *e = rt->exe;
    const ipu__program *prog = &e->programs[index];
    char msg[IPU__MSG_BYTES] = "";
    for (uint32_t i = 0; i < prog->n_instr; i++) {
        const ipu__instr *ins = &prog->instr[i];
        size_t work = ipu__instr_work(e, ins);
        if (work == 0) continue;
        ipu_status st = IPU_OK;
        if (rt->nth == 1 || work < 2 || instr_bytes(e, ins) < IPU__PAR_MIN_BYTES) {
            st = ipu__instr_run(&rt->frame, ins, 0, work, ipu__pool_scratch(rt->pool, 0));
            if (st != IPU_OK) snprintf(msg, sizeof msg, "%s", ipu_last_error_message());
        } else {
            for (uint32_t w = 0; w < rt->nth; w++) rt->wstatus[w] = IPU_OK;
            ipu__job job = {rt, ins, work};
            ipu__pool_run(rt->pool, job_fn, &job);
            for (uint32_t w = 0; w < rt->nth && st == IPU_OK; w++) {
                if (rt->wstatus[w] != IPU_OK) {
                    st = rt->wstatus[w];
                    memcpy(msg, rt->wmsg[w], sizeof msg);
                }
            }
        }
        if (st != IPU_OK) {
            const char *name = ipu_opcode_name(ins->op);
            return ipu__fail(st, "program %u, instruction %u (%s): %s", prog->id, i,
                             name ? name : "?", msg);
        }
    }
    return IPU_OK;
}

/* ---- waiting for slots -------------------------------------------------------------------- */

/* Wait until ring `r` has a slot. deadline_ns == 0: no deadline. Returns IPU_OK,
 * IPU_ERR_CLOSED (the runtime is closing) or IPU_ERR_TIMEOUT. */
static ipu_status dev_wait(ipu_runtime *rt, ipu_ring *r, uint64_t deadline_ns) {
    uint64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        if (ipu_ring_front(r)) return IPU_OK;
        if (ipu__closed(rt)) return IPU_ERR_CLOSED;
        if (ipu__spin_expired(i, &t0)) break;
    }
    for (;;) {
        uint_fast64_t seq = atomic_load(&rt->push_seq);
        if (ipu_ring_front(r)) return IPU_OK;
        if (ipu__closed(rt)) return IPU_ERR_CLOSED;
        if (deadline_ns && ipu__now_ns() >= deadline_ns) return IPU_ERR_TIMEOUT;
        pthread_mutex_lock(&rt->mu);
        atomic_store(&rt->dev_waiting, 1); /* seq_cst: pairs with ipu__signal_data */
        while (atomic_load(&rt->push_seq) == seq && !ipu__closed(rt)) {
            if (deadline_ns) {
                struct timespec ts = ipu__timespec_ns(deadline_ns);
                if (pthread_cond_timedwait(&rt->data_cv, &rt->mu, &ts) == ETIMEDOUT) break;
            } else {
                pthread_cond_wait(&rt->data_cv, &rt->mu);
            }
        }
        atomic_store(&rt->dev_waiting, 0);
        pthread_mutex_unlock(&rt->mu);
    }
}

/* ---- one iteration ------------------------------------------------------------------------ */

/* Store the subgraph id as the first element of the index tensor. */
static void store_index(void *p, const ipu_tensor_desc *d, uint32_t v) {
    memset(p, 0, (size_t)d->nbytes);
    switch (d->dtype) {
        case IPU_DTYPE_FLOAT32: { float f = (float)v; if (d->nbytes >= 4) memcpy(p, &f, 4); break; }
        case IPU_DTYPE_FLOAT64: { double f = v; if (d->nbytes >= 8) memcpy(p, &f, 8); break; }
        case IPU_DTYPE_FLOAT16:
            if (d->nbytes >= 2) { uint16_t h = ipu__f32_to_f16((float)v); memcpy(p, &h, 2); }
            break;
        case IPU_DTYPE_INT64: case IPU_DTYPE_UINT64:
            if (d->nbytes >= 8) ipu__st_u64(p, v);
            break;
        case IPU_DTYPE_INT16: case IPU_DTYPE_UINT16:
            if (d->nbytes >= 2) { uint8_t *b = p; b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); }
            break;
        case IPU_DTYPE_INT8: case IPU_DTYPE_UINT8: case IPU_DTYPE_BOOL:
            if (d->nbytes >= 1) *(uint8_t *)p = (uint8_t)v;
            break;
        default:
            if (d->nbytes >= 4) ipu__st_u32(p, v);
            break;
    }
}

/* Record the first failure of an iteration: status, and "what: <last error message>". */
static void note_failure(ipu_runtime *rt, ipu_status *st, ipu_status s, const char *what) {
    if (*st != IPU_OK) return;
    char detail[IPU__MSG_BYTES];
    snprintf(detail, sizeof detail, "%s", ipu_last_error_message());
    *st = s;
    snprintf(rt->dev_msg, sizeof rt->dev_msg, "%.200s: %.300s", what, detail);
}

/* Serve every anchor of `dir` for the iteration of control slot c. Ring slots are always popped
 * (so rings stay aligned); data moves and callbacks run only while *st is OK and !skip.
 * Returns IPU_ERR_CLOSED if the runtime closed while a slot was missing. */
static ipu_status stream_anchors(ipu_runtime *rt, const ipu__slot *c, ipu_direction dir,
                                 bool skip, ipu_status *st) {
    const uint32_t s = (uint32_t)c->aux;
    for (uint32_t a = 0; a < rt->num_anchors; a++) {
        const ipu_anchor_info *A = &rt->anchors[a];
        if (A->direction != dir) continue;
        int role = ipu__anchor_role(rt, a, s);
        if (role == IPU__ROLE_NONE) continue;
        void *buf = rt->tensor_ptr[A->tensor];
        size_t nbytes = (size_t)A->desc.nbytes;
        if (role == IPU__ROLE_CALLBACK) {
            if (skip || *st != IPU_OK) continue;
            ipu_status cs = rt->streams[a].fn(buf, nbytes, A, rt->streams[a].user_data);
            if (cs != IPU_OK) {
                char what[IPU__MSG_BYTES];
                snprintf(what, sizeof what, "stream callback of %s anchor '%s' failed",
                         dir == IPU_DIR_INPUT ? "input" : "output", A->name);
                note_failure(rt, st, cs, what);
            }
            continue;
        }
        if (dev_wait(rt, rt->rings[a], 0) != IPU_OK) return IPU_ERR_CLOSED;
        ipu__slot sl;
        if (!ipu_ring_try_pop(rt->rings[a], &sl)) return IPU_ERR_CLOSED; /* cannot happen */
        ipu__signal_space(rt);
        if (sl.req != c->req) {
            /* Rings out of step: a bug. Fail both requests rather than corrupt data. */
            ipu__fail(IPU_ERR_INTERNAL, "queue of anchor '%s' is out of step", A->name);
            note_failure(rt, st, IPU_ERR_INTERNAL, "internal error");
            ipu__request_complete(rt, sl.req, IPU_ERR_INTERNAL, rt->dev_msg);
        } else if (!skip && *st == IPU_OK) {
            if (dir == IPU_DIR_INPUT) memcpy(buf, sl.ptr, nbytes);
            else memcpy(sl.ptr, buf, nbytes);
        }
        ipu__request_unref(sl.req);
    }
    return IPU_OK;
}

/* One iteration for control slot c (already popped). *it counts the iterations of the current
 * step; stats are updated before the request completes, so a caller that saw the completion
 * sees them. Returns IPU_ERR_CLOSED when the device must stop. */
static ipu_status dev_iteration(ipu_runtime *rt, const ipu__slot *c, uint32_t *it) {
    ipu_request *req = c->req;
    const uint32_t s = (uint32_t)c->aux;
    /* A request that already failed (or was failed by an out-of-step queue) has its remaining
     * slots consumed and discarded without running anything. */
    const bool skip = atomic_load_explicit(&req->state, memory_order_acquire) != IPU__REQ_PENDING;
    ipu_status st = IPU_OK;
    if (!skip && rt->index_anchor != IPU_NO_INDEX) {
        const ipu_anchor_info *I = &rt->anchors[rt->index_anchor];
        if (rt->tensor_ptr[I->tensor]) store_index(rt->tensor_ptr[I->tensor], &I->desc, s);
    }
    if (stream_anchors(rt, c, IPU_DIR_INPUT, skip, &st) != IPU_OK) goto closed;
    if (!skip && st == IPU_OK) {
        ipu_status ps = ipu__run_program(rt, rt->exe->main_programs[s]);
        if (ps != IPU_OK) {
            char what[64];
            snprintf(what, sizeof what, "Main program of subgraph %u failed", s);
            note_failure(rt, &st, ps, what);
        }
    }
    if (stream_anchors(rt, c, IPU_DIR_OUTPUT, skip, &st) != IPU_OK) goto closed;
    if (skip) return IPU_OK;
    atomic_fetch_add_explicit(&rt->st_iterations, 1, memory_order_relaxed);
    if (++*it == rt->bps) {
        atomic_fetch_add_explicit(&rt->st_steps, 1, memory_order_relaxed);
        *it = 0;
    }
    if (st != IPU_OK) ipu__request_complete(rt, req, st, rt->dev_msg);
    else if (--req->remaining == 0) ipu__request_complete(rt, req, IPU_OK, NULL);
    return IPU_OK;
closed:
    ipu__request_complete(rt, req, IPU_ERR_CLOSED, "runtime closed while the request was running");
    return IPU_ERR_CLOSED;
}

void *ipu__device_main(void *arg) {
    ipu_runtime *rt = arg;
    uint32_t it = 0; /* iterations run in the current step */
    for (;;) {
        uint64_t deadline = 0;
        if (it > 0 && rt->cfg.timeout_ns) {
            uint64_t now = ipu__now_ns();
            deadline = now + (rt->cfg.timeout_ns < UINT64_MAX - now ? rt->cfg.timeout_ns
                                                                    : UINT64_MAX - now - 1);
        }
        ipu_status ws = dev_wait(rt, rt->ctrl, deadline);
        if (ws == IPU_ERR_CLOSED || ipu__closed(rt)) break; /* exit between iterations */
        if (ws == IPU_ERR_TIMEOUT) {
            /* No input for timeout_ns in a started step: pad the rest of it. */
            atomic_fetch_add_explicit(&rt->st_padded, rt->bps - it, memory_order_relaxed);
            atomic_fetch_add_explicit(&rt->st_steps, 1, memory_order_relaxed);
            it = 0;
            continue;
        }
        ipu__slot c;
        if (!ipu_ring_try_pop(rt->ctrl, &c)) continue; /* cannot happen: single consumer */
        ipu__signal_space(rt);
        ipu_status st = dev_iteration(rt, &c, &it);
        ipu__request_unref(c.req);
        if (st == IPU_ERR_CLOSED) break;
    }
    return NULL;
}
