/* The plan functions of CONV2D and POOL2D (docs/bytecode.md; ipu_ops.def names them):
 * attributes, shapes and the kernel plans (conv.h, read by conv.c, conv_window.c,
 * conv_epilogue.c and winograd.c; pool.h, read by pool.c and pool_s2.c). The two share the
 * window arithmetic; the conv plan also chooses its path (packed GEMM, windowed rows, Winograd)
 * and packs constant weights once. */
#include "../verify_internal.h"
#include "conv.h"
#include "pool.h"

#define IPU__ATTR_MAX ((int64_t)1 << 30)

/* Output size of a window of k taps at dilation d over n (+ pads) elements, stride s: floor and
 * ceil variants; false if the padded input is smaller than the window. */
static bool win_out(int64_t n, int64_t pa, int64_t pb, int64_t k, int64_t d, int64_t s, int64_t *lo,
                    int64_t *hi) {
    int64_t span = n + pa + pb - (d * (k - 1) + 1);
    if (span < 0) return false;
    *lo = span / s + 1;
    *hi = (span + s - 1) / s + 1;
    return true;
}

/* attrs [first, first + count) must lie in [lo, IPU__ATTR_MAX]. */
static ipu_status attr_range(const vctx *v, uint32_t first, uint32_t count, int64_t lo,
                             const char *const *names) {
    for (uint32_t i = 0; i < count; i++) {
        int64_t a = v->ins->attr[first + i];
        if (a < lo || a > IPU__ATTR_MAX)
            return bad(v, "%s = %lld outside [%lld, %lld]", names[i], (long long)a, (long long)lo,
                       (long long)IPU__ATTR_MAX);
    }
    return IPU_OK;
}

/* Stride phases some tap t * d (t < k) of a stride-s window falls on; *idx[a] = index of phase a
 * among them (idx has s entries, or NULL). */
static int64_t used_phases(int64_t k, int64_t d, int64_t s, int64_t *idx) {
    int64_t n = 0;
    for (int64_t a = 0; a < s; a++) {
        if (idx) idx[a] = n;
        n += ipu__phase_used(a, k, d, s);
    }
    return n;
}

/* Floats of the window copy (conv.c, copy_window) for `rows` output rows of the input channels
 * one K chunk reads, rows of Wq columns. */
static uint64_t window_floats(int64_t Cig, int64_t KH, int64_t KW, const int64_t *a, int64_t rows,
                              int64_t Wq) {
    int64_t chans = (IPU__SGEMM_KC - 1) / (KH * KW) + 2; /* channels one K chunk reads */
    if (chans > Cig) chans = Cig;
    uint64_t plane = (uint64_t)chans * (uint64_t)used_phases(KH, a[3], a[1], NULL) *
                     (uint64_t)used_phases(KW, a[4], a[2], NULL) * (uint64_t)Wq;
    return plane * (uint64_t)(rows + (KH - 1) * a[3] / a[1]) + (uint64_t)Wq;
}

/* float32 window path (kernels/conv.h, conv.c): output rows per work item, 0 if the input rows of
 * one output row, for the channels of one K chunk, do not fit the scratch. Aims at one tile of
 * IPU__CONV_TILE extended pixels per item, then at >= 8 items (an even split over workers).
 * Sets *xcopy, *hq, *wq. */
static int64_t window_rows(int64_t N, int64_t G, int64_t Cig, int64_t OH, int64_t OW, int64_t KH,
                           int64_t KW, int64_t mbl, const int64_t *a, int *xcopy, int64_t *hq,
                           int64_t *wq) {
    int64_t sh = a[1], sw = a[2], ext_r = (KH - 1) * a[3] / sh, Wq = OW + (KW - 1) * a[4] / sw;
    *xcopy = !(sh == 1 && sw == 1 && KW == 1 && !a[5] && !a[6] && !a[7] && !a[8]);
    if (OH < 1 || Wq > ((int64_t)1 << 20) || ext_r > ((int64_t)1 << 20) || sh > 64 || sw > 64)
        return 0; /* (also keeps the size arithmetic below far from overflow) */
    int64_t rows = IPU__CONV_TILE / Wq < 1 ? 1 : IPU__CONV_TILE / Wq;
    if (rows > OH) rows = OH;
    if (*xcopy) {
        while (rows > 1 && window_floats(Cig, KH, KW, a, rows, Wq) > (uint64_t)IPU__CONV_WIN_XQ)
            rows--;
        if (window_floats(Cig, KH, KW, a, rows, Wq) > (uint64_t)IPU__CONV_WIN_XQ) return 0;
    }
    uint64_t base = (uint64_t)N * (uint64_t)G * (uint64_t)mbl;
    while (rows > 1 && base * ceil_div((uint64_t)OH, (uint64_t)rows) < 8 && rows * Wq > 64)
        rows = (rows + 1) / 2;
    rows = (int64_t)ceil_div((uint64_t)OH, ceil_div((uint64_t)OH, (uint64_t)rows)); /* even */
    *hq = rows + ext_r;
    *wq = Wq;
    return rows;
}

/* Pixels the micro-kernel computes for OH rows of `width` pixels in blocks of `rows` rows, each
 * block cut into tiles of `tile` pixels and each tile padded to a multiple of `pad`. */
