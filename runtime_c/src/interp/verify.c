/* Instruction verifier: checks one instruction against docs/bytecode.md (operand counts from
 * ipu_ops.def, tensor indices, dtypes, shapes, attributes, no writes to TENSOR_DATA tensors, no
 * output/input overlap) and builds the kernel plan (kernels/eltwise.h, matmul.h, reduce.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "interp.h"
#include "kernels/eltwise.h"
#include "kernels/matmul.h"
#include "kernels/reduce.h"
#include "verify_internal.h"

ipu_status(ipu__vbad)(const vctx *v, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ipu__fail(IPU_ERR_BAD_PROGRAM, "program %u instruction %u (%s): %s", v->prog, v->idx,
                     v->opname, msg);
}

/* "[2,3,4]" (truncated with "..." if long). */
const char *(ipu__shape_str)(char *buf, size_t cap, const ipu__tensor *t) {
    size_t n = 0;
    buf[n++] = '[';
    for (uint32_t d = 0; d < t->desc.ndim && n + 24 < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ",%lld" : "%lld", (long long)t->desc.dims[d]);
    if (n + 2 <= cap) {
        buf[n++] = ']';
        buf[n] = '\0';
    } else {
        buf[cap - 1] = '\0';
    }
    return buf;
}

static const char *dt_str(ipu_dtype t) {
    const char *s = ipu_dtype_name(t);
    return s ? s : "?";
}

static bool is_float(ipu_dtype t) { return t == IPU_DTYPE_FLOAT32 || t == IPU_DTYPE_FLOAT16; }
static bool is_uint(ipu_dtype t) {
    return t == IPU_DTYPE_UINT8 || t == IPU_DTYPE_UINT16 || t == IPU_DTYPE_UINT32 ||
           t == IPU_DTYPE_UINT64;
}
static bool is_sint(ipu_dtype t) {
    return t == IPU_DTYPE_INT8 || t == IPU_DTYPE_INT16 || t == IPU_DTYPE_INT32 ||
           t == IPU_DTYPE_INT64;
}
static bool is_int(ipu_dtype t) { return is_sint(t) || is_uint(t); }
/* The element-wise family's "numeric": floats and every integer type. */
static bool is_arith(ipu_dtype t) { return is_float(t) || is_int(t); }
static bool is_castable(ipu_dtype t) { return is_arith(t) || t == IPU_DTYPE_BOOL; }

static bool same_shape(const ipu__tensor *a, const ipu__tensor *b) {
    if (a->desc.ndim != b->desc.ndim) return false;
    for (uint32_t d = 0; d < a->desc.ndim; d++)
        if (a->desc.dims[d] != b->desc.dims[d]) return false;
    return true;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

static void *alloc_plan(size_t size) { return ipu__calloc(1, size); }
static ipu_status plan_nomem(void) {
    return ipu__fail(IPU_ERR_NOMEM, "out of memory allocating an instruction plan");
}

/* Drop size-1 dims and merge dims that are contiguous in every stride array (s2 may be NULL). */
static uint32_t collapse(uint32_t nd, int64_t *shape, int64_t *s1, int64_t *s2) {
    uint32_t o = 0;
    for (uint32_t d = 0; d < nd; d++) {
        if (shape[d] == 1) continue;
        if (o > 0 && s1[o - 1] == s1[d] * shape[d] && (!s2 || s2[o - 1] == s2[d] * shape[d])) {
            shape[o - 1] *= shape[d];
            s1[o - 1] = s1[d];
            if (s2) s2[o - 1] = s2[d];
        } else {
            shape[o] = shape[d];
            s1[o] = s1[d];
            if (s2) s2[o] = s2[d];
            o++;
        }
    }
    if (o == 0) {
        shape[0] = 1;
        s1[0] = 0;
        if (s2) s2[0] = 0;
        o = 1;
    }
    return o;
}

/* Element strides of `t`'s dims right-aligned to an `nd`-dim output of shape `ys` (0 where t
 * broadcasts); t's dims are known to broadcast. First `skip` trailing dims of t excluded. */
static void bcast_strides(const ipu__tensor *t, uint32_t skip, uint32_t nd, const int64_t *ys,
                          int64_t *st) {
    uint32_t tn = t->desc.ndim - skip;
    int64_t s = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint32_t j = nd - 1 - i;
        if (i < tn) {
            int64_t dim = t->desc.dims[tn - 1 - i];
            st[j] = (dim == 1 && ys[j] != 1) ? 0 : s;
            s *= dim;
        } else {
            st[j] = 0;
        }
    }
}

