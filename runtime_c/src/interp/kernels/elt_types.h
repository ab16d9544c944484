/* Integer dtypes of the element-wise family (ADD..DIV, RELU, UNARY, BINARY), as an X-macro so
 * each loop body is written once:
 *   X(sfx, DTYPE, T, W, S, C, MIN, MAX)
 * sfx: kernel name suffix; DTYPE: IPU_DTYPE_<DTYPE>; T: element type; W: the unsigned type
 * wrap-around arithmetic is done in (at least `unsigned int`, so nothing promotes to a signed
 * int and overflows); S: 1 if signed; C: the type integer CLIP bounds are compared in (int64 for
 * signed types, uint64 for unsigned: docs/bytecode.md); MIN, MAX: T's range.
 * Included by eltwise.h (needs the function enums); ipu_ops.def's ALL kernel style declares
 * the kernels of these types. */
#ifndef IPU_ELT_TYPES_H
#define IPU_ELT_TYPES_H

#include <stdint.h>

#define IPU__INT_TYPES(X)                                              \
    X(i8, INT8, int8_t, uint32_t, 1, int64_t, INT8_MIN, INT8_MAX)      \
    X(u8, UINT8, uint8_t, uint32_t, 0, uint64_t, 0, UINT8_MAX)         \
    X(i16, INT16, int16_t, uint32_t, 1, int64_t, INT16_MIN, INT16_MAX) \
    X(u16, UINT16, uint16_t, uint32_t, 0, uint64_t, 0, UINT16_MAX)     \
    X(i32, INT32, int32_t, uint32_t, 1, int64_t, INT32_MIN, INT32_MAX) \
    X(u32, UINT32, uint32_t, uint32_t, 0, uint64_t, 0, UINT32_MAX)     \
    X(i64, INT64, int64_t, uint64_t, 1, int64_t, INT64_MIN, INT64_MAX) \
    X(u64, UINT64, uint64_t, uint64_t, 0, uint64_t, 0, UINT64_MAX)

/* BINARY functions whose output is bool. */
static inline int ipu__bin_is_cmp(int fn) {
    return fn == IPU__BIN_EQUAL || fn == IPU__BIN_LESS || fn == IPU__BIN_GREATER ||
           fn == IPU__BIN_LESS_EQUAL || fn == IPU__BIN_GREATER_EQUAL;
}

#endif
