/* CONV2D's depthwise paths on the window plan (conv.h `direct`: one input and one output
 * channel per group), float32 and float16 (computed in float32); conv.c's run_direct takes the
 * rest. Every output sums its KH x KW taps in (kh, kw) order from zero, a tap outside the input
 * adding 0 * w, in every path here and at every instruction-set level (no FMA): identical
 * windows give identical outputs wherever they are and whichever work item computes them.
 *
 * Stride 1, no dilation, output as wide as the input (pl + pr = KW - 1), float32 (the plan's
 * `dw_same`): no window copy. Tap (kh, kw) of output pixel q = oh * W + ow reads the input at
 * q + (kh - pt) * W + kw - pl, so the taps run in vector blocks along the contiguous pixels of
 * the block's whole rows. Where a tap's column falls outside the pixel's row, the load reads
 * the neighbouring row (or a margin) and a per-column mask clears it to the 0 a pad would
 * give; blocks of pixels inside one row's interior columns need no mask. The block's input
 * rows are read in place when they all lie inside the plane (with the reads of the first and
 * last rows' masked columns), else copied with zero rows for the pads (the top and bottom
 * blocks). The sums go into y or, with a bias, residual or ReLU, into scratch, from which the
 * epilogue writes y in one pass over the block.
 *
 * Other shapes copy the block's zero-padded input rows by stride phase (conv_window.c), then
 * each tap is one long pass over the extended pixels (Wq wide, the Wq - OW extra columns
 * dropped by the epilogue). */
#include <stdbool.h>
#include <string.h>

#include "conv_shared.h"
#include "isa.h"

#if IPU_X86
#include <immintrin.h>
#endif

/* acc[q] = sum over taps k in order of wk[k] * src[rowoff[k] + q], q < n: blocks of 16 pixels
 * summed in registers over all taps (one store per output). The last block ends at n,
 * overlapping the one before (its outputs computed again, the same sums): small maps, whose
 * 49 to 252 extended pixels leave a remainder of up to 15, stay in vector registers. */
static inline __attribute__((always_inline)) void dw_taps_body(const float *src,
                                                               const int64_t *rowoff,
                                                               const float *wk, int64_t kk,
                                                               int64_t n, float *restrict acc) {
    int64_t q = 0;
    for (int64_t end = n >= 16 ? n : 0; q < end; q += 16) {
        if (q + 16 > n) q = n - 16;
        float t[16] = {0};
        for (int64_t k = 0; k < kk; k++) {
            const float *s = src + rowoff[k] + q;
            for (int j = 0; j < 16; j++) t[j] += s[j] * wk[k];
        }
        memcpy(acc + q, t, sizeof t);
    }
    for (; q < n; q++) {
        float t = 0.0f;
        for (int64_t k = 0; k < kk; k++) t += src[rowoff[k] + q] * wk[k];
        acc[q] = t;
    }
}

static void dw_taps_base(const float *src, const int64_t *rowoff, const float *wk, int64_t kk,
                         int64_t n, float *acc) {
    dw_taps_body(src, rowoff, wk, kk, n, acc);
}

#if IPU_X86
__attribute__((target("avx2"))) static void dw_taps_avx2(const float *src, const int64_t *rowoff,
                                                         const float *wk, int64_t kk, int64_t n,
                                                         float *acc) {
    dw_taps_body(src, rowoff, wk, kk, n, acc);
}
/* The same sums in the same order, a group of 16 outputs in one zmm register */
__attribute__((target("avx512f"))) static void dw_taps_avx512(const float *src,
                                                              const int64_t *rowoff,
                                                              const float *wk, int64_t kk,
                                                              int64_t n, float *acc) {
    dw_taps_body(src, rowoff, wk, kk, n, acc);
}
#endif

