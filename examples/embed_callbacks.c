/* Embedding with your own stream callbacks, allocator and log callback.
 *
 *   embed_callbacks path/to/add.popef
 *
 * The model is Z = X + Y, all float32[2,3] (examples/data/add.popef). This program
 *   - installs its own allocator (counting blocks) and a log callback (to stdout), before
 *     anything else, as the library requires;
 *   - serves both INPUTS from its own stream callbacks, which run on the runtime's device
 *     thread once per iteration, in iteration order: X's callback writes the iteration's
 *     sequence number n into every element, Y's writes y[i] = i;
 *   - submits requests that carry only the OUTPUT Z, from two threads, and checks every
 *     result: each batch must be z[i] = n + i for one n, and over both threads every n from 0 to
 *     the number of batches - 1 must appear exactly once (each iteration pulled its inputs once);
 *   - cleans up and checks that every block it lent the library came back.
 * Exit status 0 on success, 1 on failure. Built and run by `meson test` (example_callbacks), and
 * against the installed library (pkg-config) by tests/test_c_install.py:
 *   cc -std=c11 embed_callbacks.c $(pkg-config --cflags --libs ipu) -pthread -o embed_callbacks
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipu/ipu.h"

#define TRY(call)                                                                                 \
    do {                                                                                          \
        ipu_status st_ = (call);                                                                  \
        if (st_ != IPU_OK) {                                                                      \
            printf("%s failed: %s: %s\n", #call, ipu_status_name(st_), ipu_last_error_message()); \
            goto done;                                                                            \
        }                                                                                         \
    } while (0)

enum { THREADS = 2, REQUESTS = 300, BATCHES = 2, ELEMS = 6 /* 2 x 3 */ };
enum { TOTAL = THREADS * REQUESTS * BATCHES };

/* ---- allocator: malloc with a live-block count (hooks run on any thread: atomics) ---- */

static atomic_long live_blocks, total_blocks;

static void *my_malloc(size_t size, void *ud) {
    (void)ud;
    void *p = malloc(size);
    if (p) atomic_fetch_add(&live_blocks, 1), atomic_fetch_add(&total_blocks, 1);
    return p;
}
static void *my_realloc(void *ptr, size_t size, void *ud) {
    (void)ud;
    return realloc(ptr, size); /* same block count */
}
static void my_free(void *ptr, void *ud) {
    (void)ud;
    atomic_fetch_sub(&live_blocks, 1);
    free(ptr);
}

/* ---- log callback: the library never prints; we choose to, on stdout ---- */

static atomic_int log_errors;

static void my_log(ipu_log_level level, const char *message, void *ud) {
    (void)ud;
    if (level >= IPU_LOG_ERROR) atomic_fetch_add(&log_errors, 1);
    printf("[pyipu %s] %s\n", ipu_log_level_name(level), message);
}

/* ---- stream callbacks: run on the device thread, one call per iteration per anchor ---- */

typedef struct feeder {
    uint32_t next; /* only the device thread touches it while the runtime runs */
    uint32_t calls_x, calls_y;
} feeder;

static ipu_status feed_x(void *buf, size_t nbytes, const ipu_anchor_info *anchor, void *ud) {
    feeder *f = ud;
    if (nbytes != ELEMS * sizeof(float) || anchor->desc.dtype != IPU_DTYPE_FLOAT32)
        return IPU_ERR_SHAPE; /* fails this iteration: its requests complete with the error */
    float *x = buf;
    for (int i = 0; i < ELEMS; i++) x[i] = (float)f->next;
    f->next++;
    f->calls_x++;
    return IPU_OK;
}

static ipu_status feed_y(void *buf, size_t nbytes, const ipu_anchor_info *anchor, void *ud) {
    feeder *f = ud;
    (void)anchor;
    float *y = buf;
    for (size_t i = 0; i < nbytes / sizeof(float); i++) y[i] = (float)i;
    f->calls_y++;
    return IPU_OK;
}

/* ---- two request threads ---- */

