/* CONV2D (conv.c, conv_window.c, winograd.c, conv_epilogue.c; conv_plan.c): the plan and
 * the pieces its paths share. */
#ifndef IPU_CONV_H
#define IPU_CONV_H

#include "kernels.h"

/* CONV2D: x[N,C,H,W] * w[M,C/G,KH,KW] (+ bias[M]) -> y[N,M,OH,OW]. Work item = (n, group,
 * block of `rows` output rows, channel item: one of mblocks shares of the group's output
 * channels); the float32 paths take all IPU__MM_MB-channel sub-blocks of a group per item (the
 * window path at most IPU__CONV_WIN_MPER) unless that leaves fewer than 8 items (for an even
 * split over workers); the small-map and Winograd paths share out their weight panels
 * (tpose_items in conv_plan.c). The GEMM paths' row blocks cover about P output pixels (P
 * from K: the share of scratch left after IPU__CONV_SG_BYTES); the float16 GEMM path takes one
 * IPU__MM_MB-channel block per item (conv.c, run_gemm_f16), the float16 window path as the
 * float32 one; `direct`: depthwise (Cig = Cog = 1)
 * loop. */
#define IPU__CONV_SG_BYTES ((size_t)192 << 10)
#define IPU__CONV_TILE ((int64_t)256) /* float32 path: output pixels per packed B block */
/* float32 window path scratch, in floats: [A chunk][C tile][B panels][xq] */
#define IPU__CONV_WIN_A (IPU__MM_MB * IPU__SGEMM_KC)
#define IPU__CONV_WIN_MPER 4 /* sub-blocks per work item at most: C tiles of them all */
#define IPU__CONV_WIN_CT ((IPU__MM_MB + IPU__SGEMM_MAX_MR) * IPU__CONV_TILE) /* one C tile */
#define IPU__CONV_WIN_C (IPU__CONV_WIN_MPER * IPU__CONV_WIN_CT)
#define IPU__CONV_WIN_B (IPU__SGEMM_KC * IPU__CONV_TILE)
#define IPU__CONV_WIN_XQ                                                                 \
    ((int64_t)(IPU__SCRATCH_BYTES / sizeof(float)) - IPU__CONV_WIN_A - IPU__CONV_WIN_C - \
     IPU__CONV_WIN_B)
typedef struct ipu__conv_plan {
    ipu__plan hdr;
    int f16, has_bias, direct, pointwise; /* pointwise: 1x1, stride 1, no pads: no im2col */
    int act, has_res;                     /* epilogue: y = act(conv + bias + residual) */
    ipu__unary_act unary; /* act UNARY: the function conv.c applies after each item */
    /* float32 weights in TENSOR_DATA, packed at load (NULL if not packed). Used only while w is
     * still that TENSOR_DATA tensor. Without `tpose`, for micro-kernels of height packed_mr:
     * sub-block (g, sb) starts at (g * msub + sb) * packed_blk, its K-chunk k0 at + mpad * k0
     * (ipu__sgemm_pack_a layout, mpad = its rows rounded up to packed_mr). With `tpose`
     * (packed_mr 0), w transposed to [K, Cog] per group in B panels of width packed_nr
     * (ipu__sgemm_pack_b_all layout), group g at g * packed_blk. */
    const float *packed;
    int packed_mr, packed_nr;
    int64_t packed_blk;
    int64_t N, C, H, W, M, OH, OW, KH, KW, G, Cig, Cog, K;
    int64_t sh, sw, dh, dw, pt, pl;
    int64_t mblocks, rows, rblocks, P;
    /* IPU__MM_MB-row sub-blocks of Cog; the unit of the channel items (ipu__conv_item_channels:
     * IPU__MM_MB, or the small-map path's weight panels of packed_nr channels) */
    int64_t msub, mu;
    /* float32 window path (`window`; conv.c): for each K chunk a work item copies the
     * zero-padded input rows it reads, of the chunk's channels, into scratch (`xcopy`; else it
     * reads x itself), as nphr x nphc planes (the stride phases some tap reads) of Hq rows x Wq
     * columns per channel, so that patch row k of extended pixel q' = r*Wq + ow (ow < Wq;
     * columns ow >= OW are computed and dropped) is xq[rowoff[k] + q'] (offsets from channel 0). */
    int window, xcopy;
    int64_t Hq, Wq, nphr, nphc;
    const int64_t *rowoff; /* [K], inside this allocation */
    /* depthwise float32, stride 1, no dilation, OW = W (`dw_same`; conv_dw.c): no window copy.
     * Inside this allocation after rowoff: dwoff[k] = kh * W + kw - pl, tap k's offset from its
     * output pixel's index in the input row pt above, and dwcol[i] = i mod W, i < W + IPU__DW_V. */
    int dw_same;
    const int64_t *dwoff;
    const int32_t *dwcol;
    /* small-map path (`tpose`; conv.c; float32 and float16), chosen where it pads less than
     * the paths above:
     * the output pixels of a row block (at most IPU__CONV_T_PIX) are the micro-kernel's rows and
     * the output channels its columns, so neither the Wq - OW extra columns nor a partial panel
     * of pixels is computed. Reads x like the window path (rowoff; for 1x1 stride-1 convolutions
     * Wq = W and no copy) and needs the weights packed (`packed`); else the paths above run. */
    int tpose;
    /* float32 Winograd path (`wino`; winograd.c), for 3x3 stride-1 convolutions with one group:
     * `packed` holds U = G g G^T (ipu__wino_pack_weights, for micro-kernels of height
     * packed_mr); a work item is a block of wtr tile rows (rows = 2 * wtr output rows) of
     * (OW + 1) / 2 tiles, at most wnt (a multiple of the micro-kernel's width) in all, and a
     * channel item (mu = packed_mr). Its scratch: V (16 x Cig x wnt floats), M (16 x wcb x
     * wnt, wcb output channels at a time, a multiple of packed_mr), then row buffers. The
     * window path is planned for the same items and runs if the session binds other weights. */
    int wino;
    int64_t wtr, wnt, wcb;
} ipu__conv_plan;
#define IPU__DW_V 16                   /* dw_same: outputs summed in registers at a time */
#define IPU__DW_MAX_KW 16              /* dw_same: KW at most (its column masks on the stack) */
#define IPU__DW_MAX_W (1 << 16)        /* dw_same: W at most (dwcol) */
#define IPU__CONV_T_PIX ((int64_t)240) /* small-map path: output pixels per work item at most */

