/* Small-M single-precision GEMM (ipu__sgemv, kernels.h): for at most IPU__GEMV_MAX_M rows of A,
 * B is streamed once without packing, AVX2+FMA where the sgemm micro-kernel in use is AVX2 or
 * AVX-512 (gemm_f32.c's dispatch), portable C otherwise. */
#include <math.h>
#include <string.h>

#include "isa.h"
#include "kernels.h"

#if IPU_X86
#include <immintrin.h>
#endif

typedef float v4f __attribute__((vector_size(16)));

/* ---- small M: GEMV-style, streaming B once ---------------------------------------------------
 * Every output element is summed in the same order whatever range of columns a call covers, so
 * results do not depend on how work items are split. */

/* y[i][j] = sum_k x[i][k] * w[j][k] (w rows contiguous): NT rows of w at a time. */
#define GEMV_T_BODY(NT, VT, ZERO, LOAD, FMA, HSUM, SFMA)                                   \
    for (int64_t i = 0; i < m; i++) {                                                      \
        const float *xi = x + i * ldx;                                                     \
        VT acc[NT];                                                                        \
        for (int r = 0; r < NT; r++) acc[r] = ZERO;                                        \
        int64_t p = 0;                                                                     \
        for (; p + VL <= k; p += VL) {                                                     \
            VT xv = LOAD(xi + p);                                                          \
            for (int r = 0; r < NT; r++) acc[r] = FMA(xv, LOAD(w0 + r * ldw + p), acc[r]); \
        }                                                                                  \
        for (int r = 0; r < NT; r++) {                                                     \
            float s = HSUM(acc[r]);                                                        \
            for (int64_t q = p; q < k; q++) s = SFMA(xi[q], w0[r * ldw + q], s);           \
            y[i * ldy + j + r] = s;                                                        \
        }                                                                                  \
    }

#if IPU_X86
#define VL 8
__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define FMA8(a, b, c) _mm256_fmadd_ps(a, b, c)
__attribute__((target("avx2,fma"))) static void gemv_t_avx2(int64_t m, int64_t n, int64_t k,
                                                            const float *x, int64_t ldx,
                                                            const float *w, int64_t ldw, float *y,
                                                            int64_t ldy) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *w0 = w + j * ldw;
        GEMV_T_BODY(4, __m256, _mm256_setzero_ps(), _mm256_loadu_ps, FMA8, hsum8, fmaf)
    }
    for (; j < n; j++) {
        const float *w0 = w + j * ldw;
        GEMV_T_BODY(1, __m256, _mm256_setzero_ps(), _mm256_loadu_ps, FMA8, hsum8, fmaf)
    }
}

/* y[i][0..n) = sum_k x[i][k] * b[k][0..n) (b rows contiguous), 8 rows of b per pass over y. */
__attribute__((target("avx2,fma"))) static void gemv_n_avx2(int64_t m, int64_t n, int64_t k,
                                                            const float *x, int64_t ldx,
                                                            const float *b, int64_t ldb, float *y,
                                                            int64_t ldy) {
    enum { R = 8 };
    for (int64_t i = 0; i < m; i++) memset(y + i * ldy, 0, sizeof(float) * (size_t)n);
    for (int64_t p = 0; p < k; p += R) {
        int nk = k - p < R ? (int)(k - p) : R;
        const float *b0 = b + p * ldb;
        for (int64_t i = 0; i < m; i++) {
            const float *xi = x + i * ldx + p;
            float *yi = y + i * ldy;
            int64_t j = 0;
            if (nk == R) {
                __m256 xv[R];
                for (int r = 0; r < R; r++) xv[r] = _mm256_broadcast_ss(xi + r);
                for (; j + 8 <= n; j += 8) {
                    __m256 v = _mm256_loadu_ps(yi + j);
                    for (int r = 0; r < R; r++)
                        v = _mm256_fmadd_ps(xv[r], _mm256_loadu_ps(b0 + r * ldb + j), v);
                    _mm256_storeu_ps(yi + j, v);
                }
            }
            for (; j < n; j++) {
                float v = yi[j];
                for (int r = 0; r < nk; r++) v = fmaf(xi[r], b0[r * ldb + j], v);
                yi[j] = v;
            }
        }
    }
}
#undef VL
#endif

