/* The reduction family (docs/bytecode.md): REDUCE, ARG_REDUCE, CUMSUM, TOPK, LOG_SOFTMAX and
 * HARDMAX over the middle axis of x viewed as [outer, n, inner]. Work item = (outer index,
 * block of IPU__RED_IB inner columns); TOPK: (outer index, one column).
 *
 * Numerics (the reference, pyipu/reference/kernels_reduce.py, does the same):
 * - floats (float16 converted on load) accumulate sums, products and cumulative sums in double,
 *   in order along the reduced axis, rounded once on store; MAX/MIN and the arg/top-k
 *   comparisons are exact; NaN propagates through MAX/MIN and wins ARG_REDUCE (as numpy);
 * - integers accumulate in uint64 and wrap to their own type on store (MEAN: the wrapped sum
 *   divided by n, truncating; L2: sqrt of the wrapped sum of squares, truncated, 0 if negative).
 * Kernels are dtype-generic: element loads and stores switch on the plan's dtype. A work item
 * over millions of elements asks the stop hook between chunks (ipu__stop_at).
 *
 * The plan functions (at the end) share one plan, ipu__rfam_plan: one function per kind of
 * rule (reduce, arg_reduce, cumulative, topk, float_axis), opcodes of a kind share it.
 * verify_ops.c has already checked operand counts, tensor indices, output locations and
 * overlaps, attribute counts and the table's dtype rules. */
#include <math.h>
#include <string.h>

#include "../verify_internal.h"
#include "reduce.h"

/* The plan of the reduction family: x as
 * [outer, n, inner]; work item = (outer, block of IPU__RED_IB inner columns), except TOPK:
 * (outer, one inner column). `dtype` is x's. */
typedef struct ipu__rfam_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    int fn;                 /* REDUCE function */
    int is_min, last;       /* ARG_REDUCE */
    int exclusive, reverse; /* CUMSUM */
    int largest;            /* TOPK */
    int64_t outer, n, inner, nib, k;
} ipu__rfam_plan;

#define IB IPU__RED_IB

typedef struct red_item {
    int64_t o, c0, w; /* outer index, first column, number of columns */
} red_item;

static red_item item_of(const ipu__rfam_plan *p, size_t it) {
    red_item r;
    r.o = (int64_t)((uint64_t)it / (uint64_t)p->nib);
    r.c0 = (int64_t)((uint64_t)it % (uint64_t)p->nib) * IB;
    r.w = p->inner - r.c0 < IB ? p->inner - r.c0 : IB;
    return r;
}

static inline bool is_f(ipu_dtype dt) { return dt == IPU_DTYPE_FLOAT32 || dt == IPU_DTYPE_FLOAT16; }

static inline float ldf(const void *x, ipu_dtype dt, int64_t i) {
    return dt == IPU_DTYPE_FLOAT16 ? ipu__f16_to_f32(((const uint16_t *)x)[i])
                                   : ((const float *)x)[i];
}

static inline void stf(void *y, ipu_dtype dt, int64_t i, double v) {
    if (dt == IPU_DTYPE_FLOAT16)
        ((uint16_t *)y)[i] = ipu__f32_to_f16((float)v);
    else
        ((float *)y)[i] = (float)v;
}

static inline int64_t ldi(const void *x, ipu_dtype dt, int64_t i) {
    switch (dt) {
        case IPU_DTYPE_INT32: return ((const int32_t *)x)[i];
        case IPU_DTYPE_INT64: return ((const int64_t *)x)[i];
        case IPU_DTYPE_INT8: return ((const int8_t *)x)[i];
        case IPU_DTYPE_UINT8: return ((const uint8_t *)x)[i];
        case IPU_DTYPE_BOOL: return ((const uint8_t *)x)[i] != 0;
        case IPU_DTYPE_UINT32: return ((const uint32_t *)x)[i];
        default: return 0;
    }
}

/* Store the low bits of v (wrapping). */
static inline void sti(void *y, ipu_dtype dt, int64_t i, uint64_t v) {
    switch (dt) {
        case IPU_DTYPE_INT32: ((int32_t *)y)[i] = (int32_t)(uint32_t)v; break;
        case IPU_DTYPE_INT64: ((int64_t *)y)[i] = (int64_t)v; break;
        case IPU_DTYPE_INT8: ((int8_t *)y)[i] = (int8_t)(uint8_t)v; break;
        case IPU_DTYPE_UINT8:
        case IPU_DTYPE_BOOL: ((uint8_t *)y)[i] = (uint8_t)v; break;
        case IPU_DTYPE_UINT32: ((uint32_t *)y)[i] = (uint32_t)v; break;
        default: break;
    }
}

