/* Training from C: run the optimizer steps of a PopEF compiled by pyipu's TrainingSession and
 * read and write its weights.
 *
 *   train path/to/train.popef
 *
 * examples/data/train.popef (made by examples/data/make_train.py) trains a linear regression
 * y = x W on inputs "x" float32[8,4] and targets "t" float32[8,2] with a mean-square loss and SGD
 * with momentum; each request is one optimizer step and returns "loss". W, its velocity and the
 * step count are variables: they stay on the device between requests
 * (ipu_executable_variable). The program lists the variables, trains 200 steps on targets made
 * by a known W, reads W back with ipu_runtime_read_variable and checks it, writes W = 0 with
 * ipu_runtime_write_variable and checks the loss is high again. Prints OK on success.
 *
 * Build against the installed library (docs/c-api.md):
 *   cc -std=c11 -O2 -D_GNU_SOURCE examples/train.c $(pkg-config --cflags --libs ipu) -o train
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ipu/ipu.h"

#define TRY(call)                                                               \
    do {                                                                        \
        ipu_status st_ = (call);                                                \
        if (st_ != IPU_OK) {                                                    \
            fprintf(stderr, "%s failed: %s: %s\n", #call, ipu_status_name(st_), \
                    ipu_last_error_message());                                  \
            goto done;                                                          \
        }                                                                       \
    } while (0)

enum { B = 8, I = 4, O = 2, STEPS = 200, MAX_ANCHORS = 16 };
static const float W_TRUE[I * O] = {1.0f, -2.0f, 0.5f, 3.0f, -1.5f, 0.25f, 2.0f, -0.75f};

/* A reproducible uniform number in [-1, 1) (xorshift). */
static float uniform(unsigned *state) {
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    return (float)(*state % 20000u) / 10000.0f - 1.0f;
}

/* One optimizer step on a fresh batch: t = x W_TRUE. */
static ipu_status step(ipu_runtime *rt, const uint32_t *anchor, unsigned *seed, float *loss) {
    float x[B * I], t[B * O];
    for (int i = 0; i < B * I; i++) x[i] = uniform(seed);
    for (int b = 0; b < B; b++)
        for (int o = 0; o < O; o++) {
            float acc = 0;
            for (int i = 0; i < I; i++) acc += x[b * I + i] * W_TRUE[i * O + o];
            t[b * O + o] = acc;
        }
    const void *inputs[MAX_ANCHORS] = {NULL};
    void *outputs[MAX_ANCHORS] = {NULL};
    inputs[anchor[0]] = x;
    inputs[anchor[1]] = t;
    outputs[anchor[2]] = loss;
    ipu_request_desc desc = {.num_batches = 1,
                             .inputs = inputs,
                             .outputs = outputs,
                             .subgraph = IPU_NO_INDEX};
    ipu_request *req = NULL;
    ipu_status st = ipu_runtime_execute(rt, &desc, &req); /* req NULL: it ran inline */
    if (st == IPU_OK && req) st = ipu_request_wait(req, UINT64_MAX);
    ipu_request_release(req);
    return st;
}

int main(int argc, char **argv) {
    int ok = 0;
    ipu_container *container = NULL;
    ipu_executable *exe = NULL;
    ipu_runtime *rt = NULL;
    if (argc != 2) {
        fprintf(stderr, "usage: %s train.popef\n", argv[0]);
        return 1;
    }
    TRY(ipu_container_open(argv[1], &container));
    TRY(ipu_executable_create(container, &exe));
    ipu_executable_info info;
    ipu_executable_get_info(exe, &info);
    printf("%s: %u variables\n", argv[1], info.num_variables);
    for (uint32_t a = 0; a < info.num_anchors; a++) {
        ipu_anchor_info ai;
        uint32_t tensor;
        TRY(ipu_executable_anchor(exe, a, &ai));
        if (ipu_executable_variable(exe, a, &tensor) == IPU_OK)
            printf("  variable %-26s %s, %llu bytes\n", ai.name, ipu_dtype_name(ai.desc.dtype),
                   (unsigned long long)ai.desc.nbytes);
    }
    uint32_t anchor[4]; /* x, t, loss, W */
    TRY(ipu_executable_find_anchor(exe, "x", &anchor[0]));
    TRY(ipu_executable_find_anchor(exe, "t", &anchor[1]));
    TRY(ipu_executable_find_anchor(exe, "loss", &anchor[2]));
    TRY(ipu_executable_find_anchor(exe, "W", &anchor[3]));
    if (info.num_anchors > MAX_ANCHORS) {
        fprintf(stderr, "unexpected model: %u anchors\n", info.num_anchors);
        goto done;
    }
    TRY(ipu_runtime_create(exe, NULL, &rt));

    unsigned seed = 12345;
    float loss = 0, first = 0;
    for (int s = 0; s < STEPS; s++) {
        TRY(step(rt, anchor, &seed, &loss));
        if (s == 0) first = loss;
        if (s % 50 == 0 || s == STEPS - 1) printf("step %3d  loss %.6f\n", s, loss);
    }
    float w[I * O], err = 0;
    TRY(ipu_runtime_read_variable(rt, anchor[3], w, sizeof w));
    for (int i = 0; i < I * O; i++) err = fmaxf(err, fabsf(w[i] - W_TRUE[i]));
    printf("trained W: max |W - W_true| = %.2e\n", err);
    if (!(err < 1e-3f) || !(loss < 1e-5f * first)) {
        fprintf(stderr, "training did not converge\n");
        goto done;
    }
    memset(w, 0, sizeof w); /* back to the start: the next step's loss is high again */
    TRY(ipu_runtime_write_variable(rt, anchor[3], w, sizeof w));
    TRY(step(rt, anchor, &seed, &loss));
    printf("after writing W = 0: loss %.6f\n", loss);
    if (!(loss > 0.1f * first)) goto done;
    ok = 1;
    printf("OK\n");
done:
    ipu_runtime_destroy(rt);
    ipu_executable_destroy(exe);
    ipu_container_destroy(container);
    return ok ? 0 : 1;
}
