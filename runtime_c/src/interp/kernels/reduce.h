/* Reduction family (reduce.c, reduce2.c; verify.c, verify_reduce.c): the plans of the opcodes
 * that view x as [outer, n, inner] (ipu_ops.def says which plan each one gets). */
#ifndef IPU_REDUCE_H
#define IPU_REDUCE_H

#include "kernels.h"

/* REDUCE_SUM/REDUCE_MEAN/SOFTMAX: x as [outer, red, inner]; work = outer * ceil(inner/IB). */
typedef struct ipu__red_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    int64_t outer, red, inner, nib;
} ipu__red_plan;

/* REDUCE attr 0, from ipu/ipu_fns.def. */
typedef enum ipu__reduce_fn {
#define IPU_REDUCE(name, value) IPU__RED_##name = value,
#include "ipu/ipu_fns.def"
#undef IPU_REDUCE
    IPU__RED_COUNT
} ipu__reduce_fn;

/* The plan of verify_reduce.c's plan functions (kernels in reduce2.c): x as
 * [outer, n, inner]; work item = (outer, block of IPU__RED_IB inner columns), except TOPK:
 * (outer, one inner column). `dtype` is x's. */
typedef struct ipu__rfam_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    int fn;                 /* REDUCE function */
    int is_min, last;       /* ARG_REDUCE */
    int exclusive, reverse; /* CUMSUM */
    int largest;            /* TOPK */
    int64_t outer, n, inner, nib, k;
} ipu__rfam_plan;

#endif