/* v wrapped to dt's width, sign-extended for signed types */
static inline int64_t wrap(ipu_dtype dt, uint64_t v) {
    switch (dt) {
        case IPU_DTYPE_INT32: return (int32_t)(uint32_t)v;
        case IPU_DTYPE_UINT32: return (uint32_t)v;
        default: return (int64_t)v;
    }
}

/* NaN-propagating max/min */
static inline float fmaxn(float m, float v) { return (v > m || v != v) ? v : m; }
static inline float fminn(float m, float v) { return (v < m || v != v) ? v : m; }

/* for k in [0, n), c in [0, w): BODY with v = element (k, c) of the block (rows contiguous);
 * the stop hook is asked every mask + 1 rows (the function returns its status) */
#define ROWS(LD, BODY)                             \
    for (int64_t k = 0; k < p->n; k++) {           \
        ipu_status st_ = ipu__stop_at(f, k, mask); \
        if (st_ != IPU_OK) return st_;             \
        int64_t rb = base + k * p->inner;          \
        for (int64_t c = 0; c < r.w; c++) {        \
            LD##_t v = LD(x, dt, rb + c);          \
            BODY;                                  \
        }                                          \
    }
typedef float ldf_t;
typedef int64_t ldi_t;

/* ---- REDUCE ------------------------------------------------------------------------------ */

static ipu_status reduce_float_block(const ipu__frame *f, const ipu__rfam_plan *p, const void *x,
                                     void *y, red_item r) {
    ipu_dtype dt = p->dtype;
    const int64_t mask = ipu__stop_mask(r.w);
    int64_t base = r.o * p->n * p->inner + r.c0;
    double acc[IB];
    float m[IB];
    int fn = p->fn;
    for (int64_t c = 0; c < r.w; c++) {
        acc[c] = fn == IPU__RED_PROD ? 1.0 : 0.0;
        m[c] = ldf(x, dt, base + c);
    }
    switch (fn) {
        case IPU__RED_SUM:
        case IPU__RED_MEAN:
        case IPU__RED_LOG_SUM: ROWS(ldf, acc[c] += v) break;
        case IPU__RED_MAX: ROWS(ldf, m[c] = fmaxn(m[c], v)) break;
        case IPU__RED_MIN: ROWS(ldf, m[c] = fminn(m[c], v)) break;
        case IPU__RED_PROD: ROWS(ldf, acc[c] *= v) break;
        case IPU__RED_SUM_SQUARE:
        case IPU__RED_L2: ROWS(ldf, acc[c] += (double)v * v) break;
        case IPU__RED_L1: ROWS(ldf, acc[c] += fabs((double)v)) break;
        case IPU__RED_LOG_SUM_EXP: /* stable: exp(x - max), max added back */
            ROWS(ldf, m[c] = fmaxn(m[c], v))
            ROWS(ldf, acc[c] += exp((double)v - m[c])) break;
        default: break;
    }
    int64_t yb = r.o * p->inner + r.c0;
    for (int64_t c = 0; c < r.w; c++) {
        double a = acc[c];
        switch (fn) {
            case IPU__RED_MEAN: a /= (double)p->n; break;
            case IPU__RED_MAX:
            case IPU__RED_MIN: a = m[c]; break;
            case IPU__RED_L2: a = sqrt(a); break;
            case IPU__RED_LOG_SUM: a = log(a); break;
            case IPU__RED_LOG_SUM_EXP: a = isfinite(m[c]) ? m[c] + log(a) : m[c]; break;
            default: break;
        }
        stf(y, dt, yb + c, a);
    }
    return IPU_OK;
}

static ipu_status reduce_int_block(const ipu__frame *f, const ipu__rfam_plan *p, const void *x,
                                   void *y, red_item r) {
    ipu_dtype dt = p->dtype;
    const int64_t mask = ipu__stop_mask(r.w);
    int64_t base = r.o * p->n * p->inner + r.c0;
    uint64_t acc[IB];
    int64_t m[IB];
    int fn = p->fn;
    for (int64_t c = 0; c < r.w; c++) {
        acc[c] = fn == IPU__RED_PROD ? 1 : 0;
        m[c] = ldi(x, dt, base + c);
    }
    switch (fn) {
        case IPU__RED_SUM:
        case IPU__RED_MEAN: ROWS(ldi, acc[c] += (uint64_t)v) break;
        case IPU__RED_MAX: ROWS(ldi, m[c] = v > m[c] ? v : m[c]) break;
        case IPU__RED_MIN: ROWS(ldi, m[c] = v < m[c] ? v : m[c]) break;
        case IPU__RED_PROD: ROWS(ldi, acc[c] *= (uint64_t)v) break;
        case IPU__RED_SUM_SQUARE:
        case IPU__RED_L2: ROWS(ldi, acc[c] += (uint64_t)v * (uint64_t)v) break;
        case IPU__RED_L1: ROWS(ldi, acc[c] += v < 0 ? 0 - (uint64_t)v : (uint64_t)v) break;
        default: break;
    }
    int64_t yb = r.o * p->inner + r.c0;
    for (int64_t c = 0; c < r.w; c++) {
        uint64_t a = acc[c];
        if (fn == IPU__RED_MAX || fn == IPU__RED_MIN) {
            a = (uint64_t)m[c];
        } else if (fn == IPU__RED_MEAN) {
            a = (uint64_t)(wrap(dt, a) / p->n);
        } else if (fn == IPU__RED_L2) {
            int64_t s = wrap(dt, a);
            a = s > 0 ? (uint64_t)(int64_t)sqrt((double)s) : 0;
        }
        sti(y, dt, yb + c, a);
    }
    return IPU_OK;
}

