/* REDUCE_SUM, REDUCE_MEAN and SOFTMAX over the middle axis of x viewed as [outer, red, inner].
 * Work item = (outer index, block of IPU__RED_IB inner columns). Floats accumulate in float32
 * (float16 is converted on load), integers in their own type (wrapping; computed in uint64 and
 * truncated); integer mean = wrapped sum / reduce, truncating toward zero; reduce == 0 gives
 * sum 0, float mean NaN, integer mean 0. A work item over millions of elements asks the stop
 * hook between chunks (ipu__stop_check). Their plan function (red, softmax) is at the end. */
#include <math.h>
#include <string.h>

#include "../verify_internal.h"
#include "reduce.h"
#include "vmath.h"

/* REDUCE_SUM/REDUCE_MEAN/SOFTMAX: x as [outer, red, inner]; work = outer * ceil(inner/IB). */
typedef struct ipu__red_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    int64_t outer, red, inner, nib;
} ipu__red_plan;

#define IB IPU__RED_IB
#define CH 256   /* conversion chunk for contiguous rows */
#define RUN 2048 /* floats of float16 rows reduced whole, converted together */

typedef struct red_item {
    int64_t o, c0, w; /* outer index, first column, number of columns */
} red_item;

static red_item red_item_of(const ipu__red_plan *p, size_t it) {
    red_item r;
    r.o = (int64_t)((uint64_t)it / (uint64_t)p->nib);
    r.c0 = (int64_t)((uint64_t)it % (uint64_t)p->nib) * IB;
    r.w = p->inner - r.c0 < IB ? p->inner - r.c0 : IB;
    return r;
}

/* Load n floats of a float32/float16 tensor starting at element `off`. Returns a pointer to
 * them (into x itself for float32, else into buf). */
static const float *ldf(const void *x, int f16, int64_t off, float *buf, int64_t n) {
    if (!f16) return (const float *)x + off;
    ipu__cvt_f16_to_f32((const uint16_t *)x + off, buf, (size_t)n);
    return buf;
}

static void stf(void *y, int f16, int64_t off, const float *v, int64_t n) {
    if (f16 && n == 1) /* one value (rows reduced whole): the same rounding without a call */
        ((uint16_t *)y)[off] = ipu__f32_to_f16(v[0]);
    else if (f16)
        ipu__cvt_f32_to_f16(v, (uint16_t *)y + off, (size_t)n);
    else if ((const float *)y + off != v)
        memcpy((float *)y + off, v, sizeof(float) * (size_t)n);
}

/* Sum of a contiguous run with 8 interleaved partial sums (fixed order, vectorisable). */
static float sum_run(const float *v, int64_t n, float *part) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) part[l] += v[j + l];
    float t = 0.0f;
    for (; j < n; j++) t += v[j];
    return t;
}

static ipu_status reduce_float(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                               int f16, int mean) {
    const ipu__red_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
    float acc[IB], buf[IB > CH ? IB : CH];
    if (f16 && p->inner == 1 && p->red > 0 && p->red <= RUN) {
        /* float16 rows reduced whole (global pools, normalisations): consecutive items are
         * consecutive rows, converted RUN floats at a time and their sums stored in half
         * together */
        float xs[RUN], ys[RUN];
        const int64_t per = RUN / p->red;
        for (size_t it = b; it < e;) {
            int64_t nrow = (int64_t)(e - it) < per ? (int64_t)(e - it) : per;
            ipu__cvt_f16_to_f32((const uint16_t *)x + (int64_t)it * p->red, xs,
                                (size_t)(nrow * p->red));
            for (int64_t k = 0; k < nrow; k++) {
                float part[8] = {0};
                float tail = sum_run(xs + k * p->red, p->red, part);
                float v = ((part[0] + part[1]) + (part[2] + part[3])) +
                          ((part[4] + part[5]) + (part[6] + part[7])) + tail;
                ys[k] = mean ? v / (float)p->red : v;
            }
            ipu__cvt_f32_to_f16(ys, (uint16_t *)y + it, (size_t)nrow);
            it += (size_t)nrow;
        }
        return IPU_OK;
    }
    for (size_t it = b; it < e; it++) {
        red_item r = red_item_of(p, it);
        int64_t base = r.o * p->red * p->inner + r.c0;
        if (p->inner == 1) {
            float part[8] = {0}, tail = 0.0f;
            for (int64_t j = 0; j < p->red; j += CH) {
                ipu_status st = ipu__stop_at(f, j, IPU__STOP_CHUNK - 1);
                if (st != IPU_OK) return st;
                int64_t n = p->red - j < CH ? p->red - j : CH;
                tail += sum_run(ldf(x, f16, base + j, buf, n), n, part);
            }
            acc[0] = ((part[0] + part[1]) + (part[2] + part[3])) +
                     ((part[4] + part[5]) + (part[6] + part[7])) + tail;
        } else {
            for (int64_t c = 0; c < r.w; c++) acc[c] = 0.0f;
            const int64_t mask = ipu__stop_mask(r.w);
            for (int64_t k = 0; k < p->red; k++) {
                ipu_status st = ipu__stop_at(f, k, mask);
                if (st != IPU_OK) return st;
                const float *row = ldf(x, f16, base + k * p->inner, buf, r.w);
                for (int64_t c = 0; c < r.w; c++) acc[c] += row[c];
            }
        }
        if (mean) {
            float d = (float)p->red;
            for (int64_t c = 0; c < r.w; c++) acc[c] = p->red ? acc[c] / d : NAN;
        }
        stf(y, f16, r.o * p->inner + r.c0, acc, r.w);
    }
    return IPU_OK;
}

