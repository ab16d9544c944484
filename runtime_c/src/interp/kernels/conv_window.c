/* CONV2D's window path (float32 and float16) (the plan's `window`; conv.h): see conv.c's top comment.
 * Split from conv.c, whose other paths share its helpers through conv_shared.h. */
#include <stdbool.h>
#include <string.h>

#include "conv_shared.h"
#include "isa.h"

/* The input row at x's element off as float32: x's own (rb NULL) or the half row converted
 * into rb. */
static inline __attribute__((always_inline)) const float *in_row(const void *x, int64_t off,
                                                                 int64_t W, float *rb) {
    if (!rb) return (const float *)x + off;
    ipu__cvt_f16_to_f32((const uint16_t *)x + off, rb, (size_t)W);
    return rb;
}

/* xq <- the zero-padded input rows that output rows [oh0, oh0 + nrows) read from channels
 * [ci0, ci1) of the group, as phase planes xq[ci - ci0][pa][pb][i][j] = xpad[(oh0 + i) * sh + a]
 * [j * sw + b] of Hq x Wq, pa / pb counting only the phases a / b some tap reads; then Wq zeros
 * (read by the dropped columns of the last plane). rb NULL: x is float32; else x is float16,
 * each row converted into rb (W floats) once per column phase pass. */
static inline __attribute__((always_inline)) void copy_window_body(const ipu__conv_plan *p,
                                                                   const void *x, int64_t xoff,
                                                                   int64_t oh0, int64_t nrows,
                                                                   int64_t ci0, int64_t ci1,
                                                                   float *xq, float *rb) {
    const int64_t Hq = p->Hq, Wq = p->Wq, sh = p->sh, sw = p->sw, W = p->W, HqWq = Hq * Wq;
    int64_t hrows = nrows + (p->KH - 1) * p->dh / sh;
    if (hrows > Hq) hrows = Hq;
    /* stride 2 reading both column phases: each input row split once into the pair */
    const bool pair = sw == 2 && p->nphc == 2;
    for (int64_t a = 0, pa = 0; a < sh; a++) {
        if (!ipu__phase_used(a, p->KH, p->dh, sh)) continue;
        for (int64_t ci = ci0; pair && ci < ci1; ci++) {
            float *d0 = xq + ((ci - ci0) * p->nphr + pa) * 2 * HqWq, *d1 = d0 + HqWq;
            const int64_t xc = xoff + ci * p->H * W;
            for (int64_t i = 0; i < hrows; i++, d0 += Wq, d1 += Wq) {
                int64_t ih = (oh0 + i) * sh + a - p->pt;
                if (ih >= 0 && ih < p->H) {
                    ipu__split_row2(in_row(x, xc + ih * W, W, rb), W, -p->pl, Wq, 0.0f, d0, d1);
                } else {
                    for (int64_t j = 0; j < Wq; j++) d0[j] = d1[j] = 0.0f;
                }
            }
        }
        for (int64_t b = 0, pb = 0; b < sw && !pair; b++) {
            if (!ipu__phase_used(b, p->KW, p->dw, sw)) continue;
            int64_t c0 = b - p->pl; /* input column of j = 0; j's is c0 + j * sw */
            int64_t lo = c0 >= 0 ? 0 : (-c0 + sw - 1) / sw;
            int64_t hi = c0 >= W ? 0 : (W - c0 + sw - 1) / sw;
            if (hi > Wq) hi = Wq;
            if (lo > hi) lo = hi;
            for (int64_t ci = ci0; ci < ci1; ci++) {
                float *plane = xq + (((ci - ci0) * p->nphr + pa) * p->nphc + pb) * HqWq;
                const int64_t xc = xoff + ci * p->H * W;
                for (int64_t i = 0; i < hrows; i++) {
                    float *d = plane + i * Wq;
                    int64_t ih = (oh0 + i) * sh + a - p->pt;
                    if (ih < 0 || ih >= p->H) {
                        for (int64_t j = 0; j < Wq; j++) d[j] = 0.0f;
                        continue;
                    }
                    ipu__copy_row_phase(d, in_row(x, xc + ih * W, W, rb) + lo * sw + c0, lo, hi, Wq,
                                        sw, 0.0f);
                }
            }
            pb++;
        }
        pa++;
    }
    float *tail = xq + (ci1 - ci0) * p->nphr * p->nphc * HqWq;
    for (int64_t j = 0; j < Wq; j++) tail[j] = 0.0f;
}

