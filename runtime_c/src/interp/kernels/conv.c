/* CONV2D (docs/bytecode.md): 2-D convolution, NCHW, float32/float16 (computed in float32).
 * GEMM path: for each tile of output pixels, the input patches are unrolled (im2col) into the
 * worker scratch as a [K, P] float matrix (K = Cig*KH*KW, in chunks of KCH rows when K is large)
 * and multiplied by the weight rows with ipu__sgemm. Depthwise convolutions (one input and one
 * output channel per group) use a direct loop. Every output element is computed the same way
 * whichever work item computes it, so results do not depend on the split. */
#include <string.h>

#include "kernels.h"

static inline float ld(const void *base, int f16, int64_t i) {
    return f16 ? ipu__f16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

/* col[kk][j] = x(patch row k0 + kk, output pixel p0 + j) of the image plane block at xoff. */
static void im2col(const ipu__conv_plan *p, const void *x, int64_t xoff, int64_t k0, int64_t kc,
                   int64_t p0, int64_t np, float *col) {
    int64_t HW = p->H * p->W;
    for (int64_t kk = 0; kk < kc; kk++) {
        int64_t k = k0 + kk;
        int64_t kw = k % p->KW, kh = (k / p->KW) % p->KH, ci = k / (p->KW * p->KH);
        int64_t base = xoff + ci * HW;
        float *dst = col + kk * np;
        int64_t oh = p0 / p->OW, ow = p0 % p->OW;
        for (int64_t j = 0; j < np;) {
            int64_t ih = oh * p->sh - p->pt + kh * p->dh;
            int64_t n = p->OW - ow < np - j ? p->OW - ow : np - j; /* rest of this output row */
            if (ih < 0 || ih >= p->H) {
                memset(dst + j, 0, sizeof(float) * (size_t)n);
            } else {
                int64_t row = base + ih * p->W, iw = ow * p->sw - p->pl + kw * p->dw;
                for (int64_t t = 0; t < n; t++, iw += p->sw)
                    dst[j + t] = (iw >= 0 && iw < p->W) ? ld(x, p->f16, row + iw) : 0.0f;
            }
            j += n;
            ow = 0;
            oh++;
        }
    }
}

static void store_row(const ipu__conv_plan *p, void *y, int64_t off, float *row, int64_t n,
                      const void *bias, int64_t co) {
    if (bias) {
        float bv = ld(bias, p->f16, co);
        for (int64_t j = 0; j < n; j++) row[j] += bv;
    }
    if (p->f16)
        ipu__cvt_f32_to_f16(row, (uint16_t *)y + off, (size_t)n);
    else
        memcpy((float *)y + off, row, sizeof(float) * (size_t)n);
}

static void run_gemm(const ipu__conv_plan *p, const void *x, const void *w, const void *bias,
                     void *y, int64_t n, int64_t g, int64_t mb, int64_t r, void *scratch) {
    float *acc = (float *)((char *)scratch + IPU__CONV_SG_BYTES); /* [MB][P] */
    float *tmp = acc + IPU__MM_MB * p->P;                        /* [MB][P] */
    float *col = tmp + IPU__MM_MB * p->P;                        /* [KCH][P] */
    int64_t m0 = mb * IPU__MM_MB, m1 = m0 + IPU__MM_MB < p->Cog ? m0 + IPU__MM_MB : p->Cog;
    int64_t oh1 = (r + 1) * p->rows < p->OH ? (r + 1) * p->rows : p->OH;
    int64_t pix0 = r * p->rows * p->OW, pix1 = oh1 * p->OW, OHW = p->OH * p->OW;
    int64_t xoff = (n * p->C + g * p->Cig) * p->H * p->W, co0 = g * p->Cog + m0, m = m1 - m0;
    size_t es = p->f16 ? 2 : 4;
    for (int64_t q0 = pix0; q0 < pix1; q0 += p->P) {
        int64_t np = pix1 - q0 < p->P ? pix1 - q0 : p->P;
        if (p->K == 0) memset(acc, 0, sizeof(float) * (size_t)(m * np)); /* no input channels */
        for (int64_t k0 = 0; k0 < p->K; k0 += p->KCH) {
            int64_t kc = p->K - k0 < p->KCH ? p->K - k0 : p->KCH;
            ipu__sgemm_args a;
            if (p->pointwise) { /* 1x1, stride 1, no pads: x itself is the [K, H*W] matrix */
                a.b = (const char *)x + (size_t)(xoff + k0 * OHW + q0) * es;
                a.b_rs = OHW;
                a.b_f16 = p->f16;
            } else {
                im2col(p, x, xoff, k0, kc, q0, np, col);
                a.b = col;
                a.b_rs = np;
                a.b_f16 = 0;
            }
            a.m = m;
            a.n = np;
            a.k = kc;
            a.a = (const char *)w + (size_t)(co0 * p->K + k0) * es;
            a.a_rs = p->K;
            a.a_cs = 1;
            a.a_f16 = p->f16;
            a.b_cs = 1;
            a.c = k0 == 0 ? acc : tmp;
            a.ldc = np;
            ipu__sgemm(&a, scratch, IPU__CONV_SG_BYTES);
            if (k0 > 0)
                for (int64_t i = 0; i < m * np; i++) acc[i] += tmp[i];
        }
        for (int64_t i = 0; i < m; i++)
            store_row(p, y, (n * p->M + co0 + i) * OHW + q0, acc + i * np, np, bias, co0 + i);
    }
}

/* Taps [*t0, *t1) of a window of k taps (dilation d) starting at `start` that fall in [0, n). */
static void tap_range(int64_t start, int64_t k, int64_t d, int64_t n, int64_t *t0, int64_t *t1) {
    int64_t a = start >= 0 ? 0 : (-start + d - 1) / d;
    int64_t b = start >= n ? 0 : (n - start + d - 1) / d;
    *t0 = a;
    *t1 = b < k ? b : k;
}

/* Depthwise: channel c = g of image n, output rows of block r. */
static void run_direct(const ipu__conv_plan *p, const void *x, const void *w, const void *bias,
                       void *y, int64_t n, int64_t g, int64_t r, void *scratch) {
    float *row = scratch;     /* OW floats */
    float *wt = row + p->OW;  /* KH*KW floats */
    int64_t KK = p->KH * p->KW;
    for (int64_t i = 0; i < KK; i++) wt[i] = ld(w, p->f16, g * KK + i);
    int64_t xoff = (n * p->C + g) * p->H * p->W;
    int64_t oh1 = (r + 1) * p->rows < p->OH ? (r + 1) * p->rows : p->OH;
    for (int64_t oh = r * p->rows; oh < oh1; oh++) {
        int64_t h0 = oh * p->sh - p->pt, kh0, kh1;
        tap_range(h0, p->KH, p->dh, p->H, &kh0, &kh1);
        for (int64_t ow = 0; ow < p->OW; ow++) {
            int64_t w0 = ow * p->sw - p->pl, kw0, kw1;
            tap_range(w0, p->KW, p->dw, p->W, &kw0, &kw1);
            float s = 0.0f;
            for (int64_t kh = kh0; kh < kh1; kh++) {
                int64_t base = xoff + (h0 + kh * p->dh) * p->W + w0;
                const float *wr = wt + kh * p->KW;
                if (p->f16) {
                    for (int64_t kw = kw0; kw < kw1; kw++)
                        s += ld(x, 1, base + kw * p->dw) * wr[kw];
                } else {
                    const float *xf = (const float *)x + base;
                    for (int64_t kw = kw0; kw < kw1; kw++) s += xf[kw * p->dw] * wr[kw];
                }
            }
            row[ow] = s;
        }
        store_row(p, y, ((n * p->M + g) * p->OH + oh) * p->OW, row, p->OW, bias, g);
    }
}

ipu_status ipu__k_conv2d(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    const ipu__conv_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]], *w = f->ptr[ins->in[1]];
    const void *bias = p->has_bias ? f->ptr[ins->in[2]] : NULL;
    void *y = f->ptr[ins->out[0]];
    for (size_t it = b; it < e; it++) {
        uint64_t rest = it;
        int64_t r = (int64_t)(rest % (uint64_t)p->rblocks);
        rest /= (uint64_t)p->rblocks;
        int64_t mb = (int64_t)(rest % (uint64_t)p->mblocks);
        rest /= (uint64_t)p->mblocks;
        int64_t g = (int64_t)(rest % (uint64_t)p->G), n = (int64_t)(rest / (uint64_t)p->G);
        if (p->direct)
            run_direct(p, x, w, bias, y, n, g, r, scratch);
        else
            run_gemm(p, x, w, bias, y, n, g, mb, r, scratch);
    }
    return IPU_OK;
}
