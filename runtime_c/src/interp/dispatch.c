/* Opcode -> kernel. The verifier stores the selected kernel and the number of work items in each
 * instruction's plan; ipu__instr_work/ipu__instr_run read them. */
#include "interp.h"
#include "kernels/kernels.h"

#define BY_DTYPE(op, dt)                          \
    switch (dt) {                                 \
        case IPU_DTYPE_FLOAT32: return ipu__k_##op##_f32; \
        case IPU_DTYPE_FLOAT16: return ipu__k_##op##_f16; \
        case IPU_DTYPE_INT32: return ipu__k_##op##_i32;   \
        case IPU_DTYPE_INT64: return ipu__k_##op##_i64;   \
        default: return NULL;                     \
    }

/* BY_DTYPE plus the other integer types (the element-wise family: kernels/elt_types.h). */
#define BY_DTYPE_ALL(op, dt)                                \
    switch (dt) {                                           \
        case IPU_DTYPE_INT8: return ipu__k_##op##_i8;       \
        case IPU_DTYPE_UINT8: return ipu__k_##op##_u8;      \
        case IPU_DTYPE_INT16: return ipu__k_##op##_i16;     \
        case IPU_DTYPE_UINT16: return ipu__k_##op##_u16;    \
        case IPU_DTYPE_UINT32: return ipu__k_##op##_u32;    \
        case IPU_DTYPE_UINT64: return ipu__k_##op##_u64;    \
        default: break;                                     \
    }                                                       \
    BY_DTYPE(op, dt)

static int is_f(ipu_dtype dt) { return dt == IPU_DTYPE_FLOAT32 || dt == IPU_DTYPE_FLOAT16; }

ipu__kernel_fn ipu__select_kernel(ipu_opcode op, ipu_dtype dt) {
    switch (op) {
        case IPU_OP_BIND: return ipu__k_bind;
        case IPU_OP_COPY: return ipu__k_copy;
        case IPU_OP_ADD: BY_DTYPE_ALL(add, dt)
        case IPU_OP_SUB: BY_DTYPE_ALL(sub, dt)
        case IPU_OP_MUL: BY_DTYPE_ALL(mul, dt)
        case IPU_OP_DIV: BY_DTYPE_ALL(div, dt)
        case IPU_OP_RELU: BY_DTYPE_ALL(relu, dt)
        case IPU_OP_MATMUL: BY_DTYPE(matmul, dt)
        case IPU_OP_REDUCE_SUM: BY_DTYPE(reduce_sum, dt)
        case IPU_OP_REDUCE_MEAN: BY_DTYPE(reduce_mean, dt)
        case IPU_OP_GEMM:
            return dt == IPU_DTYPE_FLOAT32 ? ipu__k_gemm_f32
                   : dt == IPU_DTYPE_FLOAT16 ? ipu__k_gemm_f16 : NULL;
        case IPU_OP_SOFTMAX:
            return dt == IPU_DTYPE_FLOAT32 ? ipu__k_softmax_f32
                   : dt == IPU_DTYPE_FLOAT16 ? ipu__k_softmax_f16 : NULL;
        case IPU_OP_UNARY: /* dt: the input's dtype */
            if (dt == IPU_DTYPE_BOOL) return ipu__k_unary_b8;
            BY_DTYPE_ALL(unary, dt)
        case IPU_OP_BINARY: /* dt: the inputs' dtype */
            if (dt == IPU_DTYPE_BOOL) return ipu__k_binary_b8;
            BY_DTYPE_ALL(binary, dt)
        case IPU_OP_WHERE: return ipu__k_where;
        case IPU_OP_CONV2D: return is_f(dt) ? ipu__k_conv2d : NULL;
        case IPU_OP_POOL2D: return is_f(dt) ? ipu__k_pool2d : NULL;
        case IPU_OP_EXPAND: return ipu__k_expand;
        case IPU_OP_CONCAT: return ipu__k_concat;
        case IPU_OP_CAST: return ipu__k_cast;
        case IPU_OP_TRANSPOSE: return ipu__k_transpose;
        case IPU_OP_GATHER: case IPU_OP_GATHER_ND: return ipu__k_gather;
        case IPU_OP_GATHER_ELEMENTS: return ipu__k_gather_elements;
        case IPU_OP_SCATTER_ELEMENTS: return ipu__k_scatter_elements;
        case IPU_OP_SCATTER_ND: return ipu__k_scatter_nd;
        case IPU_OP_REDUCE: return ipu__k_reduce; /* dtype-generic: plans carry the dtype */
        case IPU_OP_ARG_REDUCE: return ipu__k_arg_reduce;
        case IPU_OP_CUMSUM: case IPU_OP_CUMPROD: return ipu__k_cumsum;
        case IPU_OP_TOPK: return ipu__k_topk;
        case IPU_OP_LOG_SOFTMAX: return ipu__k_log_softmax;
        case IPU_OP_HARDMAX: return ipu__k_hardmax;
        case IPU_OP_REINDEX: return ipu__k_reindex;
        case IPU_OP_INTERP: return is_f(dt) ? ipu__k_interp : NULL;
        case IPU_OP_SCALE_SHIFT: return is_f(dt) ? ipu__k_scale_shift : NULL;
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
    if (!f || !p || !p->fn)
        return ipu__fail(IPU_ERR_INTERNAL, "instruction has no verified plan");
    if (begin > end || end > p->work)
        return ipu__fail(IPU_ERR_INTERNAL, "work range [%zu, %zu) outside [0, %zu) (%s)", begin,
                         end, p->work, ipu_opcode_name(ins->op));
    if (begin == end) return IPU_OK;
    return p->fn(f, ins, begin, end, scratch);
}
