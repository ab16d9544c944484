/* POOL2D (docs/bytecode.md): max / average pooling over 2-D windows, NCHW, float32/float16
 * (computed in float32); work item = a block of output rows of a plane, or several whole small
 * planes (the plan's `planes`). float32: the window path (pool_window_body) copies the padded
 * input rows of the block by stride phase, then each tap is one long vectorised pass (AVX2 where
 * the CPU has it); max pools of 3-column windows at strides 2 go by blocks of 16 outputs with
 * masked loads (pool_s2.c, AVX-512); other wide max pools of column stride 2 take their rows'
 * column maxima first (pool_max_rows, AVX2); stride-1 pools whose output plane is the
 * input's, on small planes, take masked taps over whole planes (pool_same, AVX2). float16
 * takes those on the input rows an item reads, converted into scratch, its outputs stored in
 * half after them; else rows go tap by tap over a row of accumulators in scratch; a per-pixel
 * fallback takes rows too wide for the scratch. Each output takes its taps in (kh, kw) order on every path. */
#include <math.h>
#include <stdbool.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "isa.h"
#include "pool.h"

/* The running max after tap v (docs/bytecode.md): v replaces acc only if greater, so of equal
 * values the first stays, or if v is NaN and acc is not, so the first NaN wins. Bitwise
 * operators keep it branch-free (it vectorises). */
static inline float max_tap(float acc, float v) {
    return ((v > acc) | ((v != v) & (acc == acc))) ? v : acc;
}

/* a[t] = max_tap(a[t], xr[t * sw]) or a[t] + xr[t * sw], t < n. */
static inline __attribute__((always_inline)) void tap_f32(float *restrict a,
                                                          const float *restrict xr, int64_t n,
                                                          int64_t sw, int kind) {
    if (kind == 0) {
        if (sw == 1)
            for (int64_t t = 0; t < n; t++) a[t] = max_tap(a[t], xr[t]);
        else
            for (int64_t t = 0; t < n; t++) a[t] = max_tap(a[t], xr[t * sw]);
    } else if (sw == 1) {
        for (int64_t t = 0; t < n; t++) a[t] += xr[t];
    } else {
        for (int64_t t = 0; t < n; t++) a[t] += xr[t * sw];
    }
}

/* Taps of output o's window along one axis (stride s, pads p0 before and p1 after, k taps
 * dilated by d, n inputs) inside the padded (count_include_pad) or the valid range; an
 * average's divisor is the product of its row's and its column's. */
static int64_t taps_inside(int64_t o, int64_t s, int64_t p0, int64_t p1, int64_t k, int64_t d,
                           int64_t n, bool cip) {
    int64_t c = 0;
    for (int64_t t = 0; t < k; t++) {
        int64_t i = o * s - p0 + t * d;
        c += cip ? i >= -p0 && i < n + p1 : i >= 0 && i < n;
    }
    return c;
}
static int64_t rows_inside(const ipu__pool_plan *p, int64_t oh) {
    return taps_inside(oh, p->sh, p->pt, p->pb, p->KH, p->dh, p->H, p->cip);
}
static int64_t cols_inside(const ipu__pool_plan *p, int64_t ow) {
    return taps_inside(ow, p->sw, p->pl, p->pr, p->KW, p->dw, p->W, p->cip);
}

/* Output row oh of plane `plane` into acc[OW]; cw[ow] = cols_inside(p, ow), for averages. */
static void pool_row(const ipu__pool_plan *p, const void *x, int64_t xoff, int64_t oh, float *acc,
                     const float *cw) {
    for (int64_t ow = 0; ow < p->OW; ow++) acc[ow] = p->kind == 0 ? -INFINITY : 0.0f;
    for (int64_t kh = 0; kh < p->KH; kh++) {
        int64_t ih = oh * p->sh - p->pt + kh * p->dh;
        if (ih < 0 || ih >= p->H) continue;
        int64_t base = xoff + ih * p->W, sw = p->sw;
        for (int64_t kw = 0; kw < p->KW; kw++) {
            int64_t iw0 = kw * p->dw - p->pl; /* input column of output ow: ow*sw + iw0 */
            int64_t lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
            int64_t hi = iw0 >= p->W ? 0 : (p->W - iw0 + sw - 1) / sw;
            if (hi > p->OW) hi = p->OW;
            if (lo >= hi) continue;
            float *a = acc + lo;
            int64_t n = hi - lo, s0 = base + lo * sw + iw0;
            if (p->f16) {
                for (int64_t t = 0; t < n; t++) {
                    float v = ipu__ld_f32(x, 1, s0 + t * sw);
                    a[t] = p->kind == 0 ? max_tap(a[t], v) : a[t] + v;
                }
            } else {
                tap_f32(a, (const float *)x + s0, n, sw, p->kind);
            }
        }
    }
    if (p->kind == 1) {
        float nh = (float)rows_inside(p, oh);
        for (int64_t ow = 0; ow < p->OW; ow++) acc[ow] /= nh * cw[ow];
    }
}

