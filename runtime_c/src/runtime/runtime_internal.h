/* Internal state of ipu_runtime and ipu_request, shared by runtime.c (lifecycle, reset, stats),
 * device.c (the device thread and failure handling) and request.c (requests and submission).
 *
 * The runtime is built on an ipu_session (session_internal.h): create = session create (ring
 * capacity = ring_buffer_size_multiplier * batches_per_step, min 2, times the rows per batch with
 * dynamic batching so one-row requests can fill a batch) + default bindings (weights
 * TENSOR_DATA, everything else QUEUE, the fused index anchor included) + run_load on the calling
 * thread. The device thread is started by the first submit (so stream callbacks, which rebind
 * anchors, can be set until then); it loops on ipu_session_run_main.
 *
 * Slots. A request becomes slots: without batching one chunk per batch, with batching one chunk
 * of num_rows rows; per chunk, in this order: the index slot (fused models; it points at the
 * request's own uint32 subgraph id), one slot per queue-bound input of the subgraph, one per
 * queue-bound output - the order in which the device consumes them, so a push blocked on a full
 * ring never waits for something behind it. Submitters are serialised by submit_mu (this makes
 * every ring single-producer and a request's slots contiguous). There is no control ring: the
 * device runs an iteration when the subgraph's queue-bound anchors have slots, so a request needs
 * at least one queue-bound anchor (or the index slot of a fused model); submit refuses requests
 * whose anchors are all served by stream callbacks.
 *
 * Completion. Every slot holds a request reference and has slot_done (request.c) as its done
 * callback: an error status completes the request with it (first completion wins, by a CAS
 * PENDING -> CLAIMED); otherwise `remaining` (slots not yet done) is decremented and the last one
 * completes it with IPU_OK. Input slots are done at the end of their iteration, output slots
 * once their rows are written, so a request completes after its last iteration's outputs and
 * output callbacks. IPU_ERR_CANCELLED (ipu_request_cancel: `cancelled` is one of the frame's
 * cancel flags of the request's iterations) counts down like IPU_OK and sets `cut`: the last slot then
 * completes the request with IPU_ERR_CANCELLED, and the runtime stays healthy. The winner stores the status, publishes DONE, records stats, runs the user's
 * done callback, then sets `finished` under the request mutex and broadcasts.
 *
 * Failures. A slot failing with an error (while not closed) or run_main returning one sets
 * health = FAILING (under state_mu) and wakes producers and the device: a submitter blocked on
 * a full ring (ipu__session_enqueue with abort = &health) gives up; a request it had partly
 * queued completes with the failure; an iteration in flight (concurrent iterations, overlap I/O,
 * stage pipeline) stops waiting for slots such a request will never queue (the session's abort
 * flag is &health) and fails. The device then waits out submit_mu (no producer left), disconnects every
 * queued slot with the failure status (every enqueued request fails), and with auto_reset reruns
 * Load (health = OK); otherwise health = NEEDS_RESET and submits fail with IPU_ERR_NEEDS_RESET
 * until ipu_runtime_reset, which asks the device thread (a device task, below) to
 * rerun Load and waits for it (or runs Load itself if the device never started). Submits that
 * find health == FAILING with auto_reset wait (without submit_mu) for the device to finish.
 *
 * Close: closed = 1 (under state_mu, broadcast), session stop (wakes device and producers), a
 * submit_mu barrier (no producer left, device_started final), join the device, disconnect every
 * queued slot with IPU_ERR_CLOSED on the closing thread, and complete the orphan (a request
 * partly queued when the session stopped, see request.c). Lock order: close_mu -> submit_mu ->
 * state_mu; the device thread takes state_mu alone or submit_mu alone. Done and stream callbacks
 * run with ipu__tl_in_callback set; submit, close and reset refuse to run there.
 *
 * Stats: counters are relaxed atomics; latency is a log-linear histogram (16 sub-buckets per
 * power of two) of submit -> completion of successful requests; throughput counts successful
 * completions in 20 buckets of 100 ms tagged with their epoch (a ~2 s sliding window). */
#ifndef IPU_RUNTIME_INTERNAL_H
#define IPU_RUNTIME_INTERNAL_H

#include "session_internal.h"

enum { IPU__REQ_PENDING = 0, IPU__REQ_CLAIMED = 1, IPU__REQ_DONE = 2 };
enum { IPU__ROLE_NONE = 0, IPU__ROLE_RING = 1, IPU__ROLE_CALLBACK = 2 };
enum { IPU__HEALTH_OK = 0, IPU__HEALTH_FAILING = 1, IPU__HEALTH_NEEDS_RESET = 2 };
enum { IPU__TASK_RESET = 0, IPU__TASK_READ = 1, IPU__TASK_WRITE = 2 };

typedef struct ipu__task {
    int kind; /* IPU__TASK_* */
    uint32_t anchor;
    void *buf; /* READ: destination; WRITE: source (not written) */
    size_t nbytes;
} ipu__task;

#define IPU__LAT_SUB 16u
#define IPU__LAT_BUCKETS (64u * IPU__LAT_SUB)
#define IPU__TP_BUCKETS 20u
#define IPU__TP_BUCKET_NS 100000000ull

struct ipu_request {
    atomic_uint_fast64_t refs;
    atomic_int state;               /* IPU__REQ_* */
    atomic_int finished;            /* set under mu after the done callback returned */
    atomic_int cancelled;           /* ipu_request_cancel: its programs stop (frame cancel) */
    atomic_int cut;                 /* a slot completed IPU_ERR_CANCELLED (request.c) */
    atomic_uint_fast64_t remaining; /* slots not yet done */
    ipu_status status;              /* valid once state == DONE */
    uint32_t subgraph;
    uint32_t index_value; /* what the index slot points at */
    uint64_t t_submit;
    ipu_runtime *rt;
    ipu_request_done_fn done;
    void *user_data;
    void *inputs_copy; /* inputs an output overlaps, copied at submit (request.c) */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    char msg[IPU__MSG_BYTES];
};

