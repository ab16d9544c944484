/* Packed, cache-blocked single-precision GEMM: C[m x n] = A[m x k] * B[k x n].
 *
 * B is packed in K-blocks of KC rows into NR-wide column panels (Bp[panel][k][NR]), or comes
 * packed whole (ipu__sgemm_pack_b_all: weights packed at load); A is packed in blocks of MC rows
 * into MR-tall row panels (Ap[panel][k][MR]); both are zero-padded, so the register-blocked
 * micro-kernel computes whole MR x NR tiles, except at the edges, where it computes the rows
 * they need rounded up to 4 (AVX-512) or 2 (AVX2) and stores the tile's h x w corner masked
 * (part).
 * Micro-kernels: AVX-512 (12 x 32), AVX2+FMA (6 x 16) and portable C (6 x 8), chosen at run
 * time from the level in use (sgemm_isa: AVX2 on AMD Zen 4); packing uses AVX2 copies and 8 x 8
 * transposes where the AVX2 or AVX-512 kernel runs. Packing buffers live in the caller's
 * scratch. fp16 operands are converted to float32 while packing; the AVX-512 and AVX2 kernels
 * with an epilogue can store their tile in half (ipu__tile_ep.yh: vcvtps2ph, round to nearest
 * even, each value converted once after the epilogue). For at most a few rows of A,
 * ipu__sgemv (gemv_f32.c) streams B once without packing. */
#include <string.h>

#include "isa.h"
#include "kernels.h"
#include "tr8.h"

#if IPU_X86
#include <immintrin.h>
#endif

#define KC IPU__SGEMM_KC
#define MAX_MR IPU__SGEMM_MAX_MR
#define MAX_NR IPU__SGEMM_MAX_NR

typedef ipu__ukr_fn ukr_fn;

/* ---- micro-kernels -------------------------------------------------------------------------- */

#if IPU_X86
/* The lines of 32 floats from p (the middle one only when p is not on a line boundary). */
static inline __attribute__((always_inline)) void prefetch_row128(const float *p, int mid) {
    _mm_prefetch((const char *)p, _MM_HINT_T0);
    if (mid) _mm_prefetch((const char *)(p + 16), _MM_HINT_T0);
    _mm_prefetch((const char *)(p + 31), _MM_HINT_T0);
}

#define MR512 12
/* 12 x 32 tiles, the AVX2 kernel's shape doubled in width (24 accumulators of the 32 zmm).
 * B row k: bp + 32 k (packed panel, aligned) or, with off, bp + off[k] (rows read in place);
 * A column k: ap + 12 k (packed panel) or, with aoff, ap + aoff[k]. ep as ukr_avx2_body's.
 * The first mv rows are computed (a constant: 12, or 4 or 8 for edge tiles), the first h of
 * them stored, w columns of each (32: all; fewer masked). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
ukr_avx512_body(int64_t kc, const float *ap, const int64_t *aoff, const float *bp,
                const int64_t *off, float *c, int64_t ldc, int acc, const ipu__tile_ep *ep,
                const int mv, const int h, const int w, const float *pf, int64_t pfn,
                const int half) {
    __m512 c0[MR512], c1[MR512];
    const int64_t pfs = pfn ? (kc > pfn ? kc / pfn : 1) : 0; /* iterations per line fetched */
    int64_t pfc = pfs, pfj = 0;
    const __mmask16 m0 = w >= 16 ? 0xFFFF : (__mmask16)((1u << w) - 1);
    const __mmask16 m1 = w >= 32 ? 0xFFFF : w <= 16 ? 0 : (__mmask16)((1u << (w - 16)) - 1);
    /* C's tile is read at the end, and so is the residual's (rows apart: no prefetcher sees
     * them); a row's 128 bytes span three lines unless it starts on one (numpy's arrays start
     * 16 bytes in: the middle line was fetched late, 8 % of sgemm's time at n = 2048) */
    const int mid = ((uintptr_t)c | (uintptr_t)ldc << 2) & 63 ||
                    (ep && ep->res && ((uintptr_t)ep->res | (uintptr_t)ep->ldr << 2) & 63);
#pragma GCC unroll 16
    for (int i = 0; i < mv; i++) {
        c0[i] = c1[i] = _mm512_setzero_ps();
        if (!half || acc) prefetch_row128(c + i * ldc, mid); /* (half: C is read only) */
        if (half && ep->resh) _mm_prefetch((const char *)(ep->resh + i * ep->ldr), _MM_HINT_T0);
        if (!half && ep && ep->res) prefetch_row128(ep->res + i * ep->ldr, mid);
    }
    for (int64_t k = 0; k < kc; k++) {
        const float *b = off ? bp + off[k] : bp + 32 * k;
        __m512 b0 = off ? _mm512_loadu_ps(b) : _mm512_load_ps(b);
        __m512 b1 = off ? _mm512_loadu_ps(b + 16) : _mm512_load_ps(b + 16);
        if (!off) _mm_prefetch((const char *)(b + 8 * 32), _MM_HINT_T0);
        if (pf && --pfc == 0) {
            pfc = pfs;
            if (pfj < pfn) _mm_prefetch((const char *)(pf + 16 * pfj++), _MM_HINT_T0);
        }
        const float *a_k = aoff ? ap + aoff[k] : ap;
#pragma GCC unroll 16
        for (int i = 0; i < mv; i++) {
            __m512 a = _mm512_set1_ps(a_k[i]);
            c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
        }
        if (!aoff) ap += MR512;
    }
    if (pf) ipu__prefetch_lines(pf + 16 * pfj, pfn - pfj); /* the stream's rest (kc < pfn) */
        /* (w < 32: columns past w are neither read nor written, masked) */
