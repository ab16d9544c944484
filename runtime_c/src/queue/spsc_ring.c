/* Lock-free SPSC ring (C11 port of rigtorp::SPSCQueue, monotonic-index variant).
 *
 * head (next slot to read) and tail (next slot to write) are 64-bit counters that only grow;
 * the slot of index i is i & mask over a power-of-two slot array, the queue holds tail - head
 * items, and it is full at exactly `capacity` items (which may be less than the array: no slack
 * slot is needed because full and empty are distinguished by the counters).
 *
 * Each counter sits on its own cache line together with the owning side's cached copy of the
 * opposite counter, so in the steady state a push touches only the producer line and the slot,
 * and refreshes its view of head only when the ring looks full (symmetrically for pop).
 *
 * Ordering: the producer writes the slot, then stores tail with release; the consumer loads tail
 * with acquire before reading the slot. The consumer reads the slot, then stores head with
 * release; the producer loads head with acquire before overwriting the slot. No other fences. */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "../common/ipu_internal.h"

#define IPU__CACHE_LINE 64

struct ipu_ring {
    /* Read-only after create. */
    _Alignas(IPU__CACHE_LINE) size_t capacity;
    size_t mask;
    size_t item_size;
    uint8_t *slots;
    /* Consumer line. */
    _Alignas(IPU__CACHE_LINE) _Atomic uint64_t head;
    uint64_t tail_cache; /* consumer's last view of tail */
    /* Producer line. */
    _Alignas(IPU__CACHE_LINE) _Atomic uint64_t tail;
    uint64_t head_cache;                     /* producer's last view of head */
    _Alignas(IPU__CACHE_LINE) char end_pad_; /* keep the next object off the producer line */
};

ipu_status ipu_ring_create(size_t capacity, size_t item_size, ipu_ring **out) {
    if (!out) return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ring: NULL argument");
    if (capacity == 0 || item_size == 0)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                         "ring: capacity (%zu) and item_size (%zu) "
                         "must be positive",
                         capacity, item_size);
    size_t cap = 1;
    while (cap < capacity) {
        if (cap > SIZE_MAX / 2)
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ring: capacity %zu is too large", capacity);
        cap <<= 1;
    }
    uint64_t bytes;
    if (!ipu__mul_u64(cap, item_size, &bytes) || bytes > SIZE_MAX / 2)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "ring: %zu slots of %zu bytes is too large", cap,
                         item_size);
    ipu_ring *r = ipu__aligned_alloc(IPU__CACHE_LINE, sizeof *r);
    if (!r) return ipu__fail(IPU_ERR_NOMEM, "ring: out of memory");
    memset(r, 0, sizeof *r);
    r->slots = ipu__aligned_alloc(IPU__CACHE_LINE, (size_t)bytes);
    if (!r->slots) {
        ipu_ring_destroy(r);
        return ipu__fail(IPU_ERR_NOMEM, "ring: out of memory for %zu slots of %zu bytes", cap,
                         item_size);
    }
    r->capacity = capacity;
    r->mask = cap - 1;
    r->item_size = item_size;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    r->tail_cache = 0;
    r->head_cache = 0;
    *out = r;
    return IPU_OK;
}

void ipu_ring_destroy(ipu_ring *r) {
    if (!r) return;
    ipu__aligned_free(r->slots);
    ipu__aligned_free(r);
}

size_t ipu_ring_capacity(const ipu_ring *r) { return r ? r->capacity : 0; }

size_t ipu_ring_size(const ipu_ring *r) {
    if (!r) return 0;
    /* head first: tail only grows and never passes head + capacity at any instant, so reading
     * tail later can only over-count; clamp to capacity. */
    uint64_t h = atomic_load_explicit(&((ipu_ring *)r)->head, memory_order_acquire);
    uint64_t t = atomic_load_explicit(&((ipu_ring *)r)->tail, memory_order_acquire);
    uint64_t n = t - h;
    return n > r->capacity ? r->capacity : (size_t)n;
}

bool ipu_ring_try_push(ipu_ring *r, const void *item) {
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (t - r->head_cache == r->capacity) {
        r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
        if (t - r->head_cache == r->capacity) return false;
    }
    memcpy(r->slots + (size_t)(t & r->mask) * r->item_size, item, r->item_size);
    atomic_store_explicit(&r->tail, t + 1, memory_order_release);
    return true;
}

/* Consumer side: refresh the cached tail only when the ring looks empty. */
static inline uint8_t *front_slot(ipu_ring *r, uint64_t h) {
    if (h == r->tail_cache) {
        r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (h == r->tail_cache) return NULL;
    }
    return r->slots + (size_t)(h & r->mask) * r->item_size;
}

bool ipu_ring_try_pop(ipu_ring *r, void *item_out) {
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint8_t *slot = front_slot(r, h);
    if (!slot) return false;
    memcpy(item_out, slot, r->item_size);
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    return true;
}

void *ipu_ring_front(ipu_ring *r) {
    return front_slot(r, atomic_load_explicit(&r->head, memory_order_relaxed));
}
