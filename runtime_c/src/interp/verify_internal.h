/* Internal to the verifier (verify.c, verify_conv.c): the context of the instruction being
 * verified and the helpers that report on it. */
#ifndef IPU_VERIFY_INTERNAL_H
#define IPU_VERIFY_INTERNAL_H

#include "interp.h"
#include "kernels/kernels.h"
#include "prepack.h"

typedef struct vctx {
    const ipu_executable *e;
    const ipu__instr *ins;
    uint32_t prog, idx;
    const char *opname;
} vctx;

/* IPU_ERR_BAD_PROGRAM with the program id, instruction index and opcode name. */
__attribute__((format(printf, 2, 3))) ipu_status ipu__vbad(const vctx *v, const char *fmt, ...);
/* "[2,3,4]" (truncated with "..." if long). */
const char *ipu__shape_str(char *buf, size_t cap, const ipu__tensor *t);

/* The packed buffer for `slot` of the instruction being verified (prepack.h): mapped from the
 * container's packed blob when it has a matching entry, else allocated and filled by fn(ctx). */
static inline ipu_status ipu__vpacked(const vctx *v, uint32_t slot, const ipu__pack_tag *tag,
                                      size_t size, ipu__pack_fn fn, const void *ctx,
                                      const void **out) {
    return ipu__packed_operand(v->e, v->prog, v->idx, slot, tag, size, fn, ctx, out);
}

/* Short names used throughout the verifier. */
#define bad(...) ipu__vbad(__VA_ARGS__)
#define shape_str(...) ipu__shape_str(__VA_ARGS__)

/* The `activation` attribute of CONV2D, GEMM and SCALE_SHIFT: a value of ipu_fns.def's IPU_ACT
 * table (its values are 0 .. count - 1). */
static inline ipu_status ipu__vact(const vctx *v, int64_t act) {
    if (act >= 0 && act < IPU__ACT_COUNT) return IPU_OK;
    /* "0 (NONE), 1 (RELU), ": the table spelled out by ipu_fns.def itself */
#define IPU_ACT(name, value) #value " (" #name "), "
    static const char table[] =
#include "ipu/ipu_fns.def"
        "";
#undef IPU_ACT
    return bad(v, "activation must be one of %sgot %lld", table, (long long)act);
}

ipu_status ipu__verify_conv2d(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins);
ipu_status ipu__verify_pool2d(const vctx *v, const ipu__tensor *x, const ipu__tensor *y,
                              ipu__instr *ins);
/* verify_reduce.c: REDUCE, ARG_REDUCE, CUMSUM, TOPK, LOG_SOFTMAX, HARDMAX. */
ipu_status ipu__verify_reduce(const vctx *v, const ipu__tensor *x, ipu__instr *ins);

/* verify_gather.c: GATHER, GATHER_ELEMENTS, GATHER_ND, SCATTER_ELEMENTS, SCATTER_ND (their
 * indices are int32/int64 whatever the data dtype: exempt from the same-dtype rule). */
static inline bool ipu__is_gather_op(ipu_opcode op) {
    return op == IPU_OP_GATHER || op == IPU_OP_GATHER_ELEMENTS || op == IPU_OP_GATHER_ND ||
           op == IPU_OP_SCATTER_ELEMENTS || op == IPU_OP_SCATTER_ND;
}
#define IPU__VGATHER(name)                                                                  \
    ipu_status name(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y, \
                    ipu__instr *ins)
IPU__VGATHER(ipu__verify_gather);
IPU__VGATHER(ipu__verify_gather_elements);
IPU__VGATHER(ipu__verify_gather_nd);
IPU__VGATHER(ipu__verify_scatter_elements);
IPU__VGATHER(ipu__verify_scatter_nd);
#undef IPU__VGATHER
ipu_status ipu__verify_reindex(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                               ipu__instr *ins);
ipu_status ipu__verify_interp(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins);

#endif