ipu_status ipu__k_reduce(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    (void)scratch;
    const ipu__rfam_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
    ipu_status st = IPU_OK;
    for (size_t it = b; it < e && st == IPU_OK; it++)
        st = is_f(p->dtype) ? reduce_float_block(f, p, x, y, item_of(p, it))
                            : reduce_int_block(f, p, x, y, item_of(p, it));
    return st;
}

/* ---- ARG_REDUCE, HARDMAX ---------------------------------------------------------------- */

/* bi[c] = index along n of the max (min) of each column of the block. Ties: first, or last
 * with `last`; floats: NaN wins (the first NaN, or the last with `last`), as numpy. */
static ipu_status arg_block(const ipu__frame *f, const ipu__rfam_plan *p, const void *x, red_item r,
                            int is_min, int last, int64_t *bi) {
    ipu_dtype dt = p->dtype;
    const int64_t mask = ipu__stop_mask(r.w);
    int64_t base = r.o * p->n * p->inner + r.c0;
    for (int64_t c = 0; c < r.w; c++) bi[c] = 0;
    if (is_f(dt)) {
        float best[IB];
        for (int64_t c = 0; c < r.w; c++) best[c] = ldf(x, dt, base + c);
        ROWS(ldf, {
            float bv = best[c];
            bool take = bv != bv ? (last && v != v)
                        : v != v ? true
                        : is_min ? (v < bv || (last && v == bv))
                                 : (v > bv || (last && v == bv));
            if (take && k > 0) {
                best[c] = v;
                bi[c] = k;
            }
        })
    } else {
        int64_t best[IB];
        for (int64_t c = 0; c < r.w; c++) best[c] = ldi(x, dt, base + c);
        ROWS(ldi, {
            int64_t bv = best[c];
            bool take = is_min ? (v < bv || (last && v == bv)) : (v > bv || (last && v == bv));
            if (take && k > 0) {
                best[c] = v;
                bi[c] = k;
            }
        })
    }
    return IPU_OK;
}

ipu_status ipu__k_arg_reduce(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                             void *scratch) {
    (void)scratch;
    const ipu__rfam_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    int64_t *y = f->ptr[ins->out[0]];
    int64_t bi[IB];
    for (size_t it = b; it < e; it++) {
        red_item r = item_of(p, it);
        ipu_status st = arg_block(f, p, x, r, p->is_min, p->last, bi);
        if (st != IPU_OK) return st;
        memcpy(y + r.o * p->inner + r.c0, bi, sizeof(int64_t) * (size_t)r.w);
    }
    return IPU_OK;
}

ipu_status ipu__k_hardmax(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                          void *scratch) {
    (void)scratch;
    const ipu__rfam_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
    int64_t bi[IB];
    for (size_t it = b; it < e; it++) {
        red_item r = item_of(p, it);
        ipu_status st = arg_block(f, p, x, r, 0, 0, bi);
        if (st != IPU_OK) return st;
        int64_t base = r.o * p->n * p->inner + r.c0;
        const int64_t mask = ipu__stop_mask(r.w);
        for (int64_t k = 0; k < p->n; k++) {
            if ((st = ipu__stop_at(f, k, mask)) != IPU_OK) return st;
            for (int64_t c = 0; c < r.w; c++)
                stf(y, p->dtype, base + k * p->inner + c, k == bi[c] ? 1.0 : 0.0);
        }
    }
    return IPU_OK;
}

/* ---- LOG_SOFTMAX: (x - max) - log(sum exp(x - max)) --------------------------------------- */

