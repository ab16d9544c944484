/* Tracepoints: a bounded buffer of timed load / compute / store events of a runtime's iterations
 * (Model Runtime's request tracepoints, RuntimeConfig.request_tracepoints_buffer_size).
 *
 * ipu_trace_create allocates room for `capacity` events once; recording never allocates. The
 * buffer keeps the most recent `capacity` events: older ones are overwritten and counted as
 * dropped. Attach it to a runtime before the first submit (ipu_runtime_set_trace); the device
 * thread, the overlap I/O thread and the stage pipeline then record one event per stage of every
 * iteration they run (requests run inline by ipu_runtime_execute are not traced; the stage
 * pipeline of a pipelined sharded executable records loads and stores only). Times are
 * CLOCK_MONOTONIC nanoseconds. The load stage includes the wait for the iteration's inputs.
 *
 * Threads: recording and ipu_trace_read / ipu_trace_clear may run concurrently (a mutex guards
 * the buffer). The trace must outlive every runtime it is attached to. */
#ifndef IPU_TRACE_H
#define IPU_TRACE_H

#include "ipu_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ipu_runtime ipu_runtime;
typedef struct ipu_trace ipu_trace;

typedef enum ipu_trace_kind {
    IPU_TRACE_LOAD = 1,    /* inputs gathered into the device buffers (and waited for) */
    IPU_TRACE_COMPUTE = 2, /* the Main program of the iteration's subgraph */
    IPU_TRACE_STORE = 3,   /* outputs scattered to the requests, done callbacks */
} ipu_trace_kind;

typedef struct ipu_trace_event {
    uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC */
    uint32_t kind;             /* ipu_trace_kind */
    uint32_t subgraph;
    uint64_t seq; /* 0, 1, 2, ... in recording order since create / clear */
} ipu_trace_event;

/* capacity >= 1 events. */
IPU_API IPU_NODISCARD ipu_status ipu_trace_create(size_t capacity, ipu_trace **out);
/* Accepts NULL. Detach it from every runtime first (or destroy them). */
IPU_API void ipu_trace_destroy(ipu_trace *t);
IPU_API size_t ipu_trace_capacity(const ipu_trace *t);
/* Copy the retained events, oldest first, into out[0 .. cap); *count = events copied (the most
 * recent ones when cap is smaller than the number retained); *dropped (may be NULL) = events
 * overwritten since create / clear. */
IPU_API IPU_NODISCARD ipu_status ipu_trace_read(ipu_trace *t, ipu_trace_event *out, size_t cap,
                                                size_t *count, uint64_t *dropped);
/* Forget every event (seq restarts at 0). */
IPU_API void ipu_trace_clear(ipu_trace *t);
/* Record into t (NULL = stop recording). Only before the runtime's first submit, else
 * IPU_ERR_INVALID_STATE. */
IPU_API IPU_NODISCARD ipu_status ipu_runtime_set_trace(ipu_runtime *rt, ipu_trace *t);

#ifdef __cplusplus
}
#endif
#endif
