/* Session: the low-level API (Model Runtime's Session + QueueManager).
 *
 * A session owns the device state of one loaded executable: the arena, the compute workers, the
 * anchor bindings and one SPSC ring of slots per queue-bound anchor. Programs run on the thread
 * that calls ipu_session_run_load / ipu_session_run_main. ipu_runtime (ipu_runtime.h) is built on
 * a session: a device thread calling ipu_session_run_main in a loop, plus requests whose batches
 * become slots enqueued here.
 *
 * Bindings (set before ipu_session_run_load). Defaults: inputs without tensor data and outputs
 * -> IPU_BIND_QUEUE; weights (IPU_ANCHOR_TENSOR_DATA) -> IPU_BIND_TENSOR_DATA (bound zero-copy
 * by the Load program's BIND). IPU_BIND_EMPTY feeds zeros / discards the output. IPU_BIND_CALLBACK
 * calls a stream callback. A weight bound to QUEUE or CALLBACK is filled once, by the Load
 * program, from that source instead of the container (the first slot of its queue).
 *
 * Slots. A slot is one user buffer for one anchor: `rows` rows along the batching dimension
 * (rows == 0 or batching disabled: exactly one batch). With batching_dim set, the device
 * assembles each batch from consecutive slots of the anchor (a slot may span batches); every
 * queue-bound anchor must be fed the same row counts in the same order. A batch that stays
 * partial for batch_timeout_ns is zero-padded and run; rows of padding are discarded on output.
 * An input slot's done callback runs once its rows have been copied in (at the end of the
 * iteration that took its last rows, with that iteration's status); an output slot's once its
 * rows have been written (or with an error status: the slot was not, or not fully, served).
 * Every enqueued slot gets exactly one done call. Done callbacks run on the thread running the
 * program (or on the thread calling ipu_session_disconnect / ipu_session_destroy).
 *
 * Steps. ipu_session_run_main runs one step: up to batches_per_step iterations. For fused
 * models an iteration first reads the index anchor (a uint32 subgraph id, queue- or
 * callback-bound) and then runs that subgraph's Main program with that subgraph's anchors only.
 * Once a step has run an iteration, waiting longer than timeout_ns for the next input ends the
 * step (padding: the remaining iterations are skipped and counted). timeout_ns == 0 waits
 * forever; with flush_on_waiting_outputs the step is only padded while an output slot is queued.
 * ipu_session_flush pads the step in progress at once (Model Runtime's flushAll).
 *
 * Sharded executables (ipu_executable_stage): an iteration runs every stage and its copy program
 * in order. Pipelined ones run a step as a pipeline of lock-step ticks in which the stages work
 * on consecutive batches concurrently, each on its own group of workers (session_stages.c); the
 * slot, padding and error semantics are those of the serial loop (a failed batch's slots complete
 * with its error; the batches already in flight still complete before run_main returns it).
 * Overlap I/O is not used with pipelined executables.
 *
 * Threads: run_load/run_main/flush/disconnect from one "device" thread at a time; enqueue from
 * one producer thread per anchor at a time (callers serialise, as with Model Runtime's queues);
 * stop, queue_depth and stats from any thread. */
#ifndef IPU_SESSION_H
#define IPU_SESSION_H

#include "ipu_executable.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ipu_session ipu_session;

typedef enum ipu_binding {
    IPU_BIND_QUEUE = 1,
    IPU_BIND_EMPTY = 2,
    IPU_BIND_CALLBACK = 3,
    IPU_BIND_TENSOR_DATA = 4,
} ipu_binding;

/* Most compute workers a session or runtime takes (num_threads); more is
 * IPU_ERR_INVALID_ARGUMENT. */
#define IPU_MAX_THREADS 256u

typedef struct ipu_session_config {
    /* BEGIN GENERATED fields: tools/gen_config.py from pyipu/_options.py */
    uint32_t num_threads;         /* compute workers incl. the thread running the programs; 0 =
                                     usable CPUs (default 0) */
    uint32_t ring_capacity;       /* slots per anchor ring; 0 = 2 * batches_per_step (default 0) */
    uint64_t timeout_ns;          /* wait for the next input of a started step before padding it;
                                     0 = forever (default 10000000) */
    uint64_t batch_timeout_ns;    /* wait to complete a partial batch; 0 = same as timeout_ns
                                     (default 0) */
    uint32_t batching_dim;        /* IPU_NO_INDEX = disabled (slots and requests are whole
                                     batches) (default IPU_NO_INDEX) */
    int flush_on_waiting_outputs; /* pad only while an output slot is queued (default 0) */
    int check_package_hash;       /* IPU_ERR_HASH_MISMATCH for a container from another compiler
                                     version (default 1) */
    int overlap_io;               /* -1: on when the executable has num_io_tiles > 0; 0 off; 1 on
                                     (default -1) */
    int pin_threads;              /* each compute helper (and a runtime's device thread) on its
                                     own CPU, when the process may use at least num_threads CPUs
                                     (default 1) */
    /* END GENERATED fields */
} ipu_session_config;

