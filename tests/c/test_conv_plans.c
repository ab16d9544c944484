/* CONV2D plans (conv_plan.c) as the kernels' work items see them, on every micro-kernel ISA:
 * how the pixels and channels of a layer are cut into items that two workers share evenly. The
 * kernels' results for these paths are tested in test_kernels.c, test_kernels_gemm.c and
 * test_kernels_wino.c. */
#include "kernel_harness.h"

/* The small-map path's channel items are equal shares of its weight panels (one panel more or
 * fewer), an even number of items where there are fewer than 8: two workers then get the same
 * channels (items of 96 channels split 128 as 96 + 32 and 256 as 96 + 96 + 64). Each case: one
 * 7x7 or 14x14 map with stored weights, on every micro-kernel; with few channels the pixels
 * are split instead (tpose_rows), so the count is of all items. */
static void test_conv_small_map_items(int isa) {
    int used = force_isa(isa);
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    int tposed = 0;
    /* C, H (= W), stride, Cog */
    static const int64_t cases[][4] = {{64, 14, 1, 128},  {64, 14, 1, 160}, {128, 14, 1, 224},
                                       {128, 14, 1, 256}, {256, 7, 1, 320}, {512, 7, 1, 512},
                                       {64, 14, 2, 520},  {32, 7, 1, 2048}, {32, 7, 1, 40}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t C = cases[c][0], HW = cases[c][1], s = cases[c][2], Cog = cases[c][3];
        int64_t OHW = (HW - 1) / s + 1;
        /* 2x2 kernels (3x3 stride-1 ones take the Winograd path), padded before: same size */
        H *h = h_for((uint64_t)(C * HW * HW + Cog * C * 4 + Cog * OHW * OHW) * 4);
        uint32_t x = T(h, FLOAT32, 1, C, HW, HW), w = T(h, FLOAT32, Cog, C, 2, 2);
        uint32_t y = T(h, FLOAT32, 1, Cog, OHW, OHW);
        as_tensor_data(h, w);
        int64_t attr[11] = {1, s, s, 1, 1, 1, 1, 0, 0, 0, 0};
        TI ti;
        CHECK(ti_make(h, &ti, IPU_OP_CONV2D, 2, (uint32_t[]){x, w}, y, 11, attr) == IPU_OK,
              "small map %zu: verify: %s", c, ipu_last_error_message());
        const ipu__conv_plan *p = ti.ins.plan;
        if (!p || !p->tpose) { /* e.g. the AVX-512 tile pads 7x7 maps the same both ways */
            ti_free(h, &ti);
            h_free(h);
            continue;
        }
        tposed++;
        int64_t items = (int64_t)ipu__instr_work(&h->e, &ti.ins), at = 0, lo = Cog, hi = 0;
        for (int64_t mb = 0; mb < p->mblocks; mb++) {
            int64_t m0, m1;
            ipu__conv_item_channels(p, mb, mb + 1, &m0, &m1);
            int64_t panels = (m1 - m0 + u.nr - 1) / u.nr;
            CHECK(m0 == at && m1 > m0 && (m0 % u.nr == 0), "small map %zu item %lld: [%lld, %lld)",
                  c, (long long)mb, (long long)m0, (long long)m1);
            at = m1;
            lo = panels < lo ? panels : lo;
            hi = panels > hi ? panels : hi;
        }
        CHECK(at == Cog && hi - lo <= 1 && hi * u.nr <= IPU__CONV_WIN_MPER * IPU__MM_MB &&
                  (items >= 8 || items % 2 == 0 || Cog <= u.nr),
              "small map %zu, isa %d (%lld channels): %lld items of %lld to %lld panels", c, used,
              (long long)Cog, (long long)items, (long long)lo, (long long)hi);
        ti_free(h, &ti);
        h_free(h);
    }
    CHECK(tposed >= 5, "small map items, isa %d: only %d cases took the small-map path", used,
          tposed);
    force_isa(0);
}

/* Small-map path, one block of pixels whose channels would make two unequal items (5 weight
 * panels of the AVX-512 kernel as 3 + 2): two halves of the pixels instead, each with all the
 * channels (conv_plan.c tpose_rows). Inception v2's shapes; the rule is the AVX-512 kernel's
 * (nr 32, mq 4), the other kernels' panels split evenly here. */
static void test_conv_small_map_pixel_halves(int isa) {
    int used = force_isa(isa);
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    /* C, H (= W), K, Cog */
    static const int64_t cases[][4] = {{160, 14, 3, 160}, {224, 7, 3, 224}, {1024, 7, 1, 160}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] && u.nr == 32 && u.mq == 4; c++) {
        int64_t HW = cases[c][1];
        H *h;
        TI ti;
        const ipu__conv_plan *p = h_conv_plan(&h, &ti, cases[c][0], HW, cases[c][2], cases[c][3]);
        CHECK(p && p->tpose && p->rblocks == 2 && p->rows == (HW + 1) / 2 && p->mblocks == 1,
              "pixel halves %zu, isa %d: tpose %d, %lld row blocks of %lld, %lld channel items", c,
              used, p ? p->tpose : -1, p ? (long long)p->rblocks : -1LL,
              p ? (long long)p->rows : -1LL, p ? (long long)p->mblocks : -1LL);
        ti_free(h, &ti);
        h_free(h);
    }
    force_isa(0);
}

/* The GEMM path's row blocks only cut the work items: they are cut evenly, ceil(OH / blocks)
 * rows each (27 rows as 14 + 13: at 18 + 9 a second worker idled for a third of the layer).
 * Pointwise layers of SqueezeNet's sizes, with stored weights, on every micro-kernel. */
static void test_conv_gemm_row_blocks(int isa) {
    int used = force_isa(isa);
    /* C, H (= W), Cog */
    static const int64_t cases[][3] = {{256, 27, 32}, {128, 27, 32}, {32, 27, 128},
                                       {64, 55, 16},  {128, 55, 16}, {16, 55, 64}};
    int gemm = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t HW = cases[c][1];
        H *h;
        TI ti;
        const ipu__conv_plan *p = h_conv_plan(&h, &ti, cases[c][0], HW, 1, cases[c][2]);
        CHECK(p, "gemm rows %zu: verify: %s", c, ipu_last_error_message());
        if (p && !p->window && !p->direct && !p->tpose && !p->wino) {
            gemm++;
            CHECK(p->rblocks >= 1 && p->rows == (HW + p->rblocks - 1) / p->rblocks,
                  "gemm rows %zu, isa %d: %lld rows in blocks of %lld (%lld blocks)", c, used,
                  (long long)HW, (long long)p->rows, (long long)p->rblocks);
        }
        ti_free(h, &ti);
        h_free(h);
    }
    CHECK(gemm >= 4, "gemm rows, isa %d: only %d cases took the GEMM path", used, gemm);
    force_isa(0);
}

int main(void) {
    for (int isa = 1; isa <= 3; isa++) {
        test_conv_small_map_items(isa);
        test_conv_gemm_row_blocks(isa);
        test_conv_small_map_pixel_halves(isa);
    }
    return check_summary();
}
