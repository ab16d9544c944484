/* Packed, cache-blocked single-precision GEMM: C[m x n] = A[m x k] * B[k x n].
 *
 * B is packed in K-blocks of KC rows into NR-wide column panels (Bp[panel][k][NR]), A into
 * MR-tall row panels (Ap[panel][k][MR]); both are zero-padded, so the register-blocked
 * micro-kernel always computes a full MR x NR tile (edge tiles go through a small buffer).
 * Micro-kernels: AVX-512 (12 x 32), AVX2+FMA (6 x 16) and portable C (6 x 8), chosen at run
 * time with __builtin_cpu_supports. Packing buffers live in the caller's scratch. fp16 operands
 * are converted to float32 while packing. */
#include <string.h>

#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#define IPU_X86 1
#include <immintrin.h>
#else
#define IPU_X86 0
#endif

#define KC IPU__SGEMM_KC
#define MAX_MR IPU__SGEMM_MAX_MR
#define MAX_NR IPU__SGEMM_MAX_NR

typedef ipu__ukr_fn ukr_fn;

/* ---- micro-kernels -------------------------------------------------------------------------- */

#if IPU_X86
#define MR512 12
__attribute__((target("avx512f"))) static void ukr_avx512(int64_t kc, const float *ap,
                                                          const float *bp, float *c, int64_t ldc,
                                                          int acc) {
    __m512 c0[MR512], c1[MR512];
#pragma GCC unroll 16
    for (int i = 0; i < MR512; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
        _mm_prefetch((const char *)(bp + 8 * 32), _MM_HINT_T0);
#pragma GCC unroll 16
        for (int i = 0; i < MR512; i++) {
            __m512 a = _mm512_set1_ps(ap[i]);
            c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
        }
        ap += MR512;
        bp += 32;
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR512; i++) {
        float *r = c + i * ldc;
        if (acc) {
            c0[i] = _mm512_add_ps(c0[i], _mm512_loadu_ps(r));
            c1[i] = _mm512_add_ps(c1[i], _mm512_loadu_ps(r + 16));
        }
        _mm512_storeu_ps(r, c0[i]);
        _mm512_storeu_ps(r + 16, c1[i]);
    }
}

#define MR256 6
__attribute__((target("avx2,fma"))) static void ukr_avx2(int64_t kc, const float *ap,
                                                         const float *bp, float *c, int64_t ldc,
                                                         int acc) {
    __m256 c0[MR256], c1[MR256];
#pragma GCC unroll 8
    for (int i = 0; i < MR256; i++) c0[i] = c1[i] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 8
        for (int i = 0; i < MR256; i++) {
            __m256 a = _mm256_broadcast_ss(ap + i);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
        ap += MR256;
        bp += 16;
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR256; i++) {
        float *r = c + i * ldc;
        if (acc) {
            c0[i] = _mm256_add_ps(c0[i], _mm256_loadu_ps(r));
            c1[i] = _mm256_add_ps(c1[i], _mm256_loadu_ps(r + 8));
        }
        _mm256_storeu_ps(r, c0[i]);
        _mm256_storeu_ps(r + 8, c1[i]);
    }
}

#endif

/* Portable: GCC vector extensions (SSE2 / NEON / scalar code generation as available). */
#define MRP 6
#define NRP 8
typedef float v4f __attribute__((vector_size(16)));
static void ukr_portable(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                         int acc) {
    v4f c0[MRP], c1[MRP];
    for (int i = 0; i < MRP; i++) c0[i] = c1[i] = (v4f){0, 0, 0, 0};
    for (int64_t k = 0; k < kc; k++) {
        v4f b0, b1;
        memcpy(&b0, bp, sizeof b0);
        memcpy(&b1, bp + 4, sizeof b1);
        for (int i = 0; i < MRP; i++) {
            v4f a = {ap[i], ap[i], ap[i], ap[i]};
            c0[i] += a * b0;
            c1[i] += a * b1;
        }
        ap += MRP;
        bp += NRP;
    }
    for (int i = 0; i < MRP; i++) {
        float *r = c + i * ldc;
        if (acc) {
            v4f o0, o1;
            memcpy(&o0, r, sizeof o0);
            memcpy(&o1, r + 4, sizeof o1);
            c0[i] += o0;
            c1[i] += o1;
        }
        memcpy(r, &c0[i], sizeof c0[i]);
        memcpy(r + 4, &c1[i], sizeof c1[i]);
    }
}

