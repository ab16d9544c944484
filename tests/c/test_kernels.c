/* Kernel tests: every kernel against a naive reference, over the whole work range and split
 * into uneven sub-ranges run in reverse order (results must be byte-identical).
 *
 * `test_kernels --bench` prints single-thread GFLOP/s instead: each micro-kernel alone (in
 * cache), then sgemm for n = 64..1024. */
#include "kernel_harness.h"

/* ---- element-wise ------------------------------------------------------------------------- */

static float fop(int op, float a, float b) {
    switch (op) {
        case IPU_OP_ADD: return a + b;
        case IPU_OP_SUB: return a - b;
        case IPU_OP_MUL: return a * b;
        default: return a / b;
    }
}

static void test_binary_f32(void) {
    static const int64_t shapes[][3][4] = {
        /* {ndim a, dims...}, {b}, {y} ; dims padded */
        {{3, 2, 3, 4}, {2, 3, 1}, {3, 2, 3, 4}},   {{2, 100, 1000}, {1, 1000}, {2, 100, 1000}},
        {{1, 1}, {2, 300, 200}, {2, 300, 200}},    {{3, 7, 1, 5}, {3, 1, 9, 1}, {3, 7, 9, 5}},
        {{2, 40000, 1}, {2, 1, 3}, {2, 40000, 3}}, {{0}, {0}, {0}},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int op = IPU_OP_ADD; op <= IPU_OP_DIV; op++) {
            H *h = h_new(8 << 20);
            uint32_t a = h_tensor(h, IPU_DTYPE_FLOAT32, (uint32_t)shapes[s][0][0],
                                  &shapes[s][0][1]);
            uint32_t b = h_tensor(h, IPU_DTYPE_FLOAT32, (uint32_t)shapes[s][1][0],
                                  &shapes[s][1][1]);
            uint32_t y = h_tensor(h, IPU_DTYPE_FLOAT32, (uint32_t)shapes[s][2][0],
                                  &shapes[s][2][1]);
            fill_f32(h, a);
            fill_f32(h, b);
            const float *r = run(h, (ipu_opcode)op, 2, (uint32_t[]){a, b}, y, 0, NULL);
            const float *pa = h->ptr[a], *pb = h->ptr[b];
            uint64_t bad = 0;
            for (uint64_t i = 0; i < h->t[y].numel; i++) {
                float want = fop(op, pa[bidx(&h->t[a], &h->t[y], i)],
                                 pb[bidx(&h->t[b], &h->t[y], i)]);
                if (memcmp(&want, &r[i], 4) != 0) bad++;
            }
            CHECK(bad == 0, "binary f32 op %d shape %zu: %llu mismatches", op, s,
                  (unsigned long long)bad);
            h_free(h);
        }
    }
}

static void test_binary_f16_int(void) {
    for (int op = IPU_OP_ADD; op <= IPU_OP_DIV; op++) {
        H *h = h_new(1 << 20);
        uint32_t a = T(h, FLOAT16, 5, 300), b = T(h, FLOAT16, 300), y = T(h, FLOAT16, 5, 300);
        fill_f16(h, a);
        fill_f16(h, b);
        const uint16_t *r = run(h, (ipu_opcode)op, 2, (uint32_t[]){a, b}, y, 0, NULL);
        const uint16_t *pa = h->ptr[a], *pb = h->ptr[b];
        int bad = 0;
        for (int i = 0; i < 1500; i++) {
            uint16_t want = ipu__f32_to_f16(
                fop(op, ipu__f16_to_f32(pa[i]), ipu__f16_to_f32(pb[i % 300])));
            bad += want != r[i] && !(isnan(ipu__f16_to_f32(want)) && isnan(ipu__f16_to_f32(r[i])));
        }
        CHECK(bad == 0, "binary f16 op %d: %d mismatches", op, bad);
        h_free(h);
    }
    /* int32: wrap-around, division truncates, x/0 == 0, MIN/-1 == MIN; scalar broadcast */
    H *h = h_new(1 << 20);
    uint32_t a = T(h, INT32, 6), b = T(h, INT32, 6), s = T0(h, INT32), y = T(h, INT32, 6);
    int32_t av[6] = {7, -7, INT32_MIN, 5, INT32_MAX, -9}, bv[6] = {2, 2, -1, 0, 2, -4};
    memcpy(h->ptr[a], av, sizeof av);
    memcpy(h->ptr[b], bv, sizeof bv);
    *(int32_t *)h->ptr[s] = 3;
    const int32_t *r = run(h, IPU_OP_DIV, 2, (uint32_t[]){a, b}, y, 0, NULL);
    int32_t want_div[6] = {3, -3, INT32_MIN, 0, INT32_MAX / 2, 2};
    CHECK(memcmp(r, want_div, sizeof want_div) == 0, "int32 div %d %d %d %d %d %d", r[0], r[1],
          r[2], r[3], r[4], r[5]);
    r = run(h, IPU_OP_MUL, 2, (uint32_t[]){a, b}, y, 0, NULL);
    CHECK(r[2] == INT32_MIN && r[4] == -2, "int32 mul wraps: %d %d", r[2], r[4]);
    r = run(h, IPU_OP_ADD, 2, (uint32_t[]){s, a}, y, 0, NULL);
    CHECK(r[4] == INT32_MIN + 2 && r[0] == 10, "int32 scalar add wraps: %d", r[4]);
    r = run(h, IPU_OP_SUB, 2, (uint32_t[]){a, s}, y, 0, NULL);
    CHECK(r[2] == INT32_MAX - 2 && r[5] == -12, "int32 sub: %d", r[2]);
    h_free(h);
    h = h_new(1 << 20);
    a = T(h, INT64, 4);
    b = T(h, INT64, 4);
    y = T(h, INT64, 4);
    int64_t a64[4] = {INT64_MAX, INT64_MIN, -9, 100}, b64[4] = {2, -1, 0, -7};
    memcpy(h->ptr[a], a64, sizeof a64);
    memcpy(h->ptr[b], b64, sizeof b64);
    const int64_t *r64 = run(h, IPU_OP_MUL, 2, (uint32_t[]){a, b}, y, 0, NULL);
    CHECK(r64[0] == -2 && r64[1] == INT64_MIN && r64[2] == 0 && r64[3] == -700, "int64 mul");
    r64 = run(h, IPU_OP_DIV, 2, (uint32_t[]){a, b}, y, 0, NULL);
    CHECK(r64[1] == INT64_MIN && r64[2] == 0 && r64[3] == -14, "int64 div");
    r64 = run(h, IPU_OP_ADD, 2, (uint32_t[]){a, b}, y, 0, NULL);
    CHECK(r64[0] == INT64_MIN + 1, "int64 add wraps");
    h_free(h);
}

