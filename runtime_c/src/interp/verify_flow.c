/* Whole-executable proofs that no single instruction's check can give (docs/bytecode.md, "What
 * the verifier proves"): weights bound before they are read, and pipelined stages that do not
 * share written arena bytes and keep to their streamed anchors (below).
 *
 * Kernels read a TENSOR_DATA tensor through the frame pointer a BIND of the Load program sets
 * (or the session's copy of an overridden weight, which replaces that BIND); until then the
 * pointer is NULL. So every TENSOR_DATA tensor an instruction reads must be
 * bound by the Load program before the read: by an earlier BIND when the reader is in the Load
 * program, by any BIND of it otherwise (Main, stage and copy programs run only after the whole
 * Load program, whichever subgraph an iteration selects). */
#include <stdlib.h>

#include "interp.h"
#include "kernels/kernels.h"

static ipu_status check_reads(const ipu_executable *e, const ipu__program *pr, bool is_load,
                              uint8_t *bound) {
    for (uint32_t i = 0; i < pr->n_instr; i++) {
        const ipu__instr *ins = &pr->instr[i];
        if (ins->op == IPU_OP_BIND) { /* only in the Load program (ipu__verify_instr) */
            bound[ins->out[0]] = 1;
            continue;
        }
        for (uint32_t k = 0; k < ins->n_in; k++) {
            uint32_t t = ins->in[k];
            if (e->tensors[t].loc != IPU_LOC_TENSOR_DATA || bound[t]) continue;
            const char *name = ipu_opcode_name(ins->op);
            return ipu__fail(IPU_ERR_BAD_PROGRAM,
                             "program %u instruction %u (%s): input %u reads TENSOR_DATA tensor "
                             "%u, which the Load program does not BIND%s",
                             pr->id, i, name ? name : "?", k, t, is_load ? " before it" : "");
        }
    }
    return IPU_OK;
}

ipu_status ipu__verify_binds(const ipu_executable *e) {
    uint32_t nt = e->info.num_tensors;
    uint8_t *bound = ipu__calloc(nt ? nt : 1, 1);
    if (!bound) return ipu__fail(IPU_ERR_NOMEM, "out of memory loading executable");
    ipu_status st = check_reads(e, &e->programs[e->load_program], true, bound);
    for (uint32_t k = 0; st == IPU_OK && k < e->info.num_programs; k++)
        if (k != e->load_program) st = check_reads(e, &e->programs[k], false, bound);
    ipu__free(bound);
    return st;
}

/* ---- pipelined stages ------------------------------------------------------------------------
 * The compute programs of a pipelined executable's stages run concurrently, on consecutive
 * batches, in one arena (session_stages.c): no arena byte one of them writes may be read or
 * written by another (a race, and with index tensors an out-of-range read). Per stage, the
 * union of the bytes its program uses (A) and writes (W) is built; a sweep over all stages then
 * finds a byte that is in some W and in the A of two stages (a W is part of its stage's A). */

typedef struct flow_span {
    uint64_t lo, hi;
    uint32_t stage;
    int write; /* in a merged event list: +1/-1 for A, +2/-2 for W */
} flow_span;

static int cmp_lo(const void *a, const void *b) {
    uint64_t x = ((const flow_span *)a)->lo, y = ((const flow_span *)b)->lo;
    return (x > y) - (x < y);
}

/* Merge sorted spans[0..n) (one stage; `write` selects the written ones when set) into
 * disjoint events appended at ev[*m]: a start (+delta at lo) and an end (-delta at hi). */
static void union_events(const flow_span *sp, size_t n, int only_writes, int delta, flow_span *ev,
                         size_t *m) {
    uint64_t lo = 0, hi = 0;
    bool open = false;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && only_writes && !sp[i].write) continue;
        if (i < n && open && sp[i].lo <= hi) {
            if (sp[i].hi > hi) hi = sp[i].hi;
            continue;
        }
        if (open) {
            ev[(*m)++] = (flow_span){lo, 0, sp[0].stage, delta};
            ev[(*m)++] = (flow_span){hi, 0, sp[0].stage, -delta};
        }
        if (i < n) {
            lo = sp[i].lo;
            hi = sp[i].hi;
            open = true;
        }
    }
}

static int cmp_event(const void *a, const void *b) {
    const flow_span *x = a, *y = b;
    if (x->lo != y->lo) return (x->lo > y->lo) - (x->lo < y->lo);
    return (x->write > y->write) - (x->write < y->write); /* ends (negative) first */
}

static ipu_status stage_conflict(const ipu_executable *e, const flow_span *sp, size_t n,
                                 uint64_t at) {
    uint32_t w = IPU_NO_INDEX, other = IPU_NO_INDEX;
    for (size_t i = 0; i < n; i++)
        if (sp[i].lo <= at && at < sp[i].hi && sp[i].write && w == IPU_NO_INDEX) w = sp[i].stage;
    for (size_t i = 0; i < n; i++)
        if (sp[i].lo <= at && at < sp[i].hi && sp[i].stage != w) other = sp[i].stage;
    return ipu__fail(IPU_ERR_BAD_PROGRAM,
                     "pipelined stages %u and %u run concurrently but both use arena byte %llu, "
                     "which stage %u's program %u writes",
                     w, other, (unsigned long long)at, w, e->programs[e->stages[w].program].id);
}

