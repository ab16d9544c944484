/* MATMUL / GEMM float32 paths against a float64 reference, with every micro-kernel ISA: the
 * packed sgemm (B packed per call, or at load when B is TENSOR_DATA), the GEMV path (M <= 4),
 * transA / transB, alpha / beta and C broadcasts, a session binding another B in place of the
 * packed weight, and a packed weight met by another ISA at run time (batched MatMul with a
 * constant B: test_kernels.c); the micro-kernels' float16 store.
 * The harness also runs every case split into uneven work ranges (results must be identical).
 *
 * `test_kernels_gemm --bench [seconds]` prints one-thread GFLOP/s of the GEMM instruction over
 * all its work items for square, MLP, BERT, attention and batch-1 FC shapes: CPU time
 * of the best call, so that other processes sharing the machine count less. */
#include "kernel_harness.h"

static const double ALPHA = 0.5, BETA = -2.0;

/* max relative error of y = alpha * op(A) op(B) (+ BETA * C) against float64, B's values bv */
static double gemm_err(H *h, uint32_t a, double alpha, int has_c, uint32_t c, int cmode,
                       const float *y, const float *bv, int64_t M, int64_t N, int64_t K, int ta,
                       int tb) {
    const float *av = h->ptr[a], *cv = has_c ? h->ptr[c] : NULL;
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)av[ta ? k * M + i : i * K + k] * bv[tb ? j * K + k : k * N + j];
            s *= alpha;
            if (has_c) s += BETA * cv[cmode == 0 ? i * N + j : cmode == 1 ? j : i];
            double e = fabs(y[i * N + j] - s) / (1 + fabs(s));
            if (!(e <= worst)) worst = e;
        }
    return worst;
}

typedef struct gcase {
    int64_t M, N, K;
} gcase;

static void test_gemm_paths(int isa) {
    static const gcase cases[] = {
        {1, 800, 300}, {1, 70, 520},   {3, 70, 300},    {4, 33, 17},  {5, 800, 300},
        {7, 70, 520},  {130, 70, 300}, {130, 800, 97},  {200, 37, 1}, {1, 1, 1},
        {6, 16, 256},  {2, 9, 0},      {20, 2000, 260}, /* one call for all blocks of columns: B packed into 2 MB of scratch */
    };
    int used = force_isa(isa);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int cst = 0; cst < 2; cst++) {
                    int64_t M = cases[ci].M, N = cases[ci].N, K = cases[ci].K;
                    int cmode = (int)((ci + (size_t)ta + 2 * (size_t)tb) % 4); /* 3: no C */
                    H *h = h_for((uint64_t)(M * K + 2 * K * N + 2 * M * N) * 4);
                    int64_t ad[2] = {ta ? K : M, ta ? M : K}, bd[2] = {tb ? N : K, tb ? K : N};
                    int64_t cd[3][2] = {{M, N}, {N, 0}, {M, 1}};
                    uint32_t a = h_tensor(h, IPU_DTYPE_FLOAT32, 2, ad);
                    uint32_t b = h_tensor(h, IPU_DTYPE_FLOAT32, 2, bd);
                    uint32_t c = cmode < 3
                                     ? h_tensor(h, IPU_DTYPE_FLOAT32, cmode == 1 ? 1 : 2, cd[cmode])
                                     : 0;
                    uint32_t y = h_tensor(h, IPU_DTYPE_FLOAT32, 2, (int64_t[]){M, N});
                    fill_f32(h, a);
                    fill_f32(h, b);
                    if (cmode < 3) fill_f32(h, c);
                    if (cst) as_tensor_data(h, b);
                    int64_t at[4] = {ta, tb, 0, 0};
                    memcpy(&at[2], &ALPHA, 8);
                    memcpy(&at[3], &BETA, 8);
                    uint32_t ins[3] = {a, b, c};
                    const float *r = run(h, IPU_OP_GEMM, cmode < 3 ? 3 : 2, ins, y, 4, at);
                    double err = gemm_err(h, a, ALPHA, cmode < 3, c, cmode, r, h->ptr[b], M, N, K,
                                          ta, tb);
                    CHECK(err < 1e-4,
                          "gemm isa %d M %lld N %lld K %lld ta %d tb %d c %d const %d: err %g",
                          used, (long long)M, (long long)N, (long long)K, ta, tb, cmode, cst, err);
                    h_free(h);
                }
    force_isa(0);
}

