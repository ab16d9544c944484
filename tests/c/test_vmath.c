/* Vectorised float32 math (kernels/vmath.c) against libm's double erf/exp rounded to float,
 * over float bit patterns spread through the whole range (both signs, subnormals, the tails),
 * plus NaN and the infinities, for the portable and the AVX2 code. Also GELU and softmax rows
 * against double formulas, and the logistic family (sigmoid, swish, GELU's tanh form) swept as
 * erf and exp are, in ulps where the result is not tiny. Optional argv[1]: stride between bit patterns (1 = every float). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "float_ulps.h"
#include "interp/kernels/isa.h"
#include "interp/kernels/vmath.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef void (*vm_fn)(const float *, float *, size_t);

/* Max ulp error of fn against ref over every stride-th bit pattern; where |ref| < tiny, an
 * absolute error below tiny counts as exact. */
static int64_t sweep_tiny(vm_fn fn, double (*ref)(double), uint32_t stride, double tiny,
                          float *worst) {
    enum { B = 4099 }; /* odd chunk: exercises the tail path too */
    float x[B], y[B];
    int64_t maxu = 0;
    uint64_t u = 0;
    while (u <= 0xffffffffu) {
        size_t n = 0;
        for (; n < B && u <= 0xffffffffu; n++, u += stride) x[n] = from_bits((uint32_t)u);
        fn(x, y, n);
        for (size_t i = 0; i < n; i++) {
            double w = ref((double)x[i]);
            float want = (float)w;
            int64_t e = fabs(w) < tiny && fabs(y[i] - w) < tiny ? 0 : ulps(y[i], want);
            if (e > maxu) {
                maxu = e;
                *worst = x[i];
            }
        }
    }
    return maxu;
}

static int64_t sweep(vm_fn fn, double (*ref)(double), uint32_t stride, float *worst) {
    return sweep_tiny(fn, ref, stride, 0.0, worst);
}

static void specials(vm_fn fn, double (*ref)(double), const char *name) {
    float x[] = {NAN,   -NAN, INFINITY, -INFINITY, 0.0f,   -0.0f,  1e-45f,  -1e-45f, 1.0f,  -1.0f,
                 3.92f, 4.0f, -4.0f,    88.72f,    88.73f, -87.3f, -103.9f, -104.5f, 1e30f, -1e30f};
    size_t n = sizeof x / sizeof x[0];
    float y[sizeof x / sizeof x[0]];
    fn(x, y, n);
    for (size_t i = 0; i < n; i++) {
        float want = (float)ref((double)x[i]);
        CHECK(ulps(y[i], want) <= 2, "%s(%g) = %.9g, want %.9g", name, (double)x[i], (double)y[i],
              (double)want);
        if (want == 0.0f)
            CHECK(signbit(y[i]) == signbit(want), "%s(%g): sign of zero", name, (double)x[i]);
    }
}

