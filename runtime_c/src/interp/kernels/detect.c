/* Ops with a data-dependent result size (NONZERO, NMS) and ROI_ALIGN, docs/bytecode.md. A
 * data-dependent result is written into an output of static capacity, padded with zeros past
 * its run-time count, and the count (clamped to the capacity) goes to a second output, an
 * int64[1] tensor. An optional "valid length" input (int64[1]) bounds how many leading rows
 * of a padded input hold data; it is clamped to the input's extent before use. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../verify_internal.h"

typedef struct ipu__nonzero_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    uint32_t ndim, has_len;
    int64_t dims[IPU_MAX_DIMS];
    int64_t cap, row; /* output columns; elements per row of x's dim 0 */
} ipu__nonzero_plan;

typedef struct ipu__nms_plan {
    ipu__plan hdr;
    int64_t batches, classes, n, cap;
    int center, has_thr, has_len;
} ipu__nms_plan;

typedef struct ipu__roi_plan {
    ipu__plan hdr;
    int64_t n, c, h, w, k, oh, ow;
    int max_mode, half_pixel, ratio;
    float scale;
} ipu__roi_plan;

/* A valid-length input, clamped to [0, hi]. */
static int64_t valid_len(const ipu__frame *f, uint32_t t, int64_t hi) {
    int64_t n;
    memcpy(&n, f->ptr[t], sizeof n);
    return n < 0 ? 0 : n > hi ? hi : n;
}

static bool is_i64_scalar(const ipu__tensor *t) {
    return t->desc.dtype == IPU_DTYPE_INT64 && t->numel == 1;
}

static bool is_f32_scalar(const ipu__tensor *t) {
    return t->desc.dtype == IPU_DTYPE_FLOAT32 && t->numel == 1;
}

/* ---------------------------------------------------------------- NONZERO */

static bool elem_nonzero(const uint8_t *p, ipu_dtype dt, size_t es) {
    if (dt == IPU_DTYPE_FLOAT32) {
        float v;
        memcpy(&v, p, sizeof v);
        return v != 0.0f;
    }
    if (dt == IPU_DTYPE_FLOAT16) {
        uint16_t v;
        memcpy(&v, p, sizeof v);
        return (v & 0x7fffu) != 0;
    }
    for (size_t i = 0; i < es; i++)
        if (p[i]) return true;
    return false;
}

ipu_status ipu__k_nonzero(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                          void *scratch) {
    (void)b, (void)e, (void)scratch;
    const ipu__nonzero_plan *p = ins->plan;
    const uint8_t *x = f->ptr[ins->in[0]];
    int64_t *idx = f->ptr[ins->out[0]], *count = f->ptr[ins->out[1]];
    size_t es = ipu_dtype_size(p->dtype);
    int64_t numel = p->cap;
    if (p->has_len) numel = valid_len(f, ins->in[1], p->dims[0]) * p->row;
    memset(idx, 0, sizeof(int64_t) * (size_t)(p->cap * (int64_t)p->ndim));
    int64_t n = 0, coord[IPU_MAX_DIMS] = {0};
    const int64_t mask = IPU__STOP_CHUNK - 1;
    for (int64_t i = 0; i < numel; i++) {
        ipu_status st = ipu__stop_at(f, i, mask);
        if (st != IPU_OK) return st;
        if (elem_nonzero(x + (size_t)i * es, p->dtype, es)) {
            for (uint32_t d = 0; d < p->ndim; d++) idx[d * p->cap + n] = coord[d];
            n++;
        }
        for (uint32_t d = p->ndim; d-- > 0;) { /* row-major increment */
            if (++coord[d] < p->dims[d]) break;
            coord[d] = 0;
        }
    }
    *count = n;
    return IPU_OK;
}

/* NONZERO: x (any dtype, rank >= 1)[, valid rows of x's dim 0] -> indices int64 [rank, numel],
 * count int64 [1]. */
