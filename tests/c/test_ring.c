/* SPSC ring tests: single-thread edge cases and a two-thread FIFO/sum check.
 *
 * Usage: test_ring [N [CAP,CAP,...]]
 *   N    items per two-thread run (default 10^6: the functional run in every build);
 *   CAPs ring capacities to run the two-thread check with (default 1,2,64,1024).
 * The `ring_stress` meson test (suite 'stress', run under ThreadSanitizer by
 * tests/test_c_sanitizers.py) passes N = 10^7. Both threads yield at random about once per
 * 1024 operations so the stress sees more interleavings than lock-step spinning gives. */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "ipu/ipu.h"

static void test_create_args(void) {
    ipu_ring *r = NULL;
    CHECK(ipu_ring_create(0, 8, &r) == IPU_ERR_INVALID_ARGUMENT && r == NULL);
    CHECK(ipu_ring_create(4, 0, &r) == IPU_ERR_INVALID_ARGUMENT && r == NULL);
    CHECK(ipu_ring_create(4, 8, NULL) == IPU_ERR_INVALID_ARGUMENT);
    CHECK(ipu_ring_create(SIZE_MAX, 8, &r) == IPU_ERR_INVALID_ARGUMENT && r == NULL);
    CHECK(ipu_ring_create((SIZE_MAX >> 1) + 2, 1, &r) == IPU_ERR_INVALID_ARGUMENT && r == NULL);
    CHECK(ipu_ring_create((size_t)1 << 40, (size_t)1 << 40, &r) == IPU_ERR_INVALID_ARGUMENT);
    ipu_ring_destroy(NULL);
    CHECK(ipu_ring_capacity(NULL) == 0 && ipu_ring_size(NULL) == 0);
}

static void test_exact_capacity(void) {
    /* Capacities that are not powers of two are honoured exactly (Model Runtime's ring sizes
     * are multiplier x batches_per_step). */
    static const size_t in[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 63, 64, 65, 1000, 1024, 1025};
    static const size_t *want = in;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        ipu_ring *r = NULL;
        CHECK(ipu_ring_create(in[i], 4, &r) == IPU_OK);
        CHECK(ipu_ring_capacity(r) == want[i]);
        /* Exactly `capacity` items fit. */
        size_t n = 0;
        uint32_t v = 0;
        while (ipu_ring_try_push(r, &v)) {
            n++;
            v++;
            if (n > want[i]) break;
        }
        CHECK(n == want[i]);
        CHECK(ipu_ring_size(r) == want[i]);
        ipu_ring_destroy(r);
    }
}

static void test_full_empty_front(void) {
    ipu_ring *r = NULL;
    CHECK(ipu_ring_create(4, sizeof(uint64_t), &r) == IPU_OK);
    uint64_t v = 0;
    CHECK(ipu_ring_size(r) == 0);
    CHECK(ipu_ring_front(r) == NULL);
    CHECK(!ipu_ring_try_pop(r, &v));
    /* Wrap around many times with a mix of fill levels. */
    uint64_t next_in = 1, next_out = 1;
    int ok = 1;
    for (int round = 0; round < 1000; round++) {
        int fill = round % 5; /* 0..4 items */
        for (int k = 0; k < fill; k++) ok &= ipu_ring_try_push(r, &next_in) ? (next_in++, 1) : 0;
        if (fill == 4) ok &= !ipu_ring_try_push(r, &next_in);
        ok &= ipu_ring_size(r) == (size_t)fill;
        for (int k = 0; k < fill; k++) {
            uint64_t *f = ipu_ring_front(r);
            ok &= f != NULL && *f == next_out;
            ok &= ipu_ring_size(r) == (size_t)(fill - k);
            ok &= ipu_ring_try_pop(r, &v) && v == next_out;
            next_out++;
        }
        ok &= ipu_ring_front(r) == NULL && !ipu_ring_try_pop(r, &v);
    }
    CHECK(ok);
    CHECK(next_in == next_out);
    /* Full: push fails and leaves contents intact; front does not consume. */
    for (uint64_t i = 10; i < 14; i++) CHECK(ipu_ring_try_push(r, &i));
    uint64_t extra = 99;
    CHECK(!ipu_ring_try_push(r, &extra));
    CHECK(ipu_ring_size(r) == 4);
    CHECK(*(uint64_t *)ipu_ring_front(r) == 10);
    CHECK(*(uint64_t *)ipu_ring_front(r) == 10);
    CHECK(ipu_ring_try_pop(r, &v) && v == 10);
    CHECK(ipu_ring_try_push(r, &extra));
    for (uint64_t want = 11; want < 14; want++) CHECK(ipu_ring_try_pop(r, &v) && v == want);
    CHECK(ipu_ring_try_pop(r, &v) && v == 99);
    CHECK(!ipu_ring_try_pop(r, &v));
    ipu_ring_destroy(r);
}

