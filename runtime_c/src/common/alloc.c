/* The core's only calls to the system allocator. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#endif
#include <stdlib.h>

#include "ipu_internal.h"

void *ipu__malloc(size_t n) { return malloc(n ? n : 1); }
void *ipu__calloc(size_t n, size_t size) { return calloc(n ? n : 1, size ? size : 1); }
void ipu__free(void *p) { free(p); }

void *ipu__aligned_alloc(size_t alignment, size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, alignment, n ? n : alignment) != 0) return NULL;
    return p;
}

void ipu__aligned_free(void *p) { free(p); }
