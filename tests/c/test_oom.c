/* Out-of-memory injection over the public C API.
 *
 *   test_oom [model.popef ...]
 *
 * Installs an allocator (ipu_set_allocator) that fails the k-th allocation, and for every public
 * entry point that allocates runs the call for k = 1, 2, ... until it completes without reaching
 * the k-th allocation. Each run must
 *   - return IPU_ERR_NOMEM with a message when the injected failure hit it (or, for the few
 *     documented fallbacks, succeed and still compute the right results),
 *   - leak nothing: every block is returned to the allocator once the objects are destroyed
 *     (checked here with the allocator's own count, and by LeakSanitizer in the ASan build),
 *   - leave the object it was called on usable (a request after a failed submit is served) or,
 *     for a failed create, nothing behind.
 * Two modes per entry point: only the k-th allocation fails ("once"), and every allocation from
 * the k-th on fails ("from"), which also exercises cleanup paths that would allocate.
 * The PopEF files given as arguments (examples/data/add.popef, tests/c/data/cnn.popef) are
 * opened, built into executables and served under the same loop. */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "runtime_harness.h"

/* ---- the failing allocator ---- */

typedef struct {
    atomic_ulong calls;   /* allocation calls since the last arm() */
    atomic_ulong fail_at; /* 0: never fail */
    atomic_int persistent;
    atomic_ulong fired; /* failures injected since the last arm() */
    atomic_ulong any;   /* failures injected in the current scenario run */
    atomic_long live;   /* blocks handed out and not yet freed */
} failing;

static failing F;

static int should_fail(void) {
    unsigned long n = atomic_fetch_add(&F.calls, 1) + 1, k = atomic_load(&F.fail_at);
    if (k == 0 || n < k || (n > k && !atomic_load(&F.persistent))) return 0;
    atomic_fetch_add(&F.fired, 1);
    atomic_fetch_add(&F.any, 1);
    return 1;
}

/* Blocks carry a 16-byte header with a tag, so a block freed by the wrong hook is caught. */
#define TAG_PLAIN 0x504c41494eUL
static void *f_malloc(size_t n, void *ud) {
    (void)ud;
    if (n == 0 || should_fail()) return NULL;
    unsigned long *p = malloc(n + 16);
    if (!p) return NULL;
    p[0] = TAG_PLAIN;
    atomic_fetch_add(&F.live, 1);
    return p + 2;
}
static void f_free(void *ptr, void *ud) {
    (void)ud;
    unsigned long *p = (unsigned long *)ptr - 2;
    if (p[0] != TAG_PLAIN) abort(); /* test-only: a mismatched free is a bug in the library */
    p[0] = 0;
    atomic_fetch_sub(&F.live, 1);
    free(p);
}
static void *f_realloc(void *ptr, size_t n, void *ud) {
    (void)ud;
    if (!ptr || n == 0) abort(); /* documented: never NULL, never 0 */
    if (should_fail()) return NULL;
    unsigned long *p = realloc((unsigned long *)ptr - 2, n + 16);
    return p ? p + 2 : NULL;
}
static const ipu_allocator failing_allocator = {f_malloc, f_realloc, f_free, NULL, NULL, NULL};

/* A second flavour with the aligned pair, to cover both ways of aligned allocation. */
static void *f_aligned(size_t alignment, size_t n, void *ud) {
    (void)ud;
    if (should_fail()) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, alignment, n) != 0) return NULL;
    atomic_fetch_add(&F.live, 1);
    return p;
}
static void f_aligned_free(void *p, void *ud) {
    (void)ud;
    atomic_fetch_sub(&F.live, 1);
    free(p);
}
static const ipu_allocator failing_aligned_allocator = {f_malloc,  f_realloc,      f_free,
                                                        f_aligned, f_aligned_free, NULL};

static void arm(unsigned long k, int persistent) {
    atomic_store(&F.fail_at, 0);
    atomic_store(&F.calls, 0);
    atomic_store(&F.fired, 0);
    atomic_store(&F.persistent, persistent);
    atomic_store(&F.fail_at, k);
}
static void disarm(void) { atomic_store(&F.fail_at, 0); }

/* ---- the loop ---- */

