/* GATHER, GATHER_ELEMENTS, GATHER_ND, SCATTER_ELEMENTS, SCATTER_ND (docs/bytecode.md).
 * Elements move by size, so every dtype works; scatter reductions compute float16 in float32 and
 * round on every store; integers wrap. The plan functions (at the end) check dtypes, shapes and
 * attributes and build the plans; the only run-time check is the index values: an index outside [-n, n) fails the instruction with
 * IPU_ERR_INVALID_ARGUMENT before anything is read through it. */
#include <math.h>
#include <string.h>

#include "../verify_internal.h"

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

static inline int64_t ld_idx(const void *p, uint32_t ies, uint64_t i) {
    return ies == 4 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* Index i (read at position `pos` of the indices) wrapped into [0, n), or false. */
static inline bool wrap(int64_t i, int64_t n, int64_t *out) {
    if (i < -n || i >= n) return false;
    *out = i < 0 ? i + n : i;
    return true;
}

static ipu_status bad_index(int64_t i, uint64_t pos, int64_t n) {
    return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                     "index %lld (element %llu of the indices) is out of range [%lld, %lld)",
                     (long long)i, (unsigned long long)pos, (long long)-n, (long long)n);
}

static inline void cpy(void *d, const void *s, uint32_t es) {
    switch (es) {
        case 1: memcpy(d, s, 1); break;
        case 2: memcpy(d, s, 2); break;
        case 4: memcpy(d, s, 4); break;
        default: memcpy(d, s, 8); break;
    }
}

/* ---- GATHER / GATHER_ND ------------------------------------------------------------------- */

ipu_status ipu__k_gather(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    (void)scratch;
    const ipu__gather_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    const void *idx = f->ptr[ins->in[1]];
    char *y = f->ptr[ins->out[0]];
    uint64_t lo = (uint64_t)b * p->rows_per_item, hi = (uint64_t)e * p->rows_per_item;
    if (hi > p->rows) hi = p->rows;
    for (uint64_t r = lo; r < hi; r++) {
        uint64_t o = r / p->m, j = r % p->m;
        uint64_t first = (p->shared_idx ? j : r) * p->k;
        const char *src = x + o * p->ostride;
        for (uint32_t i = 0; i < p->k; i++) {
            int64_t v = ld_idx(idx, p->ies, first + i), w;
            if (!wrap(v, p->dim[i], &w)) return bad_index(v, first + i, p->dim[i]);
            src += (uint64_t)w * p->stride[i];
        }
        if (p->row == 1 || p->row == 2 || p->row == 4 || p->row == 8) /* no memcpy call */
            cpy(y + r * p->row, src, (uint32_t)p->row);
        else
            memcpy(y + r * p->row, src, (size_t)p->row);
    }
    return IPU_OK;
}

/* ---- reductions ---------------------------------------------------------------------------- */

static inline float fmax_nan(float a, float b) {
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}
static inline float fmin_nan(float a, float b) {
    return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
}

static inline float red_f(float a, float u, int red) {
    switch (red) {
        case IPU__SCATTER_ADD: return a + u;
        case IPU__SCATTER_MUL: return a * u;
        case IPU__SCATTER_MAX: return fmax_nan(a, u);
        default: return fmin_nan(a, u);
    }
}

/* Integers wrap: add and multiply in unsigned arithmetic. */
#define RED_INT(T, UT, a, u, red)                          \
    ((red) == IPU__SCATTER_ADD   ? (T)((UT)(a) + (UT)(u))  \
     : (red) == IPU__SCATTER_MUL ? (T)((UT)(a) * (UT)(u))  \
     : (red) == IPU__SCATTER_MAX ? ((a) > (u) ? (a) : (u)) \
                                 : ((a) < (u) ? (a) : (u)))

