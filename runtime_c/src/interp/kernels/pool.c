/* POOL2D (docs/bytecode.md): max / average pooling over 2-D windows, NCHW, float32/float16
 * (computed in float32). Direct loop; work item = (plane, block of output rows). */
#include <math.h>

#include "kernels.h"

static inline float ld(const void *base, int f16, int64_t i) {
    return f16 ? ipu__f16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

ipu_status ipu__k_pool2d(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    (void)scratch;
    const ipu__pool_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
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
