/* MATMUL and GEMM (matmul.c, gemv_f32.c, gemm_f32.c): the plan and its blocking (plan functions
 * in matmul.c). */
#ifndef IPU_MATMUL_H
#define IPU_MATMUL_H

#include "kernels.h"

/* MATMUL and GEMM. `path` (chosen by ipu__mm_plan_blocks from the shapes and dtype):
 * - IPU__MM_ROWS (integers): work item = (batch, block of IPU__MM_MB rows);
 * - IPU__MM_PACKED (float32, float16): work item = (batch, block of nb columns, block of mb rows), rows
 *   fastest, so that a worker's contiguous range of items shares its blocks of packed B;
 * - IPU__MM_GEMV (float32, M <= IPU__GEMV_MAX_M): work item = (batch, block of nb columns), B
 *   streamed once in its own layout.
 * A B stored in the executable (TENSOR_DATA) on the PACKED path is packed once by the verifier
 * (ipu__mm_pack_b; float16 converted to float32 there), used while B is still that tensor. */
enum { IPU__MM_ROWS = 0, IPU__MM_PACKED = 1, IPU__MM_GEMV = 2 };
typedef struct ipu__mm_plan {
    ipu__plan hdr;
    ipu_dtype dtype;
    int64_t M, N, K, mblocks;
    uint64_t batch;
    uint32_t bdim;
    int64_t bshape[IPU_MAX_DIMS], abs[IPU_MAX_DIMS],
        bbs[IPU_MAX_DIMS]; /* batch strides, in matrices */
    /* GEMM only */
    int is_gemm, trans_a, trans_b, has_c;
    int act;              /* ipu__act_fn: applied after alpha * op(A) op(B) + beta * C */
    ipu__unary_act unary; /* act UNARY: its function */
    float alpha, beta;
    int64_t c_rs, c_cs;
    int path;
    int64_t mb, nb, nblocks; /* rows per M block, columns per N block (PACKED and GEMV) */
    /* B packed at load: matrix i of B at packed + i * packed_mat floats, panels of width
     * packed_nr (ipu__sgemm_pack_b_all layout); NULL if not packed */
    const float *packed;
    int packed_nr;
    int64_t packed_mat;
} ipu__mm_plan;

/* matmul.c: fill path, mb, nb, nblocks, mblocks and hdr.work of a plan whose dtype, M, N, K,
 * batch and trans_a are set. */
void ipu__mm_plan_blocks(ipu__mm_plan *p);
/* matmul.c: float32 B packing for a PACKED plan: floats needed for `nmat` matrices of B for
 * micro-kernels of width nr (0 when the plan does not use packed B), and the packing itself
 * (b: B's elements, of the plan's dtype, row-major matrices of B's own shape [.., K, N], or [N, K] with transB). The
 * prepacked-weights hook can fill a buffer of that size and point `packed` at it. */
size_t ipu__mm_packed_floats(const ipu__mm_plan *p, uint64_t nmat, int nr);
void ipu__mm_pack_b(const ipu__mm_plan *p, const void *b, uint64_t nmat, int nr, float *dst);

#endif
