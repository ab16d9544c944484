/* Verifier for REINDEX and INTERP (docs/bytecode.md). Their index and weight tables are
 * TENSOR_DATA tensors, so their contents are known here: every entry is checked once and copied
 * into the plan (kernels/reindex.h), which is all the kernels (kernels/reindex.c) read. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/reindex.h"
#include "verify_internal.h"

#define MAX_TAPS ((int64_t)1 << 16)

static void *alloc_plan(size_t size) { return ipu__calloc(1, size); }
static ipu_status plan_nomem(void) {
    return ipu__fail(IPU_ERR_NOMEM, "out of memory allocating an instruction plan");
}

/* A table operand: TENSOR_DATA of dtype `dt` with `count` elements; its bytes. */
static ipu_status table(const vctx *v, const ipu__tensor *t, uint32_t i, ipu_dtype dt,
                        uint64_t count, const uint8_t **data) {
    if (t->desc.dtype != dt)
        return bad(v, "input %u (table) has dtype %s, expected %s", i,
                   ipu_dtype_name(t->desc.dtype) ? ipu_dtype_name(t->desc.dtype) : "?",
                   ipu_dtype_name(dt));
    if (t->loc != IPU_LOC_TENSOR_DATA || !v->e->tensor_data)
        return bad(v, "input %u (table) must be a TENSOR_DATA tensor", i);
    if (t->numel != count)
        return bad(v, "input %u (table) has %llu entries, expected %llu", i,
                   (unsigned long long)t->numel, (unsigned long long)count);
    *data = v->e->tensor_data + t->offset;
    return IPU_OK;
}

static int64_t ld_i64(const uint8_t *p, uint64_t i) { return (int64_t)ipu__ld_u64(p + 8 * i); }

/* Strides (attrs [first, first + nd)) in [0, numel]. */
static ipu_status strides(const vctx *v, uint32_t first, uint32_t nd, uint64_t numel) {
    for (uint32_t d = 0; d < nd; d++) {
        int64_t s = v->ins->attr[first + d];
        if (s < 0 || (uint64_t)s > numel)
            return bad(v, "stride of dim %u = %lld outside [0, %llu]", d, (long long)s,
                       (unsigned long long)numel);
    }
    return IPU_OK;
}

/* Entry e (>= 0) of dim d with stride s must address inside x: e * s < numel. */
static ipu_status in_x(const vctx *v, uint32_t d, int64_t e, int64_t s, uint64_t numel) {
    uint64_t o;
    if (!ipu__mul_u64((uint64_t)e, (uint64_t)s, &o) || o >= numel)
        return bad(v, "dim %u: index %lld x stride %lld is outside x (%llu elements)", d,
                   (long long)e, (long long)s, (unsigned long long)numel);
    return IPU_OK;
}

/* The largest offset any output element reads: sum of the per-dim maxima, unless some dim has
 * only outside (-1) entries (then nothing is read). */
static ipu_status max_offset(const vctx *v, uint32_t nd, const int64_t *maxe, const int64_t *st,
                             uint64_t numel) {
    uint64_t sum = 0, o;
    for (uint32_t d = 0; d < nd; d++)
        if (maxe[d] < 0) return IPU_OK;
    for (uint32_t d = 0; d < nd; d++)
        if (!ipu__mul_u64((uint64_t)maxe[d], (uint64_t)st[d], &o) || !ipu__add_u64(sum, o, &sum))
            return bad(v, "offsets overflow");
    if (sum >= numel)
        return bad(v, "the largest offset read (%llu) is outside x (%llu elements)",
                   (unsigned long long)sum, (unsigned long long)numel);
    return IPU_OK;
}

