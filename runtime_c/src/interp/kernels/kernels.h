/* Internal: per-instruction plans built by the verifier (executable.c) and the kernels that
 * consume them. Every plan is ONE allocation (freed with ipu__free) that starts with an
 * ipu__plan header holding the number of work items and the kernel selected for the
 * instruction (by ipu__select_kernel in dispatch.c). */
#ifndef IPU_KERNELS_H
#define IPU_KERNELS_H

#include "../interp.h"

/* 1 where the x86 vector paths (AVX2, AVX-512) are compiled, 0 for the portable ones only. */
#if defined(__x86_64__) || defined(__i386__)
#define IPU_X86 1
#else
#define IPU_X86 0
#endif

/* Element i of a float32 array, or of an IEEE half one (f16), as a float. */
static inline float ipu__ld_f32(const void *base, int f16, int64_t i) {
    return f16 ? ipu__f16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

typedef ipu_status (*ipu__kernel_fn)(const ipu__frame *f, const ipu__instr *ins, size_t begin,
                                     size_t end, void *scratch);

typedef struct ipu__plan {
    size_t work;
    ipu__kernel_fn fn;
    /* the kernel runs a range of consecutive items as one piece that shares their common work
     * (packed operands, transformed input tiles): equal contiguous shares beat item by item */
    bool contiguous;
} ipu__plan;

/* Work granularity (elements / bytes per work item). */
#define IPU__ELT_BLOCK ((uint64_t)16384)
#define IPU__COPY_BLOCK ((uint64_t)1 << 18)
#define IPU__RED_IB ((int64_t)256) /* inner columns per reduce/softmax work item */
#define IPU__MM_MB ((int64_t)96)   /* matmul rows per work item */

/* ADD/SUB/MUL/DIV, RELU (nin = 1) and EXPAND (nin = 1): flat output ranges, collapsed
 * broadcast strides in elements (0 = broadcast). */
typedef struct ipu__bcast_plan {
    ipu__plan hdr;
    uint64_t numel;
    uint32_t ndim; /* collapsed, >= 1 */
    uint32_t esize;
    int64_t shape[IPU_MAX_DIMS];
    int64_t sa[IPU_MAX_DIMS], sb[IPU_MAX_DIMS];
} ipu__bcast_plan;

/* SCALE_SHIFT: x viewed as [outer, c, inner] (c = x.dims[axis]); y = act(x * scale[ch] +
 * shift[ch]). Work item = IPU__ELT_BLOCK output elements. */
typedef struct ipu__affine_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    uint64_t numel, c, inner;
    int relu;
} ipu__affine_plan;

/* MATMUL and GEMM. `path` (chosen by ipu__mm_plan_blocks from the shapes and dtype):
 * - IPU__MM_ROWS (integers): work item = (batch, block of IPU__MM_MB rows);
 * - IPU__MM_PACKED (float32, float16): work item = (batch, block of nb columns, block of mb rows), rows
 *   fastest, so that a worker's contiguous range of items shares its blocks of packed B;
 * - IPU__MM_GEMV (float32, M <= IPU__GEMV_MAX_M): work item = (batch, block of nb columns), B
 *   streamed once in its own layout.
 * A B stored in the executable (TENSOR_DATA) on the PACKED path is packed once by the verifier
 * (ipu__mm_pack_b; float16 converted to float32 there), used while B is still that tensor. */
enum { IPU__MM_ROWS = 0, IPU__MM_PACKED = 1, IPU__MM_GEMV = 2 };
#define IPU__GEMV_MAX_M ((int64_t)4)
typedef struct ipu__mm_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    int64_t M, N, K, mblocks;
    uint64_t batch;
    uint32_t bdim;
    int64_t bshape[IPU_MAX_DIMS], abs[IPU_MAX_DIMS], bbs[IPU_MAX_DIMS]; /* batch strides, in matrices */
    /* GEMM only */
    int is_gemm, trans_a, trans_b, has_c;
    int act; /* ipu__act_fn: applied after alpha * op(A) op(B) + beta * C */
    float alpha, beta;
    int64_t c_rs, c_cs;
    int path;
    int64_t mb, nb, nblocks; /* rows per M block, columns per N block (PACKED and GEMV) */
    /* B packed at load: matrix i of B at packed + i * packed_mat floats, panels of width
     * packed_nr (ipu__sgemm_pack_b_all layout); NULL if not packed */
    const float *packed;
    int packed_nr;
    int64_t packed_mat;
} ipu__mm_plan;