/* The window path folds whole blocks of FOLD_BLOCK outputs (no scalar tail): the planes are
 * followed by Wq + FOLD_BLOCK pad values, which the last block's taps read past the rows, and
 * the accumulators by FOLD_BLOCK spare floats. */
enum { FOLD_BLOCK = 16 };

/* Scratch floats the float32 window path needs for blocks of `rows` output rows of `np` planes
 * (see below). */
static int64_t window_floats(const ipu__pool_plan *p, int64_t rows, int64_t np, int64_t *hq,
                             int64_t *wq) {
    *wq = p->OW + (p->KW - 1) * p->dw / p->sw;
    *hq = rows + (p->KH - 1) * p->dh / p->sh;
    return (p->sh * p->sw + 1) * np * *hq * *wq + *wq + 2 * FOLD_BLOCK;
}

/* acc[q] = the taps' taps[k][q] folded in tap order, q < n: max (NaN-propagating, as tap_f32)
 * or sum, starting from pad, or from acc[q] when resuming after earlier taps. */
enum { FOLD_TAPS = 16 };
typedef void (*fold_fn)(float *acc, const float *const *taps, int64_t ntaps, int64_t n, int kind,
                        float pad, bool resume);

static void fold_base(float *acc, const float *const *taps, int64_t ntaps, int64_t n, int kind,
                      float pad, bool resume) {
    if (!resume)
        for (int64_t q = 0; q < n; q++) acc[q] = pad;
    for (int64_t k = 0; k < ntaps; k++) tap_f32(acc, taps[k], n, 1, kind);
}

/* One output's taps in order, exactly as tap_f32 takes them. */
static inline float fold_one(const float *const *taps, int64_t ntaps, int64_t q, int kind,
                             float a) {
    for (int64_t k = 0; k < ntaps; k++) {
        float v = taps[k][q];
        a = kind == 0 ? max_tap(a, v) : a + v;
    }
    return a;
}

#if IPU_X86
/* Outputs [q, q + 8 nv) (nv <= 4 vectors: independent chains, so the sums' latency overlaps). */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void fold_vectors(
    float *acc, const float *const *taps, int64_t ntaps, int64_t q, int nv, int kind, float pad,
    bool resume) {
    __m256 a[4];
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++)
        a[v] = resume ? _mm256_loadu_ps(acc + q + 8 * v) : _mm256_set1_ps(pad);
    if (kind == 0) {
        __m256 nan = _mm256_setzero_ps();
        for (int64_t k = 0; k < ntaps; k++) {
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) {
                __m256 t = _mm256_loadu_ps(taps[k] + q + 8 * v);
                a[v] = _mm256_max_ps(t, a[v]);
                nan = _mm256_or_ps(nan, _mm256_cmp_ps(t, t, _CMP_UNORD_Q));
            }
        }
        if (_mm256_movemask_ps(nan)) {
            for (int64_t t = q; t < q + 8 * nv; t++)
                acc[t] = fold_one(taps, ntaps, t, kind, resume ? acc[t] : pad);
            return;
        }
    } else {
        for (int64_t k = 0; k < ntaps; k++)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                a[v] = _mm256_add_ps(a[v], _mm256_loadu_ps(taps[k] + q + 8 * v));
    }
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) _mm256_storeu_ps(acc + q + 8 * v, a[v]);
}

/* 32 outputs at a time held in registers across every tap (one store instead of one per tap).
 * max(v, a) keeps a when they are equal or either is NaN, which is tap_f32's rule except for a
 * NaN v: such a block is redone one output at a time. Sums add in tap order: identical. */
__attribute__((target("avx2"))) static void fold_avx2(float *acc, const float *const *taps,
                                                      int64_t ntaps, int64_t n, int kind, float pad,
                                                      bool resume) {
    int64_t q = 0;
    for (; q + 32 <= n; q += 32) fold_vectors(acc, taps, ntaps, q, 4, kind, pad, resume);
    for (; q + 8 <= n; q += 8) fold_vectors(acc, taps, ntaps, q, 1, kind, pad, resume);
    for (; q < n; q++) acc[q] = fold_one(taps, ntaps, q, kind, resume ? acc[q] : pad);
}
#endif

#if IPU_X86
/* Max pooling, float32, column stride 2, undilated columns, KH <= FOLD_TAPS, rows of at least
 * ROWS_FIRST_OW outputs: each input row a block reads is reduced once to its OW column maxima,
 * then each output row is the maximum of its KH reduced rows (no phase copies; KH + KW maxima
 * per output instead of KH * KW). Narrower rows keep the window path, which measured faster
 * there (per-row costs; docs/kernels.md, "Pooling"). Rows of column maxima taken in
 * kh order give the taps in (kh, kw) order: the first of equal values still wins, as in
 * max_tap. _mm256_max_ps(v, a) is max_tap but for a NaN v, so a block that reads a NaN returns
 * false and the window path redoes it. */
enum { ROWS_FIRST_OW = 48 };

