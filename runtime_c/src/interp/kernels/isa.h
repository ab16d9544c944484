/* CPU instruction-set levels: the one probe of the CPU's features (isa.c) and the one
 * process-wide switch forcing a level, which every kernel family's choice of code reads.
 * Each level implies the ones below it, so a kernel asks `ipu__isa() >= IPU__ISA_AVX2`. */
#ifndef IPU_KERNELS_ISA_H
#define IPU_KERNELS_ISA_H

#include "../../common/ipu_internal.h"

enum {
    IPU__ISA_AUTO = 0,     /* ipu__isa_force: automatic (the best level) again */
    IPU__ISA_PORTABLE = 1, /* plain C, any CPU */
    IPU__ISA_AVX2 = 2,     /* AVX2 + FMA + F16C */
    IPU__ISA_AVX512 = 3,   /* the above + AVX-512F */
    IPU__ISA_MAX = IPU__ISA_AVX512
};

/* The level in use, 0 until the first probe. Read through ipu__isa(). Hidden: a direct load,
 * not one through the GOT. */
extern int ipu__isa_now __attribute__((visibility("hidden")));

/* Probes the CPU once (cached: CPUID may trap to a hypervisor) and returns the level in use. */
int ipu__isa_probe(void);

/* The level in use: the forced one, else the best this CPU runs. One relaxed load after the
 * first call: cheap enough for every kernel call. */
static inline int ipu__isa(void) {
    int level = __atomic_load_n(&ipu__isa_now, __ATOMIC_RELAXED);
    return level ? level : ipu__isa_probe();
}

/* The best level this CPU runs. */
IPU_EXTENSION_API int ipu__isa_best(void);

/* The forced level, 0 when automatic. */
int ipu__isa_forced(void);

/* Forces `level` for every kernel family (0, or a level this CPU does not run: automatic
 * again); returns the level now in use. For tests, benchmarks and PYIPU_ISA: set it between
 * runs, not while a kernel runs (a plan made under one level may expect its layouts). */
IPU_EXTENSION_API int ipu__isa_force(int level);

/* "portable", "avx2", "avx512" for levels 1..IPU__ISA_MAX, else NULL. */
IPU_EXTENSION_API const char *ipu__isa_name(int level);

/* The CPU family as AMD numbers it (base + extended family), 0 on other CPUs (cached). */
unsigned ipu__isa_amd_family(void);

#endif
