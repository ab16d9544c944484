/* CONV2D (docs/bytecode.md): 2-D convolution, NCHW, float32/float16 (computed in float32).
 * float32 window path (every float32 convolution but depthwise and 1x1 stride-1 unpadded ones):
 * for each K chunk a work item copies the zero-padded input rows its output rows read, of the
 * chunk's input channels, into scratch, split by stride phase so that every patch row is a
 * contiguous run of "extended" output pixels (each output row computed Wq - OW columns too wide,
 * those columns dropped); the micro-kernel's rows variant (AVX2) then reads every full B panel's
 * rows in place and the rest is packed with one memcpy per panel row, the weights come
 * pre-packed, and the micro-kernel accumulates into C tiles in scratch from which
 * the epilogue (bias, residual, activation) writes y. float32 GEMM path (1x1 stride 1, or the
 * input rows of one chunk do not fit the scratch): for each tile of output pixels and each block
 * of IPU__SGEMM_KC rows of K = Cig*KH*KW, the input patches are unrolled straight into the packed
 * B panels, and the micro-kernel accumulates into y itself. float16 convolutions take the
 * small-map and Winograd paths where float32 would, the window path where it copies the rows
 * and the kernel is larger than 1x1 (the copy converts them), else the float16 GEMM path: the
 * float32 one through float32 staging (run_gemm_f16). Their tiles accumulate in float32; where
 * the micro-kernel stores half (ipu__ukr.half) the last K chunk's store applies the epilogue
 * and writes y in half, else the epilogue and the conversion run on the C tile. Depthwise
 * convolutions (one input and one output channel per group) sum their taps directly
 * (conv_dw.c; run_direct here where their window plan does not fit). Every output element is
 * computed the same way whichever work item computes it, so results do not depend on the
 * split. The window path is in conv_window.c. */
#include <stdbool.h>
#include <string.h>

#include "conv_shared.h"
#include "isa.h"

/* d[t] = xr[iw + t * sw] for t < n, 0 outside [0, W): the row's span converted in blocks by
 * the bulk conversion, then gathered (a half at a time would cost a scalar conversion each). */
static void im2col_run_f16(const uint16_t *xr, int64_t W, int64_t iw, int64_t sw, int64_t n,
                           float *d) {
    enum { SPAN = 512 };
    float buf[SPAN];
    int64_t lo = iw >= 0 ? 0 : (-iw + sw - 1) / sw;    /* first tap inside the row */
    int64_t hi = iw >= W ? 0 : (W - iw + sw - 1) / sw; /* past the last one */
    if (lo > n) lo = n;
    if (hi > n) hi = n;
    if (hi < lo) hi = lo;
    for (int64_t t = 0; t < lo; t++) d[t] = 0.0f;
    for (int64_t t = hi; t < n; t++) d[t] = 0.0f;
    for (int64_t t0 = lo; t0 < hi;) { /* taps [t0, t1) read columns within one SPAN block */
        int64_t c0 = iw + t0 * sw, t1 = t0 + (SPAN - 1) / sw + 1;
        if (t1 > hi) t1 = hi;
        int64_t span = (t1 - 1 - t0) * sw + 1;
        ipu__cvt_f16_to_f32(xr + c0, buf, (size_t)span);
        if (sw == 1)
            memcpy(d + t0, buf, sizeof(float) * (size_t)span);
        else
            for (int64_t t = t0; t < t1; t++) d[t] = buf[(t - t0) * sw];
        t0 = t1;
    }
}

/* col[kk][j] = x(patch row k0 + kk, output pixel p0 + j) of the image plane block at xoff. */
static void im2col(const ipu__conv_plan *p, const void *x, int64_t xoff, int64_t k0, int64_t kc,
                   int64_t p0, int64_t np, float *col) {
    int64_t HW = p->H * p->W;
    for (int64_t kk = 0; kk < kc; kk++) {
        int64_t k = k0 + kk;
        int64_t kw = k % p->KW, kh = (k / p->KW) % p->KH, ci = k / (p->KW * p->KH);
        int64_t base = xoff + ci * HW;
        float *dst = col + kk * np;
        int64_t oh = p0 / p->OW, ow = p0 % p->OW;
        for (int64_t j = 0; j < np;) {
            int64_t ih = oh * p->sh - p->pt + kh * p->dh;
            int64_t n = p->OW - ow < np - j ? p->OW - ow : np - j; /* rest of this output row */
            if (ih < 0 || ih >= p->H) {
                memset(dst + j, 0, sizeof(float) * (size_t)n);
            } else {
                int64_t row = base + ih * p->W, iw = ow * p->sw - p->pl + kw * p->dw;
                if (p->f16)
                    im2col_run_f16((const uint16_t *)x + row, p->W, iw, p->sw, n, dst + j);
                else
                    for (int64_t t = 0; t < n; t++, iw += p->sw)
                        dst[j + t] = (iw >= 0 && iw < p->W) ? ((const float *)x)[row + iw] : 0.0f;
            }
            j += n;
            ow = 0;
            oh++;
        }
    }
}

