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

#endif