/* Broadcast the leading (ndim - skip) dims of a and b into y's leading dims (numpy rules). */
static ipu_status check_bcast(const vctx *v, const ipu__tensor *a, const ipu__tensor *b,
                              const ipu__tensor *y, uint32_t skip, const char *what) {
    char s1[160], s2[160], s3[160];
    uint32_t an = a->desc.ndim - skip, bn = b->desc.ndim - skip, yn = y->desc.ndim - skip;
    uint32_t nd = an > bn ? an : bn;
    for (uint32_t i = 0; i < nd; i++) {
        int64_t da = i < an ? a->desc.dims[an - 1 - i] : 1;
        int64_t db = i < bn ? b->desc.dims[bn - 1 - i] : 1;
        if (da != db && da != 1 && db != 1)
            return bad(v, "%s do not broadcast: a%s vs b%s", what, shape_str(s1, sizeof s1, a),
                       shape_str(s2, sizeof s2, b));
    }
    if (yn != nd)
        return bad(v, "output %s has %u dims, expected %u: a%s b%s y%s", what, yn, nd,
                   shape_str(s1, sizeof s1, a), shape_str(s2, sizeof s2, b),
                   shape_str(s3, sizeof s3, y));
    for (uint32_t i = 0; i < nd; i++) {
        int64_t da = i < an ? a->desc.dims[an - 1 - i] : 1;
        int64_t db = i < bn ? b->desc.dims[bn - 1 - i] : 1;
        int64_t dy = y->desc.dims[yn - 1 - i], want = da == 1 ? db : da;
        if (dy != want)
            return bad(v, "output %s y%s is not the broadcast of a%s and b%s", what,
                       shape_str(s3, sizeof s3, y), shape_str(s1, sizeof s1, a),
                       shape_str(s2, sizeof s2, b));
    }
    return IPU_OK;
}

static ipu_status plan_bcast(const vctx *v, const ipu__tensor *a, const ipu__tensor *b,
                             const ipu__tensor *y, ipu__instr *ins) {
    ipu__bcast_plan *p;
    p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    uint32_t nd = y->desc.ndim;
    memcpy(p->shape, y->desc.dims, sizeof p->shape);
    bcast_strides(a, 0, nd, y->desc.dims, p->sa);
    if (b) bcast_strides(b, 0, nd, y->desc.dims, p->sb);
    p->ndim = collapse(nd, p->shape, p->sa, b ? p->sb : NULL);
    p->numel = y->numel;
    p->esize = (uint32_t)ipu_dtype_size(y->desc.dtype);
    p->hdr.work = (size_t)ceil_div(y->numel, IPU__ELT_BLOCK);
    p->hdr.fn = ipu__select_kernel(ins->op, y->desc.dtype);
    ins->plan = p;
    (void)v;
    return IPU_OK;
}

typedef struct mm_pack {
    const ipu__mm_plan *plan;
    const void *b;
    uint64_t nmat;
    int nr;
} mm_pack;

static void pack_mm_weights(const void *ctx, void *out) {
    const mm_pack *c = ctx;
    ipu__mm_pack_b(c->plan, c->b, c->nmat, c->nr, out);
}

/* The blocking of a MATMUL/GEMM plan, and its B packed (as float32) once when it is stored in the
 * executable (used while the session does not bind another tensor in its place): mapped from
 * the PopEF's packed blob when it has it, else packed here (prepack.h). */