/* matmul.c: fill path, mb, nb, nblocks, mblocks and hdr.work of a plan whose dtype, M, N, K,
 * batch and trans_a are set. */
void ipu__mm_plan_blocks(ipu__mm_plan *p);
/* matmul.c: float32 B packing for a PACKED plan: floats needed for `nmat` matrices of B for
 * micro-kernels of width nr (0 when the plan does not use packed B), and the packing itself
 * (b: B's elements, of the plan's dtype, row-major matrices of B's own shape [.., K, N], or [N, K] with transB). The
 * prepacked-weights hook can fill a buffer of that size and point `packed` at it. */
size_t ipu__mm_packed_floats(const ipu__mm_plan *p, uint64_t nmat, int nr);
void ipu__mm_pack_b(const ipu__mm_plan *p, const void *b, uint64_t nmat, int nr, float *dst);

/* COPY (bytes) and CAST (elements). */
typedef struct ipu__flat_plan {
    ipu__plan hdr;
    uint64_t count; /* bytes for COPY, elements for CAST */
    ipu_dtype src, dst;
} ipu__flat_plan;

/* CONCAT: work item = (outer row, input). */
typedef struct ipu__concat_plan {
    ipu__plan hdr;
    uint64_t outer, yrow; /* bytes per outer row of y */
    uint32_t n_in;
    uint64_t row[]; /* [2*n_in]: bytes per outer row of input i, then its offset in y's row */
} ipu__concat_plan;

/* TRANSPOSE: collapsed output shape, strides into x (elements). */
typedef struct ipu__transpose_plan {
    ipu__plan hdr;
    uint64_t numel;
    uint32_t ndim, esize;
    int64_t shape[IPU_MAX_DIMS], xs[IPU_MAX_DIMS];
} ipu__transpose_plan;

/* REDUCE_SUM/REDUCE_MEAN/SOFTMAX: x as [outer, red, inner]; work = outer * ceil(inner/IB). */
typedef struct ipu__red_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    int64_t outer, red, inner, nib;
} ipu__red_plan;

/* CONV2D: x[N,C,H,W] * w[M,C/G,KH,KW] (+ bias[M]) -> y[N,M,OH,OW]. Work item = (n, group,
 * block of `rows` output rows, channel item: one of mblocks shares of the group's output
 * channels); the float32 paths take all IPU__MM_MB-channel sub-blocks of a group per item (the
 * window path at most IPU__CONV_WIN_MPER) unless that leaves fewer than 8 items (for an even
 * split over workers); the small-map and Winograd paths share out their weight panels
 * (tpose_items in verify_conv.c). The GEMM paths' row blocks cover about P output pixels (P
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
#define IPU__CONV_WIN_XQ \
    ((int64_t)(IPU__SCRATCH_BYTES / sizeof(float)) - IPU__CONV_WIN_A - IPU__CONV_WIN_C - \
     IPU__CONV_WIN_B)
/* Epilogue activation of CONV2D and GEMM (their `activation` attribute), from ipu_fns.def. */
typedef enum ipu__act_fn {
#define IPU_ACT(name, value) IPU__ACT_##name = value,
#include "ipu/ipu_fns.def"
#undef IPU_ACT
    IPU__ACT_COUNT
} ipu__act_fn;
/* RELU as every kernel computes it (the instruction, fused conv/GEMM/affine epilogues): NaN
 * stays NaN, -0.0 becomes +0; branch-free, so loops over it vectorise. */
static inline float ipu__relu_f32(float v) { return (v > 0.0f || v != v) ? v : 0.0f; }

/* A B panel of `lines` cache lines that the next micro-kernel calls will read from memory
 * (pre-packed weights) is fetched in parts while the current panel computes: call `call` of
 * `calls` on the current panel fetches lines [*done, (call + 1) * lines / calls) of `next`,
 * returned as (pointer, *n) for the micro-kernel's prefetch stream (ipu__ukr_fn: spread over
 * its k loop; a burst of them before the tile waited on the line fill buffers: MLP -12 %).
 * next NULL: no next panel (NULL, 0). */
