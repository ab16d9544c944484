/* UNARY: one opcode for the element-wise functions of ipu__unary_fn (docs/bytecode.md). float32
 * uses the C math library (the NumPy reference uses the same formulations), except EXP, SIGMOID,
 * SWISH, ERF and GELU, which use the vectorised vmath.c (a few ulp); float16 is computed
 * in float32 in chunks; integers (IPU__INT_TYPES) wrap; bool (NOT). ISNAN/ISINF write bool.
 * Work item = IPU__ELT_BLOCK elements. One switch per work item, then a tight loop per
 * function. The plan function is at the end. */
#include <math.h>
#include <string.h>

#include "../verify_internal.h"
#include "eltwise.h"
#include "isa.h"
#include "vmath.h"
#if IPU_X86
#include <immintrin.h>
#endif

/* UNARY: flat element ranges (input and output have the same shape). */
typedef struct ipu__unary_plan {
    ipu__plan hdr;
    uint64_t numel;
    int fn;
    float p0, p1;   /* float parameters (alpha, beta, clip bounds) */
    int64_t i0, i1; /* CLIP bounds for integer dtypes */
} ipu__unary_plan;

static void elt_range(const ipu__unary_plan *p, size_t b, size_t e, uint64_t *lo, uint64_t *hi) {
    *lo = (uint64_t)b * IPU__ELT_BLOCK;
    *hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (*hi > p->numel) *hi = p->numel;
}

#define ULOOP(EXPR)                  \
    for (size_t i = 0; i < n; i++) { \
        T v = x[i];                  \
        y[i] = (EXPR);               \
    }                                \
    break

#if IPU_X86
/* The clamps an epilogue or a UNARY applies most (ReLU6, HardSwish, HardSigmoid, LeakyRelu), 8
 * lanes wide with the scalar loops' exact semantics: max_ps(lo, v) and min_ps(hi, t) return
 * their second operand for a NaN or equal operands, as `v < lo ? lo : v` and `t > hi ? hi : t`
 * do (HardSwish's clamp sends NaN to 0, as its scalar loop: x · 0 is NaN anyway); no FMA
 * (a * v + b rounds twice, as in C). y may be x. False: not one of them. */
__attribute__((target("avx2"))) static bool unary_f32_avx2(const ipu__unary_plan *p, const float *x,
                                                           float *y, size_t n) {
    const __m256 a = _mm256_set1_ps(p->p0), b = _mm256_set1_ps(p->p1);
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    const __m256 six = _mm256_set1_ps(6.0f), half = _mm256_set1_ps(0.5f);
    const int fn = p->fn;
    if (fn != IPU__UN_CLIP && fn != IPU__UN_HARD_SWISH && fn != IPU__UN_HARD_SIGMOID &&
        fn != IPU__UN_LEAKY_RELU)
        return false;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), t;
        switch (fn) {
            case IPU__UN_CLIP: t = _mm256_min_ps(b, _mm256_max_ps(a, v)); break;
            case IPU__UN_HARD_SWISH:
                t = _mm256_add_ps(_mm256_div_ps(v, six), half);
                t = _mm256_mul_ps(v, _mm256_min_ps(_mm256_max_ps(t, zero), one));
                break;
            case IPU__UN_HARD_SIGMOID:
                t = _mm256_add_ps(_mm256_mul_ps(a, v), b);
                t = _mm256_min_ps(one, _mm256_max_ps(zero, t));
                break;
            default: /* LEAKY_RELU: v >= 0 ? v : a v (NaN: a v, NaN) */
                t = _mm256_blendv_ps(_mm256_mul_ps(a, v), v, _mm256_cmp_ps(v, zero, _CMP_GE_OQ));
                break;
        }
        _mm256_storeu_ps(y + i, t);
    }
    if (i < n) { /* the tail through an 8-float buffer: the same lanes */
        float bx[8] = {0}, by[8];
        memcpy(bx, x + i, (n - i) * sizeof(float));
        unary_f32_avx2(p, bx, by, 8);
        memcpy(y + i, by, (n - i) * sizeof(float));
    }
    return true;
}
#endif

