/* Internal state of ipu_session (ipu_session.h), shared by session.c (lifecycle, bindings, Load,
 * enqueue, disconnect, program execution), session_main.c (the Main step: batch assembly,
 * padding, scatter), session_overlap.c (overlap I/O) and session_stages.c (sharded
 * executables). The runtime (runtime_internal.h) reads a few fields directly.
 *
 * Rings. Every anchor has an SPSC ring of ipu_slot (used only while it is QUEUE-bound). The
 * producer of an anchor's ring is whoever calls ipu_session_enqueue for it (callers serialise);
 * the consumer is the thread running the programs (the "device"), or the thread calling
 * disconnect / destroy once the device is idle.
 *
 * Geometry. Every streamed anchor has rows_per_batch R (dims[batching_dim], or 1 when batching
 * is off), outer = prod(dims[:d]) and inner = prod(dims[d+1:]) * elem size bytes (R = 1,
 * outer = 1, inner = nbytes without batching). A slot with n rows holds outer * n * inner bytes;
 * rows [r0, r0+k) of it go to rows [f, f+k) of the batch with `outer` strided memcpys.
 * consumed[a] counts the rows of the front slot of anchor a already taken; front_err[a] is the
 * status its done callback will get (set when a failed iteration consumed some of its rows).
 *
 * Sleep/wake, without lost wakeups (reliability.md §5): the producer of an event bumps a sequence
 * counter (seq_cst) and then reads the waiter count (seq_cst); a waiter increments the count
 * (seq_cst, under mu) and re-reads the counter before sleeping. push_seq/dev_waiting wake the
 * device (slot pushed, flush, interrupt); pop_seq/sub_waiting wake producers (slot popped, abort
 * flag changed). stop() sets `stopped` and broadcasts both condition variables under mu.
 * dev_waiting is 2 while the device sleeps in ipu__unpark for a claimed device: only then does
 * ipu__release_device wake it (an idle parked device sleeps with 1 and is left asleep). */
#ifndef IPU_SESSION_INTERNAL_H
#define IPU_SESSION_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "../interp/interp.h"
#include "threadpool.h"

#define IPU__MSG_BYTES 512
/* An instruction runs on the device thread alone when its operands total fewer bytes than this
 * (waking the helpers costs more than the work) or when it has fewer than 2 work items. */
#define IPU__PAR_MIN_BYTES ((uint64_t)32 << 10)

typedef struct ipu__bind {
    ipu_binding kind;
    ipu_stream_fn fn;
    void *user_data;
} ipu__bind;

typedef struct ipu__pend {
    ipu_slot sl;
    ipu_status err; /* IPU_OK: gets the iteration's status */
    uint32_t anchor;
    uint64_t id; /* pops[anchor] when it was popped (its identity) */
} ipu__pend;

/* One iteration in flight (session_main.c stages). The serial loop uses iters[0] over the arena;
 * the overlap I/O pipeline uses iters[k] over staging set k. part[a] = 1 + the id of an input
 * front slot this iteration took only some rows of (0: none): a failure of the iteration marks
 * that slot failed wherever it is by then (still the front, or taken by the next iteration). */
typedef struct ipu__iter {
    void **ptr;         /* [num_tensors] tensor base pointers (the frame) */
    ipu__pend *pending; /* input slots taken (done deferred to the store stage) */
    size_t npending;
    uint64_t *part;                      /* [num_anchors] */
    uint32_t sub;                        /* subgraph */
    uint64_t filled;                     /* rows gathered */
    int ev;                              /* load result (EV_* of session_main.c; 0 = ready) */
    ipu_status st;                       /* first failure of the iteration */
    bool (*idle)(struct ipu_session *s); /* load: called while waiting for input; true = did work */
    uint32_t alone; /* compute: 0 = split over the pool, w + 1 = serially on worker w */
    /* The cancel flags of the requests whose rows the iteration carries (cancel_of of its
     * slots, taken and partially taken; collected by the load stage): the frame's cancel. */
    const atomic_int **cut; /* [pending_cap + num_anchors] */
    uint32_t ncut;
    char msg[IPU__MSG_BYTES]; /* message of the failure / of a CLOSED completion */
} ipu__iter;
/* Load results (ipu__iter.ev). */
enum { IPU__EV_READY = 0, IPU__EV_END_STEP, IPU__EV_CLOSED, IPU__EV_INTERRUPT };