/* One scenario: runs the entry point under test with the allocator armed (the scenario arms
 * it itself, after its set-up, with arm(k, persistent)), checks its own invariants, destroys
 * everything it made and returns 0, or 1 on a failed check. */
typedef int (*scenario_fn)(unsigned long k, int persistent);

static const char *g_model_path; /* current PopEF file for the file scenarios, or NULL */
static long g_runs, g_fired;

/* Open file descriptors of this process (a failed open must not leak its fd either). */
static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

static int loop(const char *name, scenario_fn fn) {
    for (int persistent = 0; persistent < 2; persistent++) {
        unsigned long k = 1;
        for (;; k++) {
            if (k > 100000) {
                fprintf(stderr, "  %s: no end after %lu allocations\n", name, k);
                return 1;
            }
            atomic_store(&F.any, 0);
            int fds = open_fds();
            int r = fn(k, persistent);
            unsigned long fired = atomic_load(&F.any);
            disarm();
            g_runs++;
            if (r) {
                fprintf(stderr, "  %s: failed with allocation %lu failing (%s)\n", name, k,
                        persistent ? "and every later one" : "only");
                return 1;
            }
            long live = atomic_load(&F.live);
            if (live != 0 || ipu_allocated_blocks() != 0) {
                fprintf(stderr, "  %s, k=%lu (%s): %ld block(s) leaked (library count %zu)\n", name,
                        k, persistent ? "from" : "once", live, ipu_allocated_blocks());
                return 1;
            }
            if (open_fds() != fds) {
                fprintf(stderr, "  %s, k=%lu: %d file descriptor(s) leaked\n", name, k,
                        open_fds() - fds);
                return 1;
            }
            if (!fired) break; /* completed without reaching the k-th allocation */
            g_fired++;
        }
        printf("  %-28s %-4s %lu allocation points\n", name, persistent ? "from" : "once", k - 1);
    }
    return 0;
}

/* The status of a call that ran with the allocator armed: IPU_OK when no failure was injected,
 * IPU_ERR_NOMEM with a message otherwise. */
#define REQUIRE_NOMEM(st)                                 \
    do {                                                  \
        ipu_status st_ = (st);                            \
        if (atomic_load(&F.fired)) {                      \
            REQUIRE(st_ == IPU_ERR_NOMEM);                \
            REQUIRE(ipu_last_error_message()[0] != '\0'); \
        } else {                                          \
            REQUIRE(st_ == IPU_OK);                       \
        }                                                 \
    } while (0)

/* ---- helpers (run with the allocator disarmed) ---- */

static int serve_add(ipu_runtime *rt, uint32_t N, float base) {
    float x[4 * 6], y[4 * 6], z[4 * 6];
    for (int i = 0; i < 24; i++) {
        x[i] = base + (float)i;
        y[i] = 0.5f * (float)i;
        z[i] = -1;
    }
    ipu_request *req = NULL;
    REQUIRE_OK(submit_add(rt, N, x, y, z, NULL, NULL, &req));
    ipu_status st = ipu_request_wait(req, UINT64_MAX);
    ipu_request_release(req);
    REQUIRE_OK(st);
    for (uint32_t i = 0; i < N * 6; i++) REQUIRE(z[i] == x[i] + y[i]);
    return 0;
}

/* ---- scenarios ---- */

static int s_ring(unsigned long k, int persistent) {
    ipu_ring *r = NULL;
    arm(k, persistent);
    ipu_status st = ipu_ring_create(64, sizeof(uint64_t), &r);
    disarm();
    REQUIRE_NOMEM(st);
    if (st == IPU_OK) {
        uint64_t v = 7, w = 0;
        REQUIRE(ipu_ring_try_push(r, &v) && ipu_ring_try_pop(r, &w) && w == 7);
    } else {
        REQUIRE(r == NULL);
    }
    ipu_ring_destroy(r);
    return 0;
}