static ipu_status mm_finish(const vctx *v, const ipu__mm_plan *t, const ipu__tensor *b,
                            ipu__instr *ins) {
    ipu__mm_plan *p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    *p = *t;
    ipu__mm_plan_blocks(p);
    p->hdr.fn = ipu__select_kernel(ins->op, p->dtype);
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    uint64_t kn = (uint64_t)p->K * (uint64_t)p->N, nmat = kn ? b->numel / kn : 0;
    size_t nf = 0;
    if (b->loc == IPU_LOC_TENSOR_DATA && v->e->tensor_data && p->hdr.work > 0 &&
        b->desc.dtype == p->dtype && nmat * kn <= ((uint64_t)1 << 40))
        nf = ipu__mm_packed_floats(p, nmat, u.nr);
    if (nf) {
        mm_pack mp = {p, v->e->tensor_data + b->offset, nmat, u.nr};
        /* version 1 of ipu__mm_pack_b's bytes (ipu__sgemm_pack_b_all): bump it when they change;
         * geom[2]: packed from float16 */
        ipu__pack_tag tag = {IPU__PACK_SGEMM_B,
                             1,
                             (uint32_t)u.isa,
                             {(uint32_t)u.nr, IPU__SGEMM_KC,
                              (uint32_t)(p->dtype == IPU_DTYPE_FLOAT16), 0}};
        const void *dst;
        ipu_status st = ipu__vpacked(v, 1, &tag, nf * sizeof(float), pack_mm_weights, &mp, &dst);
        if (st == IPU_OK) {
            p->packed = dst;
            p->packed_nr = u.nr;
            p->packed_mat = (int64_t)(nf / nmat);
        } else if (st == IPU_ERR_NOMEM) { /* no room for a packed copy: pack per call instead */
            ipu__clear_error();
        } else {
            ipu__free(p);
            return st;
        }
    }
    /* mm_run packs B once for a run of items of one column block (unless packed here) */
    p->hdr.contiguous = p->path == IPU__MM_PACKED && !p->packed && p->mblocks > 1;
    ins->plan = p;
    return IPU_OK;
}

/* MATMUL: a[..., M, K] @ b[..., K, N], batch dims broadcast. */
ipu_status ipu__verify_matmul(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    const ipu__tensor *a = in[0], *b = in[1];
    char s1[160], s2[160], s3[160];
    if (a->desc.ndim < 2 || b->desc.ndim < 2)
        return bad(v, "operands must have ndim >= 2: a%s b%s", shape_str(s1, sizeof s1, a),
                   shape_str(s2, sizeof s2, b));
    uint32_t an = a->desc.ndim, bn = b->desc.ndim;
    int64_t M = a->desc.dims[an - 2], K = a->desc.dims[an - 1];
    int64_t K2 = b->desc.dims[bn - 2], N = b->desc.dims[bn - 1];
    if (K != K2)
        return bad(v, "inner dims differ: a[...,K=%lld] vs b[K=%lld,...]", (long long)K,
                   (long long)K2);
    ipu_status st = check_bcast(v, a, b, y, 2, "batch dims");
    if (st) return st;
    uint32_t yn = y->desc.ndim;
    if (y->desc.dims[yn - 2] != M || y->desc.dims[yn - 1] != N)
        return bad(v, "output y%s, expected [...,%lld,%lld]", shape_str(s3, sizeof s3, y),
                   (long long)M, (long long)N);
    ipu__mm_plan pl = {0}, *p = &pl;
    uint32_t nb = yn - 2;
    memcpy(p->bshape, y->desc.dims, sizeof(int64_t) * nb);
    bcast_strides(a, 2, nb, y->desc.dims, p->abs);
    bcast_strides(b, 2, nb, y->desc.dims, p->bbs);
    uint64_t batch = 1;
    for (uint32_t d = 0; d < nb; d++) batch *= (uint64_t)y->desc.dims[d]; /* <= y.numel or 0 */
    p->bdim = nb ? collapse(nb, p->bshape, p->abs, p->bbs) : 0;
    if (nb == 0) p->bshape[0] = 1;
    p->dtype = y->desc.dtype;
    p->M = M;
    p->N = N;
    p->K = K;
    p->batch = batch;
    return mm_finish(v, p, b, ins);
}

