/* Runtime: loads an executable onto a virtual IPU and serves requests. Built on ipu_session
 * (ipu_session.h): a session, a device thread calling ipu_session_run_main in a loop, and
 * requests whose batches become session slots.
 *
 * Lifecycle: ipu_runtime_create (checks the package hash, allocates the device arena, runs the
 * Load program, starts the compute workers; the device thread starts with the first submit) ->
 * any number of
 * ipu_runtime_submit calls from any threads -> ipu_runtime_close -> ipu_runtime_destroy.
 *
 * Device loop (one device thread per runtime): a step is batches_per_step iterations of the Main
 * program. Each iteration pulls one batch per input anchor through that anchor's stream callback
 * (by default: pop the next slot of the anchor's SPSC input ring and copy it into the arena), runs
 * the Main program of the selected subgraph over the compute workers (each instruction's work is
 * split into ranges, with a barrier between instructions), then pushes one batch per output anchor
 * through its stream callback (by default: pop the next output slot and copy out of the arena).
 * When a step has started and no input arrives for timeout_ns, the rest of the step is padded
 * (skipped and counted in stats.padded_iterations). timeout_ns == 0 waits forever.
 *
 * Dynamic batching (batching_dim != IPU_NO_INDEX): a request carries any number of rows along
 * that dimension; full batches run at once, a remainder waits up to the batch timeout to merge
 * with other requests' rows and is then zero-padded; each request gets exactly its own rows.
 * With no_wait_when_alone a remainder of the only request pending runs at once.
 *
 * Failures: when an iteration fails, every request already enqueued fails with the same status
 * (Model Runtime's rule). With auto_reset the Load program runs again and later requests are
 * served; without it the runtime refuses new requests with IPU_ERR_NEEDS_RESET until
 * ipu_runtime_reset.
 *
 * Requests: a request carries N batches per anchor, stacked along dim 0, and becomes N slots in
 * every anchor ring it uses. Submission takes the runtime's submit mutex so slots of one request
 * are contiguous in every ring (this is what makes the rings single-producer). Every request that
 * ipu_runtime_submit accepted completes exactly once: with IPU_OK, with the error of the step that
 * ran it, or with IPU_ERR_CLOSED when the runtime is closed first. If submit returns an error,
 * nothing was queued and the done callback is never called.
 *
 * Threads: ipu_runtime_submit, ipu_request_* and ipu_runtime_get_stats may be called from any
 * thread. Stream callbacks and done callbacks run on the device thread; ipu_runtime_submit and
 * ipu_runtime_close called from them return IPU_ERR_INVALID_STATE (and ipu_runtime_destroy must
 * not be called there). ipu_request_wait returns only after the request's done callback has
 * returned, so a done callback must not wait on its own request. Idle workers and the idle device
 * thread sleep. */
#ifndef IPU_RUNTIME_H
#define IPU_RUNTIME_H

#include "ipu_session.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ipu_runtime ipu_runtime;
typedef struct ipu_request ipu_request;

typedef struct ipu_runtime_config {
    /* BEGIN GENERATED fields: tools/gen_config.py from pyipu/_options.py */
    uint32_t num_threads;                 /* compute workers incl. the thread running the
                                             programs; 0 = usable CPUs (default 0) */
    uint32_t ring_buffer_size_multiplier; /* ring capacity = multiplier * batches_per_step slots
                                             (x rows per batch with dynamic batching) (default 2) */
    uint64_t timeout_ns;                  /* wait for the next input of a started step before
                                             padding it; 0 = forever (default 10000000) */
    uint64_t batch_timeout_ns;            /* wait to complete a partial batch; 0 = same as
                                             timeout_ns (default 0) */
    uint32_t batching_dim;                /* IPU_NO_INDEX = disabled (slots and requests are
                                             whole batches) (default IPU_NO_INDEX) */
    int flush_on_waiting_outputs;         /* pad only while an output slot is queued (default 0) */
    int auto_reset;                       /* after a failure, reload and keep serving (default 0) */
    int check_package_hash;               /* IPU_ERR_HASH_MISMATCH for a container from another
                                             compiler version (default 1) */
    int validate_io_params;               /* require every anchor of the model in each request
                                             (default 1) */
    int thread_safe;                      /* PopRT's option; submits are always serialised
                                             (default 1) */
    int overlap_io;                       /* -1: on when the executable has num_io_tiles > 0; 0
                                             off; 1 on (default -1) */
    int pin_threads;                      /* each compute helper (and a runtime's device thread)
                                             on its own CPU, when the process may use at least
                                             num_threads CPUs (default 1) */
    int no_wait_when_alone;               /* with batching_dim: a partial batch whose rows are
                                             those of the only request pending runs at once,
                                             without the batch timeout (default 0) */
    /* END GENERATED fields */
} ipu_runtime_config;

/* A config holding the default noted with each field above. */
IPU_API ipu_runtime_config ipu_runtime_config_default(void);