static int s_trace(unsigned long k, int persistent) {
    ipu_trace *t = NULL;
    arm(k, persistent);
    ipu_status st = ipu_trace_create(16, &t);
    disarm();
    REQUIRE_NOMEM(st);
    if (st == IPU_OK) {
        ipu_trace_event ev[16];
        size_t n = 99;
        REQUIRE(ipu_trace_capacity(t) == 16);
        REQUIRE_OK(ipu_trace_read(t, ev, 16, &n, NULL));
        REQUIRE(n == 0);
    } else {
        REQUIRE(t == NULL);
    }
    ipu_trace_destroy(t);
    return 0;
}

static int s_writer(unsigned long k, int persistent) {
    static const uint8_t meta[40] = {1, 2, 3};
    ipu_container_writer *w = NULL;
    arm(k, persistent);
    ipu_status st = ipu_container_writer_create(&w);
    disarm();
    REQUIRE_NOMEM(st);
    if (st != IPU_OK) return 0;
    /* add_blob: the writer keeps what it had after a failure. */
    uint32_t added = 0;
    for (uint32_t i = 0; i < 20; i++) {
        char name[32]; /* OPAQUE names must be unique */
        snprintf(name, sizeof name, "pyipu.test.%u", i);
        arm(k, persistent);
        st = ipu_container_writer_add_blob(w, i == 0 ? IPU_BLOB_METADATA : IPU_BLOB_OPAQUE, 0,
                                           i == 0 ? NULL : name, meta, sizeof meta);
        disarm();
        REQUIRE_NOMEM(st);
        if (st == IPU_OK)
            added++;
        else if (i == 0)
            break;
    }
    void *img = NULL;
    size_t size = 0;
    arm(k, persistent);
    st = ipu_container_writer_finish(w, &img, &size);
    disarm();
    if (added == 0) {
        REQUIRE(st == IPU_ERR_INVALID_STATE); /* METADATA never made it */
    } else {
        REQUIRE_NOMEM(st);
        if (st == IPU_OK) {
            ipu_container *c = NULL;
            REQUIRE_OK(ipu_container_open_memory(img, size, &c));
            REQUIRE(ipu_container_blob_count(c) == added);
            ipu_container_destroy(c);
            ipu_free(img);
        }
        /* Usable after any failure: with memory back, finish works. */
        REQUIRE_OK(ipu_container_writer_finish(w, &img, &size));
        ipu_free(img);
    }
    ipu_container_writer_destroy(w);
    return 0;
}

static int s_write_file(unsigned long k, int persistent) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/ipu_oom_%ld.popef", (long)getpid());
    ipu_container_writer *w = NULL;
    static const uint8_t meta[8];
    REQUIRE_OK(ipu_container_writer_create(&w));
    REQUIRE_OK(ipu_container_writer_add_blob(w, IPU_BLOB_METADATA, 0, NULL, meta, sizeof meta));
    arm(k, persistent);
    ipu_status st = ipu_container_writer_write_file(w, path);
    disarm();
    REQUIRE_NOMEM(st);
    REQUIRE((access(path, F_OK) == 0) == (st == IPU_OK)); /* no half-written file left */
    ipu_container_writer_destroy(w);
    unlink(path);
    return 0;
}

/* The version 2 checksum of more than 64 chunks (4 MiB each) allocates their hashes. */
static int s_checksum(unsigned long k, int persistent) {
    static const size_t n = 65 * IPU_CONTAINER_CHUNK;
    static uint8_t *big; /* zero pages, never freed: mapped once for the whole run */
    static uint64_t want;
    uint64_t sum = 0;
    if (!big) {
        big = calloc(n, 1);
        REQUIRE(big != NULL);
        if (!big) return 1;
        big[n - 1] = 1;
        REQUIRE_OK(ipu_container_checksum(big, n, 2, &want));
    }
    arm(k, persistent);
    ipu_status st = ipu_container_checksum(big, n, 2, &sum);
    disarm();
    REQUIRE_NOMEM(st);
    REQUIRE(st != IPU_OK || sum == want);
    return 0;
}

static void *g_image; /* the model's image (a malloc'd copy) for open_memory */
static size_t g_image_size;