#define LD512(P, M) (w == 32 ? _mm512_loadu_ps(P) : _mm512_maskz_loadu_ps(M, P))
#pragma GCC unroll 16
    for (int i = 0; i < mv; i++) {
        if (i >= h) break;
        float *r = c + i * ldc;
        if (acc) {
            c0[i] = _mm512_add_ps(c0[i], LD512(r, m0));
            c1[i] = _mm512_add_ps(c1[i], LD512(r + 16, m1));
        }
        if (ep && ep->bias) {
            __m512 b = _mm512_set1_ps(ep->bias[i]);
            c0[i] = _mm512_add_ps(c0[i], b);
            c1[i] = _mm512_add_ps(c1[i], b);
        }
        if (!half && ep && ep->res) {
            c0[i] = _mm512_add_ps(c0[i], LD512(ep->res + i * ep->ldr, m0));
            c1[i] = _mm512_add_ps(c1[i], LD512(ep->res + i * ep->ldr + 16, m1));
        }
        if (half && ep->resh) { /* (no 16-bit masked loads in AVX-512F: edges staged) */
            const uint16_t *q = ep->resh + i * ep->ldr;
            uint16_t t[32] = {0};
            if (w < 32) q = memcpy(t, q, sizeof *q * (size_t)w);
            c0[i] = _mm512_add_ps(c0[i], _mm512_cvtph_ps(_mm256_loadu_si256((const void *)q)));
            c1[i] = _mm512_add_ps(c1[i],
                                  _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(q + 16))));
        }
        if (ep && ep->relu) { /* v if v > 0 or NaN, else +0 */
            __m512 z = _mm512_setzero_ps();
            c0[i] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(c0[i], z, _CMP_NLE_UQ), c0[i]);
            c1[i] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(c1[i], z, _CMP_NLE_UQ), c1[i]);
        }
        if (half) { /* round to nearest even, as f16cvt.c's (edges staged, as above) */
            uint16_t t[32], *d = w == 32 ? ep->yh + i * ep->ldy : t;
            _mm256_storeu_si256((void *)d, _mm512_cvtps_ph(c0[i], _MM_FROUND_TO_NEAREST_INT));
            _mm256_storeu_si256((void *)(d + 16),
                                _mm512_cvtps_ph(c1[i], _MM_FROUND_TO_NEAREST_INT));
            if (w < 32) memcpy(ep->yh + i * ep->ldy, t, sizeof *t * (size_t)w);
        } else if (w == 32) {
            _mm512_storeu_ps(r, c0[i]);
            _mm512_storeu_ps(r + 16, c1[i]);
        } else {
            _mm512_mask_storeu_ps(r, m0, c0[i]);
            _mm512_mask_storeu_ps(r + 16, m1, c1[i]);
        }
    }
#undef LD512
}

__attribute__((target("avx512f"))) static void ukr_avx512(int64_t kc, const float *ap,
                                                          const float *bp, float *c, int64_t ldc,
                                                          int acc, const float *pf, int64_t pfn) {
    ukr_avx512_body(kc, ap, NULL, bp, NULL, c, ldc, acc, NULL, MR512, MR512, 32, pf, pfn, 0);
}

__attribute__((target("avx512f"))) static void ukr_avx512_ep(int64_t kc, const float *ap,
                                                             const float *bp, float *c, int64_t ldc,
                                                             int acc, const ipu__tile_ep *ep) {
    if (ep && ep->yh)
        ukr_avx512_body(kc, ap, NULL, bp, NULL, c, ldc, acc, ep, MR512, MR512, 32, NULL, 0, 1);
    else
        ukr_avx512_body(kc, ap, NULL, bp, NULL, c, ldc, acc, ep, MR512, MR512, 32, NULL, 0, 0);
}

__attribute__((target("avx512f"))) static void ukr_avx512_rows(int64_t kc, const float *ap,
                                                               const float *b, const int64_t *off,
                                                               float *c, int64_t ldc, int acc,
                                                               const ipu__tile_ep *ep) {
    if (ep && ep->yh)
        ukr_avx512_body(kc, ap, NULL, b, off, c, ldc, acc, ep, MR512, MR512, 32, NULL, 0, 1);
    else
        ukr_avx512_body(kc, ap, NULL, b, off, c, ldc, acc, ep, MR512, MR512, 32, NULL, 0, 0);
}