static uint64_t padded_pixels(int64_t OH, int64_t rows, int64_t width, int64_t tile, int64_t pad) {
    uint64_t sum = 0;
    for (int64_t r0 = 0; r0 < OH; r0 += rows) {
        int64_t px = (OH - r0 < rows ? OH - r0 : rows) * width, rest = px % tile;
        sum += (uint64_t)(px / tile * tile) +
               ceil_div((uint64_t)rest, (uint64_t)pad) * (uint64_t)pad;
    }
    return sum;
}

/* Channels the micro-kernel computes for Cog output channels in sub-blocks of IPU__MM_MB, the
 * last padded to a multiple of `pad`. */
static uint64_t padded_channels(int64_t Cog, int64_t pad) {
    return (uint64_t)(Cog / IPU__MM_MB * IPU__MM_MB) +
           ceil_div((uint64_t)(Cog % IPU__MM_MB), (uint64_t)pad) * (uint64_t)pad;
}

/* Small-map and Winograd paths: channel items per pixel block. Their weights are packed in
 * panels of nr channels (the Winograd path's: of the micro-kernel's height), which the items
 * share out (ipu__conv_item_channels): as few items as the C^T tile allows (IPU__CONV_WIN_MPER
 * sub-blocks, which the window path also fits if the session binds other weights), one more
 * where `base` pixel blocks would give an odd count below 8, so that two workers get equal
 * shares (items of IPU__MM_MB channels split 128 as 96 + 32). */
static int64_t tpose_items(int64_t Cog, int nr, uint64_t base) {
    int64_t panels = (Cog + nr - 1) / nr, most = IPU__CONV_WIN_MPER * IPU__MM_MB / nr;
    int64_t c = (panels + most - 1) / most;
    if (base < 8 && base * (uint64_t)c % 2 && c < panels) c++;
    return c;
}

/* Small-map path (conv.h, `tpose`): output rows per work item, or 0 where it would not compute
 * at least IPU__CONV_T_GAIN fewer padded products than the window path (rows `wrows`, extended
 * rows of Wq pixels) or, for 1x1 stride-1 convolutions (`pw`), the GEMM path (rows `grows`).
 * Products count pixels times channels, each padded to what the micro-kernel computes (whole
 * tiles, the last rows of a block to a multiple of ipu__ukr.mq). At most IPU__CONV_T_PIX pixels
 * per item, fewer (down to 32) where there would be fewer than 2 items with `base` channel blocks;
 * further items come from cutting the channels (each item reads its channels' weights once: a 7x7
 * layer's weights stream from memory). Not for 1x1 convolutions of one group (`pw1`) with at most
 * two weight panels on planes of 1024 pixels or more: the small-map path then reads A's columns in
 * place, each from its own input plane (pages apart), which took ResNet-50's 256 -> 64 layers on
 * 56x56 maps 1.3-1.8x the GEMM path's time (docs/kernels.md, "The paths"). */
#define IPU__CONV_T_GAIN 0.95
static int64_t tpose_rows(const ipu__ukr *u, int64_t Cig, int64_t Cog, int64_t OH, int64_t OW,
                          int64_t KH, int64_t KW, const int64_t *a, bool pw, bool pw1,
                          int64_t wrows, int xcopy, int64_t Wq, int64_t grows, uint64_t ng) {
    if (OW > IPU__CONV_T_PIX || Cig < 1 || (!pw && !wrows)) return 0;
    if (pw1 && Cog <= 2 * u->nr && OH * OW >= 1024) return 0;
    int64_t rows = IPU__CONV_T_PIX / OW < OH ? IPU__CONV_T_PIX / OW : OH;
    uint64_t base = ng * ceil_div((uint64_t)Cog, (uint64_t)IPU__MM_MB);
    while (rows > 1 && base * ceil_div((uint64_t)OH, (uint64_t)rows) < 2 && rows * OW > 32)
        rows = (rows + 1) / 2;
    rows = (int64_t)ceil_div((uint64_t)OH, ceil_div((uint64_t)OH, (uint64_t)rows)); /* even */
    /* One block of pixels whose channels would make two items of unequal weight panels (5 as
     * 3 + 2: one of two workers computing 60 %): two blocks of pixels instead, each with all the
     * channels, where the larger costs at least 5 % less (Inception v2's 3x3 layers on 14x14
     * and 7x7 maps idled a worker for a quarter of the layer). */
    int64_t panels = (Cog + u->nr - 1) / u->nr, half = (OH + 1) / 2;
    if (ng * ceil_div((uint64_t)OH, (uint64_t)rows) == 1 && OH >= 2 && panels % 2 &&
        tpose_items(Cog, u->nr, 1) == 2) {
        uint64_t all = padded_pixels(OH, OH, OW, IPU__CONV_T_PIX, u->mq);
        uint64_t top = padded_pixels(half, half, OW, IPU__CONV_T_PIX, u->mq);
        double cut_c = (double)(panels / 2 + 1) * (double)all;
        double cut_p = (double)panels * (double)top;
        if (cut_p < 0.95 * cut_c) rows = half;
    }
    if (xcopy && window_floats(Cig, KH, KW, a, rows, Wq) > (uint64_t)IPU__CONV_WIN_XQ) return 0;
    uint64_t now = (pw ? padded_pixels(OH, grows, OW, IPU__CONV_TILE, u->nr)
                       : padded_pixels(OH, wrows, Wq, IPU__CONV_TILE, u->nr)) *
                   padded_channels(Cog, u->mq);
    uint64_t t = padded_pixels(OH, rows, OW, IPU__CONV_T_PIX, u->mq) * padded_channels(Cog, u->nr);
    return (double)t < IPU__CONV_T_GAIN * (double)now ? rows : 0;
}

