/* POOL2D (pool.c, pool_s2.c; plan function in conv_plan.c): the plan. */
#ifndef IPU_POOL_H
#define IPU_POOL_H

#include <stdbool.h>

#include "kernels.h"

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

/* pool_s2.c (x86 only): max pools of 3-column windows at strides 2 on AVX-512. The plan's
 * shape fits them; then output rows [oh0, oh1) of the float32 plane x into y (its plane),
 * false (y partly written) if a NaN was read. */
bool ipu__pool_s2max_ok(const ipu__pool_plan *p);
bool ipu__pool_max_s2(const ipu__pool_plan *p, const float *x, int64_t oh0, int64_t oh1, float *y);

#endif
