/* MATMUL (numpy matmul with batch broadcasting) and GEMM (alpha * op(A) op(B) + beta * C).
 * float32 (matmul.h, ipu__mm_plan): blocks of columns x blocks of rows through the packed sgemm
 * (B packed once per block of columns and K-block within a call, or at load when it is a
 * weight), or, for at most IPU__GEMV_MAX_M rows, blocks of columns through the GEMV kernels.
 * float16 takes the float32 paths but GEMV (converted while packing, B packed as float32 at load
 * when it is a weight, accumulated in float32); integers: a simple wrap-around kernel. The plan functions (matmul, gemm) are at the end. */
#include <stdbool.h>
#include <string.h>

#include "../verify_internal.h"
#include "matmul.h"

static void batch_offsets(const ipu__mm_plan *p, uint64_t bi, int64_t *oa, int64_t *ob) {
    int64_t a = 0, b = 0;
    for (uint32_t d = p->bdim; d-- > 0;) {
        int64_t i = (int64_t)(bi % (uint64_t)p->bshape[d]);
        bi /= (uint64_t)p->bshape[d];
        a += i * p->abs[d];
        b += i * p->bbs[d];
    }
    *oa = a;
    *ob = b;
}

typedef struct mm_item {
    int64_t m0, m1;              /* output rows */
    int64_t a_off, b_off, y_off; /* element offsets of this batch's matrices */
} mm_item;

static mm_item item_of(const ipu__mm_plan *p, size_t it) {
    mm_item r;
    uint64_t bi = (uint64_t)it / (uint64_t)p->mblocks;
    int64_t blk = (int64_t)((uint64_t)it % (uint64_t)p->mblocks), oa, ob;
    batch_offsets(p, bi, &oa, &ob);
    r.m0 = blk * IPU__MM_MB;
    r.m1 = r.m0 + IPU__MM_MB < p->M ? r.m0 + IPU__MM_MB : p->M;
    r.a_off = oa * p->M * p->K;
    r.b_off = ob * p->K * p->N;
    r.y_off = (int64_t)bi * p->M * p->N;
    return r;
}

/* sgemm arguments for rows [m0, m1) of op(A) and all of op(B); elements, not bytes. */
static ipu__sgemm_args mm_args(const ipu__mm_plan *p, const mm_item *r, const void *a,
                               const void *b, int f16) {
    ipu__sgemm_args g;
    size_t es = f16 ? 2 : 4;
    int64_t M = p->M, N = p->N, K = p->K;
    g.m = r->m1 - r->m0;
    g.n = N;
    g.k = K;
    g.a_rs = p->trans_a ? 1 : K;
    g.a_cs = p->trans_a ? M : 1;
    g.b_rs = p->trans_b ? 1 : N;
    g.b_cs = p->trans_b ? K : 1;
    g.a = (const char *)a + (size_t)(r->a_off + r->m0 * g.a_rs) * es;
    g.b = (const char *)b + (size_t)r->b_off * es;
    g.a_f16 = g.b_f16 = f16;
    g.c = NULL;
    g.ldc = N;
    return g;
}

/* y[0..n) = act(alpha * acc + beta * C(row, j0 + j)) (row/col strides from the plan; act:
 * ReLU as the RELU instruction computes it, NaN kept, or a UNARY function as UNARY does). */