static inline const float *ipu__prefetch_share(const float *next, int64_t lines, int64_t call,
                                               int64_t calls, int64_t *done, int64_t *n) {
    *n = 0;
    if (!next) return NULL;
    const float *p = next + *done * 16;
    *n = (call + 1) * lines / calls - *done;
    *done += *n;
    return p;
}
/* The n lines from p at once (kernels without a prefetch stream: edge tiles, in-place rows). */
static inline void ipu__prefetch_lines(const float *p, int64_t n) {
    for (int64_t j = 0; p && j < n; j++) __builtin_prefetch(p + j * 16);
}
/* Does some tap t * d (t < k) of a stride-s window fall on stride phase a (conv and pool
 * window paths copy only the phases some tap reads)? */
static inline bool ipu__phase_used(int64_t a, int64_t k, int64_t d, int64_t s) {
    for (int64_t t = 0; t < k; t++)
        if (t * d % s == a) return true;
    return false;
}
/* Input row xr split into the two column phases of stride 2 in one pass (the even/odd split
 * vectorises; conv and pool window copies): d0[j] = xr[c0 + 2j], d1[j] = xr[c0 + 2j + 1], pad
 * outside [0, W), j < Wq. */
static inline __attribute__((always_inline)) void ipu__split_row2(const float *restrict xr,
                                                                  int64_t W, int64_t c0,
                                                                  int64_t Wq, float pad,
                                                                  float *restrict d0,
                                                                  float *restrict d1) {
    int64_t lo = c0 >= 0 ? 0 : (-c0 + 1) / 2;    /* first j with both columns >= 0 */
    int64_t hi = W - c0 >= 2 ? (W - c0) / 2 : 0; /* past the last j with both < W */
    if (hi > Wq) hi = Wq;
    if (lo > hi) lo = hi;
    for (int64_t j = 0; j < Wq; j++) {
        if (j == lo) j = hi; /* the edges here, the interior below */
        if (j >= Wq) break;
        int64_t c = c0 + 2 * j;
        d0[j] = c >= 0 && c < W ? xr[c] : pad;
        d1[j] = c + 1 >= 0 && c + 1 < W ? xr[c + 1] : pad;
    }
    if (hi == lo) return;
    const float *sr = xr + c0 + 2 * lo;
    int64_t n = hi - lo, n8 = n >= 8 ? n / 8 * 8 : 0;
    for (int64_t j = 0; j < n8; j++) {
        d0[lo + j] = sr[2 * j];
        d1[lo + j] = sr[2 * j + 1];
    }
    /* the rest as one block of 8 overlapping the one before: narrow rows (a 27-column input)
     * would otherwise spend most of the row in a scalar tail */
    int64_t j0 = n8 < n && n >= 8 ? n - 8 : n8;
    float *restrict e0 = d0 + lo + j0, *restrict e1 = d1 + lo + j0;
    const float *restrict s0 = sr + 2 * j0;
    if (n - j0 == 8)
        for (int64_t j = 0; j < 8; j++) {
            e0[j] = s0[2 * j];
            e1[j] = s0[2 * j + 1];
        }
    else
        for (int64_t j = 0; j < n - j0; j++) {
            e0[j] = s0[2 * j];
            e1[j] = s0[2 * j + 1];
        }
}

/* One row of a window copy (conv and pool), column phase of stride sw: d[j] = pad for j < lo
 * and hi <= j < Wq, sr[(j - lo) * sw] between. */
static inline __attribute__((always_inline)) void ipu__copy_row_phase(float *restrict d,
                                                                      const float *restrict sr,
                                                                      int64_t lo, int64_t hi,
                                                                      int64_t Wq, int64_t sw,
                                                                      float pad) {
    for (int64_t j = 0; j < lo; j++) d[j] = pad;
    if (sw == 1)
        for (int64_t j = lo; j < hi; j++) d[j] = sr[j - lo];
    else if (sw == 2) /* a constant stride vectorises (shuffles) */
        for (int64_t j = lo; j < hi; j++) d[j] = sr[(j - lo) * 2];
    else
        for (int64_t j = lo; j < hi; j++) d[j] = sr[(j - lo) * sw];
    for (int64_t j = hi; j < Wq; j++) d[j] = pad;
}