#define VL 4
static inline float hsum4(v4f v) { return (v[0] + v[2]) + (v[1] + v[3]); }
static inline v4f ld4(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}
#define FMA4(a, b, c) ((c) + (a) * (b))
#define SFMA(a, b, c) ((c) + (a) * (b))
static void gemv_t_portable(int64_t m, int64_t n, int64_t k, const float *x, int64_t ldx,
                            const float *w, int64_t ldw, float *y, int64_t ldy) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *w0 = w + j * ldw;
        GEMV_T_BODY(4, v4f, ((v4f){0, 0, 0, 0}), ld4, FMA4, hsum4, SFMA)
    }
    for (; j < n; j++) {
        const float *w0 = w + j * ldw;
        GEMV_T_BODY(1, v4f, ((v4f){0, 0, 0, 0}), ld4, FMA4, hsum4, SFMA)
    }
}
#undef VL

static void gemv_n_portable(int64_t m, int64_t n, int64_t k, const float *x, int64_t ldx,
                            const float *b, int64_t ldb, float *y, int64_t ldy) {
    for (int64_t i = 0; i < m; i++) {
        float *yi = y + i * ldy;
        memset(yi, 0, sizeof(float) * (size_t)n);
        for (int64_t p = 0; p < k; p++) {
            float xv = x[i * ldx + p];
            const float *br = b + p * ldb;
            for (int64_t j = 0; j < n; j++) yi[j] += xv * br[j];
        }
    }
}

typedef void (*gemv_fn)(int64_t m, int64_t n, int64_t k, const float *x, int64_t ldx,
                        const float *b, int64_t ldb, float *y, int64_t ldy);

/* gemv_n over K-blocks of GEMV_KB rows, each summed apart and then added: short accumulation
 * chains, so long K rounds no worse than the blocked sgemm (K-blocks of KC). */
#define GEMV_KB ((int64_t)64)
static void gemv_n_blocked(gemv_fn fn, int64_t m, int64_t n, int64_t k, const float *x, int64_t ldx,
                           const float *b, int64_t ldb, float *y, int64_t ldy) {
    enum { NCH = 1024 };
    float t[IPU__GEMV_MAX_M * NCH];
    for (int64_t j0 = 0; j0 < n; j0 += NCH) {
        int64_t nc = n - j0 < NCH ? n - j0 : NCH;
        fn(m, nc, k < GEMV_KB ? k : GEMV_KB, x, ldx, b + j0, ldb, y + j0, ldy);
        for (int64_t k0 = GEMV_KB; k0 < k; k0 += GEMV_KB) {
            int64_t kc = k - k0 < GEMV_KB ? k - k0 : GEMV_KB;
            fn(m, nc, kc, x + k0, ldx, b + k0 * ldb + j0, ldb, t, NCH);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < nc; j++) y[i * ldy + j0 + j] += t[i * NCH + j];
        }
    }
}

void ipu__sgemv(const ipu__sgemm_args *g, void *scratch, size_t scratch_bytes) {
    int64_t m = g->m, n = g->n, k = g->k;
    if (m <= 0 || n <= 0) return;
    const float *x = g->a;
    int64_t ldx = g->a_rs;
    if (g->a_cs != 1 && m > 1) { /* transposed A: copy its rows into scratch */
        float *t = scratch;
        (void)scratch_bytes; /* m * k floats fit: ipu__mm_gemv_ok */
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++) t[i * k + p] = x[i * g->a_rs + p * g->a_cs];
        x = t;
        ldx = k;
    }
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    int isa = u.isa; /* the GEMV kernels follow the sgemm's ISA choice (tests force it) */
    const float *b = g->b;
    if (g->b_cs == 1) {
#if IPU_X86
        if (isa >= 2) {
            gemv_n_blocked(gemv_n_avx2, m, n, k, x, ldx, b, g->b_rs, g->c, g->ldc);
            return;
        }
#endif
        gemv_n_blocked(gemv_n_portable, m, n, k, x, ldx, b, g->b_rs, g->c, g->ldc);
    } else {
#if IPU_X86
        if (isa >= 2) {
            gemv_t_avx2(m, n, k, x, ldx, b, g->b_cs, g->c, g->ldc);
            return;
        }
#endif
        gemv_t_portable(m, n, k, x, ldx, b, g->b_cs, g->c, g->ldc);
    }
    (void)isa;
}
