/* Element-wise and data-movement family (eltwise.c, unary.c, binary.c, data.c): what its files
 * share, the broadcast plan (ADD/SUB/MUL/DIV, RELU, EXPAND) and the function ids. A plan read by
 * one file only is in that file. */
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

/* eltwise.c: run `fn` over output elements [lo, hi) of a broadcast plan. fn gets element
 * pointers and inner strides (0 or 1 elements) of a and b (b NULL for unary plans). */
typedef void (*ipu__inner_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *y,
                              size_t n, uint32_t esize);
void ipu__bcast_run(const ipu__bcast_plan *p, const void *a, const void *b, void *y, uint64_t lo,
                    uint64_t hi, ipu__inner_fn fn);

#include "elt_types.h" /* integer dtypes of the element-wise kernels */

#endif