IPU__INLINE_LOOPS static void copy_window_base(const ipu__conv_plan *p, const void *x, int64_t xoff,
                                               int64_t oh0, int64_t nrows, int64_t ci0, int64_t ci1,
                                               float *xq, float *rb) {
    copy_window_body(p, x, xoff, oh0, nrows, ci0, ci1, xq, rb);
}

#if IPU_X86
IPU__INLINE_LOOPS __attribute__((target("avx2"))) static void copy_window_avx2(
    const ipu__conv_plan *p, const void *x, int64_t xoff, int64_t oh0, int64_t nrows, int64_t ci0,
    int64_t ci1, float *xq, float *rb) {
    copy_window_body(p, x, xoff, oh0, nrows, ci0, ci1, xq, rb);
}
#endif

void ipu__conv_copy_window(const ipu__conv_plan *p, const void *x, int64_t xoff, int64_t oh0,
                           int64_t nrows, int64_t ci0, int64_t ci1, float *xq, float *rb) {
#if IPU_X86
    if (ipu__isa() >= IPU__ISA_AVX2) {
        copy_window_avx2(p, x, xoff, oh0, nrows, ci0, ci1, xq, rb);
        return;
    }
#endif
    copy_window_base(p, x, xoff, oh0, nrows, ci0, ci1, xq, rb);
}

/* y's offset of extended pixel q (block-relative, a kept column) of channel co, block oh0. */
static inline int64_t y_at(const ipu__conv_plan *p, int64_t n, int64_t co, int64_t oh0, int64_t q) {
    int64_t rr = q / p->Wq;
    return (n * p->M + co) * p->OH * p->OW + (oh0 + rr) * p->OW + q - rr * p->Wq;
}

/* Does the micro-kernel store the tile of panel jr (extended pixel q = t0 + jr) straight into
 * y (a whole tile or, at a sub-block's last rows, its real channels)? When the panel is read in
 * place (jr < nfull) and its nr pixels are kept columns of one output row; float16 where the
 * micro-kernel stores half (u->half: the K chunks accumulate in the C tile, the last one's store
 * goes to y). */
static inline bool tile_to_y(const ipu__conv_plan *p, const ipu__ukr *u, int64_t q, int64_t jr,
                             int64_t nfull) {
    return p->K > 0 && (!p->f16 || u->half) && jr < nfull && q % p->Wq + u->nr <= p->OW;
}

/* The epilogue from C tile row crow (extended pixel t0 at crow[0]) to the kept columns of
 * extended pixels [q0, q1) of channel co; float16: applied in place in crow, then stored in
 * half. */
static void epilogue_kept(const ipu__conv_plan *p, void *y, float *crow, int64_t t0, int64_t q0,
                          int64_t q1, int64_t n, int64_t oh0, const void *bias, int64_t co,
                          const void *res) {
    const int64_t Wq = p->Wq, OW = p->OW;
    for (int64_t q = q0; q < q1;) {
        int64_t rr = q / Wq;
        int64_t end = rr * Wq + Wq < q1 ? rr * Wq + Wq : q1;
        int64_t keep = rr * Wq + OW < end ? rr * Wq + OW : end;
        if (q < keep) {
            int64_t off = y_at(p, n, co, oh0, q);
            float *c = crow + (q - t0);
            if (p->f16) {
                ipu__conv_epilogue_to(p, c, c, keep - q, bias, co, res, off);
                ipu__cvt_f32_to_f16(c, (uint16_t *)y + off, (size_t)(keep - q));
            } else {
                ipu__conv_epilogue_to(p, (float *)y + off, c, keep - q, bias, co, res, off);
            }
        }
        q = end;
    }
}

