/* Worker pool: see threadpool.h for the protocol. */
#include "threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>

#define IPU__POOL_MAX_THREADS 1024u

typedef struct ipu__pool_helper {
    ipu__pool *pool;
    uint32_t ith;
    int cpu; /* pinned to this CPU, or -1 */
} ipu__pool_helper;

struct ipu__pool {
    uint32_t nth;
    uint32_t started;   /* helper threads running */
    int cpu0;           /* worker 0's CPU when pinned, else -1 */
    int sync_ready;     /* mutex and condvars initialised */
    pthread_t *threads; /* [nth - 1] */
    ipu__pool_helper *helpers;
    uint8_t *scratch; /* nth * scratch_stride bytes */
    size_t scratch_stride;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* helpers sleep here waiting for a new generation */
    pthread_cond_t done_cv; /* worker 0 sleeps here waiting for pending == 0 */
    /* Work description: written by worker 0 before the generation is bumped (the seq_cst
     * increment releases it), read by helpers after they observe the new generation (a range
     * run: after a successful claim). */
    ipu__pool_fn fn;
    void *ctx;
    ipu__pool_range_fn rfn;
    size_t work, chunk;
    _Alignas(64) atomic_uint gen;            /* (runs << 1) | RANGE bit */
    _Alignas(64) atomic_uint_fast64_t claim; /* tag << 32 | nchunks << 16 | next chunk */
    atomic_uint chunks_left;                 /* range run: chunks not finished yet */
    _Alignas(64) atomic_uint pending; /* helpers that have not finished the current generation */
    _Alignas(64) atomic_int sleepers; /* helpers inside the work_cv wait loop */
    atomic_int main_waiting;          /* worker 0 inside the done_cv wait loop */
    atomic_bool stop;
    atomic_bool held;     /* ipu__pool_hold: helpers poll longer */
    atomic_uint prewakes; /* ipu__pool_prewake calls */
};

/* Wait until gen != seen (or stop); returns the generation observed. Polls, then sleeps; a
 * pre-wake (ipu__pool_prewake) ends the sleep early and starts a long poll. */
static unsigned helper_wait(ipu__pool *p, unsigned seen) {
    for (bool prewoken = false;; prewoken = true) {
        uint64_t t0 = 0;
        for (unsigned i = 0;; i++) {
            unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (g != seen || atomic_load_explicit(&p->stop, memory_order_acquire)) return g;
            bool held = prewoken || atomic_load_explicit(&p->held, memory_order_relaxed);
            if (ipu__spin_expired_after(i, &t0, held ? IPU__POOL_HOLD_SPIN_NS : IPU__POOL_SPIN_NS))
                break;
        }
        pthread_mutex_lock(&p->mu);
        atomic_fetch_add(&p->sleepers, 1); /* seq_cst: pairs with the gen increment in run */
        unsigned w = atomic_load(&p->prewakes), g;
        while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop) &&
               atomic_load(&p->prewakes) == w)
            pthread_cond_wait(&p->work_cv, &p->mu);
        atomic_fetch_sub(&p->sleepers, 1);
        pthread_mutex_unlock(&p->mu);
        if (g != seen || atomic_load(&p->stop)) return g;
    }
}

#define RANGE_BIT 1u

static void wake_main(ipu__pool *p) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
}

/* Claim and run chunks of the range run tagged `tag` until none is left. */
static void claim_chunks(ipu__pool *p, uint32_t tag, uint32_t ith) {
    uint_fast64_t w = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        uint32_t next = (uint32_t)(w & 0xffffu), n = (uint32_t)((w >> 16) & 0xffffu);
        if ((uint32_t)(w >> 32) != tag || next >= n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &w, w + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        size_t begin = (size_t)next * p->chunk;
        size_t end = begin + p->chunk < p->work ? begin + p->chunk : p->work;
        p->rfn(p->ctx, begin, end, ith);
        /* seq_cst: pairs with main_waiting in ipu__pool_run_range */
        if (atomic_fetch_sub(&p->chunks_left, 1) == 1 && atomic_load(&p->main_waiting))
            wake_main(p);
        w = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *helper_main(void *arg) {
    ipu__pool_helper *h = arg;
    ipu__pool *p = h->pool;
    unsigned seen = 0; /* generation at creation */
    for (;;) {
        seen = helper_wait(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        if (seen & RANGE_BIT) { /* worker 0 may have moved on: the tag tells */
            claim_chunks(p, seen >> 1, h->ith);
            continue;
        }
        /* a plain run waits for every helper, so fn and ctx are this run's */
        p->fn(p->ctx, h->ith, p->nth);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->main_waiting)) wake_main(p);
    }
    return NULL;
}

#ifdef CPU_SET
/* CPUs for workers 0..nth-1 (cpus[i]), from the calling thread's affinity set; false if it has
 * fewer than nth CPUs. Successive pools start at successive CPUs, so that the worker 0 threads
 * of several runtimes do not all share one CPU. */
static bool pick_cpus(uint32_t nth, int *cpus) {
    static atomic_uint next_start;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return false;
    int allowed[CPU_SETSIZE], n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) allowed[n++] = c;
    if (n < (int)nth || n == 0) return false;
    unsigned start = atomic_fetch_add(&next_start, nth);
    for (uint32_t i = 0; i < nth; i++) cpus[i] = allowed[(start + i) % (unsigned)n];
    return true;
}