static void epilogue(const ipu__conv_plan *p, float *row, int64_t n, const void *bias, int64_t co,
                     const void *res, int64_t off) {
    ipu__conv_epilogue_to(p, row, row, n, bias, co, res, off);
}

static void store_row(const ipu__conv_plan *p, void *y, int64_t off, float *row, int64_t n,
                      const void *bias, const void *res, int64_t co) {
    epilogue(p, row, n, bias, co, res, off);
    if (p->f16)
        ipu__cvt_f32_to_f16(row, (uint16_t *)y + off, (size_t)n);
    else
        memcpy((float *)y + off, row, sizeof(float) * (size_t)n);
}

/* Columns [j, j + n) of row kk of packed B panels (Bp[j / nr][kk][j % nr], nr = 1 << ls, kc
 * rows per panel; d points at row kk of panel 0): s[0], s[ss], ... (s NULL: zeros). */
static inline void put_run(float *d, int64_t kc, int ls, int64_t j, const float *s, int64_t ss,
                           int64_t n) {
    const int64_t nr = (int64_t)1 << ls;
    while (n > 0) {
        int64_t o = j & (nr - 1), c = nr - o < n ? nr - o : n;
        float *dst = d + (j >> ls) * kc * nr + o;
        if (!s)
            for (int64_t t = 0; t < c; t++) dst[t] = 0.0f;
        else if (ss == 1)
            for (int64_t t = 0; t < c; t++) dst[t] = s[t];
        else
            for (int64_t t = 0; t < c; t++) dst[t] = s[t * ss];
        j += c;
        n -= c;
        if (s && n > 0) s += c * ss; /* (no pointer past the last element read) */
    }
}

/* im2col fused with B packing: Bp[j / nr][kk][j % nr] = x(patch row k0 + kk, output pixel
 * q0 + j) for j < np, zero up to the next multiple of nr = 1 << ls (not for pointwise
 * convolutions, whose rows ipu__conv_pack_rows copies). */
static void pack_patches(const ipu__conv_plan *p, const float *x, int64_t xoff, int64_t k0,
                         int64_t kc, int64_t q0, int64_t np, int ls, float *bp) {
    int64_t nr = (int64_t)1 << ls, npad = (np + nr - 1) / nr * nr;
    int64_t HW = p->H * p->W, sw = p->sw;
    int64_t kw = k0 % p->KW, kh = (k0 / p->KW) % p->KH, ci = k0 / (p->KW * p->KH);
    for (int64_t kk = 0; kk < kc; kk++) {
        float *d = bp + kk * nr;
        put_run(d, kc, ls, np, NULL, 0, npad - np);
        const float *plane = x + xoff + ci * HW;
        int64_t oh = q0 / p->OW, ow = q0 % p->OW;
        int64_t iwk = kw * p->dw - p->pl, ihk = kh * p->dh - p->pt;
        for (int64_t j = 0; j < np;) {
            int64_t n = p->OW - ow < np - j ? p->OW - ow : np - j; /* rest of this output row */
            int64_t ih = oh * p->sh + ihk;
            if (ih < 0 || ih >= p->H) {
                put_run(d, kc, ls, j, NULL, 0, n);
            } else {
                int64_t iw0 = ow * sw + iwk; /* input column of tap t: iw0 + t*sw */
                int64_t lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
                int64_t hi = iw0 >= p->W ? 0 : (p->W - iw0 + sw - 1) / sw;
                if (lo > n) lo = n;
                if (hi > n) hi = n;
                if (hi < lo) hi = lo;
                if (lo) put_run(d, kc, ls, j, NULL, 0, lo);
                if (hi > lo)
                    put_run(d, kc, ls, j + lo, plane + ih * p->W + iw0 + lo * sw, sw, hi - lo);
                if (n > hi) put_run(d, kc, ls, j + hi, NULL, 0, n - hi);
            }
            j += n;
            ow = 0;
            oh++;
        }
        if (++kw == p->KW) { /* next patch row: (ci, kh, kw) in row-major order */
            kw = 0;
            if (++kh == p->KH) {
                kh = 0;
                ci++;
            }
        }
    }
}

/* float32 GEMM path for the channel items [mb0, mb1) of one pixel block: output channels
 * [m0, m1) of group g (IPU__MM_MB-row sub-blocks), pixels of row block r. See the top of the
 * file. */