__attribute__((target("avx512f"))) static void ukr_avx512_arows(int64_t kc, const float *a,
                                                                const float *bp,
                                                                const int64_t *aoff, float *c,
                                                                int64_t ldc, int acc,
                                                                const ipu__tile_ep *ep) {
    if (ep && ep->yh)
        ukr_avx512_body(kc, a, aoff, bp, NULL, c, ldc, acc, ep, MR512, MR512, 32, NULL, 0, 1);
    else
        ukr_avx512_body(kc, a, aoff, bp, NULL, c, ldc, acc, ep, MR512, MR512, 32, NULL, 0, 0);
}

/* Edge tiles: 4, 8 or 12 rows computed (A's panel is zero-padded), h rows and w columns
 * stored; ep->yh: stored in half, as by every variant (ipu__tile_ep). A body per case of the
 * arguments its k loop and store test (rows computed, B packed or read in place, float32 or
 * half store): a run-time test of off in the k loop made an edge tile cost four full ones. */
#define IPU__PART_BODY(BODY, MV)                                                    \
    do {                                                                            \
        if (ep && ep->yh) {                                                         \
            if (off)                                                                \
                BODY(kc, ap, NULL, b, off, c, ldc, acc, ep, MV, h, w, NULL, 0, 1);  \
            else                                                                    \
                BODY(kc, ap, NULL, b, NULL, c, ldc, acc, ep, MV, h, w, NULL, 0, 1); \
        } else if (off) {                                                           \
            BODY(kc, ap, NULL, b, off, c, ldc, acc, ep, MV, h, w, NULL, 0, 0);      \
        } else {                                                                    \
            BODY(kc, ap, NULL, b, NULL, c, ldc, acc, ep, MV, h, w, NULL, 0, 0);     \
        }                                                                           \
    } while (0)

__attribute__((target("avx512f"))) static void ukr_avx512_part(int h, int w, int64_t kc,
                                                               const float *ap, const float *b,
                                                               const int64_t *off, float *c,
                                                               int64_t ldc, int acc,
                                                               const ipu__tile_ep *ep) {
    if (h <= 4)
        IPU__PART_BODY(ukr_avx512_body, 4);
    else if (h <= 8)
        IPU__PART_BODY(ukr_avx512_body, 8);
    else
        IPU__PART_BODY(ukr_avx512_body, MR512);
}

#define MR256 6
/* (target f16c: the half store of ipu__tile_ep.yh, taken only where ipu__ukr.half says the CPU
 * has F16C) */
/* B row k: bp + 16 k (packed panel, aligned) or, with off, bp + off[k] (rows read in place).
 * A column k: ap + 6 k (packed panel) or, with aoff, ap + aoff[k] (6 consecutive floats read in
 * place). mv, h and w as ukr_avx512_body's (6 rows, 16 columns). */
__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) void
ukr_avx2_body(int64_t kc, const float *ap, const int64_t *aoff, const float *bp, const int64_t *off,
              float *c, int64_t ldc, int acc, const ipu__tile_ep *ep, const int mv, const int h,
              const int w, const float *pf, int64_t pfn, const int half) {
    __m256 c0[MR256], c1[MR256];
    const int64_t pfs = pfn ? (kc > pfn ? kc / pfn : 1) : 0; /* as ukr_avx512_body's */
    int64_t pfc = pfs, pfj = 0;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w), lane);
    const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w - 8), lane);
#pragma GCC unroll 8
    for (int i = 0; i < mv; i++) {
        c0[i] = c1[i] = _mm256_setzero_ps();
        if (!half || acc) { /* C's tile is read at the end */
            _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * ldc + 15), _MM_HINT_T0);
        }
        if (half && ep->resh) _mm_prefetch((const char *)(ep->resh + i * ep->ldr), _MM_HINT_T0);
        if (!half && ep && ep->res) { /* as ukr_avx512_body's */
            _mm_prefetch((const char *)(ep->res + i * ep->ldr), _MM_HINT_T0);
            _mm_prefetch((const char *)(ep->res + i * ep->ldr + 15), _MM_HINT_T0);
        }
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        const float *b = off ? bp + off[k] : bp + 16 * k;
        __m256 b0 = off ? _mm256_loadu_ps(b) : _mm256_load_ps(b);
        __m256 b1 = off ? _mm256_loadu_ps(b + 8) : _mm256_load_ps(b + 8);
        if (pf && --pfc == 0) {
            pfc = pfs;
            if (pfj < pfn) _mm_prefetch((const char *)(pf + 16 * pfj++), _MM_HINT_T0);
        }
        const float *a_k = aoff ? ap + aoff[k] : ap;
#pragma GCC unroll 8
        for (int i = 0; i < mv; i++) {
            __m256 a = _mm256_broadcast_ss(a_k + i);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
        if (!aoff) ap += MR256;
    }
    if (pf) ipu__prefetch_lines(pf + 16 * pfj, pfn - pfj);
        /* (w < 16: columns past w are neither read nor written, masked) */