/* Barrier of one worker group of the stage pipeline (session_stages.c). */
typedef struct ipu__gbar {
    _Alignas(64) atomic_uint count;
    atomic_uint gen;
    atomic_int sleepers;
} ipu__gbar;

typedef struct ipu__geom {
    uint64_t rows;  /* R: rows per batch */
    uint64_t outer; /* prod(dims[:d]) */
    uint64_t inner; /* bytes of one row inside one outer block */
} ipu__geom;

struct ipu_session {
    const ipu_executable *exe;
    ipu_session_config cfg;
    uint32_t nth, bps, num_anchors, num_subgraphs;
    uint32_t index_anchor; /* IPU_NO_INDEX unless fused */
    bool batching;
    bool loaded; /* run_load has been called: bindings are frozen */

    uint8_t *arena;
    void **tensor_ptr; /* [num_tensors] */
    ipu__frame frame;
    ipu_anchor_info *anchors; /* [num_anchors] */
    ipu__bind *binds;         /* [num_anchors] */
    ipu__geom *geom;          /* [num_anchors] */
    ipu_ring **rings;         /* [num_anchors] */
    uint64_t *consumed;       /* [num_anchors] rows of the front slot already taken */
    ipu_status *front_err;    /* [num_anchors] */
    uint8_t **wstore;         /* [num_anchors] storage of weights not bound to TENSOR_DATA */
    uint8_t *override;        /* [num_tensors] 1: skip BIND of this tensor in Load */

    uint64_t *pops;   /* [num_anchors] slots popped so far (slot identities) */
    ipu__iter *iters; /* [n_iters]: 2, or one per stage of a pipelined executable */
    uint32_t n_iters;
    size_t pending_cap;
    uint64_t batch_rows; /* R shared by every streamed anchor (1 without batching) */

    ipu__pool *pool;
    ipu_status *wstatus;          /* [nth] per-worker kernel status of the current instr */
    char (*wmsg)[IPU__MSG_BYTES]; /* [nth] per-worker kernel message */
    char dev_msg[IPU__MSG_BYTES]; /* message of the current failure (device thread) */

    int sync_ready;
    pthread_mutex_t mu;      /* sleep/wake only */
    pthread_cond_t data_cv;  /* the device waits for slots (CLOCK_MONOTONIC) */
    pthread_cond_t space_cv; /* producers wait for ring space (CLOCK_MONOTONIC) */

    _Alignas(64) atomic_uint_fast64_t push_seq;
    atomic_int dev_waiting;
    atomic_int flush_req;
    atomic_int interrupt_req;
    _Alignas(64) atomic_uint_fast64_t pop_seq;
    atomic_int sub_waiting;
    _Alignas(64) atomic_bool stopped;
    /* The producers' abort flag (the runtime's health; NULL for a bare session). Non-zero: a
     * failure is being handled and producers may have given up halfway through a request, so
     * a slot an iteration in flight waits for may never come (see ipu__wait_front, gather).
     * abort_status / abort_msg: the failure's (the runtime's fail_status and fail_msg, written
     * before *abort is set, stable until the device thread recovers; NULL with abort). */
    const atomic_int *abort;
    const ipu_status *abort_status;
    const char *abort_msg;
    /* Inline execution (runtime request.c): IPU__PARK_* handshake between the device thread
     * idle at the start of a step and a caller running a small request itself. park_ok: the
     * device parks (set by the runtime before its device thread starts). */
    _Alignas(64) atomic_int park;
    bool park_ok;
    /* Concurrent iterations (session_main.c): with a second batch already queued, two
     * iterations run at once, each alone on one worker, the second over its own copy of the
     * arena (par_arena, frame par_ptr; made on first use, dropped when Load runs again).
     * par_ok: the session's layout allows it; par_steps (set by the runtime): the second may
     * start the next step when batches_per_step is 1 (par_extra_steps counts them). */
    bool par_ok, par_steps;
    bool prewake; /* a Main program splits instructions: a request pre-wakes the pool */
    uint8_t *par_arena;
    void **par_ptr;
    bool par_warned; /* the second arena could not be allocated (logged once) */
    uint32_t par_extra_steps;