/* `exe` is borrowed and must outlive the runtime; `cfg` is copied (NULL = defaults). Runs the
 * Load program on the calling thread. On success *out is a new runtime the caller owns
 * (ipu_runtime_destroy). Errors: those of ipu_session_create and ipu_session_run_load,
 * IPU_ERR_INVALID_ARGUMENT for a bad config; then no thread is left running and nothing stays
 * allocated. */
IPU_API IPU_NODISCARD ipu_status ipu_runtime_create(const ipu_executable *exe,
                                                    const ipu_runtime_config *cfg,
                                                    ipu_runtime **out);
/* Stop the device loop, fail every pending request with IPU_ERR_CLOSED, join all threads.
 * Idempotent; later submits return IPU_ERR_CLOSED. */
IPU_API ipu_status ipu_runtime_close(ipu_runtime *rt);
/* Close (if needed) and free. Accepts NULL. Requests still referenced by the caller stay valid
 * until released. */
IPU_API void ipu_runtime_destroy(ipu_runtime *rt);

/* Failure recovery without auto_reset: run the Load program again (on the device thread, or on
 * this one before the first submit) and accept requests. Returns Load's status; any thread but
 * a callback's (IPU_ERR_INVALID_STATE); IPU_ERR_CLOSED once closed. */
IPU_API IPU_NODISCARD ipu_status ipu_runtime_reset(ipu_runtime *rt);

/* Copy variable `anchor` (ipu_executable_variable: trained weights, optimizer state) out of /
 * into the device. Runs between two steps on the device thread (the requests submitted before
 * it have run, those after it have not) and waits for it; any thread but a callback's
 * (IPU_ERR_INVALID_STATE); IPU_ERR_CLOSED once closed. Errors as ipu_session_read_variable. */
IPU_API IPU_NODISCARD ipu_status ipu_runtime_read_variable(ipu_runtime *rt, uint32_t anchor,
                                                           void *dst, size_t nbytes);
IPU_API IPU_NODISCARD ipu_status ipu_runtime_write_variable(ipu_runtime *rt, uint32_t anchor,
                                                            const void *src, size_t nbytes);

/* Stream callback (ipu_stream_fn, ipu_session.h): moves one batch between user memory and the
 * device buffer; runs on the device thread; a non-OK return fails the iteration.
 * `user_data` is borrowed until the runtime is destroyed. fn NULL restores the queue.
 * Replace the queue-backed callback of `anchor` (before the first submit, else
 * IPU_ERR_INVALID_STATE; an error changes nothing and `fn` is never called). Such an anchor is
 * then served by the callback alone and must not be given in requests. A request must still
 * queue something (an anchor left to the queues, or the index of a fused model): the device
 * runs an iteration when slots arrive, so requests of a subgraph served only by callbacks are
 * refused with IPU_ERR_INVALID_ARGUMENT. */
IPU_API IPU_NODISCARD ipu_status ipu_runtime_set_stream_callback(ipu_runtime *rt, uint32_t anchor,
                                                                 ipu_stream_fn fn, void *user_data);

/* Called exactly once when a request completes, on the device thread (or on the closing thread
 * for requests failed by close, or on the calling thread of an inline ipu_runtime_execute,
 * which only runs requests without a done callback: so never there). `req` is borrowed: the
 * callback must not release it (the submitter's reference does that) nor wait on it; it may
 * call ipu_request_status. Never called for a request whose submit returned an error. */
typedef void (*ipu_request_done_fn)(ipu_request *req, ipu_status status, void *user_data);

typedef struct ipu_request_desc {
    uint32_t num_batches;      /* N >= 1 batches in every buffer (batching disabled) */
    uint64_t num_rows;         /* rows along batching_dim (batching enabled; >= 1) */
    const void *const *inputs; /* [num_anchors], by anchor index; NULL entries = not given */
    void *const *outputs;      /* [num_anchors], by anchor index; NULL entries = not given */
    uint32_t subgraph;         /* IPU_NO_INDEX: infer from the anchors given */
    ipu_request_done_fn done;  /* optional */
    void *user_data;
} ipu_request_desc;

/* Queue a request; any thread; may block while rings are full. `desc` and the two pointer
 * arrays are read during the call only; the buffers they point to are borrowed until the
 * request completes (inputs read, outputs written by the device thread); an output may overlap
 * an input (a request of several iterations copies such inputs here). On success *out holds
 * a reference the caller must drop with ipu_request_release, and the request completes exactly
 * once. Errors: IPU_ERR_INVALID_ARGUMENT (missing/extra anchors, counts),
 * IPU_ERR_CLOSED, IPU_ERR_NEEDS_RESET (after a failure without auto_reset),
 * IPU_ERR_INVALID_STATE (from a callback), IPU_ERR_NOMEM; then nothing was queued, *out is
 * untouched, and desc->done is never called. */
IPU_API IPU_NODISCARD ipu_status ipu_runtime_submit(ipu_runtime *rt, const ipu_request_desc *desc,
                                                    ipu_request **out);
