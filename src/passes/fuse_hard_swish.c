/* fuse_hard_swish: PyTorch 1.13's opset-13 form of HardSwish back to one
 * HardSwish, so that the quantizer and the exporters see one op (one int8
 * table, one TFLite HARD_SWISH) where the file has two:
 *
 *   x ─HardSigmoid(alpha 1/6, beta 1/2)─▶ h ─┐
 *   x ───────────────────────────────────────Mul─▶ y      ->   x ─HardSwish─▶ y
 *
 * (ONNX has HardSwish from opset 14; torch exports nn.Hardswish at opset
 * 13 as this pair.) The rewrite is exact in float: HardSwish(x) is defined
 * as x * HardSigmoid(x) with alpha 1/6, beta 1/2, and qfold's kernels
 * compute it so (src/ops/ref/activation.c). It is taken only when
 *   - alpha is 1/6 and beta 1/2 within float32 rounding (torch writes
 *     alpha = 0.16666667, the float nearest 1/6);
 *   - the HardSigmoid's only reader is the Mul, and its output is no graph
 *     output (the value disappears);
 *   - the Mul's other operand is the HardSigmoid's input itself (an SE
 *     block's x * hardsigmoid(se(x)) multiplies two different tensors and
 *     stays as it is).
 * Every HardSigmoid not taken is recorded with the reason. The HardSwish
 * takes the Mul's name and its output's name and readers. */
#include <math.h>
#include <stdio.h>

#include "qfold/pass.h"
#include "rewrite.h"

/* Attributes within float32 rounding of torch's constants: a relative
 * tolerance of a few float32 ulps. */
static bool hs_near(double v, double want) { return fabs(v - want) <= 4e-7 * fabs(want); }

/* The Mul that reads h = HardSigmoid(x) and x, or NULL with the reason. */
static qf_node *hs_match(const qf_node *h, char *why, size_t size)
{
    const double alpha = qf_node_attr_float(h, "alpha", 0.2f),
                 beta = qf_node_attr_float(h, "beta", 0.5f);
    if (!hs_near(alpha, 1.0 / 6.0) || !hs_near(beta, 0.5)) {
        qf_rewrite_why(why, size, "alpha %g, beta %g: not HardSwish's 1/6, 1/2", alpha, beta);
        return NULL;
    }
    const qf_value *x = h->inputs[0], *hv = h->outputs[0];
    int slot = 0;
    qf_node *m = qf_rewrite_sole_user(hv, &slot);
    if (!m || m->op != QF_OP_MUL) {
        qf_rewrite_why(why, size, "its output is %s, not read by one Mul only",
                       hv->is_output ? "a graph output"
                       : m           ? "read by another op"
                                     : "read more than once");
        return NULL;
    }
    if (m->ninputs != 2 || m->inputs[1 - slot] != x) {
        qf_rewrite_why(why, size, "Mul '%s' multiplies it by another tensor than its input",
                       m->name);
        return NULL;
    }
    if (!qf_dtype_is_float(x->type.dtype)) {
        qf_rewrite_why(why, size, "input is %s", qf_dtype_name(x->type.dtype));
        return NULL;
    }
    return m;
}

static bool hs_want(qf_graph *g, qf_pass_ctx *ctx, qf_node *h, void *user)
{
    (void)g;
    (void)user;
    char why[256];
    if (hs_match(h, why, sizeof why)) return true;
    qf_pass_skip(ctx, h, "%s", why);
    return false;
}

static qf_status hs_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *h, void *user)
{
    (void)user;
    char why[256], name[512];
    qf_node *m = hs_match(h, why, sizeof why);
    if (!m) return QF_OK;
    qf_value *x = h->inputs[0], *y = m->outputs[0];
    snprintf(name, sizeof name, "%.480s_hard_swish", m->name);
    qf_node *s = qf_graph_insert_node(g, m, false, QF_OP_HARD_SWISH, name, 1, &x, 1);
    if (!s) return QF_ERR_NOMEM;
    qf_pass_rewrite_as(ctx, h, QF_PASS_FOLDED, NULL, "HardSigmoid + Mul '%s' -> HardSwish",
                       m->name);
    qf_value *sy = s->outputs[0];
    sy->type.dtype = y->type.dtype;
    sy->type.ndim = y->type.ndim;
    for (int i = 0; i < y->type.ndim; i++) sy->type.dims[i] = y->type.dims[i];
    /* replace_uses gives a graph output's name to sy itself; otherwise sy
     * takes y's name once y is gone. */
    const char *rename = y->is_output ? NULL : y->name; /* arena strings: outlive the nodes */
    const char *old_name = m->name;
    QF_TRY(qf_graph_replace_uses(g, y, sy));
    qf_graph_remove_node(g, m);
    qf_graph_remove_node(g, h);
    if (rename) QF_TRY(qf_graph_rename_value(g, sy, rename));
    return qf_graph_rename_node(g, s, old_name);
}

static qf_status fuse_hard_swish_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    return qf_pass_for_each_op(g, ctx, QF_OP_HARD_SIGMOID, hs_want, hs_apply, NULL, changed);
}

const qf_pass qf_pass_fuse_hard_swish = {
    .name = "fuse_hard_swish",
    .summary =
        "x * HardSigmoid(x) (alpha 1/6, beta 1/2: torch's opset-13 HardSwish) -> HardSwish(x)",
    .run = fuse_hard_swish_run,
    .deferred = true, /* reads no payload */
};
