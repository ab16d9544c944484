/* REINDEX (separable gather with a pad value, all dtypes by element size) and INTERP (separable
 * weighted taps, float32/float16 computed in float32), docs/bytecode.md. The verifier checked
 * every table entry and copied the tables into the plan; a work item is one row of y's last
 * dim, whose outer indices select one entry (REINDEX) or tap set (INTERP) per outer dim.
 * Their tables are TENSOR_DATA tensors, so the plan functions (at the end) check every entry
 * once and copy it into the plan, which is all the kernels read. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "../verify_internal.h"

/* REINDEX: y[i] = pad if any table entry is -1, else x at the sum of
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

/* INTERP: y[i] = sum over tap combinations of the product of the
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

/* n copies of the es-byte element at v. */
static void fill(char *dst, const uint8_t *v, int64_t n, uint32_t es) {
    switch (es) {
        case 1: memset(dst, v[0], (size_t)n); break;
        case 2: {
            uint16_t a;
            memcpy(&a, v, 2);
            for (int64_t i = 0; i < n; i++) memcpy(dst + 2 * i, &a, 2);
            break;
        }
        case 4: {
            uint32_t a;
            memcpy(&a, v, 4);
            for (int64_t i = 0; i < n; i++) memcpy(dst + 4 * i, &a, 4);
            break;
        }
        default: {
            uint64_t a;
            memcpy(&a, v, 8);
            for (int64_t i = 0; i < n; i++) memcpy(dst + 8 * i, &a, 8);
            break;
        }
    }
}

/* Copy of one element (fixed sizes let the compiler inline the common len-1 segments). */
static inline void copy_run(char *dst, const char *src, int64_t n, uint32_t es) {
    if (n == 1) {
        switch (es) {
            case 1: *dst = *src; return;
            case 2: memcpy(dst, src, 2); return;
            case 4: memcpy(dst, src, 4); return;
            default: memcpy(dst, src, 8); return;
        }
    }
    memcpy(dst, src, (size_t)n * es);
}

ipu_status ipu__k_reindex(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                          void *scratch) {
    (void)scratch;
    const ipu__reindex_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    char *y = f->ptr[ins->out[0]];
    uint32_t nd = p->ndim, es = p->esize;
    int64_t last = p->dims[nd - 1];
    for (size_t r = b; r < e; r++) {
        uint64_t rest = r;
        int64_t base = 0;
        bool padrow = false;
        for (uint32_t d = nd - 1; d-- > 0;) {
            int64_t i = (int64_t)(rest % (uint64_t)p->dims[d]);
            rest /= (uint64_t)p->dims[d];
            int64_t o = p->off[p->start[d] + i];
            if (o < 0)
                padrow = true;
            else
                base += o;
        }
        char *yr = y + (uint64_t)r * (uint64_t)last * es;
        if (padrow) {
            fill(yr, p->pad, last, es);
            continue;
        }
        for (int64_t g = 0; g < p->nseg; g++) {
            const int64_t *s = p->seg + 3 * g;
            if (s[2] < 0)
                fill(yr + s[0] * es, p->pad, s[1], es);
            else
                copy_run(yr + s[0] * es, x + base + s[2], s[1], es);
        }
    }
    return IPU_OK;
}

ipu_status ipu__k_interp(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    const ipu__interp_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
    uint32_t nd = p->ndim, L = nd - 1;
    int64_t last = p->dims[L], lt = p->taps[L];
    int64_t *coff = scratch; /* [combos] */
    float *cw = (float *)(coff + p->combos);
    const int64_t *loff = p->off + p->start[L];
    const float *lw = p->w + p->start[L];
    const uint8_t *lext = p->ext + p->ext_start[L];
    for (size_t r = b; r < e; r++) {
        uint64_t rest = r;
        int64_t n = 1;
        bool ext = false;
        coff[0] = 0;
        cw[0] = 1.0f;
        for (uint32_t d = L; d-- > 0;) {
            int64_t i = (int64_t)(rest % (uint64_t)p->dims[d]);
            rest /= (uint64_t)p->dims[d];
            if (p->ext[p->ext_start[d] + i]) {
                ext = true;
                break;
            }
            const int64_t *o = p->off + p->start[d] + i * p->taps[d];
            const float *w = p->w + p->start[d] + i * p->taps[d];
            /* combos x taps, in place: tap t of combo c goes to t * n + c (t = 0 last) */
            for (int64_t t = p->taps[d]; t-- > 0;)
                for (int64_t c = 0; c < n; c++) {
                    coff[t * n + c] = coff[c] + o[t];
                    cw[t * n + c] = cw[c] * w[t];
                }
            n *= p->taps[d];
        }
        uint64_t y0 = (uint64_t)r * (uint64_t)last;
        for (int64_t j = 0; j < last; j++) {
            float acc = p->extrap;
            if (!ext && !lext[j]) {
                const int64_t *o = loff + j * lt;
                const float *w = lw + j * lt;
                acc = 0.0f;
                for (int64_t c = 0; c < n; c++) {
                    float s = 0.0f;
                    for (int64_t t = 0; t < lt; t++)
                        s += w[t] * ipu__ld_f32(x, p->f16, coff[c] + o[t]);
                    acc += cw[c] * s;
                }
            }
            if (p->f16)
                ((uint16_t *)y)[y0 + (uint64_t)j] = ipu__f32_to_f16(acc);
            else
                ((float *)y)[y0 + (uint64_t)j] = acc;
        }
    }
    return IPU_OK;
}

/* Plan functions (verify_internal.h, ipu_ops.def's `plan` column): shapes, attributes, the plan. */

#define MAX_TAPS ((int64_t)1 << 16)

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
