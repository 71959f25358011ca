/* Finite-difference gradient check (see qf_gradcheck.h). */
#include "tools/qf_gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void gc_defaults(qf_gradcheck_opts *o, const qf_gradcheck_opts *given)
{
    if (given)
        *o = *given;
    else
        memset(o, 0, sizeof *o);
    if (o->eps <= 0) o->eps = 1e-3;
    if (o->rtol <= 0) o->rtol = 1e-2;
    if (o->atol <= 0) o->atol = 1e-3;
    if (o->kink_factor == 0) o->kink_factor = 2.0;
    if (o->max_print <= 0) o->max_print = 5;
    if (o->max_print > QF_GRADCHECK_MAX_SHOWN) o->max_print = QF_GRADCHECK_MAX_SHOWN;
}

bool qf_gradcheck(qf_gradcheck_loss_fn loss, void *user, float *x, int64_t n, const float *grad,
                  const qf_gradcheck_opts *opts, qf_gradcheck_result *res)
{
    qf_gradcheck_opts o;
    gc_defaults(&o, opts);
    memset(res, 0, sizeof *res);
    res->n = n;
    res->worst.index = -1;
    res->first_skipped = -1;
    res->max_print = o.max_print;
    double f0 = loss(x, user);
    for (int64_t i = 0; i < n; i++) {
        const float xi = x[i];
        /* The steps as float can represent them at x[i]: the differences
         * divide by what was actually added, not by the nominal eps. */
        const float xp = (float)(xi + o.eps), xm = (float)(xi - o.eps);
        const double hp = (double)xp - xi, hm = (double)xi - xm;
        x[i] = xp;
        double fp = loss(x, user);
        x[i] = xm;
        double fm = loss(x, user);
        x[i] = xi;
        if (!isfinite(fp) || !isfinite(fm) || !isfinite(f0) || hp <= 0 || hm <= 0) {
            res->nonfinite++;
            continue;
        }
        const double numeric = (fp - fm) / (hp + hm);
        const double analytic = grad[i];
        /* Kink guard (see the header): the one-sided slopes. */
        if (o.kink_factor > 0) {
            double sp = (fp - f0) / hp, sm = (f0 - fm) / hm;
            double ktol = o.atol + o.rtol * fmax(fabs(sp), fabs(sm));
            if (fabs(sp - sm) > o.kink_factor * ktol) {
                if (res->skipped++ == 0) res->first_skipped = i;
                continue;
            }
        }
        res->checked++;
        double tol = o.atol + o.rtol * fmax(fabs(numeric), fabs(analytic));
        double err = fabs(numeric - analytic);
        double ratio = isnan(err) ? INFINITY : err / tol;
        qf_gradcheck_elem e = {
            .index = i, .x = xi, .numeric = numeric, .analytic = analytic, .ratio = ratio};
        if (res->worst.index < 0 || ratio > res->worst.ratio) res->worst = e;
        if (ratio > 1.0) {
            res->failed++;
            if (res->nshown < o.max_print) res->shown[res->nshown++] = e;
        }
    }
    return res->failed == 0 && (n == 0 || res->checked > 0);
}

/* L(x) = sum_i dy[i] * f(x)[i], for qf_gradcheck_vjp. */
typedef struct gc_vjp {
    qf_gradcheck_forward_fn forward;
    void *user;
    int64_t m;
    const float *dy;
    float *y;
} gc_vjp;

static double gc_vjp_loss(const float *x, void *user)
{
    gc_vjp *v = user;
    v->forward(x, v->y, v->user);
    double s = 0.0;
    for (int64_t i = 0; i < v->m; i++) s += (double)v->dy[i] * v->y[i];
    return s;
}

bool qf_gradcheck_vjp(qf_gradcheck_forward_fn forward, void *user, float *x, int64_t n, int64_t m,
                      const float *dy, const float *dx, const qf_gradcheck_opts *opts,
                      qf_gradcheck_result *res)
{
    gc_vjp v = {.forward = forward,
                .user = user,
                .m = m,
                .dy = dy,
                .y = malloc((size_t)(m > 0 ? m : 1) * sizeof(float))};
    if (!v.y) {
        memset(res, 0, sizeof *res);
        res->worst.index = res->first_skipped = -1;
        res->alloc_failed = true;
        return false;
    }
    bool ok = qf_gradcheck(gc_vjp_loss, &v, x, n, dx, opts, res);
    free(v.y);
    return ok;
}

void qf_gradcheck_print(FILE *f, const char *what, const qf_gradcheck_result *r)
{
    if (r->alloc_failed) {
        fprintf(f, "%s: gradient check could not allocate its buffer\n", what);
        return;
    }
    fprintf(f, "%s: %lld of %lld elements checked, %lld skipped at kinks", what,
            (long long)r->checked, (long long)r->n, (long long)r->skipped);
    if (r->first_skipped >= 0) fprintf(f, " (first: %lld)", (long long)r->first_skipped);
    if (r->nonfinite) fprintf(f, ", %lld with a non-finite loss", (long long)r->nonfinite);
    fprintf(f, ", %lld failed", (long long)r->failed);
    if (r->worst.index >= 0)
        fprintf(f,
                "; worst element %lld: x %.9g, numeric %.9g, analytic %.9g (%.3g of the tolerance)",
                (long long)r->worst.index, r->worst.x, r->worst.numeric, r->worst.analytic,
                r->worst.ratio);
    fputc('\n', f);
    for (int k = 0; k < r->nshown; k++)
        fprintf(f, "  %s[%lld]: x %.9g, numeric %.9g, analytic %.9g\n", what,
                (long long)r->shown[k].index, r->shown[k].x, r->shown[k].numeric,
                r->shown[k].analytic);
    if (r->failed > r->nshown)
        fprintf(f, "  ... and %lld more\n", (long long)(r->failed - r->nshown));
}
