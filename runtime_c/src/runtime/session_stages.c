/* Session: sharded executables (manual sharding, ipu_executable_stage).
 *
 * Sequential (not pipelined): one iteration runs every stage's compute program and then its copy
 * program, in stage order, each over the whole worker pool (ipu__run_stages).
 *
 * Pipelined: a step is a sequence of lock-step (BSP) ticks. Batch b enters stage 0 at tick b, so
 * at tick T stage k computes batch T - k. A tick is
 *   1. load: the next batch is gathered into the input anchors (stage 0 memory), unless the step
 *      stops taking input (all batches_per_step loaded, timeout padding, flush, interrupt, a
 *      failure, stop);
 *   2. compute: every stage with a batch computes it, concurrently. The workers are split into
 *      G = min(workers, active stages) groups (worker w is in group w % G); group g runs active
 *      stages g, g + G, ... in turn and splits each instruction over its members, with a group
 *      barrier after each instruction. A failure ends that stage's program for its batch; the
 *      batch's later stages are skipped;
 *   3. store: the batch leaving the last stage is scattered to its output slots and its input
 *      slots complete (ipu__iter_store), with the batch's status;
 *   4. exchange: the copy programs run in reverse stage order, so a value forwarded through
 *      several stages moves one stage per tick and no copy overwrites a buffer before it was
 *      passed on.
 * Stages own disjoint arena ranges (the compiler plans them so; the verifier proves that no
 * compute program writes a byte another one uses, verify_flow.c), inputs are read only by stage 0
 * and outputs written only by the last stage: steps 2-4 never touch memory another stage uses in
 * the same phase. When the step stops taking input the pipeline drains (ticks continue until the
 * last loaded batch is stored), so every taken slot completes exactly once. */
#include <stdio.h>
#include <string.h>

#include "session_internal.h"

/* ---- group barrier: spin briefly, then sleep (same handshake as threadpool.c) ------------- */

static void gbar_wait(ipu_session *s, ipu__gbar *b, uint32_t n) {
    unsigned gen = atomic_load(&b->gen);
    if (atomic_fetch_add(&b->count, 1) + 1 == n) {
        atomic_store(&b->count, 0);
        atomic_fetch_add(&b->gen, 1); /* seq_cst: pairs with sleepers */
        if (atomic_load(&b->sleepers) > 0) {
            pthread_mutex_lock(&s->pp_mu);
            pthread_cond_broadcast(&s->pp_cv);
            pthread_mutex_unlock(&s->pp_mu);
        }
        return;
    }
    uint64_t t0 = 0;
    for (unsigned i = 0; atomic_load_explicit(&b->gen, memory_order_acquire) == gen; i++) {
        if (!ipu__spin_expired(i, &t0)) continue;
        pthread_mutex_lock(&s->pp_mu);
        atomic_fetch_add(&b->sleepers, 1);
        while (atomic_load(&b->gen) == gen) pthread_cond_wait(&s->pp_cv, &s->pp_mu);
        atomic_fetch_sub(&b->sleepers, 1);
        pthread_mutex_unlock(&s->pp_mu);
    }
}

/* ---- setup -------------------------------------------------------------------------------- */

ipu_status ipu__stages_create(ipu_session *s) {
    const ipu_executable *e = s->exe;
    uint32_t n = e->info.num_stages;
    if (!e->info.pipelined || n == 0) return IPU_OK;
    uint32_t groups = n < s->nth ? n : s->nth;
    s->pp_act = ipu__calloc(n, sizeof *s->pp_act);
    s->pp_iter = ipu__calloc(n, sizeof *s->pp_iter);
    s->pp_fail_at = ipu__calloc(n, sizeof *s->pp_fail_at);
    s->pp_st = ipu__calloc(n, sizeof *s->pp_st);
    s->pp_msg = ipu__calloc(n, sizeof *s->pp_msg);
    s->pp_bar = ipu__aligned_alloc(64, groups * sizeof *s->pp_bar); /* 64-byte aligned type */
    if (!s->pp_act || !s->pp_iter || !s->pp_fail_at || !s->pp_st || !s->pp_msg || !s->pp_bar)
        return ipu__fail(IPU_ERR_NOMEM, "session: cannot allocate the pipeline tables");
    memset(s->pp_bar, 0, groups * sizeof *s->pp_bar);
    for (uint32_t g = 0; g < groups; g++) {
        atomic_init(&s->pp_bar[g].count, 0);
        atomic_init(&s->pp_bar[g].gen, 0);
        atomic_init(&s->pp_bar[g].sleepers, 0);
    }
    if (pthread_mutex_init(&s->pp_mu, NULL) != 0)
        return ipu__fail(IPU_ERR_INTERNAL, "session: cannot initialise the pipeline mutex");
    if (pthread_cond_init(&s->pp_cv, NULL) != 0) {
        pthread_mutex_destroy(&s->pp_mu);
        return ipu__fail(IPU_ERR_INTERNAL, "session: cannot initialise the pipeline condition");
    }
    s->pp_sync = true;
    return IPU_OK;
}

