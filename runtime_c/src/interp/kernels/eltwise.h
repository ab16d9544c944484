/* Element-wise and data-movement family (eltwise.c, unary.c, binary.c, data.c; verify.c): its
 * plans (ipu_ops.def says which plan function, hence which plan, each opcode gets). */
#ifndef IPU_ELTWISE_H
#define IPU_ELTWISE_H

#include "kernels.h"

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
    float p0, p1;   /* float parameters (alpha, beta, clip bounds) */
    int64_t i0, i1; /* CLIP bounds for integer dtypes */
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

/* eltwise.c: run `fn` over output elements [lo, hi) of a broadcast plan. fn gets element
 * pointers and inner strides (0 or 1 elements) of a and b (b NULL for unary plans). */
typedef void (*ipu__inner_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *y,
                              size_t n, uint32_t esize);
void ipu__bcast_run(const ipu__bcast_plan *p, const void *a, const void *b, void *y, uint64_t lo,
                    uint64_t hi, ipu__inner_fn fn);

#include "elt_types.h" /* integer dtypes of the element-wise kernels */

#endif
