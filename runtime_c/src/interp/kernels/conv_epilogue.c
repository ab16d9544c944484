/* CONV2D's epilogue (docs/bytecode.md): y = act(sum + bias[co] + residual), from a row of sums
 * (a C tile in scratch, or y itself) into y; shared by conv.c's paths and winograd.c. The GEMM
 * path applies the same operations inside the micro-kernel's store (gemm_f32.c, ipu__ukr.ep). */
#include <stdbool.h>
#include <string.h>

#include "kernels.h"

#if IPU_X86
#include <immintrin.h>
#endif

/* dst[j] = act(src[j] + bias[co] + res[off + j]) for j < n (bias, res optional; dst may be
 * src), one pass. */
static inline __attribute__((always_inline)) void epilogue_body(const ipu__conv_plan *p,
                                                                float *dst, const float *src,
                                                                int64_t n, const void *bias,
                                                                int64_t co, const void *res,
                                                                int64_t off) {
    float bv = bias ? ipu__ld_f32(bias, p->f16, co) : 0.0f;
    int relu = p->act == IPU__ACT_RELU;
    if (res && p->f16) {
        for (int64_t j = 0; j < n; j++) dst[j] = src[j] + bv + ipu__ld_f32(res, 1, off + j);
        src = dst;
        res = bias = NULL;
        bv = 0.0f;
    }
    const float *r = res ? (const float *)res + off : NULL;
    if (!bias && !r && !relu) {
        if (dst != src) memcpy(dst, src, sizeof(float) * (size_t)n);
        return;
    }
    if (!bias && !r) { /* relu only */
        for (int64_t j = 0; j < n; j++) dst[j] = ipu__relu_f32(src[j]);
        return;
    }
    if (r && relu) {
        for (int64_t j = 0; j < n; j++) dst[j] = ipu__relu_f32(src[j] + bv + r[j]);
    } else if (r) {
        for (int64_t j = 0; j < n; j++) dst[j] = src[j] + bv + r[j];
    } else if (relu) {
        for (int64_t j = 0; j < n; j++) dst[j] = ipu__relu_f32(src[j] + bv);
    } else {
        for (int64_t j = 0; j < n; j++) dst[j] = src[j] + bv;
    }
}

/* The epilogue over nrows rows of n: row r from src + r * ss to dst + r * ds (the residual at
 * off + r * ds: it has y's layout). One call per block of rows (the window path's output rows
 * are short). */
static inline __attribute__((always_inline)) void epilogue_rows_body(
    const ipu__conv_plan *p, float *dst, int64_t ds, const float *src, int64_t ss, int64_t nrows,
    int64_t n, const void *bias, int64_t co, const void *res, int64_t off) {
    for (int64_t r = 0; r < nrows; r++)
        epilogue_body(p, dst + r * ds, src + r * ss, n, bias, co, res, off + r * ds);
}

static void epilogue_base(const ipu__conv_plan *p, float *dst, int64_t ds, const float *src,
                          int64_t ss, int64_t nrows, int64_t n, const void *bias, int64_t co,
                          const void *res, int64_t off) {
    epilogue_rows_body(p, dst, ds, src, ss, nrows, n, bias, co, res, off);
}

#if IPU_X86
/* The same operations in the same order, 8 lanes wide (no FMA: results identical), the end of
 * each row under a mask: the rows of 13- to 111-wide maps would otherwise spend a third to
 * most of their time in a scalar remainder. */
__attribute__((target("avx2"))) static void epilogue_avx2(const ipu__conv_plan *p, float *dst,
                                                          int64_t ds, const float *src,
                                                          int64_t ss, int64_t nrows, int64_t n,
                                                          const void *bias, int64_t co,
                                                          const void *res, int64_t off) {
    const bool relu = p->act == IPU__ACT_RELU;
    if ((res && p->f16) || (!bias && !res && !relu)) { /* float16 residuals; a copy */
        epilogue_rows_body(p, dst, ds, src, ss, nrows, n, bias, co, res, off);
        return;
    }
    const __m256 vb = _mm256_set1_ps(bias ? ipu__ld_f32(bias, p->f16, co) : 0.0f);
    const __m256 zero = _mm256_setzero_ps();
    const int64_t nv = n / 8 * 8;
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - nv)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int64_t r = 0; r < nrows; r++) {
        const float *s = src + r * ss, *q = res ? (const float *)res + off + r * ds : NULL;
        float *d = dst + r * ds;
        for (int64_t j = 0; j < n; j += 8) {
            bool part = j == nv;
            __m256 v = part ? _mm256_maskload_ps(s + j, tail) : _mm256_loadu_ps(s + j);
            if (bias) v = _mm256_add_ps(v, vb);
            if (q) v = _mm256_add_ps(v, part ? _mm256_maskload_ps(q + j, tail)
                                             : _mm256_loadu_ps(q + j));
            if (relu) v = _mm256_and_ps(v, _mm256_cmp_ps(v, zero, _CMP_NLE_UQ)); /* NaN stays */
            if (part)
                _mm256_maskstore_ps(d + j, tail, v);
            else
                _mm256_storeu_ps(d + j, v);
        }
    }
}
#endif

void ipu__conv_epilogue_rows(const ipu__conv_plan *p, float *dst, int64_t ds, const float *src,
                             int64_t ss, int64_t nrows, int64_t n, const void *bias, int64_t co,
                             const void *res, int64_t off) {
#if IPU_X86
    if (__builtin_cpu_supports("avx2")) {
        epilogue_avx2(p, dst, ds, src, ss, nrows, n, bias, co, res, off);
        return;
    }
#endif
    epilogue_base(p, dst, ds, src, ss, nrows, n, bias, co, res, off);
}