void ipu__stages_destroy(ipu_session *s) {
    if (s->pp_sync) {
        pthread_cond_destroy(&s->pp_cv);
        pthread_mutex_destroy(&s->pp_mu);
        s->pp_sync = false;
    }
    ipu__free(s->pp_act);
    ipu__free(s->pp_iter);
    ipu__free(s->pp_fail_at);
    ipu__free(s->pp_st);
    ipu__free(s->pp_msg);
    ipu__aligned_free(s->pp_bar);
}

/* ---- sequential ---------------------------------------------------------------------------- */

ipu_status ipu__run_stages(ipu_session *s, const ipu__frame *f) {
    const ipu_executable *e = s->exe;
    for (uint32_t k = 0; k < e->info.num_stages; k++) {
        ipu_status st = ipu__run_program(s, f, e->stages[k].program);
        if (st == IPU_OK && e->stages[k].copy != IPU_NO_INDEX)
            st = ipu__run_program(s, f, e->stages[k].copy);
        if (st != IPU_OK) {
            char m[IPU__MSG_BYTES];
            snprintf(m, sizeof m, "%s", ipu_last_error_message());
            return ipu__fail(st, "stage %u (IPU %u): %s", k, e->stages[k].ipu, m);
        }
    }
    return IPU_OK;
}

/* ---- pipelined: the compute phase ----------------------------------------------------------- */

typedef struct tick_ctx {
    ipu_session *s;
    uint32_t nact, groups;
} tick_ctx;

/* Active stage slot j on the calling worker: rank `rank` of a group of m workers. */
static void run_slot(ipu_session *s, uint32_t j, uint32_t ith, uint32_t rank, uint32_t m,
                     ipu__gbar *bar) {
    const ipu_executable *e = s->exe;
    const ipu__program *prog = &e->programs[e->stages[s->pp_act[j]].program];
    const ipu__iter *c = s->pp_iter[j];
    const ipu__frame f = {e, c->ptr, c->cut, c->ncut, ipu__frame_stop, s};
    void *scratch = ipu__pool_scratch(s->pool, ith);
    for (uint32_t i = 0; i < prog->n_instr; i++) {
        const ipu__instr *ins = &prog->instr[i];
        size_t work = ipu__instr_work(e, ins);
        if (work == 0) continue;
        bool alone = m == 1 || work < 2 || ipu__instr_bytes(e, ins) < IPU__PAR_MIN_BYTES;
        size_t begin = 0, end = rank == 0 ? work : 0;
        if (!alone) ipu__split_work(work, rank, m, &begin, &end);
        /* Cancelled: the batch stops here (a member that still sees the flag clear runs its
         * part; every member leaves after the barrier). */
        bool cut = true;
        for (uint32_t k = 0; k < c->ncut && cut; k++)
            cut = atomic_load_explicit(c->cut[k], memory_order_relaxed) != 0;
        if (c->ncut && cut) {
            unsigned none = UINT32_MAX;
            if (atomic_compare_exchange_strong(&s->pp_fail_at[j], &none, i)) {
                s->pp_st[j] = IPU_ERR_CANCELLED;
                snprintf(s->pp_msg[j], IPU__MSG_BYTES,
                         "program %u cancelled before "
                         "instruction %u",
                         prog->id, i);
            }
        } else if (begin < end) {
            ipu_status st = ipu__instr_run_pieces(s, &f, ins, begin, end, scratch, NULL);
            unsigned none = UINT32_MAX;
            if (st != IPU_OK && atomic_compare_exchange_strong(&s->pp_fail_at[j], &none, i)) {
                const char *name = ipu_opcode_name(ins->op);
                s->pp_st[j] = st;
                snprintf(s->pp_msg[j], IPU__MSG_BYTES, "program %u, instruction %u (%s): %.300s",
                         prog->id, i, name ? name : "?", ipu_last_error_message());
            }
        }
        if (m > 1) gbar_wait(s, bar, m);
        /* Only failures at instruction <= i count here: every member leaves at the same point. */
        if (atomic_load(&s->pp_fail_at[j]) <= i) break;
    }
}

static void tick_fn(void *ctx, uint32_t ith, uint32_t nth) {
    const tick_ctx *t = ctx;
    uint32_t G = t->groups, g = ith % G, rank = ith / G;
    uint32_t m = (nth - g + G - 1) / G; /* members of group g */
    for (uint32_t j = g; j < t->nact; j += G)
        if (t->s->pp_iter[j]->st == IPU_OK) run_slot(t->s, j, ith, rank, m, &t->s->pp_bar[g]);
}

/* ---- pipelined: the step ------------------------------------------------------------------ */

static void note_fail(ipu__iter *c, ipu_status st, const char *what, const char *detail) {
    if (c->st != IPU_OK) return;
    c->st = st;
    snprintf(c->msg, sizeof c->msg, "%.200s: %.300s", what, detail);
}