#define LD256(P, M) (w == 16 ? _mm256_loadu_ps(P) : _mm256_maskload_ps(P, M))
#pragma GCC unroll 8
    for (int i = 0; i < mv; i++) {
        if (i >= h) break;
        float *r = c + i * ldc;
        if (acc) {
            c0[i] = _mm256_add_ps(c0[i], LD256(r, m0));
            c1[i] = _mm256_add_ps(c1[i], LD256(r + 8, m1));
        }
        if (ep && ep->bias) {
            __m256 b = _mm256_set1_ps(ep->bias[i]);
            c0[i] = _mm256_add_ps(c0[i], b);
            c1[i] = _mm256_add_ps(c1[i], b);
        }
        if (!half && ep && ep->res) {
            c0[i] = _mm256_add_ps(c0[i], LD256(ep->res + i * ep->ldr, m0));
            c1[i] = _mm256_add_ps(c1[i], LD256(ep->res + i * ep->ldr + 8, m1));
        }
        if (half && ep->resh) { /* (edges staged: no 16-bit masked loads) */
            const uint16_t *q = ep->resh + i * ep->ldr;
            uint16_t t[16] = {0};
            if (w < 16) q = memcpy(t, q, sizeof *q * (size_t)w);
            c0[i] = _mm256_add_ps(c0[i], _mm256_cvtph_ps(_mm_loadu_si128((const void *)q)));
            c1[i] = _mm256_add_ps(c1[i], _mm256_cvtph_ps(_mm_loadu_si128((const void *)(q + 8))));
        }
        if (ep && ep->relu) { /* v if v > 0 or NaN, else +0 */
            __m256 z = _mm256_setzero_ps();
            c0[i] = _mm256_and_ps(c0[i], _mm256_cmp_ps(c0[i], z, _CMP_NLE_UQ));
            c1[i] = _mm256_and_ps(c1[i], _mm256_cmp_ps(c1[i], z, _CMP_NLE_UQ));
        }
        if (half) { /* round to nearest even, as f16cvt.c's (edges staged, as above) */
            uint16_t t[16], *d = w == 16 ? ep->yh + i * ep->ldy : t;
            _mm_storeu_si128((void *)d, _mm256_cvtps_ph(c0[i], _MM_FROUND_TO_NEAREST_INT));
            _mm_storeu_si128((void *)(d + 8), _mm256_cvtps_ph(c1[i], _MM_FROUND_TO_NEAREST_INT));
            if (w < 16) memcpy(ep->yh + i * ep->ldy, t, sizeof *t * (size_t)w);
        } else if (w == 16) {
            _mm256_storeu_ps(r, c0[i]);
            _mm256_storeu_ps(r + 8, c1[i]);
        } else {
            _mm256_maskstore_ps(r, m0, c0[i]);
            _mm256_maskstore_ps(r + 8, m1, c1[i]);
        }
    }
#undef LD256
}

__attribute__((target("avx2,fma,f16c"))) static void ukr_avx2(int64_t kc, const float *ap,
                                                              const float *bp, float *c,
                                                              int64_t ldc, int acc, const float *pf,
                                                              int64_t pfn) {
    ukr_avx2_body(kc, ap, NULL, bp, NULL, c, ldc, acc, NULL, MR256, MR256, 16, pf, pfn, 0);
}

__attribute__((target("avx2,fma,f16c"))) static void ukr_avx2_ep(int64_t kc, const float *ap,
                                                                 const float *bp, float *c,
                                                                 int64_t ldc, int acc,
                                                                 const ipu__tile_ep *ep) {
    if (ep && ep->yh)
        ukr_avx2_body(kc, ap, NULL, bp, NULL, c, ldc, acc, ep, MR256, MR256, 16, NULL, 0, 1);
    else
        ukr_avx2_body(kc, ap, NULL, bp, NULL, c, ldc, acc, ep, MR256, MR256, 16, NULL, 0, 0);
}

__attribute__((target("avx2,fma,f16c"))) static void ukr_avx2_rows(int64_t kc, const float *ap,
                                                                   const float *b,
                                                                   const int64_t *off, float *c,
                                                                   int64_t ldc, int acc,
                                                                   const ipu__tile_ep *ep) {
    if (ep && ep->yh)
        ukr_avx2_body(kc, ap, NULL, b, off, c, ldc, acc, ep, MR256, MR256, 16, NULL, 0, 1);
    else
        ukr_avx2_body(kc, ap, NULL, b, off, c, ldc, acc, ep, MR256, MR256, 16, NULL, 0, 0);
}

__attribute__((target("avx2,fma,f16c"))) static void ukr_avx2_arows(int64_t kc, const float *a,
                                                                    const float *bp,
                                                                    const int64_t *aoff, float *c,
                                                                    int64_t ldc, int acc,
                                                                    const ipu__tile_ep *ep) {
    if (ep && ep->yh)
        ukr_avx2_body(kc, a, aoff, bp, NULL, c, ldc, acc, ep, MR256, MR256, 16, NULL, 0, 1);
    else
        ukr_avx2_body(kc, a, aoff, bp, NULL, c, ldc, acc, ep, MR256, MR256, 16, NULL, 0, 0);
}