__attribute__((target("avx2"))) static inline __m256 even8(__m256 a, __m256 b) {
    __m256 t = _mm256_shuffle_ps(a, b, 0x88); /* a0 a2 b0 b2 | a4 a6 b4 b6 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), 0xD8));
}
__attribute__((target("avx2"))) static inline __m256 odd8(__m256 a, __m256 b) {
    __m256 t = _mm256_shuffle_ps(a, b, 0xDD);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), 0xD8));
}

/* h[j] = the max of row xr's columns 2j + c0 + kw, kw < KW, inside [0, W) (-inf if none),
 * j < OW. False if it read a NaN. */
__attribute__((target("avx2"))) static bool hmax_row(const float *xr, int64_t W, int64_t c0,
                                                     int64_t KW, int64_t OW, float *h) {
    /* interior: outputs whose vector loads (16 columns from 2j + c0 + kw - 1) stay in the row */
    int64_t reach = KW == 1 ? 1 : KW - 1, last = W - 1 - reach - c0;
    int64_t jlo = c0 >= 0 ? 0 : (-c0 + 1) / 2, jhi = last < 0 ? 0 : last / 2 + 1;
    if (jhi > OW) jhi = OW;
    if (jhi - jlo < 8) jlo = jhi = OW; /* too few for a vector: all scalar */
    bool nan = false;
    for (int64_t j = 0; j < OW; j++) {
        if (j == jlo) j = jhi;
        if (j >= OW) break;
        float a = -INFINITY;
        for (int64_t kw = 0, c = 2 * j + c0; kw < KW; kw++, c++) {
            if (c < 0 || c >= W) continue;
            nan |= xr[c] != xr[c];
            a = xr[c] > a ? xr[c] : a;
        }
        h[j] = a;
    }
    __m256 bad = _mm256_setzero_ps();
    for (int64_t j = jlo; j < jhi; j += 8) {
        if (j + 8 > jhi) j = jhi - 8; /* the last vector overlaps the one before */
        /* tap 0: the even columns of s[0..16); tap kw >= 1: the odd ones of s + kw - 1 */
        const float *s = xr + 2 * j + c0;
        __m256 l = _mm256_loadu_ps(s), r = _mm256_loadu_ps(s + 8);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(l, r, _CMP_UNORD_Q));
        __m256 a = even8(l, r);
        if (KW > 1) a = _mm256_max_ps(odd8(l, r), a);
        for (int64_t kw = 2; kw < KW; kw++) {
            l = _mm256_loadu_ps(s + kw - 1);
            r = _mm256_loadu_ps(s + kw + 7);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(l, r, _CMP_UNORD_Q));
            a = _mm256_max_ps(odd8(l, r), a);
        }
        _mm256_storeu_ps(h + j, a);
    }
    return !nan && !_mm256_movemask_ps(bad);
}

/* Input rows, padding included, that a block of `rows` output rows reads. */
static int64_t rows_read(const ipu__pool_plan *p, int64_t rows) {
    return (rows - 1) * p->sh + (p->KH - 1) * p->dh + 1;
}

/* Scratch bytes of pool_max_rows for blocks of `rows` output rows: the reduced rows (OW rounded
 * up to 8 floats each), then a byte per row. */
static uint64_t max_rows_bytes(const ipu__pool_plan *p, int64_t rows) {
    return (uint64_t)rows_read(p, rows) * ((uint64_t)(p->OW + 7) / 8 * 8 * sizeof(float) + 1);
}

/* Output rows [oh0, oh0 + nrows) of one plane; false (y partly written) if a NaN was read. */
__attribute__((target("avx2"))) static bool pool_max_rows(const ipu__pool_plan *p, const float *x,
                                                          int64_t nrows, int64_t oh0, float *y,
                                                          float *buf) {
    const int64_t OW = p->OW, OWp = (OW + 7) / 8 * 8, i0 = oh0 * p->sh - p->pt;
    const int64_t nin = rows_read(p, nrows);
    unsigned char *done = (unsigned char *)(buf + nin * OWp);
    memset(done, 0, (size_t)nin);
    for (int64_t r = 0; r < nrows; r++) {
        const float *hr[FOLD_TAPS];
        int nv = 0;
        for (int64_t kh = 0; kh < p->KH; kh++) {
            int64_t ih = (oh0 + r) * p->sh - p->pt + kh * p->dh, k = ih - i0;
            if (ih < 0 || ih >= p->H) continue;
            if (!done[k] && !hmax_row(x + ih * p->W, p->W, -p->pl, p->KW, OW, buf + k * OWp))
                return false;
            done[k] = 1;
            hr[nv++] = buf + k * OWp;
        }
        float *yr = y + (oh0 + r) * OW;
        if (nv == 0) { /* every row in the padding */
            for (int64_t j = 0; j < OW; j++) yr[j] = -INFINITY;
            continue;
        }
        for (int64_t j = 0; j < OW; j += 8) {
            if (j + 8 > OW) j = OW - 8;
            __m256 a = _mm256_loadu_ps(hr[0] + j);
            for (int v = 1; v < nv; v++) a = _mm256_max_ps(_mm256_loadu_ps(hr[v] + j), a);
            _mm256_storeu_ps(yr + j, a);
        }
    }
    return true;
}

#endif