/* Open g_image from memory, or g_model_path from the file system. */
static int open_container(unsigned long k, int persistent, int from_file) {
    ipu_container *c = NULL;
    arm(k, persistent);
    ipu_status st = from_file ? ipu_container_open(g_model_path, &c)
                              : ipu_container_open_memory(g_image, g_image_size, &c);
    disarm();
    REQUIRE_NOMEM(st);
    REQUIRE((st == IPU_OK) == (c != NULL));
    ipu_container_destroy(c);
    return 0;
}
static int s_open_memory(unsigned long k, int persistent) {
    return open_container(k, persistent, 0);
}
static int s_open_file(unsigned long k, int persistent) { return open_container(k, persistent, 1); }

static int s_executable(unsigned long k, int persistent) {
    ipu_container *c = NULL;
    ipu_executable *e = NULL;
    REQUIRE_OK(ipu_container_open_memory(g_image, g_image_size, &c));
    arm(k, persistent);
    ipu_status st = ipu_executable_create(c, &e);
    disarm();
    REQUIRE_NOMEM(st);
    REQUIRE((st == IPU_OK) == (e != NULL));
    if (e) {
        ipu_executable_info info;
        ipu_executable_get_info(e, &info);
        REQUIRE(info.num_anchors > 0);
    }
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return 0;
}

static ipu_runtime_config g_cfg;

/* Runs one request with zero inputs through any model (a PopEF file given on the command line)
 * and checks it completes. */
static int serve_any(ipu_runtime *rt, const ipu_executable *e) {
    ipu_executable_info info;
    ipu_executable_get_info(e, &info);
    const void *ins[16] = {NULL};
    void *outs[16] = {NULL};
    static uint8_t buf[16][4096];
    REQUIRE(info.num_anchors <= 16);
    for (uint32_t a = 0; a < info.num_anchors; a++) {
        ipu_anchor_info A;
        REQUIRE_OK(ipu_executable_anchor(e, a, &A));
        REQUIRE(A.desc.nbytes <= sizeof buf[a]);
        memset(buf[a], 0, sizeof buf[a]);
        if (A.has_tensor_data) continue;
        if (A.direction == IPU_DIR_INPUT)
            ins[a] = buf[a];
        else
            outs[a] = buf[a];
    }
    ipu_request_desc d = {.num_batches = 1,
                          .inputs = ins,
                          .outputs = outs,
                          .subgraph = IPU_NO_INDEX};
    if (g_cfg.batching_dim == 0) { /* dynamic batching: one whole batch of rows */
        ipu_anchor_info A;
        REQUIRE_OK(ipu_executable_anchor(e, 0, &A));
        d.num_rows = (uint64_t)A.desc.dims[0];
    }
    ipu_request *req = NULL;
    REQUIRE_OK(ipu_runtime_submit(rt, &d, &req));
    ipu_status st = ipu_request_wait(req, UINT64_MAX);
    ipu_request_release(req);
    REQUIRE_OK(st);
    return 0;
}

static int s_runtime_create(unsigned long k, int persistent) {
    ipu_container *c = NULL;
    ipu_executable *e = NULL;
    ipu_runtime *rt = NULL;
    REQUIRE_OK(ipu_container_open_memory(g_image, g_image_size, &c));
    REQUIRE_OK(ipu_executable_create(c, &e));
    arm(k, persistent);
    ipu_status st = ipu_runtime_create(e, &g_cfg, &rt);
    int fired = atomic_load(&F.fired) != 0;
    disarm();
    int r = st != (fired ? IPU_ERR_NOMEM : IPU_OK) || (st == IPU_OK) != (rt != NULL);
    if (r)
        fprintf(stderr, "  runtime_create: %s: %s\n", ipu_status_name(st),
                ipu_last_error_message());
    if (!r && rt) r = serve_any(rt, e);
    ipu_runtime_destroy(rt); /* clean up first: a leak would hide the real failure */
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return r;
}

static int g_overlap;

