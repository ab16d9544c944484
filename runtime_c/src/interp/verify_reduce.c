/* Plan functions of the reduction family (docs/bytecode.md; ipu_ops.def names them): every
 * opcode views x as [outer, n, inner] and gets an ipu__rfam_plan (kernels/reduce.h); one
 * function per kind of rule (reduce, arg_reduce, cumulative, topk, float_axis), opcodes of a
 * kind share it. verify_ops.c has already checked operand counts, tensor indices, output
 * locations and overlaps, attribute counts and the table's dtype rules. */
#include <string.h>

#include "kernels/reduce.h"
#include "verify_internal.h"

static uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

static const char *dt_str(ipu_dtype t) {
    const char *s = ipu_dtype_name(t);
    return s ? s : "?";
}

static bool same_shape(const ipu__tensor *a, const ipu__tensor *b) {
    if (a->desc.ndim != b->desc.ndim) return false;
    for (uint32_t d = 0; d < a->desc.ndim; d++)
        if (a->desc.dims[d] != b->desc.dims[d]) return false;
    return true;
}

static bool is_float(ipu_dtype t) { return t == IPU_DTYPE_FLOAT32 || t == IPU_DTYPE_FLOAT16; }
/* dtypes with a sum (REDUCE arithmetic functions, CUMSUM): float32, float16, int32, int64 */
static bool is_arith(ipu_dtype t) {
    return is_float(t) || t == IPU_DTYPE_INT32 || t == IPU_DTYPE_INT64;
}
/* dtypes with an order (MAX/MIN, ARG_REDUCE, TOPK) */
static bool is_ordered(ipu_dtype t) {
    return is_arith(t) || t == IPU_DTYPE_INT8 || t == IPU_DTYPE_UINT8 || t == IPU_DTYPE_UINT32;
}

/* attr[i] in {0, 1} */
static ipu_status flag(const vctx *v, uint32_t i, const char *name) {
    int64_t a = v->ins->attr[i];
    if (a != 0 && a != 1) return bad(v, "%s must be 0 or 1, got %lld", name, (long long)a);
    return IPU_OK;
}

/* What every member shares: [outer, n, inner] at attributes [at, at + 3), and the plan. */
typedef struct rfam {
    const vctx *v;
    const ipu__tensor *x, *y;
    ipu__instr *ins;
    uint64_t o, n, in, on; /* on: outer * inner */
    ipu__rfam_plan *p;
} rfam;

/* How the output relates to x: [outer, inner], x's shape, or TOPK's [outer, k, inner]. */
typedef enum { OUT_REDUCED, OUT_SAME, OUT_TOPK } rfam_out;

static ipu_status rfam_begin(rfam *r, const vctx *v, const ipu__tensor *const *inputs,
                             const ipu__tensor *y, ipu__instr *ins, uint32_t at) {
    const int64_t *a = ins->attr;
    *r = (rfam){v, inputs[0], y, ins, 0, 0, 0, 0, NULL};
    for (uint32_t i = 0; i < 3; i++)
        if (a[at + i] < 1)
            return bad(v, "%s = %lld must be >= 1",
                       i == 0   ? "outer"
                       : i == 1 ? "n"
                                : "inner",
                       (long long)a[at + i]);
    uint64_t onn;
    r->o = (uint64_t)a[at];
    r->n = (uint64_t)a[at + 1];
    r->in = (uint64_t)a[at + 2];
    if (!ipu__mul_u64(r->o, r->in, &r->on) || !ipu__mul_u64(r->on, r->n, &onn) ||
        onn != r->x->numel)
        return bad(v, "outer*n*inner = %llu*%llu*%llu != input numel %llu",
                   (unsigned long long)r->o, (unsigned long long)r->n, (unsigned long long)r->in,
                   (unsigned long long)r->x->numel);
    r->p = ipu__calloc(1, sizeof *r->p);
    if (!r->p) return ipu__fail(IPU_ERR_NOMEM, "out of memory allocating an instruction plan");
    return IPU_OK;
}

/* st: the member's own checks; then the output shape, and the plan is set (or freed). */
static ipu_status rfam_end(rfam *r, ipu_status st, rfam_out out) {
    char s1[160], s2[160];
    const vctx *v = r->v;
    ipu__rfam_plan *p = r->p;
    if (!st && out == OUT_REDUCED && r->on != r->y->numel)
        st = bad(v, "outer*inner = %llu != output numel %llu", (unsigned long long)r->on,
                 (unsigned long long)r->y->numel);
    if (!st && out == OUT_SAME && !same_shape(r->x, r->y))
        st = bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, r->y),
                 shape_str(s2, sizeof s2, r->x));
    if (st) {
        ipu__free(p);
        return st;
    }
    p->dtype = r->x->desc.dtype;
    p->outer = (int64_t)r->o;
    p->n = (int64_t)r->n;
    p->inner = (int64_t)r->in;
    p->nib = (int64_t)ceil_div(r->in, (uint64_t)IPU__RED_IB);
    p->hdr.work = out == OUT_TOPK ? (size_t)r->on : (size_t)(r->o * (uint64_t)p->nib);
    p->hdr.fn = ipu__select_kernel(r->ins->op, p->dtype);
    r->ins->plan = p;
    return IPU_OK;
}

