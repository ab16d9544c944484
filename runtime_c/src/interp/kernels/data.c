/* Data movement kernels: BIND, COPY, EXPAND, CONCAT, TRANSPOSE (all dtypes, by element size)
 * and CAST between any two dtypes (docs/bytecode.md: float -> int truncates and saturates,
 * NaN -> 0; int -> int wraps; to bool: x != 0). Their plan functions are at the end. */
#include <math.h>
#include <string.h>

#include "../verify_internal.h"
#include "eltwise.h"

/* COPY (bytes) and CAST (elements). */
typedef struct ipu__flat_plan {
    ipu__plan hdr;
    uint64_t count; /* bytes for COPY, elements for CAST */
    ipu_dtype src, dst;
} ipu__flat_plan;

/* CONCAT: work item = (outer row, input). */
typedef struct ipu__concat_plan {
    ipu__plan hdr;
    uint64_t outer, yrow; /* bytes per outer row of y */
    uint32_t n_in;
    uint64_t row[]; /* [2*n_in]: bytes per outer row of input i, then its offset in y's row */
} ipu__concat_plan;

/* TRANSPOSE: collapsed output shape, strides into x (elements). */
typedef struct ipu__transpose_plan {
    ipu__plan hdr;
    uint64_t numel;
    uint32_t ndim, esize;
    int64_t shape[IPU_MAX_DIMS], xs[IPU_MAX_DIMS];
} ipu__transpose_plan;

ipu_status ipu__k_bind(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                       void *scratch) {
    (void)b, (void)e, (void)scratch;
    const ipu_executable *x = f->exe;
    uint32_t t = ins->out[0];
    if (!x || !x->tensors || t >= x->info.num_tensors ||
        (!x->tensor_data && !(x->tensors[t].flags & IPU_TENSOR_STORED_PACKED)))
        return ipu__fail(IPU_ERR_INTERNAL, "BIND: executable has no tensor data");
    f->ptr[t] = (void *)ipu__tensor_bytes(x, t);
    return IPU_OK;
}

ipu_status ipu__k_copy(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                       void *scratch) {
    (void)scratch;
    const ipu__flat_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    char *y = f->ptr[ins->out[0]];
    if (x == y) return IPU_OK;
    uint64_t lo = (uint64_t)b * IPU__COPY_BLOCK, hi = (uint64_t)e * IPU__COPY_BLOCK;
    if (hi > p->count) hi = p->count;
    memcpy(y + lo, x + lo, (size_t)(hi - lo));
    return IPU_OK;
}

/* ---- EXPAND -------------------------------------------------------------------------------- */

static void expand_inner(const void *a, int64_t sa, const void *b, int64_t sb, void *y, size_t n,
                         uint32_t es) {
    (void)b, (void)sb;
    if (sa) {
        memcpy(y, a, n * es);
        return;
    }
    switch (es) {
        case 1: memset(y, *(const uint8_t *)a, n); break;
        case 2: {
            uint16_t v, *d = y;
            memcpy(&v, a, 2);
            for (size_t i = 0; i < n; i++) d[i] = v;
            break;
        }
        case 4: {
            uint32_t v, *d = y;
            memcpy(&v, a, 4);
            for (size_t i = 0; i < n; i++) d[i] = v;
            break;
        }
        default: {
            uint64_t v, *d = y;
            memcpy(&v, a, 8);
            for (size_t i = 0; i < n; i++) d[i] = v;
            break;
        }
    }
}

ipu_status ipu__k_expand(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    (void)scratch;
    const ipu__bcast_plan *p = ins->plan;
    uint64_t lo = (uint64_t)b * IPU__ELT_BLOCK, hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (hi > p->numel) hi = p->numel;
    ipu__bcast_run(p, f->ptr[ins->in[0]], NULL, f->ptr[ins->out[0]], lo, hi, expand_inner);
    return IPU_OK;
}

/* ---- CONCAT -------------------------------------------------------------------------------- */

ipu_status ipu__k_concat(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    (void)scratch;
    const ipu__concat_plan *p = ins->plan;
    char *y = f->ptr[ins->out[0]];
    for (size_t it = b; it < e; it++) {
        uint64_t o = it / p->n_in;
        uint32_t i = (uint32_t)(it % p->n_in);
        uint64_t row = p->row[2 * i];
        if (row == 0) continue;
        const char *x = f->ptr[ins->in[i]];
        memcpy(y + o * p->yrow + p->row[2 * i + 1], x + o * row, (size_t)row);
    }
    return IPU_OK;
}

/* ---- TRANSPOSE ----------------------------------------------------------------------------- */