static double gelu_ref(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

static void check_gelu(void) {
    enum { N = 2001 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = -10.0f + 20.0f * (float)i / (N - 1);
    ipu__vm_gelu_erf(x, y, N);
    for (int i = 0; i < N; i++) {
        double w = gelu_ref(x[i]);
        CHECK(fabs(y[i] - w) <= 1e-6 * (1.0 + fabs(w)), "gelu(%g) = %.9g, want %.9g", (double)x[i],
              (double)y[i], w);
    }
    float s[] = {NAN, INFINITY, -INFINITY};
    ipu__vm_gelu_erf(s, s, 3);
    CHECK(isnan(s[0]) && s[1] == INFINITY && (isnan(s[2]) || s[2] == 0.0f),
          "gelu specials: %g %g %g", (double)s[0], (double)s[1], (double)s[2]);
}

static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }
/* a x rounded to float first, as the kernel and the reference interpreter compute it */
static double swish_ref(double x) { return x / (1.0 + exp(-(double)(1.5f * (float)x))); }
static void swish_15(const float *x, float *y, size_t n) { ipu__vm_swish(x, y, n, 1.5f); }
/* 0.5 x (1 + tanh(u)) as x / (1 + exp(-2u)): in double, 1 + tanh(u) cancels where u < -18 */
static double gelu_tanh_ref(double x) {
    return x / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* GELU's tanh form: the exponent -2u is rounded to float before exp, which alone moves the
 * result by up to |2u| ulp per rounded operation (three: exp's condition number is |2u|), so that
 * much is allowed on top. */
static void check_gelu_tanh(uint32_t stride, int isa) {
    enum { B = 4099 };
    float x[B], y[B], worst = 0;
    double excess = 0;
    for (uint64_t u = 0; u <= 0xffffffffu;) {
        size_t n = 0;
        for (; n < B && u <= 0xffffffffu; n++, u += stride) x[n] = from_bits((uint32_t)u);
        ipu__vm_gelu_tanh(x, y, n);
        for (size_t i = 0; i < n; i++) {
            double w = gelu_tanh_ref((double)x[i]), xd = x[i];
            if (fabs(w) < 1e-30 && fabs(y[i] - w) < 1e-30) continue;
            double two_u = 2.0 * sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd);
            double e = (double)ulps(y[i], (float)w) - 3.0 * fabs(two_u);
            if (e > excess) excess = e, worst = x[i];
        }
    }
    printf("isa %d: gelu(tanh) max %.0f ulp beyond the exponent's rounding (at %.9g)\n", isa,
           excess, (double)worst);
    CHECK(excess <= 4, "gelu(tanh): %.0f ulp at %.9g (isa %d)", excess, (double)worst, isa);
}

static void check_logistic(uint32_t stride, int isa) {
    struct {
        vm_fn fn;
        double (*ref)(double);
        const char *name;
    } fs[] = {{ipu__vm_sigmoid, sigmoid_ref, "sigmoid"}, {swish_15, swish_ref, "swish(1.5)"}};
    for (size_t k = 0; k < sizeof fs / sizeof fs[0]; k++) {
        float w = 0;
        int64_t e = sweep_tiny(fs[k].fn, fs[k].ref, stride, 1e-30, &w);
        printf("isa %d: %s max %lld ulp (at %.9g)\n", isa, fs[k].name, (long long)e, (double)w);
        CHECK(e <= 4, "%s: %lld ulp at %.9g (isa %d)", fs[k].name, (long long)e, (double)w, isa);
    }
    check_gelu_tanh(stride, isa);
    float s[] = {NAN, INFINITY, -INFINITY}, y[3];
    ipu__vm_sigmoid(s, y, 3);
    CHECK(isnan(y[0]) && y[1] == 1.0f && y[2] == 0.0f, "sigmoid specials: %g %g %g", (double)y[0],
          (double)y[1], (double)y[2]);
    ipu__vm_swish(s, y, 3, 1.0f); /* -inf / (1 + inf), as the reference's x / (1 + exp(-x)) */
    CHECK(isnan(y[0]) && y[1] == INFINITY && isnan(y[2]), "swish specials: %g %g %g", (double)y[0],
          (double)y[1], (double)y[2]);
}

/* The passes of a softmax row: max (NaN wins), exp(x - m) with its sum, scaling. */
static void check_softmax(void) {
    for (size_t n = 1; n <= 77; n += 19) {
        float x[80], y[80];
        double w[80], sum = 0, m = -INFINITY;
        for (size_t i = 0; i < n; i++) x[i] = (float)((int)(i * 37 % 23) - 11) * 0.7f;
        for (size_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
        for (size_t i = 0; i < n; i++) sum += (w[i] = exp(x[i] - m));
        float mv = ipu__vm_max(x, n);
        CHECK(mv == (float)m, "max n=%zu: %g", n, (double)mv);
        float s = ipu__vm_exp_sum(x, y, n, mv);
        CHECK(fabs(s - sum) <= 1e-6 * sum, "exp sum n=%zu: %g vs %g", n, (double)s, sum);
        ipu__vm_scale(y, n, 1.0f / s);
        for (size_t i = 0; i < n; i++)
            CHECK(fabs(y[i] - w[i] / sum) <= 1e-6 * (w[i] / sum) + 1e-9, "softmax n=%zu [%zu]", n,
                  i);
        x[n / 2] = NAN;
        CHECK(isnan(ipu__vm_max(x, n)), "max of a row with NaN n=%zu", n);
    }
    CHECK(ipu__vm_max(NULL, 0) == -INFINITY, "max of nothing");
    float z[3] = {-INFINITY, 0.0f, -INFINITY}, o[3];
    float s = ipu__vm_exp_sum(z, o, 3, ipu__vm_max(z, 3));
    CHECK(s == 1.0f && o[0] == 0.0f && o[1] == 1.0f && o[2] == 0.0f, "exp of -inf: %g %g %g",
          (double)o[0], (double)o[1], (double)o[2]);
}

int main(int argc, char **argv) {
    uint32_t stride = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 4093u;
    if (stride == 0) stride = 1;
    for (int isa = 1; isa <= 2; isa++) {
        if (ipu__isa_force(isa) != isa) continue; /* no AVX2 here */
        float we = 0, wx = 0;
        int64_t ee = sweep(ipu__vm_erf, erf, stride, &we);
        int64_t ex = sweep(ipu__vm_exp, exp, stride, &wx);
        printf("isa %d: erf max %lld ulp (at %.9g), exp max %lld ulp (at %.9g)\n", isa,
               (long long)ee, (double)we, (long long)ex, (double)wx);
        /* without FMA the erf polynomials round once more per step */
        CHECK(ee <= (isa == 2 ? 2 : 3), "erf: %lld ulp at %.9g (isa %d)", (long long)ee, (double)we,
              isa);
        CHECK(ex <= 2, "exp: %lld ulp at %.9g (isa %d)", (long long)ex, (double)wx, isa);
        specials(ipu__vm_erf, erf, "erf");
        specials(ipu__vm_exp, exp, "exp");
        check_gelu();
        check_softmax();
        check_logistic(stride, isa);
    }
    ipu__isa_force(0);
    return check_summary();
}