/* y[0..n) = reduce(y, u) element-wise (n elements of `dt`); NONE copies. */
static void apply(void *y, const void *u, uint64_t n, ipu_dtype dt, uint32_t es, int red) {
    if (red == IPU__SCATTER_NONE) {
        memcpy(y, u, (size_t)(n * es));
        return;
    }
    switch (dt) {
        case IPU_DTYPE_FLOAT32: {
            float *d = y;
            const float *s = u;
            for (uint64_t i = 0; i < n; i++) d[i] = red_f(d[i], s[i], red);
            break;
        }
        case IPU_DTYPE_FLOAT16: {
            uint16_t *d = y;
            const uint16_t *s = u;
            for (uint64_t i = 0; i < n; i++)
                d[i] = ipu__f32_to_f16(red_f(ipu__f16_to_f32(d[i]), ipu__f16_to_f32(s[i]), red));
            break;
        }
        case IPU_DTYPE_INT32: {
            int32_t *d = y;
            const int32_t *s = u;
            for (uint64_t i = 0; i < n; i++) d[i] = RED_INT(int32_t, uint32_t, d[i], s[i], red);
            break;
        }
        default: { /* INT64: the verifier allows no other dtype with a reduction */
            int64_t *d = y;
            const int64_t *s = u;
            for (uint64_t i = 0; i < n; i++) d[i] = RED_INT(int64_t, uint64_t, d[i], s[i], red);
            break;
        }
    }
}

/* ---- GATHER_ELEMENTS / SCATTER_ELEMENTS ---------------------------------------------------- */

ipu_status ipu__k_gather_elements(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                                  void *scratch) {
    (void)scratch;
    const ipu__elements_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    const void *idx = f->ptr[ins->in[1]];
    char *y = f->ptr[ins->out[0]];
    uint32_t nd = p->ndim, ax = p->axis, es = p->esize;
    int64_t n = p->dshape[ax];
    uint64_t lo = (uint64_t)b * IPU__ELT_BLOCK, hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (hi > p->numel) hi = p->numel;
    int64_t m[IPU_MAX_DIMS], off = 0; /* multi-index over ishape; data offset without the axis */
    uint64_t r = lo;
    for (uint32_t d = nd; d-- > 0;) {
        m[d] = (int64_t)(r % (uint64_t)p->ishape[d]);
        r /= (uint64_t)p->ishape[d];
        if (d != ax) off += m[d] * p->dstride[d];
    }
    for (uint64_t t = lo; t < hi; t++) {
        int64_t v = ld_idx(idx, p->ies, t), w;
        if (!wrap(v, n, &w)) return bad_index(v, t, n);
        cpy(y + t * es, x + (uint64_t)(off + w * p->dstride[ax]) * es, es);
        for (uint32_t d = nd; d-- > 0;) { /* next multi-index */
            if (d != ax) off += p->dstride[d];
            if (++m[d] < p->ishape[d]) break;
            if (d != ax) off -= m[d] * p->dstride[d];
            m[d] = 0;
        }
    }
    return IPU_OK;
}

ipu_status ipu__k_scatter_elements(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                                   void *scratch) {
    (void)scratch;
    const ipu__elements_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    const void *idx = f->ptr[ins->in[1]];
    const char *upd = f->ptr[ins->in[2]];
    char *y = f->ptr[ins->out[0]];
    uint32_t nd = p->ndim, ax = p->axis, es = p->esize;
    int64_t n = p->dshape[ax];
    for (size_t o = b; o < e; o++) {
        char *slab = y + (uint64_t)o * p->slab * es;
        memcpy(slab, x + (uint64_t)o * p->slab * es, (size_t)(p->slab * es));
        /* slab o's coordinates in the dims before axis; the indices holding them are contiguous */
        uint64_t r = o, first = 0, istride = 1, count = 1;
        bool any = true;
        for (uint32_t d = nd; d-- > 0;) {
            if (d >= ax) {
                count *= (uint64_t)p->ishape[d];
            } else {
                int64_t c = (int64_t)(r % (uint64_t)p->dshape[d]);
                r /= (uint64_t)p->dshape[d];
                if (c >= p->ishape[d]) any = false;
                first += (uint64_t)c * istride;
            }
            istride *= (uint64_t)p->ishape[d];
        }
        if (!any) continue;
        int64_t m[IPU_MAX_DIMS] = {0}, off = 0; /* multi-index over ishape[axis+1:] */
        for (uint64_t t = 0; t < count; t++) {
            int64_t v = ld_idx(idx, p->ies, first + t), w;
            if (!wrap(v, n, &w)) return bad_index(v, first + t, n);
            apply(slab + (uint64_t)(off + w * p->dstride[ax]) * es, upd + (first + t) * es, 1,
                  p->dtype, es, p->reduction);
            for (uint32_t d = nd; d-- > ax + 1;) {
                off += p->dstride[d];
                if (++m[d] < p->ishape[d]) break;
                off -= m[d] * p->dstride[d];
                m[d] = 0;
            }
        }
    }
    return IPU_OK;
}