ipu_status ipu__k_log_softmax(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                              void *scratch) {
    const ipu__rfam_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
    ipu_dtype dt = p->dtype;
    float m[IB];
    double s[IB];
    _Static_assert(IPU__STOP_CHUNK * sizeof(float) <= IPU__SCRATCH_BYTES, "a chunk of exp");
    for (size_t it = b; it < e; it++) {
        red_item r = item_of(p, it);
        if (dt == IPU_DTYPE_FLOAT32 && p->inner == 1) {
            int64_t base = r.o * p->n;
            ipu_status st = ipu__log_softmax_row(f, (const float *)x + base, (float *)y + base,
                                                 p->n, scratch);
            if (st != IPU_OK) return st;
            continue;
        }
        int64_t base = r.o * p->n * p->inner + r.c0;
        const int64_t mask = ipu__stop_mask(r.w);
        for (int64_t c = 0; c < r.w; c++) {
            m[c] = ldf(x, dt, base + c);
            s[c] = 0.0;
        }
        ROWS(ldf, m[c] = fmaxn(m[c], v))
        ROWS(ldf, s[c] += exp((double)v - m[c]))
        for (int64_t c = 0; c < r.w; c++) s[c] = log(s[c]);
        ROWS(ldf, stf(y, dt, rb + c, ((double)v - m[c]) - s[c]))
    }
    return IPU_OK;
}

/* ---- CUMSUM and CUMPROD (same plan; the opcode picks + or *) ------------------------------ */

ipu_status ipu__k_cumsum(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch) {
    (void)scratch;
    const ipu__rfam_plan *p = ins->plan;
    const void *x = f->ptr[ins->in[0]];
    void *y = f->ptr[ins->out[0]];
    ipu_dtype dt = p->dtype;
    bool fl = is_f(dt), prod = ins->op == IPU_OP_CUMPROD;
    double fa[IB];
    uint64_t ia[IB];
    for (size_t it = b; it < e; it++) {
        red_item r = item_of(p, it);
        int64_t base = r.o * p->n * p->inner + r.c0;
        for (int64_t c = 0; c < r.w; c++) {
            fa[c] = prod ? 1.0 : 0.0;
            ia[c] = prod ? 1 : 0;
        }
        const int64_t mask = ipu__stop_mask(r.w);
        for (int64_t j = 0; j < p->n; j++) {
            ipu_status st = ipu__stop_at(f, j, mask);
            if (st != IPU_OK) return st;
            int64_t k = p->reverse ? p->n - 1 - j : j, rb = base + k * p->inner;
            for (int64_t c = 0; c < r.w; c++) {
                if (fl) {
                    double v = ldf(x, dt, rb + c), next = prod ? fa[c] * v : fa[c] + v;
                    stf(y, dt, rb + c, p->exclusive ? fa[c] : next);
                    fa[c] = next;
                } else {
                    uint64_t v = (uint64_t)ldi(x, dt, rb + c);
                    uint64_t next = prod ? ia[c] * v : ia[c] + v; /* wraps */
                    sti(y, dt, rb + c, p->exclusive ? ia[c] : next);
                    ia[c] = next;
                }
            }
        }
    }
    return IPU_OK;
}

/* ---- TOPK -------------------------------------------------------------------------------
 * Elements of dtypes with 32-bit rank keys (all but int64) and columns of fewer than 2^32 run
 * as packed entries: (rank key << 32) | ~index, one uint64 whose larger value ranks first (the
 * key orders values with NaN above +inf and -0 equal to +0, inverted for the smallest; equal
 * keys by lower index). A min-heap of the k best entries scans the column in the slots of the
 * indices output, then an introsort orders them. int64 columns keep a heap of indices compared
 * through the values. */

/* x's element i as a 32-bit key, larger = ranks first (int64 has none: 0). */
static inline uint32_t rank_key(const void *x, ipu_dtype dt, int64_t i, int largest) {
    uint32_t k = 0;
    switch (dt) {
        case IPU_DTYPE_FLOAT32:
        case IPU_DTYPE_FLOAT16: {
            float v = ldf(x, dt, i);
            if (v != v) {
                k = UINT32_MAX;
                break;
            }
            uint32_t u;
            memcpy(&u, &v, sizeof u);
            u = v == 0.0f ? 0 : u; /* -0 ranks as +0 */
            /* negatives: all bits flipped, the others: the sign bit set (no branch: the sign
             * of random data mispredicts half the time) */
            k = u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
            break;
        }
        case IPU_DTYPE_INT32: k = (uint32_t)((const int32_t *)x)[i] ^ 0x80000000u; break;
        case IPU_DTYPE_UINT32: k = ((const uint32_t *)x)[i]; break;
        case IPU_DTYPE_INT8: k = (uint32_t)(uint8_t)((const int8_t *)x)[i] ^ 0x80u; break;
        case IPU_DTYPE_UINT8: k = ((const uint8_t *)x)[i]; break;
        default: break;
    }
    return largest ? k : ~k;
}