static void run_gemm_f32(const ipu__conv_plan *p, const float *x, const float *w, const float *apre,
                         const void *bias, const void *res, float *y, int64_t n, int64_t g,
                         int64_t mb0, int64_t mb1, int64_t r, void *scratch) {
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    const int mr = u.mr, nr = u.nr;
    int ls = 0;
    while ((1 << ls) < nr) ls++;
    if (apre && u.mr != p->packed_mr) apre = NULL; /* packed for another micro-kernel */
    int64_t m0, m1;
    ipu__conv_item_channels(p, mb0, mb1, &m0, &m1);
    int64_t oh1 = (r + 1) * p->rows < p->OH ? (r + 1) * p->rows : p->OH;
    int64_t pix0 = r * p->rows * p->OW, pix1 = oh1 * p->OW, OHW = p->OH * p->OW;
    int64_t xoff = (n * p->C + g * p->Cig) * p->H * p->W, m = m1 - m0;
    float *ap = scratch;
    size_t ap_bytes = ((size_t)IPU__MM_MB * IPU__SGEMM_KC * sizeof(float) + 63) & ~(size_t)63;
    float *bp = (float *)((char *)scratch + ap_bytes);
    int64_t nt = (int64_t)((IPU__SCRATCH_BYTES - ap_bytes) / (IPU__SGEMM_KC * sizeof(float)));
    nt = (nt < IPU__CONV_TILE ? nt : IPU__CONV_TILE) / nr * nr;
    float *yb = y + (n * p->M + g * p->Cog + m0) * OHW;
    for (int64_t q0 = pix0; q0 < pix1; q0 += nt) {
        int64_t np = pix1 - q0 < nt ? pix1 - q0 : nt;
        if (p->K == 0) /* no input channels */
            for (int64_t i = 0; i < m; i++)
                memset(yb + i * OHW + q0, 0, sizeof(float) * (size_t)np);
        for (int64_t k0 = 0; k0 < p->K; k0 += IPU__SGEMM_KC) {
            int64_t kc = p->K - k0 < IPU__SGEMM_KC ? p->K - k0 : IPU__SGEMM_KC;
            int acc = k0 > 0;
            bool last = k0 + kc == p->K && (bias || res || p->act == IPU__ACT_RELU);
            if (p->pointwise) /* x is the [K, OH*OW] matrix */
                ipu__conv_pack_rows(x + xoff + k0 * OHW + q0, NULL, OHW, kc, np, nr, bp);
            else
                pack_patches(p, x, xoff, k0, kc, q0, np, ls, bp);
            for (int64_t s0 = 0; s0 < m; s0 += IPU__MM_MB) { /* one sub-block of A */
                int64_t sm = m - s0 < IPU__MM_MB ? m - s0 : IPU__MM_MB;
                int64_t mpad = (sm + mr - 1) / mr * mr, sub = (m0 + s0) / IPU__MM_MB;
                const float *ak = ap;
                if (apre) {
                    ak = apre + (g * p->msub + sub) * p->packed_blk + mpad * k0;
                } else {
                    ipu__sgemm_args a;
                    memset(&a, 0, sizeof a);
                    a.m = sm;
                    a.a = w + (g * p->Cog + m0 + s0) * p->K;
                    a.a_rs = p->K;
                    a.a_cs = 1;
                    ipu__sgemm_pack_a(&a, k0, kc, mr, ap);
                }
                float *ys = yb + s0 * OHW + q0;
                for (int64_t jr = 0; jr < np; jr += nr) {
                    int64_t wd = np - jr < nr ? np - jr : nr;
                    const float *bpan = bp + jr * kc;
                    for (int64_t ir = 0; ir < sm; ir += mr) {
                        int64_t h = sm - ir < mr ? sm - ir : mr;
                        float *c = ys + ir * OHW + jr;
                        /* the last K chunk applies the epilogue as it stores the tile */
                        int64_t co = g * p->Cog + m0 + s0 + ir, off = c - y;
                        ipu__tile_ep ep = ipu__conv_tile_ep_at(p, bias, res, co, off);
                        if (h < mr || wd < nr)
                            u.part((int)h, (int)wd, kc, ak + ir * kc, bpan, NULL, c, OHW, acc,
                                   last ? &ep : NULL);
                        else if (last)
                            u.ep(kc, ak + ir * kc, bpan, c, OHW, acc, &ep);
                        else
                            u.fn(kc, ak + ir * kc, bpan, c, OHW, acc, NULL, 0);
                    }
                }
            }
        }
        for (int64_t i = 0; i < m && p->K == 0; i++) { /* (else applied with the last chunk) */
            int64_t co = g * p->Cog + m0 + i, off = (n * p->M + co) * OHW + q0;
            epilogue(p, y + off, np, bias, co, res, off);
        }
    }
}

/* ---- small-map path (the plan's `tpose`; conv.h) -------------------------------------- */

/* Are the mr pixels at extended offsets q[0..mr) consecutive (one run of an input row)? */
static inline bool pixel_run(const int64_t *q, int mr) { return q[mr - 1] - q[0] == mr - 1; }

/* Ap[k][i] = src[off[k] + q[i]], i < mr, k < kc: one A panel of mr output pixels (extended
 * offsets q) over kc patch rows. */
