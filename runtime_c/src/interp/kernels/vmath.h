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
/* One contiguous softmax row: exp(x - max(x)) / sum; a NaN anywhere makes the row NaN. */
void ipu__vm_softmax_row(const float *x, float *y, size_t n);

#endif