static void test_relu(void) {
    H *h = h_new(1 << 20);
    uint32_t x = T(h, FLOAT32, 20000), y = T(h, FLOAT32, 20000);
    fill_f32(h, x);
    float *px = h->ptr[x];
    px[0] = NAN;
    px[1] = -0.0f;
    px[2] = -INFINITY;
    const float *r = run(h, IPU_OP_RELU, 1, &x, y, 0, NULL);
    int bad = 0;
    for (int i = 3; i < 20000; i++) bad += r[i] != (px[i] < 0 ? 0.0f : px[i]);
    CHECK(bad == 0 && isnan(r[0]) && r[1] == 0.0f && !signbit(r[1]) && r[2] == 0.0f, "relu f32");
    uint32_t xh = T(h, FLOAT16, 7), yh = T(h, FLOAT16, 7);
    uint16_t hv[7] = {0x3c00, 0xbc00, 0x8000, 0x7e00, 0xfe00, 0xfc00, 0x0001};
    memcpy(h->ptr[xh], hv, sizeof hv);
    const uint16_t *rh = run(h, IPU_OP_RELU, 1, &xh, yh, 0, NULL);
    uint16_t wh[7] = {0x3c00, 0, 0, 0x7e00, 0xfe00, 0, 0x0001};
    CHECK(memcmp(rh, wh, sizeof wh) == 0, "relu f16");
    uint32_t xi = T(h, INT64, 3), yi = T(h, INT64, 3);
    int64_t iv[3] = {-5, 0, 5};
    memcpy(h->ptr[xi], iv, sizeof iv);
    const int64_t *ri = run(h, IPU_OP_RELU, 1, &xi, yi, 0, NULL);
    CHECK(ri[0] == 0 && ri[1] == 0 && ri[2] == 5, "relu i64");
    h_free(h);
}

/* ---- matmul / gemm ------------------------------------------------------------------------ */

/* y[b..., M, N] reference with batch broadcasting (a, b as float arrays) */
static void ref_matmul(const ipu__tensor *ta, const float *a, const ipu__tensor *tb, const float *b,
                       const ipu__tensor *ty, double *y) {
    uint32_t yn = ty->desc.ndim;
    int64_t M = ty->desc.dims[yn - 2], N = ty->desc.dims[yn - 1],
            K = ta->desc.dims[ta->desc.ndim - 1];
    uint64_t batch = ty->numel / (uint64_t)(M * N != 0 ? M * N : 1);
    ipu__tensor ya = *ty, yb = *ty, sa = *ta, sb = *tb;
    /* broadcast over batch dims only: view batch as tensors */
    ya.desc.ndim = yb.desc.ndim = yn - 2;
    sa.desc.ndim -= 2;
    sb.desc.ndim -= 2;
    for (uint64_t bi = 0; bi < batch; bi++) {
        uint64_t ia = bidx(&sa, &ya, bi), ib = bidx(&sb, &yb, bi);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (double)a[ia * M * K + i * K + k] * b[ib * K * N + k * N + j];
                y[bi * M * N + i * N + j] = s;
            }
    }
}

static void test_matmul_f32(int isa) {
    static const int64_t cases[][2][5] = {
        {{2, 37, 53}, {2, 53, 29}},
        {{4, 2, 1, 37, 53}, {3, 3, 53, 29}},
        {{2, 256, 256}, {2, 256, 256}},
        {{2, 100, 300}, {2, 300, 70}},
        {{3, 5, 1, 1000}, {2, 1000, 600}},
        {{2, 1, 7}, {2, 7, 1}},
        {{2, 4, 0}, {2, 0, 3}},
        {{4, 3, 2, 37, 53}, {3, 2, 53, 29}},
        {{3, 4, 37, 300}, {2, 300, 70}},
        {{3, 5, 1, 300}, {3, 5, 300, 70}},
        {{4, 2, 1, 9, 53}, {3, 3, 53, 800}},
    };
    int used = force_isa(isa);
    size_t ncases = sizeof cases / sizeof cases[0];
    for (size_t ci = 0; ci < 2 * ncases; ci++) {
        size_t c = ci % ncases;
        int cst = ci >= ncases; /* B fed at run time, or a weight (packed at load) */
        H *h = h_new(16 << 20);
        uint32_t a = h_tensor(h, IPU_DTYPE_FLOAT32, (uint32_t)cases[c][0][0], &cases[c][0][1]);
        uint32_t b = h_tensor(h, IPU_DTYPE_FLOAT32, (uint32_t)cases[c][1][0], &cases[c][1][1]);
        uint32_t y = h_matmul_out(h, a, b);
        fill_f32(h, a);
        fill_f32(h, b);
        if (cst) as_tensor_data(h, b);
        const float *r = run(h, IPU_OP_MATMUL, 2, (uint32_t[]){a, b}, y, 0, NULL);
        double *want = malloc(sizeof(double) * (h->t[y].numel + 1));
        ref_matmul(&h->t[a], h->ptr[a], &h->t[b], h->ptr[b], &h->t[y], want);
        double err = max_rel_err(r, want, h->t[y].numel);
        CHECK(err < 1e-4, "matmul f32 isa %d case %zu const %d: rel err %g", used, c, cst, err);
        free(want);
        h_free(h);
    }
    force_isa(0);
}