/* The window path's tiles of one sub-block (rows s0 + [0, sm) of A, packed at ak) for K
 * chunk k0 when output rows are whole tiles ("aligned" in ipu__conv_run_window): tiles start
 * at each output row's first column and go straight into y, the row's last one its kept
 * columns only (u.part, masked), so no second pass; B's rows are read in place from src
 * (extended pixels of the block's rows), up to nr - 1 floats past a row's kept columns.
 * float16: the K chunks accumulate in the sub-block's C tile ct (at the tile's extended
 * pixels), the last one stores y in half; bf: the item's biases converted (from channel m0). */
static void window_tiles_to_y(const ipu__conv_plan *p, const ipu__ukr *u, const float *ak,
                              const float *src, const int64_t *off, int64_t kc, int64_t k0,
                              int64_t sm, int64_t s0, int64_t nrows, const void *bias,
                              const float *bf, const void *res, void *y, float *ct, int64_t n,
                              int64_t g, int64_t oh0) {
    const int mr = u->mr, nr = u->nr;
    const int64_t OW = p->OW, OHW = p->OH * OW;
    for (int64_t rr = 0; rr < nrows; rr++)
        for (int64_t c = 0; c < OW; c += nr) {
            int w = OW - c < nr ? (int)(OW - c) : nr;
            for (int64_t ir = 0; ir < sm; ir += mr) {
                int h = sm - ir < mr ? (int)(sm - ir) : mr;
                int64_t co = g * p->Cog + s0 + ir, yo = y_at(p, n, co, oh0, rr * p->Wq + c);
                ipu__tile_ep ep = ipu__conv_tile_ep_y(p, bias, bf + ir, res, co, yo, y);
                const ipu__tile_ep *e = k0 + kc == p->K ? &ep : NULL;
                const float *b = src + rr * p->Wq + c;
                float *cc = p->f16 ? ct + ir * IPU__CONV_TILE + rr * p->Wq + c : (float *)y + yo;
                int64_t ldc = p->f16 ? IPU__CONV_TILE : OHW;
                if (h == mr && w == nr)
                    u->rows(kc, ak + ir * kc, b, off, cc, ldc, k0 > 0, e);
                else
                    u->part(h, w, kc, ak + ir * kc, b, off, cc, ldc, k0 > 0, e);
            }
        }
}

/* One work item of the window path: output channels of channel item mb of group g (at most
 * IPU__CONV_WIN_MPER sub-blocks), output rows of block r (tiles of IPU__CONV_TILE extended pixels
 * if they are more). Per tile and K chunk the chunk's input channels are copied (xcopy) and
 * packed once. Where the micro-kernel reads B's rows in place, a tile of whole mr channels
 * whose pixels are kept columns of one output row is stored straight into y, the epilogue
 * fused into the last K chunk's store; the other tiles accumulate into one C tile per
 * sub-block, whose kept columns the epilogue then writes to y. */
