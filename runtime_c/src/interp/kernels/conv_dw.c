/* CONV2D's depthwise paths on the window plan (conv.h `direct`: one input and one output
 * channel per group), float32 and float16 (computed in float32); conv.c's run_direct takes the
 * rest. Every output sums its KH x KW taps in (kh, kw) order from zero, a tap outside the input
 * adding 0 * w, in every path here and at every instruction-set level (no FMA): identical
 * windows give identical outputs wherever they are and whichever work item computes them.
 *
 * Stride 1, no dilation, output as wide as the input ("same" width: pl + pr = KW - 1), float32:
 * no copy. Tap (kh, kw) of output pixel q = oh * W + ow is the input at q + (kh - pt) * W +
 * (kw - pl), so over the output rows whose taps all lie in the plane's rows one pass of
 * dw_taps runs along the contiguous pixels [oh * W + pl, oh' * W - pr) of the whole block,
 * reading only inside the plane; the first pl and last pr columns of each row read the
 * neighbouring rows there, and are summed again one at a time (dw_pixel); the other rows (the
 * top pt and bottom pb ones, or all when H < KH or W < KW) go tap by tap over the row with the
 * pads' columns bounded (dw_row). The sums go into y (then the epilogue in place) or, with a
 * bias, residual or ReLU, into scratch and the epilogue writes y in one pass over the block.
 *
 * Other shapes copy the block's zero-padded input rows by stride phase (conv_window.c), then
 * each tap is one long pass over the extended pixels (Wq wide, the Wq - OW extra columns
 * dropped by the epilogue). */
#include <stdbool.h>
#include <string.h>

#include "conv_shared.h"
#include "isa.h"

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

#define DW_MAX_TAPS 128 /* KH * KW of the same-width path at most (its offsets on the stack) */

/* Output pixel (oh, ow) summed alone: its taps in (kh, kw) order, those outside the plane
 * adding 0 * w as the copied pads do. */
static inline __attribute__((always_inline)) float dw_pixel(const ipu__conv_plan *p,
                                                            const float *plane, const float *wk,
                                                            int64_t oh, int64_t ow) {
    const int64_t W = p->W;
    float t = 0.0f;
    for (int64_t kh = 0; kh < p->KH; kh++) {
        int64_t ih = oh - p->pt + kh;
        bool in = ih >= 0 && ih < p->H;
        for (int64_t kw = 0; kw < p->KW; kw++) {
            int64_t iw = ow - p->pl + kw;
            float v = in && iw >= 0 && iw < W ? plane[ih * W + iw] : 0.0f;
            t += v * wk[kh * p->KW + kw];
        }
    }
    return t;
}

/* Output row oh into t[0, W): tap by tap over the row, each pixel's taps in (kh, kw) order,
 * the columns (or the whole row) a tap reads outside the plane adding 0 * w. */
static inline __attribute__((always_inline)) void dw_row(const ipu__conv_plan *p,
                                                         const float *plane, const float *wk,
                                                         int64_t oh, float *restrict t) {
    const int64_t W = p->W;
    for (int64_t ow = 0; ow < W; ow++) t[ow] = 0.0f;
    for (int64_t kh = 0; kh < p->KH; kh++) {
        int64_t ih = oh - p->pt + kh;
        bool in = ih >= 0 && ih < p->H;
        for (int64_t kw = 0; kw < p->KW; kw++) {
            float wv = wk[kh * p->KW + kw], z = 0.0f * wv;
            int64_t d = kw - p->pl; /* pixel ow reads input column ow + d */
            int64_t lo = d < 0 ? -d : 0, hi = W - d < W ? W - d : W;
            if (!in) lo = hi = W;
            if (lo > W) lo = W;
            if (hi < lo) hi = lo;
            for (int64_t ow = 0; ow < lo; ow++) t[ow] += z;
            if (hi > lo) {
                const float *xr = plane + ih * W + lo + d; /* input column lo + d >= 0 */
                float *tt = t + lo;
                for (int64_t j = 0; j < hi - lo; j++) tt[j] += xr[j] * wv;
            }
            for (int64_t ow = hi; ow < W; ow++) t[ow] += z;
        }
    }
}

/* Output rows [oh0, oh0 + nrows) of one channel plane into acc (nrows x W): see the top of the
 * file. off[k]: tap k's offset from its output pixel's index. */
