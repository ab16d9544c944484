/* BINARY (the functions of ipu__binary_fn, per dtype as docs/bytecode.md) and WHERE, with numpy
 * broadcasting of 2 or 3 inputs (ipu__nary_plan, same scheme as the ADD plan). float16 is
 * computed in float32; comparisons write bool (one byte, 0 or 1). Work item = IPU__ELT_BLOCK
 * output elements. Their plan functions are at the end. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "../verify_internal.h"
#include "eltwise.h"
#include "isa.h"

/* BINARY (n_in = 2) and WHERE (n_in = 3): flat output ranges, collapsed broadcast strides of
 * every input in elements (0 = broadcast); element sizes may differ between inputs and y. */
typedef struct ipu__nary_plan {
    ipu__plan hdr;
    uint64_t numel;
    int fn;
    uint32_t ndim, n_in;
    uint32_t ies[3], yes;
    int64_t shape[IPU_MAX_DIMS];
    int64_t st[3][IPU_MAX_DIMS];
} ipu__nary_plan;

/* Inner run: n elements; in[k] points at input k's first element, s[k] is 0 or 1. */
typedef void (*nary_inner)(const void *const *in, const int64_t *s, void *y, size_t n, int fn);

static void nary_run(const ipu__nary_plan *p, const void *const *base, void *y, size_t b, size_t e,
                     nary_inner fn) {
    uint64_t lo = (uint64_t)b * IPU__ELT_BLOCK, hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (hi > p->numel) hi = p->numel;
    uint32_t nd = p->ndim, last = nd - 1, k, ni = p->n_in;
    int64_t idx[IPU_MAX_DIMS], s[3];
    uint64_t r = lo;
    for (uint32_t d = nd; d-- > 0;) {
        idx[d] = (int64_t)(r % (uint64_t)p->shape[d]);
        r /= (uint64_t)p->shape[d];
    }
    for (k = 0; k < ni; k++) s[k] = p->st[k][last];
    while (lo < hi) {
        const void *in[3];
        for (k = 0; k < ni; k++) {
            int64_t o = 0;
            for (uint32_t d = 0; d < nd; d++) o += idx[d] * p->st[k][d];
            in[k] = (const char *)base[k] + (size_t)o * p->ies[k];
        }
        uint64_t run = (uint64_t)(p->shape[last] - idx[last]);
        if (run > hi - lo) run = hi - lo;
        fn(in, s, (char *)y + lo * p->yes, (size_t)run, p->fn);
        lo += run;
        idx[last] += (int64_t)run;
        for (uint32_t d = last; d > 0 && idx[d] == p->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* y[i] = EXPR(x, z) with x, z the inputs' elements; strides 0/1 give four vectorisable loops. */
#define LOOP2(TI, yp, EXPR)                                \
    do {                                                   \
        if (sa && sb) {                                    \
            for (size_t i = 0; i < n; i++) {               \
                TI x = a[i], z = b[i];                     \
                yp[i] = (EXPR);                            \
            }                                              \
        } else if (sa) {                                   \
            const TI z = b[0];                             \
            for (size_t i = 0; i < n; i++) {               \
                TI x = a[i];                               \
                yp[i] = (EXPR);                            \
            }                                              \
        } else if (sb) {                                   \
            const TI x = a[0];                             \
            for (size_t i = 0; i < n; i++) {               \
                TI z = b[i];                               \
                yp[i] = (EXPR);                            \
            }                                              \
        } else {                                           \
            const TI x = a[0], z = b[0];                   \
            for (size_t i = 0; i < n; i++) yp[i] = (EXPR); \
        }                                                  \
    } while (0)

#define CMP_CASES(T)                                                  \
    case IPU__BIN_EQUAL: LOOP2(T, yb, (uint8_t)(x == z)); break;      \
    case IPU__BIN_LESS: LOOP2(T, yb, (uint8_t)(x < z)); break;        \
    case IPU__BIN_GREATER: LOOP2(T, yb, (uint8_t)(x > z)); break;     \
    case IPU__BIN_LESS_EQUAL: LOOP2(T, yb, (uint8_t)(x <= z)); break; \
    case IPU__BIN_GREATER_EQUAL: LOOP2(T, yb, (uint8_t)(x >= z)); break

/* MOD on floats: x - floor(x / z) * z, the sign of z (a zero result too); NaN for z == 0. */
static inline float fmod_floor(float x, float z) {
    float r = fmodf(x, z);
    if (r == 0.0f) return copysignf(0.0f, z);
    return (r < 0) != (z < 0) ? r + z : r;
}

/* POW of contiguous x by one exponent z that has a cheaper form, as numpy's fast scalar powers:
 * x * x (exact), sqrt(x) (correctly rounded) and x^0.75 = sqrt(x) * sqrt(sqrt(x)) (LRN's default
 * beta; within 2 ulp). pow's special cases are kept: pow(-0, z) = +0 and pow(-inf, z) = +inf
 * for z = 0.5 and 0.75, NaN for other negative x. Returns false for other exponents. */
static inline __attribute__((always_inline)) float root_base(float x) {
    return x == -INFINITY ? INFINITY : x + 0.0f; /* -0 + 0 = +0 */
}

static inline __attribute__((always_inline)) bool pow_fast_body(const float *x, float z,
                                                                float *restrict y, size_t n,
                                                                size_t i) {
    if (z == 2.0f) {
        for (; i < n; i++) y[i] = x[i] * x[i];
    } else if (z == 0.5f) {
        for (; i < n; i++) y[i] = sqrtf(root_base(x[i]));
    } else if (z == 0.75f) {
        for (; i < n; i++) {
            float r = sqrtf(root_base(x[i]));
            y[i] = r * sqrtf(r);
        }
    } else {
        return false;
    }
    return true;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
/* The two roots 8 at a time (sqrtf in a loop is not vectorised: errno), the tail as above. */
__attribute__((target("avx2"))) static bool pow_fast_avx2(const float *x, float z, float *y,
                                                          size_t n) {
    if (z != 0.5f && z != 0.75f) return pow_fast_body(x, z, y, n, 0);
    const __m256 ninf = _mm256_set1_ps(-INFINITY), inf = _mm256_set1_ps(INFINITY);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        v = _mm256_blendv_ps(_mm256_add_ps(v, _mm256_setzero_ps()), inf,
                             _mm256_cmp_ps(v, ninf, _CMP_EQ_OQ));
        __m256 r = _mm256_sqrt_ps(v);
        _mm256_storeu_ps(y + i, z == 0.5f ? r : _mm256_mul_ps(r, _mm256_sqrt_ps(r)));
    }
    return pow_fast_body(x, z, y, n, i);
}
#endif

static bool pow_fast(const float *x, float z, float *y, size_t n) {
#if defined(__x86_64__) || defined(__i386__)
    if (ipu__isa() >= IPU__ISA_AVX2) return pow_fast_avx2(x, z, y, n);
#endif
    return pow_fast_body(x, z, y, n, 0);
}

/* MIN/MAX like numpy's minimum/maximum: a NaN operand gives NaN. */
static void bin_f32(const void *const *in, const int64_t *s, void *vy, size_t n, int fn) {
    const float *a = in[0], *b = in[1];
    int64_t sa = s[0], sb = s[1];
    float *restrict y = vy;
    uint8_t *restrict yb = vy;
    switch (fn) {
        case IPU__BIN_POW:
            if (sa && !sb && pow_fast(a, b[0], y, n)) break;
            LOOP2(float, y, powf(x, z));
            break;
        case IPU__BIN_MIN: LOOP2(float, y, (x != x || x < z) ? x : z); break;
        case IPU__BIN_MAX: LOOP2(float, y, (x != x || x > z) ? x : z); break;
        case IPU__BIN_MOD: LOOP2(float, y, fmod_floor(x, z)); break;
        case IPU__BIN_FMOD: LOOP2(float, y, fmodf(x, z)); break;
        case IPU__BIN_PRELU:
            LOOP2(float, y, x < 0 ? z * x : x);
            break;
            CMP_CASES(float);
        default: break;
    }
}

/* Integers (IPU__INT_TYPES): arithmetic wraps in W. POW: exact power by squaring (wraps); a
 * negative exponent gives the truncated 1 / x^-e (1 for x == 1, ±1 for x == -1, else 0). MOD:
 * remainder with the divisor's sign; FMOD: with the dividend's sign; x mod 0 == 0. Shifts: the
 * right shift is arithmetic for signed types; a shift by < 0 or >= the bit width leaves only
 * the sign fill (-1 for a right shift of a negative x, else 0). PRELU: x < 0 ? slope * x : x. */
#define ISNEG(S, v) ((S) && ((uint64_t)(int64_t)(v) >> 63) != 0) /* no -Wtype-limits */
#define BIN_INT(sfx, D, T, W, S, C, MIN, MAX)                                                    \
    static inline T ipow_##sfx(T x, T e) {                                                       \
        if (ISNEG(S, e)) {                                                                       \
            if (x == 1) return 1;                                                                \
            if (S && x == (T)-1) return ((W)e & 1u) ? x : (T)1;                                  \
            return 0;                                                                            \
        }                                                                                        \
        W r = 1, base = (W)x;                                                                    \
        for (uint64_t k = (uint64_t)e; k; k >>= 1) {                                             \
            if (k & 1u) r *= base;                                                               \
            base *= base;                                                                        \
        }                                                                                        \
        return (T)r;                                                                             \
    }                                                                                            \
    static inline T fmod_##sfx(T a, T b) {                                                       \
        if (b == 0 || (S && b == (T)-1)) return 0;                                               \
        return (T)(a % b);                                                                       \
    }                                                                                            \
    static inline T mod_##sfx(T a, T b) {                                                        \
        T r = fmod_##sfx(a, b);                                                                  \
        return (r != 0 && ISNEG(S, r) != ISNEG(S, b)) ? (T)((W)r + (W)b) : r;                    \
    }                                                                                            \
    /* arithmetic for signed T, written without right-shifting a negative value */               \
    static inline T shr_##sfx(T x, T z) {                                                        \
        int neg = ISNEG(S, x);                                                                   \
        if (ISNEG(S, z) || (uint64_t)z >= 8 * sizeof(T)) return neg ? (T)-1 : (T)0;              \
        return neg ? (T) ~(~(W)x >> (W)z) : (T)((W)x >> (W)z);                                   \
    }                                                                                            \
    static void bin_##sfx(const void *const *in, const int64_t *s, void *vy, size_t n, int fn) { \
        const T *a = in[0], *b = in[1];                                                          \
        int64_t sa = s[0], sb = s[1];                                                            \
        const uint64_t bits = 8 * sizeof(T);                                                     \
        T *restrict y = vy;                                                                      \
        uint8_t *restrict yb = vy;                                                               \
        switch (fn) {                                                                            \
            case IPU__BIN_POW: LOOP2(T, y, ipow_##sfx(x, z)); break;                             \
            case IPU__BIN_MIN: LOOP2(T, y, x < z ? x : z); break;                                \
            case IPU__BIN_MAX: LOOP2(T, y, x > z ? x : z); break;                                \
            case IPU__BIN_MOD: LOOP2(T, y, mod_##sfx(x, z)); break;                              \
            case IPU__BIN_FMOD: LOOP2(T, y, fmod_##sfx(x, z)); break;                            \
            case IPU__BIN_BITSHIFT_LEFT:                                                         \
                LOOP2(T, y, (ISNEG(S, z) || (uint64_t)z >= bits) ? (T)0 : (T)((W)x << (W)z));    \
                break;                                                                           \
            case IPU__BIN_BITSHIFT_RIGHT: LOOP2(T, y, shr_##sfx(x, z)); break;                   \
            case IPU__BIN_BITWISE_AND: LOOP2(T, y, (T)((W)x & (W)z)); break;                     \
            case IPU__BIN_BITWISE_OR: LOOP2(T, y, (T)((W)x | (W)z)); break;                      \
            case IPU__BIN_BITWISE_XOR: LOOP2(T, y, (T)((W)x ^ (W)z)); break;                     \
            case IPU__BIN_PRELU:                                                                 \
                LOOP2(T, y, ISNEG(S, x) ? (T)((W)z * (W)x) : x);                                 \
                break;                                                                           \
                CMP_CASES(T);                                                                    \
            default: break;                                                                      \
        }                                                                                        \
    }
IPU__INT_TYPES(BIN_INT)
#undef BIN_INT
#undef ISNEG

/* bool: EQUAL, AND, OR, XOR on the truth values. */
static void bin_b8(const void *const *in, const int64_t *s, void *vy, size_t n, int fn) {
    const uint8_t *a = in[0], *b = in[1];
    int64_t sa = s[0], sb = s[1];
    uint8_t *restrict yb = vy;
    switch (fn) {
        case IPU__BIN_EQUAL: LOOP2(uint8_t, yb, (uint8_t)((x != 0) == (z != 0))); break;
        case IPU__BIN_AND: LOOP2(uint8_t, yb, (uint8_t)((x != 0) & (z != 0))); break;
        case IPU__BIN_OR: LOOP2(uint8_t, yb, (uint8_t)((x != 0) | (z != 0))); break;
        case IPU__BIN_XOR: LOOP2(uint8_t, yb, (uint8_t)((x != 0) ^ (z != 0))); break;
        default: break;
    }
}

/* float16: convert chunks to float32, run the float32 loop, round back (or write bools). */
#define F16_CHUNK 256
static void bin_f16(const void *const *in, const int64_t *s, void *vy, size_t n, int fn) {
    const uint16_t *a = in[0], *b = in[1];
    float fa[F16_CHUNK], fb[F16_CHUNK], fy[F16_CHUNK];
    const void *fin[2] = {fa, fb};
    int cmp = ipu__bin_is_cmp(fn);
    if (!s[0]) fa[0] = ipu__f16_to_f32(a[0]);
    if (!s[1]) fb[0] = ipu__f16_to_f32(b[0]);
    for (size_t i = 0; i < n; i += F16_CHUNK) {
        size_t m = n - i < F16_CHUNK ? n - i : F16_CHUNK;
        if (s[0]) ipu__cvt_f16_to_f32(a + i, fa, m);
        if (s[1]) ipu__cvt_f16_to_f32(b + i, fb, m);
        if (cmp) {
            bin_f32(fin, s, (uint8_t *)vy + i, m, fn);
        } else {
            bin_f32(fin, s, fy, m, fn);
            ipu__cvt_f32_to_f16(fy, (uint16_t *)vy + i, m);
        }
    }
}

#define BIN_KERNEL(sfx, ...)                                                                       \
    ipu_status ipu__k_binary_##sfx(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, \
                                   void *scratch) {                                                \
        (void)scratch;                                                                             \
        const void *base[2] = {f->ptr[ins->in[0]], f->ptr[ins->in[1]]};                            \
        nary_run(ins->plan, base, f->ptr[ins->out[0]], b, e, bin_##sfx);                           \
        return IPU_OK;                                                                             \
    }
BIN_KERNEL(f32)
BIN_KERNEL(f16)
BIN_KERNEL(b8)
IPU__INT_TYPES(BIN_KERNEL)

/* WHERE: y = cond ? x : z, selected on element size (any dtype). */
#define WHERE_LOOP(T)                                                               \
    do {                                                                            \
        const T *x = in[1], *z = in[2];                                             \
        T *restrict y = vy;                                                         \
        for (size_t i = 0; i < n; i++)                                              \
            y[i] = c[(size_t)s[0] * i] ? x[(size_t)s[1] * i] : z[(size_t)s[2] * i]; \
    } while (0)

static void where_inner(const void *const *in, const int64_t *s, void *vy, size_t n, int es) {
    const uint8_t *c = in[0];
    switch (es) {
        case 1: WHERE_LOOP(uint8_t); break;
        case 2: WHERE_LOOP(uint16_t); break;
        case 4: WHERE_LOOP(uint32_t); break;
        case 8: WHERE_LOOP(uint64_t); break;
        default: break;
    }
}

ipu_status ipu__k_where(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                        void *scratch) {
    (void)scratch;
    const void *base[3] = {f->ptr[ins->in[0]], f->ptr[ins->in[1]], f->ptr[ins->in[2]]};
    nary_run(ins->plan, base, f->ptr[ins->out[0]], b, e, where_inner);
    return IPU_OK;
}

/* Plan functions (verify_internal.h, ipu_ops.def's `plan` column): shapes, attributes, the plan. */

static bool binary_dtype_ok(int fn, ipu_dtype dt) {
    switch (fn) {
        case IPU__BIN_EQUAL: return is_arith(dt) || dt == IPU_DTYPE_BOOL;
        case IPU__BIN_AND:
        case IPU__BIN_OR:
        case IPU__BIN_XOR: return dt == IPU_DTYPE_BOOL;
        case IPU__BIN_BITWISE_AND:
        case IPU__BIN_BITWISE_OR:
        case IPU__BIN_BITWISE_XOR:
        case IPU__BIN_BITSHIFT_LEFT:
        case IPU__BIN_BITSHIFT_RIGHT: return is_int(dt);
        default: return is_arith(dt); /* POW, MIN, MAX, comparisons, MOD, FMOD, PRELU */
    }
}

/* BINARY and WHERE, once their dtypes are checked: every input broadcast to y; the plan's fn
 * is `fn`, its kernel chosen for dtype dt. */
static ipu_status plan_nary(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins, int fn, ipu_dtype dt) {
    char s1[160], s2[160];
    uint32_t n = ins->n_in, nd = y->desc.ndim;
    /* y must be exactly the broadcast of the inputs' shapes */
    uint32_t maxnd = 0;
    for (uint32_t k = 0; k < n; k++)
        if (in[k]->desc.ndim > maxnd) maxnd = in[k]->desc.ndim;
    bool ok = maxnd == nd;
    for (uint32_t i = 0; ok && i < nd; i++) {
        int64_t want = 1, dy = y->desc.dims[nd - 1 - i];
        for (uint32_t k = 0; ok && k < n; k++) {
            const ipu__tensor *t = in[k];
            int64_t d = i < t->desc.ndim ? t->desc.dims[t->desc.ndim - 1 - i] : 1;
            if (d != 1 && want != 1 && d != want) ok = false;
            if (d != 1) want = d;
        }
        ok = ok && dy == want;
    }
    if (!ok)
        return bad(v, "output y%s is not the broadcast of the inputs (first input %s)",
                   shape_str(s1, sizeof s1, y), shape_str(s2, sizeof s2, in[0]));
    ipu__nary_plan *p;
    if (!(p = alloc_plan(sizeof *p))) return plan_nomem();
    int64_t shape[IPU_MAX_DIMS];
    memcpy(shape, y->desc.dims, sizeof shape);
    for (uint32_t k = 0; k < n; k++) {
        ipu__vbcast_strides(in[k], 0, nd, y->desc.dims, p->st[k]);
        p->ies[k] = (uint32_t)ipu_dtype_size(in[k]->desc.dtype);
    }
    /* collapse: drop size-1 dims, merge dims contiguous in every input */
    uint32_t o = 0;
    for (uint32_t d = 0; d < nd; d++) {
        if (shape[d] == 1) continue;
        bool merge = o > 0;
        for (uint32_t k = 0; merge && k < n; k++) merge = p->st[k][o - 1] == p->st[k][d] * shape[d];
        if (merge) {
            p->shape[o - 1] *= shape[d];
            for (uint32_t k = 0; k < n; k++) p->st[k][o - 1] = p->st[k][d];
        } else {
            p->shape[o] = shape[d];
            for (uint32_t k = 0; k < n; k++) p->st[k][o] = p->st[k][d];
            o++;
        }
    }
    if (o == 0) {
        p->shape[0] = 1;
        for (uint32_t k = 0; k < n; k++) p->st[k][0] = 0;
        o = 1;
    }
    p->ndim = o;
    p->n_in = n;
    p->fn = fn;
    p->yes = (uint32_t)ipu_dtype_size(y->desc.dtype);
    p->numel = y->numel;
    p->hdr.work = (size_t)ceil_div(y->numel, IPU__ELT_BLOCK);
    p->hdr.fn = ipu__select_kernel(ins->op, dt);
    ins->plan = p;
    return IPU_OK;
}

/* BINARY: attr fn; a and b of one dtype, y of it too or bool (comparisons). */
ipu_status ipu__verify_binary(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    ipu_dtype dt = in[1]->desc.dtype;
    if (ins->attr[0] < 0 || ins->attr[0] >= IPU__BIN_COUNT)
        return bad(v, "unknown binary function %lld", (long long)ins->attr[0]);
    int fn = (int)ins->attr[0];
    if (!binary_dtype_ok(fn, dt))
        return bad(v, "binary function %d does not take dtype %s", fn, dt_str(dt));
    ipu_dtype want = ipu__bin_is_cmp(fn) ? IPU_DTYPE_BOOL : dt;
    if (in[0]->desc.dtype != dt || y->desc.dtype != want)
        return bad(v, "dtypes %s, %s -> %s, expected %s, %s -> %s", dt_str(in[0]->desc.dtype),
                   dt_str(dt), dt_str(y->desc.dtype), dt_str(dt), dt_str(dt), dt_str(want));
    return plan_nary(v, in, y, ins, fn, dt);
}

/* WHERE (cond, x, z): cond bool, x, z and y of one dtype; the plan's fn is its element size. */
ipu_status ipu__verify_where(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                             ipu__instr *ins) {
    ipu_dtype dt = in[2]->desc.dtype;
    if (in[0]->desc.dtype != IPU_DTYPE_BOOL || in[1]->desc.dtype != dt || y->desc.dtype != dt ||
        !is_castable(dt))
        return bad(v, "dtypes (%s, %s, %s) -> %s, expected (bool, T, T) -> T",
                   dt_str(in[0]->desc.dtype), dt_str(in[1]->desc.dtype), dt_str(dt),
                   dt_str(y->desc.dtype));
    return plan_nary(v, in, y, ins, (int)ipu_dtype_size(dt), dt);
}