/* REINDEX: in x, table (int64, sum of y's dims); attrs [pad bits, s_0..s_{R-1}]. */
ipu_status ipu__verify_reindex(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                               ipu__instr *ins) {
    const ipu__tensor *x = in[0];
    uint32_t nd = y->desc.ndim;
    if (nd < 1) return bad(v, "output must have rank >= 1");
    if (ins->n_attr != 1 + nd) return bad(v, "%u attributes, expected %u", ins->n_attr, 1 + nd);
    if (x->desc.dtype != y->desc.dtype)
        return bad(v, "input has dtype %s, output %s", ipu_dtype_name(x->desc.dtype),
                   ipu_dtype_name(y->desc.dtype));
    uint32_t es = (uint32_t)ipu_dtype_size(y->desc.dtype);
    uint64_t pad = (uint64_t)ins->attr[0];
    if (es < 8 && (pad >> (8 * es)) != 0)
        return bad(v, "pad value bits 0x%llx do not fit a %u-byte element", (unsigned long long)pad,
                   es);
    uint64_t total = 0;
    for (uint32_t d = 0; d < nd; d++) /* a zero-size y may have huge other dims */
        if (!ipu__add_u64(total, (uint64_t)y->desc.dims[d], &total))
            return bad(v, "table size overflows");
    const uint8_t *tab;
    ipu_status st = table(v, in[1], 1, IPU_DTYPE_INT64, total, &tab);
    if (!st) st = strides(v, 1, nd, x->numel);
    if (st) return st;
    const int64_t *s = ins->attr + 1;
    int64_t maxe[IPU_MAX_DIMS];
    uint64_t k = 0;
    for (uint32_t d = 0; d < nd; d++) {
        maxe[d] = -1;
        for (int64_t i = 0; i < y->desc.dims[d]; i++, k++) {
            int64_t e = ld_i64(tab, k);
            if (e < -1) return bad(v, "dim %u: table entry %lld is below -1", d, (long long)e);
            if (e < 0) continue;
            if ((st = in_x(v, d, e, s[d], x->numel))) return st;
            if (e > maxe[d]) maxe[d] = e;
        }
    }
    if ((st = max_offset(v, nd, maxe, s, x->numel))) return st;
    /* segments of the last dim: pad runs and runs of consecutive source elements */
    int64_t last = y->desc.dims[nd - 1];
    const uint8_t *lt = tab + 8 * (total - (uint64_t)last);
    int64_t nseg = 0;
    for (int64_t j = 0; j < last; j++) {
        int64_t e = ld_i64(lt, (uint64_t)j), p = j ? ld_i64(lt, (uint64_t)j - 1) : -2;
        bool cont = j > 0 &&
                    ((e < 0 && p < 0) || (e >= 0 && p >= 0 && e * s[nd - 1] == p * s[nd - 1] + 1));
        if (!cont) nseg++;
    }
    ipu__reindex_plan *pl = alloc_plan(sizeof *pl + sizeof(int64_t) * (total + 3 * (uint64_t)nseg));
    if (!pl) return plan_nomem();
    pl->ndim = nd;
    pl->esize = es;
    for (uint32_t b = 0; b < 8; b++) pl->pad[b] = (uint8_t)(pad >> (8 * b));
    k = 0;
    for (uint32_t d = 0; d < nd; d++) {
        pl->dims[d] = y->desc.dims[d];
        pl->start[d] = (int64_t)k;
        for (int64_t i = 0; i < y->desc.dims[d]; i++, k++) {
            int64_t e = ld_i64(tab, k);
            pl->off[k] = e < 0 ? -1 : e * s[d] * (int64_t)es;
        }
    }
    pl->seg = pl->off + total;
    pl->nseg = nseg;
    const int64_t *lo = pl->off + pl->start[nd - 1];
    int64_t g = -1;
    for (int64_t j = 0; j < last; j++) {
        bool cont = j > 0 && ((lo[j] < 0 && lo[j - 1] < 0) ||
                              (lo[j] >= 0 && lo[j - 1] >= 0 && lo[j] == lo[j - 1] + (int64_t)es));
        if (!cont) {
            g++;
            pl->seg[3 * g] = j;
            pl->seg[3 * g + 1] = 0;
            pl->seg[3 * g + 2] = lo[j];
        }
        pl->seg[3 * g + 1]++;
    }
    pl->hdr.work = y->numel == 0 ? 0 : (size_t)(y->numel / (uint64_t)last);
    pl->hdr.fn = ipu__select_kernel(ins->op, y->desc.dtype);
    ins->plan = pl;
    return IPU_OK;
}

/* INTERP: in x, idx (int64), w (float32), both sum of y_d * T_d entries; attrs [extrapolation
 * value (float64 bits), T_0..T_{R-1}, s_0..s_{R-1}]. */
