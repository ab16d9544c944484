/* Internal state of ipu_runtime and ipu_request, shared by runtime.c (lifecycle, programs),
 * device.c (the device loop) and request.c (requests and submission).
 *
 * Queues. Every streamed anchor (an input without IPU_ANCHOR_TENSOR_DATA that is not the index
 * anchor, or an output) has one SPSC ring of ipu__slot. In addition the runtime has a CONTROL
 * ring: one slot per batch of every request, carrying the request and the selected subgraph (for
 * fused models this is the "index" stream; the device writes the subgraph id into the index
 * tensor). Every iteration starts by popping a control slot, so the device knows which request
 * and which subgraph the iteration serves, and models whose inputs are all callback-served still
 * run one iteration per requested batch.
 *
 * Producer side: submitters, serialised by submit_mu (so each ring has one producer at a time
 * and a request's slots are contiguous). For batch k a request pushes: control slot, then one slot
 * per ring anchor of its subgraph in anchor order (inputs first, then outputs) - exactly the order
 * in which the device pops them, so the device never waits for a slot that sits behind a push
 * blocked on a full ring. Consumer side: the device thread, then (after it is joined) close().
 *
 * Sleep/wake, both directions, without lost wakeups (reliability.md §5): the producer of an
 * event bumps a sequence counter (seq_cst) and then reads the waiter's flag (seq_cst); the waiter
 * sets its flag (seq_cst, under mu) and then re-reads the counter before sleeping. Whichever
 * comes second in the seq_cst order sees the other. close() sets `closed` and broadcasts under
 * mu, and every waiter re-checks `closed` under mu before sleeping.
 *
 * Requests. refs = 1 (the caller) + 1 per slot in a ring. Whoever consumes a slot drops its ref
 * after it is done with the request, so a request is alive while any slot points to it.
 * Completion: state CAS PENDING -> CLAIMED decides the single winner, which stores the status,
 * publishes DONE, runs the done callback and then sets `finished` under the request mutex and
 * broadcasts (ipu_request_wait returns after the done callback returned). */
#ifndef IPU_RUNTIME_INTERNAL_H
#define IPU_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "../interp/interp.h"
#include "threadpool.h"

#define IPU__MSG_BYTES 512
/* An instruction runs on the device thread alone when its operands total fewer bytes than this
 * (waking the helpers costs more than the work) or when it has fewer than 2 work items. */
#define IPU__PAR_MIN_BYTES ((uint64_t)32 << 10)

enum { IPU__REQ_PENDING = 0, IPU__REQ_CLAIMED = 1, IPU__REQ_DONE = 2 };
enum { IPU__ROLE_NONE = 0, IPU__ROLE_RING = 1, IPU__ROLE_CALLBACK = 2 };

typedef struct ipu__slot {
    void *ptr;        /* user memory of this batch (NULL in control slots) */
    ipu_request *req; /* holds one reference */
    uint64_t aux;     /* control slots: the subgraph id */
} ipu__slot;

typedef struct ipu__stream {
    ipu_stream_fn fn; /* NULL: served by the anchor's ring */
    void *user_data;
} ipu__stream;

struct ipu_request {
    atomic_uint_fast64_t refs;
    atomic_int state;     /* IPU__REQ_* */
    atomic_int finished;  /* set under mu after the done callback returned */
    ipu_status status;    /* valid once state == DONE */
    uint32_t num_batches;
    uint32_t subgraph;
    uint32_t remaining;   /* iterations still to run; touched by the device thread only */
    ipu_request_done_fn done;
    void *user_data;
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* CLOCK_MONOTONIC */
    char msg[IPU__MSG_BYTES];
};

struct ipu_runtime {
    const ipu_executable *exe;
    ipu_runtime_config cfg;
    uint32_t nth, bps, num_anchors, num_subgraphs;
    uint32_t index_anchor; /* IPU_NO_INDEX unless fused */
    size_t ring_capacity;