/* Edge tiles: 2, 4 or 6 rows computed, h rows and w columns stored (as ukr_avx512_part). */
__attribute__((target("avx2,fma,f16c"))) static void ukr_avx2_part(int h, int w, int64_t kc,
                                                                   const float *ap, const float *b,
                                                                   const int64_t *off, float *c,
                                                                   int64_t ldc, int acc,
                                                                   const ipu__tile_ep *ep) {
    if (h <= 2)
        IPU__PART_BODY(ukr_avx2_body, 2);
    else if (h <= 4)
        IPU__PART_BODY(ukr_avx2_body, 4);
    else
        IPU__PART_BODY(ukr_avx2_body, MR256);
}
#undef IPU__PART_BODY

#endif

/* Portable: GCC vector extensions (SSE2 / NEON / scalar code generation as available). */
#define MRP 6
#define NRP 8
typedef float v4f __attribute__((vector_size(16)));
static void ukr_portable(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                         int acc, const float *pf, int64_t pfn) {
    ipu__prefetch_lines(pf, pfn);
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

/* The tile epilogue after the fact, for the kernels without a fused one (same operations). */
static void tile_ep(float *c, int64_t ldc, int mr, int nr, const ipu__tile_ep *ep) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float v = c[i * ldc + j];
            if (ep->bias) v += ep->bias[i];
            if (ep->res) v += ep->res[i * ep->ldr + j];
            c[i * ldc + j] = ep->relu ? ipu__relu_f32(v) : v;
        }
}

static void ukr_portable_ep(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                            int acc, const ipu__tile_ep *ep) {
    ukr_portable(kc, ap, bp, c, ldc, acc, NULL, 0);
    tile_ep(c, ldc, MRP, NRP, ep);
}

/* Edge tiles through a buffer: the whole tile, then h rows of w columns added or copied.
 * (B packed only: this kernel has no in-place variant.) */
static void ukr_portable_part(int h, int w, int64_t kc, const float *ap, const float *bp,
                              const int64_t *off, float *c, int64_t ldc, int acc,
                              const ipu__tile_ep *ep) {
    (void)off;
    float t[MRP * NRP];
    ukr_portable(kc, ap, bp, t, NRP, 0, NULL, 0);
    for (int i = 0; i < h; i++)
        for (int j = 0; j < w; j++)
            c[i * ldc + j] = acc ? c[i * ldc + j] + t[i * NRP + j] : t[i * NRP + j];
    if (ep) tile_ep(c, ldc, h, w, ep);
}

typedef struct ukr_desc {
    ukr_fn fn;
    ipu__ukr_ep_fn ep;
    ipu__ukr_part_fn part;
    ipu__ukr_rows_fn rows, arows;
    int mr, nr, mq, isa;
} ukr_desc;

static const ukr_desc UKRS[4] = {
    {ukr_portable, ukr_portable_ep, ukr_portable_part, NULL, NULL, MRP, NRP, MRP, 1},
    {ukr_portable, ukr_portable_ep, ukr_portable_part, NULL, NULL, MRP, NRP, MRP, 1},
#if IPU_X86
    {ukr_avx2, ukr_avx2_ep, ukr_avx2_part, ukr_avx2_rows, ukr_avx2_arows, MR256, 16, 2, 2},
    {ukr_avx512, ukr_avx512_ep, ukr_avx512_part, ukr_avx512_rows, ukr_avx512_arows, MR512, 32, 4,
     3},
#endif
};

/* The sgemm family's choice of micro-kernel (gemv_f32.c and the convolutions follow it through
 * ipu__sgemm_ukr): the level in use (isa.h), except AVX2 on AMD family 19h (Zen 4) unless a
 * level is forced. Zen 4 executes each 512-bit instruction as two 256-bit halves: zmm adds no
 * FLOPs per cycle there, while the 12 x 32 tile pads more at the edges and its 32 KB B panel
 * fills the L1D. The AVX2 kernel measured 9-19 % faster on every benchmark model and sgemm size
 * on a Zen 4 (docs/kernels.md, "The micro-kernels"). */
static int sgemm_isa(void) {
    int isa = ipu__isa();
    if (isa == IPU__ISA_AVX512 && !ipu__isa_forced() && ipu__isa_amd_family() == 0x19)
        return IPU__ISA_AVX2;
    return isa;
}

int ipu__sgemm_isa(void) { return sgemm_isa(); }

static const ukr_desc *select_ukr(void) { return &UKRS[sgemm_isa()]; }

