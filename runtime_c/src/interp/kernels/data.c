/* Data movement kernels: BIND, COPY, EXPAND, CONCAT, TRANSPOSE (all dtypes, by element size)
 * and CAST between any two dtypes (docs/bytecode.md: float -> int truncates and saturates,
 * NaN -> 0; int -> int wraps; to bool: x != 0). */
#include <math.h>
#include <string.h>

#include "eltwise.h"

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

#define GATHER(T)                                                     \
    do {                                                              \
        const T *s = (const T *)x + off;                              \
        T *d = (T *)y + lo;                                           \
        for (uint64_t j = 0; j < run; j++) d[j] = s[(int64_t)j * st]; \
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

/* Integer and bool sources load as int64 (uint64 as its bit pattern: see store_from_i). */
static void load_i(ipu_dtype t, const void *src, int64_t *d, size_t n) {
    switch (t) {
#define LOAD_I(sfx, D, T, W, S, C, MIN, MAX)                 \
    case IPU_DTYPE_##D: {                                    \
        const T *s = src;                                    \
        for (size_t i = 0; i < n; i++) d[i] = (int64_t)s[i]; \
        break;                                               \
    }
        IPU__INT_TYPES(LOAD_I)
#undef LOAD_I
        default: { /* BOOL */
            const uint8_t *s = src;
            for (size_t i = 0; i < n; i++) d[i] = s[i] != 0;
            break;
        }
    }
}

/* float -> integer: truncate toward zero, saturate at T's range, NaN -> 0. */
static void store_from_f(ipu_dtype t, const float *s, void *dst, size_t n) {
    switch (t) {
        case IPU_DTYPE_FLOAT32: memcpy(dst, s, n * sizeof(float)); break;
        case IPU_DTYPE_FLOAT16: ipu__cvt_f32_to_f16(s, dst, n); break;
#define STORE_F(sfx, D, T, W, S, C, MIN, MAX)                                                      \
    case IPU_DTYPE_##D: {                                                                          \
        T *o = dst;                                                                                \
        for (size_t i = 0; i < n; i++) {                                                           \
            double v = (double)s[i];                                                               \
            o[i] = v != v ? (T)0 : v <= (double)(MIN) ? (MIN) : v >= (double)(MAX) ? (MAX) : (T)v; \
        }                                                                                          \
        break;                                                                                     \
    }
            IPU__INT_TYPES(STORE_F)
#undef STORE_F
        default: { /* BOOL */
            uint8_t *o = dst;
            for (size_t i = 0; i < n; i++) o[i] = s[i] != 0.0f;
            break;
        }
    }
}

/* integer -> any: wrap (two's complement) for integers, round-to-nearest for floats; `u64`:
 * the source is uint64 (its values are the int64 bit patterns). */
static void store_from_i(ipu_dtype t, const int64_t *s, void *dst, size_t n, bool u64) {
    switch (t) {
        case IPU_DTYPE_FLOAT32: {
            float *o = dst;
            for (size_t i = 0; i < n; i++) o[i] = u64 ? (float)(uint64_t)s[i] : (float)s[i];
            break;
        }
        case IPU_DTYPE_FLOAT16: {
            uint16_t *o = dst;
            for (size_t i = 0; i < n; i++)
                o[i] = ipu__f32_to_f16(u64 ? (float)(uint64_t)s[i] : (float)s[i]);
            break;
        }
#define STORE_I(sfx, D, T, W, S, C, MIN, MAX)                    \
    case IPU_DTYPE_##D: {                                        \
        T *o = dst;                                              \
        for (size_t i = 0; i < n; i++) o[i] = (T)(uint64_t)s[i]; \
        break;                                                   \
    }
            IPU__INT_TYPES(STORE_I)
#undef STORE_I
        default: { /* BOOL */
            uint8_t *o = dst;
            for (size_t i = 0; i < n; i++) o[i] = s[i] != 0;
            break;
        }
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
            store_from_i(p->dst, ib, y + i * des, n, p->src == IPU_DTYPE_UINT64);
        }
    }
    return IPU_OK;
}
