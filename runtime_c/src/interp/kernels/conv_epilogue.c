/* CONV2D's epilogue (docs/bytecode.md): y = act(sum + bias[co] + residual), from a row of sums
 * (a C tile in scratch, or y itself) into y; shared by conv.c's paths and winograd.c. The GEMM
 * path applies the same operations inside the micro-kernel's store (gemm_f32.c, ipu__ukr.ep). */
#include <stdbool.h>
#include <string.h>

#include "conv.h"
#include "isa.h"
#include "tr8.h"

/* dst[j] = act(src[j] + bias[co] + res[off + j]) for j < n (bias, res optional; dst may be
 * src), one pass. */
static inline __attribute__((always_inline)) void epilogue_body(const ipu__conv_plan *p, float *dst,
                                                                const float *src, int64_t n,
                                                                const void *bias, int64_t co,
                                                                const void *res, int64_t off) {
    float bv = bias ? ipu__ld_f32(bias, p->f16, co) : 0.0f;
    int relu = p->act == IPU__ACT_RELU;
    if (res && p->f16) { /* the half residual converted in blocks, added with the bias */
        float rb[256];
        for (int64_t j0 = 0; j0 < n; j0 += 256) {
            int64_t c = n - j0 < 256 ? n - j0 : 256;
            ipu__cvt_f16_to_f32((const uint16_t *)res + off + j0, rb, (size_t)c);
            for (int64_t j = 0; j < c; j++) dst[j0 + j] = src[j0 + j] + bv + rb[j];
        }
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

/* The small-map path's epilogue: row c of dst (channel co + c, c < nch, at dst + c * ds) from
 * column c of C^T (pixel i at ct[i * ldc + c], i < np). */
static void epilogue_t_base(const ipu__conv_plan *p, float *dst, int64_t ds, const float *ct,
                            int64_t ldc, int64_t np, int64_t nch, const void *bias, int64_t co,
                            const void *res, int64_t off) {
    float col[8];
    for (int64_t c = 0; c < nch; c++)
        for (int64_t i0 = 0; i0 < np; i0 += 8) { /* through a column buffer: one pass each */
            int64_t n = np - i0 < 8 ? np - i0 : 8;
            for (int64_t i = 0; i < n; i++) col[i] = ct[(i0 + i) * ldc + c];
            epilogue_body(p, dst + c * ds + i0, col, n, bias, co + c, res, off + c * ds + i0);
        }
}

#if IPU_X86
/* The same operations in the same order, 8 lanes wide (no FMA: results identical), the end of
 * each row under a mask: the rows of 13- to 111-wide maps would otherwise spend a third to
 * most of their time in a scalar remainder. */
__attribute__((target("avx2"))) static void epilogue_avx2(const ipu__conv_plan *p, float *dst,
                                                          int64_t ds, const float *src, int64_t ss,
                                                          int64_t nrows, int64_t n,
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
            if (q)
                v = _mm256_add_ps(v,
                                  part ? _mm256_maskload_ps(q + j, tail) : _mm256_loadu_ps(q + j));
            if (relu) v = _mm256_and_ps(v, _mm256_cmp_ps(v, zero, _CMP_NLE_UQ)); /* NaN stays */
            if (part)
                _mm256_maskstore_ps(d + j, tail, v);
            else
                _mm256_storeu_ps(d + j, v);
        }
    }
}
/* Block (c0, i0) of epilogue_t_avx2: w channels of h pixels (constant 8 and 8 in the usual
 * case, so that the block stays in registers); `tail` masks the pixels when h < 8. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void epilogue_t_block(
    float *dst, int64_t ds, const float *ct, int64_t ldc, int64_t h, int64_t w, __m256 vb,
    bool bias, const float *res, bool relu, __m256i tail) {
    const __m256 zero = _mm256_setzero_ps();
    __m256 r[8];
    for (int64_t i = 0; i < 8; i++) {
        r[i] = i < h ? _mm256_loadu_ps(ct + i * ldc) : zero;
        if (bias) r[i] = _mm256_add_ps(r[i], vb);
    }
    ipu__tr8(r);
    for (int64_t t = 0; t < w; t++) {
        __m256 v = r[t];
        if (res)
            v = _mm256_add_ps(v, h == 8 ? _mm256_loadu_ps(res + t * ds)
                                        : _mm256_maskload_ps(res + t * ds, tail));
        if (relu) v = _mm256_and_ps(v, _mm256_cmp_ps(v, zero, _CMP_NLE_UQ));
        if (h == 8)
            _mm256_storeu_ps(dst + t * ds, v);
        else
            _mm256_maskstore_ps(dst + t * ds, tail, v);
    }
}

/* epilogue_t_base by 8 x 8 blocks transposed in registers: bias added before the transpose
 * (one vector of 8 channels), residual and activation after, in epilogue_body's order. C^T's
 * rows hold whole blocks of 8 channels (the micro-kernel's padded width). */
