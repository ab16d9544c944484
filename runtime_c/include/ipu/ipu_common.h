/* pyipu C core: statuses, data types, opcodes, version.
 *
 * Every fallible call returns an ipu_status (IPU_OK == 0). Results are written through `_out`
 * parameters only on success. The library never aborts, exits or prints: details of the last
 * error on the calling thread are available from ipu_last_error_message(), and a log callback
 * can receive them (ipu_alloc.h).
 *
 * Everything in this header is thread-safe and allocates nothing; the strings returned are
 * static (ipu_last_error_message's is per thread). */
#ifndef IPU_COMMON_H
#define IPU_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define IPU_API __attribute__((visibility("default")))
#define IPU_NODISCARD __attribute__((warn_unused_result))
#else
#define IPU_API
#define IPU_NODISCARD
#endif

/* The runtime's version string: "pyipu-" and the VERSION file's (a test checks they agree).
 * The compiler stores a hash of it in every container and ipu_runtime_create compares them
 * when check_package_hash is set. */
#define IPU_VERSION_STRING "pyipu-0.1.0"

typedef enum ipu_status {
#define IPU_STATUS(name, value, msg) IPU_##name = value,
#include "ipu_status.def"
#undef IPU_STATUS
    IPU_STATUS_COUNT_
} ipu_status;

typedef enum ipu_dtype {
    IPU_DTYPE_INVALID = 0,
#define IPU_DTYPE(name, value, size, str) IPU_DTYPE_##name = value,
#include "ipu_dtype.def"
#undef IPU_DTYPE
} ipu_dtype;

typedef enum ipu_opcode {
    IPU_OP_INVALID = 0,
#define IPU_OP(name, value, ...) IPU_OP_##name = value,
#include "ipu_ops.def"
#undef IPU_OP
} ipu_opcode;

#define IPU_MAX_DIMS 8

/* Short message for a status ("out of memory"); never NULL. */
IPU_API const char *ipu_status_str(ipu_status s);
/* Symbolic name of a status ("ERR_NOMEM"); never NULL. */
IPU_API const char *ipu_status_name(ipu_status s);
/* Element size in bytes, 0 for an unknown dtype. */
IPU_API size_t ipu_dtype_size(ipu_dtype t);
/* Lower-case dtype name ("float32"), or NULL for an unknown dtype. */
IPU_API const char *ipu_dtype_name(ipu_dtype t);
/* Lower-case opcode name ("matmul"), or NULL for an unknown opcode. */
IPU_API const char *ipu_opcode_name(ipu_opcode op);
/* Operand counts of an opcode (ipu_ops.def): inputs in [min_in, max_in], n_out outputs.
 * IPU_ERR_INVALID_ARGUMENT for an unknown opcode or a NULL pointer. */
IPU_API ipu_status ipu_opcode_arity(ipu_opcode op, uint32_t *min_in_out, uint32_t *max_in_out,
                                    uint32_t *n_out_out);
/* Names of the UNARY / BINARY function ids (ipu_fns.def, "sigmoid"), NULL when unknown. */
IPU_API const char *ipu_unary_fn_name(int fn);
IPU_API const char *ipu_binary_fn_name(int fn);
/* Name of a REDUCE function id (ipu_fns.def, "SUM_SQUARE"), NULL when unknown. */
IPU_API const char *ipu_reduce_fn_name(int fn);
/* Name of a CONV2D / GEMM epilogue activation (ipu_fns.def, "RELU"), NULL when unknown. */
IPU_API const char *ipu_act_fn_name(int fn);

/* Detailed message of the most recent error on the calling thread (empty string if none).
 * The pointer is valid until the next failing call on this thread. */
IPU_API const char *ipu_last_error_message(void);

/* 64-bit hash of a byte string (under the container checksum, ipu_container_checksum; documented
 * in docs/popef.md). */
IPU_API uint64_t ipu_hash64(const void *data, size_t size, uint64_t seed);
/* Hash of IPU_VERSION_STRING: what containers written by this build carry. */
IPU_API uint64_t ipu_compiler_hash(void);

#ifdef __cplusplus
}
#endif
#endif
