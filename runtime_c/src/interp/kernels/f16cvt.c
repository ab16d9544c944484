/* Bulk IEEE half <-> single conversion, the one place every float16 kernel converts through
 * (float16 in memory, float32 compute). Three builds of the same conversion, all exact (round
 * to nearest even, subnormals, inf and NaN as IEEE 754 and numpy's float16 have them): AVX-512F
 * (16 lanes), F16C (8 lanes) and the portable bit manipulation of common/f16.c, chosen by the
 * level in use (isa.h: level 2 includes F16C), cached there: kernels convert a few hundred
 * elements a call. */

#include "kernels.h"

#include "isa.h"

#if IPU_X86
#include <immintrin.h>
#endif

#if IPU_X86
/* The first t < 16 halves at s (zeros after them), read as t / 2 masked dwords and the odd last
 * half broadcast into the next dword: nothing past s + t read. */
__attribute__((target("avx512f"))) static inline __m256i load_tail(const uint16_t *s, size_t t) {
    __m512i v = _mm512_maskz_loadu_epi32((__mmask16)((1u << (t / 2)) - 1), s);
    if (t & 1) v = _mm512_mask_set1_epi32(v, (__mmask16)(1u << (t / 2)), s[t - 1]);
    return _mm512_castsi512_si256(v);
}

__attribute__((target("avx512f"))) static void h2f_avx512(const uint16_t *s, float *d, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    if (i < n) /* the tail under masks: nothing past either end touched, no staging */
        _mm512_mask_storeu_ps(d + i, (__mmask16)((1u << (n - i)) - 1),
                              _mm512_cvtph_ps(load_tail(s + i, n - i)));
}

__attribute__((target("avx512f"))) static void f2h_avx512(const float *s, uint16_t *d, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) { /* the tail: masked float loads, its pairs of halves stored as dwords */
        size_t t = n - i;
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps((__mmask16)((1u << t) - 1), s + i),
                                    _MM_FROUND_TO_NEAREST_INT);
        _mm512_mask_storeu_epi32(d + i, (__mmask16)((1u << (t / 2)) - 1),
                                 _mm512_castsi256_si512(h));
        if (t & 1) {
            uint16_t last[16];
            _mm256_storeu_si256((__m256i *)last, h);
            d[n - 1] = last[t - 1];
        }
    }
}

/* ipu__cvt_f16_pack_b, 16 columns per conversion, the last run of a row through load_tail. */
__attribute__((target("avx512f"))) static void pack_b_avx512(const uint16_t *src, int64_t ld,
                                                             int64_t kc, int64_t np, int nr,
                                                             float *dst) {
    for (int64_t k = 0; k < kc; k++) {
        const uint16_t *s = src + k * ld;
        for (int64_t j0 = 0; j0 < np; j0 += nr) {
            float *d = dst + j0 * kc + k * nr;
            int64_t j = 0, w = np - j0 < nr ? np - j0 : nr;
            for (; j + 16 <= w; j += 16)
                _mm512_storeu_ps(d + j, _mm512_cvtph_ps(
                                            _mm256_loadu_si256((const __m256i *)(s + j0 + j))));
            if (j < w) { /* zeros past the row: the panel's padding */
                _mm512_storeu_ps(d + j, _mm512_cvtph_ps(load_tail(s + j0 + j, (size_t)(w - j))));
                j += 16;
            }
            for (; j < nr; j += 16) _mm512_storeu_ps(d + j, _mm512_setzero_ps());
        }
    }
}

__attribute__((target("avx,f16c"))) static void h2f_f16c(const uint16_t *s, float *d, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++) d[i] = ipu__f16_to_f32(s[i]);
}

__attribute__((target("avx,f16c"))) static void f2h_f16c(const float *s, uint16_t *d, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = ipu__f32_to_f16(s[i]);
}

__attribute__((target("avx,f16c"))) static void pack_b_f16c(const uint16_t *src, int64_t ld,
                                                            int64_t kc, int64_t np, int nr,
                                                            float *dst) {
    for (int64_t k = 0; k < kc; k++) {
        const uint16_t *s = src + k * ld;
        for (int64_t j0 = 0; j0 < np; j0 += nr) {
            float *d = dst + j0 * kc + k * nr;
            int64_t j = 0, w = np - j0 < nr ? np - j0 : nr;
            for (; j + 8 <= w; j += 8)
                _mm256_storeu_ps(d + j,
                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + j0 + j))));
            for (; j < w; j++) d[j] = ipu__f16_to_f32(s[j0 + j]);
            for (; j < nr; j++) d[j] = 0.0f;
        }
    }
}
#endif

void ipu__cvt_f16_pack_b(const uint16_t *src, int64_t ld, int64_t kc, int64_t np, int nr,
                         float *dst) {
#if IPU_X86
    switch (ipu__isa()) {
        case IPU__ISA_AVX512:
            if (nr % 16 == 0) {
                pack_b_avx512(src, ld, kc, np, nr, dst);
                return;
            }
            pack_b_f16c(src, ld, kc, np, nr, dst);
            return;
        case IPU__ISA_AVX2: pack_b_f16c(src, ld, kc, np, nr, dst); return;
        default: break;
    }
#endif
    for (int64_t k = 0; k < kc; k++)
        for (int64_t j0 = 0; j0 < np; j0 += nr) {
            float *d = dst + j0 * kc + k * nr;
            for (int64_t j = 0; j < nr; j++)
                d[j] = j0 + j < np ? ipu__f16_to_f32(src[k * ld + j0 + j]) : 0.0f;
        }
}

void ipu__cvt_f16_to_f32(const uint16_t *src, float *dst, size_t n) {
#if IPU_X86
    switch (ipu__isa()) {
        case IPU__ISA_AVX512: h2f_avx512(src, dst, n); return;
        case IPU__ISA_AVX2: h2f_f16c(src, dst, n); return;
        default: break;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = ipu__f16_to_f32(src[i]);
}

void ipu__cvt_f32_to_f16(const float *src, uint16_t *dst, size_t n) {
#if IPU_X86
    switch (ipu__isa()) {
        case IPU__ISA_AVX512: f2h_avx512(src, dst, n); return;
        case IPU__ISA_AVX2: f2h_f16c(src, dst, n); return;
        default: break;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = ipu__f32_to_f16(src[i]);
}
