/* UNARY: one opcode for the element-wise functions of ipu__unary_fn (docs/bytecode.md). float32
 * uses the C math library (the NumPy reference uses the same formulations); float16 is computed
 * in float32 in chunks; int32/int64 (NEG, ABS, SIGN, CLIP) wrap; bool (NOT). Work item =
 * IPU__ELT_BLOCK elements. One switch per work item, then a tight loop per function. */
#include <math.h>

#include "kernels.h"

static void elt_range(const ipu__unary_plan *p, size_t b, size_t e, uint64_t *lo, uint64_t *hi) {
    *lo = (uint64_t)b * IPU__ELT_BLOCK;
    *hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (*hi > p->numel) *hi = p->numel;
}

#define ULOOP(EXPR)                    \
    for (size_t i = 0; i < n; i++) {   \
        T v = x[i];                    \
        y[i] = (EXPR);                 \
    }                                  \
    break

static void unary_f32(const ipu__unary_plan *p, const float *x, float *restrict y, size_t n) {
    typedef float T;
    const float a = p->p0, b = p->p1;
    switch (p->fn) {
        case IPU__UN_NEG: ULOOP(-v);
        case IPU__UN_ABS: ULOOP(fabsf(v));
        case IPU__UN_SIGN: ULOOP(v > 0 ? 1.0f : v < 0 ? -1.0f : v); /* NaN, ±0 unchanged */
        case IPU__UN_SIGMOID: ULOOP(1.0f / (1.0f + expf(-v)));
        case IPU__UN_TANH: ULOOP(tanhf(v));
        case IPU__UN_EXP: ULOOP(expf(v));
        case IPU__UN_LOG: ULOOP(logf(v));
        case IPU__UN_SQRT: ULOOP(sqrtf(v));
        case IPU__UN_ERF: ULOOP(erff(v));
        case IPU__UN_RECIPROCAL: ULOOP(1.0f / v);
        case IPU__UN_SIN: ULOOP(sinf(v));
        case IPU__UN_COS: ULOOP(cosf(v));
        case IPU__UN_FLOOR: ULOOP(floorf(v));
        case IPU__UN_CEIL: ULOOP(ceilf(v));
        case IPU__UN_ROUND: ULOOP(nearbyintf(v)); /* default rounding mode: half to even */
        case IPU__UN_SOFTPLUS: ULOOP((v > 0 ? v : 0.0f) + log1pf(expf(-fabsf(v))));
        case IPU__UN_LEAKY_RELU: ULOOP(v >= 0 ? v : a * v);
        case IPU__UN_ELU: ULOOP(v >= 0 ? v : a * expm1f(v));
        case IPU__UN_HARD_SIGMOID: {
            for (size_t i = 0; i < n; i++) {
                float t = a * x[i] + b;
                t = t > 0 ? t : 0.0f;
                y[i] = t < 1 ? t : 1.0f;
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
        default: break;
    }
}

#define UNARY_INT(sfx, T_, U)                                                                  \
    static void unary_##sfx(const ipu__unary_plan *p, const T_ *x, T_ *restrict y, size_t n) { \
        typedef T_ T;                                                                          \
        switch (p->fn) {                                                                       \
            case IPU__UN_NEG: ULOOP((T)(0u - (U)v));                                           \
            case IPU__UN_ABS: ULOOP(v < 0 ? (T)(0u - (U)v) : v);                               \
            case IPU__UN_SIGN: ULOOP((T)((v > 0) - (v < 0)));                                  \
            case IPU__UN_CLIP: {                                                               \
                const int64_t lo = p->i0, hi = p->i1;                                          \
                for (size_t i = 0; i < n; i++) {                                               \
                    int64_t t = (int64_t)x[i] < lo ? lo : (int64_t)x[i];                       \
                    y[i] = (T)(t > hi ? hi : t);                                               \
                }                                                                              \
                break;                                                                         \
            }                                                                                  \
            default: break;                                                                    \
        }                                                                                      \
    }
UNARY_INT(i32, int32_t, uint32_t)
UNARY_INT(i64, int64_t, uint64_t)

#define UNARY_KERNEL(sfx, T)                                                                      \
    ipu_status ipu__k_unary_##sfx(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, \
                                  void *scratch) {                                                \
        (void)scratch;                                                                            \
        const ipu__unary_plan *p = ins->plan;                                                     \
        uint64_t lo, hi;                                                                          \
        elt_range(p, b, e, &lo, &hi);                                                             \
        const T *x = (const T *)f->ptr[ins->in[0]];                                               \
        T *y = (T *)f->ptr[ins->out[0]];                                                          \
        unary_##sfx(p, x + lo, y + lo, (size_t)(hi - lo));                                        \
        return IPU_OK;                                                                            \
    }
UNARY_KERNEL(f32, float)
UNARY_KERNEL(i32, int32_t)
UNARY_KERNEL(i64, int64_t)

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