static inline __attribute__((always_inline)) void pack_pixels_body(const float *src,
                                                                   const int64_t *off, int64_t kc,
                                                                   const int64_t *q, int mr,
                                                                   float *restrict ap) {
    if (pixel_run(q, mr)) { /* the usual case */
        src += q[0];
        for (int64_t k = 0; k < kc; k++, ap += mr)
            memcpy(ap, src + off[k], sizeof(float) * (size_t)mr);
        return;
    }
    for (int64_t k = 0; k < kc; k++, ap += mr)
        for (int i = 0; i < mr; i++) ap[i] = src[off[k] + q[i]];
}

static void pack_pixels(const float *src, const int64_t *off, int64_t kc, const int64_t *q, int mr,
                        float *ap) {
    if (mr == 6) /* the AVX2 and portable kernels: constant-size copies */
        pack_pixels_body(src, off, kc, q, 6, ap);
    else if (mr == 12) /* AVX-512 */
        pack_pixels_body(src, off, kc, q, 12, ap);
    else
        pack_pixels_body(src, off, kc, q, mr, ap);
}

/* Channel items [mb0, mb1) of the small-map path, all of row block r: their output channels
 * [m0, m1) of group g, the np output pixels of the row block. Per K chunk
 * the chunk's input rows are copied as in the window path (xcopy), the pixels packed into A
 * panels, and the micro-kernel accumulates C^T[pixel][channel] in scratch against the
 * pre-packed weight panels bw; the epilogue then writes y from C^T (8 x 8 transposes).
 * float16: the copy converts the rows (a row at a time into rb, the scratch after
 * IPU__SCRATCH_BYTES); without a copy (1x1 stride-1 layers) each K chunk's rows of the block's
 * pixels are converted into xq; the epilogue stores y in half. */
static void run_tposed(const ipu__conv_plan *p, const void *x, const float *bw, const void *bias,
                       const void *res, void *y, int64_t n, int64_t g, int64_t mb0, int64_t mb1,
                       int64_t r, void *scratch) {
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    const int mr = u.mr, nr = u.nr;
    float *ct = (float *)scratch + IPU__CONV_WIN_A, *ap = ct + IPU__CONV_WIN_C;
    float *xq = ap + IPU__CONV_WIN_B;
    const int64_t Wq = p->Wq, OW = p->OW, OHW = p->OH * OW, K = p->K;
    const int64_t cstride = p->nphr * p->nphc * p->Hq * Wq;
    int64_t oh0 = r * p->rows, nrows = p->OH - oh0 < p->rows ? p->OH - oh0 : p->rows;
    int64_t np = nrows * OW, ppad = (np + mr - 1) / mr * mr;
    int64_t m0, m1;
    ipu__conv_item_channels(p, mb0, mb1, &m0, &m1);
    int64_t mpad = (m1 - m0 + nr - 1) / nr * nr, xoff = (n * p->C + g * p->Cig) * p->H * p->W;
    int64_t q[IPU__CONV_T_PIX + IPU__SGEMM_MAX_MR]; /* extended offset of pixel i; pads repeat */
    for (int64_t i = 0; i < ppad; i++) {
        int64_t j = i < np ? i : np - 1;
        q[i] = j / OW * Wq + j % OW;
    }
    int64_t off[IPU__SGEMM_KC];
    const float *bg = bw + g * p->packed_blk + m0 * K; /* panel (m0 + j) / nr at + j * K */
    for (int64_t k0 = 0; k0 < K; k0 += IPU__SGEMM_KC) {
        int64_t kc = K - k0 < IPU__SGEMM_KC ? K - k0 : IPU__SGEMM_KC;
        /* B(k, pixel i) = src[off[k] + q[i]] */
        const float *src = p->f16 ? xq : (const float *)x + xoff + oh0 * p->W;
        int64_t base = 0;
        if (p->xcopy) {
            int64_t KK = p->KH * p->KW, ci0 = k0 / KK, ci1 = (k0 + kc - 1) / KK + 1;
            float *rb = p->f16 ? (float *)((char *)scratch + IPU__SCRATCH_BYTES) : NULL;
            ipu__conv_copy_window(p, x, xoff, oh0, nrows, ci0, ci1, xq, rb);
            src = xq;
            base = ci0 * cstride;
        }
        for (int64_t kk = 0; kk < kc; kk++) off[kk] = p->rowoff[k0 + kk] - base;
        if (p->f16 && !p->xcopy) /* 1x1 stride 1: chunk row kk at xq + kk * np (q[i] = i) */
            for (int64_t kk = 0; kk < kc; kk++) {
                ipu__cvt_f16_to_f32((const uint16_t *)x + xoff + off[kk] + oh0 * p->W, xq + kk * np,
                                    (size_t)np);
                off[kk] = kk * np;
            }
        /* With at most two weight panels an A panel is read once or twice: a run of mr
         * pixels is then read in place where the micro-kernel can (u.arows), else its panel
         * is packed (row ends, the last panel's repeated pads). More panels re-read it often
         * enough that packing pays: 512 -> 2048 channels on 7x7 took 1.25x the time in place;
         * 128 -> 16 on 55x55 0.85x. */
        ipu__ukr_rows_fn arows = mpad <= 2 * nr ? u.arows : NULL;
        for (int64_t i = 0; i < ppad; i += mr)
            if (!arows || !pixel_run(q + i, mr)) pack_pixels(src, off, kc, q + i, mr, ap + i * kc);
        for (int64_t j = 0; j < mpad; j += nr) { /* a weight panel stays in L1 over all pixels */
            const float *bpan = bg + j * K + k0 * nr;
            const float *next = j + nr < mpad ? bpan + nr * K : NULL; /* weights: from memory */
            for (int64_t i = 0, done = 0; i < ppad; i += mr) {
                int64_t pfn;
                const float *pf = ipu__prefetch_share(next, kc * nr / 16, i / mr, ppad / mr, &done,
                                                      &pfn);
                float *c = ct + i * mpad + j;
                bool in_place = arows && pixel_run(q + i, mr), full = !in_place && np - i >= mr;
                if (!full) ipu__prefetch_lines(pf, pfn);
                if (full)
                    u.fn(kc, ap + i * kc, bpan, c, mpad, k0 > 0, pf, pfn);
                else if (in_place)
                    arows(kc, src + q[i], bpan, off, c, mpad, k0 > 0, NULL);
                else /* the last pixels: as few rows as the kernel can */
                    u.part((int)(np - i), nr, kc, ap + i * kc, bpan, NULL, c, mpad, k0 > 0, NULL);
            }
        }
    }
    int64_t co = g * p->Cog + m0, yo = (n * p->M + co) * OHW + oh0 * OW; /* y's row block */
    if (p->f16)
        ipu__conv_epilogue_t_f16(p, (uint16_t *)y + yo, OHW, ct, mpad, np, m1 - m0, bias, co, res,
                                 yo);
    else
        ipu__conv_epilogue_t(p, (float *)y + yo, OHW, ct, mpad, np, m1 - m0, bias, co, res, yo);
}