/* Winograd path (kernels/conv.h, `wino`): tile rows per work item, 0 where it would not be at least
 * 10 % cheaper than the direct paths or its buffers (or the window path's, for the same rows)
 * do not fit the scratch. Cost in multiply-adds: the 16 GEMMs with tiles padded to the
 * micro-kernel's width, against 9 per output pixel; weights that do not stay in cache cost
 * IPU__WINO_BYTE per byte each time they stream, once per block of tiles for U (16 floats per
 * weight pair), once for the direct paths' (9). Measured on ResNet-50, VGG19, AlexNet, ZFNet:
 * it keeps the 3x3 layers with 512 input channels on 14x14 and 28x28 maps direct (U of 16 MB
 * streamed for every 16 tiles), where Winograd was 4-17 % slower. Sets *wnt and *wcb. */
#define IPU__WINO_V ((int64_t)128 << 10)     /* floats of V at most */
#define IPU__WINO_M ((int64_t)96 << 10)      /* floats of M at most */
#define IPU__WINO_CACHED ((double)(1 << 20)) /* weight bytes that stay in cache between blocks */
#define IPU__WINO_BYTE 5.0                   /* multiply-adds per weight byte streamed */
static double streamed(double bytes) {
    return bytes > IPU__WINO_CACHED ? IPU__WINO_BYTE * bytes : 0.0;
}
static int64_t wino_rows(const ipu__ukr *u, int64_t Cig, int64_t Cog, int64_t OH, int64_t OW,
                         const int64_t *a, int64_t *wnt, int64_t *wcb) {
    int64_t TH = (OH + 1) / 2, TW = (OW + 1) / 2, nr = u->nr, mr = u->mr;
    int64_t most = Cig > IPU__WINO_V ? 0 : IPU__WINO_V / (16 * Cig) / nr * nr;
    if (most < TW || TW > ((int64_t)1 << 16) || TH > ((int64_t)1 << 16)) return 0;
    int64_t mq = u->mq;
    double cpad = (double)((Cog + mq - 1) / mq * mq), pair = cpad * (double)Cig;
    double best = 0.9 * ((double)Cog * (double)Cig * 9.0 * (double)OH * (double)OW +
                         streamed(36.0 * (double)Cog * (double)Cig));
    int64_t tr = 0;
    for (int64_t t = 1; t <= most / TW && t <= TH; t++) {
        uint64_t nb = ceil_div((uint64_t)TH, (uint64_t)t);
        int64_t even = (int64_t)ceil_div((uint64_t)TH, nb), last = TH - (int64_t)(nb - 1) * even;
        double tiles = (double)(nb - 1) * (double)((even * TW + nr - 1) / nr * nr) +
                       (double)((last * TW + nr - 1) / nr * nr);
        double cost = 16.0 * pair * tiles + (double)nb * streamed(64.0 * pair);
        if (cost < best) {
            best = cost;
            tr = even;
        }
    }
    if (!tr) return 0;
    int64_t nt = (tr * TW + nr - 1) / nr * nr, cb = IPU__WINO_M / (16 * nt) / mr * mr;
    if (cb < mr) return 0;
    if (cb > (Cog + mr - 1) / mr * mr) cb = (Cog + mr - 1) / mr * mr;
    int64_t tmp = 8 * (tr + 1) * TW + 2 * TW + 2, out = 8 * tr * TW; /* winograd.c's buffers */
    if (tmp < out) tmp = out;
    if ((uint64_t)(16 * IPU__WINO_VS(nt, Cig) + 16 * IPU__WINO_VS(nt, cb) + tmp) * sizeof(float) >
            IPU__SCRATCH_BYTES ||
        window_floats(Cig, 3, 3, a, 2 * tr, OW + 2) > (uint64_t)IPU__CONV_WIN_XQ)
        return 0;
    *wnt = nt;
    *wcb = cb;
    return tr;
}

/* The float32 conv weights w[G * Cog, K] packed for micro-kernels of height mr, the layout the
 * kernels read (kernels/conv.h, ipu__conv_plan.packed): sub-block (g, mb) of IPU__MM_MB rows at
 * (g * mbl + mb) * blk, its K chunk k0 at + mpad * k0 (ipu__sgemm_pack_a's layout). */
typedef struct conv_pack {
    int64_t G, Cog, K, mbl, blk;
    int mr; /* the micro-kernel's height (its width nr for pack_conv_weights_t) */
    int f16;
} conv_pack;