#define GATHER(T)                                                     \
    do {                                                              \
        const T *s = (const T *)x + off;                              \
        T *d = (T *)y + lo;                                           \
        for (uint64_t j = 0; j < run; j++) d[j] = s[(int64_t)j * st]; \
    } while (0)

ipu_status ipu__k_transpose(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                            void *scratch) {
    (void)scratch;
    const ipu__transpose_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    char *y = f->ptr[ins->out[0]];
    uint32_t nd = p->ndim, last = nd - 1, es = p->esize;
    uint64_t lo = (uint64_t)b * IPU__ELT_BLOCK, hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (hi > p->numel) hi = p->numel;
    int64_t idx[IPU_MAX_DIMS];
    uint64_t r = lo;
    for (uint32_t d = nd; d-- > 0;) {
        idx[d] = (int64_t)(r % (uint64_t)p->shape[d]);
        r /= (uint64_t)p->shape[d];
    }
    int64_t st = p->xs[last];
    while (lo < hi) {
        int64_t off = 0;
        for (uint32_t d = 0; d < nd; d++) off += idx[d] * p->xs[d];
        uint64_t run = (uint64_t)(p->shape[last] - idx[last]);
        if (run > hi - lo) run = hi - lo;
        if (st == 1) {
            memcpy(y + lo * es, x + (uint64_t)off * es, (size_t)(run * es));
        } else {
            switch (es) {
                case 1: GATHER(uint8_t); break;
                case 2: GATHER(uint16_t); break;
                case 4: GATHER(uint32_t); break;
                default: GATHER(uint64_t); break;
            }
        }
        lo += run;
        idx[last] += (int64_t)run;
        for (uint32_t d = last; d > 0 && idx[d] == p->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
    return IPU_OK;
}

/* ---- CAST ---------------------------------------------------------------------------------- */

#define CAST_CHUNK 256

static bool is_float_dt(ipu_dtype t) { return t == IPU_DTYPE_FLOAT32 || t == IPU_DTYPE_FLOAT16; }

/* Load n elements as float (float sources) or as int64 (integer/bool sources). */
static void load_f(ipu_dtype t, const void *src, float *d, size_t n) {
    if (t == IPU_DTYPE_FLOAT32)
        memcpy(d, src, n * sizeof(float));
    else
        ipu__cvt_f16_to_f32(src, d, n);
}

/* Integer and bool sources load as int64 (uint64 as its bit pattern: see store_from_i). */
static void load_i(ipu_dtype t, const void *src, int64_t *d, size_t n) {
    switch (t) {
#define LOAD_I(sfx, D, T, W, S, C, MIN, MAX)                 \
    case IPU_DTYPE_##D: {                                    \
        const T *s = src;                                    \
        for (size_t i = 0; i < n; i++) d[i] = (int64_t)s[i]; \
        break;                                               \
    }
        IPU__INT_TYPES(LOAD_I)
#undef LOAD_I
        default: { /* BOOL */
            const uint8_t *s = src;
            for (size_t i = 0; i < n; i++) d[i] = s[i] != 0;
            break;
        }
    }
}

/* float -> integer: truncate toward zero, saturate at T's range, NaN -> 0. */
static void store_from_f(ipu_dtype t, const float *s, void *dst, size_t n) {
    switch (t) {
        case IPU_DTYPE_FLOAT32: memcpy(dst, s, n * sizeof(float)); break;
        case IPU_DTYPE_FLOAT16: ipu__cvt_f32_to_f16(s, dst, n); break;
#define STORE_F(sfx, D, T, W, S, C, MIN, MAX)                                                      \
    case IPU_DTYPE_##D: {                                                                          \
        T *o = dst;                                                                                \
        for (size_t i = 0; i < n; i++) {                                                           \
            double v = (double)s[i];                                                               \
            o[i] = v != v ? (T)0 : v <= (double)(MIN) ? (MIN) : v >= (double)(MAX) ? (MAX) : (T)v; \
        }                                                                                          \
        break;                                                                                     \
    }
            IPU__INT_TYPES(STORE_F)
#undef STORE_F
        default: { /* BOOL */
            uint8_t *o = dst;
            for (size_t i = 0; i < n; i++) o[i] = s[i] != 0.0f;
            break;
        }
    }
}

/* integer -> any: wrap (two's complement) for integers, round-to-nearest for floats; `u64`:
 * the source is uint64 (its values are the int64 bit patterns). */