/* The plan: GEMV for M <= 4, packed otherwise; B packed at load only when it is TENSOR_DATA. */
static void test_plan_paths(void) {
    static const int64_t ms[] = {1, 4, 5, 96, 97};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        for (int cst = 0; cst < 2; cst++) {
            H *h = h_new(4 << 20);
            uint32_t a = T(h, FLOAT32, ms[i], 40), b = T(h, FLOAT32, 40, 1000),
                     y = T(h, FLOAT32, ms[i], 1000);
            if (cst) as_tensor_data(h, b);
            TI ti;
            ipu_status st = ti_make(h, &ti, IPU_OP_MATMUL, 2, (uint32_t[]){a, b}, y, 0, NULL);
            const ipu__mm_plan *p = ti.ins.plan;
            int gemv = ms[i] <= IPU__GEMV_MAX_M;
            CHECK(st == IPU_OK && p->path == (gemv ? IPU__MM_GEMV : IPU__MM_PACKED) &&
                      (p->packed != NULL) == (cst && !gemv) && p->nblocks >= 2,
                  "plan M %lld const %d: path %d packed %d nblocks %lld", (long long)ms[i], cst,
                  p ? p->path : -1, p && p->packed, p ? (long long)p->nblocks : -1);
            ti_free(h, &ti);
            h_free(h);
        }
    /* float16 takes the packed path at every M (its weights packed as float32 at load),
     * integers the row-block path, nothing packed */
    for (int dt = 0; dt < 2; dt++) {
        ipu_dtype d = dt ? IPU_DTYPE_INT32 : IPU_DTYPE_FLOAT16;
        H *h = h_new(1 << 20);
        uint32_t a = h_tensor(h, d, 2, (int64_t[]){2, 40});
        uint32_t b = h_tensor(h, d, 2, (int64_t[]){40, 50});
        uint32_t y = h_tensor(h, d, 2, (int64_t[]){2, 50});
        as_tensor_data(h, b);
        TI ti;
        ipu_status st = ti_make(h, &ti, IPU_OP_MATMUL, 2, (uint32_t[]){a, b}, y, 0, NULL);
        const ipu__mm_plan *p = ti.ins.plan;
        CHECK(st == IPU_OK && p->path == (dt ? IPU__MM_ROWS : IPU__MM_PACKED) &&
                  (p->packed != NULL) == !dt,
              "%s plan", dt ? "i32" : "f16");
        ti_free(h, &ti);
        h_free(h);
    }
}

/* MatMul row blocks are whole micro-kernel tiles (a block of 66 rows would make the 12-row
 * AVX-512 kernel compute 72), as even as that allows, and cover every row. */
static void test_matmul_row_blocks(int isa) {
    int used = force_isa(isa);
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    static const int64_t ms[] = {128, 256, 1000, 97};
    for (size_t c = 0; c < sizeof ms / sizeof ms[0]; c++) {
        H *h = h_new(16 << 20);
        uint32_t a = T(h, FLOAT32, ms[c], 64), b = T(h, FLOAT32, 64, 768);
        uint32_t y = T(h, FLOAT32, ms[c], 768);
        TI ti;
        CHECK(ti_make(h, &ti, IPU_OP_MATMUL, 2, (uint32_t[]){a, b}, y, 0, NULL) == IPU_OK,
              "row blocks %zu: verify: %s", c, ipu_last_error_message());
        const ipu__mm_plan *p = ti.ins.plan;
        CHECK(p->path == IPU__MM_PACKED && p->mb % u.mr == 0 && p->mb * p->mblocks >= ms[c] &&
                  p->mb * (p->mblocks - 1) < ms[c],
              "row blocks isa %d, M = %lld: %lld blocks of %lld rows (mr %d)", used,
              (long long)ms[c], (long long)p->mblocks, (long long)p->mb, u.mr);
        ti_free(h, &ti);
        h_free(h);
    }
    force_isa(0);
}

