/* The CPU-feature probe and the forced level (isa.h). The features are read once per process
 * and cached: CPUID may trap to a hypervisor (tens of microseconds a call), and kernels ask for
 * the level on every call. */
#include "isa.h"

#include <stdbool.h>
#include <stddef.h>

#if defined(__x86_64__) || defined(__i386__)
#define ISA_X86 1
#include <cpuid.h>
#else
#define ISA_X86 0
#endif

int ipu__isa_now;
static int best_level;   /* 0 until probed; racing threads store the same value */
static int forced_level; /* 0 = automatic */
static unsigned amd_family;

#if ISA_X86
/* CPUID.1:ECX.F16C[bit 29]: clang 14 rejects __builtin_cpu_supports("f16c"). The OS's AVX
 * state is checked by the avx2 test it is combined with. */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

static unsigned read_amd_family(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u /* "Auth"enticAMD */) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned family = (a >> 8) & 0xfu;
    return family == 0xfu ? family + ((a >> 20) & 0xffu) : family;
}
#endif

static int probe_best(void) {
    int best = __atomic_load_n(&best_level, __ATOMIC_ACQUIRE);
    if (best) return best;
    best = IPU__ISA_PORTABLE;
#if ISA_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()) {
        best = IPU__ISA_AVX2;
        if (__builtin_cpu_supports("avx512f")) best = IPU__ISA_AVX512;
    }
    __atomic_store_n(&amd_family, read_amd_family(), __ATOMIC_RELAXED);
#endif
    __atomic_store_n(&best_level, best, __ATOMIC_RELEASE);
    return best;
}

int ipu__isa_probe(void) {
    int best = probe_best(), none = 0;
    /* a concurrent ipu__isa_force wins: only 0 becomes the best level */
    __atomic_compare_exchange_n(&ipu__isa_now, &none, best, false, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    return __atomic_load_n(&ipu__isa_now, __ATOMIC_RELAXED);
}

int ipu__isa_best(void) { return probe_best(); }

int ipu__isa_forced(void) { return __atomic_load_n(&forced_level, __ATOMIC_RELAXED); }

int ipu__isa_force(int level) {
    int best = probe_best();
    if (level < 0 || level > best) level = IPU__ISA_AUTO;
    __atomic_store_n(&forced_level, level, __ATOMIC_RELAXED);
    __atomic_store_n(&ipu__isa_now, level ? level : best, __ATOMIC_RELAXED);
    return level ? level : best;
}

const char *ipu__isa_name(int level) {
    static const char *const names[IPU__ISA_MAX + 1] = {NULL, "portable", "avx2", "avx512"};
    return level >= 1 && level <= IPU__ISA_MAX ? names[level] : NULL;
}

unsigned ipu__isa_amd_family(void) {
    probe_best();
    return __atomic_load_n(&amd_family, __ATOMIC_RELAXED);
}
