/* CPU instruction-set levels as the kernels number them (1 portable, 2 AVX2 + FMA,
 * 3 AVX-512F), and the test-only switch that forces one the CPU runs (gemm_f32.c, vmath.c). */
#ifndef IPU_KERNELS_ISA_H
#define IPU_KERNELS_ISA_H

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* The best level this CPU runs. */
static inline int ipu__cpu_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx512f")) return 3;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
#endif
    return 1;
}

/* The CPU family as AMD numbers it (base + extended family), 0 on other CPUs. Executes CPUID,
 * which a hypervisor may trap: callers cache the answer. */
static inline unsigned ipu__amd_family(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u /* "Auth"enticAMD */) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned family = (a >> 8) & 0xfu;
    return family == 0xfu ? family + ((a >> 20) & 0xffu) : family;
#else
    return 0;
#endif
}

/* Force level `isa` (0 or out of 1..best: automatic again) into *forced; returns the level
 * now in use when automatic means `best`. Relaxed atomics: tests switch it between runs. */
static inline int ipu__isa_force(int *forced, int isa, int best) {
    if (isa < 0 || isa > best) isa = 0;
    __atomic_store_n(forced, isa, __ATOMIC_RELAXED);
    return isa ? isa : best;
}

/* The level in use: the forced one, else best. */
static inline int ipu__isa_current(const int *forced, int best) {
    int isa = __atomic_load_n(forced, __ATOMIC_RELAXED);
    return isa ? isa : best;
}

#endif