static void store_from_i(ipu_dtype t, const int64_t *s, void *dst, size_t n, bool u64) {
    switch (t) {
        case IPU_DTYPE_FLOAT32: {
            float *o = dst;
            for (size_t i = 0; i < n; i++) o[i] = u64 ? (float)(uint64_t)s[i] : (float)s[i];
            break;
        }
        case IPU_DTYPE_FLOAT16: {
            uint16_t *o = dst;
            for (size_t i = 0; i < n; i++)
                o[i] = ipu__f32_to_f16(u64 ? (float)(uint64_t)s[i] : (float)s[i]);
            break;
        }
#define STORE_I(sfx, D, T, W, S, C, MIN, MAX)                    \
    case IPU_DTYPE_##D: {                                        \
        T *o = dst;                                              \
        for (size_t i = 0; i < n; i++) o[i] = (T)(uint64_t)s[i]; \
        break;                                                   \
    }
            IPU__INT_TYPES(STORE_I)
#undef STORE_I
        default: { /* BOOL */
            uint8_t *o = dst;
            for (size_t i = 0; i < n; i++) o[i] = s[i] != 0;
            break;
        }
    }
}

ipu_status ipu__k_cast(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                       void *scratch) {
    (void)scratch;
    const ipu__flat_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    char *y = f->ptr[ins->out[0]];
    size_t ses = ipu_dtype_size(p->src), des = ipu_dtype_size(p->dst);
    uint64_t lo = (uint64_t)b * IPU__ELT_BLOCK, hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (hi > p->count) hi = p->count;
    if (p->src == p->dst) {
        memcpy(y + lo * des, x + lo * ses, (size_t)(hi - lo) * des);
        return IPU_OK;
    }
    float fb[CAST_CHUNK];
    int64_t ib[CAST_CHUNK];
    for (uint64_t i = lo; i < hi; i += CAST_CHUNK) {
        size_t n = hi - i < CAST_CHUNK ? (size_t)(hi - i) : CAST_CHUNK;
        if (is_float_dt(p->src)) {
            load_f(p->src, x + i * ses, fb, n);
            store_from_f(p->dst, fb, y + i * des, n);
        } else {
            load_i(p->src, x + i * ses, ib, n);
            store_from_i(p->dst, ib, y + i * des, n, p->src == IPU_DTYPE_UINT64);
        }
    }
    return IPU_OK;
}

/* Plan functions (verify_internal.h, ipu_ops.def's `plan` column): shapes, attributes, the plan. */