ipu_status ipu__verify_gemm(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins) {
    char s1[160], s2[160], s3[160];
    const ipu__tensor *a = in[0], *b = in[1], *c = ins->n_in == 3 ? in[2] : NULL;
    if (a->desc.ndim != 2 || b->desc.ndim != 2)
        return bad(v, "A and B must be 2-D: A%s B%s", shape_str(s1, sizeof s1, a),
                   shape_str(s2, sizeof s2, b));
    for (int i = 0; i < 2; i++)
        if (ins->attr[i] != 0 && ins->attr[i] != 1)
            return bad(v, "%s must be 0 or 1, got %lld", i ? "transB" : "transA",
                       (long long)ins->attr[i]);
    int ta = (int)ins->attr[0], tb = (int)ins->attr[1];
    int64_t act = ins->n_attr == 5 ? ins->attr[4] : IPU__ACT_NONE;
    ipu_status st = ipu__vact(v, act);
    if (st) return st;
    int64_t M = a->desc.dims[ta], K = a->desc.dims[1 - ta];
    int64_t K2 = b->desc.dims[tb], N = b->desc.dims[1 - tb];
    if (K != K2)
        return bad(v, "inner dims differ: op(A)[M=%lld,K=%lld] vs op(B)[K=%lld,N=%lld]",
                   (long long)M, (long long)K, (long long)K2, (long long)N);
    if (y->desc.ndim != 2 || y->desc.dims[0] != M || y->desc.dims[1] != N)
        return bad(v, "output Y%s, expected [%lld,%lld]", shape_str(s3, sizeof s3, y), (long long)M,
                   (long long)N);
    int64_t cr = 1, cc = 1;
    if (c) {
        if (c->desc.ndim > 2)
            return bad(v, "C%s has more than 2 dims", shape_str(s1, sizeof s1, c));
        if (c->desc.ndim == 2) cr = c->desc.dims[0];
        if (c->desc.ndim >= 1) cc = c->desc.dims[c->desc.ndim - 1];
        if ((cr != 1 && cr != M) || (cc != 1 && cc != N))
            return bad(v, "C%s does not broadcast to [%lld,%lld]", shape_str(s1, sizeof s1, c),
                       (long long)M, (long long)N);
    }
    ipu__mm_plan pl = {0}, *p = &pl;
    double alpha, beta;
    memcpy(&alpha, &ins->attr[2], sizeof alpha);
    memcpy(&beta, &ins->attr[3], sizeof beta);
    p->dtype = y->desc.dtype;
    p->M = M;
    p->N = N;
    p->K = K;
    p->batch = 1;
    p->bdim = 0;
    p->bshape[0] = 1;
    p->is_gemm = 1;
    p->act = (int)act;
    p->trans_a = ta;
    p->trans_b = tb;
    p->has_c = c != NULL;
    p->alpha = (float)alpha;
    p->beta = (float)beta;
    p->c_rs = cr == 1 ? 0 : cc;
    p->c_cs = cc == 1 ? 0 : 1;
    return mm_finish(v, p, b, ins);
}

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

/* REDUCE_SUM, REDUCE_MEAN (y [outer, inner]) and SOFTMAX (`softmax`: y of x's shape): attrs
 * outer, reduce (axis_len), inner. */
