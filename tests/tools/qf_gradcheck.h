/* Finite-difference gradient check for the backward kernels (in the manner
 * of ggml's test-backend-ops grad mode).
 *
 *   static double loss(const float *x, void *user) { ... a scalar of x ... }
 *   qf_gradcheck_opts o = {.eps = 1e-3};               // per-op step
 *   qf_gradcheck_result r;
 *   bool ok = qf_gradcheck(loss, user, x, n, analytic_grad, &o, &r);
 *   qf_gradcheck_print(stderr, "relu", &r);            // worst element, counts
 *
 * For an op y = f(x) with a backward kernel dx = f'(x)^T dy, qf_gradcheck_vjp
 * checks dx against the loss L(x) = sum_i dy[i] * f(x)[i]:
 *
 *   qf_gradcheck_vjp(forward, user, x, n, m, dy, dx_from_backward, &o, &r);
 *
 * Each element i of x is checked on its own: the numeric derivative is the
 * central difference (L(x + h e_i) - L(x - h e_i)) / (2h), with h the step
 * opts.eps as actually representable in float at x[i]. It passes when
 *   |numeric - analytic| <= atol + rtol * max(|numeric|, |analytic|).
 *
 * Kink guard. At a point where f is not differentiable (relu, abs, max, clip
 * at 0 / its bounds) within [x - h, x + h], the central difference averages
 * two slopes and says nothing about the analytic gradient. The guard also
 * computes the one-sided slopes s+ = (L(x + h) - L(x)) / h and
 * s- = (L(x) - L(x - h)) / h. Wherever the kink lies in the interval, the
 * central difference differs from the slope on the smooth side by
 * |s+ - s-| / 2, so an element is skipped (counted, not failed) when
 * |s+ - s-| > kink_factor * tol, tol as above with max(|s+|, |s-|); the
 * default factor 2 skips exactly the elements where a kink could fake a
 * failure. A smooth function has |s+ - s-| ~ |f''| h: choose the step so that
 * this stays below the tolerance, or smooth elements get skipped too (the
 * result counts them; a test can assert that none were).
 *
 * x is perturbed in place and restored bit for bit before returning.
 */
#ifndef QF_GRADCHECK_H
#define QF_GRADCHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The scalar function to differentiate; accumulate in double where it sums. */
typedef double (*qf_gradcheck_loss_fn)(const float *x, void *user);
/* An op's forward: y[0 .. m-1] = f(x[0 .. n-1]). */
typedef void (*qf_gradcheck_forward_fn)(const float *x, float *y, void *user);

typedef struct qf_gradcheck_opts {
    double eps;         /* the step h, chosen per op; 0: 1e-3 */
    double rtol;        /* relative tolerance; 0: 1e-2 */
    double atol;        /* absolute tolerance; 0: 1e-3 */
    double kink_factor; /* skip when |s+ - s-| > kink_factor * tol; 0: 2; < 0: no kink guard */
    int max_print;      /* failing elements printed by qf_gradcheck_print; 0: 5 */
} qf_gradcheck_opts;

#define QF_GRADCHECK_MAX_SHOWN 16

typedef struct qf_gradcheck_elem {
    int64_t index;
    double x, numeric, analytic;
    double ratio; /* |numeric - analytic| / tol: > 1 fails */
} qf_gradcheck_elem;

typedef struct qf_gradcheck_result {
    int64_t n;               /* elements of x */
    int64_t checked;         /* compared with the analytic gradient */
    int64_t skipped;         /* skipped by the kink guard */
    int64_t nonfinite;       /* skipped: the loss was not finite around x[i] */
    int64_t failed;          /* checked and out of tolerance */
    qf_gradcheck_elem worst; /* largest ratio among the checked elements (index -1: none) */
    int64_t first_skipped;   /* -1: none */
    int nshown, max_print;   /* the first failures, for the report */
    qf_gradcheck_elem shown[QF_GRADCHECK_MAX_SHOWN];
    bool alloc_failed; /* qf_gradcheck_vjp could not allocate its buffer */
} qf_gradcheck_result;

/* Check `grad` (the analytic dL/dx, n elements) against central differences
 * of `loss` at x. True when no checked element failed (and one was checked,
 * when n > 0). `opts` may be NULL (defaults). */
bool qf_gradcheck(qf_gradcheck_loss_fn loss, void *user, float *x, int64_t n, const float *grad,
                  const qf_gradcheck_opts *opts, qf_gradcheck_result *res);

/* The same for an op y = f(x) (n inputs, m outputs) and an upstream
 * gradient dy: checks dx = J^T dy through the loss sum(dy * f(x)). */
bool qf_gradcheck_vjp(qf_gradcheck_forward_fn forward, void *user, float *x, int64_t n, int64_t m,
                      const float *dy, const float *dx, const qf_gradcheck_opts *opts,
                      qf_gradcheck_result *res);

/* One summary line ("what: N checked, N skipped at kinks, N failed; worst
 * element i: x, numeric, analytic"), then the first failures. */
void qf_gradcheck_print(FILE *f, const char *what, const qf_gradcheck_result *res);

#endif
