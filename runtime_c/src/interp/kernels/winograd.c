/* CONV2D Winograd path (the plan's `wino`; conv.h, docs/bytecode.md): 3x3 kernels, stride
 * 1, no dilation, one group; float32, and float16 computed in float32 (each channel's input rows
 * converted into scratch, the output block stored in half after the epilogue). Each output tile of 2 x 2 pixels is computed from its
 * 4 x 4 input tile d as Y = A^T [U . V] A with V = B^T d B and the weights U = G g G^T (Lavin
 * and Gray's F(2x2, 3x3)): 16 products per input channel where the direct convolution takes
 * 36, so the 16 elementwise products become 16 GEMMs M[xi] = U[xi] V[xi] of output channels x
 * input channels x tiles, run on the sgemm micro-kernel. U is transformed and packed once
 * (ipu__wino_pack_weights, at compile or load time); a work item transforms the input tiles of
 * its block of tile rows into B panels for all input channels, then, per sub-block of output
 * channels, runs the 16 GEMMs and the output transform with the epilogue. Every output element
 * is computed the same way whichever work item computes it. Blocks whose input holds an
 * infinity or a NaN are left to the direct sums (conv.c), which keep it to the outputs whose
 * windows read it. */
#include <stdbool.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "conv_shared.h"
#include "isa.h"

void ipu__wino_pack_weights(const void *w, int f16, int64_t Co, int64_t Ci, int mr, float *u) {
    int64_t npan = (Co + mr - 1) / mr;
    size_t xs = (size_t)(npan * mr * Ci); /* floats per xi */
    /* a panel's mr channels at a time, side by side (g[k][j]: element k of channel j's kernel), so
     * that each step is one vector operation and each of the 16 stores one run of mr floats;
     * every element goes through the same operations as one kernel at a time would */
    float g[9][IPU__SGEMM_MAX_MR], t[4][3][IPU__SGEMM_MAX_MR];
    for (int64_t pan = 0; pan < npan; pan++) {
        int64_t h = Co - pan * mr < mr ? Co - pan * mr : mr;
        for (int64_t ci = 0; ci < Ci; ci++) {
            for (int64_t j = 0; j < mr; j++) {
                float k9[9] = {0};
                size_t at = (size_t)(((pan * mr + j) * Ci + ci) * 9);
                if (j >= h)
                    ; /* padding channels: zero */
                else if (f16)
                    ipu__cvt_f16_to_f32((const uint16_t *)w + at, k9, 9);
                else
                    memcpy(k9, (const float *)w + at, sizeof k9);
                for (int k = 0; k < 9; k++) g[k][j] = k9[k];
            }
            for (int c = 0; c < 3; c++) /* G g: rows of the kernel combined */
                for (int64_t j = 0; j < mr; j++) {
                    t[0][c][j] = g[c][j];
                    t[1][c][j] = (g[c][j] + g[3 + c][j] + g[6 + c][j]) * 0.5f;
                    t[2][c][j] = (g[c][j] - g[3 + c][j] + g[6 + c][j]) * 0.5f;
                    t[3][c][j] = g[6 + c][j];
                }
            float *d = u + pan * mr * Ci + ci * mr;
            for (int i = 0; i < 4; i++) /* (G g) G^T */
                for (int64_t j = 0; j < mr; j++) {
                    float a = t[i][0][j], b = t[i][1][j], c = t[i][2][j];
                    d[(size_t)(4 * i) * xs + j] = a;
                    d[(size_t)(4 * i + 1) * xs + j] = (a + b + c) * 0.5f;
                    d[(size_t)(4 * i + 2) * xs + j] = (a - b + c) * 0.5f;
                    d[(size_t)(4 * i + 3) * xs + j] = c;
                }
        }
    }
}

/* B^T d along one axis for n tiles: their elements 0..3 in a..d (columns of an input row, or
 * rows of the row transforms). */
static inline __attribute__((always_inline)) void col_tf(const float *restrict a,
                                                         const float *restrict b,
                                                         const float *restrict c,
                                                         const float *restrict d, int64_t n,
                                                         float *restrict d0, float *restrict d1,
                                                         float *restrict d2, float *restrict d3) {
    for (int64_t k = 0; k < n; k++) {
        d0[k] = a[k] - c[k];
        d1[k] = b[k] + c[k];
        d2[k] = c[k] - b[k];
        d3[k] = b[k] - d[k];
    }
}

