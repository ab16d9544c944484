/* Memory and logging hooks for embedders: a pluggable allocator and a log callback.
 *
 * Both are PROCESS-WIDE settings of the library (like SQLite's SQLITE_CONFIG_MALLOC / _LOG,
 * libcurl's curl_global_init_mem or CPython's PyMem_SetAllocator), not per-object ones: memory
 * moves between objects and threads (a request allocated by the submitting thread is freed on
 * the device thread; an executable borrows its container's tables), so one allocator must own
 * every block the library holds. See docs/c-api.md, "Allocator" and "Logging".
 *
 * What goes through the allocator: every heap block the library allocates, on any thread
 * (objects, tables, rings, arenas, scratch, requests, the buffer of
 * ipu_container_writer_finish). What does not: the read-only file mapping made by
 * ipu_container_open (mmap), the stacks of the threads the library starts (pthread_create) and
 * the C library's own internal state (e.g. thread-local storage). */
#ifndef IPU_ALLOC_H
#define IPU_ALLOC_H

#include "ipu_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocation hooks. Every hook receives the allocator's user_data. The library never passes a
 * size of 0, never passes NULL to realloc_fn or free_fn, and never frees a block with a hook
 * other than the one that matches its allocation (malloc_fn/realloc_fn blocks with free_fn,
 * aligned_alloc_fn blocks with aligned_free_fn). Returning NULL means "out of memory": the
 * library then returns IPU_ERR_NOMEM (and for realloc_fn keeps using the old block, as C's
 * realloc). Hooks are called from ANY thread, including the library's own device, I/O and
 * worker threads, possibly concurrently: they must be thread-safe. They must not call back
 * into the library (except ipu_status_str/ipu_status_name). */
typedef struct ipu_allocator {
    void *(*malloc_fn)(size_t size, void *user_data);             /* required */
    void *(*realloc_fn)(void *ptr, size_t size, void *user_data); /* required */
    void (*free_fn)(void *ptr, void *user_data);                  /* required */
    /* Optional pair: both NULL, and the library aligns inside malloc_fn blocks itself (it
     * over-allocates by alignment + sizeof(void *)). `alignment` is a power of two >= 16. */
    void *(*aligned_alloc_fn)(size_t alignment, size_t size, void *user_data);
    void (*aligned_free_fn)(void *ptr, void *user_data);
    void *user_data; /* passed to every hook; borrowed, must stay valid while installed */
} ipu_allocator;

/* Install `a` (copied) as the process-wide allocator, or restore the system allocator (malloc,
 * realloc, free, posix_memalign) with a == NULL. Only allowed while the library holds no block
 * (ipu_allocated_blocks() == 0: every container, writer, executable, session, runtime, ring
 * and request destroyed or released, and every ipu_container_writer_finish buffer freed);
 * otherwise IPU_ERR_INVALID_STATE and nothing changes. IPU_ERR_INVALID_ARGUMENT if a required
 * hook is missing or only one of the aligned pair is given. Not synchronised with other library
 * calls: call it at start-up, or while no other thread uses the library. */
IPU_API IPU_NODISCARD ipu_status ipu_set_allocator(const ipu_allocator *a);
/* The allocator in use (the system one: hooks that call malloc/realloc/free/posix_memalign). */
IPU_API void ipu_get_allocator(ipu_allocator *out);
/* Blocks the library currently holds (allocated through its allocator and not yet freed), any
 * thread. 0 after everything has been destroyed: a cheap leak check for embedders. */
IPU_API size_t ipu_allocated_blocks(void);
/* Free a block the library handed to the caller (ipu_container_writer_finish). Accepts NULL. */
IPU_API void ipu_free(void *ptr);

/* Log levels, in increasing severity. */
typedef enum ipu_log_level {
    IPU_LOG_DEBUG = 0,   /* every error status returned, with its detailed message */
    IPU_LOG_INFO = 1,    /* object life cycle: containers opened, runtimes started and closed */
    IPU_LOG_WARNING = 2, /* degraded but working: a fallback after an allocation failure */
    IPU_LOG_ERROR = 3,   /* a device iteration failed; its requests fail (see ipu_runtime.h) */
    IPU_LOG_OFF = 4,
} ipu_log_level;

/* Receives one message (NUL-terminated, no trailing newline, at most 511 bytes; borrowed for
 * the duration of the call). Called on the thread where the event happens (the caller's, or
 * the library's device or I/O thread), but never two calls at once: the library serialises them
 * with a mutex, so the callback must not call ipu_set_log_callback and should return quickly.
 * It may call ipu_status_str / ipu_status_name / ipu_last_error_message. */
typedef void (*ipu_log_fn)(ipu_log_level level, const char *message, void *user_data);

/* Install `fn` for messages at `min_level` or above (fn NULL or IPU_LOG_OFF: no logging, the
 * default). Process-wide; any thread, at any time: once it returns, the previous callback is
 * not running and will not be called again. The library never writes to stderr or stdout:
 * without a callback nothing is printed. `user_data` is borrowed. */
IPU_API void ipu_set_log_callback(ipu_log_fn fn, void *user_data, ipu_log_level min_level);
/* Name of a level ("warning"), or NULL for an unknown one. */
IPU_API const char *ipu_log_level_name(ipu_log_level level);

#ifdef __cplusplus
}
#endif
#endif