/* Channel items of the float16 GEMM path whose float32 C tile fits its scratch (below). */
#define CONV_F16_MAX_M                                                             \
    ((int64_t)((IPU__WORKER_SCRATCH_BYTES - IPU__SCRATCH_BYTES) / sizeof(float)) / \
         IPU__CONV_TILE -                                                          \
     IPU__SGEMM_KC)

static void gemm_f16_channels(const ipu__conv_plan *p, const uint16_t *x, const uint16_t *w,
                              const float *apre, const void *bias, const void *res, uint16_t *y,
                              int64_t n, int64_t g, int64_t m0, int64_t m1, int64_t r,
                              void *scratch);

/* float16 GEMM path: channel items [mb, mb1) (IPU__MM_MB output channels each) of group g,
 * pixels of row block r, as the float32 GEMM path computes them but through float32 staging:
 * per tile of output pixels and chunk of K, the patches are converted into rows of a float32
 * matrix (im2col, or x's own rows for 1x1 convolutions) packed once into B panels for all the
 * items' channels, the weights converted and packed at load (else as the sgemm packs them),
 * and the micro-kernel accumulates into a float32 C tile; its store of the last K chunk applies
 * the epilogue (bias, residual, activation) and stores y in half (ipu__ukr.half; else the
 * epilogue and the conversion run on the C tile after it). Scratch: A and B panels in the first
 * IPU__SCRATCH_BYTES, the patch rows and the C tile after them. */
static void run_gemm_f16(const ipu__conv_plan *p, const uint16_t *x, const uint16_t *w,
                         const float *apre, const void *bias, const void *res, uint16_t *y,
                         int64_t n, int64_t g, int64_t mb, int64_t mb1, int64_t r, void *scratch) {
    int64_t c0, c1; /* IPU__MM_MB-channel items (or a Winograd plan's, its blocks fallen back) */
    ipu__conv_item_channels(p, mb, mb1, &c0, &c1);
    /* as many channels at a time as the C tile holds (whole sub-blocks: the packed weights') */
    const int64_t most = CONV_F16_MAX_M / IPU__MM_MB * IPU__MM_MB;
    for (int64_t m0 = c0, m1; m0 < c1; m0 = m1) {
        m1 = c1 - m0 < most ? c1 : m0 + most;
        gemm_f16_channels(p, x, w, apre, bias, res, y, n, g, m0, m1, r, scratch);
    }
}

