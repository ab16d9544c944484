/* Internal helpers shared by the C core (ipu__ prefix). Not installed. */
#ifndef IPU_INTERNAL_H
#define IPU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipu/ipu.h"

/* The few internal functions pyipu's extension modules call (pyipu/_cipu.pxd), exported from
 * the Python package's libipu.so next to the IPU_API ones. The C library for embedders keeps
 * them local (runtime_c/capi.map): it exports the public API only. */
#if defined(__GNUC__)
#define IPU_EXTENSION_API __attribute__((visibility("default")))
#else
#define IPU_EXTENSION_API
#endif

/* Record a formatted message for ipu_last_error_message() and return `s`. */
ipu_status ipu__fail(ipu_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void ipu__clear_error(void);

/* Send a formatted message to the log callback (ipu_alloc.h) when one is installed for `level`.
 * Never allocates. */
void ipu__log(ipu_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* True when a message at `level` would be delivered (skip formatting work otherwise). */
bool ipu__log_enabled(ipu_log_level level);

/* Checked arithmetic: return false on overflow. */
static inline bool ipu__add_u64(uint64_t a, uint64_t b, uint64_t *r) {
    return !__builtin_add_overflow(a, b, r);
}
static inline bool ipu__mul_u64(uint64_t a, uint64_t b, uint64_t *r) {
    return !__builtin_mul_overflow(a, b, r);
}

/* Allocation: every heap block goes through these (alloc.c), i.e. through the process-wide
 * ipu_allocator (ipu_alloc.h). Sizes of 0 are rounded up; NULL means out of memory. */
void *ipu__malloc(size_t n);
void *ipu__calloc(size_t n, size_t size);
void *ipu__realloc(void *p, size_t n);                /* NULL: p is still valid */
void *ipu__aligned_alloc(size_t alignment, size_t n); /* free with ipu__aligned_free */
/* A large buffer the kernels stream (64-byte aligned; from 2 MiB on, huge-page aligned with a
 * transparent-huge-page hint): free with ipu__aligned_free. */
void *ipu__big_alloc(size_t n);
/* Zeroed block for a type with _Alignas members (alignment > malloc's): free with
 * ipu__aligned_free. Alignments below 16 are raised to 16. */
void *ipu__aligned_zalloc(size_t alignment, size_t n);
void ipu__free(void *p);
void ipu__aligned_free(void *p);

/* Little-endian loads from possibly unaligned bytes. */
static inline uint32_t ipu__ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t ipu__ld_u64(const uint8_t *p) {
    return (uint64_t)ipu__ld_u32(p) | (uint64_t)ipu__ld_u32(p + 4) << 32;
}
static inline void ipu__st_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline void ipu__st_u64(uint8_t *p, uint64_t v) {
    ipu__st_u32(p, (uint32_t)v);
    ipu__st_u32(p + 4, (uint32_t)(v >> 32));
}

/* True when s[0..n) is valid UTF-8 with no NUL byte (names read from files). */
bool ipu__utf8_valid(const uint8_t *s, size_t n);

/* fp16 <-> fp32 (round to nearest even). */
float ipu__f16_to_f32(uint16_t h);
uint16_t ipu__f32_to_f16(float f);

#endif