/* ---- SCATTER_ND ---------------------------------------------------------------------------- */

ipu_status ipu__k_scatter_nd(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                             void *scratch) {
    (void)scratch;
    const ipu__scatter_nd_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    const void *idx = f->ptr[ins->in[1]];
    const char *upd = f->ptr[ins->in[2]];
    char *y = f->ptr[ins->out[0]];
    uint32_t es = p->esize;
    for (size_t it = b; it < e; it++) {
        uint64_t c0 = (uint64_t)it * p->cblock;
        uint64_t nc = p->cols - c0 < p->cblock ? p->cols - c0 : p->cblock;
        for (uint64_t r = 0; r < p->rows; r++)
            memcpy(y + (r * p->cols + c0) * es, x + (r * p->cols + c0) * es, (size_t)(nc * es));
        for (uint64_t u = 0; u < p->m; u++) {
            uint64_t row = 0;
            for (uint32_t i = 0; i < p->k; i++) {
                int64_t v = ld_idx(idx, p->ies, u * p->k + i), w;
                if (!wrap(v, p->dim[i], &w)) return bad_index(v, u * p->k + i, p->dim[i]);
                row += (uint64_t)w * p->rstride[i];
            }
            apply(y + (row * p->cols + c0) * es, upd + (u * p->cols + c0) * es, nc, p->dtype, es,
                  p->reduction);
        }
    }
    return IPU_OK;
}

/* Plan functions (verify_internal.h, ipu_ops.def's `plan` column): shapes, attributes, the plan. */

static uint64_t prod(const int64_t *d, uint32_t lo, uint32_t hi) {
    uint64_t p = 1; /* a sub-product of a tensor's dims: <= its numel, or 0 */
    for (uint32_t i = lo; i < hi; i++) p *= (uint64_t)d[i];
    return p;
}
static bool dims_eq(const int64_t *a, const int64_t *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return false;
    return true;
}
#define GATHER_ROW_BYTES ((uint64_t)1 << 16) /* bytes copied per GATHER work item, at least */
#define SCATTER_ND_COLS ((uint64_t)2048)     /* columns per SCATTER_ND work item */

/* data and y: same dtype, any dtype (moved by element size); indices int32 or int64. */
static ipu_status check_dtypes(const vctx *v, const ipu__tensor *data, const ipu__tensor *idx,
                               const ipu__tensor *upd, const ipu__tensor *y, uint32_t *ies) {
    ipu_dtype dt = data->desc.dtype, it = idx->desc.dtype;
    size_t es = ipu_dtype_size(dt);
    if (y->desc.dtype != dt || (upd && upd->desc.dtype != dt))
        return bad(v, "data %s, updates %s and output %s must have the same dtype", dt_str(dt),
                   upd ? dt_str(upd->desc.dtype) : "-", dt_str(y->desc.dtype));
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return bad(v, "dtype %s is not supported", dt_str(dt));
    if (it != IPU_DTYPE_INT32 && it != IPU_DTYPE_INT64)
        return bad(v, "indices have dtype %s, expected int32 or int64", dt_str(it));
    *ies = it == IPU_DTYPE_INT32 ? 4 : 8;
    return IPU_OK;
}

static ipu_status check_reduction(const vctx *v, int64_t red, ipu_dtype dt) {
    if (red < 0 || red >= IPU__SCATTER_COUNT)
        return bad(v, "reduction %lld outside [0, %d)", (long long)red, IPU__SCATTER_COUNT);
    if (red != IPU__SCATTER_NONE && dt != IPU_DTYPE_FLOAT32 && dt != IPU_DTYPE_FLOAT16 &&
        dt != IPU_DTYPE_INT32 && dt != IPU_DTYPE_INT64)
        return bad(v, "reduction %lld does not take dtype %s", (long long)red, dt_str(dt));
    return IPU_OK;
}