static void dw_taps(const float *src, const int64_t *rowoff, const float *wk, int64_t kk, int64_t n,
                    float *acc) {
#if IPU_X86
    int isa = ipu__isa();
    if (isa >= IPU__ISA_AVX512) {
        dw_taps_avx512(src, rowoff, wk, kk, n, acc);
        return;
    }
    if (isa >= IPU__ISA_AVX2) {
        dw_taps_avx2(src, rowoff, wk, kk, n, acc);
        return;
    }
#endif
    dw_taps_base(src, rowoff, wk, kk, n, acc);
}

/* ---- stride 1, same width, float32 (the top of the file) ----------------------------- */

enum { DW_V = IPU__DW_V, DW_MAX_KW = IPU__DW_MAX_KW };

/* m[kw][j] = all ones where tap column kw of the output in column col[j] reads inside its
 * row (col[j] + kw - pl in [0, W)), else 0. */
static inline __attribute__((always_inline)) void dw_masks(const int32_t *col, int64_t KW,
                                                           int64_t W, int64_t pl,
                                                           uint32_t (*m)[DW_V]) {
    for (int64_t kw = 0; kw < KW; kw++) {
        int32_t lo = (int32_t)(pl - kw), hi = (int32_t)(W + pl - kw);
        for (int j = 0; j < DW_V; j++) m[kw][j] = col[j] >= lo && col[j] < hi ? 0xffffffffu : 0u;
    }
}

/* acc[q] for q < n, output pixel q of a block of whole rows W wide: the sum over taps k in
 * (kh, kw) order of wk[k] * src[off[k] + q], the input taken as 0 where tap column kw falls
 * outside pixel q's row (the load there reads the neighbouring row, or the margin, and the
 * mask clears it). src: the input row pt above the block's first (off[k] = kh * W + kw - pl);
 * col[i] = i mod W for i < W + DW_V. Blocks of DW_V outputs, the last overlapping the one
 * before, as dw_taps. */
static inline __attribute__((always_inline)) void dw_same_body(const float *src, const int64_t *off,
                                                               const float *wk, int64_t KH,
                                                               int64_t KW, int64_t W, int64_t pl,
                                                               int64_t n, const int32_t *col,
                                                               float *restrict acc) {
    int64_t q = 0, c = 0; /* c = q mod W */
    for (int64_t end = n >= DW_V ? n : 0; q < end; q += DW_V) {
        if (q + DW_V > n) {
            q = n - DW_V;
            c = q % W;
        }
        float t[DW_V] = {0};
        if (c >= pl && c + DW_V + KW - 1 - pl <= W) { /* inside one row: no masks */
            for (int64_t k = 0; k < KH * KW; k++) {
                const float *s = src + off[k] + q;
                for (int j = 0; j < DW_V; j++) t[j] += s[j] * wk[k];
            }
        } else {
            uint32_t m[DW_MAX_KW][DW_V];
            dw_masks(col + c, KW, W, pl, m);
            for (int64_t kh = 0, k = 0; kh < KH; kh++)
                for (int64_t kw = 0; kw < KW; kw++, k++) {
                    const float *s = src + off[k] + q;
                    const float wv = wk[k];
                    for (int j = 0; j < DW_V; j++) {
                        uint32_t b;
                        float v;
                        memcpy(&b, s + j, sizeof b);
                        b &= m[kw][j];
                        memcpy(&v, &b, sizeof v);
                        t[j] += v * wv;
                    }
                }
        }
        memcpy(acc + q, t, sizeof t);
        c += DW_V; /* (mod W: one subtraction unless W < DW_V) */
        c = c < W ? c : c - W < W ? c - W : c % W;
    }
    for (; q < n; q++) { /* fewer than DW_V outputs in all */
        float t = 0.0f;
        int64_t cq = q % W;
        for (int64_t kh = 0, k = 0; kh < KH; kh++)
            for (int64_t kw = 0; kw < KW; kw++, k++) {
                int64_t iw = cq + kw - pl;
                float v = src[off[k] + q];
                t += (iw >= 0 && iw < W ? v : 0.0f) * wk[k];
            }
        acc[q] = t;
    }
}