/* 1x1 convolutions of one group with at most two weight panels of output channels on planes of
 * 1024 pixels or more keep the GEMM path (conv_plan.c tpose_rows: the small-map path would
 * read A's columns from planes pages apart), where the padded products alone would pick the
 * small-map path (these shapes do on every micro-kernel). */
static void test_conv_pointwise_large_planes(int isa) {
    int used = force_isa(isa);
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    static const int64_t cases[][3] = {{256, 56, 2}, {64, 32, 2}, {128, 40, 1}}; /* C, H, M/nr */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t C = cases[c][0], HW = cases[c][1], M = cases[c][2] * u.nr;
        H *h;
        TI ti;
        const ipu__conv_plan *p = h_conv_plan(&h, &ti, C, HW, 1, M);
        CHECK(p && !p->tpose, "pointwise %zu, isa %d: %lld -> %lld on %lld x %lld took tpose", c,
              used, (long long)C, (long long)M, (long long)HW, (long long)HW);
        ti_free(h, &ti);
        h_free(h);
    }
    force_isa(0);
}

/* The edge-tile kernel against the full one: every h x w corner, accumulating or not, with
 * each epilogue; bit for bit (same operations per element), nothing outside the corner read
 * into the result or written (guards around it; rows of A past h hold values, not zeros). */
static void test_ukr_part(int isa) {
    int used = force_isa(isa);
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    enum { KC = 37, LD = IPU__SGEMM_MAX_NR + 5, ROWS = IPU__SGEMM_MAX_MR + 2 };
    static float ap[KC * IPU__SGEMM_MAX_MR];
    static float bp[KC * IPU__SGEMM_MAX_NR] __attribute__((aligned(64)));
    static float full[IPU__SGEMM_MAX_MR * IPU__SGEMM_MAX_NR] __attribute__((aligned(64)));
    float bias[IPU__SGEMM_MAX_MR], res[ROWS * LD], c0[ROWS * LD], c[ROWS * LD];
    for (int i = 0; i < KC * u.mr; i++) ap[i] = rndf();
    for (int i = 0; i < KC * u.nr; i++) bp[i] = rndf();
    for (int i = 0; i < u.mr; i++) bias[i] = rndf();
    for (int i = 0; i < ROWS * LD; i++) res[i] = rndf();
    res[LD + 1] = NAN; /* ReLU keeps NaNs */
    u.fn(KC, ap, bp, full, u.nr, 0, NULL, 0);
    int bad = 0, cases = 0;
    for (int h = 1; h <= u.mr; h++)
        for (int w = 1; w <= u.nr; w++)
            for (int mode = 0; mode < 8; mode++) { /* bit 0 acc, 1 bias + residual, 2 ReLU */
                int acc = mode & 1;
                ipu__tile_ep ep = {mode & 2 ? bias : NULL,
                                   mode & 2 ? res + LD + 1 : NULL,
                                   LD,
                                   mode >> 2,
                                   NULL,
                                   0,
                                   NULL};
                for (int i = 0; i < ROWS * LD; i++) c0[i] = c[i] = (float)(i % 7) - 3.0f;
                u.part(h, w, KC, ap, bp, NULL, c + LD + 1, LD, acc, mode & 6 ? &ep : NULL);
                for (int i = 0; i < h; i++)
                    for (int j = 0; j < w; j++) {
                        float *o = &c0[(i + 1) * LD + 1 + j];
                        float v = full[i * u.nr + j];
                        if (acc) v = *o + v;
                        if (ep.bias) {
                            v += bias[i];
                            v += res[(i + 1) * LD + 1 + j];
                        }
                        if (ep.relu) v = ipu__relu_f32(v);
                        *o = v;
                    }
                cases++;
                if (memcmp(c, c0, sizeof c)) bad++;
            }
    CHECK(!bad, "ukr part isa %d: %d of %d corners differ from the full tile", used, bad, cases);
    force_isa(0);
}

/* The full tile with a prefetch stream (fewer, as many and more lines than k steps) computes
 * what it does without one, bit for bit; ipu__prefetch_share splits a panel's lines over the
 * tiles without gaps or overlaps (each tile a share, the last ending at the panel's end). */
