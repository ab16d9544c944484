/* LAYER_NORM: ONNX LayerNormalization over the trailing axes (docs/bytecode.md). x is rows of L
 * consecutive elements; per row the mean, the variance of the centred values (a second pass
 * while the row is in cache), r = 1 / sqrt(var + epsilon), then one pass writing
 * y = (x - mean) * r * scale (+ bias). Sums run in 8 lanes added in a fixed order, so the
 * portable and the AVX2 builds give the same bits. float16 is converted to float32 in chunks
 * of NORM_CH elements (whole multiples of the 8 lanes: the sums associate as in float32). Work
 * item = `rows` rows (about IPU__ELT_BLOCK elements). The plan function is at the end. */
#include <math.h>
#include <string.h>

#include "../verify_internal.h"
#include "isa.h"

#define NORM_CH ((int64_t)512)

typedef struct ipu__norm_plan {
    ipu__plan hdr;
    int64_t L, rows, nrows; /* row length, rows per work item, rows in all */
    float eps;
    int f16, has_bias;
} ipu__norm_plan;

typedef struct lanes {
    float a[8];
} lanes;

static inline __attribute__((always_inline)) float lanes_sum(const lanes *s) {
    return ((s->a[0] + s->a[4]) + (s->a[2] + s->a[6])) +
           ((s->a[1] + s->a[5]) + (s->a[3] + s->a[7]));
}

/* s += x[0, n) (n a multiple of 8), or (x - m)^2 with sq */
static inline __attribute__((always_inline)) void acc_body(lanes *s, const float *x, int64_t n,
                                                           float m, int sq) {
    for (int64_t i = 0; i < n; i += 8)
        for (int k = 0; k < 8; k++) {
            float d = x[i + k] - m;
            s->a[k] += sq ? d * d : x[i + k];
        }
}

static inline __attribute__((always_inline)) void out_body(const float *x, const float *sc,
                                                           const float *bi, float *y, int64_t n,
                                                           float m, float r) {
    if (bi)
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * r * sc[i] + bi[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * r * sc[i];
}

/* One float32 row, its three passes in one function (rows of a few hundred elements: no call
 * per pass). The float16 path runs the same passes chunk by chunk (row_sum, then out). */
static inline __attribute__((always_inline)) void row_body(const float *x, const float *sc,
                                                           const float *bi, float *y, int64_t L,
                                                           float eps) {
    int64_t whole = L - L % 8;
    lanes s = {{0}};
    acc_body(&s, x, whole, 0.0f, 0);
    float t = lanes_sum(&s);
    for (int64_t i = whole; i < L; i++) t += x[i];
    float m = t / (float)L;
    lanes q = {{0}};
    acc_body(&q, x, whole, m, 1);
    float v = lanes_sum(&q);
    for (int64_t i = whole; i < L; i++) v += (x[i] - m) * (x[i] - m);
    out_body(x, sc, bi, y, L, m, 1.0f / sqrtf(v / (float)L + eps));
}

typedef void (*row_fn)(const float *, const float *, const float *, float *, int64_t, float);
typedef void (*acc_fn)(lanes *, const float *, int64_t, float, int);
typedef void (*out_fn)(const float *, const float *, const float *, float *, int64_t, float, float);

static void row_base(const float *x, const float *sc, const float *bi, float *y, int64_t L,
                     float eps) {
    row_body(x, sc, bi, y, L, eps);
}
static void acc_base(lanes *s, const float *x, int64_t n, float m, int sq) {
    acc_body(s, x, n, m, sq);
}
static void out_base(const float *x, const float *sc, const float *bi, float *y, int64_t n, float m,
                     float r) {
    out_body(x, sc, bi, y, n, m, r);
}
#if IPU_X86
__attribute__((target("avx2"))) static void row_avx2(const float *x, const float *sc,
                                                     const float *bi, float *y, int64_t L,
                                                     float eps) {
    row_body(x, sc, bi, y, L, eps);
}
__attribute__((target("avx2"))) static void acc_avx2(lanes *s, const float *x, int64_t n, float m,
                                                     int sq) {
    acc_body(s, x, n, m, sq);
}
__attribute__((target("avx2"))) static void out_avx2(const float *x, const float *sc,
                                                     const float *bi, float *y, int64_t n, float m,
                                                     float r) {
    out_body(x, sc, bi, y, n, m, r);
}
#endif

/* The sum over a float16 row of x, or of (x - m)^2: 8 lanes over whole groups, then the tail
 * in order (as row_body sums a float32 row). */
static float row_sum(acc_fn acc, const uint16_t *x, int64_t base, int64_t L, float m, int sq,
                     float *buf) {
    lanes s = {{0}};
    int64_t whole = L - L % 8;
    for (int64_t j = 0; j < whole; j += NORM_CH) {
        int64_t n = whole - j < NORM_CH ? whole - j : NORM_CH;
        ipu__cvt_f16_to_f32(x + base + j, buf, (size_t)n);
        acc(&s, buf, n, m, sq);
    }
    float t = lanes_sum(&s);
    if (whole < L) {
        ipu__cvt_f16_to_f32(x + base + whole, buf, (size_t)(L - whole));
        for (int64_t i = 0; i < L - whole; i++) {
            float d = buf[i] - m;
            t += sq ? d * d : buf[i];
        }
    }
    return t;
}

static ipu_status layer_norm(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                             void *scratch) {
    const ipu__norm_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]], *sc = f->ptr[ins->in[1]];
    const void *bi = p->has_bias ? f->ptr[ins->in[2]] : NULL;
    void *y = f->ptr[ins->out[0]];
    int64_t L = p->L, r0 = (int64_t)b * p->rows, r1 = (int64_t)e * p->rows;
    if (r1 > p->nrows) r1 = p->nrows;
    row_fn row = row_base;
    acc_fn acc = acc_base;
    out_fn out = out_base;