static void test_big_items(void) {
    /* Odd item size: bytes are copied exactly and slots do not bleed into each other. */
    enum { SZ = 37 };
    ipu_ring *r = NULL;
    CHECK(ipu_ring_create(3, SZ, &r) == IPU_OK);
    CHECK(ipu_ring_capacity(r) == 3);
    unsigned char in[SZ], out[SZ + 1];
    int ok = 1;
    for (int i = 0; i < 100; i++) {
        memset(in, i, SZ);
        ok &= ipu_ring_try_push(r, in);
        if (i % 3 == 2) {
            for (int k = i - 2; k <= i; k++) {
                memset(out, 0xEE, sizeof out);
                ok &= ipu_ring_try_pop(r, out);
                for (int b = 0; b < SZ; b++) ok &= out[b] == (unsigned char)k;
                ok &= out[SZ] == 0xEE;
            }
        }
    }
    CHECK(ok);
    ipu_ring_destroy(r);
}

typedef struct job {
    ipu_ring *r;
    uint64_t n;
    uint64_t sum;
    uint64_t errors;
} job;

/* xorshift64: per-thread jitter source. */
static uint64_t next_rand(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void jitter(uint64_t *s) {
    if ((next_rand(s) & 1023) == 0) sched_yield();
}

static void backoff(unsigned *spins) {
    if (++*spins > 64) {
        sched_yield();
        *spins = 0;
    }
}

static void *producer(void *arg) {
    job *j = arg;
    unsigned spins = 0;
    uint64_t rng = 0x9E3779B97F4A7C15u;
    for (uint64_t i = 1; i <= j->n; i++) {
        while (!ipu_ring_try_push(j->r, &i)) backoff(&spins);
        jitter(&rng);
    }
    return NULL;
}

static void *consumer(void *arg) {
    job *j = arg;
    unsigned spins = 0;
    uint64_t expect = 1, v, sum = 0, errors = 0, rng = 0xD1B54A32D192ED03u;
    while (expect <= j->n) {
        if ((expect & 1023) == 0) {
            uint64_t *f = ipu_ring_front(j->r);
            if (f && *f != expect) errors++;
            size_t s = ipu_ring_size(j->r);
            if (s > ipu_ring_capacity(j->r)) errors++;
        }
        if (!ipu_ring_try_pop(j->r, &v)) {
            backoff(&spins);
            continue;
        }
        if (v != expect) {
            if (errors++ < 5)
                fprintf(stderr, "FIFO violation: got %" PRIu64 " want %" PRIu64 "\n", v, expect);
        }
        sum += v;
        expect++;
        jitter(&rng);
    }
    j->sum = sum;
    j->errors = errors;
    return NULL;
}

static void test_two_threads(uint64_t n, size_t capacity) {
    ipu_ring *r = NULL;
    CHECK(ipu_ring_create(capacity, sizeof(uint64_t), &r) == IPU_OK);
    if (!r) return;
    job j = {r, n, 0, 0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t p, c;
    CHECK(pthread_create(&c, NULL, consumer, &j) == 0);
    CHECK(pthread_create(&p, NULL, producer, &j) == 0);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    /* Sum 1..n = n(n+1)/2 (mod 2^64, the same wrap as the running sum). */
    uint64_t want = (n % 2 == 0) ? (n / 2) * (n + 1) : n * ((n + 1) / 2);
    CHECK(j.errors == 0);
    CHECK(j.sum == want);
    CHECK(ipu_ring_size(r) == 0);
    printf("  two threads, capacity %-5zu: %" PRIu64 " items in %.3f s (%.1f M/s)\n", capacity, n,
           secs, secs > 0 ? (double)n / secs / 1e6 : 0.0);
    ipu_ring_destroy(r);
}

/* Parses "1,2,64" into caps (at most max entries); returns the count, 0 on a malformed list. */
static size_t parse_caps(const char *s, size_t *caps, size_t max) {
    size_t k = 0;
    while (*s) {
        char *end;
        unsigned long long c = strtoull(s, &end, 10);
        if (end == s || c == 0 || c > ((size_t)1 << 20) || k == max) return 0;
        caps[k++] = (size_t)c;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return 0;
    }
    return k;
}

int main(int argc, char **argv) {
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000u;
    if (n == 0) n = 1;
    size_t caps[16] = {1, 2, 64, 1024};
    size_t ncaps = 4;
    if (argc > 2 && (ncaps = parse_caps(argv[2], caps, sizeof caps / sizeof caps[0])) == 0) {
        fprintf(stderr, "usage: %s [N [CAP,CAP,...]]  (bad capacity list '%s')\n", argv[0],
                argv[2]);
        return 2;
    }
    test_create_args();
    test_exact_capacity();
    test_full_empty_front();
    test_big_items();
    for (size_t i = 0; i < ncaps; i++) test_two_threads(n, caps[i]);
    return check_summary();
}
