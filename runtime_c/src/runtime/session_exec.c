/* Program execution: a program's instructions over the worker pool or on one worker, in timed
 * pieces where a request can be cancelled (docs/runtime.md, "Cancelling and Ctrl-C"). */
#include <stdio.h>
#include <string.h>

#include "session_internal.h"

/* Is instruction ins (work items) split over the pool when a program runs on all workers? */
static bool split_over_pool(const ipu_session *s, const ipu__instr *ins, size_t work) {
    return s->nth > 1 && work >= 2 && ipu__instr_bytes(s->exe, ins) >= IPU__PAR_MIN_BYTES;
}

/* Some Main program splits an instruction over the pool: requests pre-wake its helpers. */
bool ipu__main_splits(const ipu_session *s) {
    const ipu_executable *e = s->exe;
    for (uint32_t m = 0; m < s->num_subgraphs; m++) {
        const ipu__program *prog = &e->programs[e->main_programs[m]];
        for (uint32_t i = 0; i < prog->n_instr; i++)
            if (split_over_pool(s, &prog->instr[i], ipu__instr_work(e, &prog->instr[i])))
                return true;
    }
    return false;
}

/* ---- instructions ------------------------------------------------------------------- */

/* Every request of the frame is cancelled (none: never). */
static bool frame_cancelled(const ipu__frame *f) {
    for (uint32_t k = 0; k < f->ncancel; k++)
        if (!atomic_load_explicit(f->cancel[k], memory_order_relaxed)) return false;
    return f->ncancel > 0;
}

/* The poll hook is due and cancels (the thread running the program only); sets poll_cut. */
static bool poll_cancels(ipu_session *s, ipu__poller *p) {
    uint64_t now = ipu__now_ns();
    if (now < p->next) return false;
    p->next = now + IPU_POLL_INTERVAL_NS;
    if (!p->fn(p->ud)) return false;
    atomic_store_explicit(&s->poll_cut, 1, memory_order_relaxed);
    return true;
}

/* poll_cut counts only during the run of the hook that set it (inline: s->poll is set). */
static bool stop_now(ipu_session *s, const ipu__frame *f, ipu__poller *p) {
    return frame_cancelled(f) ||
           (s->poll && atomic_load_explicit(&s->poll_cut, memory_order_relaxed)) ||
           (p && poll_cancels(s, p));
}

/* The poll hook of the program this thread runs, while it runs an instruction's work (NULL on
 * the pool's other workers): kernels ask ipu__frame_stop between chunks of a long work item. */
static _Thread_local ipu__poller *tl_poll;

bool ipu__frame_stop(const ipu__frame *f) { return stop_now(f->stop_ctx, f, tl_poll); }

static ipu_status run_pieces(ipu_session *s, const ipu__frame *f, const ipu__instr *ins,
                             size_t begin, size_t end, void *scratch, ipu__poller *poll) {
    size_t n = end - begin;
    /* Small work runs in one piece: no clock reads, no extra kernel call. */
    if (n < 2 || (!f->ncancel && !s->poll) || ipu__instr_bytes(s->exe, ins) < IPU__PIECE_MIN_BYTES)
        return ipu__instr_run(f, ins, begin, end, scratch);
    /* A probe of 1/256 of the items times the kernel (small: a huge instruction's probe is not
     * interruptible); the rest runs in pieces of about IPU__PIECE_NS at the rate measured by
     * the piece before (in one when it is shorter than that). */
    size_t piece = n / 256 ? n / 256 : 1;
    uint64_t t = ipu__now_ns();
    for (size_t b = begin; b < end;) {
        size_t e = end - b > piece ? b + piece : end;
        ipu_status st = ipu__instr_run(f, ins, b, e, scratch);
        if (st != IPU_OK) return st;
        if (e == end) break;
        if (stop_now(s, f, poll))
            return ipu__fail(IPU_ERR_CANCELLED, "cancelled after work item %zu of [%zu, %zu)", e,
                             begin, end);
        uint64_t now = ipu__now_ns();
        double per = (double)(now - t) / (double)(e - b); /* ns per item */
        double want = per > 0 ? IPU__PIECE_NS / per : (double)(end - e);
        piece = want >= (double)(end - e) ? end - e : want < 1 ? 1 : (size_t)want;
        t = now;
        b = e;
    }
    return IPU_OK;
}

ipu_status ipu__instr_run_pieces(ipu_session *s, const ipu__frame *f, const ipu__instr *ins,
                                 size_t begin, size_t end, void *scratch, ipu__poller *poll) {
    ipu__poller *outer = tl_poll;
    tl_poll = poll;
    ipu_status st = run_pieces(s, f, ins, begin, end, scratch, poll);
    tl_poll = outer;
    return st;
}

typedef struct ipu__job {
    ipu_session *s;
    const ipu__frame *f;
    const ipu__instr *ins;
    ipu__poller *poll; /* worker 0 (the thread running the program) calls the hook */
} ipu__job;

