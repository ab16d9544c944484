/* The verifier's generic rules, driven by the opcode table (ipu/ipu_ops.def): operand counts,
 * tensor indices, TENSOR_DATA writes, output/input overlap, the attribute count, the output
 * dtype rule and same-dtype inputs; then the opcode's plan function (in its family's kernel
 * file, kernels/) checks what is particular to it and builds its kernel plan. */
#include "interp.h"
#include "kernels/kernels.h"
#include "verify_internal.h"

enum { IPU__NA_NDIM = -1, IPU__NA_ANY = -2 };
typedef enum { DT_ANY, DT_ARITH, DT_NUMERIC, DT_FLOAT } dtype_rule;
typedef enum { IN_SAME, IN_MIXED } input_rule;
typedef enum { FL_NONE, FL_LOAD, FL_ALIAS } op_flag;

typedef struct op_rule {
    const char *upper; /* NULL: no such opcode */
    uint32_t min_in, max_in, n_out;
    int attrs, attrs_alt;
    dtype_rule dtype;
    input_rule inputs;
    op_flag flag;
    ipu__verify_fn plan;
} op_rule;

static const op_rule RULES[] = {
#define IPU_OP(NAME, value, str, mi, ma, no, na, na2, dt, inp, fl, plan, ks, k) \
    [value] = {#NAME, mi, ma, no, na, na2, DT_##dt, IN_##inp, FL_##fl, ipu__verify_##plan},
#include "ipu/ipu_ops.def"
#undef IPU_OP
};
#define N_RULES (sizeof RULES / sizeof RULES[0])

static ipu_status check_dtype(const vctx *v, dtype_rule rule, ipu_dtype dt) {
    switch (rule) {
        case DT_ARITH:
            if (is_float(dt) || is_int(dt)) return IPU_OK;
            return bad(v, "dtype %s is not numeric", dt_str(dt));
        case DT_NUMERIC:
            if (is_float(dt) || dt == IPU_DTYPE_INT32 || dt == IPU_DTYPE_INT64) return IPU_OK;
            return bad(v, "dtype %s is not numeric", dt_str(dt));
        case DT_FLOAT:
            if (is_float(dt)) return IPU_OK;
            return bad(v, "dtype %s is not float32/float16", dt_str(dt));
        default: return IPU_OK;
    }
}

static bool overlaps(const ipu__tensor *a, const ipu__tensor *b) {
    if (a->loc != IPU_LOC_ARENA || b->loc != IPU_LOC_ARENA) return false;
    if (a->desc.nbytes == 0 || b->desc.nbytes == 0) return false;
    return a->offset < b->offset + b->desc.nbytes && b->offset < a->offset + a->desc.nbytes;
}

ipu_status ipu__verify_instr(const ipu_executable *e, uint32_t program_id, int is_load,
                             uint32_t index, ipu__instr *ins) {
    vctx vc = {e, ins, program_id, index, ipu_opcode_name(ins->op)}, *v = &vc;
    ipu__free(ins->plan);
    ins->plan = NULL;
    const op_rule *r = (unsigned)ins->op < N_RULES ? &RULES[ins->op] : NULL;
    if (!r || !r->upper) {
        vc.opname = "?";
        return bad(v, "unknown opcode %u", (unsigned)ins->op);
    }
    if (ins->n_in < r->min_in || ins->n_in > r->max_in)
        return bad(v, "%u inputs, expected %u..%u", ins->n_in, r->min_in, r->max_in);
    if (ins->n_out != r->n_out) return bad(v, "%u outputs, expected %u", ins->n_out, r->n_out);
    uint32_t nt = e->info.num_tensors;
    const ipu__tensor *in[255];
    for (uint32_t i = 0; i < ins->n_in; i++) {
        if (ins->in[i] >= nt)
            return bad(v, "input %u: tensor index %u out of range (%u tensors)", i, ins->in[i], nt);
        in[i] = &e->tensors[ins->in[i]];
    }
    for (uint32_t o = 0; o < ins->n_out; o++)
        if (ins->out[o] >= nt)
            return bad(v, "output %u: tensor index %u out of range (%u tensors)", o, ins->out[o],
                       nt);
    const ipu__tensor *y = &e->tensors[ins->out[0]];
    if (r->flag == FL_LOAD) {
        if (!is_load) return bad(v, "%s outside the Load program", r->upper);
        if (y->loc != IPU_LOC_TENSOR_DATA)
            return bad(v, "tensor %u is not a TENSOR_DATA tensor", ins->out[0]);
    }
    /* every output in the arena (but a LOAD opcode's), disjoint from the inputs and from each
     * other (TOPK has two) */
    for (uint32_t o = 0; o < ins->n_out; o++) {
        const ipu__tensor *yo = &e->tensors[ins->out[o]];
        if (r->flag != FL_LOAD && yo->loc != IPU_LOC_ARENA)
            return bad(v, "writes TENSOR_DATA tensor %u", ins->out[o]);
        for (uint32_t i = 0; i < ins->n_in; i++) {
            if (!overlaps(in[i], yo)) continue;
            if (r->flag == FL_ALIAS && in[i]->offset == yo->offset &&
                in[i]->desc.nbytes == yo->desc.nbytes)
                continue;
            return bad(v, "output tensor %u overlaps input %u (tensor %u)", ins->out[o], i,
                       ins->in[i]);
        }
        for (uint32_t q = 0; q < o; q++)
            if (ins->out[q] == ins->out[o] || overlaps(&e->tensors[ins->out[q]], yo))
                return bad(v, "outputs %u and %u overlap", q, o);
    }
    if (r->attrs != IPU__NA_ANY) {
        uint32_t want = r->attrs == IPU__NA_NDIM                ? in[0]->desc.ndim
                        : ins->n_attr == (uint32_t)r->attrs_alt ? (uint32_t)r->attrs_alt
                                                                : (uint32_t)r->attrs;
        if (ins->n_attr != want) return bad(v, "%u attributes, expected %u", ins->n_attr, want);
    }
    ipu_dtype dt = y->desc.dtype;
    ipu_status st = check_dtype(v, r->dtype, dt);
    if (st) return st;
    if (r->inputs == IN_SAME)
        for (uint32_t i = 0; i < ins->n_in; i++)
            if (in[i]->desc.dtype != dt)
                return bad(v, "input %u has dtype %s, output %s", i, dt_str(in[i]->desc.dtype),
                           dt_str(dt));
    return r->plan(v, in, y, ins);
}