/* float32 output rows [oh0, oh0 + nrows) of np consecutive planes: the padded input rows they
 * read are copied into scratch by stride phase (pad value -inf for max, 0 for average), the
 * planes' blocks one after another in each phase, so that each tap is one long stride-1 pass
 * over "extended" rows of Wq >= OW columns of all the planes; the kept columns then go to y.
 * Each output still takes its taps in (kh, kw) order. */
static inline __attribute__((always_inline)) void pool_window_body(
    const ipu__pool_plan *p, const float *restrict x0, int64_t nrows, int64_t oh0, int64_t np,
    const float *cw, float *restrict y0, float *restrict buf, fold_fn fold) {
    int64_t Hq, Wq, sh = p->sh, sw = p->sw;
    window_floats(p, nrows, np, &Hq, &Wq);
    const float pad = p->kind == 0 ? -INFINITY : 0.0f;
    const int64_t ps = np * Hq * Wq; /* floats of one phase: np blocks of Hq x Wq */
    float *acc = buf + sh * sw * ps + Wq + FOLD_BLOCK;
    const bool pair = sw == 2 && ipu__phase_used(0, p->KW, p->dw, 2) &&
                      ipu__phase_used(1, p->KW, p->dw, 2);
    for (int64_t g = 0; g < np; g++) { /* each plane's rows, phase by phase */
        const float *x = x0 + g * p->H * p->W;
        for (int64_t a = 0; a < sh; a++) {
            if (!ipu__phase_used(a, p->KH, p->dh, sh)) continue;
            for (int64_t i = 0; pair && i < Hq; i++) {
                float *d0 = buf + a * 2 * ps + (g * Hq + i) * Wq, *d1 = d0 + ps;
                int64_t ih = (oh0 + i) * sh + a - p->pt;
                if (ih >= 0 && ih < p->H) {
                    ipu__split_row2(x + ih * p->W, p->W, -p->pl, Wq, pad, d0, d1);
                } else {
                    for (int64_t j = 0; j < Wq; j++) d0[j] = d1[j] = pad;
                }
            }
            for (int64_t b = 0; b < sw && !pair; b++) {
                if (!ipu__phase_used(b, p->KW, p->dw, sw)) continue;
                float *pl = buf + (a * sw + b) * ps + g * Hq * Wq;
                int64_t c0 = b - p->pl; /* input column of j = 0; j's is c0 + j * sw */
                int64_t lo = c0 >= 0 ? 0 : (-c0 + sw - 1) / sw;
                int64_t hi = c0 >= p->W ? 0 : (p->W - c0 + sw - 1) / sw;
                if (hi > Wq) hi = Wq;
                if (lo > hi) lo = hi;
                for (int64_t i = 0; i < Hq; i++) {
                    float *d = pl + i * Wq;
                    int64_t ih = (oh0 + i) * sh + a - p->pt;
                    if (ih < 0 || ih >= p->H) {
                        for (int64_t j = 0; j < Wq; j++) d[j] = pad;
                        continue;
                    }
                    ipu__copy_row_phase(d, x + ih * p->W + lo * sw + c0, lo, hi, Wq, sw, pad);
                }
            }
        }
    }
    for (int64_t j = 0; j < Wq + FOLD_BLOCK; j++) buf[sh * sw * ps + j] = pad; /* read past */
    const float *taps[FOLD_TAPS];
    /* the last plane's rows past nrows are not folded: its taps stay within the copy */
    int64_t ntaps = 0, n = ((np - 1) * Hq + nrows) * Wq;
    n = (n + FOLD_BLOCK - 1) / FOLD_BLOCK * FOLD_BLOCK;
    bool resume = false;
    /* tap (kh, kw) reads phase plane (th % sh, tw % sw) at row th / sh, column tw / sw, for
     * th = kh * dh and tw = kw * dw: kept as quotient and remainder (no division per tap) */
    const int64_t dqh = p->dh / sh, drh = p->dh % sh, dqw = p->dw / sw, drw = p->dw % sw;
    for (int64_t kh = 0, qh = 0, rh = 0; kh < p->KH; kh++, qh += dqh, rh += drh) {
        if (rh >= sh) {
            rh -= sh;
            qh++;
        }
        for (int64_t kw = 0, qw = 0, rw = 0; kw < p->KW; kw++, qw += dqw, rw += drw) {
            if (rw >= sw) {
                rw -= sw;
                qw++;
            }
            const float *src = buf + (rh * sw + rw) * ps + qh * Wq + qw;
            if (ntaps == FOLD_TAPS) { /* a large window: fold in groups of taps */
                fold(acc, taps, ntaps, n, p->kind, pad, resume);
                resume = true;
                ntaps = 0;
            }
            taps[ntaps++] = src;
        }
    }
    fold(acc, taps, ntaps, n, p->kind, pad, resume);
    for (int64_t gr = 0; gr < np * nrows; gr++) { /* plane gr / nrows, row gr % nrows */
        int64_t g = gr / nrows, r = gr % nrows;
        const float *ar = acc + (g * Hq + r) * Wq;
        float *yr = y0 + g * p->OH * p->OW + (oh0 + r) * p->OW;
        if (p->kind == 0) {
            memcpy(yr, ar, sizeof(float) * (size_t)p->OW);
            continue;
        }
        float nh = (float)rows_inside(p, oh0 + r);
        for (int64_t ow = 0; ow < p->OW; ow++) yr[ow] = ar[ow] / (nh * cw[ow]);
    }
}