/* Pipelining needs queue-bound inputs (rows of output slots are not consumed at load time). */
static bool pipeline_usable(const ipu_session *s) {
    bool in = false, out = false;
    for (uint32_t a = 0; a < s->num_anchors; a++) {
        if (!ipu__in_subgraph(s, a, 0) || s->binds[a].kind != IPU_BIND_QUEUE) continue;
        in = in || s->anchors[a].direction == IPU_DIR_INPUT;
        out = out || s->anchors[a].direction == IPU_DIR_OUTPUT;
    }
    return in || !out;
}

bool ipu__stages_pipelined(const ipu_session *s) {
    return s->exe->info.pipelined && s->exe->info.num_stages > 0 && pipeline_usable(s);
}

ipu_status ipu__stages_run_main(ipu_session *s, ipu_step_result *r) {
    const ipu_executable *e = s->exe;
    const uint32_t S = e->info.num_stages, bps = s->bps;
    for (uint32_t k = 0; k < s->n_iters; k++) {
        s->iters[k].ptr = s->tensor_ptr;
        s->iters[k].idle = NULL;
    }
    uint32_t loaded = 0, stored = 0;
    bool loading = true, closed = false;
    ipu_status fail = IPU_OK;
    char msg[IPU__MSG_BYTES] = "";
    for (uint64_t T = 0;; T++) {
        if (loading) {
            if (ipu__stopped(s)) {
                closed = true;
                loading = false;
            } else if (fail != IPU_OK || loaded == bps) {
                loading = false;
            } else if (atomic_exchange(&s->interrupt_req, 0)) {
                loading = false;
                if (loaded > 0) r->padded_iterations = bps - loaded;
            } else {
                ipu__iter *c = &s->iters[loaded % S];
                ipu__iter_load(s, c, loaded);
                if (c->ev == IPU__EV_READY) {
                    loaded++;
                } else {
                    loading = false;
                    if (c->ev == IPU__EV_CLOSED) {
                        closed = true;
                    } else if (c->ev == IPU__EV_INTERRUPT) {
                        atomic_store(&s->interrupt_req, 0);
                        if (loaded > 0) r->padded_iterations = bps - loaded;
                    } else {
                        r->padded_iterations = bps - loaded;
                    }
                }
            }
        }
        if (stored == loaded) break;
        /* Compute: stage k holds batch T - k when that batch is in flight. */
        uint32_t nact = 0, ncompute = 0;
        for (uint32_t k = 0; k < S; k++) {
            if (T < k || T - k < stored || T - k >= loaded) continue;
            ipu__iter *c = &s->iters[(T - k) % S];
            s->pp_act[nact] = k;
            s->pp_iter[nact] = c;
            atomic_store(&s->pp_fail_at[nact], UINT32_MAX);
            ncompute += c->st == IPU_OK;
            nact++;
        }
        if (ncompute > 0) {
            tick_ctx t = {s, nact, nact < s->nth ? nact : s->nth};
            if (t.groups == 1)
                tick_fn(&t, 0, 1); /* one group: the device thread alone */
            else
                ipu__pool_run(s->pool, tick_fn, &t);
            atomic_fetch_add_explicit(&s->st_ticks, 1, memory_order_relaxed);
            if (ncompute > 1 && t.groups > 1)
                atomic_fetch_add_explicit(&s->st_concurrent_ticks, 1, memory_order_relaxed);
            for (uint32_t j = 0; j < nact; j++) {
                if (atomic_load(&s->pp_fail_at[j]) == UINT32_MAX) continue;
                char what[64];
                snprintf(what, sizeof what, "stage %u (IPU %u) failed", s->pp_act[j],
                         e->stages[s->pp_act[j]].ipu);
                note_fail(s->pp_iter[j], s->pp_st[j], what, s->pp_msg[j]);
            }
        }
        /* Store the batch leaving the last stage. */
        if (T >= S - 1 && T - (S - 1) == stored && stored < loaded) {
            ipu__iter *c = &s->iters[stored % S];
            if (!ipu__iter_store(s, c)) closed = true;
            /* a cancelled batch failed its own requests only */
            if (c->st != IPU_OK && c->st != IPU_ERR_CANCELLED && fail == IPU_OK) {
                fail = c->st;
                memcpy(msg, c->msg, IPU__MSG_BYTES);
            }
            stored++;
        }
        /* Exchange, last stage first. */
        for (uint32_t k = S - 1; k-- > 0;) {
            if (e->stages[k].copy == IPU_NO_INDEX || T < k || T - k < stored || T - k >= loaded)
                continue;
            ipu__iter *c = &s->iters[(T - k) % S];
            if (c->st != IPU_OK) continue;
            const ipu__frame f = {e, c->ptr, c->cut, c->ncut, ipu__frame_stop, s};
            ipu_status st = ipu__run_program(s, &f, e->stages[k].copy);
            if (st != IPU_OK) {
                char what[64];
                snprintf(what, sizeof what, "copies of stage %u failed", k);
                note_fail(c, st, what, ipu_last_error_message());
            }
        }
    }
    if (closed) return IPU_ERR_CLOSED;
    if (fail != IPU_OK) {
        r->iterations = 0;
        r->padded_iterations = 0;
        return ipu__fail(fail, "%s", msg);
    }
    r->iterations = loaded;
    return IPU_OK;
}