static void job_fn(void *ctx, size_t begin, size_t end, uint32_t ith) {
    const ipu__job *j = ctx;
    if (j->s->wstatus[ith] != IPU_OK) return; /* keep this worker's first failure */
    ipu__poller *poll = ith == 0 ? j->poll : NULL;
    ipu_status st = stop_now(j->s, j->f, poll)
                        ? ipu__fail(IPU_ERR_CANCELLED, "the request was cancelled")
                        : ipu__instr_run_pieces(j->s, j->f, j->ins, begin, end,
                                                ipu__pool_scratch(j->s->pool, ith), poll);
    if (st != IPU_OK) { /* the rest of the chunks are skipped */
        j->s->wstatus[ith] = st;
        snprintf(j->s->wmsg[ith], IPU__MSG_BYTES, "%s", ipu_last_error_message());
    }
}

uint64_t ipu__instr_bytes(const ipu_executable *e, const ipu__instr *ins) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < ins->n_in; i++) total += e->tensors[ins->in[i]].desc.nbytes;
    for (uint32_t i = 0; i < ins->n_out; i++) total += e->tensors[ins->out[i]].desc.nbytes;
    return total;
}

ipu_status ipu__run_program(ipu_session *s, const ipu__frame *f, uint32_t index) {
    return ipu__run_program_on(s, f, index, 0);
}

static ipu_status run_instructions(ipu_session *s, const ipu__frame *f, uint32_t index,
                                   uint32_t alone) {
    const ipu_executable *e = s->exe;
    const ipu__program *prog = &e->programs[index];
    char msg[IPU__MSG_BYTES] = "";
    ipu__poller poller = {s->poll, s->poll_ud, s->poll_t0 + IPU_POLL_INTERVAL_NS};
    ipu__poller *poll = s->poll ? &poller : NULL;
    if (poll) atomic_store_explicit(&s->poll_cut, 0, memory_order_relaxed);
    bool ran = false; /* the clock is read between instructions only: none for a single one */
    for (uint32_t i = 0; i < prog->n_instr; i++) {
        const ipu__instr *ins = &prog->instr[i];
        if (ins->op == IPU_OP_BIND && ins->n_out == 1 && s->override[ins->out[0]]) continue;
        size_t work = ipu__instr_work(e, ins);
        if (work == 0) continue;
        if (frame_cancelled(f))
            return ipu__fail(IPU_ERR_CANCELLED, "program %u cancelled before instruction %u",
                             prog->id, i);
        if (poll && ran && poll_cancels(s, poll))
            return ipu__fail(IPU_ERR_CANCELLED,
                             "program %u cancelled by the poll hook before "
                             "instruction %u",
                             prog->id, i);
        ipu_status st = IPU_OK;
        ran = true;
        if (alone || !split_over_pool(s, ins, work)) {
            st = ipu__instr_run_pieces(s, f, ins, 0, work,
                                       ipu__pool_scratch(s->pool, alone ? alone - 1 : 0), poll);
            if (st != IPU_OK) snprintf(msg, sizeof msg, "%s", ipu_last_error_message());
        } else {
            for (uint32_t w = 0; w < s->nth; w++) s->wstatus[w] = IPU_OK;
            ipu__job job = {s, f, ins, poll};
            ipu__pool_run_range(s->pool, work, ipu__instr_contiguous(ins), job_fn, &job);
            for (uint32_t w = 0; w < s->nth && st == IPU_OK; w++) {
                if (s->wstatus[w] != IPU_OK) {
                    st = s->wstatus[w];
                    memcpy(msg, s->wmsg[w], sizeof msg);
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

ipu_status ipu__run_program_on(ipu_session *s, const ipu__frame *f, uint32_t index,
                               uint32_t alone) {
    bool hold = !alone && s->nth > 1; /* helpers keep polling between this program's runs */
    if (hold) ipu__pool_hold(s->pool, true);
    ipu_status st = run_instructions(s, f, index, alone);
    if (hold) ipu__pool_hold(s->pool, false);
    return st;
}

void ipu__store_index(void *p, const ipu_tensor_desc *d, uint32_t v) {
    memset(p, 0, (size_t)d->nbytes);
    switch (d->dtype) {
        case IPU_DTYPE_FLOAT32: {
            float f = (float)v;
            if (d->nbytes >= 4) memcpy(p, &f, 4);
            break;
        }
        case IPU_DTYPE_FLOAT64: {
            double f = v;
            if (d->nbytes >= 8) memcpy(p, &f, 8);
            break;
        }
        case IPU_DTYPE_FLOAT16:
            if (d->nbytes >= 2) {
                uint16_t h = ipu__f32_to_f16((float)v);
                memcpy(p, &h, 2);
            }
            break;
        case IPU_DTYPE_INT64:
        case IPU_DTYPE_UINT64:
            if (d->nbytes >= 8) ipu__st_u64(p, v);
            break;
        case IPU_DTYPE_INT16:
        case IPU_DTYPE_UINT16:
            if (d->nbytes >= 2) {
                uint8_t *b = p;
                b[0] = (uint8_t)v;
                b[1] = (uint8_t)(v >> 8);
            }
            break;
        case IPU_DTYPE_INT8:
        case IPU_DTYPE_UINT8:
        case IPU_DTYPE_BOOL:
            if (d->nbytes >= 1) *(uint8_t *)p = (uint8_t)v;
            break;
        default:
            if (d->nbytes >= 4) ipu__st_u32(p, v);
            break;
    }
}
