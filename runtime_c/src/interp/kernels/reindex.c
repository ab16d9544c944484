/* REINDEX (separable gather with a pad value, all dtypes by element size) and INTERP (separable
 * weighted taps, float32/float16 computed in float32), docs/bytecode.md. The verifier checked
 * every table entry and copied the tables into the plan; a work item is one row of y's last
 * dim, whose outer indices select one entry (REINDEX) or tap set (INTERP) per outer dim. */
#include <string.h>

#include "reindex.h"

/* n copies of the es-byte element at v. */
static void fill(char *dst, const uint8_t *v, int64_t n, uint32_t es) {
    switch (es) {
        case 1: memset(dst, v[0], (size_t)n); break;
        case 2: {
            uint16_t a;
            memcpy(&a, v, 2);
            for (int64_t i = 0; i < n; i++) memcpy(dst + 2 * i, &a, 2);
            break;
        }
        case 4: {
            uint32_t a;
            memcpy(&a, v, 4);
            for (int64_t i = 0; i < n; i++) memcpy(dst + 4 * i, &a, 4);
            break;
        }
        default: {
            uint64_t a;
            memcpy(&a, v, 8);
            for (int64_t i = 0; i < n; i++) memcpy(dst + 8 * i, &a, 8);
            break;
        }
    }
}

/* Copy of one element (fixed sizes let the compiler inline the common len-1 segments). */
static inline void copy_run(char *dst, const char *src, int64_t n, uint32_t es) {
    if (n == 1) {
        switch (es) {
            case 1: *dst = *src; return;
            case 2: memcpy(dst, src, 2); return;
            case 4: memcpy(dst, src, 4); return;
            default: memcpy(dst, src, 8); return;
        }
    }
    memcpy(dst, src, (size_t)n * es);
}

ipu_status ipu__k_reindex(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                          void *scratch) {
    (void)scratch;
    const ipu__reindex_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    char *y = f->ptr[ins->out[0]];
    uint32_t nd = p->ndim, es = p->esize;
    int64_t last = p->dims[nd - 1];
    for (size_t r = b; r < e; r++) {
        uint64_t rest = r;
        int64_t base = 0;
        bool padrow = false;
        for (uint32_t d = nd - 1; d-- > 0;) {
            int64_t i = (int64_t)(rest % (uint64_t)p->dims[d]);
            rest /= (uint64_t)p->dims[d];
            int64_t o = p->off[p->start[d] + i];
            if (o < 0)
                padrow = true;
            else
                base += o;
        }
        char *yr = y + (uint64_t)r * (uint64_t)last * es;
        if (padrow) {
            fill(yr, p->pad, last, es);
            continue;
        }
        for (int64_t g = 0; g < p->nseg; g++) {
            const int64_t *s = p->seg + 3 * g;
            if (s[2] < 0)
                fill(yr + s[0] * es, p->pad, s[1], es);
            else
                copy_run(yr + s[0] * es, x + base + s[2], s[1], es);
        }
    }
    return IPU_OK;
}

ipu_status ipu__k_interp(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    const ipu__interp_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
    uint32_t nd = p->ndim, L = nd - 1;
    int64_t last = p->dims[L], lt = p->taps[L];
    int64_t *coff = scratch; /* [combos] */
    float *cw = (float *)(coff + p->combos);
    const int64_t *loff = p->off + p->start[L];
    const float *lw = p->w + p->start[L];
    const uint8_t *lext = p->ext + p->ext_start[L];
    for (size_t r = b; r < e; r++) {
        uint64_t rest = r;
        int64_t n = 1;
        bool ext = false;
        coff[0] = 0;
        cw[0] = 1.0f;
        for (uint32_t d = L; d-- > 0;) {
            int64_t i = (int64_t)(rest % (uint64_t)p->dims[d]);
            rest /= (uint64_t)p->dims[d];
            if (p->ext[p->ext_start[d] + i]) {
                ext = true;
                break;
            }
            const int64_t *o = p->off + p->start[d] + i * p->taps[d];
            const float *w = p->w + p->start[d] + i * p->taps[d];
            /* combos x taps, in place: tap t of combo c goes to t * n + c (t = 0 last) */
            for (int64_t t = p->taps[d]; t-- > 0;)
                for (int64_t c = 0; c < n; c++) {
                    coff[t * n + c] = coff[c] + o[t];
                    cw[t * n + c] = cw[c] * w[t];
                }
            n *= p->taps[d];
        }
        uint64_t y0 = (uint64_t)r * (uint64_t)last;
        for (int64_t j = 0; j < last; j++) {
            float acc = p->extrap;
            if (!ext && !lext[j]) {
                const int64_t *o = loff + j * lt;
                const float *w = lw + j * lt;
                acc = 0.0f;
                for (int64_t c = 0; c < n; c++) {
                    float s = 0.0f;
                    for (int64_t t = 0; t < lt; t++)
                        s += w[t] * ipu__ld_f32(x, p->f16, coff[c] + o[t]);
                    acc += cw[c] * s;
                }
            }
            if (p->f16)
                ((uint16_t *)y)[y0 + (uint64_t)j] = ipu__f32_to_f16(acc);
            else
                ((float *)y)[y0 + (uint64_t)j] = acc;
        }
    }
    return IPU_OK;
}