static ipu_status plan_red(const vctx *v, const ipu__tensor *x, const ipu__tensor *y,
                           ipu__instr *ins, bool softmax) {
    for (int i = 0; i < 3; i++)
        if (ins->attr[i] < 0)
            return bad(v, "attribute %d is negative (%lld)", i, (long long)ins->attr[i]);
    uint64_t o = (uint64_t)ins->attr[0], r = (uint64_t)ins->attr[1], n = (uint64_t)ins->attr[2];
    uint64_t orn, on;
    if (!ipu__mul_u64(o, n, &on) || !ipu__mul_u64(on, r, &orn))
        return bad(v, "attributes %llu x %llu x %llu overflow", (unsigned long long)o,
                   (unsigned long long)r, (unsigned long long)n);
    if (orn != x->numel)
        return bad(v, "outer*%s*inner = %llu != input numel %llu", softmax ? "axis_len" : "reduce",
                   (unsigned long long)orn, (unsigned long long)x->numel);
    if (softmax) {
        if (!same_shape(x, y)) return bad(v, "output shape differs from input shape");
    } else if (on != y->numel) {
        return bad(v, "outer*inner = %llu != output numel %llu", (unsigned long long)on,
                   (unsigned long long)y->numel);
    }
    ipu__red_plan *p;
    p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    p->dtype = y->desc.dtype;
    p->outer = (int64_t)o;
    p->red = (int64_t)r;
    p->inner = (int64_t)n;
    p->nib = (int64_t)ceil_div(n, (uint64_t)IPU__RED_IB);
    p->hdr.work = (on == 0 || (softmax && r == 0)) ? 0 : (size_t)(o * (uint64_t)p->nib);
    p->hdr.fn = ipu__select_kernel(ins->op, y->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}

ipu_status ipu__verify_red(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                           ipu__instr *ins) {
    return plan_red(v, in[0], y, ins, false);
}

ipu_status ipu__verify_softmax(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                               ipu__instr *ins) {
    return plan_red(v, in[0], y, ins, true);
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
    p->ndim = collapse(nd, p->shape, p->xs, NULL);
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

/* SCALE_SHIFT: attrs axis, activation; scale and shift have x.dims[axis] elements. */
ipu_status ipu__verify_scale_shift(const vctx *v, const ipu__tensor *const *in,
                                   const ipu__tensor *y, ipu__instr *ins) {
    char s1[160], s2[160];
    const ipu__tensor *x = in[0];
    int64_t axis = ins->attr[0], act = ins->attr[1];
    if (!same_shape(x, y))
        return bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, y),
                   shape_str(s2, sizeof s2, x));
    if (axis < 0 || axis >= (int64_t)x->desc.ndim)
        return bad(v, "axis %lld outside [0, %u)", (long long)axis, x->desc.ndim);
    ipu_status st = ipu__vact(v, act);
    if (st) return st;
    uint64_t c = (uint64_t)x->desc.dims[axis], inner = 1;
    for (uint32_t i = 1; i < 3; i++)
        if (in[i]->numel != c)
            return bad(v, "%s has %llu elements, expected x.dims[%lld] = %llu",
                       i == 1 ? "scale" : "shift", (unsigned long long)in[i]->numel,
                       (long long)axis, (unsigned long long)c);
    for (uint32_t d = (uint32_t)axis + 1; d < x->desc.ndim; d++)
        if (!ipu__mul_u64(inner, (uint64_t)x->desc.dims[d], &inner))
            return bad(v, "x%s is too large", shape_str(s1, sizeof s1, x));
    ipu__affine_plan *p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    p->dtype = x->desc.dtype;
    p->numel = x->numel;
    p->c = c;
    p->inner = inner;
    p->relu = (int)act;
    p->hdr.work = (size_t)ceil_div(x->numel, IPU__ELT_BLOCK);
    p->hdr.fn = ipu__select_kernel(ins->op, p->dtype);
    ins->plan = p;
    return IPU_OK;
}

/* UNARY: attrs fn, p0, p1 (float64 bits for floats; CLIP bounds as integers for int dtypes). */
static bool unary_dtype_ok(int64_t fn, ipu_dtype dt) {
    switch (fn) {
        case IPU__UN_NOT: return dt == IPU_DTYPE_BOOL;
        case IPU__UN_NEG: return is_float(dt) || is_sint(dt);
        case IPU__UN_ABS:
        case IPU__UN_SIGN:
        case IPU__UN_CLIP:
        case IPU__UN_SHRINK: return is_arith(dt);
        case IPU__UN_BITWISE_NOT: return is_int(dt);
        default: return is_float(dt);
    }
}