#define INT_REDUCE(sfx, T, U)                                                                      \
    static ipu_status reduce_##sfx(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, \
                                   int mean) {                                                     \
        const ipu__red_plan *p = ins->plan;                                                        \
        const T *x = f->ptr[ins->in[0]];                                                           \
        T *y = f->ptr[ins->out[0]];                                                                \
        uint64_t acc[IB];                                                                          \
        for (size_t it = b; it < e; it++) {                                                        \
            red_item r = red_item_of(p, it);                                                       \
            const T *xb = x + r.o * p->red * p->inner + r.c0;                                      \
            for (int64_t c = 0; c < r.w; c++) acc[c] = 0;                                          \
            const int64_t mask = ipu__stop_mask(r.w);                                              \
            for (int64_t k = 0; k < p->red; k++) {                                                 \
                ipu_status st = ipu__stop_at(f, k, mask);                                          \
                if (st != IPU_OK) return st;                                                       \
                const T *row = xb + k * p->inner;                                                  \
                for (int64_t c = 0; c < r.w; c++) acc[c] += (uint64_t)(int64_t)row[c];             \
            }                                                                                      \
            T *yr = y + r.o * p->inner + r.c0;                                                     \
            for (int64_t c = 0; c < r.w; c++) {                                                    \
                int64_t s = (int64_t)(T)(U)acc[c]; /* the sum wraps in T */                        \
                if (mean) s = p->red ? s / p->red : 0;                                             \
                yr[c] = (T)s;                                                                      \
            }                                                                                      \
        }                                                                                          \
        return IPU_OK;                                                                             \
    }
INT_REDUCE(i32, int32_t, uint32_t)
INT_REDUCE(i64, int64_t, uint64_t)

#define RED_KERNELS(op, mean)                                                                    \
    ipu_status ipu__k_##op##_f32(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, \
                                 void *s) {                                                      \
        (void)s;                                                                                 \
        return reduce_float(f, ins, b, e, 0, mean);                                              \
    }                                                                                            \
    ipu_status ipu__k_##op##_f16(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, \
                                 void *s) {                                                      \
        (void)s;                                                                                 \
        return reduce_float(f, ins, b, e, 1, mean);                                              \
    }                                                                                            \
    ipu_status ipu__k_##op##_i32(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, \
                                 void *s) {                                                      \
        (void)s;                                                                                 \
        return reduce_i32(f, ins, b, e, mean);                                                   \
    }                                                                                            \
    ipu_status ipu__k_##op##_i64(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, \
                                 void *s) {                                                      \
        (void)s;                                                                                 \
        return reduce_i64(f, ins, b, e, mean);                                                   \
    }
RED_KERNELS(reduce_sum, 0)
RED_KERNELS(reduce_mean, 1)

/* ---- SOFTMAX: exp(x - max) / sum, three passes (max, sum, write) ---------------------------- */

static inline float nanmax(float m, float v) { return (v > m || v != v) ? v : m; }

/* One contiguous float32 row: y = exp(x - max) / sum (y may be x; a NaN anywhere makes the row
 * NaN), in chunks of IPU__STOP_CHUNK with the stop hook asked between two. */
