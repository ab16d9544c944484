/* CONV2D float32: helpers shared by conv.c and conv_window.c (the window path). */
#ifndef IPU_CONV_SHARED_H
#define IPU_CONV_SHARED_H
#include <string.h>

#include "conv.h"

/* The epilogue of one row of n sums (src) into dst (may be src); conv_epilogue.c's. */
static inline void ipu__conv_epilogue_to(const ipu__conv_plan *p, float *dst, const float *src,
                                         int64_t n, const void *bias, int64_t co, const void *res,
                                         int64_t off) {
    ipu__conv_epilogue_rows(p, dst, n, src, n, 1, n, bias, co, res, off);
}
/* The fused epilogue of a float32 tile whose first row is channel co at y's offset off (rows
 * a plane apart). */
static inline ipu__tile_ep ipu__conv_tile_ep_at(const ipu__conv_plan *p, const void *bias,
                                                const void *res, int64_t co, int64_t off) {
    ipu__tile_ep ep = {bias ? (const float *)bias + co : NULL,
                       res ? (const float *)res + off : NULL,
                       p->OH * p->OW,
                       p->act == IPU__ACT_RELU,
                       NULL,
                       0,
                       NULL};
    return ep;
}
/* The fused epilogue of a tile whose first row is channel co at y's offset off, stored into y:
 * float32 as ipu__conv_tile_ep_at; float16 stored in half (ipu__ukr.half), the biases of the
 * tile's rows read from bco (channel co's, converted to float32; NULL: no bias). */
static inline ipu__tile_ep ipu__conv_tile_ep_y(const ipu__conv_plan *p, const void *bias,
                                               const float *bco, const void *res, int64_t co,
                                               int64_t off, void *y) {
    if (!p->f16) return ipu__conv_tile_ep_at(p, bias, res, co, off);
    ipu__tile_ep ep = {bias ? bco : NULL,
                       NULL,
                       p->OH * p->OW,
                       p->act == IPU__ACT_RELU,
                       (uint16_t *)y + off,
                       p->OH * p->OW,
                       res ? (const uint16_t *)res + off : NULL};
    return ep;
}
/* B panels of kc patch rows x np extended pixels: Bp[j / nr][kk][j % nr] =
 * src[rowoff[kk] - base + j] (rowoff NULL: src[kk * base + j]), zero past np. A full panel
 * row is nr contiguous floats: one memcpy. */
static inline void ipu__conv_pack_rows(const float *src, const int64_t *rowoff, int64_t base,
                                       int64_t kc, int64_t np, int nr, float *bp) {
    int64_t full = np / nr * nr, pan = kc * nr;
    for (int64_t kk = 0; kk < kc; kk++) { /* row by row: reads stream along the input rows */
        const float *s = src + (rowoff ? rowoff[kk] - base : kk * base);
        float *d = bp + kk * nr;
        int64_t jr = 0;
#define IPU__PACK_FULL(NR) \
    for (; jr < full; jr += (NR), d += pan) memcpy(d, s + jr, sizeof(float) * (NR));
        if (nr == 16) {
            IPU__PACK_FULL(16)
        } else if (nr == 32) {
            IPU__PACK_FULL(32)
        } else if (nr == 8) {
            IPU__PACK_FULL(8)
        }
#undef IPU__PACK_FULL
        for (; jr < np; jr += nr, d += pan) { /* the last, partial panel (any nr) */
            int64_t wd = np - jr < nr ? np - jr : nr;
            memcpy(d, s + jr, sizeof(float) * (size_t)wd);
            memset(d + wd, 0, sizeof(float) * (size_t)(nr - wd));
        }
    }
}
/* conv_window.c: xq <- the zero-padded input rows output rows [oh0, oh0 + nrows) read from
 * channels [ci0, ci1) of the group at xoff, as stride-phase planes (the comment there); x
 * float32 (rb NULL) or float16 (its rows converted into rb, W floats). */
void ipu__conv_copy_window(const ipu__conv_plan *p, const void *x, int64_t xoff, int64_t oh0,
                           int64_t nrows, int64_t ci0, int64_t ci1, float *xq, float *rb);
/* conv_dw.c: one work item of a depthwise plan (`direct`) on its window plan (Wq > 0): row
 * block r of channel g of image n, float32 or float16. False if the block does not fit the
 * scratch (run_direct in conv.c then computes it). */
bool ipu__conv_run_dw(const ipu__conv_plan *p, const void *x, const void *w, const void *bias,
                      const void *res, void *y, int64_t n, int64_t g, int64_t r, void *scratch);
/* conv_window.c: one work item of the window path (channel item mb of group g, row block r of
 * image n), float32 or float16 (p->f16); apre: the weights packed at load, or NULL. */
void ipu__conv_run_window(const ipu__conv_plan *p, const void *x, const void *w, const float *apre,
                          const void *bias, const void *res, void *y, int64_t n, int64_t g,
                          int64_t mb, int64_t r, void *scratch);

#endif