/* Output channels [*m0, *m1) of the group's channel items [mb0, mb1): the Cog / mu units
 * (rounded up) dealt out in order, the items' shares differing by at most one unit. */
static inline void ipu__conv_item_channels(const ipu__conv_plan *p, int64_t mb0, int64_t mb1,
                                           int64_t *m0, int64_t *m1) {
    int64_t units = (p->Cog + p->mu - 1) / p->mu, end = mb1 * units / p->mblocks * p->mu;
    *m0 = mb0 * units / p->mblocks * p->mu;
    *m1 = end < p->Cog ? end : p->Cog;
}

/* Floats per xi of the Winograd path's V and M (wnt tiles x rows): one cache line more than
 * their size, so that the 16 runs a transform reads or writes fall in different cache sets. */
#define IPU__WINO_VS(wnt, rows) ((wnt) * (rows) + 16)
/* winograd.c: U[xi][panel][ci][mr] = (G g G^T)[xi] of w[Co][Ci][3][3], Co zero-padded to whole
 * panels of mr rows (16 * ceil(Co / mr) * mr * Ci floats). */
void ipu__wino_pack_weights(const void *w, int f16, int64_t Co, int64_t Ci, int mr, float *u);
/* conv_plan.c: the float32 weights w[G * Cog, K] from the A panels the plan packs them into
 * (micro-kernel height mr, sub-blocks of mb rows, K chunks of kc: the layout tag's geometry),
 * exactly: packing only moves values and pads with zeros. */
void ipu__conv_unpack_weights(const float *src, int64_t G, int64_t Cog, int64_t K, int mr,
                              int64_t kc, int64_t mb, float *w);
/* Channel items [mb0, mb1) of tile-row block r of image n (above, `wino`). False (nothing
 * written) if the input rows the block reads hold an infinity or a NaN: the transforms would
 * spread it over whole tiles (0 * inf), so the caller computes such blocks by direct sums. */
bool ipu__conv_wino(const ipu__conv_plan *p, const void *x, const float *U, const void *bias,
                    const void *res, void *y, int64_t n, int64_t mb0, int64_t mb1, int64_t r,
                    void *scratch);
/* conv_epilogue.c: y rows from nrows rows of n floats (src row stride ss, dst row stride ds):
 * act(src + bias[co] + res[off + ...]); bias, res optional. */
void ipu__conv_epilogue_rows(const ipu__conv_plan *p, float *dst, int64_t ds, const float *src,
                             int64_t ss, int64_t nrows, int64_t n, const void *bias, int64_t co,
                             const void *res, int64_t off);
/* The same from C^T (the small-map path's tile): row c of dst (channel co + c, c < nch, at dst
 * + c * ds, residual at off + c * ds) from column c of ct, pixel i at ct[i * ldc + c], i < np;
 * ct's rows hold nch rounded up to 8 columns. */
void ipu__conv_epilogue_t(const ipu__conv_plan *p, float *dst, int64_t ds, const float *ct,
                          int64_t ldc, int64_t np, int64_t nch, const void *bias, int64_t co,
                          const void *res, int64_t off);
/* The same for float16 (bias, residual and dst in half): 8 channels at a time transposed as
 * above into float32 rows, the epilogue finished on them, each value converted once. */
void ipu__conv_epilogue_t_f16(const ipu__conv_plan *p, uint16_t *dst, int64_t ds, const float *ct,
                              int64_t ldc, int64_t np, int64_t nch, const void *bias, int64_t co,
                              const void *res, int64_t off);

#endif
