/* Reduction family (reduce.c, reduce2.c): what its kernels and plan functions share. Each
 * file's plan struct is in the file. */
#ifndef IPU_REDUCE_H
#define IPU_REDUCE_H

#include "kernels.h"

/* REDUCE attr 0, from ipu/ipu_fns.def. */
typedef enum ipu__reduce_fn {
#define IPU_REDUCE(name, value) IPU__RED_##name = value,
#include "ipu/ipu_fns.def"
#undef IPU_REDUCE
    IPU__RED_COUNT
} ipu__reduce_fn;

/* LOG_SOFTMAX of one contiguous float32 row through the vectorised softmax passes (reduce.c);
 * `tmp` holds IPU__STOP_CHUNK floats; y may be x. */
ipu_status ipu__log_softmax_row(const ipu__frame *f, const float *x, float *y, int64_t L,
                                float *tmp);

#endif
