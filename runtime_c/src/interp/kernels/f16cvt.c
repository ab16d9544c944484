/* Bulk IEEE half <-> single conversion, the one place every float16 kernel converts through
 * (float16 in memory, float32 compute). Three builds of the same conversion, all exact (round
 * to nearest even, subnormals, inf and NaN as IEEE 754 and numpy's float16 have them): AVX-512F
 * (16 lanes), F16C (8 lanes) and the portable bit manipulation of common/f16.c. The level is
 * chosen once per process from isa.h's and cached: the F16C bit needs CPUID, which a hypervisor
 * traps (tens of microseconds a call here), and kernels convert a few hundred elements a call. */
#include <string.h>

#include "kernels.h"

#include "isa.h"

#if IPU_X86
#include <cpuid.h>
#include <immintrin.h>
#endif

#if IPU_X86
__attribute__((target("avx512f"))) static void h2f_avx512(const uint16_t *s, float *d, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    if (i < n) { /* the tail through a staging block: no scalar conversion for short rows */
        uint16_t h[16] = {0};
        float f[16];
        memcpy(h, s + i, (n - i) * sizeof *s);
        _mm512_storeu_ps(f, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h)));
        memcpy(d + i, f, (n - i) * sizeof *d);
    }
}

__attribute__((target("avx512f"))) static void f2h_avx512(const float *s, uint16_t *d, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        float f[16] = {0};
        uint16_t h[16];
        memcpy(f, s + i, (n - i) * sizeof *s);
        _mm256_storeu_si256((__m256i *)h,
                            _mm512_cvtps_ph(_mm512_loadu_ps(f), _MM_FROUND_TO_NEAREST_INT));
        memcpy(d + i, h, (n - i) * sizeof *d);
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

/* CPUID.1:ECX.F16C[bit 29] (AVX enabled by the OS is part of level 2): clang 14 rejects
 * __builtin_cpu_supports("f16c"), so the bit is read directly (gcc and clang alike). */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

/* The best level here: isa.h's, where level 2 also needs F16C (every AVX2 CPU has it, but a
 * hypervisor may hide it). Cached: see the top of the file. */
static int best_isa(void) {
    static int cached; /* 0 until computed; racing threads store the same value */
    int isa = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (!isa) {
        isa = ipu__cpu_isa();
#if IPU_X86
        if (isa == 2 && !has_f16c()) isa = 1;
#endif
        __atomic_store_n(&cached, isa, __ATOMIC_RELAXED);
    }
    return isa;
}

static int forced_isa; /* 0 = auto; set by tests only */

int ipu__f16_set_isa(int isa) {
    ipu__isa_force(&forced_isa, isa, best_isa());
    return ipu__isa_current(&forced_isa, best_isa());
}

int ipu__f16_isa(void) { return ipu__isa_current(&forced_isa, best_isa()); }

void ipu__cvt_f16_to_f32(const uint16_t *src, float *dst, size_t n) {
#if IPU_X86
    switch (ipu__isa_current(&forced_isa, best_isa())) {
        case 3: h2f_avx512(src, dst, n); return;
        case 2: h2f_f16c(src, dst, n); return;
        default: break;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = ipu__f16_to_f32(src[i]);
}

void ipu__cvt_f32_to_f16(const float *src, uint16_t *dst, size_t n) {
#if IPU_X86
    switch (ipu__isa_current(&forced_isa, best_isa())) {
        case 3: f2h_avx512(src, dst, n); return;
        case 2: f2h_f16c(src, dst, n); return;
        default: break;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = ipu__f32_to_f16(src[i]);
}