/* Y = A^T M A for nt tiles: M[xi] at m + xi * ms; outputs (0, 0), (0, 1), (1, 0), (1, 1). */
static inline __attribute__((always_inline)) void out_tf(const float *restrict m, int64_t ms,
                                                         int64_t nt, float *restrict y00,
                                                         float *restrict y01, float *restrict y10,
                                                         float *restrict y11) {
    for (int64_t q = 0; q < nt; q++) {
        float s0[4], s1[4];
        for (int j = 0; j < 4; j++) {
            float a0 = m[j * ms + q], a1 = m[(4 + j) * ms + q];
            float a2 = m[(8 + j) * ms + q], a3 = m[(12 + j) * ms + q];
            s0[j] = a0 + a1 + a2;
            s1[j] = a1 - a2 - a3;
        }
        y00[q] = s0[0] + s0[1] + s0[2];
        y01[q] = s0[1] - s0[2] - s0[3];
        y10[q] = s1[0] + s1[1] + s1[2];
        y11[q] = s1[1] - s1[2] - s1[3];
    }
}

/* V[xi] (B panels of width nr: tile q of the block at panel q / nr, lane q % nr; input channel
 * ci is row ci) for the tiles of tile rows [th0, th1) of channel plane xc. R: the row
 * transforms d B of the block's 2 (th1 - th0) + 2 input rows, by row parity and component, each
 * a run of (th1 - th0 + 1) rows of TW floats, so that tile q's four input rows are at q and
 * q + TW of the even and odd runs; then the even and odd columns of one input row. */
static inline __attribute__((always_inline)) void input_body(const ipu__conv_plan *p,
                                                             const float *xc, int64_t row0,
                                                             int64_t ci, int64_t th0, int64_t th1,
                                                             int nr, float *V, float *R) {
    const int64_t TW = (p->OW + 1) / 2, ntr = th1 - th0, nt = ntr * TW;
    const int64_t run = (ntr + 1) * TW;
    const int64_t pstride = p->Cig * nr, xstride = IPU__WINO_VS(p->wnt, p->Cig);
    float *e = R + 8 * run, *o = e + TW + 1;
    for (int64_t i = 0; i < 2 * ntr + 2; i++) {
        float *r0 = R + (i % 2) * 4 * run + i / 2 * TW, *r1 = r0 + run, *r2 = r1 + run,
              *r3 = r2 + run;
        int64_t ih = 2 * th0 - p->pt + i;
        if (ih < 0 || ih >= p->H) {
            for (int64_t t = 0; t < TW; t++) r0[t] = r1[t] = r2[t] = r3[t] = 0.0f;
            continue;
        }
        ipu__split_row2(xc + (ih - row0) * p->W, p->W, -p->pl, TW + 1, 0.0f, e, o);
        col_tf(e, o, e + 1, o + 1, TW, r0, r1, r2, r3); /* the same form along the row */
    }
    /* B^T (d B): rows 0..3 of tile q are ev[q], od[q], ev[q + TW], od[q + TW] */
    for (int j = 0; j < 4; j++) {
        const float *ev = R + j * run, *od = ev + 4 * run;
        for (int64_t q0 = 0; q0 < nt; q0 += nr) {
            int64_t n = nt - q0 < nr ? nt - q0 : nr;
            float *d0 = V + j * xstride + q0 / nr * pstride + ci * nr, *d1 = d0 + 4 * xstride,
                  *d2 = d1 + 4 * xstride, *d3 = d2 + 4 * xstride;
            col_tf(ev + q0, od + q0, ev + q0 + TW, od + q0 + TW, n, d0, d1, d2, d3);
        }
    }
}

/* Output transform of output channel co's M rows (M[xi] at m + xi * mstride, tile q of the
 * block at q) for tile rows [th0, th1), then the epilogue into y. buf: the four outputs of each
 * tile (4 runs of nt floats), then the block's output rows (2 TW floats each). */
