/* Kernel tests for UNARY, BINARY and WHERE: against naive loops, over the whole work range and
 * split in uneven sub-ranges (kernel_harness.h), with multi-dim 2- and 3-way broadcasting. */
#include "float_ulps.h"
#include "kernel_harness.h"

static const int64_t shapes[][3][4] = {
    /* {ndim, dims...} of a (cond for WHERE), b, y */
    {{3, 2, 3, 4}, {2, 3, 1}, {3, 2, 3, 4}},   {{2, 100, 1000}, {1, 1000}, {2, 100, 1000}},
    {{1, 1}, {2, 300, 200}, {2, 300, 200}},    {{3, 7, 1, 5}, {3, 1, 9, 1}, {3, 7, 9, 5}},
    {{2, 40000, 1}, {2, 1, 3}, {2, 40000, 3}},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static void test_binary(void) {
    for (size_t s = 0; s < NSHAPES; s++) {
        for (int fn = IPU__BIN_POW; fn <= IPU__BIN_GREATER_EQUAL; fn++) {
            H *h = h_new(8 << 20);
            int cmp = fn >= IPU__BIN_EQUAL;
            uint32_t a = h_tensor(h, IPU_DTYPE_FLOAT32, (uint32_t)shapes[s][0][0],
                                  &shapes[s][0][1]);
            uint32_t b = h_tensor(h, IPU_DTYPE_FLOAT32, (uint32_t)shapes[s][1][0],
                                  &shapes[s][1][1]);
            uint32_t y = h_tensor(h, cmp ? IPU_DTYPE_BOOL : IPU_DTYPE_FLOAT32,
                                  (uint32_t)shapes[s][2][0], &shapes[s][2][1]);
            fill_f32(h, a);
            fill_f32(h, b);
            float *pa = h->ptr[a], *pb = h->ptr[b];
            for (uint64_t i = 0; i < h->t[a].numel; i++) pa[i] = roundf(pa[i]); /* some equal */
            for (uint64_t i = 0; i < h->t[b].numel; i++) pb[i] = roundf(pb[i]);
            const void *r = run(h, IPU_OP_BINARY, 2, (uint32_t[]){a, b}, y, 1, (int64_t[]){fn});
            uint64_t bad = 0;
            for (uint64_t i = 0; i < h->t[y].numel; i++) {
                float x = pa[bidx(&h->t[a], &h->t[y], i)], z = pb[bidx(&h->t[b], &h->t[y], i)];
                float want = fn == IPU__BIN_POW          ? powf(x, z)
                             : fn == IPU__BIN_MIN        ? fminf(x, z)
                             : fn == IPU__BIN_MAX        ? fmaxf(x, z)
                             : fn == IPU__BIN_EQUAL      ? (float)(x == z)
                             : fn == IPU__BIN_LESS       ? (float)(x < z)
                             : fn == IPU__BIN_GREATER    ? (float)(x > z)
                             : fn == IPU__BIN_LESS_EQUAL ? (float)(x <= z)
                                                         : (float)(x >= z);
                float got = cmp ? (float)((const uint8_t *)r)[i] : ((const float *)r)[i];
                if (want != got && !(want != want && got != got)) bad++; /* -0 == +0 */
            }
            CHECK(bad == 0, "binary fn %d shape %zu: %llu mismatches", fn, s,
                  (unsigned long long)bad);
            h_free(h);
        }
    }
}

/* POW by a broadcast exponent of 2, 0.5 or 0.75 (binary.c's fast forms): within 2 ulp of the
 * correctly rounded power over every float of a wide range, NaN exactly where pow gives NaN,
 * and pow's signed zeros and infinities (pow(-0, 0.5) = +0, pow(-inf, 0.75) = +inf); run()
 * also checks that uneven sub-ranges (other splits between the 8-wide loop and its scalar
 * tail) give the same bits. */
static void test_pow_fast(void) {
    static const float zs[] = {2.0f, 0.5f, 0.75f};
    static const float special[] = {0.0f,   -0.0f,  INFINITY, -INFINITY, NAN,   -1.0f, -2.5f,
                                    1e-45f, 1e-40f, 3.4e38f,  1.0f,      0.25f, 7.0f};
    enum { N = 4099 };
    for (size_t zi = 0; zi < sizeof zs / sizeof zs[0]; zi++) {
        H *h = h_new(1 << 20);
        uint32_t a = T(h, FLOAT32, N), b = T0(h, FLOAT32), y = T(h, FLOAT32, N);
        float *x = h->ptr[a];
        *(float *)h->ptr[b] = zs[zi];
        uint32_t u = 0x00000001u; /* positive floats from the smallest subnormal up, spread out */
        for (int i = 0; i < N; i++, u += 0x7f7fffffu / N) memcpy(&x[i], &u, 4);
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[i * 97 + 5] = special[i];
        const float *r = run(h, IPU_OP_BINARY, 2, (uint32_t[]){a, b}, y, 1,
                             (int64_t[]){IPU__BIN_POW});
        uint64_t bad = 0;
        for (int i = 0; i < N; i++) {
            float want = (float)pow((double)x[i], (double)zs[zi]), got = r[i];
            bool ok = want != want ? got != got
                                   : (signbit(want) == signbit(got) && ulps(want, got) <= 2);
            if (!ok && bad++ < 3)
                fprintf(stderr, "pow(%a, %g): got %a, want %a\n", x[i], zs[zi], got, want);
        }
        CHECK(bad == 0, "pow fast z=%g: %llu mismatches", zs[zi], (unsigned long long)bad);
        h_free(h);
    }
}

static void test_where(void) {
    for (size_t s = 0; s < NSHAPES; s++) {
        for (int k = 0; k < 2; k++) { /* int32 and uint8 data */
            H *h = h_new(8 << 20);
            ipu_dtype dt = k ? IPU_DTYPE_UINT8 : IPU_DTYPE_INT32;
            size_t es = k ? 1 : 4;
            uint32_t c = h_tensor(h, IPU_DTYPE_BOOL, (uint32_t)shapes[s][0][0], &shapes[s][0][1]);
            uint32_t x = h_tensor(h, dt, (uint32_t)shapes[s][1][0], &shapes[s][1][1]);
            uint32_t z = h_tensor(h, dt, 1, (int64_t[]){shapes[s][2][shapes[s][2][0]]});
            uint32_t y = h_tensor(h, dt, (uint32_t)shapes[s][2][0], &shapes[s][2][1]);
            uint8_t *pc = h->ptr[c];
            for (uint64_t i = 0; i < h->t[c].numel; i++) pc[i] = (uint8_t)(rnd() & 1);
            fill_bytes(h, x);
            fill_bytes(h, z);
            const uint8_t *r = run(h, IPU_OP_WHERE, 3, (uint32_t[]){c, x, z}, y, 0, NULL);
            uint64_t bad = 0;
            for (uint64_t i = 0; i < h->t[y].numel; i++) {
                uint32_t src = pc[bidx(&h->t[c], &h->t[y], i)] ? x : z;
                const uint8_t *want = (const uint8_t *)h->ptr[src] +
                                      bidx(&h->t[src], &h->t[y], i) * es;
                if (memcmp(want, r + i * es, es) != 0) bad++;
            }
            CHECK(bad == 0, "where shape %zu esize %zu: %llu mismatches", s, es,
                  (unsigned long long)bad);
            h_free(h);
        }
    }
}

static void test_unary(void) {
    H *h = h_new(8 << 20);
    int64_t n = 70001;
    uint32_t x = h_tensor(h, IPU_DTYPE_FLOAT32, 1, &n), y = h_tensor(h, IPU_DTYPE_FLOAT32, 1, &n);
    uint32_t xh = h_tensor(h, IPU_DTYPE_FLOAT16, 1, &n), yh = h_tensor(h, IPU_DTYPE_FLOAT16, 1, &n);
    fill_f32(h, x);
    fill_f16(h, xh);
    const float *px = h->ptr[x];
    const float *r = run(h, IPU_OP_UNARY, 1, (uint32_t[]){x}, y, 3,
                         (int64_t[]){IPU__UN_TANH, 0, 0});
    uint64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += tanhf(px[i]) != r[i];
    CHECK(bad == 0, "unary tanh: %llu mismatches", (unsigned long long)bad);
    const uint16_t *rh = run(h, IPU_OP_UNARY, 1, (uint32_t[]){xh}, yh, 3,
                             (int64_t[]){IPU__UN_EXP, 0, 0});
    const uint16_t *pxh = h->ptr[xh];
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += ipu__f32_to_f16(expf(ipu__f16_to_f32(pxh[i]))) != rh[i];
    CHECK(bad == 0, "unary exp f16: %llu mismatches", (unsigned long long)bad);
    /* integers: NEG/ABS wrap at INT_MIN; CLIP with int64 bounds */
    int64_t four = 4;
    uint32_t xi = h_tensor(h, IPU_DTYPE_INT32, 1, &four),
             yi = h_tensor(h, IPU_DTYPE_INT32, 1, &four);
    int32_t *pi = h->ptr[xi];
    pi[0] = INT32_MIN;
    pi[1] = -7;
    pi[2] = 0;
    pi[3] = 9;
    const int32_t *ri = run(h, IPU_OP_UNARY, 1, (uint32_t[]){xi}, yi, 3,
                            (int64_t[]){IPU__UN_ABS, 0, 0});
    CHECK(ri[0] == INT32_MIN && ri[1] == 7 && ri[2] == 0 && ri[3] == 9, "abs i32");
    ri = run(h, IPU_OP_UNARY, 1, (uint32_t[]){xi}, yi, 3, (int64_t[]){IPU__UN_CLIP, -5, INT64_MAX});
    CHECK(ri[0] == -5 && ri[1] == -5 && ri[2] == 0 && ri[3] == 9, "clip i32");
    h_free(h);
}

int main(void) {
    test_binary();
    test_pow_fast();
    test_where();
    test_unary();
    return check_summary();
}
