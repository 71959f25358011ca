/* div_to_mul: a float division by a constant as a multiplication by its
 * reciprocal, as ExecuTorch's NXP backend does (its ConvertDivToMul aten
 * pass) for the Neutron NPU, which has a Mul and no Div:
 *
 *   x ─Div(·, c)─▶ y      ->      x ─Mul(·, r)─▶ y,   r = 1 / c
 *
 * r is computed in double and rounded once to float32 (the correctly
 * rounded reciprocal). Exactness: when every element of c is a power of two
 * whose reciprocal is a float32 too (c = ±2^k, -126 <= k <= 127), r is exact
 * and x·r and x / c are the same real number, rounded the same way: the
 * rewrite is bit-exact. Otherwise r carries one rounding, and x·r differs
 * from the correctly rounded x / c by at most 1 ulp (|x·r − x/c| <= u|x/c|,
 * then one rounding); ExecuTorch rewrites those too, and so does this pass
 * (the NPU takes no Div), saying in its report line which case it was.
 * Taken when x and c are float32 and c a constant without a 0, a NaN or an
 * Inf whose reciprocals are all finite; every other Div is a skip with the
 * reason. The node keeps its name and output (its op becomes Mul); the
 * divisor's constant is rewritten in place when the Div alone reads it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"
#include "rewrite.h"

/* True, with the reason in why, when Div n is not taken. */
static bool dm_reject(const qf_node *n, char *why, size_t size)
{
    const qf_value *x = n->inputs[0], *c = n->ninputs > 1 ? n->inputs[1] : NULL;
    if (!x || x->type.dtype != QF_DTYPE_F32)
        return qf_rewrite_why(why, size, "dividend is not float32");
    if (!c || !qf_value_is_const(c)) return qf_rewrite_why(why, size, "divisor is not a constant");
    if (c->type.dtype != QF_DTYPE_F32)
        return qf_rewrite_why(why, size, "divisor is %s, not float32",
                              qf_dtype_name(c->type.dtype));
    const float *p = c->type.data;
    const int64_t count = qf_tensor_numel(&c->type);
    for (int64_t i = 0; i < count; i++) {
        if (!isfinite(p[i]) || p[i] == 0.0f)
            return qf_rewrite_why(why, size, "divisor element %lld is %g", (long long)i,
                                  (double)p[i]);
        if (!isfinite((float)(1.0 / (double)p[i])))
            return qf_rewrite_why(why, size, "1 / %g overflows float32", (double)p[i]);
    }
    return false;
}

static bool dm_want(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    (void)g;
    (void)user;
    char why[256];
    if (!dm_reject(n, why, sizeof why)) return true;
    qf_pass_skip(ctx, n, "%s", why);
    return false;
}

/* c = ±2^k with 1 / c a float32 too: the product is the quotient. */
static bool dm_exact(float c)
{
    int e;
    const double m = frexp(fabs((double)c), &e);
    const double r = 1.0 / (double)c;
    return m == 0.5 && (double)(float)r == r && fpclassify((float)r) == FP_NORMAL;
}

static qf_status dm_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    (void)user;
    const qf_value *c = n->inputs[1];
    const int64_t count = qf_tensor_numel(&c->type);
    qf_tensor r;
    QF_TRY(qf_tensor_init(&r, QF_DTYPE_F32, c->type.ndim, c->type.dims));
    const float *p = c->type.data;
    float *q = r.data;
    int64_t inexact = 0;
    for (int64_t i = 0; i < count; i++) {
        q[i] = (float)(1.0 / (double)p[i]);
        if (!dm_exact(p[i])) inexact++;
    }
    char hint[512], detail[96];
    snprintf(hint, sizeof hint, "%.480s_reciprocal", n->name);
    snprintf(detail, sizeof detail, "{\"elements\": %lld, \"inexact_reciprocals\": %lld}",
             (long long)count, (long long)inexact);
    if (inexact)
        qf_pass_rewrite(ctx, n, detail,
                        "Div by a constant -> Mul by its reciprocal (%lld of %lld not a power "
                        "of two: within 1 ulp)",
                        (long long)inexact, (long long)count);
    else
        qf_pass_rewrite(ctx, n, detail,
                        "Div by a constant -> Mul by its reciprocal (powers of two: exact)");
    QF_TRY(qf_rewrite_install_const(g, n, 1, &r, hint));
    n->op = QF_OP_MUL;
    return QF_OK;
}

static qf_status div_to_mul_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    return qf_pass_for_each_op(g, ctx, QF_OP_DIV, dm_want, dm_apply, NULL, changed);
}

const qf_pass qf_pass_div_to_mul = {
    .name = "div_to_mul",
    .summary = "x / c (c a float32 constant) -> x * (1 / c): exact when c is a power of two, else "
               "within 1 ulp",
    .run = div_to_mul_run,
};
