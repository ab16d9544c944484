/* Verifier for the reduction family (docs/bytecode.md): REDUCE, ARG_REDUCE, CUMSUM, TOPK,
 * LOG_SOFTMAX and HARDMAX. Every one views x as [outer, n, inner]; the plan is an
 * ipu__rfam_plan (kernels/reduce.h). verify_ops.c has already checked operand counts, tensor
 * indices, output locations and overlaps, attribute counts and that out[0] has x's dtype
 * (except ARG_REDUCE). */
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

ipu_status ipu__verify_reduce(const vctx *v, const ipu__tensor *const *inputs,
                              const ipu__tensor *y, ipu__instr *ins) {
    char s1[160], s2[160];
    const ipu__tensor *x = inputs[0];
    const int64_t *a = ins->attr;
    ipu_opcode op = ins->op;
    ipu_dtype dt = x->desc.dtype;
    /* position of [outer, n, inner] in the attributes */
    uint32_t at = op == IPU_OP_REDUCE ? 1 : op == IPU_OP_ARG_REDUCE ? 2 : 0;
    for (uint32_t i = 0; i < 3; i++)
        if (a[at + i] < 1)
            return bad(v, "%s = %lld must be >= 1", i == 0 ? "outer" : i == 1 ? "n" : "inner",
                       (long long)a[at + i]);
    uint64_t o = (uint64_t)a[at], n = (uint64_t)a[at + 1], in = (uint64_t)a[at + 2], on, onn;
    if (!ipu__mul_u64(o, in, &on) || !ipu__mul_u64(on, n, &onn) || onn != x->numel)
        return bad(v, "outer*n*inner = %llu*%llu*%llu != input numel %llu", (unsigned long long)o,
                   (unsigned long long)n, (unsigned long long)in, (unsigned long long)x->numel);
    ipu__rfam_plan *p = ipu__calloc(1, sizeof *p);
    if (!p) return ipu__fail(IPU_ERR_NOMEM, "out of memory allocating an instruction plan");
    ipu_status st = IPU_OK;
    bool reduces = op == IPU_OP_REDUCE || op == IPU_OP_ARG_REDUCE;
    switch (op) {
        case IPU_OP_REDUCE: {
            int64_t fn = a[0];
            bool ok = fn == IPU__RED_MAX || fn == IPU__RED_MIN
                          ? is_ordered(dt) || dt == IPU_DTYPE_BOOL
                      : fn == IPU__RED_LOG_SUM || fn == IPU__RED_LOG_SUM_EXP ? is_float(dt)
                                                                               : is_arith(dt);
            if (fn < 0 || fn >= IPU__RED_COUNT)
                st = bad(v, "unknown reduce function %lld", (long long)fn);
            else if (!ok)
                st = bad(v, "reduce function %s does not take dtype %s", ipu_reduce_fn_name((int)fn),
                         dt_str(dt));
            p->fn = (int)fn;
            break;
        }
        case IPU_OP_ARG_REDUCE:
            if (!is_ordered(dt)) st = bad(v, "dtype %s is not supported", dt_str(dt));
            else if (y->desc.dtype != IPU_DTYPE_INT64)
                st = bad(v, "output dtype %s, expected int64", dt_str(y->desc.dtype));
            if (!st) st = flag(v, 0, "is_min");
            if (!st) st = flag(v, 1, "select_last_index");
            p->is_min = (int)a[0];
            p->last = (int)a[1];
            break;
        case IPU_OP_CUMSUM:
        case IPU_OP_CUMPROD:
            if (!is_arith(dt) && dt != IPU_DTYPE_UINT32)
                st = bad(v, "dtype %s is not supported", dt_str(dt));
            if (!st) st = flag(v, 3, "exclusive");
            if (!st) st = flag(v, 4, "reverse");
            p->exclusive = (int)a[3];
            p->reverse = (int)a[4];
            break;
        case IPU_OP_TOPK: {
            const ipu__tensor *yi = &v->e->tensors[ins->out[1]];
            uint64_t k = (uint64_t)a[3], okn;
            if (!is_ordered(dt)) st = bad(v, "dtype %s is not supported", dt_str(dt));
            else if (yi->desc.dtype != IPU_DTYPE_INT64)
                st = bad(v, "indices dtype %s, expected int64", dt_str(yi->desc.dtype));
            else if (a[3] < 1 || k > n)
                st = bad(v, "k = %lld outside [1, n = %llu]", (long long)a[3],
                         (unsigned long long)n);
            else if (!same_shape(y, yi))
                st = bad(v, "values y%s and indices%s differ in shape", shape_str(s1, sizeof s1, y),
                         shape_str(s2, sizeof s2, yi));
            else if (!ipu__mul_u64(on, k, &okn) || okn != y->numel)
                st = bad(v, "outer*k*inner = %llu != output numel %llu",
                         (unsigned long long)(on * k), (unsigned long long)y->numel);
            if (!st) st = flag(v, 4, "largest");
            if (!st) st = flag(v, 5, "sorted");
            p->k = a[3];
            p->largest = (int)a[4];
            break;
        }
        default: /* LOG_SOFTMAX, HARDMAX */
            if (!is_float(dt)) st = bad(v, "dtype %s is not float32/float16", dt_str(dt));
            break;
    }
    if (!st && reduces && on != y->numel)
        st = bad(v, "outer*inner = %llu != output numel %llu", (unsigned long long)on,
                 (unsigned long long)y->numel);
    if (!st && !reduces && op != IPU_OP_TOPK && !same_shape(x, y))
        st = bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, y),
                 shape_str(s2, sizeof s2, x));
    if (st) {
        ipu__free(p);
        return st;
    }
    p->dtype = dt;
    p->outer = (int64_t)o;
    p->n = (int64_t)n;
    p->inner = (int64_t)in;
    p->nib = (int64_t)ceil_div(in, (uint64_t)IPU__RED_IB);
    p->hdr.work = op == IPU_OP_TOPK ? (size_t)on : (size_t)(o * (uint64_t)p->nib);
    p->hdr.fn = ipu__select_kernel(op, dt);
    ins->plan = p;
    return IPU_OK;
}