static ipu_status softmax_row(const ipu__frame *f, const float *x, float *y, int64_t L) {
    const int64_t C = IPU__STOP_CHUNK;
    ipu_status st = IPU_OK;
    float m = -INFINITY, s = 0.0f;
    for (int64_t j = 0; j < L && st == IPU_OK; j += C) {
        m = nanmax(m, ipu__vm_max(x + j, (size_t)(L - j < C ? L - j : C)));
        if (j + C < L) st = ipu__stop_check(f);
    }
    for (int64_t j = 0; j < L && st == IPU_OK; j += C) {
        s += ipu__vm_exp_sum(x + j, y + j, (size_t)(L - j < C ? L - j : C), m);
        if (j + C < L) st = ipu__stop_check(f);
    }
    for (int64_t j = 0; j < L && st == IPU_OK; j += C) {
        ipu__vm_scale(y + j, (size_t)(L - j < C ? L - j : C), 1.0f / s);
        if (j + C < L) st = ipu__stop_check(f);
    }
    return st;
}

/* One contiguous float32 row with the vectorised softmax passes (vmath.h), chunk by chunk with
 * the stop hook asked between two: exp(x - max) goes to `tmp` (y may be x, and x is read
 * again), the chunks' sums add up in double. */
ipu_status ipu__log_softmax_row(const ipu__frame *f, const float *x, float *y, int64_t L,
                                float *tmp) {
    const int64_t C = IPU__STOP_CHUNK;
    ipu_status st = IPU_OK;
    float m = -INFINITY;
    double s = 0.0;
    for (int64_t j = 0; j < L && st == IPU_OK; j += C) {
        m = nanmax(m, ipu__vm_max(x + j, (size_t)(L - j < C ? L - j : C)));
        if (j + C < L) st = ipu__stop_check(f);
    }
    for (int64_t j = 0; j < L && st == IPU_OK; j += C) {
        s += ipu__vm_exp_sum(x + j, tmp, (size_t)(L - j < C ? L - j : C), m);
        if (j + C < L) st = ipu__stop_check(f);
    }
    const float ls = (float)log(s);
    for (int64_t j = 0; j < L && st == IPU_OK; j += C) {
        const int64_t end = L - j < C ? L : j + C;
        for (int64_t i = j; i < end; i++) y[i] = (x[i] - m) - ls;
        if (end < L) st = ipu__stop_check(f);
    }
    return st;
}

static ipu_status softmax(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, int f16,
                          float *scratch) {
    const ipu__red_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
    int64_t L = p->red;
    float buf[IB > CH ? IB : CH], out[IB > CH ? IB : CH];
    const int64_t cap = (int64_t)(IPU__SCRATCH_BYTES / sizeof(float));
    ipu_status st = IPU_OK;
    if (f16 && p->inner == 1 && L > 0 && L <= cap) {
        /* float16 rows (consecutive items: consecutive rows): about RUN floats of them (one
         * row at least; they stay in L1) converted in one call, the float32 row kernel in place
         * on each, stored in one call */
        const int64_t per = L < RUN ? RUN / L : 1;
        for (size_t it = b; it < e && st == IPU_OK;) {
            int64_t nrow = (int64_t)(e - it) < per ? (int64_t)(e - it) : per;
            const uint16_t *xr = (const uint16_t *)x + (int64_t)it * L;
            ipu__cvt_f16_to_f32(xr, scratch, (size_t)(nrow * L));
            for (int64_t k = 0; k < nrow && st == IPU_OK; k++)
                st = softmax_row(f, scratch + k * L, scratch + k * L, L);
            ipu__cvt_f32_to_f16(scratch, (uint16_t *)y + (int64_t)it * L, (size_t)(nrow * L));
            it += (size_t)nrow;
        }
        return st;
    }
    for (size_t it = b; it < e; it++) {
        red_item r = red_item_of(p, it);
        int64_t base = r.o * L * p->inner + r.c0;
        if (p->inner == 1 && !f16) {
            if ((st = softmax_row(f, (const float *)x + base, (float *)y + base, L)) != IPU_OK)
                return st;
            continue;
        }
        if (p->inner == 1) {
            float m = -INFINITY, s = 0.0f;
            for (int64_t j = 0; j < L; j += CH) {
                if ((st = ipu__stop_at(f, j, IPU__STOP_CHUNK - 1)) != IPU_OK) return st;
                int64_t n = L - j < CH ? L - j : CH;
                const float *v = ldf(x, f16, base + j, buf, n);
                for (int64_t i = 0; i < n; i++) m = nanmax(m, v[i]);
            }
            for (int64_t j = 0; j < L; j += CH) {
                if ((st = ipu__stop_at(f, j, IPU__STOP_CHUNK - 1)) != IPU_OK) return st;
                int64_t n = L - j < CH ? L - j : CH;
                const float *v = ldf(x, f16, base + j, buf, n);
                for (int64_t i = 0; i < n; i++) s += expf(v[i] - m);
            }
            for (int64_t j = 0; j < L; j += CH) {
                if ((st = ipu__stop_at(f, j, IPU__STOP_CHUNK - 1)) != IPU_OK) return st;
                int64_t n = L - j < CH ? L - j : CH;
                const float *v = ldf(x, f16, base + j, buf, n);
                for (int64_t i = 0; i < n; i++) out[i] = expf(v[i] - m) / s;
                stf(y, f16, base + j, out, n);
            }
            continue;
        }
        float mx[IB], sm[IB];
        const int64_t mask = ipu__stop_mask(r.w);
        for (int64_t c = 0; c < r.w; c++) {
            mx[c] = -INFINITY;
            sm[c] = 0.0f;
        }
        for (int64_t k = 0; k < L; k++) {
            if ((st = ipu__stop_at(f, k, mask)) != IPU_OK) return st;
            const float *v = ldf(x, f16, base + k * p->inner, buf, r.w);
            for (int64_t c = 0; c < r.w; c++) mx[c] = nanmax(mx[c], v[c]);
        }
        for (int64_t k = 0; k < L; k++) {
            if ((st = ipu__stop_at(f, k, mask)) != IPU_OK) return st;
            const float *v = ldf(x, f16, base + k * p->inner, buf, r.w);
            for (int64_t c = 0; c < r.w; c++) sm[c] += expf(v[c] - mx[c]);
        }
        for (int64_t k = 0; k < L; k++) {
            if ((st = ipu__stop_at(f, k, mask)) != IPU_OK) return st;
            const float *v = ldf(x, f16, base + k * p->inner, buf, r.w);
            for (int64_t c = 0; c < r.w; c++) out[c] = expf(v[c] - mx[c]) / sm[c];
            stf(y, f16, base + k * p->inner, out, r.w);
        }
    }
    return IPU_OK;
}

