/* Internal worker pool of the runtime (ipu__pool).
 *
 * A pool has nth workers. Worker 0 is whichever thread calls ipu__pool_run (the device thread;
 * the creating thread while the Load program runs); workers 1..nth-1 are helper pthreads owned
 * by the pool. ipu__pool_run(pool, fn, ctx) calls fn(ctx, ith, nth) once on every worker and
 * returns when all calls have returned (a barrier). At most one thread may be inside
 * ipu__pool_run at a time.
 *
 * ipu__pool_run_range(pool, work, contiguous, fn, ctx) instead splits work items [0, work) into chunks that
 * the workers claim one at a time (an atomic counter) and returns when every chunk is done: a
 * helper that is slow to wake (asleep, or descheduled by another process on a busy machine) is
 * not waited for, worker 0 takes its chunks. Only the workers that claimed a chunk are waited
 * for. `contiguous` (a kernel that runs consecutive items in one piece, sharing their common
 * work: ipu__plan.contiguous): up to IPU__POOL_ITEM_CHUNKS items that divide evenly become one
 * chunk per worker, so each worker's items are consecutive (still claimed: a late helper's
 * share is taken by worker 0).
 *
 * Waiting: a helper polls for new work for IPU__POOL_SPIN_NS (with a pause instruction), then
 * sleeps on a condition variable, so an idle pool uses no CPU. A generation counter tells helpers
 * that new work was posted (bit 0: the kind of run, the rest counts runs); the sleep/wake
 * handshake is a seq_cst Dekker pair on (gen, sleepers), so no wakeup is lost. Worker 0 waits for
 * the helpers the same way (pending, main_waiting).
 *
 * Claims of a range run go through one 64-bit word: the run's tag (gen >> 1, 32 bits), the number
 * of chunks and the next chunk (16 bits each). A helper that wakes late compares the tag and
 * claims nothing from a run that has moved on; the run's description (fn, ctx, work, chunk) is
 * read only after a successful claim, when worker 0 is still waiting for that chunk.
 *
 * Each worker owns scratch memory (64-byte aligned, `scratch_bytes` long).
 * Thread code lives here and in the runtime only; kernels never see a thread. */
#ifndef IPU_THREADPOOL_H
#define IPU_THREADPOOL_H

#include <stdint.h>
#include <time.h>

#include "../common/ipu_internal.h"

/* How long a waiting thread polls before it sleeps (a -D of the build may set it). */
#ifndef IPU__POOL_SPIN_NS
#define IPU__POOL_SPIN_NS 20000u
#endif
/* How long a helper polls while worker 0 holds the pool (ipu__pool_hold: a program is running,
 * more range runs are coming). */
#ifndef IPU__POOL_HOLD_SPIN_NS
#define IPU__POOL_HOLD_SPIN_NS 1000000u
#endif

typedef struct ipu__pool ipu__pool;
typedef void (*ipu__pool_fn)(void *ctx, uint32_t ith, uint32_t nth);
/* Work items [begin, end) on worker ith. */
typedef void (*ipu__pool_range_fn)(void *ctx, size_t begin, size_t end, uint32_t ith);
/* Chunks of a range run: up to this many per worker (more balance against late helpers, a
 * claim each), never more than the work items; but one item a chunk while there are at most
 * IPU__POOL_ITEM_CHUNKS items: such items are large (a convolution's pixel and channel blocks),
 * and grouping them unevenly (14 items as 7 chunks of 2: 4 chunks against 3) idles a worker. */
#define IPU__POOL_CHUNKS_PER_WORKER 4u
#define IPU__POOL_ITEM_CHUNKS 64u

/* nth >= 1 workers (nth - 1 helper threads are started). Helper threads block all signals. */
IPU_NODISCARD ipu_status ipu__pool_create(uint32_t nth, size_t scratch_bytes, int pin,
                                          ipu__pool **out);