typedef struct ukr_desc {
    ukr_fn fn;
    int mr, nr, isa;
} ukr_desc;

static const ukr_desc UKRS[4] = {
    {ukr_portable, MRP, NRP, 1},
    {ukr_portable, MRP, NRP, 1},
#if IPU_X86
    {ukr_avx2, MR256, 16, 2},
    {ukr_avx512, MR512, 32, 3},
#endif
};

static int forced_isa; /* 0 = auto; set by tests only (relaxed atomics) */

static int best_isa(void) {
#if IPU_X86
    if (__builtin_cpu_supports("avx512f")) return 3;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
#endif
    return 1;
}

int ipu__sgemm_set_isa(int isa) {
    int best = best_isa();
    if (isa < 0 || isa > best) isa = 0;
    __atomic_store_n(&forced_isa, isa, __ATOMIC_RELAXED);
    return isa ? isa : best;
}

static const ukr_desc *select_ukr(void) {
    int isa = __atomic_load_n(&forced_isa, __ATOMIC_RELAXED);
    return &UKRS[isa ? isa : best_isa()];
}

void ipu__sgemm_ukr(ipu__ukr *u) {
    const ukr_desc *d = select_ukr();
    u->fn = d->fn;
    u->mr = d->mr;
    u->nr = d->nr;
    u->isa = d->isa;
}

/* ---- packing -------------------------------------------------------------------------------- */

static inline float ld_elem(const void *base, int64_t off, int f16) {
    return f16 ? ipu__f16_to_f32(((const uint16_t *)base)[off]) : ((const float *)base)[off];
}

/* Copy n contiguous elements (f32 or f16) to float. */
static inline void ld_row(const void *base, int64_t off, int f16, float *dst, int64_t n) {
    if (f16)
        ipu__cvt_f16_to_f32((const uint16_t *)base + off, dst, (size_t)n);
    else
        memcpy(dst, (const float *)base + off, sizeof(float) * (size_t)n);
}

/* Bp[q][k][0..nr) = B(k0+k, j0+q*nr+j), zero beyond nc. */
static void pack_b(const ipu__sgemm_args *g, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                   int nr, float *bp) {
    for (int64_t q = 0; q < nc; q += nr) {
        int64_t w = nc - q < nr ? nc - q : nr;
        float *dst = bp + q * kc;
        int64_t col = j0 + q;
        if (g->b_cs == 1) {
            for (int64_t k = 0; k < kc; k++) {
                ld_row(g->b, (k0 + k) * g->b_rs + col, g->b_f16, dst + k * nr, w);
                for (int64_t j = w; j < nr; j++) dst[k * nr + j] = 0.0f;
            }
        } else {
            if (w < nr)
                for (int64_t k = 0; k < kc; k++)
                    for (int64_t j = w; j < nr; j++) dst[k * nr + j] = 0.0f;
            for (int64_t j = 0; j < w; j++) {
                int64_t base = (col + j) * g->b_cs + k0 * g->b_rs;
                if (!g->b_f16 && g->b_rs == 1) {
                    const float *s = (const float *)g->b + base;
                    for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = s[k];
                } else {
                    for (int64_t k = 0; k < kc; k++)
                        dst[k * nr + j] = ld_elem(g->b, base + k * g->b_rs, g->b_f16);
                }
            }
        }
    }
}