static void pack_conv_weights(const void *ctx, const void *w, void *out) {
    const conv_pack *c = ctx; /* w: float32 weights, or float16 ones (f16) */
    float *dst = out;
    for (int64_t g = 0; g < c->G; g++)
        for (int64_t mb = 0; mb < c->mbl; mb++) {
            ipu__sgemm_args a = {0};
            int64_t m0 = mb * IPU__MM_MB;
            a.m = c->Cog - m0 < IPU__MM_MB ? c->Cog - m0 : IPU__MM_MB;
            a.a = (const char *)w + (size_t)((g * c->Cog + m0) * c->K) * (c->f16 ? 2 : 4);
            a.a_rs = c->K;
            a.a_cs = 1;
            a.a_f16 = c->f16;
            int64_t mpad = (a.m + c->mr - 1) / c->mr * c->mr;
            float *b = dst + (g * c->mbl + mb) * c->blk;
            for (int64_t k0 = 0; k0 < c->K; k0 += IPU__SGEMM_KC)
                ipu__sgemm_pack_a(&a, k0, c->K - k0 < IPU__SGEMM_KC ? c->K - k0 : IPU__SGEMM_KC,
                                  c->mr, b + mpad * k0);
        }
}

void ipu__conv_unpack_weights(const float *src, int64_t G, int64_t Cog, int64_t K, int mr,
                              int64_t kc, int64_t mb, float *w) {
    int64_t mbl = (Cog + mb - 1) / mb, blk = (mb + mr - 1) / mr * mr * K;
    for (int64_t g = 0; g < G; g++)
        for (int64_t b = 0; b < mbl; b++) {
            int64_t m0 = b * mb, m = Cog - m0 < mb ? Cog - m0 : mb;
            int64_t mpad = (m + mr - 1) / mr * mr;
            const float *sb = src + (g * mbl + b) * blk;
            for (int64_t k0 = 0; k0 < K; k0 += kc) {
                int64_t c = K - k0 < kc ? K - k0 : kc;
                for (int64_t r = 0; r < m; r++) {
                    const float *a = sb + mpad * k0 + r / mr * mr * c + r % mr;
                    float *row = w + (g * Cog + m0 + r) * K + k0;
                    for (int64_t k = 0; k < c; k++) row[k] = a[k * mr];
                }
            }
        }
}

/* The Winograd path's U (ipu__wino_pack_weights; one group). */
static void pack_wino_weights(const void *ctx, const void *w, void *out) {
    const conv_pack *c = ctx;
    ipu__wino_pack_weights(w, c->f16, c->Cog, c->K / 9, c->mr, out);
}

/* The same weights for the small-map path: per group, w transposed to [K, Cog] in B panels of
 * width nr (ipu__sgemm_pack_b_all), group g at g * blk. */
static void pack_conv_weights_t(const void *ctx, const void *w, void *out) {
    const conv_pack *c = ctx;
    for (int64_t g = 0; g < c->G; g++) {
        ipu__sgemm_args b = {0};
        b.n = c->Cog;
        b.k = c->K;
        b.b = (const char *)w + (size_t)(g * c->Cog * c->K) * (c->f16 ? 2 : 4);
        b.b_f16 = c->f16;
        b.b_rs = 1;
        b.b_cs = c->K;
        ipu__sgemm_pack_b_all(&b, c->mr, (float *)out + g * c->blk);
    }
}