/* GATHER: attrs outer, n, inner; data as [outer, n, inner], y = [outer dims, indices.shape,
 * inner dims]. */
ipu_status ipu__verify_gather(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    char s1[160], s2[160], s3[160];
    const ipu__tensor *data = in[0], *idx = in[1];
    uint32_t ies;
    ipu_status st = check_dtypes(v, data, idx, NULL, y, &ies);
    if (st) return st;
    const int64_t *a = ins->attr;
    if (a[0] < 0 || a[1] < 0 || a[2] < 0)
        return bad(v, "attributes outer %lld, n %lld, inner %lld must be >= 0", (long long)a[0],
                   (long long)a[1], (long long)a[2]);
    uint64_t outer = (uint64_t)a[0], n = (uint64_t)a[1], inner = (uint64_t)a[2], on, total;
    if (!ipu__mul_u64(outer, n, &on) || !ipu__mul_u64(on, inner, &total) || total != data->numel)
        return bad(v, "outer*n*inner (%llu*%llu*%llu) != data numel %llu",
                   (unsigned long long)outer, (unsigned long long)n, (unsigned long long)inner,
                   (unsigned long long)data->numel);
    /* y: some prefix of dims with product outer, then the indices' dims, then product inner */
    uint32_t yn = y->desc.ndim, qn = idx->desc.ndim;
    bool ok = false;
    for (uint32_t k = 0; !ok && k + qn <= yn; k++)
        ok = prod(y->desc.dims, 0, k) == outer && dims_eq(y->desc.dims + k, idx->desc.dims, qn) &&
             prod(y->desc.dims, k + qn, yn) == inner;
    if (!ok)
        return bad(v, "output y%s is not [outer=%llu dims, indices%s, inner=%llu dims] (data%s)",
                   shape_str(s1, sizeof s1, y), (unsigned long long)outer,
                   shape_str(s2, sizeof s2, idx), (unsigned long long)inner,
                   shape_str(s3, sizeof s3, data));
    ipu__gather_plan *p = ipu__calloc(1, sizeof *p);
    if (!p) return plan_nomem();
    uint64_t es = ipu_dtype_size(data->desc.dtype);
    p->ies = ies;
    p->k = 1;
    p->shared_idx = 1;
    p->m = idx->numel;
    p->rows = outer * idx->numel; /* == y.numel / inner, or 0 */
    p->row = inner * es;
    p->ostride = n * inner * es;
    p->dim[0] = (int64_t)n;
    p->stride[0] = inner * es;
    p->rows_per_item = p->row >= GATHER_ROW_BYTES ? 1 : GATHER_ROW_BYTES / (p->row ? p->row : 1);
    p->hdr.work = y->numel == 0 ? 0 : (size_t)ceil_div(p->rows, p->rows_per_item);
    p->hdr.fn = ipu__select_kernel(ins->op, data->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}

/* GATHER_ND: attr batch_dims b; indices [..., k]; y = indices.shape[:-1] + data.shape[b+k:]. */
ipu_status ipu__verify_gather_nd(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                 ipu__instr *ins) {
    char s1[160], s2[160], s3[160];
    const ipu__tensor *data = in[0], *idx = in[1];
    uint32_t ies;
    ipu_status st = check_dtypes(v, data, idx, NULL, y, &ies);
    if (st) return st;
    uint32_t r = data->desc.ndim, q = idx->desc.ndim;
    const int64_t *dd = data->desc.dims, *id = idx->desc.dims, *yd = y->desc.dims;
    int64_t b = ins->attr[0];
    if (q < 1 || b < 0 || b >= (int64_t)q || b >= (int64_t)r)
        return bad(v, "batch_dims %lld must be in [0, min(indices rank %u, data rank %u))",
                   (long long)b, q, r);
    int64_t k = id[q - 1];
    if (k < 1 || k > (int64_t)r - b)
        return bad(v, "indices%s: last dim %lld must be in [1, data rank - batch_dims = %lld]",
                   shape_str(s1, sizeof s1, idx), (long long)k, (long long)r - b);
    uint32_t ub = (uint32_t)b, uk = (uint32_t)k;
    bool ok = dims_eq(dd, id, ub) && y->desc.ndim == q - 1 + r - ub - uk &&
              dims_eq(yd, id, q - 1) && dims_eq(yd + q - 1, dd + ub + uk, r - ub - uk);
    if (!ok)
        return bad(v, "data%s, indices%s (batch_dims %lld) do not give output y%s",
                   shape_str(s1, sizeof s1, data), shape_str(s2, sizeof s2, idx), (long long)b,
                   shape_str(s3, sizeof s3, y));
    ipu__gather_plan *p = ipu__calloc(1, sizeof *p);
    if (!p) return plan_nomem();
    uint64_t es = ipu_dtype_size(data->desc.dtype);
    p->ies = ies;
    p->k = uk;
    p->shared_idx = 0;
    p->m = prod(id, ub, q - 1);
    p->rows = prod(dd, 0, ub) * p->m; /* <= y.numel, or 0 */
    p->row = prod(dd, ub + uk, r) * es;
    p->ostride = prod(dd, ub, r) * es;
    for (uint32_t i = 0; i < uk; i++) {
        p->dim[i] = dd[ub + i];
        p->stride[i] = prod(dd, ub + i + 1, r) * es;
    }
    p->rows_per_item = p->row >= GATHER_ROW_BYTES ? 1 : GATHER_ROW_BYTES / (p->row ? p->row : 1);
    p->hdr.work = y->numel == 0 ? 0 : (size_t)ceil_div(p->rows, p->rows_per_item);
    p->hdr.fn = ipu__select_kernel(ins->op, data->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}

/* GATHER_ELEMENTS (attr axis; y.shape == indices.shape) and SCATTER_ELEMENTS (attrs axis,
 * reduction; updates.shape == indices.shape, y.shape == data.shape): same rank everywhere,
 * indices no larger than data off the axis. */
static ipu_status verify_elements(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                  ipu__instr *ins, bool scatter) {
    char s1[160], s2[160], s3[160];
    const ipu__tensor *data = in[0], *idx = in[1], *upd = scatter ? in[2] : NULL;
    uint32_t ies;
    ipu_status st = check_dtypes(v, data, idx, upd, y, &ies);
    if (!st && scatter) st = check_reduction(v, ins->attr[1], data->desc.dtype);
    if (st) return st;
    uint32_t nd = data->desc.ndim;
    int64_t axis = ins->attr[0];
    if (nd < 1 || axis < 0 || axis >= (int64_t)nd)
        return bad(v, "axis %lld out of range for data rank %u", (long long)axis, nd);
    const ipu__tensor *same_as_idx = scatter ? upd : y, *same_as_data = scatter ? y : NULL;
    bool ok = idx->desc.ndim == nd && same_as_idx->desc.ndim == nd &&
              dims_eq(same_as_idx->desc.dims, idx->desc.dims, nd) &&
              (!same_as_data || (same_as_data->desc.ndim == nd &&
                                 dims_eq(same_as_data->desc.dims, data->desc.dims, nd)));
    for (uint32_t d = 0; ok && d < nd; d++)
        ok = d == (uint32_t)axis || idx->desc.dims[d] <= data->desc.dims[d];
    if (!ok)
        return bad(v,
                   "data%s, indices%s and %s%s do not fit (same rank; indices no larger "
                   "than data except along axis %lld; %s)",
                   shape_str(s1, sizeof s1, data), shape_str(s2, sizeof s2, idx),
                   scatter ? "updates" : "output y", shape_str(s3, sizeof s3, same_as_idx),
                   (long long)axis,
                   scatter ? "updates shaped as indices, y as data" : "y shaped as indices");
    ipu__elements_plan *p = ipu__calloc(1, sizeof *p);
    if (!p) return plan_nomem();
    p->ndim = nd;
    p->axis = (uint32_t)axis;
    p->ies = ies;
    p->esize = (uint32_t)ipu_dtype_size(data->desc.dtype);
    p->reduction = scatter ? (int)ins->attr[1] : IPU__SCATTER_NONE;
    p->dtype = data->desc.dtype;
    p->numel = idx->numel;
    int64_t s = 1;
    for (uint32_t d = nd; d-- > 0;) {
        p->ishape[d] = idx->desc.dims[d];
        p->dshape[d] = data->desc.dims[d];
        p->dstride[d] = s;
        s *= data->desc.dims[d];
    }
    p->outer = prod(data->desc.dims, 0, (uint32_t)axis);
    p->slab = prod(data->desc.dims, (uint32_t)axis, nd);
    if (scatter)
        p->hdr.work = y->numel == 0 ? 0 : (size_t)p->outer;
    else
        p->hdr.work = (size_t)ceil_div(y->numel, IPU__ELT_BLOCK);
    p->hdr.fn = ipu__select_kernel(ins->op, data->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}

ipu_status ipu__verify_gather_elements(const vctx *v, const ipu__tensor *const *in,
                                       const ipu__tensor *y, ipu__instr *ins) {
    return verify_elements(v, in, y, ins, false);
}

ipu_status ipu__verify_scatter_elements(const vctx *v, const ipu__tensor *const *in,
                                        const ipu__tensor *y, ipu__instr *ins) {
    return verify_elements(v, in, y, ins, true);
}

/* SCATTER_ND: attr reduction; indices [..., k]; updates = indices.shape[:-1] + data.shape[k:];
 * y.shape == data.shape. */
ipu_status ipu__verify_scatter_nd(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                  ipu__instr *ins) {
    char s1[160], s2[160], s3[160];
    const ipu__tensor *data = in[0], *idx = in[1], *upd = in[2];
    uint32_t ies;
    ipu_status st = check_dtypes(v, data, idx, upd, y, &ies);
    if (!st) st = check_reduction(v, ins->attr[0], data->desc.dtype);
    if (st) return st;
    uint32_t r = data->desc.ndim, q = idx->desc.ndim;
    const int64_t *dd = data->desc.dims, *id = idx->desc.dims, *ud = upd->desc.dims;
    int64_t k = q ? id[q - 1] : 0;
    if (q < 1 || k < 1 || k > (int64_t)r)
        return bad(v, "indices%s: last dim must be in [1, data rank %u]",
                   shape_str(s1, sizeof s1, idx), r);
    uint32_t uk = (uint32_t)k;
    bool ok = y->desc.ndim == r && dims_eq(y->desc.dims, dd, r) &&
              upd->desc.ndim == q - 1 + r - uk && dims_eq(ud, id, q - 1) &&
              dims_eq(ud + q - 1, dd + uk, r - uk);
    if (!ok)
        return bad(v,
                   "data%s, indices%s and updates%s do not fit (updates = indices.shape[:-1] "
                   "+ data.shape[k:], y shaped as data)",
                   shape_str(s1, sizeof s1, data), shape_str(s2, sizeof s2, idx),
                   shape_str(s3, sizeof s3, upd));
    ipu__scatter_nd_plan *p = ipu__calloc(1, sizeof *p);
    if (!p) return plan_nomem();
    p->ies = ies;
    p->esize = (uint32_t)ipu_dtype_size(data->desc.dtype);
    p->k = uk;
    p->reduction = (int)ins->attr[0];
    p->dtype = data->desc.dtype;
    p->rows = prod(dd, 0, uk);
    p->cols = prod(dd, uk, r);
    p->m = prod(id, 0, q - 1);
    for (uint32_t i = 0; i < uk; i++) {
        p->dim[i] = dd[i];
        p->rstride[i] = prod(dd, i + 1, uk);
    }
    p->cblock = p->cols < SCATTER_ND_COLS ? p->cols : SCATTER_ND_COLS;
    p->hdr.work = y->numel == 0 ? 0 : (size_t)ceil_div(p->cols, p->cblock);
    p->hdr.fn = ipu__select_kernel(ins->op, data->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}