typedef struct ipu__conv_plan {
    ipu__plan hdr;
    int f16, has_bias, direct, pointwise; /* pointwise: 1x1, stride 1, no pads: no im2col */
    int act, has_res; /* epilogue: y = act(conv + bias + residual) */
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
/* Channel items [mb0, mb1) of tile-row block r of image n (kernels.h, `wino`). False (nothing
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
void ipu__conv_epilogue_t_f16(const ipu__conv_plan *p, uint16_t *dst, int64_t ds,
                              const float *ct, int64_t ldc, int64_t np, int64_t nch,
                              const void *bias, int64_t co, const void *res, int64_t off);

/* POOL2D: x[N,C,H,W] -> y[N,C,OH,OW]; work item = (plane n*C + c, block of `rows` rows). */
typedef struct ipu__pool_plan {
    ipu__plan hdr;
    int f16, kind, cip;
    int64_t H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, pb, pr;
    int64_t rows, rblocks;
    /* work item = `planes` consecutive whole planes (rblocks 1; small planes: the window path
     * folds them in one pass) or one block of `rows` output rows of a plane */
    int64_t planes, nplanes;
} ipu__pool_plan;

/* REINDEX (verify_data.c, reindex.c): y[i] = pad if any table entry is -1, else x at the sum of
 * the per-dim byte offsets. off[] holds, for dim d, entries [start[d], start[d] + dims[d]): the
 * byte offset of index i_d into x, or -1. The last dim is described by `nseg` segments
 * {first y index, length, byte offset of the first source element or -1 (pad)}: each segment is
 * a pad run or a run of consecutive source elements (one memcpy). Work item = one row of the
 * last dim. */
typedef struct ipu__reindex_plan {
    ipu__plan hdr;
    uint32_t ndim, esize;
    int64_t dims[IPU_MAX_DIMS], start[IPU_MAX_DIMS];
    uint8_t pad[8];
    int64_t nseg;
    int64_t *seg;  /* [3 * nseg], inside this allocation */
    int64_t off[]; /* sum of dims, then the segments */
} ipu__reindex_plan;

/* INTERP (verify_data.c, reindex.c): y[i] = sum over tap combinations of the product of the
 * per-dim weights times x at the sum of the per-dim element offsets. Dim d's taps for index i_d
 * are entries [start[d] + i_d * taps[d], + taps[d]) of off[] (element offsets) and w[];
 * ext[ext_start[d] + i_d] != 0 marks an extrapolated index (y = extrap). The outer dims' tap
 * combinations of a row (at most `combos`) are expanded in scratch. Work item = one row of the
 * last dim. */
typedef struct ipu__interp_plan {
    ipu__plan hdr;
    int f16;
    uint32_t ndim;
    float extrap;
    int64_t combos;
    int64_t dims[IPU_MAX_DIMS], taps[IPU_MAX_DIMS], start[IPU_MAX_DIMS], ext_start[IPU_MAX_DIMS];
    float *w;     /* inside this allocation */
    uint8_t *ext; /* inside this allocation */
    int64_t off[];
} ipu__interp_plan;

/* UNARY attr 0 and BINARY attr 0 (docs/bytecode.md; same values as UnaryFn/BinaryFn in
 * pyipu/compiler/ir.py). */
/* Function ids of UNARY and BINARY (attribute 0), from ipu/ipu_fns.def. */
typedef enum ipu__unary_fn {
#define IPU_UNARY(name, value) IPU__UN_##name = value,
#include "ipu/ipu_fns.def"
#undef IPU_UNARY
    IPU__UN_COUNT
} ipu__unary_fn;
typedef enum ipu__binary_fn {
#define IPU_BINARY(name, value) IPU__BIN_##name = value,
#include "ipu/ipu_fns.def"
#undef IPU_BINARY
    IPU__BIN_COUNT
} ipu__binary_fn;

/* UNARY: flat element ranges (input and output have the same shape). */
typedef struct ipu__unary_plan {
    ipu__plan hdr;
    uint64_t numel;
    int fn;
    float p0, p1;     /* float parameters (alpha, beta, clip bounds) */
    int64_t i0, i1;   /* CLIP bounds for integer dtypes */
} ipu__unary_plan;

/* BINARY (n_in = 2) and WHERE (n_in = 3): flat output ranges, collapsed broadcast strides of
 * every input in elements (0 = broadcast); element sizes may differ between inputs and y. */
typedef struct ipu__nary_plan {
    ipu__plan hdr;
    uint64_t numel;
    int fn;
    uint32_t ndim, n_in;
    uint32_t ies[3], yes;
    int64_t shape[IPU_MAX_DIMS];
    int64_t st[3][IPU_MAX_DIMS];
} ipu__nary_plan;

/* REDUCE attr 0, from ipu/ipu_fns.def. */
typedef enum ipu__reduce_fn {
#define IPU_REDUCE(name, value) IPU__RED_##name = value,
#include "ipu/ipu_fns.def"
#undef IPU_REDUCE
    IPU__RED_COUNT
} ipu__reduce_fn;

/* REDUCE, ARG_REDUCE, CUMSUM, TOPK, LOG_SOFTMAX, HARDMAX (reduce2.c, verify_reduce.c): x as
 * [outer, n, inner]; work item = (outer, block of IPU__RED_IB inner columns), except TOPK:
 * (outer, one inner column). `dtype` is x's. */
typedef struct ipu__rfam_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    int fn;                     /* REDUCE function */
    int is_min, last;           /* ARG_REDUCE */
    int exclusive, reverse;     /* CUMSUM */
    int largest;                /* TOPK */
    int64_t outer, n, inner, nib, k;
} ipu__rfam_plan;

