/* Internal to the verifier: the context of the instruction being verified, the helpers that
 * report on it and the ones every plan function shares. The generic rules are in verify_ops.c;
 * each plan function (ipu_ops.def's `plan` column) lives in the kernel file of its family, next
 * to the kernels that read its plan (kernels/eltwise.c, data.c, unary.c, binary.c, matmul.c,
 * reduce.c, reduce2.c, gather.c, reindex.c, conv_plan.c); verify.c holds the shared helpers. */
#ifndef IPU_VERIFY_INTERNAL_H
#define IPU_VERIFY_INTERNAL_H

#include <string.h>

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
static inline ipu_status ipu__vpacked(const vctx *v, uint32_t slot, const ipu__pack_src *src,
                                      const ipu__pack_tag *tag, size_t size, ipu__pack_fn fn,
                                      const void *ctx, const void **out) {
    return ipu__packed_operand(v->e, v->prog, v->idx, slot, src, tag, size, fn, ctx, out);
}

/* Short names used throughout the verifier. */
#define bad(...) ipu__vbad(__VA_ARGS__)
#define shape_str(...) ipu__shape_str(__VA_ARGS__)

static inline const char *dt_str(ipu_dtype t) {
    const char *s = ipu_dtype_name(t);
    return s ? s : "?";
}

static inline bool is_float(ipu_dtype t) {
    return t == IPU_DTYPE_FLOAT32 || t == IPU_DTYPE_FLOAT16;
}
static inline bool is_uint(ipu_dtype t) {
    return t == IPU_DTYPE_UINT8 || t == IPU_DTYPE_UINT16 || t == IPU_DTYPE_UINT32 ||
           t == IPU_DTYPE_UINT64;
}
static inline bool is_sint(ipu_dtype t) {
    return t == IPU_DTYPE_INT8 || t == IPU_DTYPE_INT16 || t == IPU_DTYPE_INT32 ||
           t == IPU_DTYPE_INT64;
}
static inline bool is_int(ipu_dtype t) { return is_sint(t) || is_uint(t); }
/* The element-wise family's "numeric": floats and every integer type. */
static inline bool is_arith(ipu_dtype t) { return is_float(t) || is_int(t); }
static inline bool is_castable(ipu_dtype t) { return is_arith(t) || t == IPU_DTYPE_BOOL; }

static inline bool same_shape(const ipu__tensor *a, const ipu__tensor *b) {
    if (a->desc.ndim != b->desc.ndim) return false;
    for (uint32_t d = 0; d < a->desc.ndim; d++)
        if (a->desc.dims[d] != b->desc.dims[d]) return false;
    return true;
}

static inline uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

/* A plan: one zeroed allocation, freed with ipu__free (kernels.h). */
static inline void *alloc_plan(size_t size) { return ipu__calloc(1, size); }
static inline ipu_status plan_nomem(void) {
    return ipu__fail(IPU_ERR_NOMEM, "out of memory allocating an instruction plan");
}

/* Drop size-1 dims and merge dims that are contiguous in every stride array (s2 may be NULL). */
uint32_t ipu__vcollapse(uint32_t nd, int64_t *shape, int64_t *s1, int64_t *s2);
/* Element strides of `t`'s dims right-aligned to an `nd`-dim output of shape `ys` (0 where t
 * broadcasts); t's dims are known to broadcast. First `skip` trailing dims of t excluded. */
void ipu__vbcast_strides(const ipu__tensor *t, uint32_t skip, uint32_t nd, const int64_t *ys,
                         int64_t *st);
/* Broadcast the leading (ndim - skip) dims of a and b into y's leading dims (numpy rules). */
ipu_status ipu__vcheck_bcast(const vctx *v, const ipu__tensor *a, const ipu__tensor *b,
                             const ipu__tensor *y, uint32_t skip, const char *what);
/* The ipu__bcast_plan (kernels/eltwise.h) of y = f(a, b) (b may be NULL), shapes checked. */
ipu_status ipu__vplan_bcast(const vctx *v, const ipu__tensor *a, const ipu__tensor *b,
                            const ipu__tensor *y, ipu__instr *ins);

/* Attribute k holding a float parameter as float64 bits (UNARY's p0, p1), as the float32 the
 * kernels compute with. */
static inline float ipu__attr_f32(const ipu__instr *ins, uint32_t k) {
    double d;
    memcpy(&d, &ins->attr[k], sizeof d);
    return (float)d;
}

/* An `activation` attribute (docs/bytecode.md says which opcodes have one): a value of
 * ipu_fns.def's IPU_ACT table (its values are 0 .. count - 1). */
static inline ipu_status ipu__vact(const vctx *v, int64_t act) {
    if (act == IPU__ACT_UNARY) return bad(v, "activation 2 (UNARY) is CONV2D's and GEMM's only");
    if (act >= 0 && act < IPU__ACT_COUNT) return IPU_OK;
        /* "0 (NONE), 1 (RELU), ": the table spelled out by ipu_fns.def itself */
#define IPU_ACT(name, value) #value " (" #name "), "
    static const char table[] =
#include "ipu/ipu_fns.def"
        "";
#undef IPU_ACT
    return bad(v, "activation must be one of %sgot %lld", table, (long long)act);
}

/* The activation `act` of CONV2D or GEMM: with IPU__ACT_UNARY, and only then, the instruction's
 * attributes end with a float UNARY function and its p0, p1 (as UNARY's) from attr `first` on,
 * returned in *u. */
static inline ipu_status ipu__vact_epilogue(const vctx *v, const ipu__instr *ins, int64_t act,
                                            uint32_t first, ipu__unary_act *u) {
    bool unary = act == IPU__ACT_UNARY;
    if (unary != (ins->n_attr == first + 3))
        return bad(v, "activation UNARY and attributes %u..%u (fn, p0, p1) go together", first,
                   first + 2);
    if (!unary) return ipu__vact(v, act);
    if (!ipu__unary_float_fn(ins->attr[first]))
        return bad(v, "activation UNARY: %lld is not a float unary function",
                   (long long)ins->attr[first]);
    u->fn = (int)ins->attr[first];
    u->p0 = ipu__attr_f32(ins, first + 1);
    u->p1 = ipu__attr_f32(ins, first + 2);
    return IPU_OK;
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