static inline __attribute__((always_inline)) void output_body(
    const ipu__conv_plan *p, const float *m, int64_t mstride, int64_t th0, int64_t th1,
    const void *bias, const void *res, void *y, int64_t n, int64_t co, float *buf) {
    const int64_t TW = (p->OW + 1) / 2, OW = p->OW, nt = (th1 - th0) * TW;
    float *y00 = buf, *y01 = y00 + nt, *y10 = y01 + nt, *y11 = y10 + nt, *rows = y11 + nt;
    out_tf(m, mstride, nt, y00, y01, y10, y11);
    for (int64_t k = 0; k < th1 - th0; k++) {
        float *r0 = rows + 4 * k * TW, *r1 = r0 + 2 * TW;
        for (int64_t t = 0; t < TW; t++) {
            r0[2 * t] = y00[k * TW + t];
            r0[2 * t + 1] = y01[k * TW + t];
            r1[2 * t] = y10[k * TW + t];
            r1[2 * t + 1] = y11[k * TW + t];
        }
    }
    int64_t oh = 2 * th0, nrows = p->OH - oh < 2 * (th1 - th0) ? p->OH - oh : 2 * (th1 - th0);
    int64_t off = ((n * p->M + co) * p->OH + oh) * OW;
    if (p->f16) { /* float16: the epilogue writes y's rows contiguous into the four outputs'
                   * space (read already; nrows * OW <= 4 nt), one call stores them in half */
        ipu__conv_epilogue_rows(p, buf, OW, rows, 2 * TW, nrows, OW, bias, co, res, off);
        ipu__cvt_f32_to_f16(buf, (uint16_t *)y + off, (size_t)(nrows * OW));
    } else
        ipu__conv_epilogue_rows(p, (float *)y + off, OW, rows, 2 * TW, nrows, OW, bias, co, res,
                                off);
}

static void input_base(const ipu__conv_plan *p, const float *xc, int64_t row0, int64_t ci,
                       int64_t th0, int64_t th1, int nr, float *V, float *R) {
    input_body(p, xc, row0, ci, th0, th1, nr, V, R);
}
static void output_base(const ipu__conv_plan *p, const float *m, int64_t mstride, int64_t th0,
                        int64_t th1, const void *bias, const void *res, void *y, int64_t n,
                        int64_t co, float *buf) {
    output_body(p, m, mstride, th0, th1, bias, res, y, n, co, buf);
}
#if IPU_X86
__attribute__((target("avx2"))) static void input_avx2(const ipu__conv_plan *p, const float *xc,
                                                       int64_t row0, int64_t ci, int64_t th0,
                                                       int64_t th1, int nr, float *V, float *R) {
    input_body(p, xc, row0, ci, th0, th1, nr, V, R);
}
__attribute__((target("avx2"))) static void output_avx2(const ipu__conv_plan *p, const float *m,
                                                        int64_t mstride, int64_t th0, int64_t th1,
                                                        const void *bias, const void *res, void *y,
                                                        int64_t n, int64_t co, float *buf) {
    output_body(p, m, mstride, th0, th1, bias, res, y, n, co, buf);
}
#endif

/* True if s[0..n) are all finite: v - v is +0 for those, NaN for infinities and NaNs. */
static bool finite_base(const float *s, int64_t n) {
    for (int64_t j = 0; j < n; j++)
        if (s[j] - s[j] != 0.0f) return false;
    return true;
}
#if IPU_X86
__attribute__((target("avx2"))) static bool finite_avx2(const float *s, int64_t n) {
    __m256i bits = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(s + j);
        bits = _mm256_or_si256(bits, _mm256_castps_si256(_mm256_sub_ps(v, v)));
    }
    return _mm256_testz_si256(bits, bits) && finite_base(s + j, n - j);
}
#endif

static bool finite(const float *s, int64_t n, bool avx2) {
#if IPU_X86
    if (avx2) return finite_avx2(s, n);
#endif
    (void)avx2;
    return finite_base(s, n);
}

