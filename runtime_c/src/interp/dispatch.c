/* Opcode -> kernel, from ipu_ops.def's kstyle and kernel columns. The verifier stores the
 * selected kernel and the number of work items in each instruction's plan;
 * ipu__instr_work/ipu__instr_run read them. */
#include "interp.h"
#include "kernels/kernels.h"

/* One selector per `kstyle` of ipu_ops.def (its comment lists them). */
#define IPU__KSEL_ONE(k) return ipu__k_##k;
#define IPU__KSEL_ONE_F(k) return is_f(dt) ? ipu__k_##k : NULL;
#define IPU__KSEL_F(k)                                  \
    return dt == IPU_DTYPE_FLOAT32   ? ipu__k_##k##_f32 \
           : dt == IPU_DTYPE_FLOAT16 ? ipu__k_##k##_f16 \
                                     : NULL;
#define IPU__KSEL_D4(k)                                  \
    switch (dt) {                                        \
        case IPU_DTYPE_FLOAT32: return ipu__k_##k##_f32; \
        case IPU_DTYPE_FLOAT16: return ipu__k_##k##_f16; \
        case IPU_DTYPE_INT32: return ipu__k_##k##_i32;   \
        case IPU_DTYPE_INT64: return ipu__k_##k##_i64;   \
        default: return NULL;                            \
    }
/* D4 plus the other integer types (the element-wise family: kernels/elt_types.h). */
#define IPU__KSEL_ALL(k)                                \
    switch (dt) {                                       \
        case IPU_DTYPE_INT8: return ipu__k_##k##_i8;    \
        case IPU_DTYPE_UINT8: return ipu__k_##k##_u8;   \
        case IPU_DTYPE_INT16: return ipu__k_##k##_i16;  \
        case IPU_DTYPE_UINT16: return ipu__k_##k##_u16; \
        case IPU_DTYPE_UINT32: return ipu__k_##k##_u32; \
        case IPU_DTYPE_UINT64: return ipu__k_##k##_u64; \
        default: break;                                 \
    }                                                   \
    IPU__KSEL_D4(k)
#define IPU__KSEL_ALL_B(k)                            \
    if (dt == IPU_DTYPE_BOOL) return ipu__k_##k##_b8; \
    IPU__KSEL_ALL(k)

static int is_f(ipu_dtype dt) { return dt == IPU_DTYPE_FLOAT32 || dt == IPU_DTYPE_FLOAT16; }

/* dt: the dtype the plan function passes (the output's, or the input's for UNARY, BINARY and
 * the gathers; dtype-generic kernels read theirs from the plan). */
ipu__kernel_fn ipu__select_kernel(ipu_opcode op, ipu_dtype dt) {
    switch (op) {
#define IPU_OP(NAME, value, str, mi, ma, no, na, na2, dtr, inp, fl, plan, ks, k) \
    case IPU_OP_##NAME: {                                                        \
        IPU__KSEL_##ks(k)                                                        \
    }
#include "ipu/ipu_ops.def"
#undef IPU_OP
        default: return NULL;
    }
}

size_t ipu__instr_work(const ipu_executable *e, const ipu__instr *ins) {
    (void)e;
    const ipu__plan *p = ins ? ins->plan : NULL;
    return p && p->fn ? p->work : 0;
}

bool ipu__instr_contiguous(const ipu__instr *ins) {
    const ipu__plan *p = ins ? ins->plan : NULL;
    return p && p->contiguous;
}

ipu_status ipu__instr_run(const ipu__frame *f, const ipu__instr *ins, size_t begin, size_t end,
                          void *scratch) {
    const ipu__plan *p = ins ? ins->plan : NULL;
    if (!f || !p || !p->fn) return ipu__fail(IPU_ERR_INTERNAL, "instruction has no verified plan");
    if (begin > end || end > p->work)
        return ipu__fail(IPU_ERR_INTERNAL, "work range [%zu, %zu) outside [0, %zu) (%s)", begin,
                         end, p->work, ipu_opcode_name(ins->op));
    if (begin == end) return IPU_OK;
    return p->fn(f, ins, begin, end, scratch);
}