    _Alignas(64) atomic_uint_fast64_t st_steps, st_iterations, st_padded, st_padded_rows;
    atomic_uint_fast64_t st_ticks, st_concurrent_ticks, st_concurrent_iters;
    atomic_int st_overlap;

    /* Stage pipeline (session_stages.c): per active stage slot of a tick, its stage, batch,
     * first failing instruction (UINT32_MAX: none), status and message; group barriers. */
    uint32_t *pp_act;
    ipu__iter **pp_iter;
    atomic_uint *pp_fail_at;
    ipu_status *pp_st;
    char (*pp_msg)[IPU__MSG_BYTES];
    ipu__gbar *pp_bar;
    pthread_mutex_t pp_mu;
    pthread_cond_t pp_cv;
    bool pp_sync;

    /* Overlap I/O (session_overlap.c). pl_on: the layout allows it and the config enables it
     * (the I/O thread runs). Tensor t inside staged anchor pl_anchor[t] >= 0 lives at
     * pl_set[k] + pl_soff[anchor] + (offset(t) - offset(anchor)) in set k. */
    bool pl_on, io_started, io_sync;
    int32_t *pl_anchor; /* [num_tensors] */
    uint64_t *pl_soff;  /* [num_anchors] UINT64_MAX: not staged */
    uint8_t *pl_set[2];
    uint64_t pl_set_bytes;
    void **pl_ptr[2]; /* [num_tensors] */
    pthread_t io_thread;
    pthread_mutex_t io_mu;
    pthread_cond_t io_cv;
    int io_store, io_load, io_early; /* job: set indices or -1 (written before job_seq++) */
    uint32_t io_load_it;
    bool io_quit, io_closed; /* io_closed: a store found the session stopped */
    int io_early_done;
    _Alignas(64) atomic_uint job_seq;
    atomic_uint done_seq;
    atomic_int compute_done;

    /* Cancellation of the program being run (ipu__run_program_on): poll (inline requests: the
     * runtime's poll hook, NULL: none) is called by the thread running the program, between
     * instructions and between pieces of an instruction's work, every IPU_POLL_INTERVAL_NS,
     * and cancels with a non-zero return (poll_cut is then set: the pool's workers stop too);
     * set by the thread running the program, before it runs.
     * cancel_of: the cancel flag of a queued slot's owner (the runtime's requests; NULL: none).
     * Every iteration (serial loop, concurrent pair, overlap I/O, stage pipeline) runs with the
     * flags of the requests whose rows it carries as its frame's cancel: it stops once all of
     * them are cancelled (with dynamic batching, rows of a request still wanted keep it
     * running). A cancelled iteration fails its own slots only (IPU_ERR_CANCELLED) and never
     * ends the step. */
    const atomic_int *(*cancel_of)(const ipu_slot *sl);
    /* alone_of: true when a queued slot's owner is the only request pending (the runtime's
     * no_wait_when_alone; NULL: never). A partial batch whose last slot's owner is alone runs
     * once nothing more is queued, without waiting for the batch timeout. */
    bool (*alone_of)(const ipu_slot *sl);
    int (*poll)(void *); /* every IPU_POLL_INTERVAL_NS (ipu_runtime.h) */
    void *poll_ud;
    uint64_t poll_t0;    /* when the request started (the first poll is due one interval on) */
    atomic_int poll_cut; /* the poll hook cancelled the program being run */

    struct ipu_trace *trace; /* tracepoints (ipu_trace.h): set before run_main starts; NULL off */
};

/* trace.c: record one event of `kind` that started at start_ns and ends now. */
void ipu__trace_record(struct ipu_trace *t, uint32_t kind, uint32_t subgraph, uint64_t start_ns);
/* The start time of a traced stage (0 and no clock read when tracing is off). */
static inline uint64_t ipu__trace_start(const struct ipu_session *s) {
    return s->trace ? ipu__now_ns() : 0;
}

static inline bool ipu__stopped(const ipu_session *s) {
    return atomic_load_explicit(&s->stopped, memory_order_acquire);
}