#if IPU_X86
    if (ipu__isa() >= IPU__ISA_AVX2) row = row_avx2, acc = acc_avx2, out = out_avx2;
#endif
    float *bx = scratch, *bs = bx + NORM_CH, *bb = bs + NORM_CH, *by = bb + NORM_CH;
    const int64_t mask = ipu__stop_mask(L);
    for (int64_t r = r0; r < r1; r++) {
        ipu_status st = ipu__stop_at(f, r - r0, mask);
        if (st) return st;
        int64_t base = r * L;
        if (!p->f16) {
            row((const float *)x + base, sc, bi, (float *)y + base, L, p->eps);
            continue;
        }
        const uint16_t *xh = x;
        float m = row_sum(acc, xh, base, L, 0.0f, 0, bx) / (float)L;
        float var = row_sum(acc, xh, base, L, m, 1, bx) / (float)L;
        float rs = 1.0f / sqrtf(var + p->eps);
        for (int64_t j = 0; j < L; j += NORM_CH) {
            int64_t n = L - j < NORM_CH ? L - j : NORM_CH;
            ipu__cvt_f16_to_f32(xh + base + j, bx, (size_t)n);
            ipu__cvt_f16_to_f32((const uint16_t *)sc + j, bs, (size_t)n);
            if (bi) ipu__cvt_f16_to_f32((const uint16_t *)bi + j, bb, (size_t)n);
            out(bx, bs, bi ? bb : NULL, by, n, m, rs);
            ipu__cvt_f32_to_f16(by, (uint16_t *)y + base + j, (size_t)n);
        }
    }
    return IPU_OK;
}

ipu_status ipu__k_layer_norm_f32(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                                 void *scratch) {
    return layer_norm(f, ins, b, e, scratch);
}
ipu_status ipu__k_layer_norm_f16(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                                 void *scratch) {
    return layer_norm(f, ins, b, e, scratch);
}

/* LAYER_NORM: attrs L (row length, >= 1, dividing x's size), epsilon (float64 bits, used as
 * float32); scale and bias have L elements; y has x's shape. */
ipu_status ipu__verify_layer_norm(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                  ipu__instr *ins) {
    char s1[160], s2[160];
    const ipu__tensor *x = in[0];
    int64_t L = ins->attr[0];
    if (!same_shape(x, y))
        return bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, y),
                   shape_str(s2, sizeof s2, x));
    if (L < 1 || x->numel % (uint64_t)L != 0)
        return bad(v, "row length %lld does not divide x's %llu elements", (long long)L,
                   (unsigned long long)x->numel);
    for (uint32_t i = 1; i < ins->n_in; i++)
        if (in[i]->numel != (uint64_t)L)
            return bad(v, "%s has %llu elements, expected the row length %lld",
                       i == 1 ? "scale" : "bias", (unsigned long long)in[i]->numel, (long long)L);
    float eps = ipu__attr_f32(ins, 1);
    if (!(eps >= 0.0f) || isinf(eps)) return bad(v, "epsilon %g is not finite and >= 0", eps);
    ipu__norm_plan *p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    p->L = L;
    p->nrows = (int64_t)(x->numel / (uint64_t)L);
    p->rows = (int64_t)IPU__ELT_BLOCK / L > 1 ? (int64_t)IPU__ELT_BLOCK / L : 1;
    p->eps = eps;
    p->f16 = x->desc.dtype == IPU_DTYPE_FLOAT16;
    p->has_bias = ins->n_in == 3;
    p->hdr.work = (size_t)ceil_div((uint64_t)p->nrows, (uint64_t)p->rows);
    p->hdr.fn = ipu__select_kernel(ins->op, x->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}
