/* POOL2D's max pools of 3-column windows at column stride 2 on AVX-512 (pool.c chooses them;
 * split from it, which holds the other paths). */
#include <math.h>
#include <stdbool.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "pool.h"

#if IPU_X86
/* Max pools with 3-column windows at column stride 2 (kernel_shape [KH, 3], strides [2, 2], no
 * dilation: the pool after the first convolution of ResNet, SqueezeNet, AlexNet, GoogLeNet,
 * DenseNet and ShuffleNet, and the ones inside some of them) on AVX-512: per block of 16
 * outputs of a row, each input row's column maxima come from four masked loads (columns
 * outside the row read -inf) and three two-register permutes, then the output row is the
 * maximum of its KH rows' in kh order; the last row's maxima carry over to the next output
 * row, which starts there. No copies and no per-row edge work, which
 * took the window path 3-4 times the taps on 13- to 27-column maps. The same order of
 * comparisons as max_tap (_mm512_max_ps(v, a) keeps a unless v > a), so the first of equal
 * values stays; a NaN anywhere returns false and the item goes the other paths. */
bool ipu__pool_s2max_ok(const ipu__pool_plan *p) {
    return p->kind == 0 && p->KW == 3 && p->sw == 2 && p->dw == 1 && p->sh == 2 && p->dh == 1 &&
           p->pl >= 0 && p->pl <= 2 && p->W >= 1 && p->W < ((int64_t)1 << 30);
}

/* Lanes j of a 16-column load at column c (j < 16) with 0 <= c + j < W. */
static inline __mmask16 cols_mask(int64_t c, int64_t W) {
    int64_t lo = c < 0 ? -c : 0, hi = W - c < 16 ? W - c : 16;
    if (hi <= lo) return 0;
    return (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

/* Column maxima of input row r for the 16 outputs of a block: lane j is the max of columns
 * c + 2j + kw, kw < 3, in kw order (lanes m* of the four loads lie inside the row). */
__attribute__((target("avx512f"))) static inline __m512 hmax3(const float *r, __mmask16 m0,
                                                              __mmask16 m1, __mmask16 m2,
                                                              __mmask16 m3, __mmask16 *nan) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                           30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 l0 = _mm512_mask_loadu_ps(ninf, m0, r), l1 = _mm512_mask_loadu_ps(ninf, m1, r + 16);
    __m512 l2 = _mm512_mask_loadu_ps(ninf, m2, r + 2), l3 = _mm512_mask_loadu_ps(ninf, m3, r + 18);
    *nan |= _mm512_cmp_ps_mask(l0, l1, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(l2, l3, _CMP_UNORD_Q);
    __m512 h = _mm512_permutex2var_ps(l0, even, l1);               /* kw 0 */
    h = _mm512_max_ps(_mm512_permutex2var_ps(l0, odd, l1), h);     /* kw 1 */
    return _mm512_max_ps(_mm512_permutex2var_ps(l2, even, l3), h); /* kw 2 */
}

/* Output rows [oh0, oh1) of one plane, block of 16 outputs after block (the last row's maxima
 * carried in a register to the next output row); false (y partly written) if a NaN was read. */
__attribute__((target("avx512f"))) bool ipu__pool_max_s2(const ipu__pool_plan *p, const float *x,
                                                         int64_t oh0, int64_t oh1, float *y) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const int64_t W = p->W;
    __mmask16 nan = 0;
    for (int64_t ow0 = 0; ow0 < p->OW; ow0 += 16) {
        const int64_t c = 2 * ow0 - p->pl; /* lane 0's tap 0 column */
        const __mmask16 m0 = cols_mask(c, W), m1 = cols_mask(c + 16, W);
        const __mmask16 m2 = cols_mask(c + 2, W), m3 = cols_mask(c + 18, W);
        const __mmask16 out = p->OW - ow0 < 16 ? (__mmask16)((1u << (p->OW - ow0)) - 1) : 0xFFFF;
        __m512 carry = ninf;
        int64_t carried = INT64_MIN; /* the input row whose maxima `carry` holds */
        for (int64_t oh = oh0; oh < oh1; oh++) {
            __m512 a = ninf;
            for (int64_t kh = 0, ih = oh * 2 - p->pt; kh < p->KH; kh++, ih++) {
                if (ih < 0 || ih >= p->H) continue;
                __m512 h = carry;
                if (ih != carried) {
                    const float *r = x + ih * W + c;
                    if (ih + 4 < p->H) { /* the strip's rows ahead: a stride the prefetchers miss */
                        __builtin_prefetch(r + 4 * W);
                        __builtin_prefetch(r + 4 * W + 16);
                    }
                    h = hmax3(r, m0, m1, m2, m3, &nan);
                }
                if (kh == p->KH - 1) {
                    carry = h;
                    carried = ih;
                }
                a = _mm512_max_ps(h, a);
            }
            _mm512_mask_storeu_ps(y + oh * p->OW + ow0, out, a);
        }
    }
    return !nan;
}
#endif
