/* Body of the vectorised float32 math of vmath.c, included once per instruction set with
 * VM_SFX (name suffix), VM_ATTR (function attributes), VF/VI (float/int32 vector types of VM_N
 * lanes) and VM_FMA(a, b, c) (a * b + c) defined. Written with GCC/Clang vector extensions: the
 * AVX2 build works on 8 lanes (one ymm register) with fused multiply-adds, the portable build on
 * 4 (SSE2 on x86-64, NEON on AArch64, scalar code elsewhere). It #undefs them at the end.
 *
 * exp: Cephes expf (x = n ln2 + r, |r| <= ln2/2, degree-7 polynomial), 2^n applied in two halves
 * so that results down to the smallest subnormal round once; x > 88.72 gives +inf, NaN
 * propagates. erf: |x| < 1: x P(x^2) (P: degree 6, erf(x)/x fitted in x^2); 1 <= |x| < 4:
 * 1 - exp(-x^2) Q(1/|x|) (Q: degree 9, erfc(x) e^(x^2) fitted in 1/x); beyond: +-1. The fits are
 * least squares on Chebyshev nodes against math.erf/erfc. Error bounds: tests/c/test_vmath.c. */

#define VM_CAT2(a, b) a##b
#define VM_CAT(a, b) VM_CAT2(a, b)
#define VM_FN(name) VM_CAT(name, VM_SFX)

VM_ATTR static inline VF VM_FN(vm_sel)(VI m, VF a, VF b) {
    return (VF)((m & (VI)a) | (~m & (VI)b));
}

/* e^r for r = x - fn ln2 (fn = x / ln2 rounded to an integer): ln2 in two parts, then the
 * Cephes polynomial. What vm_exp and vm_exp_core multiply by 2^fn. */
VM_ATTR static inline VF VM_FN(vm_exp_poly)(VF fn, VF x) {
    VF r = VM_FMA(fn, (VF){0} - 0.693359375f, x);
    r = VM_FMA(fn, (VF){0} + 2.12194440e-4f, r);
    VF p = (VF){0} + 1.9875691500e-4f;
    p = VM_FMA(p, r, (VF){0} + 1.3981999507e-3f);
    p = VM_FMA(p, r, (VF){0} + 8.3334519073e-3f);
    p = VM_FMA(p, r, (VF){0} + 4.1665795894e-2f);
    p = VM_FMA(p, r, (VF){0} + 1.6666665459e-1f);
    p = VM_FMA(p, r, (VF){0} + 5.0000001201e-1f);
    p = VM_FMA(p, r * r, r) + 1.0f;
    return p;
}

VM_ATTR static inline VF VM_FN(vm_exp)(VF x) {
    VI ok = x == x; /* false for NaN */
    VF xc = VM_FN(vm_sel)(ok, x, (VF){0});
    xc = VM_FN(vm_sel)(xc > 88.8f, (VF){0} + 88.8f, xc);
    xc = VM_FN(vm_sel)(xc < -104.0f, (VF){0} - 104.0f, xc);
    VF t = xc * 1.44269504088896341f;
    VF half = VM_FN(vm_sel)(t < 0.0f, (VF){0} - 0.5f, (VF){0} + 0.5f);
    VI n = __builtin_convertvector(t + half, VI); /* round half away from zero */
    VF fn = __builtin_convertvector(n, VF);
    VF p = VM_FN(vm_exp_poly)(fn, xc);
    VI n1 = n >> 1, n2 = n - n1;
    VF s1 = (VF)((n1 + 127) << 23), s2 = (VF)((n2 + 127) << 23);
    return VM_FN(vm_sel)(ok, p * s1 * s2, x);
}

/* The same polynomial for arguments whose result is a normal float, -87.33 <= x <= 88.37 (2^n
 * applied in one step, n rounded half to even by the 1.5 * 2^23 shift), without the clamps and
 * NaN selects of vm_exp: erf's exp(-x^2) and the logistic family below. */
VM_ATTR static inline VF VM_FN(vm_exp_core)(VF x) {
    const VF shift = (VF){0} + 12582912.0f;
    VF t = VM_FMA(x, (VF){0} + 1.44269504088896341f, shift);
    VF fn = t - shift;
    VI n = (VI)t - (VI)shift;
    VF p = VM_FN(vm_exp_poly)(fn, x);
    return p * (VF)((n + 127) << 23);
}

/* exp for 1 / (1 + exp(x)) and x / (1 + exp(x)): below -87.33 the result stays at ~1e-38
 * instead of going through the subnormals to 0 (1 + e cannot tell them apart), above 88.37 it
 * is +inf (exp overflows at 88.72: the results agree to the last bit from there on, and below
 * to float rounding); NaN propagates. */
VM_ATTR static inline VF VM_FN(vm_exp_sat)(VF x) {
    VF y = VM_FN(vm_exp_core)(VM_FN(vm_sel)(x < -87.33f, (VF){0} - 87.33f, x));
    return VM_FN(vm_sel)(x > 88.37f, (VF){0} + INFINITY, y);
}