static void gemm_epilogue_row(const ipu__mm_plan *p, const void *c, int f16, int64_t row,
                              int64_t j0, const float *acc, float *y, int64_t n) {
    float al = p->alpha, be = p->beta;
    int64_t base = row * p->c_rs + j0 * p->c_cs;
    if (!p->has_c) {
        for (int64_t j = 0; j < n; j++) y[j] = al * acc[j];
    } else if (f16) {
        const uint16_t *ch = c;
        for (int64_t j = 0; j < n; j++)
            y[j] = al * acc[j] + be * ipu__f16_to_f32(ch[base + j * p->c_cs]);
    } else {
        const float *cf = c;
        if (p->c_cs == 1)
            for (int64_t j = 0; j < n; j++) y[j] = al * acc[j] + be * cf[base + j];
        else
            for (int64_t j = 0; j < n; j++) y[j] = al * acc[j] + be * cf[base];
    }
    if (p->act == IPU__ACT_RELU)
        for (int64_t j = 0; j < n; j++) y[j] = ipu__relu_f32(y[j]);
    else if (p->act == IPU__ACT_UNARY) {
        for (int64_t j = 0; f16 && j < n; j += 256) { /* the half sums UNARY would read */
            uint16_t h[256];
            size_t k = (size_t)(n - j < 256 ? n - j : 256);
            ipu__cvt_f32_to_f16(y + j, h, k);
            ipu__cvt_f16_to_f32(h, y + j, k);
        }
        ipu__unary_apply_f32(p->unary.fn, p->unary.p0, p->unary.p1, y, (size_t)n);
    }
}

/* float32 and float16 (f16: A, B, C and y in half, computed in float32: the operands converted
 * as the sgemm packs them, B from its float32 copy packed at load when it is a weight, each
 * block of rows accumulated in a float32 tile in scratch and converted as it is stored). */
