/* qfold's GEMM (src/ops/math/gemm.h) against a plain triple loop accumulated in
 * double: every transpose pair, alpha / beta (beta 0 must not read C, which
 * holds NaN), leading dimensions wider than the rows, shapes that are no
 * multiple of any tile or block (K past one K block, N past one N block),
 * empty K, and sizes large enough to run on several threads; for each
 * micro-kernel this CPU can run, and through qf_sgemm (oneDNN's sgemm when
 * the backend is active), and qf_sgemm_serial (the portable GEMM on the
 * calling thread; A B^T over a long K as dot products). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/math/gemm.h"
#include "qfold/exec.h"
#include "tools/qf_check.h"

static uint32_t rng = 12345;
static double urand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (double)(rng >> 8) / (double)(1u << 24) - 0.5;
}

typedef struct shape {
    int64_t m, n, k;
} shape;

/* The reference: C = alpha op(A) op(B) + beta C, in double. */
static void naive(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                  const double *b, int64_t ldb, double beta, double *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * ldc + j] = alpha * s + (beta != 0 ? beta * c[i * ldc + j] : 0);
        }
}

static int failures_reported;

/* One case in float (through fn: 0 = qf_sgemm_ref, 1 = qf_sgemm, 2 =
 * qf_sgemm_serial) and in
 * double; tolerances scaled by sqrt(k). */
static void one_case(int fn, shape s, bool ta, bool tb, double alpha, double beta, int64_t pad)
{
    int64_t ar = ta ? s.k : s.m, ac = ta ? s.m : s.k, br = tb ? s.n : s.k, bc = tb ? s.k : s.n;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = s.n + pad;
    size_t na = (size_t)(ar * lda + 1), nb = (size_t)(br * ldb + 1), nc = (size_t)(s.m * ldc + 1);
    double *ad = malloc(na * sizeof *ad), *bd = malloc(nb * sizeof *bd), *cd = malloc(nc * sizeof *cd);
    double *cdd = malloc(nc * sizeof *cdd);
    float *af = malloc(na * sizeof *af), *bf = malloc(nb * sizeof *bf), *cf = malloc(nc * sizeof *cf);
    CHECK(ad && bd && cd && cdd && af && bf && cf);
    /* Inputs exact in float: the float result differs from the reference
     * by its rounding only. */
    for (size_t i = 0; i < na; i++) ad[i] = af[i] = (float)urand();
    for (size_t i = 0; i < nb; i++) bd[i] = bf[i] = (float)urand();
    for (size_t i = 0; i < nc; i++) {
        cd[i] = beta != 0 ? (float)urand() : NAN;
        cf[i] = (float)cd[i];
        cdd[i] = cd[i];
    }
    double *want = malloc(nc * sizeof *want);
    CHECK(want);
    memcpy(want, cd, nc * sizeof *want);
    naive(ta, tb, s.m, s.n, s.k, alpha, ad, lda, bd, ldb, beta, want, ldc);

    qf_sgemm_args sg = {ta, tb, s.m, s.n, s.k, (float)alpha, (float)beta, af, lda, bf, ldb, cf, ldc};
    if (fn == 0)
        qf_sgemm_ref(&sg);
    else if (fn == 2)
        qf_sgemm_serial(&sg);
    else
        CHECK(qf_sgemm(NULL, &sg) == QF_OK);
    qf_dgemm_args dg = {ta, tb, s.m, s.n, s.k, alpha, beta, ad, lda, bd, ldb, cdd, ldc};
    CHECK(qf_dgemm(NULL, &dg) == QF_OK);

    double tol_f = 2e-6 * sqrt((double)s.k + 1) * 4, tol_d = 1e-14 * sqrt((double)s.k + 1) * 4;
    int bad = 0;
    for (int64_t i = 0; i < s.m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            size_t x = (size_t)(i * ldc + j);
            /* Padding columns of C must be untouched. */
            double wf = j < s.n ? want[x] : (double)(float)cd[x], wd = j < s.n ? want[x] : cd[x];
            bool okf = j < s.n ? fabs(cf[x] - wf) <= tol_f * (1 + fabs(wf)) : memcmp(&cf[x], &(float){(float)cd[x]}, 4) == 0;
            bool okd = j < s.n ? fabs(cdd[x] - wd) <= tol_d * (1 + fabs(wd)) : memcmp(&cdd[x], &cd[x], 8) == 0;
            if ((!okf || !okd) && bad++ < 3 && failures_reported++ < 20)
                fprintf(stderr,
                        "FAIL %s kernel %s m%lld n%lld k%lld ta%d tb%d alpha %g beta %g pad %lld: C[%lld,%lld] float "
                        "%.9g double %.17g want %.17g\n",
                        fn == 2 ? "qf_sgemm_serial" : fn ? "qf_sgemm" : "qf_sgemm_ref", qf_gemm_kernel_name(), (long long)s.m, (long long)s.n,
                        (long long)s.k, ta, tb, alpha, beta, (long long)pad, (long long)i, (long long)j, cf[x],
                        cdd[x], wd);
        }
    CHECK(bad == 0);
    free(ad), free(bd), free(cd), free(cdd), free(af), free(bf), free(cf), free(want);
}

static void sweep(int fn)
{
    static const shape shapes[] = {
        {1, 1, 1},    {5, 7, 3},     {6, 32, 1},    {7, 33, 17},  {13, 1, 300}, {1, 129, 257},
        {73, 130, 9}, {64, 196, 64}, {30, 45, 520}, {0, 5, 5},    {5, 0, 5},    {4, 9, 0},
        {150, 300, 70} /* several threads, split along N */,
        {200, 10, 300} /* several threads, split along M */,
        {4, 3, 256} /* one block of qf_sgemm_serial's dot products, K at its threshold */,
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            one_case(fn, shapes[i], ta, tb, 1.0, 0.0, 0);
            one_case(fn, shapes[i], ta, tb, -0.5, 1.0, 3);
            one_case(fn, shapes[i], ta, tb, 2.0, 0.25, 1);
        }
}

static void test_kernels(void)
{
    static const char *const kernels[] = {"generic", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        if (!qf_gemm_set_kernel(kernels[i])) {
            printf("kernel %s: not on this CPU, skipped\n", kernels[i]);
            continue;
        }
        printf("kernel %s\n", qf_gemm_kernel_name());
        sweep(0);
        sweep(2);
    }
}

/* qf_sgemm: oneDNN's sgemm when the backend is active (QFOLD_ENGINE). */
static void test_engine(void)
{
    printf("qf_sgemm with engine %s\n", qf_engine_name(qf_get_engine()));
    sweep(1);
}

int main(void)
{
    RUN(test_kernels);
    RUN(test_engine);
    return qf_check_report();
}