static inline uint64_t entry(const void *x, ipu_dtype dt, int64_t xb, int64_t xs, int64_t i,
                             int largest) {
    return (uint64_t)rank_key(x, dt, xb + i * xs, largest) << 32 | (uint32_t) ~(uint32_t)i;
}

/* Entries h[0], h[s], ... h[(n-1) s]: restore the min-heap below slot i. */
static void sift_min(uint64_t *h, int64_t s, int64_t i, int64_t n) {
    for (;;) {
        int64_t l = 2 * i + 1, w = i;
        if (l < n && h[l * s] < h[w * s]) w = l;
        if (l + 1 < n && h[(l + 1) * s] < h[w * s]) w = l + 1;
        if (w == i) return;
        uint64_t tmp = h[i * s];
        h[i * s] = h[w * s];
        h[w * s] = tmp;
        i = w;
    }
}

/* Sort entries h[0 .. n) (stride s) descending: quicksort (median of three), insertion sort
 * below 16, heapsort past 2 log2(n) levels (no quadratic input); asks the stop hook before
 * partitioning IPU__STOP_CHUNK entries or more. */
static ipu_status sort_desc(const ipu__frame *f, uint64_t *h, int64_t s, int64_t n, int depth) {
#define H(i) h[(i)*s]
    while (n > 16) {
        ipu_status st = n >= IPU__STOP_CHUNK ? ipu__stop_check(f) : IPU_OK;
        if (st != IPU_OK) return st;
        if (depth-- == 0) { /* heapsort: the min-heap's smallest goes to the back */
            for (int64_t j = n / 2; j-- > 0;) sift_min(h, s, j, n);
            for (int64_t end = n - 1; end > 0; end--) {
                uint64_t tmp = H(0);
                H(0) = H(end);
                H(end) = tmp;
                sift_min(h, s, 0, end);
            }
            return IPU_OK;
        }
        uint64_t a = H(0), b = H(n / 2), c = H(n - 1);
        uint64_t piv = a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
        int64_t i = 0, j = n - 1; /* entries are distinct: Hoare's partition, descending */
        for (;;) {
            while (H(i) > piv) i++;
            while (H(j) < piv) j--;
            if (i >= j) break;
            uint64_t tmp = H(i);
            H(i) = H(j);
            H(j) = tmp;
            i++, j--;
        }
        int64_t left = j + 1;  /* [0, left) >= piv >= [left, n) */
        if (left < n - left) { /* recurse on the smaller side, loop on the larger */
            if ((st = sort_desc(f, h, s, left, depth)) != IPU_OK) return st;
            h += left * s;
            n -= left;
        } else {
            if ((st = sort_desc(f, h + left * s, s, n - left, depth)) != IPU_OK) return st;
            n = left;
        }
    }
    for (int64_t i = 1; i < n; i++) {
        uint64_t v = H(i);
        int64_t j = i;
        for (; j > 0 && H(j - 1) < v; j--) H(j) = H(j - 1);
        H(j) = v;
    }
    return IPU_OK;
#undef H
}

/* Elements [k, n) of the column through the min-heap h of the k best so far. Inlined per call
 * site: a constant dt and largest leave one comparison per element in the loop. */
static inline __attribute__((always_inline)) ipu_status topk_scan(const ipu__frame *f,
                                                                  const void *x, ipu_dtype dt,
                                                                  int64_t xb, int64_t s, int64_t n,
                                                                  int64_t k, int largest,
                                                                  uint64_t *h) {
    uint64_t worst = h[0];
    for (int64_t i = k; i < n; i++) {
        ipu_status st = ipu__stop_at(f, i, IPU__STOP_CHUNK - 1);
        if (st != IPU_OK) return st;
        uint64_t v = entry(x, dt, xb, s, i, largest);
        if (v > worst) {
            h[0] = v;
            sift_min(h, s, 0, k);
            worst = h[0];
        }
    }
    return IPU_OK;
}

/* The k best entries of the column x[xb + i * s], best first, in h[0], h[s], ... */
static ipu_status topk_packed(const ipu__frame *f, const void *x, ipu_dtype dt, int64_t xb,
                              int64_t s, int64_t n, int64_t k, int largest, uint64_t *h) {
    for (int64_t j = 0; j < k; j++) h[j * s] = entry(x, dt, xb, s, j, largest);
    if (k < n) { /* the heap serves the scan only: k = n (a whole sort) goes straight on */
        for (int64_t j = k / 2; j-- > 0;) sift_min(h, s, j, k);
        ipu_status st = dt != IPU_DTYPE_FLOAT32 ? topk_scan(f, x, dt, xb, s, n, k, largest, h)
                        : largest ? topk_scan(f, x, IPU_DTYPE_FLOAT32, xb, s, n, k, 1, h)
                                  : topk_scan(f, x, IPU_DTYPE_FLOAT32, xb, s, n, k, 0, h);
        if (st != IPU_OK) return st;
    }
    int depth = 2;
    for (int64_t m = k; m > 1; m >>= 1) depth += 2;
    return sort_desc(f, h, s, k, depth);
}

