/* Internal: what every kernel family shares. The verifier builds a plan per instruction, which
 * its kernels consume: ONE allocation (freed with ipu__free) that starts with an ipu__plan
 * header holding the number of work items and the kernel selected for the instruction (by
 * ipu__select_kernel in dispatch.c). A plan struct and the plan function that builds it
 * (ipu__verify_<plan>, verify_internal.h) live with the kernels that read it: in the kernel file
 * itself when one file reads it, else in the family's header (eltwise.h, matmul.h, conv.h,
 * pool.h). The conv and pool plan functions have a file of their own, conv_plan.c. */
#ifndef IPU_KERNELS_H
#define IPU_KERNELS_H

#include "../interp.h"

/* On a function: its loops stay loops, not memset/memmove calls (GCC turns short copies and
 * fills into library calls whose overhead dominates rows of a few dozen floats). */
#if defined(__GNUC__) && !defined(__clang__)
#define IPU__INLINE_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define IPU__INLINE_LOOPS
#endif

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

/* Elements a kernel handles between two asks of the frame's stop hook inside one work item
 * (well under a millisecond of work): a long row (softmax, reduce, cumsum, top-k over millions
 * of elements) is cancelled within a fraction of a second like any instruction. */
#define IPU__STOP_CHUNK ((int64_t)1 << 16)

/* Between two chunks of a work item: IPU_ERR_CANCELLED if the frame's requests are to stop. */
static inline ipu_status ipu__stop_check(const ipu__frame *f) {
    return f->stop && f->stop(f) ? ipu__fail(IPU_ERR_CANCELLED, "cancelled inside a work item")
                                 : IPU_OK;
}
/* A loop over rows of w elements asks before row k when k > 0 and (k & mask) == 0, mask + 1
 * rows (a power of two: no division in the loop) holding about IPU__STOP_CHUNK elements. */
static inline int64_t ipu__stop_mask(int64_t w) {
    int64_t rows = 1;
    while (rows * 2 * w <= IPU__STOP_CHUNK) rows *= 2;
    return rows - 1;
}
static inline ipu_status ipu__stop_at(const ipu__frame *f, int64_t k, int64_t mask) {
    return (k & mask) || k == 0 ? IPU_OK : ipu__stop_check(f);
}

/* Work granularity (elements / bytes per work item). */
#define IPU__ELT_BLOCK ((uint64_t)16384)
#define IPU__COPY_BLOCK ((uint64_t)1 << 18)
#define IPU__RED_IB ((int64_t)256) /* inner columns per reduce/softmax work item */
#define IPU__MM_MB ((int64_t)96)   /* matmul rows per work item */

/* Epilogue activation of CONV2D and GEMM (their `activation` attribute), from ipu_fns.def. */
typedef enum ipu__act_fn {
#define IPU_ACT(name, value) IPU__ACT_##name = value,
#include "ipu/ipu_fns.def"
#undef IPU_ACT
    IPU__ACT_COUNT
} ipu__act_fn;
/* unary.c: is fn a float-to-float UNARY function (an epilogue may apply it); y[i] = fn(y[i])
 * for i < n, as the UNARY instruction computes it (float32; p0, p1 its parameters). */
bool ipu__unary_float_fn(int64_t fn);
void ipu__unary_apply_f32(int fn, float p0, float p1, float *y, size_t n);
/* An epilogue's UNARY activation (IPU__ACT_UNARY): the function and its parameters. */
typedef struct ipu__unary_act {
    int fn;
    float p0, p1;
} ipu__unary_act;
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
                                                                  int64_t W, int64_t c0, int64_t Wq,
                                                                  float pad, float *restrict d0,
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

/* dispatch.c: the kernel for an opcode and (first input's / output's) dtype, NULL if none.
 * For CAST the kernel is dtype-generic. */
ipu__kernel_fn ipu__select_kernel(ipu_opcode op, ipu_dtype dtype);

/* verify_ops.c: verify one instruction (number `index` of the program with id `program_id`, which
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

/* Kernels (ipu__k_<kernel>[_<dtype>]), declared from ipu_ops.def's kstyle and kernel columns
 * (an opcode sharing another's kernel declares it again: harmless). */
#define IPU__KDECL(name) \
    ipu_status name(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, void *scratch)