/* Overlap I/O. With overlap_io on, run_main runs a step as a Load/Compute/Store pipeline: an I/O
 * thread owned by the session copies the inputs of iteration i+1 in and the outputs of iteration
 * i-1 out (firing their done callbacks) while the workers compute iteration i. The streamed
 * anchors are double-buffered (two staging sets). Results, padding, batching and done-callback
 * semantics are those of the serial loop; done callbacks may then also run on the I/O thread,
 * and stream callbacks of inputs and outputs run on it. When a stage fails, an iteration already
 * loaded still runs before run_main returns the error. Executables whose memory plan places a
 * tensor partially over a streamed anchor (or over two) run serially: stats.overlap_io says
 * whether the pipeline is in use (also 0 for a subgraph with queue-bound outputs but no
 * queue-bound input). */

/* A config holding the default noted with each field above. */
IPU_API ipu_session_config ipu_session_config_default(void);

/* `exe` is borrowed and must outlive the session; `cfg` is copied (NULL = defaults). Allocates
 * the arena, the rings and the tables and starts the compute workers (and the I/O thread with
 * overlap I/O). On success *out is a new session the caller owns. Errors:
 * IPU_ERR_INVALID_ARGUMENT, IPU_ERR_HASH_MISMATCH (check_package_hash), IPU_ERR_NOMEM (also
 * when a thread cannot be started for lack of resources), IPU_ERR_INTERNAL; then no thread is
 * left running and nothing stays allocated. */
IPU_API IPU_NODISCARD ipu_status ipu_session_create(const ipu_executable *exe,
                                                    const ipu_session_config *cfg,
                                                    ipu_session **out);
/* Stop, complete every queued slot with IPU_ERR_CLOSED (their done callbacks run on this
 * thread), join the workers, free. Accepts NULL. Not from a callback of this session, and not
 * while another thread is inside run_load/run_main/enqueue. */
IPU_API void ipu_session_destroy(ipu_session *s);

/* Stream callback: moves one batch of `anchor` between user memory and the device buffer `buf`
 * (nbytes bytes, the anchor's desc.nbytes): an input's callback fills `buf`, an output's reads
 * it. `buf` and `anchor` are borrowed for the duration of the call only. Called once per
 * iteration that uses the anchor, in iteration order, never concurrently for one session: on the
 * thread running the program (run_load for weights, run_main otherwise; with overlap I/O, the
 * session's I/O thread). Returning a status other than IPU_OK fails that iteration with it: the
 * iteration's slots (or a runtime's requests) complete with that status. The callback must not
 * call ipu_session_* functions of its session (nor ipu_runtime_submit/close/reset/destroy of
 * the runtime it serves: those return IPU_ERR_INVALID_STATE). */
typedef ipu_status (*ipu_stream_fn)(void *buf, size_t nbytes, const ipu_anchor_info *anchor,
                                    void *user_data);
/* Bind `anchor` (< num_anchors) to a source/sink. Before ipu_session_run_load only (else
 * IPU_ERR_INVALID_STATE). `fn` is required for IPU_BIND_CALLBACK and must be NULL otherwise;
 * `user_data` is passed to `fn` and borrowed: it must stay valid until the session is destroyed
 * or the anchor rebound. An error (IPU_ERR_INVALID_ARGUMENT for a bad anchor, binding or fn)
 * changes nothing, and `fn` is never called. */
IPU_API IPU_NODISCARD ipu_status ipu_session_bind(ipu_session *s, uint32_t anchor, ipu_binding b,
                                                  ipu_stream_fn fn, void *user_data);
/* Current binding of `anchor` (0 for NULL `s` or an anchor out of range). */
IPU_API ipu_binding ipu_session_binding(const ipu_session *s, uint32_t anchor);

/* Run the Load program on the calling thread (once; again later to reset the device state):
 * binds and copies the weights (from the container, or from the anchor's queue or callback).
 * Errors: the Load program's, a weight callback's status, IPU_ERR_CLOSED once stopped,
 * IPU_ERR_NOMEM. The session stays usable: Load can be run again. */
