/* Tests of the gradient-check helper (tests/tools/qf_gradcheck.h) on
 * functions with known gradients, before any backward kernel exists: it
 * passes on correct gradients (x^2, sin, a small matmul, relu across its
 * kink), it fails on wrong ones and names the worst element, and at relu's
 * kink the guard skips instead of failing (without the guard the same check
 * fails, so the guard is what keeps it quiet). */
#include <math.h>
#include <string.h>

#include "tools/qf_check.h"
#include "tools/qf_gradcheck.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static float rnd(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 52) - 1.0);
}

enum { N = 32 };

/* --- elementwise losses ------------------------------------------------------ */

static double loss_square(const float *x, void *user)
{
    (void)user;
    double s = 0;
    for (int i = 0; i < N; i++) s += (double)x[i] * x[i];
    return s;
}

static double loss_sin(const float *x, void *user)
{
    (void)user;
    double s = 0;
    for (int i = 0; i < N; i++) s += sin((double)x[i]);
    return s;
}

static void fill(float *x, float scale)
{
    for (int i = 0; i < N; i++) x[i] = scale * rnd();
    x[3] = 0.0f; /* x^2 and sin have no kink at 0: nothing may be skipped there */
}

static void test_square(void)
{
    float x[N], g[N], x0[N];
    fill(x, 2.0f);
    memcpy(x0, x, sizeof x);
    for (int i = 0; i < N; i++) g[i] = 2.0f * x[i];
    qf_gradcheck_result r;
    bool ok = qf_gradcheck(loss_square, NULL, x, N, g, NULL, &r);
    qf_gradcheck_print(stdout, "x^2", &r);
    CHECKF(ok && r.failed == 0 && r.checked == N, "x^2: %lld failed, %lld checked",
           (long long)r.failed, (long long)r.checked);
    CHECKF(r.skipped == 0, "x^2: %lld smooth elements skipped as kinks", (long long)r.skipped);
    CHECK(memcmp(x, x0, sizeof x) == 0); /* x restored bit for bit */

    /* A wrong gradient (off by 0.05 everywhere) fails on every element. */
    for (int i = 0; i < N; i++) g[i] = 2.0f * x[i] + 0.05f;
    ok = qf_gradcheck(loss_square, NULL, x, N, g, NULL, &r);
    qf_gradcheck_print(stdout, "x^2 with a wrong gradient (expected to fail)", &r);
    CHECKF(!ok && r.failed == N, "wrong x^2 gradient: ok %d, %lld failed", ok, (long long)r.failed);
    CHECK(r.worst.index >= 0 && r.worst.ratio > 1.0 && r.nshown == 5);
}

static void test_sin(void)
{
    float x[N], g[N];
    fill(x, 3.0f);
    for (int i = 0; i < N; i++) g[i] = (float)cos((double)x[i]);
    qf_gradcheck_result r;
    qf_gradcheck_opts o = {.eps = 1e-3};
    bool ok = qf_gradcheck(loss_sin, NULL, x, N, g, &o, &r);
    qf_gradcheck_print(stdout, "sin", &r);
    CHECKF(ok && r.checked == N && r.skipped == 0, "sin: %lld failed, %lld skipped",
           (long long)r.failed, (long long)r.skipped);

    /* The derivative of cos (the classic sign slip) fails. */
    for (int i = 0; i < N; i++) g[i] = (float)-sin((double)x[i]);
    ok = qf_gradcheck(loss_sin, NULL, x, N, g, &o, &r);
    qf_gradcheck_print(stdout, "sin with -sin as gradient (expected to fail)", &r);
    CHECKF(!ok && r.failed > N / 2, "wrong sin gradient: ok %d, %lld failed", ok,
           (long long)r.failed);
}

/* --- a small matmul through the vector-Jacobian form ------------------------- */

enum { M = 3, K = 4, P = 2 };

typedef struct mm {
    float a[M * K], b[K * P];
    int wrt_b; /* differentiate with respect to b instead of a */
} mm;

static void mm_forward(const float *x, float *y, void *user)
{
    const mm *c = user;
    const float *a = c->wrt_b ? c->a : x, *b = c->wrt_b ? x : c->b;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < P; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * P + j];
            y[i * P + j] = (float)s;
        }
}

