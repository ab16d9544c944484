/* Internal: vectorised float32 math (vmath.c). x == y is allowed; any n. Results are within a
 * few ulp of the correctly rounded ones (tests/c/test_vmath.c); NaN propagates. */
#ifndef IPU_VMATH_H
#define IPU_VMATH_H

#include <stddef.h>
#include <stdint.h>

void ipu__vm_exp(const float *x, float *y, size_t n);
void ipu__vm_erf(const float *x, float *y, size_t n);
/* 0.5 x (1 + erf(x / sqrt 2)), in that order (the reference's formulation). */
void ipu__vm_gelu_erf(const float *x, float *y, size_t n);
/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as x / (1 + exp(-2 sqrt(2/pi) (...))). */
void ipu__vm_gelu_tanh(const float *x, float *y, size_t n);
/* 1 / (1 + exp(-x)) and x / (1 + exp(-a x)). */
void ipu__vm_sigmoid(const float *x, float *y, size_t n);
void ipu__vm_swish(const float *x, float *y, size_t n, float a);
/* The three passes of a softmax row (the SOFTMAX kernels run them chunk by chunk): the max of
 * x[0, n) (-inf for n = 0; NaN when any element is NaN); y = exp(x - m), returning the sum of
 * y; y *= a. */
float ipu__vm_max(const float *x, size_t n);
float ipu__vm_exp_sum(const float *x, float *y, size_t n, float m);
void ipu__vm_scale(float *y, size_t n, float a);

#endif