/* run_gemm_f16 for output channels [m0, m1) of the group (at most CONV_F16_MAX_M). */
static void gemm_f16_channels(const ipu__conv_plan *p, const uint16_t *x, const uint16_t *w,
                              const float *apre, const void *bias, const void *res, uint16_t *y,
                              int64_t n, int64_t g, int64_t m0, int64_t m1, int64_t r,
                              void *scratch) {
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    const int mr = u.mr, nr = u.nr;
    if (apre && u.mr != p->packed_mr) apre = NULL; /* packed for another micro-kernel */
    int64_t oh1 = (r + 1) * p->rows < p->OH ? (r + 1) * p->rows : p->OH;
    int64_t pix0 = r * p->rows * p->OW, pix1 = oh1 * p->OW, OHW = p->OH * p->OW;
    int64_t xoff = (n * p->C + g * p->Cig) * p->H * p->W, co0 = g * p->Cog + m0, m = m1 - m0;
    float *ap = scratch;
    size_t ap_bytes = ((size_t)IPU__MM_MB * IPU__SGEMM_KC * sizeof(float) + 63) & ~(size_t)63;
    float *bp = (float *)((char *)scratch + ap_bytes);
    int64_t nt = (int64_t)((IPU__SCRATCH_BYTES - ap_bytes) / (IPU__SGEMM_KC * sizeof(float)));
    nt = (nt < IPU__CONV_TILE ? nt : IPU__CONV_TILE) / nr * nr;
    float *col = (float *)((char *)scratch + IPU__SCRATCH_BYTES); /* [KC][nt] */
    float *ct = col + IPU__SGEMM_KC * nt;                         /* [MB][nt] */
    for (int64_t q0 = pix0; q0 < pix1; q0 += nt) {
        int64_t np = pix1 - q0 < nt ? pix1 - q0 : nt;
        if (p->K == 0) memset(ct, 0, sizeof(float) * (size_t)(m * np)); /* no input channels */
        for (int64_t k0 = 0; k0 < p->K; k0 += IPU__SGEMM_KC) {
            int64_t kc = p->K - k0 < IPU__SGEMM_KC ? p->K - k0 : IPU__SGEMM_KC;
            if (p->pointwise) { /* 1x1, stride 1, no pads: x's rows converted into panels */
                ipu__cvt_f16_pack_b(x + xoff + k0 * OHW + q0, OHW, kc, np, nr, bp);
            } else {
                im2col(p, x, xoff, k0, kc, q0, np, col);
                ipu__conv_pack_rows(col, NULL, np, kc, np, nr, bp);
            }
            for (int64_t s0 = 0; s0 < m; s0 += IPU__MM_MB) { /* one sub-block of A */
                int64_t sm = m - s0 < IPU__MM_MB ? m - s0 : IPU__MM_MB;
                int64_t mpad = (sm + mr - 1) / mr * mr, sub = (m0 + s0) / IPU__MM_MB;
                const float *ak = ap;
                if (apre) { /* converted and packed at load */
                    ak = apre + (g * p->msub + sub) * p->packed_blk + mpad * k0;
                } else {
                    ipu__sgemm_args a;
                    memset(&a, 0, sizeof a);
                    a.m = sm;
                    a.a = w + (co0 + s0) * p->K;
                    a.a_rs = p->K;
                    a.a_cs = 1;
                    a.a_f16 = 1;
                    ipu__sgemm_pack_a(&a, k0, kc, mr, ap);
                }
                /* the last K chunk stores y in half, the epilogue fused (u.half) */
                const bool fused = u.half && k0 + kc == p->K;
                float bsub[IPU__MM_MB];
                if (fused && bias)
                    ipu__cvt_f16_to_f32((const uint16_t *)bias + co0 + s0, bsub, (size_t)sm);
                for (int64_t jr = 0; jr < np; jr += nr) {
                    int64_t wd = np - jr < nr ? np - jr : nr;
                    const float *bpan = bp + jr * kc;
                    for (int64_t ir = 0; ir < sm; ir += mr) {
                        int64_t h = sm - ir < mr ? sm - ir : mr;
                        float *c = ct + (s0 + ir) * np + jr;
                        int64_t yo = (n * p->M + co0 + s0 + ir) * OHW + q0 + jr;
                        ipu__tile_ep ep = ipu__conv_tile_ep_y(p, bias, bsub + ir, res,
                                                              co0 + s0 + ir, yo, y);
                        if (h < mr || wd < nr)
                            u.part((int)h, (int)wd, kc, ak + ir * kc, bpan, NULL, c, np, k0 > 0,
                                   fused ? &ep : NULL);
                        else if (fused)
                            u.ep(kc, ak + ir * kc, bpan, c, np, k0 > 0, &ep);
                        else
                            u.fn(kc, ak + ir * kc, bpan, c, np, k0 > 0, NULL, 0);
                    }
                }
            }
        }
        for (int64_t i = 0; i < m && !(u.half && p->K > 0); i++)
            store_row(p, y, (n * p->M + co0 + i) * OHW + q0, ct + i * np, np, bias, res, co0 + i);
    }
}

