/* What the plan functions share (verify_internal.h): the error report naming the instruction,
 * shapes as text, and broadcast strides and plans (ADD/SUB/MUL/DIV, RELU, EXPAND, BINARY,
 * WHERE, MATMUL, TRANSPOSE). The generic rules are in verify_ops.c; each plan function is in
 * the kernel file of its family (kernels/). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "interp.h"
#include "kernels/eltwise.h"
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

uint32_t ipu__vcollapse(uint32_t nd, int64_t *shape, int64_t *s1, int64_t *s2) {
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

void ipu__vbcast_strides(const ipu__tensor *t, uint32_t skip, uint32_t nd, const int64_t *ys,
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

ipu_status ipu__vcheck_bcast(const vctx *v, const ipu__tensor *a, const ipu__tensor *b,
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

ipu_status ipu__vplan_bcast(const vctx *v, const ipu__tensor *a, const ipu__tensor *b,
                            const ipu__tensor *y, ipu__instr *ins) {
    ipu__bcast_plan *p;
    p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    uint32_t nd = y->desc.ndim;
    memcpy(p->shape, y->desc.dims, sizeof p->shape);
    ipu__vbcast_strides(a, 0, nd, y->desc.dims, p->sa);
    if (b) ipu__vbcast_strides(b, 0, nd, y->desc.dims, p->sb);
    p->ndim = ipu__vcollapse(nd, p->shape, p->sa, b ? p->sb : NULL);
    p->numel = y->numel;
    p->esize = (uint32_t)ipu_dtype_size(y->desc.dtype);
    p->hdr.work = (size_t)ceil_div(y->numel, IPU__ELT_BLOCK);
    p->hdr.fn = ipu__select_kernel(ins->op, y->desc.dtype);
    ins->plan = p;
    (void)v;
    return IPU_OK;
}