typedef void (*window_fn)(const ipu__pool_plan *p, const float *x, int64_t nrows, int64_t oh0,
                          int64_t np, const float *cw, float *y, float *buf);

static void pool_window_base(const ipu__pool_plan *p, const float *x, int64_t nrows, int64_t oh0,
                             int64_t np, const float *cw, float *y, float *buf) {
    pool_window_body(p, x, nrows, oh0, np, cw, y, buf, fold_base);
}

#if IPU_X86
__attribute__((target("avx2"))) static void pool_window_avx2(const ipu__pool_plan *p,
                                                             const float *x, int64_t nrows,
                                                             int64_t oh0, int64_t np,
                                                             const float *cw, float *y,
                                                             float *buf) {
    pool_window_body(p, x, nrows, oh0, np, cw, y, buf, fold_avx2);
}
#endif

#if IPU_X86
/* Stride-1 pools whose output plane is the input's shape ("same" padding: Inception's
 * 3x3 pad-1 pools) on planes of at most SAME_MAX pixels: output f of a plane (f = oh * W + ow)
 * reads input f + off[t] for tap t, where the tap lies inside the plane (mask[t][f]); so each
 * tap is one masked vector load per 8 outputs, with no copy and no per-row work, which on 7x7
 * and 14x14 planes cost 3-4 times the taps themselves. Masked-off lanes are the padding (0 for
 * averages, -inf for max, as the window path's copies); taps in (kh, kw) order; averages divide
 * by den[f] = rows_inside * cols_inside, as the window path does. */
enum { SAME_MAX = 1024 };

static bool same_ok(const ipu__pool_plan *p) {
    int64_t hw = p->H * p->W;
    return p->sh == 1 && p->sw == 1 && p->OH == p->H && p->OW == p->W && hw >= 8 &&
           hw <= SAME_MAX && p->KH * p->KW <= FOLD_TAPS;
}

/* Scratch floats of the masks, divisors and offsets (int64, 8-byte aligned). */
static int64_t same_floats(const ipu__pool_plan *p) {
    return (p->KH * p->KW + 1) * p->H * p->W + 2 * FOLD_TAPS + 1;
}

/* The taps' masks (int32: -1 inside the plane) and offsets, and the divisors (averages). */
static void same_setup(const ipu__pool_plan *p, const float *cw, int32_t *mask, int64_t *off,
                       float *den) {
    const int64_t H = p->H, W = p->W;
    int64_t t = 0;
    for (int64_t kh = 0; kh < p->KH; kh++)
        for (int64_t kw = 0; kw < p->KW; kw++, t++) {
            int64_t dh = kh * p->dh - p->pt, dw = kw * p->dw - p->pl;
            off[t] = dh * W + dw;
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++)
                    mask[(t * H + h) * W + w] = h + dh >= 0 && h + dh < H && w + dw >= 0 &&
                                                        w + dw < W
                                                    ? -1
                                                    : 0;
        }
    for (int64_t h = 0; p->kind == 1 && h < H; h++) {
        float nh = (float)rows_inside(p, h);
        for (int64_t w = 0; w < W; w++) den[h * W + w] = nh * cw[w];
    }
}

/* Outputs [f, f + 8 nv) of one plane (nv <= 4 independent vectors: the taps' latency
 * overlaps). */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void same_block(
    const ipu__pool_plan *p, const float *x, float *y, int64_t f, int nv, int kind,
    const int32_t *mask, const int64_t *off, const float *den) {
    const int64_t HW = p->H * p->W, ntaps = p->KH * p->KW;
    const __m256 pad = _mm256_set1_ps(kind == 0 ? -INFINITY : 0.0f);
    __m256 a[4], nan = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) a[v] = pad;
    for (int64_t t = 0; t < ntaps; t++) {
        const int32_t *mt = mask + t * HW + f;
        const float *xt = x + f + off[t];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            __m256i m = _mm256_loadu_si256((const __m256i *)(mt + 8 * v));
            __m256 u = _mm256_maskload_ps(xt + 8 * v, m); /* no fault where masked */
            if (kind == 0) {
                u = _mm256_blendv_ps(pad, u, _mm256_castsi256_ps(m));
                nan = _mm256_or_ps(nan, _mm256_cmp_ps(u, u, _CMP_UNORD_Q));
                a[v] = _mm256_max_ps(u, a[v]); /* max_tap but for a NaN u: redone below */
            } else {
                a[v] = _mm256_add_ps(a[v], u);
            }
        }
    }
    if (kind == 0 && _mm256_movemask_ps(nan)) {
        for (int64_t q = f; q < f + 8 * nv; q++) {
            float r = -INFINITY;
            for (int64_t t = 0; t < ntaps; t++)
                if (mask[t * HW + q]) r = max_tap(r, x[q + off[t]]);
            y[q] = r;
        }
        return;
    }
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        if (kind == 1) a[v] = _mm256_div_ps(a[v], _mm256_loadu_ps(den + f + 8 * v));
        _mm256_storeu_ps(y + f + 8 * v, a[v]);
    }
}