ipu_status ipu__verify_nonzero(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                               ipu__instr *ins) {
    char s1[160], s2[160];
    const ipu__tensor *x = in[0], *cnt = &v->e->tensors[ins->out[1]];
    uint32_t r = x->desc.ndim;
    if (r < 1) return bad(v, "x must have rank >= 1");
    if (ins->n_in == 2 && !is_i64_scalar(in[1]))
        return bad(v, "input 1 (valid length) must be one int64");
    if (y->desc.dtype != IPU_DTYPE_INT64 || y->desc.ndim != 2 || y->desc.dims[0] != (int64_t)r ||
        y->desc.dims[1] != (int64_t)x->numel)
        return bad(v, "indices%s must be int64 [rank, numel] of x%s", shape_str(s1, sizeof s1, y),
                   shape_str(s2, sizeof s2, x));
    if (!is_i64_scalar(cnt)) return bad(v, "output 1 (count) must be one int64");
    ipu__nonzero_plan *p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    p->dtype = x->desc.dtype;
    p->ndim = r;
    p->has_len = ins->n_in == 2;
    memcpy(p->dims, x->desc.dims, sizeof(int64_t) * r);
    p->cap = (int64_t)x->numel;
    p->row = p->cap / x->desc.dims[0];
    p->hdr.work = 1;
    p->hdr.fn = ipu__select_kernel(ins->op, x->desc.dtype);
    ins->plan = p;
    return IPU_OK;
}

/* ---------------------------------------------------------------- NMS */

typedef struct nms_cand {
    float score;
    uint32_t index;
} nms_cand;