/* int64 columns: a heap of indices compared through the values. */
typedef struct topk_col {
    const void *x;
    ipu_dtype dt;
    int64_t xb, xs; /* element i of the column: x[xb + i * xs] */
    int64_t *h;     /* heap slot j: h[j * xs] */
    int largest;
} topk_col;

/* Element a ranks after element b in the output: values ordered with NaN above +inf
 * (largest first or smallest first), ties by lower index first. */
static bool worse(const topk_col *t, int64_t a, int64_t b) {
    int ord; /* sign of va - vb in the total order */
    if (is_f(t->dt)) {
        float va = ldf(t->x, t->dt, t->xb + a * t->xs), vb = ldf(t->x, t->dt, t->xb + b * t->xs);
        bool an = va != va, bn = vb != vb;
        ord = an || bn ? (int)an - (int)bn : (va > vb) - (va < vb);
    } else {
        int64_t va = ldi(t->x, t->dt, t->xb + a * t->xs), vb = ldi(t->x, t->dt, t->xb + b * t->xs);
        ord = (va > vb) - (va < vb);
    }
    if (ord == 0) return a > b;
    return t->largest ? ord < 0 : ord > 0;
}

/* Restore the heap (every parent worse than its children) below slot i of a heap of size n. */
static void sift(const topk_col *t, int64_t i, int64_t n) {
    int64_t *h = t->h, s = t->xs;
    for (;;) {
        int64_t l = 2 * i + 1, w = i;
        if (l < n && worse(t, h[l * s], h[w * s])) w = l;
        if (l + 1 < n && worse(t, h[(l + 1) * s], h[w * s])) w = l + 1;
        if (w == i) return;
        int64_t tmp = h[i * s];
        h[i * s] = h[w * s];
        h[w * s] = tmp;
        i = w;
    }
}

ipu_status ipu__k_topk(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                       void *scratch) {
    (void)scratch;
    const ipu__rfam_plan *p = ins->plan;
    const uint8_t *x = f->ptr[ins->in[0]];
    uint8_t *yv = f->ptr[ins->out[0]];
    int64_t *yi = f->ptr[ins->out[1]];
    size_t es = ipu_dtype_size(p->dtype);
    int64_t n = p->n, k = p->k, inner = p->inner;
    for (size_t it = b; it < e; it++) {
        int64_t o = (int64_t)((uint64_t)it / (uint64_t)inner),
                c = (int64_t)((uint64_t)it % (uint64_t)inner);
        int64_t xb = o * n * inner + c, *yc = yi + o * k * inner + c;
        ipu_status st = IPU_OK;
        if (p->dtype != IPU_DTYPE_INT64 && (uint64_t)n <= UINT32_MAX) {
            uint64_t *h = (uint64_t *)yc;
            st = topk_packed(f, x, p->dtype, xb, inner, n, k, p->largest, h);
            if (st != IPU_OK) return st;
            for (int64_t j = 0; j < k; j++) {
                int64_t idx = (uint32_t) ~(uint32_t)h[j * inner];
                yc[j * inner] = idx;
                memcpy(yv + (size_t)(o * k * inner + c + j * inner) * es,
                       x + (size_t)(xb + idx * inner) * es, es);
            }
            continue;
        }
        topk_col t = {x, p->dtype, xb, inner, yc, p->largest};
        for (int64_t j = 0; j < k; j++) t.h[j * inner] = j;
        /* the stop hook is asked every STOP_CHUNK elements scanned or heap steps taken */
        const int64_t mask = IPU__STOP_CHUNK - 1;
        for (int64_t j = k / 2; j-- > 0;) {
            if ((st = ipu__stop_at(f, j, mask)) != IPU_OK) return st;
            sift(&t, j, k);
        }
        for (int64_t i = k; i < n; i++) {
            if ((st = ipu__stop_at(f, i, mask)) != IPU_OK) return st;
            if (worse(&t, t.h[0], i)) {
                t.h[0] = i;
                sift(&t, 0, k);
            }
        }
        for (int64_t end = k - 1; end > 0; end--) { /* worst to the back: best first */
            if ((st = ipu__stop_at(f, end, mask)) != IPU_OK) return st;
            int64_t tmp = t.h[0];
            t.h[0] = t.h[end * inner];
            t.h[end * inner] = tmp;
            sift(&t, 0, end);
        }
        for (int64_t j = 0; j < k; j++)
            memcpy(yv + (size_t)(o * k * inner + c + j * inner) * es,
                   x + (size_t)(t.xb + t.h[j * inner] * inner) * es, es);
    }
    return IPU_OK;
}