/* With pin: each worker runs on its own CPU of the creating thread's affinity set (the pools of
 * a process start at successive CPUs), if that set has at least nth CPUs. Helpers are pinned at
 * creation; worker 0 (a thread of the caller's) only when it calls ipu__pool_pin_self. Why: a
 * helper woken by worker 0 after an idle spell is often placed on worker 0's own CPU by the
 * scheduler (wake-affine), and the two then share one core for the whole request. */
void ipu__pool_pin_self(const ipu__pool *p);
/* Does the calling thread run on a CPU that a helper is pinned to? A thread other than the
 * pinned worker 0 that runs a program there (an inline request) would share that CPU with the
 * helper for the whole program: 2x the time, measured. */
bool ipu__pool_on_helper_cpu(const ipu__pool *p);
/* Stop and join the helpers, free everything. Accepts NULL and half-built pools. Must not be
 * called while ipu__pool_run is running. */
void ipu__pool_destroy(ipu__pool *p);
uint32_t ipu__pool_size(const ipu__pool *p);
/* Scratch of worker ith (64-byte aligned). */
void *ipu__pool_scratch(const ipu__pool *p, uint32_t ith);
/* Run fn on all workers; the caller is worker 0. Returns after every worker has finished. */
void ipu__pool_run(ipu__pool *p, ipu__pool_fn fn, void *ctx);
/* Run fn over work items [0, work) in dynamically claimed chunks; the caller is worker 0 and
 * claims too. Returns after every chunk has been run. Same one-caller rule as ipu__pool_run. */
void ipu__pool_run_range(ipu__pool *p, size_t work, bool contiguous, ipu__pool_range_fn fn,
                         void *ctx);
/* Worker 0 says whether more runs follow soon (held: while it runs a program, whose small
 * instructions it runs alone between range runs). Held, waiting helpers poll for
 * IPU__POOL_HOLD_SPIN_NS instead of IPU__POOL_SPIN_NS before they sleep, so the next range run
 * does not start with its helpers asleep (a wake-up costs tens of µs on a VM, and worker 0 takes
 * the chunks meanwhile). Released, they sleep after the short budget: an idle pool uses no CPU. */
void ipu__pool_hold(ipu__pool *p, bool held);
/* Worker 0 has a request whose program splits instructions over the pool: sleeping helpers are
 * woken now, so that their wake-up overlaps the request's input copy instead of delaying the
 * first range run (at 2 threads a 256^3 MatMul otherwise ran at 1-thread speed); woken this
 * way a helper polls for IPU__POOL_HOLD_SPIN_NS, then sleeps again. A hint: one that races
 * with a helper going to sleep may be missed (that helper wakes at the next run, as before).
 * An atomic increment and load when no helper sleeps. Any thread may call it. */
void ipu__pool_prewake(ipu__pool *p);

/* Helpers shared with the runtime. */
static inline uint64_t ipu__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void ipu__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* The polling phase of every spin-then-sleep wait: call once per failed poll (i counts polls,
 * *t0 starts at 0). Pauses and returns false while the budget (IPU__POOL_SPIN_NS for
 * ipu__spin_expired) lasts, then returns true: time to sleep. */
static inline bool ipu__spin_expired_after(unsigned i, uint64_t *t0, uint64_t budget_ns) {
    if ((i & 31u) == 31u) {
        uint64_t now = ipu__now_ns();
        if (*t0 == 0)
            *t0 = now;
        else if (now - *t0 > budget_ns)
            return true;
    }
    ipu__cpu_relax();
    return false;
}

static inline bool ipu__spin_expired(unsigned i, uint64_t *t0) {
    return ipu__spin_expired_after(i, t0, IPU__POOL_SPIN_NS);
}

/* Absolute CLOCK_MONOTONIC timespec for a deadline in ns (for pthread_cond_timedwait on a
 * condition variable created with pthread_condattr_setclock(CLOCK_MONOTONIC)). */
static inline struct timespec ipu__timespec_ns(uint64_t abs_ns) {
    struct timespec ts;
    ts.tv_sec = (time_t)(abs_ns / 1000000000u);
    ts.tv_nsec = (long)(abs_ns % 1000000000u);
    return ts;
}

#endif