/* Session: create, then Load, enqueue and one step with the allocator armed. */
static int s_session(unsigned long k, int persistent) {
    m_model m = add_model(2, 3, 2);
    ipu_container *c = NULL;
    ipu_executable *e = NULL;
    ipu_session *s = NULL;
    REQUIRE_OK(build(&m, &c, &e));
    ipu_session_config cfg = ipu_session_config_default();
    cfg.num_threads = 2;
    cfg.overlap_io = g_overlap;
    arm(k, persistent);
    ipu_status st = ipu_session_create(e, &cfg, &s);
    disarm();
    REQUIRE_NOMEM(st);
    if (st == IPU_OK) {
        arm(k, persistent);
        st = ipu_session_run_load(s);
        disarm();
        REQUIRE(st == IPU_OK || st == IPU_ERR_NOMEM);
        if (st != IPU_OK) REQUIRE_OK(ipu_session_run_load(s)); /* usable: Load again */
        float x[2][6], y[2][6], z[2][6];
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 6; i++) {
                x[b][i] = (float)(b * 10 + i);
                y[b][i] = 1.0f;
                z[b][i] = 0;
            }
        for (int b = 0; b < 2; b++) {
            ipu_slot sx = {x[b], sizeof x[b], 0, NULL, NULL};
            ipu_slot sy = {y[b], sizeof y[b], 0, NULL, NULL};
            ipu_slot sz = {z[b], sizeof z[b], 0, NULL, NULL};
            REQUIRE_OK(ipu_session_enqueue(s, 0, &sx, UINT64_MAX));
            REQUIRE_OK(ipu_session_enqueue(s, 1, &sy, UINT64_MAX));
            REQUIRE_OK(ipu_session_enqueue(s, 2, &sz, UINT64_MAX));
        }
        ipu_step_result res;
        arm(k, persistent);
        st = ipu_session_run_main(s, &res);
        disarm();
        REQUIRE(st == IPU_OK || st == IPU_ERR_NOMEM);
        if (st == IPU_OK)
            for (int b = 0; b < 2; b++)
                for (int i = 0; i < 6; i++) REQUIRE(z[b][i] == x[b][i] + 1.0f);
    }
    ipu_session_destroy(s);
    ipu_executable_destroy(e);
    ipu_container_destroy(c);
    return 0;
}

/* Submit on a running runtime; afterwards the runtime must still serve. */
static int s_submit(unsigned long k, int persistent) {
    fixture f;
    ipu_runtime_config cfg = cfg_threads(2);
    m_model m = add_model(2, 3, 2);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    if (serve_add(f.rt, 3, 1.0f)) {
        fx_close(&f);
        return 1;
    } /* device thread up */
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {6, 5, 4, 3, 2, 1}, z[6] = {0};
    ipu_request *req = NULL;
    arm(k, persistent);
    ipu_status st = submit_add(f.rt, 1, x, y, z, NULL, NULL, &req);
    ipu_status done = st == IPU_OK ? ipu_request_wait(req, UINT64_MAX) : st;
    int fired = atomic_load(&F.fired) != 0;
    disarm();
    ipu_request_release(req);
    /* A failed submit queued nothing; a failure on the device thread fails the request with
     * IPU_ERR_NOMEM (the runtime then needs a reset), or hits a documented fallback (no second
     * arena: iterations run one at a time) and the request succeeds. */
    int r = 0;
    if (st != IPU_OK)
        r |= st != IPU_ERR_NOMEM || !fired || req != NULL;
    else if (done != IPU_OK)
        r |= done != IPU_ERR_NOMEM || !fired;
    if (done == IPU_OK)
        for (int i = 0; i < 6; i++) r |= z[i] != 7.0f;
    if (st == IPU_OK && done != IPU_OK && ipu_runtime_reset(f.rt) != IPU_OK) r = 1;
    if (!r) r = serve_add(f.rt, 2, 100.0f); /* still usable */
    fx_close(&f);
    REQUIRE(r == 0);
    return 0;
}