/* Plan functions (verify_internal.h, ipu_ops.def's `plan` column): shapes, attributes, the plan. */

/* dtypes with a sum (REDUCE arithmetic functions, CUMSUM): float32, float16, int32, int64 */
static bool has_sum(ipu_dtype t) {
    return is_float(t) || t == IPU_DTYPE_INT32 || t == IPU_DTYPE_INT64;
}
/* dtypes with an order (MAX/MIN, ARG_REDUCE, TOPK) */
static bool is_ordered(ipu_dtype t) {
    return has_sum(t) || t == IPU_DTYPE_INT8 || t == IPU_DTYPE_UINT8 || t == IPU_DTYPE_UINT32;
}

/* attr[i] in {0, 1} */
static ipu_status flag(const vctx *v, uint32_t i, const char *name) {
    int64_t a = v->ins->attr[i];
    if (a != 0 && a != 1) return bad(v, "%s must be 0 or 1, got %lld", name, (long long)a);
    return IPU_OK;
}

/* What every member shares: [outer, n, inner] at attributes [at, at + 3), and the plan. */
typedef struct rfam {
    const vctx *v;
    const ipu__tensor *x, *y;
    ipu__instr *ins;
    uint64_t o, n, in, on; /* on: outer * inner */
    ipu__rfam_plan *p;
} rfam;

/* How the output relates to x: [outer, inner], x's shape, or TOPK's [outer, k, inner]. */
typedef enum { OUT_REDUCED, OUT_SAME, OUT_TOPK } rfam_out;

static ipu_status rfam_begin(rfam *r, const vctx *v, const ipu__tensor *const *inputs,
                             const ipu__tensor *y, ipu__instr *ins, uint32_t at) {
    const int64_t *a = ins->attr;
    *r = (rfam){v, inputs[0], y, ins, 0, 0, 0, 0, NULL};
    for (uint32_t i = 0; i < 3; i++)
        if (a[at + i] < 1)
            return bad(v, "%s = %lld must be >= 1",
                       i == 0   ? "outer"
                       : i == 1 ? "n"
                                : "inner",
                       (long long)a[at + i]);
    uint64_t onn;
    r->o = (uint64_t)a[at];
    r->n = (uint64_t)a[at + 1];
    r->in = (uint64_t)a[at + 2];
    if (!ipu__mul_u64(r->o, r->in, &r->on) || !ipu__mul_u64(r->on, r->n, &onn) ||
        onn != r->x->numel)
        return bad(v, "outer*n*inner = %llu*%llu*%llu != input numel %llu",
                   (unsigned long long)r->o, (unsigned long long)r->n, (unsigned long long)r->in,
                   (unsigned long long)r->x->numel);
    r->p = alloc_plan(sizeof *r->p);
    if (!r->p) return plan_nomem();
    return IPU_OK;
}

/* st: the member's own checks; then the output shape, and the plan is set (or freed). */
static ipu_status rfam_end(rfam *r, ipu_status st, rfam_out out) {
    char s1[160], s2[160];
    const vctx *v = r->v;
    ipu__rfam_plan *p = r->p;
    if (!st && out == OUT_REDUCED && r->on != r->y->numel)
        st = bad(v, "outer*inner = %llu != output numel %llu", (unsigned long long)r->on,
                 (unsigned long long)r->y->numel);
    if (!st && out == OUT_SAME && !same_shape(r->x, r->y))
        st = bad(v, "output y%s differs from input x%s", shape_str(s1, sizeof s1, r->y),
                 shape_str(s2, sizeof s2, r->x));
    if (st) {
        ipu__free(p);
        return st;
    }
    p->dtype = r->x->desc.dtype;
    p->outer = (int64_t)r->o;
    p->n = (int64_t)r->n;
    p->inner = (int64_t)r->in;
    p->nib = (int64_t)ceil_div(r->in, (uint64_t)IPU__RED_IB);
    p->hdr.work = out == OUT_TOPK ? (size_t)r->on : (size_t)(r->o * (uint64_t)p->nib);
    p->hdr.fn = ipu__select_kernel(r->ins->op, p->dtype);
    r->ins->plan = p;
    return IPU_OK;
}