IPU_API IPU_NODISCARD ipu_status ipu_session_run_load(ipu_session *s);

typedef struct ipu_step_result {
    uint32_t iterations;        /* iterations computed in this step */
    uint32_t padded_iterations; /* iterations skipped by timeout or flush */
} ipu_step_result;
/* Run one step of the Main program (see above). IPU_ERR_CLOSED once stopped. On an error the
 * slots of the failed iteration complete with it; the session stays usable. `out` may be NULL. */
IPU_API ipu_status ipu_session_run_main(ipu_session *s, ipu_step_result *out);
/* Make a blocked or future run_main / enqueue return IPU_ERR_CLOSED. Idempotent, any thread. */
IPU_API void ipu_session_stop(ipu_session *s);
/* Copy variable `anchor` (ipu_executable_variable) out of / into the device between steps, on
 * the thread that runs the programs (after run_load, not during run_main, not from a callback:
 * IPU_ERR_INVALID_STATE). nbytes must be the anchor's desc.nbytes (IPU_ERR_INVALID_ARGUMENT);
 * IPU_ERR_NOT_FOUND for an anchor that is not a variable. A written value is what the next
 * step reads; ipu_session_run_load restores every variable to its weight's value. */
IPU_API IPU_NODISCARD ipu_status ipu_session_read_variable(ipu_session *s, uint32_t anchor,
                                                           void *dst, size_t nbytes);
IPU_API IPU_NODISCARD ipu_status ipu_session_write_variable(ipu_session *s, uint32_t anchor,
                                                            const void *src, size_t nbytes);
IPU_API int ipu_session_stopped(const ipu_session *s);

/* Called exactly once per queued slot with its final status (see "Slots" above for when and
 * on which thread). It may enqueue on another anchor but must not destroy the session. */
typedef void (*ipu_slot_done_fn)(ipu_status status, void *user_data);
typedef struct ipu_slot {
    void *data;            /* borrowed until done is called; inputs are only read */
    uint64_t nbytes;       /* rows * bytes per row (or the anchor's nbytes for a whole batch) */
    uint32_t rows;         /* rows along batching_dim; 0 = one whole batch */
    ipu_slot_done_fn done; /* may be NULL */
    void *user_data;
} ipu_slot;
/* Queue a slot on a QUEUE-bound anchor; waits while the ring is full, up to timeout_ns
 * (UINT64_MAX = forever): IPU_ERR_TIMEOUT then, IPU_ERR_CLOSED if stopped. `slot` itself is
 * copied; slot->data is borrowed until its done callback (inputs are only read, outputs are
 * written by the device thread). IPU_ERR_INVALID_STATE for an anchor not bound to QUEUE,
 * IPU_ERR_INVALID_ARGUMENT for a bad anchor, size or row count. On error the slot was not queued and its done callback is never
 * called. Allocates nothing. */
IPU_API IPU_NODISCARD ipu_status ipu_session_enqueue(ipu_session *s, uint32_t anchor,
                                                     const ipu_slot *slot, uint64_t timeout_ns);
/* Pad the step in progress now (flushAll): sets a flag the device observes while it waits for
 * input; a partial batch runs at once, otherwise the step ends. No effect when no step is in
 * progress. Any thread (it takes the session's wake-up mutex: not from a signal handler). */
IPU_API void ipu_session_flush(ipu_session *s);
/* Complete every queued slot with `status` (disconnectAll uses IPU_ERR_CLOSED). Device thread
 * only, or after the device thread has stopped. */
IPU_API void ipu_session_disconnect(ipu_session *s, ipu_status status);
/* Slots queued on an anchor (approximate from other threads; 0 for NULL or out of range). */
IPU_API size_t ipu_session_queue_depth(const ipu_session *s, uint32_t anchor);

typedef struct ipu_session_stats {
    uint64_t steps, iterations, padded_iterations, padded_rows;
    uint32_t num_threads;
    int overlap_io; /* 1: run_main uses the overlap I/O pipeline (see ipu_session_config) */
    /* Pipelined sharded executables: compute phases run, and those in which more than one
     * stage computed at the same time on separate worker groups. */
    uint64_t pipeline_ticks, concurrent_ticks;
    /* Iterations that ran alongside another one, each alone on a worker (several batches were
     * queued at once; see docs/runtime.md). */
    uint64_t concurrent_iterations;
} ipu_session_stats;
/* Counters since creation; any thread, without stopping the session. */
IPU_API void ipu_session_get_stats(const ipu_session *s, ipu_session_stats *out);

#ifdef __cplusplus
}
#endif
#endif