static void dw_same_base(const float *src, const int64_t *off, const float *wk, int64_t KH,
                         int64_t KW, int64_t W, int64_t pl, int64_t n, const int32_t *col,
                         float *acc) {
    dw_same_body(src, off, wk, KH, KW, W, pl, n, col, acc);
}

#if IPU_X86
/* dw_same_body with the masks and the sums of a block in ymm registers (the same operations
 * in the same order: AND, multiply, add). */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void dw_same_ymm(
    const float *src, const int64_t *off, const float *wk, int64_t KH, int64_t KW, int64_t W,
    int64_t pl, int64_t n, const int32_t *col, float *restrict acc) {
    int64_t q = 0, c = 0;
    for (int64_t end = n >= DW_V ? n : 0; q < end; q += DW_V) {
        if (q + DW_V > n) {
            q = n - DW_V;
            c = q % W;
        }
        __m256 t0 = _mm256_setzero_ps(), t1 = _mm256_setzero_ps();
        if (c >= pl && c + DW_V + KW - 1 - pl <= W) { /* inside one row: no masks */
            for (int64_t k = 0; k < KH * KW; k++) {
                const float *s = src + off[k] + q;
                const __m256 wv = _mm256_set1_ps(wk[k]);
                t0 = _mm256_add_ps(t0, _mm256_mul_ps(_mm256_loadu_ps(s), wv));
                t1 = _mm256_add_ps(t1, _mm256_mul_ps(_mm256_loadu_ps(s + 8), wv));
            }
        } else {
            __m256 m[DW_MAX_KW][2];
            const __m256i c0 = _mm256_loadu_si256((const __m256i *)(col + c));
            const __m256i c1 = _mm256_loadu_si256((const __m256i *)(col + c + 8));
            for (int64_t kw = 0; kw < KW; kw++) {
                const __m256i lo = _mm256_set1_epi32((int32_t)(pl - kw - 1));
                const __m256i hi = _mm256_set1_epi32((int32_t)(W + pl - kw));
                m[kw][0] = _mm256_castsi256_ps(
                    _mm256_and_si256(_mm256_cmpgt_epi32(c0, lo), _mm256_cmpgt_epi32(hi, c0)));
                m[kw][1] = _mm256_castsi256_ps(
                    _mm256_and_si256(_mm256_cmpgt_epi32(c1, lo), _mm256_cmpgt_epi32(hi, c1)));
            }
            for (int64_t kh = 0, k = 0; kh < KH; kh++)
                for (int64_t kw = 0; kw < KW; kw++, k++) {
                    const float *s = src + off[k] + q;
                    const __m256 wv = _mm256_set1_ps(wk[k]);
                    __m256 v0 = _mm256_and_ps(_mm256_loadu_ps(s), m[kw][0]);
                    __m256 v1 = _mm256_and_ps(_mm256_loadu_ps(s + 8), m[kw][1]);
                    t0 = _mm256_add_ps(t0, _mm256_mul_ps(v0, wv));
                    t1 = _mm256_add_ps(t1, _mm256_mul_ps(v1, wv));
                }
        }
        _mm256_storeu_ps(acc + q, t0);
        _mm256_storeu_ps(acc + q + 8, t1);
        c += DW_V; /* (mod W: one subtraction unless W < DW_V) */
        c = c < W ? c : c - W < W ? c - W : c % W;
    }
    if (q < n) dw_same_body(src, off, wk, KH, KW, W, pl, n, col, acc); /* n < DW_V */
}

__attribute__((target("avx2"))) static void dw_same_avx2(const float *src, const int64_t *off,
                                                         const float *wk, int64_t KH, int64_t KW,
                                                         int64_t W, int64_t pl, int64_t n,
                                                         const int32_t *col, float *acc) {
    if (KW == 3) /* constant widths: the column masks stay in registers */
        dw_same_ymm(src, off, wk, KH, 3, W, pl, n, col, acc);
    else if (KW == 5)
        dw_same_ymm(src, off, wk, KH, 5, W, pl, n, col, acc);
    else
        dw_same_ymm(src, off, wk, KH, KW, W, pl, n, col, acc);
}
/* The same sums in the same order, a block of 16 outputs in one zmm register */
__attribute__((target("avx512f"))) static void dw_same_avx512(const float *src, const int64_t *off,
                                                              const float *wk, int64_t KH,
                                                              int64_t KW, int64_t W, int64_t pl,
                                                              int64_t n, const int32_t *col,
                                                              float *acc) {
    dw_same_body(src, off, wk, KH, KW, W, pl, n, col, acc);
}
#endif