ipu_status ipu__k_softmax_f32(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                              void *scratch) {
    return softmax(f, ins, b, e, 0, scratch);
}
ipu_status ipu__k_softmax_f16(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                              void *scratch) {
    return softmax(f, ins, b, e, 1, scratch);
}

/* Plan functions (verify_internal.h, ipu_ops.def's `plan` column): shapes, attributes, the plan. */

/* REDUCE_SUM, REDUCE_MEAN (y [outer, inner]) and SOFTMAX (`softmax`: y of x's shape): attrs
 * outer, reduce (axis_len), inner. */
static ipu_status plan_red(const vctx *v, const ipu__tensor *x, const ipu__tensor *y,
                           ipu__instr *ins, bool softmax) {
    for (int i = 0; i < 3; i++)
        if (ins->attr[i] < 0)
            return bad(v, "attribute %d is negative (%lld)", i, (long long)ins->attr[i]);
    uint64_t o = (uint64_t)ins->attr[0], r = (uint64_t)ins->attr[1], n = (uint64_t)ins->attr[2];
    uint64_t orn, on;
    if (!ipu__mul_u64(o, n, &on) || !ipu__mul_u64(on, r, &orn))
        return bad(v, "attributes %llu x %llu x %llu overflow", (unsigned long long)o,
                   (unsigned long long)r, (unsigned long long)n);
    if (orn != x->numel)
        return bad(v, "outer*%s*inner = %llu != input numel %llu", softmax ? "axis_len" : "reduce",
                   (unsigned long long)orn, (unsigned long long)x->numel);
    if (softmax) {
        if (!same_shape(x, y)) return bad(v, "output shape differs from input shape");
    } else if (on != y->numel) {
        return bad(v, "outer*inner = %llu != output numel %llu", (unsigned long long)on,
                   (unsigned long long)y->numel);
    }
    ipu__red_plan *p;
    p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    p->dtype = y->desc.dtype;
    p->outer = (int64_t)o;
    p->red = (int64_t)r;
    p->inner = (int64_t)n;
    p->nib = (int64_t)ceil_div(n, (uint64_t)IPU__RED_IB);
    p->hdr.work = (on == 0 || (softmax && r == 0)) ? 0 : (size_t)(o * (uint64_t)p->nib);
    p->hdr.fn = ipu__select_kernel(ins->op, y->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}

ipu_status ipu__verify_red(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                           ipu__instr *ins) {
    return plan_red(v, in[0], y, ins, false);
}

ipu_status ipu__verify_softmax(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                               ipu__instr *ins) {
    return plan_red(v, in[0], y, ins, true);
}