static ipu_status mm_run(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                         void *scratch, int f16) {
    const ipu__mm_plan *p = ins->plan;
    void *y = f->ptr[ins->out[0]];
    const void *A = f->ptr[ins->in[0]], *B = f->ptr[ins->in[1]];
    const void *c = p->has_c ? f->ptr[ins->in[2]] : NULL;
    const float *pre = p->packed && B == (const void *)ipu__tensor_bytes(f->exe, ins->in[1])
                           ? p->packed
                           : NULL;       /* not if the session bound another B */
    if (pre && B == (const void *)pre) { /* stored packed only: no other path */
        ipu__ukr u;
        ipu__sgemm_ukr(&u);
        if (u.nr != p->packed_nr)
            return ipu__fail(IPU_ERR_INVALID_STATE,
                             "matmul: its B is stored packed for the instruction-set level in use "
                             "at load; load the executable again after changing it");
    }
    size_t es = f16 ? 2 : 4;
    /* float16: the sgemm packs in the first IPU__SCRATCH_BYTES, the tile takes the rest */
    size_t sg_bytes = f16 ? IPU__SCRATCH_BYTES : IPU__WORKER_SCRATCH_BYTES;
    float *tile = (float *)((char *)scratch + IPU__SCRATCH_BYTES);
    int64_t tile_floats = (int64_t)((IPU__WORKER_SCRATCH_BYTES - IPU__SCRATCH_BYTES) / 4);
    int64_t M = p->M, N = p->N, K = p->K;
    uint64_t per_batch = (uint64_t)p->mblocks * (uint64_t)p->nblocks;
    /* float16 whose epilogue the micro-kernel's half store computes in the same operations:
     * alpha 1 (1 * s is s), C read in half at rows c_rs apart with beta 1 (added after the sum,
     * as the residual is), ReLU */
    const bool half_ok = f16 &&
                         (!p->is_gemm ||
                          (p->alpha == 1.0f && (!p->has_c || (p->beta == 1.0f && p->c_cs == 1)) &&
                           (p->act == IPU__ACT_NONE || p->act == IPU__ACT_RELU)));
    for (size_t it = b; it < e;) {
        /* the run of items [it, end) shares one block of columns: B is packed once for it */
        uint64_t bi = (uint64_t)it / per_batch, rem = (uint64_t)it % per_batch;
        int64_t nbk = (int64_t)(rem / (uint64_t)p->mblocks);
        int64_t mbk = (int64_t)(rem % (uint64_t)p->mblocks);
        size_t end = it + (size_t)(p->mblocks - mbk);
        if (end > e) end = e;
        int64_t m0 = mbk * p->mb, m1 = (mbk + (int64_t)(end - it)) * p->mb;
        if (m1 > M) m1 = M;
        int64_t nbj = 1; /* whole blocks of columns in a row: one call, A packed once for all */
        if (m0 == 0 && m1 == M && p->path != IPU__MM_GEMV)
            while (nbk + nbj < p->nblocks && end + (size_t)p->mblocks <= e) {
                end += (size_t)p->mblocks;
                nbj++;
            }
        int64_t j0 = nbk * p->nb, nc = N - j0 < nbj * p->nb ? N - j0 : nbj * p->nb;
        int64_t oa, ob;
        batch_offsets(p, bi, &oa, &ob);
        /* float16: rows in chunks whose float32 tile fits (float32: one chunk, y itself) */
        int64_t rows = m1 - m0;
        if (f16 && rows * nc > tile_floats) { /* (one chunk: B's panels read once) */
            rows = tile_floats / nc > 1 ? tile_floats / nc : 1;
            if (rows > IPU__MM_MB) rows -= rows % IPU__MM_MB; /* whole micro-kernel heights */
        }
        for (int64_t r0 = m0; r0 < m1; r0 += rows) {
            int64_t r1 = m1 - r0 < rows ? m1 : r0 + rows;
            mm_item r = {r0, r1, oa * M * K, ob * K * N, (int64_t)bi * M * N};
            ipu__sgemm_args g = mm_args(p, &r, A, B, f16);
            g.n = nc;
            g.b = (const char *)g.b + (size_t)(j0 * g.b_cs) * es;
            g.c = f16 ? tile : (float *)y + r.y_off + r0 * N + j0;
            g.ldc = f16 ? nc : N;
            if (half_ok && p->path != IPU__MM_GEMV) { /* the micro-kernel stores y in half */
                ipu__tile_ep ep;
                memset(&ep, 0, sizeof ep);
                ep.relu = p->is_gemm && p->act == IPU__ACT_RELU;
                ep.yh = (uint16_t *)y + r.y_off + r0 * N + j0;
                ep.ldy = N;
                if (p->is_gemm && p->has_c) {
                    ep.resh = (const uint16_t *)c + r0 * p->c_rs + j0;
                    ep.ldr = p->c_rs;
                }
                const float *bp = pre ? pre + ob * p->packed_mat + j0 * K : NULL;
                if (ipu__sgemm_half(&g, bp, K * p->packed_nr, p->packed_nr, &ep, scratch,
                                    IPU__SCRATCH_BYTES) ||
                    (bp && ipu__sgemm_half(&g, NULL, 0, 0, &ep, scratch, IPU__SCRATCH_BYTES)))
                    continue;
            }
            if (p->path == IPU__MM_GEMV)
                ipu__sgemv(&g, scratch, IPU__SCRATCH_BYTES);
            else if (!pre ||
                     !ipu__sgemm_packed(&g, pre + ob * p->packed_mat + j0 * K, K * p->packed_nr,
                                        p->packed_nr, scratch, IPU__SCRATCH_BYTES))
                ipu__sgemm(&g, scratch, sg_bytes);
            bool ep = p->is_gemm && (p->has_c || p->alpha != 1.0f || p->act);
            if (ep || f16)
                for (int64_t i = r0; i < r1; i++) {
                    float *row = g.c + (i - r0) * g.ldc;
                    if (ep) gemm_epilogue_row(p, c, f16, i, j0, row, row, nc);
                    if (f16)
                        ipu__cvt_f32_to_f16(row, (uint16_t *)y + r.y_off + i * N + j0, (size_t)nc);
                }
        }
        it = end;
    }
    return IPU_OK;
}

ipu_status ipu__k_matmul_f32(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                             void *scratch) {
    return mm_run(f, ins, b, e, scratch, 0);
}
ipu_status ipu__k_gemm_f32(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                           void *scratch) {
    return mm_run(f, ins, b, e, scratch, 0);
}
ipu_status ipu__k_matmul_f16(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                             void *scratch) {
    return mm_run(f, ins, b, e, scratch, 1);
}
ipu_status ipu__k_gemm_f16(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e,
                           void *scratch) {
    return mm_run(f, ins, b, e, scratch, 1);
}