ipu_status ipu__verify_unary(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                             ipu__instr *ins) {
    const ipu__tensor *x = in[0];
    char s1[160], s2[160];
    int64_t fn = ins->attr[0];
    ipu_dtype dt = x->desc.dtype;
    if (fn < 0 || fn >= IPU__UN_COUNT) return bad(v, "unknown unary function %lld", (long long)fn);
    if (!unary_dtype_ok(fn, dt))
        return bad(v, "unary function %lld does not take dtype %s", (long long)fn, dt_str(dt));
    ipu_dtype want = (fn == IPU__UN_ISNAN || fn == IPU__UN_ISINF) ? IPU_DTYPE_BOOL : dt;
    if (y->desc.dtype != want)
        return bad(v, "output dtype %s, expected %s", dt_str(y->desc.dtype), dt_str(want));
    if (!same_shape(x, y))
        return bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, y),
                   shape_str(s2, sizeof s2, x));
    ipu__unary_plan *p;
    if (!(p = alloc_plan(sizeof *p))) return plan_nomem();
    double d0, d1;
    memcpy(&d0, &ins->attr[1], sizeof d0);
    memcpy(&d1, &ins->attr[2], sizeof d1);
    p->fn = (int)fn;
    p->p0 = (float)d0;
    p->p1 = (float)d1;
    p->i0 = ins->attr[1];
    p->i1 = ins->attr[2];
    p->numel = y->numel;
    p->hdr.work = (size_t)ceil_div(y->numel, IPU__ELT_BLOCK);
    p->hdr.fn = ipu__select_kernel(ins->op, dt);
    ins->plan = p;
    return IPU_OK;
}

static bool binary_dtype_ok(int fn, ipu_dtype dt) {
    switch (fn) {
        case IPU__BIN_EQUAL: return is_arith(dt) || dt == IPU_DTYPE_BOOL;
        case IPU__BIN_AND:
        case IPU__BIN_OR:
        case IPU__BIN_XOR: return dt == IPU_DTYPE_BOOL;
        case IPU__BIN_BITWISE_AND:
        case IPU__BIN_BITWISE_OR:
        case IPU__BIN_BITWISE_XOR:
        case IPU__BIN_BITSHIFT_LEFT:
        case IPU__BIN_BITSHIFT_RIGHT: return is_int(dt);
        default: return is_arith(dt); /* POW, MIN, MAX, comparisons, MOD, FMOD, PRELU */
    }
}

/* BINARY and WHERE, once their dtypes are checked: every input broadcast to y; the plan's fn
 * is `fn`, its kernel chosen for dtype dt. */