#define IPU__KDECL_ONE(k) IPU__KDECL(ipu__k_##k);
#define IPU__KDECL_ONE_F(k) IPU__KDECL(ipu__k_##k);
#define IPU__KDECL_F(k)           \
    IPU__KDECL(ipu__k_##k##_f32); \
    IPU__KDECL(ipu__k_##k##_f16);
#define IPU__KDECL_D4(k)                          \
    IPU__KDECL_F(k) IPU__KDECL(ipu__k_##k##_i32); \
    IPU__KDECL(ipu__k_##k##_i64);
#define IPU__KDECL_ALL(k)                         \
    IPU__KDECL_D4(k) IPU__KDECL(ipu__k_##k##_i8); \
    IPU__KDECL(ipu__k_##k##_u8);                  \
    IPU__KDECL(ipu__k_##k##_i16);                 \
    IPU__KDECL(ipu__k_##k##_u16);                 \
    IPU__KDECL(ipu__k_##k##_u32);                 \
    IPU__KDECL(ipu__k_##k##_u64);
#define IPU__KDECL_ALL_B(k) IPU__KDECL_ALL(k) IPU__KDECL(ipu__k_##k##_b8);
#define IPU_OP(NAME, value, str, mi, ma, no, na, na2, dt, inp, fl, plan, ks, k) IPU__KDECL_##ks(k)
#include "ipu/ipu_ops.def"
#undef IPU_OP

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
/* The micro-kernel's level (isa.h numbering) under the level in use: that level, except AVX2
 * on AMD Zen 4 when none is forced (gemm_f32.c). */
IPU_EXTENSION_API int ipu__sgemm_isa(void);
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
typedef void (*ipu__ukr_ep_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                               int acc, const ipu__tile_ep *ep);
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
    int mq;   /* part computes the rows it stores rounded up to a multiple of mq */
    int half; /* ep, part, rows and arows store float16 (ipu__tile_ep.yh) */
    int isa;  /* isa.h's level: tags packed layouts (prepack.h) */
} ipu__ukr;
void ipu__sgemm_ukr(ipu__ukr *u);
void ipu__sgemm_pack_a(const ipu__sgemm_args *g, int64_t k0, int64_t kc, int mr, float *ap);
/* B packed whole, for micro-kernels of width nr: panel q (columns [q*nr, q*nr + nr), zero past
 * n) at dst + q * k * nr, its row p at + p * nr. ipu__sgemm_packed_b_floats floats. Uses g's b,
 * b_rs, b_cs, b_f16, k and n. */
size_t ipu__sgemm_packed_b_floats(int64_t k, int64_t n, int nr);
void ipu__sgemm_pack_b_all(const ipu__sgemm_args *g, int nr, float *dst);
/* Its inverse for float32: B (element (p, j) at b + p * b_rs + j * b_cs) from the panels at bp
 * of k rows and n columns, width nr. Exact: packing only moves values and pads with zeros. */
void ipu__sgemm_unpack_b_all(const float *bp, int64_t k, int64_t n, int nr, float *b, int64_t b_rs,
                             int64_t b_cs);
/* ipu__sgemm with B already packed: bp holds panels of width nr for g's n columns (panel stride
 * bstride floats, row p at + p * nr); any m. Returns 0 (and does nothing) when the micro-kernel
 * in use has another width than nr. */
int ipu__sgemm_packed(const ipu__sgemm_args *g, const float *bp, int64_t bstride, int nr,
                      void *scratch, size_t scratch_bytes);
/* ipu__sgemm (bp NULL) or ipu__sgemm_packed whose last K chunk's micro-kernel store applies
 * ep and writes y in half (ipu__tile_ep: ep's yh, resh and bias are those of element (0, 0),
 * rows ldy / ldr apart); C (g->c, g->ldc) then holds the earlier chunks' float32 sums, and is
 * not touched when k <= IPU__SGEMM_KC. Returns 0 (and does nothing) when the micro-kernel in
 * use has no half store (ipu__ukr.half), k is 0, or bp was packed for another width. */
int ipu__sgemm_half(const ipu__sgemm_args *g, const float *bp, int64_t bstride, int nr,
                    const ipu__tile_ep *ep, void *scratch, size_t scratch_bytes);
#define IPU__GEMV_MAX_M ((int64_t)4)
/* C = op(A) op(B) for small m (<= IPU__GEMV_MAX_M), float32, B with b_cs == 1 or b_rs == 1,
 * streamed once without packing. A with a_cs != 1 is copied into scratch (m * k floats). */
void ipu__sgemv(const ipu__sgemm_args *g, void *scratch, size_t scratch_bytes);

/* f16cvt.c: bulk fp16 <-> fp32 conversion, exact (round to nearest even), AVX-512F, F16C or
 * portable. Every float16 kernel converts through these, a block of elements at a time. */
IPU_EXTENSION_API void ipu__cvt_f16_to_f32(const uint16_t *src, float *dst, size_t n);
IPU_EXTENSION_API void ipu__cvt_f32_to_f16(const float *src, uint16_t *dst, size_t n);
/* B panels of width nr (a multiple of 8) from kc half rows of np columns, converted as they are
 * packed: row k at src + k * ld; panel q (columns [q * nr, q * nr + nr), zero past np) at
 * dst + q * kc * nr, its row k at + k * nr. */
void ipu__cvt_f16_pack_b(const uint16_t *src, int64_t ld, int64_t kc, int64_t np, int nr,
                         float *dst);

#endif
