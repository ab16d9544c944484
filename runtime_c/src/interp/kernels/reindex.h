/* REINDEX and INTERP (reindex.c; verify_data.c): the plans. */
#ifndef IPU_REINDEX_H
#define IPU_REINDEX_H

#include "kernels.h"

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

#endif
