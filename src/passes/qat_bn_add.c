/* qat_bn_add: QAT's simulated BatchNorm fusion (PyTorch's ConvBn2d /
 * LinearBn1d approximate forward, the Neutron backend's
 * AddSimulatedLinearBatchNormFusionQATPass) for a conv, conv_transpose or
 * linear followed by BatchNormalization.
 *
 *   before                                    after
 *
 *   W ──[fake_quant]──┐                       W ─ qat_bn_weight(γ, σ²) ─[fake_quant]─┐
 *   x ─────────── op(x, W, b) ─ BN ─          x ──────────────────────────── op(x, ·) ─ qat_bn_output(γ, σ², b) ─ BN ─
 *
 * with s = γ / sqrt(σ² + ε) (ε from the BN node): the weight fake-quant, when
 * there is one, sees W·s, the op runs without its bias, its output is divided
 * by s and the bias added back, and BN (left as it is: the trainer runs it in
 * training mode) normalizes that. γ, σ², W and b stay the same values, read
 * by the new nodes; qat_bn_remove puts the original chain back exactly.
 * Guards (qf_bn_qat_match in bn_math.c) as the fold's: the op's output has
 * the BN as its one reader and is no graph output, W (under at most one
 * fake_quant) and b are float32 constants, γ and σ² constants, the channel
 * counts agree, linear's output is rank 2.
 */
#include <stdio.h>
#include <string.h>

#include "bn_math.h"
#include "rewrite.h"
#include "qfold/pass.h"

static qf_status qat_add_apply(qf_graph *g, qf_pass_ctx *ctx, qf_bn_qat_chain *a)
{
    qf_node *bn = a->bn, *p = a->prod;
    const float eps = qf_node_attr_float(bn, "epsilon", 1e-5f);
    qf_value *gamma = bn->inputs[QF_BN_IN_SCALE], *var = bn->inputs[QF_BN_IN_VAR];
    char name[512];
    snprintf(name, sizeof name, "%.480s_qat_weight", p->name);
    qf_value *win[3] = {a->w, gamma, var};
    qf_node *wn = qf_graph_insert_node(g, a->fq ? a->fq : p, false, QF_OP_QAT_BN_WEIGHT, name, 3, win, 1);
    if (!wn) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_float(g, wn, "epsilon", eps));
    QF_TRY(qf_node_set_attr_int(g, wn, "axis", a->axis));
    QF_TRY(qf_node_set_attr_int(g, wn, "group", a->group));
    QF_TRY(qf_node_infer(g, wn));
    snprintf(name, sizeof name, "%.480s_qat_output", p->name);
    qf_value *oin[4] = {p->outputs[0], gamma, var, a->b};
    qf_node *on = qf_graph_insert_node(g, p, true, QF_OP_QAT_BN_OUTPUT, name, a->b ? 4 : 3, oin, 1);
    if (!on) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_float(g, on, "epsilon", eps));
    QF_TRY(qf_node_infer(g, on));
    /* Rewire: the weight (or its fake_quant) reads W * s, the op has no bias,
     * BN reads the unscaled output. */
    if (a->fq)
        QF_TRY(qf_node_set_input(g, a->fq, 0, wn->outputs[0]));
    else
        QF_TRY(qf_node_set_input(g, p, 1, wn->outputs[0]));
    if (a->b) QF_TRY(qf_node_set_input(g, p, 2, NULL));
    QF_TRY(qf_node_set_input(g, bn, QF_BN_IN_X, on->outputs[0]));
    qf_pass_rewrite(ctx, bn, NULL, "simulated fusion with %s '%s'%s (epsilon %g)", qf_op_name(p->op), p->name,
                    a->fq ? " under its weight fake_quant" : "", eps);
    return QF_OK;
}

static bool qat_bn_add_match(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn, void *user)
{
    char why[256];
    if (qf_bn_qat_match(g, bn, user, why, sizeof why)) {
        qf_pass_skip(ctx, bn, "%s", why);
        return false;
    }
    return true;
}

static qf_status qat_bn_add_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn, void *user)
{
    (void)bn;
    return qat_add_apply(g, ctx, user);
}

static qf_status qat_bn_add_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    qf_bn_qat_chain a;
    *changed = false;
    return qf_pass_for_each_op(g, ctx, QF_OP_BATCH_NORM, qat_bn_add_match, qat_bn_add_apply, &a, changed);
}

const qf_pass qf_pass_qat_bn_add = {
    "qat_bn_add",
    "QAT: simulate folding BatchNorm into the conv / conv_transpose / linear before it (W*s under the weight "
    "fake-quant, output / s + b)",
    qat_bn_add_run,
};