typedef struct ipu__tp_bucket {
    atomic_uint_fast64_t epoch, count;
} ipu__tp_bucket;

struct ipu_runtime {
    const ipu_executable *exe;
    ipu_runtime_config cfg;
    ipu_session *s;
    uint32_t num_anchors, num_subgraphs, index_anchor;
    uint64_t t_created;

    int sync_ready;
    pthread_mutex_t submit_mu; /* serialises producers; guards submitted, orphan, device start */
    pthread_mutex_t close_mu;  /* serialises close */
    pthread_mutex_t state_mu;  /* health details, reset generations */
    pthread_cond_t state_cv;   /* health or reset progress changed, or closed */
    pthread_t device;
    int device_started;  /* under submit_mu */
    int close_done;      /* under close_mu */
    bool submitted;      /* under submit_mu */
    ipu_request *orphan; /* under submit_mu: partially queued when the session stopped */
    bool inline_ok;      /* ipu_runtime_execute may run requests inline (runtime.c) */
    bool inline_alone;   /* ... only without concurrent callers (request.c) */
    void **in_place;     /* inline_ok: per anchor, its tensor's arena pointer when inline
                                * requests may use the caller's buffer instead (runtime.c) */

    ipu_poll_fn poll; /* ipu_runtime_set_poll: for inline requests (request.c) */
    void *poll_ud;
    atomic_uint executing;           /* callers inside ipu_runtime_execute */
    atomic_uint_fast64_t crowded_ns; /* when a caller last found another one inside it */

    _Alignas(64) atomic_bool closed;
    atomic_int health; /* IPU__HEALTH_*: also the producers' abort flag */
    atomic_int task_pending;
    /* Written under state_mu; the session reads both lock-free once it sees health != OK
     * (written before that store, rewritten only by the device thread after run_main). */
    ipu_status fail_status;
    char fail_msg[IPU__MSG_BYTES];
    /* Device tasks: work that must run on the device thread between steps (ipu_runtime_reset,
     * variable access). One at a time (task_busy); the caller stores `task`, bumps task_req_gen,
     * sets task_pending and interrupts the session, then waits for task_done_gen (or runs it
     * itself under submit_mu while the device thread has not started). The device takes a task
     * (task_taken_gen) only while the runtime is open, and a caller that sees the runtime
     * closed still waits for a task taken (it may be writing the caller's buffer). Under
     * state_mu. */
    ipu__task task;
    bool task_busy;
    uint64_t task_req_gen, task_taken_gen, task_done_gen;
    ipu_status task_status;
    char task_msg[IPU__MSG_BYTES];

    _Alignas(64) atomic_uint_fast64_t st_submitted, st_completed, st_failed;
    atomic_uint_fast64_t st_in_place; /* request buffers the program used in place */
    atomic_uint_fast64_t lat[IPU__LAT_BUCKETS];
    ipu__tp_bucket tp[IPU__TP_BUCKETS];
};

/* Role of anchor a in requests for subgraph sub. */
static inline int ipu__anchor_role(const ipu_runtime *rt, uint32_t a, uint32_t sub) {
    const ipu_session *s = rt->s;
    if (!ipu__in_subgraph(s, a, sub)) return IPU__ROLE_NONE;
    if (s->binds[a].kind == IPU_BIND_CALLBACK) return IPU__ROLE_CALLBACK;
    return s->binds[a].kind == IPU_BIND_QUEUE ? IPU__ROLE_RING : IPU__ROLE_NONE;
}

/* Streamed at all (not a weight, not the index)? */
static inline bool ipu__streamed(const ipu_runtime *rt, uint32_t a) {
    return a != rt->index_anchor && !rt->s->anchors[a].has_tensor_data;
}

static inline bool ipu__closed(const ipu_runtime *rt) {
    return atomic_load_explicit(&rt->closed, memory_order_acquire);
}

/* request.c */
/* Complete `req` once: returns false if it was already completed. Runs the done callback on the
 * calling thread. The caller must hold a reference. `msg` may be NULL. */
bool ipu__request_complete(ipu_runtime *rt, ipu_request *req, ipu_status st, const char *msg);
void ipu__request_unref(ipu_request *req);
/* The cancel flag of the request a queued slot belongs to (the session's cancel_of). */
const atomic_int *ipu__request_cancel_flag(const ipu_slot *sl);
/* Is the request a queued slot belongs to the only one pending (the session's alone_of)? */
bool ipu__request_alone(const ipu_slot *sl);

/* device.c */
void *ipu__device_main(void *arg);
IPU_NODISCARD ipu_status ipu__start_device(ipu_runtime *rt);
/* First failure wins: health OK -> FAILING with status and message; wakes producers and the
 * device. */
void ipu__mark_failed(ipu_runtime *rt, ipu_status st, const char *msg);
/* Run `t` on the thread that owns the device; a reset also sets health. */
ipu_status ipu__run_task(ipu_runtime *rt, const ipu__task *t);
/* After a failure, nothing queued, on the thread owning the device: reload with auto_reset,
 * else NEEDS_RESET (under state_mu, broadcast). */
void ipu__recover(ipu_runtime *rt);

/* runtime.c */
void ipu__stats_record(ipu_runtime *rt, ipu_status st, uint64_t t_submit);

#endif
