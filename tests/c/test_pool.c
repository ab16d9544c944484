/* The worker pool's range runs (runtime/threadpool.h): every item runs exactly once, in chunks;
 * with `contiguous`, up to IPU__POOL_ITEM_CHUNKS items that divide evenly run as one chunk per
 * worker (each worker's items consecutive), otherwise one item a chunk. */
#include <pthread.h>
#include <unistd.h>

#include "runtime/threadpool.h"
#include "runtime_harness.h"

#define MAX_ITEMS 256

typedef struct {
    pthread_mutex_t mu;
    int runs[MAX_ITEMS]; /* times each item ran */
    int chunks, longest; /* calls, items in the largest call */
} record;

static void note(void *ctx, size_t b, size_t e, uint32_t ith) { /* any worker */
    record *r = ctx;
    pthread_mutex_lock(&r->mu);
    for (size_t i = b; i < e; i++) r->runs[i]++;
    r->chunks++;
    if ((int)(e - b) > r->longest) r->longest = (int)(e - b);
    (void)ith;
    pthread_mutex_unlock(&r->mu);
    usleep(200); /* long enough that both workers get a share */
}

static int run_once(ipu__pool *p, size_t work, bool contiguous, record *r) {
    memset(r->runs, 0, sizeof r->runs);
    r->chunks = r->longest = 0;
    ipu__pool_run_range(p, work, contiguous, note, r);
    for (size_t i = 0; i < work; i++)
        if (r->runs[i] != 1) return 0;
    return 1;
}

static int test_range_chunks(void) {
    ipu__pool *p = NULL;
    REQUIRE_OK(ipu__pool_create(2, 64, 0, &p));
    record r;
    pthread_mutex_init(&r.mu, NULL);
    /* contiguous, 6 items on 2 workers: two chunks of 3 consecutive items */
    REQUIRE(run_once(p, 6, true, &r));
    REQUIRE(r.chunks == 2 && r.longest == 3);
    /* not contiguous, or not divisible, or more than IPU__POOL_ITEM_CHUNKS items: as before */
    REQUIRE(run_once(p, 6, false, &r));
    REQUIRE(r.chunks == 6 && r.longest == 1);
    REQUIRE(run_once(p, 7, true, &r));
    REQUIRE(r.chunks == 7 && r.longest == 1);
    REQUIRE(run_once(p, 200, true, &r));
    REQUIRE(r.chunks == 8 && r.longest == 25); /* nth * IPU__POOL_CHUNKS_PER_WORKER chunks */
    ipu__pool_destroy(p);

    /* one worker: the whole range in one call either way */
    REQUIRE_OK(ipu__pool_create(1, 64, 0, &p));
    REQUIRE(run_once(p, 6, true, &r) && r.chunks == 1 && r.longest == 6);
    ipu__pool_destroy(p);
    pthread_mutex_destroy(&r.mu);
    return 0;
}

int main(void) {
    alarm(120); /* watchdog: a hang is a failure */
    RUN(test_range_chunks);
    return check_summary();
}