/* CONV2D float32 on every micro-kernel (forced ISA) against a double-precision direct loop:
 * the window path (strides, pads, dilations, groups, K chunks, > 4 sub-blocks per work item,
 * KW = 1 without a copy) and the GEMM path (1x1 stride 1; input rows too wide for the scratch;
 * a dilated window too tall for it); each with the weights fed at run time and stored in the
 * executable (packed at load), which also takes small maps to the small-map path (tpose).
 * Bias and Relu always, a residual in odd cases (the GEMM path applies them per tile as the
 * micro-kernel stores it: in registers on AVX2, after the tile on the others). */
static void test_conv_f32(int isa) {
    /* x dims N C H W, w dims M Cg KH KW, attrs group sh sw dh dw pt pl pb pr */
    static const int64_t cases[][3][9] = {
        {{1, 5, 11, 9}, {6, 5, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
        {{2, 4, 13, 12}, {7, 4, 3, 3}, {1, 2, 2, 1, 1, 1, 1, 0, 1}},
        {{1, 3, 20, 18}, {8, 3, 7, 7}, {1, 2, 2, 1, 1, 3, 3, 3, 3}},
        {{1, 6, 12, 11}, {9, 2, 3, 2}, {3, 2, 3, 2, 1, 2, 0, 1, 2}},
        {{1, 40, 7, 7}, {100, 40, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
        {{1, 2, 48, 48}, {500, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
        {{1, 5, 9, 7}, {6, 5, 3, 1}, {1, 1, 1, 2, 1, 0, 0, 0, 0}},
        {{1, 30, 6, 10}, {20, 30, 1, 1}, {1, 2, 2, 1, 1, 0, 0, 0, 0}},
        {{1, 300, 2, 460}, {3, 300, 1, 1}, {1, 2, 2, 1, 1, 0, 0, 0, 0}},
        {{1, 9, 5, 6}, {10, 9, 1, 1}, {1, 1, 1, 1, 1, 0, 0, 0, 0}},
        {{1, 8, 15, 16}, {10, 8, 1, 1}, {1, 1, 1, 1, 1, 0, 0, 0, 0}}, /* 1x1: two pixel blocks */
        {{1, 2, 1, 3},
         {2, 2, 2, 1},
         {1, 1, 1, 5000000, 1, 2500000, 0, 2500000, 0}}, /* huge dilation */
        /* small maps (tpose when packed): K chunks, > 4 sub-blocks, groups, strides, row blocks */
        {{1, 300, 7, 7}, {520, 300, 1, 1}, {1, 1, 1, 1, 1, 0, 0, 0, 0}},
        {{2, 40, 7, 7}, {70, 40, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
        {{1, 64, 14, 14}, {64, 32, 3, 3}, {2, 2, 2, 1, 1, 1, 1, 1, 1}},
        {{1, 24, 14, 14}, {40, 24, 1, 1}, {1, 2, 2, 1, 1, 0, 0, 0, 0}},
        {{1, 16, 28, 28}, {40, 16, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
        {{1, 20, 13, 13}, {33, 20, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
        /* window path, one block of 11 rows of 19 extended pixels (17 kept) per image: the
         * micro-kernel's panel at pixel 192 ends on the last kept column of the last row and is
         * stored into y, the next one is not; 14 channels, the last sub-block 2 of 6 */
        {{8, 4, 11, 17}, {14, 4, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
        {{8, 4, 11, 17}, {14, 4, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
        /* the same for the AVX-512 kernel's 32-pixel panels: 6 rows of 42 extended pixels (40
         * kept), panels at 0 and 128 lie in one row (stored into y), the others straddle two;
         * 13 channels: a full 12-row tile and a partial one */
        {{2, 3, 6, 40}, {13, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
        {{2, 3, 6, 40}, {13, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
        /* window path, output rows as whole tiles (AVX-512: conv.c window_tiles_to_y): rows of
         * 65 extended pixels (61 kept) computed as 64 columns, the last panel's 29 stored
         * masked; K = 300 in two chunks; 14 channels, a full 12-row tile and a partial one */
        {{1, 12, 9, 61}, {14, 12, 5, 5}, {1, 1, 1, 1, 1, 2, 2, 2, 2}},
        {{1, 12, 9, 61}, {14, 12, 5, 5}, {1, 1, 1, 1, 1, 2, 2, 2, 2}},
    };
    int used = force_isa(isa);
    size_t ncases = sizeof cases / sizeof cases[0];
    for (size_t ci = 0; ci < 2 * ncases; ci++) {
        size_t c = ci % ncases;
        int cst = ci >= ncases;
        const int64_t *xd = cases[c][0], *wd = cases[c][1], *a = cases[c][2];
        int64_t G = a[0], N = xd[0], C = xd[1], IH = xd[2], IW = xd[3], M = wd[0], KH = wd[2],
                KW = wd[3];
        int64_t OH = (IH + a[5] + a[7] - a[3] * (KH - 1) - 1) / a[1] + 1;
        int64_t OW = (IW + a[6] + a[8] - a[4] * (KW - 1) - 1) / a[2] + 1;
        H *h = h_new(16 << 20);
        uint32_t x = h_tensor(h, IPU_DTYPE_FLOAT32, 4, xd),
                 w = h_tensor(h, IPU_DTYPE_FLOAT32, 4, wd);
        uint32_t b = T(h, FLOAT32, M), y = T(h, FLOAT32, N, M, OH, OW);
        uint32_t z = T(h, FLOAT32, N, M, OH, OW);
        fill_f32(h, x);
        fill_f32(h, w);
        fill_f32(h, b);
        fill_f32(h, z);
        if (cst) as_tensor_data(h, w);
        int res = c % 2;
        int64_t attr[11] = {a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], 1, res};
        const float *r = run(h, IPU_OP_CONV2D, 3 + res, (uint32_t[]){x, w, b, z}, y, 11, attr);
        const float *xp = h->ptr[x], *wp = h->ptr[w], *bp = h->ptr[b], *zp = h->ptr[z];
        double *want = malloc(sizeof(double) * h->t[y].numel);
        int64_t Cg = C / G, Mg = M / G;
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        double s = bp[m];
                        for (int64_t ci = 0; ci < Cg; ci++)
                            for (int64_t kh = 0; kh < KH; kh++)
                                for (int64_t kw = 0; kw < KW; kw++) {
                                    int64_t ih = oh * a[1] - a[5] + kh * a[3],
                                            iw = ow * a[2] - a[6] + kw * a[4];
                                    if (ih < 0 || ih >= IH || iw < 0 || iw >= IW) continue;
                                    s += (double)
                                             xp[((n * C + m / Mg * Cg + ci) * IH + ih) * IW + iw] *
                                         wp[((m * Cg + ci) * KH + kh) * KW + kw];
                                }
                        int64_t o = ((n * M + m) * OH + oh) * OW + ow;
                        if (res) s += zp[o];
                        want[o] = s > 0 ? s : 0; /* relu */
                    }
        double err = max_rel_err(r, want, h->t[y].numel);
        CHECK(err < 1e-4, "conv f32 isa %d case %zu const %d: rel err %g", used, c, cst, err);
        free(want);
        h_free(h);
    }
    force_isa(0);
}

/* The micro-kernel's rows variant (B row k read in place at b + off[k], any alignment) and its
 * arows variant (A column k at a + aoff[k]) against the packed kernel on the same rows copied
 * into a panel: bit-identical, with and without accumulation and the fused epilogue, on every
 * micro-kernel that has the variants. */
static void test_ukr_rows(void) {
    for (int isa = 1; isa <= 3; isa++) {
        int used = force_isa(isa);
        ipu__ukr u;
        ipu__sgemm_ukr(&u);
        if (!u.rows || used != isa) continue;
        enum { KC = 37, SRC = 4096 };
        float *a = aligned_alloc(64, sizeof(float) * KC * IPU__SGEMM_MAX_MR);
        float *bp = aligned_alloc(64, sizeof(float) * KC * IPU__SGEMM_MAX_NR);
        float *src = malloc(sizeof(float) * SRC), c0[IPU__SGEMM_MAX_MR * 40], c1[sizeof c0 / 4];
        int64_t off[KC];
        for (int i = 0; i < KC * u.mr; i++) a[i] = rndf();
        for (int i = 0; i < SRC; i++) src[i] = rndf();
        for (int k = 0; k < KC; k++) { /* odd offsets: unaligned rows, some overlapping */
            off[k] = (int64_t)((k * 97 + 13) % (SRC - u.nr));
            memcpy(bp + k * u.nr, src + off[k], sizeof(float) * (size_t)u.nr);
        }
        int64_t aoff[KC]; /* arows: A's column k is the mr floats at src + aoff[k] */
        for (int k = 0; k < KC; k++) {
            aoff[k] = (int64_t)((k * 89 + 7) % (SRC - u.mr));
            memcpy(a + k * u.mr, src + aoff[k], sizeof(float) * (size_t)u.mr);
        }
        float bias[IPU__SGEMM_MAX_MR], res[IPU__SGEMM_MAX_MR * 40];
        for (int i = 0; i < u.mr; i++) bias[i] = rndf();
        for (size_t i = 0; i < sizeof res / 4; i++) res[i] = rndf();
        /* v & 1: accumulate; v & 2: bias, residual and Relu; v & 4: arows instead of rows */
        for (int v = 0; v < 8; v++) {
            int acc = v & 1;
            ipu__tile_ep ep = {bias, res, 40, 1, NULL, 0, NULL}, *e = v & 2 ? &ep : NULL;
            if ((v & 4) && !u.arows) continue;
            for (size_t i = 0; i < sizeof c0 / 4; i++) c0[i] = c1[i] = rndf();
            if (e)
                u.ep(KC, a, bp, c0, 40, acc, e);
            else
                u.fn(KC, a, bp, c0, 40, acc, NULL, 0);
            if (v & 4)
                u.arows(KC, src, bp, aoff, c1, 40, acc, e);
            else
                u.rows(KC, a, src, off, c1, 40, acc, e);
            CHECK(memcmp(c0, c1, sizeof c0) == 0, "ukr %s isa %d case %d: differs from packed",
                  v & 4 ? "arows" : "rows", isa, v);
        }
        free(a);
        free(bp);
        free(src);
    }
    force_isa(0);
}

static void test_matmul_other(void) {
    /* float16: accumulate in float32, round once */
    H *h = h_new(1 << 20);
    uint32_t a = T(h, FLOAT16, 3, 20, 40), b = T(h, FLOAT16, 40, 600),
             y = T(h, FLOAT16, 3, 20, 600);
    fill_f16(h, a);
    fill_f16(h, b);
    const uint16_t *r = run(h, IPU_OP_MATMUL, 2, (uint32_t[]){a, b}, y, 0, NULL);
    const uint16_t *pa = h->ptr[a], *pb = h->ptr[b];
    double worst = 0;
    for (int bi = 0; bi < 3; bi++)
        for (int i = 0; i < 20; i++)
            for (int j = 0; j < 600; j++) {
                double s = 0;
                for (int k = 0; k < 40; k++)
                    s += (double)ipu__f16_to_f32(pa[bi * 800 + i * 40 + k]) *
                         ipu__f16_to_f32(pb[k * 600 + j]);
                double e = fabs(ipu__f16_to_f32(r[bi * 12000 + i * 600 + j]) - s) / (1 + fabs(s));
                if (e > worst) worst = e;
            }
    CHECK(worst < 2e-3, "matmul f16 err %g", worst);
    /* int32 wrap-around */
    uint32_t ai = T(h, INT32, 2, 30, 17), bi = T(h, INT32, 17, 9), yi = T(h, INT32, 2, 30, 9);
    fill_i32(h, ai);
    fill_i32(h, bi);
    ((int32_t *)h->ptr[ai])[0] = INT32_MAX;
    const int32_t *ri = run(h, IPU_OP_MATMUL, 2, (uint32_t[]){ai, bi}, yi, 0, NULL);
    const int32_t *xa = h->ptr[ai], *xb = h->ptr[bi];
    int bad = 0;
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < 30; i++)
            for (int j = 0; j < 9; j++) {
                uint32_t s = 0;
                for (int k = 0; k < 17; k++)
                    s += (uint32_t)xa[q * 510 + i * 17 + k] * (uint32_t)xb[k * 9 + j];
                bad += (int32_t)s != ri[q * 270 + i * 9 + j];
            }
    CHECK(bad == 0, "matmul i32: %d mismatches", bad);
    h_free(h);
}

static void test_gemm(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int cmode = 0; cmode < 4; cmode++)
                for (int f16 = 0; f16 < 2; f16++) {
                    int64_t M = 130, N = 70, K = 300;
                    H *h = h_new(4 << 20);
                    ipu_dtype dt = f16 ? IPU_DTYPE_FLOAT16 : IPU_DTYPE_FLOAT32;
                    int64_t ad[2] = {ta ? K : M, ta ? M : K}, bd[2] = {tb ? N : K, tb ? K : N};
                    int64_t cd[2][2] = {{M, N}, {N, 0}}, cm1[2] = {M, 1};
                    uint32_t a = h_tensor(h, dt, 2, ad), b = h_tensor(h, dt, 2, bd);
                    uint32_t c = cmode == 0   ? h_tensor(h, dt, 2, cd[0])
                                 : cmode == 1 ? h_tensor(h, dt, 1, cd[1])
                                 : cmode == 2 ? h_tensor(h, dt, 2, cm1)
                                              : 0;
                    uint32_t y = h_tensor(h, dt, 2, (int64_t[]){M, N});
                    (f16 ? fill_f16 : fill_f32)(h, a);
                    (f16 ? fill_f16 : fill_f32)(h, b);
                    if (cmode < 3) (f16 ? fill_f16 : fill_f32)(h, c);
                    double alpha = 0.5, beta = -2.0;
                    int64_t at[4] = {ta, tb, 0, 0};
                    memcpy(&at[2], &alpha, 8);
                    memcpy(&at[3], &beta, 8);
                    const void *r = run(h, IPU_OP_GEMM, cmode < 3 ? 3 : 2, (uint32_t[]){a, b, c}, y,
                                        4, at);
#define LD(t, i)                                                     \
    (f16 ? (double)ipu__f16_to_f32(((const uint16_t *)h->ptr[t])[i]) \
         : (double)((const float *)h->ptr[t])[i])
                    double worst = 0;
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t j = 0; j < N; j++) {
                            double s = 0;
                            for (int64_t k = 0; k < K; k++)
                                s += LD(a, ta ? k * M + i : i * K + k) *
                                     LD(b, tb ? j * K + k : k * N + j);
                            s *= alpha;
                            if (cmode < 3)
                                s += beta * LD(c, cmode == 0 ? i * N + j : cmode == 1 ? j : i);
                            double g = f16 ? ipu__f16_to_f32(((const uint16_t *)r)[i * N + j])
                                           : ((const float *)r)[i * N + j];
                            double e = fabs(g - s) / (1 + fabs(s));
                            if (!(e <= worst)) worst = e;
                        }
#undef LD
                    CHECK(worst < (f16 ? 2e-3 : 1e-4), "gemm ta %d tb %d c %d f16 %d: err %g", ta,
                          tb, cmode, f16, worst);
                    h_free(h);
                }
}

/* ---- data movement ------------------------------------------------------------------------ */

static void test_data(void) {
    H *h = h_new(8 << 20);
    /* COPY (different shape), including identical storage (no-op) */
    uint32_t x = T(h, INT8, 3, 100000), y = T(h, UINT8, 300000);
    fill_bytes(h, x);
    const uint8_t *r = run(h, IPU_OP_COPY, 1, &x, y, 0, NULL);
    CHECK(memcmp(r, h->ptr[x], 300000) == 0, "copy");
    /* EXPAND int16 [3,1,5] -> [2,3,4,5] */
    uint32_t ex = T(h, INT16, 3, 1, 5), ey = T(h, INT16, 2, 3, 4, 5);
    fill_bytes(h, ex);
    const uint16_t *re = run(h, IPU_OP_EXPAND, 1, &ex, ey, 0, NULL);
    int bad = 0;
    for (uint64_t i = 0; i < 120; i++)
        bad += re[i] != ((uint16_t *)h->ptr[ex])[bidx(&h->t[ex], &h->t[ey], i)];
    CHECK(bad == 0, "expand int16");
    uint32_t sx = T0(h, FLOAT64), sy = T(h, FLOAT64, 50000);
    *(double *)h->ptr[sx] = 2.5;
    const double *rd = run(h, IPU_OP_EXPAND, 1, &sx, sy, 0, NULL);
    CHECK(rd[0] == 2.5 && rd[49999] == 2.5, "expand scalar f64");
    /* CONCAT along axis 1 of three float32 inputs (one empty) */
    uint32_t c0 = T(h, FLOAT32, 4, 2, 3), c1 = T(h, FLOAT32, 4, 0, 3), c2 = T(h, FLOAT32, 4, 5, 3);
    uint32_t cy = T(h, FLOAT32, 4, 7, 3);
    fill_f32(h, c0);
    fill_f32(h, c2);
    const float *rc = run(h, IPU_OP_CONCAT, 3, (uint32_t[]){c0, c1, c2}, cy, 1, (int64_t[]){1});
    bad = 0;
    for (int o = 0; o < 4; o++)
        for (int k = 0; k < 7; k++)
            for (int i = 0; i < 3; i++) {
                float w = k < 2 ? ((float *)h->ptr[c0])[o * 6 + k * 3 + i]
                                : ((float *)h->ptr[c2])[o * 15 + (k - 2) * 3 + i];
                bad += rc[o * 21 + k * 3 + i] != w;
            }
    CHECK(bad == 0, "concat");
    /* TRANSPOSE [2,3,4,5] perm (2,0,3,1), several element sizes */
    ipu_dtype dts[4] = {IPU_DTYPE_BOOL, IPU_DTYPE_FLOAT16, IPU_DTYPE_INT32, IPU_DTYPE_INT64};
    for (int d = 0; d < 4; d++) {
        enum { A = 12, B = 30, C = 40, D = 10 };
        int64_t xd[4] = {A, B, C, D}, yd[4] = {C, A, D, B}, perm[4] = {2, 0, 3, 1};
        uint32_t tx = h_tensor(h, dts[d], 4, xd), ty = h_tensor(h, dts[d], 4, yd);
        fill_bytes(h, tx);
        const uint8_t *rt = run(h, IPU_OP_TRANSPOSE, 1, &tx, ty, 4, perm);
        size_t es = ipu_dtype_size(dts[d]);
        bad = 0;
        for (int i0 = 0; i0 < C; i0++)
            for (int i1 = 0; i1 < A; i1++)
                for (int i2 = 0; i2 < D; i2++)
                    for (int i3 = 0; i3 < B; i3++) {
                        size_t yo = (((size_t)i0 * A + i1) * D + i2) * B + i3;
                        size_t xo = (((size_t)i1 * B + i3) * C + i0) * D + i2;
                        bad += memcmp(rt + yo * es, (uint8_t *)h->ptr[tx] + xo * es, es) != 0;
                    }
        CHECK(bad == 0, "transpose esize %zu", es);
        h->used = h->t[tx].offset;
        h->e.info.num_tensors -= 2;
    }
    uint32_t t2 = T(h, FLOAT32, 3, 1, 4), t2y = T(h, FLOAT32, 4, 3, 1);
    fill_f32(h, t2);
    const float *r2 = run(h, IPU_OP_TRANSPOSE, 1, &t2, t2y, 3, (int64_t[]){2, 0, 1});
    CHECK(r2[5] == ((float *)h->ptr[t2])[4 * 2 + 1], "transpose with size-1 dim");
    h_free(h);
}

static void test_cast(void) {
    H *h = h_new(1 << 20);
    float fv[10] = {1.9f, -1.9f, NAN, 3e9f, -3e9f, 300.0f, -0.5f, 65520.0f, 1e20f, -129.0f};
    uint32_t xf = T(h, FLOAT32, 10);
    memcpy(h->ptr[xf], fv, sizeof fv);
    uint32_t yi32 = T(h, INT32, 10), yu8 = T(h, UINT8, 10), yi8 = T(h, INT8, 10);
    uint32_t yu32 = T(h, UINT32, 10), yi64 = T(h, INT64, 10), yb = T(h, BOOL, 10),
             yh = T(h, FLOAT16, 10);
    const int32_t *r32 = run(h, IPU_OP_CAST, 1, &xf, yi32, 0, NULL);
    CHECK(r32[0] == 1 && r32[1] == -1 && r32[2] == 0 && r32[3] == INT32_MAX &&
              r32[4] == INT32_MIN && r32[9] == -129,
          "f32->i32 %d %d %d %d %d", r32[0], r32[1], r32[2], r32[3], r32[4]);
    const uint8_t *ru8 = run(h, IPU_OP_CAST, 1, &xf, yu8, 0, NULL);
    CHECK(ru8[0] == 1 && ru8[1] == 0 && ru8[2] == 0 && ru8[5] == 255 && ru8[6] == 0, "f32->u8");
    const int8_t *ri8 = run(h, IPU_OP_CAST, 1, &xf, yi8, 0, NULL);
    CHECK(ri8[5] == 127 && ri8[9] == -128 && ri8[1] == -1, "f32->i8");
    const uint32_t *ru32 = run(h, IPU_OP_CAST, 1, &xf, yu32, 0, NULL);
    CHECK(ru32[3] == 3000000000u && ru32[4] == 0 && ru32[8] == UINT32_MAX, "f32->u32 %u", ru32[3]);
    const int64_t *ri64 = run(h, IPU_OP_CAST, 1, &xf, yi64, 0, NULL);
    CHECK(ri64[3] == 3000000000LL && ri64[8] == INT64_MAX && ri64[2] == 0, "f32->i64");
    const uint8_t *rb = run(h, IPU_OP_CAST, 1, &xf, yb, 0, NULL);
    CHECK(rb[0] == 1 && rb[2] == 1 && rb[6] == 1, "f32->bool (NaN is true)");
    const uint16_t *rh = run(h, IPU_OP_CAST, 1, &xf, yh, 0, NULL);
    CHECK(rh[0] == ipu__f32_to_f16(1.9f) && rh[7] == 0x7c00 && (rh[2] & 0x7c00) == 0x7c00 &&
              (rh[2] & 0x3ff),
          "f32->f16");
    /* int -> others: wrap, bool */
    int64_t iv[6] = {-1, 256, 70000, (int64_t)1 << 40, 0, -129};
    uint32_t xi = T(h, INT64, 6), oi8 = T(h, INT8, 6), ou32 = T(h, UINT32, 6),
             of = T(h, FLOAT32, 6), ob = T(h, BOOL, 6);
    uint32_t oh = T(h, FLOAT16, 6);
    memcpy(h->ptr[xi], iv, sizeof iv);
    const int8_t *a8 = run(h, IPU_OP_CAST, 1, &xi, oi8, 0, NULL);
    CHECK(a8[0] == -1 && a8[1] == 0 && a8[5] == 127, "i64->i8 wraps");
    const uint32_t *au = run(h, IPU_OP_CAST, 1, &xi, ou32, 0, NULL);
    CHECK(au[0] == UINT32_MAX && au[3] == 0, "i64->u32 wraps");
    const float *af = run(h, IPU_OP_CAST, 1, &xi, of, 0, NULL);
    CHECK(af[2] == 70000.0f && af[0] == -1.0f, "i64->f32");
    const uint8_t *ab = run(h, IPU_OP_CAST, 1, &xi, ob, 0, NULL);
    CHECK(ab[0] == 1 && ab[4] == 0, "i64->bool");
    const uint16_t *ah = run(h, IPU_OP_CAST, 1, &xi, oh, 0, NULL);
    CHECK(ah[2] == 0x7c00 && ah[0] == 0xbc00, "i64->f16");
    uint32_t bsrc = T(h, BOOL, 3), bi32 = T(h, INT32, 3);
    memcpy(h->ptr[bsrc], "\0\1\1", 3);
    const int32_t *bb = run(h, IPU_OP_CAST, 1, &bsrc, bi32, 0, NULL);
    CHECK(bb[0] == 0 && bb[1] == 1, "bool->i32");
    /* big f16 -> f32 cast with splits */
    uint32_t bx = T(h, FLOAT16, 40000), by = T(h, FLOAT32, 40000);
    fill_f16(h, bx);
    const float *bf = run(h, IPU_OP_CAST, 1, &bx, by, 0, NULL);
    CHECK(bf[39999] == ipu__f16_to_f32(((uint16_t *)h->ptr[bx])[39999]), "f16->f32");
    h_free(h);
}

/* ---- reductions / softmax ----------------------------------------------------------------- */

static void test_reduce(void) {
    int64_t cfg[][3] = {{3, 1000, 1}, {5, 7, 600}, {2, 0, 3}, {1, 3, 1}, {700, 3, 2}};
    for (size_t c = 0; c < 5; c++) {
        int64_t o = cfg[c][0], rr = cfg[c][1], n = cfg[c][2];
        for (int mean = 0; mean < 2; mean++) {
            H *h = h_new(1 << 20);
            uint32_t x = T(h, FLOAT32, o, rr, n), y = T(h, FLOAT32, o, n);
            uint32_t xi = T(h, INT32, o, rr, n), yi = T(h, INT32, o, n);
            fill_f32(h, x);
            fill_i32(h, xi);
            if (rr >= 2) { /* the int32 sum must wrap in int32 before the mean divides */
                ((int32_t *)h->ptr[xi])[0] = INT32_MAX;
                ((int32_t *)h->ptr[xi])[n] = INT32_MAX;
            }
            ipu_opcode op = mean ? IPU_OP_REDUCE_MEAN : IPU_OP_REDUCE_SUM;
            const float *r = run(h, op, 1, &x, y, 3, cfg[c]);
            const int32_t *ri = run(h, op, 1, &xi, yi, 3, cfg[c]);
            double worst = 0;
            int bad = 0;
            for (int64_t a = 0; a < o; a++)
                for (int64_t k = 0; k < n; k++) {
                    double s = 0;
                    int32_t si = 0;
                    for (int64_t j = 0; j < rr; j++) {
                        s += ((float *)h->ptr[x])[(a * rr + j) * n + k];
                        si = (int32_t)((uint32_t)si +
                                       (uint32_t)((int32_t *)h->ptr[xi])[(a * rr + j) * n + k]);
                    }
                    if (mean) {
                        s = rr ? s / (double)rr : NAN;
                        si = rr ? (int32_t)(si / rr) : 0;
                    }
                    double g = r[a * n + k];
                    double e = isnan(s) ? (isnan(g) ? 0 : 1) : fabs(g - s) / (1 + fabs(s));
                    if (e > worst) worst = e;
                    bad += ri[a * n + k] != si;
                }
            CHECK(worst < 1e-5 && bad == 0, "reduce cfg %zu mean %d: err %g, int bad %d", c, mean,
                  worst, bad);
            h_free(h);
        }
    }
    /* float16 sum */
    H *h = h_new(1 << 20);
    uint32_t x = T(h, FLOAT16, 4, 50), y = T(h, FLOAT16, 4);
    fill_f16(h, x);
    const uint16_t *r = run(h, IPU_OP_REDUCE_SUM, 1, &x, y, 3, (int64_t[]){4, 50, 1});
    float s = 0;
    for (int j = 0; j < 50; j++) s += ipu__f16_to_f32(((uint16_t *)h->ptr[x])[50 + j]);
    CHECK(fabsf(ipu__f16_to_f32(r[1]) - s) <= 0.01f * (1 + fabsf(s)), "reduce f16");
    h_free(h);
}

static void test_softmax(void) {
    int64_t cfg[][3] = {{3, 1000, 1}, {4, 9, 300}, {2, 1, 5}};
    for (size_t c = 0; c < 3; c++)
        for (int f16 = 0; f16 < 2; f16++) {
            int64_t o = cfg[c][0], L = cfg[c][1], n = cfg[c][2];
            H *h = h_new(1 << 20);
            ipu_dtype dt = f16 ? IPU_DTYPE_FLOAT16 : IPU_DTYPE_FLOAT32;
            uint32_t x = h_tensor(h, dt, 3, cfg[c]), y = h_tensor(h, dt, 3, cfg[c]);
            (f16 ? fill_f16 : fill_f32)(h, x);
            if (!f16) ((float *)h->ptr[x])[0] = 80.0f; /* large values must not overflow */
            const void *r = run(h, IPU_OP_SOFTMAX, 1, &x, y, 3, cfg[c]);
#define LD(p, i) \
    (f16 ? (double)ipu__f16_to_f32(((const uint16_t *)(p))[i]) : (double)((const float *)(p))[i])
            double worst = 0;
            for (int64_t a = 0; a < o; a++)
                for (int64_t k = 0; k < n; k++) {
                    double m = -INFINITY, s = 0;
                    for (int64_t j = 0; j < L; j++) m = fmax(m, LD(h->ptr[x], (a * L + j) * n + k));
                    for (int64_t j = 0; j < L; j++)
                        s += exp(LD(h->ptr[x], (a * L + j) * n + k) - m);
                    for (int64_t j = 0; j < L; j++) {
                        int64_t i = (a * L + j) * n + k;
                        double e = fabs(LD(r, i) - exp(LD(h->ptr[x], i) - m) / s);
                        if (!(e <= worst)) worst = e;
                    }
                }
#undef LD
            CHECK(worst < (f16 ? 1e-3 : 1e-6), "softmax cfg %zu f16 %d: err %g", c, f16, worst);
            h_free(h);
        }
}

/* ---- benchmark ---------------------------------------------------------------------------- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The micro-kernel alone: one A and one B panel of KC steps, in L1/L2, called over and over:
 * the peak the packed GEMM paths can approach. */
static void bench_ukr(void) {
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    const int64_t kc = IPU__SGEMM_KC;
    float *a = aligned_alloc(64, sizeof(float) * (size_t)(kc * u.mr));
    float *b = aligned_alloc(64, sizeof(float) * (size_t)(kc * u.nr));
    float *c = aligned_alloc(64, sizeof(float) * (size_t)(u.mr * u.nr));
    for (int64_t i = 0; i < kc * u.mr; i++) a[i] = rndf();
    for (int64_t i = 0; i < kc * u.nr; i++) b[i] = rndf();
    long reps = (long)(1e9 / (2.0 * (double)(kc * u.mr * u.nr)));
    double best = 1e30;
    for (int trial = 0; trial < 5; trial++) {
        double t0 = now();
        for (long r = 0; r < reps; r++) u.fn(kc, a, b, c, u.nr, 0, NULL, 0);
        double t = now() - t0;
        if (t < best) best = t;
    }
    printf("micro-kernel %2d x %2d alone, in cache: %7.1f GFLOP/s\n", u.mr, u.nr,
           2.0 * (double)(kc * u.mr * u.nr) * (double)reps / best * 1e-9);
    if (u.rows) { /* B rows in place: a 3x3 window's rows over 30-float planes, as conv.c */
        int64_t off[IPU__SGEMM_KC];
        for (int64_t k = 0; k < kc; k++) off[k] = k / 9 * 30 * 12 + k % 9 / 3 * 30 + k % 3;
        float *x = malloc(sizeof(float) * (size_t)(off[kc - 1] + 64));
        for (int64_t i = 0; i < off[kc - 1] + 64; i++) x[i] = rndf();
        best = 1e30;
        for (int trial = 0; trial < 5; trial++) {
            double t0 = now();
            for (long r = 0; r < reps; r++) u.rows(kc, a, x, off, c, u.nr, 0, NULL);
            double t = now() - t0;
            if (t < best) best = t;
        }
        printf("micro-kernel %2d x %2d rows in place:    %7.1f GFLOP/s\n", u.mr, u.nr,
               2.0 * (double)(kc * u.mr * u.nr) * (double)reps / best * 1e-9);
        free(x);
    }
    free(a);
    free(b);
    free(c);
}

static void bench(void) {
    void *scratch = aligned_alloc(64, IPU__WORKER_SCRATCH_BYTES);
    printf("sgemm micro-kernel by default: isa %d\n", force_isa(0));
    for (int isa = 3; isa >= 1; isa--) {
        int used = force_isa(isa);
        if (used != isa) continue;
        bench_ukr();
        for (int64_t n = 64; n <= 1024; n *= 2) {
            float *a = aligned_alloc(64, (size_t)(n * n * 4)),
                  *b = aligned_alloc(64, (size_t)(n * n * 4));
            float *c = aligned_alloc(64, (size_t)(n * n * 4));
            for (int64_t i = 0; i < n * n; i++) a[i] = rndf(), b[i] = rndf();
            /* same path as the MATMUL kernel: row blocks of IPU__MM_MB */
            double best = 1e30;
            int reps = (int)(2e8 / (double)(n * n * n)) + 1;
            for (int trial = 0; trial < 5; trial++) {
                double t0 = now();
                for (int r = 0; r < reps; r++)
                    for (int64_t m0 = 0; m0 < n; m0 += IPU__MM_MB) {
                        ipu__sgemm_args g = {n - m0 < IPU__MM_MB ? n - m0 : IPU__MM_MB,
                                             n,
                                             n,
                                             a + m0 * n,
                                             n,
                                             1,
                                             b,
                                             n,
                                             1,
                                             0,
                                             0,
                                             c + m0 * n,
                                             n};
                        ipu__sgemm(&g, scratch, IPU__SCRATCH_BYTES);
                    }
                double t = (now() - t0) / reps;
                if (t < best) best = t;
            }
            printf("sgemm isa %s n=%4lld: %7.1f GFLOP/s\n",
                   isa == 3   ? "avx512  "
                   : isa == 2 ? "avx2+fma"
                              : "portable",
                   (long long)n, 2.0 * (double)(n * n * n) / best * 1e-9);
            free(a);
            free(b);
            free(c);
        }
    }
    force_isa(0);
    /* the demo shape through the MATMUL kernel: 16 x 256^3 */
    H *h = h_new(16 << 20);
    uint32_t a = T(h, FLOAT32, 16, 256, 256), b = T(h, FLOAT32, 16, 256, 256),
             y = T(h, FLOAT32, 16, 256, 256);
    fill_f32(h, a);
    fill_f32(h, b);
    TI ti;
    if (ti_make(h, &ti, IPU_OP_MATMUL, 2, (uint32_t[]){a, b}, y, 0, NULL) == IPU_OK) {
        ipu__frame f = {.exe = &h->e, .ptr = h->ptr};
        size_t w = ipu__instr_work(&h->e, &ti.ins);
        double best = 1e30;
        for (int trial = 0; trial < 10; trial++) {
            double t0 = now();
            (void)ipu__instr_run(&f, &ti.ins, 0, w, h->scratch);
            double t = now() - t0;
            if (t < best) best = t;
        }
        printf("MATMUL kernel 16x256^3 (1 thread): %.2f ms, %.1f GFLOP/s\n", best * 1e3,
               16 * 2.0 * 256 * 256 * 256 / best * 1e-9);
        ti_free(h, &ti);
    }
    h_free(h);
    free(scratch);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        bench();
        return 0;
    }
    test_binary_f32();
    test_binary_f16_int();
    test_relu();
    for (int isa = 1; isa <= 3; isa++) test_matmul_f32(isa);
    for (int isa = 1; isa <= 3; isa++) test_conv_f32(isa);
    test_ukr_rows();
    test_matmul_other();
    test_gemm();
    test_data();
    test_cast();
    test_reduce();
    test_softmax();
    return check_summary();
}