/* ---- pipelined stages and the streamed anchors ----------------------------------------------
 * A tick loads batch T into the input anchors before the stages compute and stores the batch
 * leaving the last stage from the output anchors before the copies run (session_stages.c). So
 * the bytes of a streamed input anchor hold stage 0's batch and may be used by stage 0 only, and
 * those of an output anchor hold the last stage's batch and may be used by the last stage only;
 * another stage would read or write another batch's rows. A stage's compute program and the
 * inputs of its copy program belong to it, the outputs of its copy program to the next stage. */

static ipu_status check_anchor_use(const ipu_executable *e, const ipu__program *pr, bool copy,
                                   uint32_t k) {
    const uint32_t last = e->info.num_stages - 1;
    for (uint32_t i = 0; i < pr->n_instr; i++) {
        const ipu__instr *ins = &pr->instr[i];
        for (uint32_t q = 0; q < ins->n_in + ins->n_out; q++) {
            bool out = q >= ins->n_in;
            uint32_t owner = copy && out ? k + 1 : k;
            const ipu__tensor *t = &e->tensors[out ? ins->out[q - ins->n_in] : ins->in[q]];
            if (t->loc != IPU_LOC_ARENA || t->desc.nbytes == 0) continue;
            for (uint32_t a = 0; a < e->info.num_anchors; a++) {
                const ipu__anchor *A = &e->anchors[a];
                const ipu__tensor *at = &e->tensors[A->tensor];
                bool input = A->direction == IPU_DIR_INPUT;
                if ((A->flags & IPU_ANCHOR_TENSOR_DATA) || at->loc != IPU_LOC_ARENA ||
                    owner == (input ? 0 : last) || a == e->info.index_anchor)
                    continue;
                if (t->offset >= at->offset + at->desc.nbytes ||
                    at->offset >= t->offset + t->desc.nbytes)
                    continue;
                const char *name = ipu_opcode_name(ins->op);
                return ipu__fail(IPU_ERR_BAD_PROGRAM,
                                 "pipelined stage %u: program %u instruction %u (%s) %s bytes of "
                                 "%s anchor '%s', which only stage %u may use (it holds that "
                                 "stage's batch)",
                                 owner, pr->id, i, name ? name : "?", out ? "writes" : "reads",
                                 input ? "input" : "output", A->name, input ? 0 : last);
            }
        }
    }
    return IPU_OK;
}

static ipu_status check_stage_anchors(const ipu_executable *e) {
    ipu_status st = IPU_OK;
    for (uint32_t k = 0; k < e->info.num_stages && st == IPU_OK; k++) {
        st = check_anchor_use(e, &e->programs[e->stages[k].program], false, k);
        if (st == IPU_OK && e->stages[k].copy != IPU_NO_INDEX)
            st = check_anchor_use(e, &e->programs[e->stages[k].copy], true, k);
    }
    return st;
}

ipu_status ipu__verify_stages(const ipu_executable *e) {
    uint32_t ns = e->info.num_stages;
    if (!e->info.pipelined || ns < 2) return IPU_OK;
    ipu_status ast = check_stage_anchors(e);
    if (ast != IPU_OK) return ast;
    size_t n = 0;
    for (uint32_t k = 0; k < ns; k++) {
        const ipu__program *pr = &e->programs[e->stages[k].program];
        for (uint32_t i = 0; i < pr->n_instr; i++) n += pr->instr[i].n_in + pr->instr[i].n_out;
    }
    flow_span *sp = ipu__malloc(sizeof *sp * (n ? n : 1));
    flow_span *ev = ipu__malloc(sizeof *ev * 4 * (n ? n : 1));
    if (!sp || !ev) {
        ipu__free(sp);
        ipu__free(ev);
        return ipu__fail(IPU_ERR_NOMEM, "out of memory loading executable");
    }
    size_t used = 0, m = 0;
    for (uint32_t k = 0; k < ns; k++) {
        const ipu__program *pr = &e->programs[e->stages[k].program];
        size_t first = used;
        for (uint32_t i = 0; i < pr->n_instr; i++) {
            const ipu__instr *ins = &pr->instr[i];
            for (uint32_t q = 0; q < ins->n_in + ins->n_out; q++) {
                bool out = q >= ins->n_in;
                const ipu__tensor *t = &e->tensors[out ? ins->out[q - ins->n_in] : ins->in[q]];
                if (t->loc != IPU_LOC_ARENA || t->desc.nbytes == 0) continue;
                sp[used++] = (flow_span){t->offset, t->offset + t->desc.nbytes, k, out};
            }
        }
        qsort(sp + first, used - first, sizeof *sp, cmp_lo);
        union_events(sp + first, used - first, 0, 1, ev, &m);
        union_events(sp + first, used - first, 1, 2, ev, &m);
    }
    qsort(ev, m, sizeof *ev, cmp_event);
    ipu_status st = IPU_OK;
    int users = 0, writers = 0;
    for (size_t i = 0; i < m && st == IPU_OK; i++) {
        int d = ev[i].write;
        if (d == 1 || d == -1)
            users += d;
        else
            writers += d / 2;
        bool last_here = i + 1 == m || ev[i + 1].lo != ev[i].lo;
        if (last_here && writers > 0 && users > 1) st = stage_conflict(e, sp, used, ev[i].lo);
    }
    ipu__free(sp);
    ipu__free(ev);
    return st;
}