static void test_ukr_prefetch_stream(int isa) {
    int used = force_isa(isa);
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    enum { KC = 40 };
    static float ap[KC * IPU__SGEMM_MAX_MR], next[4 * KC * 16];
    static float bp[KC * IPU__SGEMM_MAX_NR] __attribute__((aligned(64)));
    static float c0[IPU__SGEMM_MAX_MR * IPU__SGEMM_MAX_NR];
    static float c[IPU__SGEMM_MAX_MR * IPU__SGEMM_MAX_NR];
    for (int i = 0; i < KC * u.mr; i++) ap[i] = rndf();
    for (int i = 0; i < KC * u.nr; i++) bp[i] = rndf();
    for (int acc = 0; acc < 2; acc++) {
        for (int i = 0; i < u.mr * u.nr; i++) c0[i] = c[i] = rndf();
        u.fn(KC, ap, bp, c0, u.nr, acc, NULL, 0);
        static const int64_t ns[] = {1, 7, KC, KC + 1, 4 * KC};
        for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
            float r[IPU__SGEMM_MAX_MR * IPU__SGEMM_MAX_NR];
            memcpy(r, c, sizeof r);
            u.fn(KC, ap, bp, r, u.nr, acc, next, ns[t]);
            CHECK(!memcmp(r, c0, sizeof(float) * (size_t)(u.mr * u.nr)),
                  "ukr isa %d acc %d: %lld prefetched lines change the tile", used, acc,
                  (long long)ns[t]);
        }
    }
    static const int64_t shares[][2] = {{512, 8}, {512, 3}, {5, 8}, {1, 1}, {100, 7}};
    for (size_t t = 0; t < sizeof shares / sizeof shares[0]; t++) {
        int64_t lines = shares[t][0], calls = shares[t][1], done = 0, seen = 0, n;
        int ok = ipu__prefetch_share(NULL, lines, 0, calls, &done, &n) == NULL && n == 0;
        for (int64_t i = 0; i < calls; i++) {
            const float *p = ipu__prefetch_share(next, lines, i, calls, &done, &n);
            ok = ok && p == next + seen * 16 && n >= 0 && n <= lines / calls + 1;
            seen += n;
        }
        CHECK(ok && seen == lines && done == lines, "prefetch shares of %lld lines over %lld",
              (long long)lines, (long long)calls);
    }
    force_isa(0);
}

/* B packed at load, then (1) the session binds another B: the kernel must read that one; (2) the
 * micro-kernel in use differs from the one B was packed for: packed per call instead. */
/* The half store (ipu__tile_ep.yh) of every micro-kernel that has one: each variant (ep,
 * rows, arows, part at several edge sizes), with and without accumulation, bias, a half
 * residual and Relu, stores exactly ipu__f32_to_f16 of what the same variant stores in float32
 * (the residual given as the same values in float32), and nothing outside its h x w corner. */