/* Integer matmul, wrap-around arithmetic in unsigned types (i-k-j order, vectorisable). */
#define INT_MATMUL(sfx, U)                                                                         \
    ipu_status ipu__k_matmul_##sfx(const ipu__frame *f, const ipu__instr *ins, size_t b, size_t e, \
                                   void *scratch) {                                                \
        (void)scratch;                                                                             \
        const ipu__mm_plan *p = ins->plan;                                                         \
        const U *A = f->ptr[ins->in[0]], *B = f->ptr[ins->in[1]];                                  \
        U *Y = f->ptr[ins->out[0]];                                                                \
        int64_t N = p->N, K = p->K;                                                                \
        for (size_t it = b; it < e; it++) {                                                        \
            mm_item r = item_of(p, it);                                                            \
            for (int64_t i = r.m0; i < r.m1; i++) {                                                \
                U *restrict y = Y + r.y_off + i * N;                                               \
                const U *a = A + r.a_off + i * K;                                                  \
                memset(y, 0, sizeof(U) * (size_t)N);                                               \
                for (int64_t k = 0; k < K; k++) {                                                  \
                    U av = a[k];                                                                   \
                    const U *restrict brow = B + r.b_off + k * N;                                  \
                    for (int64_t j = 0; j < N; j++) y[j] += av * brow[j];                          \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        return IPU_OK;                                                                             \
    }
INT_MATMUL(i32, uint32_t)
INT_MATMUL(i64, uint64_t)

/* ---- plans ---------------------------------------------------------------------------------- */

#define MM_NB_MAX ((int64_t)768)    /* PACKED: columns per block (B block of KC rows: 768 KiB) */
#define GEMV_NB_MAX ((int64_t)1024) /* GEMV: columns per block */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void ipu__mm_plan_blocks(ipu__mm_plan *p) {
    int64_t M = p->M, N = p->N, K = p->K;
    p->path = IPU__MM_ROWS;
    p->mb = IPU__MM_MB;
    p->mblocks = cdiv(M, IPU__MM_MB);
    p->nb = N;
    p->nblocks = 1;
    bool f16 = p->dtype == IPU_DTYPE_FLOAT16;
    if ((p->dtype == IPU_DTYPE_FLOAT32 || f16) && M > 0 && N > 0) {
        if (!f16 && M <= IPU__GEMV_MAX_M &&
            (!p->trans_a || M == 1 || (uint64_t)(M * K) * 4 <= IPU__SCRATCH_BYTES)) {
            p->path = IPU__MM_GEMV;
            p->mb = M;
            p->mblocks = 1;
            /* about 4 blocks (2 workers), 16 to GEMV_NB_MAX columns each: long rows of B */
            p->nb = cdiv(cdiv(N, 4), 16) * 16;
            if (p->nb > GEMV_NB_MAX) p->nb = GEMV_NB_MAX;
        } else {
            /* blocks of about equal size (balanced over workers): rows a multiple of the
             * micro-kernel's height (6, 12 for AVX-512: a block of 66 rows would compute 72),
             * columns of every width (8, 16, 32) */
            ipu__ukr u;
            ipu__sgemm_ukr(&u);
            p->path = IPU__MM_PACKED;
            p->nb = cdiv(cdiv(N, cdiv(N, MM_NB_MAX)), 32) * 32;
            int64_t mbl = cdiv(M, IPU__MM_MB);
            if (mbl > 1 && p->batch * (uint64_t)mbl * (uint64_t)cdiv(N, p->nb) % 2) mbl++;
            p->mb = cdiv(cdiv(M, mbl), u.mr) * u.mr; /* an even number of items splits evenly */
            p->mblocks = cdiv(M, p->mb);
            /* at least 8 items, so that a helper that wakes late still gets a share */
            while (p->batch * (uint64_t)p->mblocks * (uint64_t)cdiv(N, p->nb) < 8 && p->nb > 64)
                p->nb = cdiv(p->nb / 2, 32) * 32;
        }
        p->nblocks = cdiv(N, p->nb);
    }
    p->hdr.work = (M == 0 || N == 0)
                      ? 0
                      : (size_t)(p->batch * (uint64_t)p->mblocks * (uint64_t)p->nblocks);
}

size_t ipu__mm_packed_floats(const ipu__mm_plan *p, uint64_t nmat, int nr) {
    if (p->path != IPU__MM_PACKED || p->K <= 0) return 0;
    return (size_t)nmat * ipu__sgemm_packed_b_floats(p->K, p->N, nr);
}

void ipu__mm_pack_b(const ipu__mm_plan *p, const void *b, uint64_t nmat, int nr, float *dst) {
    size_t per = ipu__sgemm_packed_b_floats(p->K, p->N, nr);
    int f16 = p->dtype == IPU_DTYPE_FLOAT16;
    for (uint64_t i = 0; i < nmat; i++) {
        ipu__sgemm_args g = {0};
        g.k = p->K;
        g.n = p->N;
        g.b = (const char *)b + i * (uint64_t)(p->K * p->N) * (f16 ? 2 : 4);
        g.b_f16 = f16;
        g.b_rs = p->trans_b ? 1 : p->N;
        g.b_cs = p->trans_b ? p->K : 1;
        ipu__sgemm_pack_b_all(&g, nr, dst + i * per);
    }
}

/* Plan functions (verify_internal.h, ipu_ops.def's `plan` column): shapes, attributes, the plan. */

typedef struct mm_pack {
    const ipu__mm_plan *plan;
    uint64_t nmat;
    int nr;
} mm_pack;

static void pack_mm_weights(const void *ctx, const void *b, void *out) {
    const mm_pack *c = ctx;
    ipu__mm_pack_b(c->plan, b, c->nmat, c->nr, out);
}

/* The blocking of a MATMUL/GEMM plan, and its B packed (as float32) once when it is stored in the
 * executable (used while the session does not bind another tensor in its place): mapped from
 * the PopEF's packed blob when it has it, else packed here (prepack.h). */
static ipu_status mm_finish(const vctx *v, const ipu__mm_plan *t, const ipu__tensor *b,
                            ipu__instr *ins) {
    ipu__mm_plan *p = alloc_plan(sizeof *p);
    if (!p) return plan_nomem();
    *p = *t;
    ipu__mm_plan_blocks(p);
    p->hdr.fn = ipu__select_kernel(ins->op, p->dtype);
    ipu__ukr u;
    ipu__sgemm_ukr(&u);
    uint64_t kn = (uint64_t)p->K * (uint64_t)p->N, nmat = kn ? b->numel / kn : 0;
    size_t nf = 0;
    if (b->loc == IPU_LOC_TENSOR_DATA && p->hdr.work > 0 && b->desc.dtype == p->dtype &&
        nmat * kn <= ((uint64_t)1 << 40))
        nf = ipu__mm_packed_floats(p, nmat, u.nr);
    if (nf) {
        mm_pack mp = {p, nmat, u.nr};
        /* nmat matrices B [K, N], stored as [N, K] under trans_b */
        ipu__pack_src src = {ins->in[1], p->trans_b ? 1 : 0, nmat,
                             (uint64_t)(p->trans_b ? p->N : p->K),
                             (uint64_t)(p->trans_b ? p->K : p->N)};
        /* version 1 of ipu__mm_pack_b's bytes (ipu__sgemm_pack_b_all): bump it when they change;
         * geom[2]: packed from float16 */
        ipu__pack_tag tag = {IPU__PACK_SGEMM_B,
                             1,
                             (uint32_t)u.isa,
                             {(uint32_t)u.nr, IPU__SGEMM_KC,
                              (uint32_t)(p->dtype == IPU_DTYPE_FLOAT16), 0}};
        const void *dst;
        ipu_status st = ipu__vpacked(v, 1, &src, &tag, nf * sizeof(float), pack_mm_weights, &mp,
                                     &dst);
        if (st == IPU_OK) {
            p->packed = dst;
            p->packed_nr = u.nr;
            p->packed_mat = (int64_t)(nf / nmat);
        } else if (st == IPU_ERR_NOMEM) { /* no room for a packed copy: pack per call instead */
            ipu__clear_error();
        } else {
            ipu__free(p);
            return st;
        }
    }
    /* mm_run packs B once for a run of items of one column block (unless packed here) */
    p->hdr.contiguous = p->path == IPU__MM_PACKED && !p->packed && p->mblocks > 1;
    ins->plan = p;
    return IPU_OK;
}

/* MATMUL: a[..., M, K] @ b[..., K, N], batch dims broadcast. */
ipu_status ipu__verify_matmul(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                              ipu__instr *ins) {
    const ipu__tensor *a = in[0], *b = in[1];
    char s1[160], s2[160], s3[160];
    if (a->desc.ndim < 2 || b->desc.ndim < 2)
        return bad(v, "operands must have ndim >= 2: a%s b%s", shape_str(s1, sizeof s1, a),
                   shape_str(s2, sizeof s2, b));
    uint32_t an = a->desc.ndim, bn = b->desc.ndim;
    int64_t M = a->desc.dims[an - 2], K = a->desc.dims[an - 1];
    int64_t K2 = b->desc.dims[bn - 2], N = b->desc.dims[bn - 1];
    if (K != K2)
        return bad(v, "inner dims differ: a[...,K=%lld] vs b[K=%lld,...]", (long long)K,
                   (long long)K2);
    ipu_status st = ipu__vcheck_bcast(v, a, b, y, 2, "batch dims");
    if (st) return st;
    uint32_t yn = y->desc.ndim;
    if (y->desc.dims[yn - 2] != M || y->desc.dims[yn - 1] != N)
        return bad(v, "output y%s, expected [...,%lld,%lld]", shape_str(s3, sizeof s3, y),
                   (long long)M, (long long)N);
    ipu__mm_plan pl = {0}, *p = &pl;
    uint32_t nb = yn - 2;
    memcpy(p->bshape, y->desc.dims, sizeof(int64_t) * nb);
    ipu__vbcast_strides(a, 2, nb, y->desc.dims, p->abs);
    ipu__vbcast_strides(b, 2, nb, y->desc.dims, p->bbs);
    uint64_t batch = 1;
    for (uint32_t d = 0; d < nb; d++) batch *= (uint64_t)y->desc.dims[d]; /* <= y.numel or 0 */
    p->bdim = nb ? ipu__vcollapse(nb, p->bshape, p->abs, p->bbs) : 0;
    if (nb == 0) p->bshape[0] = 1;
    p->dtype = y->desc.dtype;
    p->M = M;
    p->N = N;
    p->K = K;
    p->batch = batch;
    return mm_finish(v, p, b, ins);
}

/* The product of all dims but the last. */
static int64_t lead(const ipu_tensor_desc *d) {
    int64_t m = 1;
    for (uint32_t i = 0; i + 1 < d->ndim; i++) m *= d->dims[i];
    return m;
}

ipu_status ipu__verify_gemm(const vctx *v, const ipu__tensor *const *in, const ipu__tensor *y,
                            ipu__instr *ins) {
    char s1[160], s2[160], s3[160];
    const ipu__tensor *a = in[0], *b = in[1], *c = ins->n_in == 3 ? in[2] : NULL;
    const ipu_tensor_desc *ad = &a->desc, *yd = &y->desc;
    /* transA, transB, alpha, beta, then optionally activation, and fn, p0, p1 with UNARY */
    if (ins->n_attr != 4 && ins->n_attr != 5 && ins->n_attr != 8)
        return bad(v, "%u attributes, expected 4, 5 or 8", ins->n_attr);
    if (ad->ndim < 2 || b->desc.ndim != 2 || (ad->ndim > 2 && ins->attr[0] != 0))
        return bad(v, "B must be 2-D and A 2-D, or n-D without transA: A%s B%s",
                   shape_str(s1, sizeof s1, a), shape_str(s2, sizeof s2, b));
    for (int i = 0; i < 2; i++)
        if (ins->attr[i] != 0 && ins->attr[i] != 1)
            return bad(v, "%s must be 0 or 1, got %lld", i ? "transB" : "transA",
                       (long long)ins->attr[i]);
    int ta = (int)ins->attr[0], tb = (int)ins->attr[1];
    int64_t act = ins->n_attr >= 5 ? ins->attr[4] : IPU__ACT_NONE;
    ipu__unary_act ua = {0};
    ipu_status st = ipu__vact_epilogue(v, ins, act, 5, &ua);
    if (st) return st;
    /* n-D A [..., K]: its rows are the M = prod(...) rows of a [M, K] matrix, Y [..., N] */
    int64_t M = ad->ndim == 2 ? ad->dims[ta] : lead(ad);
    int64_t K = ad->ndim == 2 ? ad->dims[1 - ta] : ad->dims[ad->ndim - 1];
    int64_t K2 = b->desc.dims[tb], N = b->desc.dims[1 - tb];
    if (K != K2)
        return bad(v, "inner dims differ: op(A)[M=%lld,K=%lld] vs op(B)[K=%lld,N=%lld]",
                   (long long)M, (long long)K, (long long)K2, (long long)N);
    bool y_ok = yd->ndim == ad->ndim && yd->dims[yd->ndim - 1] == N &&
                (ad->ndim == 2
                     ? yd->dims[0] == M
                     : memcmp(yd->dims, ad->dims, (ad->ndim - 1) * sizeof *ad->dims) == 0);
    if (!y_ok)
        return bad(v, "output Y%s, expected A's leading dims then %lld (M=%lld)",
                   shape_str(s3, sizeof s3, y), (long long)N, (long long)M);
    /* C: a row [N] or [1,..,1,N], a column [M, 1] (2-D), a scalar, or Y's own shape ([M, N]) */
    int64_t cr = 1, cc = 1;
    if (c) {
        const ipu_tensor_desc *cd = &c->desc;
        cc = cd->ndim >= 1 ? cd->dims[cd->ndim - 1] : 1;
        cr = cd->ndim >= 1 ? lead(cd) : 1;
        bool full = cd->ndim == yd->ndim &&
                    memcmp(cd->dims, yd->dims, yd->ndim * sizeof *yd->dims) == 0;
        bool col = yd->ndim == 2 && cd->ndim <= 2 && cr == M; /* [M, 1] or [M, N] */
        if ((cr != 1 && !col && !full) || (cc != 1 && cc != N))
            return bad(v, "C%s does not broadcast to Y%s", shape_str(s1, sizeof s1, c),
                       shape_str(s3, sizeof s3, y));
    }
    ipu__mm_plan pl = {0}, *p = &pl;
    double alpha, beta;
    memcpy(&alpha, &ins->attr[2], sizeof alpha);
    memcpy(&beta, &ins->attr[3], sizeof beta);
    p->dtype = y->desc.dtype;
    p->M = M;
    p->N = N;
    p->K = K;
    p->batch = 1;
    p->bdim = 0;
    p->bshape[0] = 1;
    p->is_gemm = 1;
    p->act = (int)act;
    p->unary = ua;
    p->trans_a = ta;
    p->trans_b = tb;
    p->has_c = c != NULL;
    p->alpha = (float)alpha;
    p->beta = (float)beta;
    p->c_rs = cr == 1 ? 0 : cc;
    p->c_cs = cc == 1 ? 0 : 1;
    return mm_finish(v, p, b, ins);
}