bool ipu__conv_wino(const ipu__conv_plan *p, const void *x, const float *U, const void *bias,
                    const void *res, void *y, int64_t n, int64_t mb0, int64_t mb1, int64_t r,
                    void *scratch) {
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    const int mr = u.mr, nr = u.nr;
#if IPU_X86
    const bool avx2 = ipu__isa() >= IPU__ISA_AVX2;
#else
    const bool avx2 = false;
#endif
    const int64_t Ci = p->Cig, wnt = p->wnt, TW = (p->OW + 1) / 2, TH = (p->OH + 1) / 2;
    const int64_t npan = (p->Cog + mr - 1) / mr, us = npan * mr * Ci; /* U floats per xi */
    int64_t th0 = r * p->wtr, th1 = th0 + p->wtr < TH ? th0 + p->wtr : TH;
    int64_t ntiles = (th1 - th0) * TW, full = ntiles / nr * nr;
    const int64_t vs = IPU__WINO_VS(wnt, Ci), ms = IPU__WINO_VS(wnt, p->wcb);
    float *V = scratch, *M = V + 16 * vs, *tmp = M + 16 * ms;
    /* tile rows [th0, th1) read input rows [2 th0 - pt, 2 th1 - pt + 2) */
    int64_t ih0 = 2 * th0 - p->pt, ih1 = 2 * th1 - p->pt + 2;
    ih0 = ih0 < 0 ? 0 : ih0;
    ih1 = ih1 > p->H ? p->H : ih1;
    for (int64_t ci = 0; ci < Ci && ih0 < ih1 && !p->f16; ci++) {
        const float *rows = (const float *)x + ((n * p->C + ci) * p->H + ih0) * p->W;
        if (!finite(rows, (ih1 - ih0) * p->W, avx2)) return false;
    }
    /* the input tiles, all channels; lanes past the last tile zero. float16: each channel's
     * rows converted after the first IPU__SCRATCH_BYTES (checked there, before any output) */
    float *stage = (float *)((char *)scratch + IPU__SCRATCH_BYTES);
    for (int64_t ci = 0; ci < Ci; ci++) {
        const float *xc = (const float *)x + (n * p->C + ci) * p->H * p->W;
        int64_t row0 = 0;
        if (p->f16) {
            if (ih0 < ih1) {
                ipu__cvt_f16_to_f32((const uint16_t *)x + ((n * p->C + ci) * p->H + ih0) * p->W,
                                    stage, (size_t)((ih1 - ih0) * p->W));
                if (!finite(stage, (ih1 - ih0) * p->W, avx2)) return false;
            }
            xc = stage;
            row0 = ih0;
        }
        if (avx2)
            input_avx2(p, xc, row0, ci, th0, th1, nr, V, tmp);
        else
            input_base(p, xc, row0, ci, th0, th1, nr, V, tmp);
    }
    if (full < ntiles)
        for (int xi = 0; xi < 16; xi++)
            for (int64_t ci = 0; ci < Ci; ci++)
                memset(V + xi * vs + full * Ci + ci * nr + (ntiles - full), 0,
                       sizeof(float) * (size_t)(nr - (ntiles - full)));
    int64_t m0, m1;
    ipu__conv_item_channels(p, mb0, mb1, &m0, &m1);
    int64_t npad = (ntiles + nr - 1) / nr * nr;
    for (int64_t c0 = m0; c0 < m1; c0 += p->wcb) { /* sub-blocks of output channels */
        int64_t c1 = c0 + p->wcb < m1 ? c0 + p->wcb : m1;
        for (int xi = 0; xi < 16; xi++) {
            const float *ux = U + xi * us, *vx = V + xi * vs;
            float *mx = M + xi * ms;
            for (int64_t c = c0; c < c1; c += mr) { /* c is a multiple of mr */
                const float *ap = ux + c * Ci;
                float *mc = mx + (c - c0) * wnt;
                int h = c1 - c < mr ? (int)(c1 - c) : mr; /* the last panel's real channels */
                /* U comes from memory (4 MB for 256 channels): the next panel is fetched along
                 * this one's tiles, as the small-map path does its weights */
                const float *next = c + mr < c1 ? ap + mr * Ci
                                    : xi < 15   ? U + (xi + 1) * us + c0 * Ci
                                                : NULL;
                int64_t kb = (Ci + IPU__SGEMM_KC - 1) / IPU__SGEMM_KC, t = 0, done = 0;
                for (int64_t j = 0; j < npad; j += nr)
                    for (int64_t k0 = 0; k0 < Ci; k0 += IPU__SGEMM_KC, t++) {
                        int64_t kc = Ci - k0 < IPU__SGEMM_KC ? Ci - k0 : IPU__SGEMM_KC, pfn;
                        const float *vb = vx + j * Ci + k0 * nr;
                        const float *pf = ipu__prefetch_share(next, mr * Ci / 16, t, npad / nr * kb,
                                                              &done, &pfn);
                        if (h == mr) {
                            u.fn(kc, ap + k0 * mr, vb, mc + j, wnt, k0 > 0, pf, pfn);
                        } else {
                            ipu__prefetch_lines(pf, pfn);
                            u.part(h, nr, kc, ap + k0 * mr, vb, NULL, mc + j, wnt, k0 > 0, NULL);
                        }
                    }
            }
        }
        for (int64_t co = c0; co < c1; co++) {
            const float *mc = M + (co - c0) * wnt;
            if (avx2)
                output_avx2(p, mc, ms, th0, th1, bias, res, y, n, co, tmp);
            else
                output_base(p, mc, ms, th0, th1, bias, res, y, n, co, tmp);
        }
    }
    return true;
}