/* By decreasing score, ties by increasing index. */
static int cand_cmp(const void *a, const void *b) {
    const nms_cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The box's corners: x1 y1 x2 y2 (y1 x1 y2 x2 when !center, any diagonal), or centre and size. */
static void corners(const float *b, int center, float *lo0, float *lo1, float *hi0, float *hi1) {
    if (center) {
        *lo0 = b[0] - b[2] / 2.0f;
        *hi0 = b[0] + b[2] / 2.0f;
        *lo1 = b[1] - b[3] / 2.0f;
        *hi1 = b[1] + b[3] / 2.0f;
    } else {
        *lo0 = fminf(b[0], b[2]);
        *hi0 = fmaxf(b[0], b[2]);
        *lo1 = fminf(b[1], b[3]);
        *hi1 = fmaxf(b[1], b[3]);
    }
}

/* IoU(a, b) > thr, as ONNX Runtime decides it (no overlap or an empty box: false). */
static bool suppresses(const float *a, const float *b, int center, float thr) {
    float a0, a1, a2, a3, b0, b1, b2, b3;
    corners(a, center, &a0, &a1, &a2, &a3);
    corners(b, center, &b0, &b1, &b2, &b3);
    float i0 = fmaxf(a0, b0), i1 = fmaxf(a1, b1), i2 = fminf(a2, b2), i3 = fminf(a3, b3);
    if (i2 <= i0 || i3 <= i1) return false;
    float inter = (i2 - i0) * (i3 - i1);
    float area_a = (a2 - a0) * (a3 - a1), area_b = (b2 - b0) * (b3 - b1);
    float uni = area_a + area_b - inter;
    if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return false;
    return inter / uni > thr;
}

ipu_status ipu__k_nms(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                      void *scratch) {
    (void)b, (void)e;
    const ipu__nms_plan *p = ins->plan;
    const float *boxes = f->ptr[ins->in[0]], *scores = f->ptr[ins->in[1]];
    int64_t max_out, n = p->n;
    memcpy(&max_out, f->ptr[ins->in[2]], sizeof max_out);
    float thr, score_thr = 0.0f;
    memcpy(&thr, f->ptr[ins->in[3]], sizeof thr);
    if (p->has_thr) memcpy(&score_thr, f->ptr[ins->in[4]], sizeof score_thr);
    if (p->has_len) n = valid_len(f, ins->in[5], p->n);
    int64_t *sel = f->ptr[ins->out[0]], *count = f->ptr[ins->out[1]];
    memset(sel, 0, sizeof(int64_t) * 3 * (size_t)p->cap);
    nms_cand *cand = scratch;
    uint32_t *kept = (uint32_t *)(cand + p->n);
    int64_t total = 0;
    for (int64_t bi = 0; bi < p->batches; bi++) {
        const float *bb = boxes + bi * p->n * 4;
        for (int64_t ci = 0; ci < p->classes && max_out > 0; ci++) {
            ipu_status st = ipu__stop_check(f);
            if (st != IPU_OK) return st;
            const float *sc = scores + (bi * p->classes + ci) * p->n;
            int64_t m = 0, nk = 0;
            for (int64_t i = 0; i < n; i++)
                if (sc[i] == sc[i] && (!p->has_thr || sc[i] > score_thr))
                    cand[m++] = (nms_cand){sc[i], (uint32_t)i};
            qsort(cand, (size_t)m, sizeof *cand, cand_cmp);
            for (int64_t j = 0; j < m && nk < max_out; j++) {
                const float *box = bb + (int64_t)cand[j].index * 4;
                bool keep = true;
                for (int64_t q = 0; q < nk && keep; q++)
                    keep = !suppresses(bb + (int64_t)kept[q] * 4, box, p->center, thr);
                if (!keep) continue;
                kept[nk++] = cand[j].index;
                if (total < p->cap) {
                    sel[3 * total] = bi;
                    sel[3 * total + 1] = ci;
                    sel[3 * total + 2] = cand[j].index;
                    total++;
                }
            }
        }
    }
    *count = total;
    return IPU_OK;
}

/* NMS: attrs center_point_box, has_score_threshold; boxes float32 [B, N, 4], scores float32
 * [B, C, N], max_output_boxes_per_class int64 [1], iou_threshold float32 [1], score_threshold
 * float32 [1][, valid boxes int64 [1]] -> selected int64 [cap, 3], count int64 [1]. */
ipu_status ipu__verify_nms(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                           ipu__instr *ins) {
    char s1[160], s2[160];
    const ipu__tensor *bx = in[0], *sc = in[1], *cnt = &v->e->tensors[ins->out[1]];
    const int64_t *bd = bx->desc.dims, *sd = sc->desc.dims;
    if (bx->desc.dtype != IPU_DTYPE_FLOAT32 || sc->desc.dtype != IPU_DTYPE_FLOAT32)
        return bad(v, "boxes and scores must be float32");
    if (bx->desc.ndim != 3 || bd[2] != 4 || sc->desc.ndim != 3 || sd[0] != bd[0] || sd[2] != bd[1])
        return bad(v, "boxes%s and scores%s must be [B, N, 4] and [B, C, N]",
                   shape_str(s1, sizeof s1, bx), shape_str(s2, sizeof s2, sc));
    if (!is_i64_scalar(in[2]) || !is_f32_scalar(in[3]) || !is_f32_scalar(in[4]))
        return bad(v, "inputs 2..4 must be one int64, one float32, one float32");
    if (ins->n_in == 6 && !is_i64_scalar(in[5]))
        return bad(v, "input 5 (valid boxes) must be one int64");
    if (y->desc.dtype != IPU_DTYPE_INT64 || y->desc.ndim != 2 || y->desc.dims[1] != 3)
        return bad(v, "selected%s must be int64 [cap, 3]", shape_str(s1, sizeof s1, y));
    if (!is_i64_scalar(cnt)) return bad(v, "output 1 (count) must be one int64");
    for (int a = 0; a < 2; a++)
        if (ins->attr[a] != 0 && ins->attr[a] != 1) return bad(v, "attr %d must be 0 or 1", a);
    if ((uint64_t)bd[1] > IPU__SCRATCH_BYTES / (sizeof(nms_cand) + sizeof(uint32_t)))
        return bad(v, "%lld boxes per batch (at most %zu)", (long long)bd[1],
                   IPU__SCRATCH_BYTES / (sizeof(nms_cand) + sizeof(uint32_t)));
    ipu__nms_plan *p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    p->batches = bd[0];
    p->n = bd[1];
    p->classes = sd[1];
    p->cap = y->desc.dims[0];
    p->center = (int)ins->attr[0];
    p->has_thr = (int)ins->attr[1];
    p->has_len = ins->n_in == 6;
    p->hdr.work = 1;
    p->hdr.fn = ipu__select_kernel(ins->op, IPU_DTYPE_FLOAT32);
    ins->plan = p;
    return IPU_OK;
}

/* ---------------------------------------------------------------- ROI_ALIGN */

/* One bilinear sample of a plane [h, w] at (yy, xx), as ONNX Runtime computes it: four taps
 * (offsets into the plane) and their weights; valid 0 where the sample lies outside (it is 0).
 * The same for every channel of a region, so a region's samples are found once. */
typedef struct roi_tap {
    int64_t o[4];
    float wt[4];
    int valid;
} roi_tap;

static roi_tap roi_tap_at(int64_t h, int64_t w, float yy, float xx) {
    roi_tap t = {{0, 0, 0, 0}, {0, 0, 0, 0}, 0};
    if (yy < -1.0f || yy > (float)h || xx < -1.0f || xx > (float)w) return t;
    if (yy <= 0) yy = 0;
    if (xx <= 0) xx = 0;
    int64_t yl = (int64_t)yy, xl = (int64_t)xx, yh, xh;
    if (yl >= h - 1) {
        yh = yl = h - 1;
        yy = (float)yl;
    } else {
        yh = yl + 1;
    }
    if (xl >= w - 1) {
        xh = xl = w - 1;
        xx = (float)xl;
    } else {
        xh = xl + 1;
    }
    float ly = yy - (float)yl, lx = xx - (float)xl, hy = 1.0f - ly, hx = 1.0f - lx;
    t = (roi_tap){{yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh},
                  {hy * hx, hy * lx, ly * hx, ly * lx},
                  1};
    return t;
}

/* The sample of plane x at tap t: the four weighted taps, then their sum (avg) or their
 * largest (max). */
static inline float roi_sample(const float *x, const roi_tap *t, int max_mode) {
    if (!t->valid) return 0.0f;
    float t1 = t->wt[0] * x[t->o[0]], t2 = t->wt[1] * x[t->o[1]];
    float t3 = t->wt[2] * x[t->o[2]], t4 = t->wt[3] * x[t->o[3]];
    if (max_mode) return fmaxf(fmaxf(fmaxf(t1, t2), t3), t4);
    return t1 + t2 + t3 + t4;
}

/* sampling_ratio 0: ceil(bin size) samples per bin, 0 for a NaN or negative size, at most
 * ROI_MAX_GRID. */
#define ROI_MAX_GRID 1024
static int64_t adaptive_grid(float bin) {
    if (!(bin > 0.0f)) return 0;
    return bin >= (float)ROI_MAX_GRID ? ROI_MAX_GRID : (int64_t)ceilf(bin);
}

/* Region k's bins: output (ph, pw) averages (or takes the largest of) the gh x gw samples at
 * y0 + ph * bh + (iy + 0.5) * bh / gh, likewise x. */
typedef struct roi_bins {
    float x0, y0, bh, bw, cnt;
    int64_t gh, gw;
} roi_bins;

static roi_bins roi_bins_of(const ipu__roi_plan *p, const float *r) {
    float off = p->half_pixel ? 0.5f : 0.0f;
    float x0 = r[0] * p->scale - off, y0 = r[1] * p->scale - off;
    float rw = r[2] * p->scale - off - x0, rh = r[3] * p->scale - off - y0;
    if (!p->half_pixel) {
        rw = fmaxf(rw, 1.0f);
        rh = fmaxf(rh, 1.0f);
    }
    roi_bins g = {x0, y0, rh / (float)p->oh, rw / (float)p->ow, 1.0f, 0, 0};
    g.gh = p->ratio > 0 ? p->ratio : adaptive_grid(rh / (float)p->oh);
    g.gw = p->ratio > 0 ? p->ratio : adaptive_grid(rw / (float)p->ow);
    g.cnt = (float)(g.gh * g.gw > 1 ? g.gh * g.gw : 1);
    return g;
}

static roi_tap roi_tap_of(const ipu__roi_plan *p, const roi_bins *g, int64_t ph, int64_t pw,
                          int64_t iy, int64_t ix) {
    float yy = g->y0 + (float)ph * g->bh + ((float)iy + 0.5f) * g->bh / (float)g->gh;
    float xx = g->x0 + (float)pw * g->bw + ((float)ix + 0.5f) * g->bw / (float)g->gw;
    return roi_tap_at(p->h, p->w, yy, xx);
}

/* One channel plane of region k into out [oh, ow]; taps: the region's samples in (ph, pw,
 * iy, ix) order, or NULL to find each as it is read (a region with more samples than the
 * scratch holds). */
static void roi_channel(const ipu__roi_plan *p, const roi_bins *g, const roi_tap *taps,
                        const float *plane, float *out) {
    for (int64_t ph = 0, i = 0; ph < p->oh; ph++)
        for (int64_t pw = 0; pw < p->ow; pw++) {
            float acc = 0.0f;
            for (int64_t iy = 0; iy < g->gh; iy++)
                for (int64_t ix = 0; ix < g->gw; ix++, i++) {
                    roi_tap t = taps ? taps[i] : roi_tap_of(p, g, ph, pw, iy, ix);
                    float s = roi_sample(plane, &t, p->max_mode);
                    if (p->max_mode)
                        acc = iy == 0 && ix == 0 ? s : fmaxf(acc, s);
                    else
                        acc += s;
                }
            out[ph * p->ow + pw] = p->max_mode ? acc : acc / g->cnt;
        }
}

/* Work items (region k, channel c); a run of one region's channels finds its samples once,
 * into the scratch. */
ipu_status ipu__k_roi_align(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                            void *scratch) {
    const ipu__roi_plan *p = ins->plan;
    const float *x = f->ptr[ins->in[0]], *rois = f->ptr[ins->in[1]];
    const int64_t *bidx = f->ptr[ins->in[2]];
    float *y = f->ptr[ins->out[0]];
    roi_tap *taps = scratch;
    int64_t cached = -1; /* the region whose samples taps holds */
    roi_bins g = {0};
    for (size_t it = b; it < e; it++) {
        int64_t k = (int64_t)it / p->c, c = (int64_t)it % p->c, n = bidx[k];
        if (n < 0 || n >= p->n)
            return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                             "batch index %lld of region %lld is out of range [0, %lld)",
                             (long long)n, (long long)k, (long long)p->n);
        if (k != cached) {
            g = roi_bins_of(p, rois + k * 4);
            uint64_t per_bin = (uint64_t)g.gh * (uint64_t)g.gw;
            bool fits = per_bin * (uint64_t)(p->oh * p->ow) <= IPU__SCRATCH_BYTES / sizeof *taps;
            cached = fits ? k : -1;
            for (int64_t ph = 0, i = 0; fits && ph < p->oh; ph++)
                for (int64_t pw = 0; pw < p->ow; pw++)
                    for (int64_t iy = 0; iy < g.gh; iy++)
                        for (int64_t ix = 0; ix < g.gw; ix++)
                            taps[i++] = roi_tap_of(p, &g, ph, pw, iy, ix);
        }
        const float *plane = x + (n * p->c + c) * p->h * p->w;
        roi_channel(p, &g, k == cached ? taps : NULL, plane, y + (int64_t)it * p->oh * p->ow);
    }
    return IPU_OK;
}