static void test_ukr_half(void) {
    for (int isa = 2; isa <= 3; isa++) {
        int used = force_isa(isa);
        ipu__ukr u;
        ipu__sgemm_ukr(&u);
        if (used != isa) continue;
        CHECK(u.half, "ukr isa %d: no half store", isa);
        enum { KC = 37, SRC = 4096, LD = 40 };
        float *a = aligned_alloc(64, sizeof(float) * KC * IPU__SGEMM_MAX_MR);
        float *bp = aligned_alloc(64, sizeof(float) * KC * IPU__SGEMM_MAX_NR);
        float *src = malloc(sizeof(float) * SRC);
        float c0[IPU__SGEMM_MAX_MR * LD], c1[sizeof c0 / 4], cin[sizeof c0 / 4];
        float bias[IPU__SGEMM_MAX_MR];
        float res[IPU__SGEMM_MAX_MR * LD];
        uint16_t yh[IPU__SGEMM_MAX_MR * LD], resh[IPU__SGEMM_MAX_MR * LD];
        int64_t off[KC], aoff[KC];
        for (int i = 0; i < SRC; i++) src[i] = rndf();
        for (int k = 0; k < KC; k++) {
            off[k] = (int64_t)((k * 97 + 13) % (SRC - u.nr));
            aoff[k] = (int64_t)((k * 89 + 7) % (SRC - u.mr));
            memcpy(bp + k * u.nr, src + off[k], sizeof(float) * (size_t)u.nr);
            memcpy(a + k * u.mr, src + aoff[k], sizeof(float) * (size_t)u.mr);
        }
        for (int i = 0; i < u.mr; i++) bias[i] = rndf() / 7.0f; /* not exact in half */
        for (size_t i = 0; i < sizeof res / 4; i++) {
            resh[i] = ipu__f32_to_f16(rndf() * 3.1f);
            res[i] = ipu__f16_to_f32(resh[i]);
        }
        const int hw[][2] = {{0, 0}, {1, 1}, {3, 5}, {5, 17}, {7, 31}, {11, 16}, {2, 32}};
        /* kind: 0 ep, 1 rows, 2 arows, 3.. part at hw[kind - 3] (0, 0: a whole tile) */
        for (int kind = 0; kind < 3 + (int)(sizeof hw / sizeof hw[0]); kind++)
            for (int v = 0; v < 8; v++) { /* v & 1: acc; v & 2: residual; v & 4: bias, Relu */
                int acc = v & 1, h = u.mr, w = u.nr;
                if (kind >= 3 && hw[kind - 3][0]) {
                    h = hw[kind - 3][0] < u.mr ? hw[kind - 3][0] : u.mr;
                    w = hw[kind - 3][1] < u.nr ? hw[kind - 3][1] : u.nr;
                }
                ipu__tile_ep ef = {
                    v & 4 ? bias : NULL, v & 2 ? res : NULL, LD, v & 4 ? 1 : 0, NULL, 0, NULL};
                ipu__tile_ep eh = ef;
                eh.res = NULL;
                eh.resh = v & 2 ? resh : NULL;
                eh.yh = yh;
                eh.ldy = LD;
                for (size_t i = 0; i < sizeof c0 / 4; i++) c0[i] = c1[i] = cin[i] = rndf();
                for (size_t i = 0; i < sizeof yh / 2; i++) yh[i] = 0xABCD;
                const ipu__tile_ep *es[2] = {&ef, &eh};
                float *cs[2] = {c0, c1};
                for (int o = 0; o < 2; o++) {
                    if (kind == 0)
                        u.ep(KC, a, bp, cs[o], LD, acc, es[o]);
                    else if (kind == 1)
                        u.rows(KC, a, src, off, cs[o], LD, acc, es[o]);
                    else if (kind == 2)
                        u.arows(KC, src, bp, aoff, cs[o], LD, acc, es[o]);
                    else
                        u.part(h, w, KC, a, bp, NULL, cs[o], LD, acc, es[o]);
                }
                int bad = memcmp(c1, cin, sizeof cin) != 0; /* C: only read */
                for (int i = 0; i < IPU__SGEMM_MAX_MR; i++)
                    for (int j = 0; j < LD; j++) {
                        uint16_t want = i < h && j < w ? ipu__f32_to_f16(c0[i * LD + j]) : 0xABCD;
                        bad += yh[i * LD + j] != want;
                    }
                CHECK(bad == 0, "ukr half isa %d kind %d case %d: %d wrong", isa, kind, v, bad);
            }
        free(a);
        free(bp);
        free(src);
    }
    /* the portable level: no half store */
    force_isa(1);
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    CHECK(!u.half, "half store at the portable level");
    force_isa(0);
}

