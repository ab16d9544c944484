/* GATHER, GATHER_ELEMENTS, GATHER_ND, SCATTER_ELEMENTS, SCATTER_ND (docs/bytecode.md).
 * Elements move by size, so every dtype works; scatter reductions compute float16 in float32 and
 * round on every store; integers wrap. The plans (gather.h) were checked by verify_gather.c; the
 * only run-time check is the index values: an index outside [-n, n) fails the instruction with
 * IPU_ERR_INVALID_ARGUMENT before anything is read through it. */
#include <math.h>
#include <string.h>

#include "gather.h"

static inline int64_t ld_idx(const void *p, uint32_t ies, uint64_t i) {
    return ies == 4 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* Index i (read at position `pos` of the indices) wrapped into [0, n), or false. */
static inline bool wrap(int64_t i, int64_t n, int64_t *out) {
    if (i < -n || i >= n) return false;
    *out = i < 0 ? i + n : i;
    return true;
}

static ipu_status bad_index(int64_t i, uint64_t pos, int64_t n) {
    return ipu__fail(IPU_ERR_INVALID_ARGUMENT,
                     "index %lld (element %llu of the indices) is out of range [%lld, %lld)",
                     (long long)i, (unsigned long long)pos, (long long)-n, (long long)n);
}

static inline void cpy(void *d, const void *s, uint32_t es) {
    switch (es) {
        case 1: memcpy(d, s, 1); break;
        case 2: memcpy(d, s, 2); break;
        case 4: memcpy(d, s, 4); break;
        default: memcpy(d, s, 8); break;
    }
}

/* ---- GATHER / GATHER_ND ------------------------------------------------------------------- */

ipu_status ipu__k_gather(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    (void)scratch;
    const ipu__gather_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    const void *idx = f->ptr[ins->in[1]];
    char *y = f->ptr[ins->out[0]];
    uint64_t lo = (uint64_t)b * p->rows_per_item, hi = (uint64_t)e * p->rows_per_item;
    if (hi > p->rows) hi = p->rows;
    for (uint64_t r = lo; r < hi; r++) {
        uint64_t o = r / p->m, j = r % p->m;
        uint64_t first = (p->shared_idx ? j : r) * p->k;
        const char *src = x + o * p->ostride;
        for (uint32_t i = 0; i < p->k; i++) {
            int64_t v = ld_idx(idx, p->ies, first + i), w;
            if (!wrap(v, p->dim[i], &w)) return bad_index(v, first + i, p->dim[i]);
            src += (uint64_t)w * p->stride[i];
        }
        if (p->row == 1 || p->row == 2 || p->row == 4 || p->row == 8) /* no memcpy call */
            cpy(y + r * p->row, src, (uint32_t)p->row);
        else
            memcpy(y + r * p->row, src, (size_t)p->row);
    }
    return IPU_OK;
}

/* ---- reductions ---------------------------------------------------------------------------- */

static inline float fmax_nan(float a, float b) {
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}
static inline float fmin_nan(float a, float b) {
    return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
}

static inline float red_f(float a, float u, int red) {
    switch (red) {
        case IPU__SCATTER_ADD: return a + u;
        case IPU__SCATTER_MUL: return a * u;
        case IPU__SCATTER_MAX: return fmax_nan(a, u);
        default: return fmin_nan(a, u);
    }
}

/* Integers wrap: add and multiply in unsigned arithmetic. */
#define RED_INT(T, UT, a, u, red)                          \
    ((red) == IPU__SCATTER_ADD   ? (T)((UT)(a) + (UT)(u))  \
     : (red) == IPU__SCATTER_MUL ? (T)((UT)(a) * (UT)(u))  \
     : (red) == IPU__SCATTER_MAX ? ((a) > (u) ? (a) : (u)) \
                                 : ((a) < (u) ? (a) : (u)))

/* y[0..n) = reduce(y, u) element-wise (n elements of `dt`); NONE copies. */
static void apply(void *y, const void *u, uint64_t n, ipu_dtype dt, uint32_t es, int red) {
    if (red == IPU__SCATTER_NONE) {
        memcpy(y, u, (size_t)(n * es));
        return;
    }
    switch (dt) {
        case IPU_DTYPE_FLOAT32: {
            float *d = y;
            const float *s = u;
            for (uint64_t i = 0; i < n; i++) d[i] = red_f(d[i], s[i], red);
            break;
        }
        case IPU_DTYPE_FLOAT16: {
            uint16_t *d = y;
            const uint16_t *s = u;
            for (uint64_t i = 0; i < n; i++)
                d[i] = ipu__f32_to_f16(red_f(ipu__f16_to_f32(d[i]), ipu__f16_to_f32(s[i]), red));
            break;
        }
        case IPU_DTYPE_INT32: {
            int32_t *d = y;
            const int32_t *s = u;
            for (uint64_t i = 0; i < n; i++) d[i] = RED_INT(int32_t, uint32_t, d[i], s[i], red);
            break;
        }
        default: { /* INT64: the verifier allows no other dtype with a reduction */
            int64_t *d = y;
            const int64_t *s = u;
            for (uint64_t i = 0; i < n; i++) d[i] = RED_INT(int64_t, uint64_t, d[i], s[i], red);
            break;
        }
    }
}

/* ---- GATHER_ELEMENTS / SCATTER_ELEMENTS ---------------------------------------------------- */

ipu_status ipu__k_gather_elements(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                                  void *scratch) {
    (void)scratch;
    const ipu__elements_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    const void *idx = f->ptr[ins->in[1]];
    char *y = f->ptr[ins->out[0]];
    uint32_t nd = p->ndim, ax = p->axis, es = p->esize;
    int64_t n = p->dshape[ax];
    uint64_t lo = (uint64_t)b * IPU__ELT_BLOCK, hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (hi > p->numel) hi = p->numel;
    int64_t m[IPU_MAX_DIMS], off = 0; /* multi-index over ishape; data offset without the axis */
    uint64_t r = lo;
    for (uint32_t d = nd; d-- > 0;) {
        m[d] = (int64_t)(r % (uint64_t)p->ishape[d]);
        r /= (uint64_t)p->ishape[d];
        if (d != ax) off += m[d] * p->dstride[d];
    }
    for (uint64_t t = lo; t < hi; t++) {
        int64_t v = ld_idx(idx, p->ies, t), w;
        if (!wrap(v, n, &w)) return bad_index(v, t, n);
        cpy(y + t * es, x + (uint64_t)(off + w * p->dstride[ax]) * es, es);
        for (uint32_t d = nd; d-- > 0;) { /* next multi-index */
            if (d != ax) off += p->dstride[d];
            if (++m[d] < p->ishape[d]) break;
            if (d != ax) off -= m[d] * p->dstride[d];
            m[d] = 0;
        }
    }
    return IPU_OK;
}

ipu_status ipu__k_scatter_elements(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                                   void *scratch) {
    (void)scratch;
    const ipu__elements_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    const void *idx = f->ptr[ins->in[1]];
    const char *upd = f->ptr[ins->in[2]];
    char *y = f->ptr[ins->out[0]];
    uint32_t nd = p->ndim, ax = p->axis, es = p->esize;
    int64_t n = p->dshape[ax];
    for (size_t o = b; o < e; o++) {
        char *slab = y + (uint64_t)o * p->slab * es;
        memcpy(slab, x + (uint64_t)o * p->slab * es, (size_t)(p->slab * es));
        /* slab o's coordinates in the dims before axis; the indices holding them are contiguous */
        uint64_t r = o, first = 0, istride = 1, count = 1;
        bool any = true;
        for (uint32_t d = nd; d-- > 0;) {
            if (d >= ax) {
                count *= (uint64_t)p->ishape[d];
            } else {
                int64_t c = (int64_t)(r % (uint64_t)p->dshape[d]);
                r /= (uint64_t)p->dshape[d];
                if (c >= p->ishape[d]) any = false;
                first += (uint64_t)c * istride;
            }
            istride *= (uint64_t)p->ishape[d];
        }
        if (!any) continue;
        int64_t m[IPU_MAX_DIMS] = {0}, off = 0; /* multi-index over ishape[axis+1:] */
        for (uint64_t t = 0; t < count; t++) {
            int64_t v = ld_idx(idx, p->ies, first + t), w;
            if (!wrap(v, n, &w)) return bad_index(v, first + t, n);
            apply(slab + (uint64_t)(off + w * p->dstride[ax]) * es, upd + (first + t) * es, 1,
                  p->dtype, es, p->reduction);
            for (uint32_t d = nd; d-- > ax + 1;) {
                off += p->dstride[d];
                if (++m[d] < p->ishape[d]) break;
                off -= m[d] * p->dstride[d];
                m[d] = 0;
            }
        }
    }
    return IPU_OK;
}

/* ---- SCATTER_ND ---------------------------------------------------------------------------- */

ipu_status ipu__k_scatter_nd(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                             void *scratch) {
    (void)scratch;
    const ipu__scatter_nd_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    const void *idx = f->ptr[ins->in[1]];
    const char *upd = f->ptr[ins->in[2]];
    char *y = f->ptr[ins->out[0]];
    uint32_t es = p->esize;
    for (size_t it = b; it < e; it++) {
        uint64_t c0 = (uint64_t)it * p->cblock;
        uint64_t nc = p->cols - c0 < p->cblock ? p->cols - c0 : p->cblock;
        for (uint64_t r = 0; r < p->rows; r++)
            memcpy(y + (r * p->cols + c0) * es, x + (r * p->cols + c0) * es, (size_t)(nc * es));
        for (uint64_t u = 0; u < p->m; u++) {
            uint64_t row = 0;
            for (uint32_t i = 0; i < p->k; i++) {
                int64_t v = ld_idx(idx, p->ies, u * p->k + i), w;
                if (!wrap(v, p->dim[i], &w)) return bad_index(v, u * p->k + i, p->dim[i]);
                row += (uint64_t)w * p->rstride[i];
            }
            apply(y + (row * p->cols + c0) * es, upd + (u * p->cols + c0) * es, nc, p->dtype, es,
                  p->reduction);
        }
    }
    return IPU_OK;
}