void ipu__conv_run_window(const ipu__conv_plan *p, const void *x, const void *w, const float *apre,
                          const void *bias, const void *res, void *y, int64_t n, int64_t g,
                          int64_t mb, int64_t r, void *scratch) {
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    const int mr = u.mr, nr = u.nr;
    if (apre && u.mr != p->packed_mr) apre = NULL; /* packed for another micro-kernel */
    float *ap = scratch, *cb = ap + IPU__CONV_WIN_A, *bp = cb + IPU__CONV_WIN_C;
    float *xq = bp + IPU__CONV_WIN_B;
    float *rb = p->f16 ? (float *)((char *)scratch + IPU__SCRATCH_BYTES) : NULL; /* a row */
    const int64_t NT = IPU__CONV_TILE, Wq = p->Wq, OW = p->OW, OHW = p->OH * OW;
    const int64_t KK = p->KH * p->KW, cstride = p->nphr * p->nphc * p->Hq * Wq;
    int64_t oh0 = r * p->rows, nrows = p->OH - oh0 < p->rows ? p->OH - oh0 : p->rows;
    int64_t xoff = (n * p->C + g * p->Cig) * p->H * p->W;
    int64_t m0, m1;
    ipu__conv_item_channels(p, mb, mb + 1, &m0, &m1);
    int64_t npix = nrows * Wq;
    float bf[IPU__CONV_WIN_MPER * IPU__MM_MB]; /* float16: the channels' biases, converted */
    if (p->f16 && u.half && bias)
        ipu__cvt_f16_to_f32((const uint16_t *)bias + g * p->Cog + m0, bf, (size_t)(m1 - m0));
    int64_t off[IPU__SGEMM_KC]; /* B row offsets of the K chunk from src */
    /* Output rows as whole tiles (window_tiles_to_y) where tiles would otherwise cross row
     * ends, if that computes no more columns or, for a few input rows per output (K <= 64,
     * where the second pass costs most), at most 1/5 more: SqueezeNet's first convolution
     * (111 columns of 112 as 128) 0.50 -> 0.37 ms. Copied rows only (the copy ends in Wq >= nr
     * zeros, which a row's last tile may read), one pixel tile. */
    const int64_t cols = (OW + nr - 1) / nr * nr;
    const bool aligned = (!p->f16 || u.half) && u.rows && p->xcopy && Wq >= nr && Wq % nr &&
                         npix <= NT && (cols <= Wq || (p->K <= 64 && 5 * cols <= 6 * Wq));
    for (int64_t t0 = 0; t0 < npix; t0 += NT) {
        int64_t np = npix - t0 < NT ? npix - t0 : NT, npad = (np + nr - 1) / nr * nr;
        int64_t nfull = u.rows ? np / nr * nr : 0;
        if (p->K == 0) /* no input channels */
            for (int64_t s0 = m0; s0 < m1; s0 += IPU__MM_MB)
                for (int64_t i = 0; i < IPU__MM_MB; i++)
                    memset(cb + (s0 - m0) / IPU__MM_MB * IPU__CONV_WIN_CT + i * NT, 0,
                           sizeof(float) * (size_t)np);
        for (int64_t k0 = 0; k0 < p->K; k0 += IPU__SGEMM_KC) {
            int64_t kc = p->K - k0 < IPU__SGEMM_KC ? p->K - k0 : IPU__SGEMM_KC;
            /* B(kk, j) = src[off[kk] + j] (float16: always a copy, conv_plan.c) */
            const float *src = p->f16 ? xq : (const float *)x + xoff + oh0 * p->W + t0;
            int64_t base = 0;
            if (p->xcopy) {
                int64_t ci0 = k0 / KK, ci1 = (k0 + kc - 1) / KK + 1;
                ipu__conv_copy_window(p, x, xoff, oh0, nrows, ci0, ci1, xq, rb);
                src = xq + t0;
                base = ci0 * cstride;
            }
            for (int64_t kk = 0; kk < kc; kk++) off[kk] = p->rowoff[k0 + kk] - base;
            /* full panels: the micro-kernel reads B's rows in place; the rest is packed */
            if (nfull < np && !aligned) /* (whole-row tiles read every B row in place) */
                ipu__conv_pack_rows(src + nfull, off, 0, kc, np - nfull, nr, bp + nfull * kc);
            for (int64_t s0 = m0; s0 < m1; s0 += IPU__MM_MB) {
                int64_t sm = m1 - s0 < IPU__MM_MB ? m1 - s0 : IPU__MM_MB;
                int64_t mpad = (sm + mr - 1) / mr * mr;
                float *ct = cb + (s0 - m0) / IPU__MM_MB * IPU__CONV_WIN_CT;
                const float *ak = ap;
                if (apre) {
                    ak = apre + (g * p->msub + s0 / IPU__MM_MB) * p->packed_blk + mpad * k0;
                } else {
                    ipu__sgemm_args a;
                    memset(&a, 0, sizeof a);
                    a.m = sm;
                    a.a = p->f16 ? (const void *)((const uint16_t *)w + (g * p->Cog + s0) * p->K)
                                 : (const void *)((const float *)w + (g * p->Cog + s0) * p->K);
                    a.a_f16 = p->f16;
                    a.a_rs = p->K;
                    a.a_cs = 1;
                    ipu__sgemm_pack_a(&a, k0, kc, mr, ap);
                }
                if (aligned) {
                    window_tiles_to_y(p, &u, ak, src, off, kc, k0, sm, s0, nrows, bias,
                                      bf + (s0 - m0), res, y, ct, n, g, oh0);
                    continue;
                }
                for (int64_t jr = 0; jr < npad; jr += nr)
                    for (int64_t ir = 0; ir < mpad; ir += mr) {
                        if (jr >= nfull) {
                            u.fn(kc, ak + ir * kc, bp + jr * kc, ct + ir * NT + jr, NT, k0 > 0,
                                 NULL, 0);
                        } else if (tile_to_y(p, &u, t0 + jr, jr, nfull)) {
                            int64_t co = g * p->Cog + s0 + ir, yo = y_at(p, n, co, oh0, t0 + jr);
                            ipu__tile_ep ep = ipu__conv_tile_ep_y(p, bias, bf + (s0 - m0) + ir, res,
                                                                  co, yo, y);
                            const ipu__tile_ep *e = k0 + kc == p->K ? &ep : NULL;
                            /* float32 accumulates in y, float16 in the C tile */
                            float *c = p->f16 ? ct + ir * NT + jr : (float *)y + yo;
                            int64_t ldc = p->f16 ? NT : OHW;
                            if (ir + mr <= sm)
                                u.rows(kc, ak + ir * kc, src + jr, off, c, ldc, k0 > 0, e);
                            else /* the sub-block's last channels */
                                u.part((int)(sm - ir), nr, kc, ak + ir * kc, src + jr, off, c, ldc,
                                       k0 > 0, e);
                        } else {
                            u.rows(kc, ak + ir * kc, src + jr, off, ct + ir * NT + jr, NT, k0 > 0,
                                   NULL);
                        }
                    }
            }
        }
        for (int64_t s0 = m0; s0 < m1 && !(aligned && p->K > 0); s0 += IPU__MM_MB) {
            int64_t sm = m1 - s0 < IPU__MM_MB ? m1 - s0 : IPU__MM_MB;
            float *ct = cb + (s0 - m0) / IPU__MM_MB * IPU__CONV_WIN_CT;
            for (int64_t i = 0; i < sm; i++) { /* kept columns, output row by output row */
                int64_t co = g * p->Cog + s0 + i;
                if (p->K > 0 && nfull > 0 && (!p->f16 || u.half)) { /* panels not in y */
                    for (int64_t jr = 0; jr < np; jr += nr)
                        if (!tile_to_y(p, &u, t0 + jr, jr, nfull))
                            epilogue_kept(p, y, ct + i * NT, t0, t0 + jr,
                                          jr + nr < np ? t0 + jr + nr : t0 + np, n, oh0, bias, co,
                                          res);
                } else if (!p->f16 && t0 % Wq == 0 && np % Wq == 0) { /* whole rows: one call */
                    int64_t off = y_at(p, n, co, oh0, t0);
                    ipu__conv_epilogue_rows(p, (float *)y + off, OW, ct + i * NT, Wq, np / Wq, OW,
                                            bias, co, res, off);
                } else {
                    epilogue_kept(p, y, ct + i * NT, t0, t0, t0 + np, n, oh0, bias, co, res);
                }
            }
        }
    }
}