/* Best effort (unpinned still works): true if pinned. */
static bool pin_thread(pthread_t t, int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return pthread_setaffinity_np(t, sizeof one, &one) == 0;
}
#endif

void ipu__pool_pin_self(const ipu__pool *p) {
#ifdef CPU_SET
    if (p && p->cpu0 >= 0) (void)pin_thread(pthread_self(), p->cpu0);
#else
    (void)p;
#endif
}

bool ipu__pool_on_helper_cpu(const ipu__pool *p) {
#ifdef CPU_SET
    if (p->cpu0 < 0) return false; /* not pinned */
    int cpu = sched_getcpu();
    for (uint32_t i = 1; i < p->nth; i++)
        if (p->helpers[i].cpu == cpu) return true;
#else
    (void)p;
#endif
    return false;
}

ipu_status ipu__pool_create(uint32_t nth, size_t scratch_bytes, int pin, ipu__pool **out) {
    ipu_status st = IPU_OK;
    sigset_t all, old;
    int masked = 0;
    if (!out || nth == 0 || nth > IPU__POOL_MAX_THREADS)
        return ipu__fail(IPU_ERR_INVALID_ARGUMENT, "thread pool: %u workers requested (1..%u)", nth,
                         IPU__POOL_MAX_THREADS);
    ipu__pool *p = ipu__aligned_zalloc(_Alignof(ipu__pool), sizeof *p);
    if (!p) return ipu__fail(IPU_ERR_NOMEM, "thread pool: cannot allocate the pool");
    p->nth = nth;
    p->cpu0 = -1;
    atomic_init(&p->gen, 0);
    atomic_init(&p->claim, 0);
    atomic_init(&p->chunks_left, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->main_waiting, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->prewakes, 0);
    atomic_init(&p->held, false);
    p->scratch_stride = (scratch_bytes + 63u) & ~(size_t)63u;
    if (p->scratch_stride != 0 && (size_t)nth > SIZE_MAX / p->scratch_stride) {
        st = ipu__fail(IPU_ERR_NOMEM, "thread pool: scratch size overflows");
        goto fail;
    }
    p->scratch = ipu__big_alloc(p->scratch_stride * nth);
    p->threads = ipu__calloc(nth, sizeof *p->threads);
    p->helpers = ipu__calloc(nth, sizeof *p->helpers);
    if (!p->scratch || !p->threads || !p->helpers) {
        st = ipu__fail(IPU_ERR_NOMEM,
                       "thread pool: cannot allocate %zu bytes of scratch for %u "
                       "workers",
                       p->scratch_stride * nth, nth);
        goto fail;
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        st = ipu__fail(IPU_ERR_INTERNAL, "thread pool: pthread_mutex_init failed");
        goto fail;
    }
    if (pthread_cond_init(&p->work_cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        st = ipu__fail(IPU_ERR_INTERNAL, "thread pool: pthread_cond_init failed");
        goto fail;
    }
    if (pthread_cond_init(&p->done_cv, NULL) != 0) {
        pthread_cond_destroy(&p->work_cv);
        pthread_mutex_destroy(&p->mu);
        st = ipu__fail(IPU_ERR_INTERNAL, "thread pool: pthread_cond_init failed");
        goto fail;
    }
    p->sync_ready = 1;
    /* Helpers block every signal so that signals (SIGINT in Python, alarms) reach the
     * application's threads. The mask is inherited from the creating thread. */
    sigfillset(&all);
    masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    for (uint32_t i = 1; i < nth; i++) {
        p->helpers[i].pool = p;
        p->helpers[i].ith = i;
        p->helpers[i].cpu = -1;
        int rc = pthread_create(&p->threads[i - 1], NULL, helper_main, &p->helpers[i]);
        if (rc != 0) {
            st = ipu__fail(rc == EAGAIN ? IPU_ERR_NOMEM : IPU_ERR_INTERNAL,
                           "thread pool: cannot start helper thread %u of %u (error %d)", i,
                           nth - 1, rc);
            goto fail;
        }
        p->started++;
    }
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
#ifdef CPU_SET
    int cpus[IPU__POOL_MAX_THREADS];
    if (pin && nth > 1 && pick_cpus(nth, cpus)) {
        p->cpu0 = cpus[0];
        for (uint32_t i = 1; i < nth; i++)
            if (pin_thread(p->threads[i - 1], cpus[i])) p->helpers[i].cpu = cpus[i];
    }
#else
    (void)pin;
#endif
    *out = p;
    return IPU_OK;
fail:
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    ipu__pool_destroy(p);
    return st;
}

void ipu__pool_destroy(ipu__pool *p) {
    if (!p) return;
    if (p->sync_ready) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, true);
        atomic_fetch_add(&p->gen, 2);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mu);
        for (uint32_t i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
        pthread_cond_destroy(&p->done_cv);
        pthread_cond_destroy(&p->work_cv);
        pthread_mutex_destroy(&p->mu);
    }
    ipu__aligned_free(p->scratch);
    ipu__free(p->threads);
    ipu__free(p->helpers);
    ipu__aligned_free(p);
}