    uint8_t *arena;
    void **tensor_ptr; /* [num_tensors] */
    ipu__frame frame;
    ipu_anchor_info *anchors; /* [num_anchors] */
    ipu__stream *streams;     /* [num_anchors] */
    ipu_ring **rings;         /* [num_anchors], NULL for anchors that are never streamed */
    ipu_ring *ctrl;

    ipu__pool *pool;
    ipu_status *wstatus;             /* [nth] per-worker kernel status of the current instr */
    char (*wmsg)[IPU__MSG_BYTES];    /* [nth] per-worker kernel message */
    char dev_msg[IPU__MSG_BYTES];    /* device-thread scratch for messages */

    int sync_ready;
    pthread_mutex_t submit_mu; /* serialises producers; also guards streams[] and `submitted` */
    pthread_mutex_t close_mu;  /* serialises close */
    pthread_mutex_t mu;        /* sleep/wake of device and submitter */
    pthread_cond_t data_cv;    /* device waits for slots (CLOCK_MONOTONIC) */
    pthread_cond_t space_cv;   /* a submitter waits for ring space */
    pthread_t device;
    int device_started;
    int close_done; /* under close_mu */
    bool submitted; /* under submit_mu */
    ipu_request *orphan; /* under submit_mu: partially queued when close began (request.c) */

    _Alignas(64) atomic_uint_fast64_t push_seq;
    atomic_int dev_waiting;
    _Alignas(64) atomic_uint_fast64_t pop_seq;
    atomic_int sub_waiting;
    _Alignas(64) atomic_bool closed;

    _Alignas(64) atomic_uint_fast64_t st_submitted, st_completed, st_failed;
    atomic_uint_fast64_t st_steps, st_iterations, st_padded;
};

/* Role of anchor a in subgraph s (NONE: not streamed in s). Stable after the first submit. */
static inline int ipu__anchor_role(const ipu_runtime *rt, uint32_t a, uint32_t s) {
    const ipu_anchor_info *A = &rt->anchors[a];
    if (a == rt->index_anchor || !rt->rings[a]) return IPU__ROLE_NONE;
    if (A->subgraph != IPU_NO_INDEX && A->subgraph != s) return IPU__ROLE_NONE;
    return rt->streams[a].fn ? IPU__ROLE_CALLBACK : IPU__ROLE_RING;
}

static inline bool ipu__closed(const ipu_runtime *rt) {
    return atomic_load_explicit(&rt->closed, memory_order_acquire);
}

/* After pushing a slot (producer). */
static inline void ipu__signal_data(ipu_runtime *rt) {
    atomic_fetch_add(&rt->push_seq, 1);
    if (atomic_load(&rt->dev_waiting)) {
        pthread_mutex_lock(&rt->mu);
        pthread_cond_broadcast(&rt->data_cv);
        pthread_mutex_unlock(&rt->mu);
    }
}

/* After popping a slot (consumer). */
static inline void ipu__signal_space(ipu_runtime *rt) {
    atomic_fetch_add(&rt->pop_seq, 1);
    if (atomic_load(&rt->sub_waiting)) {
        pthread_mutex_lock(&rt->mu);
        pthread_cond_broadcast(&rt->space_cv);
        pthread_mutex_unlock(&rt->mu);
    }
}

/* request.c */
/* Complete `req` once: returns false if it was already completed. Runs the done callback on the
 * calling thread. The caller must hold a reference. `msg` may be NULL. */
bool ipu__request_complete(ipu_runtime *rt, ipu_request *req, ipu_status st, const char *msg);
void ipu__request_unref(ipu_request *req);

/* device.c */
void *ipu__device_main(void *arg);
/* Run program programs[index] on the pool; the calling thread is worker 0. */
IPU_NODISCARD ipu_status ipu__run_program(ipu_runtime *rt, uint32_t index);

#endif
