/* Data movement kernels: BIND, COPY, EXPAND, CONCAT, TRANSPOSE (all dtypes, by element size)
 * and CAST (docs/bytecode.md: float -> int truncates and saturates, NaN -> 0; int -> int wraps;
 * to bool: x != 0). */
#include <math.h>
#include <string.h>

#include "kernels.h"

ipu_status ipu__k_bind(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                       void *scratch) {
    (void)b, (void)e, (void)scratch;
    const ipu_executable *x = f->exe;
    uint32_t t = ins->out[0];
    if (!x || !x->tensor_data || !x->tensors || t >= x->info.num_tensors)
        return ipu__fail(IPU_ERR_INTERNAL, "BIND: executable has no tensor data");
    f->ptr[t] = (void *)(x->tensor_data + x->tensors[t].offset);
    return IPU_OK;
}

ipu_status ipu__k_copy(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                       void *scratch) {
    (void)scratch;
    const ipu__flat_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    char *y = f->ptr[ins->out[0]];
    if (x == y) return IPU_OK;
    uint64_t lo = (uint64_t)b * IPU__COPY_BLOCK, hi = (uint64_t)e * IPU__COPY_BLOCK;
    if (hi > p->count) hi = p->count;
    memcpy(y + lo, x + lo, (size_t)(hi - lo));
    return IPU_OK;
}

/* ---- EXPAND -------------------------------------------------------------------------------- */

static void expand_inner(const void *a, int64_t sa, const void *b, int64_t sb, void *y, size_t n,
                         uint32_t es) {
    (void)b, (void)sb;
    if (sa) {
        memcpy(y, a, n * es);
        return;
    }
    switch (es) {
        case 1: memset(y, *(const uint8_t *)a, n); break;
        case 2: {
            uint16_t v, *d = y;
            memcpy(&v, a, 2);
            for (size_t i = 0; i < n; i++) d[i] = v;
            break;
        }
        case 4: {
            uint32_t v, *d = y;
            memcpy(&v, a, 4);
            for (size_t i = 0; i < n; i++) d[i] = v;
            break;
        }
        default: {
            uint64_t v, *d = y;
            memcpy(&v, a, 8);
            for (size_t i = 0; i < n; i++) d[i] = v;
            break;
        }
    }
}

ipu_status ipu__k_expand(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    (void)scratch;
    const ipu__bcast_plan *p = ins->plan;
    uint64_t lo = (uint64_t)b * IPU__ELT_BLOCK, hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (hi > p->numel) hi = p->numel;
    ipu__bcast_run(p, f->ptr[ins->in[0]], NULL, f->ptr[ins->out[0]], lo, hi, expand_inner);
    return IPU_OK;
}

/* ---- CONCAT -------------------------------------------------------------------------------- */

ipu_status ipu__k_concat(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    (void)scratch;
    const ipu__concat_plan *p = ins->plan;
    char *y = f->ptr[ins->out[0]];
    for (size_t it = b; it < e; it++) {
        uint64_t o = it / p->n_in;
        uint32_t i = (uint32_t)(it % p->n_in);
        uint64_t row = p->row[2 * i];
        if (row == 0) continue;
        const char *x = f->ptr[ins->in[i]];
        memcpy(y + o * p->yrow + p->row[2 * i + 1], x + o * row, (size_t)row);
    }
    return IPU_OK;
}

/* ---- TRANSPOSE ----------------------------------------------------------------------------- */

#define GATHER(T)                                                              \
    do {                                                                       \
        const T *s = (const T *)x + off;                                       \
        T *d = (T *)y + lo;                                                    \
        for (uint64_t j = 0; j < run; j++) d[j] = s[(int64_t)j * st];          \
    } while (0)