/* Run a request synchronously, inline on the calling thread when that keeps the runtime's
 * semantics, else submit it. Inline execution happens when the model allows it (one iteration
 * per step, one subgraph, no dynamic batching, no overlap I/O or sharding; with num_threads >
 * 1 and a Main program that moves >= 32 KiB, also no other caller inside ipu_runtime_execute
 * in the last 100 ms and, with pin_threads, this thread not on a helper's CPU: the calling
 * thread then works as worker 0 of the pool), the request is one batch without a
 * done callback, no anchor is served by a stream callback, the device is healthy and idle (its
 * thread not started, or parked at the start of a step) and nothing is queued - so earlier
 * requests have all completed and order is kept. The request then runs on this thread (the
 * device thread waits, parked; other submitters wait for it, as for a full queue), is counted
 * in the stats and tracepoints like any other (one step, one iteration, latency) and a failure
 * is handled as the device would (auto_reset reloads, else IPU_ERR_NEEDS_RESET later). Returns
 * its final status with *out = NULL. Otherwise behaves exactly as ipu_runtime_submit (*out: the
 * request to wait for and release). */
IPU_API IPU_NODISCARD ipu_status ipu_runtime_execute(ipu_runtime *rt, const ipu_request_desc *desc,
                                                     ipu_request **out);
/* Wait up to timeout_ns (UINT64_MAX = forever), from any thread holding a reference. Returns
 * the request's final status (after its done callback has returned), or IPU_ERR_TIMEOUT if it
 * is still pending (the request itself is unaffected). */
IPU_API ipu_status ipu_request_wait(ipu_request *req, uint64_t timeout_ns);
/* Ask a pending request to stop: it completes, exactly once, with IPU_ERR_CANCELLED unless it
 * has already completed (or completes first with another status). A request still queued is
 * cancelled when its iteration starts; a running one between two of its program's
 * instructions, and inside a large instruction between pieces of its work items (about 5 ms
 * each). Its outputs are then unspecified; the runtime stays healthy and serves the next
 * request. Any thread holding a reference; never blocks (wait for the request to know when
 * its buffers are free: the device still reads its remaining input slots, stopping each
 * iteration at once, and it completes with its last slot). This holds on every path (serial,
 * concurrent iterations, dynamic batching, overlap I/O, stage pipeline); with dynamic batching
 * an iteration stops only once every request with rows in it is cancelled, so a request
 * sharing an iteration with another one may still complete with IPU_OK. No-op on NULL. */
IPU_API void ipu_request_cancel(ipu_request *req);
/* Poll hook for inline execution: while ipu_runtime_execute runs a request on the calling
 * thread, `fn(user_data)` is called on that thread between two instructions of the Main
 * program and between pieces of a large instruction's work, at most every
 * IPU_POLL_INTERVAL_NS (the first time after that long). A non-zero
 * return cancels the request: ipu_runtime_execute returns IPU_ERR_CANCELLED (outputs
 * unspecified, the runtime stays healthy). This lets a caller notice a signal (Python's
 * Ctrl-C) while its thread runs a long request. fn NULL removes the hook. Set it before the
 * first submit or execute (else IPU_ERR_INVALID_STATE); IPU_ERR_INVALID_ARGUMENT for NULL rt. */
#define IPU_POLL_INTERVAL_NS 20000000u
typedef int (*ipu_poll_fn)(void *user_data);
IPU_API IPU_NODISCARD ipu_status ipu_runtime_set_poll(ipu_runtime *rt, ipu_poll_fn fn,
                                                      void *user_data);
/* 1 once the request has completed (its done callback has returned), else 0. */
IPU_API int ipu_request_is_done(const ipu_request *req);
/* Final status; IPU_ERR_INVALID_STATE while pending. */
IPU_API ipu_status ipu_request_status(const ipu_request *req);
/* Drop the caller's reference (also before completion: the request still completes and its
 * buffers stay borrowed until then). Accepts NULL. The request is freed when the runtime is
 * done with it too. */
IPU_API void ipu_request_release(ipu_request *req);

typedef struct ipu_runtime_stats {
    uint64_t requests_submitted, requests_completed, requests_failed; /* failed incl. closed */
    uint64_t steps, iterations, padded_iterations, padded_rows;
    uint64_t latency_p50_ns, latency_p99_ns; /* submit -> completion, over all completed */
    double throughput_rps;                   /* completed requests/s over the last ~2 s */
    uint32_t num_threads;
    uint64_t pipeline_ticks, concurrent_ticks; /* pipelined sharded executables (session stats) */
    uint64_t concurrent_iterations;            /* session stats: queued requests run at once */
    uint64_t in_place_buffers; /* request buffers the program read or wrote in place, uncopied */
} ipu_runtime_stats;
/* Readable at any time from any thread, without stopping the runtime. */
IPU_API void ipu_runtime_get_stats(const ipu_runtime *rt, ipu_runtime_stats *out);
/* Slots queued on an anchor's ring (approximate). */
IPU_API size_t ipu_runtime_queue_depth(const ipu_runtime *rt, uint32_t anchor);

#ifdef __cplusplus
}
#endif
#endif