/* Row block r of channel g, image n, on the same-width path: see the top of the file. False
 * if it does not fit the scratch. Scratch: the sums (acc), then the block's input rows where
 * it reads pad rows (or within pl of the plane's ends). */
static bool dw_same(const ipu__conv_plan *p, const float *x, const float *w, const void *bias,
                    const void *res, float *y, int64_t n, int64_t g, int64_t r, void *scratch) {
    int64_t oh0 = r * p->rows, nrows = p->OH - oh0 < p->rows ? p->OH - oh0 : p->rows;
    const int64_t W = p->W, H = p->H, KH = p->KH, KW = p->KW, KK = KH * KW, pl = p->pl;
    const int64_t in_rows = nrows + KH - 1, pad = DW_MAX_KW; /* input rows; margin */
    if (nrows * W > IPU__CONV_WIN_C || in_rows * W + 2 * pad > IPU__CONV_WIN_B + IPU__CONV_WIN_XQ)
        return false;
    float *acc = (float *)scratch + IPU__CONV_WIN_A, *rows = acc + IPU__CONV_WIN_C + pad;
    const int64_t *off = p->dwoff;
    const int32_t *col = p->dwcol;
    const float *plane = x + (n * p->C + g) * H * W, *wk = w + g * KK;
    int64_t ih0 = oh0 - p->pt;
    const float *src = plane + ih0 * W;
    if (ih0 < 0 || ih0 + in_rows > H || ih0 * W < pl || (ih0 + in_rows) * W + KW - 1 - pl > H * W) {
        for (int64_t i = 0; i < in_rows; i++) {
            if (ih0 + i >= 0 && ih0 + i < H)
                memcpy(rows + i * W, plane + (ih0 + i) * W, sizeof(float) * (size_t)W);
            else
                memset(rows + i * W, 0, sizeof(float) * (size_t)W);
        }
        src = rows;
    }
    int64_t yoff = ((n * p->M + g) * p->OH + oh0) * p->OW;
    bool ep = bias || res || p->act == IPU__ACT_RELU;
    float *sum = ep ? acc : y + yoff;
#if IPU_X86
    int isa = ipu__isa();
    if (isa >= IPU__ISA_AVX512)
        dw_same_avx512(src, off, wk, KH, KW, W, pl, nrows * W, col, sum);
    else if (isa >= IPU__ISA_AVX2)
        dw_same_avx2(src, off, wk, KH, KW, W, pl, nrows * W, col, sum);
    else
#endif
        dw_same_base(src, off, wk, KH, KW, W, pl, nrows * W, col, sum);
    if (ep) ipu__conv_epilogue_to(p, y + yoff, acc, nrows * W, bias, g, res, yoff);
    return true;
}

/* Depthwise float32 with the window plan (conv.h): the padded input rows of the block are
 * copied by stride phase, then each tap is one long pass acc[q] += w * xq[rowoff[k] + q] over
 * the extended pixels; the epilogue writes the kept columns. False if acc does not fit. */