ipu_status ipu__verify_interp(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    const ipu__tensor *x = in[0];
    uint32_t nd = y->desc.ndim;
    ipu_dtype dt = y->desc.dtype;
    if (nd < 1) return bad(v, "output must have rank >= 1");
    if (ins->n_attr != 1 + 2 * nd)
        return bad(v, "%u attributes, expected %u", ins->n_attr, 1 + 2 * nd);
    if (dt != IPU_DTYPE_FLOAT32 && dt != IPU_DTYPE_FLOAT16)
        return bad(v, "dtype %s is not float32/float16", ipu_dtype_name(dt));
    if (x->desc.dtype != dt)
        return bad(v, "input has dtype %s, output %s", ipu_dtype_name(x->desc.dtype),
                   ipu_dtype_name(dt));
    const int64_t *T = ins->attr + 1, *s = ins->attr + 1 + nd;
    uint64_t total = 0, nidx = 0, combos = 1;
    for (uint32_t d = 0; d < nd; d++) {
        if (T[d] < 1 || T[d] > MAX_TAPS)
            return bad(v, "taps of dim %u = %lld outside [1, %lld]", d, (long long)T[d],
                       (long long)MAX_TAPS);
        uint64_t n;
        if (!ipu__mul_u64((uint64_t)y->desc.dims[d], (uint64_t)T[d], &n) ||
            !ipu__add_u64(total, n, &total))
            return bad(v, "table size overflows");
        nidx += (uint64_t)y->desc.dims[d];
        if (d + 1 < nd) combos *= (uint64_t)T[d]; /* <= 2^(16*7) checked below per step */
        if (combos > IPU__SCRATCH_BYTES / 12)
            return bad(v, "the outer dims have more than %zu tap combinations",
                       IPU__SCRATCH_BYTES / 12);
    }
    const uint8_t *idx, *wt;
    ipu_status st = table(v, in[1], 1, IPU_DTYPE_INT64, total, &idx);
    if (!st) st = table(v, in[2], 2, IPU_DTYPE_FLOAT32, total, &wt);
    if (!st) st = strides(v, 1 + nd, nd, x->numel);
    if (st) return st;
    size_t bytes = sizeof(ipu__interp_plan) + (sizeof(int64_t) + sizeof(float)) * total + nidx;
    ipu__interp_plan *p = alloc_plan(bytes);
    if (!p) return plan_nomem();
    p->w = (float *)(p->off + total);
    p->ext = (uint8_t *)(p->w + total);
    int64_t maxe[IPU_MAX_DIMS];
    uint64_t k = 0, q = 0;
    for (uint32_t d = 0; d < nd; d++) {
        maxe[d] = -1;
        p->dims[d] = y->desc.dims[d];
        p->taps[d] = T[d];
        p->start[d] = (int64_t)k;
        p->ext_start[d] = (int64_t)q;
        for (int64_t i = 0; i < y->desc.dims[d]; i++, q++) {
            bool ext = ld_i64(idx, k) == -1;
            p->ext[q] = ext;
            for (int64_t t = 0; t < T[d]; t++, k++) {
                int64_t e = ld_i64(idx, k);
                uint32_t bits = ipu__ld_u32(wt + 4 * k);
                memcpy(&p->w[k], &bits, sizeof bits);
                if (ext ? e != -1 : e < 0) {
                    ipu__free(p);
                    return bad(v,
                               "dim %u index %lld: tap %lld is %lld (taps must be all -1 or "
                               "all >= 0)",
                               d, (long long)i, (long long)t, (long long)e);
                }
                if (ext) {
                    p->off[k] = 0;
                    continue;
                }
                if ((st = in_x(v, d, e, s[d], x->numel))) {
                    ipu__free(p);
                    return st;
                }
                if (e > maxe[d]) maxe[d] = e;
                p->off[k] = e * s[d];
            }
        }
    }
    if ((st = max_offset(v, nd, maxe, s, x->numel))) {
        ipu__free(p);
        return st;
    }
    double ev;
    memcpy(&ev, &ins->attr[0], sizeof ev);
    /* out-of-range double -> float conversion is undefined: saturate to +-inf first */
    p->extrap = ev > FLT_MAX ? INFINITY : ev < -FLT_MAX ? -INFINITY : (float)ev;
    p->f16 = dt == IPU_DTYPE_FLOAT16;
    p->ndim = nd;
    p->combos = (int64_t)combos;
    int64_t last = y->desc.dims[nd - 1];
    p->hdr.work = y->numel == 0 ? 0 : (size_t)(y->numel / (uint64_t)last);
    p->hdr.fn = ipu__select_kernel(ins->op, dt);
    ins->plan = p;
    return IPU_OK;
}
