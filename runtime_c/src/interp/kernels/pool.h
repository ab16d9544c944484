/* POOL2D (pool.c; verify_conv.c): the plan. */
#ifndef IPU_POOL_H
#define IPU_POOL_H

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

#endif
