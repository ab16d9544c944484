/* Verifier for GATHER, GATHER_ELEMENTS, GATHER_ND, SCATTER_ELEMENTS and SCATTER_ND
 * (docs/bytecode.md): dtypes, shapes, attributes and the kernel plans (kernels/gather.h). After
 * this, only the index values remain to be checked, which the kernels do. ipu_ops.def names these
 * plan functions. */
#include "kernels/gather.h"
#include "verify_internal.h"

static uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }
static ipu_status plan_nomem(void) {
    return ipu__fail(IPU_ERR_NOMEM, "out of memory allocating an instruction plan");
}
static const char *dt_str(ipu_dtype t) {
    const char *s = ipu_dtype_name(t);
    return s ? s : "?";
}
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
