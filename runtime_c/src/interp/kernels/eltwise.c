/* Element-wise kernels: ADD/SUB/MUL/DIV with numpy broadcasting and RELU, for float32, float16
 * (computed in float32) and every integer type of IPU__INT_TYPES (wrap-around, computed in
 * unsigned types; division truncates, x/0 == 0, MIN/-1 == MIN). Work item = IPU__ELT_BLOCK
 * output elements. Their plan functions (bcast, relu, scale_shift) are at the end. */
#include <string.h>

#include "../verify_internal.h"
#include "eltwise.h"
#include "isa.h"

/* SCALE_SHIFT: x viewed as [outer, c, inner] (c = x.dims[axis]); y = act(x * scale[ch] +
 * shift[ch]). Work item = IPU__ELT_BLOCK output elements. */
typedef struct ipu__affine_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    uint64_t numel, c, inner;
    int relu;
} ipu__affine_plan;

#if IPU_X86
#include <immintrin.h>
#endif

/* ---- broadcast iteration ------------------------------------------------------------------- */

void ipu__bcast_run(const ipu__bcast_plan *p, const void *a, const void *b, void *y, uint64_t lo,
                    uint64_t hi, ipu__inner_fn fn) {
    uint32_t nd = p->ndim, last = nd - 1;
    size_t es = p->esize;
    if (nd == 1) { /* common fast path: one contiguous or scalar-broadcast run */
        const char *pa = (const char *)a + (size_t)(lo * (uint64_t)p->sa[0]) * es;
        const char *pb = b ? (const char *)b + (size_t)(lo * (uint64_t)p->sb[0]) * es : NULL;
        fn(pa, p->sa[0], pb, b ? p->sb[0] : 0, (char *)y + lo * es, (size_t)(hi - lo), p->esize);
        return;
    }
    int64_t idx[IPU_MAX_DIMS];
    uint64_t r = lo;
    for (uint32_t d = nd; d-- > 0;) {
        idx[d] = (int64_t)(r % (uint64_t)p->shape[d]);
        r /= (uint64_t)p->shape[d];
    }
    while (lo < hi) {
        int64_t oa = 0, ob = 0;
        for (uint32_t d = 0; d < nd; d++) {
            oa += idx[d] * p->sa[d];
            ob += idx[d] * p->sb[d];
        }
        uint64_t run = (uint64_t)(p->shape[last] - idx[last]);
        if (run > hi - lo) run = hi - lo;
        fn((const char *)a + (size_t)oa * es, p->sa[last],
           b ? (const char *)b + (size_t)ob * es : NULL, p->sb[last], (char *)y + lo * es,
           (size_t)run, p->esize);
        lo += run;
        idx[last] += (int64_t)run;
        for (uint32_t d = last; d > 0 && idx[d] == p->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* ---- inner loops --------------------------------------------------------------------------- */

/* sa, sb are 0 (broadcast) or 1 (contiguous): four loops the compiler can vectorise. */
#define BIN_LOOP(name, T, EXPR)                                                                  \
    static void name(const void *va, int64_t sa, const void *vb, int64_t sb, void *vy, size_t n, \
                     uint32_t es) {                                                              \
        (void)es;                                                                                \
        const T *a = va, *b = vb;                                                                \
        T *restrict y = vy;                                                                      \
        if (sa && sb) {                                                                          \
            for (size_t i = 0; i < n; i++) {                                                     \
                T x = a[i], z = b[i];                                                            \
                y[i] = EXPR;                                                                     \
            }                                                                                    \
        } else if (sa) {                                                                         \
            const T z = b[0];                                                                    \
            for (size_t i = 0; i < n; i++) {                                                     \
                T x = a[i];                                                                      \
                y[i] = EXPR;                                                                     \
            }                                                                                    \
        } else if (sb) {                                                                         \
            const T x = a[0];                                                                    \
            for (size_t i = 0; i < n; i++) {                                                     \
                T z = b[i];                                                                      \
                y[i] = EXPR;                                                                     \
            }                                                                                    \
        } else {                                                                                 \
            const T x = a[0], z = b[0], v = EXPR;                                                \
            for (size_t i = 0; i < n; i++) y[i] = v;                                             \
        }                                                                                        \
    }

BIN_LOOP(add_f32, float, x + z)
BIN_LOOP(sub_f32, float, x - z)
BIN_LOOP(mul_f32, float, x *z)
BIN_LOOP(div_f32, float, x / z)

/* float16, an input contiguous (the other contiguous too, or one value broadcast: sa, sb 1 or
 * 0): whole vectors converted, the float32 operation, rounded once to nearest even (f16cvt.c's
 * conversion, in registers); returns how many were done (a multiple of the vector width, 0 at
 * the portable level). */
#if IPU_X86
#define F16_VEC(name, op512, op256)                                                               \
    __attribute__((target("avx512f"))) static size_t name##_avx512(const uint16_t *a, int64_t sa, \
                                                                   const uint16_t *b, int64_t sb, \
                                                                   uint16_t *y, size_t n) {       \
        size_t i = 0;                                                                             \
        const __m512 x0 = _mm512_set1_ps(ipu__f16_to_f32(a[0]));                                  \
        const __m512 z0 = _mm512_set1_ps(ipu__f16_to_f32(b[0]));                                  \
        for (; i + 16 <= n; i += 16) {                                                            \
            __m512 x = sa ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i))) : x0;   \
            __m512 z = sb ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))) : z0;   \
            _mm256_storeu_si256((__m256i *)(y + i),                                               \
                                _mm512_cvtps_ph(op512(x, z), _MM_FROUND_TO_NEAREST_INT));         \
        }                                                                                         \
        return i;                                                                                 \
    }                                                                                             \
    __attribute__((target("avx,f16c"))) static size_t name##_f16c(const uint16_t *a, int64_t sa,  \
                                                                  const uint16_t *b, int64_t sb,  \
                                                                  uint16_t *y, size_t n) {        \
        size_t i = 0;                                                                             \
        const __m256 x0 = _mm256_set1_ps(ipu__f16_to_f32(a[0]));                                  \
        const __m256 z0 = _mm256_set1_ps(ipu__f16_to_f32(b[0]));                                  \
        for (; i + 8 <= n; i += 8) {                                                              \
            __m256 x = sa ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i))) : x0;      \
            __m256 z = sb ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))) : z0;      \
            _mm_storeu_si128((__m128i *)(y + i),                                                  \
                             _mm256_cvtps_ph(op256(x, z), _MM_FROUND_TO_NEAREST_INT));            \
        }                                                                                         \
        return i;                                                                                 \
    }                                                                                             \
    static size_t name(const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, uint16_t *y, \
                       size_t n) {                                                                \
        switch (ipu__isa()) {                                                                     \
            case IPU__ISA_AVX512: return name##_avx512(a, sa, b, sb, y, n);                       \
            case IPU__ISA_AVX2: return name##_f16c(a, sa, b, sb, y, n);                           \
            default: return 0;                                                                    \
        }                                                                                         \
    }