/* After a push, flush or interrupt request: wake the device. */
static inline void ipu__wake_device(ipu_session *s) {
    atomic_fetch_add(&s->push_seq, 1);
    if (atomic_load(&s->dev_waiting)) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->data_cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* After a pop or an abort-flag change: wake producers. */
static inline void ipu__wake_producers(ipu_session *s) {
    atomic_fetch_add(&s->pop_seq, 1);
    if (atomic_load(&s->sub_waiting)) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->space_cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* Work items [begin, end) of worker i of n when `work` items are split evenly. */
static inline void ipu__split_work(size_t work, uint32_t i, uint32_t n, size_t *begin,
                                   size_t *end) {
    size_t q = work / n, r = work % n;
    *begin = q * i + (i < r ? i : r);
    *end = *begin + q + (i < r ? 1 : 0);
}

/* Is anchor a streamed per iteration (not a weight, not the index) in subgraph sub? */
static inline bool ipu__in_subgraph(const ipu_session *s, uint32_t a, uint32_t sub) {
    const ipu_anchor_info *A = &s->anchors[a];
    if (a == s->index_anchor || A->has_tensor_data) return false;
    return A->subgraph == IPU_NO_INDEX || A->subgraph == sub;
}

/* Inline execution. The device thread, waiting for the first slot of a step with nothing
 * taken, publishes PARKED; a caller that owns every producer (the runtime's submit mutex) may
 * claim the device (PARKED -> INLINE), run one iteration on its own thread over the arena and
 * give it back (INLINE -> PARKED). The device unparks (PARKED -> RUNNING, waiting while INLINE:
 * polling, then asleep) before it takes a slot or leaves its wait, so it never touches the arena
 * while claimed. */
enum { IPU__PARK_RUNNING = 0, IPU__PARK_PARKED = 1, IPU__PARK_INLINE = 2 };
void ipu__park(ipu_session *s);
void ipu__unpark(ipu_session *s);
bool ipu__claim_device(ipu_session *s);
void ipu__release_device(ipu_session *s);

/* session.c */
/* Like ipu_session_enqueue; additionally returns IPU_ERR_ABORTED (without queueing) once
 * *abort != 0 (re-checked after every ipu__wake_producers). abort may be NULL. */
IPU_NODISCARD ipu_status ipu__session_enqueue(ipu_session *s, uint32_t anchor, const ipu_slot *slot,
                                              uint64_t timeout_ns, const atomic_int *abort);
/* Change the binding of a non-weight anchor to QUEUE or CALLBACK even after Load. Only while no
 * thread is inside run_main (the runtime calls it before its device thread starts). */
IPU_NODISCARD ipu_status ipu__session_rebind(ipu_session *s, uint32_t anchor, ipu_binding b,
                                             ipu_stream_fn fn, void *user_data);
/* Make a waiting run_main return IPU_OK at the next iteration boundary (partial batches run). */
void ipu__session_interrupt(ipu_session *s);
/* Pop a slot of anchor a (consumer) and reset its consumed rows; wakes producers. */
void ipu__session_pop(ipu_session *s, uint32_t a, ipu_slot *out);
/* Call a slot's done callback (flagging the thread as inside a callback); a failure status
 * sets the thread's last error to msg first. */
void ipu__slot_done(ipu_session *s, const ipu_slot *sl, ipu_status st, const char *msg);
/* Device-side waiting. ipu__dev_sleep sleeps until push_seq != seq, stop, or the deadline
 * (0 = none); the caller read seq before checking its condition. ipu__wait_front waits for a
 * front slot of anchor a: IPU__FRONT_READY, IPU__FRONT_STOPPED, or (abortable only)
 * IPU__FRONT_ABORTED when the slot is missing while the producers are aborted. */
enum { IPU__FRONT_READY = 0, IPU__FRONT_STOPPED = 1, IPU__FRONT_ABORTED = 2 };
void ipu__dev_sleep(ipu_session *s, uint_fast64_t seq, uint64_t deadline_ns);
int ipu__wait_front(ipu_session *s, uint32_t a, bool abortable);
static inline bool ipu__aborted(const ipu_session *s) {
    return s->abort && atomic_load(s->abort) != 0;
}
/* Set the failure message and complete every queued slot with st (see ipu_session_disconnect). */
void ipu__session_disconnect_msg(ipu_session *s, ipu_status st, const char *msg);
/* Bytes of an instruction's operands (small instructions run on one worker). */
uint64_t ipu__instr_bytes(const ipu_executable *e, const ipu__instr *ins);
/* Some Main program splits an instruction over the pool: requests pre-wake its helpers. */
bool ipu__main_splits(const ipu_session *s);
/* Run work items [begin, end) of ins over frame f with `scratch`; when f is cancellable and the
 * instruction is not small, in pieces of about IPU__PIECE_NS each, stopping between two with
 * IPU_ERR_CANCELLED once f is cancelled or poll_cut is set. poll: the poll hook's state when
 * the calling thread runs the program (it calls the hook when due), else NULL. A piece lasts
 * half a poll interval: every piece costs a contiguous kernel (MatMul) one more packing of its
 * operands. */
#define IPU__PIECE_NS (IPU_POLL_INTERVAL_NS / 2)
/* Instructions with fewer operand bytes run in one piece: they take a few ms at most (a
 * [256, 256] MatMul, 0.75 MiB, takes 0.25 ms), and a probe piece costs a contiguous kernel a
 * second packing of its operands (+14% for a [128, 128] MatMul). */
#define IPU__PIECE_MIN_BYTES ((uint64_t)1 << 20)
typedef struct ipu__poller {
    int (*fn)(void *);
    void *ud;
    uint64_t next; /* when the hook is due */
} ipu__poller;
IPU_NODISCARD ipu_status ipu__instr_run_pieces(ipu_session *s, const ipu__frame *f,
                                               const ipu__instr *ins, size_t begin, size_t end,
                                               void *scratch, ipu__poller *poll);
/* The stop hook of every frame a session runs (ipu__frame.stop, stop_ctx = the session): the
 * frame's requests are cancelled, or the poll hook (called when due by the thread running the
 * program) interrupts. */
bool ipu__frame_stop(const ipu__frame *f);
/* Run program programs[index] over frame f on the pool; the calling thread is worker 0. */
IPU_NODISCARD ipu_status ipu__run_program(ipu_session *s, const ipu__frame *f, uint32_t index);
/* alone = 0: as ipu__run_program; w + 1: every instruction serially on worker w (its scratch). */
IPU_NODISCARD ipu_status ipu__run_program_on(ipu_session *s, const ipu__frame *f, uint32_t index,
                                             uint32_t alone);

/* session_main.c: the stages of one iteration over c (see ipu__iter). load: index, gather,
 * padding, EMPTY / CALLBACK inputs (c->ev != IPU__EV_READY: nothing to compute; the taken
 * slots are complete). compute: the Main program. store: CALLBACK outputs, scatter, done
 * callbacks of the inputs (false: stopped; everything of c is complete). */
void ipu__iter_load(ipu_session *s, ipu__iter *c, uint32_t it);
void ipu__iter_compute(ipu_session *s, ipu__iter *c);
bool ipu__iter_store(ipu_session *s, ipu__iter *c);

/* session_overlap.c */
/* Decide overlap I/O from the layout and cfg.overlap_io, allocate the staging sets, start the
 * I/O thread. */
IPU_NODISCARD ipu_status ipu__pipeline_create(ipu_session *s);
void ipu__pipeline_destroy(ipu_session *s);    /* joins the I/O thread; frees */
void ipu__pipeline_after_load(ipu_session *s); /* copy the anchor ranges into both sets */
/* Whether this run_main can use the pipeline (pl_on and no subgraph takes its rows from
 * output slots); one step through it. */
bool ipu__pipeline_usable(ipu_session *s);
ipu_status ipu__pipeline_run_main(ipu_session *s, ipu_step_result *r);
/* Store a subgraph id as the first element of the index tensor. */
void ipu__store_index(void *p, const ipu_tensor_desc *d, uint32_t v);

/* session_stages.c (manual sharding) */
IPU_NODISCARD ipu_status ipu__stages_create(ipu_session *s); /* pipelined executables only */
void ipu__stages_destroy(ipu_session *s);
/* Every stage and its copies in order over frame f (one iteration of a sharded executable). */
IPU_NODISCARD ipu_status ipu__run_stages(ipu_session *s, const ipu__frame *f);
/* Whether run_main runs the stage pipeline (pipelined executable whose inputs are queued);
 * one step through it. */
bool ipu__stages_pipelined(const ipu_session *s);
ipu_status ipu__stages_run_main(ipu_session *s, ipu_step_result *r);

/* Thread-local: non-zero while the thread runs a user stream or slot-done callback. */
extern _Thread_local int ipu__tl_in_callback;

#endif
