/* The stop hook inside one long work item: every kernel of the reduction family asks the
 * frame's stop hook between chunks of a row of millions of elements (ipu__stop_check), returns
 * IPU_ERR_CANCELLED when it answers true, computes the same result when it answers false, and
 * never asks for a short row (no per-row cost). */
#include <limits.h>

#include "kernel_harness.h"

static int asks, yes_after; /* the hook answers true from ask yes_after + 1 on */

static bool stop_hook(const ipu__frame *f) {
    (void)f;
    return ++asks > yes_after;
}

typedef struct op_case {
    const char *what;
    ipu_opcode op;
    ipu_dtype x, y;
    bool reduces; /* y is [outer, inner] (else x's shape) */
    int64_t lead[2];
    uint32_t nlead; /* attributes before outer, n, inner */
    int64_t tail[2];
    uint32_t ntail; /* attributes after them */
} op_case;

static void fill(H *h, uint32_t t) {
    switch (h->t[t].desc.dtype) {
        case IPU_DTYPE_FLOAT16: fill_f16(h, t); break;
        case IPU_DTYPE_INT32: fill_i32(h, t); break;
        default: /* near 1: products and sums of a million of them stay finite */
            fill_f32(h, t);
            for (uint64_t i = 0; i < h->t[t].numel; i++)
                ((float *)h->ptr[t])[i] = 1.0f + ((float *)h->ptr[t])[i] * 1e-7f;
    }
}

/* Run c over x [outer, n, inner]: whole without a hook, with a hook answering false, with one
 * answering true at once. Returns the number of asks of the false hook. */
static int check_case(const op_case *c, int64_t outer, int64_t n, int64_t inner) {
    H *h = h_for((uint64_t)(outer * n * inner) * 16);
    uint32_t x = h_tensor(h, c->x, 3, (int64_t[]){outer, n, inner});
    uint32_t y = c->reduces ? h_tensor(h, c->y, 2, (int64_t[]){outer, inner})
                            : h_tensor(h, c->y, 3, (int64_t[]){outer, n, inner});
    fill(h, x);
    int64_t attr[8];
    uint32_t na = 0;
    for (uint32_t i = 0; i < c->nlead; i++) attr[na++] = c->lead[i];
    attr[na++] = outer;
    attr[na++] = n;
    attr[na++] = inner;
    for (uint32_t i = 0; i < c->ntail; i++) attr[na++] = c->tail[i];
    TI ti;
    ipu_status st = ti_make(h, &ti, c->op, 1, &x, y, na, attr);
    CHECK(st == IPU_OK, "%s: verify: %s", c->what, ipu_last_error_message());
    int got = -1;
    if (st == IPU_OK) {
        size_t work = ipu__instr_work(&h->e, &ti.ins), nb = h->t[y].desc.nbytes;
        ipu__frame plain = {.exe = &h->e, .ptr = h->ptr};
        ipu__frame hooked = {.exe = &h->e, .ptr = h->ptr, .stop = stop_hook};
        CHECK(ipu__instr_run(&plain, &ti.ins, 0, work, h->scratch) == IPU_OK, "%s: run", c->what);
        uint8_t *ref = malloc(nb);
        memcpy(ref, h->ptr[y], nb);
        asks = 0, yes_after = INT_MAX;
        memset(h->ptr[y], 0x5A, nb);
        st = ipu__instr_run(&hooked, &ti.ins, 0, work, h->scratch);
        CHECK(st == IPU_OK && memcmp(ref, h->ptr[y], nb) == 0,
              "%s: a hook that never stops changes the result", c->what);
        got = asks;
        asks = 0, yes_after = 0;
        st = ipu__instr_run(&hooked, &ti.ins, 0, work, h->scratch);
        CHECK(got == 0 || (st == IPU_ERR_CANCELLED && asks == 1),
              "%s: a hook answering true: status %d after %d asks", c->what, (int)st, asks);
        free(ref);
        ti_free(h, &ti);
    }
    h_free(h);
    return got;
}

int main(void) {
    const ipu_dtype F32 = IPU_DTYPE_FLOAT32, F16 = IPU_DTYPE_FLOAT16, I32 = IPU_DTYPE_INT32,
                    I64 = IPU_DTYPE_INT64;
    op_case cases[] = {
        {"REDUCE_SUM f32", IPU_OP_REDUCE_SUM, F32, F32, true, {0}, 0, {0}, 0},
        {"REDUCE_SUM f16", IPU_OP_REDUCE_SUM, F16, F16, true, {0}, 0, {0}, 0},
        {"REDUCE_MEAN i32", IPU_OP_REDUCE_MEAN, I32, I32, true, {0}, 0, {0}, 0},
        {"SOFTMAX f32", IPU_OP_SOFTMAX, F32, F32, false, {0}, 0, {0}, 0},
        {"SOFTMAX f16", IPU_OP_SOFTMAX, F16, F16, false, {0}, 0, {0}, 0},
        {"LOG_SOFTMAX f32", IPU_OP_LOG_SOFTMAX, F32, F32, false, {0}, 0, {0}, 0},
        {"HARDMAX f16", IPU_OP_HARDMAX, F16, F16, false, {0}, 0, {0}, 0},
        {"ARG_REDUCE f32", IPU_OP_ARG_REDUCE, F32, I64, true, {0, 1}, 2, {0}, 0},
        {"ARG_REDUCE i32", IPU_OP_ARG_REDUCE, I32, I64, true, {1, 0}, 2, {0}, 0},
        {"CUMSUM f32", IPU_OP_CUMSUM, F32, F32, false, {0}, 0, {1, 0}, 2},
        {"CUMPROD i32", IPU_OP_CUMPROD, I32, I32, false, {0}, 0, {0, 1}, 2},
        {"REDUCE i32 SUM", IPU_OP_REDUCE, I32, I32, true, {IPU__RED_SUM}, 1, {0}, 0},
    };
    /* A long row (inner 1), long columns (inner 4: rows of 4 elements), a float16 softmax row
     * longer than the worker scratch, and every REDUCE function over floats. */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const op_case *c = &cases[i];
        int row = check_case(c, 1, (int64_t)1 << 18, 1), col = check_case(c, 2, 1 << 16, 4);
        CHECK(row >= 3 && col >= 3, "%s: %d / %d asks over 2^18 elements", c->what, row, col);
        int brief = check_case(c, 64, 1000, 3);
        CHECK(brief == 0, "%s: %d asks for rows of 1000", c->what, brief);
    }
    op_case sm16 = {
        "SOFTMAX f16 past the scratch", IPU_OP_SOFTMAX, F16, F16, false, {0}, 0, {0}, 0};
    CHECK(check_case(&sm16, 1, (int64_t)IPU__SCRATCH_BYTES, 1) >= 3, "%s", sm16.what);
    for (int fn = 0; fn < IPU__RED_COUNT; fn++) {
        op_case r = {"REDUCE f32", IPU_OP_REDUCE, F32, F32, true, {fn}, 1, {0}, 0};
        int row = check_case(&r, 1, (int64_t)1 << 18, 1);
        CHECK(row >= 3, "REDUCE fn %d: %d asks", fn, row);
    }
    return check_summary();
}