static void unary_f32(const ipu__unary_plan *p, const float *x, float *restrict y, size_t n) {
    typedef float T;
    const float a = p->p0, b = p->p1;
#if IPU_X86
    if (ipu__isa() >= IPU__ISA_AVX2 && unary_f32_avx2(p, x, y, n)) return;
#endif
    switch (p->fn) {
        case IPU__UN_NEG: ULOOP(-v);
        case IPU__UN_ABS: ULOOP(fabsf(v));
        case IPU__UN_SIGN: ULOOP(v > 0 ? 1.0f : v < 0 ? -1.0f : v); /* NaN, ±0 unchanged */
        case IPU__UN_SIGMOID: ipu__vm_sigmoid(x, y, n); break;
        case IPU__UN_TANH: ULOOP(tanhf(v));
        case IPU__UN_EXP: ipu__vm_exp(x, y, n); break;
        case IPU__UN_LOG: ULOOP(logf(v));
        case IPU__UN_SQRT: ULOOP(sqrtf(v));
        case IPU__UN_ERF: ipu__vm_erf(x, y, n); break;
        case IPU__UN_RECIPROCAL: ULOOP(1.0f / v);
        case IPU__UN_SIN: ULOOP(sinf(v));
        case IPU__UN_COS: ULOOP(cosf(v));
        case IPU__UN_FLOOR: ULOOP(floorf(v));
        case IPU__UN_CEIL: ULOOP(ceilf(v));
        case IPU__UN_ROUND: ULOOP(nearbyintf(v)); /* default rounding mode: half to even */
        case IPU__UN_SOFTPLUS: ULOOP((v > 0 ? v : 0.0f) + log1pf(expf(-fabsf(v))));
        case IPU__UN_LEAKY_RELU: ULOOP(v >= 0 ? v : a * v);
        case IPU__UN_ELU: ULOOP(v >= 0 ? v : a * expm1f(v));
        case IPU__UN_HARD_SIGMOID: { /* min(max(a x + b, 0), 1): NaN propagates */
            for (size_t i = 0; i < n; i++) {
                float t = a * x[i] + b;
                t = t < 0 ? 0.0f : t;
                y[i] = t > 1 ? 1.0f : t;
            }
            break;
        }
        case IPU__UN_CLIP: {
            for (size_t i = 0; i < n; i++) { /* minimum(maximum(x, lo), hi): NaN propagates */
                float t = x[i] < a ? a : x[i];
                y[i] = t > b ? b : t;
            }
            break;
        }
        case IPU__UN_TAN: ULOOP(tanf(v));
        case IPU__UN_ASIN: ULOOP(asinf(v));
        case IPU__UN_ACOS: ULOOP(acosf(v));
        case IPU__UN_ATAN: ULOOP(atanf(v));
        case IPU__UN_SINH: ULOOP(sinhf(v));
        case IPU__UN_COSH: ULOOP(coshf(v));
        case IPU__UN_ASINH: ULOOP(asinhf(v));
        case IPU__UN_ACOSH: ULOOP(acoshf(v));
        case IPU__UN_ATANH: ULOOP(atanhf(v));
        case IPU__UN_SOFTSIGN: ULOOP(v / (1.0f + fabsf(v)));
        case IPU__UN_HARD_SWISH: {
            /* v * min(max(v/6 + 1/2, 0), 1) with compares, not fminf/fmaxf calls, so that it
             * vectorises; a NaN v gives NaN either way (NaN * 0) */
            for (size_t i = 0; i < n; i++) {
                float t = x[i] / 6.0f + 0.5f;
                t = t > 0 ? t : 0.0f;
                t = t < 1 ? t : 1.0f;
                y[i] = x[i] * t;
            }
            break;
        }
        case IPU__UN_MISH: ULOOP(v * tanhf((v > 0 ? v : 0.0f) + log1pf(expf(-fabsf(v)))));
        case IPU__UN_SELU: ULOOP(v > 0 ? b * v : b * (a * expf(v) - a));
        case IPU__UN_CELU: ULOOP((v > 0 ? v : 0.0f) + fminf(0.0f, a * expm1f(v / a)));
        case IPU__UN_THRESHOLDED_RELU: ULOOP(v > a ? v : 0.0f);
        case IPU__UN_SHRINK: ULOOP(v < -b ? v + a : v > b ? v - a : 0.0f);
        case IPU__UN_GELU: (a == 0.0f ? ipu__vm_gelu_erf : ipu__vm_gelu_tanh)(x, y, n); break;
        case IPU__UN_SWISH: ipu__vm_swish(x, y, n, a); break;
        default: break;
    }
}