uint32_t ipu__pool_size(const ipu__pool *p) { return p->nth; }

void *ipu__pool_scratch(const ipu__pool *p, uint32_t ith) {
    return p->scratch + (size_t)ith * p->scratch_stride;
}

/* Post generation `gen` (seq_cst: publishes the run's description; pairs with sleepers) and
 * wake sleeping helpers. */
static void publish(ipu__pool *p, unsigned gen) {
    atomic_store(&p->gen, gen);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Worker 0: spin, then sleep, until *count is 0. */
static void wait_zero(ipu__pool *p, atomic_uint *count) {
    uint64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        if (atomic_load_explicit(count, memory_order_acquire) == 0) return;
        if (ipu__spin_expired(i, &t0)) break;
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->main_waiting, 1); /* seq_cst: pairs with the decrement */
    while (atomic_load(count) != 0) pthread_cond_wait(&p->done_cv, &p->mu);
    atomic_store(&p->main_waiting, 0);
    pthread_mutex_unlock(&p->mu);
}

void ipu__pool_run(ipu__pool *p, ipu__pool_fn fn, void *ctx) {
    if (p->nth == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->nth - 1, memory_order_relaxed);
    publish(p, ((atomic_load_explicit(&p->gen, memory_order_relaxed) >> 1) + 1) << 1);
    fn(ctx, 0, p->nth);
    wait_zero(p, &p->pending);
}

void ipu__pool_hold(ipu__pool *p, bool held) {
    atomic_store_explicit(&p->held, held, memory_order_relaxed);
}

void ipu__pool_prewake(ipu__pool *p) {
    if (p->nth < 2) return;
    atomic_fetch_add(&p->prewakes, 1); /* seq_cst: pairs with sleepers in helper_wait */
    if (atomic_load(&p->sleepers) == 0) return;
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
}

void ipu__pool_run_range(ipu__pool *p, size_t work, bool contiguous, ipu__pool_range_fn fn,
                         void *ctx) {
    if (work == 0) return;
    size_t n = (size_t)p->nth * IPU__POOL_CHUNKS_PER_WORKER;
    if (work <= IPU__POOL_ITEM_CHUNKS || n > work) n = work;
    if (contiguous && work <= IPU__POOL_ITEM_CHUNKS && work % p->nth == 0) n = p->nth;
    if (p->nth == 1 || n < 2) {
        fn(ctx, 0, work, 0);
        return;
    }
    size_t chunk = (work + n - 1) / n;
    n = (work + chunk - 1) / chunk; /* <= max(nth * CHUNKS_PER_WORKER, ITEM_CHUNKS) < 2^16 */
    p->rfn = fn;
    p->ctx = ctx;
    p->work = work;
    p->chunk = chunk;
    unsigned gen = (((atomic_load_explicit(&p->gen, memory_order_relaxed) >> 1) + 1) << 1) |
                   RANGE_BIT;
    atomic_store_explicit(&p->chunks_left, (unsigned)n, memory_order_relaxed);
    atomic_store_explicit(&p->claim, (uint_fast64_t)(gen >> 1) << 32 | (uint_fast64_t)n << 16,
                          memory_order_release);
    publish(p, gen);
    claim_chunks(p, gen >> 1, 0);
    wait_zero(p, &p->chunks_left);
}
