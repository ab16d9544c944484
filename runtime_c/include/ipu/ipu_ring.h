/* Lock-free single-producer / single-consumer ring of fixed-size items.
 *
 * Contract: at any time at most one thread pushes and at most one thread pops (they may be
 * different threads). Violating this is undefined. Indices are 64-bit and never wrap in
 * practice; each sits on its own cache line with a cached copy of the opposite index, and only
 * acquire/release ordering is used. try_ calls never block. */
#ifndef IPU_RING_H
#define IPU_RING_H

#include <stdbool.h>

#include "ipu_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ipu_ring ipu_ring;

/* A ring that holds up to exactly `capacity` items (>= 1) of item_size bytes (>= 1), owned by
 * the caller. IPU_ERR_INVALID_ARGUMENT (0 or a size overflow), IPU_ERR_NOMEM; *out untouched. */
IPU_API IPU_NODISCARD ipu_status ipu_ring_create(size_t capacity, size_t item_size, ipu_ring **out);
/* Accepts NULL. Neither side may be using the ring. */
IPU_API void ipu_ring_destroy(ipu_ring *r);
IPU_API size_t ipu_ring_capacity(const ipu_ring *r);
/* Items currently queued (exact for the calling side, approximate for observers). */
IPU_API size_t ipu_ring_size(const ipu_ring *r);
/* Copy item_size bytes in; false when full. Producer only. */
IPU_API IPU_NODISCARD bool ipu_ring_try_push(ipu_ring *r, const void *item);
/* Copy item_size bytes out; false when empty. Consumer only. */
IPU_API IPU_NODISCARD bool ipu_ring_try_pop(ipu_ring *r, void *item_out);
/* Pointer to the front item or NULL when empty, without removing it; valid until the next pop.
 * Consumer only. */
IPU_API void *ipu_ring_front(ipu_ring *r);

#ifdef __cplusplus
}
#endif
#endif