/* ISNAN / ISINF (p0: detect +inf, p1: detect -inf): float in, bool out. */
static void classify_f32(const ipu__unary_plan *p, const float *x, uint8_t *restrict y, size_t n) {
    if (p->fn == IPU__UN_ISNAN) {
        for (size_t i = 0; i < n; i++) y[i] = (uint8_t)(x[i] != x[i]);
        return;
    }
    const int pos = p->p0 != 0.0f, neg = p->p1 != 0.0f;
    for (size_t i = 0; i < n; i++)
        y[i] = (uint8_t)((pos && x[i] == INFINITY) || (neg && x[i] == -INFINITY));
}

/* Integers: NEG (signed), ABS, SIGN, CLIP, BITWISE_NOT and SHRINK (computed in float32 as the
 * reference does, then truncated and saturated to T). Arithmetic wraps in W. */
#define ISNEG(S, v) ((S) && ((uint64_t)(int64_t)(v) >> 63) != 0) /* no -Wtype-limits */
#define UNARY_INT(sfx, D, T_, W, S, C, MIN, MAX)                                                  \
    static inline T_ f2i_##sfx(float f) {                                                         \
        if (f != f) return 0;                                                                     \
        if ((double)f <= (double)(MIN)) return (MIN);                                             \
        if ((double)f >= (double)(MAX)) return (MAX);                                             \
        return (T_)f;                                                                             \
    }                                                                                             \
    static void unary_##sfx(const ipu__unary_plan *p, const T_ *x, T_ *restrict y, size_t n) {    \
        typedef T_ T;                                                                             \
        const float a = p->p0, b = p->p1;                                                         \
        switch (p->fn) {                                                                          \
            case IPU__UN_NEG: ULOOP((T)(0u - (W)v));                                              \
            case IPU__UN_ABS: ULOOP(ISNEG(S, v) ? (T)(0u - (W)v) : v);                            \
            case IPU__UN_SIGN: ULOOP((T)((v > 0) - ISNEG(S, v)));                                 \
            case IPU__UN_BITWISE_NOT: ULOOP((T) ~(W)v);                                           \
            case IPU__UN_CLIP: {                                                                  \
                const C lo = (C)p->i0, hi = (C)p->i1;                                             \
                for (size_t i = 0; i < n; i++) {                                                  \
                    C t = (C)x[i] < lo ? lo : (C)x[i];                                            \
                    y[i] = (T)(t > hi ? hi : t);                                                  \
                }                                                                                 \
                break;                                                                            \
            }                                                                                     \
            case IPU__UN_SHRINK:                                                                  \
                for (size_t i = 0; i < n; i++) {                                                  \
                    float t = (float)x[i];                                                        \
                    y[i] = t < -b ? f2i_##sfx(t + a) : t > b ? f2i_##sfx(t - a) : (T)0;           \
                }                                                                                 \
                break;                                                                            \
            default: break;                                                                       \
        }                                                                                         \
    }                                                                                             \
    ipu_status ipu__k_unary_##sfx(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, \
                                  void *scratch) {                                                \
        (void)scratch;                                                                            \
        const ipu__unary_plan *p = ins->plan;                                                     \
        uint64_t lo, hi;                                                                          \
        elt_range(p, b, e, &lo, &hi);                                                             \
        const T_ *x = (const T_ *)f->ptr[ins->in[0]];                                             \
        T_ *y = (T_ *)f->ptr[ins->out[0]];                                                        \
        unary_##sfx(p, x + lo, y + lo, (size_t)(hi - lo));                                        \
        return IPU_OK;                                                                            \
    }
IPU__INT_TYPES(UNARY_INT)
#undef UNARY_INT
#undef ISNEG

static int is_classify(int fn) { return fn == IPU__UN_ISNAN || fn == IPU__UN_ISINF; }

ipu_status ipu__k_unary_f32(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                            void *scratch) {
    (void)scratch;
    const ipu__unary_plan *p = ins->plan;
    uint64_t lo, hi;
    elt_range(p, b, e, &lo, &hi);
    const float *x = f->ptr[ins->in[0]];
    if (is_classify(p->fn))
        classify_f32(p, x + lo, (uint8_t *)f->ptr[ins->out[0]] + lo, (size_t)(hi - lo));
    else
        unary_f32(p, x + lo, (float *)f->ptr[ins->out[0]] + lo, (size_t)(hi - lo));
    return IPU_OK;
}

