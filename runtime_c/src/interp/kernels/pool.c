/* POOL2D (docs/bytecode.md): max / average pooling over 2-D windows, NCHW, float32/float16
 * (computed in float32); work item = (plane, block of output rows). Rows go tap by tap over a
 * row of accumulators in scratch (vectorises); each output still takes its taps in (kh, kw)
 * order, as the per-pixel fallback (rows too wide for the scratch) does. */
#include <math.h>
#include <string.h>

#include "kernels.h"

static inline float ld(const void *base, int f16, int64_t i) {
    return f16 ? ipu__f16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

static inline float max_nan(float acc, float v) {
    return (v > acc || isnan(v)) && !isnan(acc) ? v : acc;
}

/* Output row oh of plane `plane` into acc[OW]; cw[ow] = taps of column ow inside the padded
 * (count_include_pad) or valid range, for averages. */
static void pool_row(const ipu__pool_plan *p, const void *x, int64_t xoff, int64_t oh,
                     float *acc, const float *cw) {
    for (int64_t ow = 0; ow < p->OW; ow++) acc[ow] = p->kind == 0 ? -INFINITY : 0.0f;
    int64_t nh = 0;
    for (int64_t kh = 0; kh < p->KH; kh++) {
        int64_t ih = oh * p->sh - p->pt + kh * p->dh;
        if (p->cip ? ih >= -p->pt && ih < p->H + p->pb : ih >= 0 && ih < p->H) nh++;
        if (ih < 0 || ih >= p->H) continue;
        int64_t base = xoff + ih * p->W, sw = p->sw;
        for (int64_t kw = 0; kw < p->KW; kw++) {
            int64_t iw0 = kw * p->dw - p->pl; /* input column of output ow: ow*sw + iw0 */
            int64_t lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
            int64_t hi = iw0 >= p->W ? 0 : (p->W - iw0 + sw - 1) / sw;
            if (hi > p->OW) hi = p->OW;
            if (lo >= hi) continue;
            float *a = acc + lo;
            int64_t n = hi - lo, s0 = base + lo * sw + iw0;
            if (p->f16) {
                for (int64_t t = 0; t < n; t++) {
                    float v = ld(x, 1, s0 + t * sw);
                    a[t] = p->kind == 0 ? max_nan(a[t], v) : a[t] + v;
                }
            } else {
                const float *xr = (const float *)x + s0;
                if (p->kind == 0)
                    for (int64_t t = 0; t < n; t++) a[t] = max_nan(a[t], xr[t * sw]);
                else
                    for (int64_t t = 0; t < n; t++) a[t] += xr[t * sw];
            }
        }
    }
    if (p->kind == 1)
        for (int64_t ow = 0; ow < p->OW; ow++) acc[ow] /= (float)nh * cw[ow];
}

ipu_status ipu__k_pool2d(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    const ipu__pool_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
    if ((uint64_t)p->OW * 2 * sizeof(float) <= IPU__SCRATCH_BYTES) {
        float *acc = scratch, *cw = acc + p->OW;
        for (int64_t ow = 0; ow < p->OW; ow++) {
            int64_t nw = 0;
            for (int64_t kw = 0; kw < p->KW; kw++) {
                int64_t iw = ow * p->sw - p->pl + kw * p->dw;
                if (p->cip ? iw >= -p->pl && iw < p->W + p->pr : iw >= 0 && iw < p->W) nw++;
            }
            cw[ow] = (float)nw;
        }
        for (size_t it = b; it < e; it++) {
            int64_t plane = (int64_t)(it / (uint64_t)p->rblocks);
            int64_t r = (int64_t)(it % (uint64_t)p->rblocks);
            int64_t oh1 = (r + 1) * p->rows < p->OH ? (r + 1) * p->rows : p->OH;
            for (int64_t oh = r * p->rows; oh < oh1; oh++) {
                pool_row(p, x, plane * p->H * p->W, oh, acc, cw);
                int64_t o = (plane * p->OH + oh) * p->OW;
                if (p->f16)
                    ipu__cvt_f32_to_f16(acc, (uint16_t *)y + o, (size_t)p->OW);
                else
                    memcpy((float *)y + o, acc, sizeof(float) * (size_t)p->OW);
            }
        }
        return IPU_OK;
    }
    for (size_t it = b; it < e; it++) {
        int64_t plane = (int64_t)(it / (uint64_t)p->rblocks);
        int64_t r = (int64_t)(it % (uint64_t)p->rblocks);
        int64_t oh1 = (r + 1) * p->rows < p->OH ? (r + 1) * p->rows : p->OH;
        int64_t xoff = plane * p->H * p->W;
        for (int64_t oh = r * p->rows; oh < oh1; oh++) {
            for (int64_t ow = 0; ow < p->OW; ow++) {
                float acc = p->kind == 0 ? -INFINITY : 0.0f;
                int64_t nh = 0, nw = 0, vh = 0, vw = 0; /* taps inside padded / valid range */
                for (int64_t kh = 0; kh < p->KH; kh++) {
                    int64_t ih = oh * p->sh - p->pt + kh * p->dh;
                    if (ih >= -p->pt && ih < p->H + p->pb) nh++;
                    if (ih >= 0 && ih < p->H) vh++;
                }
                for (int64_t kw = 0; kw < p->KW; kw++) {
                    int64_t iw = ow * p->sw - p->pl + kw * p->dw;
                    if (iw >= -p->pl && iw < p->W + p->pr) nw++;
                    if (iw >= 0 && iw < p->W) vw++;
                }
                for (int64_t kh = 0; kh < p->KH; kh++) {
                    int64_t ih = oh * p->sh - p->pt + kh * p->dh;
                    if (ih < 0 || ih >= p->H) continue;
                    for (int64_t kw = 0; kw < p->KW; kw++) {
                        int64_t iw = ow * p->sw - p->pl + kw * p->dw;
                        if (iw < 0 || iw >= p->W) continue;
                        float v = ld(x, p->f16, xoff + ih * p->W + iw);
                        if (p->kind == 0)
                            acc = (v > acc || isnan(v)) && !isnan(acc) ? v : acc;
                        else
                            acc += v;
                    }
                }
                if (p->kind == 1) acc /= (float)(p->cip ? nh * nw : vh * vw);
                int64_t o = (plane * p->OH + oh) * p->OW + ow;
                if (p->f16)
                    ((uint16_t *)y)[o] = ipu__f32_to_f16(acc);
                else
                    ((float *)y)[o] = acc;
            }
        }
    }
    return IPU_OK;
}