ipu_status ipu__k_transpose(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                            void *scratch) {
    (void)scratch;
    const ipu__transpose_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    char *y = f->ptr[ins->out[0]];
    uint32_t nd = p->ndim, last = nd - 1, es = p->esize;
    uint64_t lo = (uint64_t)b * IPU__ELT_BLOCK, hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (hi > p->numel) hi = p->numel;
    int64_t idx[IPU_MAX_DIMS];
    uint64_t r = lo;
    for (uint32_t d = nd; d-- > 0;) {
        idx[d] = (int64_t)(r % (uint64_t)p->shape[d]);
        r /= (uint64_t)p->shape[d];
    }
    int64_t st = p->xs[last];
    while (lo < hi) {
        int64_t off = 0;
        for (uint32_t d = 0; d < nd; d++) off += idx[d] * p->xs[d];
        uint64_t run = (uint64_t)(p->shape[last] - idx[last]);
        if (run > hi - lo) run = hi - lo;
        if (st == 1) {
            memcpy(y + lo * es, x + (uint64_t)off * es, (size_t)(run * es));
        } else {
            switch (es) {
                case 1: GATHER(uint8_t); break;
                case 2: GATHER(uint16_t); break;
                case 4: GATHER(uint32_t); break;
                default: GATHER(uint64_t); break;
            }
        }
        lo += run;
        idx[last] += (int64_t)run;
        for (uint32_t d = last; d > 0 && idx[d] == p->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
    return IPU_OK;
}

/* ---- CAST ---------------------------------------------------------------------------------- */

#define CAST_CHUNK 256

static bool is_float_dt(ipu_dtype t) { return t == IPU_DTYPE_FLOAT32 || t == IPU_DTYPE_FLOAT16; }

/* Load n elements as float (float sources) or as int64 (integer/bool sources). */
static void load_f(ipu_dtype t, const void *src, float *d, size_t n) {
    if (t == IPU_DTYPE_FLOAT32)
        memcpy(d, src, n * sizeof(float));
    else
        ipu__cvt_f16_to_f32(src, d, n);
}

static void load_i(ipu_dtype t, const void *src, int64_t *d, size_t n) {
    switch (t) {
        case IPU_DTYPE_INT32: { const int32_t *s = src; for (size_t i = 0; i < n; i++) d[i] = s[i]; break; }
        case IPU_DTYPE_INT64: memcpy(d, src, n * sizeof(int64_t)); break;
        case IPU_DTYPE_INT8: { const int8_t *s = src; for (size_t i = 0; i < n; i++) d[i] = s[i]; break; }
        case IPU_DTYPE_UINT8: { const uint8_t *s = src; for (size_t i = 0; i < n; i++) d[i] = s[i]; break; }
        case IPU_DTYPE_BOOL: { const uint8_t *s = src; for (size_t i = 0; i < n; i++) d[i] = s[i] != 0; break; }
        default: { const uint32_t *s = src; for (size_t i = 0; i < n; i++) d[i] = s[i]; break; } /* UINT32 */
    }
}

/* float -> integer: truncate toward zero, saturate, NaN -> 0. */
static inline int64_t sat_f(float v, double lo, double hi) {
    double d = (double)v;
    if (d != d) return 0;
    if (d <= lo) return (int64_t)lo;
    if (d >= hi) return (int64_t)hi;
    return (int64_t)d;
}

#define FSTORE(T, LO, HI)                                                                   \
    do {                                                                                    \
        T *o = dst;                                                                         \
        for (size_t i = 0; i < n; i++) o[i] = (T)sat_f(s[i], LO, HI);                      \
    } while (0)

static void store_from_f(ipu_dtype t, const float *s, void *dst, size_t n) {
    switch (t) {
        case IPU_DTYPE_FLOAT32: memcpy(dst, s, n * sizeof(float)); break;
        case IPU_DTYPE_FLOAT16: ipu__cvt_f32_to_f16(s, dst, n); break;
        case IPU_DTYPE_INT32: FSTORE(int32_t, -2147483648.0, 2147483647.0); break;
        case IPU_DTYPE_INT8: FSTORE(int8_t, -128.0, 127.0); break;
        case IPU_DTYPE_UINT8: FSTORE(uint8_t, 0.0, 255.0); break;
        case IPU_DTYPE_UINT32: FSTORE(uint32_t, 0.0, 4294967295.0); break;
        case IPU_DTYPE_INT64: {
            int64_t *o = dst;
            for (size_t i = 0; i < n; i++) {
                float v = s[i];
                o[i] = v != v ? 0 : v <= -9223372036854775808.0f ? INT64_MIN
                       : v >= 9223372036854775808.0f ? INT64_MAX : (int64_t)v;
            }
            break;
        }
        default: { /* BOOL */
            uint8_t *o = dst;
            for (size_t i = 0; i < n; i++) o[i] = s[i] != 0.0f;
            break;
        }
    }
}

/* integer -> any: wrap (two's complement) for integers, round-to-nearest for floats. */
static void store_from_i(ipu_dtype t, const int64_t *s, void *dst, size_t n) {
    switch (t) {
        case IPU_DTYPE_FLOAT32: { float *o = dst; for (size_t i = 0; i < n; i++) o[i] = (float)s[i]; break; }
        case IPU_DTYPE_FLOAT16: {
            uint16_t *o = dst;
            for (size_t i = 0; i < n; i++) o[i] = ipu__f32_to_f16((float)s[i]);
            break;
        }
        case IPU_DTYPE_INT32: { uint32_t *o = dst; for (size_t i = 0; i < n; i++) o[i] = (uint32_t)s[i]; break; }
        case IPU_DTYPE_INT64: memcpy(dst, s, n * sizeof(int64_t)); break;
        case IPU_DTYPE_INT8:
        case IPU_DTYPE_UINT8: { uint8_t *o = dst; for (size_t i = 0; i < n; i++) o[i] = (uint8_t)s[i]; break; }
        case IPU_DTYPE_UINT32: { uint32_t *o = dst; for (size_t i = 0; i < n; i++) o[i] = (uint32_t)s[i]; break; }
        default: { uint8_t *o = dst; for (size_t i = 0; i < n; i++) o[i] = s[i] != 0; break; } /* BOOL */
    }
}

ipu_status ipu__k_cast(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                       void *scratch) {
    (void)scratch;
    const ipu__flat_plan *p = ins->plan;
    const char *x = f->ptr[ins->in[0]];
    char *y = f->ptr[ins->out[0]];
    size_t ses = ipu_dtype_size(p->src), des = ipu_dtype_size(p->dst);
    uint64_t lo = (uint64_t)b * IPU__ELT_BLOCK, hi = (uint64_t)e * IPU__ELT_BLOCK;
    if (hi > p->count) hi = p->count;
    if (p->src == p->dst) {
        memcpy(y + lo * des, x + lo * ses, (size_t)(hi - lo) * des);
        return IPU_OK;
    }
    float fb[CAST_CHUNK];
    int64_t ib[CAST_CHUNK];
    for (uint64_t i = lo; i < hi; i += CAST_CHUNK) {
        size_t n = hi - i < CAST_CHUNK ? (size_t)(hi - i) : CAST_CHUNK;
        if (is_float_dt(p->src)) {
            load_f(p->src, x + i * ses, fb, n);
            store_from_f(p->dst, fb, y + i * des, n);
        } else {
            load_i(p->src, x + i * ses, ib, n);
            store_from_i(p->dst, ib, y + i * des, n);
        }
    }
    return IPU_OK;
}
