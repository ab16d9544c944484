/* Embedding the pyipu runtime in a C program.
 *
 *   embed path/to/add.popef
 *
 * The PopEF file holds a model Z = X + Y with inputs "X", "Y" and output "Z", all float32[2,3]
 * (examples/data/add.popef). The program opens the container, builds the executable, prints its
 * anchors, starts a runtime, runs requests from two threads, checks every result, prints the
 * throughput and cleans up. Exit status 0 on success, 1 on failure.
 *
 * Build against the installed library (`meson install`, docs/c-api.md):
 *   cc -std=c11 -O2 -D_GNU_SOURCE examples/embed.c $(pkg-config --cflags --libs ipu) -pthread \
 *       -o embed
 * examples/embed_callbacks.c shows stream callbacks, the allocator and the log callback.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ipu/ipu.h"

/* Every call returns an ipu_status; the details of a failure are in ipu_last_error_message()
 * of the calling thread. */
#define TRY(call)                                                               \
    do {                                                                        \
        ipu_status st_ = (call);                                                \
        if (st_ != IPU_OK) {                                                    \
            fprintf(stderr, "%s failed: %s: %s\n", #call, ipu_status_name(st_), \
                    ipu_last_error_message());                                  \
            goto done;                                                          \
        }                                                                       \
    } while (0)

enum { REQUESTS_PER_THREAD = 2000, BATCHES = 4, ELEMS = 6 /* 2 x 3 */ };

typedef struct worker {
    ipu_runtime *rt;
    uint32_t x, y, z; /* anchor indices */
    uint32_t num_anchors;
    int id, errors;
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    /* Each request carries BATCHES batches stacked along dim 0: X is float32[BATCHES, 2, 3]. */
    float x[BATCHES * ELEMS], y[BATCHES * ELEMS], z[BATCHES * ELEMS];
    const void *inputs[16] = {NULL};
    void *outputs[16] = {NULL};
    inputs[w->x] = x;
    inputs[w->y] = y;
    outputs[w->z] = z;
    for (int r = 0; r < REQUESTS_PER_THREAD; r++) {
        for (int i = 0; i < BATCHES * ELEMS; i++) {
            x[i] = (float)(w->id * 100000 + r);
            y[i] = (float)i;
            z[i] = -1.0f;
        }
        ipu_request_desc desc = {
            .num_batches = BATCHES,
            .inputs = inputs, /* indexed by anchor; NULL = not given */
            .outputs = outputs,
            .subgraph = IPU_NO_INDEX, /* not a fused model */
            .done = NULL,             /* optional completion callback (runs on the device thread) */
            .user_data = NULL,
        };
        ipu_request *req = NULL;
        /* submit may block while the runtime's queues are full; buffers stay borrowed until
         * the request completes. */
        if (ipu_runtime_submit(w->rt, &desc, &req) != IPU_OK) {
            fprintf(stderr, "thread %d: submit: %s\n", w->id, ipu_last_error_message());
            w->errors++;
            return NULL;
        }
        ipu_status st = ipu_request_wait(req, UINT64_MAX);
        ipu_request_release(req); /* drop our reference (always, whatever the status) */
        if (st != IPU_OK) {
            fprintf(stderr, "thread %d: request: %s\n", w->id, ipu_last_error_message());
            w->errors++;
            return NULL;
        }
        for (int i = 0; i < BATCHES * ELEMS; i++)
            if (z[i] != x[i] + y[i]) {
                fprintf(stderr, "thread %d: wrong result z[%d] = %g\n", w->id, i, z[i]);
                w->errors++;
                return NULL;
            }
    }
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int ok = 0;
    ipu_container *container = NULL;
    ipu_executable *exe = NULL;
    ipu_runtime *rt = NULL;
    if (argc != 2) {
        fprintf(stderr, "usage: %s model.popef\n", argv[0]);
        return 1;
    }

    /* 1. Open (mmap + validate) the PopEF container and parse/verify the executable. */
    TRY(ipu_container_open(argv[1], &container));
    TRY(ipu_executable_create(container, &exe));

    /* 2. Inspect it: anchors are the model's named inputs and outputs (one batch each). */
    ipu_executable_info info;
    ipu_executable_get_info(exe, &info);
    printf("%s: %u anchors, batches_per_step %u, arena %llu bytes\n", argv[1], info.num_anchors,
           info.batches_per_step, (unsigned long long)info.arena_size);
    for (uint32_t a = 0; a < info.num_anchors; a++) {
        ipu_anchor_info ai;
        TRY(ipu_executable_anchor(exe, a, &ai));
        printf("  %-6s %-6s %s[", ai.direction == IPU_DIR_INPUT ? "input" : "output", ai.name,
               ipu_dtype_name(ai.desc.dtype));
        for (uint32_t d = 0; d < ai.desc.ndim; d++)
            printf(d ? ",%lld" : "%lld", (long long)ai.desc.dims[d]);
        printf("]\n");
    }
    worker w[2];
    memset(w, 0, sizeof w);
    TRY(ipu_executable_find_anchor(exe, "X", &w[0].x));
    TRY(ipu_executable_find_anchor(exe, "Y", &w[0].y));
    TRY(ipu_executable_find_anchor(exe, "Z", &w[0].z));
    if (info.num_anchors > 16 || w[0].x >= 16 || w[0].y >= 16 || w[0].z >= 16) {
        fprintf(stderr, "unexpected model: %u anchors\n", info.num_anchors);
        goto done;
    }

    /* 3. Create the runtime: checks the package hash, allocates device memory, runs the Load
     *    program and starts the device thread. NULL config = defaults (threads = CPUs,
     *    10 ms padding timeout, validation on, thread-safe submits). */
    ipu_runtime_config cfg = ipu_runtime_config_default();
    TRY(ipu_runtime_create(exe, &cfg, &rt));

    /* 4. Serve requests from two threads. */
    pthread_t th[2];
    double t0 = now_s();
    for (int i = 0; i < 2; i++) {
        w[i].rt = rt;
        w[i].x = w[0].x;
        w[i].y = w[0].y;
        w[i].z = w[0].z;
        w[i].id = i;
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            if (i == 1) pthread_join(th[0], NULL);
            goto done;
        }
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    double dt = now_s() - t0;
    if (w[0].errors || w[1].errors) goto done;

    ipu_runtime_stats s;
    ipu_runtime_get_stats(rt, &s);
    printf("%llu requests (%llu batches) in %.3f s: %.0f requests/s, %.0f batches/s, "
           "%u compute threads\n",
           (unsigned long long)s.requests_completed, (unsigned long long)s.iterations, dt,
           (double)s.requests_completed / dt, (double)s.iterations / dt, s.num_threads);
    ok = s.requests_completed == 2 * REQUESTS_PER_THREAD && s.requests_failed == 0;

done:
    /* 5. Clean up in reverse order; every destroy accepts NULL. Closing fails any request
     *    still pending with IPU_ERR_CLOSED and joins the runtime's threads. */
    ipu_runtime_destroy(rt);
    ipu_executable_destroy(exe);
    ipu_container_destroy(container);
    printf("%s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