/* REDUCE: attrs fn, outer, n, inner; the function decides the dtypes. */
ipu_status ipu__verify_reduce(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    rfam r;
    ipu_status st = rfam_begin(&r, v, in, y, ins, 1);
    if (st) return st;
    ipu_dtype dt = r.x->desc.dtype;
    int64_t fn = ins->attr[0];
    bool ok = fn == IPU__RED_MAX || fn == IPU__RED_MIN ? is_ordered(dt) || dt == IPU_DTYPE_BOOL
              : fn == IPU__RED_LOG_SUM || fn == IPU__RED_LOG_SUM_EXP ? is_float(dt)
                                                                     : is_arith(dt);
    if (fn < 0 || fn >= IPU__RED_COUNT)
        st = bad(v, "unknown reduce function %lld", (long long)fn);
    else if (!ok)
        st = bad(v, "reduce function %s does not take dtype %s", ipu_reduce_fn_name((int)fn),
                 dt_str(dt));
    r.p->fn = (int)fn;
    return rfam_end(&r, st, OUT_REDUCED);
}

/* ARG_REDUCE: attrs is_min, select_last_index, outer, n, inner; y int64. */
ipu_status ipu__verify_arg_reduce(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                  ipu__instr *ins) {
    rfam r;
    ipu_status st = rfam_begin(&r, v, in, y, ins, 2);
    if (st) return st;
    ipu_dtype dt = r.x->desc.dtype;
    if (!is_ordered(dt))
        st = bad(v, "dtype %s is not supported", dt_str(dt));
    else if (y->desc.dtype != IPU_DTYPE_INT64)
        st = bad(v, "output dtype %s, expected int64", dt_str(y->desc.dtype));
    if (!st) st = flag(v, 0, "is_min");
    if (!st) st = flag(v, 1, "select_last_index");
    r.p->is_min = (int)ins->attr[0];
    r.p->last = (int)ins->attr[1];
    return rfam_end(&r, st, OUT_REDUCED);
}

/* Cumulative scans along the middle axis: attrs outer, n, inner, exclusive, reverse. */
ipu_status ipu__verify_cumulative(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                  ipu__instr *ins) {
    rfam r;
    ipu_status st = rfam_begin(&r, v, in, y, ins, 0);
    if (st) return st;
    ipu_dtype dt = r.x->desc.dtype;
    if (!is_arith(dt) && dt != IPU_DTYPE_UINT32)
        st = bad(v, "dtype %s is not supported", dt_str(dt));
    if (!st) st = flag(v, 3, "exclusive");
    if (!st) st = flag(v, 4, "reverse");
    r.p->exclusive = (int)ins->attr[3];
    r.p->reverse = (int)ins->attr[4];
    return rfam_end(&r, st, OUT_SAME);
}

/* TOPK: attrs outer, n, inner, k, largest, sorted; values and indices (int64) [outer, k, inner]. */
ipu_status ipu__verify_topk(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins) {
    char s1[160], s2[160];
    rfam r;
    ipu_status st = rfam_begin(&r, v, in, y, ins, 0);
    if (st) return st;
    ipu_dtype dt = r.x->desc.dtype;
    const int64_t *a = ins->attr;
    const ipu__tensor *yi = &v->e->tensors[ins->out[1]];
    uint64_t k = (uint64_t)a[3], okn;
    if (!is_ordered(dt))
        st = bad(v, "dtype %s is not supported", dt_str(dt));
    else if (yi->desc.dtype != IPU_DTYPE_INT64)
        st = bad(v, "indices dtype %s, expected int64", dt_str(yi->desc.dtype));
    else if (a[3] < 1 || k > r.n)
        st = bad(v, "k = %lld outside [1, n = %llu]", (long long)a[3], (unsigned long long)r.n);
    else if (!same_shape(y, yi))
        st = bad(v, "values y%s and indices%s differ in shape", shape_str(s1, sizeof s1, y),
                 shape_str(s2, sizeof s2, yi));
    else if (!ipu__mul_u64(r.on, k, &okn) || okn != y->numel)
        st = bad(v, "outer*k*inner = %llu != output numel %llu", (unsigned long long)(r.on * k),
                 (unsigned long long)y->numel);
    if (!st) st = flag(v, 4, "largest");
    if (!st) st = flag(v, 5, "sorted");
    r.p->k = a[3];
    r.p->largest = (int)a[4];
    return rfam_end(&r, st, OUT_TOPK);
}

/* LOG_SOFTMAX, HARDMAX: attrs outer, axis_len, inner; float32/float16, y of x's shape. */
ipu_status ipu__verify_float_axis(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                  ipu__instr *ins) {
    rfam r;
    ipu_status st = rfam_begin(&r, v, in, y, ins, 0);
    if (st) return st;
    ipu_dtype dt = r.x->desc.dtype;
    if (!is_float(dt)) st = bad(v, "dtype %s is not float32/float16", dt_str(dt));
    return rfam_end(&r, st, OUT_SAME);
}