F16_VEC(add_f16_vec, _mm512_add_ps, _mm256_add_ps)
F16_VEC(sub_f16_vec, _mm512_sub_ps, _mm256_sub_ps)
F16_VEC(mul_f16_vec, _mm512_mul_ps, _mm256_mul_ps)
F16_VEC(div_f16_vec, _mm512_div_ps, _mm256_div_ps)
#else
#define F16_NOVEC(name)                                                                           \
    static size_t name(const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, uint16_t *y, \
                       size_t n) {                                                                \
        (void)a, (void)sa, (void)b, (void)sb, (void)y, (void)n;                                   \
        return 0;                                                                                 \
    }
F16_NOVEC(add_f16_vec)
F16_NOVEC(sub_f16_vec)
F16_NOVEC(mul_f16_vec)
F16_NOVEC(div_f16_vec)
#endif

/* float16: convert chunks to float32, run the float32 loop, round back (an input contiguous:
 * the whole vectors in registers first). */
#define F16_CHUNK 256
#define F16_LOOP(name, f32loop, vec)                                                             \
    static void name(const void *va, int64_t sa, const void *vb, int64_t sb, void *vy, size_t n, \
                     uint32_t es) {                                                              \
        (void)es;                                                                                \
        const uint16_t *a = va, *b = vb;                                                         \
        uint16_t *y = vy;                                                                        \
        if (sa || sb) {                                                                          \
            size_t done = vec(a, sa, b, sb, y, n);                                               \
            a += sa ? done : 0, b += sb ? done : 0, y += done, n -= done;                        \
        }                                                                                        \
        float fa[F16_CHUNK], fb[F16_CHUNK], fy[F16_CHUNK];                                       \
        if (!sa) fa[0] = ipu__f16_to_f32(a[0]);                                                  \
        if (!sb) fb[0] = ipu__f16_to_f32(b[0]);                                                  \
        for (size_t i = 0; i < n; i += F16_CHUNK) {                                              \
            size_t m = n - i < F16_CHUNK ? n - i : F16_CHUNK;                                    \
            if (sa) ipu__cvt_f16_to_f32(a + i, fa, m);                                           \
            if (sb) ipu__cvt_f16_to_f32(b + i, fb, m);                                           \
            f32loop(fa, sa, fb, sb, fy, m, 4);                                                   \
            ipu__cvt_f32_to_f16(fy, y + i, m);                                                   \
        }                                                                                        \
    }

