/* Internal to the verifier (verify*.c): the context of the instruction being
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

/* The plan function of every opcode (ipu_ops.def's `plan` column): checks what the generic
 * rules (verify_ops.c) leave to it and sets ins->plan. in[]: the instruction's input tensors,
 * y: its first output. */
typedef ipu_status (*ipu__verify_fn)(const vctx *v, const ipu__tensor *const *in,
                                     const ipu__tensor *y, ipu__instr *ins);
#define IPU_OP(NAME, value, str, mi, ma, no, na, na2, dt, inp, fl, plan, ks, k) \
    ipu_status ipu__verify_##plan(const vctx *v, const ipu__tensor *const *in,  \
                                  const ipu__tensor *y, ipu__instr *ins);
#include "ipu/ipu_ops.def"
#undef IPU_OP

#endif