static void test_matmul(void)
{
    mm c;
    float dy[M * P], da[M * K], db[K * P];
    for (int i = 0; i < M * K; i++) c.a[i] = rnd();
    for (int i = 0; i < K * P; i++) c.b[i] = rnd();
    for (int i = 0; i < M * P; i++) dy[i] = rnd();
    /* dA = dY B^T, dB = A^T dY */
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int j = 0; j < P; j++) s += (double)dy[i * P + j] * c.b[k * P + j];
            da[i * K + k] = (float)s;
        }
    for (int k = 0; k < K; k++)
        for (int j = 0; j < P; j++) {
            double s = 0;
            for (int i = 0; i < M; i++) s += (double)c.a[i * K + k] * dy[i * P + j];
            db[k * P + j] = (float)s;
        }
    qf_gradcheck_result r;
    qf_gradcheck_opts o = {.eps = 1e-2}; /* bilinear: any step is exact up to rounding */
    float x[M * K];
    memcpy(x, c.a, sizeof x);
    c.wrt_b = 0;
    bool ok = qf_gradcheck_vjp(mm_forward, &c, x, M * K, M * P, dy, da, &o, &r);
    qf_gradcheck_print(stdout, "matmul dA", &r);
    CHECKF(ok && r.checked == M * K && r.skipped == 0, "matmul dA: %lld failed",
           (long long)r.failed);
    c.wrt_b = 1;
    float xb[K * P];
    memcpy(xb, c.b, sizeof xb);
    ok = qf_gradcheck_vjp(mm_forward, &c, xb, K * P, M * P, dy, db, &o, &r);
    qf_gradcheck_print(stdout, "matmul dB", &r);
    CHECKF(ok && r.checked == K * P && r.skipped == 0, "matmul dB: %lld failed",
           (long long)r.failed);

    /* One wrong element is found, and it is the worst one reported. */
    da[5] += 0.1f;
    c.wrt_b = 0;
    ok = qf_gradcheck_vjp(mm_forward, &c, x, M * K, M * P, dy, da, &o, &r);
    qf_gradcheck_print(stdout, "matmul dA with element 5 off by 0.1 (expected to fail)", &r);
    CHECKF(!ok && r.failed == 1 && r.worst.index == 5, "wrong dA: ok %d, %lld failed, worst %lld",
           ok, (long long)r.failed, (long long)r.worst.index);

    /* The transpose mix-up (dY B instead of dY B^T, read as M x K) fails. */
    for (int i = 0; i < M * K; i++) da[i] = dy[i % (M * P)] * c.b[i % (K * P)];
    ok = qf_gradcheck_vjp(mm_forward, &c, x, M * K, M * P, dy, da, &o, &r);
    CHECKF(!ok, "scrambled dA passed the check (%lld failed)", (long long)r.failed);
}

/* --- relu and its kink ------------------------------------------------------- */

static void relu_forward(const float *x, float *y, void *user)
{
    (void)user;
    for (int i = 0; i < N; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
}

static void test_relu_kink(void)
{
    float x[N], dy[N], dx[N];
    for (int i = 0; i < N; i++) {
        x[i] = rnd();
        if (fabsf(x[i]) < 0.01f) x[i] = 0.5f; /* away from the kink, except: */
        dy[i] = 0.5f + 0.5f * fabsf(rnd());
    }
    /* On the kink and within one step of it (eps 1e-3). */
    static const float near[] = {0.0f, 1e-4f, -1e-4f, 4e-4f, -6e-4f, 9e-4f};
    enum { NNEAR = sizeof near / sizeof near[0] };
    for (int k = 0; k < NNEAR; k++) x[2 * k + 1] = near[k];
    /* The analytic derivative: 1 above 0, 0 at and below (as PyTorch's). */
    for (int i = 0; i < N; i++) dx[i] = x[i] > 0 ? dy[i] : 0.0f;
    qf_gradcheck_opts o = {.eps = 1e-3};
    qf_gradcheck_result r;
    bool ok = qf_gradcheck_vjp(relu_forward, NULL, x, N, N, dy, dx, &o, &r);
    qf_gradcheck_print(stdout, "relu", &r);
    CHECKF(ok && r.failed == 0, "relu: a false failure at the kink (%lld failed, worst %lld)",
           (long long)r.failed, (long long)r.worst.index);
    CHECKF(r.skipped >= NNEAR - 1 && r.skipped <= NNEAR,
           "relu: %lld skipped, expected the %d near the kink", (long long)r.skipped, NNEAR);
    CHECKF(r.checked == N - r.skipped, "relu: %lld checked of %d", (long long)r.checked, N);

    /* Without the guard the same correct gradient fails at the kink. */
    qf_gradcheck_opts raw = {.eps = 1e-3, .kink_factor = -1};
    ok = qf_gradcheck_vjp(relu_forward, NULL, x, N, N, dy, dx, &raw, &r);
    qf_gradcheck_print(stdout, "relu without the kink guard (expected to fail)", &r);
    CHECKF(!ok && r.skipped == 0, "relu without guard: ok %d, %lld skipped", ok,
           (long long)r.skipped);

    /* A wrong derivative (1 everywhere, also below 0) fails despite the guard. */
    for (int i = 0; i < N; i++) dx[i] = dy[i];
    ok = qf_gradcheck_vjp(relu_forward, NULL, x, N, N, dy, dx, &o, &r);
    qf_gradcheck_print(stdout, "relu with derivative 1 below 0 (expected to fail)", &r);
    CHECKF(!ok && r.failed >= 5, "wrong relu gradient: ok %d, %lld failed", ok,
           (long long)r.failed);
}

int main(void)
{
    RUN(test_square);
    RUN(test_sin);
    RUN(test_matmul);
    RUN(test_relu_kink);
    return qf_check_report();
}