/* Whole planes, np of them from x and y. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void pool_same_body(
    const ipu__pool_plan *p, const float *x, float *y, int64_t np, int kind, const int32_t *mask,
    const int64_t *off, const float *den) {
    const int64_t HW = p->H * p->W;
    for (int64_t g = 0; g < np; g++, x += HW, y += HW) {
        int64_t f = 0;
        for (; f + 32 <= HW; f += 32) same_block(p, x, y, f, 4, kind, mask, off, den);
        for (; f + 8 <= HW; f += 8) same_block(p, x, y, f, 1, kind, mask, off, den);
        if (f < HW) same_block(p, x, y, HW - 8, 1, kind, mask, off, den); /* overlaps */
    }
}

__attribute__((target("avx2"))) static void pool_same(const ipu__pool_plan *p, const float *x,
                                                      float *y, int64_t np, const int32_t *mask,
                                                      const int64_t *off, const float *den) {
    if (p->kind == 0)
        pool_same_body(p, x, y, np, 0, mask, off, den);
    else
        pool_same_body(p, x, y, np, 1, mask, off, den);
}
#endif

#if IPU_X86
/* Float16 through pool_same: the item's whole planes converted in one call after the first
 * IPU__SCRATCH_BYTES, pooled there, stored in half in one call. False if they do not fit. */
static bool same_f16(const ipu__pool_plan *p, const void *x, void *y, int64_t p0, int64_t np,
                     const int32_t *mask, const int64_t *off, const float *den, void *scratch) {
    int64_t n = np * p->H * p->W;
    if (2 * n > (int64_t)((IPU__WORKER_SCRATCH_BYTES - IPU__SCRATCH_BYTES) / sizeof(float)))
        return false;
    float *xs = (float *)((char *)scratch + IPU__SCRATCH_BYTES), *ys = xs + n;
    ipu__cvt_f16_to_f32((const uint16_t *)x + p0 * p->H * p->W, xs, (size_t)n);
    pool_same(p, xs, ys, np, mask, off, den);
    ipu__cvt_f32_to_f16(ys, (uint16_t *)y + p0 * p->H * p->W, (size_t)n);
    return true;
}
#endif

/* Work item `it`: planes [*p0, *p0 + *np), output rows [*oh0, *oh1) of each. */
static void item_range(const ipu__pool_plan *p, size_t it, int64_t *p0, int64_t *np, int64_t *oh0,
                       int64_t *oh1) {
    *p0 = (int64_t)(it / (uint64_t)p->rblocks) * p->planes;
    *np = p->nplanes - *p0 < p->planes ? p->nplanes - *p0 : p->planes;
    *oh0 = (int64_t)(it % (uint64_t)p->rblocks) * p->rows;
    *oh1 = *oh0 + p->rows < p->OH ? *oh0 + p->rows : p->OH;
}

/* The input rows [*ih0, *ih1) that output rows [oh0, oh1) of a plane read. */
static void rows_read_range(const ipu__pool_plan *p, int64_t oh0, int64_t oh1, int64_t *ih0,
                            int64_t *ih1) {
    *ih0 = oh0 * p->sh - p->pt;
    *ih1 = (oh1 - 1) * p->sh - p->pt + (p->KH - 1) * p->dh + 1;
    if (*ih0 < 0) *ih0 = 0;
    if (*ih1 > p->H) *ih1 = p->H;
    if (*ih1 < *ih0) *ih1 = *ih0;
}

/* Float16 through the window path (p32: the plan as float32): the input rows the item reads
 * converted into float32 after the first IPU__SCRATCH_BYTES (at their place in the planes; one
 * call for whole planes), pooled there, the output rows stored in half (one call when the
 * item holds whole planes: its outputs are contiguous in y). False (nothing written) if they
 * do not fit. */
static bool window_f16(const ipu__pool_plan *p32, window_fn window, const void *x, void *y,
                       int64_t p0, int64_t np, int64_t oh0, int64_t oh1, float *cw, void *scratch) {
    int64_t hw = p32->H * p32->W, ohw = p32->OH * p32->OW;
    if (np * (hw + ohw) > (int64_t)((IPU__WORKER_SCRATCH_BYTES - IPU__SCRATCH_BYTES) / 4))
        return false;
    float *xs = (float *)((char *)scratch + IPU__SCRATCH_BYTES), *ys = xs + np * hw;
    int64_t ih0, ih1;
    rows_read_range(p32, oh0, oh1, &ih0, &ih1);
    /* the phase copies take up to sh - 1 rows more (rows no kept output reads) */
    ih1 = ih1 + p32->sh < p32->H ? ih1 + p32->sh : p32->H;
    if (ih0 == 0 && ih1 == p32->H)
        ipu__cvt_f16_to_f32((const uint16_t *)x + p0 * hw, xs, (size_t)(np * hw));
    else
        for (int64_t k = 0; k < np; k++)
            ipu__cvt_f16_to_f32((const uint16_t *)x + (p0 + k) * hw + ih0 * p32->W,
                                xs + k * hw + ih0 * p32->W, (size_t)((ih1 - ih0) * p32->W));
    window(p32, xs, oh1 - oh0, oh0, np, cw, ys, cw + p32->OW);
    if (oh0 == 0 && oh1 == p32->OH) {
        ipu__cvt_f32_to_f16(ys, (uint16_t *)y + p0 * ohw, (size_t)(np * ohw));
        return true;
    }
    for (int64_t k = 0; k < np; k++)
        ipu__cvt_f32_to_f16(ys + k * ohw + oh0 * p32->OW,
                            (uint16_t *)y + (p0 + k) * ohw + oh0 * p32->OW,
                            (size_t)((oh1 - oh0) * p32->OW));
    return true;
}