F16_LOOP(add_f16, add_f32, add_f16_vec)
F16_LOOP(sub_f16, sub_f32, sub_f16_vec)
F16_LOOP(mul_f16, mul_f32, mul_f16_vec)
F16_LOOP(div_f16, div_f32, div_f16_vec)

/* ---- kernels ------------------------------------------------------------------------------- */

static void elt_range(const ipu__bcast_plan *p, size_t b, size_t e, uint64_t *lo, uint64_t *hi) {
    *lo = (uint64_t)b * IPU__ELT_BLOCK;
    *hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (*hi > p->numel) *hi = p->numel;
}

#define BIN_KERNEL(name, inner)                                                                \
    ipu_status name(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,            \
                    void *scratch) {                                                           \
        (void)scratch;                                                                         \
        const ipu__bcast_plan *p = ins->plan;                                                  \
        uint64_t lo, hi;                                                                       \
        elt_range(p, b, e, &lo, &hi);                                                          \
        ipu__bcast_run(p, f->ptr[ins->in[0]], f->ptr[ins->in[1]], f->ptr[ins->out[0]], lo, hi, \
                       inner);                                                                 \
        return IPU_OK;                                                                         \
    }

BIN_KERNEL(ipu__k_add_f32, add_f32)
BIN_KERNEL(ipu__k_sub_f32, sub_f32)
BIN_KERNEL(ipu__k_mul_f32, mul_f32)
BIN_KERNEL(ipu__k_div_f32, div_f32)
BIN_KERNEL(ipu__k_add_f16, add_f16)
BIN_KERNEL(ipu__k_sub_f16, sub_f16)
BIN_KERNEL(ipu__k_mul_f16, mul_f16)
BIN_KERNEL(ipu__k_div_f16, div_f16)

/* Integers: wrap-around in the unsigned type W; division truncates, x/0 == 0, MIN/-1 == MIN.
 * RELU: max(x, 0) (the identity on unsigned types). */