void ipu__sgemm_ukr(ipu__ukr *u) {
    const ukr_desc *d = select_ukr();
    u->fn = d->fn;
    u->ep = d->ep;
    u->part = d->part;
    u->rows = d->rows;
    u->arows = d->arows;
    u->mr = d->mr;
    u->nr = d->nr;
    u->mq = d->mq;
    u->isa = d->isa;
    /* the fused half store converts with the micro-kernel's own instructions: AVX-512F's, or
     * F16C's, which level 2 includes (isa.h) */
    u->half = d->isa >= IPU__ISA_AVX2;
}

/* ---- packing -------------------------------------------------------------------------------- */

static int vec_pack(void) { /* AVX2 copies/transposes unless the portable kernel is forced */
#if IPU_X86
    return select_ukr()->isa >= 2;
#else
    return 0;
#endif
}

#if IPU_X86
/* dst[k * nr + j] = src[j * ld + k], k < kc, j < w: transposed B, 8 x 8 blocks at a time. */
__attribute__((target("avx2"))) static void pack_bt_avx2(const float *src, int64_t ld, int64_t kc,
                                                         int64_t w, int64_t nr, float *dst) {
    int64_t j = 0;
    for (; j + 8 <= w; j += 8) {
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (j + i) * ld + k);
            ipu__tr8(r);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + (k + i) * nr + j, r[i]);
        }
        for (; k < kc; k++)
            for (int i = 0; i < 8; i++) dst[k * nr + j + i] = src[(j + i) * ld + k];
    }
    for (; j < w; j++)
        for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = src[j * ld + k];
}

/* dst[k * mr + i] = rows[i][k] for i < h, 0 for h <= i < mr; k < kc: an A panel of 6 or 12
 * rows as 8 x 8 transposes (of the last group of rows, 6 or 4 of the 8 are stored). */
__attribute__((target("avx2"))) static void pack_a_avx2(const float *const *rows, int64_t h, int mr,
                                                        int64_t kc, float *dst) {
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
        for (int g = 0; g < mr; g += 8) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                r[i] = g + i < h ? _mm256_loadu_ps(rows[g + i] + k) : _mm256_setzero_ps();
            ipu__tr8(r);
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++) {
                float *d = dst + (k + t) * mr + g;
                if (mr - g >= 8) {
                    _mm256_storeu_ps(d, r[t]);
                    continue;
                }
                _mm_storeu_ps(d, _mm256_castps256_ps128(r[t]));
                if (mr - g == 6)
                    _mm_store_sd((double *)(void *)(d + 4),
                                 _mm_castps_pd(_mm256_extractf128_ps(r[t], 1)));
            }
        }
    }
    for (; k < kc; k++)
        for (int i = 0; i < mr; i++) dst[k * mr + i] = i < h ? rows[i][k] : 0.0f;
}
#endif

/* Rows [k0, k0 + kc) of columns [j0, j0 + nc) of op(B) into panels of width nr: panel q at
 * bp + q * pstride, its row k at + k * nr; columns past nc are zero. */
static void pack_b(const ipu__sgemm_args *g, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr,
                   float *bp, int64_t pstride) {
    int vec = vec_pack();
    if (g->b_cs == 1 && !g->b_f16) {
        /* row-major B row by row: each row's nc columns in one sequential run (a panel at a
         * time read 2 lines from each of kc rows a page apart: no prefetcher follows that) */
        for (int64_t k = 0; k < kc; k++) {
            const float *s = (const float *)g->b + (k0 + k) * g->b_rs + j0;
            float *d = bp + k * nr;
            int64_t q = 0;
            /* whole panels: constant-size copies become vector moves */
            if (nr == 32)
                for (; q + 32 <= nc; q += 32, d += pstride) memcpy(d, s + q, 128);
            else if (nr == 16)
                for (; q + 16 <= nc; q += 16, d += pstride) memcpy(d, s + q, 64);
            else if (nr == 8)
                for (; q + 8 <= nc; q += 8, d += pstride) memcpy(d, s + q, 32);
            for (; q < nc; q += nr, d += pstride) {
                int64_t w = nc - q < nr ? nc - q : nr;
                memcpy(d, s + q, sizeof(float) * (size_t)w);
                for (int64_t j = w; j < nr; j++) d[j] = 0.0f;
            }
        }
        return;
    }
    if (g->b_cs == 1) { /* float16 (float32 above): each row converted in runs of whole panels */
        enum { RUN = 1024 }; /* floats: a multiple of every nr */
        float buf[RUN];
        for (int64_t k = 0; k < kc; k++) {
            const uint16_t *s = (const uint16_t *)g->b + (k0 + k) * g->b_rs + j0;
            for (int64_t q0 = 0; q0 < nc; q0 += RUN) {
                int64_t run = nc - q0 < RUN ? nc - q0 : RUN;
                ipu__cvt_f16_to_f32(s + q0, buf, (size_t)run);
                for (int64_t q = 0; q < run; q += nr) {
                    int64_t w = run - q < nr ? run - q : nr;
                    float *d = bp + (q0 + q) / nr * pstride + k * nr;
                    memcpy(d, buf + q, sizeof(float) * (size_t)w);
                    for (int64_t j = w; j < nr; j++) d[j] = 0.0f;
                }
            }
        }
        return;
    }
    for (int64_t q = 0; q < nc; q += nr) {
        int64_t w = nc - q < nr ? nc - q : nr;
        float *dst = bp + q / nr * pstride;
        int64_t col = j0 + q;
        if (w < nr)
            for (int64_t k = 0; k < kc; k++)
                for (int64_t j = w; j < nr; j++) dst[k * nr + j] = 0.0f;
        if (!g->b_f16 && g->b_rs == 1) { /* transposed B: columns are contiguous */
            const float *s = (const float *)g->b + col * g->b_cs + k0;
#if IPU_X86
            if (vec) {
                pack_bt_avx2(s, g->b_cs, kc, w, nr, dst);
                continue;
            }
#endif
            for (int64_t k = 0; k < kc; k++)
                for (int64_t j = 0; j < w; j++) dst[k * nr + j] = s[j * g->b_cs + k];
            continue;
        }
        for (int64_t j = 0; j < w; j++) {
            int64_t base = (col + j) * g->b_cs + k0 * g->b_rs;
            for (int64_t k = 0; k < kc; k++)
                dst[k * nr + j] = ipu__ld_f32(g->b, g->b_f16, base + k * g->b_rs);
        }
    }
    (void)vec;
}