#if IPU_X86
/* Float16 through pool_max_s2: the input rows of each plane that the item reads converted into
 * float32 after the first IPU__SCRATCH_BYTES, its output rows computed there and stored in
 * half. False (nothing or part of y written, all of it rewritten by the caller) if a plane and
 * its output do not fit or a NaN was read. */
static bool s2max_f16(const ipu__pool_plan *p, const void *x, void *y, int64_t p0, int64_t np,
                      int64_t oh0, int64_t oh1, void *scratch) {
    int64_t hw = p->H * p->W, ohw = p->OH * p->OW;
    if (hw + ohw > (int64_t)((IPU__WORKER_SCRATCH_BYTES - IPU__SCRATCH_BYTES) / sizeof(float)))
        return false;
    float *xs = (float *)((char *)scratch + IPU__SCRATCH_BYTES), *ys = xs + hw;
    int64_t ih0, ih1; /* the rows the item's outputs read, converted at their place */
    rows_read_range(p, oh0, oh1, &ih0, &ih1);
    for (int64_t plane = p0; plane < p0 + np; plane++) {
        ipu__cvt_f16_to_f32((const uint16_t *)x + plane * hw + ih0 * p->W, xs + ih0 * p->W,
                            (size_t)((ih1 - ih0) * p->W));
        if (!ipu__pool_max_s2(p, xs, oh0, oh1, ys)) return false;
        ipu__cvt_f32_to_f16(ys + oh0 * p->OW, (uint16_t *)y + plane * ohw + oh0 * p->OW,
                            (size_t)((oh1 - oh0) * p->OW));
    }
    return true;
}
#endif

/* Float16: the input rows [ih0, ih1) of a plane (xp) that output rows [oh0, oh1) read converted
 * into st in one bulk conversion, so that pool_row runs its float32 taps on them; *xoff becomes
 * the offset pool_row adds to reach them (-ih0 * W). False if they do not fit cap floats. */
static bool stage_f16(const ipu__pool_plan *p, const uint16_t *xp, int64_t oh0, int64_t oh1,
                      float *st, int64_t cap, int64_t *xoff) {
    int64_t ih0, ih1;
    rows_read_range(p, oh0, oh1, &ih0, &ih1);
    if ((ih1 - ih0) * p->W > cap) return false;
    ipu__cvt_f16_to_f32(xp + ih0 * p->W, st, (size_t)((ih1 - ih0) * p->W));
    *xoff = -ih0 * p->W;
    return true;
}

