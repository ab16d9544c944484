/* Vectorised float32 exp, erf, GELU, sigmoid, swish and the passes of softmax rows for the element-wise kernels
 * (libm's scalar expf/erff cost 5-20 ns per element). One algorithm (vmath_body.h), compiled
 * for AVX2 + FMA and portably; the AVX2 build is chosen at run time (use_avx2). */
#include "vmath.h"

#include "isa.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define VM_X86 1
#include <immintrin.h>
#else
#define VM_X86 0
#endif

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

#define VF v4f
#define VI v4i
#define VM_N 4
#define VM_SFX _portable
#define VM_ATTR
#define VM_FMA(a, b, c) ((a) * (b) + (c))
#include "vmath_body.h"

#if VM_X86
#define VF v8f
#define VI v8i
#define VM_N 8
#define VM_SFX _avx2
#define VM_ATTR __attribute__((target("avx2,fma")))
#define VM_FMA(a, b, c) ((v8f)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#include "vmath_body.h"
#endif

/* The vmath family's choice: the AVX2 build at level 2 and above (no AVX-512 build). */
static bool use_avx2(void) { return ipu__isa() >= IPU__ISA_AVX2; }

/* The call of one build's function, as an expression (a value, or void). */
#if VM_X86
#define VM_DISPATCH(name, ...) \
    (use_avx2() ? name##_avx2(__VA_ARGS__) : name##_portable(__VA_ARGS__))
#else
#define VM_DISPATCH(name, ...) name##_portable(__VA_ARGS__)
#endif

void ipu__vm_exp(const float *x, float *y, size_t n) { VM_DISPATCH(vm_exp_map, x, y, n); }
void ipu__vm_erf(const float *x, float *y, size_t n) { VM_DISPATCH(vm_erf_map, x, y, n); }
void ipu__vm_gelu_erf(const float *x, float *y, size_t n) { VM_DISPATCH(vm_gelu_map, x, y, n); }
void ipu__vm_gelu_tanh(const float *x, float *y, size_t n) {
    VM_DISPATCH(vm_gelu_tanh_map, x, y, n);
}
void ipu__vm_sigmoid(const float *x, float *y, size_t n) { VM_DISPATCH(vm_sigmoid_map, x, y, n); }
void ipu__vm_swish(const float *x, float *y, size_t n, float a) {
    VM_DISPATCH(vm_swish_map, x, y, n, a);
}
float ipu__vm_max(const float *x, size_t n) { return VM_DISPATCH(vm_max, x, n); }
float ipu__vm_exp_sum(const float *x, float *y, size_t n, float m) {
    return VM_DISPATCH(vm_exp_sum, x, y, n, m);
}
void ipu__vm_scale(float *y, size_t n, float a) { VM_DISPATCH(vm_scale, y, n, a); }
