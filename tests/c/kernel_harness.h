/* Shared harness of the kernel and executable C tests: a hand-built `struct ipu_executable`
 * whose tensors live in a test arena, instruction construction, verification and execution
 * (whole range and uneven sub-ranges), and fill helpers. Test-only: static functions. */
#ifndef IPU_TEST_KERNEL_HARNESS_H
#define IPU_TEST_KERNEL_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "interp/interp.h"
#include "interp/kernels/conv.h"
#include "interp/kernels/eltwise.h"
#include "interp/kernels/isa.h"
#include "interp/kernels/matmul.h"
#include "interp/kernels/pool.h"
#include "interp/kernels/reduce.h"
#include "interp/prepack.h"

/* Forces ISA level `isa` (isa.h, 0 = automatic) for every kernel family; returns the level of
 * the sgemm micro-kernel now in use (the plans' panel widths follow it). */
static inline int force_isa(int isa) {
    ipu__isa_force(isa);
    return ipu__sgemm_isa();
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static inline uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static inline float rndf(void) { return (float)((int)(rnd() % 2001) - 1000) / 250.0f; }

/* ---- hand-built executable ---------------------------------------------------------------- */

#define MAXT 32
typedef struct H {
    ipu_executable e;
    ipu__tensor t[MAXT];
    void *ptr[MAXT];
    uint8_t *arena;
    uint64_t used, cap;
    void *scratch;
} H;

static inline H *h_new(uint64_t cap) {
    H *h = calloc(1, sizeof *h);
    h->arena = ipu__big_alloc(cap); /* as the runtime's arena: huge pages from 2 MiB on */
    h->cap = cap;
    h->scratch = ipu__big_alloc(IPU__WORKER_SCRATCH_BYTES);
    h->e.tensors = h->t;
    h->e.info.arena_size = cap;
    return h;
}
static inline void h_free(H *h) {
    ipu__prepack_destroy(&h->e);
    ipu__aligned_free(h->arena);
    ipu__aligned_free(h->scratch);
    free(h);
}

static inline uint32_t h_tensor(H *h, ipu_dtype dt, uint32_t ndim, const int64_t *dims) {
    uint32_t i = h->e.info.num_tensors++;
    ipu__tensor *t = &h->t[i];
    memset(t, 0, sizeof *t);
    t->desc.dtype = dt;
    t->desc.ndim = ndim;
    uint64_t n = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        t->desc.dims[d] = dims[d];
        n *= (uint64_t)dims[d];
    }
    t->numel = n;
    t->desc.nbytes = n * ipu_dtype_size(dt);
    t->loc = IPU_LOC_ARENA;
    t->offset = h->used;
    h->used = (h->used + t->desc.nbytes + 63) & ~(uint64_t)63;
    if (h->used > h->cap) {
        printf("test arena too small\n");
        exit(2);
    }
    h->ptr[i] = h->arena + t->offset;
    return i;
}
#define T(h, dt, ...) \
    h_tensor(h, IPU_DTYPE_##dt, sizeof((int64_t[]){__VA_ARGS__}) / 8, (int64_t[]){__VA_ARGS__})
#define T0(h, dt) h_tensor(h, IPU_DTYPE_##dt, 0, NULL)

typedef struct TI {
    ipu__instr ins;
    uint32_t in[8], out[1];
    int64_t attr[16];
} TI;

static inline ipu_status ti_make(H *h, TI *ti, ipu_opcode op, uint32_t nin, const uint32_t *in,
                                 uint32_t out, uint32_t nattr, const int64_t *attr) {
    memset(ti, 0, sizeof *ti);
    ti->ins.op = op;
    ti->ins.n_in = nin;
    ti->ins.n_out = 1;
    ti->ins.n_attr = nattr;
    if (nin) memcpy(ti->in, in, sizeof(uint32_t) * nin);
    ti->out[0] = out;
    if (nattr) memcpy(ti->attr, attr, sizeof(int64_t) * nattr);
    ti->ins.in = ti->in;
    ti->ins.out = ti->out;
    ti->ins.attr = ti->attr;
    /* each instruction gets its own packed-operand state (prepack.h), released by ti_free */
    ipu__prepack_destroy(&h->e);
    ipu_status st = ipu__prepack_open(&h->e);
    return st ? st : ipu__verify_instr(&h->e, 7, 0, 3, &ti->ins);
}

/* The plan of ti_make and what the verifier packed for it. */
static inline void ti_free(H *h, TI *ti) {
    ipu__free(ti->ins.plan);
    ti->ins.plan = NULL;
    ipu__prepack_destroy(&h->e);
}

/* Verify, run over [0, work), then again in uneven sub-ranges (reverse order); the outputs must
 * be identical. Returns the output pointer (results of the full run). */
static inline void *run(H *h, ipu_opcode op, uint32_t nin, const uint32_t *in, uint32_t out,
                        uint32_t nattr, const int64_t *attr) {
    TI ti;
    ipu_status st = ti_make(h, &ti, op, nin, in, out, nattr, attr);
    CHECK(st == IPU_OK, "verify %s: %s", ipu_opcode_name(op), ipu_last_error_message());
    if (st) return h->ptr[out];
    ipu__frame f = {.exe = &h->e, .ptr = h->ptr};
    size_t w = ipu__instr_work(&h->e, &ti.ins);
    size_t nb = h->t[out].desc.nbytes;
    memset(h->ptr[out], 0xA5, nb);
    st = ipu__instr_run(&f, &ti.ins, 0, w, h->scratch);
    CHECK(st == IPU_OK, "run %s", ipu_opcode_name(op));
    if (w > 1) {
        uint8_t *ref = malloc(nb);
        memcpy(ref, h->ptr[out], nb);
        memset(h->ptr[out], 0x5A, nb);
        size_t cuts[8], nc = 0;
        cuts[nc++] = w;
        for (size_t c = w; nc < 6 && c > 1;) {
            c = c > 3 ? c - 1 - rnd() % (c / 2) : c - 1;
            cuts[nc++] = c;
        }
        cuts[nc++] = 0; /* descending: run the last range first */
        for (size_t i = 0; i + 1 < nc; i++)
            st |= ipu__instr_run(&f, &ti.ins, cuts[i + 1], cuts[i], h->scratch);
        CHECK(st == IPU_OK && memcmp(ref, h->ptr[out], nb) == 0,
              "%s: split run differs from full run (work %zu)", ipu_opcode_name(op), w);
        free(ref);
    }
    CHECK(ipu__instr_run(&f, &ti.ins, 0, w + 1, h->scratch) == IPU_ERR_INTERNAL, "range check");
    ti_free(h, &ti);
    return h->ptr[out];
}

static inline ipu_status verify_only(H *h, ipu_opcode op, uint32_t nin, const uint32_t *in,
                                     uint32_t out, uint32_t nattr, const int64_t *attr) {
    TI ti;
    ipu_status st = ti_make(h, &ti, op, nin, in, out, nattr, attr);
    ti_free(h, &ti);
    return st;
}

/* h_new for n bytes of tensors (aligned_alloc wants a multiple of the alignment) */
static inline H *h_for(uint64_t n) { return h_new((n + (1 << 16) + 63) & ~(uint64_t)63); }

/* Make b a weight stored in the executable (what the verifier packs). */
static inline void as_tensor_data(H *h, uint32_t b) {
    h->e.tensor_data = h->arena;
    h->e.tensor_data_size = h->cap;
    h->t[b].loc = IPU_LOC_TENSOR_DATA;
}

/* Verify a float32 CONV2D of one C x HW x HW image into Cog channels (K x K kernel, stride 1,
 * pads K / 2, no bias) whose weights are stored in the executable, so the verifier packs them
 * for the path it plans: that plan, or NULL (ipu_last_error_message says why). Free with
 * ti_free and h_free. */
static inline const ipu__conv_plan *h_conv_plan(H **hp, TI *ti, int64_t C, int64_t HW, int64_t K,
                                                int64_t Cog) {
    H *h = *hp = h_for((uint64_t)(C * HW * HW + Cog * C * K * K + Cog * HW * HW) * 4);
    uint32_t x = T(h, FLOAT32, 1, C, HW, HW), w = T(h, FLOAT32, Cog, C, K, K);
    uint32_t y = T(h, FLOAT32, 1, Cog, HW, HW);
    as_tensor_data(h, w);
    int64_t p = K / 2, attr[11] = {1, 1, 1, 1, 1, p, p, p, p, 0, 0};
    ipu_status st = ti_make(h, ti, IPU_OP_CONV2D, 2, (uint32_t[]){x, w}, y, 11, attr);
    return st == IPU_OK ? ti->ins.plan : NULL;
}

/* The float32 output tensor of MATMUL(a, b): broadcast batch dims, then [M, N]. */
static inline uint32_t h_matmul_out(H *h, uint32_t a, uint32_t b) {
    const ipu__tensor *ta = &h->t[a], *tb = &h->t[b];
    int64_t yd[IPU_MAX_DIMS];
    uint32_t an = ta->desc.ndim - 2, bn = tb->desc.ndim - 2, nb = an > bn ? an : bn;
    for (uint32_t i = 0; i < nb; i++) {
        int64_t da = i < an ? ta->desc.dims[an - 1 - i] : 1,
                db = i < bn ? tb->desc.dims[bn - 1 - i] : 1;
        yd[nb - 1 - i] = da == 1 ? db : da;
    }
    yd[nb] = ta->desc.dims[an];
    yd[nb + 1] = tb->desc.dims[bn + 1];
    return h_tensor(h, IPU_DTYPE_FLOAT32, nb + 2, yd);
}

static inline void fill_f32(H *h, uint32_t t) {
    float *p = h->ptr[t];
    for (uint64_t i = 0; i < h->t[t].numel; i++) p[i] = rndf();
}
static inline void fill_f16(H *h, uint32_t t) {
    uint16_t *p = h->ptr[t];
    for (uint64_t i = 0; i < h->t[t].numel; i++) p[i] = ipu__f32_to_f16(rndf());
}
static inline void fill_i32(H *h, uint32_t t) {
    int32_t *p = h->ptr[t];
    for (uint64_t i = 0; i < h->t[t].numel; i++) p[i] = (int32_t)(rnd() % 41) - 20;
}
static inline void fill_bytes(H *h, uint32_t t) {
    uint8_t *p = h->ptr[t];
    for (uint64_t i = 0; i < h->t[t].desc.nbytes; i++) p[i] = (uint8_t)rnd();
}

/* max over i of |got - want| / (1 + |want|); NaN if any got is NaN */
static inline double max_rel_err(const float *got, const double *want, uint64_t n) {
    double worst = 0;
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / (1.0 + fabs(want[i]));
        if (!(e <= worst)) worst = e; /* NaN propagates */
    }
    return worst;
}

/* flat index into t (broadcast, right-aligned) of flat output index `i` of shape y */
static inline uint64_t bidx(const ipu__tensor *t, const ipu__tensor *y, uint64_t i) {
    uint64_t r = 0, s = 1;
    uint32_t off = y->desc.ndim - t->desc.ndim;
    for (uint32_t d = y->desc.ndim; d-- > 0;) {
        uint64_t c = i % (uint64_t)y->desc.dims[d];
        i /= (uint64_t)y->desc.dims[d];
        if (d < off) continue;
        int64_t td = t->desc.dims[d - off];
        if (td != 1) r += c * s;
        s *= (uint64_t)td;
    }
    return r;
}

#endif
