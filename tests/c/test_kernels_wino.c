/* CONV2D's Winograd path (winograd.c; the plan's `wino`) against a float64 direct loop, on every
 * micro-kernel ISA: odd output sizes (the last tile row or column half outside), asymmetric
 * pads, more than IPU__SGEMM_KC input channels (K chunks), output channels that do not fill
 * the micro-kernel's panels, several blocks of tile rows, two images, bias / residual / ReLU.
 * The harness also runs each case split into uneven work ranges (identical results required).
 * Then the same plans with the weights rebound (as a session binding other weights does: the
 * window path runs for the Winograd plan's items) and run by the other micro-kernels; the plan
 * rule (weights fed at run time, strides, dilations, groups, 4 input channels and 512-channel
 * layers on 14x14 maps stay direct); U of one-tap kernels. */
#include "kernel_harness.h"

typedef struct wcase {
    int64_t N, C, H, W, M, pt, pl, pb, pr;
    int bias, res, relu;
} wcase;

static const wcase CASES[] = {
    {1, 16, 7, 7, 20, 1, 1, 1, 1, 1, 0, 1},    /* one block, 2 x 2 tiles half outside */
    {1, 32, 9, 11, 13, 0, 1, 2, 0, 1, 1, 0},   /* asymmetric pads, 13 channels, residual */
    {2, 24, 40, 40, 30, 1, 1, 1, 1, 0, 1, 1},  /* two images, several blocks of tile rows */
    {1, 300, 12, 10, 16, 1, 1, 1, 1, 1, 0, 0}, /* K chunks (300 input channels) */
    {1, 64, 56, 56, 64, 1, 1, 1, 1, 1, 1, 1},  /* ResNet-50's first stage */
    {1, 8, 5, 6, 100, 2, 2, 2, 2, 1, 0, 1},    /* pads of 2: whole tiles of zeros */
};

/* y = act(conv(x, w) + bias + res) in float64 (3x3, stride 1) */
static void ref_conv3(const wcase *c, const float *x, const float *w, const float *b,
                      const float *r, int64_t OH, int64_t OW, double *y) {
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t o = ((n * c->M + m) * OH + oh) * OW + ow;
                    double s = (b ? b[m] : 0.0) + (r ? r[o] : 0.0);
                    for (int64_t ci = 0; ci < c->C; ci++)
                        for (int64_t kh = 0; kh < 3; kh++)
                            for (int64_t kw = 0; kw < 3; kw++) {
                                int64_t ih = oh - c->pt + kh, iw = ow - c->pl + kw;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                s += (double)x[((n * c->C + ci) * c->H + ih) * c->W + iw] *
                                     w[((m * c->C + ci) * 3 + kh) * 3 + kw];
                            }
                    y[o] = c->relu && s < 0 ? 0 : s;
                }
}

/* |error| / (1 + |y|): float32 sums of up to 2700 products of values in [-4, 4] (the direct
 * paths' own error on these cases reaches 1.6e-4; Winograd's is of the same size) */
#define TOL 5e-4