ipu_status ipu__verify_conv2d(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    static const char *const pos[] = {"group", "stride_h", "stride_w", "dil_h", "dil_w"};
    static const char *const pads[] = {"pad_top", "pad_left", "pad_bottom", "pad_right"};
    char s1[160], s2[160], s3[160];
    /* attrs 9, 10 (optional, both or neither): activation, residual flag; 11..13 with activation
     * UNARY (and only then): its function and parameters (fn, p0, p1 as UNARY's) */
    if (ins->n_attr != 9 && ins->n_attr != 11 && ins->n_attr != 14)
        return bad(v, "%u attributes, expected 9, 11 or 14", ins->n_attr);
    bool epi = ins->n_attr >= 11;
    int64_t act = epi ? ins->attr[9] : 0, has_res = epi ? ins->attr[10] : 0;
    ipu__unary_act ua = {0};
    ipu_status st = ipu__vact_epilogue(v, ins, act, 11, &ua);
    if (st) return st;
    if (has_res != 0 && has_res != 1)
        return bad(v, "residual must be 0 or 1, got %lld", (long long)has_res);
    if (ins->n_in < 2 + (uint32_t)has_res)
        return bad(v, "residual = 1 needs x, w[, bias] and the residual input");
    uint32_t n_main = ins->n_in - (uint32_t)has_res; /* x, w[, bias] */
    if (n_main > 3) return bad(v, "%u inputs, expected x, w[, bias]", n_main);
    const ipu__tensor *x = in[0], *w = in[1], *bias = n_main == 3 ? in[2] : NULL;
    const ipu__tensor *res = has_res ? in[ins->n_in - 1] : NULL;
    st = attr_range(v, 0, 5, 1, pos);
    if (!st) st = attr_range(v, 5, 4, 0, pads);
    if (st) return st;
    if (x->desc.ndim != 4 || w->desc.ndim != 4 || y->desc.ndim != 4)
        return bad(v, "x%s, w%s and y%s must be 4-D", shape_str(s1, sizeof s1, x),
                   shape_str(s2, sizeof s2, w), shape_str(s3, sizeof s3, y));
    const int64_t *a = ins->attr, *xd = x->desc.dims, *wd = w->desc.dims, *yd = y->desc.dims;
    int64_t G = a[0], C = xd[1], M = wd[0], KH = wd[2], KW = wd[3];
    if (C % G || M % G)
        return bad(v, "group %lld does not divide input channels %lld and output channels %lld",
                   (long long)G, (long long)C, (long long)M);
    if (wd[1] != C / G)
        return bad(v, "w%s: dim 1 must be C/group = %lld", shape_str(s1, sizeof s1, w),
                   (long long)(C / G));
    if (KH < 1 || KW < 1 || KH > IPU__ATTR_MAX || KW > IPU__ATTR_MAX)
        return bad(v, "kernel %lldx%lld outside [1, %lld]", (long long)KH, (long long)KW,
                   (long long)IPU__ATTR_MAX);
    if (bias && (bias->desc.ndim != 1 || bias->desc.dims[0] != M))
        return bad(v, "bias%s must be [%lld]", shape_str(s1, sizeof s1, bias), (long long)M);
    int64_t oh, ohc, ow, owc;
    if (!win_out(xd[2], a[5], a[7], KH, a[3], a[1], &oh, &ohc) ||
        !win_out(xd[3], a[6], a[8], KW, a[4], a[2], &ow, &owc))
        return bad(v, "padded input x%s is smaller than the dilated kernel %lldx%lld",
                   shape_str(s1, sizeof s1, x), (long long)KH, (long long)KW);
    if (yd[0] != xd[0] || yd[1] != M || yd[2] != oh || yd[3] != ow)
        return bad(v, "output y%s, expected [%lld,%lld,%lld,%lld]", shape_str(s1, sizeof s1, y),
                   (long long)xd[0], (long long)M, (long long)oh, (long long)ow);
    if (res && (res->desc.ndim != 4 || res->desc.dims[0] != yd[0] || res->desc.dims[1] != yd[1] ||
                res->desc.dims[2] != yd[2] || res->desc.dims[3] != yd[3]))
        return bad(v, "residual%s must have y's shape %s", shape_str(s1, sizeof s1, res),
                   shape_str(s2, sizeof s2, y));
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    int64_t mbl = (int64_t)ceil_div((uint64_t)(M / G), (uint64_t)IPU__MM_MB);
    int xcopy = 0;
    int64_t hq = 0, wq = 0, wrows = 0;
    bool pw = KH == 1 && KW == 1 && a[1] == 1 && a[2] == 1 && !a[5] && !a[6] && !a[7] && !a[8];
    bool f32 = y->desc.dtype == IPU_DTYPE_FLOAT32 && y->numel > 0;
    /* float16 depthwise convolutions take the float32 one's window plan (conv.c converts) */
    bool dw16 = y->desc.dtype == IPU_DTYPE_FLOAT16 && y->numel > 0 && C / G == 1 && M / G == 1 &&
                ((uint64_t)ow + (uint64_t)KH * (uint64_t)KW) * sizeof(float) <= IPU__SCRATCH_BYTES;
    /* the others (but 1x1 ones: the float16 GEMM path packs their strided rows once for all
     * channels, ResNet-50's 1x1 stride-2 layers 1.4x faster than on the window path) take the
     * float32 window plan where it copies the input rows (converted from float16 there, a row
     * at a time into the scratch after IPU__SCRATCH_BYTES) */
    bool f16 = y->desc.dtype == IPU_DTYPE_FLOAT16 && y->numel > 0;
    if ((f32 || (f16 && (dw16 || KH * KW > 1))) && !pw) {
        wrows = window_rows(xd[0], G, C / G, oh, ow, KH, KW, mbl, a, &xcopy, &hq, &wq);
        if (f16 && !dw16 &&
            (!xcopy ||
             (uint64_t)xd[3] * sizeof(float) > IPU__WORKER_SCRATCH_BYTES - IPU__SCRATCH_BYTES))
            wrows = 0;
    }
    size_t roff = wrows || ((f32 || f16) && pw) ? (size_t)((C / G) * KH * KW) * sizeof(int64_t) : 0;
    /* depthwise float32, stride 1, no dilation, as wide as its input: dw_same (conv_dw.c) */
    bool dws = f32 && wrows && C / G == 1 && M / G == 1 && a[1] == 1 && a[2] == 1 && a[3] == 1 &&
               a[4] == 1 && ow == xd[3] && a[6] < KW && KW <= IPU__DW_MAX_KW &&
               xd[3] <= IPU__DW_MAX_W;
    size_t dwb = dws ? (size_t)(KH * KW) * sizeof(int64_t) +
                           (size_t)(xd[3] + IPU__DW_V) * sizeof(int32_t)
                     : 0;
    ipu__conv_plan *p;
    if (!(p = alloc_plan(sizeof *p + roff + dwb))) /* then rowoff[K], dwoff, dwcol */
        return plan_nomem();
    p->f16 = y->desc.dtype == IPU_DTYPE_FLOAT16;
    p->has_bias = bias != NULL;
    p->act = (int)act;
    p->unary = ua;
    p->has_res = res != NULL;
    p->N = xd[0];
    p->C = C;
    p->H = xd[2];
    p->W = xd[3];
    p->M = M;
    p->OH = oh;
    p->OW = ow;
    p->KH = KH;
    p->KW = KW;
    p->G = G;
    p->Cig = C / G;
    p->Cog = M / G;
    p->K = p->Cig * KH * KW; /* <= w.numel */
    p->sh = a[1];
    p->sw = a[2];
    p->dh = a[3];
    p->dw = a[4];
    p->pt = a[5];
    p->pl = a[6];
    /* direct path scratch: OW + KH*KW floats */
    uint64_t dbytes = ((uint64_t)ow + (uint64_t)KH * (uint64_t)KW) * sizeof(float);
    p->pointwise = KH == 1 && KW == 1 && a[1] == 1 && a[2] == 1 && a[5] == 0 && a[6] == 0 &&
                   a[7] == 0 && a[8] == 0;
    p->direct = p->Cig == 1 && p->Cog == 1 && dbytes <= IPU__SCRATCH_BYTES;
    int64_t avail = (int64_t)((IPU__SCRATCH_BYTES - IPU__CONV_SG_BYTES) / sizeof(float));
    p->P = avail / (2 * IPU__MM_MB + p->K);
    if (p->P > 512) p->P = 512;
    if (p->P < 16) p->P = 16;
    p->msub = mbl;
    p->mu = IPU__MM_MB;
    if (p->direct) {
        p->mblocks = 1;
        p->rows = ow >= 4096 ? 1 : 4096 / ow;
    } else {
        p->mblocks = mbl;
        p->rows = (int64_t)ceil_div((uint64_t)p->P, (uint64_t)ow);
    }
    /* float32 weights stored in the executable: packed once, here, for the path that runs */
    /* float16 ones too, as float32, for the float16 GEMM path (the GEMM layout below) */
    bool pack = (f32 || (p->f16 && y->numel > 0)) && !p->direct && w->loc == IPU_LOC_TENSOR_DATA;
    int64_t trows = 0;
    if ((f32 || f16) && pack && (wrows || pw)) { /* the small-map and Winograd paths */
        if (pw) { /* the small-map path reads x's channel planes in place */
            hq = p->H;
            wq = p->W;
        }
        trows = tpose_rows(&u, p->Cig, p->Cog, oh, ow, KH, KW, a, pw, pw && G == 1, wrows, xcopy,
                           wq, p->rows, (uint64_t)xd[0] * (uint64_t)G);
        if (trows && !pw) hq = trows + (KH - 1) * a[3] / a[1]; /* the copy's rows per block */
        /* Winograd: 3x3, stride 1, no dilation, one group; not for a few input channels,
         * whose 16 GEMMs would be mostly the micro-kernel's loads and stores */
        bool wshape = G == 1 && KH == 3 && KW == 3 && a[1] == 1 && a[2] == 1 && a[3] == 1 &&
                      a[4] == 1 && p->Cig >= 8;
        if (wshape && wrows && f32) /* (float16's below) */
            p->wtr = wino_rows(&u, p->Cig, p->Cog, oh, ow, a, &p->wnt, &p->wcb);
        if (p->wtr) {
            trows = 0;
            hq = 2 * p->wtr + 2;
        }
    }
    /* float16: the Winograd path where the float32 plan could take it (its input rows
     * converted per channel, winograd.c), else the float16 GEMM path */
    if (p->f16 && pack && G == 1 && KH == 3 && KW == 3 && a[1] == 1 && a[2] == 1 && a[3] == 1 &&
        a[4] == 1 && p->Cig >= 8) {
        p->wtr = wino_rows(&u, p->Cig, p->Cog, oh, ow, a, &p->wnt, &p->wcb);
        if (p->wtr) {
            p->rows = 2 * p->wtr;
            p->wino = 1;
            wrows = trows = 0; /* (no window plan: winograd.c converts the rows itself) */
        }
    }
    if (wrows || trows) { /* (a float32 Winograd plan has wrows) */
        int64_t *ro = (int64_t *)(p + 1), ir[64], ic[64];
        int64_t nphr = used_phases(KH, a[3], a[1], ir), nphc = used_phases(KW, a[4], a[2], ic);
        int64_t plane = xcopy ? hq * wq : xd[2] * xd[3];
        for (int64_t k = 0; k < p->K; k++) { /* patch row k = (ci, kh, kw) */
            int64_t kw = k % KW, kh = k / KW % KH, ci = k / (KW * KH);
            int64_t th = kh * a[3], tw = kw * a[4];
            ro[k] = xcopy ? ((ci * nphr + ir[th % a[1]]) * nphc + ic[tw % a[2]]) * plane +
                                th / a[1] * wq + tw / a[2]
                          : ci * plane + th * xd[3];
        }
        p->nphr = nphr;
        p->nphc = nphc;
        p->window = wrows && !p->direct; /* the depthwise loop uses the copied rows too */
        p->xcopy = xcopy;
        p->rowoff = ro;
        p->Hq = hq;
        p->Wq = wq;
        p->rows = p->wtr ? 2 * p->wtr : trows ? trows : wrows;
        p->tpose = trows > 0;
        p->wino = p->wtr > 0;
    }
    if (dws && p->direct && p->Wq) {
        int64_t *off = (int64_t *)((char *)(p + 1) + roff);
        int32_t *col = (int32_t *)(off + KH * KW);
        for (int64_t k = 0; k < KH * KW; k++) off[k] = k / KW * xd[3] + k % KW - a[6];
        for (int32_t i = 0, c = 0; i < xd[3] + IPU__DW_V; i++) {
            col[i] = c;
            c = c + 1 < xd[3] ? c + 1 : 0;
        }
        p->dw_same = 1;
        p->dwoff = off;
        p->dwcol = col;
    }
    if (p->rows > oh) p->rows = oh;
    /* float32 GEMM path (1x1): two pixel blocks where fewer than 3 channel blocks would leave a
     * second worker idle or unevenly loaded (96 + 32 channels) */
    if (!p->window && !p->direct && !p->f16 && p->rows == oh && oh >= 2 &&
        (uint64_t)p->N * (uint64_t)G * (uint64_t)mbl < 3 && oh * ow >= 128)
        p->rows = (oh + 1) / 2;
    /* float16 GEMM path (one item per IPU__MM_MB channels): below 4 channel items, 8 items
     * where the rows allow, so that two workers get even shares of a small map's few channel
     * blocks, but blocks of at least two micro-kernel widths of pixels (narrower ones are edge
     * tiles only: 13 x 13 maps cut into 26-pixel blocks ran 1.2x slower than float32) */
    if (p->f16 && !p->direct && !p->wino && !p->window && !p->tpose && mbl > 0) {
        uint64_t base = (uint64_t)p->N * (uint64_t)G * (uint64_t)mbl;
        uint64_t want = base >= 4 ? 1 : ceil_div(8, base);
        uint64_t wide = (uint64_t)(oh * ow) / (2 * (uint64_t)u.nr);
        if (want > wide) want = wide ? wide : 1;
        if (want > (uint64_t)oh) want = (uint64_t)oh;
        if (ceil_div((uint64_t)oh, (uint64_t)p->rows) < want)
            p->rows = (int64_t)ceil_div((uint64_t)oh, want);
    }
    p->rblocks = (int64_t)ceil_div((uint64_t)oh, (uint64_t)p->rows);
    /* GEMM paths: the rows only cut the work items, so cut them evenly (27 rows as 14 + 13, not
     * 18 + 9, which left a second worker idle for a third of the layer) */
    if (!p->window && !p->direct && !p->tpose && !p->wino)
        p->rows = (int64_t)ceil_div((uint64_t)oh, (uint64_t)p->rblocks);
    /* float32 paths: one B packing per pixel block for all channels, unless < 8 items */
    if (!p->direct && (!p->f16 || p->wino || p->window || p->tpose) && mbl > 0) {
        uint64_t base = (uint64_t)p->N * (uint64_t)G * (uint64_t)p->rblocks;
        if (p->tpose || p->wino) {
            p->mu = p->tpose ? u.nr : u.mr;
            p->mblocks = tpose_items(p->Cog, (int)p->mu, base);
        } else {
            uint64_t split = base >= 8 ? 1 : (8 + base - 1) / base;
            if (split > (uint64_t)mbl) split = (uint64_t)mbl;
            int64_t mper = (int64_t)ceil_div((uint64_t)mbl, split);
            if (p->window && mper > IPU__CONV_WIN_MPER) mper = IPU__CONV_WIN_MPER;
            p->mblocks = (int64_t)ceil_div((uint64_t)mbl, (uint64_t)mper);
        }
    }
    /* the layout of the path that runs (pack_conv_weights_t for the small-map path) */
    int tile = p->tpose ? u.nr : u.mr;
    int64_t blk = p->tpose  ? (int64_t)ipu__sgemm_packed_b_floats(p->K, p->Cog, u.nr)
                  : p->wino ? 16 * ((p->Cog + u.mr - 1) / u.mr * u.mr) * p->Cig
                            : (IPU__MM_MB + u.mr - 1) / u.mr * u.mr * p->K;
    uint64_t nblk = (uint64_t)G * (uint64_t)(p->tpose || p->wino ? 1 : mbl);
    if (pack && nblk * (uint64_t)blk < ((uint64_t)1 << 32)) {
        conv_pack cp = {G, p->Cog, p->K, mbl, blk, tile, p->f16};
        /* the source as the layouts see it: G groups of [Cog, K] (small-map: B = each's
         * transpose) */
        ipu__pack_src src = {ins->in[1], p->tpose ? 1 : 0, (uint64_t)G, (uint64_t)p->Cog,
                             (uint64_t)p->K};
        /* version 1 of the packing functions' bytes: bump it when they change */
        uint32_t rows_per_block = p->tpose ? 0 : (uint32_t)IPU__MM_MB;
        ipu__pack_tag tag = {p->tpose ? IPU__PACK_SGEMM_B : IPU__PACK_SGEMM_A,
                             1,
                             (uint32_t)u.isa,
                             {(uint32_t)tile, IPU__SGEMM_KC, rows_per_block, (uint32_t)p->f16}};
        if (p->wino) /* geom[1]: from float16 */
            tag = (ipu__pack_tag){IPU__PACK_WINO,
                                  1,
                                  (uint32_t)u.isa,
                                  {(uint32_t)tile, (uint32_t)p->f16}};
        const void *dst;
        st = ipu__vpacked(v, 1, &src, &tag, (size_t)(nblk * (uint64_t)blk) * sizeof(float),
                          p->tpose  ? pack_conv_weights_t
                          : p->wino ? pack_wino_weights
                                    : pack_conv_weights,
                          &cp, &dst);
        if (st) {
            ipu__free(p);
            return st;
        }
        p->packed = dst;
        p->packed_mr = p->tpose ? 0 : u.mr;
        p->packed_nr = p->tpose ? u.nr : 0;
        p->packed_blk = blk;
    } else {
        p->tpose = p->wino = 0; /* they read packed weights only */
    }
    p->hdr.work = y->numel == 0 ? 0
                                : (size_t)((uint64_t)p->N * (uint64_t)G * (uint64_t)p->mblocks *
                                           (uint64_t)p->rblocks);
    p->hdr.fn = ipu__select_kernel(ins->op, y->desc.dtype);
    /* conv.c runs a worker's consecutive channel items of a pixel block in one piece on these
     * paths (B packed, tiles transformed once) */
    p->hdr.contiguous = !p->direct && p->mblocks > 1 &&
                        (p->f16 || p->tpose || p->wino || !p->window);
    ins->plan = p;
    return IPU_OK;
}