static inline __attribute__((always_inline)) void dw_same_body(const ipu__conv_plan *p,
                                                               const float *plane, const float *wk,
                                                               const int64_t *off, int64_t oh0,
                                                               int64_t nrows, float *restrict acc) {
    const int64_t W = p->W, pl = p->pl, pr = p->KW - 1 - p->pl;
    /* rows [ra, rb) of the block: every tap row inside the plane (and a column too) */
    int64_t ra = p->pt > oh0 ? p->pt : oh0, rb = p->H - p->KH + 1 + p->pt;
    if (rb > oh0 + nrows) rb = oh0 + nrows;
    if (W < p->KW || rb < ra) rb = ra;
    if (ra < rb) {
        /* reads from (ra - pt) * W >= 0 to (rb - pt + KH - 1) * W - 1 < H * W */
        int64_t q0 = ra * W + pl, q1 = rb * W - pr;
        dw_taps_body(plane + q0, off, wk, p->KH * p->KW, q1 - q0, acc + (q0 - oh0 * W));
        for (int64_t oh = ra; oh < rb; oh++) { /* the columns that read a neighbouring row */
            float *t = acc + (oh - oh0) * W;
            for (int64_t ow = 0; ow < pl; ow++) t[ow] = dw_pixel(p, plane, wk, oh, ow);
            for (int64_t ow = W - pr; ow < W; ow++) t[ow] = dw_pixel(p, plane, wk, oh, ow);
        }
    }
    for (int64_t oh = oh0; oh < oh0 + nrows; oh++)
        if (oh < ra || oh >= rb) dw_row(p, plane, wk, oh, acc + (oh - oh0) * W);
}

static void dw_same_base(const ipu__conv_plan *p, const float *plane, const float *wk,
                         const int64_t *off, int64_t oh0, int64_t nrows, float *acc) {
    dw_same_body(p, plane, wk, off, oh0, nrows, acc);
}

#if IPU_X86
__attribute__((target("avx2"))) static void dw_same_avx2(const ipu__conv_plan *p,
                                                         const float *plane, const float *wk,
                                                         const int64_t *off, int64_t oh0,
                                                         int64_t nrows, float *acc) {
    dw_same_body(p, plane, wk, off, oh0, nrows, acc);
}
__attribute__((target("avx512f"))) static void dw_same_avx512(const ipu__conv_plan *p,
                                                              const float *plane, const float *wk,
                                                              const int64_t *off, int64_t oh0,
                                                              int64_t nrows, float *acc) {
    dw_same_body(p, plane, wk, off, oh0, nrows, acc);
}
#endif

/* Does the same-width path take this float32 plan? */
static bool dw_same_fits(const ipu__conv_plan *p) {
    return !p->f16 && p->sh == 1 && p->sw == 1 && p->dh == 1 && p->dw == 1 && p->OW == p->W &&
           p->pt >= 0 && p->pl >= 0 && p->pl < p->KW && p->KH * p->KW <= DW_MAX_TAPS;
}

/* Row block r of channel g, image n, on the same-width path. False if the block's sums do not
 * fit the scratch. */
static bool dw_same(const ipu__conv_plan *p, const float *x, const float *w, const void *bias,
                    const void *res, float *y, int64_t n, int64_t g, int64_t r, void *scratch) {
    int64_t oh0 = r * p->rows, nrows = p->OH - oh0 < p->rows ? p->OH - oh0 : p->rows;
    const int64_t W = p->W, KK = p->KH * p->KW;
    if (nrows * W > IPU__CONV_WIN_C) return false;
    int64_t off[DW_MAX_TAPS];
    for (int64_t k = 0; k < KK; k++) off[k] = (k / p->KW - p->pt) * W + k % p->KW - p->pl;
    int64_t yoff = ((n * p->M + g) * p->OH + oh0) * p->OW;
    bool ep = bias || res || p->act == IPU__ACT_RELU;
    float *acc = ep ? (float *)scratch + IPU__CONV_WIN_A : y + yoff;
    const float *plane = x + (n * p->C + g) * p->H * W, *wk = w + g * KK;
#if IPU_X86
    int isa = ipu__isa();
    if (isa >= IPU__ISA_AVX512)
        dw_same_avx512(p, plane, wk, off, oh0, nrows, acc);
    else if (isa >= IPU__ISA_AVX2)
        dw_same_avx2(p, plane, wk, off, oh0, nrows, acc);
    else
#endif
        dw_same_base(p, plane, wk, off, oh0, nrows, acc);
    if (ep) ipu__conv_epilogue_to(p, y + yoff, acc, nrows * W, bias, g, res, yoff);
    return true;
}

/* Depthwise float32 with the window plan (conv.h): the padded input rows of the block are
 * copied by stride phase, then each tap is one long pass acc[q] += w * xq[rowoff[k] + q] over
 * the extended pixels; the epilogue writes the kept columns. False if acc does not fit. */
static bool dw_window_f32(const ipu__conv_plan *p, const float *x, const float *w,
                              const void *bias, const void *res, float *y, int64_t n, int64_t g,
                              int64_t r, void *scratch) {
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
                                  const void *bias, const void *res, uint16_t *y, int64_t n,
                                  int64_t g, int64_t r, void *scratch) {
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
    if (dw_same_fits(p) && dw_same(p, x, w, bias, res, y, n, g, r, scratch)) return true;
    return dw_window_f32(p, x, w, bias, res, y, n, g, r, scratch);
}