#define F16_CHUNK 512
ipu_status ipu__k_unary_f16(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                            void *scratch) {
    (void)scratch;
    const ipu__unary_plan *p = ins->plan;
    uint64_t lo, hi;
    elt_range(p, b, e, &lo, &hi);
    const uint16_t *x = f->ptr[ins->in[0]];
    uint16_t *y = f->ptr[ins->out[0]];
    float fx[F16_CHUNK], fy[F16_CHUNK];
    for (uint64_t i = lo; i < hi; i += F16_CHUNK) {
        size_t m = hi - i < F16_CHUNK ? (size_t)(hi - i) : F16_CHUNK;
        ipu__cvt_f16_to_f32(x + i, fx, m);
        if (is_classify(p->fn)) {
            classify_f32(p, fx, (uint8_t *)f->ptr[ins->out[0]] + i, m);
            continue;
        }
        unary_f32(p, fx, fy, m);
        ipu__cvt_f32_to_f16(fy, y + i, m);
    }
    return IPU_OK;
}

/* bool (one byte, 0 or 1): NOT. */
ipu_status ipu__k_unary_b8(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                           void *scratch) {
    (void)scratch;
    const ipu__unary_plan *p = ins->plan;
    uint64_t lo, hi;
    elt_range(p, b, e, &lo, &hi);
    const uint8_t *x = f->ptr[ins->in[0]];
    uint8_t *restrict y = f->ptr[ins->out[0]];
    for (uint64_t i = lo; i < hi; i++) y[i] = (uint8_t)(x[i] == 0);
    return IPU_OK;
}

/* Plan functions (verify_internal.h, ipu_ops.def's `plan` column): shapes, attributes, the plan. */

/* UNARY: attrs fn, p0, p1 (float64 bits for floats; CLIP bounds as integers for int dtypes). */
static bool unary_dtype_ok(int64_t fn, ipu_dtype dt) {
    switch (fn) {
        case IPU__UN_NOT: return dt == IPU_DTYPE_BOOL;
        case IPU__UN_NEG: return is_float(dt) || is_sint(dt);
        case IPU__UN_ABS:
        case IPU__UN_SIGN:
        case IPU__UN_CLIP:
        case IPU__UN_SHRINK: return is_arith(dt);
        case IPU__UN_BITWISE_NOT: return is_int(dt);
        default: return is_float(dt);
    }
}

bool ipu__unary_float_fn(int64_t fn) {
    return fn >= 0 && fn < IPU__UN_COUNT && !is_classify((int)fn) &&
           unary_dtype_ok(fn, IPU_DTYPE_FLOAT32);
}

void ipu__unary_apply_f32(int fn, float p0, float p1, float *y, size_t n) {
    ipu__unary_plan p;
    memset(&p, 0, sizeof p);
    p.fn = fn;
    p.p0 = p0;
    p.p1 = p1;
#if IPU_X86
    if (ipu__isa() >= IPU__ISA_AVX2 && unary_f32_avx2(&p, y, y, n)) return; /* in place */
#endif
    float t[256]; /* unary_f32 does not work in place (restrict) */
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        memcpy(t, y + i, m * sizeof(float));
        unary_f32(&p, t, y + i, m);
    }
}

ipu_status ipu__verify_unary(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                             ipu__instr *ins) {
    const ipu__tensor *x = in[0];
    char s1[160], s2[160];
    int64_t fn = ins->attr[0];
    ipu_dtype dt = x->desc.dtype;
    if (fn < 0 || fn >= IPU__UN_COUNT) return bad(v, "unknown unary function %lld", (long long)fn);
    if (!unary_dtype_ok(fn, dt))
        return bad(v, "unary function %lld does not take dtype %s", (long long)fn, dt_str(dt));
    ipu_dtype want = (fn == IPU__UN_ISNAN || fn == IPU__UN_ISINF) ? IPU_DTYPE_BOOL : dt;
    if (y->desc.dtype != want)
        return bad(v, "output dtype %s, expected %s", dt_str(y->desc.dtype), dt_str(want));
    if (!same_shape(x, y))
        return bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, y),
                   shape_str(s2, sizeof s2, x));
    ipu__unary_plan *p;
    if (!(p = alloc_plan(sizeof *p))) return plan_nomem();
    p->fn = (int)fn;
    p->p0 = ipu__attr_f32(ins, 1);
    p->p1 = ipu__attr_f32(ins, 2);
    p->i0 = ins->attr[1];
    p->i1 = ins->attr[2];
    p->numel = y->numel;
    p->hdr.work = (size_t)ceil_div(y->numel, IPU__ELT_BLOCK);
    p->hdr.fn = ipu__select_kernel(ins->op, dt);
    ins->plan = p;
    return IPU_OK;
}
