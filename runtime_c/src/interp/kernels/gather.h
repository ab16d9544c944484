/* Internal: plans of the gather/scatter family (GATHER, GATHER_ELEMENTS, GATHER_ND,
 * SCATTER_ELEMENTS, SCATTER_ND; docs/bytecode.md), built by verify_gather.c and consumed by
 * gather.c. Kernels move elements by size (1, 2, 4 or 8 bytes), so every dtype works; only the
 * index values are checked at run time (an out-of-range index fails the instruction with
 * IPU_ERR_INVALID_ARGUMENT). */
#ifndef IPU_KERNELS_GATHER_H
#define IPU_KERNELS_GATHER_H

#include "kernels.h"

/* Scatter reductions (attribute `reduction`). */
enum {
    IPU__SCATTER_NONE,
    IPU__SCATTER_ADD,
    IPU__SCATTER_MUL,
    IPU__SCATTER_MAX,
    IPU__SCATTER_MIN,
    IPU__SCATTER_COUNT
};

/* GATHER and GATHER_ND: y is `rows` rows of `row` bytes; row r = (outer o, index tuple j),
 * o = r / m, j = r % m. The tuple of k indices is at element (shared_idx ? j : r) * k of the
 * indices; index i of the tuple selects along a dim of size dim[i], `stride[i]` bytes apart.
 * The row's source is data + o * ostride + sum(wrapped index * stride). Work item = block of
 * `rows_per_item` rows. */
typedef struct ipu__gather_plan {
    ipu__plan hdr;
    uint32_t ies, k;
    int shared_idx;
    uint64_t rows, rows_per_item, row, m, ostride;
    int64_t dim[IPU_MAX_DIMS];
    uint64_t stride[IPU_MAX_DIMS];
} ipu__gather_plan;

/* GATHER_ELEMENTS and SCATTER_ELEMENTS: indices (and updates, and GATHER_ELEMENTS' y) of shape
 * ishape; data (and SCATTER_ELEMENTS' y) of shape dshape, with element strides dstride; both of
 * rank ndim; ishape[d] <= dshape[d] for d != axis. GATHER_ELEMENTS: work item = block of
 * IPU__ELT_BLOCK output elements. SCATTER_ELEMENTS: work item = one of `outer` slabs (the data
 * dims before axis), holding `slab` elements; updates landing in a slab come from that slab's
 * indices only, so items never write the same element and index order is kept within each. */
typedef struct ipu__elements_plan {
    ipu__plan hdr;
    uint32_t ndim, axis, ies, esize;
    int reduction;
    ipu_dtype dtype;
    uint64_t numel, outer, slab;
    int64_t ishape[IPU_MAX_DIMS], dshape[IPU_MAX_DIMS], dstride[IPU_MAX_DIMS];
} ipu__elements_plan;

/* SCATTER_ND: data and y viewed as [rows, cols] (rows = the k leading dims, of sizes dim[],
 * `rstride[i]` rows apart), updates as [m, cols], indices as [m, k]. Work item = block of
 * `cblock` columns: copies those columns of data, then applies every update to them in order. */
typedef struct ipu__scatter_nd_plan {
    ipu__plan hdr;
    uint32_t ies, esize, k;
    int reduction;
    ipu_dtype dtype;
    uint64_t rows, cols, m, cblock;
    int64_t dim[IPU_MAX_DIMS];
    uint64_t rstride[IPU_MAX_DIMS];
} ipu__scatter_nd_plan;

#endif