/* Depthwise: channel c = g of image n, output rows of block r. */
static void run_direct(const ipu__conv_plan *p, const void *x, const void *w, const void *bias,
                       const void *res, void *y, int64_t n, int64_t g, int64_t r, void *scratch) {
    float *row = scratch;    /* OW floats */
    float *wt = row + p->OW; /* KH*KW floats */
    /* float16: an input row as float32 after the first IPU__SCRATCH_BYTES */
    float *xrow = (float *)((char *)scratch + IPU__SCRATCH_BYTES);
    const int64_t xrow_max = (int64_t)((IPU__WORKER_SCRATCH_BYTES - IPU__SCRATCH_BYTES) /
                                       sizeof(float));
    int64_t KK = p->KH * p->KW;
    for (int64_t i = 0; i < KK; i++) wt[i] = ipu__ld_f32(w, p->f16, g * KK + i);
    int64_t xoff = (n * p->C + g) * p->H * p->W;
    int64_t oh1 = (r + 1) * p->rows < p->OH ? (r + 1) * p->rows : p->OH;
    for (int64_t oh = r * p->rows; oh < oh1; oh++) {
        /* tap by tap over the whole output row (vectorises for stride 1); each output still
         * sums its taps in (kh, kw) order */
        for (int64_t ow = 0; ow < p->OW; ow++) row[ow] = 0.0f;
        for (int64_t kh = 0; kh < p->KH; kh++) {
            int64_t ih = oh * p->sh - p->pt + kh * p->dh;
            if (ih < 0 || ih >= p->H) continue;
            int64_t base = xoff + ih * p->W;
            const void *xs = x; /* float16: the input row converted once for all its taps */
            if (p->f16 && p->W <= xrow_max) {
                ipu__cvt_f16_to_f32((const uint16_t *)x + base, xrow, (size_t)p->W);
                xs = xrow;
                base = 0;
            }
            bool half = xs == x && p->f16;
            for (int64_t kw = 0; kw < p->KW; kw++) {
                float wv = wt[kh * p->KW + kw];
                int64_t iw0 = kw * p->dw - p->pl, sw = p->sw; /* input column: ow*sw + iw0 */
                int64_t lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
                int64_t hi = iw0 >= p->W ? 0 : (p->W - iw0 + sw - 1) / sw;
                if (hi > p->OW) hi = p->OW;
                if (half) {
                    for (int64_t ow = lo; ow < hi; ow++)
                        row[ow] += ipu__ld_f32(x, 1, base + ow * sw + iw0) * wv;
                } else if (lo < hi) { /* xr[ow*sw] is input column ow*sw + iw0 */
                    const float *xr = (const float *)xs + base + lo * sw + iw0;
                    float *rr = row + lo;
                    if (sw == 1)
                        for (int64_t t = 0; t < hi - lo; t++) rr[t] += xr[t] * wv;
                    else
                        for (int64_t t = 0; t < hi - lo; t++) rr[t] += xr[t * sw] * wv;
                }
            }
        }
        store_row(p, y, ((n * p->M + g) * p->OH + oh) * p->OW, row, p->OW, bias, res, g);
    }
}

/* CONV2D's UNARY activation (ipu_fns.def) over channel blocks [mb0, mb1) of group g, row
 * block r of image n, after their sums, bias and residual are stored: the rows of a channel
 * are contiguous (NCHW). float16 through a float32 buffer, as the UNARY instruction does. */
static void apply_unary(const ipu__conv_plan *p, void *y, int64_t n, int64_t g, int64_t mb0,
                        int64_t mb1, int64_t r) {
    int64_t m0, m1;
    ipu__conv_item_channels(p, mb0, mb1, &m0, &m1);
    int64_t oh0 = r * p->rows, oh1 = oh0 + p->rows < p->OH ? oh0 + p->rows : p->OH;
    int64_t len = (oh1 - oh0) * p->OW, OHW = p->OH * p->OW;
    for (int64_t m = m0; m < m1; m++) {
        int64_t off = (n * p->M + g * p->Cog + m) * OHW + oh0 * p->OW;
        if (!p->f16) {
            ipu__unary_apply_f32(p->unary.fn, p->unary.p0, p->unary.p1, (float *)y + off,
                                 (size_t)len);
            continue;
        }
        float t[512];
        uint16_t *h = (uint16_t *)y + off;
        for (int64_t j = 0; j < len; j += 512) {
            size_t c = (size_t)(len - j < 512 ? len - j : 512);
            ipu__cvt_f16_to_f32(h + j, t, c);
            ipu__unary_apply_f32(p->unary.fn, p->unary.p0, p->unary.p1, t, c);
            ipu__cvt_f32_to_f16(t, h + j, c);
        }
    }
}

/* The end of the run of channel items mb, mb + 1, ... of one pixel block that items *it, *it +
 * 1, ... (< e) hold; *it moves to the run's last item. */
static int64_t channel_run(const ipu__conv_plan *p, int64_t mb, size_t *it, size_t e) {
    int64_t mb1 = mb + 1;
    for (; *it + 1 < e && mb1 < p->mblocks; mb1++) ++*it;
    return mb1;
}

