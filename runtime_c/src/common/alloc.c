/* The core's only calls to the system allocator, behind the process-wide hooks of ipu_alloc.h. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#endif
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ipu_internal.h"

static void *sys_malloc(size_t n, void *ud) {
    (void)ud;
    return malloc(n);
}
static void *sys_realloc(void *p, size_t n, void *ud) {
    (void)ud;
    return realloc(p, n);
}
static void sys_free(void *p, void *ud) {
    (void)ud;
    free(p);
}
static void *sys_aligned_alloc(size_t alignment, size_t n, void *ud) {
    (void)ud;
    void *p = NULL;
    return posix_memalign(&p, alignment, n) == 0 ? p : NULL;
}

static const ipu_allocator system_allocator = {sys_malloc,        sys_realloc, sys_free,
                                               sys_aligned_alloc, sys_free,    NULL};
static ipu_allocator cur = {sys_malloc, sys_realloc, sys_free, sys_aligned_alloc, sys_free, NULL};
static atomic_size_t live_blocks;

ipu_status ipu_set_allocator(const ipu_allocator *a) {
    if (a && (!a->malloc_fn || !a->realloc_fn || !a->free_fn ||
              !a->aligned_alloc_fn != !a->aligned_free_fn))
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "ipu_set_allocator: malloc_fn, realloc_fn and free_fn are required, and "
                         "aligned_alloc_fn and aligned_free_fn go together");
    size_t live = atomic_load(&live_blocks);
    if (live != 0)
        return ipu__fail(IPU_ERR_INVALID_STATE,
                         "ipu_set_allocator: the library still holds %zu block(s) of the current "
                         "allocator",
                         live);
    cur = a ? *a : system_allocator;
    return IPU_OK;
}

void ipu_get_allocator(ipu_allocator *out) {
    if (out) *out = cur;
}

size_t ipu_allocated_blocks(void) { return atomic_load(&live_blocks); }

static void *counted(void *p) {
    if (p) atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    return p;
}

void *ipu__malloc(size_t n) { return counted(cur.malloc_fn(n ? n : 1, cur.user_data)); }

void *ipu__calloc(size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n ? n : 1, size ? size : 1, &total)) return NULL;
    if (cur.malloc_fn == sys_malloc) return counted(calloc(1, total)); /* lazily zeroed pages */
    void *p = ipu__malloc(total);
    if (p) memset(p, 0, total);
    return p;
}

void *ipu__realloc(void *p, size_t n) {
    if (!p) return ipu__malloc(n);
    return cur.realloc_fn(p, n ? n : 1, cur.user_data); /* same block count either way */
}

void ipu__free(void *p) {
    if (!p) return;
    atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
    cur.free_fn(p, cur.user_data);
}

void ipu_free(void *p) { ipu__free(p); }

/* Without an aligned pair: over-allocate from malloc_fn and keep the block's start just below
 * the aligned pointer. */
void *ipu__aligned_alloc(size_t alignment, size_t n) {
    if (alignment < 16 || (alignment & (alignment - 1)) != 0) return NULL;
    if (!n) n = alignment;
    if (cur.aligned_alloc_fn) return counted(cur.aligned_alloc_fn(alignment, n, cur.user_data));
    size_t total;
    if (__builtin_add_overflow(n, alignment + sizeof(void *), &total)) return NULL;
    void *raw = cur.malloc_fn(total, cur.user_data);
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(void *) + alignment - 1) & ~(uintptr_t)(alignment - 1);
    ((void **)a)[-1] = raw;
    return counted((void *)a);
}

/* 2 MiB: an x86-64 huge page. Buffers of that size or more that the kernels stream (arena,
 * packed weights, the container image, scratch) start on one and ask for transparent huge
 * pages: fewer TLB misses (without them SqueezeNet's time jumps by up to 25 % when ONNX Runtime
 * shares the process; docs/kernels.md). Only with the system allocator: a user's
 * allocator decides about its own memory. */
#define HUGE_PAGE ((size_t)2 << 20)

void *ipu__big_alloc(size_t n) {
    if (n < HUGE_PAGE || cur.malloc_fn != sys_malloc) return ipu__aligned_alloc(64, n);
    void *p = ipu__aligned_alloc(HUGE_PAGE, n);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, n, MADV_HUGEPAGE); /* a hint: pages not touched yet */
#endif
    return p;
}

void *ipu__aligned_zalloc(size_t alignment, size_t n) {
    void *p = ipu__aligned_alloc(alignment < 16 ? 16 : alignment, n);
    if (p) memset(p, 0, n ? n : 1);
    return p;
}

void ipu__aligned_free(void *p) {
    if (!p) return;
    atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
    if (cur.aligned_free_fn)
        cur.aligned_free_fn(p, cur.user_data);
    else
        cur.free_fn(((void **)p)[-1], cur.user_data);
}