static ipu_status plan_nary(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins, int fn, ipu_dtype dt) {
    char s1[160], s2[160];
    uint32_t n = ins->n_in, nd = y->desc.ndim;
    /* y must be exactly the broadcast of the inputs' shapes */
    uint32_t maxnd = 0;
    for (uint32_t k = 0; k < n; k++)
        if (in[k]->desc.ndim > maxnd) maxnd = in[k]->desc.ndim;
    bool ok = maxnd == nd;
    for (uint32_t i = 0; ok && i < nd; i++) {
        int64_t want = 1, dy = y->desc.dims[nd - 1 - i];
        for (uint32_t k = 0; ok && k < n; k++) {
            const ipu__tensor *t = in[k];
            int64_t d = i < t->desc.ndim ? t->desc.dims[t->desc.ndim - 1 - i] : 1;
            if (d != 1 && want != 1 && d != want) ok = false;
            if (d != 1) want = d;
        }
        ok = ok && dy == want;
    }
    if (!ok)
        return bad(v, "output y%s is not the broadcast of the inputs (first input %s)",
                   shape_str(s1, sizeof s1, y), shape_str(s2, sizeof s2, in[0]));
    ipu__nary_plan *p;
    if (!(p = alloc_plan(sizeof *p))) return plan_nomem();
    int64_t shape[IPU_MAX_DIMS];
    memcpy(shape, y->desc.dims, sizeof shape);
    for (uint32_t k = 0; k < n; k++) {
        bcast_strides(in[k], 0, nd, y->desc.dims, p->st[k]);
        p->ies[k] = (uint32_t)ipu_dtype_size(in[k]->desc.dtype);
    }
    /* collapse: drop size-1 dims, merge dims contiguous in every input */
    uint32_t o = 0;
    for (uint32_t d = 0; d < nd; d++) {
        if (shape[d] == 1) continue;
        bool merge = o > 0;
        for (uint32_t k = 0; merge && k < n; k++) merge = p->st[k][o - 1] == p->st[k][d] * shape[d];
        if (merge) {
            p->shape[o - 1] *= shape[d];
            for (uint32_t k = 0; k < n; k++) p->st[k][o - 1] = p->st[k][d];
        } else {
            p->shape[o] = shape[d];
            for (uint32_t k = 0; k < n; k++) p->st[k][o] = p->st[k][d];
            o++;
        }
    }
    if (o == 0) {
        p->shape[0] = 1;
        for (uint32_t k = 0; k < n; k++) p->st[k][0] = 0;
        o = 1;
    }
    p->ndim = o;
    p->n_in = n;
    p->fn = fn;
    p->yes = (uint32_t)ipu_dtype_size(y->desc.dtype);
    p->numel = y->numel;
    p->hdr.work = (size_t)ceil_div(y->numel, IPU__ELT_BLOCK);
    p->hdr.fn = ipu__select_kernel(ins->op, dt);
    ins->plan = p;
    return IPU_OK;
}

/* BINARY: attr fn; a and b of one dtype, y of it too or bool (comparisons). */
ipu_status ipu__verify_binary(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    ipu_dtype dt = in[1]->desc.dtype;
    if (ins->attr[0] < 0 || ins->attr[0] >= IPU__BIN_COUNT)
        return bad(v, "unknown binary function %lld", (long long)ins->attr[0]);
    int fn = (int)ins->attr[0];
    if (!binary_dtype_ok(fn, dt))
        return bad(v, "binary function %d does not take dtype %s", fn, dt_str(dt));
    ipu_dtype want = ipu__bin_is_cmp(fn) ? IPU_DTYPE_BOOL : dt;
    if (in[0]->desc.dtype != dt || y->desc.dtype != want)
        return bad(v, "dtypes %s, %s -> %s, expected %s, %s -> %s", dt_str(in[0]->desc.dtype),
                   dt_str(dt), dt_str(y->desc.dtype), dt_str(dt), dt_str(dt), dt_str(want));
    return plan_nary(v, in, y, ins, fn, dt);
}

/* WHERE (cond, x, z): cond bool, x, z and y of one dtype; the plan's fn is its element size. */
ipu_status ipu__verify_where(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                             ipu__instr *ins) {
    ipu_dtype dt = in[2]->desc.dtype;
    if (in[0]->desc.dtype != IPU_DTYPE_BOOL || in[1]->desc.dtype != dt || y->desc.dtype != dt ||
        !is_castable(dt))
        return bad(v, "dtypes (%s, %s, %s) -> %s, expected (bool, T, T) -> T",
                   dt_str(in[0]->desc.dtype), dt_str(in[1]->desc.dtype), dt_str(dt),
                   dt_str(y->desc.dtype));
    return plan_nary(v, in, y, ins, (int)ipu_dtype_size(dt), dt);
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

/* ADD, SUB, MUL, DIV: a and b broadcast to y. */
ipu_status ipu__verify_bcast(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                             ipu__instr *ins) {
    ipu_status st = check_bcast(v, in[0], in[1], y, 0, "shapes");
    if (st) return st;
    return plan_bcast(v, in[0], in[1], y, ins);
}

ipu_status ipu__verify_relu(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins) {
    char s1[160], s2[160];
    if (!same_shape(in[0], y))
        return bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, y),
                   shape_str(s2, sizeof s2, in[0]));
    return plan_bcast(v, in[0], NULL, y, ins);
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
    return plan_bcast(v, x, NULL, y, ins);
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