__attribute__((target("avx2"))) static void epilogue_t_avx2(const ipu__conv_plan *p, float *dst,
                                                            int64_t ds, const float *ct,
                                                            int64_t ldc, int64_t np, int64_t nch,
                                                            const void *bias, int64_t co,
                                                            const void *res, int64_t off) {
    const bool relu = p->act == IPU__ACT_RELU;
    if (res && p->f16) {
        epilogue_t_base(p, dst, ds, ct, ldc, np, nch, bias, co, res, off);
        return;
    }
    const int64_t nv = np / 8 * 8;
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(np - nv)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const float *r = res ? (const float *)res + off : NULL;
    for (int64_t c0 = 0; c0 < nch; c0 += 8) {
        int64_t w = nch - c0 < 8 ? nch - c0 : 8;
        float b8[8] = {0};
        for (int64_t t = 0; bias && t < w; t++) b8[t] = ipu__ld_f32(bias, p->f16, co + c0 + t);
        const __m256 vb = _mm256_loadu_ps(b8);
        float *d = dst + c0 * ds;
        const float *q = r ? r + c0 * ds : NULL;
        for (int64_t i0 = 0; i0 < np; i0 += 8) {
            const float *s = ct + i0 * ldc + c0, *qi = q ? q + i0 : NULL;
            if (w == 8 && i0 < nv && relu && bias && !q) /* the usual case, its own copy */
                epilogue_t_block(d + i0, ds, s, ldc, 8, 8, vb, true, NULL, true, tail);
            else if (w == 8 && i0 < nv)
                epilogue_t_block(d + i0, ds, s, ldc, 8, 8, vb, bias, qi, relu, tail);
            else
                epilogue_t_block(d + i0, ds, s, ldc, np - i0 < 8 ? np - i0 : 8, w, vb, bias, qi,
                                 relu, tail);
        }
    }
}
#endif

void ipu__conv_epilogue_rows(const ipu__conv_plan *p, float *dst, int64_t ds, const float *src,
                             int64_t ss, int64_t nrows, int64_t n, const void *bias, int64_t co,
                             const void *res, int64_t off) {
#if IPU_X86
    if (ipu__isa() >= IPU__ISA_AVX2) {
        epilogue_avx2(p, dst, ds, src, ss, nrows, n, bias, co, res, off);
        return;
    }
#endif
    epilogue_base(p, dst, ds, src, ss, nrows, n, bias, co, res, off);
}

void ipu__conv_epilogue_t(const ipu__conv_plan *p, float *dst, int64_t ds, const float *ct,
                          int64_t ldc, int64_t np, int64_t nch, const void *bias, int64_t co,
                          const void *res, int64_t off) {
#if IPU_X86
    if (ipu__isa() >= IPU__ISA_AVX2) {
        epilogue_t_avx2(p, dst, ds, ct, ldc, np, nch, bias, co, res, off);
        return;
    }
#endif
    epilogue_t_base(p, dst, ds, ct, ldc, np, nch, bias, co, res, off);
}

void ipu__conv_epilogue_t_f16(const ipu__conv_plan *p, uint16_t *dst, int64_t ds, const float *ct,
                              int64_t ldc, int64_t np, int64_t nch, const void *bias, int64_t co,
                              const void *res, int64_t off) {
    enum { PIX = IPU__CONV_T_PIX + IPU__SGEMM_MAX_MR };
    float rows[8 * PIX], b8[8];
    /* the transpose with the bias only (a float32 plan); the residual and the activation on
     * the rows, in epilogue_body's order */
    ipu__conv_plan q = *p;
    q.f16 = 0;
    q.act = IPU__ACT_NONE;
    for (int64_t c0 = 0; c0 < nch; c0 += 8) {
        int64_t w = nch - c0 < 8 ? nch - c0 : 8;
        if (bias) ipu__cvt_f16_to_f32((const uint16_t *)bias + co + c0, b8, (size_t)w);
        ipu__conv_epilogue_t(&q, rows, PIX, ct + c0, ldc, np, w, bias ? b8 : NULL, 0, NULL, 0);
        for (int64_t c = 0; c < w; c++) {
            float *row = rows + c * PIX;
            int64_t o = off + (c0 + c) * ds;
            if (res || p->act != IPU__ACT_NONE)
                ipu__conv_epilogue_rows(p, row, np, row, np, 1, np, NULL, co + c0 + c, res, o);
            ipu__cvt_f32_to_f16(row, dst + (c0 + c) * ds, (size_t)np);
        }
    }
}