VM_ATTR static inline VF VM_FN(vm_erf)(VF x) {
    const VI sign = (VI)x & (int32_t)0x80000000;
    VF a = (VF)((VI)x & 0x7fffffff);
    /* |x| < 1 */
    VF z = a * a;
    VF p = (VF){0} + 7.8982099e-05f;
    p = VM_FMA(p, z, (VF){0} + -8.0243539e-04f);
    p = VM_FMA(p, z, (VF){0} + 5.1900535e-03f);
    p = VM_FMA(p, z, (VF){0} + -2.6854809e-02f);
    p = VM_FMA(p, z, (VF){0} + 1.1283612e-01f);
    p = VM_FMA(p, z, (VF){0} + -3.7612629e-01f);
    p = VM_FMA(p, z, (VF){0} + 1.1283792e+00f);
    VF small = a * p;
    /* 1 <= |x| < 4 (clamped: erf rounds to 1 from 3.92 on) */
    VF b = VM_FN(vm_sel)(a < 1.0f, (VF){0} + 1.0f, a);
    b = VM_FN(vm_sel)(b > 4.0f, (VF){0} + 4.0f, b);
    VF u = 1.0f / b;
    VF q = (VF){0} + 3.2065835e-02f;
    q = VM_FMA(q, u, (VF){0} + -1.8719515e-01f);
    q = VM_FMA(q, u, (VF){0} + 4.5621401e-01f);
    q = VM_FMA(q, u, (VF){0} + -5.6150389e-01f);
    q = VM_FMA(q, u, (VF){0} + 2.5932661e-01f);
    q = VM_FMA(q, u, (VF){0} + 2.1876548e-01f);
    q = VM_FMA(q, u, (VF){0} + -3.7169361e-01f);
    q = VM_FMA(q, u, (VF){0} + 1.9603916e-02f);
    q = VM_FMA(q, u, (VF){0} + 5.6188571e-01f);
    q = VM_FMA(q, u, (VF){0} + 1.1466930e-04f);
    VF big = 1.0f - VM_FN(vm_exp_core)(-(b * b)) * q; /* -16 <= -b^2 <= -1 */
    VF r = VM_FN(vm_sel)(a < 1.0f, small, big);
    r = (VF)((VI)r | sign);
    return VM_FN(vm_sel)(x == x, r, x);
}

/* y[i] = f(x[i]) for n elements; x == y allowed. The tail goes through a padded lane group. */
#define VM_LOOP(EXPR)                               \
    size_t i = 0;                                   \
    for (; i + VM_N <= n; i += VM_N) {              \
        VF v;                                       \
        memcpy(&v, x + i, sizeof v);                \
        v = (EXPR);                                 \
        memcpy(y + i, &v, sizeof v);                \
    }                                               \
    if (i < n) {                                    \
        VF v = {0};                                 \
        memcpy(&v, x + i, (n - i) * sizeof(float)); \
        v = (EXPR);                                 \
        memcpy(y + i, &v, (n - i) * sizeof(float)); \
    }
#define VM_MAP(name, EXPR) \
    VM_ATTR static void VM_FN(name)(const float *x, float *y, size_t n) { VM_LOOP(EXPR) }
/* As VM_MAP, with a float parameter `a` the expression reads as the vector va. */
#define VM_MAP_A(name, EXPR)                                                       \
    VM_ATTR static void VM_FN(name)(const float *x, float *y, size_t n, float a) { \
        const VF va = (VF){0} + a;                                                 \
        VM_LOOP(EXPR)                                                              \
    }

VM_MAP(vm_exp_map, VM_FN(vm_exp)(v))
VM_MAP(vm_erf_map, VM_FN(vm_erf)(v))
VM_MAP(vm_gelu_map, 0.5f * v * (1.0f + VM_FN(vm_erf)(v * 0.70710678118654752f)))
VM_MAP(vm_sigmoid_map, 1.0f / (1.0f + VM_FN(vm_exp_sat)(-v)))
VM_MAP_A(vm_swish_map, v / (1.0f + VM_FN(vm_exp_sat)(-(va * v))))
/* 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3): no cancellation
 * where tanh(u) is near -1 */
VM_MAP(vm_gelu_tanh_map,
       v / (1.0f + VM_FN(vm_exp_sat)(v * (-1.5957691216057308f - 0.07135481627159562f * v * v))))

/* Softmax of one contiguous row: y = exp(x - max) / sum; the exponentials are stored once. */
/* max of x[0, n) (-inf for n = 0); NaN when any element is NaN. */
VM_ATTR static float VM_FN(vm_max)(const float *x, size_t n) {
    float m = -INFINITY;
    bool nan = false;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != x[i])
            nan = true;
        else if (x[i] > m)
            m = x[i];
    }
    return nan ? NAN : m;
}

/* y *= a */
VM_ATTR static void VM_FN(vm_scale)(float *y, size_t n, float a) {
    for (size_t i = 0; i < n; i++) y[i] *= a;
}

/* y = exp(x - m); returns the sum of y (lane-wise partial sums, then added in lane order). */
VM_ATTR static float VM_FN(vm_exp_sum)(const float *x, float *y, size_t n, float m) {
    VF vm = (VF){0} + m, acc = {0};
    size_t i = 0;
    for (; i + VM_N <= n; i += VM_N) {
        VF v;
        memcpy(&v, x + i, sizeof v);
        v = VM_FN(vm_exp)(v - vm);
        acc += v;
        memcpy(y + i, &v, sizeof v);
    }
    float s = 0.0f;
    for (int k = 0; k < VM_N; k++) s += acc[k];
    if (i < n) {
        VF v = {0};
        memcpy(&v, x + i, (n - i) * sizeof(float));
        v = VM_FN(vm_exp)(v - vm);
        for (size_t k = 0; k < n - i; k++) s += v[k];
        memcpy(y + i, &v, (n - i) * sizeof(float));
    }
    return s;
}

#undef VM_LOOP
#undef VM_MAP
#undef VM_MAP_A
#undef VM_FN
#undef VM_CAT
#undef VM_CAT2
/* the includer's parameters: ready for the next instruction set */
#undef VM_SFX
#undef VM_ATTR
#undef VM_FMA
#undef VF
#undef VI
#undef VM_N