/* ROI_ALIGN: attrs mode (0 avg, 1 max), half_pixel (0/1), sampling_ratio (>= 0), spatial_scale
 * (float64 bits); x float32 [N, C, H, W], rois float32 [K, 4], batch_indices int64 [K] ->
 * y float32 [K, C, oh, ow]. */
ipu_status ipu__verify_roi_align(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                 ipu__instr *ins) {
    char s1[160], s2[160], s3[160];
    const ipu__tensor *x = in[0], *rois = in[1], *bi = in[2];
    const int64_t *xd = x->desc.dims, *yd = y->desc.dims, *a = ins->attr;
    if (x->desc.dtype != IPU_DTYPE_FLOAT32 || rois->desc.dtype != IPU_DTYPE_FLOAT32 ||
        bi->desc.dtype != IPU_DTYPE_INT64)
        return bad(v, "x and rois must be float32, batch indices int64");
    if (x->desc.ndim != 4 || rois->desc.ndim != 2 || rois->desc.dims[1] != 4 ||
        bi->desc.ndim != 1 || bi->desc.dims[0] != rois->desc.dims[0] || y->desc.ndim != 4 ||
        yd[0] != rois->desc.dims[0] || yd[1] != xd[1])
        return bad(v, "x%s, rois%s and batch indices%s do not give y%s",
                   shape_str(s1, sizeof s1, x), shape_str(s2, sizeof s2, rois),
                   shape_str(s3, sizeof s3, bi), shape_str(s1, sizeof s1, y));
    if ((a[0] != 0 && a[0] != 1) || (a[1] != 0 && a[1] != 1) || a[2] < 0 || a[2] > ROI_MAX_GRID)
        return bad(v, "mode and half_pixel must be 0 or 1, sampling_ratio in [0, 1024]");
    ipu__roi_plan *p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    p->n = xd[0];
    p->c = xd[1];
    p->h = xd[2];
    p->w = xd[3];
    p->k = yd[0];
    p->oh = yd[2];
    p->ow = yd[3];
    p->max_mode = (int)a[0];
    p->half_pixel = (int)a[1];
    p->ratio = (int)a[2];
    p->scale = ipu__attr_f32(ins, 3);
    p->hdr.work = (size_t)(p->k * p->c);
    p->hdr.fn = ipu__select_kernel(ins->op, IPU_DTYPE_FLOAT32);
    ins->plan = p;
    return IPU_OK;
}