typedef struct worker {
    ipu_runtime *rt;
    uint32_t z, num_anchors;
    int id, errors;
    unsigned char *seen; /* [TOTAL], shared: each n is written by one thread only */
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    float z[BATCHES * ELEMS];
    const void *inputs[16] = {NULL}; /* X and Y come from the callbacks: not given */
    void *outputs[16] = {NULL};
    outputs[w->z] = z;
    for (int r = 0; r < REQUESTS; r++) {
        for (int i = 0; i < BATCHES * ELEMS; i++) z[i] = -1.0f;
        ipu_request_desc desc = {.num_batches = BATCHES,
                                 .inputs = inputs,
                                 .outputs = outputs,
                                 .subgraph = IPU_NO_INDEX};
        ipu_request *req = NULL;
        ipu_status st = ipu_runtime_submit(w->rt, &desc, &req);
        if (st == IPU_OK) {
            st = ipu_request_wait(req, UINT64_MAX);
            ipu_request_release(req);
        }
        if (st != IPU_OK) {
            printf("thread %d: request %d: %s: %s\n", w->id, r, ipu_status_name(st),
                   ipu_last_error_message());
            w->errors++;
            return NULL;
        }
        /* The batches of one request are consecutive iterations: n, n + 1, ... */
        float n0 = z[0];
        for (int b = 0; b < BATCHES; b++) {
            float n = z[b * ELEMS];
            if (n != n0 + (float)b || n < 0 || n >= (float)TOTAL) goto wrong;
            for (int i = 0; i < ELEMS; i++)
                if (z[b * ELEMS + i] != n + (float)i) goto wrong;
            if (w->seen[(int)n]++) goto wrong; /* the same iteration served twice */
        }
        continue;
    wrong:
        printf("thread %d: request %d: unexpected result z = [%g %g %g ...]\n", w->id, r, z[0],
               z[1], z[2]);
        w->errors++;
        return NULL;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int ok = 0;
    ipu_container *container = NULL;
    ipu_executable *exe = NULL;
    ipu_runtime *rt = NULL;
    static unsigned char seen[TOTAL];
    feeder feed = {0};
    if (argc != 2) {
        printf("usage: %s model.popef\n", argv[0]);
        return 1;
    }

    /* 1. Process-wide hooks first: the allocator can only change while the library holds no
     *    memory. */
    ipu_allocator alloc = {my_malloc, my_realloc, my_free, NULL, NULL, NULL};
    TRY(ipu_set_allocator(&alloc));
    ipu_set_log_callback(my_log, NULL, IPU_LOG_INFO);

    /* 2. Load the PopEF file. */
    TRY(ipu_container_open(argv[1], &container));
    TRY(ipu_executable_create(container, &exe));
    uint32_t x, y, z;
    TRY(ipu_executable_find_anchor(exe, "X", &x));
    TRY(ipu_executable_find_anchor(exe, "Y", &y));
    TRY(ipu_executable_find_anchor(exe, "Z", &z));
    ipu_executable_info info;
    ipu_executable_get_info(exe, &info);
    if (info.num_anchors > 16) goto done;

    /* 3. A runtime whose inputs come from our callbacks (set before the first submit). */
    ipu_runtime_config cfg = ipu_runtime_config_default();
    cfg.num_threads = 2;
    TRY(ipu_runtime_create(exe, &cfg, &rt));
    TRY(ipu_runtime_set_stream_callback(rt, x, feed_x, &feed));
    TRY(ipu_runtime_set_stream_callback(rt, y, feed_y, &feed));

    /* 4. Requests from two threads. */
    pthread_t th[THREADS];
    worker w[THREADS];
    int started = 0;
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.rt = rt, .z = z, .num_anchors = info.num_anchors, .id = i, .seen = seen};
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) break;
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (started != THREADS || w[0].errors || w[1].errors) goto done;

    /* 5. Close: joins the device thread, so reading `feed` afterwards is race-free. */
    TRY(ipu_runtime_close(rt));
    int all_once = 1;
    for (int n = 0; n < TOTAL; n++) all_once &= seen[n] == 1;
    printf("%d batches from %d threads; X callback %u calls, Y callback %u calls; every "
           "iteration served once: %s\n",
           TOTAL, THREADS, feed.calls_x, feed.calls_y, all_once ? "yes" : "no");
    ok = all_once && feed.calls_x == TOTAL && feed.calls_y == TOTAL;

done:
    ipu_runtime_destroy(rt);
    ipu_executable_destroy(exe);
    ipu_container_destroy(container);
    /* 6. Everything came back: nothing held by the library, nothing left in our allocator. */
    printf("allocator: %ld blocks lent, %ld still out (library count %zu); %d error messages\n",
           (long)atomic_load(&total_blocks), (long)atomic_load(&live_blocks),
           ipu_allocated_blocks(), atomic_load(&log_errors));
    ok = ok && atomic_load(&live_blocks) == 0 && ipu_allocated_blocks() == 0 &&
         atomic_load(&log_errors) == 0;
    ipu_set_log_callback(NULL, NULL, IPU_LOG_OFF);
    if (ipu_set_allocator(NULL) != IPU_OK) ok = 0; /* back to malloc: possible now */
    printf("%s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