static bool dw_window_f32(const ipu__conv_plan *p, const float *x, const float *w, const void *bias,
                          const void *res, float *y, int64_t n, int64_t g, int64_t r,
                          void *scratch) {
    int64_t oh0 = r * p->rows, nrows = p->OH - oh0 < p->rows ? p->OH - oh0 : p->rows;
    int64_t Wq = p->Wq, npix = nrows * Wq, KK = p->KH * p->KW;
    if (npix > IPU__CONV_WIN_C) return false;
    float *acc = (float *)scratch + IPU__CONV_WIN_A;
    float *xq = acc + IPU__CONV_WIN_C + IPU__CONV_WIN_B;
    int64_t xoff = (n * p->C + g) * p->H * p->W;
    const float *src = x + xoff + oh0 * p->W;
    if (p->xcopy) {
        ipu__conv_copy_window(p, x, xoff, oh0, nrows, 0, 1, xq, NULL);
        src = xq;
    }
    dw_taps(src, p->rowoff, w + g * KK, KK, npix, acc);
    int64_t off = ((n * p->M + g) * p->OH + oh0) * p->OW;
    ipu__conv_epilogue_rows(p, y + off, p->OW, acc, Wq, nrows, p->OW, bias, g, res, off);
    return true;
}

/* dw_window_f32 for float16: the input rows the block reads converted in one call after
 * the first IPU__SCRATCH_BYTES (at their place in the plane; the channel's weights and the
 * output block after the plane), the window rows copied from there; the epilogue writes the
 * kept columns as contiguous float32 rows (they are y's rows of the block), which one call
 * stores in half. False if it does not fit. */
static bool dw_window_f16(const ipu__conv_plan *p, const uint16_t *x, const uint16_t *w,
                          const void *bias, const void *res, uint16_t *y, int64_t n, int64_t g,
                          int64_t r, void *scratch) {
    int64_t oh0 = r * p->rows, nrows = p->OH - oh0 < p->rows ? p->OH - oh0 : p->rows;
    int64_t Wq = p->Wq, npix = nrows * Wq, KK = p->KH * p->KW, hw = p->H * p->W;
    if (npix > IPU__CONV_WIN_C ||
        hw + KK + nrows * p->OW >
            (int64_t)((IPU__WORKER_SCRATCH_BYTES - IPU__SCRATCH_BYTES) / sizeof(float)))
        return false;
    float *acc = (float *)scratch + IPU__CONV_WIN_A;
    float *xq = acc + IPU__CONV_WIN_C + IPU__CONV_WIN_B;
    float *plane = (float *)((char *)scratch + IPU__SCRATCH_BYTES), *wk = plane + hw;
    float *yb = wk + KK;
    /* the input rows [ih0, ih1) of the block's window, and the up to sh - 1 more the phase
     * copies take (rows no kept output reads); without xcopy, KW is 1: no wider */
    int64_t ih0 = oh0 * p->sh - p->pt,
            ih1 = (oh0 + nrows - 1) * p->sh - p->pt + (p->KH - 1) * p->dh + p->sh;
    ih0 = ih0 < 0 ? 0 : ih0;
    ih1 = ih1 > p->H ? p->H : ih1;
    if (ih1 > ih0)
        ipu__cvt_f16_to_f32(x + (n * p->C + g) * hw + ih0 * p->W, plane + ih0 * p->W,
                            (size_t)((ih1 - ih0) * p->W));
    ipu__cvt_f16_to_f32(w + g * KK, wk, (size_t)KK);
    const float *src = plane + oh0 * p->W;
    if (p->xcopy) {
        ipu__conv_copy_window(p, plane, 0, oh0, nrows, 0, 1, xq, NULL);
        src = xq;
    }
    dw_taps(src, p->rowoff, wk, KK, npix, acc);
    int64_t off = ((n * p->M + g) * p->OH + oh0) * p->OW;
    ipu__conv_epilogue_rows(p, yb, p->OW, acc, Wq, nrows, p->OW, bias, g, res, off);
    ipu__cvt_f32_to_f16(yb, y + off, (size_t)(nrows * p->OW));
    return true;
}

bool ipu__conv_run_dw(const ipu__conv_plan *p, const void *x, const void *w, const void *bias,
                      const void *res, void *y, int64_t n, int64_t g, int64_t r, void *scratch) {
    if (p->f16) return dw_window_f16(p, x, w, bias, res, y, n, g, r, scratch);
    if (p->dw_same && dw_same(p, x, w, bias, res, y, n, g, r, scratch)) return true;
    return dw_window_f32(p, x, w, bias, res, y, n, g, r, scratch);
}