/* REDUCE: attrs fn, outer, n, inner; the function decides the dtypes. */
ipu_status ipu__verify_reduce(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    rfam r;
    ipu_status st = rfam_begin(&r, v, in, y, ins, 1);
    if (st) return st;
    ipu_dtype dt = r.x->desc.dtype;
    int64_t fn = ins->attr[0];
    bool ok = fn == IPU__RED_MAX || fn == IPU__RED_MIN ? is_ordered(dt) || dt == IPU_DTYPE_BOOL
              : fn == IPU__RED_LOG_SUM || fn == IPU__RED_LOG_SUM_EXP ? is_float(dt)
                                                                     : has_sum(dt);
    if (fn < 0 || fn >= IPU__RED_COUNT)
        st = bad(v, "unknown reduce function %lld", (long long)fn);
    else if (!ok)
        st = bad(v, "reduce function %s does not take dtype %s", ipu_reduce_fn_name((int)fn),
                 dt_str(dt));
    r.p->fn = (int)fn;
    return rfam_end(&r, st, OUT_REDUCED);
}

/* ARG_REDUCE: attrs is_min, select_last_index, outer, n, inner; y int64. */
ipu_status ipu__verify_arg_reduce(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                  ipu__instr *ins) {
    rfam r;
    ipu_status st = rfam_begin(&r, v, in, y, ins, 2);
    if (st) return st;
    ipu_dtype dt = r.x->desc.dtype;
    if (!is_ordered(dt))
        st = bad(v, "dtype %s is not supported", dt_str(dt));
    else if (y->desc.dtype != IPU_DTYPE_INT64)
        st = bad(v, "output dtype %s, expected int64", dt_str(y->desc.dtype));
    if (!st) st = flag(v, 0, "is_min");
    if (!st) st = flag(v, 1, "select_last_index");
    r.p->is_min = (int)ins->attr[0];
    r.p->last = (int)ins->attr[1];
    return rfam_end(&r, st, OUT_REDUCED);
}

/* Cumulative scans along the middle axis: attrs outer, n, inner, exclusive, reverse. */
ipu_status ipu__verify_cumulative(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                  ipu__instr *ins) {
    rfam r;
    ipu_status st = rfam_begin(&r, v, in, y, ins, 0);
    if (st) return st;
    ipu_dtype dt = r.x->desc.dtype;
    if (!has_sum(dt) && dt != IPU_DTYPE_UINT32)
        st = bad(v, "dtype %s is not supported", dt_str(dt));
    if (!st) st = flag(v, 3, "exclusive");
    if (!st) st = flag(v, 4, "reverse");
    r.p->exclusive = (int)ins->attr[3];
    r.p->reverse = (int)ins->attr[4];
    return rfam_end(&r, st, OUT_SAME);
}

/* TOPK: attrs outer, n, inner, k, largest, sorted; values and indices (int64) [outer, k, inner]. */
ipu_status ipu__verify_topk(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins) {
    char s1[160], s2[160];
    rfam r;
    ipu_status st = rfam_begin(&r, v, in, y, ins, 0);
    if (st) return st;
    ipu_dtype dt = r.x->desc.dtype;
    const int64_t *a = ins->attr;
    const ipu__tensor *yi = &v->e->tensors[ins->out[1]];
    uint64_t k = (uint64_t)a[3], okn;
    if (!is_ordered(dt))
        st = bad(v, "dtype %s is not supported", dt_str(dt));
    else if (yi->desc.dtype != IPU_DTYPE_INT64)
        st = bad(v, "indices dtype %s, expected int64", dt_str(yi->desc.dtype));
    else if (a[3] < 1 || k > r.n)
        st = bad(v, "k = %lld outside [1, n = %llu]", (long long)a[3], (unsigned long long)r.n);
    else if (!same_shape(y, yi))
        st = bad(v, "values y%s and indices%s differ in shape", shape_str(s1, sizeof s1, y),
                 shape_str(s2, sizeof s2, yi));
    else if (!ipu__mul_u64(r.on, k, &okn) || okn != y->numel)
        st = bad(v, "outer*k*inner = %llu != output numel %llu", (unsigned long long)(r.on * k),
                 (unsigned long long)y->numel);
    if (!st) st = flag(v, 4, "largest");
    if (!st) st = flag(v, 5, "sorted");
    r.p->k = a[3];
    r.p->largest = (int)a[4];
    return rfam_end(&r, st, OUT_TOPK);
}

/* LOG_SOFTMAX, HARDMAX: attrs outer, axis_len, inner; float32/float16, y of x's shape. */
ipu_status ipu__verify_float_axis(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                                  ipu__instr *ins) {
    rfam r;
    ipu_status st = rfam_begin(&r, v, in, y, ins, 0);
    if (st) return st;
    ipu_dtype dt = r.x->desc.dtype;
    if (!is_float(dt)) st = bad(v, "dtype %s is not float32/float16", dt_str(dt));
    return rfam_end(&r, st, OUT_SAME);
}