/* Ap[p][k][0..mr) = A(i0+p*mr+i, k0+k), zero beyond m. */
void ipu__sgemm_pack_a(const ipu__sgemm_args *g, int64_t k0, int64_t kc, int mr, float *ap) {
    float tmp[KC];
    for (int64_t p = 0; p < g->m; p += mr) {
        int64_t h = g->m - p < mr ? g->m - p : mr;
        float *dst = ap + p * kc;
        if (h < mr)
            for (int64_t k = 0; k < kc; k++)
                for (int64_t i = h; i < mr; i++) dst[k * mr + i] = 0.0f;
        if (g->a_rs == 1 && !g->a_f16) { /* transposed A: rows of Ap are contiguous */
            for (int64_t k = 0; k < kc; k++)
                memcpy(dst + k * mr, (const float *)g->a + (k0 + k) * g->a_cs + p,
                       sizeof(float) * (size_t)h);
            continue;
        }
        if (g->a_cs == 1 && !g->a_f16) { /* row-major A: read h rows side by side */
            const float *rows[MAX_MR];
            for (int64_t i = 0; i < h; i++) rows[i] = (const float *)g->a + (p + i) * g->a_rs + k0;
            for (int64_t k = 0; k < kc; k++)
                for (int64_t i = 0; i < h; i++) dst[k * mr + i] = rows[i][k];
            continue;
        }
        for (int64_t i = 0; i < h; i++) {
            int64_t base = (p + i) * g->a_rs + k0 * g->a_cs;
            if (g->a_cs == 1) {
                const float *s;
                if (g->a_f16) {
                    ipu__cvt_f16_to_f32((const uint16_t *)g->a + base, tmp, (size_t)kc);
                    s = tmp;
                } else {
                    s = (const float *)g->a + base;
                }
                for (int64_t k = 0; k < kc; k++) dst[k * mr + i] = s[k];
            } else {
                for (int64_t k = 0; k < kc; k++)
                    dst[k * mr + i] = ld_elem(g->a, base + k * g->a_cs, g->a_f16);
            }
        }
    }
}

/* ---- driver --------------------------------------------------------------------------------- */

void ipu__sgemm(const ipu__sgemm_args *g, void *scratch, size_t scratch_bytes) {
    const ukr_desc *u = select_ukr();
    const int mr = u->mr, nr = u->nr;
    int64_t m = g->m, n = g->n, k = g->k;
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++) memset(g->c + i * g->ldc, 0, sizeof(float) * (size_t)n);
        return;
    }
    int64_t mpad = (m + mr - 1) / mr * mr;
    /* Ap first (64-byte aligned scratch), Bp after it. */
    float *ap = scratch;
    size_t ap_bytes = ((size_t)mpad * KC * sizeof(float) + 63) & ~(size_t)63;
    float *bp = (float *)((char *)scratch + ap_bytes);
    int64_t nc_max = (int64_t)((scratch_bytes - ap_bytes) / (KC * sizeof(float))) / nr * nr;
    float edge[MAX_MR * MAX_NR] __attribute__((aligned(64)));
    for (int64_t j0 = 0; j0 < n; j0 += nc_max) {
        int64_t nc = n - j0 < nc_max ? n - j0 : nc_max;
        for (int64_t k0 = 0; k0 < k; k0 += KC) {
            int64_t kc = k - k0 < KC ? k - k0 : KC;
            int acc = k0 > 0;
            pack_b(g, k0, kc, j0, nc, nr, bp);
            ipu__sgemm_pack_a(g, k0, kc, mr, ap);
            for (int64_t jr = 0; jr < nc; jr += nr) {
                int64_t w = nc - jr < nr ? nc - jr : nr;
                const float *bpan = bp + jr * kc;
                for (int64_t ir = 0; ir < m; ir += mr) {
                    int64_t h = m - ir < mr ? m - ir : mr;
                    float *c = g->c + ir * g->ldc + j0 + jr;
                    if (h == mr && w == nr) {
                        u->fn(kc, ap + ir * kc, bpan, c, g->ldc, acc);
                    } else {
                        u->fn(kc, ap + ir * kc, bpan, edge, nr, 0);
                        for (int64_t i = 0; i < h; i++)
                            for (int64_t j = 0; j < w; j++)
                                c[i * g->ldc + j] =
                                    acc ? c[i * g->ldc + j] + edge[i * nr + j] : edge[i * nr + j];
                    }
                }
            }
        }
    }
}