#define INT_ELT(sfx, D, T, W, S, C, MIN, MAX)                                                    \
    static inline T div1_##sfx(T a, T b) {                                                       \
        if (b == 0) return 0;                                                                    \
        if (S && b == (T)-1) return (T)(0u - (W)a);                                              \
        return (T)(a / b);                                                                       \
    }                                                                                            \
    BIN_LOOP(add_##sfx, T, (T)((W)x + (W)z))                                                     \
    BIN_LOOP(sub_##sfx, T, (T)((W)x - (W)z))                                                     \
    BIN_LOOP(mul_##sfx, T, (T)((W)x * (W)z))                                                     \
    BIN_LOOP(div_##sfx, T, div1_##sfx(x, z))                                                     \
    BIN_KERNEL(ipu__k_add_##sfx, add_##sfx)                                                      \
    BIN_KERNEL(ipu__k_sub_##sfx, sub_##sfx)                                                      \
    BIN_KERNEL(ipu__k_mul_##sfx, mul_##sfx)                                                      \
    BIN_KERNEL(ipu__k_div_##sfx, div_##sfx)                                                      \
    ipu_status ipu__k_relu_##sfx(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, \
                                 void *scratch) {                                                \
        (void)scratch;                                                                           \
        uint64_t lo, hi;                                                                         \
        elt_range(ins->plan, b, e, &lo, &hi);                                                    \
        const T *x = (const T *)f->ptr[ins->in[0]];                                              \
        T *restrict y = (T *)f->ptr[ins->out[0]];                                                \
        for (uint64_t i = lo; i < hi; i++) y[i] = x[i] > 0 ? x[i] : (T)0;                        \
        return IPU_OK;                                                                           \
    }
IPU__INT_TYPES(INT_ELT)
#undef INT_ELT

/* RELU (float32): y = max(x, 0) like the reference's np.maximum(x, 0): NaN propagates,
 * -0.0 -> +0.0. */
ipu_status ipu__k_relu_f32(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                           void *scratch) {
    (void)scratch;
    uint64_t lo, hi;
    elt_range(ins->plan, b, e, &lo, &hi);
    const float *x = f->ptr[ins->in[0]];
    float *restrict y = f->ptr[ins->out[0]];
    for (uint64_t i = lo; i < hi; i++) y[i] = ipu__relu_f32(x[i]);
    return IPU_OK;
}
ipu_status ipu__k_relu_f16(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                           void *scratch) {
    (void)scratch;
    uint64_t lo, hi;
    elt_range(ins->plan, b, e, &lo, &hi);
    const uint16_t *x = f->ptr[ins->in[0]];
    uint16_t *restrict y = f->ptr[ins->out[0]];
    for (uint64_t i = lo; i < hi; i++) {
        uint16_t h = x[i];
        /* sign bit set and not NaN (incl. -0.0) -> +0 */
        y[i] = ((h & 0x8000u) && (h & 0x7fffu) <= 0x7c00u) ? (uint16_t)0 : h;
    }
    return IPU_OK;
}

/* ---- SCALE_SHIFT --------------------------------------------------------------------------- */

/* y = x * s + t (st = 0: one scale and shift for the run; 1: one per element), then the RELU
 * above when relu is set. */
static void affine_f32(const float *x, const float *s, const float *t, int64_t st,
                       float *restrict y, size_t n, int relu) {
    if (st) {
        for (size_t i = 0; i < n; i++) y[i] = x[i] * s[i] + t[i];
    } else {
        const float s0 = s[0], t0 = t[0];
        for (size_t i = 0; i < n; i++) y[i] = x[i] * s0 + t0;
    }
    if (relu)
        for (size_t i = 0; i < n; i++) y[i] = ipu__relu_f32(y[i]);
}

static void affine_f16(const uint16_t *x, const uint16_t *s, const uint16_t *t, int64_t st,
                       uint16_t *y, size_t n, int relu) {
    float fx[F16_CHUNK], fs[F16_CHUNK], ft[F16_CHUNK], fy[F16_CHUNK];
    if (!st) {
        fs[0] = ipu__f16_to_f32(s[0]);
        ft[0] = ipu__f16_to_f32(t[0]);
    }
    for (size_t i = 0; i < n; i += F16_CHUNK) {
        size_t m = n - i < F16_CHUNK ? n - i : F16_CHUNK;
        ipu__cvt_f16_to_f32(x + i, fx, m);
        if (st) {
            ipu__cvt_f16_to_f32(s + i, fs, m);
            ipu__cvt_f16_to_f32(t + i, ft, m);
        }
        affine_f32(fx, fs, ft, st, fy, m, relu);
        ipu__cvt_f32_to_f16(fy, y + i, m);
    }
}

/* Runs of one channel (inner > 1) share a scale and shift; with inner == 1 the channels run
 * along the row instead. */
ipu_status ipu__k_scale_shift(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                              void *scratch) {
    (void)scratch;
    const ipu__affine_plan *p = ins->plan;
    uint64_t lo = (uint64_t)b * IPU__ELT_BLOCK, hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (hi > p->numel) hi = p->numel;
    const char *x = f->ptr[ins->in[0]], *s = f->ptr[ins->in[1]], *t = f->ptr[ins->in[2]];
    char *y = f->ptr[ins->out[0]];
    size_t es = p->dtype == IPU_DTYPE_FLOAT16 ? 2 : 4;
    while (lo < hi) {
        uint64_t ch, run;
        if (p->inner == 1) {
            ch = lo % p->c;
            run = p->c - ch;
        } else {
            uint64_t q = lo / p->inner;
            ch = q % p->c;
            run = p->inner - (lo - q * p->inner);
        }
        if (run > hi - lo) run = hi - lo;
        int64_t st = p->inner == 1;
        if (es == 2)
            affine_f16((const uint16_t *)(x + lo * es), (const uint16_t *)(s + ch * es),
                       (const uint16_t *)(t + ch * es), st, (uint16_t *)(y + lo * es), run,
                       p->relu);
        else
            affine_f32((const float *)(x + lo * es), (const float *)(s + ch * es),
                       (const float *)(t + ch * es), st, (float *)(y + lo * es), run, p->relu);
        lo += run;
    }
    return IPU_OK;
}

/* Plan functions (verify_internal.h, ipu_ops.def's `plan` column): shapes, attributes, the plan. */

/* SCALE_SHIFT: attrs axis, activation; scale and shift have x.dims[axis] elements. */
ipu_status ipu__verify_scale_shift(const vctx *v, const ipu__tensor *const *in,
                                   const ipu__tensor *y, ipu__instr *ins) {
    char s1[160], s2[160];
    const ipu__tensor *x = in[0];
    int64_t axis = ins->attr[0], act = ins->attr[1];
    if (!same_shape(x, y))
        return bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, y),
                   shape_str(s2, sizeof s2, x));
    if (axis < 0 || axis >= (int64_t)x->desc.ndim)
        return bad(v, "axis %lld outside [0, %u)", (long long)axis, x->desc.ndim);
    ipu_status st = ipu__vact(v, act);
    if (st) return st;
    uint64_t c = (uint64_t)x->desc.dims[axis], inner = 1;
    for (uint32_t i = 1; i < 3; i++)
        if (in[i]->numel != c)
            return bad(v, "%s has %llu elements, expected x.dims[%lld] = %llu",
                       i == 1 ? "scale" : "shift", (unsigned long long)in[i]->numel,
                       (long long)axis, (unsigned long long)c);
    for (uint32_t d = (uint32_t)axis + 1; d < x->desc.ndim; d++)
        if (!ipu__mul_u64(inner, (uint64_t)x->desc.dims[d], &inner))
            return bad(v, "x%s is too large", shape_str(s1, sizeof s1, x));
    ipu__affine_plan *p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    p->dtype = x->desc.dtype;
    p->numel = x->numel;
    p->c = c;
    p->inner = inner;
    p->relu = (int)act;
    p->hdr.work = (size_t)ceil_div(x->numel, IPU__ELT_BLOCK);
    p->hdr.fn = ipu__select_kernel(ins->op, p->dtype);
    ins->plan = p;
    return IPU_OK;
}

/* ADD, SUB, MUL, DIV: a and b broadcast to y. */
ipu_status ipu__verify_bcast(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                             ipu__instr *ins) {
    ipu_status st = ipu__vcheck_bcast(v, in[0], in[1], y, 0, "shapes");
    if (st) return st;
    return ipu__vplan_bcast(v, in[0], in[1], y, ins);
}

ipu_status ipu__verify_relu(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins) {
    char s1[160], s2[160];
    if (!same_shape(in[0], y))
        return bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, y),
                   shape_str(s2, sizeof s2, in[0]));
    return ipu__vplan_bcast(v, in[0], NULL, y, ins);
}