ipu_status ipu__k_pool2d(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    const ipu__pool_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
    if ((uint64_t)p->OW * 2 * sizeof(float) <= IPU__SCRATCH_BYTES) {
        float *acc = scratch, *cw = acc + p->OW;
        for (int64_t ow = 0; ow < p->OW; ow++) cw[ow] = (float)cols_inside(p, ow);
        /* float16 rows staged as float32 after cw (the float32-only paths use that space) */
        float *xstage = cw + p->OW;
        int64_t cap = (int64_t)(IPU__SCRATCH_BYTES / sizeof(float)) - 2 * p->OW;
        ipu__pool_plan p32 = *p;
        p32.f16 = 0;
        int64_t hq, wq;
        const int64_t lim = (int64_t)1 << 24; /* keeps window_floats far from overflow */
        bool win_ok = p->sh <= 64 && p->sw <= 64 && p->OW < lim && p->rows < lim &&
                      p->planes < lim && (p->KH - 1) * p->dh < lim && (p->KW - 1) * p->dw < lim &&
                      p->rows >= (p->KH - 1) * p->dh / p->sh && /* halo copies <= the block */
                      2 * p->OW + window_floats(p, p->rows, p->planes, &hq, &wq) <=
                          (int64_t)(IPU__SCRATCH_BYTES / sizeof(float));
        bool win = win_ok && !p->f16, win16 = win_ok && p->f16;
        window_fn window = pool_window_base;
#if IPU_X86
        /* the pool family's choice of code: AVX2 windows, AVX-512 3 x 3 stride-2 max */
        const int isa = ipu__isa();
        bool rows_first = false, same = false, s2max = false;
        int32_t *mask = NULL;
        int64_t *off = NULL;
        float *den = NULL;
        if (isa >= IPU__ISA_AVX2) {
            same = same_ok(p) &&
                   2 * p->OW + same_floats(p) <= (int64_t)(IPU__SCRATCH_BYTES / sizeof(float));
            if (same) {
                mask = (int32_t *)(cw + p->OW);
                den = (float *)(mask + p->KH * p->KW * p->H * p->W);
                off = (int64_t *)(((uintptr_t)(den + p->H * p->W) + 7) & ~(uintptr_t)7);
                same_setup(p, cw, mask, off, den);
            }
            window = pool_window_avx2;
            s2max = isa >= IPU__ISA_AVX512 && ipu__pool_s2max_ok(p);
            rows_first = win && p->kind == 0 && p->sw == 2 && p->dw == 1 &&
                         p->OW >= ROWS_FIRST_OW && p->KH <= FOLD_TAPS &&
                         max_rows_bytes(p, p->rows) + 2 * p->OW * sizeof(float) <=
                             (uint64_t)IPU__SCRATCH_BYTES;
        }
#endif
        for (size_t it = b; it < e; it++) {
            int64_t p0, np, oh0, oh1;
            item_range(p, it, &p0, &np, &oh0, &oh1);
#if IPU_X86
            if (same && oh0 == 0 && oh1 == p->OH && !p->f16) { /* whole planes */
                pool_same(p, (const float *)x + p0 * p->H * p->W, (float *)y + p0 * p->H * p->W, np,
                          mask, off, den);
                continue;
            }
            if (same && oh0 == 0 && oh1 == p->OH &&
                same_f16(p, x, y, p0, np, mask, off, den, scratch))
                continue;
            if (s2max && !p->f16) { /* plane by plane; with a NaN the item goes the other paths */
                int64_t done = 0;
                for (; done < np; done++)
                    if (!ipu__pool_max_s2(p, (const float *)x + (p0 + done) * p->H * p->W, oh0, oh1,
                                          (float *)y + (p0 + done) * p->OH * p->OW))
                        break;
                if (done == np) continue;
            }
            if (s2max && p->f16 && s2max_f16(p, x, y, p0, np, oh0, oh1, scratch)) continue;
#endif
            if (win && np > 1) { /* whole small planes, folded together */
                window(p, (const float *)x + p0 * p->H * p->W, oh1 - oh0, oh0, np, cw,
                       (float *)y + p0 * p->OH * p->OW, cw + p->OW);
                continue;
            }
            if (win16 && window_f16(&p32, window, x, y, p0, np, oh0, oh1, cw, scratch)) continue;
            for (int64_t plane = p0; plane < p0 + np; plane++) {
                const float *xf = (const float *)x + plane * p->H * p->W;
                float *yf = (float *)y + plane * p->OH * p->OW;
#if IPU_X86
                if (rows_first && pool_max_rows(p, xf, oh1 - oh0, oh0, yf, cw + p->OW)) continue;
#endif
                if (win) {
                    window(p, xf, oh1 - oh0, oh0, 1, cw, yf, cw + p->OW);
                    continue;
                }
                const void *xs = x;
                int64_t xoff = plane * p->H * p->W;
                if (p->f16 && stage_f16(p, (const uint16_t *)x + xoff, oh0, oh1, xstage, cap,
                                        &xoff)) { /* the rows the block reads, as float32 */
                    xs = xstage;
                }
                for (int64_t oh = oh0; oh < oh1; oh++) {
                    pool_row(xs == x ? p : &p32, xs, xoff, oh, acc, cw);
                    int64_t o = (plane * p->OH + oh) * p->OW;
                    if (p->f16)
                        ipu__cvt_f32_to_f16(acc, (uint16_t *)y + o, (size_t)p->OW);
                    else
                        memcpy((float *)y + o, acc, sizeof(float) * (size_t)p->OW);
                }
            }
        }
        return IPU_OK;
    }
    for (size_t it = b; it < e; it++) {
        int64_t p0, np, oh0, oh1;
        item_range(p, it, &p0, &np, &oh0, &oh1);
        for (int64_t plane = p0; plane < p0 + np; plane++) {
            for (int64_t oh = oh0, xoff = plane * p->H * p->W; oh < oh1; oh++) {
                for (int64_t ow = 0; ow < p->OW; ow++) {
                    float acc = p->kind == 0 ? -INFINITY : 0.0f;
                    for (int64_t kh = 0; kh < p->KH; kh++) {
                        int64_t ih = oh * p->sh - p->pt + kh * p->dh;
                        if (ih < 0 || ih >= p->H) continue;
                        for (int64_t kw = 0; kw < p->KW; kw++) {
                            int64_t iw = ow * p->sw - p->pl + kw * p->dw;
                            if (iw < 0 || iw >= p->W) continue;
                            float v = ipu__ld_f32(x, p->f16, xoff + ih * p->W + iw);
                            acc = p->kind == 0 ? max_tap(acc, v) : acc + v;
                        }
                    }
                    if (p->kind == 1) acc /= (float)(rows_inside(p, oh) * cols_inside(p, ow));
                    int64_t o = (plane * p->OH + oh) * p->OW + ow;
                    if (p->f16)
                        ((uint16_t *)y)[o] = ipu__f32_to_f16(acc);
                    else
                        ((float *)y)[o] = acc;
                }
            }
        }
    }
    return IPU_OK;
}