static void test_packed_b_not_used(void) {
    int64_t M = 50, N = 70, K = 300;
    H *h = h_new(4 << 20);
    uint32_t a = T(h, FLOAT32, M, K), b = T(h, FLOAT32, K, N), b2 = T(h, FLOAT32, K, N);
    uint32_t y = T(h, FLOAT32, M, N);
    fill_f32(h, a);
    fill_f32(h, b);
    fill_f32(h, b2);
    as_tensor_data(h, b);
    double one = 1.0, zero = 0.0;
    int64_t at[4] = {0, 0, 0, 0};
    memcpy(&at[2], &one, 8);
    memcpy(&at[3], &zero, 8);
    for (int mode = 0; mode < 2; mode++) {
        force_isa(mode == 1 ? 2 : 0);
        TI ti;
        ipu_status st = ti_make(h, &ti, IPU_OP_GEMM, 2, (uint32_t[]){a, b}, y, 4, at);
        CHECK(st == IPU_OK && ((const ipu__mm_plan *)ti.ins.plan)->packed, "packed plan");
        void *saved = h->ptr[b];
        if (mode == 0)
            h->ptr[b] = h->ptr[b2]; /* what BIND of a user buffer does */
        else
            force_isa(1); /* portable kernel: other panel width */
        ipu__frame f = {.exe = &h->e, .ptr = h->ptr};
        CHECK(ipu__instr_run(&f, &ti.ins, 0, ipu__instr_work(&h->e, &ti.ins), h->scratch) == IPU_OK,
              "run");
        const float *bv = mode == 0 ? h->ptr[b2] : h->ptr[b];
        double err = gemm_err(h, a, 1.0, 0, 0, 3, h->ptr[y], bv, M, N, K, 0, 0);
        CHECK(err < 1e-4, "packed weight not used (mode %d): err %g", mode, err);
        h->ptr[b] = saved;
        ti_free(h, &ti);
    }
    force_isa(0);
    h_free(h);
}

/* ---- benchmark ---------------------------------------------------------------------------- */

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench(double seconds) {
    /* M, N, K, B in the executable, transB */
    static const int64_t shapes[][5] = {
        {64, 64, 64, 0, 0},      {128, 128, 128, 0, 0},    {256, 256, 256, 0, 0},
        {512, 512, 512, 0, 0},   {1024, 1024, 1024, 0, 0}, {2048, 2048, 2048, 0, 0},
        {128, 4096, 1024, 1, 0}, {128, 1024, 4096, 1, 0},  {128, 2304, 768, 1, 0},
        {128, 768, 3072, 1, 0},  {1, 4096, 9216, 1, 1},    {1, 4096, 4096, 1, 1},
        {1, 1000, 4096, 1, 1},   {1, 4096, 4096, 1, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
        int cst = (int)shapes[i][3], tb = (int)shapes[i][4];
        H *h = h_for((uint64_t)(M * K + K * N + M * N) * 4);
        uint32_t a = T(h, FLOAT32, M, K), b = tb ? T(h, FLOAT32, N, K) : T(h, FLOAT32, K, N);
        uint32_t y = T(h, FLOAT32, M, N);
        fill_f32(h, a);
        fill_f32(h, b);
        if (cst) as_tensor_data(h, b);
        double one = 1.0, zero = 0.0;
        int64_t at[4] = {0, tb, 0, 0};
        memcpy(&at[2], &one, 8);
        memcpy(&at[3], &zero, 8);
        TI ti;
        if (ti_make(h, &ti, IPU_OP_GEMM, 2, (uint32_t[]){a, b}, y, 4, at) != IPU_OK) {
            printf("verify failed: %s\n", ipu_last_error_message());
            h_free(h);
            continue;
        }
        ipu__frame f = {.exe = &h->e, .ptr = h->ptr};
        size_t w = ipu__instr_work(&h->e, &ti.ins);
        double best = 1e30, t0 = cpu_now();
        for (int reps = 0; reps < 3 || cpu_now() - t0 < seconds; reps++) {
            double s = cpu_now();
            (void)ipu__instr_run(&f, &ti.ins, 0, w, h->scratch);
            double d = cpu_now() - s;
            if (d < best) best = d;
        }
        printf("GEMM %5lld x %5lld x %5lld%s%s: %9.3f ms %6.1f GFLOP/s\n", (long long)M,
               (long long)N, (long long)K, cst ? " B constant" : "           ",
               tb ? " transB" : "       ", best * 1e3, 2.0 * (double)(M * N * K) / best * 1e-9);
        ti_free(h, &ti);
        h_free(h);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        bench(argc > 2 ? atof(argv[2]) : 0.5);
        return 0;
    }
    for (int isa = 1; isa <= 3; isa++) {
        test_gemm_paths(isa);
        test_matmul_row_blocks(isa);
        test_conv_pointwise_large_planes(isa);
        test_ukr_part(isa);
        test_ukr_prefetch_stream(isa);
    }
    test_plan_paths();
    test_ukr_half();
    test_packed_b_not_used();
    return check_summary();
}