size_t ipu__sgemm_packed_b_floats(int64_t k, int64_t n, int nr) {
    return (size_t)((n + nr - 1) / nr) * (size_t)nr * (size_t)k;
}

void ipu__sgemm_pack_b_all(const ipu__sgemm_args *g, int nr, float *dst) {
    if (g->n > 0 && g->k > 0) pack_b(g, 0, g->k, 0, g->n, nr, dst, g->k * nr);
}

void ipu__sgemm_unpack_b_all(const float *bp, int64_t k, int64_t n, int nr, float *b, int64_t b_rs,
                             int64_t b_cs) {
    for (int64_t j = 0; j < n; j++) {
        const float *col = bp + j / nr * k * nr + j % nr;
        float *d = b + j * b_cs;
        for (int64_t p = 0; p < k; p++) d[p * b_rs] = col[p * nr];
    }
}

/* Ap[p][k][0..mr) = A(i0+p*mr+i, k0+k), zero beyond m. */
void ipu__sgemm_pack_a(const ipu__sgemm_args *g, int64_t k0, int64_t kc, int mr, float *ap) {
    float rows16[MAX_MR][KC]; /* float16 rows converted, then packed as float32 ones */
    int vec = vec_pack();
    for (int64_t p = 0; p < g->m; p += mr) {
        int64_t h = g->m - p < mr ? g->m - p : mr;
        float *dst = ap + p * kc;
        if (g->a_cs == 1) { /* row-major A: h rows side by side, zeros below */
            const float *rows[MAX_MR];
            for (int64_t i = 0; i < h; i++) {
                if (g->a_f16) {
                    ipu__cvt_f16_to_f32((const uint16_t *)g->a + (p + i) * g->a_rs + k0, rows16[i],
                                        (size_t)kc);
                    rows[i] = rows16[i];
                } else {
                    rows[i] = (const float *)g->a + (p + i) * g->a_rs + k0;
                }
            }
#if IPU_X86
            if (vec && (mr == 6 || mr == 12)) {
                pack_a_avx2(rows, h, mr, kc, dst);
                continue;
            }
#endif
            for (int64_t k = 0; k < kc; k++)
                for (int64_t i = 0; i < mr; i++) dst[k * mr + i] = i < h ? rows[i][k] : 0.0f;
            continue;
        }
        if (h < mr)
            for (int64_t k = 0; k < kc; k++)
                for (int64_t i = h; i < mr; i++) dst[k * mr + i] = 0.0f;
        if (g->a_rs == 1) { /* transposed A: rows of Ap are contiguous */
            for (int64_t k = 0; k < kc; k++)
                if (g->a_f16)
                    ipu__cvt_f16_to_f32((const uint16_t *)g->a + (k0 + k) * g->a_cs + p,
                                        dst + k * mr, (size_t)h);
                else
                    memcpy(dst + k * mr, (const float *)g->a + (k0 + k) * g->a_cs + p,
                           sizeof(float) * (size_t)h);
            continue;
        }
        for (int64_t i = 0; i < h; i++) {
            int64_t base = (p + i) * g->a_rs + k0 * g->a_cs;
            for (int64_t k = 0; k < kc; k++)
                dst[k * mr + i] = ipu__ld_f32(g->a, g->a_f16, base + k * g->a_cs);
        }
    }
    (void)vec;
}

/* ---- driver --------------------------------------------------------------------------------- */

#define MC ((int64_t)96) /* rows of A per packed block (a multiple of every mr) */

/* C = op(A) op(B) for all g->m rows. B comes from `bpre` (panels of width nr covering columns
 * [0, g->n), panel stride bstride floats, row k at + k * nr) or, when bpre is NULL, is packed
 * into scratch in blocks of KC rows and as many columns as fit. hep (or NULL; micro-kernels
 * with a half store only): the last K chunk's store applies it and writes y in half, its
 * pointers those of element (0, 0) (ipu__sgemm_half). */