ipu_status ipu__verify_pool2d(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    const ipu__tensor *x = in[0];
    static const char *const pos[] = {"kernel_h", "kernel_w", "stride_h", "stride_w"};
    static const char *const pads[] = {"pad_top", "pad_left", "pad_bottom", "pad_right"};
    static const char *const dil[] = {"dil_h", "dil_w"};
    char s1[160], s2[160];
    const int64_t *a = ins->attr;
    if (a[0] != 0 && a[0] != 1)
        return bad(v, "kind must be 0 (max) or 1 (avg), got %lld", (long long)a[0]);
    if (a[9] != 0 && a[9] != 1)
        return bad(v, "count_include_pad must be 0 or 1, got %lld", (long long)a[9]);
    ipu_status st = attr_range(v, 1, 4, 1, pos);
    if (!st) st = attr_range(v, 5, 4, 0, pads);
    if (!st) st = attr_range(v, 10, 2, 1, dil);
    if (st) return st;
    if (x->desc.ndim != 4 || y->desc.ndim != 4)
        return bad(v, "x%s and y%s must be 4-D", shape_str(s1, sizeof s1, x),
                   shape_str(s2, sizeof s2, y));
    const int64_t *xd = x->desc.dims, *yd = y->desc.dims;
    for (int i = 0; i < 2; i++)
        if (a[5 + i] > (a[1 + i] - 1) * a[10 + i] || a[7 + i] > (a[1 + i] - 1) * a[10 + i])
            return bad(v, "pads (%lld, %lld) must be smaller than the dilated kernel %lld",
                       (long long)a[5 + i], (long long)a[7 + i],
                       (long long)((a[1 + i] - 1) * a[10 + i] + 1));
    int64_t oh, ohc, ow, owc;
    if (!win_out(xd[2], a[5], a[7], a[1], a[10], a[3], &oh, &ohc) ||
        !win_out(xd[3], a[6], a[8], a[2], a[11], a[4], &ow, &owc))
        return bad(v, "padded input x%s is smaller than the dilated kernel %lldx%lld",
                   shape_str(s1, sizeof s1, x), (long long)a[1], (long long)a[2]);
    /* ceil mode: the last window must start inside the input or its top/left padding */
    bool okh = yd[2] == oh || (yd[2] == ohc && (ohc - 1) * a[3] < xd[2] + a[5]);
    bool okw = yd[3] == ow || (yd[3] == owc && (owc - 1) * a[4] < xd[3] + a[6]);
    if (yd[0] != xd[0] || yd[1] != xd[1] || !okh || !okw)
        return bad(v, "output y%s, expected [%lld,%lld,%lld,%lld] (or the ceil-mode size)",
                   shape_str(s1, sizeof s1, y), (long long)xd[0], (long long)xd[1], (long long)oh,
                   (long long)ow);
    ipu__pool_plan *p;
    if (!(p = alloc_plan(sizeof *p))) return plan_nomem();
    p->f16 = y->desc.dtype == IPU_DTYPE_FLOAT16;
    p->kind = (int)a[0];
    p->cip = (int)a[9];
    p->H = xd[2];
    p->W = xd[3];
    p->OH = yd[2];
    p->OW = yd[3];
    p->KH = a[1];
    p->KW = a[2];
    p->sh = a[3];
    p->sw = a[4];
    p->pt = a[5];
    p->pl = a[6];
    p->pb = a[7];
    p->pr = a[8];
    p->dh = a[10];
    p->dw = a[11];
    p->rows = p->OW >= 1024 ? 1 : 1024 / p->OW;
    if (p->rows > p->OH) p->rows = p->OH;
    p->rblocks = (int64_t)ceil_div((uint64_t)p->OH, (uint64_t)p->rows);
    /* planes smaller than the block: several to an item (~1024 outputs), >= 8 items */
    p->nplanes = xd[0] * xd[1];
    p->planes = p->rblocks == 1 && y->numel > 0 && p->OH * p->OW < 512 ? 1024 / (p->OH * p->OW) : 1;
    if (p->planes > p->nplanes / 8) p->planes = p->nplanes / 8 > 1 ? p->nplanes / 8 : 1;
    p->hdr.work = y->numel == 0 ? 0
                                : (size_t)ceil_div((uint64_t)p->nplanes, (uint64_t)p->planes) *
                                      (size_t)p->rblocks;
    p->hdr.fn = ipu__select_kernel(ins->op, y->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}