static void test_wino(int isa) {
    int used = force_isa(isa), nwino = 0;
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        const wcase *c = &CASES[k];
        int64_t OH = c->H + c->pt + c->pb - 2, OW = c->W + c->pl + c->pr - 2;
        uint64_t ny = (uint64_t)(c->N * c->M * OH * OW);
        H *h = h_for(
            4 * (uint64_t)(c->N * c->C * c->H * c->W + 2 * c->M * c->C * 9 + c->M + 2 * ny) +
            6 * 4096);
        uint32_t x = T(h, FLOAT32, c->N, c->C, c->H, c->W), w = T(h, FLOAT32, c->M, c->C, 3, 3);
        uint32_t w2 = T(h, FLOAT32, c->M, c->C, 3, 3), b = T(h, FLOAT32, c->M);
        uint32_t r = T(h, FLOAT32, c->N, c->M, OH, OW), y = T(h, FLOAT32, c->N, c->M, OH, OW);
        fill_f32(h, x);
        fill_f32(h, w);
        fill_f32(h, b);
        fill_f32(h, r);
        as_tensor_data(h, w);
        uint32_t in[4] = {x, w}, nin = 2;
        if (c->bias) in[nin++] = b;
        if (c->res) in[nin++] = r;
        int64_t attr[11] = {1, 1, 1, 1, 1, c->pt, c->pl, c->pb, c->pr, c->relu, c->res};
        double *want = malloc(sizeof(double) * ny);
        ref_conv3(c, h->ptr[x], h->ptr[w], c->bias ? h->ptr[b] : NULL, c->res ? h->ptr[r] : NULL,
                  OH, OW, want);
        TI ti;
        CHECK(ti_make(h, &ti, IPU_OP_CONV2D, nin, in, y, 11, attr) == IPU_OK, "wino %zu: %s", k,
              ipu_last_error_message());
        const ipu__conv_plan *p = ti.ins.plan;
        nwino += p && p->wino;
        ti_free(h, &ti);
        const float *got = run(h, IPU_OP_CONV2D, nin, in, y, 11, attr);
        double err = max_rel_err(got, want, ny);
        CHECK(err < TOL, "case %zu isa %d: rel err %g", k, used, err);
        /* the same plan with other weights bound: the window path, unpacked */
        memcpy(h->ptr[w2], h->ptr[w], h->t[w].desc.nbytes);
        CHECK(ti_make(h, &ti, IPU_OP_CONV2D, nin, in, y, 11, attr) == IPU_OK, "rebound %zu", k);
        void *packed_w = h->ptr[w];
        h->ptr[w] = h->ptr[w2];
        ipu__frame f = {.exe = &h->e, .ptr = h->ptr};
        memset(h->ptr[y], 0xA5, h->t[y].desc.nbytes);
        size_t work = ipu__instr_work(&h->e, &ti.ins);
        for (size_t i = 0; i < work; i++) /* item by item: no item merging either */
            CHECK(ipu__instr_run(&f, &ti.ins, i, i + 1, h->scratch) == IPU_OK, "rebound run");
        err = max_rel_err(h->ptr[y], want, ny);
        CHECK(err < TOL, "rebound weights, case %zu isa %d: rel err %g", k, used, err);
        h->ptr[w] = packed_w;
        /* the plan run by another micro-kernel (a test forcing the ISA after loading): the
         * Winograd path where its panels fit (portable 6 x 8 after AVX2 6 x 16), else direct */
        for (int other = 1; other <= 3; other++) {
            if (force_isa(other) == used) continue;
            memset(h->ptr[y], 0xA5, h->t[y].desc.nbytes);
            CHECK(ipu__instr_run(&f, &ti.ins, 0, work, h->scratch) == IPU_OK, "other isa run");
            err = max_rel_err(h->ptr[y], want, ny);
            CHECK(err < TOL, "case %zu planned for isa %d, run on %d: rel err %g", k, used, other,
                  err);
        }
        force_isa(isa);
        ti_free(h, &ti);
        free(want);
        h_free(h);
    }
    /* the 32-wide AVX-512 tile pads small maps too much for some of them */
    CHECK(nwino >= (u.nr == 16 ? 6 : 2), "isa %d: %d cases took the Winograd path", used, nwino);
    force_isa(0);
}

/* 3x3 convolutions the Winograd plan must leave to the direct paths. */
static void test_wino_rule(void) {
    /* C, H = W, M, stride, dilation, group, weights stored */
    static const int64_t cases[][7] = {
        {16, 14, 16, 1, 1, 1, 0}, {16, 14, 16, 2, 1, 1, 1}, {16, 14, 16, 1, 2, 1, 1},
        {16, 14, 16, 1, 1, 2, 1}, {4, 14, 16, 1, 1, 1, 1},  {512, 14, 512, 1, 1, 1, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int64_t C = cases[k][0], HW = cases[k][1], M = cases[k][2], s = cases[k][3];
        int64_t d = cases[k][4], g = cases[k][5], OHW = (HW + 2 - 2 * d - 1) / s + 1;
        H *h = h_for(4 * (uint64_t)(C * HW * HW + M * C / g * 9 + M * OHW * OHW) + 4096);
        uint32_t x = T(h, FLOAT32, 1, C, HW, HW), w = T(h, FLOAT32, M, C / g, 3, 3);
        uint32_t y = T(h, FLOAT32, 1, M, OHW, OHW);
        if (cases[k][6]) as_tensor_data(h, w);
        int64_t attr[11] = {g, s, s, d, d, 1, 1, 1, 1, 0, 0};
        TI ti;
        CHECK(ti_make(h, &ti, IPU_OP_CONV2D, 2, (uint32_t[]){x, w}, y, 11, attr) == IPU_OK,
              "rule %zu: %s", k, ipu_last_error_message());
        const ipu__conv_plan *p = ti.ins.plan;
        CHECK(p && !p->wino, "rule case %zu took the Winograd path", k);
        ti_free(h, &ti);
        h_free(h);
    }
}

/* The weight transform: U of a kernel that is one tap is the outer product of G's column. */
static void test_wino_pack(void) {
    for (int tap = 0; tap < 9; tap++) {
        float w[9] = {0}, u[16 * 6];
        w[tap] = 1.0f;
        memset(u, 0, sizeof u);
        ipu__wino_pack_weights(w, 0, 1, 1, 6, u);
        static const float G[4][3] = {{1, 0, 0}, {.5f, .5f, .5f}, {.5f, -.5f, .5f}, {0, 0, 1}};
        int bad = 0;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                float want = G[i][tap / 3] * G[j][tap % 3];
                bad += u[(i * 4 + j) * 6] != want;
                for (int pad = 1; pad < 6; pad++) bad += u[(i * 4 + j) * 6 + pad] != 0.0f;
            }
        CHECK(bad == 0, "tap %d: %d wrong entries of U", tap, bad);
    }
}

int main(void) {
    for (int isa = 1; isa <= 3; isa++) test_wino(isa);
    test_wino_rule();
    test_wino_pack();
    return check_summary();
}