/* Execute (inline on this thread: a small model, one batch, idle device). */
static int s_execute(unsigned long k, int persistent) {
    fixture f;
    ipu_runtime_config cfg = cfg_threads(1);
    m_model m = add_model(2, 3, 1);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {1, 1, 1, 1, 1, 1}, z[6] = {0};
    const void *ins[3] = {x, y, NULL};
    void *outs[3] = {NULL, NULL, z};
    ipu_request_desc d = {.num_batches = 1,
                          .inputs = ins,
                          .outputs = outs,
                          .subgraph = IPU_NO_INDEX};
    ipu_request *req = NULL;
    arm(k, persistent);
    ipu_status st = ipu_runtime_execute(f.rt, &d, &req);
    if (st == IPU_OK && req) st = ipu_request_wait(req, UINT64_MAX);
    disarm();
    ipu_request_release(req);
    int r = 0;
    if (atomic_load(&F.fired))
        r |= st != IPU_ERR_NOMEM && st != IPU_OK;
    else
        r |= st != IPU_OK;
    if (st == IPU_OK)
        for (int i = 0; i < 6; i++) r |= z[i] != x[i] + 1.0f;
    if (st != IPU_OK) { /* a failure inline is handled as the device would: reset */
        ipu_status rs = ipu_runtime_reset(f.rt);
        r |= rs != IPU_OK;
    }
    if (!r) r = serve_add(f.rt, 1, 5.0f);
    fx_close(&f);
    REQUIRE(r == 0);
    return 0;
}

/* ---- the rest of the allocator API ---- */

static int test_allocator_api(void) {
    ipu_allocator a;
    ipu_get_allocator(&a);
    REQUIRE(a.malloc_fn && a.realloc_fn && a.free_fn && a.aligned_alloc_fn && a.aligned_free_fn);
    ipu_allocator bad = failing_allocator;
    bad.realloc_fn = NULL;
    REQUIRE(ipu_set_allocator(&bad) == IPU_ERR_INVALID_ARGUMENT);
    bad = failing_aligned_allocator;
    bad.aligned_free_fn = NULL;
    REQUIRE(ipu_set_allocator(&bad) == IPU_ERR_INVALID_ARGUMENT);
    /* Not while the library holds a block. */
    ipu_ring *r = NULL;
    REQUIRE_OK(ipu_ring_create(4, 8, &r));
    REQUIRE(ipu_allocated_blocks() > 0);
    REQUIRE(ipu_set_allocator(&failing_allocator) == IPU_ERR_INVALID_STATE);
    ipu_ring_destroy(r);
    REQUIRE(ipu_allocated_blocks() == 0);
    REQUIRE_OK(ipu_set_allocator(&failing_allocator));
    ipu_get_allocator(&a);
    REQUIRE(a.malloc_fn == f_malloc && a.aligned_alloc_fn == NULL);
    REQUIRE_OK(ipu_set_allocator(NULL)); /* back to the system allocator */
    ipu_get_allocator(&a);
    REQUIRE(a.malloc_fn != f_malloc && a.aligned_alloc_fn != NULL);
    return 0;
}

typedef struct {
    int calls, errors, bad_level;
    char last[512];
} log_sink;
static void sink_fn(ipu_log_level level, const char *msg, void *ud) {
    log_sink *s = ud;
    s->calls++;
    if (level == IPU_LOG_ERROR) s->errors++;
    if (!ipu_log_level_name(level) || level == IPU_LOG_OFF) s->bad_level++;
    snprintf(s->last, sizeof s->last, "%s", msg);
}

static int test_log_callback(void) {
    log_sink sink = {0};
    ipu_set_log_callback(sink_fn, &sink, IPU_LOG_DEBUG);
    ipu_container *c = NULL;
    REQUIRE(ipu_container_open("/nonexistent/x.popef", &c) == IPU_ERR_IO);
    REQUIRE(sink.calls == 1 && strstr(sink.last, "ERR_IO") && strstr(sink.last, "x.popef"));
    ipu_set_log_callback(sink_fn, &sink, IPU_LOG_INFO); /* DEBUG no longer delivered */
    REQUIRE(ipu_container_open("/nonexistent/x.popef", &c) == IPU_ERR_IO);
    REQUIRE(sink.calls == 1);
    fixture f;
    ipu_runtime_config cfg = cfg_threads(1);
    m_model m = add_model(2, 3, 1);
    REQUIRE_OK(fx_open(&f, &m, &cfg));
    REQUIRE(sink.calls == 2 && strstr(sink.last, "created"));
    fx_close(&f);
    REQUIRE(sink.calls == 3 && strstr(sink.last, "closed"));
    ipu_set_log_callback(NULL, NULL, IPU_LOG_DEBUG); /* off */
    REQUIRE(ipu_container_open("/nonexistent/x.popef", &c) == IPU_ERR_IO);
    REQUIRE(sink.calls == 3 && sink.bad_level == 0 && sink.errors == 0);
    REQUIRE(ipu_log_level_name(IPU_LOG_WARNING) &&
            !strcmp(ipu_log_level_name(IPU_LOG_WARNING), "warning"));
    REQUIRE(ipu_log_level_name((ipu_log_level)99) == NULL);
    return 0;
}