/* dispatch.c: the kernel for an opcode and (first input's / output's) dtype, NULL if none.
 * For CAST the kernel is dtype-generic. */
ipu__kernel_fn ipu__select_kernel(ipu_opcode op, ipu_dtype dtype);

/* verify.c: verify one instruction (number `index` of the program with id `program_id`, which
 * is the Load program when `is_load`) against docs/bytecode.md and build its plan (replacing
 * any previous one). Needs e->tensors and e->info.num_tensors only. Exposed so tests can build
 * executables by hand. IPU_ERR_BAD_PROGRAM / IPU_ERR_NOMEM. */
ipu_status ipu__verify_instr(const ipu_executable *e, uint32_t program_id, int is_load,
                             uint32_t index, ipu__instr *ins);
/* verify_flow.c: after every instruction verified, every TENSOR_DATA tensor an instruction reads
 * is bound by the Load program before the read. IPU_ERR_BAD_PROGRAM / IPU_ERR_NOMEM. */
ipu_status ipu__verify_binds(const ipu_executable *e);
/* verify_flow.c: the compute programs of a pipelined executable's stages, which run
 * concurrently, write no arena byte another of them uses. IPU_ERR_BAD_PROGRAM / IPU_ERR_NOMEM. */
ipu_status ipu__verify_stages(const ipu_executable *e);

/* Kernels (ipu__k_<op>_<dtype>). */
#define IPU__KDECL(name) \
    ipu_status name(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, void *scratch)