ipu_status ipu__verify_concat(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    char s1[160], s2[160];
    uint32_t nd = y->desc.ndim;
    int64_t axis = ins->attr[0];
    if (axis < 0 || axis >= (int64_t)nd)
        return bad(v, "axis %lld out of range for output with %u dims", (long long)axis, nd);
    uint64_t outer = 1, inner = ipu_dtype_size(y->desc.dtype), sum = 0;
    for (int64_t d = 0; d < axis; d++) outer *= (uint64_t)y->desc.dims[d];
    for (uint32_t d = (uint32_t)axis + 1; d < nd; d++) inner *= (uint64_t)y->desc.dims[d];
    for (uint32_t i = 0; i < ins->n_in; i++) {
        const ipu__tensor *x = in[i];
        if (x->desc.dtype != y->desc.dtype)
            return bad(v, "input %u has dtype %s, output %s", i, dt_str(x->desc.dtype),
                       dt_str(y->desc.dtype));
        if (x->desc.ndim != nd)
            return bad(v, "input %u has %u dims, output %u", i, x->desc.ndim, nd);
        for (uint32_t d = 0; d < nd; d++)
            if (d != (uint32_t)axis && x->desc.dims[d] != y->desc.dims[d])
                return bad(v, "input %u x%s differs from output y%s in dim %u (axis %lld)", i,
                           shape_str(s1, sizeof s1, x), shape_str(s2, sizeof s2, y), d,
                           (long long)axis);
        sum += (uint64_t)x->desc.dims[axis]; /* <= 255 * 2^62: no overflow */
    }
    if (sum != (uint64_t)y->desc.dims[axis])
        return bad(v, "input sizes along axis %lld sum to %llu, output has %lld", (long long)axis,
                   (unsigned long long)sum, (long long)y->desc.dims[axis]);
    ipu__concat_plan *p;
    p = alloc_plan(sizeof *p + 2 * sizeof(uint64_t) * ins->n_in);
    if (!p) return plan_nomem();
    p->outer = outer;
    p->n_in = ins->n_in;
    p->yrow = (uint64_t)y->desc.dims[axis] * inner;
    uint64_t off = 0;
    for (uint32_t i = 0; i < ins->n_in; i++) {
        p->row[2 * i] = (uint64_t)in[i]->desc.dims[axis] * inner;
        p->row[2 * i + 1] = off;
        off += p->row[2 * i];
    }
    p->hdr.work = y->numel == 0 ? 0 : (size_t)(outer * ins->n_in);
    p->hdr.fn = ipu__select_kernel(ins->op, y->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}

ipu_status ipu__verify_transpose(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                 ipu__instr *ins) {
    const ipu__tensor *x = in[0];
    char s1[160], s2[160];
    uint32_t nd = x->desc.ndim;
    if (y->desc.ndim != nd) return bad(v, "output has %u dims, input %u", y->desc.ndim, nd);
    bool seen[IPU_MAX_DIMS] = {false};
    for (uint32_t i = 0; i < nd; i++) {
        int64_t q = ins->attr[i];
        if (q < 0 || q >= (int64_t)nd || seen[q])
            return bad(v, "perm is not a permutation of 0..%u (perm[%u] = %lld)", nd - 1, i,
                       (long long)q);
        seen[q] = true;
        if (y->desc.dims[i] != x->desc.dims[q])
            return bad(v, "y%s is not x%s transposed: y dim %u != x dim %lld",
                       shape_str(s1, sizeof s1, y), shape_str(s2, sizeof s2, x), i, (long long)q);
    }
    ipu__transpose_plan *p;
    p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    int64_t xs[IPU_MAX_DIMS], s = 1;
    for (uint32_t d = nd; d-- > 0;) {
        xs[d] = s;
        s *= x->desc.dims[d];
    }
    for (uint32_t i = 0; i < nd; i++) {
        p->shape[i] = y->desc.dims[i];
        p->xs[i] = xs[ins->attr[i]];
    }
    p->ndim = ipu__vcollapse(nd, p->shape, p->xs, NULL);
    p->numel = y->numel;
    p->esize = (uint32_t)ipu_dtype_size(y->desc.dtype);
    p->hdr.work = (size_t)ceil_div(y->numel, IPU__ELT_BLOCK);
    p->hdr.fn = ipu__select_kernel(ins->op, y->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}

static ipu_status plan_flat(ipu__instr *ins, uint64_t count, uint64_t block, ipu_dtype src,
                            ipu_dtype dst) {
    ipu__flat_plan *p;
    p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    p->count = count;
    p->src = src;
    p->dst = dst;
    p->hdr.work = (size_t)ceil_div(count, block);
    p->hdr.fn = ipu__select_kernel(ins->op, dst);
    ins->plan = p;
    return IPU_OK;
}

/* BIND: the generic rules (ipu_ops.def's LOAD flag) are all there is; one work item. */
ipu_status ipu__verify_bind(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins) {
    (void)v;
    (void)in;
    ipu__plan *p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    p->work = 1;
    p->fn = ipu__select_kernel(ins->op, y->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}

ipu_status ipu__verify_copy(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins) {
    if (in[0]->desc.nbytes != y->desc.nbytes)
        return bad(v, "input has %llu bytes, output %llu", (unsigned long long)in[0]->desc.nbytes,
                   (unsigned long long)y->desc.nbytes);
    return plan_flat(ins, y->desc.nbytes, IPU__COPY_BLOCK, y->desc.dtype, y->desc.dtype);
}

ipu_status ipu__verify_expand(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    char s1[160], s2[160];
    const ipu__tensor *x = in[0];
    bool ok = x->desc.ndim <= y->desc.ndim;
    for (uint32_t i = 0; ok && i < x->desc.ndim; i++) {
        int64_t dx = x->desc.dims[x->desc.ndim - 1 - i];
        ok = dx == 1 || dx == y->desc.dims[y->desc.ndim - 1 - i];
    }
    if (!ok)
        return bad(v, "x%s does not broadcast to y%s", shape_str(s1, sizeof s1, x),
                   shape_str(s2, sizeof s2, y));
    return ipu__vplan_bcast(v, x, NULL, y, ins);
}

ipu_status ipu__verify_cast(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins) {
    char s1[160], s2[160];
    ipu_dtype dt = y->desc.dtype;
    if (!is_castable(in[0]->desc.dtype) || !is_castable(dt))
        return bad(v, "unsupported cast %s -> %s", dt_str(in[0]->desc.dtype), dt_str(dt));
    if (!same_shape(in[0], y))
        return bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, y),
                   shape_str(s2, sizeof s2, in[0]));
    return plan_flat(ins, y->numel, IPU__ELT_BLOCK, in[0]->desc.dtype, dt);
}