/* ---- OOM loops ---- */

static int oom_core(void) {
    int r = 0;
    r |= loop("ipu_ring_create", s_ring);
    r |= loop("ipu_trace_create", s_trace);
    r |= loop("ipu_container_writer_*", s_writer);
    r |= loop("writer_write_file", s_write_file);
    r |= loop("ipu_container_checksum", s_checksum);
    r |= loop("ipu_session_* (serial)", s_session);
    g_overlap = 1;
    r |= loop("ipu_session_* (overlap I/O)", s_session);
    g_overlap = 0;
    r |= loop("ipu_runtime_submit", s_submit);
    r |= loop("ipu_runtime_execute", s_execute);
    REQUIRE(r == 0);
    return 0;
}

/* open_memory, open, executable_create and runtime_create for the image in g_image. */
static int oom_model(void) {
    int r = 0;
    r |= loop("ipu_container_open_memory", s_open_memory);
    if (g_model_path) r |= loop("ipu_container_open", s_open_file);
    r |= loop("ipu_executable_create", s_executable);
    g_cfg = cfg_threads(2);
    r |= loop("ipu_runtime_create", s_runtime_create);
    g_cfg.overlap_io = 1;
    r |= loop("ipu_runtime_create (overlap)", s_runtime_create);
    if (!g_model_path) { /* the in-memory model: every anchor batches along dim 0 */
        g_cfg = cfg_threads(2);
        g_cfg.batching_dim = 0;
        r |= loop("ipu_runtime_create (batching)", s_runtime_create);
    }
    REQUIRE(r == 0);
    return 0;
}

static int load_image(const m_model *m, const char *path) {
    free(g_image);
    g_image = NULL;
    g_model_path = path;
    if (path) {
        FILE *fp = fopen(path, "rb");
        if (!fp) perror(path);
        REQUIRE(fp != NULL);
        fseek(fp, 0, SEEK_END);
        long n = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        REQUIRE(n > 0 && (g_image = malloc((size_t)n)) != NULL);
        REQUIRE(fread(g_image, 1, (size_t)n, fp) == (size_t)n);
        fclose(fp);
        g_image_size = (size_t)n;
        return 0;
    }
    ipu_container_writer *w = NULL;
    void *img = NULL;
    REQUIRE_OK(model_writer(m, &w));
    REQUIRE_OK(ipu_container_writer_finish(w, &img, &g_image_size));
    ipu_container_writer_destroy(w);
    REQUIRE((g_image = malloc(g_image_size)) != NULL);
    memcpy(g_image, img, g_image_size);
    ipu_free(img);
    return 0;
}

int main(int argc, char **argv) {
    RUN(test_allocator_api);
    RUN(test_log_callback);
    for (int flavour = 0; flavour < 2; flavour++) {
        const ipu_allocator *a = flavour ? &failing_aligned_allocator : &failing_allocator;
        printf("allocator %s\n", flavour ? "with aligned_alloc_fn" : "malloc only");
        m_model add = add_model(2, 3, 2);
        int ok = load_image(&add, NULL) == 0 && ipu_set_allocator(a) == IPU_OK;
        if (!ok) {
            failed++;
            printf("FAIL set-up: %s\n", ipu_last_error_message());
            break;
        }
        RUN(oom_core);
        RUN(oom_model);
        for (int i = 1; i < argc; i++) {
            REQUIRE_OK(ipu_set_allocator(NULL));
            if (load_image(NULL, argv[i]) || ipu_set_allocator(a) != IPU_OK) {
                failed++;
                break;
            }
            printf("%s\n", argv[i]);
            RUN(oom_model);
        }
        if (ipu_set_allocator(NULL) != IPU_OK) failed++;
    }
    free(g_image);
    printf("%ld runs, %ld with an injected failure\n", g_runs, g_fired);
    return check_summary();
}