IPU__KDECL(ipu__k_bind);
IPU__KDECL(ipu__k_copy);
IPU__KDECL(ipu__k_expand);
IPU__KDECL(ipu__k_concat);
IPU__KDECL(ipu__k_transpose);
IPU__KDECL(ipu__k_cast);
#define IPU__K4(op) \
    IPU__KDECL(ipu__k_##op##_f32); IPU__KDECL(ipu__k_##op##_f16); \
    IPU__KDECL(ipu__k_##op##_i32); IPU__KDECL(ipu__k_##op##_i64)
IPU__K4(add);
IPU__K4(sub);
IPU__K4(mul);
IPU__K4(div);
IPU__K4(relu);
IPU__K4(matmul);
IPU__K4(reduce_sum);
IPU__K4(reduce_mean);
IPU__KDECL(ipu__k_gemm_f32);
IPU__KDECL(ipu__k_gemm_f16);
IPU__KDECL(ipu__k_softmax_f32);
IPU__KDECL(ipu__k_softmax_f16);
IPU__K4(unary);
IPU__KDECL(ipu__k_unary_b8);
IPU__K4(binary);
IPU__KDECL(ipu__k_binary_b8);
IPU__KDECL(ipu__k_where);
IPU__KDECL(ipu__k_conv2d);
IPU__KDECL(ipu__k_pool2d);
IPU__KDECL(ipu__k_gather); /* gather.c: GATHER and GATHER_ND, all dtypes */
IPU__KDECL(ipu__k_gather_elements);
IPU__KDECL(ipu__k_scatter_elements);
IPU__KDECL(ipu__k_scatter_nd);
IPU__KDECL(ipu__k_reduce);
IPU__KDECL(ipu__k_arg_reduce);
IPU__KDECL(ipu__k_cumsum);
IPU__KDECL(ipu__k_topk);
IPU__KDECL(ipu__k_log_softmax);
IPU__KDECL(ipu__k_hardmax);
IPU__KDECL(ipu__k_reindex);
IPU__KDECL(ipu__k_interp);
IPU__KDECL(ipu__k_scale_shift);
#undef IPU__K4

/* gemm_f32.c: C[m x n] (row stride ldc, float32) = op(A)[m x k] * op(B)[k x n].
 * Element (i, p) of A is at a + i*a_rs + p*a_cs (likewise B); a_f16/b_f16: operands are IEEE
 * half. Uses `scratch` (IPU__SCRATCH_BYTES) for packing; n is processed in panels internally. */
typedef struct ipu__sgemm_args {
    int64_t m, n, k;
    const void *a;
    int64_t a_rs, a_cs;
    const void *b;
    int64_t b_rs, b_cs;
    int a_f16, b_f16;
    float *c;
    int64_t ldc;
} ipu__sgemm_args;
void ipu__sgemm(const ipu__sgemm_args *g, void *scratch, size_t scratch_bytes);
/* Micro-kernel ISA: 0 = auto (default: the best the CPU runs, but AVX2 on AMD Zen 4; see
 * gemm_f32.c), 1 = portable, 2 = AVX2+FMA, 3 = AVX-512. A forced ISA the CPU lacks falls back to
 * auto. Returns the ISA now in use. For tests and benchmarks. */
int ipu__sgemm_set_isa(int isa);
/* The pieces of ipu__sgemm, for drivers that pack B themselves (conv.c). The micro-kernel
 * computes C[mr x nr] (row stride ldc; += when acc) from kc steps of an A panel (Ap[k][mr],
 * ipu__sgemm_pack_a: rows [0, g->m) of A, columns [k0, k0 + kc), zero-padded to a multiple of
 * mr) and a B panel (Bp[k][nr], 64-byte aligned). kc <= IPU__SGEMM_KC. It also fetches pfn
 * cache lines from pf into L1, spread over its k loop (pf NULL: none; ipu__prefetch_share). */
#define IPU__SGEMM_KC 256
#define IPU__SGEMM_MAX_MR 16
#define IPU__SGEMM_MAX_NR 32
typedef void (*ipu__ukr_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                            int acc, const float *pf, int64_t pfn);
/* A convolution epilogue applied to a tile as it is stored: C = act(C + bias[i] + res[i * ldr
 * + j]) after the sum (and after += C when acc), in that order (conv_epilogue.c's, fused). */
typedef struct ipu__tile_ep {
    const float *bias; /* the tile's rows' biases, or NULL */
    const float *res;  /* the residual at the tile's position, rows ldr apart, or NULL */
    int64_t ldr;
    int relu;
    /* float16 store (micro-kernels with ipu__ukr.half only): yh non-NULL stores the tile in
     * half at yh (rows ldy apart, each value converted once, round to nearest even) instead of
     * at C, which is then only read (acc); the residual is read in half from resh (rows ldr
     * apart) instead of res. */
    uint16_t *yh;
    int64_t ldy;
    const uint16_t *resh;
} ipu__tile_ep;
/* The same tile with B row k read in place at b + off[k] (nr floats, any alignment): for
 * drivers whose B rows are already contiguous runs (conv.c's window path); ep (or NULL) as
 * ipu__ukr_ep_fn's. */
typedef void (*ipu__ukr_rows_fn)(int64_t kc, const float *ap, const float *b, const int64_t *off,
                                 float *c, int64_t ldc, int acc, const ipu__tile_ep *ep);
typedef void (*ipu__ukr_ep_fn)(int64_t kc, const float *ap, const float *bp, float *c,
                               int64_t ldc, int acc, const ipu__tile_ep *ep);
/* An edge tile: rows [0, h) and columns [0, w) of the tile (1 <= h <= mr, 1 <= w <= nr) stored
 * or accumulated into C, nothing outside them read or written (A's panel as for fn); B packed
 * (off NULL) or, where the micro-kernel has a rows variant, its row k read in place at b +
 * off[k]; ep (or NULL) as ipu__ukr_ep_fn's on those elements. */
typedef void (*ipu__ukr_part_fn)(int h, int w, int64_t kc, const float *ap, const float *b,
                                 const int64_t *off, float *c, int64_t ldc, int acc,
                                 const ipu__tile_ep *ep);
typedef struct ipu__ukr {
    ipu__ukr_fn fn;
    ipu__ukr_ep_fn ep; /* fn, then the epilogue on its tile (in registers where it can) */
    ipu__ukr_part_fn part;
    ipu__ukr_rows_fn rows; /* NULL: this micro-kernel has no in-place variant */
    /* A read in place instead (NULL: none): arows(kc, a, bp, aoff, c, ldc, acc) takes A's
     * column k (mr consecutive floats) at a + aoff[k] and B packed */
    ipu__ukr_rows_fn arows;
    int mr, nr;
    int mq;  /* part computes the rows it stores rounded up to a multiple of mq */
    int half; /* ep, part, rows and arows store float16 (ipu__tile_ep.yh) */
    int isa; /* as ipu__sgemm_set_isa numbers them: tags packed layouts (prepack.h) */
} ipu__ukr;
void ipu__sgemm_ukr(ipu__ukr *u);
void ipu__sgemm_pack_a(const ipu__sgemm_args *g, int64_t k0, int64_t kc, int mr, float *ap);
/* B packed whole, for micro-kernels of width nr: panel q (columns [q*nr, q*nr + nr), zero past
 * n) at dst + q * k * nr, its row p at + p * nr. ipu__sgemm_packed_b_floats floats. Uses g's b,
 * b_rs, b_cs, b_f16, k and n. */
size_t ipu__sgemm_packed_b_floats(int64_t k, int64_t n, int nr);
void ipu__sgemm_pack_b_all(const ipu__sgemm_args *g, int nr, float *dst);
/* ipu__sgemm with B already packed: bp holds panels of width nr for g's n columns (panel stride
 * bstride floats, row p at + p * nr); any m. Returns 0 (and does nothing) when the micro-kernel
 * in use has another width than nr. */
int ipu__sgemm_packed(const ipu__sgemm_args *g, const float *bp, int64_t bstride, int nr,
                      void *scratch, size_t scratch_bytes);
/* C = op(A) op(B) for small m (<= IPU__GEMV_MAX_M), float32, B with b_cs == 1 or b_rs == 1,
 * streamed once without packing. A with a_cs != 1 is copied into scratch (m * k floats). */
void ipu__sgemv(const ipu__sgemm_args *g, void *scratch, size_t scratch_bytes);

/* eltwise.c: run `fn` over output elements [lo, hi) of a broadcast plan. fn gets element
 * pointers and inner strides (0 or 1 elements) of a and b (b NULL for unary plans). */
typedef void (*ipu__inner_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *y,
                              size_t n, uint32_t esize);
void ipu__bcast_run(const ipu__bcast_plan *p, const void *a, const void *b, void *y, uint64_t lo,
                    uint64_t hi, ipu__inner_fn fn);

/* f16cvt.c: bulk fp16 <-> fp32 conversion, exact (round to nearest even), AVX-512F, F16C or
 * portable. Every float16 kernel converts through these, a block of elements at a time. */
void ipu__cvt_f16_to_f32(const uint16_t *src, float *dst, size_t n);
void ipu__cvt_f32_to_f16(const float *src, uint16_t *dst, size_t n);
/* Tests and benchmarks: force the conversion level (isa.h numbering: 1 portable, 2 F16C, 3
 * AVX-512F; 0 or one the CPU lacks = automatic). Returns the level now in use. */
int ipu__f16_set_isa(int isa);
/* The conversion level in use (as ipu__f16_set_isa's: 1 portable, 2 F16C, 3 AVX-512F). */
int ipu__f16_isa(void);

#include "elt_types.h" /* integer dtypes of the element-wise kernels */

#endif