static void driver(const ukr_desc *u, const ipu__sgemm_args *g, const float *bpre, int64_t bstride,
                   const ipu__tile_ep *hep, void *scratch, size_t scratch_bytes) {
    const int mr = u->mr, nr = u->nr;
    int64_t m = g->m, n = g->n, k = g->k;
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++) memset(g->c + i * g->ldc, 0, sizeof(float) * (size_t)n);
        return;
    }
    /* Ap first (64-byte aligned scratch), Bp after it. */
    float *ap = scratch;
    size_t ap_bytes = ((size_t)MC * KC * sizeof(float) + 63) & ~(size_t)63;
    float *bp = (float *)((char *)scratch + ap_bytes);
    int64_t nc_max = bpre ? (n + nr - 1) / nr * nr
                          : (int64_t)((scratch_bytes - ap_bytes) / (KC * sizeof(float))) / nr * nr;
    size_t es = g->a_f16 ? 2 : 4;
    for (int64_t j0 = 0; j0 < n; j0 += nc_max) {
        int64_t nc = n - j0 < nc_max ? n - j0 : nc_max;
        for (int64_t k0 = 0; k0 < k; k0 += KC) {
            int64_t kc = k - k0 < KC ? k - k0 : KC;
            int acc = k0 > 0;
            const float *bk = bp;
            int64_t ps = kc * nr;
            if (bpre) {
                bk = bpre + j0 / nr * bstride + k0 * nr;
                ps = bstride;
            } else {
                pack_b(g, k0, kc, j0, nc, nr, bp, ps);
            }
            const bool half = hep && k0 + kc == k;
            for (int64_t i0 = 0; i0 < m; i0 += MC) {
                ipu__sgemm_args ga = *g;
                ga.m = m - i0 < MC ? m - i0 : MC;
                ga.a = (const char *)g->a + (size_t)(i0 * g->a_rs) * es;
                ipu__sgemm_pack_a(&ga, k0, kc, mr, ap);
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    int64_t w = nc - jr < nr ? nc - jr : nr;
                    const float *bpan = bk + jr / nr * ps;
                    /* pre-packed weights come from memory: the next panel is fetched ahead */
                    const float *next = bpre && jr + nr < nc ? bpan + ps : NULL;
                    for (int64_t ir = 0, done = 0; ir < ga.m; ir += mr) {
                        int64_t pfn;
                        const float *pf = ipu__prefetch_share(next, kc * nr / 16, ir / mr,
                                                              (ga.m + mr - 1) / mr, &done, &pfn);
                        int64_t h = ga.m - ir < mr ? ga.m - ir : mr;
                        float *c = g->c + (i0 + ir) * g->ldc + j0 + jr;
                        ipu__tile_ep ep;
                        if (half) { /* the tile's place */
                            int64_t i = i0 + ir, j = j0 + jr;
                            ep = *hep;
                            ep.yh = hep->yh + i * hep->ldy + j;
                            if (hep->bias) ep.bias = hep->bias + i;
                            if (hep->resh) ep.resh = hep->resh + i * hep->ldr + j;
                        }
                        if (h == mr && w == nr && !half) {
                            u->fn(kc, ap + ir * kc, bpan, c, g->ldc, acc, pf, pfn);
                        } else if (h == mr && w == nr) {
                            ipu__prefetch_lines(pf, pfn);
                            u->ep(kc, ap + ir * kc, bpan, c, g->ldc, acc, &ep);
                        } else {
                            ipu__prefetch_lines(pf, pfn);
                            u->part((int)h, (int)w, kc, ap + ir * kc, bpan, NULL, c, g->ldc, acc,
                                    half ? &ep : NULL);
                        }
                    }
                }
            }
        }
    }
}

void ipu__sgemm(const ipu__sgemm_args *g, void *scratch, size_t scratch_bytes) {
    driver(select_ukr(), g, NULL, 0, NULL, scratch, scratch_bytes);
}

int ipu__sgemm_packed(const ipu__sgemm_args *g, const float *bp, int64_t bstride, int nr,
                      void *scratch, size_t scratch_bytes) {
    const ukr_desc *u = select_ukr();
    if (u->nr != nr) return 0;
    driver(u, g, bp, bstride, NULL, scratch, scratch_bytes);
    return 1;
}

int ipu__sgemm_half(const ipu__sgemm_args *g, const float *bp, int64_t bstride, int nr,
                    const ipu__tile_ep *ep, void *scratch, size_t scratch_bytes) {
    const ukr_desc *u = select_ukr();
    ipu__ukr k;
    ipu__sgemm_ukr(&k);
    if (!k.half || g->k <= 0 || (bp && u->nr != nr)) return 0;
    driver(u, g, bp, bstride, ep, scratch, scratch_bytes);
    return 1;
}