ipu_status ipu__k_conv2d(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    const ipu__conv_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]], *w = f->ptr[ins->in[1]];
    const void *bias = p->has_bias ? f->ptr[ins->in[2]] : NULL;
    const void *res = p->has_res ? f->ptr[ins->in[ins->n_in - 1]] : NULL;
    void *y = f->ptr[ins->out[0]];
    const float *apre = p->packed && w == (const void *)ipu__tensor_bytes(f->exe, ins->in[1])
                            ? p->packed
                            : NULL; /* not if the session bound other weights */
    bool tposed = false, wino = false;
    if (apre) { /* packed for this micro-kernel: else the other paths */
        ipu__ukr u;
        ipu__sgemm_ukr(&u);
        tposed = p->tpose && u.nr == p->packed_nr;
        wino = p->wino && u.mr == p->packed_mr && p->wnt % u.nr == 0; /* its V panels */
        /* weights stored packed only (their bytes are the packed ones) have no other path */
        if (w == (const void *)apre && (p->tpose ? !tposed : u.mr != p->packed_mr))
            return ipu__fail(IPU_ERR_INVALID_STATE,
                             "conv2d: its weights are stored packed for the instruction-set "
                             "level in use at load; load the executable again after changing it");
    }
    if (p->wino && !wino) apre = NULL; /* the window path with unpacked weights */
    for (size_t it = b; it < e; it++) {
        /* channel blocks vary fastest: a contiguous range of items (one worker's share) then
         * holds whole pixel blocks, which balances when channel blocks differ in size */
        uint64_t rest = it;
        int64_t mb = (int64_t)(rest % (uint64_t)p->mblocks);
        rest /= (uint64_t)p->mblocks;
        int64_t r = (int64_t)(rest % (uint64_t)p->rblocks);
        rest /= (uint64_t)p->rblocks;
        int64_t g = (int64_t)(rest % (uint64_t)p->G), n = (int64_t)(rest / (uint64_t)p->G);
        const int64_t mb_first = mb;
        const size_t it_first = it;
        if (wino) { /* the following items of the same tiles: one run, the tiles once */
            int64_t mb1 = channel_run(p, mb, &it, e);
            if (!ipu__conv_wino(p, x, apre, bias, res, y, n, mb, mb1, r, scratch)) {
                /* an infinity or NaN in its input: direct sums */
                if (p->f16)
                    run_gemm_f16(p, x, w, NULL, bias, res, y, n, g, mb, mb1, r, scratch);
                else
                    for (; mb < mb1; mb++)
                        ipu__conv_run_window(p, x, w, NULL, bias, res, y, n, g, mb, r, scratch);
            }
        } else if (tposed) {
            /* the following items of the same pixels (one worker's share): their channels in
             * one run, the pixels packed once, as far as the C^T tile fits the scratch */
            int64_t rows = p->OH - r * p->rows < p->rows ? p->OH - r * p->rows : p->rows;
            int64_t px = rows * p->OW + IPU__SGEMM_MAX_MR, nr = p->packed_nr, mb1 = mb + 1;
            for (int64_t m0, m1; it + 1 < e && mb1 < p->mblocks; mb1++, it++) {
                ipu__conv_item_channels(p, mb, mb1 + 1, &m0, &m1);
                if (px * ((m1 - m0 + nr - 1) / nr * nr) > IPU__CONV_WIN_C) break;
            }
            run_tposed(p, x, apre, bias, res, y, n, g, mb, mb1, r, scratch);
        } else if (p->direct) {
            if (!p->Wq || !ipu__conv_run_dw(p, x, w, bias, res, y, n, g, r, scratch))
                run_direct(p, x, w, bias, res, y, n, g, r, scratch);
        } else if (p->window)
            ipu__conv_run_window(p, x, w, apre, bias, res, y, n, g, mb, r, scratch);
        else if (!p->f16) {
            /* the following items of the same pixels: their channels in one run, each chunk
             * of B packed once for all of them */
            int64_t mb1 = channel_run(p, mb, &it, e);
            run_gemm_f32(p, x, w, apre, bias, res, y, n, g, mb, mb1, r, scratch);
        } else {
            /* the following items of the same pixels, as far as their C tile fits: the
             * patches converted and packed once for all of them */
            int64_t mb1 = mb + 1, c0, c1;
            for (; it + 1 < e && mb1 < p->mblocks; mb1++, it++) {
                ipu__conv_item_channels(p, mb, mb1 + 1, &c0, &c1);
                if (c1 - c0 > CONV_F16_MAX_M) break;
            }
            run_gemm_f16(p, x, w, apre, bias, res, y, n, g, mb, mb1, r, scratch);
        }
        /* items it_first..it (channel blocks from mb_first, one row block) are stored: a
         * UNARY activation over them while they are in cache */
        if (p->act == IPU__ACT_UNARY)
            apply_unary(p, y, n, g, mb_first, mb_first + (int64_t)(it - it_first) + 1, r);
    }
    return IPU_OK;
}
